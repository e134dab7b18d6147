/* watch.c: the inotify core of filesystem watches (see watch.h) — one
 * inotify instance per watch, read by an ev_io on the loop.
 *
 * The mask and the event mapping follow envd's fsnotify fork: CREATE,
 * RENAME, CHMOD, WRITE, REMOVE in that order per inotify record; names
 * relative to the watched directory ("." for itself). Recursive watches add
 * a watch for every directory created or moved in and report what a new
 * directory already contains as synthetic CREATEs ("mkdir -p a/b/c"); a
 * directory moved away loses its watches. Uses filesystem.c's EntryInfo.
 * Never follows symlinks below the watched directory; never frees a watch
 * from inside its own callback. */
#include "watch.h"

#include <dirent.h>
#include <errno.h>
#include <ev.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "server.h"

#define WATCH_MASK                                                                    \
  (IN_CREATE | IN_MODIFY | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | \
   IN_MOVE_SELF | IN_ATTRIB)

typedef struct wd_entry {
  int wd;
  char *path;
  struct wd_entry *next;
} wd_entry_t;

struct watch {
  int fd;
  ev_io io;
  char *root;
  size_t rootlen;
  int recursive, include_entry;
  wd_entry_t **buckets;
  size_t nbuckets, nentries;
  watch_event_fn on_event;
  watch_fail_fn on_fail;
  void *ud;
  int in_cb, dead, failed;
};

static size_t bucket(const watch_t *w, int wd) {
  return (size_t)(unsigned)wd & (w->nbuckets - 1);
}

static wd_entry_t *wd_find(watch_t *w, int wd) {
  for (wd_entry_t *e = w->buckets[bucket(w, wd)]; e; e = e->next)
    if (e->wd == wd) return e;
  return NULL;
}

static void wd_remove(watch_t *w, int wd) {
  for (wd_entry_t **pp = &w->buckets[bucket(w, wd)]; *pp; pp = &(*pp)->next)
    if ((*pp)->wd == wd) {
      wd_entry_t *e = *pp;
      *pp = e->next;
      free(e->path);
      free(e);
      w->nentries--;
      return;
    }
}

static int wd_insert(watch_t *w, int wd, const char *path) {
  wd_entry_t *e = wd_find(w, wd);
  if (e) { /* same inode watched again (moved in): adopt the new path */
    char *p = strdup(path);
    if (!p) return -1;
    free(e->path);
    e->path = p;
    return 0;
  }
  if (w->nentries + 1 > w->nbuckets * 2) {
    size_t nb = w->nbuckets * 4;
    wd_entry_t **nbk = calloc(nb, sizeof *nbk);
    if (nbk) {
      for (size_t i = 0; i < w->nbuckets; i++)
        for (wd_entry_t *x = w->buckets[i], *nx; x; x = nx) {
          nx = x->next;
          size_t b = (size_t)(unsigned)x->wd & (nb - 1);
          x->next = nbk[b];
          nbk[b] = x;
        }
      free(w->buckets);
      w->buckets = nbk;
      w->nbuckets = nb;
    }
  }
  e = calloc(1, sizeof *e);
  if (!e || !(e->path = strdup(path))) {
    free(e);
    return -1;
  }
  e->wd = wd;
  size_t b = bucket(w, wd);
  e->next = w->buckets[b];
  w->buckets[b] = e;
  w->nentries++;
  return 0;
}

static void watch_free(watch_t *w) {
  if (!w) return;
  ev_io_stop(dshd_ev(), &w->io);
  if (w->fd >= 0) close(w->fd);
  for (size_t i = 0; i < w->nbuckets; i++)
    for (wd_entry_t *e = w->buckets[i], *n; e; e = n) {
      n = e->next;
      free(e->path);
      free(e);
    }
  free(w->buckets);
  free(w->root);
  free(w);
}

void watch_close(watch_t *w) {
  if (!w) return;
  if (w->in_cb) {
    w->dead = 1;
    ev_io_stop(dshd_ev(), &w->io);
    return;
  }
  watch_free(w);
}

static const char *rel_name(const watch_t *w, const char *full) {
  if (strcmp(full, w->root) == 0) return ".";
  if (w->rootlen == 1) return full + 1; /* root "/" */
  return full + w->rootlen + 1;
}

