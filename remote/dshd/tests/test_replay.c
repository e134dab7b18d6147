/* test_replay.c: the output ring and mark log of remote/dshd/replay.c,
 * checked against a flat reference copy of everything written. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "replay.h"

static uint32_t rnd_state = 12345;
static uint32_t rnd(void) {
  rnd_state = rnd_state * 1103515245u + 12345u;
  return rnd_state >> 8;
}

/* Every retained byte equals the reference, read piecewise through peek. */
static void check_retained(const dshd_ring_t *r, const uint8_t *ref) {
  CHECK(r->total - r->start <= r->cap);
  CHECK(r->total - r->start <= r->size);
  for (uint64_t o = r->start; o < r->total;) {
    const uint8_t *p;
    size_t n = dshd_ring_peek(r, o, &p);
    CHECK(n > 0);
    if (!n) return;
    CHECK(memcmp(p, ref + o, n) == 0);
    o += n;
  }
}

static void test_ring_small(void) {
  dshd_ring_t r;
  dshd_ring_init(&r, 10);
  const uint8_t *p;
  CHECK_EQ_INT(dshd_ring_peek(&r, 0, &p), 0);
  CHECK_EQ_INT(dshd_ring_room(&r, 0), 10);
  CHECK_EQ_INT(dshd_ring_write(&r, "abcdef", 6), 6);
  CHECK_EQ_INT(r.total, 6);
  CHECK_EQ_INT(r.start, 0);
  CHECK_EQ_INT(dshd_ring_room(&r, 0), 4);
  CHECK_EQ_INT(dshd_ring_room(&r, 6), 10);
  size_t n = dshd_ring_peek(&r, 2, &p);
  CHECK_MEM(p, n, "cdef", 4);
  CHECK_EQ_INT(dshd_ring_write(&r, "ghijkl", 6), 6); /* drops "ab" */
  CHECK_EQ_INT(r.total, 12);
  CHECK_EQ_INT(r.start, 2);
  CHECK_EQ_INT(dshd_ring_peek(&r, 1, &p), 0);
  n = dshd_ring_peek(&r, 2, &p); /* up to the wrap */
  CHECK_MEM(p, n, "cdefghij", 8);
  n = dshd_ring_peek(&r, 10, &p);
  CHECK_MEM(p, n, "kl", 2);
  CHECK_EQ_INT(dshd_ring_peek(&r, 12, &p), 0);
  dshd_ring_release(&r);
  CHECK_EQ_INT(r.start, 12);
  CHECK_EQ_INT(r.total, 12);
  CHECK_EQ_INT(dshd_ring_memory(&r), 0);
  CHECK_EQ_INT(dshd_ring_write(&r, "m", 1), 1); /* usable again after release */
  n = dshd_ring_peek(&r, 12, &p);
  CHECK_MEM(p, n, "m", 1);
  dshd_ring_release(&r);

  dshd_ring_t z;
  dshd_ring_init(&z, 0);
  uint8_t *w;
  size_t len;
  CHECK(dshd_ring_wspace(&z, 5, &w, &len) < 0);
  CHECK_EQ_INT(dshd_ring_write(&z, "x", 1), 0);
}

/* Random writes of random sizes, with and without a reader holding the
 * writer back, across buffer growth and wrap-around. */
static void test_ring_random(size_t cap, int backpressure) {
  size_t total_max = cap * 7 + 12345;
  uint8_t *ref = malloc(total_max);
  for (size_t i = 0; i < total_max; i++) ref[i] = (uint8_t)rnd();
  dshd_ring_t r;
  dshd_ring_init(&r, cap);
  uint64_t reader = 0; /* bytes the reader has consumed */
  while (r.total < total_max) {
    size_t want = 1 + rnd() % (cap / 3 + 2);
    if (want > total_max - r.total) want = total_max - r.total;
    if (backpressure) {
      size_t room = dshd_ring_room(&r, reader);
      if (want > room) want = room;
      if (!want) { /* the reader catches up a bit */
        reader += 1 + rnd() % (r.total - reader);
        continue;
      }
    }
    uint8_t *p;
    size_t len;
    CHECK(dshd_ring_wspace(&r, want, &p, &len) == 0);
    CHECK(len >= 1 && len <= want);
    memcpy(p, ref + r.total, len);
    dshd_ring_commit(&r, len);
    if (backpressure) {
      CHECK(r.start <= reader);
      const uint8_t *q;
      size_t n = dshd_ring_peek(&r, reader, &q);
      if (reader < r.total) CHECK(n > 0 && memcmp(q, ref + reader, n) == 0);
      if (rnd() % 3 == 0) reader += n;
    }
    if (rnd() % 17 == 0) check_retained(&r, ref);
  }
  check_retained(&r, ref);
  CHECK(r.size <= cap);
  CHECK_EQ_INT(r.total - r.start, r.size < cap ? r.total - r.start : cap);
  dshd_ring_release(&r);
  free(ref);
}

static void test_marks(void) {
  dshd_marks_t k;
  dshd_marks_init(&k, 4);
  CHECK(dshd_marks_get(&k, 0) == NULL);
  CHECK_EQ_INT(dshd_marks_add(&k, 1, 10), 0);
  CHECK_EQ_INT(dshd_marks_add(&k, 1, 20), 0); /* extends */
  CHECK_EQ_INT(k.head - k.tail, 1);
  CHECK_EQ_INT(dshd_marks_get(&k, 0)->end, 20);
  dshd_marks_add(&k, 2, 5);
  dshd_marks_add(&k, 1, 30);
  dshd_marks_add(&k, 2, 9);
  CHECK_EQ_INT(k.head, 4);
  CHECK(dshd_marks_full(&k, 1));
  CHECK(!dshd_marks_full(&k, 2)); /* would extend */
  dshd_marks_add(&k, 2, 12);
  CHECK_EQ_INT(k.head, 4);
  dshd_marks_add(&k, 1, 40); /* drops the oldest */
  CHECK_EQ_INT(k.tail, 1);
  CHECK_EQ_INT(k.head, 5);
  CHECK(dshd_marks_get(&k, 0) == NULL);
  const dshd_mark_t *m = dshd_marks_get(&k, 1);
  CHECK(m && m->stream == 2 && m->end == 5);
  m = dshd_marks_get(&k, 3);
  CHECK(m && m->stream == 2 && m->end == 12);
  m = dshd_marks_get(&k, 4);
  CHECK(m && m->stream == 1 && m->end == 40);
  dshd_marks_release(&k);
  CHECK_EQ_INT(k.tail, k.head);

  /* growth keeps the order across many alternating marks */
  dshd_marks_init(&k, 1000);
  for (uint64_t i = 0; i < 3000; i++) dshd_marks_add(&k, 1 + (uint32_t)(i % 2), i);
  CHECK_EQ_INT(k.head, 3000);
  CHECK_EQ_INT(k.tail, 2000);
  for (uint64_t s = k.tail; s < k.head; s++) {
    m = dshd_marks_get(&k, s);
    CHECK(m && m->end == s && m->stream == 1 + s % 2);
  }
  CHECK(dshd_marks_memory(&k) <= 1000 * sizeof(dshd_mark_t));
  dshd_marks_release(&k);
}

int main(void) {
  test_ring_small();
  size_t caps[] = {1, 2, 3, 7, 100, 4096, 16384, 65536, 100000, 1 << 20};
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
    test_ring_random(caps[i], 0);
    test_ring_random(caps[i], 1);
  }
  test_marks();
  CHECK_DONE();
}
