/* server.c: dshd's daemon state and libmicrohttpd on the libev loop — the
 * configuration and its /init changes, one libmicrohttpd daemon without a
 * listening socket of its own (listen.c opens the sockets, conns.c accepts
 * and polices the connections), the idle timer, signals and the graceful
 * stop.
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

struct dshd {
  dshd_config_t cfg;
  char workdir_buf[PATH_MAX];
  dsh_loop_t *loop;
  struct ev_loop *ev;
  struct MHD_Daemon *d;
  ev_io mhd_io; /* libmicrohttpd's epoll fd */
  ev_timer mhd_timer;
  ev_timer idle_timer;
  ev_timer trim_timer; /* dshd_memory_released(): coalesced */
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
void dshd_server_trim_heap(void) {
#ifdef __GLIBC__
  if (dshd_streams_open() == 0) malloc_trim(0);
#endif
}

static void trim_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)w, (void)revents;
  dshd_server_trim_heap();
}

void dshd_memory_released(void) {
  if (!g.ev || ev_is_active(&g.trim_timer)) return;
  ev_timer_init(&g.trim_timer, trim_cb, 0.1, 0.);
  ev_timer_start(g.ev, &g.trim_timer);
}

/* --- libmicrohttpd on libev ------------------------------------------------------------ */

/* Arms the timer libmicrohttpd asks for; returns 1 when it has work now. */
static int update_timer(void) {
  MHD_UNSIGNED_LONG_LONG t = 0;
  int have = g.d && MHD_get_timeout(g.d, &t) == MHD_YES;
  ev_timer_stop(g.ev, &g.mhd_timer);
  if (have) {
    ev_timer_set(&g.mhd_timer, dsh_ms_to_ev((int64_t)(t > 86400000ull ? 86400000ull : t)), 0.);
    ev_timer_start(g.ev, &g.mhd_timer);
  }
  return have && t == 0;
}

static void run_mhd(void) {
  for (int round = 0; round < 4; round++) {
    g.in_mhd = 1;
    MHD_run(g.d);
    g.in_mhd = 0;
    if (dshd_streams_flush_resumes() == 0) break;
  }
  dshd_conns_after_run(update_timer());
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

static int start_daemon(const dshd_server_opts_t *opts) {
  g.d = MHD_start_daemon(
      MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0,
      NULL, NULL, dshd_dispatch_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, g.conn_memory, MHD_OPTION_CONNECTION_MEMORY_INCREMENT,
      (size_t)4096, MHD_OPTION_CONNECTION_LIMIT, (unsigned)4000, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)640, MHD_OPTION_NOTIFY_COMPLETED, dshd_dispatch_completed, NULL,
      MHD_OPTION_NOTIFY_CONNECTION, dshd_conns_notify, NULL, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
      MHD_OPTION_END);
  if (!g.d) return -1;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(g.d, MHD_DAEMON_INFO_EPOLL_FD);
  if (!di) {
    MHD_stop_daemon(g.d);
    g.d = NULL;
    return -1;
  }
  ev_io_init(&g.mhd_io, mhd_io_cb, di->epoll_fd, EV_READ);
  ev_io_start(g.ev, &g.mhd_io);
  return dshd_conns_start(g.d, g.listen.fds, 2, opts);
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
  if (dshd_listen_open(cfg->listen, &g.listen, why, whylen) != 0) return -1;
  if (!g.listen.loopback && !cfg->access_token && !opts->allow_tokenless_network) {
    for (int i = 0; i < 2; i++)
      if (g.listen.fds[i] >= 0) close(g.listen.fds[i]);
    if (g.listen.unix_path[0]) unlink(g.listen.unix_path);
    snprintf(why, whylen,
             "refusing to listen on %s without an access token (anyone who reaches it could run "
             "commands); give one with --access-token-fd, or pass --allow-tokenless-network",
             cfg->listen);
    return -1;
  }
  if (!g.listen.loopback && !cfg->access_token)
    dshd_log("WARNING: no access token: anyone who can reach %s can run commands",
             g.listen.address);
  dshd_screen_init(opts);
  if (start_daemon(opts) != 0) {
    for (int i = 0; i < 2; i++)
      if (g.listen.fds[i] >= 0) close(g.listen.fds[i]);
    snprintf(why, whylen, "libmicrohttpd failed to start on %s", cfg->listen);
    return -1;
  }
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
  if (g.d) {
    dshd_conns_stop_accepting();
    dshd_streams_shutdown();
    for (int round = 0; round < 3; round++) {
      g.in_mhd = 1;
      MHD_run(g.d);
      g.in_mhd = 0;
      dshd_streams_flush_resumes();
    }
  }
  if (dshd_process_shutdown) dshd_process_shutdown();
  dshd_watchers_shutdown();
  if (g.d) {
    ev_io_stop(g.ev, &g.mhd_io);
    MHD_stop_daemon(g.d);
    g.d = NULL;
    dshd_conns_stop();
  }
  ev_timer_stop(g.ev, &g.mhd_timer);
  ev_timer_stop(g.ev, &g.idle_timer);
  ev_timer_stop(g.ev, &g.trim_timer);
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
