/* server.c: dshd's daemon state and libmicrohttpd on the libev loop — the
 * configuration and its /init changes, one libmicrohttpd daemon per
 * listening socket (listen.c opens them), the connection sweep, the idle
 * timer, signals and the graceful stop.
 *
 * libmicrohttpd runs in external-polling epoll mode (no threads): one ev_io
 * watches each daemon's epoll fd and one ev_timer follows MHD_get_timeout();
 * both call MHD_run(). Connections resumed from inside libmicrohttpd are
 * resumed after MHD_run() returns (stream.c keeps that list). Requests go
 * to dispatch.c; this file never looks at one. Never logs the token or
 * request headers. */
#include "server.h"

#include <errno.h>
#include <ev.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_LISTENERS 2
#define SWEEP_MS 2000 /* how often open connections are checked for a vanished client */

/* Every open connection's socket, for the sweep (see sweep_cb). */
typedef struct conn_track {
  int fd;
  struct conn_track *next, *prev;
} conn_track_t;

typedef struct listener {
  struct MHD_Daemon *d;
  ev_io io;
  int epfd;
} listener_t;

struct dshd {
  dshd_config_t cfg;
  char workdir_buf[PATH_MAX];
  dsh_loop_t *loop;
  struct ev_loop *ev;
  listener_t ls[MAX_LISTENERS];
  int nls;
  ev_timer mhd_timer;
  ev_timer idle_timer;
  ev_timer sweep_timer;
  conn_track_t *conns;
  size_t nconns;
  ev_signal sig_term, sig_int;
  int in_mhd;
  dshd_listen_t listen;
  unsigned active_requests;
  double last_activity;
  int exit_code;
  int stopping;
  int verbose;
  size_t conn_memory;
  json_t *envs;
};

static struct dshd g;

dshd_t *dshd_get(void) {
  return &g;
}
const dshd_config_t *dshd_config(void) {
  return &g.cfg;
}
dsh_loop_t *dshd_loop(void) {
  return g.loop;
}
struct ev_loop *dshd_ev(void) {
  return g.ev;
}
json_t *dshd_env_vars(void) {
  if (!g.envs) g.envs = json_object();
  return g.envs;
}
int dshd_verbose(void) {
  return g.verbose;
}
int dshd_server_in_mhd(void) {
  return g.in_mhd;
}

void dshd_log(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dshd: %s\n", buf);
}

void dshd_activity(void) {
  if (g.ev) g.last_activity = ev_now(g.ev);
}

void dshd_server_request_begun(void) {
  g.active_requests++;
  dshd_activity();
}

void dshd_server_request_ended(void) {
  if (g.active_requests) g.active_requests--;
  dshd_activity();
}

/* glibc returns freed memory to the system only from the top of the heap.
 * A burst of streams (each holds up to a few MiB while it runs: its replay
 * ring, its response buffer) leaves tens of MiB of free chunks below the
 * rings of lingering records, resident for as long as those linger. So
 * while no stream is open, at the sweep and when the last connection
 * closes, the free pages are handed back. */
static void trim_idle_heap(void) {
#ifdef __GLIBC__
  if (dshd_streams_open() == 0) malloc_trim(0);
#endif
}

/* --- vanished clients ------------------------------------------------------------------ *
 * libmicrohttpd 0.9.75 in epoll (edge-triggered) mode misses an end of file
 * that arrives together with the last bytes of a request (it takes a short
 * read as "drained"): a client that sends part of a request and closes would
 * keep its connection — and an upload's open file — until the 640 s timeout.
 * So every SWEEP_MS each connection's socket is peeked; at EOF or a reset it
 * is shut down, which gives libmicrohttpd a fresh event and it closes the
 * connection through its normal path. */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn_track_t *ct = ci ? calloc(1, sizeof *ct) : NULL;
    *socket_context = ct;
    if (!ct) return;
    ct->fd = ci->connect_fd;
    ct->next = g.conns;
    if (g.conns) g.conns->prev = ct;
    g.conns = ct;
    g.nconns++;
    if (!ev_is_active(&g.sweep_timer)) {
      ev_timer_set(&g.sweep_timer, dsh_ms_to_ev(SWEEP_MS), dsh_ms_to_ev(SWEEP_MS));
      ev_timer_start(g.ev, &g.sweep_timer);
    }
  } else {
    conn_track_t *ct = *socket_context;
    *socket_context = NULL;
    if (!ct) return;
    if (ct->prev)
      ct->prev->next = ct->next;
    else
      g.conns = ct->next;
    if (ct->next) ct->next->prev = ct->prev;
    free(ct);
    if (g.nconns) g.nconns--;
    if (!g.conns) {
      ev_timer_stop(g.ev, &g.sweep_timer);
      trim_idle_heap();
    }
  }
}

