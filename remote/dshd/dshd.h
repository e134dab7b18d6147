/* dshd.h: the internal interface of the sandbox daemon.
 *
 * dshd speaks E2B's envd protocol (Connect over HTTP/1.1 with JSON, plus
 * GET/POST /files and GET /health) on one libev loop: libmicrohttpd runs in
 * external-polling mode with its epoll fd watched by libev, processes come
 * from the core's proc module, JSON from jansson.
 *
 * The server core (server.h: main.c, server.c, listen.c, auth.c, request.c,
 * dispatch.c, connect.c, stream.c, users.c, json.c, and the /files and /init
 * handlers files.c, download.c, upload.c, init.c) owns connections, request
 * bodies, authentication and the Connect framing. Services (the process
 * service process*.c, see process.h; the filesystem service filesystem.c,
 * fs_entry.c, watch.c, watch_rpc.c, see fs.h) register handlers in a route
 * table and never touch libmicrohttpd: unary handlers turn a parsed request
 * into a response object; stream handlers attach a *source* to a
 * dshd_stream_t and append envelopes to it when the stream asks (pull) — a
 * stream that has nothing to send simply returns 0 and calls
 * dshd_stream_wake() later. A slow client therefore stops pulling, which is
 * how back-pressure reaches a process's output pipes.
 *
 * Never logs the access token. Every fd, process and watcher it creates is
 * released when its request, stream or process ends. */
#ifndef DSHD_H
#define DSHD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dsh/loop.h"
#include "dsh/loop_ev.h"

#define DSHD_VERSION "0.1.0"

/* --- configuration and global state ------------------------------------- */

typedef struct dshd_config {
  const char *listen;          /* "127.0.0.1:49983", "[::1]:0", or a unix socket path */
  char *access_token;          /* NULL = no token check */
  int envd_compat;             /* 1: every dshd extension off (stock envd behaviour) */
  uint64_t replay_bytes;       /* per process and stream; default 1 MiB */
  int64_t idle_timeout_ms;     /* 0 = never exit when idle */
  const char *default_user;    /* NULL: "user" if that account exists, else our own */
  const char *default_workdir; /* NULL: the user's home */
  const char *ready_file;      /* write "<address>\n" here once listening (atomic rename) */
  uint64_t max_rpc_body_bytes; /* unary/stream request body bound; default 64 MiB */
  int64_t exited_ttl_ms;       /* an exited process's record is dropped after; default 60 s */
  uint64_t exited_max_bytes;   /* all exited processes' records together; default 64 MiB */
  uint32_t max_open_files; /* > 0: every process started gets RLIMIT_NOFILE soft = hard = this */
} dshd_config_t;

typedef struct dshd dshd_t;

dshd_t *dshd_get(void);                 /* the one daemon of this process */
const dshd_config_t *dshd_config(void); /* default_user/_workdir follow POST /init */
dsh_loop_t *dshd_loop(void);
struct ev_loop *dshd_ev(void);
void dshd_activity(void); /* resets the idle timer */
/* A service freed much memory: free heap pages go back to the system soon
 * (once no stream is open). */
void dshd_memory_released(void);

/* Global environment variables set by POST /init "envVars" (envd §2.4: they
 * go into every process after HOME/USER/LOGNAME and before the request's
 * envs). A JSON object of strings, borrowed, never NULL; valid until the
 * next /init. */
json_t *dshd_env_vars(void);
/* An environment variable name /init and Start accept: non-empty, no '='. */
int dshd_env_name_valid(const char *name);

/* --- errors --------------------------------------------------------------- */

/* A Connect error: code is one of the Connect code strings ("not_found",
 * "invalid_argument", ...); the HTTP status follows from it for unary calls. */
typedef struct dshd_err {
  const char *code;
  char message[1024];
} dshd_err_t;

