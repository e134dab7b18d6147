/* proc.c: a spawned process group on the loop — reaping, quiescence, the
 * TERM-then-KILL ladder, buffered output with back-pressure, buffered stdin.
 *
 * Uses libev on the default loop (ev_child, ev_io, ev_timer) and proc_spawn.c
 * for clone/exec. Callbacks only update C state and emit {kind, id, status, n}
 * to the loop queue or to the owner's notify function. Never calls waitpid
 * (libev reaps every child, including orphans reparented to us as subreaper),
 * never signals a group it has seen empty (its pgid may be reused). */
#include "dsh/proc.h"

#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "dsh/buf.h"
#include "dsh/errors.h"
#include "dsh/fail.h"
#include "dsh/loop_ev.h"
#include "proc_internal.h"

#define DEFAULT_MAX_BUFFER 65536
#define QUIET_FIRST_MS 1
#define QUIET_MAX_MS 50

struct out_stream {
  ev_io w;
  int idx; /* 1 stdout (or pty), 2 stderr */
  int fd;  /* -1 when not piped or closed after EOF */
  int piped;
  int eof;
  int notified; /* DATA queued and no peek since */
  uint8_t *buf; /* max_buf bytes, allocated on first read */
  size_t start, end;
  uint64_t total;
};

struct dsh_proc {
  dsh_loop_t *loop;
  struct ev_loop *ev;
  uint64_t id;
  int pid;
  int pty, manual;
  int master; /* pty master or -1 */
  size_t max_buf;
  dsh_proc_notify_fn notify;
  void *notify_ud;

  struct out_stream out[3]; /* [1] and [2] */

  ev_io in_w;
  int in_fd;
  int in_close_req, in_broken;
  dsh_buf_t in; /* stdin bytes the fd has not taken yet */

  ev_child child_w;
  ev_timer quiet_t, kill_t;
  int64_t quiet_delay_ms;
  int running, exit_code, term_signal, core_dumped;
  int gone; /* leader reaped and the group seen empty */
  int quiet_reported;
  int term_requested, kill_sent;
  dsh_proc_t *wait_next, *wait_prev; /* procs waiting for quiescence */
};

static int64_t g_live;
static dsh_proc_t *g_waiting; /* list of procs with a reaped leader and members left */
static ev_child g_any_child;  /* pid 0: every reap re-checks the waiting procs */
static struct ev_loop *g_any_ev;

static void emit(dsh_proc_t *p, uint32_t kind, int32_t status, int64_t n) {
  if (p->notify)
    p->notify(p->notify_ud, p, kind, status, n);
  else
    dsh_loop_push(p->loop, kind, p->id, status, n);
}

/* --- quiescence ------------------------------------------------------------ */

static int group_gone(dsh_proc_t *p) {
  if (p->gone) return 1;
  if (p->running) return 0;
  if (kill(-p->pid, 0) < 0 && errno == ESRCH) p->gone = 1;
  return p->gone;
}

static void any_child_cb(struct ev_loop *ev, ev_child *w, int revents);

static void wait_list_add(dsh_proc_t *p) {
  if (p->wait_prev || g_waiting == p) return;
  p->wait_next = g_waiting;
  p->wait_prev = NULL;
  if (g_waiting) g_waiting->wait_prev = p;
  g_waiting = p;
  if (!ev_is_active(&g_any_child)) {
    g_any_ev = p->ev;
    ev_child_init(&g_any_child, any_child_cb, 0, 0);
    ev_child_start(p->ev, &g_any_child);
  }
}

static void wait_list_remove(dsh_proc_t *p) {
  if (!p->wait_prev && g_waiting != p) return;
  if (p->wait_prev)
    p->wait_prev->wait_next = p->wait_next;
  else
    g_waiting = p->wait_next;
  if (p->wait_next) p->wait_next->wait_prev = p->wait_prev;
  p->wait_next = p->wait_prev = NULL;
  if (!g_waiting && ev_is_active(&g_any_child)) ev_child_stop(g_any_ev, &g_any_child);
}

