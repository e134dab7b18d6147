/* http.c: the HTTP client of http.h: a libcurl multi handle driven by libev
 * (one ev_io per socket, one ev_timer), in the manner of curl's evhiperfifo.c.
 *
 * Uses libcurl and libev. libcurl callbacks only update request state and
 * queue events on the loop; they never call the owner (never Lua). libcurl is
 * entered only from outside its own callbacks: curl_multi_socket_action from
 * the libev watchers (followed by draining curl_multi_info_read), and
 * curl_easy_pause / curl_multi_remove_handle from the owner's calls. Easy
 * handles are pooled per client (curl_easy_reset) to keep requests cheap. */
#include "dsh/http.h"

#include <curl/curl.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dsh/buf.h"
#include "dsh/errors.h"
#include "dsh/fail.h"
#include "dsh/loop_ev.h"

#define DEFAULT_MAX_BUFFER (1u << 20)
#define DEFAULT_MAX_HEADER (64u << 10)
#define EASY_POOL_MAX 8
#ifndef RECV_BUFFER_BYTES
#define RECV_BUFFER_BYTES 65536
#endif
#define LOOPBACK_NOPROXY "localhost,127.0.0.0/8,::1"
/* A stall timer that fires this late (s) found the loop itself blocked: bytes
 * may be waiting unread, so it looks again after this long before failing. */
#define STALL_GRACE 0.25

typedef struct sock {
  ev_io w;
  dsh_http_t *h;
  struct sock *next; /* h->socks: every sock made, in use or free */
  int in_use;
} sock_t;

struct dsh_http {
  dsh_loop_t *loop;
  struct ev_loop *ev;
  CURLM *multi;
  ev_timer timer;
  dsh_http_req_t *live; /* requests not yet freed */
  sock_t *socks;
  CURL *pool[EASY_POOL_MAX];
  int npool;
  char *noproxy;
  dsh_http_stats_t st;
};

struct dsh_http_req {
  dsh_http_t *h; /* NULL once detached by dsh_http_free */
  dsh_http_req_t *prev, *next;
  CURL *easy; /* NULL once out of the multi */
  struct curl_slist *hdrs;
  uint64_t id;
  int32_t status, pending_status, result;
  int32_t own_rc; /* our own reason to fail the transfer, or 0 */
  uint8_t done, head_sent, in_head, stream, send_ended, send_want, recv_paused, send_paused;
  /* paused by us since the last stall check; ended by the stall timer */
  uint8_t was_paused, stalled;
  int64_t stall_ms;
  ev_timer stall_t;             /* armed while stall_ms and in the multi */
  ev_tstamp last_io, stall_due; /* loop time of the last byte moved; when stall_t is due */
  size_t max_buf, max_head, head_total;
  char *head;
  size_t head_len, head_cap;
  dsh_buf_t in, out; /* response body; streamed request body */
  int64_t body_bytes, peak, sent_bytes;
  char msg[CURL_ERROR_SIZE]; /* libcurl's error buffer, then the DONE message */
};

/* ---- libcurl <-> libev -------------------------------------------------- */

static void finish(dsh_http_req_t *r, CURLcode code);

static void drain_done(dsh_http_t *h) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(h->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURLcode code = m->data.result; /* m is invalid once the handle is removed */
    dsh_http_req_t *r = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    if (r) finish(r, code);
  }
}

static void io_cb(struct ev_loop *ev, ev_io *w, int revents) {
  (void)ev;
  dsh_http_t *h = ((sock_t *)w)->h;
  int action =
      ((revents & EV_READ) ? CURL_CSELECT_IN : 0) | ((revents & EV_WRITE) ? CURL_CSELECT_OUT : 0);
  int running;
  curl_multi_socket_action(h->multi, w->fd, action, &running);
  drain_done(h);
}

static void timer_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)ev, (void)revents;
  dsh_http_t *h = w->data;
  int running;
  curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  drain_done(h);
}

