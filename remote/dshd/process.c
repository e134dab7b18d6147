/* process.c: the process.Process service of dshd (envd protocol §2) and its
 * extensions (group signals, exit signals, replay/resume, quiescence,
 * StreamInput, env-scrub, spill) — the RPC handlers: request parsing, user
 * and cwd, and the route table. Start's environment and spill files are
 * prepared in process_spawn.c; the records and streams themselves live in
 * process_record.c and process_streams.c.
 *
 * Uses dshd.h only (users, paths, JSON helpers, stream API). Never blocks;
 * never answers an extension field or route in --envd-compat. */
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static int ext_on(void) {
  return !dshd_config()->envd_compat;
}

/* --- request pieces --------------------------------------------------------------- */

/* ProcessSelector under req.process: pid or tag (tag wins when non-empty). */
static int parse_selector(json_t *req, uint32_t *pid, const char **tag, dshd_err_t *err) {
  json_t *sel;
  if (dshd_json_object(req, "process", NULL, &sel, err) != 0) return -1;
  *pid = 0;
  *tag = NULL;
  if (!sel) return 0;
  uint64_t v;
  const char *t;
  if (dshd_json_uint(sel, "pid", NULL, 0, &v, err) != 0) return -1;
  if (dshd_json_string(sel, "tag", NULL, &t, err) != 0) return -1;
  if (v > UINT32_MAX)
    return dshd_errf(err, "invalid_argument", "pid %llu out of range", (unsigned long long)v);
  *pid = (uint32_t)v;
  if (dshd_json_field(sel, "tag", NULL)) *tag = t;
  return 0;
}

static record_t *select_proc(json_t *req, int live_only, dshd_err_t *err) {
  uint32_t pid;
  const char *tag;
  if (parse_selector(req, &pid, &tag, err) != 0) return NULL;
  record_t *pp = record_find(pid, tag, live_only);
  if (!pp) record_not_found(pid, tag, err);
  return pp;
}

/* ProcessInput: exactly one of stdin / pty. */
static int write_input(record_t *pp, json_t *input, dshd_err_t *err) {
  json_t *in_stdin = input ? dshd_json_field(input, "stdin", NULL) : NULL;
  json_t *in_pty = input ? dshd_json_field(input, "pty", NULL) : NULL;
  if (in_stdin && in_pty)
    return dshd_errf(err, "invalid_argument", "input: only one of stdin and pty may be set");
  if (!in_stdin && !in_pty)
    return dshd_errf(err, "unimplemented", "invalid input type: neither stdin nor pty is set");
  uint8_t *data = NULL;
  size_t n = 0;
  if (dshd_json_bytes(input, in_pty ? "pty" : "stdin", NULL, &data, &n, err) != 0) return -1;
  int rc = record_input(pp, in_pty != NULL, data, n, err);
  free(data);
  return rc;
}

/* --- Start ------------------------------------------------------------------------------ */

