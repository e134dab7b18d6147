/* watch_rpc.c: the watch RPCs of the filesystem service (protocol
 * §3.3-§3.4) — the WatchDir stream and the polling watchers
 * (CreateWatcher, GetWatcherEvents, RemoveWatcher) on top of watch.c.
 *
 * Events are queued, bounded: a full queue ends a stream with internal, and
 * turns a watcher into an error it keeps returning until removed. Never
 * holds more than STREAM_MAX_EVENTS/STREAM_MAX_BYTES for a slow client. */
#include <ev.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "fs.h"
#include "server.h"
#include "watch.h"

#define STREAM_MAX_EVENTS 65536
#define STREAM_MAX_BYTES (16u << 20)
#define STREAM_BATCH_BYTES (256u << 10)
#define WATCHER_MAX_EVENTS 10000
#define MAX_WATCHERS 1024

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

/* The client sent its end of file: a keepalive now shows whether it is gone. */
static void ws_probe(void *ud, dshd_stream_t *s) {
  wstream_t *ws = ud;
  (void)s;
  char *m = ws->end_pending ? NULL : strdup("{\"keepalive\":{}}");
  if (m && ws_push(ws, m) == 0) dshd_stream_wake(ws->s);
}

static const dshd_stream_ops_t ws_ops = {ws_pull, ws_closed, ws_probe};

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