static void sweep_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  int hit = 0;
  for (conn_track_t *ct = g.conns; ct; ct = ct->next) {
    char c;
    ssize_t n = recv(ct->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      shutdown(ct->fd, SHUT_RDWR);
      hit = 1;
    }
  }
  if (hit) dshd_server_kick();
  trim_idle_heap();
}

/* --- libmicrohttpd on libev ------------------------------------------------------------ */

static void update_timer(void) {
  MHD_UNSIGNED_LONG_LONG best = 0, t;
  int have = 0;
  for (int i = 0; i < g.nls; i++)
    if (MHD_get_timeout(g.ls[i].d, &t) == MHD_YES && (!have || t < best)) {
      best = t;
      have = 1;
    }
  ev_timer_stop(g.ev, &g.mhd_timer);
  if (have) {
    ev_timer_set(&g.mhd_timer, dsh_ms_to_ev((int64_t)(best > 86400000ull ? 86400000ull : best)),
                 0.);
    ev_timer_start(g.ev, &g.mhd_timer);
  }
}

static void run_mhd(void) {
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < g.nls; i++) {
      g.in_mhd = 1;
      MHD_run(g.ls[i].d);
      g.in_mhd = 0;
    }
    if (dshd_streams_flush_resumes() == 0) break;
  }
  update_timer();
}

void dshd_server_kick(void) {
  if (!g.ev || g.stopping) return;
  ev_timer_stop(g.ev, &g.mhd_timer);
  ev_timer_set(&g.mhd_timer, 0., 0.);
  ev_timer_start(g.ev, &g.mhd_timer);
}

static void mhd_io_cb(struct ev_loop *ev, ev_io *w, int revents) {
  run_mhd();
}
static void mhd_timer_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  run_mhd();
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) {
  if (!g.verbose) return;
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  size_t n = strlen(buf);
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
  dshd_log("mhd: %s", buf);
}

static int start_daemon(int fd) {
  if (g.nls >= MAX_LISTENERS) return -1;
  listener_t *l = &g.ls[g.nls];
  l->d = MHD_start_daemon(
      MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL,
      dshd_dispatch_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
      MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_MEMORY_LIMIT, g.conn_memory,
      MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (size_t)4096, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)4000, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)640, MHD_OPTION_NOTIFY_COMPLETED,
      dshd_dispatch_completed, NULL, MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
      MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
  if (!l->d) return -1;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(l->d, MHD_DAEMON_INFO_EPOLL_FD);
  if (!di) {
    MHD_stop_daemon(l->d);
    l->d = NULL;
    return -1;
  }
  l->epfd = di->epoll_fd;
  ev_io_init(&l->io, mhd_io_cb, l->epfd, EV_READ);
  ev_io_start(g.ev, &l->io);
  g.nls++;
  return 0;
}

/* --- lifecycle ------------------------------------------------------------------------------ */

static void stop_loop(int code) {
  if (g.stopping) return;
  g.stopping = 1;
  g.exit_code = code;
  ev_break(g.ev, EVBREAK_ALL);
}

static void signal_cb(struct ev_loop *ev, ev_signal *w, int revents) {
  dshd_log("%s: stopping", w->signum == SIGTERM ? "SIGTERM" : "SIGINT");
  stop_loop(0);
}

static void idle_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  double idle = dsh_ms_to_ev(g.cfg.idle_timeout_ms);
  double now = ev_now(ev);
  double wait = idle;
  if (g.active_requests == 0 && dshd_streams_open() == 0) {
    double due = g.last_activity + idle;
    if (now >= due) {
      dshd_log("idle timeout");
      stop_loop(3);
      return;
    }
    wait = due - now;
  }
  ev_timer_set(w, wait, 0.);
  ev_timer_start(ev, w);
}

