/* watch.c: filesystem watches — the WatchDir stream and the polling watchers
 * (CreateWatcher, GetWatcherEvents, RemoveWatcher), protocol §3.3-§3.4.
 *
 * One inotify instance per watch, read by an ev_io on the loop. The mask and
 * the event mapping follow envd's fsnotify fork: CREATE, RENAME, CHMOD,
 * WRITE, REMOVE in that order per inotify record; names relative to the
 * watched directory ("." for itself). Recursive watches add a watch for every
 * directory created or moved in and report what a new directory already
 * contains as synthetic CREATEs ("mkdir -p a/b/c"); a directory moved away
 * loses its watches. Events are queued (bounded: a full queue ends a stream
 * with internal, and turns a watcher into an error it keeps returning).
 * Never follows symlinks below the watched directory. */
#include <dirent.h>
#include <errno.h>
#include <ev.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "server.h"

#define WATCH_MASK                                                                    \
  (IN_CREATE | IN_MODIFY | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | \
   IN_MOVE_SELF | IN_ATTRIB)
#define STREAM_MAX_EVENTS 65536
#define STREAM_MAX_BYTES (16u << 20)
#define STREAM_BATCH_BYTES (256u << 10)
#define WATCHER_MAX_EVENTS 10000
#define MAX_WATCHERS 1024

enum { FSEV_CREATE = 1, FSEV_WRITE = 2, FSEV_REMOVE = 3, FSEV_RENAME = 4, FSEV_CHMOD = 5 };

/* --- the watch core ----------------------------------------------------------------------- */

typedef struct wd_entry {
  int wd;
  char *path;
  struct wd_entry *next;
} wd_entry_t;

typedef struct watch watch_t;
typedef void (*watch_event_fn)(void *ud, json_t *event); /* takes event */
typedef void (*watch_fail_fn)(void *ud, const dshd_err_t *err);

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

