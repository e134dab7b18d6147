/* http.h: an HTTP/1.1 client on the loop (libcurl multi, socket and timer
 * callbacks on libev), in the manner of curl's evhiperfifo example.
 *
 * One dsh_http_t holds a multi handle and its connection cache, so requests to
 * the same host (or unix socket) reuse connections. Each request streams its
 * response to the owner as it arrives: DSH_EV_HTTP_HEAD when the head of the
 * final response is complete (1xx heads are skipped; it always precedes DONE
 * when a response arrived, even one without a body), DSH_EV_HTTP_DATA when
 * body bytes land in an empty buffer (drain with peek/consume until
 * DSH_EAGAIN, then wait for the next DATA), DSH_EV_HTTP_DONE once at the end.
 * At most max_buffer_bytes are buffered (an empty buffer always takes one
 * libcurl write, <= 16 KiB, even past a smaller bound); beyond that the
 * transfer is paused (CURL_WRITEFUNC_PAUSE) until the owner has consumed half
 * of it, so a slow consumer slows the transfer instead of growing memory.
 *
 * A request body is either given whole (copied) or streamed: with stream_body
 * the owner feeds it with dsh_http_send() and ends it with dsh_http_send_end();
 * it is sent chunked unless a Content-Length header is given. The send buffer
 * is bounded by max_buffer_bytes too: send takes what fits and returns
 * DSH_EAGAIN when nothing does; DSH_EV_HTTP_SEND says when to retry. With a
 * streamed body the response head may only come after the body is sent, so
 * owners must not wait for the head before writing.
 *
 * Stalls: with stall_timeout_ms, a transfer on which no byte was received or
 * sent for that long ends with DSH_ETIMEDOUT ("connection stalled: ..."),
 * also while it waits for the head. Time the transfer spends paused by the
 * owner (a full response buffer, a streamed body not fed yet) does not count:
 * a slow consumer or producer is not a stalled path. The check is on the
 * loop's clock; a loop that was itself blocked past the limit gets a short
 * grace to read what waited, so a busy host is not taken for a dead peer.
 *
 * Failures: dsh_http_start() fails only on bad options (DSH_EINVAL) or memory;
 * everything else (bad URL, refused connection, timeout, a head larger than
 * max_header_bytes) arrives as DSH_EV_HTTP_DONE with a negative status:
 * DSH_EHTTP (transport, libcurl's message), DSH_ETIMEDOUT, DSH_ELIMIT,
 * DSH_ECANCELED. An HTTP error status (404, 500) is a response, not a failure.
 * Proxies from the environment are honoured except for localhost, 127.0.0.0/8,
 * ::1 and unix sockets. "Expect: 100-continue" is not sent unless asked for.
 *
 * Ownership: the caller owns each request and frees it with dsh_http_req_free()
 * (which cancels it if still running, without an event); the client with
 * dsh_http_free(), which cancels any request still live and detaches it: such
 * a request stays valid to query (result DSH_ECANCELED) and must still be
 * freed. Pointers lent by peek and the header accessor are valid until the
 * next call on the same request or the next run of the loop (whose callbacks
 * append to the buffer). Not thread-safe: one thread, the loop's. */
#ifndef DSH_HTTP_H
#define DSH_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "dsh/loop.h"

typedef struct dsh_http dsh_http_t;
typedef struct dsh_http_req dsh_http_req_t;

typedef struct dsh_http_req_opts {
  const char *method;         /* "GET" (NULL), "POST", "HEAD", ... */
  const char *url;            /* http://host:port/path?query (https works too) */
  const char *unix_socket;    /* non-NULL: connect to this unix socket path */
  const char *const *headers; /* "Name: value" lines (no CR or LF) */
  size_t nheaders;
  const uint8_t *body; /* whole body (copied), or NULL */
  size_t body_len;
  int32_t stream_body;        /* non-zero: body comes from dsh_http_send() */
  int64_t timeout_ms;         /* whole transfer; 0 = none */
  int64_t connect_timeout_ms; /* 0 = libcurl's default */
  int64_t stall_timeout_ms;   /* fail once no byte moved for this long; 0 = none */
  uint32_t max_buffer_bytes;  /* response (and send) buffering bound; 0 = 1 MiB */
  uint32_t max_header_bytes;  /* response head bound; 0 = 64 KiB */
} dsh_http_req_opts_t;

typedef struct dsh_http_stats {
  int64_t requests;    /* requests started on this client */
  int64_t connections; /* new connections made (not reused) */
  int64_t live;        /* requests not yet freed */
} dsh_http_stats_t;

typedef struct dsh_http_req_info {
  uint64_t id;           /* the id given to dsh_http_start() */
  int32_t status;        /* HTTP status; 0 before DSH_EV_HTTP_HEAD */
  int32_t done;          /* DSH_EV_HTTP_DONE has been queued */
  int64_t body_bytes;    /* response body bytes received so far */
  int64_t buffered;      /* response body bytes buffered now */
  int64_t buffered_peak; /* most response body bytes buffered at once */
  int64_t sent_bytes;    /* streamed request bytes handed to libcurl */
  int64_t send_pending;  /* streamed request bytes accepted, not yet sent */
  int32_t stalled;       /* ended by stall_timeout_ms (result DSH_ETIMEDOUT) */
} dsh_http_req_info_t;

int dsh_http_new(dsh_loop_t *loop, dsh_http_t **out);
void dsh_http_free(dsh_http_t *h);
int dsh_http_stats(const dsh_http_t *h, dsh_http_stats_t *st);

int dsh_http_start(dsh_http_t *h, const dsh_http_req_opts_t *opts, uint64_t id,
                   dsh_http_req_t **out, char *err, size_t errlen);

/* Response head: HTTP status (0 before DSH_EV_HTTP_HEAD) and the raw header
 * block of the final response ("Name: value\r\n" lines, no status line). */
int32_t dsh_http_status(const dsh_http_req_t *r);
int dsh_http_headers(const dsh_http_req_t *r, const char **data, size_t *n);
int dsh_http_info(const dsh_http_req_t *r, dsh_http_req_info_t *out);

/* Buffered body bytes: DSH_EAGAIN when empty and not done, DSH_EEOF when
 * empty and done. consume drops n bytes and unpauses the transfer if needed
 * (libcurl may deliver held-back bytes before it returns). */
int dsh_http_peek(dsh_http_req_t *r, const uint8_t **data, size_t *n);
int dsh_http_consume(dsh_http_req_t *r, size_t n);

/* Streamed body: send copies up to n bytes (as many as fit) and reports how
 * many in *accepted; DSH_EAGAIN when none fit, DSH_EEOF once the transfer is
 * over, DSH_ESTATE without stream_body or after send_end. send_end is
 * idempotent. */
int dsh_http_send(dsh_http_req_t *r, const uint8_t *data, size_t n, size_t *accepted);
int dsh_http_send_end(dsh_http_req_t *r);

/* Stops the transfer; DSH_EV_HTTP_DONE follows with DSH_ECANCELED and
 * buffered bytes are dropped. No effect once done. */
int dsh_http_cancel(dsh_http_req_t *r);

/* After DSH_EV_HTTP_DONE: 0 or a negative status, with libcurl's (or our)
 * message in err; DSH_EAGAIN before. */
int dsh_http_result(const dsh_http_req_t *r, char *err, size_t errlen);

void dsh_http_req_free(dsh_http_req_t *r);

#endif
