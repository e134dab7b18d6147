/* server.h: what the server core shares privately — main.c (the command
 * line), server.c (daemon state, libmicrohttpd on the loop, lifecycle),
 * listen.c (sockets), auth.c (token), request.c (responses, request
 * accessors), dispatch.c (routing), connect.c and stream.c (Connect), files.c,
 * download.c, upload.c and init.c (/files, /init), users.c. Services use
 * dshd.h only.
 *
 * A dshd_req_t lives from the first access-handler call of a request to
 * libmicrohttpd's completion notice; its kind decides which module feeds its
 * body and builds its answer. Everything here runs on the one libev loop, and
 * nothing may call MHD_run() from inside a libmicrohttpd callback. */
#ifndef DSHD_SERVER_H
#define DSHD_SERVER_H

#include <limits.h>
#include <microhttpd.h>
#include <sys/un.h>

#include "dsh/envelope.h"
#include "dsh/errors.h"
#include "dsh/sha256.h"
#include "dshd.h"

enum dshd_req_kind {
  REQ_NONE = 0,
  REQ_HEALTH,
  REQ_UNARY,   /* Connect unary, application/json */
  REQ_SSTREAM, /* Connect server stream, one request envelope */
  REQ_CSTREAM, /* Connect client stream, envelopes fed as they arrive */
  REQ_FILES_GET,
  REQ_FILES_POST,
  REQ_INIT
};

struct files_upload; /* upload.c */
struct conn;         /* conns.c */

struct dshd_req {
  struct MHD_Connection *conn;
  const char *url;
  const char *method;
  const char *version; /* "HTTP/1.1" */
  int kind;
  const dshd_route_t *route;
  /* An answer decided before the body was read: queued once the body has
   * been discarded (or at once when the body may be large). */
  struct MHD_Response *answer;
  unsigned answer_status;
  int answered;   /* a response was queued */
  int answer_now; /* queue the answer at once, never after the body (framing errors) */
  /* conns.c's view */
  struct conn *conn_track; /* the connection's record, while the request runs */
  int chunked;             /* Transfer-Encoding: chunked */
  int body_done;           /* the final access-handler call came */
  double body_at;          /* the headers or the latest body bytes arrived (ev time) */
  uint64_t discarded;      /* body bytes dropped after an answer was decided */
  /* Connect */
  char *body; /* unary body */
  size_t body_len, body_cap;
  dsh_envelope_decoder_t *dec;
  json_t *msg; /* server stream: the request message */
  int nmsg;
  void *cstate; /* client stream handler state */
  int cstarted; /* client stream handler was called at least once */
  int cfailed;
  dshd_err_t cerr;
  int64_t timeout_ms;
  int64_t keepalive_ms;
  dshd_stream_t *stream;
  /* Authorization: Basic */
  int basic_parsed;
  char *basic_user;
  /* /files upload and /init body */
  struct files_upload *up;
};

/* --- listen.c --------------------------------------------------------------- */

typedef struct dshd_listen {
  int fds[2];                  /* listening sockets; fds[1] is -1 or localhost's ::1 */
  char address[PATH_MAX + 16]; /* "127.0.0.1:43567", "[::1]:43567" or the socket path */
  char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* removed at exit; "" for TCP */
  int loopback; /* only this machine can connect: 127.0.0.0/8, ::1, localhost, a unix socket */
} dshd_listen_t;

/* Opens the sockets --listen names (see docs/dshd.md); why on failure. */
int dshd_listen_open(const char *spec, dshd_listen_t *out, char *why, size_t whylen);
/* Writes "<address>\n" to path atomically (temporary file + rename). */
int dshd_listen_ready_file(const char *path, const char *address, char *why, size_t whylen);

/* --- seccomp.c ---------------------------------------------------------- */

/* Installs the sandbox's system-call filter on this process (and so on all
 * it starts); why on failure. */
int dshd_seccomp_install(char *why, size_t whylen);

/* --- server.c --------------------------------------------------------------- */

/* main.c drives these: start (listeners, ready file; why on failure), run the
 * loop until a signal or the idle timeout (returns the exit status), stop
 * (closes streams, calls the process hook, frees everything). */
