/* process_streams.c: the streams attached to a process record — Start, Connect (with
 * the replay extension's resume) and WatchGroup — as sources of the server
 * core's pull-driven streams (see process.h).
 *
 * An events subscriber sends start first, then data events read out of the
 * record's rings from its own offsets (base64 built in place in the
 * stream's buffer, following the arrival marks so stdout/stderr keep their
 * order), keepalives while idle, and the end event once the record has ended
 * and everything was sent. Its Connect-Timeout-Ms only ends the stream
 * (deadline_exceeded); killing the process is the record's business.
 * Never frees a subscriber except in closed(); a record that goes away
 * first only orphans it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "process.h"
#include "process_events.h"

static int with_ext(void) {
  return !dshd_config()->envd_compat;
}

static void stop_timers(subscriber_t *sub) {
  ev_timer_stop(dshd_ev(), &sub->keepalive_t);
  ev_timer_stop(dshd_ev(), &sub->deadline_t);
}

/* Last thing a pull does: nothing may touch sub's stream afterwards. */
static int finish(subscriber_t *sub, const char *code, const char *msg) {
  dshd_err_t e = {0};
  sub->finished = 1;
  stop_timers(sub);
  if (code) {
    e.code = code;
    snprintf(e.message, sizeof e.message, "%s", msg);
  }
  dshd_stream_end(sub->s, code ? &e : NULL);
  return 1;
}

void subscriber_wake(subscriber_t *sub) {
  if (!sub->finished) dshd_stream_wake(sub->s);
}

void subscriber_orphan(subscriber_t *sub) {
  sub->pp = NULL;
  subscriber_wake(sub);
}

int subscriber_min_offset(const record_t *pp, int idx, uint64_t *keep) {
  int any = 0;
  for (const subscriber_t *s = pp->subs; s; s = s->next) {
    if (s->kind != SUB_EVENTS || s->finished || s->deadline_hit || s->lagging) continue;
    if (!any || s->off[idx] < *keep) *keep = s->off[idx];
    any = 1;
  }
  return any;
}

int subscriber_needs_tail_mark(const record_t *pp) {
  for (const subscriber_t *s = pp->subs; s; s = s->next)
    if (s->kind == SUB_EVENTS && !s->finished && !s->deadline_hit && !s->lagging &&
        s->mark <= pp->marks.tail)
      return 1;
  return 0;
}

/* --- events ---------------------------------------------------------------------------- */

/* Offsets older than what the ring retains jump forward (the data event's
 * offset shows the gap). */
static void norm(subscriber_t *sub, int idx) {
  const dshd_ring_t *r = &sub->pp->out[idx].ring;
  if (sub->off[idx] < r->start) sub->off[idx] = r->start;
}

static size_t take(subscriber_t *sub, int idx, uint64_t end, const uint8_t **p) {
  size_t n = dshd_ring_peek(&sub->pp->out[idx].ring, sub->off[idx], p);
  if (n > end - sub->off[idx]) n = (size_t)(end - sub->off[idx]);
  if (n > PROCESS_EVENT_MAX) n = PROCESS_EVENT_MAX;
  return n;
}

/* The next piece to send, in arrival order: the run of the mark under the
 * cursor, else (marks lost) whatever stream still has bytes. */
static size_t next_chunk(subscriber_t *sub, int *idx, const uint8_t **p) {
  record_t *pp = sub->pp;
  const dshd_marks_t *mk = &pp->marks;
  if (sub->mark < mk->tail) sub->mark = mk->tail;
  while (sub->mark < mk->head) {
    const dshd_mark_t *m = dshd_marks_get(mk, sub->mark);
    int i = (int)m->stream;
    norm(sub, i);
    if (sub->off[i] < m->end) {
      size_t n = take(sub, i, m->end, p);
      if (n) {
        *idx = i;
        return n;
      }
    }
    if (sub->mark + 1 >= mk->head) break; /* stay on the newest mark: it may grow */
    sub->mark++;
  }
  for (int i = 1; i <= 2; i++) {
    norm(sub, i);
    size_t n = take(sub, i, pp->out[i].ring.total, p);
    if (n) {
      *idx = i;
      return n;
    }
  }
  return 0;
}

static int caught_up(subscriber_t *sub) {
  for (int i = 1; i <= 2; i++) {
    norm(sub, i);
    if (sub->off[i] < sub->pp->out[i].ring.total) return 0;
  }
  return 1;
}

static int events_pull(void *ud, dshd_stream_t *s) {
  subscriber_t *sub = ud;
  if (sub->finished) return 0;
  if (sub->deadline_hit) return finish(sub, "deadline_exceeded", "context deadline exceeded");
  record_t *pp = sub->pp;
  if (!pp) return finish(sub, "aborted", "process record was discarded");
  int appended = 0;
  if (!sub->start_sent) {
    dshd_stream_message(s, sub->start_json, sub->start_len);
    sub->start_sent = 1;
    appended = 1;
  }
  size_t budget = PROCESS_PULL_BUDGET;
  int ext = with_ext();
  while (budget) {
    int idx;
    const uint8_t *p;
    size_t n = next_chunk(sub, &idx, &p);
    if (!n) break;
    char *dst = dshd_stream_reserve(s, dshd_procev_data_max(n));
    if (!dst) break; /* the stream is dropping the client */
    uint64_t off = sub->off[idx];
    size_t len = dshd_procev_data(dst, pp->pty ? DSHD_PROCEV_PTY : idx, p, n, off, ext);
    dshd_stream_commit(s, len);
    sub->off[idx] = off + n;
    budget = n >= budget ? 0 : budget - n;
    appended = 1;
  }
  if (sub->lagging && caught_up(sub)) sub->lagging = 0; /* it reads again: it may hold back again */
  record_resume(pp);
  if (pp->ended && caught_up(sub)) {
    dshd_stream_message(s, pp->end_json, pp->end_len);
    return finish(sub, NULL, NULL);
  }
  if (sub->keepalive_due) {
    sub->keepalive_due = 0;
    if (!appended) dshd_stream_message(s, dshd_procev_keepalive, strlen(dshd_procev_keepalive));
    appended = 1;
  }
  if (appended) ev_timer_again(dshd_ev(), &sub->keepalive_t); /* idle time starts now */
  return appended;
}

