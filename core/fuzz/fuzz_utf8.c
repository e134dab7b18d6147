/* fuzz_utf8.c: strict streaming agrees with validation and reproduces valid
 * input at any chunking; lossy streaming is chunking-independent and the
 * identity on valid input; cuts land on boundaries; the ledger's cost-bounded
 * prefixes respect their budget. The first byte picks chunk size and limits. */
#include <stdlib.h>
#include <string.h>

#include "dsh/errors.h"
#include "dsh/ledger.h"
#include "dsh/utf8.h"
#include "ref_cost.h"

static size_t lossy_all(const uint8_t *s, size_t n, size_t k, uint8_t *out) {
  dsh_utf8_state_t st;
  memset(&st, 0, sizeof st);
  size_t o = 0, got;
  for (size_t i = 0; i < n; i += k) {
    size_t m = n - i < k ? n - i : k;
    if (dsh_utf8_feed_lossy(&st, s + i, m, out + o, 3 * m + 4, &got)) abort();
    o += got;
  }
  if (dsh_utf8_finish_lossy(&st, out + o, 3, &got)) abort();
  return o + got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t k = (size_t)(data[0] & 7) + 1, lim = data[0];
  data++;
  size--;
  int valid = dsh_utf8_validate(data, size, NULL) == DSH_OK;

  /* strict streaming */
  uint8_t *out = malloc(3 * size + 8);
  dsh_utf8_state_t st;
  memset(&st, 0, sizeof st);
  size_t o = 0, got;
  int rc = DSH_OK;
  for (size_t i = 0; i < size && !rc; i += k) {
    size_t m = size - i < k ? size - i : k;
    dsh_utf8_state_t before = st;
    rc = dsh_utf8_feed(&st, data + i, m, out + o, m + 4, &got);
    if (rc && (memcmp(&before, &st, sizeof st) || got)) abort(); /* no effect on error */
    o += got;
  }
  if (!rc) rc = dsh_utf8_finish(&st);
  if ((rc == DSH_OK) != valid) abort();
  if (valid && (o != size || memcmp(out, data, size))) abort();

  /* lossy streaming */
  uint8_t *a = malloc(3 * size + 8), *b = malloc(3 * size + 8);
  size_t na = lossy_all(data, size, size ? size : 1, a), nb = lossy_all(data, size, k, b);
  if (na != nb || memcmp(a, b, na)) abort();
  if (dsh_utf8_validate(a, na, NULL)) abort();
  if (valid && (na != size || memcmp(a, data, size))) abort();

  /* cuts */
  size_t p = dsh_utf8_prefix_len(data, size, lim), t = dsh_utf8_tail_start(data, size, lim);
  if (p > lim || p > size) abort();
  if (t > size || (size > lim && t < size - lim)) abort();
  if (valid && (dsh_utf8_validate(data, p, NULL) || dsh_utf8_validate(data + t, size - t, NULL)))
    abort();

  /* ledger costs */
  size_t cost = dsh_json_string_cost(data, size);
  if (cost != ref_cost(data, size)) abort();
  if (cost < size + 2 || cost > 6 * size + 2) abort();
  if (dsh_json_string_prefix(data, size, cost) != size) abort();
  size_t q = dsh_json_string_prefix(data, size, lim);
  if (lim >= 2 ? dsh_json_string_cost(data, q) > lim : q != 0) abort();
  if (valid && dsh_utf8_validate(data, q, NULL)) abort();

  free(out);
  free(a);
  free(b);
  return 0;
}
