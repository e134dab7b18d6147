/* replay.c: the output ring and the arrival-mark log of replay.h.
 *
 * Uses only libc. Never blocks, never touches an fd; a failed allocation
 * leaves the structure as it was (the caller decides what that means). */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

#define RING_MIN_SIZE (16u << 10)
#define MARKS_MIN_SIZE 16u

static size_t min_sz(size_t a, size_t b) {
  return a < b ? a : b;
}

/* --- ring ------------------------------------------------------------------------- */

void dshd_ring_init(dshd_ring_t *r, size_t cap) {
  memset(r, 0, sizeof *r);
  r->cap = cap;
}

void dshd_ring_release(dshd_ring_t *r) {
  free(r->buf);
  r->buf = NULL;
  r->size = 0;
  r->start = r->total;
}

size_t dshd_ring_memory(const dshd_ring_t *r) {
  return r->size;
}

size_t dshd_ring_peek(const dshd_ring_t *r, uint64_t off, const uint8_t **p) {
  if (off < r->start || off >= r->total || !r->size) return 0;
  size_t pos = (size_t)(off % r->size);
  *p = r->buf + pos;
  return (size_t)min_sz((size_t)(r->total - off), r->size - pos);
}

/* Moves the retained bytes into a buffer of newsize (> size), keeping the
 * mapping offset -> buf[offset % size]. */
static int ring_grow(dshd_ring_t *r, size_t newsize) {
  uint8_t *nb = malloc(newsize);
  if (!nb) return -1;
  for (uint64_t o = r->start; o < r->total;) {
    const uint8_t *src;
    size_t n = dshd_ring_peek(r, o, &src);
    while (n) { /* the destination may wrap too */
      size_t pos = (size_t)(o % newsize);
      size_t k = min_sz(n, newsize - pos);
      memcpy(nb + pos, src, k);
      src += k, n -= k, o += k;
    }
  }
  free(r->buf);
  r->buf = nb;
  r->size = newsize;
  return 0;
}

int dshd_ring_wspace(dshd_ring_t *r, size_t want, uint8_t **p, size_t *len) {
  if (r->cap == 0) return -1;
  if (want > r->cap) want = r->cap;
  size_t held = (size_t)(r->total - r->start);
  if (r->size < r->cap && (r->size == 0 || held + want > r->size)) {
    size_t ns = r->size ? r->size : min_sz(RING_MIN_SIZE, r->cap);
    while (ns < held + want && ns < r->cap) ns = ns > r->cap / 2 ? r->cap : ns * 2;
    if (ns > r->cap) ns = r->cap;
    if (ns != r->size && ring_grow(r, ns) < 0 && r->size == 0) return -1;
  }
  size_t pos = (size_t)(r->total % r->size);
  *p = r->buf + pos;
  *len = min_sz(want, r->size - pos);
  return 0;
}

void dshd_ring_commit(dshd_ring_t *r, size_t n) {
  r->total += n;
  if (r->total - r->start > r->size) r->start = r->total - r->size;
}

size_t dshd_ring_write(dshd_ring_t *r, const void *data, size_t n) {
  const uint8_t *s = data;
  size_t done = 0;
  while (done < n) {
    uint8_t *p;
    size_t len;
    if (dshd_ring_wspace(r, n - done, &p, &len) < 0) break;
    memcpy(p, s + done, len);
    dshd_ring_commit(r, len);
    done += len;
  }
  return done;
}

size_t dshd_ring_room(const dshd_ring_t *r, uint64_t keep) {
  if (keep < r->start) keep = r->start;
  if (keep > r->total) keep = r->total;
  uint64_t used = r->total - keep;
  return used >= r->cap ? 0 : (size_t)(r->cap - used);
}

/* --- marks ------------------------------------------------------------------------- */

void dshd_marks_init(dshd_marks_t *k, size_t max) {
  memset(k, 0, sizeof *k);
  k->max = max ? max : 1;
}

void dshd_marks_release(dshd_marks_t *k) {
  free(k->m);
  k->m = NULL;
  k->size = 0;
  k->tail = k->head;
}

size_t dshd_marks_memory(const dshd_marks_t *k) {
  return k->size * sizeof *k->m;
}

const dshd_mark_t *dshd_marks_get(const dshd_marks_t *k, uint64_t seq) {
  if (seq < k->tail || seq >= k->head) return NULL;
  return &k->m[seq % k->size];
}

static int extends_last(const dshd_marks_t *k, uint32_t stream) {
  return k->head > k->tail && k->m[(k->head - 1) % k->size].stream == stream;
}

int dshd_marks_full(const dshd_marks_t *k, uint32_t stream) {
  return !extends_last(k, stream) && k->head - k->tail >= k->max;
}

int dshd_marks_add(dshd_marks_t *k, uint32_t stream, uint64_t end) {
  if (extends_last(k, stream)) {
    k->m[(k->head - 1) % k->size].end = end;
    return 0;
  }
  if (k->head - k->tail >= k->max) k->tail++;
  size_t n = (size_t)(k->head - k->tail);
  if (n + 1 > k->size) {
    size_t ns = k->size ? k->size * 2 : MARKS_MIN_SIZE;
    if (ns > k->max) ns = k->max;
    if (ns < n + 1) ns = n + 1;
    dshd_mark_t *nm = malloc(ns * sizeof *nm);
    if (!nm) return -1;
    for (uint64_t s = k->tail; s < k->head; s++) nm[s % ns] = k->m[s % k->size];
    free(k->m);
    k->m = nm;
    k->size = ns;
  }
  k->m[k->head % k->size] = (dshd_mark_t){.end = end, .stream = stream};
  k->head++;
  return 0;
}
