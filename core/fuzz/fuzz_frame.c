/* fuzz_frame.c: every frame the decoder lends is within the bound, valid UTF-8
 * and JSON, and re-encodes to its line; a stream that decodes cleanly in one
 * chunk decodes identically in any chunking, and a failing one fails in every
 * chunking. The first byte picks the bound, the second the chunk size. */
#include <stdlib.h>
#include <string.h>

#include "dsh/base64.h"
#include "dsh/errors.h"
#include "dsh/frame.h"
#include "dsh/json.h"
#include "dsh/utf8.h"

typedef struct {
  uint8_t *log; /* the frames' JSON, each followed by '\n' */
  size_t n;
  int rc;
} result_t;

static void run(const uint8_t *s, size_t n, uint64_t max, size_t k, result_t *r) {
  dsh_frame_decoder_t *d;
  if (dsh_frame_decoder_new(max, &d)) abort();
  r->log = malloc(n + 16);
  r->n = 0;
  r->rc = 0;
  for (size_t i = 0; i < n && !r->rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    r->rc = dsh_frame_decoder_push(d, s + i, m);
    const uint8_t *json;
    size_t len;
    int got;
    while (!r->rc && (got = dsh_frame_decoder_next(d, &json, &len)) != 0) {
      if (got < 0) {
        r->rc = got;
        break;
      }
      if (len > max || dsh_utf8_validate(json, len, NULL) || dsh_json_validate(json, len, NULL))
        abort();
      /* the decoded JSON re-encodes to its line */
      size_t el = dsh_frame_encoded_len(len), on;
      char *enc = malloc(el);
      if (dsh_frame_encode(json, len, max, enc, el, &on) || on != el) abort();
      free(enc);
      memcpy(r->log + r->n, json, len);
      r->n += len;
      r->log[r->n++] = '\n';
    }
  }
  if (!r->rc) r->rc = dsh_frame_decoder_finish(d);
  if (r->rc && (r->rc != dsh_frame_decoder_status(d) || !*dsh_frame_decoder_error(d))) abort();
  dsh_frame_decoder_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  uint64_t max = data[0] < 250 ? (uint64_t)data[0] + 1 : 9007199254740991ull;
  size_t k = (size_t)data[1] % 17 + 1;
  data += 2;
  size -= 2;
  result_t whole, split;
  run(data, size, max, size ? size : 1, &whole);
  run(data, size, max, k, &split);
  if ((whole.rc == DSH_OK) != (split.rc == DSH_OK)) abort();
  if (whole.rc == DSH_OK && (whole.n != split.n || memcmp(whole.log, split.log, whole.n))) abort();
  free(whole.log);
  free(split.log);
  return 0;
}
