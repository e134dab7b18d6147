/* test_lspframe.c: LSP Content-Length framing under every chunking: header
 * rules, limits, truncation, and the header encoder. */
#include <stdlib.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/lspframe.h"

static int run(uint64_t max, const char *s, size_t n, size_t k, char *vals, char *msg) {
  dsh_lsp_decoder_t *d;
  int rc = dsh_lsp_decoder_new(max, &d);
  vals[0] = msg[0] = 0;
  for (size_t i = 0; i < n && !rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    rc = dsh_lsp_decoder_push(d, (const uint8_t *)s + i, m);
    const uint8_t *b;
    size_t len;
    int got;
    while (!rc && (got = dsh_lsp_decoder_next(d, &b, &len)) != 0) {
      if (got < 0) {
        rc = got;
        break;
      }
      sprintf(vals + strlen(vals), "%s%.*s", vals[0] ? "|" : "", (int)len, (const char *)b);
    }
  }
  if (!rc) rc = dsh_lsp_decoder_finish(d);
  strcpy(msg, dsh_lsp_decoder_error(d));
  dsh_lsp_decoder_free(d);
  return rc;
}

static void expect(uint64_t max, const char *s, int rc, const char *msg, const char *vals) {
  size_t n = strlen(s);
  for (size_t k = 1; k <= n + 1; k++) {
    char v[1024], m[160];
    int got = run(max, s, n, k, v, m);
    if (got != rc || strcmp(v, vals) || strcmp(m, msg))
      fprintf(stderr, "\"%.40s\" chunk %zu: %d \"%s\" [%s]\n", s, k, got, m, v);
    CHECK_EQ_INT(got, rc);
    CHECK_STR(m, msg);
    CHECK_STR(v, vals);
  }
}

static const char *BAD = "LSP message has a missing or invalid Content-Length";
static const char *MID = "LSP stream ended mid-message";

static void cases(void) {
  expect(100, "Content-Length: 2\r\n\r\n{}Content-Length: 7\r\n\r\n[1,2,3]", 0, "", "{}|[1,2,3]");
  expect(100, "content-length:2\r\n\r\n{}", 0, "", "{}");
  expect(100, "CONTENT-LENGTH: \t 2 \t\r\n\r\n{}", 0, "", "{}");
  expect(100,
         "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
         "Content-Length: 2\r\nX-Other: 1\r\n\r\n{}",
         0, "", "{}");
  expect(100, "Content-Length: 0\r\n\r\n", 0, "", "");
  expect(100, "Content-Length: 002\r\n\r\n{}", 0, "", "{}");
  expect(100, "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 0, "", "{}");
  expect(100, "garbage line\r\nContent-Length: 2\r\n\r\n{}", 0, "", "{}");
  expect(100, "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "Content-Type: x\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "\r\n\r\n", DSH_EFRAME, BAD, "");
  expect(100, "\r\nContent-Length: 2\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "Content-Length: +2\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "Content-Length: -2\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "Content-Length: 1 2\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "Content-Length: 0x2\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "Content-Length:\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(100, "Content-Length : 2\r\n\r\n{}", DSH_EFRAME, BAD, "");
  expect(10, "Content-Length: 11\r\n\r\n", DSH_ELIMIT,
         "LSP message of 11 bytes exceeds the 10-byte limit", "");
  expect(10, "Content-Length: 99999999999999999999999\r\n\r\n", DSH_ELIMIT,
         "LSP message of 99999999999999999999999 bytes exceeds the 10-byte limit", "");
  expect(100, "Content-Length: 2\r\n\r\n{", DSH_ETRUNCATED, MID, "");
  expect(100, "Content-Length: 2\r\n", DSH_ETRUNCATED, MID, "");
  expect(100, "Content-Length: 2\r\n\r\n{}C", DSH_ETRUNCATED, MID, "{}");
  expect(100, "", 0, "", "");
}

static void header_bound(void) {
  /* exactly 65536 bytes of header block is fine; one more is not */
  size_t pad = 65536 - strlen("Content-Length: 2\r\n") - strlen("X: \r\n") - 2;
  char *s = malloc(65536 + 16);
  strcpy(s, "Content-Length: 2\r\nX: ");
  memset(s + strlen(s), 'x', pad);
  strcpy(s + strlen("Content-Length: 2\r\nX: ") + pad, "\r\n\r\n{}");
  CHECK_EQ_INT(strlen(s), 65538);
  char v[64], m[160];
  CHECK_EQ_INT(run(100, s, strlen(s), 4096, v, m), 0);
  CHECK_STR(v, "{}");
  memmove(s + 1, s, strlen(s) + 1);
  s[0] = 'Y';
  CHECK_EQ_INT(run(100, s, strlen(s), 4096, v, m), DSH_ELIMIT);
  CHECK_STR(m, "LSP header block exceeds 65536 bytes");
  CHECK_EQ_INT(run(100, s, strlen(s), 1 << 20, v, m), DSH_ELIMIT);
  /* and without any blank line, the decoder stops at the bound */
  memset(s, 'h', 65536);
  CHECK_EQ_INT(run(100, s, 65536, 1000, v, m), DSH_ELIMIT);
  CHECK_EQ_INT(run(100, s, 65535, 1000, v, m), DSH_ETRUNCATED);
  free(s);
}

static void misuse_and_encoder(void) {
  dsh_lsp_decoder_t *d;
  const uint8_t *b;
  size_t len;
  CHECK_EQ_INT(dsh_lsp_decoder_new(100, &d), DSH_OK);
  const char *two = "Content-Length: 1\r\n\r\n1Content-Length: 1\r\n\r\n2";
  CHECK_EQ_INT(dsh_lsp_decoder_push(d, (const uint8_t *)two, strlen(two)), DSH_OK);
  CHECK_EQ_INT(dsh_lsp_decoder_push(d, (const uint8_t *)two, 1), DSH_ESTATE);
  CHECK_EQ_INT(dsh_lsp_decoder_next(d, &b, &len), 1);
  CHECK_EQ_INT(dsh_lsp_decoder_finish(d), DSH_ESTATE);
  CHECK_EQ_INT(dsh_lsp_decoder_next(d, &b, &len), 1);
  CHECK_MEM(b, len, "2", 1);
  CHECK_EQ_INT(dsh_lsp_decoder_next(d, &b, &len), 0);
  CHECK_EQ_INT(dsh_lsp_decoder_finish(d), DSH_OK);
  dsh_lsp_decoder_free(d);

  char out[64];
  size_t n;
  CHECK_EQ_INT(dsh_lsp_encode_header(123, out, sizeof out, &n), DSH_OK);
  CHECK_MEM(out, n, "Content-Length: 123\r\n\r\n", 23);
  CHECK_EQ_INT(dsh_lsp_encode_header(123, out, 22, &n), DSH_EINVAL);
  CHECK_EQ_INT(dsh_lsp_encode_header((size_t)-1, out, 40, &n), DSH_OK);
}

int main(void) {
  cases();
  header_bound();
  misuse_and_encoder();
  CHECK_DONE();
}
