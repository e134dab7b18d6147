/* connect.c: the Connect protocol over libmicrohttpd (envd-protocol.md §1.5-
 * §1.7) — unary JSON calls, server streams with their pull-driven response
 * buffer, and client streams (StreamInput).
 *
 * A server stream owns a byte buffer of ready envelopes. libmicrohttpd's
 * content reader copies from it; when it is empty the reader asks the
 * source to pull (one batch), and when the source has nothing it suspends
 * the connection until dshd_stream_wake(). A suspended connection is
 * invisible to libmicrohttpd, so each stream also watches its socket with an
 * ev_io to notice a client that hangs up (recv MSG_PEEK == 0). The source's
 * closed() runs exactly once: on completion, on the response's free, or at
 * shutdown. Request bodies are bounded by max_rpc_body_bytes; envelopes are
 * decoded by the core's envelope decoder. Never blocks, never calls MHD_run. */
#include <errno.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server.h"

#define BLOCK_SIZE 1024
#define SHRINK_ABOVE (256u << 10)

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
  dshd_stream_t *next, *prev; /* open streams */
  dshd_stream_t *rnext;       /* resume queue */
};

static dshd_stream_t *g_open;
static size_t g_nopen;
static dshd_stream_t *g_resume;

size_t dshd_streams_open(void) {
  return g_nopen;
}

/* --- error bodies ------------------------------------------------------------------ */

json_t *dshd_connect_error_json(const dshd_err_t *err) {
  json_t *o = json_object();
  json_object_set_new(o, "code", json_string(err && err->code ? err->code : "unknown"));
  if (err && err->message[0]) json_object_set_new(o, "message", dshd_json_str(err->message));
  return o;
}

struct MHD_Response *dshd_connect_unary_error(const dshd_err_t *err, unsigned *status) {
  *status = (unsigned)dshd_code_http_status(err->code);
  return dshd_response_json(dshd_connect_error_json(err));
}

static json_t *end_json(const dshd_err_t *err) {
  json_t *o = json_object();
  if (err) json_object_set_new(o, "error", dshd_connect_error_json(err));
  return o;
}

/* Appends one envelope with flags and a JSON payload to a malloc'ed buffer. */
static int env_append(char **buf, size_t *len, uint8_t flags, json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT);
  json_decref(v);
  if (!s) return -1;
  size_t n = strlen(s);
  char *nb = realloc(*buf, *len + 5 + n);
  if (!nb) {
    free(s);
    return -1;
  }
  dsh_envelope_header(flags, (uint32_t)n, (uint8_t *)nb + *len);
  memcpy(nb + *len + 5, s, n);
  *buf = nb;
  *len += 5 + n;
  free(s);
  return 0;
}

/* A complete streaming answer that is only an end-of-stream envelope. */
static struct MHD_Response *stream_error_response(const dshd_err_t *err) {
  char *buf = NULL;
  size_t len = 0;
  env_append(&buf, &len, 0x02, end_json(err));
  struct MHD_Response *resp = dshd_response_bytes("application/connect+json", buf, len);
  free(buf);
  return resp;
}

/* Answers r with err the way its kind requires. */
static void fail(dshd_req_t *r, const dshd_err_t *err) {
  if (r->kind == REQ_UNARY) {
    unsigned status;
    struct MHD_Response *resp = dshd_connect_unary_error(err, &status);
    dshd_req_answer(r, status, resp);
  } else {
    dshd_req_answer(r, MHD_HTTP_OK, stream_error_response(err));
  }
}

/* --- header stage --------------------------------------------------------------------- */

static int media_is(const char *ct, const char *want) {
  if (!ct) return 0;
  size_t n = strlen(want);
  if (strncasecmp(ct, want, n) != 0) return 0;
  const char *p = ct + n;
  while (*p == ' ' || *p == '\t') p++;
  return *p == '\0' || *p == ';';
}

static int parse_timeout(const char *h, int64_t *out) {
  size_t n = strlen(h);
  if (n == 0 || n > 10) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (h[i] < '0' || h[i] > '9') return -1;
    v = v * 10 + (h[i] - '0');
  }
  *out = v;
  return 0;
}

static int64_t parse_keepalive_ms(const char *h) {
  if (!h) return 90000;
  char *end;
  errno = 0;
  long long s = strtoll(h, &end, 10);
  if (errno || end == h || *end || s <= 0) return 90000;
  if (s > 86400LL * 365) s = 86400LL * 365;
  return (int64_t)s * 1000;
}

