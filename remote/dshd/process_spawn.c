/* process_spawn.c: what Start prepares besides the record — the
 * environment (the daemon's PATH, HOME/USER/LOGNAME, /init's envVars, the
 * env-scrub extension's rules, then the request's envs) and the spill
 * extension's files.
 *
 * Uses dshd.h (users, paths, JSON helpers) and libc. Never spawns anything
 * itself (process_record.c does); never leaves a spill file behind for a
 * start that failed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "process.h"

static int ext_on(void) {
  return !dshd_config()->envd_compat;
}

/* --- environment ------------------------------------------------------------------------- */

/* Later entries win (envd §2.4): a name set again replaces its value in place. */
static int env_set(process_env_t *e, const char *name, const char *value) {
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

void process_env_free(process_env_t *e) {
  for (size_t i = 0; i < e->n; i++) free(e->v[i]);
  free(e->v);
}

static int env_add_object(process_env_t *e, json_t *obj, const char *what, dshd_err_t *err) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    if (!json_is_string(v))
      return dshd_errf(err, "invalid_argument", "%s: value of '%s' is not a string", what, k);
    if (!dshd_env_name_valid(k))
      return dshd_errf(err, "invalid_argument", "%s: invalid variable name '%s'", what, k);
    if (env_set(e, k, json_string_value(v)) != 0)
      return dshd_errf(err, "resource_exhausted", "out of memory");
  }
  return 0;
}

/* env-scrub extension: StartRequest.envScrub {"contains":[...],"prefixes":[...]}
 * (non-empty strings). *rules is NULL when absent or in --envd-compat. */
int process_scrub_parse(json_t *req, json_t **rules, dshd_err_t *err) {
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
  if ((a = dshd_json_field(rules, "prefixes", NULL))) json_array_foreach(a, i, v) {
      size_t pl = strlen(json_string_value(v));
      if (pl <= nl && strncasecmp(kv, json_string_value(v), pl) == 0) return 1;
    }
  if ((a = dshd_json_field(rules, "contains", NULL))) json_array_foreach(a, i, v) {
      size_t cl = strlen(json_string_value(v));
      for (size_t j = 0; cl <= nl && j <= nl - cl; j++)
        if (strncasecmp(kv + j, json_string_value(v), cl) == 0) return 1;
    }
  return 0;
}

static void env_scrub(process_env_t *e, json_t *rules) {
  size_t w = 0;
  for (size_t i = 0; i < e->n; i++) {
    if (scrubbed(e->v[i], rules))
      free(e->v[i]);
    else
      e->v[w++] = e->v[i];
  }
  e->n = w;
  if (e->v) e->v[w] = NULL;
}

/* The ambient environment (daemon PATH, HOME/USER/LOGNAME, /init's envVars),
 * minus what the scrub rules drop, then the request's envs. */
int process_env_build(process_env_t *e, const dshd_user_t *u, json_t *envs, json_t *scrub,
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

/* A start that failed after open_spills: close and delete what it created. */
void process_spills_close(record_spawn_t *o, process_spill_paths_t paths) {
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
int process_spills_open(json_t *req, const dshd_user_t *u, record_spawn_t *o,
                        process_spill_paths_t paths, dshd_err_t *err) {
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
    /* O_NONBLOCK: a FIFO there must not make open() wait for a reader. */
    struct stat st;
    if (lstat(full, &st) == 0 && !S_ISREG(st.st_mode))
      return dshd_errf(err, "invalid_argument", "spill: %s is not a regular file", full);
    int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0 && (errno == ENXIO || errno == ELOOP))
      return dshd_errf(err, "invalid_argument", "spill: %s is not a regular file", full);
    if (fd < 0)
      return dshd_errf(err, "internal", "spill: cannot create %s: %s", full, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return dshd_errf(err, "invalid_argument", "spill: %s is not a regular file", full);
    }
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
