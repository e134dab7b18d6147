/* test_envelope.c: Connect envelope decoding under every chunking, the flag and
 * limit rules, truncation, misuse, and the buffer bound. */
#include <stdlib.h>

#include "check.h"
#include "dsh/envelope.h"
#include "dsh/errors.h"

static size_t put(uint8_t *out, uint8_t flags, const char *payload) {
  size_t n = strlen(payload);
  dsh_envelope_header(flags, (uint32_t)n, out);
  memcpy(out + 5, payload, n);
  return n + 5;
}

/* Decodes s in chunks of k; joins "flags:payload" with '|'. Returns the first
 * error or the finish status. */
static int run(uint32_t max, const uint8_t *s, size_t n, size_t k, char *vals, char *msg) {
  dsh_envelope_decoder_t *d;
  int rc = dsh_envelope_decoder_new(max, &d);
  vals[0] = msg[0] = 0;
  for (size_t i = 0; i < n && !rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    rc = dsh_envelope_decoder_push(d, s + i, m);
    uint8_t flags;
    const uint8_t *p;
    uint32_t len;
    int got;
    while (!rc && (got = dsh_envelope_decoder_next(d, &flags, &p, &len)) != 0) {
      if (got < 0) {
        rc = got;
        break;
      }
      sprintf(vals + strlen(vals), "%s%u:%.*s", vals[0] ? "|" : "", flags, (int)len, p);
    }
  }
  if (!rc) rc = dsh_envelope_decoder_finish(d);
  strcpy(msg, dsh_envelope_decoder_error(d));
  dsh_envelope_decoder_free(d);
  return rc;
}

static void expect(uint32_t max, const uint8_t *s, size_t n, int rc, const char *msg,
                   const char *vals) {
  for (size_t k = 1; k <= n + 1; k++) {
    char v[1024], m[128];
    int got = run(max, s, n, k, v, m);
    if (got != rc || strcmp(v, vals) || strcmp(m, msg))
      fprintf(stderr, "chunk %zu: %d \"%s\" [%s]\n", k, got, m, v);
    CHECK_EQ_INT(got, rc);
    CHECK_STR(m, msg);
    CHECK_STR(v, vals);
  }
}

static void cases(void) {
  uint8_t s[512];
  size_t n = 0;
  n += put(s + n, 0, "{\"event\":{\"start\":{\"pid\":1234}}}");
  n += put(s + n, 0, "");
  n += put(s + n, 0, "{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}");
  n += put(s + n, 2, "{}");
  CHECK_EQ_INT(s[0], 0);
  CHECK_EQ_INT(s[4], 0x20); /* the reference's bytes: 00 00 00 00 20 */
  expect(64, s, n, DSH_OK, "",
         "0:{\"event\":{\"start\":{\"pid\":1234}}}|0:|0:{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}"
         "}|2:{}");
  /* truncated anywhere inside an envelope */
  expect(64, s, 3, DSH_ETRUNCATED, "stream ended inside an envelope", "");
  expect(64, s, 20, DSH_ETRUNCATED, "stream ended inside an envelope", "");
  /* the limit is checked from the header alone */
  expect(31, s, 5, DSH_ELIMIT, "envelope of 32 bytes exceeds the 31-byte limit", "");
  expect(32, s, 37, DSH_OK, "", "0:{\"event\":{\"start\":{\"pid\":1234}}}");
  uint8_t h[5];
  dsh_envelope_header(1, 2, h);
  expect(64, h, 5, DSH_ECOMPRESSED, "compressed envelope not supported", "");
  dsh_envelope_header(3, 2, h);
  expect(64, h, 5, DSH_ECOMPRESSED, "compressed envelope not supported", "");
  dsh_envelope_header(0x80, 2, h);
  expect(64, h, 5, DSH_EFRAME, "envelope has unknown flags 0x80", "");
  dsh_envelope_header(0x04, 0, h);
  expect(64, h, 5, DSH_EFRAME, "envelope has unknown flags 0x04", "");
  dsh_envelope_header(0, 0xFFFFFFFFu, h);
  CHECK_EQ_INT(h[1], 0xFF);
  expect(0xFFFFFFFEu, h, 5, DSH_ELIMIT,
         "envelope of 4294967295 bytes exceeds the 4294967294-byte limit", "");
  /* a good envelope before a bad header is still returned */
  n = put(s, 0, "ok");
  dsh_envelope_header(1, 0, s + n);
  expect(64, s, n + 5, DSH_ECOMPRESSED, "compressed envelope not supported", "0:ok");
}

static void misuse_and_bound(void) {
  dsh_envelope_decoder_t *d;
  CHECK_EQ_INT(dsh_envelope_decoder_new(1 << 15, &d), DSH_OK);
  uint8_t flags;
  const uint8_t *p;
  uint32_t len;
  uint8_t two[16];
  size_t n = put(two, 0, "a");
  n += put(two + n, 0, "b");
  CHECK_EQ_INT(dsh_envelope_decoder_push(d, two, n), DSH_OK);
  CHECK_EQ_INT(dsh_envelope_decoder_push(d, two, n), DSH_ESTATE);
  CHECK_EQ_INT(dsh_envelope_decoder_finish(d), DSH_ESTATE);
  CHECK_EQ_INT(dsh_envelope_decoder_next(d, &flags, &p, &len), 1);
  CHECK_EQ_INT(dsh_envelope_decoder_next(d, &flags, &p, &len), 1);
  CHECK_EQ_INT(dsh_envelope_decoder_next(d, &flags, &p, &len), 0);
  CHECK_EQ_INT(dsh_envelope_decoder_status(d), DSH_OK);
  dsh_envelope_decoder_free(d);

  /* 200 envelopes of 32 KiB in 64 KiB chunks */
  enum { NE = 200, SZ = 32768, CH = 65536 };
  size_t total = (size_t)NE * (SZ + 5);
  uint8_t *big = malloc(total);
  for (int i = 0; i < NE; i++) {
    dsh_envelope_header(0, SZ, big + (size_t)i * (SZ + 5));
    memset(big + (size_t)i * (SZ + 5) + 5, 'a' + i % 26, SZ);
  }
  CHECK_EQ_INT(dsh_envelope_decoder_new(SZ, &d), DSH_OK);
  int count = 0, bad = 0;
  for (size_t i = 0; i < total; i += CH) {
    size_t m = total - i < CH ? total - i : CH;
    CHECK_EQ_INT(dsh_envelope_decoder_push(d, big + i, m), DSH_OK);
    int rc;
    while ((rc = dsh_envelope_decoder_next(d, &flags, &p, &len)) == 1) {
      if (len != SZ || p[0] != 'a' + count % 26 || p[SZ - 1] != 'a' + count % 26) bad++;
      count++;
    }
    CHECK_EQ_INT(rc, 0);
  }
  CHECK_EQ_INT(dsh_envelope_decoder_finish(d), DSH_OK);
  CHECK_EQ_INT(count, NE);
  CHECK_EQ_INT(bad, 0);
  dsh_envelope_decoder_free(d);
  free(big);
}

int main(void) {
  cases();
  misuse_and_bound();
  CHECK_DONE();
}
