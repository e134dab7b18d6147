/* process.c: the process.Process service of dshd (envd protocol §2) and its
 * extensions (group signals, exit signals, replay/resume, quiescence,
 * StreamInput, env-scrub, spill) — request parsing, users, cwd and
 * environment (with the host's scrub rules), spill files, and the route
 * table. The records and streams themselves live in pproc.c and psub.c.
 *
 * Uses dshd.h only (users, paths, JSON helpers, stream API). Never blocks;
 * never answers an extension field or route in --envd-compat. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pservice.h"

static int ext_on(void) { return !dshd_config()->envd_compat; }

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
  if (v > UINT32_MAX) return dshd_errf(err, "invalid_argument", "pid %llu out of range",
                                       (unsigned long long)v);
  *pid = (uint32_t)v;
  if (dshd_json_field(sel, "tag", NULL)) *tag = t;
  return 0;
}

static pproc_t *select_proc(json_t *req, int live_only, dshd_err_t *err) {
  uint32_t pid;
  const char *tag;
  if (parse_selector(req, &pid, &tag, err) != 0) return NULL;
  pproc_t *pp = pproc_find(pid, tag, live_only);
  if (!pp) pproc_not_found(pid, tag, err);
  return pp;
}

/* ProcessInput: exactly one of stdin / pty. */
static int write_input(pproc_t *pp, json_t *input, dshd_err_t *err) {
  json_t *in_stdin = input ? dshd_json_field(input, "stdin", NULL) : NULL;
  json_t *in_pty = input ? dshd_json_field(input, "pty", NULL) : NULL;
  if (in_stdin && in_pty)
    return dshd_errf(err, "invalid_argument", "input: only one of stdin and pty may be set");
  if (!in_stdin && !in_pty)
    return dshd_errf(err, "unimplemented", "invalid input type: neither stdin nor pty is set");
  uint8_t *data = NULL;
  size_t n = 0;
  if (dshd_json_bytes(input, in_pty ? "pty" : "stdin", NULL, &data, &n, err) != 0) return -1;
  int rc = pproc_input(pp, in_pty != NULL, data, n, err);
  free(data);
  return rc;
}

/* --- environment ------------------------------------------------------------------------- */

typedef struct envb {
  char **v;
  size_t n, cap;
} envb_t;

/* Later entries win (envd §2.4): a name set again replaces its value in place. */
static int env_set(envb_t *e, const char *name, const char *value) {
  size_t nl = strlen(name), vl = strlen(value);
  char *kv = malloc(nl + vl + 2);
  if (!kv) return -1;
  memcpy(kv, name, nl);
  kv[nl] = '=';
  memcpy(kv + nl + 1, value, vl + 1);
  for (size_t i = 0; i < e->n; i++)
    if (strncmp(e->v[i], kv, nl + 1) == 0) {
      free(e->v[i]);
      e->v[i] = kv;
      return 0;
    }
  if (e->n + 2 > e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 16;
    char **nv = realloc(e->v, cap * sizeof *nv);
    if (!nv) {
      free(kv);
      return -1;
    }
    e->v = nv;
    e->cap = cap;
  }
  e->v[e->n++] = kv;
  e->v[e->n] = NULL;
  return 0;
}

static void env_free(envb_t *e) {
  for (size_t i = 0; i < e->n; i++) free(e->v[i]);
  free(e->v);
}

static int env_add_object(envb_t *e, json_t *obj, const char *what, dshd_err_t *err) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    if (!json_is_string(v))
      return dshd_errf(err, "invalid_argument", "%s: value of '%s' is not a string", what, k);
    if (!*k || strchr(k, '='))
      return dshd_errf(err, "invalid_argument", "%s: invalid variable name '%s'", what, k);
    if (env_set(e, k, json_string_value(v)) != 0)
      return dshd_errf(err, "resource_exhausted", "out of memory");
  }
  return 0;
}

/* env-scrub extension: StartRequest.envScrub {"contains":[...],"prefixes":[...]}
 * (non-empty strings). *rules is NULL when absent or in --envd-compat. */
