/* fuzz_lspframe.c: the LSP decoder gives the same bodies, status and message
 * however the input is chunked, and lends nothing over the bound. The first
 * byte picks the bound, the second the chunk size. */
#include <stdlib.h>
#include <string.h>

#include "dsh/errors.h"
#include "dsh/lspframe.h"

typedef struct {
  uint8_t *log; /* 8-byte length + body ... */
  size_t n;
  int rc;
  char msg[160];
} result_t;

static void run(const uint8_t *s, size_t n, uint64_t max, size_t k, result_t *r) {
  dsh_lsp_decoder_t *d;
  if (dsh_lsp_decoder_new(max, &d)) abort();
  r->log = malloc(4 * n + 16);
  r->n = 0;
  r->rc = 0;
  for (size_t i = 0; i < n && !r->rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    r->rc = dsh_lsp_decoder_push(d, s + i, m);
    const uint8_t *body;
    size_t len;
    int got;
    while (!r->rc && (got = dsh_lsp_decoder_next(d, &body, &len)) != 0) {
      if (got < 0) {
        r->rc = got;
        break;
      }
      if (len > max) abort();
      uint64_t l = len;
      memcpy(r->log + r->n, &l, 8);
      r->n += 8;
      memcpy(r->log + r->n, body, len);
      r->n += len;
    }
  }
  if (!r->rc) r->rc = dsh_lsp_decoder_finish(d);
  strncpy(r->msg, dsh_lsp_decoder_error(d), sizeof r->msg - 1);
  r->msg[sizeof r->msg - 1] = 0;
  dsh_lsp_decoder_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  uint64_t max = data[0] < 250 ? data[0] : UINT64_MAX;
  size_t k = (size_t)data[1] + 1;
  data += 2;
  size -= 2;
  result_t whole, split, bytes;
  run(data, size, max, size ? size : 1, &whole);
  run(data, size, max, k, &split);
  run(data, size, max, 1, &bytes);
  if (whole.rc != split.rc || whole.rc != bytes.rc) abort();
  if (strcmp(whole.msg, split.msg) || strcmp(whole.msg, bytes.msg)) abort();
  if (whole.n != split.n || memcmp(whole.log, split.log, whole.n)) abort();
  if (whole.n != bytes.n || memcmp(whole.log, bytes.log, whole.n)) abort();
  free(whole.log);
  free(split.log);
  free(bytes.log);
  return 0;
}
