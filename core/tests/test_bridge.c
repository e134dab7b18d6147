/* test_bridge.c: the Code Mode bridge decoder (tokens as frames arrive, the
 * frame decoder's checks, order and messages, under every chunking) and
 * encoder (JSON.stringify's strings and numbers, the bound, base64 pieces). */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "dsh/base64.h"
#include "dsh/bridge.h"
#include "dsh/errors.h"
#include "dsh/frame.h"

typedef struct {
  int rc;
  char toks[8192]; /* the tokens of the frames that passed, as text (see render) */
  char pend[8192]; /* those of the frame under way (dropped if it fails) */
} run_t;

static void add(char *buf, size_t cap, const char *s, size_t n) {
  size_t have = strlen(buf);
  if (have + n + 1 >= cap) n = cap - have - 1;
  memcpy(buf + have, s, n);
  buf[have + n] = 0;
}

static void append(run_t *r, const char *s, size_t n) {
  add(r->pend, sizeof r->pend, s, n);
}

/* O A E K"..." S"..." (w: WTF-8) N<number> T F Z | (end of frame) */
static void render(run_t *r, const dsh_bridge_decoder_t *d, const dsh_bridge_token_t *t, size_t n) {
  const uint8_t *text = dsh_bridge_decoder_text(d);
  char tmp[64];
  for (size_t i = 0; i < n; i++) {
    switch (t[i].kind) {
      case DSH_BRIDGE_OBJECT:
        append(r, "O ", 2);
        break;
      case DSH_BRIDGE_ARRAY:
        append(r, "A ", 2);
        break;
      case DSH_BRIDGE_END:
        append(r, "E ", 2);
        break;
      case DSH_BRIDGE_TRUE:
        append(r, "T ", 2);
        break;
      case DSH_BRIDGE_FALSE:
        append(r, "F ", 2);
        break;
      case DSH_BRIDGE_NULL:
        append(r, "Z ", 2);
        break;
      case DSH_BRIDGE_FRAME:
        add(r->toks, sizeof r->toks, r->pend, strlen(r->pend));
        add(r->toks, sizeof r->toks, "| ", 2);
        r->pend[0] = 0;
        break;
      case DSH_BRIDGE_NUMBER:
        snprintf(tmp, sizeof tmp, "N%.17g ", t[i].num);
        append(r, tmp, strlen(tmp));
        break;
      default:
        append(r, t[i].kind == DSH_BRIDGE_KEY ? "K\"" : "S\"", 2);
        append(r, (const char *)text + t[i].off, (size_t)t[i].len);
        append(r, t[i].wtf8 ? "\"w " : "\" ", t[i].wtf8 ? 3 : 2);
    }
  }
}

/* Pushes s (of n bytes) in chunks of k (0: one chunk), then finishes. */
static run_t run(uint64_t max, const char *s, size_t n, size_t k) {
  run_t r = {0};
  dsh_bridge_decoder_t *d;
  CHECK_EQ_INT(dsh_bridge_decoder_new(max, &d), DSH_OK);
  if (!k) k = n ? n : 1;
  for (size_t i = 0; i < n && !r.rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    r.rc = dsh_bridge_decoder_push(d, (const uint8_t *)s + i, m);
    int got = 1;
    while (!r.rc && got == 1) {
      const dsh_bridge_token_t *t;
      size_t nt;
      got = dsh_bridge_decoder_next(d, &t, &nt);
      render(&r, d, t, nt);
      if (got < 0) r.rc = got;
    }
  }
  if (!r.rc) r.rc = dsh_bridge_decoder_finish(d);
  if (r.rc) CHECK_EQ_INT(dsh_bridge_decoder_status(d), r.rc);
  dsh_bridge_decoder_free(d);
  return r;
}

/* The frame of a JSON text. */
static char *frame_of(const char *json) {
  size_t n = strlen(json), cap = dsh_frame_encoded_len(n) + 1, got;
  char *out = malloc(cap);
  CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)json, n, 1u << 20, out, cap, &got), DSH_OK);
  out[got] = 0;
  return out;
}

