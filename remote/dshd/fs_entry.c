/* fs_entry.c: EntryInfo exactly as envd fills it (protocol §3.2) — a
 * symlink typed by its target, Go's FileMode.String() letters, RFC 3339
 * times with 0/3/6/9 fraction digits, owner and group names (a short-lived
 * cache: listings stat many files), user.e2b.* xattrs as metadata.
 *
 * Uses lstat/stat, getpwuid_r/getgrgid_r and the xattr calls. Never follows
 * a symlink except to type it; never reads more than MAX_XATTR_BYTES of
 * metadata. */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "dsh/utf8.h"
#include "fs.h"
#include "server.h"

#define XATTR_PREFIX "user.e2b."
#define MAX_XATTR_BYTES (64u << 10)

static const dshd_enum_t g_file_types[] = {{"FILE_TYPE_UNSPECIFIED", 0},
                                           {"FILE_TYPE_FILE", 1},
                                           {"FILE_TYPE_DIRECTORY", 2},
                                           {"FILE_TYPE_SYMLINK", 3},
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
