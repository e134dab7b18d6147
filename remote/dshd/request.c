/* request.c: what every request handler uses — building responses
 * (bytes, JSON, envd's HTTP error body), answering a request once (now, or
 * after its body was discarded), and reading its headers, query and Basic
 * user.
 *
 * Uses libmicrohttpd's response and connection-value API and the core's
 * base64. Never blocks; never logs a header value. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dsh/base64.h"
#include "server.h"

/* --- responses ------------------------------------------------------------------ */

struct MHD_Response *dshd_response_bytes(const char *ctype, const void *data, size_t len) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, (void *)(uintptr_t)data, MHD_RESPMEM_MUST_COPY);
  if (resp && ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  return resp;
}

struct MHD_Response *dshd_response_json(json_t *v) {
  char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
  json_decref(v);
  struct MHD_Response *resp = s ? dshd_response_bytes("application/json", s, strlen(s))
                                : dshd_response_bytes("application/json", "{}", 2);
  free(s);
  return resp;
}

struct MHD_Response *dshd_response_http_error(unsigned status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *o = json_object();
  json_object_set_new(o, "code", json_integer(status));
  json_object_set_new(o, "message", dshd_json_str(msg));
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  size_t n = s ? strlen(s) : 0;
  /* envd's json.Encoder ends the body with a newline. */
  char *body = malloc(n + 2);
  if (body) {
    memcpy(body, s ? s : "", n);
    body[n] = '\n';
  }
  struct MHD_Response *resp =
      dshd_response_bytes("application/json; charset=utf-8", body ? body : "{}", body ? n + 1 : 2);
  free(body);
  free(s);
  if (resp) MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  return resp;
}

void dshd_req_queue(dshd_req_t *r, unsigned status, struct MHD_Response *resp) {
  if (!resp) {
    r->answered = 1;
    return;
  }
  MHD_queue_response(r->conn, status, resp);
  MHD_destroy_response(resp);
  r->answered = 1;
  if (dshd_verbose()) dshd_log("%s %s -> %u", r->method, r->url, status);
}

void dshd_req_refuse_unauthenticated(dshd_req_t *r, const char *message) {
  struct MHD_Response *resp = dshd_response_http_error(MHD_HTTP_UNAUTHORIZED, "%s", message);
  /* Nothing more is read from a client that has not proven it holds the token. */
  if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  dshd_req_answer(r, MHD_HTTP_UNAUTHORIZED, resp);
}

void dshd_req_answer(dshd_req_t *r, unsigned status, struct MHD_Response *resp) {
  if (r->answered || r->answer) {
    if (resp) MHD_destroy_response(resp);
    return;
  }
  r->answer = resp;
  r->answer_status = status;
}

/* --- request accessors ------------------------------------------------------------ */

const char *dshd_req_header(dshd_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *dshd_req_query(dshd_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *dshd_req_query_n(dshd_req_t *r, const char *name, int *has_nul) {
  const char *v = NULL;
  size_t n = 0;
  *has_nul = 0;
  if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v, &n) !=
      MHD_YES)
    return NULL;
  if (v && strlen(v) != n) *has_nul = 1;
  return v;
}

const char *dshd_req_basic_user(dshd_req_t *r) {
  if (r->basic_parsed) return r->basic_user;
  r->basic_parsed = 1;
  const char *h = dshd_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncasecmp(h, "Basic ", 6) != 0) return NULL;
  const char *b = h + 6;
  while (*b == ' ') b++;
  size_t n = strlen(b);
  if (n > 4096) return NULL;
  uint8_t *dec = malloc(dsh_base64_decoded_max(n) + 1);
  size_t got = 0;
  if (!dec) return NULL;
  if (dsh_base64_decode(b, n, dec, &got) != 0) {
    free(dec);
    return NULL;
  }
  dec[got] = 0;
  char *colon = memchr(dec, ':', got);
  if (!colon || colon == (char *)dec || memchr(dec, 0, got)) { /* Go: no ':' -> not basic auth */
    free(dec);
    return NULL;
  }
  *colon = 0;
  r->basic_user = (char *)dec;
  return r->basic_user;
}