/* The frame decoder's verdict on the same input in chunks of k (0: one). */
static int frame_rc(uint64_t max, const char *s, size_t n, size_t k) {
  dsh_frame_decoder_t *d;
  CHECK_EQ_INT(dsh_frame_decoder_new(max, &d), DSH_OK);
  int rc = DSH_OK;
  if (!k) k = n ? n : 1;
  for (size_t i = 0; i < n && !rc; i += k) {
    rc = dsh_frame_decoder_push(d, (const uint8_t *)s + i, n - i < k ? n - i : k);
    const uint8_t *json;
    size_t len;
    int got;
    while (!rc && (got = dsh_frame_decoder_next(d, &json, &len)) != 0)
      if (got < 0) rc = got;
  }
  if (!rc) rc = dsh_frame_decoder_finish(d);
  dsh_frame_decoder_free(d);
  return rc;
}

/* The same tokens and status for one chunk and chunks of 1, 2, 3, 5 and 7
 * bytes, and the frame decoder's status. */
static void expect_raw(uint64_t max, const char *s, int rc, const char *toks) {
  size_t n = strlen(s), ks[] = {0, 1, 2, 3, 5, 7};
  for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
    run_t r = run(max, s, n, ks[i]);
    if (r.rc != rc || strcmp(r.toks, toks))
      fprintf(stderr, "input \"%.60s\" chunk %zu: got %d [%s]\n", s, ks[i], r.rc, r.toks);
    CHECK_EQ_INT(r.rc, rc);
    CHECK_STR(r.toks, toks);
    CHECK_EQ_INT(frame_rc(max, s, n, ks[i]), rc);
  }
}

static void expect(const char *json, int rc, const char *toks) {
  char *f = frame_of(json);
  expect_raw(1u << 20, f, rc, toks);
  free(f);
}

static void tokens(void) {
  expect(
      "{\"type\":\"call\",\"id\":7,\"args\":[{\"kind\":\"array\",\"length\":1},\"x\"]}", DSH_OK,
      "O K\"type\" S\"call\" K\"id\" N7 K\"args\" A O K\"kind\" S\"array\" K\"length\" N1 E S\"x\" "
      "E E | ");
  expect(" [ true , false , null , [ ] , { } ] ", DSH_OK, "A T F Z A E O E E | ");
  expect("\"\"", DSH_OK, "S\"\" | ");
  expect("-0", DSH_OK, "N-0 | ");
  expect("1e400", DSH_OK, "Ninf | ");
  expect("[0.1,-12.5e-3,123456789012345678901234567890]", DSH_OK,
         "A N0.10000000000000001 N-0.012500000000000001 N1.2345678901234568e+29 E | ");
  /* escapes, decoded in place; surrogate pairs join, lone ones are WTF-8 */
  expect(
      "[\"a\\n\\t\\\"\\\\\\/"
      "\\b\\f\\r\",\"\\u00e9\\u4f60\",\"\\ud83d\\ude00\",\"\\ud800x\",\"\\udc00\"]",
      DSH_OK,
      "A S\"a\n\t\"\\/\b\f\r\" S\"\xC3\xA9\xE4\xBD\xA0\" S\"\xF0\x9F\x98\x80\" S\"\xED\xA0\x80x\"w "
      "S\"\xED\xB0\x80\"w E | ");
  expect("\"\\ud800\\u0041\"", DSH_OK,
         "S\"\xED\xA0\x80"
         "A\"w | ");
  expect("\"\\ud800\"", DSH_OK, "S\"\xED\xA0\x80\"w | ");
  expect("{\"\xC3\xA9\":\"\xF0\x9F\x98\x80\"}", DSH_OK,
         "O K\"\xC3\xA9\" S\"\xF0\x9F\x98\x80\" E | ");
  /* two frames in one stream */
  char *a = frame_of("1"), *b = frame_of("[2]"), both[64];
  snprintf(both, sizeof both, "%s%s", a, b);
  expect_raw(64, both, DSH_OK, "N1 | A N2 E | ");
  free(a);
  free(b);
}

