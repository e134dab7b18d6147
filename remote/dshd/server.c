/* server.c: the HTTP side of dshd — listeners, libmicrohttpd on the libev
 * loop, request dispatch, the access token, /health, the idle timer and the
 * graceful stop.
 *
 * libmicrohttpd runs in external-polling epoll mode (no threads): one ev_io
 * watches each daemon's epoll fd and one ev_timer follows MHD_get_timeout();
 * both call MHD_run(). Connections resumed from inside libmicrohttpd are
 * resumed after MHD_run() returns (connect.c keeps that list). Requests are
 * dispatched on their first access-handler call to connect.c (RPCs) or
 * files.c (/files, /init); this file never parses a body. Never logs the
 * token or request headers. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dsh/base64.h"

#define MAX_LISTENERS 2
#define SWEEP_MS 2000          /* how often open connections are checked for a vanished client */
#define SMALL_BODY (64u << 10) /* early answers wait for bodies up to this size */

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
  char address[PATH_MAX + 16];
  char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  uint8_t token_hash[32];
  int has_token;
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

/* --- responses ------------------------------------------------------------------ */

struct MHD_Response *dshd_response_bytes(const char *ctype, const void *data, size_t len) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, (void *)(uintptr_t)data, MHD_RESPMEM_MUST_COPY);
  if (resp && ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  return resp;
}

struct MHD_Response *dshd_response_json(json_t *v) {
  char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
  json_decref(v);
  struct MHD_Response *resp = s ? dshd_response_bytes("application/json", s, strlen(s))
                                : dshd_response_bytes("application/json", "{}", 2);
  free(s);
  return resp;
}

struct MHD_Response *dshd_response_http_error(unsigned status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *o = json_object();
  json_object_set_new(o, "code", json_integer(status));
  json_object_set_new(o, "message", dshd_json_str(msg));
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  size_t n = s ? strlen(s) : 0;
  /* envd's json.Encoder ends the body with a newline. */
  char *body = malloc(n + 2);
  if (body) {
    memcpy(body, s ? s : "", n);
    body[n] = '\n';
  }
  struct MHD_Response *resp =
      dshd_response_bytes("application/json; charset=utf-8", body ? body : "{}", body ? n + 1 : 2);
  free(body);
  free(s);
  if (resp) MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  return resp;
}

static void queue(dshd_req_t *r, unsigned status, struct MHD_Response *resp) {
  if (!resp) {
    r->answered = 1;
    return;
  }
  MHD_queue_response(r->conn, status, resp);
  MHD_destroy_response(resp);
  r->answered = 1;
  if (g.verbose) dshd_log("%s %s -> %u", r->method, r->url, status);
}

void dshd_req_answer(dshd_req_t *r, unsigned status, struct MHD_Response *resp) {
  if (r->answered || r->answer) {
    if (resp) MHD_destroy_response(resp);
    return;
  }
  r->answer = resp;
  r->answer_status = status;
}

/* --- request accessors ------------------------------------------------------------ */

const char *dshd_req_header(dshd_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *dshd_req_query(dshd_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *dshd_req_query_n(dshd_req_t *r, const char *name, int *has_nul) {
  const char *v = NULL;
  size_t n = 0;
  *has_nul = 0;
  if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v, &n) !=
      MHD_YES)
    return NULL;
  if (v && strlen(v) != n) *has_nul = 1;
  return v;
}

const char *dshd_req_basic_user(dshd_req_t *r) {
  if (r->basic_parsed) return r->basic_user;
  r->basic_parsed = 1;
  const char *h = dshd_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncasecmp(h, "Basic ", 6) != 0) return NULL;
  const char *b = h + 6;
  while (*b == ' ') b++;
  size_t n = strlen(b);
  if (n > 4096) return NULL;
  uint8_t *dec = malloc(dsh_base64_decoded_max(n) + 1);
  size_t got = 0;
  if (!dec) return NULL;
  if (dsh_base64_decode(b, n, dec, &got) != 0) {
    free(dec);
    return NULL;
  }
  dec[got] = 0;
  char *colon = memchr(dec, ':', got);
  if (!colon || colon == (char *)dec || memchr(dec, 0, got)) { /* Go: no ':' -> not basic auth */
    free(dec);
    return NULL;
  }
  *colon = 0;
  r->basic_user = (char *)dec;
  return r->basic_user;
}

/* --- access token ------------------------------------------------------------------ */

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++) d |= a[i] ^ b[i];
  return d == 0;
}

int dshd_auth_has_token(void) {
  return g.has_token;
}

int dshd_auth_header_ok(dshd_req_t *r) {
  if (!g.has_token) return 1;
  const char *h = dshd_req_header(r, "X-Access-Token");
  if (!h) return 0;
  uint8_t hh[32];
  dsh_sha256((const uint8_t *)h, strlen(h), hh);
  return ct_equal(hh, g.token_hash, 32);
}

