/* screen.c: checks every request passes before it is routed — its HTTP
 * framing (a body length that a proxy in front of dshd could read
 * differently: an unknown Transfer-Encoding, Transfer-Encoding together
 * with Content-Length, two different Content-Lengths; HTTP/1.1 without
 * Host), refused at once with a plain-text error and the connection closed.
 *
 * Uses libmicrohttpd's header list (every occurrence of a header, not only
 * the first one libmicrohttpd acts on). Never reads a body; never lets a
 * refused request's connection carry another request. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server.h"

/* A plain-text answer that closes the connection, queued at once. */
static void refuse(dshd_req_t *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(dshd_req_t *r, unsigned status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct MHD_Response *resp = dshd_response_bytes("text/plain; charset=utf-8", msg, strlen(msg));
  if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  dshd_req_answer(r, status, resp);
  r->answer_now = 1;
}

struct framing {
  const char *te_bad; /* first Transfer-Encoding value other than one "chunked" */
  int te_count, te_chunked;
  const char *cl;
  int cl_conflict;
};

static int trimmed_equal(const char *v, const char *want) {
  while (*v == ' ' || *v == '\t') v++;
  size_t n = strlen(v);
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  return n == strlen(want) && strncasecmp(v, want, n) == 0;
}

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value) {
  struct framing *f = cls;
  (void)kind;
  if (!value) value = "";
  if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    f->te_count++;
    if (f->te_count == 1 && trimmed_equal(value, "chunked"))
      f->te_chunked = 1;
    else if (!f->te_bad)
      f->te_bad = value;
  } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
    if (f->cl && strcmp(f->cl, value) != 0) f->cl_conflict = 1;
    if (!f->cl) f->cl = value;
  }
  return MHD_YES;
}

int dshd_screen_request(dshd_req_t *r) {
  if (r->version && strcmp(r->version, MHD_HTTP_VERSION_1_1) == 0 &&
      !dshd_req_header(r, MHD_HTTP_HEADER_HOST)) {
    refuse(r, 400, "400 Bad Request: missing required Host header\n");
    return -1;
  }
  struct framing f = {0};
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect, &f);
  if (f.te_bad) {
    refuse(r, 501, "501 Not Implemented: unsupported Transfer-Encoding \"%.100s\"\n", f.te_bad);
    return -1;
  }
  if (f.te_chunked && f.cl) {
    refuse(r, 400, "400 Bad Request: both Transfer-Encoding and Content-Length\n");
    return -1;
  }
  if (f.cl_conflict) {
    refuse(r, 400, "400 Bad Request: conflicting Content-Length headers\n");
    return -1;
  }
  r->chunked = f.te_chunked;
  return 0;
}
