/* fuzz_envelope.c: the envelope decoder must give the same envelopes, status
 * and message however the input is chunked. The first byte picks the maximum
 * message size, the second the chunk size. */
#include <stdlib.h>
#include <string.h>

#include "dsh/envelope.h"
#include "dsh/errors.h"

typedef struct {
  uint8_t *log; /* flags, 4-byte length, payload ... */
  size_t n;
  int rc;
  char msg[128];
} result_t;

static void run(const uint8_t *s, size_t n, uint32_t max, size_t k, result_t *r) {
  dsh_envelope_decoder_t *d;
  if (dsh_envelope_decoder_new(max, &d)) abort();
  r->log = malloc(2 * n + 16);
  r->n = 0;
  r->rc = 0;
  for (size_t i = 0; i < n && !r->rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    r->rc = dsh_envelope_decoder_push(d, s + i, m);
    uint8_t flags;
    const uint8_t *p;
    uint32_t len;
    int got;
    while (!r->rc && (got = dsh_envelope_decoder_next(d, &flags, &p, &len)) != 0) {
      if (got < 0) {
        r->rc = got;
        break;
      }
      if (len > max || (flags & ~2u)) abort();
      dsh_envelope_header(flags, len, r->log + r->n);
      r->n += 5;
      memcpy(r->log + r->n, p, len);
      r->n += len;
    }
  }
  if (!r->rc) r->rc = dsh_envelope_decoder_finish(d);
  if (r->rc && r->rc != dsh_envelope_decoder_status(d)) abort();
  strncpy(r->msg, dsh_envelope_decoder_error(d), sizeof r->msg - 1);
  r->msg[sizeof r->msg - 1] = 0;
  dsh_envelope_decoder_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  uint32_t max = data[0] < 250 ? data[0] : 0xFFFFFFFFu - (uint32_t)(255 - data[0]);
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
  /* a clean stream is re-encoded exactly */
  if (whole.rc == DSH_OK && (whole.n != size || memcmp(whole.log, data, size))) abort();
  free(whole.log);
  free(split.log);
  free(bytes.log);
  return 0;
}