/* Sets err and returns -1, so handlers can `return dshd_errf(err, "not_found", "...", ...)`. */
int dshd_errf(dshd_err_t *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int dshd_code_http_status(const char *code); /* "not_found" -> 404, ... */

/* Optional hook of the process service (weak: absent = not called): runs on
 * SIGTERM/SIGINT/idle exit after every stream has been closed, before the
 * listeners go; must release the process groups it started. */
void dshd_process_shutdown(void) __attribute__((weak));

/* --- requests --------------------------------------------------------------- */

typedef struct dshd_req dshd_req_t;

/* Header value (case-insensitive name) or NULL. */
const char *dshd_req_header(dshd_req_t *r, const char *name);
/* Query argument or NULL. */
const char *dshd_req_query(dshd_req_t *r, const char *name);
/* User named by Authorization: Basic base64("name:"), or NULL when absent. */
const char *dshd_req_basic_user(dshd_req_t *r);

/* --- users and paths (users.c) ---------------------------------------------- */

typedef struct dshd_user {
  char name[64];
  uid_t uid;
  gid_t gid;
  char home[512];
  char shell[256];
} dshd_user_t;

/* Resolves a user name (NULL/"" = the default user). Unknown names fail with
 * unauthenticated "invalid username: '<name>'". When dshd is not root, only
 * the account it runs as can be used (others: permission_denied). */
int dshd_user_lookup(const char *name, dshd_user_t *out, dshd_err_t *err);

/* File operations from here on act as u (NULL: as the daemon): its
 * permissions decide what may be read, written or made, and what is made is
 * its own (setfsuid/setfsgid, when dshd is root). A request sets it once it
 * knows its user; each entry from libmicrohttpd starts as the daemon again. */
void dshd_act_as(const dshd_user_t *u);

/* envd path resolution (protocol §2.6): empty -> default workdir or home;
 * "~" and "~/x" -> home; "~other" -> invalid_argument; relative -> home/p;
 * cleaned lexically (".." resolved, symlinks not). out has PATH_MAX bytes. */
int dshd_resolve_path(const dshd_user_t *u, const char *path, int use_workdir, char *out,
                      size_t outlen, dshd_err_t *err);

/* --- routes ------------------------------------------------------------------ */

/* Unary: req is the parsed request message (a JSON object; never NULL). On
 * success set *resp to a new JSON object (may be empty) and return 0. */
typedef int (*dshd_unary_fn)(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err);

typedef struct dshd_stream dshd_stream_t;

/* Server stream: req is the message from the single request envelope. Attach
 * a source with dshd_stream_attach() and return 0, or return -1 with err set
 * and no source attached (the server then answers 200 + an end-of-stream
 * envelope carrying err, as the Connect protocol requires). Messages may be
 * appended before returning 0 (they are sent first). A handler that returns
 * 0 must attach a source or end the stream. */
typedef int (*dshd_stream_fn)(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err);

/* Client stream (StreamInput): each request envelope's message in order, then
 * (msg == NULL) the end; the handler keeps its state in *state. The NULL call
 * always comes exactly once, also after an error (-1) or when the client
 * went away mid-body (its return value is then ignored), so it is where
 * *state is freed. The answer is {} + end {} after a successful end, or an
 * end envelope with the first error. */
typedef int (*dshd_client_stream_fn)(dshd_req_t *r, json_t *msg, void **state, dshd_err_t *err);

typedef struct dshd_route {
  const char *path; /* "/process.Process/Start" */
  dshd_unary_fn unary;
  dshd_stream_fn stream;
  dshd_client_stream_fn client_stream;
  int extension; /* 1: a dshd extension, absent in --envd-compat */
} dshd_route_t;

/* Service route tables, each terminated by a zeroed entry. */
extern const dshd_route_t dshd_process_routes[];
extern const dshd_route_t dshd_filesystem_routes[];

/* POST /init (envd's orchestrator call; JSON body, not Connect): envVars for
 * every later process, defaultUser, defaultWorkdir. The server checks the
 * token (dshd requires it when one is configured), parses the body (a JSON
 * object, at most 1 MiB), applies envVars (merged into dshd_env_vars()),
 * defaultUser and defaultWorkdir (dshd_config()) itself, then calls this hook
 * when the process service defines it (weak) with the whole body, for
 * anything else it wants; it answers 204 on success, or a JSON error
 * {"code":<HTTP status of err->code>,"message":...}. */
int dshd_process_init(json_t *body, dshd_err_t *err) __attribute__((weak));

/* dshd extensions (absent with --envd-compat), as advertised by /health:
 *   process-groups  every process leads its own process group (PTYs: session)
 *   group-signals   SendSignal accepts SIGINT, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT
 *                   besides SIGTERM/SIGKILL; "group": true signals the group;
 *                   "graceMs": N with SIGTERM escalates to SIGKILL after N ms
 *                   unless the group is empty by then
 *   exit-signals    EndEvent carries "signal" (number) and "coreDumped"
 *   replay          DataEvent carries "offset" (the stream offset of its first
 *                   byte); ConnectRequest "resume": {"stdout":N,"stderr":N,"pty":N}
 *                   replays retained output from those offsets, and the start
 *                   event then carries "replay": {"<stream>":{"requested":N,"from":M}}
 *                   (bytes [N, M) were dropped)
 *   quiescence      unary /process.Process/GroupStatus {"process":{"pid":N}} ->
 *                   {"leaderExited":B,"quiescent":B}; server stream
 *                   /process.Process/WatchGroup sends that message now and on
 *                   every change and ends once quiescent
 *   stream-input    /process.Process/StreamInput (client stream)
 *   env-scrub       StartRequest "envScrub": {"contains":["KEY",...],"prefixes":["DSH_"]}
 *                   drops, case-insensitively, every variable of the ambient
 *                   environment (daemon PATH/HOME/USER/LOGNAME and /init's
 *                   envVars) whose name contains one of "contains" or starts
 *                   with one of "prefixes"; the request's envs apply after. The
 *                   rules come from the host, which holds the one definition.
 *   spill           StartRequest "spill": {"stdout":{"path":P,"maxBytes":N},"stderr":...}
 *                   also writes the stream's bytes to file P (created 0600 for
 *                   the process's user, parents made), stopping after N bytes,
 *                   as `head -c N` does (the host tells a complete spill from a
 *                   cut one by the stream's total, which it knows from offsets)
 *   terminal-sessions  for PTY processes (session leaders): SendSignal
 *                   "foreground": true signals the terminal's foreground process
 *                   group and answers {"pgid":N}; "session": true signals every
 *                   process group of the session (TERM also sends CONT);
 *                   GroupStatus answers "foregroundPgid"; and quiescence
 *                   (GroupStatus, WatchGroup) waits until the whole session,
 *                   background jobs included, is gone */
#define DSHD_EXTENSIONS                                                                       \
  "process-groups,group-signals,exit-signals,replay,quiescence,stream-input,env-scrub,spill," \
  "terminal-sessions"

/* --- server streams (stream.c) ---------------------------------------------- */

typedef struct dshd_stream_ops {
  /* The stream's buffer ran empty and the client can take more: append
   * messages with dshd_stream_message()/dshd_stream_end(). Return 1 when
   * something was appended, 0 when there is nothing now (call
   * dshd_stream_wake() once there is). */
  int (*pull)(void *ud, dshd_stream_t *s);
  /* The stream is finished (end sent and flushed) or the client went away.
   * The source must detach and may free ud; s is invalid afterwards. */
  void (*closed)(void *ud, dshd_stream_t *s, int client_gone);
  /* Optional: the client sent its end of file. It may only have half-closed
   * its socket (and still read) or be gone; append something harmless to
   * send now (a keepalive) so that a gone client shows by the write failing.
   * Without it, an end of file counts as the client going away. */
  void (*probe)(void *ud, dshd_stream_t *s);
} dshd_stream_ops_t;

void dshd_stream_attach(dshd_stream_t *s, const dshd_stream_ops_t *ops, void *ud);

/* Ask the server to pull again (e.g. new output arrived). Cheap; idempotent. */
void dshd_stream_wake(dshd_stream_t *s);

/* Append one normal message (flags 0x00) with a JSON payload. */
void dshd_stream_message(dshd_stream_t *s, const char *json, size_t len);
void dshd_stream_message_json(dshd_stream_t *s, json_t *msg); /* steals msg */

/* Reserve room for a message payload of at most max bytes and commit the
 * bytes actually written (for data events built in place, no extra copy).
 * NULL when the stream takes nothing more (ended, client gone, out of
 * memory): drop the data then. */
char *dshd_stream_reserve(dshd_stream_t *s, size_t max);
void dshd_stream_commit(dshd_stream_t *s, size_t len);

/* Append the end-of-stream envelope: {} on success, or {"error":{...}}. No
 * message may follow (later appends are ignored). Wakes the stream itself. */
void dshd_stream_end(dshd_stream_t *s, const dshd_err_t *err);

/* Bytes appended but not yet taken by the client. */
size_t dshd_stream_buffered(const dshd_stream_t *s);

/* Header value of the request that opened the stream (valid for its life). */
int64_t dshd_stream_timeout_ms(const dshd_stream_t *s);   /* Connect-Timeout-Ms, 0 = none */
int64_t dshd_stream_keepalive_ms(const dshd_stream_t *s); /* Keepalive-Ping-Interval * 1000 */

/* --- JSON helpers (json.c) ----------------------------------------------------- */

/* Field lookup accepting the lowerCamelCase and the original snake_case name
 * (snake may be NULL). JSON null counts as absent. */
json_t *dshd_json_field(json_t *obj, const char *camel, const char *snake);
/* Nested message: *out = the object or NULL when absent; -1 if not an object. */
int dshd_json_object(json_t *obj, const char *camel, const char *snake, json_t **out,
                     dshd_err_t *err);
/* String field ("" when absent); -1 + invalid_argument when present and not a string. */
int dshd_json_string(json_t *obj, const char *camel, const char *snake, const char **out,
                     dshd_err_t *err);
/* Unsigned integer from a JSON number or a decimal string; absent -> dflt. */
int dshd_json_uint(json_t *obj, const char *camel, const char *snake, uint64_t dflt, uint64_t *out,
                   dshd_err_t *err);
/* Signed integer (int32/sint32/int64) from a number or a decimal string. */
int dshd_json_int(json_t *obj, const char *camel, const char *snake, int64_t dflt, int64_t *out,
                  dshd_err_t *err);
int dshd_json_bool(json_t *obj, const char *camel, const char *snake, int dflt, int *out,
                   dshd_err_t *err);

/* Enums: a table of {name, value} ending with {NULL, 0}. Input: the value
 * name or a JSON number (any int32, as protobuf enums are open); an unknown
 * name leaves the default (protojson DiscardUnknown). Output: the name, or
 * NULL for a value without one (write it as a number then). */
typedef struct dshd_enum {
  const char *name;
  int32_t value;
} dshd_enum_t;
int dshd_json_enum(json_t *obj, const char *camel, const char *snake, const dshd_enum_t *names,
                   int32_t dflt, int32_t *out, dshd_err_t *err);
const char *dshd_enum_name(const dshd_enum_t *names, int32_t value);

/* Writers. A JSON string from arbitrary bytes (invalid UTF-8 is replaced by
 * U+FFFD, never NULL except out of memory); int64 as a decimal string. */
json_t *dshd_json_str(const char *s);
json_t *dshd_json_strn(const char *s, size_t len);
json_t *dshd_json_int64_string(int64_t v);
/* bytes: standard or URL-safe base64, padded or not; caller frees *out. */
int dshd_json_bytes(json_t *obj, const char *camel, const char *snake, uint8_t **out,
                    size_t *outlen, dshd_err_t *err);

#endif