/* From loop callbacks only: report QUIET once, or keep waiting for it. */
static void settle_quiet(dsh_proc_t *p) {
  if (p->quiet_reported || p->running) return;
  if (!group_gone(p)) {
    if (!ev_is_active(&p->quiet_t) && !p->wait_prev && g_waiting != p) {
      p->quiet_delay_ms = QUIET_FIRST_MS;
      ev_timer_set(&p->quiet_t, dsh_ms_to_ev(QUIET_FIRST_MS), 0.);
      ev_timer_start(p->ev, &p->quiet_t);
    }
    wait_list_add(p);
    return;
  }
  p->quiet_reported = 1;
  wait_list_remove(p);
  ev_timer_stop(p->ev, &p->quiet_t);
  ev_timer_stop(p->ev, &p->kill_t);
  emit(p, DSH_EV_PROC_QUIET, 0, 0);
}

static void quiet_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)revents;
  dsh_proc_t *p = w->data;
  settle_quiet(p);
  if (!p->quiet_reported) {
    p->quiet_delay_ms *= 2;
    if (p->quiet_delay_ms > QUIET_MAX_MS) p->quiet_delay_ms = QUIET_MAX_MS;
    ev_timer_set(w, dsh_ms_to_ev(p->quiet_delay_ms), 0.);
    ev_timer_start(ev, w);
  }
}

static void any_child_cb(struct ev_loop *ev, ev_child *w, int revents) {
  (void)ev, (void)w, (void)revents;
  /* Restart from the head after each report: emit() may reach the owner. */
  for (;;) {
    dsh_proc_t *p = g_waiting;
    while (p && !group_gone(p)) p = p->wait_next;
    if (!p) return;
    settle_quiet(p);
  }
}

static void child_cb(struct ev_loop *ev, ev_child *w, int revents) {
  (void)revents;
  dsh_proc_t *p = w->data;
  ev_child_stop(ev, w);
  int st = w->rstatus;
  p->running = 0;
  if (WIFEXITED(st)) {
    p->exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    p->term_signal = WTERMSIG(st);
    p->core_dumped = WCOREDUMP(st) ? 1 : 0;
  }
  emit(p, DSH_EV_PROC_EXIT, 0, st);
  settle_quiet(p);
}

static void kill_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  dsh_proc_t *p = w->data;
  if (group_gone(p)) return;
  kill(-p->pid, SIGKILL);
  p->kill_sent = 1;
}

/* --- output ------------------------------------------------------------------ */

static void out_close(dsh_proc_t *p, struct out_stream *s) {
  ev_io_stop(p->ev, &s->w);
  if (s->fd >= 0 && s->fd != p->master) close(s->fd);
  s->fd = -1;
}

static void out_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)ev, (void)revents;
  dsh_proc_t *p = w->data;
  struct out_stream *s = (struct out_stream *)w; /* w is the first member */
  size_t added = 0;
  int eof = 0;
  int32_t eof_status = 0;
  for (;;) {
    if (!s->buf && !(s->buf = malloc(p->max_buf))) {
      eof = 1, eof_status = DSH_ENOMEM;
      break;
    }
    if (s->end == p->max_buf && s->start > 0) {
      memmove(s->buf, s->buf + s->start, s->end - s->start);
      s->end -= s->start;
      s->start = 0;
    }
    size_t room = p->max_buf - s->end;
    if (room == 0) { /* full: back-pressure until consume */
      ev_io_stop(p->ev, &s->w);
      break;
    }
    ssize_t n = read(s->fd, s->buf + s->end, room);
    if (n > 0) {
      s->end += (size_t)n;
      s->total += (uint64_t)n;
      added += (size_t)n;
      if ((size_t)n < room) break; /* drained; level-triggered io calls again */
    } else if (n == 0) {
      eof = 1;
      break;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else {
      /* a pty master reads EIO once every slave fd is closed: that is EOF */
      if (!(p->pty && errno == EIO)) eof_status = DSH_ESYS;
      eof = 1;
      break;
    }
  }
  if (added && !s->notified) {
    s->notified = 1;
    emit(p, DSH_EV_PROC_DATA, 0, s->idx);
  }
  if (eof) {
    s->eof = 1;
    out_close(p, s);
    emit(p, DSH_EV_PROC_EOF, eof_status, s->idx);
  }
}

