/* test_buf.c: the byte queue (growth, compaction, the limit, reset and
 * shrink) and non-blocking writes through it on a real pipe: direct writes,
 * the queued remainder keeping its order, EAGAIN, and write failures. */
#define _GNU_SOURCE /* pipe2, F_GETPIPE_SZ */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dsh/buf.h"
#include "dsh/errors.h"

static uint8_t pattern(size_t i) {
  return (uint8_t)(i * 7 + 3);
}

static void fill(uint8_t *p, size_t from, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = pattern(from + i);
}

/* The queued bytes are bytes from..from+len of the pattern. */
static int holds(const dsh_buf_t *b, size_t from) {
  const uint8_t *d = dsh_buf_data(b);
  for (size_t i = 0; i < b->len; i++)
    if (d[i] != pattern(from + i)) return 0;
  return 1;
}

static void queue(void) {
  dsh_buf_t b = {0};
  uint8_t chunk[3000] = {0};
  CHECK_EQ_INT(dsh_buf_append(&b, chunk, 0, 0), DSH_OK); /* nothing: no storage yet */
  CHECK(b.p == NULL);
  fill(chunk, 0, 3000);
  CHECK_EQ_INT(dsh_buf_append(&b, chunk, 3000, 0), DSH_OK);
  CHECK_EQ_INT(b.cap, 4096); /* first storage */
  fill(chunk, 3000, 3000);
  CHECK_EQ_INT(dsh_buf_append(&b, chunk, 3000, 0), DSH_OK);
  CHECK_EQ_INT(b.cap, 8192); /* doubled */
  CHECK_EQ_INT(b.len, 6000);
  CHECK(holds(&b, 0));

  dsh_buf_drop(&b, 5000); /* from the front */
  CHECK_EQ_INT(b.len, 1000);
  CHECK_EQ_INT(b.off, 5000);
  CHECK(holds(&b, 5000));
  /* 1000 queued + 3000 new fit in 8192 once compacted: no growth */
  fill(chunk, 6000, 3000);
  CHECK_EQ_INT(dsh_buf_append(&b, chunk, 3000, 0), DSH_OK);
  CHECK_EQ_INT(b.cap, 8192);
  CHECK_EQ_INT(b.off, 0);
  CHECK_EQ_INT(b.len, 4000);
  CHECK(holds(&b, 5000));

  dsh_buf_drop(&b, 100000); /* more than queued: empties, and rewinds */
  CHECK_EQ_INT(b.len, 0);
  CHECK_EQ_INT(b.off, 0);

  /* reset keeps storage up to keep_cap, frees a larger one */
  dsh_buf_append(&b, chunk, 10, 0);
  dsh_buf_reset(&b, 8192);
  CHECK(b.p != NULL);
  CHECK_EQ_INT(b.len, 0);
  dsh_buf_reset(&b, 4096);
  CHECK(b.p == NULL);
  CHECK_EQ_INT(b.cap, 0);
  dsh_buf_free(&b);
  dsh_buf_free(&b); /* idempotent */
}

static void limit(void) {
  dsh_buf_t b = {0};
  uint8_t *big = calloc(1, 20000);
  /* doubling would give 32768; the limit caps the storage at 20000 */
  CHECK_EQ_INT(dsh_buf_append(&b, big, 5000, 20000), DSH_OK);
  CHECK_EQ_INT(dsh_buf_append(&b, big, 15000, 20000), DSH_OK);
  CHECK_EQ_INT(b.cap, 20000);
  /* beyond the limit the queue still takes the bytes (the limit bounds
   * growth, callers bound what they append) */
  CHECK_EQ_INT(dsh_buf_append(&b, big, 1, 20000), DSH_OK);
  CHECK_EQ_INT(b.len, 20001);
  CHECK(b.cap >= 20001);
  dsh_buf_free(&b);
  free(big);
}

