/* process_record.c: process records of the process service — spawning, the
 * table (by pid and tag), the end event, quiescence, signals, lingering and
 * eviction (see process.h); reading the output is process_output.c's, input
 * is process_input.c's.
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
#include "process.h"
#include "process_events.h"

static record_t *g_head, *g_tail;         /* newest first */
static ev_timer g_budget_t;               /* budget_cb, out of callbacks */
static size_t g_ended_count, g_ended_mem; /* records that ended, and what they hold */

size_t record_ring_cap(void) {
  uint64_t b = dshd_config()->replay_bytes;
  return b ? (size_t)b : (size_t)1 << 20;
}

const char *record_errtext(int e) {
  static char buf[128];
  snprintf(buf, sizeof buf, "%s", strerror(e));
  if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z')) buf[0] += 'a' - 'A';
  return buf;
}

void record_wake_subs(record_t *pp) {
  for (subscriber_t *s = pp->subs; s; s = s->next) subscriber_wake(s);
}

/* New output only concerns event streams (WatchGroup waits for state changes). */
void record_wake_readers(record_t *pp) {
  for (subscriber_t *s = pp->subs; s; s = s->next)
    if (s->kind == SUB_EVENTS) subscriber_wake(s);
}

void record_kick(record_t *pp) {
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
  ev_timer_stop(ev, &pp->lag_t);
  ev_timer_stop(ev, &pp->session_t);
  record_input_drop(pp);
  for (int i = 1; i <= 2; i++) record_output_release(pp, i);
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

static int over_budget(void) {
  return g_ended_mem > dshd_config()->exited_max_bytes || g_ended_count > PROCESS_LINGER_MAX;
}

/* What an ended record holds: its rings and marks, its tag, itself. */
static size_t record_memory(const record_t *pp) {
  return dshd_ring_memory(&pp->out[1].ring) + dshd_ring_memory(&pp->out[2].ring) +
         dshd_marks_memory(&pp->marks) + (pp->tag ? strlen(pp->tag) + 1 : 0) + sizeof *pp;
}

static void held_changed(record_t *pp) {
  g_ended_mem -= pp->held;
  pp->held = record_memory(pp);
  g_ended_mem += pp->held;
}

/* Keeps ended records within --exited-max-bytes and PROCESS_LINGER_MAX,
 * oldest first: rings go first (the end event stays, late Connects still
 * get it), then whole records whose group is empty. */
static void budget_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)w, (void)revents;
  for (record_t *pp = g_tail, *prev; pp && over_budget(); pp = prev) {
    prev = pp->prev;
    if (!pp->ended || pp->subs) continue;
    if (dshd_ring_memory(&pp->out[1].ring) || dshd_ring_memory(&pp->out[2].ring) ||
        dshd_marks_memory(&pp->marks)) {
      dshd_ring_release(&pp->out[1].ring);
      dshd_ring_release(&pp->out[2].ring);
      dshd_marks_release(&pp->marks);
      held_changed(pp);
    }
  }
  for (record_t *pp = g_tail, *prev; pp && over_budget(); pp = prev) {
    prev = pp->prev;
    if (pp->ended && pp->finalized && !pp->subs) remove_pp(pp);
  }
  dshd_memory_released();
}

/* --- end, quiescence, linger ------------------------------------------------------ */

static void linger_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  record_t *pp = w->data;
  pp->linger_expired = 1;
  if (!pp->subs) {
    remove_pp(pp);
    dshd_memory_released();
  }
}

/* Ended and the group is empty: free the proc (from the kick timer) and start lingering. */
static void maybe_finalize(record_t *pp) {
  if (pp->finalized || !pp->ended || !pp->quiescent) return;
  pp->finalized = 1;
  record_kick(pp);
  ev_timer_set(&pp->linger_t, dsh_ms_to_ev(dshd_config()->exited_ttl_ms), 0.);
  ev_timer_start(dshd_ev(), &pp->linger_t);
}

void record_check_end(record_t *pp) {
  if (pp->ended || !pp->leader_exited || pp->out[1].open || pp->out[2].open) return;
  struct ev_loop *ev = dshd_ev();
  pp->ended = 1;
  pp->ended_at = ev_now(ev);
  pp->end_len = dshd_procev_end(pp->end_json, sizeof pp->end_json, pp->wait_status,
                                !dshd_config()->envd_compat);
  ev_timer_stop(ev, &pp->deadline_t);
  record_input_drop(pp); /* queued input is moot now */
  pp->held = record_memory(pp);
  g_ended_count++;
  g_ended_mem += pp->held;
  record_wake_subs(pp);
  maybe_finalize(pp);
  if (over_budget() && !ev_is_active(&g_budget_t)) {
    ev_timer_init(&g_budget_t, budget_cb, 0., 0.);
    ev_timer_start(ev, &g_budget_t);
  }
}

static void cancel_reading(record_t *pp) {
  pp->cancel_reading = 1;
  if (pp->leader_exited) record_output_drain(pp);
}

static void kick_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  record_t *pp = w->data;
  record_output_drain_reads(pp);
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
    /* List shows running leaders only: argv and envs are of no use now
     * (issue 7 item 10: 200000 arguments are megabytes of JSON). */
    json_decref(pp->config);
    pp->config = NULL;
    if (pp->cancel_reading) record_output_drain(pp);
    record_wake_subs(pp);
    record_check_end(pp);
  } else if (kind == DSH_EV_PROC_QUIET) {
    if (record_session_wait(pp)) return; /* a PTY: its session's other groups first */
    record_quiet(pp);
  }
}

void record_quiet(record_t *pp) {
  pp->quiescent = 1;
  record_wake_subs(pp);
  maybe_finalize(pp);
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
  po.max_open_files = dshd_config()->max_open_files;
  po.manual_io = 1;
  po.notify = on_proc;
  po.notify_ud = pp;
  char why[512];
  dsh_loop_t *loop = dshd_loop();
  int rc = dsh_proc_spawn(loop, &po, dsh_loop_new_id(loop), &pp->proc, why, sizeof why);
  if (rc) {
    json_decref(o->config);
    free(pp);
    /* clone refused with EAGAIN: the sandbox's process limit (pids.max,
     * RLIMIT_NPROC), no fault of the request */
    if (strstr(why, "clone: ") && strstr(why, strerror(EAGAIN)))
      return dshd_errf(err, "resource_exhausted",
                       "failed to start process: %s (the process limit is reached)", why);
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

  for (int i = 1; i <= 2; i++)
    record_output_init(pp, i, (pp->pty && i == 2) ? -1 : dsh_proc_fd(pp->proc, i),
                       o->spill_cap[i] ? o->spill_fd[i] : -1, o->spill_cap[i]);
  record_input_init(pp);
  ev_init(&pp->deadline_t, deadline_cb);
  pp->deadline_t.data = pp;
  ev_init(&pp->linger_t, linger_cb);
  pp->linger_t.data = pp;
  record_output_lag_init(pp);
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
