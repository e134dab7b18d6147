/* http.h: an HTTP/1.1 client on the loop (libcurl multi, socket and timer
 * callbacks on libev), in the manner of curl's evhiperfifo example.
 *
 * One dsh_http_t holds a multi handle and its connection cache, so requests to
 * the same host (or unix socket) reuse connections. Each request streams its
 * response to the owner as it arrives: DSH_EV_HTTP_HEAD when the head is
 * complete, DSH_EV_HTTP_DATA as body bytes are buffered, DSH_EV_HTTP_DONE at
 * the end. At most max_buffer_bytes are buffered; beyond that the transfer is
 * paused (CURL_WRITEFUNC_PAUSE) until the owner consumes, so a slow consumer
 * slows the transfer instead of growing memory.
 *
 * A request body is either given whole (copied) or streamed: with stream_body
 * the owner feeds it with dsh_http_send() and ends it with dsh_http_send_end();
 * it is sent chunked unless a Content-Length header is given. send returns
 * DSH_EAGAIN when its buffer is full; DSH_EV_HTTP_SEND says when to retry.
 *
 * Ownership: the caller owns each request and frees it with dsh_http_req_free()
 * (which cancels it if still running); the client with dsh_http_free(), after
 * its requests. Pointers lent by peek and the header accessors are valid until
 * the next call on the same request. */
#ifndef DSH_HTTP_H
#define DSH_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "dsh/loop.h"

typedef struct dsh_http dsh_http_t;
typedef struct dsh_http_req dsh_http_req_t;

typedef struct dsh_http_req_opts {
  const char *method;            /* "GET", "POST", ... */
  const char *url;               /* http://host:port/path?query (https works too) */
  const char *unix_socket;       /* non-NULL: connect to this unix socket path */
  const char *const *headers;    /* "Name: value" lines */
  size_t nheaders;
  const uint8_t *body;           /* whole body (copied), or NULL */
  size_t body_len;
  int32_t stream_body;           /* non-zero: body comes from dsh_http_send() */
  int64_t timeout_ms;            /* whole transfer; 0 = none */
  int64_t connect_timeout_ms;    /* 0 = libcurl's default */
  uint32_t max_buffer_bytes;     /* response buffering bound; 0 = 1 MiB */
  uint32_t max_header_bytes;     /* response head bound; 0 = 64 KiB */
} dsh_http_req_opts_t;

typedef struct dsh_http_stats {
  int64_t requests;              /* requests started on this client */
  int64_t connections;           /* new connections made (not reused) */
  int64_t live;                  /* requests not yet freed */
} dsh_http_stats_t;

int dsh_http_new(dsh_loop_t *loop, dsh_http_t **out);
void dsh_http_free(dsh_http_t *h);
int dsh_http_stats(const dsh_http_t *h, dsh_http_stats_t *st);

int dsh_http_start(dsh_http_t *h, const dsh_http_req_opts_t *opts, uint64_t id,
                   dsh_http_req_t **out, char *err, size_t errlen);

/* Response head: HTTP status (0 before DSH_EV_HTTP_HEAD) and the raw header
 * block of the final response ("Name: value\r\n" lines, no status line). */
int32_t dsh_http_status(const dsh_http_req_t *r);
int dsh_http_headers(const dsh_http_req_t *r, const char **data, size_t *n);

/* Buffered body bytes: DSH_EAGAIN when empty and not done, DSH_EEOF when
 * empty and done. consume drops n bytes and unpauses the transfer if needed. */
int dsh_http_peek(dsh_http_req_t *r, const uint8_t **data, size_t *n);
int dsh_http_consume(dsh_http_req_t *r, size_t n);

int dsh_http_send(dsh_http_req_t *r, const uint8_t *data, size_t n);
int dsh_http_send_end(dsh_http_req_t *r);

/* Stops the transfer; DSH_EV_HTTP_DONE follows with DSH_ECANCELED. */
int dsh_http_cancel(dsh_http_req_t *r);

/* After DSH_EV_HTTP_DONE: 0 or a negative status, with libcurl's message. */
int dsh_http_result(const dsh_http_req_t *r, char *err, size_t errlen);

void dsh_http_req_free(dsh_http_req_t *r);

#endif