void dshd_connect_begin(dshd_req_t *r) {
  const dshd_route_t *rt = r->route;
  const char *ct = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
  dshd_err_t err = {0};
  if (rt->unary) {
    r->kind = REQ_UNARY;
    if (!media_is(ct, "application/json")) {
      dshd_errf(&err, "invalid_argument",
                "unsupported content type \"%.100s\": expected application/json", ct ? ct : "");
      dshd_req_answer(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                      dshd_response_json(dshd_connect_error_json(&err)));
      return;
    }
  } else {
    r->kind = rt->stream ? REQ_SSTREAM : REQ_CSTREAM;
    if (!media_is(ct, "application/connect+json")) {
      dshd_errf(&err, "invalid_argument",
                "unsupported content type \"%.100s\": expected application/connect+json",
                ct ? ct : "");
      dshd_req_answer(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                      dshd_response_json(dshd_connect_error_json(&err)));
      return;
    }
  }
  const char *enc = dshd_req_header(
      r, r->kind == REQ_UNARY ? MHD_HTTP_HEADER_CONTENT_ENCODING : "Connect-Content-Encoding");
  if (enc && *enc && strcasecmp(enc, "identity") != 0) {
    dshd_errf(&err, "unimplemented",
              "unknown compression \"%.60s\": supported encodings are identity", enc);
    return fail(r, &err);
  }
  const char *to = dshd_req_header(r, "Connect-Timeout-Ms");
  if (to && parse_timeout(to, &r->timeout_ms) != 0) {
    dshd_errf(&err, "invalid_argument",
              "protocol error: invalid Connect-Timeout-Ms header \"%.40s\"", to);
    return fail(r, &err);
  }
  r->keepalive_ms = parse_keepalive_ms(dshd_req_header(r, "Keepalive-Ping-Interval"));
  const char *cl = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
  uint64_t max = dshd_config()->max_rpc_body_bytes;
  if (cl) {
    char *end;
    unsigned long long n = strtoull(cl, &end, 10);
    if (end != cl && n > max + (r->kind == REQ_UNARY ? 0 : 5)) {
      dshd_errf(&err, "resource_exhausted",
                "request body of %llu bytes exceeds the %llu-byte limit", n,
                (unsigned long long)max);
      return fail(r, &err);
    }
  }
  if (r->kind != REQ_UNARY && dsh_envelope_decoder_new((uint32_t)max, &r->dec) != 0) {
    dshd_errf(&err, "resource_exhausted", "out of memory");
    return fail(r, &err);
  }
  if (r->kind == REQ_CSTREAM) r->cstarted = 1; /* the handler's NULL call is owed from now on */
}

/* --- bodies ------------------------------------------------------------------------------ */

static json_t *parse_message(const char *data, size_t len, dshd_err_t *err) {
  if (len == 0) {
    dshd_errf(err, "invalid_argument", "zero-length payload is not a valid JSON object");
    return NULL;
  }
  json_error_t jerr;
  json_t *v = json_loadb(data, len, 0, &jerr);
  if (!v) {
    dshd_errf(err, "invalid_argument", "invalid JSON in request message: %s (line %d, column %d)",
              jerr.text, jerr.line, jerr.column);
    return NULL;
  }
  if (!json_is_object(v)) {
    json_decref(v);
    dshd_errf(err, "invalid_argument", "invalid request message: expected a JSON object");
    return NULL;
  }
  return v;
}

static void decoder_error(dshd_req_t *r, int rc) {
  dshd_err_t err = {0};
  if (rc == DSH_ECOMPRESSED)
    dshd_errf(&err, "invalid_argument", "compressed envelopes are not supported");
  else if (rc == DSH_ELIMIT)
    dshd_errf(&err, "resource_exhausted", "%s", dsh_envelope_decoder_error(r->dec));
  else if (rc == DSH_ETRUNCATED)
    dshd_errf(&err, "invalid_argument", "protocol error: incomplete envelope");
  else if (rc == DSH_ENOMEM)
    dshd_errf(&err, "resource_exhausted", "out of memory");
  else
    dshd_errf(&err, "invalid_argument", "protocol error: %s", dsh_envelope_decoder_error(r->dec));
  fail(r, &err);
}