int dsh_proc_peek(dsh_proc_t *p, int stream, const uint8_t **data, size_t *n) {
  if (!p || !data || !n || (stream != 1 && stream != 2)) return DSH_EINVAL;
  if (p->manual) return DSH_ESTATE;
  struct out_stream *s = &p->out[stream];
  *data = NULL;
  *n = 0;
  s->notified = 0;
  if (s->end > s->start) {
    *data = s->buf + s->start;
    *n = s->end - s->start;
    return DSH_OK;
  }
  return (s->eof || !s->piped) ? DSH_EEOF : DSH_EAGAIN;
}

int dsh_proc_consume(dsh_proc_t *p, int stream, size_t n) {
  if (!p || (stream != 1 && stream != 2)) return DSH_EINVAL;
  if (p->manual) return DSH_ESTATE;
  struct out_stream *s = &p->out[stream];
  if (n > s->end - s->start) return DSH_EINVAL;
  s->start += n;
  if (s->start == s->end) s->start = s->end = 0;
  if (s->fd >= 0 && !s->eof && !ev_is_active(&s->w) && s->end - s->start < p->max_buf)
    ev_io_start(p->ev, &s->w);
  return DSH_OK;
}

/* --- stdin ------------------------------------------------------------------- */

static void in_close(dsh_proc_t *p) {
  ev_io_stop(p->ev, &p->in_w);
  if (p->in_fd >= 0 && p->in_fd != p->master) close(p->in_fd);
  p->in_fd = -1;
}

/* Empties the queue, giving back what a large write grew. */
static void in_reset_buffer(dsh_proc_t *p) {
  dsh_buf_reset(&p->in, p->max_buf);
}

/* The fd refused bytes for good (EPIPE: the reader is gone). */
static int in_fail(dsh_proc_t *p, int e) {
  p->in_broken = 1;
  in_reset_buffer(p);
  if (p->master >= 0)
    ev_io_stop(p->ev, &p->in_w); /* keep the master: it is also stdout */
  else
    in_close(p);
  return (e == EPIPE || e == EIO) ? DSH_ECLOSED : DSH_ESYS;
}

/* Writes pending bytes; returns 0 when all are out, 1 when the fd is full,
 * or a negative status when it failed. */
static int in_flush(dsh_proc_t *p) {
  int e;
  int rc = dsh_buf_flush_fd(&p->in, p->in_fd, &e);
  if (rc == DSH_EAGAIN) return 1;
  if (rc == DSH_ESYS) return in_fail(p, e);
  in_reset_buffer(p);
  return 0;
}

static void in_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)ev, (void)w, (void)revents;
  dsh_proc_t *p = w->data;
  int rc = in_flush(p);
  if (rc == 1) return;
  ev_io_stop(p->ev, &p->in_w);
  if (rc == 0 && p->in_close_req) in_close(p);
  emit(p, DSH_EV_PROC_DRAIN, rc < 0 ? rc : 0, 0);
}

int dsh_proc_write(dsh_proc_t *p, const uint8_t *data, size_t n) {
  if (!p || (!data && n)) return DSH_EINVAL;
  if (p->manual) return DSH_ESTATE;
  if (p->in_broken) return DSH_ECLOSED;
  if (p->in_fd < 0 || p->in_close_req) return DSH_ESTATE;
  int e;
  int rc = dsh_buf_write_fd(&p->in, p->in_fd, data, n, &e);
  if (rc == DSH_ESYS) return in_fail(p, e);
  if (rc != DSH_OK) return rc;
  if (p->in.len) ev_io_start(p->ev, &p->in_w); /* the rest goes out as the fd takes it */
  return DSH_OK;
}

int dsh_proc_close_stdin(dsh_proc_t *p) {
  if (!p) return DSH_EINVAL;
  if (p->pty) return DSH_ESTATE;
  if (p->in_fd < 0 || p->in_close_req) return DSH_OK;
  if (!p->manual && p->in.len) {
    p->in_close_req = 1; /* closed by in_cb once flushed */
    return DSH_OK;
  }
  in_close(p);
  return DSH_OK;
}

/* --- lifecycle ---------------------------------------------------------------- */

static int valid_mode(int32_t m) {
  return m == DSH_STDIO_NULL || m == DSH_STDIO_PIPE || m == DSH_STDIO_INHERIT;
}