static int curl_timer_fn(CURLM *multi, long timeout_ms, void *userp) {
  (void)multi;
  dsh_http_t *h = userp;
  ev_timer_stop(h->ev, &h->timer);
  if (timeout_ms >= 0) {
    ev_timer_set(&h->timer, dsh_ms_to_ev(timeout_ms), 0.);
    ev_timer_start(h->ev, &h->timer);
  }
  return 0;
}

static int curl_socket_fn(CURL *e, curl_socket_t s, int what, void *userp, void *socketp) {
  (void)e;
  dsh_http_t *h = userp;
  sock_t *k = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (k) {
      ev_io_stop(h->ev, &k->w);
      k->in_use = 0;
    }
    return 0;
  }
  if (!k) {
    for (k = h->socks; k && k->in_use; k = k->next) {
    }
    if (!k) {
      if (!(k = calloc(1, sizeof *k))) return -1;
      k->h = h;
      k->next = h->socks;
      h->socks = k;
    }
    k->in_use = 1;
    ev_init(&k->w, io_cb);
    curl_multi_assign(h->multi, s, k);
  }
  int events = ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
  ev_io_stop(h->ev, &k->w);
  ev_io_set(&k->w, s, events);
  ev_io_start(h->ev, &k->w);
  return 0;
}

/* ---- client ------------------------------------------------------------- */

static int g_curl_ready;

int dsh_http_new(dsh_loop_t *loop, dsh_http_t **out) {
  if (!loop || !out) return DSH_EINVAL;
  if (!g_curl_ready) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return DSH_ENOMEM;
    g_curl_ready = 1;
  }
  dsh_http_t *h = calloc(1, sizeof *h);
  if (!h) return DSH_ENOMEM;
  h->loop = loop;
  h->ev = dsh_loop_ev(loop);
  /* Proxies from the environment stay in force, but never for loopback. */
  const char *env = getenv("no_proxy");
  if (!env || !*env) env = getenv("NO_PROXY");
  size_t n = (env ? strlen(env) + 1 : 0) + sizeof LOOPBACK_NOPROXY;
  if (!(h->noproxy = malloc(n)) || !(h->multi = curl_multi_init())) {
    free(h->noproxy);
    free(h);
    return DSH_ENOMEM;
  }
  snprintf(h->noproxy, n, "%s%s%s", env && *env ? env : "", env && *env ? "," : "",
           LOOPBACK_NOPROXY);
  ev_init(&h->timer, timer_cb);
  h->timer.data = h;
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_fn);
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, curl_timer_fn);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
  *out = h;
  return DSH_OK;
}

static void detach(dsh_http_req_t *r);

void dsh_http_free(dsh_http_t *h) {
  if (!h) return;
  while (h->live) detach(h->live);
  curl_multi_cleanup(h->multi); /* closes cached connections */
  for (int i = 0; i < h->npool; i++) curl_easy_cleanup(h->pool[i]);
  ev_timer_stop(h->ev, &h->timer);
  for (sock_t *k = h->socks, *next; k; k = next) {
    next = k->next;
    ev_io_stop(h->ev, &k->w);
    free(k);
  }
  free(h->noproxy);
  free(h);
}

int dsh_http_stats(const dsh_http_t *h, dsh_http_stats_t *st) {
  if (!h || !st) return DSH_EINVAL;
  *st = h->st;
  return DSH_OK;
}

/* ---- request callbacks -------------------------------------------------- */

