/* stream.c: Connect server streams (envd-protocol.md §1.6) — the response
 * of a Start, Connect, WatchDir or WatchGroup, driven by what the client
 * takes.
 *
 * A server stream owns a byte buffer of ready envelopes. libmicrohttpd's
 * content reader copies from it; when it is empty the reader asks the
 * source to pull (one batch), and when the source has nothing it suspends
 * the connection until dshd_stream_wake(). A suspended connection is
 * invisible to libmicrohttpd, so each stream also watches its socket with an
 * ev_io to notice a client that hangs up (recv MSG_PEEK == 0). The source's
 * closed() runs exactly once: on completion, on the response's free, or at
 * shutdown. Uses the core's envelope header writer. Never blocks, never
 * calls MHD_run (resumes from inside libmicrohttpd are queued for server.c). */
#include <errno.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server.h"

#define BLOCK_SIZE 1024
#define SHRINK_ABOVE (256u << 10)
#define RECHECK_MS 200  /* after a probe written to a client at EOF */
#define REPROBE_MS 1000 /* then, while it stays half-closed */

struct dshd_stream {
  dshd_req_t *req; /* NULL once the request completed */
  struct MHD_Connection *conn;
  const dshd_stream_ops_t *ops;
  void *ud;
  char *buf;
  size_t cap, off, len, reserved;
  int ended;        /* the end-of-stream envelope is in the buffer (or was sent) */
  int suspended;    /* we suspended the connection in the reader */
  int wake_pending; /* wake() came while not suspended */
  int resume_queued;
  int closed; /* closed() was delivered */
  int gone;   /* client went away, or shutdown */
  int refs;   /* request + response */
  int64_t timeout_ms, keepalive_ms;
  ev_io hup;
  ev_timer recheck;           /* after the client's end of file: did it reset? */
  int half_closed;            /* the client will send nothing more (and may still read) */
  dshd_stream_t *next, *prev; /* open streams */
  dshd_stream_t *rnext;       /* resume queue */
};

static dshd_stream_t *g_open;
static size_t g_nopen;
static dshd_stream_t *g_resume;

size_t dshd_streams_open(void) {
  return g_nopen;
}

/* --- streams ----------------------------------------------------------------------------- */

static void hup_cb(struct ev_loop *ev, ev_io *w, int revents);
static void recheck_cb(struct ev_loop *ev, ev_timer *w, int revents);

static dshd_stream_t *stream_new(dshd_req_t *r) {
  dshd_stream_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->req = r;
  s->conn = r->conn;
  s->refs = 2;
  s->timeout_ms = r->timeout_ms;
  s->keepalive_ms = r->keepalive_ms ? r->keepalive_ms : 90000;
  s->next = g_open;
  if (g_open) g_open->prev = s;
  g_open = s;
  g_nopen++;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  ev_io_init(&s->hup, hup_cb, ci ? ci->connect_fd : -1, EV_READ);
  ev_init(&s->recheck, recheck_cb);
  if (ci) ev_io_start(dshd_ev(), &s->hup);
  return s;
}

static void stream_close(dshd_stream_t *s, int client_gone) {
  if (s->closed) return;
  s->closed = 1;
  ev_io_stop(dshd_ev(), &s->hup);
  ev_timer_stop(dshd_ev(), &s->recheck);
  if (s->prev)
    s->prev->next = s->next;
  else if (g_open == s)
    g_open = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
  if (g_nopen) g_nopen--;
  dshd_activity();
  const dshd_stream_ops_t *ops = s->ops;
  void *ud = s->ud;
  s->ops = NULL;
  s->ud = NULL;
  if (ops && ops->closed) ops->closed(ud, s, client_gone);
}

static void stream_unref(dshd_stream_t *s) {
  if (--s->refs > 0) return;
  if (s->resume_queued) {
    for (dshd_stream_t **pp = &g_resume; *pp; pp = &(*pp)->rnext)
      if (*pp == s) {
        *pp = s->rnext;
        break;
      }
  }
  free(s->buf);
  free(s);
}

static int stream_finished_ok(const dshd_stream_t *s) {
  return s->ended && s->off == s->len && !s->gone;
}

static void queue_resume(dshd_stream_t *s) {
  if (s->resume_queued) return;
  s->resume_queued = 1;
  s->rnext = g_resume;
  g_resume = s;
}

int dshd_streams_flush_resumes(void) {
  int n = 0;
  while (g_resume) {
    dshd_stream_t *s = g_resume;
    g_resume = s->rnext;
    s->rnext = NULL;
    s->resume_queued = 0;
    if (s->suspended) {
      s->suspended = 0;
      MHD_resume_connection(s->conn);
      n++;
    }
  }
  return n;
}