int dsh_proc_spawn(dsh_loop_t *loop, const dsh_proc_opts_t *o, uint64_t id, dsh_proc_t **out,
                   char *err, size_t errlen) {
  if (!loop || !o || !out) return dsh_fail(err, errlen, DSH_EINVAL, "spawn: missing argument");
  *out = NULL;
  if (!o->argv || !o->argv[0] || !o->argv[0][0])
    return dsh_fail(err, errlen, DSH_EINVAL, "spawn: argv must have a non-empty argv[0]");
  if (!o->pty &&
      (!valid_mode(o->stdin_mode) || !valid_mode(o->stdout_mode) || !valid_mode(o->stderr_mode)))
    return dsh_fail(err, errlen, DSH_EINVAL, "spawn: invalid stdio mode");
  dsh_proc_t *p = calloc(1, sizeof *p);
  if (!p) return dsh_fail(err, errlen, DSH_ENOMEM, "spawn: out of memory");
  dsh_spawned_t sp;
  int rc = dsh_proc_launch(o, &sp, err, errlen);
  if (rc) {
    free(p);
    return rc;
  }
  p->loop = loop;
  p->ev = dsh_loop_ev(loop);
  p->id = id;
  p->pid = sp.pid;
  p->pty = o->pty ? 1 : 0;
  p->manual = o->manual_io ? 1 : 0;
  p->master = sp.master;
  p->max_buf = o->max_buffer_bytes ? o->max_buffer_bytes : DEFAULT_MAX_BUFFER;
  p->notify = o->notify;
  p->notify_ud = o->notify_ud;
  p->running = 1;
  p->exit_code = -1;
  p->in_fd = p->pty ? sp.master : sp.in;
  int out_fd[3] = {-1, p->pty ? sp.master : sp.out, p->pty ? -1 : sp.err};
  for (int i = 1; i <= 2; i++) {
    struct out_stream *s = &p->out[i];
    s->idx = i;
    s->fd = out_fd[i];
    s->piped = s->fd >= 0;
    ev_io_init(&s->w, out_cb, s->fd, EV_READ);
    s->w.data = p;
    if (s->piped && !p->manual) ev_io_start(p->ev, &s->w);
  }
  ev_io_init(&p->in_w, in_cb, p->in_fd, EV_WRITE);
  p->in_w.data = p;
  ev_child_init(&p->child_w, child_cb, p->pid, 0);
  p->child_w.data = p;
  ev_child_start(p->ev, &p->child_w);
  ev_init(&p->quiet_t, quiet_cb);
  p->quiet_t.data = p;
  ev_init(&p->kill_t, kill_cb);
  p->kill_t.data = p;
  g_live++;
  *out = p;
  return DSH_OK;
}

void dsh_proc_free(dsh_proc_t *p) {
  if (!p) return;
  if (!group_gone(p)) kill(-p->pid, SIGKILL); /* libev still reaps the leader */
  ev_child_stop(p->ev, &p->child_w);
  ev_timer_stop(p->ev, &p->quiet_t);
  ev_timer_stop(p->ev, &p->kill_t);
  wait_list_remove(p);
  in_close(p);
  for (int i = 1; i <= 2; i++) {
    out_close(p, &p->out[i]);
    free(p->out[i].buf);
  }
  if (p->master >= 0) close(p->master);
  dsh_buf_free(&p->in);
  g_live--;
  free(p);
}

int64_t dsh_proc_live_count(void) {
  return g_live;
}

int32_t dsh_proc_pid(const dsh_proc_t *p) {
  return p ? p->pid : -1;
}

uint64_t dsh_proc_id(const dsh_proc_t *p) {
  return p ? p->id : 0;
}

int dsh_proc_status(const dsh_proc_t *p, dsh_proc_status_t *st) {
  if (!p || !st) return DSH_EINVAL;
  memset(st, 0, sizeof *st);
  st->pid = p->pid;
  st->running = p->running;
  st->exit_code = p->exit_code;
  st->term_signal = p->term_signal;
  st->core_dumped = p->core_dumped;
  st->quiescent = p->gone;
  st->stdout_eof = p->out[1].eof || !p->out[1].piped;
  st->stderr_eof = p->out[2].eof || !p->out[2].piped;
  st->stdin_open = p->in_fd >= 0 && !p->in_broken && !p->in_close_req;
  st->term_requested = p->term_requested;
  st->kill_sent = p->kill_sent;
  st->stdout_bytes = p->out[1].total;
  st->stderr_bytes = p->out[2].total;
  st->stdin_pending = p->in.len;
  return DSH_OK;
}

