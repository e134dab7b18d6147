/* fuzz_termtext.c: the sanitizer's text does not depend on how the stream is
 * chunked, never holds ESC, CR or BEL, never grows a feed by more than one
 * byte, and keeps valid UTF-8 valid; the text buffer stays within its limits,
 * holds a suffix of what was appended, and pages lines as a naive split does.
 * The first byte picks the chunk size and the limits. */
#include <stdlib.h>
#include <string.h>

#include "dsh/errors.h"
#include "dsh/termtext.h"
#include "dsh/utf8.h"

static size_t sanitize(const uint8_t *s, size_t n, size_t k, uint32_t max_pending, uint8_t *out) {
  dsh_tsan_t *t;
  if (dsh_tsan_new(max_pending, &t)) abort();
  size_t o = 0, got;
  uint32_t fl;
  for (size_t i = 0; i < n; i += k) {
    size_t m = n - i < k ? n - i : k;
    if (dsh_tsan_feed(t, s + i, m, out + o, m + 1, &got, &fl)) abort();
    if (got > m + 1) abort();
    o += got;
  }
  if (dsh_tsan_flush(t, out + o, 1, &got, &fl)) abort();
  dsh_tsan_free(t);
  return o + got;
}

/* Lines of s newest first, naive: split at LF, a final LF ends the last line. */
static void naive_page(const uint8_t *s, size_t n, uint64_t skip, uint64_t count, size_t *lo,
                       size_t *hi, uint64_t *got) {
  size_t starts[4096], nl = 0, end = n && s[n - 1] == '\n' ? n - 1 : n;
  *lo = *hi = 0;
  *got = 0;
  if (!n) return;
  starts[nl++] = 0;
  for (size_t i = 0; i < end; i++)
    if (s[i] == '\n') starts[nl++] = i + 1;
  if (skip >= nl) return;
  size_t last = nl - 1 - (size_t)skip; /* index of the newest line in the page */
  size_t first = count > last + 1 ? 0 : last + 1 - (size_t)count;
  *lo = starts[first];
  *hi = last + 1 < nl ? starts[last + 1] - 1 : end;
  *got = last - first + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4000) return 0;
  size_t k = (size_t)(data[0] & 7) + 1;
  uint32_t max_pending = (uint32_t)(data[0] >> 3) + 1;
  data++;
  size--;
  uint8_t *a = malloc(size + 2), *b = malloc(size + 2);
  size_t na = sanitize(data, size, size ? size : 1, max_pending, a);
  size_t nb = sanitize(data, size, k, max_pending, b);
  if (na != nb || memcmp(a, b, na)) abort();
  for (size_t i = 0; i < na; i++)
    if (a[i] == 0x1b || a[i] == 0x0d || a[i] == 0x07) abort();
  if (dsh_utf8_validate(data, size, NULL) == DSH_OK && dsh_utf8_validate(a, na, NULL) != DSH_OK)
    abort();

  /* the buffer, fed the sanitized text in chunks of k */
  uint64_t max_bytes = (uint64_t)(size ? data[0] & 63 : 0) + 1;
  uint64_t max_lines = size > 1 ? (uint64_t)(data[1] & 7) : 0;
  dsh_textbuf_t *t;
  if (dsh_textbuf_new(max_bytes, max_lines, &t)) abort();
  for (size_t i = 0, m; i < na; i += m) { /* whole code points per append, as the pty feeds it */
    m = na - i < k ? na - i : k;
    while (i + m < na && (a[i + m] & 0xC0) == 0x80) m++;
    if (dsh_textbuf_append(t, a + i, m)) abort();
  }
  dsh_textbuf_stats_t st;
  dsh_textbuf_stats(t, &st);
  if (st.bytes > max_bytes || (max_lines && st.lines > max_lines)) abort();
  if (st.bytes + st.dropped != st.appended || st.appended != na) abort();
  const uint8_t *p;
  size_t n;
  dsh_textbuf_data(t, &p, &n);
  if (n != st.bytes || memcmp(p, a + na - n, n)) abort();
  if (dsh_utf8_validate(a, na, NULL) == DSH_OK && dsh_utf8_validate(p, n, NULL) != DSH_OK) abort();
  for (uint64_t skip = 0; skip < 3; skip++) {
    for (uint64_t count = 1; count < 4; count++) {
      const uint8_t *q;
      size_t qn, lo, hi;
      uint64_t got, want_got;
      dsh_textbuf_tail_lines(t, skip, count, &q, &qn, &got);
      naive_page(p, n, skip, count, &lo, &hi, &want_got);
      if (got != want_got || (got && (qn != hi - lo || memcmp(q, p + lo, qn)))) abort();
    }
  }
  dsh_textbuf_free(t);
  free(a);
  free(b);
  return 0;
}
