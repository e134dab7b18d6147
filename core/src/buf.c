/* buf.c: the byte queue of buf.h and non-blocking writes through it.
 * Uses libc only; never blocks (callers give non-blocking fds). */
#include "dsh/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsh/errors.h"

int dsh_buf_append(dsh_buf_t *b, const void *data, size_t n, size_t limit) {
  if (n == 0) return DSH_OK;
  if (b->off + b->len + n > b->cap) {
    if (b->len + n <= b->cap && b->off) {
      memmove(b->p, b->p + b->off, b->len); /* room enough once compacted */
    } else {
      size_t ncap = b->cap ? b->cap : 4096;
      while (ncap < b->len + n) ncap *= 2;
      if (limit && ncap > limit && b->len + n <= limit) ncap = limit;
      uint8_t *np = malloc(ncap);
      if (!np) return DSH_ENOMEM;
      if (b->len) memcpy(np, b->p + b->off, b->len);
      free(b->p);
      b->p = np;
      b->cap = ncap;
    }
    b->off = 0;
  }
  memcpy(b->p + b->off + b->len, data, n);
  b->len += n;
  return DSH_OK;
}

void dsh_buf_drop(dsh_buf_t *b, size_t n) {
  if (n > b->len) n = b->len;
  b->off += n;
  b->len -= n;
  if (!b->len) b->off = 0;
}

void dsh_buf_reset(dsh_buf_t *b, size_t keep_cap) {
  b->off = b->len = 0;
  if (b->cap > keep_cap) dsh_buf_free(b);
}

void dsh_buf_free(dsh_buf_t *b) {
  free(b->p);
  b->p = NULL;
  b->off = b->len = b->cap = 0;
}

void dsh_buf_shrink(dsh_buf_t *b, size_t above) {
  if (b->cap <= above || b->len > b->cap / 4) return;
  size_t want = b->len > 4096 ? b->len : 4096;
  uint8_t *np = malloc(want);
  if (!np) return; /* keep the big one: correct, only larger */
  if (b->len) memcpy(np, b->p + b->off, b->len);
  free(b->p);
  b->p = np;
  b->cap = want;
  b->off = 0;
}

/* One write loop for both callers: how much of data[0..n) went out. */
static int write_some(int fd, const uint8_t *data, size_t n, size_t *done, int *err) {
  *done = 0;
  while (*done < n) {
    ssize_t w = write(fd, data + *done, n - *done);
    if (w > 0)
      *done += (size_t)w;
    else if (w < 0 && errno == EINTR)
      continue;
    else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return DSH_EAGAIN;
    else {
      *err = w < 0 ? errno : EIO;
      return DSH_ESYS;
    }
  }
  return DSH_OK;
}

int dsh_buf_flush_fd(dsh_buf_t *b, int fd, int *err) {
  size_t done;
  int rc = write_some(fd, dsh_buf_data(b), b->len, &done, err);
  dsh_buf_drop(b, done);
  return rc;
}

int dsh_buf_write_fd(dsh_buf_t *b, int fd, const uint8_t *data, size_t n, int *err) {
  size_t done = 0;
  if (!b->len) {
    int rc = write_some(fd, data, n, &done, err);
    if (rc == DSH_ESYS) return rc;
  }
  return dsh_buf_append(b, data + done, n - done, 0);
}