static void client_stream_fail(dshd_req_t *r, const dshd_err_t *err) {
  if (r->cfailed) return;
  r->cfailed = 1;
  r->cerr = *err;
}

static void on_envelope(dshd_req_t *r, uint8_t flags, const uint8_t *p, uint32_t n) {
  dshd_err_t err = {0};
  if (flags & 0x02) {
    dshd_errf(&err, "invalid_argument", "protocol error: end-of-stream envelope in a request");
    if (r->kind == REQ_CSTREAM) return client_stream_fail(r, &err);
    return fail(r, &err);
  }
  if (r->kind == REQ_SSTREAM) {
    if (++r->nmsg > 1) {
      dshd_errf(&err, "invalid_argument",
                "protocol error: a server-streaming request carries exactly one message");
      return fail(r, &err);
    }
    r->msg = parse_message((const char *)p, n, &err);
    if (!r->msg) fail(r, &err);
    return;
  }
  /* client stream */
  if (r->cfailed) return;
  json_t *msg = parse_message((const char *)p, n, &err);
  if (!msg) return client_stream_fail(r, &err);
  if (r->route->client_stream(r, msg, &r->cstate, &err) != 0) {
    if (!err.code) dshd_errf(&err, "internal", "client stream handler failed");
    client_stream_fail(r, &err);
  }
  json_decref(msg);
}

void dshd_connect_body(dshd_req_t *r, const char *data, size_t len) {
  if (r->kind == REQ_UNARY) {
    uint64_t max = dshd_config()->max_rpc_body_bytes;
    if (r->body_len + len > max) {
      dshd_err_t err = {0};
      dshd_errf(&err, "resource_exhausted", "request body exceeds the %llu-byte limit",
                (unsigned long long)max);
      free(r->body);
      r->body = NULL;
      r->body_len = r->body_cap = 0;
      return fail(r, &err);
    }
    if (r->body_len + len > r->body_cap) {
      size_t cap = r->body_cap ? r->body_cap * 2 : 4096;
      while (cap < r->body_len + len) cap *= 2;
      if (cap > max) cap = (size_t)max;
      char *nb = realloc(r->body, cap);
      if (!nb) {
        dshd_err_t err = {0};
        dshd_errf(&err, "resource_exhausted", "out of memory");
        return fail(r, &err);
      }
      r->body = nb;
      r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, len);
    r->body_len += len;
    return;
  }
  int rc = dsh_envelope_decoder_push(r->dec, (const uint8_t *)data, len);
  for (;;) {
    if (rc < 0) {
      if (r->kind == REQ_CSTREAM) {
        /* Keep the NULL call for finish; remember the error. */
        dshd_err_t err = {0};
        if (rc == DSH_ECOMPRESSED)
          dshd_errf(&err, "invalid_argument", "compressed envelopes are not supported");
        else
          dshd_errf(&err, rc == DSH_ELIMIT ? "resource_exhausted" : "invalid_argument", "%s",
                    dsh_envelope_decoder_error(r->dec));
        client_stream_fail(r, &err); /* the sticky decoder error skips the rest */
        return;
      }
      return decoder_error(r, rc);
    }
    uint8_t flags;
    const uint8_t *p;
    uint32_t n;
    rc = dsh_envelope_decoder_next(r->dec, &flags, &p, &n);
    if (rc == 0) return;
    if (rc < 0) continue;
    on_envelope(r, flags, p, n);
    if (r->answer) return; /* failed: discard the rest */
    rc = 0;
  }
}

/* --- streams ----------------------------------------------------------------------------- */

static void hup_cb(struct ev_loop *ev, ev_io *w, int revents);

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
  if (ci) ev_io_start(dshd_ev(), &s->hup);
  return s;
}