static int parse_scrub(json_t *req, json_t **rules, dshd_err_t *err) {
  static const char *const keys[] = {"contains", "prefixes"};
  json_t *r = NULL;
  *rules = NULL;
  if (!ext_on()) return 0;
  if (dshd_json_object(req, "envScrub", "env_scrub", &r, err) != 0) return -1;
  if (!r) return 0;
  for (int k = 0; k < 2; k++) {
    json_t *a = dshd_json_field(r, keys[k], NULL), *v;
    size_t i;
    if (!a) continue;
    if (!json_is_array(a))
      return dshd_errf(err, "invalid_argument", "envScrub.%s: expected an array of strings",
                       keys[k]);
    json_array_foreach(a, i, v) {
      if (!json_is_string(v) || !*json_string_value(v))
        return dshd_errf(err, "invalid_argument", "envScrub.%s[%zu]: expected a non-empty string",
                         keys[k], i);
    }
  }
  *rules = r;
  return 0;
}

/* The rules compare names ASCII case-insensitively (dshd never sets a locale). */
static int scrubbed(const char *kv, json_t *rules) {
  size_t nl = strcspn(kv, "="), i;
  json_t *a, *v;
  if ((a = dshd_json_field(rules, "prefixes", NULL)))
    json_array_foreach(a, i, v) {
      size_t pl = strlen(json_string_value(v));
      if (pl <= nl && strncasecmp(kv, json_string_value(v), pl) == 0) return 1;
    }
  if ((a = dshd_json_field(rules, "contains", NULL)))
    json_array_foreach(a, i, v) {
      size_t cl = strlen(json_string_value(v));
      for (size_t j = 0; cl <= nl && j <= nl - cl; j++)
        if (strncasecmp(kv + j, json_string_value(v), cl) == 0) return 1;
    }
  return 0;
}

static void env_scrub(envb_t *e, json_t *rules) {
  size_t w = 0;
  for (size_t i = 0; i < e->n; i++) {
    if (scrubbed(e->v[i], rules)) free(e->v[i]);
    else e->v[w++] = e->v[i];
  }
  e->n = w;
  if (e->v) e->v[w] = NULL;
}

/* The ambient environment (daemon PATH, HOME/USER/LOGNAME, /init's envVars),
 * minus what the scrub rules drop, then the request's envs. */
static int build_env(envb_t *e, const dshd_user_t *u, json_t *envs, json_t *scrub,
                     dshd_err_t *err) {
  const char *path = getenv("PATH");
  if ((path && env_set(e, "PATH", path)) || env_set(e, "HOME", u->home) ||
      env_set(e, "USER", u->name) || env_set(e, "LOGNAME", u->name))
    return dshd_errf(err, "resource_exhausted", "out of memory");
  if (env_add_object(e, dshd_env_vars(), "envVars", err) != 0) return -1;
  if (scrub) env_scrub(e, scrub);
  if (envs && env_add_object(e, envs, "process.envs", err) != 0) return -1;
  if (!e->v) env_set(e, "HOME", u->home); /* never NULL */
  return 0;
}

/* --- spill (extension) ---------------------------------------------------------------------- */

/* Missing directories of path's parent, 0700 and owned by u (the files under
 * them are the process's private output). */
static int private_parents(const dshd_user_t *u, const char *path, dshd_err_t *err) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  if (n >= sizeof buf) return dshd_errf(err, "invalid_argument", "spill path too long");
  memcpy(buf, path, n + 1);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0700) == 0) {
      if (geteuid() == 0 && chown(buf, u->uid, u->gid) != 0)
        return dshd_errf(err, "internal", "spill: chown %s: %s", buf, strerror(errno));
    } else if (errno != EEXIST) {
      return dshd_errf(err, "internal", "spill: mkdir %s: %s", buf, strerror(errno));
    }
    *p = '/';
  }
  return 0;
}

typedef char spill_paths_t[3][PATH_MAX];

/* A start that failed after open_spills: close and delete what it created. */
static void close_spills(pproc_spawn_t *o, spill_paths_t paths) {
  for (int i = 1; i <= 2; i++) {
    if (o->spill_cap[i] && o->spill_fd[i] >= 0) {
      close(o->spill_fd[i]);
      unlink(paths[i]);
    }
    o->spill_cap[i] = 0;
  }
}

/* StartRequest.spill {"stdout":{"path":P,"maxBytes":N},"stderr":...}: each file
 * is created (0600, the process's user) and takes the stream's first N+1
 * bytes, so the host can tell a complete spill from a cut one. */
