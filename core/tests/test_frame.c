/* test_frame.c: the NDJSON-base64 frame decoder and encoder, with the pinned
 * behaviours of harness-behaviour.md §3.1, under every chunking. */
#include <stdlib.h>

#include "check.h"
#include "dsh/base64.h"
#include "dsh/errors.h"
#include "dsh/frame.h"

typedef struct {
  int rc;          /* first error (push, next or finish), or DSH_OK */
  const char *msg; /* its message */
  char vals[4096]; /* decoded frames joined with '|' */
  size_t nvals;
} run_t;

/* Pushes s in chunks of k bytes (k = 0: one chunk), draining after each push,
 * then finishes (unless finish == 0). */
static run_t run(uint64_t max, const char *s, size_t k, int finish) {
  run_t r = {0};
  dsh_frame_decoder_t *d;
  r.rc = dsh_frame_decoder_new(max, &d);
  if (r.rc) {
    r.msg = dsh_frame_message(r.rc);
    return r;
  }
  size_t n = strlen(s), len = 0;
  if (!k) k = n ? n : 1;
  for (size_t i = 0; i < n && !r.rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    r.rc = dsh_frame_decoder_push(d, (const uint8_t *)s + i, m);
    const uint8_t *json;
    int got;
    while (!r.rc && (got = dsh_frame_decoder_next(d, &json, &len)) != 0) {
      if (got < 0) {
        r.rc = got;
        break;
      }
      if (r.nvals++) r.vals[strlen(r.vals)] = '|';
      memcpy(r.vals + strlen(r.vals), json, len);
    }
  }
  if (!r.rc && finish) r.rc = dsh_frame_decoder_finish(d);
  r.msg = r.rc ? dsh_frame_decoder_error(d) : "";
  if (r.rc) CHECK_EQ_INT(r.rc, dsh_frame_decoder_status(d));
  dsh_frame_decoder_free(d);
  return r;
}

static char *frame_of(const char *json) {
  size_t n = strlen(json), cap = dsh_frame_encoded_len(n) + 1, got;
  char *out = malloc(cap);
  CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)json, n, 1u << 20, out, cap, &got), DSH_OK);
  out[got] = 0;
  return out;
}

/* The same result for whole, 1-byte, 2-byte, 3-byte, 5-byte and 7-byte chunks. */
static void expect(uint64_t max, const char *s, int rc, const char *msg, const char *vals) {
  size_t ks[] = {0, 1, 2, 3, 5, 7};
  for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
    run_t r = run(max, s, ks[i], 1);
    if (r.rc != rc || strcmp(r.msg, msg) || strcmp(r.vals, vals))
      fprintf(stderr, "input \"%.60s\" chunk %zu: got %d \"%s\" [%s]\n", s, ks[i], r.rc, r.msg,
              r.vals);
    CHECK_EQ_INT(r.rc, rc);
    CHECK_STR(r.msg, msg);
    CHECK_STR(r.vals, vals);
  }
}

static const char *E_ASCII = "E2B frame stream contained non-ASCII data";
static const char *E_B64 = "E2B frame contained invalid base64 or exceeded its byte limit";
static const char *E_LIMIT = "E2B frame exceeded its byte limit";
static const char *E_UTF8 = "E2B frame contained invalid UTF-8";
static const char *E_JSON = "E2B frame contained invalid JSON";
static const char *E_MID = "E2B frame stream ended mid-frame";
static const char *E_MAX = "E2B frame maxFrameBytes must be a positive safe integer";

