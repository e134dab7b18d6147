/* filesystem.c: the unary RPCs of filesystem.Filesystem (protocol §3) — Stat,
 * MakeDir, Move, ListDir, Remove — and EntryInfo exactly as envd fills it
 * (§3.2: symlinks typed by their target, Go's FileMode.String() letters,
 * RFC 3339 times with 0/3/6/9 fraction digits, user.e2b.* xattrs).
 *
 * Runs as the daemon (root) like envd; the request's user only chooses the
 * home for relative paths and the owner of what MakeDir/Move create.
 * Watch RPCs live in watch_rpc.c (on watch.c). Listings are bounded (MAX_LIST_ENTRIES). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "dsh/utf8.h"
#include "fs.h"
#include "server.h"

#define MAX_LIST_ENTRIES 100000
#define XATTR_PREFIX "user.e2b."
#define MAX_XATTR_BYTES (64u << 10)

static const dshd_enum_t g_file_types[] = {{"FILE_TYPE_UNSPECIFIED", 0},
                                           {"FILE_TYPE_FILE", 1},
                                           {"FILE_TYPE_DIRECTORY", 2},
                                           {"FILE_TYPE_SYMLINK", 3},
                                           {NULL, 0}};

const dshd_enum_t fs_event_types[] = {{"EVENT_TYPE_UNSPECIFIED", 0},
                                      {"EVENT_TYPE_CREATE", 1},
                                      {"EVENT_TYPE_WRITE", 2},
                                      {"EVENT_TYPE_REMOVE", 3},
                                      {"EVENT_TYPE_RENAME", 4},
                                      {"EVENT_TYPE_CHMOD", 5},
                                      {NULL, 0}};

/* --- owner and group names (short-lived cache: listings stat many files) -------------- */

#define ID_CACHE 16
static struct {
  unsigned id;
  char name[64];
  double at;
  int used;
} g_users[ID_CACHE], g_groups[ID_CACHE];
static unsigned g_users_next, g_groups_next;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *id_name(int group, unsigned id) {
  __typeof__(g_users[0]) *cache = group ? g_groups : g_users;
  unsigned *next = group ? &g_groups_next : &g_users_next;
  double t = now_s();
  for (int i = 0; i < ID_CACHE; i++)
    if (cache[i].used && cache[i].id == id && t - cache[i].at < 2.0) return cache[i].name;
  unsigned slot = (*next)++ % ID_CACHE;
  cache[slot].used = 1;
  cache[slot].id = id;
  cache[slot].at = t;
  snprintf(cache[slot].name, sizeof cache[slot].name, "%u", id);
  char buf[16384];
  if (group) {
    struct group gr, *res = NULL;
    if (getgrgid_r((gid_t)id, &gr, buf, sizeof buf, &res) == 0 && res &&
        strlen(gr.gr_name) < sizeof cache[slot].name)
      snprintf(cache[slot].name, sizeof cache[slot].name, "%s", gr.gr_name);
  } else {
    struct passwd pw, *res = NULL;
    if (getpwuid_r((uid_t)id, &pw, buf, sizeof buf, &res) == 0 && res &&
        strlen(pw.pw_name) < sizeof cache[slot].name)
      snprintf(cache[slot].name, sizeof cache[slot].name, "%s", pw.pw_name);
  }
  return cache[slot].name;
}

/* --- EntryInfo ------------------------------------------------------------------------------ */

/* Go's os.FileMode.String() of a Unix st_mode. */
static void go_mode_string(mode_t m, char out[32]) {
  int w = 0;
  switch (m & S_IFMT) {
    case S_IFDIR:
      out[w++] = 'd';
      break;
    case S_IFLNK:
      out[w++] = 'L';
      break;
    case S_IFBLK:
      out[w++] = 'D';
      break;
    case S_IFCHR:
      out[w++] = 'D';
      break;
    case S_IFIFO:
      out[w++] = 'p';
      break;
    case S_IFSOCK:
      out[w++] = 'S';
      break;
    default:
      break;
  }
  if (m & S_ISUID) out[w++] = 'u';
  if (m & S_ISGID) out[w++] = 'g';
  if ((m & S_IFMT) == S_IFCHR) out[w++] = 'c';
  if (m & S_ISVTX) out[w++] = 't';
  if (w == 0) out[w++] = '-';
  static const char rwx[] = "rwxrwxrwx";
  for (int i = 0; i < 9; i++) out[w++] = (m & (1u << (8 - i))) ? rwx[i] : '-';
  out[w] = 0;
}