/* libmicrohttpd 0.9.75 drops MHD_USE_ITC in external-polling mode, so a
 * resume wakes nothing by itself: MHD_run() must be called afterwards, which
 * dshd_server_kick() schedules (or run_mhd() does after a flush). */
static void resume(dshd_stream_t *s) {
  if (!s->suspended) return;
  if (dshd_server_in_mhd()) {
    queue_resume(s);
    return;
  }
  s->suspended = 0;
  MHD_resume_connection(s->conn);
  dshd_server_kick();
}

static void client_gone(dshd_stream_t *s) {
  /* The reader ends the body; the socket is shut down so that
   * libmicrohttpd's final write fails and it closes the connection. */
  s->gone = 1;
  ev_timer_stop(dshd_ev(), &s->recheck);
  shutdown(s->hup.fd, SHUT_RDWR);
  resume(s);
}

/* 1 when the client's socket was reset or failed, 0 at EOF, -1 when data waits. */
static int peek(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return -1;
  if (n == 0) return 0;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -2 : 1;
}

/* While half-closed: a reset means gone; otherwise probe again (so a
 * client that closes later is noticed within a second, not at the next
 * keepalive). */
static void recheck_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  dshd_stream_t *s = (dshd_stream_t *)((char *)w - offsetof(dshd_stream_t, recheck));
  if (peek(s->hup.fd) == 1) return client_gone(s);
  if (!s->closed && s->ops && s->ops->probe) s->ops->probe(s->ud, s);
}

/* The client's end of file is either a half-close (shutdown(SHUT_WR): it
 * still reads, and must get the rest of the stream) or a close. Over TCP
 * the two look alike until something is written: a closed socket answers
 * with a reset. So the source is asked for a probe message (a keepalive)
 * and the socket is looked at again shortly after. */
static void hup_cb(struct ev_loop *ev, ev_io *w, int revents) {
  dshd_stream_t *s = (dshd_stream_t *)((char *)w - offsetof(dshd_stream_t, hup));
  int k = peek(w->fd);
  if (k == -2) return;
  ev_io_stop(ev, w);
  if (k == -1) return; /* the client sent more (pipelining): stop watching */
  if (k == 1 || s->closed || !s->ops || !s->ops->probe) return client_gone(s);
  s->half_closed = 1;
  s->ops->probe(s->ud, s);
  ev_timer_set(&s->recheck, dsh_ms_to_ev(RECHECK_MS), dsh_ms_to_ev(REPROBE_MS));
  ev_timer_start(ev, &s->recheck);
}

/* A stream whose client is gone ends with END_OF_STREAM on a socket that
 * was shut down, not with END_WITH_ERROR: libmicrohttpd 0.9.75 (epoll mode)
 * does not clean up a connection closed from inside its content reader
 * until it becomes the oldest connection, while a failed write is cleaned
 * up at once. */
#define READER_GONE MHD_CONTENT_READER_END_OF_STREAM

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
  dshd_stream_t *s = cls;
  dshd_conns_progress();
  if (s->gone) return READER_GONE;
  if (s->off == s->len) {
    s->off = s->len = 0;
    if (s->cap > SHRINK_ABOVE) {
      free(s->buf);
      s->buf = NULL;
      s->cap = 0;
    }
    if (!s->ended && !s->closed && s->ops && s->ops->pull) {
      s->wake_pending = 0;
      s->ops->pull(s->ud, s);
      if (s->gone) return READER_GONE;
    }
    if (s->len == 0) {
      if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
      MHD_suspend_connection(s->conn);
      s->suspended = 1;
      if (s->wake_pending) queue_resume(s);
      return 0;
    }
  }
  size_t n = s->len - s->off;
  if (n > max) n = max;
  memcpy(out, s->buf + s->off, n);
  s->off += n;
  return (ssize_t)n;
}

static void stream_free_cb(void *cls) {
  dshd_stream_t *s = cls;
  stream_close(s, !stream_finished_ok(s));
  stream_unref(s);
}

static int grow(dshd_stream_t *s, size_t need) {
  if (s->len + need <= s->cap) return 0;
  size_t cap = s->cap ? s->cap * 2 : 4096;
  while (cap < s->len + need) cap *= 2;
  char *nb = realloc(s->buf, cap);
  if (!nb) {
    dshd_log("stream: out of memory (%zu bytes); dropping the client", cap);
    s->gone = 1;
    if (s->hup.fd >= 0) shutdown(s->hup.fd, SHUT_RDWR);
    return -1;
  }
  s->buf = nb;
  s->cap = cap;
  return 0;
}