static void failures(void) {
  /* JSON, then UTF-8, then the bound, then base64 */
  expect("[1,]", DSH_EJSON, "");
  expect("{\"a\" 1}", DSH_EJSON, "");
  expect("\"a\x01\"", DSH_EJSON, "");
  expect("\"\\x\"", DSH_EJSON, "");
  expect("\"\\u12G4\"", DSH_EJSON, "");
  expect("[1] 2", DSH_EJSON, "");
  expect("01", DSH_EJSON, "");
  expect("tru", DSH_EJSON, "");
  expect("\"abc", DSH_EJSON, "");
  expect("  ", DSH_EJSON, "");
  expect("[\"\xC3\"]", DSH_EUTF8, "");
  expect("[1,\"\xED\xA0\x80\"]", DSH_EUTF8, "");
  expect("\xFF", DSH_EUTF8, "");
  expect("[1, \xC3\xA9]", DSH_EJSON, "");
  expect("[1,] \"\xFF\"", DSH_EUTF8, ""); /* UTF-8 is reported before a JSON error before it */
  expect_raw(1u << 20, "YQ\n", DSH_EBASE64, "");
  expect_raw(1u << 20, "YR==\n", DSH_EBASE64, "");
  expect_raw(1u << 20, "MQ==MQ==\n", DSH_EBASE64, "");
  expect_raw(1u << 20, "\n", DSH_EBASE64, "");
  expect_raw(1u << 20, "W10*\n", DSH_EBASE64, "");
  run_t r = run(1u << 20, "MQ==\nW10\tx\n", 12, 0); /* the chunk is refused whole */
  CHECK_EQ_INT(r.rc, DSH_ENONASCII);
  CHECK_STR(r.toks, "");
  expect_raw(1u << 20, "MQ==", DSH_ETRUNCATED, "");
  /* the bound: 14 bytes fit 14, not 13; too long a line is refused unread */
  const char *ni = "{\"text\":\"\xE4\xBD\xA0\"}";
  char *f = frame_of(ni);
  expect_raw(14, f, DSH_OK, "O K\"text\" S\"\xE4\xBD\xA0\" E | ");
  expect_raw(13, f, DSH_ELIMIT, "");
  free(f);
  /* a line too long: base64 when its '\n' is in the same chunk, else the bound */
  r = run(4, "MTIzNDU2Nzg=\n", 13, 0);
  CHECK_EQ_INT(r.rc, DSH_EBASE64);
  CHECK_EQ_INT(frame_rc(4, "MTIzNDU2Nzg=\n", 13, 0), DSH_EBASE64);
  r = run(4, "MTIzNDU2Nzg=\n", 13, 1);
  CHECK_EQ_INT(r.rc, DSH_ELIMIT);
  CHECK_EQ_INT(frame_rc(4, "MTIzNDU2Nzg=\n", 13, 1), DSH_ELIMIT);
  expect_raw(4, "MTIzNDU2Nzg=", DSH_ELIMIT, "");
  expect_raw(4, "!!!!!!!!!", DSH_ELIMIT, "");      /* an unterminated long line: the bound, first */
  expect_raw(7, "MTIzNDU2Nzg=\n", DSH_ELIMIT, ""); /* 12 characters fit 7 bytes, 8 bytes do not */
  expect_raw(7, "MTIzNDU2Nzg*\n", DSH_EBASE64, "");
  /* frames before a failing one are delivered */
  char *one = frame_of("1"), *bad = frame_of("[1,]"), two[64];
  snprintf(two, sizeof two, "%s%s", one, bad);
  expect_raw(64, two, DSH_EJSON, "N1 | ");
  free(one);
  free(bad);
}

