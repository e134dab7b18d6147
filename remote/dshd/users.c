/* users.c: Unix users, envd path resolution (protocol §2.6), and the
 * "create parents and chown" step shared by the filesystem API and /files,
 * and the file identity a request acts with (dshd_act_as).
 *
 * Users are looked up by name with getpwnam_r and the answers cached until
 * /etc/passwd changes (its inode, size or mtime), so accounts added while dshd
 * runs are seen and a request does not re-read the file. Only root can act as another account; an
 * unprivileged dshd serves its own account and refuses others with permission_denied. */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server.h"

static char g_default_user[64];

const char *dshd_strerror(int errnum) {
  /* Go's syscall.Errno strings are strerror() starting lower-case. */
  static char buf[128];
  const char *s = strerror(errnum);
  snprintf(buf, sizeof buf, "%s", s ? s : "unknown error");
  if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z')) buf[0] += 'a' - 'A';
  return buf;
}

/* getpwnam_r/getpwuid_r with a buffer that grows on ERANGE. 1 found, 0 not
 * found, -1 error (errno). */
static int pw_lookup(const char *name, uid_t uid, dshd_user_t *out) {
  size_t size = 4096;
  for (;;) {
    char *buf = malloc(size);
    if (!buf) return -1;
    struct passwd pw, *res = NULL;
    int rc = name ? getpwnam_r(name, &pw, buf, size, &res) : getpwuid_r(uid, &pw, buf, size, &res);
    if (rc == ERANGE && size < (1u << 20)) {
      free(buf);
      size *= 4;
      continue;
    }
    if (rc != 0 || !res) {
      free(buf);
      if (rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM) return 0;
      errno = rc;
      return -1;
    }
    int ok = strlen(pw.pw_name) < sizeof out->name && strlen(pw.pw_dir) < sizeof out->home &&
             strlen(pw.pw_shell ? pw.pw_shell : "") < sizeof out->shell;
    if (ok) {
      snprintf(out->name, sizeof out->name, "%s", pw.pw_name);
      out->uid = pw.pw_uid;
      out->gid = pw.pw_gid;
      snprintf(out->home, sizeof out->home, "%s", pw.pw_dir);
      snprintf(out->shell, sizeof out->shell, "%s", pw.pw_shell ? pw.pw_shell : "");
    }
    free(buf);
    if (!ok) {
      errno = ENAMETOOLONG;
      return -1;
    }
    return 1;
  }
}

int dshd_users_init(const char *configured, dshd_err_t *err) {
  dshd_user_t self, u;
  int rc = pw_lookup(NULL, geteuid(), &self);
  if (rc != 1) {
    /* No passwd entry for us (possible in a bare namespace): only an
     * explicit --user can help. */
    if (!configured)
      return dshd_errf(err, "internal", "uid %u has no passwd entry; pass --user",
                       (unsigned)geteuid());
  }
  if (configured) {
    rc = pw_lookup(configured, 0, &u);
    if (rc != 1) return dshd_errf(err, "invalid_argument", "--user %s: no such user", configured);
    if (geteuid() != 0 && u.uid != geteuid())
      return dshd_errf(err, "permission_denied",
                       "--user %s: dshd runs as uid %u without root privileges", configured,
                       (unsigned)geteuid());
    snprintf(g_default_user, sizeof g_default_user, "%s", u.name);
    return 0;
  }
  if (pw_lookup("user", 0, &u) == 1 && (geteuid() == 0 || u.uid == geteuid()))
    snprintf(g_default_user, sizeof g_default_user, "%s", u.name);
  else
    snprintf(g_default_user, sizeof g_default_user, "%s", self.name);
  return 0;
}

const char *dshd_default_user(void) {
  return g_default_user;
}

int dshd_set_default_user(const char *name, dshd_err_t *err) {
  dshd_user_t u;
  if (dshd_user_lookup(name, &u, err) != 0) return -1;
  snprintf(g_default_user, sizeof g_default_user, "%s", u.name);
  return 0;
}