int dshd_auth_signature_ok(const char *path, const char *operation, const char *username,
                           const char *signature, const char *expiration, const char **why) {
  *why = "invalid signature";
  if (!g.has_token || !g.cfg.access_token) return 0;
  if (!signature) {
    *why = "missing signature query parameter";
    return -1;
  }
  long long exp = 0;
  if (expiration) {
    char *end;
    errno = 0;
    exp = strtoll(expiration, &end, 10);
    if (errno || end == expiration || *end) return -1;
  }
  dsh_sha256_t c;
  dsh_sha256_init(&c);
  const char *parts[] = {path, ":", operation, ":", username, ":", g.cfg.access_token};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    dsh_sha256_update(&c, (const uint8_t *)parts[i], strlen(parts[i]));
  if (expiration) {
    char eb[32];
    int en = snprintf(eb, sizeof eb, ":%lld", exp);
    dsh_sha256_update(&c, (const uint8_t *)eb, (size_t)en);
  }
  uint8_t digest[32];
  dsh_sha256_final(&c, digest);
  char want[3 + 44 + 1] = "v1_";
  size_t n = dsh_base64_encode(digest, 32, want + 3);
  while (n && want[3 + n - 1] == '=') n--; /* RawStdEncoding: no padding */
  want[3 + n] = 0;
  size_t wl = 3 + n, sl = strlen(signature);
  if (wl != sl || !ct_equal((const uint8_t *)want, (const uint8_t *)signature, wl)) return -1;
  if (expiration && exp < (long long)time(NULL)) {
    *why = "signature is already expired";
    return -1;
  }
  return 0;
}

/* --- dispatch ------------------------------------------------------------------------ */

static const dshd_route_t *find_route(const char *url) {
  const dshd_route_t *tables[] = {dshd_filesystem_routes, dshd_process_routes};
  for (size_t t = 0; t < 2; t++)
    for (const dshd_route_t *rt = tables[t]; rt && rt->path; rt++)
      if (strcmp(rt->path, url) == 0) {
        if (rt->extension && g.cfg.envd_compat) return NULL;
        return rt;
      }
  return NULL;
}

static int small_body(dshd_req_t *r) {
  const char *te = dshd_req_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  if (te) return 0;
  const char *cl = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (!cl) return 1;
  char *end;
  unsigned long long n = strtoull(cl, &end, 10);
  return end != cl && n <= SMALL_BODY;
}

static void answer_health(dshd_req_t *r) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (!g.cfg.envd_compat) {
    MHD_add_response_header(resp, "Dshd-Version", DSHD_VERSION);
    MHD_add_response_header(resp, "Dshd-Extensions", DSHD_EXTENSIONS);
  }
  dshd_req_answer(r, MHD_HTTP_NO_CONTENT, resp);
}

static void answer_not_found(dshd_req_t *r) {
  static const char body[] = "404 page not found\n";
  struct MHD_Response *resp =
      dshd_response_bytes("text/plain; charset=utf-8", body, sizeof body - 1);
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  dshd_req_answer(r, MHD_HTTP_NOT_FOUND, resp);
}

