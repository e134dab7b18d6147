/* pinput.c: input of a process record — SendInput/StreamInput bytes to the
 * stdin pipe or the PTY master, queued in order beyond what the fd takes now
 * (bounded by PSVC_STDIN_MAX), and CloseStdin once the queue is written out.
 *
 * Uses the record's fd (the proc's, manual_io) and one ev_io on dshd_ev()
 * while bytes wait. Never blocks; never closes the PTY master (it is the
 * output too); a write error (EPIPE: nobody reads) refuses input from then on. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pservice.h"

void pinput_drop(pproc_t *pp) {
  ev_io_stop(dshd_ev(), &pp->in_w);
  free(pp->in_buf);
  pp->in_buf = NULL;
  pp->in_start = pp->in_end = pp->in_cap = 0;
}

static void in_close(pproc_t *pp) {
  pinput_drop(pp);
  if (!pp->pty && pp->in_fd >= 0 && pp->proc) dsh_proc_close_stdin(pp->proc);
  if (!pp->pty) pp->in_fd = -1;
}

/* The fd refused bytes for good (EPIPE: nobody reads any more). */
static void in_fail(pproc_t *pp, int e) {
  pp->in_err = e ? e : EIO;
  in_close(pp);
}

/* Writes queued bytes: 0 all out, 1 the fd is full, -1 failed. */
static int in_flush(pproc_t *pp) {
  while (pp->in_start < pp->in_end) {
    ssize_t n = write(pp->in_fd, pp->in_buf + pp->in_start, pp->in_end - pp->in_start);
    if (n > 0)
      pp->in_start += (size_t)n;
    else if (n < 0 && errno == EINTR)
      continue;
    else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 1;
    else {
      in_fail(pp, n < 0 ? errno : EIO);
      return -1;
    }
  }
  pp->in_start = pp->in_end = 0;
  if (pp->in_cap > (64u << 10)) { /* give back what a large write grew */
    free(pp->in_buf);
    pp->in_buf = NULL;
    pp->in_cap = 0;
  }
  return 0;
}

static void in_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)revents;
  pproc_t *pp = w->data;
  int rc = in_flush(pp);
  if (rc == 1) return;
  ev_io_stop(ev, w);
  if (rc == 0 && pp->in_close_req) in_close(pp);
}

static int input_error(pproc_t *pp, int to_pty, const char *why, dshd_err_t *err) {
  (void)pp;
  return dshd_errf(err, "internal", "error writing to %s: %s", to_pty ? "tty" : "stdin", why);
}

int pproc_input(pproc_t *pp, int to_pty, const uint8_t *data, size_t n, dshd_err_t *err) {
  if (to_pty && !pp->pty) return input_error(pp, 1, "tty not assigned to process", err);
  if (!to_pty && (pp->pty || pp->in_fd < 0 || pp->in_close_req))
    return input_error(pp, 0, "stdin not enabled or closed", err);
  if (pp->in_err) return input_error(pp, to_pty, pproc_errtext(pp->in_err), err);
  if (pp->in_fd < 0) return input_error(pp, to_pty, "file already closed", err);
  size_t queued = pp->in_end - pp->in_start;
  if (queued + n > PSVC_STDIN_MAX)
    return dshd_errf(err, "resource_exhausted",
                     "input queue of process %d is full (%zu bytes pending)", pp->pid, queued);
  size_t off = 0;
  if (!queued) { /* nothing waits: try the fd right away */
    while (off < n) {
      ssize_t w = write(pp->in_fd, data + off, n - off);
      if (w > 0)
        off += (size_t)w;
      else if (w < 0 && errno == EINTR)
        continue;
      else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      else {
        int e = w < 0 ? errno : EIO;
        in_fail(pp, e);
        return input_error(pp, to_pty, pproc_errtext(e), err);
      }
    }
  }
  if (off == n) return 0;
  size_t rest = n - off;
  if (pp->in_start > 0) {
    memmove(pp->in_buf, pp->in_buf + pp->in_start, pp->in_end - pp->in_start);
    pp->in_end -= pp->in_start;
    pp->in_start = 0;
  }
  if (pp->in_cap - pp->in_end < rest) {
    size_t cap = pp->in_cap ? pp->in_cap : 4096;
    while (cap - pp->in_end < rest) cap *= 2;
    uint8_t *nb = realloc(pp->in_buf, cap);
    if (!nb) return dshd_errf(err, "resource_exhausted", "out of memory for input");
    pp->in_buf = nb;
    pp->in_cap = cap;
  }
  memcpy(pp->in_buf + pp->in_end, data + off, rest);
  pp->in_end += rest;
  ev_io_start(dshd_ev(), &pp->in_w);
  return 0;
}

int pproc_close_stdin(pproc_t *pp, dshd_err_t *err) {
  if (pp->pty)
    return dshd_errf(err, "unknown",
                     "cannot close stdin for PTY process \xe2\x80\x94 send Ctrl+D (0x04) instead");
  if (pp->in_fd < 0 || pp->in_close_req) return 0;
  if (pp->in_end > pp->in_start)
    pp->in_close_req = 1; /* in_cb closes once flushed */
  else
    in_close(pp);
  return 0;
}

void pinput_init(pproc_t *pp) {
  pp->in_fd = dsh_proc_fd(pp->proc, 0); /* pipe, pty master, or -1 (/dev/null) */
  ev_io_init(&pp->in_w, in_cb, pp->in_fd < 0 ? 0 : pp->in_fd, EV_WRITE);
  pp->in_w.data = pp;
}