/* Many tokens and one long string come out over several calls. */
static void large(void) {
  size_t n = 3u << 20;
  char *json = malloc(n + 3);
  json[0] = '"';
  for (size_t i = 1; i <= n; i++) json[i] = i % 100 == 0 ? 'n' : 'a';
  json[n + 1] = '"';
  json[n + 2] = 0;
  size_t flen = dsh_frame_encoded_len(n + 2), got;
  char *frame = malloc(flen);
  CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)json, n + 2, n + 2, frame, flen, &got), DSH_OK);
  dsh_bridge_decoder_t *d;
  CHECK_EQ_INT(dsh_bridge_decoder_new(n + 2, &d), DSH_OK);
  CHECK_EQ_INT(dsh_bridge_decoder_push(d, (const uint8_t *)frame, got), DSH_OK);
  int calls = 0, rc;
  size_t strings = 0, frames = 0;
  do {
    const dsh_bridge_token_t *t;
    size_t nt;
    rc = dsh_bridge_decoder_next(d, &t, &nt);
    calls++;
    for (size_t i = 0; i < nt; i++) {
      if (t[i].kind == DSH_BRIDGE_STRING) {
        strings++;
        CHECK_EQ_INT(t[i].len, n);
        CHECK(!memcmp(dsh_bridge_decoder_text(d) + t[i].off, json + 1, n));
      }
      if (t[i].kind == DSH_BRIDGE_FRAME) frames++;
    }
  } while (rc == 1);
  CHECK_EQ_INT(rc, 0);
  CHECK(calls >= 4); /* 4 MiB of base64: about 1 MiB per call */
  CHECK_EQ_INT(strings, 1);
  CHECK_EQ_INT(frames, 1);
  CHECK_EQ_INT(dsh_bridge_decoder_finish(d), DSH_OK);
  dsh_bridge_decoder_free(d);
  free(json);
  free(frame);

  /* 100000 numbers: at most ~4096 tokens per call */
  size_t cnt = 100000;
  char *arr = malloc(cnt * 2 + 3), *p = arr;
  *p++ = '[';
  for (size_t i = 0; i < cnt; i++) {
    *p++ = '7';
    *p++ = i + 1 < cnt ? ',' : ']';
  }
  *p = 0;
  flen = dsh_frame_encoded_len(strlen(arr));
  frame = malloc(flen);
  CHECK_EQ_INT(dsh_frame_encode((const uint8_t *)arr, strlen(arr), 1u << 20, frame, flen, &got),
               DSH_OK);
  CHECK_EQ_INT(dsh_bridge_decoder_new(1u << 20, &d), DSH_OK);
  CHECK_EQ_INT(dsh_bridge_decoder_push(d, (const uint8_t *)frame, got), DSH_OK);
  size_t total = 0, most = 0;
  do {
    const dsh_bridge_token_t *t;
    size_t nt;
    rc = dsh_bridge_decoder_next(d, &t, &nt);
    total += nt;
    if (nt > most) most = nt;
  } while (rc == 1);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(total, cnt + 3);
  CHECK(most <= 4100);
  dsh_bridge_decoder_free(d);
  free(arr);
  free(frame);
}

/* The encoder's JSON text, as a string. */
static char *enc_text(dsh_bridge_encoder_t *e) {
  size_t cap = dsh_base64_encoded_len((size_t)dsh_bridge_encoder_len(e)) + 8, n, total = 0;
  char *b64 = malloc(cap);
  int more;
  do {
    more = dsh_bridge_encoder_emit(e, b64 + total, 9, &n);
    total += n;
  } while (more == 1);
  CHECK(total > 0 && b64[total - 1] == '\n');
  uint8_t *json = malloc(total);
  size_t m;
  CHECK_EQ_INT(dsh_base64_decode(b64, total - 1, json, &m), DSH_OK);
  json[m] = 0;
  free(b64);
  return (char *)json;
}

static void number_is(double x, const char *want) {
  dsh_bridge_encoder_t *e;
  CHECK_EQ_INT(dsh_bridge_encoder_new(1024, &e), DSH_OK);
  CHECK_EQ_INT(dsh_bridge_encoder_number(e, x), DSH_OK);
  char *got = enc_text(e);
  if (strcmp(got, want)) fprintf(stderr, "number %.17g: got %s, want %s\n", x, got, want);
  CHECK_STR(got, want);
  free(got);
  dsh_bridge_encoder_free(e);
}