int dshd_server_start(const dshd_config_t *cfg, const dshd_server_opts_t *opts, char *why,
                      size_t whylen) {
  g.cfg = *cfg;
  g.verbose = opts->verbose;
  g.conn_memory = opts->connection_memory_bytes ? opts->connection_memory_bytes : (128u << 10);
  g.loop = dsh_loop_default();
  if (!g.loop) {
    snprintf(why, whylen, "cannot create the event loop");
    return -1;
  }
  g.ev = dsh_loop_ev(g.loop);
  dshd_auth_init(cfg->access_token);
  if (cfg->default_workdir) {
    snprintf(g.workdir_buf, sizeof g.workdir_buf, "%s", cfg->default_workdir);
    g.cfg.default_workdir = g.workdir_buf;
  }
  dshd_env_vars();
  dshd_err_t err = {0};
  if (dshd_users_init(cfg->default_user, &err) != 0) {
    snprintf(why, whylen, "%s", err.message);
    return -1;
  }
  g.cfg.default_user = dshd_default_user();
  ev_init(&g.mhd_timer, mhd_timer_cb);
  ev_init(&g.sweep_timer, sweep_cb);
  if (dshd_listen_open(cfg->listen, &g.listen, why, whylen) != 0) return -1;
  if (start_daemon(g.listen.fds[0]) != 0) {
    close(g.listen.fds[0]);
    if (g.listen.fds[1] >= 0) close(g.listen.fds[1]);
    if (g.listen.unix_path[0])
      snprintf(why, whylen, "libmicrohttpd failed to start on %s", cfg->listen);
    else
      snprintf(why, whylen, "libmicrohttpd failed to start");
    return -1;
  }
  if (g.listen.fds[1] >= 0 && start_daemon(g.listen.fds[1]) != 0) close(g.listen.fds[1]);
  ev_signal_init(&g.sig_term, signal_cb, SIGTERM);
  ev_signal_start(g.ev, &g.sig_term);
  ev_signal_init(&g.sig_int, signal_cb, SIGINT);
  ev_signal_start(g.ev, &g.sig_int);
  dshd_activity();
  if (cfg->idle_timeout_ms > 0) {
    ev_timer_init(&g.idle_timer, idle_cb, dsh_ms_to_ev(cfg->idle_timeout_ms), 0.);
    ev_timer_start(g.ev, &g.idle_timer);
  }
  dshd_log("listening on %s (dshd %s, user '%s'%s%s)", g.listen.address, DSHD_VERSION,
           g.cfg.default_user, dshd_auth_has_token() ? ", access token required" : "",
           g.cfg.envd_compat ? ", envd-compat" : "");
  if (cfg->ready_file &&
      dshd_listen_ready_file(cfg->ready_file, g.listen.address, why, whylen) != 0)
    return -1;
  update_timer();
  return 0;
}

const char *dshd_server_address(void) {
  return g.listen.address;
}

int dshd_server_run(void) {
  ev_run(g.ev, 0);
  return g.exit_code;
}

void dshd_server_stop(void) {
  if (!g.ev) return;
  g.stopping = 1;
  dshd_streams_shutdown();
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < g.nls; i++) {
      g.in_mhd = 1;
      MHD_run(g.ls[i].d);
      g.in_mhd = 0;
    }
    dshd_streams_flush_resumes();
  }
  if (dshd_process_shutdown) dshd_process_shutdown();
  dshd_watchers_shutdown();
  for (int i = 0; i < g.nls; i++) {
    ev_io_stop(g.ev, &g.ls[i].io);
    MHD_stop_daemon(g.ls[i].d);
    g.ls[i].d = NULL;
  }
  g.nls = 0;
  ev_timer_stop(g.ev, &g.mhd_timer);
  ev_timer_stop(g.ev, &g.idle_timer);
  ev_timer_stop(g.ev, &g.sweep_timer);
  ev_signal_stop(g.ev, &g.sig_term);
  ev_signal_stop(g.ev, &g.sig_int);
  if (g.listen.unix_path[0]) unlink(g.listen.unix_path);
  json_decref(g.envs);
  g.envs = NULL;
}

/* POST /init: default user, workdir and global env vars (init.c parses). */
int dshd_server_set_workdir(const char *dir) {
  if (strlen(dir) >= sizeof g.workdir_buf) return -1;
  snprintf(g.workdir_buf, sizeof g.workdir_buf, "%s", dir);
  g.cfg.default_workdir = g.workdir_buf[0] ? g.workdir_buf : NULL;
  return 0;
}

void dshd_server_set_envs(json_t *envs) {
  json_decref(g.envs);
  g.envs = envs;
}

void dshd_server_user_changed(void) {
  g.cfg.default_user = dshd_default_user();
}
