/* process_record.c: process records of the process service — spawning, reading the
 * output fds into replay rings with back-pressure, queued input, the end
 * event, quiescence, lingering and eviction (see process.h); input is
 * process_input.c's.
 *
 * Uses the core's proc module in manual_io mode (it spawns, reaps, tracks
 * the group; we do every read and write on its fds) and libev watchers on
 * dshd_ev(). Never frees a proc from inside its notify callback (a zero
 * timer does it), never closes an fd the proc owns (a finished output is
 * pointed at /dev/null instead, so a writer left behind sees a closed pipe),
 * never signals a group the proc has seen empty. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "dsh/errors.h"
#include "process_events.h"
#include "process.h"

static record_t *g_head, *g_tail; /* newest first */
static void spill_close(struct record_out *o);
static ev_timer g_budget_t;               /* budget_cb, out of callbacks */
static size_t g_ended_count, g_ended_mem; /* records that ended, and what they hold */

static size_t ring_cap(void) {
  uint64_t b = dshd_config()->replay_bytes;
  return b ? (size_t)b : (size_t)1 << 20;
}

/* Reading stops while less than this much room is left for a subscriber. */
static size_t low_water(const struct record_out *o) {
  size_t lw = o->ring.cap / 4;
  if (lw > (64u << 10)) lw = 64u << 10;
  return lw ? lw : 1;
}

const char *record_errtext(int e) {
  static char buf[128];
  snprintf(buf, sizeof buf, "%s", strerror(e));
  if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z')) buf[0] += 'a' - 'A';
  return buf;
}

static void wake_subs(record_t *pp) {
  for (subscriber_t *s = pp->subs; s; s = s->next) subscriber_wake(s);
}

/* New output only concerns event streams (WatchGroup waits for state changes). */
static void wake_readers(record_t *pp) {
  for (subscriber_t *s = pp->subs; s; s = s->next)
    if (s->kind == SUB_EVENTS) subscriber_wake(s);
}

static void kick(record_t *pp) {
  if (!ev_is_active(&pp->kick_t)) {
    ev_timer_set(&pp->kick_t, 0., 0.);
    ev_timer_start(dshd_ev(), &pp->kick_t);
  }
}

/* --- table ------------------------------------------------------------------------ */

/* Records by pid, so Start, SendInput & co. cost the same however many
 * records linger; a spawn drops a lingering record with its pid first. */
#define PID_BUCKETS 1024
static record_t *g_by_pid[PID_BUCKETS];

static record_t **pid_slot(int32_t pid) {
  record_t **slot = &g_by_pid[(uint32_t)pid % PID_BUCKETS];
  while (*slot && (*slot)->pid != pid) slot = &(*slot)->hnext;
  return slot;
}

static void unlink_pp(record_t *pp) {
  record_t **slot = pid_slot(pp->pid);
  if (*slot == pp) *slot = pp->hnext;
  pp->hnext = NULL;
  if (pp->prev)
    pp->prev->next = pp->next;
  else
    g_head = pp->next;
  if (pp->next)
    pp->next->prev = pp->prev;
  else
    g_tail = pp->prev;
  pp->next = pp->prev = NULL;
}

static void remove_pp(record_t *pp) {
  struct ev_loop *ev = dshd_ev();
  unlink_pp(pp);
  if (pp->ended) {
    g_ended_count--;
    g_ended_mem -= pp->held;
  }
  while (pp->subs) {
    subscriber_t *s = pp->subs;
    pp->subs = s->next;
    s->next = s->prev = NULL;
    subscriber_orphan(s);
  }
  ev_timer_stop(ev, &pp->deadline_t);
  ev_timer_stop(ev, &pp->linger_t);
  ev_timer_stop(ev, &pp->kick_t);
  record_input_drop(pp);
  for (int i = 1; i <= 2; i++) {
    ev_io_stop(ev, &pp->out[i].w);
    dshd_ring_release(&pp->out[i].ring);
    spill_close(&pp->out[i]);
  }
  if (pp->proc) dsh_proc_free(pp->proc); /* SIGKILLs a group still alive */
  dshd_marks_release(&pp->marks);
  json_decref(pp->config);
  free(pp->tag);
  free(pp);
}