static int rpc_start(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err) {
  json_t *cfg, *pty = NULL, *size = NULL;
  if (dshd_json_object(req, "process", NULL, &cfg, err) != 0) return -1;
  if (!cfg) return dshd_errf(err, "invalid_argument", "process: config is required");
  const char *cmd, *cwd, *tag;
  if (dshd_json_string(cfg, "cmd", NULL, &cmd, err) != 0) return -1;
  if (dshd_json_string(cfg, "cwd", NULL, &cwd, err) != 0) return -1;
  if (dshd_json_string(req, "tag", NULL, &tag, err) != 0) return -1;
  json_t *args = dshd_json_field(cfg, "args", NULL);
  json_t *envs = dshd_json_field(cfg, "envs", NULL);
  if (args && !json_is_array(args))
    return dshd_errf(err, "invalid_argument", "process.args: expected an array");
  if (envs && !json_is_object(envs))
    return dshd_errf(err, "invalid_argument", "process.envs: expected an object");
  size_t nargs = args ? json_array_size(args) : 0;
  for (size_t i = 0; i < nargs; i++)
    if (!json_is_string(json_array_get(args, i)))
      return dshd_errf(err, "invalid_argument", "process.args[%zu]: expected a string", i);
  if (dshd_json_object(req, "pty", NULL, &pty, err) != 0) return -1;
  uint64_t rows = 0, cols = 0;
  if (pty) {
    if (dshd_json_object(pty, "size", NULL, &size, err) != 0) return -1;
    if (size && (dshd_json_uint(size, "rows", NULL, 0, &rows, err) != 0 ||
                 dshd_json_uint(size, "cols", NULL, 0, &cols, err) != 0))
      return -1;
  }
  int stdin_on;
  if (dshd_json_bool(req, "stdin", NULL, 1, &stdin_on, err) != 0) return -1;

  dshd_user_t u;
  if (dshd_user_lookup(dshd_req_basic_user(r), &u, err) != 0) return -1;
  char dir[PATH_MAX];
  if (dshd_resolve_path(&u, cwd, 1, dir, sizeof dir, err) != 0) return -1;
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return dshd_errf(err, "invalid_argument", "cwd '%s' does not exist", dir);

  json_t *scrub;
  if (process_scrub_parse(req, &scrub, err) != 0) return -1;
  record_spawn_t o;
  memset(&o, 0, sizeof o);
  static process_spill_paths_t spill_paths; /* one request at a time: the loop is single-threaded */
  process_env_t env = {0};
  const char **argv = calloc(nargs + 2, sizeof *argv);
  if (!argv) return dshd_errf(err, "resource_exhausted", "out of memory");
  int rc = -1;
  if (process_env_build(&env, &u, envs, scrub, err) != 0) goto out;
  if (process_spills_open(req, &u, &o, spill_paths, err) != 0) goto out;
  argv[0] = cmd;
  for (size_t i = 0; i < nargs; i++) argv[i + 1] = json_string_value(json_array_get(args, i));

  /* ProcessConfig as sent, for List. */
  json_t *config = json_object();
  json_object_set_new(config, "cmd", json_string(cmd));
  json_object_set_new(config, "args", args ? json_deep_copy(args) : json_array());
  json_object_set_new(config, "envs", envs ? json_deep_copy(envs) : json_object());
  if (dshd_json_field(cfg, "cwd", NULL)) json_object_set_new(config, "cwd", dshd_json_str(cwd));

  o.argv = argv;
  o.envp = (const char *const *)env.v;
  o.cwd = dir;
  o.pty = pty != NULL;
  o.rows = (uint16_t)(rows > 0xffff ? 0xffff : rows);
  o.cols = (uint16_t)(cols > 0xffff ? 0xffff : cols);
  o.stdin_pipe = stdin_on;
  o.uid = o.gid = -1;
  if (geteuid() == 0 && (u.uid != geteuid() || u.gid != getegid())) {
    o.uid = (int32_t)u.uid;
    o.gid = (int32_t)u.gid;
  }
  o.timeout_ms = dshd_stream_timeout_ms(s);
  o.config = config;
  o.tag = dshd_json_field(req, "tag", NULL) ? tag : NULL;
  record_t *pp;
  if (record_start(&o, &pp, err) != 0) goto out;
  memset(o.spill_cap, 0, sizeof o.spill_cap); /* the record owns the spill fds now */
  rc = subscriber_open_events(pp, s, 1, NULL, err);
out:
  process_spills_close(&o, spill_paths);
  process_env_free(&env);
  free(argv);
  return rc;
}

/* --- Connect, List ------------------------------------------------------------------------ */