static int go_file_type(mode_t m) {
  if (S_ISREG(m)) return 1;
  if (S_ISDIR(m)) return 2;
  if (S_ISLNK(m)) return 3;
  return 0;
}

/* RFC 3339 in UTC with 0, 3, 6 or 9 fraction digits (protojson). 0 if the
 * time cannot be a protobuf Timestamp. */
static int rfc3339(struct timespec ts, char out[64]) {
  struct tm tm;
  time_t t = ts.tv_sec;
  if (!gmtime_r(&t, &tm)) return 0;
  int year = tm.tm_year + 1900;
  if (year < 1 || year > 9999) return 0;
  int n = snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d", year, tm.tm_mon + 1, tm.tm_mday,
                   tm.tm_hour, tm.tm_min, tm.tm_sec);
  long ns = ts.tv_nsec;
  if (ns) {
    if (ns % 1000000 == 0)
      n += snprintf(out + n, 64 - (size_t)n, ".%03ld", ns / 1000000);
    else if (ns % 1000 == 0)
      n += snprintf(out + n, 64 - (size_t)n, ".%06ld", ns / 1000);
    else
      n += snprintf(out + n, 64 - (size_t)n, ".%09ld", ns);
  }
  snprintf(out + n, 64 - (size_t)n, "Z");
  return 1;
}

static json_t *read_metadata(const char *path) {
  ssize_t n = listxattr(path, NULL, 0);
  if (n <= 0 || n > (ssize_t)MAX_XATTR_BYTES) return NULL;
  char *names = malloc((size_t)n + 1);
  if (!names) return NULL;
  n = listxattr(path, names, (size_t)n);
  if (n <= 0) {
    free(names);
    return NULL;
  }
  names[n] = 0;
  json_t *md = NULL;
  char *val = NULL;
  size_t plen = strlen(XATTR_PREFIX);
  for (char *p = names; p < names + n; p += strlen(p) + 1) {
    if (strncmp(p, XATTR_PREFIX, plen) != 0) continue;
    if (!val && !(val = malloc(MAX_XATTR_BYTES))) break;
    ssize_t vl = getxattr(path, p, val, MAX_XATTR_BYTES);
    if (vl < 0) continue;
    const char *key = p + plen;
    if (dsh_utf8_validate((const uint8_t *)key, strlen(key), NULL) != 0 ||
        dsh_utf8_validate((const uint8_t *)val, (size_t)vl, NULL) != 0)
      continue;
    if (!md) md = json_object();
    json_object_set_new(md, key, json_stringn(val, (size_t)vl));
  }
  free(val);
  free(names);
  return md;
}

json_t *fs_entry_info(const char *path, struct stat *lst_out, dshd_err_t *err) {
  struct stat lst;
  if (lstat(path, &lst) != 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      dshd_errf(err, "not_found", "file not found: lstat %s: %s", path, dshd_strerror(e));
    else
      dshd_errf(err, "internal", "error getting file info: lstat %s: %s", path, dshd_strerror(e));
    return NULL;
  }
  if (lst_out) *lst_out = lst;
  json_t *o = json_object();
  const char *slash = strrchr(path, '/');
  const char *name = (!slash || (slash == path && path[1] == 0)) ? path : slash + 1;
  json_object_set_new(o, "name", dshd_json_str(name));
  int type;
  unsigned mode;
  if (S_ISLNK(lst.st_mode)) {
    char *target = realpath(path, NULL);
    json_object_set_new(o, "symlinkTarget", dshd_json_str(target ? target : path));
    struct stat tst;
    if (stat(target ? target : path, &tst) == 0) {
      type = go_file_type(tst.st_mode);
      mode = tst.st_mode & 0777;
    } else {
      type = 0;
      mode = 0;
    }
    free(target);
  } else {
    type = go_file_type(lst.st_mode);
    mode = lst.st_mode & 0777;
  }
  if (type) json_object_set_new(o, "type", json_string(dshd_enum_name(g_file_types, type)));
  json_object_set_new(o, "path", dshd_json_str(path));
  if (lst.st_size) json_object_set_new(o, "size", dshd_json_int64_string((int64_t)lst.st_size));
  if (mode) json_object_set_new(o, "mode", json_integer(mode));
  char perm[32];
  go_mode_string(lst.st_mode, perm);
  json_object_set_new(o, "permissions", json_string(perm));
  json_object_set_new(o, "owner", dshd_json_str(id_name(0, lst.st_uid)));
  json_object_set_new(o, "group", dshd_json_str(id_name(1, lst.st_gid)));
  char ts[64];
  if ((lst.st_mtim.tv_sec || lst.st_mtim.tv_nsec) && rfc3339(lst.st_mtim, ts))
    json_object_set_new(o, "modifiedTime", json_string(ts));
  json_t *md = read_metadata(path);
  if (md) json_object_set_new(o, "metadata", md);
  return o;
}