static void stream_close(dshd_stream_t *s, int client_gone) {
  if (s->closed) return;
  s->closed = 1;
  ev_io_stop(dshd_ev(), &s->hup);
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

static void hup_cb(struct ev_loop *ev, ev_io *w, int revents) {
  dshd_stream_t *s = (dshd_stream_t *)((char *)w - offsetof(dshd_stream_t, hup));
  char c;
  ssize_t n = recv(w->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  ev_io_stop(ev, w);
  if (n > 0) return; /* the client sent more (pipelining): stop watching */
  /* EOF or reset. The reader ends the body; the socket is shut down so that
   * libmicrohttpd's final write fails and it closes the connection. */
  s->gone = 1;
  shutdown(w->fd, SHUT_RDWR);
  resume(s);
}

/* A stream whose client is gone ends with END_OF_STREAM on a socket that
 * was shut down, not with END_WITH_ERROR: libmicrohttpd 0.9.75 (epoll mode)
 * does not clean up a connection closed from inside its content reader
 * until it becomes the oldest connection, while a failed write is cleaned
 * up at once. */
#define READER_GONE MHD_CONTENT_READER_END_OF_STREAM

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
  dshd_stream_t *s = cls;
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
  json_t *o = end_json(err);
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

/* --- finishing ---------------------------------------------------------------------------- */

static void finish_unary(dshd_req_t *r) {
  dshd_err_t err = {0};
  json_t *req = parse_message(r->body ? r->body : "", r->body_len, &err);
  free(r->body);
  r->body = NULL;
  if (!req) return fail(r, &err);
  json_t *resp = NULL;
  int rc = r->route->unary(r, req, &resp, &err);
  json_decref(req);
  if (rc != 0) {
    json_decref(resp);
    if (!err.code) dshd_errf(&err, "internal", "handler failed");
    return fail(r, &err);
  }
  if (!resp) resp = json_object();
  dshd_req_answer(r, MHD_HTTP_OK, dshd_response_json(resp));
}

static void finish_server_stream(dshd_req_t *r) {
  dshd_err_t err = {0};
  int rc = dsh_envelope_decoder_finish(r->dec);
  if (rc != 0) return decoder_error(r, rc);
  if (!r->msg) {
    dshd_errf(&err, "invalid_argument", "protocol error: missing request message");
    return fail(r, &err);
  }
  dshd_stream_t *s = stream_new(r);
  if (!s) {
    dshd_errf(&err, "resource_exhausted", "out of memory");
    return fail(r, &err);
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
    return fail(r, &err);
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
  dshd_req_answer(r, MHD_HTTP_OK, resp);
}

static void finish_client_stream(dshd_req_t *r) {
  dshd_err_t err = {0};
  int rc = dsh_envelope_decoder_finish(r->dec);
  if (rc != 0 && !r->cfailed) {
    dshd_errf(&err, rc == DSH_ETRUNCATED ? "invalid_argument" : "invalid_argument", "%s",
              rc == DSH_ETRUNCATED ? "protocol error: incomplete envelope"
                                   : dsh_envelope_decoder_error(r->dec));
    client_stream_fail(r, &err);
  }
  memset(&err, 0, sizeof err);
  rc = r->route->client_stream(r, NULL, &r->cstate, &err);
  r->cstarted = 0;
  r->cstate = NULL;
  if (rc != 0 && !r->cfailed) {
    if (!err.code) dshd_errf(&err, "internal", "client stream handler failed");
    client_stream_fail(r, &err);
  }
  char *buf = NULL;
  size_t len = 0;
  if (r->cfailed) {
    env_append(&buf, &len, 0x02, end_json(&r->cerr));
  } else {
    env_append(&buf, &len, 0x00, json_object());
    env_append(&buf, &len, 0x02, end_json(NULL));
  }
  dshd_req_answer(r, MHD_HTTP_OK, dshd_response_bytes("application/connect+json", buf, len));
  free(buf);
}

void dshd_connect_finish(dshd_req_t *r) {
  switch (r->kind) {
    case REQ_UNARY:
      return finish_unary(r);
    case REQ_SSTREAM:
      return finish_server_stream(r);
    case REQ_CSTREAM:
      return finish_client_stream(r);
  }
}

void dshd_connect_completed(dshd_req_t *r, int client_gone) {
  if (r->kind == REQ_CSTREAM && r->cstarted) {
    r->cstarted = 0;
    dshd_err_t err = {0};
    r->route->client_stream(r, NULL, &r->cstate, &err); /* the client went away mid-body */
    r->cstate = NULL;
  }
  if (r->stream) {
    dshd_stream_t *s = r->stream;
    r->stream = NULL;
    s->req = NULL;
    stream_close(s, client_gone || !stream_finished_ok(s));
    stream_unref(s);
  }
  json_decref(r->msg);
  r->msg = NULL;
  free(r->body);
  r->body = NULL;
  dsh_envelope_decoder_free(r->dec);
  r->dec = NULL;
}