record_t *record_find(uint32_t pid, const char *tag, int live_only) {
  if (!tag) {
    record_t *pp = *pid_slot((int32_t)pid);
    return pp && (!live_only || !pp->ended) ? pp : NULL;
  }
  record_t *any = NULL;
  for (record_t *pp = g_head; pp; pp = pp->next) {
    int match = tag ? (pp->tag && strcmp(pp->tag, tag) == 0) : (uint32_t)pp->pid == pid;
    if (!match) continue;
    if (!pp->ended) return pp; /* a tag may be reused: a live record wins */
    if (!any) any = pp;
  }
  return live_only ? NULL : any;
}

int record_not_found(uint32_t pid, const char *tag, dshd_err_t *err) {
  if (tag) return dshd_errf(err, "not_found", "process with tag %s not found", tag);
  return dshd_errf(err, "not_found", "process with pid %u not found", pid);
}

void record_list(json_t *array) {
  for (record_t *pp = g_tail; pp; pp = pp->prev) {
    if (pp->leader_exited) continue;
    json_t *info = json_object();
    json_object_set(info, "config", pp->config);
    json_object_set_new(info, "pid", json_integer(pp->pid));
    if (pp->tag) json_object_set_new(info, "tag", dshd_json_str(pp->tag));
    json_array_append_new(array, info);
  }
}

static size_t linger_budget(void) {
  size_t budget = PROCESS_LINGER_MIN_BYTES, cap = ring_cap();
  return budget < 32 * cap ? 32 * cap : budget;
}

static int over_budget(void) {
  return g_ended_mem > linger_budget() || g_ended_count > PROCESS_LINGER_MAX;
}

/* Keeps lingering records within count and memory bounds, oldest first:
 * rings go first (the end event stays), whole records once quiescent. */
static void budget_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)w, (void)revents;
  for (record_t *pp = g_tail, *prev; pp && over_budget(); pp = prev) {
    prev = pp->prev;
    if (!pp->ended || pp->subs) continue;
    if (g_ended_count > PROCESS_LINGER_MAX && pp->finalized) {
      remove_pp(pp);
    } else if (g_ended_mem > linger_budget() && pp->held) {
      g_ended_mem -= pp->held;
      pp->held = 0;
      dshd_ring_release(&pp->out[1].ring);
      dshd_ring_release(&pp->out[2].ring);
      dshd_marks_release(&pp->marks);
    }
  }
}

/* --- end, quiescence, linger ------------------------------------------------------ */

static void linger_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  record_t *pp = w->data;
  pp->linger_expired = 1;
  if (!pp->subs) remove_pp(pp);
}

/* Ended and the group is empty: free the proc (from the kick timer) and start lingering. */
static void maybe_finalize(record_t *pp) {
  if (pp->finalized || !pp->ended || !pp->quiescent) return;
  pp->finalized = 1;
  kick(pp);
  ev_timer_set(&pp->linger_t, dsh_ms_to_ev(PROCESS_LINGER_MS), 0.);
  ev_timer_start(dshd_ev(), &pp->linger_t);
}

static void check_end(record_t *pp) {
  if (pp->ended || !pp->leader_exited || pp->out[1].open || pp->out[2].open) return;
  struct ev_loop *ev = dshd_ev();
  pp->ended = 1;
  pp->ended_at = ev_now(ev);
  pp->end_len =
      dshd_procev_end(pp->end_json, sizeof pp->end_json, pp->wait_status, !dshd_config()->envd_compat);
  ev_timer_stop(ev, &pp->deadline_t);
  record_input_drop(pp); /* queued input is moot now */
  pp->held = dshd_ring_memory(&pp->out[1].ring) + dshd_ring_memory(&pp->out[2].ring) +
             dshd_marks_memory(&pp->marks);
  g_ended_count++;
  g_ended_mem += pp->held;
  wake_subs(pp);
  maybe_finalize(pp);
  if (over_budget() && !ev_is_active(&g_budget_t)) {
    ev_timer_init(&g_budget_t, budget_cb, 0., 0.);
    ev_timer_start(ev, &g_budget_t);
  }
}

/* --- output ------------------------------------------------------------------------ */

/* The fd stays the proc's; point it at /dev/null so the pipe's read end is
 * closed now (a writer left behind gets EPIPE instead of blocking forever). */
static void release_read_end(int fd) {
  int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nul < 0) return;
  if (nul != fd) {
    dup3(nul, fd, O_CLOEXEC);
    close(nul);
  }
}