int fs_user_and_path(dshd_req_t *r, json_t *req, const char *camel, const char *snake,
                     dshd_user_t *u, char *path, size_t pathlen, dshd_err_t *err) {
  const char *p;
  if (dshd_json_string(req, camel, snake, &p, err) != 0) return -1;
  if (dshd_user_lookup(dshd_req_basic_user(r), u, err) != 0) return -1;
  return dshd_resolve_path(u, p, 1, path, pathlen, err);
}

static json_t *wrap(const char *key, json_t *v) {
  json_t *o = json_object();
  json_object_set_new(o, key, v);
  return o;
}

/* --- Stat, MakeDir, Move --------------------------------------------------------------------- */

static int fs_stat(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  dshd_user_t u;
  char path[PATH_MAX];
  if (fs_user_and_path(r, req, "path", NULL, &u, path, sizeof path, err) != 0) return -1;
  json_t *e = fs_entry_info(path, NULL, err);
  if (!e) return -1;
  *resp = wrap("entry", e);
  return 0;
}

static int fs_make_dir(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  dshd_user_t u;
  char path[PATH_MAX];
  if (fs_user_and_path(r, req, "path", NULL, &u, path, sizeof path, err) != 0) return -1;
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return dshd_errf(err, "already_exists", "directory already exists: %s", path);
    return dshd_errf(err, "invalid_argument", "path already exists but it is not a directory: %s",
                     path);
  }
  if (errno != ENOENT)
    return dshd_errf(err, "internal", "error getting file info: stat %s: %s", path,
                     dshd_strerror(errno));
  if (dshd_ensure_dirs(&u, path, err) != 0) return -1;
  json_t *e = fs_entry_info(path, NULL, err);
  if (!e) return -1;
  *resp = wrap("entry", e);
  return 0;
}

static int fs_move(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  dshd_user_t u;
  char src[PATH_MAX], dst[PATH_MAX];
  const char *d;
  if (dshd_json_string(req, "destination", NULL, &d, err) != 0) return -1;
  if (fs_user_and_path(r, req, "source", NULL, &u, src, sizeof src, err) != 0) return -1;
  if (dshd_resolve_path(&u, d, 1, dst, sizeof dst, err) != 0) return -1;
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", dst);
  char *slash = strrchr(parent, '/');
  if (slash == parent)
    parent[1] = 0;
  else if (slash)
    *slash = 0;
  if (dshd_ensure_dirs(&u, parent, err) != 0) return -1;
  if (rename(src, dst) != 0) {
    int e = errno;
    if (e == ENOENT)
      return dshd_errf(err, "not_found", "source file not found: rename %s %s: %s", src, dst,
                       dshd_strerror(e));
    return dshd_errf(err, "internal", "error renaming: rename %s %s: %s", src, dst,
                     dshd_strerror(e));
  }
  json_t *e = fs_entry_info(dst, NULL, err);
  if (!e) return -1;
  *resp = wrap("entry", e);
  return 0;
}

/* --- ListDir ---------------------------------------------------------------------------------- */

