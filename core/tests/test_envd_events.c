/* Tests of the envd event reader: data events decoded in C, everything else
 * lent as JSON, any chunking. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dsh/envd_events.h"
#include "dsh/envd_match.h"
#include "dsh/envelope.h"
#include "dsh/errors.h"

static size_t put(uint8_t *out, uint8_t flags, const char *json) {
  size_t n = strlen(json);
  dsh_envelope_header(flags, (uint32_t)n, out);
  memcpy(out + 5, json, n);
  return n + 5;
}

static void test_matcher(void) {
  int32_t s;
  int64_t off;
  const uint8_t *b;
  size_t bl;
  const char *ok[] = {
      "{\"event\":{\"data\":{\"stdout\":\"aGk=\"}}}",
      "{\"event\":{\"data\":{\"stdout\":\"aGk=\",\"offset\":12}}}",
      "{\"event\":{\"data\":{\"offset\":\"12\",\"stderr\":\"aGk=\"}}}",
      " { \"event\" : { \"data\" : { \"pty\" : \"aGk=\" } } } ",
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    CHECK(dsh_envd_match_data((const uint8_t *)ok[i], strlen(ok[i]), &s, &off, &b, &bl) == 1);
    CHECK(bl == 4 && memcmp(b, "aGk=", 4) == 0);
  }
  CHECK(dsh_envd_match_data((const uint8_t *)ok[1], strlen(ok[1]), &s, &off, &b, &bl) == 1);
  CHECK(s == DSH_ENVD_STDOUT && off == 12);
  CHECK(dsh_envd_match_data((const uint8_t *)ok[2], strlen(ok[2]), &s, &off, &b, &bl) == 1);
  CHECK(s == DSH_ENVD_STDERR && off == 12);
  const char *no[] = {
      "{\"event\":{\"start\":{\"pid\":1}}}",
      "{\"event\":{\"data\":{}}}",
      "{\"event\":{\"data\":{\"stdout\":\"a\\/k=\"}}}",
      "{\"event\":{\"data\":{\"stdout\":\"aGk=\",\"stderr\":\"aGk=\"}}}",
      "{\"event\":{\"data\":{\"stdout\":\"aGk=\",\"extra\":1}}}",
      "{\"event\":{\"data\":{\"stdout\":\"aGk=\"}}}x",
      "{\"event\":{\"data\":{\"stdout\":\"aGk=\"}}",
      "{\"event\":{\"data\":{\"stdout\":\"aGk=",
  };
  for (size_t i = 0; i < sizeof no / sizeof *no; i++)
    CHECK(dsh_envd_match_data((const uint8_t *)no[i], strlen(no[i]), &s, &off, &b, &bl) == 0);
}

static void test_stream(size_t chunk) {
  uint8_t wire[4096];
  size_t n = 0;
  n += put(wire + n, 0, "{\"event\":{\"start\":{\"pid\":7}}}");
  n += put(wire + n, 0, "{\"event\":{\"data\":{\"stdout\":\"AP8BAg==\",\"offset\":0}}}");
  n += put(wire + n, 0, "{\"event\":{\"data\":{\"stderr\":\"ZXJy\",\"offset\":0}}}");
  n += put(wire + n, 0, "{\"event\":{\"end\":{\"exited\":true,\"status\":\"exit status 0\"}}}");
  n += put(wire + n, 2, "{}");
  dsh_envd_events_t *e;
  CHECK(dsh_envd_events_new(1 << 20, &e) == DSH_OK);
  int kinds[8], got = 0, rc;
  uint8_t bytes[64];
  size_t nbytes = 0;
  for (size_t at = 0; at < n; at += chunk) {
    size_t len = n - at < chunk ? n - at : chunk;
    CHECK(dsh_envd_events_push(e, wire + at, len) == DSH_OK);
    dsh_envd_event_t ev;
    while ((rc = dsh_envd_events_next(e, &ev)) == 1) {
      if (got < 8) kinds[got] = ev.kind;
      got++;
      if (ev.kind == DSH_ENVD_DATA && ev.stream == DSH_ENVD_STDOUT) {
        memcpy(bytes, ev.data, ev.len);
        nbytes = ev.len;
      }
    }
    CHECK(rc == 0);
  }
  CHECK(dsh_envd_events_finish(e) == DSH_OK);
  CHECK(got == 5);
  CHECK(kinds[0] == DSH_ENVD_MESSAGE && kinds[1] == DSH_ENVD_DATA && kinds[2] == DSH_ENVD_DATA);
  CHECK(kinds[3] == DSH_ENVD_MESSAGE && kinds[4] == DSH_ENVD_END);
  CHECK(nbytes == 4 && bytes[0] == 0x00 && bytes[1] == 0xff && bytes[2] == 1 && bytes[3] == 2);
  dsh_envd_events_free(e);
}

static void test_limits(void) {
  dsh_envd_events_t *e;
  CHECK(dsh_envd_events_new(16, &e) == DSH_OK);
  uint8_t wire[64];
  size_t n = put(wire, 0, "{\"event\":{\"start\":{\"pid\":7}}}");
  CHECK(dsh_envd_events_push(e, wire, n) == DSH_OK);
  dsh_envd_event_t ev;
  CHECK(dsh_envd_events_next(e, &ev) == DSH_ELIMIT);
  CHECK(strstr(dsh_envd_events_error(e), "limit") != NULL);
  dsh_envd_events_free(e);
  CHECK(dsh_envd_events_new(1024, &e) == DSH_OK);
  CHECK(dsh_envd_events_push(e, wire, 3) == DSH_OK);
  CHECK(dsh_envd_events_next(e, &ev) == 0);
  CHECK(dsh_envd_events_finish(e) == DSH_ETRUNCATED);
  dsh_envd_events_free(e);
}

int main(void) {
  test_matcher();
  for (size_t chunk = 1; chunk < 40; chunk++) test_stream(chunk);
  test_stream(4096);
  test_limits();
  CHECK_DONE();
}