/* --- group ------------------------------------------------------------------------------- */

static int group_pull(void *ud, dshd_stream_t *s) {
  subscriber_t *sub = ud;
  if (sub->finished) return 0;
  if (sub->deadline_hit) return finish(sub, "deadline_exceeded", "context deadline exceeded");
  record_t *pp = sub->pp;
  /* A record only goes away once its group is empty. */
  int le = pp ? pp->leader_exited : 1, q = pp ? pp->quiescent : 1;
  int appended = 0;
  if (!sub->sent_any || le != sub->sent_le || q != sub->sent_q) {
    char buf[64];
    size_t n = dshd_procev_group(buf, sizeof buf, le, q);
    dshd_stream_message(s, buf, n);
    sub->sent_any = 1;
    sub->sent_le = le;
    sub->sent_q = q;
    appended = 1;
  }
  if (q) return finish(sub, NULL, NULL);
  return appended;
}

/* --- lifecycle ----------------------------------------------------------------------------- */

static void closed_cb(void *ud, dshd_stream_t *s, int client_gone) {
  (void)s, (void)client_gone;
  subscriber_t *sub = ud;
  sub->finished = 1;
  stop_timers(sub);
  if (sub->pp) record_detach(sub->pp, sub);
  free(sub);
}

/* The client sent its end of file: a keepalive now (events), the state
 * again (group), so that a client that is gone shows. */
static void probe_cb(void *ud, dshd_stream_t *s) {
  (void)s;
  subscriber_t *sub = ud;
  if (sub->kind == SUB_EVENTS)
    sub->keepalive_due = 1;
  else
    sub->sent_any = 0;
  subscriber_wake(sub);
}

static const dshd_stream_ops_t events_ops = {events_pull, closed_cb, probe_cb};
static const dshd_stream_ops_t group_ops = {group_pull, closed_cb, probe_cb};

static void keepalive_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  subscriber_t *sub = w->data;
  sub->keepalive_due = 1;
  subscriber_wake(sub);
}

static void deadline_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  subscriber_t *sub = w->data;
  sub->deadline_hit = 1;
  subscriber_wake(sub);
  if (sub->pp) record_resume(sub->pp); /* it holds nothing back any more */
}

static subscriber_t *sub_new(record_t *pp, dshd_stream_t *s, int kind, dshd_err_t *err) {
  subscriber_t *sub = calloc(1, sizeof *sub);
  if (!sub) {
    dshd_errf(err, "resource_exhausted", "out of memory");
    return NULL;
  }
  sub->s = s;
  sub->kind = kind;
  ev_init(&sub->keepalive_t, keepalive_cb);
  sub->keepalive_t.data = sub;
  int64_t ka = dshd_stream_keepalive_ms(s);
  sub->keepalive_t.repeat = dsh_ms_to_ev(ka > 0 ? ka : 90000);
  ev_init(&sub->deadline_t, deadline_cb);
  sub->deadline_t.data = sub;
  int64_t to = dshd_stream_timeout_ms(s);
  if (to > 0) {
    ev_timer_set(&sub->deadline_t, dsh_ms_to_ev(to), 0.);
    ev_timer_start(dshd_ev(), &sub->deadline_t);
  }
  record_attach(pp, sub);
  return sub;
}

int subscriber_open_events(record_t *pp, dshd_stream_t *s, int from_start,
                           const subscriber_resume_t *resume, dshd_err_t *err) {
  subscriber_t *sub = sub_new(pp, s, SUB_EVENTS, err);
  if (!sub) return -1;
  dshd_procev_replay_t replay[3];
  memset(replay, 0, sizeof replay);
  const dshd_marks_t *mk = &pp->marks;
  if (from_start) {
    sub->mark = mk->tail;
  } else if (resume && resume->given && with_ext()) {
    int n = 0;
    for (int i = 1; i <= (pp->pty ? 1 : 2); i++) {
      const dshd_ring_t *r = &pp->out[i].ring;
      uint64_t want = resume->off[i], from = want;
      if (from < r->start) from = r->start;
      if (from > r->total) from = r->total;
      sub->off[i] = from;
      replay[n++] = (dshd_procev_replay_t){pp->pty ? DSHD_PROCEV_PTY : i, want, from};
    }
    sub->mark = mk->tail;
  } else { /* envd: only what is produced from now on */
    for (int i = 1; i <= 2; i++) sub->off[i] = pp->out[i].ring.total;
    sub->mark = mk->head > mk->tail ? mk->head - 1 : mk->head;
  }
  sub->start_len = dshd_procev_start(sub->start_json, sizeof sub->start_json, pp->pid,
                                     replay[0].stream ? replay : NULL);
  dshd_stream_attach(s, &events_ops, sub);
  dshd_stream_wake(s);
  return 0;
}

int subscriber_open_group(record_t *pp, dshd_stream_t *s, dshd_err_t *err) {
  subscriber_t *sub = sub_new(pp, s, SUB_GROUP, err);
  if (!sub) return -1;
  dshd_stream_attach(s, &group_ops, sub);
  dshd_stream_wake(s);
  return 0;
}