static size_t header_cb(char *p, size_t size, size_t nitems, void *ud) {
  dsh_http_req_t *r = ud;
  size_t n = size * nitems;
  if (r->head_sent) return n; /* trailers: not part of the head */
  int status_line = !r->in_head;
  if (status_line) { /* of a final or a 1xx head */
    r->in_head = 1;
    r->head_len = r->head_total = 0;
    const char *sp = memchr(p, ' ', n);
    int code = 0;
    for (size_t i = sp ? (size_t)(sp - p) + 1 : n; i < n && p[i] >= '0' && p[i] <= '9'; i++)
      code = code * 10 + (p[i] - '0');
    r->pending_status = code;
  }
  r->last_io = ev_now(r->h->ev);
  r->head_total += n;
  if (r->head_total > r->max_head) {
    r->own_rc = DSH_ELIMIT;
    return 0;
  }
  if (n <= 2 && (p[0] == '\r' || p[0] == '\n')) { /* end of a head */
    r->in_head = 0;
    if (r->pending_status >= 100 && r->pending_status < 200) return n; /* 100-continue, 103 */
    r->status = r->pending_status;
    r->head_sent = 1;
    dsh_loop_push(r->h->loop, DSH_EV_HTTP_HEAD, r->id, 0, r->status);
    return n;
  }
  if (status_line) return n; /* not kept: the status is reported apart */
  if (r->head_len + n > r->head_cap) {
    size_t ncap = r->head_cap ? r->head_cap * 2 : 512;
    while (ncap < r->head_len + n) ncap *= 2;
    char *np = realloc(r->head, ncap);
    if (!np) {
      r->own_rc = DSH_ENOMEM;
      return 0;
    }
    r->head = np;
    r->head_cap = ncap;
  }
  memcpy(r->head + r->head_len, p, n);
  r->head_len += n;
  return n;
}

static size_t write_cb(char *p, size_t size, size_t nitems, void *ud) {
  dsh_http_req_t *r = ud;
  size_t n = size * nitems;
  r->last_io = ev_now(r->h->ev);
  if (r->in.len && r->in.len + n > r->max_buf) {
    r->recv_paused = r->was_paused = 1; /* libcurl holds these bytes and re-delivers them */
    return CURL_WRITEFUNC_PAUSE;
  }
  int was_empty = r->in.len == 0;
  if (dsh_buf_append(&r->in, p, n, r->max_buf + CURL_MAX_WRITE_SIZE) != DSH_OK) {
    r->own_rc = DSH_ENOMEM;
    return 0;
  }
  r->body_bytes += n;
  if ((int64_t)r->in.len > r->peak) r->peak = (int64_t)r->in.len;
  if (was_empty) dsh_loop_push(r->h->loop, DSH_EV_HTTP_DATA, r->id, 0, (int64_t)r->in.len);
  return n;
}

static size_t read_cb(char *p, size_t size, size_t nitems, void *ud) {
  dsh_http_req_t *r = ud;
  size_t room = size * nitems;
  r->last_io = ev_now(r->h->ev);
  if (!r->out.len) {
    if (r->send_ended) return 0;
    r->send_paused = r->was_paused = 1;
    return CURL_READFUNC_PAUSE;
  }
  size_t n = r->out.len < room ? r->out.len : room;
  memcpy(p, dsh_buf_data(&r->out), n);
  dsh_buf_drop(&r->out, n);
  r->sent_bytes += n;
  if (r->send_want && r->out.len <= r->max_buf / 2) {
    r->send_want = 0;
    dsh_loop_push(r->h->loop, DSH_EV_HTTP_SEND, r->id, 0, (int64_t)(r->max_buf - r->out.len));
  }
  return n;
}

/* ---- request lifecycle -------------------------------------------------- */

static CURL *easy_get(dsh_http_t *h) {
  return h->npool ? h->pool[--h->npool] : curl_easy_init();
}

/* Takes the request out of the multi and recycles its easy handle. A transfer
 * removed before it completed has its connection closed by libcurl, so a
 * half-read response is never mistaken for the next one. */
static void release(dsh_http_req_t *r) {
  dsh_http_t *h = r->h;
  ev_timer_stop(h->ev, &r->stall_t);
  if (r->easy) {
    long nconn = 0;
    if (curl_easy_getinfo(r->easy, CURLINFO_NUM_CONNECTS, &nconn) == CURLE_OK)
      h->st.connections += nconn;
    curl_multi_remove_handle(h->multi, r->easy);
    if (h->npool < EASY_POOL_MAX) {
      curl_easy_reset(r->easy);
      h->pool[h->npool++] = r->easy;
    } else {
      curl_easy_cleanup(r->easy);
    }
    r->easy = NULL;
  }
  curl_slist_free_all(r->hdrs);
  r->hdrs = NULL;
  dsh_buf_free(&r->out);
}