/* A few recent name lookups, valid while /etc/passwd is unchanged. */
#define USER_CACHE 8
static struct {
  dshd_user_t user;
  int found;
} g_cache[USER_CACHE];
static int g_cached, g_next_slot;
static struct stat g_passwd_st;

static int passwd_changed(void) {
  struct stat st;
  if (stat("/etc/passwd", &st) != 0) return 1; /* no file to key on: never cache */
  int same = st.st_ino == g_passwd_st.st_ino && st.st_size == g_passwd_st.st_size &&
             st.st_mtim.tv_sec == g_passwd_st.st_mtim.tv_sec &&
             st.st_mtim.tv_nsec == g_passwd_st.st_mtim.tv_nsec;
  if (!same) {
    g_passwd_st = st;
    g_cached = 0;
  }
  return 0;
}

static int pw_lookup_cached(const char *name, dshd_user_t *out) {
  if (passwd_changed()) return pw_lookup(name, 0, out);
  for (int i = 0; i < g_cached; i++) {
    if (strcmp(g_cache[i].user.name, name) == 0) {
      if (g_cache[i].found) *out = g_cache[i].user;
      return g_cache[i].found;
    }
  }
  int rc = pw_lookup(name, 0, out);
  if (rc < 0 || strlen(name) >= sizeof out->name) return rc;
  int slot = g_cached < USER_CACHE ? g_cached++ : (g_next_slot++ % USER_CACHE);
  g_cache[slot].found = rc;
  if (rc) g_cache[slot].user = *out;
  snprintf(g_cache[slot].user.name, sizeof g_cache[slot].user.name, "%s", name);
  return rc;
}

int dshd_user_lookup(const char *name, dshd_user_t *out, dshd_err_t *err) {
  int dflt = !name || !*name;
  const char *want = dflt ? g_default_user : name;
  int rc = pw_lookup_cached(want, out);
  if (rc < 0)
    return dshd_errf(err, "internal", "error looking up user '%s': %s", want, dshd_strerror(errno));
  if (rc == 0) {
    if (dflt) return dshd_errf(err, "unauthenticated", "invalid default user: '%s'", want);
    return dshd_errf(err, "unauthenticated", "invalid username: '%s'", want);
  }
  if (geteuid() != 0 && out->uid != geteuid())
    return dshd_errf(err, "permission_denied",
                     "cannot act as user '%s': dshd is not running as root (it runs as uid %u)",
                     want, (unsigned)geteuid());
  return 0;
}

/* Go's filepath.Clean for a rooted path, into out (outlen >= 2). */
static int clean_abs(const char *in, char *out, size_t outlen) {
  size_t n = 1;
  out[0] = '/';
  const char *p = in;
  while (*p) {
    while (*p == '/') p++;
    if (!*p) break;
    const char *e = p;
    while (*e && *e != '/') e++;
    size_t len = (size_t)(e - p);
    if (len == 1 && p[0] == '.') {
      /* nothing */
    } else if (len == 2 && p[0] == '.' && p[1] == '.') {
      if (n > 1) { /* drop the last element and its separator */
        while (n > 1 && out[n - 1] != '/') n--;
        if (n > 1) n--;
      }
    } else {
      if (n > 1) {
        if (n + 1 >= outlen) return -1;
        out[n++] = '/';
      }
      if (n + len >= outlen) return -1;
      memcpy(out + n, p, len);
      n += len;
    }
    p = e;
  }
  out[n] = '\0';
  return 0;
}

