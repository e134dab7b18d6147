/* conns.c: dshd's connections — accepting them on the listening sockets and
 * handing them to libmicrohttpd (MHD_add_connection), and policing them
 * once a second (the sweep):
 *
 *  - a connection must send a complete request header within
 *    --header-timeout-ms of being accepted, and a kept-alive one its next
 *    header within --keepalive-timeout-ms of the last answer; otherwise it
 *    is closed (an idle socket holds a slot and an fd);
 *  - a client that went away while it was sending (EOF or a reset on its
 *    socket) is shut down: libmicrohttpd 0.9.75 in epoll mode misses an end
 *    of file that arrives together with the last bytes of a request;
 *  - a chunked body that libmicrohttpd cannot parse (a chunk-size line longer
 *    than its read buffer) leaves it reporting "data pending" forever and the
 *    loop spinning: when libmicrohttpd has reported work for a while without
 *    one callback into dshd, every chunked body that made no progress in
 *    that time is dropped.
 *
 * Accepting: at most the smaller of 4000 and half the fd limit connections
 * at once (the rest wait in the backlog until a slot frees); when accept()
 * runs out of fds a reserve fd is given up to accept and close the
 * connection, and accepting pauses for ACCEPT_BACKOFF_MS, so dshd serves
 * again as soon as fds are free.
 *
 * Uses the socket API, libev and libmicrohttpd's connection options. Never
 * closes a socket libmicrohttpd owns (it shuts it down and lets
 * libmicrohttpd close it); never drops a connection whose request has been
 * read (a stream keeps its half-closed client). */
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server.h"

#define SWEEP_MS 1000         /* how often connections are checked */
#define ACCEPT_BATCH 64       /* connections accepted per listener event */
#define ACCEPT_BACKOFF_MS 100 /* pause after running out of fds */
#define SPIN_MS 200           /* libmicrohttpd busy without a callback this long: a stuck body */
#define MAX_CONNS 4000

typedef struct conn {
  int fd;
  struct MHD_Connection *c;
  dshd_req_t *req; /* the request being received or answered; NULL while waiting */
  double since;    /* accepted, or the last answer completed */
  unsigned served; /* requests completed */
  struct conn *next, *prev;
} conn_t;

typedef struct lsock {
  ev_io io;
  int fd;
} lsock_t;

static struct {
  struct MHD_Daemon *d;
  lsock_t ls[2];
  int nls;
  int reserve_fd;
  ev_timer backoff;
  ev_timer sweep;
  conn_t *head;
  size_t n, max;
  int paused; /* accepting stopped: at the connection cap, or backing off */
  double header_timeout, keepalive_timeout;
  uint64_t progress; /* callbacks into dshd, for the spin check */
  uint64_t progress_seen;
  double spin_since; /* 0: libmicrohttpd is not busy without progress */
} g;

static double now(void) {
  return ev_now(dshd_ev());
}

void dshd_conns_progress(void) {
  g.progress++;
}

size_t dshd_conns_count(void) {
  return g.n;
}

/* --- accepting --------------------------------------------------------------------- */

static void accepting(int on) {
  for (int i = 0; i < g.nls; i++) {
    if (on)
      ev_io_start(dshd_ev(), &g.ls[i].io);
    else
      ev_io_stop(dshd_ev(), &g.ls[i].io);
  }
  g.paused = !on;
}

static void resume_accepting(void) {
  if (g.paused && !ev_is_active(&g.backoff) && g.n < g.max) accepting(1);
}

/* Out of fds: give up the reserve to take one connection off the backlog
 * and close it (its client learns at once), then pause. */
static void out_of_fds(int lfd) {
  if (g.reserve_fd >= 0) {
    close(g.reserve_fd);
    g.reserve_fd = -1;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
    g.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  dshd_log("out of file descriptors: not accepting for %d ms", ACCEPT_BACKOFF_MS);
  accepting(0);
  ev_timer_set(&g.backoff, dsh_ms_to_ev(ACCEPT_BACKOFF_MS), 0.);
  ev_timer_start(dshd_ev(), &g.backoff);
}

static void accept_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)ev, (void)revents;
  int added = 0;
  for (int i = 0; i < ACCEPT_BATCH; i++) {
    if (g.n >= g.max) {
      accepting(0); /* the backlog holds the rest until a connection closes */
      break;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(w->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        out_of_fds(w->fd);
      break;
    }
    if (MHD_add_connection(g.d, fd, (struct sockaddr *)&ss, sl) != MHD_YES) continue; /* closed */
    added = 1;
  }
  if (added) dshd_server_kick();
}

static void backoff_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)w, (void)revents;
  if (g.reserve_fd < 0) g.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  resume_accepting();
}

/* --- policing ------------------------------------------------------------------------ */

/* Closes c through libmicrohttpd: its socket is shut down (a reading
 * connection sees the end at once) and its timeout set to the shortest (a
 * connection libmicrohttpd does not read any more is closed by its timeout
 * check on the next run). */