static int rpc_connect(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err) {
  (void)r;
  record_t *pp = select_proc(req, 0, err);
  if (!pp) return -1;
  subscriber_resume_t res;
  memset(&res, 0, sizeof res);
  json_t *resume = NULL;
  if (ext_on() && dshd_json_object(req, "resume", NULL, &resume, err) != 0) return -1;
  if (resume) {
    res.given = 1;
    if (pp->pty) {
      if (dshd_json_uint(resume, "pty", NULL, 0, &res.off[1], err) != 0) return -1;
    } else if (dshd_json_uint(resume, "stdout", NULL, 0, &res.off[1], err) != 0 ||
               dshd_json_uint(resume, "stderr", NULL, 0, &res.off[2], err) != 0) {
      return -1;
    }
  }
  return subscriber_open_events(pp, s, 0, &res, err);
}

static int rpc_list(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r, (void)req, (void)err;
  json_t *arr = json_array();
  record_list(arr);
  *resp = json_object();
  json_object_set_new(*resp, "processes", arr);
  return 0;
}

/* --- input ----------------------------------------------------------------------------------- */

static int rpc_send_input(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  record_t *pp = select_proc(req, 1, err);
  if (!pp) return -1;
  json_t *input;
  if (dshd_json_object(req, "input", NULL, &input, err) != 0) return -1;
  if (write_input(pp, input, err) != 0) return -1;
  *resp = json_object();
  return 0;
}

static int rpc_close_stdin(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  record_t *pp = select_proc(req, 1, err);
  if (!pp || record_close_stdin(pp, err) != 0) return -1;
  *resp = json_object();
  return 0;
}

typedef struct sin_state {
  int started;
  uint32_t pid;
  char *tag;
} sin_state_t;

static int rpc_stream_input(dshd_req_t *r, json_t *msg, void **state, dshd_err_t *err) {
  (void)r;
  sin_state_t *st = *state;
  if (!msg) {
    if (st) free(st->tag);
    free(st);
    *state = NULL;
    return 0;
  }
  if (!st && !(st = *state = calloc(1, sizeof *st)))
    return dshd_errf(err, "resource_exhausted", "out of memory");
  json_t *start, *data;
  if (dshd_json_object(msg, "start", NULL, &start, err) != 0 ||
      dshd_json_object(msg, "data", NULL, &data, err) != 0)
    return -1;
  if (start) {
    if (st->started) return dshd_errf(err, "invalid_argument", "start event sent twice");
    const char *tag;
    if (parse_selector(start, &st->pid, &tag, err) != 0) return -1;
    if (tag && !(st->tag = strdup(tag)))
      return dshd_errf(err, "resource_exhausted", "out of memory");
    if (!record_find(st->pid, st->tag, 1)) return record_not_found(st->pid, st->tag, err);
    st->started = 1;
    return 0;
  }
  if (data) {
    if (!st->started)
      return dshd_errf(err, "invalid_argument", "first message must be a start event");
    record_t *pp = record_find(st->pid, st->tag, 1);
    if (!pp) return record_not_found(st->pid, st->tag, err);
    json_t *input;
    if (dshd_json_object(data, "input", NULL, &input, err) != 0) return -1;
    return write_input(pp, input, err);
  }
  return 0; /* keepalive (or an unknown event): ignored */
}

/* --- signals, resize ---------------------------------------------------------------------- */

static const dshd_enum_t g_signals_envd[] = {
    {"SIGNAL_UNSPECIFIED", 0}, {"SIGNAL_SIGTERM", SIGTERM}, {"SIGNAL_SIGKILL", SIGKILL}, {NULL, 0}};
static const dshd_enum_t g_signals_ext[] = {
    {"SIGNAL_UNSPECIFIED", 0},   {"SIGNAL_SIGHUP", SIGHUP},   {"SIGNAL_SIGINT", SIGINT},
    {"SIGNAL_SIGQUIT", SIGQUIT}, {"SIGNAL_SIGKILL", SIGKILL}, {"SIGNAL_SIGTERM", SIGTERM},
    {"SIGNAL_SIGCONT", SIGCONT}, {"SIGNAL_SIGTSTP", SIGTSTP}, {NULL, 0}};