static int open_spills(json_t *req, const dshd_user_t *u, pproc_spawn_t *o, spill_paths_t paths,
                       dshd_err_t *err) {
  static const char *const names[] = {NULL, "stdout", "stderr"};
  json_t *sp = NULL;
  if (!ext_on()) return 0;
  if (dshd_json_object(req, "spill", NULL, &sp, err) != 0) return -1;
  if (!sp) return 0;
  for (int i = 1; i <= 2; i++) {
    json_t *one;
    const char *path;
    uint64_t max;
    char *full = paths[i];
    if (dshd_json_object(sp, names[i], NULL, &one, err) != 0) return -1;
    if (!one) continue;
    if (dshd_json_string(one, "path", NULL, &path, err) != 0 ||
        dshd_json_uint(one, "maxBytes", "max_bytes", 0, &max, err) != 0)
      return -1;
    if (!*path) return dshd_errf(err, "invalid_argument", "spill.%s.path is required", names[i]);
    if (max >= UINT64_MAX)
      return dshd_errf(err, "invalid_argument", "spill.%s.maxBytes out of range", names[i]);
    if (dshd_resolve_path(u, path, 0, full, PATH_MAX, err) != 0) return -1;
    if (private_parents(u, full, err) != 0) return -1;
    int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
      return dshd_errf(err, "internal", "spill: cannot create %s: %s", full, strerror(errno));
    if (geteuid() == 0 && fchown(fd, u->uid, u->gid) != 0) {
      close(fd);
      unlink(full);
      return dshd_errf(err, "internal", "spill: chown %s: %s", full, strerror(errno));
    }
    o->spill_fd[i] = fd;
    o->spill_cap[i] = max;
  }
  return 0;
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
  if (args && !json_is_array(args)) return dshd_errf(err, "invalid_argument", "process.args: expected an array");
  if (envs && !json_is_object(envs)) return dshd_errf(err, "invalid_argument", "process.envs: expected an object");
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
  if (parse_scrub(req, &scrub, err) != 0) return -1;
  pproc_spawn_t o;
  memset(&o, 0, sizeof o);
  static spill_paths_t spill_paths; /* one request at a time: the loop is single-threaded */
  envb_t env = {0};
  const char **argv = calloc(nargs + 2, sizeof *argv);
  if (!argv) return dshd_errf(err, "resource_exhausted", "out of memory");
  int rc = -1;
  if (build_env(&env, &u, envs, scrub, err) != 0) goto out;
  if (open_spills(req, &u, &o, spill_paths, err) != 0) goto out;
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
  pproc_t *pp;
  if (pproc_start(&o, &pp, err) != 0) goto out;
  memset(o.spill_cap, 0, sizeof o.spill_cap); /* the record owns the spill fds now */
  rc = psub_open_events(pp, s, 1, NULL, err);
out:
  close_spills(&o, spill_paths);
  env_free(&env);
  free(argv);
  return rc;
}

/* --- Connect, List ------------------------------------------------------------------------ */

static int rpc_connect(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err) {
  (void)r;
  pproc_t *pp = select_proc(req, 0, err);
  if (!pp) return -1;
  psub_resume_t res;
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
  return psub_open_events(pp, s, 0, &res, err);
}

static int rpc_list(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r, (void)req, (void)err;
  json_t *arr = json_array();
  pproc_list(arr);
  *resp = json_object();
  json_object_set_new(*resp, "processes", arr);
  return 0;
}

/* --- input ----------------------------------------------------------------------------------- */

static int rpc_send_input(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  pproc_t *pp = select_proc(req, 1, err);
  if (!pp) return -1;
  json_t *input;
  if (dshd_json_object(req, "input", NULL, &input, err) != 0) return -1;
  if (write_input(pp, input, err) != 0) return -1;
  *resp = json_object();
  return 0;
}

static int rpc_close_stdin(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  pproc_t *pp = select_proc(req, 1, err);
  if (!pp || pproc_close_stdin(pp, err) != 0) return -1;
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
    if (tag && !(st->tag = strdup(tag))) return dshd_errf(err, "resource_exhausted", "out of memory");
    if (!pproc_find(st->pid, st->tag, 1)) return pproc_not_found(st->pid, st->tag, err);
    st->started = 1;
    return 0;
  }
  if (data) {
    if (!st->started) return dshd_errf(err, "invalid_argument", "first message must be a start event");
    pproc_t *pp = pproc_find(st->pid, st->tag, 1);
    if (!pp) return pproc_not_found(st->pid, st->tag, err);
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
    {"SIGNAL_UNSPECIFIED", 0},    {"SIGNAL_SIGHUP", SIGHUP},   {"SIGNAL_SIGINT", SIGINT},
    {"SIGNAL_SIGQUIT", SIGQUIT},  {"SIGNAL_SIGKILL", SIGKILL}, {"SIGNAL_SIGTERM", SIGTERM},
    {"SIGNAL_SIGCONT", SIGCONT},  {"SIGNAL_SIGTSTP", SIGTSTP}, {NULL, 0}};