static void out_done(record_t *pp, struct record_out *o) {
  spill_close(o);
  o->open = 0;
  o->paused = 0;
  ev_io_stop(dshd_ev(), &o->w);
  if (!pp->pty && o->fd >= 0) release_read_end(o->fd);
  wake_subs(pp);
  check_end(pp);
}

/* spill extension: copy the first spill_left bytes read to the spill file. A
 * regular file: a plain write never waits on anyone. Stops at the first error. */
static void spill_close(struct record_out *o) {
  if (o->spill_fd >= 0) close(o->spill_fd);
  o->spill_fd = -1;
  o->spill_left = 0;
}

static void spill_write(struct record_out *o, const uint8_t *p, size_t n) {
  if (n > o->spill_left) n = (size_t)o->spill_left;
  while (n > 0) {
    ssize_t w = write(o->spill_fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      o->spill_left = 0;
      break;
    }
    p += w;
    n -= (size_t)w;
    o->spill_left -= (uint64_t)w;
  }
  if (o->spill_left == 0) spill_close(o);
}

static int can_read(record_t *pp, struct record_out *o, size_t *want) {
  uint64_t keep;
  *want = PROCESS_READ_CHUNK;
  if (subscriber_min_offset(pp, o->idx, &keep)) {
    size_t room = dshd_ring_room(&o->ring, keep);
    if (room < low_water(o)) return 0;
    if (*want > room) *want = room;
    if (dshd_marks_full(&pp->marks, (uint32_t)o->idx) && subscriber_needs_tail_mark(pp)) return 0;
  }
  return 1;
}

static void out_pause(record_t *pp, struct record_out *o) {
  o->paused = 1;
  ev_io_stop(dshd_ev(), &o->w);
}

static void out_read(record_t *pp, struct record_out *o) {
  for (int round = 0; round < 4 && o->open; round++) {
    size_t want, len;
    uint8_t *p;
    if (!can_read(pp, o, &want)) {
      out_pause(pp, o);
      return;
    }
    /* Until a stream has bytes its ring has no buffer: a process that prints
     * nothing (or only EOF) costs no allocation. */
    static uint8_t first[16384];
    if (o->drain_stop) {
      if (!o->drain_left) {
        out_done(pp, o);
        return;
      }
      if (want > o->drain_left) want = o->drain_left;
    }
    if (!o->ring.size) {
      p = first;
      len = want < sizeof first ? want : sizeof first;
    } else if (dshd_ring_wspace(&o->ring, want, &p, &len) < 0) {
      p = NULL;
    }
    ssize_t n = p ? read(o->fd, p, len) : -1;
    if (n > 0 && p == first && dshd_ring_write(&o->ring, first, (size_t)n) != (size_t)n) p = NULL;
    if (!p) {
      fprintf(stderr, "dshd: process %d: out of memory for output; reading stopped\n", pp->pid);
      out_done(pp, o);
      return;
    }
    if (n > 0) {
      if (p != first) dshd_ring_commit(&o->ring, (size_t)n);
      if (!o->enlarged && o->ring.total >= PROCESS_READ_CHUNK) {
        /* Big pipes count against the user's pipe-buffer quota: only for
         * streams that prove busy, best effort. */
        o->enlarged = 1;
        if (!pp->pty) fcntl(o->fd, F_SETPIPE_SZ, PROCESS_PIPE_SIZE);
      }
      if (o->drain_stop) o->drain_left -= (size_t)n < o->drain_left ? (size_t)n : o->drain_left;
      if (o->spill_fd >= 0) spill_write(o, p, (size_t)n);
      dshd_marks_add(&pp->marks, (uint32_t)o->idx, o->ring.total);
      wake_readers(pp);
      if (o->drain_stop && !o->drain_left) {
        out_done(pp, o);
        return;
      }
      if ((size_t)n < len && !o->drain_stop) return; /* drained; level-triggered */
    } else if (n == 0) {
      out_done(pp, o);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (o->drain_stop) out_done(pp, o);
      return;
    } else { /* EIO on a pty master: every slave fd is closed */
      out_done(pp, o);
    }
  }
}

static void out_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)revents;
  struct record_out *o = (struct record_out *)w; /* w is the first member */
  record_t *pp = o->pp;
  /* libev invokes the watchers of one poll in reverse order of readiness:
   * the other stream, still pending, had its bytes first. */
  struct record_out *other = &pp->out[3 - o->idx];
  if (other->open && ev_is_pending(&other->w)) {
    ev_clear_pending(ev, &other->w);
    out_read(pp, other);
  }
  out_read(pp, o);
}

