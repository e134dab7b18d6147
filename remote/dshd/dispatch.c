/* dispatch.c: a request's way through dshd — routes it on its first
 * access-handler call (/health here, Connect RPCs to connect.c, /files and
 * /init to files.c), feeds its body to that module, finishes it, answers
 * what was decided early (after discarding the body, or at once when the
 * body may be large), and releases it when libmicrohttpd is done with it.
 *
 * Uses the route tables of the services and the request helpers. Never
 * parses a body itself; never answers a request twice. */
#include <ev.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define SMALL_BODY (64u << 10) /* early answers wait for bodies up to this size */

/* --- dispatch ------------------------------------------------------------------------ */

static const dshd_route_t *find_route(const char *url) {
  const dshd_route_t *tables[] = {dshd_filesystem_routes, dshd_process_routes};
  for (size_t t = 0; t < 2; t++)
    for (const dshd_route_t *rt = tables[t]; rt && rt->path; rt++)
      if (strcmp(rt->path, url) == 0) {
        if (rt->extension && dshd_config()->envd_compat) return NULL;
        return rt;
      }
  return NULL;
}

static int small_body(dshd_req_t *r) {
  const char *te = dshd_req_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  if (te) return 0;
  const char *cl = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (!cl) return 1;
  char *end;
  unsigned long long n = strtoull(cl, &end, 10);
  return end != cl && n <= SMALL_BODY;
}

static void answer_health(dshd_req_t *r) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (!dshd_config()->envd_compat) {
    MHD_add_response_header(resp, "Dshd-Version", DSHD_VERSION);
    MHD_add_response_header(resp, "Dshd-Extensions", DSHD_EXTENSIONS);
  }
  dshd_req_answer(r, MHD_HTTP_NO_CONTENT, resp);
}

static void answer_not_found(dshd_req_t *r) {
  static const char body[] = "404 page not found\n";
  struct MHD_Response *resp =
      dshd_response_bytes("text/plain; charset=utf-8", body, sizeof body - 1);
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  dshd_req_answer(r, MHD_HTTP_NOT_FOUND, resp);
}

static void answer_method(dshd_req_t *r, const char *allow) {
  struct MHD_Response *resp =
      dshd_response_http_error(MHD_HTTP_METHOD_NOT_ALLOWED, "method %s not allowed", r->method);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
  dshd_req_answer(r, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
}

static int is(const char *m, const char *want) {
  return strcmp(m, want) == 0;
}

static void begin(dshd_req_t *r) {
  const char *url = r->url, *m = r->method;
  if (dshd_screen_request(r) != 0) return;
  if (strcmp(url, "/health") == 0) {
    r->kind = REQ_HEALTH;
    if (is(m, "GET") || is(m, "HEAD"))
      answer_health(r);
    else
      answer_method(r, "GET, HEAD");
    return;
  }
  int files = strcmp(url, "/files") == 0;
  if (!files && !dshd_auth_header_ok(r)) {
    dshd_req_refuse_unauthenticated(
        r,
        "unauthorized access, please provide a valid access token or method signing if "
        "supported");
    return;
  }
  if (files) {
    if (is(m, "GET") || is(m, "HEAD"))
      r->kind = REQ_FILES_GET;
    else if (is(m, "POST"))
      r->kind = REQ_FILES_POST;
    else
      return answer_method(r, "GET, HEAD, POST");
    dshd_files_begin(r);
    return;
  }
  if (strcmp(url, "/init") == 0) {
    if (!is(m, "POST")) return answer_method(r, "POST");
    r->kind = REQ_INIT;
    dshd_init_begin(r);
    return;
  }
  const dshd_route_t *rt = find_route(url);
  if (!rt) return answer_not_found(r);
  r->route = rt;
  if (!is(m, "POST")) return answer_method(r, "POST");
  dshd_connect_begin(r);
}

static void feed(dshd_req_t *r, const char *data, size_t n) {
  switch (r->kind) {
    case REQ_UNARY:
    case REQ_SSTREAM:
    case REQ_CSTREAM:
      dshd_connect_body(r, data, n);
      break;
    case REQ_FILES_POST:
      dshd_files_body(r, data, n);
      break;
    case REQ_INIT:
      dshd_init_body(r, data, n);
      break;
    default:
      break; /* bodies of GET and friends are ignored */
  }
}

static void finish(dshd_req_t *r) {
  switch (r->kind) {
    case REQ_UNARY:
    case REQ_SSTREAM:
    case REQ_CSTREAM:
      dshd_connect_finish(r);
      break;
    case REQ_FILES_GET:
    case REQ_FILES_POST:
      dshd_files_finish(r);
      break;
    case REQ_INIT:
      dshd_init_finish(r);
      break;
    default:
      break;
  }
}

static uint64_t discard_limit(dshd_req_t *r) {
  if (r->kind == REQ_FILES_POST) return UINT64_MAX; /* the client must get its answer */
  return dshd_config()->max_rpc_body_bytes * 2 + (1u << 20);
}

static enum MHD_Result dispatch(struct MHD_Connection *c, const char *url, const char *method,
                                const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls) {
  dshd_req_t *r = *con_cls;
  dshd_conns_progress();
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    r->conn = c;
    r->url = url;
    r->method = method;
    r->version = version;
    *con_cls = r;
    dshd_server_request_begun();
    dshd_conns_request_begun(r);
    begin(r);
    /* Don't wait for a large body (or one whose framing is refused): answer and close. */
    if (r->answer && (r->answer_now || !small_body(r))) {
      dshd_req_queue(r, r->answer_status, r->answer);
      r->answer = NULL;
    }
    return MHD_YES;
  }
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    r->body_at = ev_now(dshd_ev());
    if (r->answered) return MHD_YES;
    if (r->answer) {
      r->discarded += n;
      return r->discarded > discard_limit(r) ? MHD_NO : MHD_YES;
    }
    feed(r, upload_data, n);
    return MHD_YES;
  }
  r->body_done = 1;
  if (r->answered) return MHD_YES;
  if (!r->answer) finish(r);
  if (r->answer) {
    dshd_req_queue(r, r->answer_status, r->answer);
    r->answer = NULL;
  }
  if (!r->answered) { /* a stream is suspended, or nothing was decided: never spin */
    dshd_req_queue(r, 500, dshd_response_http_error(500, "internal error: no answer"));
  }
  return MHD_YES;
}

/* A request acts with its user's file identity only while dshd handles it:
 * every other callback (process output, timers, watches) acts as the daemon. */
enum MHD_Result dshd_dispatch_request(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls) {
  dshd_act_as(NULL);
  enum MHD_Result rc = dispatch(c, url, method, version, upload_data, upload_data_size, con_cls);
  dshd_act_as(NULL);
  return rc;
}

void dshd_dispatch_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                             enum MHD_RequestTerminationCode toe) {
  dshd_req_t *r = *con_cls;
  dshd_conns_progress();
  if (!r) return;
  *con_cls = NULL;
  dshd_conns_request_ended(r);
  int gone = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
  switch (r->kind) {
    case REQ_UNARY:
    case REQ_SSTREAM:
    case REQ_CSTREAM:
      dshd_connect_completed(r, gone);
      break;
    case REQ_FILES_GET:
    case REQ_FILES_POST:
    case REQ_INIT:
      dshd_files_completed(r);
      break;
    default:
      break;
  }
  if (r->answer) MHD_destroy_response(r->answer);
  free(r->basic_user);
  free(r);
  dshd_server_request_ended();
}
