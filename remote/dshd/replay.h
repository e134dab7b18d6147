/* replay.h: bounded output retention for the process service — a byte ring
 * per output stream with a running total (the stream offset), and a bounded
 * log of arrival marks that keeps the stdout/stderr interleaving.
 *
 * The ring holds the last `cap` bytes of a stream: byte o (0 <= o < total)
 * lives at buf[o % size] while start <= o. Writers read straight into the
 * ring (wspace/commit); readers lend contiguous pieces from any retained
 * offset (peek). The buffer grows by doubling up to cap, so a process that
 * prints little costs little. Writing past the end drops the oldest bytes;
 * whoever must not lose them (a subscriber) has to hold the writer back.
 *
 * The mark log records, in arrival order, runs of bytes of one stream as
 * {stream, end offset}; consecutive reads of the same stream extend the last
 * mark. Marks are numbered by a sequence (seq); the log keeps the newest
 * `max` of them.
 *
 * Pure data structures: no loop, no fds, no JSON. Not thread-safe. */
#ifndef DSHD_REPLAY_H
#define DSHD_REPLAY_H

#include <stddef.h>
#include <stdint.h>

typedef struct dshd_ring {
  uint8_t *buf;
  size_t size;    /* allocated bytes (0 until the first write) */
  size_t cap;     /* most bytes retained */
  uint64_t start; /* oldest retained offset */
  uint64_t total; /* bytes ever written = offset of the next byte */
} dshd_ring_t;

void dshd_ring_init(dshd_ring_t *r, size_t cap);
/* Frees the buffer; total stays, nothing is retained any more. */
void dshd_ring_release(dshd_ring_t *r);

/* Room to write up to want bytes at the write position: grows the buffer
 * (toward cap) when the retained bytes plus want do not fit, then lends the
 * contiguous piece at offset total (*len <= want, >= 1 unless want == 0).
 * Writing there overwrites the oldest retained bytes once the ring is full.
 * Returns 0, or -1 when out of memory (or cap == 0). */
int dshd_ring_wspace(dshd_ring_t *r, size_t want, uint8_t **p, size_t *len);
/* n bytes were written at the position wspace lent. */
void dshd_ring_commit(dshd_ring_t *r, size_t n);
/* Copies n bytes in (wspace + memcpy + commit); returns bytes written (n, or 0 on ENOMEM). */
size_t dshd_ring_write(dshd_ring_t *r, const void *data, size_t n);

/* How many bytes could be written now without dropping offset keep (keep in
 * [start, total]): the free room after growing to cap. */
size_t dshd_ring_room(const dshd_ring_t *r, uint64_t keep);

/* Lends the contiguous retained bytes from off (start <= off < total) up to
 * the wrap or total; returns their count (0 when off is not retained). */
size_t dshd_ring_peek(const dshd_ring_t *r, uint64_t off, const uint8_t **p);

/* Bytes of memory held. */
size_t dshd_ring_memory(const dshd_ring_t *r);

typedef struct dshd_mark {
  uint64_t end;    /* stream offset just past the run */
  uint32_t stream; /* 1 stdout / pty, 2 stderr */
} dshd_mark_t;

typedef struct dshd_marks {
  dshd_mark_t *m;
  size_t size;   /* allocated entries */
  size_t max;    /* most entries retained */
  uint64_t tail; /* seq of the oldest retained mark */
  uint64_t head; /* seq of the next mark */
} dshd_marks_t;

void dshd_marks_init(dshd_marks_t *k, size_t max);
void dshd_marks_release(dshd_marks_t *k);
/* Appends (or extends the newest mark of the same stream). Drops the oldest
 * mark when the log is full (callers that must not lose it check full first).
 * Returns 0, or -1 when out of memory (the mark is then lost). */
int dshd_marks_add(dshd_marks_t *k, uint32_t stream, uint64_t end);
/* 1 when adding a mark for stream would drop the oldest one. */
int dshd_marks_full(const dshd_marks_t *k, uint32_t stream);
/* The mark with sequence seq (tail <= seq < head). */
const dshd_mark_t *dshd_marks_get(const dshd_marks_t *k, uint64_t seq);
size_t dshd_marks_memory(const dshd_marks_t *k);

#endif
