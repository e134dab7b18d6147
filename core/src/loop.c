/* loop.c: the process-wide libev default loop, its event queue, timers and io
 * watchers.
 *
 * Uses libev only. Callbacks here never run user code: they append an event to
 * a growable ring that dsh_loop_poll() drains. Must never call back into Lua. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include "dsh/loop.h"

#include <dlfcn.h>
#include <ev.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "dsh/errors.h"
#include "dsh/loop_ev.h"

struct dsh_loop {
  struct ev_loop *ev;
  dsh_event_t *ring;
  size_t head, len, cap;
  uint64_t next_id;
  ev_timer deadline;
  int deadline_hit;
};

struct dsh_timer {
  ev_timer w;
  dsh_loop_t *loop;
  uint64_t id;
};

struct dsh_io {
  ev_io w;
  dsh_loop_t *loop;
  uint64_t id;
};

struct dsh_signal {
  ev_signal w;
  dsh_loop_t *loop;
  uint64_t id;
};

static dsh_loop_t g_loop;

static void deadline_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  dsh_loop_t *loop = w->data;
  loop->deadline_hit = 1;
}

dsh_loop_t *dsh_loop_default(void) {
  if (g_loop.ev) return &g_loop;
  g_loop.ev = ev_default_loop(EVFLAG_AUTO);
  if (!g_loop.ev) return NULL;
  /* Orphaned members of the groups we start are reparented to us and reaped
   * by libev's SIGCHLD handler, so a killed grandchild never lingers as a
   * zombie that would make its group look alive. */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  signal(SIGPIPE, SIG_IGN);
  /* libev's signal handler (SIGCHLD, signal watchers) stays installed until
   * the process ends, but LuaJIT dlcloses this library, and with it libev,
   * when its state closes: a child reaped after that would jump into unmapped
   * code. So this library (and its dependencies) is never unloaded. */
  Dl_info self;
  if (dladdr((void *)dsh_loop_default, &self) && self.dli_fname)
    (void)dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  g_loop.next_id = 1;
  ev_init(&g_loop.deadline, deadline_cb);
  g_loop.deadline.data = &g_loop;
  return &g_loop;
}

void *dsh_loop_ev(dsh_loop_t *loop) {
  return loop->ev;
}

uint64_t dsh_loop_new_id(dsh_loop_t *loop) {
  return loop->next_id++;
}

int dsh_loop_push(dsh_loop_t *loop, uint32_t kind, uint64_t id, int32_t status, int64_t n) {
  if (loop->len == loop->cap) {
    size_t ncap = loop->cap ? loop->cap * 2 : 256;
    dsh_event_t *nring = malloc(ncap * sizeof *nring);
    if (!nring) return DSH_ENOMEM;
    for (size_t i = 0; i < loop->len; i++) nring[i] = loop->ring[(loop->head + i) % loop->cap];
    free(loop->ring);
    loop->ring = nring;
    loop->cap = ncap;
    loop->head = 0;
  }
  dsh_event_t *e = &loop->ring[(loop->head + loop->len) % loop->cap];
  e->kind = kind;
  e->status = status;
  e->id = id;
  e->n = n;
  loop->len++;
  return DSH_OK;
}

int dsh_loop_run(dsh_loop_t *loop, int64_t timeout_ms) {
  if (loop->len > 0 || timeout_ms == 0) {
    ev_run(loop->ev, EVRUN_NOWAIT);
    return (int)loop->len;
  }
  loop->deadline_hit = 0;
  if (timeout_ms > 0) {
    ev_now_update(loop->ev);
    ev_timer_set(&loop->deadline, dsh_ms_to_ev(timeout_ms), 0.);
    ev_timer_start(loop->ev, &loop->deadline);
  }
  int idle = 0;
  while (loop->len == 0 && !loop->deadline_hit) {
    if (!ev_run(loop->ev, EVRUN_ONCE)) { /* nothing active: nothing can arrive */
      idle = 1;
      break;
    }
  }
  ev_timer_stop(loop->ev, &loop->deadline);
  if (idle && loop->len == 0 && !loop->deadline_hit) return DSH_ESTATE;
  return (int)loop->len;
}

size_t dsh_loop_poll(dsh_loop_t *loop, dsh_event_t *out, size_t max) {
  size_t n = loop->len < max ? loop->len : max;
  for (size_t i = 0; i < n; i++) out[i] = loop->ring[(loop->head + i) % loop->cap];
  if (n) {
    loop->head = (loop->head + n) % loop->cap;
    loop->len -= n;
  }
  return n;
}