static void emit(watch_t *w, const char *full, int type) {
  if (w->dead || w->failed) return;
  json_t *ev = json_object();
  json_object_set_new(ev, "name", dshd_json_str(rel_name(w, full)));
  json_object_set_new(ev, "type", json_string(dshd_enum_name(fs_event_types, type)));
  if (w->include_entry && (type == FSEV_CREATE || type == FSEV_WRITE || type == FSEV_CHMOD)) {
    dshd_err_t err = {0};
    json_t *entry = fs_entry_info(full, NULL, &err);
    if (entry) json_object_set_new(ev, "entry", entry);
  }
  w->on_event(w->ud, ev);
}

static void fail(watch_t *w, const char *fmt, const char *a, const char *b) {
  if (w->failed || w->dead) return;
  w->failed = 1;
  dshd_err_t err = {0};
  dshd_errf(&err, "internal", fmt, a, b);
  w->on_fail(w->ud, &err);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds watches for dir's subdirectories (pre-order, lexical), emitting
 * synthetic CREATEs for every entry when synthetic. Entries that vanish are
 * skipped. -1 on a hard failure (err set). */
static int add_tree(watch_t *w, const char *dir, int synthetic, int depth, dshd_err_t *err) {
  if (depth > 256) return 0;
  DIR *d = opendir(dir);
  if (!d) return 0; /* vanished or unreadable: nothing to add */
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 32;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) break;
      names = nn;
    }
    if (!(names[n] = strdup(de->d_name))) break;
    n++;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_names);
  int rc = 0;
  size_t dl = strlen(dir);
  char *full = malloc(PATH_MAX);
  for (size_t i = 0; i < n && rc == 0 && full && !w->dead && !w->failed; i++) {
    if (dl + 1 + strlen(names[i]) >= PATH_MAX) continue;
    snprintf(full, PATH_MAX, "%s%s%s", dir, dl == 1 ? "" : "/", names[i]);
    if (synthetic) emit(w, full, FSEV_CREATE);
    struct stat st;
    if (lstat(full, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    int wd = inotify_add_watch(w->fd, full, WATCH_MASK | IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;
      rc = dshd_errf(err, "internal", "error adding path %s to watcher: %s", full,
                     dshd_strerror(errno));
      break;
    }
    if (wd_insert(w, wd, full) != 0) {
      rc = dshd_errf(err, "internal", "out of memory");
      break;
    }
    rc = add_tree(w, full, synthetic, depth + 1, err);
  }
  free(full);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

/* Drops the watches of dir and everything below it (moved away). */
static void drop_subtree(watch_t *w, const char *dir) {
  size_t dl = strlen(dir);
  for (size_t i = 0; i < w->nbuckets; i++) {
    wd_entry_t **pp = &w->buckets[i];
    while (*pp) {
      wd_entry_t *e = *pp;
      if (strncmp(e->path, dir, dl) == 0 && (e->path[dl] == 0 || e->path[dl] == '/')) {
        inotify_rm_watch(w->fd, e->wd);
        *pp = e->next;
        free(e->path);
        free(e);
        w->nentries--;
      } else {
        pp = &e->next;
      }
    }
  }
}

static void handle(watch_t *w, const struct inotify_event *ie) {
  if (ie->mask & IN_Q_OVERFLOW) {
    fail(w, "watcher error: fsnotify: queue or buffer overflow%s%s", "", "");
    return;
  }
  wd_entry_t *we = wd_find(w, ie->wd);
  if (!we) return;
  char full[PATH_MAX + NAME_MAX + 2];
  if (ie->len && ie->name[0])
    snprintf(full, sizeof full, "%s%s%s", we->path, strcmp(we->path, "/") == 0 ? "" : "/",
             ie->name);
  else
    snprintf(full, sizeof full, "%s", we->path);
  uint32_t m = ie->mask;
  if (m & (IN_IGNORED | IN_UNMOUNT)) {
    wd_remove(w, ie->wd);
    return;
  }
  int is_root = strcmp(we->path, w->root) == 0;
  if (m & IN_MOVE_SELF) {
    if (w->recursive) return; /* the parent's MOVED_FROM tells it */
    inotify_rm_watch(w->fd, ie->wd);
  }
  /* A watched directory deleted: its parent's IN_DELETE already tells it,
   * except for the watched directory itself. */
  if ((m & IN_DELETE_SELF) && !is_root) return;
  if (m & (IN_CREATE | IN_MOVED_TO)) emit(w, full, FSEV_CREATE);
  if (m & (IN_MOVED_FROM | IN_MOVE_SELF)) emit(w, full, FSEV_RENAME);
  if (m & IN_ATTRIB) emit(w, full, FSEV_CHMOD);
  if (m & IN_MODIFY) emit(w, full, FSEV_WRITE);
  if (m & (IN_DELETE | IN_DELETE_SELF)) emit(w, full, FSEV_REMOVE);
  if (!w->recursive || !(m & IN_ISDIR) || w->dead || w->failed) return;
  if (m & IN_MOVED_FROM) {
    drop_subtree(w, full);
  } else if (m & (IN_CREATE | IN_MOVED_TO)) {
    int wd = inotify_add_watch(w->fd, full, WATCH_MASK | IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd < 0) {
      if (errno != ENOENT && errno != ENOTDIR)
        fail(w, "watcher error: inotify_add_watch %s: %s", full, dshd_strerror(errno));
      return;
    }
    if (wd_insert(w, wd, full) != 0) return fail(w, "watcher error: %s%s", "out of memory", "");
    dshd_err_t err = {0};
    if (add_tree(w, full, 1, 0, &err) != 0) fail(w, "watcher error: %s%s", err.message, "");
  }
}

static void watch_io_cb(struct ev_loop *ev, ev_io *io, int revents) {
  watch_t *w = (watch_t *)((char *)io - offsetof(watch_t, io));
  static char buf[64 << 10] __attribute__((aligned(__alignof__(struct inotify_event))));
  w->in_cb = 1;
  for (int round = 0; round < 16 && !w->dead && !w->failed; round++) {
    ssize_t n = read(w->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0 && errno != EAGAIN)
        fail(w, "watcher error: read inotify: %s%s", dshd_strerror(errno), "");
      break;
    }
    for (char *p = buf; p < buf + n && !w->dead && !w->failed;) {
      const struct inotify_event *ie = (const struct inotify_event *)p;
      handle(w, ie);
      p += sizeof *ie + ie->len;
    }
  }
  w->in_cb = 0;
  if (w->dead) watch_free(w);
}

watch_t *watch_open(const char *root, int recursive, int include_entry, watch_event_fn on_event,
                    watch_fail_fn on_fail, void *ud, dshd_err_t *err) {
  watch_t *w = calloc(1, sizeof *w);
  if (!w) {
    dshd_errf(err, "internal", "error creating watcher: out of memory");
    return NULL;
  }
  w->fd = -1;
  w->nbuckets = 16;
  w->buckets = calloc(w->nbuckets, sizeof *w->buckets);
  w->root = strdup(root);
  if (!w->buckets || !w->root) {
    watch_free(w);
    dshd_errf(err, "internal", "error creating watcher: out of memory");
    return NULL;
  }
  w->rootlen = strlen(root);
  w->recursive = recursive;
  w->include_entry = include_entry;
  w->on_event = on_event;
  w->on_fail = on_fail;
  w->ud = ud;
  ev_init(&w->io, watch_io_cb);
  w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (w->fd < 0) {
    dshd_errf(err, "internal", "error creating watcher: inotify_init1: %s", dshd_strerror(errno));
    watch_free(w);
    return NULL;
  }
  int wd = inotify_add_watch(w->fd, root, WATCH_MASK);
  if (wd < 0 || wd_insert(w, wd, root) != 0) {
    dshd_errf(err, "internal", "error adding path %s to watcher: %s", root,
              dshd_strerror(wd < 0 ? errno : ENOMEM));
    watch_free(w);
    return NULL;
  }
  if (recursive && add_tree(w, root, 0, 0, err) != 0) {
    watch_free(w);
    return NULL;
  }
  ev_io_set(&w->io, w->fd, EV_READ);
  ev_io_start(dshd_ev(), &w->io);
  return w;
}
