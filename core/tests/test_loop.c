/* test_loop.c: the one loop and its event queue — ids, FIFO order across ring
 * growth and wrap-around, what dsh_loop_run returns (queued events, the
 * deadline, DSH_ESTATE when nothing is active and no deadline is given), and
 * the timer, io and signal watchers with their argument checks. */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/loop.h"
#include "dsh/loop_ev.h"

static dsh_loop_t *L;

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* Runs the loop until an event of kind for id arrives (others are dropped);
 * returns its n, or -1 after timeout_ms. */
static int64_t wait_for(uint32_t kind, uint64_t id, int64_t timeout_ms) {
  double until = mono_ms() + (double)timeout_ms;
  while (mono_ms() < until) {
    if (dsh_loop_run(L, 50) < 0) return -1;
    dsh_event_t ev[16];
    size_t n;
    while ((n = dsh_loop_poll(L, ev, 16)) > 0)
      for (size_t i = 0; i < n; i++)
        if (ev[i].kind == kind && ev[i].id == id) return ev[i].n;
  }
  return -1;
}

static void ids(void) {
  CHECK(dsh_loop_default() == L);
  CHECK(dsh_loop_ev(L) != NULL);
  uint64_t a = dsh_loop_new_id(L), b = dsh_loop_new_id(L);
  CHECK(a != 0);
  CHECK(b > a);
}

static void queue_order(void) {
  dsh_event_t ev[64];
  CHECK_EQ_INT(dsh_loop_pending(L), 0);
  CHECK_EQ_INT(dsh_loop_poll(L, ev, 64), 0);
  /* 200 in, 150 out: the head moves; then 300 more grow the ring while it
   * wraps. Every event must come out once, oldest first. */
  uint64_t next_in = 1, next_out = 1;
  for (int i = 0; i < 200; i++) CHECK_EQ_INT(dsh_loop_push(L, 99, next_in++, -1, 7), DSH_OK);
  while (next_out <= 150) {
    size_t n = dsh_loop_poll(L, ev, (size_t)(151 - next_out) < 64 ? (size_t)(151 - next_out) : 64);
    for (size_t i = 0; i < n; i++) CHECK_EQ_INT(ev[i].id, next_out++);
  }
  for (int i = 0; i < 300; i++) CHECK_EQ_INT(dsh_loop_push(L, 99, next_in++, -1, 7), DSH_OK);
  CHECK_EQ_INT(dsh_loop_pending(L), 350);
  /* with events queued, run returns at once and says how many */
  double t0 = mono_ms();
  CHECK_EQ_INT(dsh_loop_run(L, 5000), 350);
  CHECK(mono_ms() - t0 < 1000);
  size_t n;
  while ((n = dsh_loop_poll(L, ev, 64)) > 0) {
    for (size_t i = 0; i < n; i++) {
      CHECK_EQ_INT(ev[i].id, next_out++);
      CHECK_EQ_INT(ev[i].kind, 99);
      CHECK_EQ_INT(ev[i].status, -1);
      CHECK_EQ_INT(ev[i].n, 7);
    }
  }
  CHECK_EQ_INT(next_out, next_in);
  CHECK_EQ_INT(dsh_loop_pending(L), 0);
}

static void run_results(void) {
  /* nothing queued, nothing active: without a deadline nothing can ever
   * arrive; with one, run waits it out (its own timer is active) */
  CHECK_EQ_INT(dsh_loop_run(L, -1), DSH_ESTATE);
  CHECK_EQ_INT(dsh_loop_run(L, 0), 0); /* only what is ready now */
  double t0 = mono_ms();
  CHECK_EQ_INT(dsh_loop_run(L, 30), 0);
  CHECK(mono_ms() - t0 >= 25);

  /* an active watcher that stays quiet: run waits out the deadline */
  int fds[2];
  CHECK_EQ_INT(pipe(fds), 0);
  dsh_io_t *io;
  CHECK_EQ_INT(dsh_io_new(L, dsh_loop_new_id(L), fds[0], &io), DSH_OK);
  CHECK_EQ_INT(dsh_io_start(io, DSH_IO_READ), DSH_OK);
  double now0 = dsh_loop_now_ms(L);
  t0 = mono_ms();
  CHECK_EQ_INT(dsh_loop_run(L, 60), 0);
  double waited = mono_ms() - t0;
  CHECK(waited >= 55);
  CHECK(dsh_loop_now_ms(L) >= now0 + 55); /* loop time moved too */
  dsh_io_free(io);
  close(fds[0]);
  close(fds[1]);
  CHECK_EQ_INT(dsh_loop_run(L, -1), DSH_ESTATE); /* freed: inactive again */
}

