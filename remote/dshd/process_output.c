/* process_output.c: a record's output side — reading stdout/stderr (or the
 * PTY master) into the replay rings as fast as the slowest subscriber
 * allows (back-pressure: reading pauses while a subscriber would lose
 * bytes), the arrival marks that keep stdout/stderr in order, the spill
 * extension's copy, and the drain that ends reading after a kill.
 *
 * Uses the record's fds (the proc's, manual_io) and one ev_io per stream on
 * dshd_ev(). Never blocks; never closes an fd the proc owns (a finished
 * output is pointed at /dev/null instead, so a writer left behind sees a
 * closed pipe). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "process.h"

static void spill_close(struct record_out *o);

/* Reading stops while less than this much room is left for a subscriber. */
static size_t low_water(const struct record_out *o) {
  size_t lw = o->ring.cap / 4;
  if (lw > (64u << 10)) lw = 64u << 10;
  return lw ? lw : 1;
}

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
  record_wake_subs(pp);
  record_check_end(pp);
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
  if (!ev_is_active(&pp->lag_t)) {
    ev_timer_set(&pp->lag_t, dsh_ms_to_ev(PROCESS_LAG_MS), 0.);
    ev_timer_start(dshd_ev(), &pp->lag_t);
  }
}

/* Reading has been paused for PROCESS_LAG_MS. Back-pressure keeps a slow
 * client from losing bytes, but a client that stopped reading must not
 * starve another one that takes everything it gets: if some subscriber has
 * caught up and waits, the ones holding reading back start lagging (they
 * hold nothing back from now on, and skip what the ring no longer has,
 * which their offsets show). A lone subscriber is never left behind. */
static void lag_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  record_t *pp = w->data;
  int changed = 0;
  for (int i = 1; i <= 2; i++) {
    struct record_out *o = &pp->out[i];
    if (!o->open || !o->paused) continue;
    int waiting = 0;
    for (subscriber_t *s = pp->subs; s; s = s->next)
      if (s->kind == SUB_EVENTS && !s->finished && !s->deadline_hit && !s->lagging &&
          s->off[i] >= o->ring.total)
        waiting = 1;
    if (!waiting) continue;
    for (subscriber_t *s = pp->subs; s; s = s->next)
      if (s->kind == SUB_EVENTS && !s->finished && !s->lagging &&
          dshd_ring_room(&o->ring, s->off[i]) < low_water(o)) {
        s->lagging = 1;
        changed = 1;
      }
  }
  if (changed) record_resume(pp);
}

void record_output_lag_init(record_t *pp) {
  ev_init(&pp->lag_t, lag_cb);
  pp->lag_t.data = pp;
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
      record_wake_readers(pp);
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
    if (o->drain_stop) record_kick(pp); /* must see EAGAIN once, even if nothing arrives */
  }
}

/* After SIGKILL/SIGTERM (or the timeout) and the leader's exit: take what is
 * in the pipes now, then stop, even if a grandchild still holds them. */
void record_output_drain(record_t *pp) {
  for (int i = 1; i <= 2; i++) {
    struct record_out *o = &pp->out[i];
    int avail = 0;
    if (!o->open || o->drain_stop) continue;
    o->drain_stop = 1;
    /* A grandchild may keep writing: take only what is there now. */
    o->drain_left = ioctl(o->fd, FIONREAD, &avail) == 0 && avail >= 0 ? (size_t)avail : SIZE_MAX;
  }
  record_kick(pp);
}

void record_output_init(record_t *pp, int i, int fd, int spill_fd, uint64_t spill_cap) {
  struct record_out *o = &pp->out[i];
  o->pp = pp;
  o->idx = i;
  o->fd = fd;
  o->spill_fd = spill_cap ? spill_fd : -1;
  o->spill_left = spill_cap;
  if (o->fd < 0) spill_close(o); /* nothing will ever be read into it */
  dshd_ring_init(&o->ring, record_ring_cap());
  ev_io_init(&o->w, out_cb, o->fd < 0 ? 0 : o->fd, EV_READ);
  o->w.data = pp;
  if (o->fd >= 0) {
    o->open = 1;
    ev_io_start(dshd_ev(), &o->w);
  }
}

void record_output_release(record_t *pp, int i) {
  ev_io_stop(dshd_ev(), &pp->out[i].w);
  dshd_ring_release(&pp->out[i].ring);
  spill_close(&pp->out[i]);
}

void record_output_drain_reads(record_t *pp) {
  for (int i = 1; i <= 2; i++) {
    struct record_out *o = &pp->out[i];
    if (o->open && o->drain_stop && !o->paused) out_read(pp, o);
  }
}