void record_resume(record_t *pp) {
  for (int i = 1; i <= 2; i++) {
    struct record_out *o = &pp->out[i];
    size_t want;
    if (!o->open || !o->paused || !can_read(pp, o, &want)) continue;
    o->paused = 0;
    ev_io_start(dshd_ev(), &o->w);
    if (o->drain_stop) kick(pp); /* must see EAGAIN once, even if nothing arrives */
  }
}

/* After SIGKILL/SIGTERM (or the timeout) and the leader's exit: take what is
 * in the pipes now, then stop, even if a grandchild still holds them. */
static void start_drain(record_t *pp) {
  for (int i = 1; i <= 2; i++) {
    struct record_out *o = &pp->out[i];
    int avail = 0;
    if (!o->open || o->drain_stop) continue;
    o->drain_stop = 1;
    /* A grandchild may keep writing: take only what is there now. */
    o->drain_left = ioctl(o->fd, FIONREAD, &avail) == 0 && avail >= 0 ? (size_t)avail : SIZE_MAX;
  }
  kick(pp);
}

static void cancel_reading(record_t *pp) {
  pp->cancel_reading = 1;
  if (pp->leader_exited) start_drain(pp);
}

static void kick_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  record_t *pp = w->data;
  for (int i = 1; i <= 2; i++) {
    struct record_out *o = &pp->out[i];
    if (o->open && o->drain_stop && !o->paused) out_read(pp, o);
  }
  if (pp->finalized && pp->proc) {
    dsh_proc_free(pp->proc);
    pp->proc = NULL;
    pp->in_fd = -1;
  }
}

/* --- proc notifications -------------------------------------------------------------- */

static void on_proc(void *ud, dsh_proc_t *p, uint32_t kind, int32_t status, int64_t n) {
  (void)p, (void)status;
  record_t *pp = ud;
  if (kind == DSH_EV_PROC_EXIT) {
    pp->leader_exited = 1;
    pp->wait_status = (int)n;
    if (pp->cancel_reading) start_drain(pp);
    wake_subs(pp);
    check_end(pp);
  } else if (kind == DSH_EV_PROC_QUIET) {
    pp->quiescent = 1;
    wake_subs(pp);
    maybe_finalize(pp);
  }
}

static void deadline_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  record_t *pp = w->data;
  /* envd kills the pid; with dshd's process groups the deadline is the
   * lifetime of the whole group, so nothing the command started outlives it. */
  if (pp->proc && !dshd_config()->envd_compat)
    dsh_proc_signal(pp->proc, SIGKILL, 1);
  else if (pp->proc && !pp->leader_exited)
    dsh_proc_signal(pp->proc, SIGKILL, 0);
  cancel_reading(pp);
}

/* --- signals, resize ------------------------------------------------------------------ */

int record_signal(record_t *pp, int sig, int group, int64_t grace_ms, dshd_err_t *err) {
  if (pp->proc) {
    int rc = (sig == SIGTERM && grace_ms > 0) ? dsh_proc_terminate(pp->proc, grace_ms)
                                              : dsh_proc_signal(pp->proc, sig, group);
    if (rc) return dshd_errf(err, "internal", "error sending signal: %s", dsh_strerror(rc));
  }
  if (sig == SIGKILL || sig == SIGTERM) cancel_reading(pp);
  return 0;
}

int record_resize(record_t *pp, uint32_t rows, uint32_t cols, dshd_err_t *err) {
  if (!pp->pty || !pp->proc)
    return dshd_errf(err, "internal", "error resizing tty: tty not assigned to process");
  if (rows > 0xffff) rows = 0xffff;
  if (cols > 0xffff) cols = 0xffff;
  int rc;
  if (rows && cols) {
    rc = dsh_proc_resize(pp->proc, (uint16_t)rows, (uint16_t)cols);
  } else { /* envd passes zeros through; dsh_proc_resize refuses them */
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    rc = ioctl(dsh_proc_fd(pp->proc, 1), TIOCSWINSZ, &ws) < 0 ? DSH_ESYS : 0;
  }
  if (rc) return dshd_errf(err, "internal", "error resizing tty: %s", record_errtext(errno));
  return 0;
}

/* --- subscribers ------------------------------------------------------------------------ */