/* Stops the watch; freed now, or when its callback unwinds. */
static void watch_close(watch_t *w) {
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

static watch_t *watch_open(const char *root, int recursive, int include_entry,
                           watch_event_fn on_event, watch_fail_fn on_fail, void *ud,
                           dshd_err_t *err) {
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

static int parse_watch_request(dshd_req_t *r, json_t *req, char *path, size_t pathlen,
                               int *recursive, int *include_entry, dshd_err_t *err) {
  int allow_net;
  dshd_user_t u;
  if (dshd_json_bool(req, "recursive", NULL, 0, recursive, err) != 0 ||
      dshd_json_bool(req, "includeEntry", "include_entry", 0, include_entry, err) != 0 ||
      dshd_json_bool(req, "allowNetworkMounts", "allow_network_mounts", 0, &allow_net, err) != 0)
    return -1;
  if (fs_user_and_path(r, req, "path", NULL, &u, path, pathlen, err) != 0) return -1;
  return fs_check_watch_path(path, allow_net, err);
}

/* --- WatchDir --------------------------------------------------------------------------------- */

typedef struct wstream {
  watch_t *w;
  dshd_stream_t *s;
  char **q; /* ring of serialized messages */
  size_t *qlen;
  size_t head, count, cap, bytes;
  ev_timer keepalive, deadline;
  int end_pending;
  int has_err;
  dshd_err_t err;
} wstream_t;

static void ws_clear(wstream_t *ws) {
  while (ws->count) {
    free(ws->q[ws->head]);
    ws->head = (ws->head + 1) % ws->cap;
    ws->count--;
  }
  ws->bytes = 0;
}

static void ws_finish(wstream_t *ws, const dshd_err_t *err) {
  if (ws->end_pending) return;
  ws->end_pending = 1;
  if (err) {
    ws->has_err = 1;
    ws->err = *err;
  }
  ev_timer_stop(dshd_ev(), &ws->keepalive);
  ev_timer_stop(dshd_ev(), &ws->deadline);
  watch_close(ws->w);
  ws->w = NULL;
  dshd_stream_wake(ws->s);
}

static int ws_push(wstream_t *ws, char *msg) {
  size_t len = strlen(msg);
  if (ws->count >= STREAM_MAX_EVENTS || ws->bytes + len > STREAM_MAX_BYTES) {
    free(msg);
    return -1;
  }
  if (ws->count == ws->cap) {
    size_t nc = ws->cap ? ws->cap * 2 : 64;
    char **nq = malloc(nc * sizeof *nq);
    size_t *nl = malloc(nc * sizeof *nl);
    if (!nq || !nl) {
      free(nq);
      free(nl);
      free(msg);
      return -1;
    }
    for (size_t i = 0; i < ws->count; i++) {
      nq[i] = ws->q[(ws->head + i) % ws->cap];
      nl[i] = ws->qlen[(ws->head + i) % ws->cap];
    }
    free(ws->q);
    free(ws->qlen);
    ws->q = nq;
    ws->qlen = nl;
    ws->cap = nc;
    ws->head = 0;
  }
  size_t tail = (ws->head + ws->count) % ws->cap;
  ws->q[tail] = msg;
  ws->qlen[tail] = len;
  ws->count++;
  ws->bytes += len;
  return 0;
}

static void ws_on_event(void *ud, json_t *event) {
  wstream_t *ws = ud;
  if (ws->end_pending) {
    json_decref(event);
    return;
  }
  json_t *msg = json_object();
  json_object_set_new(msg, "filesystem", event);
  char *txt = json_dumps(msg, JSON_COMPACT);
  json_decref(msg);
  if (!txt || ws_push(ws, txt) != 0) {
    dshd_err_t err = {0};
    dshd_errf(&err, "internal",
              "watcher error: event queue overflow (the client reads too slowly)");
    ws_clear(ws);
    ws_finish(ws, &err);
    return;
  }
  dshd_stream_wake(ws->s);
}

static void ws_on_fail(void *ud, const dshd_err_t *err) {
  wstream_t *ws = ud;
  ws_clear(ws);
  ws_finish(ws, err);
}

static int ws_pull(void *ud, dshd_stream_t *s) {
  wstream_t *ws = ud;
  if (ws->count) {
    size_t sent = 0;
    while (ws->count && sent < STREAM_BATCH_BYTES) {
      char *m = ws->q[ws->head];
      size_t len = ws->qlen[ws->head];
      dshd_stream_message(s, m, len);
      free(m);
      ws->head = (ws->head + 1) % ws->cap;
      ws->count--;
      ws->bytes -= len;
      sent += len;
    }
    if (!ws->end_pending) ev_timer_again(dshd_ev(), &ws->keepalive); /* envd resets after events */
    return 1;
  }
  if (ws->end_pending) {
    dshd_stream_end(s, ws->has_err ? &ws->err : NULL);
    return 1;
  }
  return 0;
}

static void ws_closed(void *ud, dshd_stream_t *s, int client_gone) {
  wstream_t *ws = ud;
  ev_timer_stop(dshd_ev(), &ws->keepalive);
  ev_timer_stop(dshd_ev(), &ws->deadline);
  watch_close(ws->w);
  ws_clear(ws);
  free(ws->q);
  free(ws->qlen);
  free(ws);
}

static const dshd_stream_ops_t ws_ops = {ws_pull, ws_closed};

static void ws_keepalive_cb(struct ev_loop *ev, ev_timer *t, int revents) {
  wstream_t *ws = (wstream_t *)((char *)t - offsetof(wstream_t, keepalive));
  if (ws->end_pending || ws->count) return;
  char *m = strdup("{\"keepalive\":{}}");
  if (m && ws_push(ws, m) == 0) dshd_stream_wake(ws->s);
}

static void ws_deadline_cb(struct ev_loop *ev, ev_timer *t, int revents) {
  wstream_t *ws = (wstream_t *)((char *)t - offsetof(wstream_t, deadline));
  dshd_err_t err = {0};
  dshd_errf(&err, "deadline_exceeded", "context deadline exceeded");
  ws_clear(ws);
  ws_finish(ws, &err);
}

int watch_dir_stream(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err) {
  char path[PATH_MAX];
  int recursive, include_entry;
  if (parse_watch_request(r, req, path, sizeof path, &recursive, &include_entry, err) != 0)
    return -1;
  wstream_t *ws = calloc(1, sizeof *ws);
  if (!ws) return dshd_errf(err, "internal", "out of memory");
  ws->s = s;
  ws->w = watch_open(path, recursive, include_entry, ws_on_event, ws_on_fail, ws, err);
  if (!ws->w) {
    free(ws);
    return -1;
  }
  /* Armed: start is the first message. */
  static const char start[] = "{\"start\":{}}";
  dshd_stream_message(s, start, sizeof start - 1);
  double ka = dsh_ms_to_ev(dshd_stream_keepalive_ms(s));
  ev_timer_init(&ws->keepalive, ws_keepalive_cb, ka, ka);
  ev_timer_start(dshd_ev(), &ws->keepalive);
  ev_init(&ws->deadline, ws_deadline_cb);
  if (dshd_stream_timeout_ms(s) > 0) {
    ev_timer_set(&ws->deadline, dsh_ms_to_ev(dshd_stream_timeout_ms(s)), 0.);
    ev_timer_start(dshd_ev(), &ws->deadline);
  }
  dshd_stream_attach(s, &ws_ops, ws);
  return 0;
}

/* --- polling watchers ------------------------------------------------------------------------- */

typedef struct watcher {
  char id[40];
  watch_t *w;
  json_t *events;
  int failed;
  dshd_err_t err;
  struct watcher *next;
} watcher_t;

static watcher_t *g_watchers;
static size_t g_nwatchers;

static void wt_stop(watcher_t *wt, const dshd_err_t *err) {
  if (wt->failed) return;
  wt->failed = 1;
  wt->err = *err;
  watch_close(wt->w);
  wt->w = NULL;
  json_array_clear(wt->events);
}

static void wt_on_event(void *ud, json_t *event) {
  watcher_t *wt = ud;
  if (wt->failed) {
    json_decref(event);
    return;
  }
  if (json_array_size(wt->events) >= WATCHER_MAX_EVENTS) {
    json_decref(event);
    dshd_err_t err = {0};
    dshd_errf(&err, "internal",
              "watcher error: more than %d events queued since the last GetWatcherEvents",
              WATCHER_MAX_EVENTS);
    wt_stop(wt, &err);
    return;
  }
  json_array_append_new(wt->events, event);
}

static void wt_on_fail(void *ud, const dshd_err_t *err) {
  wt_stop(ud, err);
}

static watcher_t *wt_find(const char *id, watcher_t ***prevp) {
  for (watcher_t **pp = &g_watchers; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->id, id) == 0) {
      if (prevp) *prevp = pp;
      return *pp;
    }
  return NULL;
}

int watch_create(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  char path[PATH_MAX];
  int recursive, include_entry;
  if (parse_watch_request(r, req, path, sizeof path, &recursive, &include_entry, err) != 0)
    return -1;
  if (g_nwatchers >= MAX_WATCHERS)
    return dshd_errf(err, "resource_exhausted", "too many watchers (%d); remove some first",
                     MAX_WATCHERS);
  watcher_t *wt = calloc(1, sizeof *wt);
  if (!wt) return dshd_errf(err, "internal", "out of memory");
  uint8_t rnd[10];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
    for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (uint8_t)rand();
  int n = snprintf(wt->id, sizeof wt->id, "w");
  for (size_t i = 0; i < sizeof rnd; i++)
    n += snprintf(wt->id + n, sizeof wt->id - (size_t)n, "%02x", rnd[i]);
  wt->events = json_array();
  wt->w = watch_open(path, recursive, include_entry, wt_on_event, wt_on_fail, wt, err);
  if (!wt->w) {
    json_decref(wt->events);
    free(wt);
    return -1;
  }
  wt->next = g_watchers;
  g_watchers = wt;
  g_nwatchers++;
  *resp = json_object();
  json_object_set_new(*resp, "watcherId", json_string(wt->id));
  return 0;
}

int watch_get_events(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  const char *id;
  if (dshd_json_string(req, "watcherId", "watcher_id", &id, err) != 0) return -1;
  watcher_t *wt = wt_find(id, NULL);
  if (!wt) return dshd_errf(err, "not_found", "watcher with id %s not found", id);
  if (wt->failed) {
    *err = wt->err;
    return -1;
  }
  *resp = json_object();
  if (json_array_size(wt->events)) {
    json_object_set_new(*resp, "events", wt->events);
    wt->events = json_array();
  }
  return 0;
}

static void wt_free(watcher_t *wt) {
  watch_close(wt->w);
  json_decref(wt->events);
  free(wt);
}

int watch_remove(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  const char *id;
  if (dshd_json_string(req, "watcherId", "watcher_id", &id, err) != 0) return -1;
  watcher_t **pp;
  watcher_t *wt = wt_find(id, &pp);
  if (!wt) return dshd_errf(err, "not_found", "watcher with id %s not found", id);
  *pp = wt->next;
  g_nwatchers--;
  wt_free(wt);
  *resp = json_object();
  return 0;
}

void dshd_watchers_shutdown(void) {
  while (g_watchers) {
    watcher_t *wt = g_watchers;
    g_watchers = wt->next;
    wt_free(wt);
  }
  g_nwatchers = 0;
}