typedef struct dshd_server_opts {
  int verbose;                        /* one log line per request */
  size_t connection_memory_bytes;     /* libmicrohttpd's per-connection pool */
  int64_t header_timeout_ms;          /* a new connection's first request header; 0 = none */
  int64_t keepalive_timeout_ms;       /* an idle kept-alive connection's next header; 0 = none */
  int allow_tokenless_network;        /* listen beyond loopback without a token */
  const char *const *allowed_origins; /* Origin values accepted without a token */
  int n_allowed_origins;
} dshd_server_opts_t;
int dshd_server_start(const dshd_config_t *cfg, const dshd_server_opts_t *opts, char *why,
                      size_t whylen);
int dshd_server_run(void);
void dshd_server_stop(void);
const char *dshd_server_address(void);
/* POST /init */
int dshd_server_set_workdir(const char *dir);
void dshd_server_set_envs(json_t *envs); /* takes envs */
void dshd_server_user_changed(void);

/* Hands free heap pages back while no stream is open. */
void dshd_server_trim_heap(void);
/* dispatch.c counts requests in flight (the idle timer waits for them). */
void dshd_server_request_begun(void);
void dshd_server_request_ended(void);

/* libmicrohttpd must be run soon (a connection was resumed). */
void dshd_server_kick(void);
int dshd_server_in_mhd(void);
void dshd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int dshd_verbose(void);

/* --- conns.c ---------------------------------------------------------------------- */

/* Accepts on fds (-1 entries skipped) into d and polices the connections. */
int dshd_conns_start(struct MHD_Daemon *d, const int *fds, int nfds,
                     const dshd_server_opts_t *opts);
void dshd_conns_stop_accepting(void);
void dshd_conns_stop(void); /* also closes the listening sockets */
/* libmicrohttpd's connection notice. */
void dshd_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);
/* A request's headers are in (begun) / its answer is done (ended). */
void dshd_conns_request_begun(dshd_req_t *r);
void dshd_conns_request_ended(dshd_req_t *r);
/* Something was done for a client (a callback from libmicrohttpd). */
void dshd_conns_progress(void);
/* After each round of MHD_run(): busy = libmicrohttpd has work now. */
void dshd_conns_after_run(int busy);
size_t dshd_conns_count(void);
size_t dshd_conns_max(void);

/* --- dispatch.c ---------------------------------------------------------------- */

/* libmicrohttpd's access handler and completion notice. */
enum MHD_Result dshd_dispatch_request(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls);
void dshd_dispatch_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                             enum MHD_RequestTerminationCode toe);

/* --- screen.c ------------------------------------------------------------------- */

/* Before routing: 0, or the request was answered (refused, connection
 * closed) and -1. */
int dshd_screen_request(dshd_req_t *r);
/* The Origin values accepted from requests without a token (kept, not copied). */
void dshd_screen_init(const dshd_server_opts_t *opts);

/* --- request.c ------------------------------------------------------------------ */