int dsh_proc_fd(const dsh_proc_t *p, int stream) {
  if (!p || stream < 0 || stream > 2) return -1;
  if (p->pty) return p->master;
  return stream == 0 ? p->in_fd : p->out[stream].fd;
}

/* --- signals ------------------------------------------------------------------ */

int dsh_proc_signal(dsh_proc_t *p, int sig, int32_t group) {
  if (!p || sig < 0 || sig >= NSIG) return DSH_EINVAL;
  if (group ? group_gone(p) : !p->running) return DSH_OK;
  if (kill(group ? -p->pid : p->pid, sig) == 0 || errno == ESRCH) return DSH_OK;
  return errno == EINVAL ? DSH_EINVAL : DSH_ESYS;
}

int dsh_proc_terminate(dsh_proc_t *p, int64_t grace_ms) {
  if (!p) return DSH_EINVAL;
  if (p->term_requested) return DSH_OK;
  p->term_requested = 1;
  if (group_gone(p)) return DSH_OK;
  kill(-p->pid, SIGTERM);
  kill(-p->pid, SIGCONT); /* a stopped member would never see the TERM */
  ev_now_update(p->ev);   /* called outside the loop: its cached time may be old */
  ev_timer_set(&p->kill_t, dsh_ms_to_ev(grace_ms > 0 ? grace_ms : 0), 0.);
  ev_timer_start(p->ev, &p->kill_t);
  return DSH_OK;
}

int dsh_proc_quiescent(dsh_proc_t *p) {
  if (!p) return 0;
  int was = p->gone;
  int now = group_gone(p);
  /* Seen here first: let the timer report QUIET on the next iteration. */
  if (now && !was && !p->quiet_reported) {
    ev_timer_stop(p->ev, &p->quiet_t);
    ev_timer_set(&p->quiet_t, 0., 0.);
    ev_timer_start(p->ev, &p->quiet_t);
  }
  return now;
}

int dsh_proc_resize(dsh_proc_t *p, uint16_t rows, uint16_t cols) {
  if (!p || !rows || !cols) return DSH_EINVAL;
  if (!p->pty) return DSH_ESTATE;
  struct winsize ws = {.ws_row = rows, .ws_col = cols};
  return ioctl(p->master, TIOCSWINSZ, &ws) < 0 ? DSH_ESYS : DSH_OK;
}

#define SIG_ENTRY(n) \
  { "SIG" #n, SIG##n }
static const struct {
  const char *name; /* "SIGTERM" */
  int sig;
} g_signals[] = {
    SIG_ENTRY(HUP),    SIG_ENTRY(INT),  SIG_ENTRY(QUIT),  SIG_ENTRY(ILL),  SIG_ENTRY(TRAP),
    SIG_ENTRY(ABRT),   SIG_ENTRY(BUS),  SIG_ENTRY(FPE),   SIG_ENTRY(KILL), SIG_ENTRY(USR1),
    SIG_ENTRY(SEGV),   SIG_ENTRY(USR2), SIG_ENTRY(PIPE),  SIG_ENTRY(ALRM), SIG_ENTRY(TERM),
    SIG_ENTRY(STKFLT), SIG_ENTRY(CHLD), SIG_ENTRY(CONT),  SIG_ENTRY(STOP), SIG_ENTRY(TSTP),
    SIG_ENTRY(TTIN),   SIG_ENTRY(TTOU), SIG_ENTRY(URG),   SIG_ENTRY(XCPU), SIG_ENTRY(XFSZ),
    SIG_ENTRY(VTALRM), SIG_ENTRY(PROF), SIG_ENTRY(WINCH), SIG_ENTRY(IO),   SIG_ENTRY(PWR),
    SIG_ENTRY(SYS),
};
#undef SIG_ENTRY
#define N_SIGNALS (sizeof g_signals / sizeof g_signals[0])

int dsh_proc_signum(const char *name) {
  if (!name) return 0;
  if (strncasecmp(name, "SIG", 3) == 0) name += 3;
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (strcasecmp(name, g_signals[i].name + 3) == 0) return g_signals[i].sig;
  return 0;
}

const char *dsh_proc_signame(int sig) {
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (g_signals[i].sig == sig) return g_signals[i].name;
  return NULL;
}