static void shrink(void) {
  dsh_buf_t b = {0};
  uint8_t *big = malloc(1 << 20);
  fill(big, 0, 1 << 20);
  dsh_buf_append(&b, big, 1 << 20, 0);
  size_t cap = b.cap;
  dsh_buf_shrink(&b, 65536); /* full: kept */
  CHECK_EQ_INT(b.cap, cap);
  dsh_buf_drop(&b, (1 << 20) - 100);
  dsh_buf_shrink(&b, 2 << 20); /* not above the threshold: kept */
  CHECK_EQ_INT(b.cap, cap);
  dsh_buf_shrink(&b, 65536); /* a quarter or less in use: down to 4 KiB */
  CHECK_EQ_INT(b.cap, 4096);
  CHECK_EQ_INT(b.len, 100);
  CHECK(holds(&b, (1 << 20) - 100));
  dsh_buf_free(&b);
  free(big);
}

static int nonblocking_pipe(int fds[2]) {
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
  return 0;
}

/* Reads everything the pipe holds now into out at *n. */
static void drain_pipe(int fd, uint8_t *out, size_t *n) {
  ssize_t k;
  while ((k = read(fd, out + *n, 65536)) > 0) *n += (size_t)k;
}

static void write_fd(void) {
  int fds[2];
  CHECK_EQ_INT(nonblocking_pipe(fds), 0);
  int pipe_cap = fcntl(fds[1], F_GETPIPE_SZ);
  CHECK(pipe_cap > 0);
  size_t total = (size_t)pipe_cap * 3 + 50;
  uint8_t *data = malloc(total), *got = malloc(total + 65536);
  fill(data, 0, total);
  dsh_buf_t b = {0};
  int err = 0;

  /* nothing queued: written directly, nothing kept */
  CHECK_EQ_INT(dsh_buf_write_fd(&b, fds[1], data, 100, &err), DSH_OK);
  CHECK_EQ_INT(b.len, 0);
  /* more than the pipe takes: the rest is queued */
  CHECK_EQ_INT(dsh_buf_write_fd(&b, fds[1], data + 100, total - 150, &err), DSH_OK);
  CHECK(b.len >= total - 150 - (size_t)pipe_cap);
  CHECK(holds(&b, total - 50 - b.len));
  /* while bytes are queued, new ones go behind them, not to the fd */
  size_t queued = b.len;
  CHECK_EQ_INT(dsh_buf_write_fd(&b, fds[1], data + total - 50, 50, &err), DSH_OK);
  CHECK_EQ_INT(b.len, queued + 50);
  CHECK(holds(&b, total - b.len));
  CHECK_EQ_INT(dsh_buf_flush_fd(&b, fds[1], &err), DSH_EAGAIN); /* the pipe is still full */

  size_t n = 0;
  while (n < total) {
    drain_pipe(fds[0], got, &n);
    int rc = dsh_buf_flush_fd(&b, fds[1], &err);
    CHECK(rc == DSH_OK || rc == DSH_EAGAIN);
    if (rc == DSH_OK) CHECK_EQ_INT(b.len, 0);
  }
  drain_pipe(fds[0], got, &n);
  CHECK_EQ_INT(n, total);
  CHECK(memcmp(got, data, total) == 0);                     /* every byte, in order */
  CHECK_EQ_INT(dsh_buf_flush_fd(&b, fds[1], &err), DSH_OK); /* nothing left */

  /* the reader went away: EPIPE (SIGPIPE is ignored, as the loop does) */
  close(fds[0]);
  err = 0;
  CHECK_EQ_INT(dsh_buf_write_fd(&b, fds[1], data, 10, &err), DSH_ESYS);
  CHECK_EQ_INT(err, EPIPE);
  CHECK_EQ_INT(b.len, 0); /* a failed write queues nothing */
  dsh_buf_append(&b, data, 10, 0);
  err = 0;
  CHECK_EQ_INT(dsh_buf_flush_fd(&b, fds[1], &err), DSH_ESYS);
  CHECK_EQ_INT(err, EPIPE);
  CHECK_EQ_INT(b.len, 10); /* still queued for the owner to drop */
  close(fds[1]);
  err = 0;
  CHECK_EQ_INT(dsh_buf_flush_fd(&b, fds[1], &err), DSH_ESYS);
  CHECK_EQ_INT(err, EBADF);
  dsh_buf_free(&b);
  free(data);
  free(got);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  queue();
  limit();
  shrink();
  write_fd();
  CHECK_DONE();
}
