/* fuzz_multipart.c: dshd's multipart/form-data parser must never read or
 * write out of bounds and must produce the same parts, bytes and verdict
 * however the body is chunked. The first byte picks the chunk size; the body
 * uses the boundary "b0undary". */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "multipart.h"

typedef struct {
  char *log; /* "B<name>\0<filename>\0", data bytes as "D<byte>", "E" */
  size_t n, cap;
  int in_part;
} trace_t;

static void put(trace_t *t, const char *p, size_t n) {
  if (t->n + n > t->cap) {
    t->cap = (t->n + n) * 2 + 64;
    t->log = realloc(t->log, t->cap);
    if (!t->log) abort();
  }
  memcpy(t->log + t->n, p, n);
  t->n += n;
}

static void on_begin(void *ud, const dshd_mp_part_t *part) {
  trace_t *t = ud;
  if (t->in_part) abort();
  t->in_part = 1;
  put(t, "B", 1);
  put(t, part->name, strnlen(part->name, sizeof part->name));
  put(t, "", 1);
  put(t, part->filename, strnlen(part->filename, sizeof part->filename));
  put(t, "", 1);
}

static void on_data(void *ud, const char *p, size_t n) {
  trace_t *t = ud;
  if (!t->in_part) abort();
  for (size_t i = 0; i < n; i++) {
    put(t, "D", 1);
    put(t, p + i, 1);
  }
}

static void on_end(void *ud) {
  trace_t *t = ud;
  if (!t->in_part) abort();
  t->in_part = 0;
  put(t, "E", 1);
}

static int on_stopped(void *ud) {
  return 0;
}

static const dshd_mp_ops_t ops = {on_begin, on_data, on_end, on_stopped};

static int run(const uint8_t *s, size_t n, size_t k, trace_t *t) {
  dshd_mp_t *mp;
  char why[256];
  if (dshd_mp_new("multipart/form-data; boundary=b0undary", &ops, t, &mp, why, sizeof why)) abort();
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i += k) {
    size_t m = n - i < k ? n - i : k;
    rc = dshd_mp_feed(mp, (const char *)s + i, m, why, sizeof why);
  }
  int in_part = 0;
  int verdict = rc ? -1 : dshd_mp_finish(mp, &in_part);
  dshd_mp_free(mp);
  return rc ? -2 : verdict * 10 - in_part;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t k = (size_t)data[0] % 97 + 1;
  data++, size--;
  trace_t whole = {0}, chunked = {0};
  int a = run(data, size, size ? size : 1, &whole);
  int b = run(data, size, k, &chunked);
  /* Parts and bytes delivered before the verdict must agree; a malformed body
   * may be noticed at different points, so compare only when both succeed. */
  if (a == 0 && b == 0 &&
      (whole.n != chunked.n || (whole.n && memcmp(whole.log, chunked.log, whole.n))))
    abort();
  if ((a == 0) != (b == 0)) abort();
  free(whole.log);
  free(chunked.log);
  return 0;
}
