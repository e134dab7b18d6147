/* screen.c: checks every request passes before it is routed — its HTTP
 * framing (a body length that a proxy in front of dshd could read
 * differently: an unknown Transfer-Encoding, Transfer-Encoding together
 * with Content-Length, two different Content-Lengths; HTTP/1.1 without
 * Host), refused at once with a plain-text error and the connection closed;
 * and, when no access token is configured, where it comes from (Host must
 * be an address, Origin absent or allowed), refused with 403.
 *
 * Uses libmicrohttpd's header list (every occurrence of a header, not only
 * the first one libmicrohttpd acts on). Never reads a body; never lets a
 * refused request's connection carry another request. */
#include <arpa/inet.h>
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

static const char *const *g_origins;
static int g_norigins;

void dshd_screen_init(const dshd_server_opts_t *opts) {
  g_origins = opts->allowed_origins;
  g_norigins = opts->n_allowed_origins;
}

/* "localhost", an IPv4 address or a bracketed IPv6 address, each with an
 * optional ":port". A DNS-rebinding page can only send its own domain. */
static int host_is_address(const char *h) {
  char host[256];
  size_t n = strlen(h);
  if (n == 0 || n >= sizeof host) return 0;
  memcpy(host, h, n + 1);
  if (host[0] == '[') {
    char *end = strchr(host, ']');
    if (!end ||
        (end[1] && (end[1] != ':' || !end[2] || strspn(end + 2, "0123456789") != strlen(end + 2))))
      return 0;
    *end = 0;
    unsigned char a[16];
    return inet_pton(AF_INET6, host + 1, a) == 1;
  }
  char *colon = strchr(host, ':');
  if (colon) {
    if (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1)) return 0;
    *colon = 0;
  }
  if (strcasecmp(host, "localhost") == 0) return 1;
  unsigned char a[4];
  return inet_pton(AF_INET, host, a) == 1;
}

/* Without a token nothing else tells a web page from a client (issue 7,
 * item 12): a DNS-rebinding page names its own domain as Host, a
 * cross-site page sends its Origin. */
static int tokenless_checks(dshd_req_t *r) {
  const char *host = dshd_req_header(r, MHD_HTTP_HEADER_HOST);
  if (host && !host_is_address(host)) {
    struct MHD_Response *resp = dshd_response_http_error(
        403,
        "request refused: Host '%.200s' is not an IP address or localhost (without an access "
        "token, requests must name this server by address)",
        host);
    if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    dshd_req_answer(r, 403, resp);
    r->answer_now = 1;
    return -1;
  }
  const char *origin = dshd_req_header(r, "Origin");
  if (!origin) return 0;
  for (int i = 0; i < g_norigins; i++)
    if (strcmp(origin, g_origins[i]) == 0) return 0;
  struct MHD_Response *resp = dshd_response_http_error(
      403, "request refused: a request from the web page '%.200s' needs the access token", origin);
  if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  dshd_req_answer(r, 403, resp);
  r->answer_now = 1;
  return -1;
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
  if (!dshd_auth_has_token()) return tokenless_checks(r);
  return 0;
}