static void append_envelope(dshd_stream_t *s, uint8_t flags, const char *json, size_t len) {
  if (len > UINT32_MAX || grow(s, 5 + len) != 0) return;
  dsh_envelope_header(flags, (uint32_t)len, (uint8_t *)s->buf + s->len);
  memcpy(s->buf + s->len + 5, json, len);
  s->len += 5 + len;
}

void dshd_stream_attach(dshd_stream_t *s, const dshd_stream_ops_t *ops, void *ud) {
  s->ops = ops;
  s->ud = ud;
}

void dshd_stream_wake(dshd_stream_t *s) {
  if (!s || s->closed || s->gone) return;
  if (!s->suspended) {
    s->wake_pending = 1;
    return;
  }
  resume(s);
}

void dshd_stream_message(dshd_stream_t *s, const char *json, size_t len) {
  if (s->closed || s->ended || s->gone) return;
  append_envelope(s, 0x00, json, len);
}

void dshd_stream_message_json(dshd_stream_t *s, json_t *msg) {
  char *txt = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
  json_decref(msg);
  if (!txt) return;
  dshd_stream_message(s, txt, strlen(txt));
  free(txt);
}

char *dshd_stream_reserve(dshd_stream_t *s, size_t max) {
  if (s->closed || s->ended || s->gone || max > UINT32_MAX || grow(s, 5 + max) != 0) {
    s->reserved = 0;
    return NULL;
  }
  s->reserved = max;
  return s->buf + s->len + 5;
}

void dshd_stream_commit(dshd_stream_t *s, size_t len) {
  if (!s->reserved || len > s->reserved) {
    s->reserved = 0;
    return;
  }
  dsh_envelope_header(0x00, (uint32_t)len, (uint8_t *)s->buf + s->len);
  s->len += 5 + len;
  s->reserved = 0;
}

void dshd_stream_end(dshd_stream_t *s, const dshd_err_t *err) {
  if (s->closed || s->ended) return;
  json_t *o = dshd_connect_end_json(err);
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (txt) {
    append_envelope(s, 0x02, txt, strlen(txt));
    free(txt);
  }
  s->ended = 1;
  dshd_stream_wake(s);
}

size_t dshd_stream_buffered(const dshd_stream_t *s) {
  return s->len - s->off;
}
int64_t dshd_stream_timeout_ms(const dshd_stream_t *s) {
  return s->timeout_ms;
}
int64_t dshd_stream_keepalive_ms(const dshd_stream_t *s) {
  return s->keepalive_ms;
}

void dshd_streams_shutdown(void) {
  for (dshd_stream_t *s = g_open; s; s = s->next) {
    s->gone = 1;
    if (s->hup.fd >= 0) shutdown(s->hup.fd, SHUT_RDWR);
    resume(s);
  }
}

void dshd_stream_begin(dshd_req_t *r) {
  dshd_err_t err = {0};
  int rc;
  dshd_stream_t *s = stream_new(r);
  if (!s) {
    dshd_errf(&err, "resource_exhausted", "out of memory");
    return dshd_connect_fail(r, &err);
  }
  r->stream = s;
  rc = r->route->stream(r, r->msg, s, &err);
  json_decref(r->msg);
  r->msg = NULL;
  if (rc != 0) {
    if (s->ops) { /* contract breach: detach what was attached */
      const dshd_stream_ops_t *ops = s->ops;
      void *ud = s->ud;
      s->ops = NULL;
      if (ops->closed) ops->closed(ud, s, 1);
    }
    if (!err.code) dshd_errf(&err, "internal", "stream handler failed");
    s->len = s->off = 0;
    dshd_stream_end(s, &err);
  } else if (!s->ops && !s->ended) {
    dshd_errf(&err, "internal", "stream handler attached no source");
    dshd_stream_end(s, &err);
  }
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, BLOCK_SIZE,
                                                                stream_reader, s, stream_free_cb);
  if (!resp) {
    stream_close(s, 1);
    stream_unref(s); /* the response's reference */
    dshd_errf(&err, "resource_exhausted", "out of memory");
    return dshd_connect_fail(r, &err);
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
  dshd_req_answer(r, MHD_HTTP_OK, resp);
}

void dshd_stream_request_done(dshd_stream_t *s, int client_gone) {
  s->req = NULL;
  stream_close(s, client_gone || !stream_finished_ok(s));
  stream_unref(s);
}