size_t dsh_loop_pending(const dsh_loop_t *loop) {
  return loop->len;
}

double dsh_loop_now_ms(dsh_loop_t *loop) {
  return ev_now(loop->ev) * 1000.0;
}

static void timer_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  dsh_timer_t *t = (dsh_timer_t *)w;
  dsh_loop_push(t->loop, DSH_EV_TIMER, t->id, 0, 0);
}

int dsh_timer_new(dsh_loop_t *loop, uint64_t id, dsh_timer_t **out) {
  dsh_timer_t *t = calloc(1, sizeof *t);
  if (!t) return DSH_ENOMEM;
  ev_init(&t->w, timer_cb);
  t->loop = loop;
  t->id = id;
  *out = t;
  return DSH_OK;
}

int dsh_timer_start(dsh_timer_t *t, int64_t after_ms, int64_t repeat_ms) {
  if (after_ms < 0 || repeat_ms < 0) return DSH_EINVAL;
  /* Timers are often started between loop passes; without this the loop's
   * cached time is stale and the timer fires early by the gap. */
  ev_now_update(t->loop->ev);
  ev_timer_stop(t->loop->ev, &t->w);
  ev_timer_set(&t->w, dsh_ms_to_ev(after_ms), dsh_ms_to_ev(repeat_ms));
  ev_timer_start(t->loop->ev, &t->w);
  return DSH_OK;
}

int dsh_timer_stop(dsh_timer_t *t) {
  ev_timer_stop(t->loop->ev, &t->w);
  return DSH_OK;
}

void dsh_timer_free(dsh_timer_t *t) {
  if (!t) return;
  ev_timer_stop(t->loop->ev, &t->w);
  free(t);
}

static void io_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)ev;
  dsh_io_t *io = (dsh_io_t *)w;
  int n = ((revents & EV_READ) ? DSH_IO_READ : 0) | ((revents & EV_WRITE) ? DSH_IO_WRITE : 0);
  dsh_loop_push(io->loop, DSH_EV_IO, io->id, 0, n);
}

int dsh_io_new(dsh_loop_t *loop, uint64_t id, int fd, dsh_io_t **out) {
  if (fd < 0) return DSH_EINVAL;
  dsh_io_t *io = calloc(1, sizeof *io);
  if (!io) return DSH_ENOMEM;
  ev_io_init(&io->w, io_cb, fd, 0);
  io->loop = loop;
  io->id = id;
  *out = io;
  return DSH_OK;
}

int dsh_io_start(dsh_io_t *io, int events) {
  int ev_events = ((events & DSH_IO_READ) ? EV_READ : 0) | ((events & DSH_IO_WRITE) ? EV_WRITE : 0);
  if (!ev_events) return DSH_EINVAL;
  ev_io_stop(io->loop->ev, &io->w);
  ev_io_set(&io->w, io->w.fd, ev_events);
  ev_io_start(io->loop->ev, &io->w);
  return DSH_OK;
}

int dsh_io_stop(dsh_io_t *io) {
  ev_io_stop(io->loop->ev, &io->w);
  return DSH_OK;
}

void dsh_io_free(dsh_io_t *io) {
  if (!io) return;
  ev_io_stop(io->loop->ev, &io->w);
  free(io);
}

static void signal_cb(struct ev_loop *ev, ev_signal *w, int revents) {
  (void)ev, (void)revents;
  dsh_signal_t *s = (dsh_signal_t *)w;
  dsh_loop_push(s->loop, DSH_EV_SIGNAL, s->id, 0, w->signum);
}

int dsh_signal_new(dsh_loop_t *loop, uint64_t id, int signum, dsh_signal_t **out) {
  if (signum <= 0 || signum >= NSIG || signum == SIGCHLD || signum == SIGKILL || signum == SIGSTOP)
    return DSH_EINVAL;
  dsh_signal_t *s = calloc(1, sizeof *s);
  if (!s) return DSH_ENOMEM;
  ev_signal_init(&s->w, signal_cb, signum);
  s->loop = loop;
  s->id = id;
  *out = s;
  return DSH_OK;
}

int dsh_signal_start(dsh_signal_t *s) {
  ev_signal_start(s->loop->ev, &s->w);
  return DSH_OK;
}

int dsh_signal_stop(dsh_signal_t *s) {
  ev_signal_stop(s->loop->ev, &s->w);
  return DSH_OK;
}

void dsh_signal_free(dsh_signal_t *s) {
  if (!s) return;
  ev_signal_stop(s->loop->ev, &s->w);
  free(s);
}