static void answer_method(dshd_req_t *r, const char *allow) {
  struct MHD_Response *resp =
      dshd_response_http_error(MHD_HTTP_METHOD_NOT_ALLOWED, "method %s not allowed", r->method);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
  dshd_req_answer(r, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
}

static int is(const char *m, const char *want) {
  return strcmp(m, want) == 0;
}

static void begin(dshd_req_t *r) {
  const char *url = r->url, *m = r->method;
  if (strcmp(url, "/health") == 0) {
    r->kind = REQ_HEALTH;
    if (is(m, "GET") || is(m, "HEAD"))
      answer_health(r);
    else
      answer_method(r, "GET, HEAD");
    return;
  }
  int files = strcmp(url, "/files") == 0;
  if (!files && !dshd_auth_header_ok(r)) {
    dshd_req_answer(r, MHD_HTTP_UNAUTHORIZED,
                    dshd_response_http_error(MHD_HTTP_UNAUTHORIZED,
                                             "unauthorized access, please provide a valid access "
                                             "token or method signing if supported"));
    return;
  }
  if (files) {
    if (is(m, "GET") || is(m, "HEAD"))
      r->kind = REQ_FILES_GET;
    else if (is(m, "POST"))
      r->kind = REQ_FILES_POST;
    else
      return answer_method(r, "GET, HEAD, POST");
    dshd_files_begin(r);
    return;
  }
  if (strcmp(url, "/init") == 0) {
    if (!is(m, "POST")) return answer_method(r, "POST");
    r->kind = REQ_INIT;
    dshd_init_begin(r);
    return;
  }
  const dshd_route_t *rt = find_route(url);
  if (!rt) return answer_not_found(r);
  r->route = rt;
  if (!is(m, "POST")) return answer_method(r, "POST");
  dshd_connect_begin(r);
}

static void feed(dshd_req_t *r, const char *data, size_t n) {
  switch (r->kind) {
    case REQ_UNARY:
    case REQ_SSTREAM:
    case REQ_CSTREAM:
      dshd_connect_body(r, data, n);
      break;
    case REQ_FILES_POST:
      dshd_files_body(r, data, n);
      break;
    case REQ_INIT:
      dshd_init_body(r, data, n);
      break;
    default:
      break; /* bodies of GET and friends are ignored */
  }
}

static void finish(dshd_req_t *r) {
  switch (r->kind) {
    case REQ_UNARY:
    case REQ_SSTREAM:
    case REQ_CSTREAM:
      dshd_connect_finish(r);
      break;
    case REQ_FILES_GET:
    case REQ_FILES_POST:
      dshd_files_finish(r);
      break;
    case REQ_INIT:
      dshd_init_finish(r);
      break;
    default:
      break;
  }
}

static uint64_t discard_limit(dshd_req_t *r) {
  if (r->kind == REQ_FILES_POST) return UINT64_MAX; /* the client must get its answer */
  return g.cfg.max_rpc_body_bytes * 2 + (1u << 20);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  dshd_req_t *r = *con_cls;
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    r->conn = c;
    r->url = url;
    r->method = method;
    *con_cls = r;
    g.active_requests++;
    dshd_activity();
    begin(r);
    if (r->answer && !small_body(r)) { /* don't wait for a large body: answer and close */
      queue(r, r->answer_status, r->answer);
      r->answer = NULL;
    }
    return MHD_YES;
  }
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (r->answered) return MHD_YES;
    if (r->answer) {
      r->discarded += n;
      return r->discarded > discard_limit(r) ? MHD_NO : MHD_YES;
    }
    feed(r, upload_data, n);
    return MHD_YES;
  }
  if (r->answered) return MHD_YES;
  if (!r->answer) finish(r);
  if (r->answer) {
    queue(r, r->answer_status, r->answer);
    r->answer = NULL;
  }
  if (!r->answered) { /* a stream is suspended, or nothing was decided: never spin */
    queue(r, 500, dshd_response_http_error(500, "internal error: no answer"));
  }
  return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  dshd_req_t *r = *con_cls;
  if (!r) return;
  *con_cls = NULL;
  int gone = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
  switch (r->kind) {
    case REQ_UNARY:
    case REQ_SSTREAM:
    case REQ_CSTREAM:
      dshd_connect_completed(r, gone);
      break;
    case REQ_FILES_GET:
    case REQ_FILES_POST:
    case REQ_INIT:
      dshd_files_completed(r);
      break;
    default:
      break;
  }
  if (r->answer) MHD_destroy_response(r->answer);
  free(r->basic_user);
  free(r);
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
      MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, NULL,
      MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, g.conn_memory, MHD_OPTION_CONNECTION_MEMORY_INCREMENT,
      (size_t)4096, MHD_OPTION_CONNECTION_LIMIT, (unsigned)4000, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)640, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_NOTIFY_CONNECTION,
      on_connection, NULL, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
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

/* --- listeners -------------------------------------------------------------------------- */

static int tcp_socket(int family, const char *host, unsigned port, unsigned *bound, char *why,
                      size_t whylen) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(why, whylen, "socket: %s", strerror(errno));
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage ss;
  socklen_t sl;
  memset(&ss, 0, sizeof ss);
  if (family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
      snprintf(why, whylen, "bad IPv4 address '%s'", host);
      close(fd);
      return -1;
    }
    sl = sizeof *a;
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) {
      snprintf(why, whylen, "bad IPv6 address '%s'", host);
      close(fd);
      return -1;
    }
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sl = sizeof *a;
  }
  if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
    snprintf(why, whylen, "bind %s port %u: %s", host, port, strerror(errno));
    close(fd);
    return -1;
  }
  sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *bound = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                   : ((struct sockaddr_in6 *)&ss)->sin6_port);
  return fd;
}