int dshd_resolve_path(const dshd_user_t *u, const char *path, int use_workdir, char *out,
                      size_t outlen, dshd_err_t *err) {
  const char *p = path ? path : "";
  const dshd_config_t *cfg = dshd_config();
  if (!*p && use_workdir && cfg && cfg->default_workdir && *cfg->default_workdir)
    p = cfg->default_workdir;
  size_t need = strlen(u->home) + strlen(p) + 3;
  char *tmp = malloc(need);
  if (!tmp) return dshd_errf(err, "internal", "out of memory");
  if (p[0] == '~') {
    if (p[1] != '\0' && p[1] != '/') {
      free(tmp);
      return dshd_errf(err, "invalid_argument",
                       "failed to expand path '%s' for user '%s': cannot expand user-specific "
                       "home dir",
                       p, u->name);
    }
    snprintf(tmp, need, "%s/%s", u->home, p + 1);
  } else if (p[0] == '/') {
    snprintf(tmp, need, "%s", p);
  } else {
    snprintf(tmp, need, "%s/%s", u->home, p);
  }
  int rc = clean_abs(tmp, out, outlen);
  free(tmp);
  if (rc != 0 || strlen(out) >= PATH_MAX)
    return dshd_errf(err, "invalid_argument", "path too long: '%.200s...'", p);
  /* The kernel's ENAMETOOLONG would surface as an internal error later. */
  for (const char *c = out; *c;) {
    size_t n = strcspn(c, "/");
    if (n > NAME_MAX)
      return dshd_errf(err, "invalid_argument",
                       "invalid path '%.900s': a name is longer than %d bytes", p, NAME_MAX);
    c += n;
    if (*c) c++;
  }
  return 0;
}

static int g_acting; /* file operations act as a request's user */

void dshd_act_as(const dshd_user_t *u) {
  if (geteuid() != 0) return;
  /* the group first: with fsuid 0 the fsgid change always succeeds */
  setfsgid(u ? u->gid : 0);
  setfsuid(u ? u->uid : 0);
  g_acting = u != NULL;
}

/* What a user's request makes is its own already (its fsuid made it); an
 * existing file keeps its owner, as it would for the user's own commands. */
int dshd_chown_fd(const dshd_user_t *u, int fd) {
  if (geteuid() != 0 || g_acting) return 0;
  return fchown(fd, u->uid, u->gid) == 0 ? 0 : -errno;
}

int dshd_chown_path(const dshd_user_t *u, const char *path) {
  if (geteuid() != 0 || g_acting) return 0;
  return chown(path, u->uid, u->gid) == 0 ? 0 : -errno;
}

static int ensure_dirs(const dshd_user_t *u, const char *path, dshd_err_t *err);

/* Missing parents are made by the daemon and given to u, as envd makes
 * them (a workspace may be made at any path, under directories root owns);
 * everything else of the request keeps acting as u. */
int dshd_ensure_dirs(const dshd_user_t *u, const char *path, dshd_err_t *err) {
  int acting = g_acting;
  if (acting) dshd_act_as(NULL);
  int rc = ensure_dirs(u, path, err);
  if (acting) dshd_act_as(u);
  return rc;
}

static int ensure_dirs(const dshd_user_t *u, const char *path, dshd_err_t *err) {
  size_t len = strlen(path);
  char *buf = malloc(len + 1);
  if (!buf) return dshd_errf(err, "internal", "out of memory");
  memcpy(buf, path, len + 1);
  /* Every prefix ending at a '/' boundary, then the path itself. */
  for (size_t i = 1; i <= len; i++) {
    if (i < len && buf[i] != '/') continue;
    char save = buf[i];
    buf[i] = '\0';
    struct stat st;
    if (stat(buf, &st) != 0) {
      if (errno != ENOENT) {
        int e = errno;
        dshd_errf(err, "internal", "failed to stat directory: stat %s: %s", buf, dshd_strerror(e));
        free(buf);
        return -1;
      }
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        dshd_errf(err, "internal", "failed to create directory: mkdir %s: %s", buf,
                  dshd_strerror(e));
        free(buf);
        return -1;
      }
      int rc = dshd_chown_path(u, buf);
      if (rc != 0) {
        dshd_errf(err, "internal", "failed to chown directory: chown %s: %s", buf,
                  dshd_strerror(-rc));
        free(buf);
        return -1;
      }
    } else if (!S_ISDIR(st.st_mode)) {
      dshd_errf(err, "internal", "path is a file: %s", buf);
      free(buf);
      return -1;
    }
    buf[i] = save;
  }
  free(buf);
  return 0;
}
