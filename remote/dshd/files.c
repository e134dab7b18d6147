/* files.c: what GET and POST /files (protocol §4.2-§4.3) and POST /init
 * (§1.2) share — envd's JSON error answers {"code":<status>,"message":...},
 * the token or URL signature check, the ?username= user, NUL-checked query
 * values — and the dispatch of these requests to download.c, upload.c and
 * init.c.
 *
 * Uses the request helpers and users.c. Never touches a file itself. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* --- helpers ------------------------------------------------------------------------- */

void dshd_files_error(dshd_req_t *r, unsigned status, const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  dshd_req_answer(r, status, dshd_response_http_error(status, "%s", msg));
}

int dshd_files_failed(dshd_req_t *r) {
  return r->answer != NULL || r->answered;
}

int dshd_files_user(dshd_req_t *r, const char *username, dshd_user_t *u) {
  dshd_err_t err = {0};
  if (dshd_user_lookup(username, u, &err) == 0) {
    dshd_act_as(u);
    return 0;
  }
  const char *name = username && *username ? username : dshd_default_user();
  if (strcmp(err.code, "permission_denied") == 0)
    dshd_files_error(r, 403, "%s", err.message);
  else if (strcmp(err.code, "unauthenticated") == 0)
    dshd_files_error(r, 401, "error looking up user '%s': user: unknown user %s", name, name);
  else
    dshd_files_error(r, 500, "%s", err.message);
  return -1;
}

int dshd_files_auth(dshd_req_t *r, const char *path, const char *op) {
  if (!dshd_auth_has_token()) return 0;
  const char *hdr = dshd_req_header(r, "X-Access-Token");
  if (hdr && *hdr) {
    if (dshd_auth_header_ok(r)) return 0;
    dshd_req_refuse_unauthenticated(r, "access token present in header but does not match");
    return -1;
  }
  const char *why;
  const char *user = dshd_req_query(r, "username");
  if (dshd_auth_signature_ok(path ? path : "", op, user ? user : "", dshd_req_query(r, "signature"),
                             dshd_req_query(r, "signature_expiration"), &why) == 0)
    return 0;
  dshd_req_refuse_unauthenticated(r, why);
  return -1;
}

const char *dshd_files_query(dshd_req_t *r, const char *name, int *bad) {
  int nul = 0;
  const char *v = dshd_req_query_n(r, name, &nul);
  if (nul) *bad = 1;
  return v;
}

/* --- dispatch ------------------------------------------------------------------------------- */

void dshd_files_begin(dshd_req_t *r) {
  if (r->kind == REQ_FILES_GET) return; /* answered at the end of the (empty) body */
  dshd_upload_begin(r);
}

void dshd_files_body(dshd_req_t *r, const char *data, size_t len) {
  dshd_upload_body(r, data, len);
}

void dshd_files_finish(dshd_req_t *r) {
  if (r->kind == REQ_FILES_GET)
    dshd_download(r);
  else
    dshd_upload_finish(r);
}

void dshd_files_completed(dshd_req_t *r) {
  dshd_upload_free(r->up);
  r->up = NULL;
  free(r->body);
  r->body = NULL;
}