static void pins(void) {
  /* two adjacent frames split at 5 characters: nothing, then both */
  char *a = frame_of("{\"a\":1}"), *b = frame_of("[2]");
  char both[128];
  snprintf(both, sizeof both, "%s%s", a, b);
  dsh_frame_decoder_t *d;
  CHECK_EQ_INT(dsh_frame_decoder_new(1024, &d), DSH_OK);
  const uint8_t *json;
  size_t len;
  CHECK_EQ_INT(dsh_frame_decoder_push(d, (const uint8_t *)both, 5), DSH_OK);
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), 0);
  CHECK_EQ_INT(dsh_frame_decoder_push(d, (const uint8_t *)both + 5, strlen(both) - 5), DSH_OK);
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), 1);
  CHECK_MEM(json, len, "{\"a\":1}", 7);
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), 1);
  CHECK_MEM(json, len, "[2]", 3);
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), 0);
  CHECK_EQ_INT(dsh_frame_decoder_finish(d), DSH_OK);
  dsh_frame_decoder_free(d);
  expect(1024, both, DSH_OK, "", "{\"a\":1}|[2]");
  free(a);
  free(b);

  /* {"text":"你"} is 14 bytes: bound 14 round-trips, bound 13 is over */
  const char *ni = "{\"text\":\"\xE4\xBD\xA0\"}";
  CHECK_EQ_INT(strlen(ni), 14);
  char out[64];
  size_t on;
  CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)ni, 14, 14, out, sizeof out, &on), DSH_OK);
  out[on] = 0;
  expect(14, out, DSH_OK, "", ni);
  expect(13, out, DSH_ELIMIT, E_LIMIT, "");
  CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)ni, 14, 13, out, sizeof out, &on), DSH_ELIMIT);
  CHECK_STR(dsh_frame_message(DSH_ELIMIT), E_LIMIT);

  /* bad bounds */
  dsh_frame_decoder_t *none = (dsh_frame_decoder_t *)1;
  CHECK_EQ_INT(dsh_frame_decoder_new(0, &none), DSH_EINVAL);
  CHECK(none == NULL);
  CHECK_EQ_INT(dsh_frame_decoder_new(9007199254740992ull, &none), DSH_EINVAL);
  CHECK_EQ_INT(dsh_frame_check_max(9007199254740991ull), DSH_OK);
  CHECK_EQ_INT(dsh_frame_check_max(0), DSH_EINVAL);
  CHECK_STR(dsh_frame_message(DSH_EINVAL), E_MAX);
  CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)"1", 1, 0, out, sizeof out, &on), DSH_EINVAL);

  expect(1024, "\xC3\xA9", DSH_ENONASCII, E_ASCII, "");
  expect(1024, "YQ==\r\n", DSH_ENONASCII, E_ASCII, "");
  expect(1024, "YQ==\t", DSH_ENONASCII, E_ASCII, "");
  expect(1024, "\x7F", DSH_ENONASCII, E_ASCII, "");
  expect(3, "AAAAA", DSH_ELIMIT, E_LIMIT, "");
  expect(1024, "\n", DSH_EBASE64, E_B64, "");
  expect(1024, "abc!\n", DSH_EBASE64, E_B64, "");
  expect(1024, "YQ\n", DSH_EBASE64, E_B64, "");
  expect(1024, "YR==\n", DSH_EBASE64, E_B64, "");
  expect(1024, "YQ==YQ==\n", DSH_EBASE64, E_B64, "");
  expect(1024, "YQ== \n", DSH_EBASE64, E_B64, "");
  expect(2, "YWJj\n", DSH_ELIMIT, E_LIMIT, "");
  expect(1024, "/w==\n", DSH_EUTF8, E_UTF8, "");
  expect(1024, "7aCA\n", DSH_EUTF8, E_UTF8, "");         /* ED A0 80, a surrogate */
  expect(1024, "bm90LWpzb24=\n", DSH_EJSON, E_JSON, ""); /* not-json */
  expect(1024, "IA==\n", DSH_EJSON, E_JSON, "");         /* " " */
  expect(1024, "YQ==", DSH_ETRUNCATED, E_MID, "");
  expect(1024, "", DSH_OK, "", "");
  /* A line longer than maxEncodedChars (4 for max 3): in one chunk it is a
   * complete bad line; dribbled, its unterminated start is already over the
   * bound. The reference (frame.ts) answers the same way. */
  run_t r = run(3, "MTIzNA==\nMQ==\n", 0, 1);
  CHECK_EQ_INT(r.rc, DSH_EBASE64);
  CHECK_STR(r.msg, E_B64);
  r = run(3, "MTIzNA==\nMQ==\n", 1, 1);
  CHECK_EQ_INT(r.rc, DSH_ELIMIT);
  CHECK_STR(r.msg, E_LIMIT);
  /* errors come in order: a good frame is returned before a bad one */
  expect(1024, "MQ==\nYQ==\n", DSH_EJSON, E_JSON, "1");
  /* the unterminated remainder is judged after the complete lines */
  expect(3, "MQ==\nAAAAAAAA", DSH_ELIMIT, E_LIMIT, "1");
  expect(3, "YQ==\nAAAAAAAA", DSH_EJSON, E_JSON, "");
}