static int rpc_send_signal(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  int ext = ext_on(), group = 0;
  int64_t grace_ms = 0;
  if (ext && (dshd_json_bool(req, "group", NULL, 0, &group, err) != 0 ||
              dshd_json_int(req, "graceMs", "grace_ms", 0, &grace_ms, err) != 0))
    return -1;
  /* A group outlives its leader: group signals reach lingering records too. */
  record_t *pp = select_proc(req, !group, err);
  if (!pp) return -1;
  const dshd_enum_t *names = ext ? g_signals_ext : g_signals_envd;
  int32_t sig;
  if (dshd_json_enum(req, "signal", NULL, names, 0, &sig, err) != 0) return -1;
  const char *name = dshd_enum_name(names, sig);
  if (!name || sig == 0) {
    json_t *given = dshd_json_field(req, "signal", NULL);
    if (ext && json_is_string(given) && sig == 0)
      name = json_string_value(given); /* unknown name */
    if (name) return dshd_errf(err, "unimplemented", "invalid signal: %s", name);
    return dshd_errf(err, "unimplemented", "invalid signal: %d", (int)sig);
  }
  if (record_signal(pp, sig, group, sig == SIGTERM ? grace_ms : 0, err) != 0) return -1;
  *resp = json_object();
  return 0;
}

static int rpc_update(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  record_t *pp = select_proc(req, 1, err);
  if (!pp) return -1;
  json_t *pty, *size = NULL;
  if (dshd_json_object(req, "pty", NULL, &pty, err) != 0) return -1;
  if (pty) {
    uint64_t rows = 0, cols = 0;
    if (dshd_json_object(pty, "size", NULL, &size, err) != 0) return -1;
    if (size && (dshd_json_uint(size, "rows", NULL, 0, &rows, err) != 0 ||
                 dshd_json_uint(size, "cols", NULL, 0, &cols, err) != 0))
      return -1;
    if (record_resize(pp, (uint32_t)(rows > UINT32_MAX ? UINT32_MAX : rows),
                      (uint32_t)(cols > UINT32_MAX ? UINT32_MAX : cols), err) != 0)
      return -1;
  }
  *resp = json_object();
  return 0;
}

/* --- quiescence (extension) --------------------------------------------------------------------
 */

static int rpc_group_status(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  record_t *pp = select_proc(req, 0, err);
  if (!pp) return -1;
  *resp = json_object();
  json_object_set_new(*resp, "leaderExited", json_boolean(pp->leader_exited));
  json_object_set_new(*resp, "quiescent", json_boolean(pp->quiescent));
  return 0;
}

static int rpc_watch_group(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err) {
  (void)r;
  record_t *pp = select_proc(req, 0, err);
  if (!pp) return -1;
  return subscriber_open_group(pp, s, err);
}

/* --- table, hooks -------------------------------------------------------------------------------
 */

const dshd_route_t dshd_process_routes[] = {
    {"/process.Process/Start", NULL, rpc_start, NULL, 0},
    {"/process.Process/Connect", NULL, rpc_connect, NULL, 0},
    {"/process.Process/List", rpc_list, NULL, NULL, 0},
    {"/process.Process/SendInput", rpc_send_input, NULL, NULL, 0},
    {"/process.Process/CloseStdin", rpc_close_stdin, NULL, NULL, 0},
    {"/process.Process/SendSignal", rpc_send_signal, NULL, NULL, 0},
    {"/process.Process/Update", rpc_update, NULL, NULL, 0},
    {"/process.Process/StreamInput", NULL, NULL, rpc_stream_input, 1},
    {"/process.Process/GroupStatus", rpc_group_status, NULL, NULL, 1},
    {"/process.Process/WatchGroup", NULL, rpc_watch_group, NULL, 1},
    {NULL, NULL, NULL, NULL, 0},
};

void dshd_process_shutdown(void) {
  record_shutdown_all();
}