typedef struct walk {
  json_t *entries;
  size_t count;
  uint64_t max_depth;
  char real[PATH_MAX]; /* current directory, symlinks resolved at the root */
  char out[PATH_MAX];  /* requested path + relative path */
  dshd_err_t *err;
} walk_t;

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk_dir(walk_t *w, uint64_t depth) {
  DIR *d = opendir(w->real);
  if (!d) {
    int e = errno;
    if (e == ENOENT && depth > 1) return 0; /* vanished during the walk */
    return dshd_errf(w->err, "internal", "error reading directory %s: open %s: %s", w->real,
                     w->real, dshd_strerror(e));
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *names);
      if (!nn) {
        rc = dshd_errf(w->err, "internal", "out of memory listing %s", w->real);
        break;
      }
      names = nn;
    }
    if (!(names[n] = strdup(de->d_name))) {
      rc = dshd_errf(w->err, "internal", "out of memory listing %s", w->real);
      break;
    }
    n++;
    if (w->count + n > MAX_LIST_ENTRIES) {
      rc = dshd_errf(w->err, "resource_exhausted",
                     "directory listing exceeds %d entries; use a smaller depth", MAX_LIST_ENTRIES);
      break;
    }
  }
  closedir(d);
  if (rc == 0 && n) qsort(names, n, sizeof *names, cmp_names);
  size_t rlen = strlen(w->real), olen = strlen(w->out);
  for (size_t i = 0; i < n && rc == 0; i++) {
    int rsep = !(rlen == 1 && w->real[0] == '/'), osep = !(olen == 1 && w->out[0] == '/');
    size_t nl = strlen(names[i]);
    if (rlen + rsep + nl >= PATH_MAX || olen + osep + nl >= PATH_MAX) {
      rc = dshd_errf(w->err, "internal", "path too long in %s", w->real);
      break;
    }
    snprintf(w->real + rlen, PATH_MAX - rlen, "%s%s", rsep ? "/" : "", names[i]);
    snprintf(w->out + olen, PATH_MAX - olen, "%s%s", osep ? "/" : "", names[i]);
    dshd_err_t e2 = {0};
    struct stat lst;
    json_t *e = fs_entry_info(w->real, &lst, &e2);
    if (!e) {
      if (strcmp(e2.code, "not_found") != 0) {
        *w->err = e2;
        rc = -1;
      }
    } else {
      json_object_set_new(e, "path", dshd_json_str(w->out));
      json_array_append_new(w->entries, e);
      w->count++;
      if (w->count > MAX_LIST_ENTRIES)
        rc = dshd_errf(w->err, "resource_exhausted",
                       "directory listing exceeds %d entries; use a smaller depth",
                       MAX_LIST_ENTRIES);
      else if (S_ISDIR(lst.st_mode) && depth < w->max_depth)
        rc = walk_dir(w, depth + 1);
    }
    w->real[rlen] = 0;
    w->out[olen] = 0;
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

static int fs_list_dir(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  uint64_t depth;
  if (dshd_json_uint(req, "depth", NULL, 0, &depth, err) != 0) return -1;
  if (depth > UINT32_MAX)
    return dshd_errf(err, "invalid_argument", "invalid value for uint32 field depth");
  if (depth == 0) depth = 1;
  walk_t *w = calloc(1, sizeof *w);
  if (!w) return dshd_errf(err, "internal", "out of memory");
  dshd_user_t u;
  if (fs_user_and_path(r, req, "path", NULL, &u, w->out, sizeof w->out, err) != 0) {
    free(w);
    return -1;
  }
  if (!realpath(w->out, w->real)) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      dshd_errf(err, "not_found", "path not found: lstat %s: %s", w->out, dshd_strerror(e));
    else if (e == ELOOP)
      dshd_errf(err, "failed_precondition", "cyclic symlink or chain >255 links at \"%s\"", w->out);
    else
      dshd_errf(err, "internal", "error resolving symlink: %s: %s", w->out, dshd_strerror(e));
    free(w);
    return -1;
  }
  struct stat st;
  if (stat(w->real, &st) != 0) {
    int e = errno;
    dshd_errf(err, e == ENOENT ? "not_found" : "internal", "error getting file info: stat %s: %s",
              w->real, dshd_strerror(e));
    free(w);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    dshd_errf(err, "invalid_argument", "path is not a directory: %s", w->real);
    free(w);
    return -1;
  }
  w->entries = json_array();
  w->max_depth = depth;
  w->err = err;
  int rc = walk_dir(w, 1);
  if (rc != 0) {
    json_decref(w->entries);
    free(w);
    return -1;
  }
  json_t *o = json_object();
  if (json_array_size(w->entries))
    json_object_set_new(o, "entries", w->entries);
  else
    json_decref(w->entries);
  free(w);
  *resp = o;
  return 0;
}

/* --- Remove ---------------------------------------------------------------------------------- */