void record_attach(record_t *pp, subscriber_t *sub) {
  sub->pp = pp;
  sub->prev = NULL;
  sub->next = pp->subs;
  if (pp->subs) pp->subs->prev = sub;
  pp->subs = sub;
}

void record_detach(record_t *pp, subscriber_t *sub) {
  if (sub->prev)
    sub->prev->next = sub->next;
  else if (pp->subs == sub)
    pp->subs = sub->next;
  if (sub->next) sub->next->prev = sub->prev;
  sub->next = sub->prev = NULL;
  sub->pp = NULL;
  if (pp->linger_expired && !pp->subs)
    remove_pp(pp);
  else
    record_resume(pp);
}

/* --- start ------------------------------------------------------------------------------- */

int record_start(const record_spawn_t *o, record_t **out, dshd_err_t *err) {
  record_t *pp = calloc(1, sizeof *pp);
  if (!pp) {
    json_decref(o->config);
    return dshd_errf(err, "resource_exhausted", "out of memory");
  }
  dsh_proc_opts_t po;
  memset(&po, 0, sizeof po);
  po.argv = o->argv;
  po.envp = o->envp;
  po.cwd = o->cwd;
  po.stdin_mode = o->stdin_pipe ? DSH_STDIO_PIPE : DSH_STDIO_NULL;
  po.stdout_mode = po.stderr_mode = DSH_STDIO_PIPE;
  po.pty = o->pty;
  po.pty_rows = o->rows;
  po.pty_cols = o->cols;
  po.uid = o->uid;
  po.gid = o->gid;
  po.init_groups = o->uid >= 0;
  po.manual_io = 1;
  po.notify = on_proc;
  po.notify_ud = pp;
  char why[512];
  dsh_loop_t *loop = dshd_loop();
  int rc = dsh_proc_spawn(loop, &po, dsh_loop_new_id(loop), &pp->proc, why, sizeof why);
  if (rc) {
    json_decref(o->config);
    free(pp);
    return dshd_errf(err, "invalid_argument", "failed to start process: %s", why);
  }
  struct ev_loop *ev = dshd_ev();
  pp->id = dsh_proc_id(pp->proc);
  pp->pid = dsh_proc_pid(pp->proc);
  pp->config = o->config;
  pp->tag = o->tag ? strdup(o->tag) : NULL;
  pp->pty = o->pty ? 1 : 0;
  dshd_marks_init(&pp->marks, PROCESS_MARKS_MAX);

  /* A lingering record of a former process with this pid is stale now. */
  record_t *stale = *pid_slot(pp->pid);
  if (stale) remove_pp(stale);

  for (int i = 1; i <= 2; i++) {
    struct record_out *out_s = &pp->out[i];
    out_s->pp = pp;
    out_s->idx = i;
    out_s->fd = (pp->pty && i == 2) ? -1 : dsh_proc_fd(pp->proc, i);
    out_s->spill_fd = o->spill_cap[i] ? o->spill_fd[i] : -1;
    out_s->spill_left = o->spill_cap[i];
    if (out_s->fd < 0) spill_close(out_s); /* nothing will ever be read into it */
    dshd_ring_init(&out_s->ring, ring_cap());
    ev_io_init(&out_s->w, out_cb, out_s->fd < 0 ? 0 : out_s->fd, EV_READ);
    out_s->w.data = pp;
    if (out_s->fd >= 0) {
      out_s->open = 1;
      ev_io_start(ev, &out_s->w);
    }
  }
  record_input_init(pp);
  ev_init(&pp->deadline_t, deadline_cb);
  pp->deadline_t.data = pp;
  ev_init(&pp->linger_t, linger_cb);
  pp->linger_t.data = pp;
  ev_init(&pp->kick_t, kick_cb);
  pp->kick_t.data = pp;
  if (o->timeout_ms > 0) {
    ev_timer_set(&pp->deadline_t, dsh_ms_to_ev(o->timeout_ms), 0.);
    ev_timer_start(ev, &pp->deadline_t);
  }
  pp->next = g_head;
  if (g_head) g_head->prev = pp;
  g_head = pp;
  *pid_slot(pp->pid) = pp; /* the slot at the end of the pid's (now empty) chain */
  if (!g_tail) g_tail = pp;
  *out = pp;
  return 0;
}

void record_shutdown_all(void) {
  ev_timer_stop(dshd_ev(), &g_budget_t);
  while (g_head) remove_pp(g_head);
}