/* Build responses. Bodies are copied. */
struct MHD_Response *dshd_response_bytes(const char *ctype, const void *data, size_t len);
struct MHD_Response *dshd_response_json(json_t *v); /* steals v; application/json */
/* envd's HTTP error body {"code":<status>,"message":"..."}. */
struct MHD_Response *dshd_response_http_error(unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Remember the answer: queued at the end of the body (dispatch.c), or at
 * once when the body may be large; a second answer is dropped. Takes resp. */
void dshd_req_answer(dshd_req_t *r, unsigned status, struct MHD_Response *resp);
/* 401 with envd's error body; the connection is closed after it. */
void dshd_req_refuse_unauthenticated(dshd_req_t *r, const char *message);
/* Queue resp on the connection now (dispatch.c). Takes resp. */
void dshd_req_queue(dshd_req_t *r, unsigned status, struct MHD_Response *resp);

/* Query value; *has_nul set when the decoded value contains a NUL byte. */
const char *dshd_req_query_n(dshd_req_t *r, const char *name, int *has_nul);

/* --- auth.c --------------------------------------------------------------------- */

/* token: NULL = no token check; the pointer is kept (the config owns it). */
void dshd_auth_init(const char *token);
/* Checks X-Access-Token (constant time). 1 = token configured and header ok
 * or no token configured; 0 = missing or wrong. */
int dshd_auth_header_ok(dshd_req_t *r);
int dshd_auth_has_token(void);
/* envd v1 URL signature (protocol §1.4); 0 ok, else -1 and why. */
int dshd_auth_signature_ok(const char *path, const char *operation, const char *username,
                           const char *signature, const char *expiration, const char **why);

/* --- connect.c -------------------------------------------------------------- */

/* Header stage of an RPC: content type, timeout, encodings. Sets r->kind or
 * an answer. */
void dshd_connect_begin(dshd_req_t *r);
void dshd_connect_body(dshd_req_t *r, const char *data, size_t len);
void dshd_connect_finish(dshd_req_t *r);
void dshd_connect_completed(dshd_req_t *r, int client_gone);
/* Answers r with a Connect error the way its kind requires (unary: HTTP
 * status + JSON; streams: 200 + end-of-stream envelope). */
void dshd_connect_fail(dshd_req_t *r, const dshd_err_t *err);
/* End-of-stream payload: {} or {"error":{...}}. */
json_t *dshd_connect_end_json(const dshd_err_t *err);
/* Connect error answers. */
struct MHD_Response *dshd_connect_unary_error(const dshd_err_t *err, unsigned *status);
json_t *dshd_connect_error_json(const dshd_err_t *err); /* {"code","message"} */

/* --- stream.c --------------------------------------------------------------- */

/* A server stream's request message is in (r->msg): runs the route's
 * handler and answers with the stream. */
void dshd_stream_begin(dshd_req_t *r);
/* The request of a stream completed (client_gone: it did not end well). */
void dshd_stream_request_done(dshd_stream_t *s, int client_gone);
/* Streams still open (for the idle timer) and their shutdown. */
size_t dshd_streams_open(void);
void dshd_streams_shutdown(void);
/* Resumes connections whose wake came while inside libmicrohttpd; returns
 * how many. Called by server.c after MHD_run(). */
int dshd_streams_flush_resumes(void);

/* --- files.c, download.c, upload.c, init.c ---------------------------------------- */

void dshd_files_begin(dshd_req_t *r);
void dshd_files_body(dshd_req_t *r, const char *data, size_t len);
void dshd_files_finish(dshd_req_t *r);
void dshd_files_completed(dshd_req_t *r);
/* Shared by the /files and /init handlers: */
/* envd's JSON error answer {"code":status,"message":...}. */
void dshd_files_error(dshd_req_t *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An answer (an error) was already decided. */
int dshd_files_failed(dshd_req_t *r);
/* User for ?username= (NULL/absent = default). 0, or answers and -1. */
int dshd_files_user(dshd_req_t *r, const char *username, dshd_user_t *u);
/* Access token header or URL signature (§1.4). 0, or answers 401 and -1. */
int dshd_files_auth(dshd_req_t *r, const char *path, const char *op);
/* Query value; *bad set when it holds a NUL byte. */
const char *dshd_files_query(dshd_req_t *r, const char *name, int *bad);
/* download.c: GET/HEAD /files, at the end of the (ignored) body. */
void dshd_download(dshd_req_t *r);
/* upload.c: POST /files. */
void dshd_upload_begin(dshd_req_t *r);
void dshd_upload_body(dshd_req_t *r, const char *data, size_t n);
void dshd_upload_finish(dshd_req_t *r);
void dshd_upload_free(struct files_upload *up);
/* init.c: POST /init */
void dshd_init_begin(dshd_req_t *r);
void dshd_init_body(dshd_req_t *r, const char *data, size_t n);
void dshd_init_finish(dshd_req_t *r);

/* --- users.c ---------------------------------------------------------------- */

int dshd_users_init(const char *configured, dshd_err_t *err);
const char *dshd_default_user(void);
int dshd_set_default_user(const char *name, dshd_err_t *err);
/* Creates missing directories of path (0755) chowned to u, like envd's
 * EnsureDirs; -1 with an internal error naming the failing component. */
int dshd_ensure_dirs(const dshd_user_t *u, const char *path, dshd_err_t *err);
/* chown when running as root; 0 or -errno. */
int dshd_chown_fd(const dshd_user_t *u, int fd);
int dshd_chown_path(const dshd_user_t *u, const char *path);
/* Go-style error text: "no such file or directory". */
const char *dshd_strerror(int errnum);

/* --- watch_rpc.c ------------------------------------------------------------ */

void dshd_watchers_shutdown(void);

#endif