static void finish(dsh_http_req_t *r, CURLcode code) {
  int rc = DSH_OK;
  if (r->own_rc == DSH_ELIMIT) {
    rc = DSH_ELIMIT;
    snprintf(r->msg, sizeof r->msg, "response head exceeds max_header_bytes (%zu)", r->max_head);
  } else if (r->own_rc) {
    rc = r->own_rc;
    snprintf(r->msg, sizeof r->msg, "%s", dsh_strerror(rc));
  } else if (code == CURLE_OPERATION_TIMEDOUT) {
    rc = DSH_ETIMEDOUT;
  } else if (code != CURLE_OK) {
    rc = DSH_EHTTP;
  }
  if (code != CURLE_OK && !r->own_rc && !r->msg[0])
    snprintf(r->msg, sizeof r->msg, "%s", curl_easy_strerror(code));
  if (rc == DSH_OK) r->msg[0] = 0;
  if (rc == DSH_OK && !r->head_sent) { /* defensive: a response without a head line */
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    r->status = (int32_t)status;
    r->head_sent = 1;
    dsh_loop_push(r->h->loop, DSH_EV_HTTP_HEAD, r->id, 0, r->status);
  }
  release(r);
  r->done = 1;
  r->result = rc;
  dsh_loop_push(r->h->loop, DSH_EV_HTTP_DONE, r->id, rc, r->status);
}

static void cancel(dsh_http_req_t *r, const char *why) {
  release(r);
  dsh_buf_free(&r->in);
  r->done = 1;
  r->result = DSH_ECANCELED;
  snprintf(r->msg, sizeof r->msg, "%s", why);
}

static void unlink_req(dsh_http_req_t *r) {
  dsh_http_t *h = r->h;
  if (r->prev)
    r->prev->next = r->next;
  else
    h->live = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  h->st.live--;
}

static void detach(dsh_http_req_t *r) {
  if (!r->done) cancel(r, "the HTTP client was freed"); /* done ones are released already */
  unlink_req(r);
  r->h = NULL;
}

static int is_header(const char *line, const char *name, size_t n) {
  return strncasecmp(line, name, n) == 0 && line[n] == ':';
}

static void set_method(CURL *e, const char *method, const dsh_http_req_opts_t *o,
                       int64_t content_length) {
  int is_post = strcmp(method, "POST") == 0;
  if (o->stream_body) {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)content_length); /* -1: chunked */
  } else if (o->body || is_post) {
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(o->body ? o->body_len : 0));
    curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, o->body ? (const char *)o->body : "");
  } else if (strcmp(method, "HEAD") == 0) {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    return;
  } else if (strcmp(method, "GET") == 0) {
    return;
  }
  if (!is_post) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
}

/* ---- stalls ------------------------------------------------------------- */

static void stall_arm(dsh_http_req_t *r, ev_tstamp now, ev_tstamp after) {
  r->stall_due = now + after;
  ev_timer_set(&r->stall_t, after, 0.);
  ev_timer_start(r->h->ev, &r->stall_t);
}

/* Checks the time since the last byte moved (libev's inactivity-timeout
 * pattern: callbacks only note the time, the timer re-arms for the rest). */
static void stall_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)revents;
  dsh_http_req_t *r = w->data;
  ev_tstamp now = ev_now(ev), limit = (ev_tstamp)r->stall_ms / 1000.;
  if (r->recv_paused || r->send_paused || r->was_paused) {
    r->was_paused = 0; /* paused by us: the owner's pace, not the path's */
    r->last_io = now;
  }
  if (now - r->stall_due > STALL_GRACE) { /* the loop was blocked: read first */
    stall_arm(r, now, STALL_GRACE);
    return;
  }
  if (now - r->last_io < limit) {
    stall_arm(r, now, r->last_io + limit - now);
    return;
  }
  release(r);
  r->done = 1;
  r->stalled = 1;
  r->result = DSH_ETIMEDOUT;
  snprintf(r->msg, sizeof r->msg, "connection stalled: nothing received or sent for %lld ms",
           (long long)r->stall_ms);
  dsh_loop_push(r->h->loop, DSH_EV_HTTP_DONE, r->id, DSH_ETIMEDOUT, r->status);
}