static int unix_socket(const char *path, char *why, size_t whylen) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path) {
    snprintf(why, whylen, "socket path too long: %s", path);
    return -1;
  }
  strcpy(a.sun_path, path);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      snprintf(why, whylen, "%s exists and is not a socket", path);
      return -1;
    }
    unlink(path); /* stale socket of an earlier run */
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(why, whylen, "socket: %s", strerror(errno));
    return -1;
  }
  mode_t old = umask(0177);
  int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (rc != 0 || chmod(path, 0600) != 0 || listen(fd, 1024) != 0) {
    snprintf(why, whylen, "bind %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  snprintf(g.unix_path, sizeof g.unix_path, "%s", path);
  return fd;
}

static int open_listeners(const char *spec, char *why, size_t whylen) {
  if (strchr(spec, '/')) {
    int fd = unix_socket(spec, why, whylen);
    if (fd < 0) return -1;
    if (start_daemon(fd) != 0) {
      close(fd);
      snprintf(why, whylen, "libmicrohttpd failed to start on %s", spec);
      return -1;
    }
    snprintf(g.address, sizeof g.address, "%s", spec);
    return 0;
  }
  const char *colon = strrchr(spec, ':');
  char host[256];
  const char *portstr;
  if (!colon) { /* just a port */
    snprintf(host, sizeof host, "127.0.0.1");
    portstr = spec;
  } else {
    size_t hl = (size_t)(colon - spec);
    if (hl >= sizeof host) {
      snprintf(why, whylen, "bad listen address '%s'", spec);
      return -1;
    }
    memcpy(host, spec, hl);
    host[hl] = 0;
    portstr = colon + 1;
  }
  char *end;
  unsigned long port = strtoul(portstr, &end, 10);
  if (!*portstr || *end || port > 65535) {
    snprintf(why, whylen, "bad port in listen address '%s'", spec);
    return -1;
  }
  unsigned bound = 0;
  if (strcmp(host, "localhost") == 0 || host[0] == 0) {
    int fd4 = tcp_socket(AF_INET, "127.0.0.1", (unsigned)port, &bound, why, whylen);
    if (fd4 < 0) return -1;
    if (start_daemon(fd4) != 0) {
      close(fd4);
      snprintf(why, whylen, "libmicrohttpd failed to start");
      return -1;
    }
    char why6[256];
    unsigned b6;
    int fd6 = tcp_socket(AF_INET6, "::1", bound, &b6, why6, sizeof why6);
    if (fd6 >= 0 && start_daemon(fd6) != 0) close(fd6);
    snprintf(g.address, sizeof g.address, "127.0.0.1:%u", bound);
    return 0;
  }
  int v6 = host[0] == '[';
  if (v6) {
    size_t hl = strlen(host);
    if (hl < 3 || host[hl - 1] != ']') {
      snprintf(why, whylen, "bad listen address '%s'", spec);
      return -1;
    }
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = 0;
  }
  int fd = tcp_socket(v6 ? AF_INET6 : AF_INET, host, (unsigned)port, &bound, why, whylen);
  if (fd < 0) return -1;
  if (start_daemon(fd) != 0) {
    close(fd);
    snprintf(why, whylen, "libmicrohttpd failed to start");
    return -1;
  }
  if (v6)
    snprintf(g.address, sizeof g.address, "[%s]:%u", host, bound);
  else
    snprintf(g.address, sizeof g.address, "%s:%u", host, bound);
  return 0;
}

static int write_ready_file(const char *path, char *why, size_t whylen) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
    snprintf(why, whylen, "ready file path too long");
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(why, whylen, "ready file %s: %s", tmp, strerror(errno));
    return -1;
  }
  char line[sizeof g.address + 2];
  int n = snprintf(line, sizeof line, "%s\n", g.address);
  int ok = write(fd, line, (size_t)n) == n;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    snprintf(why, whylen, "ready file %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
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
  if (cfg->access_token) {
    dsh_sha256((const uint8_t *)cfg->access_token, strlen(cfg->access_token), g.token_hash);
    g.has_token = 1;
  }
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
  if (open_listeners(cfg->listen, why, whylen) != 0) return -1;
  ev_signal_init(&g.sig_term, signal_cb, SIGTERM);
  ev_signal_start(g.ev, &g.sig_term);
  ev_signal_init(&g.sig_int, signal_cb, SIGINT);
  ev_signal_start(g.ev, &g.sig_int);
  dshd_activity();
  if (cfg->idle_timeout_ms > 0) {
    ev_timer_init(&g.idle_timer, idle_cb, dsh_ms_to_ev(cfg->idle_timeout_ms), 0.);
    ev_timer_start(g.ev, &g.idle_timer);
  }
  dshd_log("listening on %s (dshd %s, user '%s'%s%s)", g.address, DSHD_VERSION, g.cfg.default_user,
           g.has_token ? ", access token required" : "", g.cfg.envd_compat ? ", envd-compat" : "");
  if (cfg->ready_file && write_ready_file(cfg->ready_file, why, whylen) != 0) return -1;
  update_timer();
  return 0;
}

const char *dshd_server_address(void) {
  return g.address;
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
  if (g.unix_path[0]) unlink(g.unix_path);
  json_decref(g.envs);
  g.envs = NULL;
}

/* POST /init: default user, workdir and global env vars (files.c parses). */
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