static void encoder(void) {
  number_is(0, "0");
  number_is(42, "42");
  number_is(-7, "-7");
  number_is(0.1, "0.1");
  number_is(-1.5e-10, "-1.5e-10");
  number_is(123.456, "123.456");
  number_is(1e21, "1e+21");
  number_is(1e20, "100000000000000000000");
  number_is(123456789012345680000.0, "123456789012345680000");
  number_is(1e-7, "1e-7");
  number_is(0.000001, "0.000001");
  number_is(9007199254740991.0, "9007199254740991");
  number_is(5e-324, "5e-324");
  number_is(1.7976931348623157e308, "1.7976931348623157e+308");
  number_is(1 / 3.0, "0.3333333333333333");

  dsh_bridge_encoder_t *e;
  CHECK_EQ_INT(dsh_bridge_encoder_new(64, &e), DSH_OK);
  CHECK_EQ_INT(dsh_bridge_encoder_number(e, NAN), DSH_EINVAL);
  CHECK_EQ_INT(dsh_bridge_encoder_number(e, INFINITY), DSH_EINVAL);
  CHECK_EQ_INT(dsh_bridge_encoder_number(e, -0.0), DSH_EINVAL);
  size_t used;
  const char *s = "a\"\\\b\f\n\r\t\x01\x1f\x7f\xC3\xA9/";
  CHECK_EQ_INT(dsh_bridge_encoder_raw(e, (const uint8_t *)"[", 1), DSH_OK);
  CHECK_EQ_INT(dsh_bridge_encoder_string(e, (const uint8_t *)s, strlen(s), &used), DSH_OK);
  CHECK_EQ_INT(used, strlen(s));
  CHECK_EQ_INT(dsh_bridge_encoder_raw(e, (const uint8_t *)"]", 1), DSH_OK);
  char *got = enc_text(e);
  CHECK_STR(got, "[\"a\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\xC3\xA9/\"]");
  free(got);
  /* not UTF-8, a surrogate, the bound */
  CHECK_EQ_INT(dsh_bridge_encoder_string(e, (const uint8_t *)"\xFF", 1, &used), DSH_EUTF8);
  dsh_bridge_encoder_reset(e);
  CHECK_EQ_INT(dsh_bridge_encoder_string(e, (const uint8_t *)"\xED\xA0\x80", 3, &used), DSH_EUTF8);
  dsh_bridge_encoder_reset(e);
  char big[80];
  memset(big, 'x', sizeof big);
  CHECK_EQ_INT(dsh_bridge_encoder_string(e, (const uint8_t *)big, 62, &used), DSH_OK);
  CHECK_EQ_INT(dsh_bridge_encoder_len(e), 64);
  CHECK_EQ_INT(dsh_bridge_encoder_raw(e, (const uint8_t *)"x", 1), DSH_ELIMIT);
  dsh_bridge_encoder_reset(e);
  CHECK_EQ_INT(dsh_bridge_encoder_string(e, (const uint8_t *)big, 63, &used), DSH_ELIMIT);
  char tiny[8];
  size_t tn;
  CHECK_EQ_INT(dsh_bridge_encoder_emit(e, tiny, 4, &tn), DSH_EINVAL);
  dsh_bridge_encoder_free(e);

  /* a long string goes in slices ending on code points, one quote each side */
  size_t n = 3u << 20;
  uint8_t *u = malloc(n);
  for (size_t i = 0; i < n; i += 3) memcpy(u + i, "\xE4\xBD\xA0", 3);
  CHECK_EQ_INT(dsh_bridge_encoder_new(n + 2, &e), DSH_OK);
  size_t at = 0;
  int slices = 0;
  while (at < n) {
    CHECK_EQ_INT(dsh_bridge_encoder_string(e, u + at, n - at, &used), DSH_OK);
    CHECK(used > 0 && used % 3 == 0);
    at += used;
    slices++;
  }
  CHECK(slices >= 3);
  CHECK_EQ_INT(dsh_bridge_encoder_len(e), n + 2);
  /* and decodes back */
  size_t cap = dsh_base64_encoded_len(n + 2) + 2, total = 0, piece;
  char *frame = malloc(cap);
  int more;
  do {
    more = dsh_bridge_encoder_emit(e, frame + total, 1u << 20, &piece);
    total += piece;
  } while (more == 1);
  dsh_bridge_decoder_t *d;
  CHECK_EQ_INT(dsh_bridge_decoder_new(n + 2, &d), DSH_OK);
  CHECK_EQ_INT(dsh_bridge_decoder_push(d, (const uint8_t *)frame, total), DSH_OK);
  int rc;
  size_t seen = 0;
  do {
    const dsh_bridge_token_t *t;
    size_t nt;
    rc = dsh_bridge_decoder_next(d, &t, &nt);
    for (size_t i = 0; i < nt; i++)
      if (t[i].kind == DSH_BRIDGE_STRING) {
        seen++;
        CHECK_EQ_INT(t[i].len, n);
        CHECK(!memcmp(dsh_bridge_decoder_text(d) + t[i].off, u, n));
      }
  } while (rc == 1);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(seen, 1);
  dsh_bridge_decoder_free(d);
  dsh_bridge_encoder_free(e);
  free(frame);
  free(u);
}

int main(void) {
  tokens();
  failures();
  large();
  encoder();
  CHECK_DONE();
}