int dsh_http_start(dsh_http_t *h, const dsh_http_req_opts_t *o, uint64_t id, dsh_http_req_t **out,
                   char *err, size_t errlen) {
  if (!h || !o || !out) return dsh_fail(err, errlen, DSH_EINVAL, "http: start: missing argument");
  if (!o->url || !*o->url) return dsh_fail(err, errlen, DSH_EINVAL, "http: start: url is required");
  if (o->body && o->stream_body)
    return dsh_fail(err, errlen, DSH_EINVAL, "http: start: body and stream_body are exclusive");
  if (o->timeout_ms < 0 || o->connect_timeout_ms < 0 || o->stall_timeout_ms < 0)
    return dsh_fail(err, errlen, DSH_EINVAL, "http: start: negative timeout");
  const char *method = o->method && *o->method ? o->method : "GET";
  dsh_http_req_t *r = calloc(1, sizeof *r);
  if (!r) return dsh_fail(err, errlen, DSH_ENOMEM, "http: start: out of memory");
  r->h = h;
  r->id = id;
  r->stream = o->stream_body != 0;
  r->max_buf = o->max_buffer_bytes ? o->max_buffer_bytes : DEFAULT_MAX_BUFFER;
  r->max_head = o->max_header_bytes ? o->max_header_bytes : DEFAULT_MAX_HEADER;
  r->stall_ms = o->stall_timeout_ms;
  ev_init(&r->stall_t, stall_cb);
  r->stall_t.data = r;

  int64_t content_length = -1;
  int has_expect = 0;
  for (size_t i = 0; i < o->nheaders; i++) {
    const char *line = o->headers[i];
    if (!line || strpbrk(line, "\r\n") || !strchr(line, ':')) {
      curl_slist_free_all(r->hdrs);
      free(r);
      return dsh_fail(err, errlen, DSH_EINVAL, "http: start: bad header line %zu", i + 1);
    }
    if (is_header(line, "Content-Length", 14)) content_length = strtoll(line + 15, NULL, 10);
    if (is_header(line, "Expect", 6)) has_expect = 1;
    struct curl_slist *l = curl_slist_append(r->hdrs, line);
    if (!l) goto nomem;
    r->hdrs = l;
  }
  if ((o->body || o->stream_body) && !has_expect) {
    struct curl_slist *l = curl_slist_append(r->hdrs, "Expect:"); /* no 100-continue round trip */
    if (!l) goto nomem;
    r->hdrs = l;
  }
  if (!(r->easy = easy_get(h))) goto nomem;

  CURL *e = r->easy;
  curl_easy_setopt(e, CURLOPT_URL, o->url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)RECV_BUFFER_BYTES);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->msg);
  curl_easy_setopt(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  if (o->unix_socket) {
    curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, o->unix_socket);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
  } else {
    curl_easy_setopt(e, CURLOPT_NOPROXY, h->noproxy);
  }
  if (o->timeout_ms) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
  if (o->connect_timeout_ms)
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_timeout_ms);
  if (r->stream) {
    curl_easy_setopt(e, CURLOPT_READFUNCTION, read_cb);
    curl_easy_setopt(e, CURLOPT_READDATA, r);
  }
  set_method(e, method, o, content_length);
  if (r->hdrs) curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);

  if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
    curl_easy_cleanup(e);
    r->easy = NULL;
    goto nomem;
  }
  r->next = h->live;
  if (h->live) h->live->prev = r;
  h->live = r;
  h->st.requests++;
  h->st.live++;
  if (r->stall_ms) {
    r->last_io = ev_now(h->ev);
    stall_arm(r, r->last_io, (ev_tstamp)r->stall_ms / 1000.);
  }
  *out = r;
  return DSH_OK;

nomem:
  curl_slist_free_all(r->hdrs);
  if (r->easy) curl_easy_cleanup(r->easy);
  free(r);
  return dsh_fail(err, errlen, DSH_ENOMEM, "http: start: out of memory");
}

int32_t dsh_http_status(const dsh_http_req_t *r) {
  return r && r->head_sent ? r->status : 0;
}

