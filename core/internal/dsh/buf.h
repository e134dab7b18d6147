/* buf.h: a byte queue — append at the end, drop from the front — and the
 * non-blocking fd writing built on it.
 *
 * Shared by the HTTP client's buffers, the stdin queues of processes (the
 * core's and dshd's) and the input of the envelope and LSP decoders. Growth
 * doubles, and the queue is compacted before it grows. Internal to the core
 * and dshd: not part of the FFI surface, not exported from libdsh.so. The
 * owner embeds a zeroed dsh_buf_t and releases it with dsh_buf_free(). */
#ifndef DSH_BUF_H
#define DSH_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_buf {
  uint8_t *p;
  size_t off, len, cap;
} dsh_buf_t;

static inline const uint8_t *dsh_buf_data(const dsh_buf_t *b) {
  return b->p + b->off;
}

/* Appends n bytes. Capacity doubles but stops at limit when limit > 0 and the
 * queued bytes fit in it. DSH_OK or DSH_ENOMEM. */
int dsh_buf_append(dsh_buf_t *b, const void *data, size_t n, size_t limit);

/* Drops n bytes from the front. */
void dsh_buf_drop(dsh_buf_t *b, size_t n);

/* Empties the queue; frees its storage if it grew beyond keep_cap. */
void dsh_buf_reset(dsh_buf_t *b, size_t keep_cap);

void dsh_buf_free(dsh_buf_t *b);

/* Gives back a buffer that grew beyond above once at most a quarter of it is
 * in use (after one huge message, say); keeps at least 4 KiB. */
void dsh_buf_shrink(dsh_buf_t *b, size_t above);

/* Writes queued bytes to the non-blocking fd until none is left (DSH_OK) or
 * the fd is full (DSH_EAGAIN). DSH_ESYS with *err = errno when a write fails
 * (EIO for a write that took nothing). */
int dsh_buf_flush_fd(dsh_buf_t *b, int fd, int *err);

/* Writes data to fd directly while nothing is queued, and queues whatever the
 * fd does not take now, so the bytes keep their order. DSH_OK, DSH_ENOMEM, or
 * DSH_ESYS with *err = errno. */
int dsh_buf_write_fd(dsh_buf_t *b, int fd, const uint8_t *data, size_t n, int *err);

#endif