static void drop(conn_t *ct, const char *why) {
  if (dshd_verbose()) dshd_log("closing a connection: %s", why);
  shutdown(ct->fd, SHUT_RDWR);
  MHD_set_connection_option(ct->c, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
  dshd_server_kick();
}

/* The client is gone (EOF or an error) — not merely done sending. */
static int peer_gone(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void drop_stuck_bodies(double since) {
  for (conn_t *ct = g.head; ct; ct = ct->next) {
    dshd_req_t *r = ct->req;
    if (r && r->chunked && !r->body_done && !r->answered && r->body_at < since)
      drop(ct, "its chunked body cannot be parsed (chunk-size line too long)");
  }
}

static void sweep_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)w, (void)revents;
  double t = now();
  for (conn_t *ct = g.head; ct; ct = ct->next) {
    dshd_req_t *r = ct->req;
    if (!r) {
      double limit = ct->served ? g.keepalive_timeout : g.header_timeout;
      if (limit > 0 && t - ct->since >= limit)
        drop(ct, ct->served ? "idle keep-alive connection" : "no complete request header in time");
      else if (peer_gone(ct->fd))
        drop(ct, "the client went away");
    } else if (!r->body_done && peer_gone(ct->fd)) {
      drop(ct, "the client went away in the middle of a request");
    }
  }
  dshd_server_trim_heap();
}

void dshd_conns_after_run(int busy) {
  if (!busy || g.progress != g.progress_seen) {
    g.progress_seen = g.progress;
    g.spin_since = busy ? now() : 0;
    return;
  }
  if (g.spin_since == 0) g.spin_since = now();
  if (now() - g.spin_since < dsh_ms_to_ev(SPIN_MS)) return;
  drop_stuck_bodies(g.spin_since);
  g.spin_since = now(); /* check again after another SPIN_MS, not on every run */
}

/* --- libmicrohttpd's view --------------------------------------------------------------- */

void dshd_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code) {
  (void)cls;
  g.progress++;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn_t *ct = ci ? calloc(1, sizeof *ct) : NULL;
    *socket_context = ct;
    if (!ct) return;
    ct->fd = ci->connect_fd;
    ct->c = c;
    ct->since = now();
    ct->next = g.head;
    if (g.head) g.head->prev = ct;
    g.head = ct;
    g.n++;
    if (!ev_is_active(&g.sweep)) {
      ev_timer_set(&g.sweep, dsh_ms_to_ev(SWEEP_MS), dsh_ms_to_ev(SWEEP_MS));
      ev_timer_start(dshd_ev(), &g.sweep);
    }
    return;
  }
  conn_t *ct = *socket_context;
  *socket_context = NULL;
  if (!ct) return;
  if (ct->req) ct->req->conn_track = NULL;
  if (ct->prev)
    ct->prev->next = ct->next;
  else
    g.head = ct->next;
  if (ct->next) ct->next->prev = ct->prev;
  free(ct);
  if (g.n) g.n--;
  resume_accepting();
  dshd_server_kick(); /* libmicrohttpd re-arms what it paused once a connection is gone */
  if (!g.head) {
    ev_timer_stop(dshd_ev(), &g.sweep);
    dshd_server_trim_heap();
  }
}

void dshd_conns_request_begun(dshd_req_t *r) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  conn_t *ct = ci ? ci->socket_context : NULL;
  r->conn_track = ct;
  r->body_at = now();
  if (ct) ct->req = r;
}

void dshd_conns_request_ended(dshd_req_t *r) {
  conn_t *ct = r->conn_track;
  if (!ct) return;
  ct->req = NULL;
  ct->served++;
  ct->since = now();
  r->conn_track = NULL;
}

/* --- start, stop -------------------------------------------------------------------------- */

int dshd_conns_start(struct MHD_Daemon *d, const int *fds, int nfds,
                     const dshd_server_opts_t *opts) {
  g.d = d;
  g.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  g.header_timeout = dsh_ms_to_ev(opts->header_timeout_ms);
  g.keepalive_timeout = dsh_ms_to_ev(opts->keepalive_timeout_ms);
  struct rlimit rl;
  g.max = MAX_CONNS;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 2 < g.max)
    g.max = rl.rlim_cur / 2 > 0 ? (size_t)(rl.rlim_cur / 2) : 1;
  ev_init(&g.backoff, backoff_cb);
  ev_init(&g.sweep, sweep_cb);
  for (int i = 0; i < nfds && g.nls < 2; i++) {
    if (fds[i] < 0) continue;
    g.ls[g.nls].fd = fds[i];
    ev_io_init(&g.ls[g.nls].io, accept_cb, fds[i], EV_READ);
    g.nls++;
  }
  accepting(1);
  return 0;
}

size_t dshd_conns_max(void) {
  return g.max;
}

void dshd_conns_stop_accepting(void) {
  accepting(0);
  ev_timer_stop(dshd_ev(), &g.backoff);
}

void dshd_conns_stop(void) {
  dshd_conns_stop_accepting();
  ev_timer_stop(dshd_ev(), &g.sweep);
  for (int i = 0; i < g.nls; i++) close(g.ls[i].fd);
  g.nls = 0;
  if (g.reserve_fd >= 0) close(g.reserve_fd);
  g.reserve_fd = -1;
}
