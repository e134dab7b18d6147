/* loop.h: the one event loop (libev's default loop) and its pull-style event queue.
 *
 * C never calls Lua. libev and libcurl callbacks append {kind, id, status, n}
 * records to the queue owned by the loop; Lua (or any C user) drains them with
 * dsh_loop_poll() after dsh_loop_run(). Objects created on the loop carry the
 * caller's 64-bit id so events can be routed back to whoever waits on them.
 * Nothing completes synchronously: an early failure arrives as an event.
 *
 * The loop is process-wide and never freed. Timers and io watchers are owned by
 * the caller: free them with their _free function (which stops them first). */
#ifndef DSH_LOOP_H
#define DSH_LOOP_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_loop dsh_loop_t;
typedef struct dsh_timer dsh_timer_t;
typedef struct dsh_io dsh_io_t;
typedef struct dsh_signal dsh_signal_t;

typedef struct dsh_event {
  uint32_t kind;  /* enum dsh_event_kind */
  int32_t status; /* 0 or a negative dsh status */
  uint64_t id;    /* the id given when the object was created */
  int64_t n;      /* kind-specific number, see below */
} dsh_event_t;

enum dsh_event_kind {
  DSH_EV_TIMER = 1,       /* timer fired */
  DSH_EV_IO = 2,          /* fd ready; n = revents (1 read, 2 write) */
  DSH_EV_SIGNAL = 3,      /* a watched signal arrived; n = signal number */
  DSH_EV_PROC_DATA = 10,  /* n = stream (1 stdout or pty, 2 stderr) has bytes buffered */
  DSH_EV_PROC_EOF = 11,   /* n = stream reached end of file (or read error: status) */
  DSH_EV_PROC_EXIT = 12,  /* leader reaped; details from dsh_proc_status() */
  DSH_EV_PROC_QUIET = 13, /* the process group has no member left */
  DSH_EV_PROC_DRAIN = 14, /* stdin buffer written out; status < 0 if the write failed */
  DSH_EV_HTTP_HEAD = 20,  /* response head complete; n = HTTP status */
  DSH_EV_HTTP_DATA = 21,  /* response body bytes buffered; n = bytes available */
  DSH_EV_HTTP_DONE = 22,  /* transfer finished; status 0 or negative (detail: dsh_http_result) */
  DSH_EV_HTTP_SEND = 23   /* streamed request body has room again */
};

enum dsh_io_events { DSH_IO_READ = 1, DSH_IO_WRITE = 2 };

/* The process-wide loop, created on first use over ev_default_loop(0). Also
 * makes this process a child subreaper so orphaned members of groups we start
 * are reaped by libev, and ignores SIGPIPE. */
dsh_loop_t *dsh_loop_default(void);

/* A fresh id, never 0, unique for the life of the process. */
uint64_t dsh_loop_new_id(dsh_loop_t *loop);

/* Run the loop until at least one event is queued or timeout_ms passes
 * (timeout_ms < 0: no limit; 0: only what is ready now). Returns the number of
 * queued events, or DSH_ESTATE when nothing is queued and no watcher is active,
 * so nothing can ever arrive (a deadlock for whoever waits). */
int dsh_loop_run(dsh_loop_t *loop, int64_t timeout_ms);

/* Move up to max queued events into out, oldest first; returns how many. */
size_t dsh_loop_poll(dsh_loop_t *loop, dsh_event_t *out, size_t max);
size_t dsh_loop_pending(const dsh_loop_t *loop);

/* Loop time in milliseconds (monotonic, updated once per iteration). */
double dsh_loop_now_ms(dsh_loop_t *loop);

/* Timers: DSH_EV_TIMER with the timer's id after after_ms, then every
 * repeat_ms if repeat_ms > 0. Start restarts a running timer. */
int dsh_timer_new(dsh_loop_t *loop, uint64_t id, dsh_timer_t **out);
int dsh_timer_start(dsh_timer_t *t, int64_t after_ms, int64_t repeat_ms);
int dsh_timer_stop(dsh_timer_t *t);
void dsh_timer_free(dsh_timer_t *t);

/* Fd readiness: DSH_EV_IO with n = revents each time fd is ready for one of
 * events (DSH_IO_READ | DSH_IO_WRITE) until stopped. The fd stays the caller's. */
int dsh_io_new(dsh_loop_t *loop, uint64_t id, int fd, dsh_io_t **out);
int dsh_io_start(dsh_io_t *io, int events);
int dsh_io_stop(dsh_io_t *io);
void dsh_io_free(dsh_io_t *io);

/* Signals: DSH_EV_SIGNAL each time signum arrives while started (libev
 * installs the handler; SIGCHLD is libev's own and cannot be watched). */
int dsh_signal_new(dsh_loop_t *loop, uint64_t id, int signum, dsh_signal_t **out);
int dsh_signal_start(dsh_signal_t *s);
int dsh_signal_stop(dsh_signal_t *s);
void dsh_signal_free(dsh_signal_t *s);

#endif