static void timers(void) {
  dsh_timer_t *a, *b, *r;
  uint64_t ia = dsh_loop_new_id(L), ib = dsh_loop_new_id(L), ir = dsh_loop_new_id(L);
  CHECK_EQ_INT(dsh_timer_new(L, ia, &a), DSH_OK);
  CHECK_EQ_INT(dsh_timer_new(L, ib, &b), DSH_OK);
  CHECK_EQ_INT(dsh_timer_new(L, ir, &r), DSH_OK);
  CHECK_EQ_INT(dsh_timer_start(a, -1, 0), DSH_EINVAL);
  CHECK_EQ_INT(dsh_timer_start(a, 0, -1), DSH_EINVAL);

  /* b (10 ms) fires before a (40 ms), each once, with status 0 */
  double t0 = mono_ms();
  CHECK_EQ_INT(dsh_timer_start(a, 40, 0), DSH_OK);
  CHECK_EQ_INT(dsh_timer_start(b, 10, 0), DSH_OK);
  uint64_t order[2];
  int got = 0;
  while (got < 2 && mono_ms() - t0 < 5000) {
    CHECK(dsh_loop_run(L, -1) > 0);
    dsh_event_t ev[4];
    size_t n = dsh_loop_poll(L, ev, 4);
    for (size_t i = 0; i < n && got < 2; i++) {
      CHECK_EQ_INT(ev[i].kind, DSH_EV_TIMER);
      CHECK_EQ_INT(ev[i].status, 0);
      order[got++] = ev[i].id;
    }
  }
  CHECK_EQ_INT(got, 2);
  CHECK_EQ_INT(order[0], ib);
  CHECK_EQ_INT(order[1], ia);
  CHECK(mono_ms() - t0 >= 38);
  CHECK_EQ_INT(dsh_loop_run(L, 0), 0); /* one-shot: nothing more */

  /* a repeating timer fires until stopped; a stopped one never fires */
  CHECK_EQ_INT(dsh_timer_start(r, 1, 1), DSH_OK);
  for (int i = 0; i < 3; i++) CHECK(wait_for(DSH_EV_TIMER, ir, 2000) == 0);
  CHECK_EQ_INT(dsh_timer_stop(r), DSH_OK);
  dsh_event_t ev[64];
  dsh_loop_poll(L, ev, 64);
  CHECK_EQ_INT(dsh_timer_start(a, 5, 0), DSH_OK);
  CHECK_EQ_INT(dsh_timer_stop(a), DSH_OK);
  CHECK_EQ_INT(dsh_loop_run(L, -1), DSH_ESTATE);

  /* start restarts a running timer; free stops it */
  CHECK_EQ_INT(dsh_timer_start(b, 5, 0), DSH_OK);
  CHECK_EQ_INT(dsh_timer_start(b, 30, 0), DSH_OK);
  t0 = mono_ms();
  CHECK(wait_for(DSH_EV_TIMER, ib, 2000) == 0);
  CHECK(mono_ms() - t0 >= 25);
  CHECK_EQ_INT(dsh_timer_start(b, 5, 0), DSH_OK);
  dsh_timer_free(b);
  CHECK_EQ_INT(dsh_loop_run(L, -1), DSH_ESTATE);
  dsh_timer_free(a);
  dsh_timer_free(r);
  dsh_timer_free(NULL);
}

static void io(void) {
  dsh_io_t *w;
  CHECK_EQ_INT(dsh_io_new(L, 1, -1, &w), DSH_EINVAL);
  int fds[2];
  CHECK_EQ_INT(pipe(fds), 0);
  uint64_t id = dsh_loop_new_id(L);
  CHECK_EQ_INT(dsh_io_new(L, id, fds[0], &w), DSH_OK);
  CHECK_EQ_INT(dsh_io_start(w, 0), DSH_EINVAL);
  CHECK_EQ_INT(dsh_io_start(w, DSH_IO_READ), DSH_OK);
  CHECK_EQ_INT(write(fds[1], "x", 1), 1);
  CHECK_EQ_INT(wait_for(DSH_EV_IO, id, 2000), DSH_IO_READ);
  /* level-triggered: still readable, so it fires again until stopped */
  CHECK_EQ_INT(wait_for(DSH_EV_IO, id, 2000), DSH_IO_READ);
  CHECK_EQ_INT(dsh_io_stop(w), DSH_OK);
  dsh_event_t ev[16];
  dsh_loop_poll(L, ev, 16);
  CHECK_EQ_INT(dsh_loop_run(L, -1), DSH_ESTATE);
  /* the write end is writable */
  dsh_io_t *ww;
  uint64_t wid = dsh_loop_new_id(L);
  CHECK_EQ_INT(dsh_io_new(L, wid, fds[1], &ww), DSH_OK);
  CHECK_EQ_INT(dsh_io_start(ww, DSH_IO_READ | DSH_IO_WRITE), DSH_OK);
  CHECK_EQ_INT(wait_for(DSH_EV_IO, wid, 2000), DSH_IO_WRITE);
  dsh_io_free(ww);
  dsh_io_free(w);
  dsh_io_free(NULL);
  dsh_loop_poll(L, ev, 16);
  close(fds[0]);
  close(fds[1]);
}

static void signals(void) {
  dsh_signal_t *s;
  CHECK_EQ_INT(dsh_signal_new(L, 1, 0, &s), DSH_EINVAL);
  CHECK_EQ_INT(dsh_signal_new(L, 1, SIGCHLD, &s), DSH_EINVAL); /* libev's own */
  CHECK_EQ_INT(dsh_signal_new(L, 1, SIGKILL, &s), DSH_EINVAL);
  CHECK_EQ_INT(dsh_signal_new(L, 1, SIGSTOP, &s), DSH_EINVAL);
  CHECK_EQ_INT(dsh_signal_new(L, 1, NSIG, &s), DSH_EINVAL);
  uint64_t id = dsh_loop_new_id(L);
  CHECK_EQ_INT(dsh_signal_new(L, id, SIGUSR1, &s), DSH_OK);
  CHECK_EQ_INT(dsh_signal_start(s), DSH_OK);
  CHECK_EQ_INT(kill(getpid(), SIGUSR1), 0); /* delivered as an event, not the default action */
  CHECK_EQ_INT(wait_for(DSH_EV_SIGNAL, id, 2000), SIGUSR1);
  CHECK_EQ_INT(dsh_signal_stop(s), DSH_OK);
  dsh_signal_free(s);
  dsh_signal_free(NULL);
}

int main(void) {
  alarm(30); /* a watcher left active would make run(-1) wait forever: fail instead */
  L = dsh_loop_default();
  CHECK(L != NULL);
  if (!L) CHECK_DONE();
  ids();
  queue_order();
  run_results();
  timers();
  io();
  signals();
  CHECK_DONE();
}