static int rpc_send_signal(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  int ext = ext_on(), group = 0, fg = 0, session = 0;
  int64_t grace_ms = 0;
  if (ext && (dshd_json_bool(req, "group", NULL, 0, &group, err) != 0 ||
              dshd_json_int(req, "graceMs", "grace_ms", 0, &grace_ms, err) != 0 ||
              dshd_json_bool(req, "foreground", NULL, 0, &fg, err) != 0 ||
              dshd_json_bool(req, "session", NULL, 0, &session, err) != 0))
    return -1;
  /* A group outlives its leader: group signals reach lingering records too. */
  pproc_t *pp = select_proc(req, !(group || session), err);
  if (!pp) return -1;
  const dshd_enum_t *names = ext ? g_signals_ext : g_signals_envd;
  int32_t sig;
  if (dshd_json_enum(req, "signal", NULL, names, 0, &sig, err) != 0) return -1;
  const char *name = dshd_enum_name(names, sig);
  if (!name || sig == 0) {
    json_t *given = dshd_json_field(req, "signal", NULL);
    if (ext && json_is_string(given) && sig == 0) name = json_string_value(given); /* unknown name */
    if (name) return dshd_errf(err, "unimplemented", "invalid signal: %s", name);
    return dshd_errf(err, "unimplemented", "invalid signal: %d", (int)sig);
  }
  if (fg || session) { /* terminal-sessions: the foreground job, or every group of the session */
    if (!pp->pty) return dshd_errf(err, "failed_precondition", "process %d has no terminal", (int)pp->pid);
    int32_t pgid = 0;
    if (fg && (pterm_foreground(pp, &pgid, err) != 0)) return -1;
    if (fg && kill(-pgid, sig) != 0)
      return dshd_errf(err, "not_found", "process group %d is gone", (int)pgid);
    if (session) pterm_signal_session(pp->pid, sig);
    *resp = json_object();
    if (fg) json_object_set_new(*resp, "pgid", json_integer(pgid));
    return 0;
  }
  if (pproc_signal(pp, sig, group, sig == SIGTERM ? grace_ms : 0, err) != 0) return -1;
  *resp = json_object();
  return 0;
}

static int rpc_update(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  pproc_t *pp = select_proc(req, 1, err);
  if (!pp) return -1;
  json_t *pty, *size = NULL;
  if (dshd_json_object(req, "pty", NULL, &pty, err) != 0) return -1;
  if (pty) {
    uint64_t rows = 0, cols = 0;
    if (dshd_json_object(pty, "size", NULL, &size, err) != 0) return -1;
    if (size && (dshd_json_uint(size, "rows", NULL, 0, &rows, err) != 0 ||
                 dshd_json_uint(size, "cols", NULL, 0, &cols, err) != 0))
      return -1;
    if (pproc_resize(pp, (uint32_t)(rows > UINT32_MAX ? UINT32_MAX : rows),
                     (uint32_t)(cols > UINT32_MAX ? UINT32_MAX : cols), err) != 0)
      return -1;
  }
  *resp = json_object();
  return 0;
}

/* --- quiescence (extension) -------------------------------------------------------------------- */

static int rpc_group_status(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  (void)r;
  pproc_t *pp = select_proc(req, 0, err);
  if (!pp) return -1;
  *resp = json_object();
  json_object_set_new(*resp, "leaderExited", json_boolean(pp->leader_exited));
  json_object_set_new(*resp, "quiescent", json_boolean(pp->quiescent));
  int32_t fg; /* terminal-sessions: the terminal's foreground process group */
  dshd_err_t ignored;
  if (pp->pty && pp->proc && pterm_foreground(pp, &fg, &ignored) == 0)
    json_object_set_new(*resp, "foregroundPgid", json_integer(fg));
  return 0;
}

static int rpc_watch_group(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err) {
  (void)r;
  pproc_t *pp = select_proc(req, 0, err);
  if (!pp) return -1;
  return psub_open_group(pp, s, err);
}

/* --- table, hooks ------------------------------------------------------------------------------- */

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

void dshd_process_shutdown(void) { pproc_shutdown_all(); }
