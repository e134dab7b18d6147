/* connect.c: the Connect protocol over libmicrohttpd (envd-protocol.md §1.5-
 * §1.7) — the header stage of every RPC (content type, encodings, timeout,
 * body bound), request bodies and envelopes, unary JSON calls, client
 * streams (StreamInput), and Connect's error answers. Server streams are
 * stream.c's once their one request message is in.
 *
 * Request bodies are bounded by max_rpc_body_bytes; envelopes are decoded by
 * the core's envelope decoder. Never blocks, never calls MHD_run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server.h"

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

json_t *dshd_connect_end_json(const dshd_err_t *err) {
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
  env_append(&buf, &len, 0x02, dshd_connect_end_json(err));
  struct MHD_Response *resp = dshd_response_bytes("application/connect+json", buf, len);
  free(buf);
  return resp;
}

/* Answers r with err the way its kind requires. */
void dshd_connect_fail(dshd_req_t *r, const dshd_err_t *err) {
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
    return dshd_connect_fail(r, &err);
  }
  const char *to = dshd_req_header(r, "Connect-Timeout-Ms");
  if (to && parse_timeout(to, &r->timeout_ms) != 0) {
    dshd_errf(&err, "invalid_argument",
              "protocol error: invalid Connect-Timeout-Ms header \"%.40s\"", to);
    return dshd_connect_fail(r, &err);
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
      return dshd_connect_fail(r, &err);
    }
  }
  if (r->kind != REQ_UNARY && dsh_envelope_decoder_new((uint32_t)max, &r->dec) != 0) {
    dshd_errf(&err, "resource_exhausted", "out of memory");
    return dshd_connect_fail(r, &err);
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
  dshd_connect_fail(r, &err);
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
    return dshd_connect_fail(r, &err);
  }
  if (r->kind == REQ_SSTREAM) {
    if (++r->nmsg > 1) {
      dshd_errf(&err, "invalid_argument",
                "protocol error: a server-streaming request carries exactly one message");
      return dshd_connect_fail(r, &err);
    }
    r->msg = parse_message((const char *)p, n, &err);
    if (!r->msg) dshd_connect_fail(r, &err);
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
      return dshd_connect_fail(r, &err);
    }
    if (r->body_len + len > r->body_cap) {
      size_t cap = r->body_cap ? r->body_cap * 2 : 4096;
      while (cap < r->body_len + len) cap *= 2;
      if (cap > max) cap = (size_t)max;
      char *nb = realloc(r->body, cap);
      if (!nb) {
        dshd_err_t err = {0};
        dshd_errf(&err, "resource_exhausted", "out of memory");
        return dshd_connect_fail(r, &err);
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

/* --- finishing ---------------------------------------------------------------------------- */

static void finish_unary(dshd_req_t *r) {
  dshd_err_t err = {0};
  json_t *req = parse_message(r->body ? r->body : "", r->body_len, &err);
  free(r->body);
  r->body = NULL;
  if (!req) return dshd_connect_fail(r, &err);
  json_t *resp = NULL;
  int rc = r->route->unary(r, req, &resp, &err);
  json_decref(req);
  if (rc != 0) {
    json_decref(resp);
    if (!err.code) dshd_errf(&err, "internal", "handler failed");
    return dshd_connect_fail(r, &err);
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
    return dshd_connect_fail(r, &err);
  }
  dshd_stream_begin(r);
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
    env_append(&buf, &len, 0x02, dshd_connect_end_json(&r->cerr));
  } else {
    env_append(&buf, &len, 0x00, json_object());
    env_append(&buf, &len, 0x02, dshd_connect_end_json(NULL));
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
    dshd_stream_request_done(s, client_gone);
  }
  json_decref(r->msg);
  r->msg = NULL;
  free(r->body);
  r->body = NULL;
  dsh_envelope_decoder_free(r->dec);
  r->dec = NULL;
}
