/* fuzz_base64.c: strict decoding must agree between the scalar and AVX2 paths,
 * accept only canonical text (re-encoding gives the input back), and imply
 * loose acceptance; encoding must round-trip. */
#include <stdlib.h>
#include <string.h>

#include "dsh/base64.h"
#include "dsh/errors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t cap = dsh_base64_decoded_max(size);
  uint8_t *a = malloc(cap + 1), *b = malloc(cap + 1), *c = malloc(cap + 1);
  size_t na, nb, nc;
  dsh_base64_use_simd(0);
  int ra = dsh_base64_decode((const char *)data, size, a, &na);
  dsh_base64_use_simd(1);
  int rb = dsh_base64_decode((const char *)data, size, b, &nb);
  int rc = dsh_base64_decode_loose((const char *)data, size, c, &nc);
  if (ra != rb) abort();
  if (ra == DSH_OK) {
    if (na != nb || memcmp(a, b, na)) abort();
    if (rc != DSH_OK || nc != na || memcmp(a, c, na)) abort();
    char *back = malloc(dsh_base64_encoded_len(na) + 1);
    size_t el = dsh_base64_encode(a, na, back);
    if (el != size || memcmp(back, data, size)) abort();
    free(back);
  } else if (ra != DSH_EBASE64 || (rc != DSH_OK && rc != DSH_EBASE64)) {
    abort();
  }
  if (rc == DSH_OK && nc > dsh_base64_decoded_max(size)) abort();
  /* encode the raw input and decode it back on both paths */
  char *enc = malloc(dsh_base64_encoded_len(size) + 1);
  size_t el = dsh_base64_encode(data, size, enc);
  uint8_t *back = malloc(size + 1);
  size_t bn;
  for (int simd = 0; simd < 2; simd++) {
    dsh_base64_use_simd(simd);
    if (dsh_base64_decode(enc, el, back, &bn) != DSH_OK || bn != size || memcmp(back, data, size))
      abort();
  }
  dsh_base64_use_simd(1);
  free(enc);
  free(back);
  free(a);
  free(b);
  free(c);
  return 0;
}
