/* process_input.c: input of a process record — SendInput/StreamInput bytes to the
 * stdin pipe or the PTY master, queued in order beyond what the fd takes now
 * (bounded by PROCESS_STDIN_MAX), and CloseStdin once the queue is written out.
 *
 * Uses the record's fd (the proc's, manual_io) and one ev_io on dshd_ev()
 * while bytes wait. Never blocks; never closes the PTY master (it is the
 * output too); a write error (EPIPE: nobody reads) refuses input from then on. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsh/errors.h"
#include "process.h"

void record_input_drop(record_t *pp) {
  ev_io_stop(dshd_ev(), &pp->in_w);
  dsh_buf_free(&pp->in);
}

static void in_close(record_t *pp) {
  record_input_drop(pp);
  if (!pp->pty && pp->in_fd >= 0 && pp->proc) dsh_proc_close_stdin(pp->proc);
  if (!pp->pty) pp->in_fd = -1;
}

/* The fd refused bytes for good (EPIPE: nobody reads any more). */
static void in_fail(record_t *pp, int e) {
  pp->in_err = e ? e : EIO;
  in_close(pp);
}

/* Writes queued bytes: 0 all out, 1 the fd is full, -1 failed. */
static int in_flush(record_t *pp) {
  int e;
  int rc = dsh_buf_flush_fd(&pp->in, pp->in_fd, &e);
  if (rc == DSH_EAGAIN) return 1;
  if (rc == DSH_ESYS) {
    in_fail(pp, e);
    return -1;
  }
  dsh_buf_reset(&pp->in, 64u << 10); /* give back what a large write grew */
  return 0;
}

static void in_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)revents;
  record_t *pp = w->data;
  int rc = in_flush(pp);
  if (rc == 1) return;
  ev_io_stop(ev, w);
  if (rc == 0 && pp->in_close_req) in_close(pp);
}

static int input_error(record_t *pp, int to_pty, const char *why, dshd_err_t *err) {
  (void)pp;
  return dshd_errf(err, "internal", "error writing to %s: %s", to_pty ? "tty" : "stdin", why);
}

int record_input(record_t *pp, int to_pty, const uint8_t *data, size_t n, dshd_err_t *err) {
  if (to_pty && !pp->pty) return input_error(pp, 1, "tty not assigned to process", err);
  if (!to_pty && (pp->pty || pp->in_fd < 0 || pp->in_close_req))
    return input_error(pp, 0, "stdin not enabled or closed", err);
  if (pp->in_err) return input_error(pp, to_pty, record_errtext(pp->in_err), err);
  if (pp->in_fd < 0) return input_error(pp, to_pty, "file already closed", err);
  size_t queued = pp->in.len;
  if (queued + n > PROCESS_STDIN_MAX)
    return dshd_errf(err, "resource_exhausted",
                     "input queue of process %d is full (%zu bytes pending)", pp->pid, queued);
  int e;
  int rc = dsh_buf_write_fd(&pp->in, pp->in_fd, data, n, &e);
  if (rc == DSH_ESYS) {
    in_fail(pp, e);
    return input_error(pp, to_pty, record_errtext(e), err);
  }
  if (rc != DSH_OK) return dshd_errf(err, "resource_exhausted", "out of memory for input");
  if (pp->in.len) ev_io_start(dshd_ev(), &pp->in_w); /* the rest goes out as the fd takes it */
  return 0;
}

int record_close_stdin(record_t *pp, dshd_err_t *err) {
  if (pp->pty)
    return dshd_errf(err, "unknown",
                     "cannot close stdin for PTY process \xe2\x80\x94 send Ctrl+D (0x04) instead");
  if (pp->in_fd < 0 || pp->in_close_req) return 0;
  if (pp->in.len)
    pp->in_close_req = 1; /* in_cb closes once flushed */
  else
    in_close(pp);
  return 0;
}

void record_input_init(record_t *pp) {
  pp->in_fd = dsh_proc_fd(pp->proc, 0); /* pipe, pty master, or -1 (/dev/null) */
  ev_io_init(&pp->in_w, in_cb, pp->in_fd < 0 ? 0 : pp->in_fd, EV_WRITE);
  pp->in_w.data = pp;
}
