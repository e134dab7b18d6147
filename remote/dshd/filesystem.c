/* filesystem.c: the unary RPCs of filesystem.Filesystem (protocol §3) — Stat,
 * MakeDir, Move, ListDir, Remove — and the service's route table. EntryInfo
 * is fs_entry.c's; the watch RPCs live in watch_rpc.c (on watch.c).
 *
 * Acts as the request's user (dshd_act_as): its permissions, its ownership
 * of what MakeDir/Move create, its home for relative paths.
 * Listings are bounded (MAX_LIST_ENTRIES). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "fs.h"
#include "server.h"

#define MAX_LIST_ENTRIES 100000

const dshd_enum_t fs_event_types[] = {{"EVENT_TYPE_UNSPECIFIED", 0},
                                      {"EVENT_TYPE_CREATE", 1},
                                      {"EVENT_TYPE_WRITE", 2},
                                      {"EVENT_TYPE_REMOVE", 3},
                                      {"EVENT_TYPE_RENAME", 4},
                                      {"EVENT_TYPE_CHMOD", 5},
                                      {NULL, 0}};

int fs_user_and_path(dshd_req_t *r, json_t *req, const char *camel, const char *snake,
                     dshd_user_t *u, char *path, size_t pathlen, dshd_err_t *err) {
  const char *p;
  if (dshd_json_string(req, camel, snake, &p, err) != 0) return -1;
  if (dshd_user_lookup(dshd_req_basic_user(r), u, err) != 0) return -1;
  dshd_act_as(u);
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

/* --- watch path checks (shared with watch_rpc.c)
 * ----------------------------------------------------
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