static int rm_at(int dirfd, const char *name, const char *shown, dshd_err_t *err, int depth) {
  if (unlinkat(dirfd, name, 0) == 0) return 0;
  int e = errno;
  if (e == ENOENT) return 0;
  if (e != EISDIR && e != EPERM) goto fail;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    e = errno;
    if (e == ENOENT) return 0;
    goto fail;
  }
  if (depth > 4096) {
    close(fd);
    e = ELOOP;
    goto fail;
  }
  for (int pass = 0; pass < 4; pass++) {
    int dup_fd = dup(fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
      e = errno;
      if (dup_fd >= 0) close(dup_fd);
      close(fd);
      goto fail;
    }
    rewinddir(d);
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
      if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
      if ((rc = rm_at(fd, de->d_name, shown, err, depth + 1)) != 0) break;
    }
    closedir(d);
    if (rc != 0) {
      close(fd);
      return rc;
    }
    if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
      close(fd);
      return 0;
    }
    if (errno != ENOTEMPTY) break;
  }
  e = errno;
  close(fd);
fail:
  return dshd_errf(err, "internal", "error removing file or directory: unlinkat %s: %s", shown,
                   dshd_strerror(e));
}

static int fs_remove(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  dshd_user_t u;
  char path[PATH_MAX];
  if (fs_user_and_path(r, req, "path", NULL, &u, path, sizeof path, err) != 0) return -1;
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      *resp = json_object();
      return 0;
    }
    return dshd_errf(err, "internal", "error removing file or directory: lstat %s: %s", path,
                     dshd_strerror(errno));
  }
  if (strcmp(path, "/") == 0)
    return dshd_errf(err, "internal", "error removing file or directory: refusing to remove /");
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  const char *base = path + (slash - parent) + 1;
  if (slash == parent)
    parent[1] = 0;
  else
    *slash = 0;
  int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) {
    if (errno == ENOENT) {
      *resp = json_object();
      return 0;
    }
    return dshd_errf(err, "internal", "error removing file or directory: open %s: %s", parent,
                     dshd_strerror(errno));
  }
  int rc = rm_at(pfd, base, path, err, 0);
  close(pfd);
  if (rc != 0) return -1;
  *resp = json_object();
  return 0;
}

/* --- watch path checks (shared with watch_rpc.c) ----------------------------------------------------
 */

int fs_check_watch_path(const char *path, int allow_network_mounts, dshd_err_t *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      return dshd_errf(err, "not_found", "path %s not found: stat %s: %s", path, path,
                       dshd_strerror(e));
    return dshd_errf(err, "internal", "error statting path %s: stat %s: %s", path, path,
                     dshd_strerror(e));
  }
  if (!S_ISDIR(st.st_mode))
    return dshd_errf(err, "invalid_argument", "path %s not a directory", path);
  if (!allow_network_mounts) {
    struct statfs sf;
    if (statfs(path, &sf) != 0)
      return dshd_errf(err, "internal", "error checking mount status: failed to statfs %s: %s",
                       path, dshd_strerror(errno));
    unsigned long t = (unsigned long)sf.f_type;
    if (t == 0x6969 || t == 0xFF534D42ul || t == 0x517B || t == 0xFE534D42ul || t == 0x65735546)
      return dshd_errf(err, "invalid_argument", "cannot watch path on network filesystem: %s",
                       path);
  }
  return 0;
}

/* --- routes ------------------------------------------------------------------------------------
 */

const dshd_route_t dshd_filesystem_routes[] = {
    {"/filesystem.Filesystem/Stat", fs_stat, NULL, NULL, 0},
    {"/filesystem.Filesystem/MakeDir", fs_make_dir, NULL, NULL, 0},
    {"/filesystem.Filesystem/Move", fs_move, NULL, NULL, 0},
    {"/filesystem.Filesystem/ListDir", fs_list_dir, NULL, NULL, 0},
    {"/filesystem.Filesystem/Remove", fs_remove, NULL, NULL, 0},
    {"/filesystem.Filesystem/WatchDir", NULL, watch_dir_stream, NULL, 0},
    {"/filesystem.Filesystem/CreateWatcher", watch_create, NULL, NULL, 0},
    {"/filesystem.Filesystem/GetWatcherEvents", watch_get_events, NULL, NULL, 0},
    {"/filesystem.Filesystem/RemoveWatcher", watch_remove, NULL, NULL, 0},
    {NULL, NULL, NULL, NULL, 0},
};