static void sticky_and_misuse(void) {
  dsh_frame_decoder_t *d;
  const uint8_t *json;
  size_t len;
  CHECK_EQ_INT(dsh_frame_decoder_new(1024, &d), DSH_OK);
  CHECK_EQ_INT(dsh_frame_decoder_push(d, (const uint8_t *)"MQ==\nMg==\n", 10), DSH_OK);
  CHECK_EQ_INT(dsh_frame_decoder_push(d, (const uint8_t *)"Mw==\n", 5), DSH_ESTATE);
  CHECK_EQ_INT(dsh_frame_decoder_finish(d), DSH_ESTATE);
  CHECK_EQ_INT(dsh_frame_decoder_status(d), DSH_OK);
  CHECK_STR(dsh_frame_decoder_error(d), "");
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), 1);
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), 1);
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), 0);
  CHECK_EQ_INT(dsh_frame_decoder_push(d, (const uint8_t *)"\xFF", 1), DSH_ENONASCII);
  CHECK_EQ_INT(dsh_frame_decoder_push(d, (const uint8_t *)"Mw==\n", 5), DSH_ENONASCII);
  CHECK_EQ_INT(dsh_frame_decoder_next(d, &json, &len), DSH_ENONASCII);
  CHECK_EQ_INT(dsh_frame_decoder_finish(d), DSH_ENONASCII);
  CHECK_STR(dsh_frame_decoder_error(d), E_ASCII);
  dsh_frame_decoder_free(d);
  dsh_frame_decoder_free(NULL);
}

/* Big frames, many per chunk and split anywhere; the buffer stays bounded. */
static void bulk(void) {
  enum { NF = 50, SZ = 40000 };
  char *json = malloc(SZ + 64);
  strcpy(json, "{\"type\":\"stdout\",\"data\":\"");
  size_t p = strlen(json);
  for (size_t i = 0; p < SZ - 2; i++) json[p++] = "ABCDEFGHabcdefgh0123+/"[i % 22];
  json[p++] = '"';
  json[p++] = '}';
  size_t jn = p, fl = dsh_frame_encoded_len(jn), got;
  char *stream = malloc(fl * NF);
  for (int i = 0; i < NF; i++) {
    CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)json, jn, jn, stream + i * fl, fl, &got), 0);
    CHECK_EQ_INT(got, fl);
  }
  size_t chunks[] = {1, 13, 4096, 65536, fl * NF};
  for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
    dsh_frame_decoder_t *d;
    CHECK_EQ_INT(dsh_frame_decoder_new(jn, &d), DSH_OK);
    int frames = 0, bad = 0;
    for (size_t i = 0; i < fl * NF; i += chunks[c]) {
      size_t m = fl * NF - i < chunks[c] ? fl * NF - i : chunks[c];
      CHECK_EQ_INT(dsh_frame_decoder_push(d, (const uint8_t *)stream + i, m), DSH_OK);
      const uint8_t *out;
      size_t len;
      int rc;
      while ((rc = dsh_frame_decoder_next(d, &out, &len)) == 1) {
        frames++;
        if (len != jn || memcmp(out, json, jn)) bad++;
      }
      CHECK_EQ_INT(rc, 0);
    }
    CHECK_EQ_INT(dsh_frame_decoder_finish(d), DSH_OK);
    CHECK_EQ_INT(frames, NF);
    CHECK_EQ_INT(bad, 0);
    dsh_frame_decoder_free(d);
  }
  free(stream);
  free(json);
}

/* Every byte value at several offsets of a long chunk (vector and scalar
 * paths of the ASCII check): only '\n' and 0x20..0x7E pass. */
static void ascii_check(void) {
  char line[101];
  memset(line, 'A', 100);
  line[100] = '\n'; /* 100 'A's: 75 zero bytes, valid base64 of invalid JSON */
  size_t offs[] = {0, 1, 15, 16, 31, 32, 33, 63, 64, 95, 96, 99};
  for (int b = 0; b < 256; b++)
    for (size_t k = 0; k < sizeof offs / sizeof *offs; k++) {
      char s[101];
      memcpy(s, line, sizeof s);
      s[offs[k]] = (char)b;
      dsh_frame_decoder_t *d;
      dsh_frame_decoder_new(1024, &d);
      int rc = dsh_frame_decoder_push(d, (const uint8_t *)s, sizeof s);
      int ok = (b >= 0x20 && b <= 0x7E) || b == '\n';
      if ((rc == DSH_ENONASCII) == ok) fprintf(stderr, "byte %02x at %zu: %d\n", b, offs[k], rc);
      CHECK_EQ_INT(rc == DSH_ENONASCII, !ok);
      dsh_frame_decoder_free(d);
    }
}

int main(void) {
  ascii_check();
  pins();
  sticky_and_misuse();
  bulk();
  CHECK_DONE();
}