int dsh_http_headers(const dsh_http_req_t *r, const char **data, size_t *n) {
  if (!r || !data || !n) return DSH_EINVAL;
  if (!r->head_sent) return DSH_EAGAIN;
  *data = r->head ? r->head : "";
  *n = r->head_len;
  return DSH_OK;
}

int dsh_http_info(const dsh_http_req_t *r, dsh_http_req_info_t *out) {
  if (!r || !out) return DSH_EINVAL;
  out->id = r->id;
  out->status = dsh_http_status(r);
  out->done = r->done;
  out->body_bytes = r->body_bytes;
  out->buffered = (int64_t)r->in.len;
  out->buffered_peak = r->peak;
  out->sent_bytes = r->sent_bytes;
  out->send_pending = (int64_t)r->out.len;
  out->stalled = r->stalled;
  return DSH_OK;
}

int dsh_http_peek(dsh_http_req_t *r, const uint8_t **data, size_t *n) {
  if (!r || !data || !n) return DSH_EINVAL;
  if (!r->in.len) return r->done ? DSH_EEOF : DSH_EAGAIN;
  *data = dsh_buf_data(&r->in);
  *n = r->in.len;
  return DSH_OK;
}

/* The pause mask libcurl should keep after lifting one direction. */
static int pause_mask(const dsh_http_req_t *r) {
  return (r->recv_paused ? CURLPAUSE_RECV : 0) | (r->send_paused ? CURLPAUSE_SEND : 0);
}

int dsh_http_consume(dsh_http_req_t *r, size_t n) {
  if (!r || n > r->in.len) return DSH_EINVAL;
  dsh_buf_drop(&r->in, n);
  if (r->recv_paused && r->easy && r->in.len <= r->max_buf / 2) {
    r->recv_paused = 0;
    curl_easy_pause(r->easy, pause_mask(r)); /* may call write_cb, which may pause again */
  }
  return DSH_OK;
}

int dsh_http_send(dsh_http_req_t *r, const uint8_t *data, size_t n, size_t *accepted) {
  if (!r || !accepted || (n && !data)) return DSH_EINVAL;
  *accepted = 0;
  if (!r->stream || r->send_ended) return DSH_ESTATE;
  if (r->done) return DSH_EEOF;
  size_t room = r->out.len < r->max_buf ? r->max_buf - r->out.len : 0;
  size_t k = n < room ? n : room;
  if (k < n) r->send_want = 1;
  if (!k) return n ? DSH_EAGAIN : DSH_OK;
  if (dsh_buf_append(&r->out, data, k, r->max_buf) != DSH_OK) return DSH_ENOMEM;
  *accepted = k;
  if (r->send_paused) {
    r->send_paused = 0;
    curl_easy_pause(r->easy, pause_mask(r));
  }
  return DSH_OK;
}

int dsh_http_send_end(dsh_http_req_t *r) {
  if (!r) return DSH_EINVAL;
  if (!r->stream) return DSH_ESTATE;
  if (r->send_ended || r->done) return DSH_OK;
  r->send_ended = 1;
  if (r->send_paused) {
    r->send_paused = 0;
    curl_easy_pause(r->easy, pause_mask(r));
  }
  return DSH_OK;
}

int dsh_http_cancel(dsh_http_req_t *r) {
  if (!r) return DSH_EINVAL;
  if (r->done) return DSH_OK;
  cancel(r, "canceled");
  dsh_loop_push(r->h->loop, DSH_EV_HTTP_DONE, r->id, DSH_ECANCELED, r->status);
  return DSH_OK;
}

int dsh_http_result(const dsh_http_req_t *r, char *err, size_t errlen) {
  if (!r) return DSH_EINVAL;
  if (!r->done) return DSH_EAGAIN;
  if (err && errlen) snprintf(err, errlen, "%s", r->msg);
  return r->result;
}

void dsh_http_req_free(dsh_http_req_t *r) {
  if (!r) return;
  if (r->h) {
    release(r);
    unlink_req(r);
  }
  dsh_buf_free(&r->in);
  free(r->head);
  free(r);
}
