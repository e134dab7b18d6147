/* init.c: POST /init (protocol §1.2), envd's orchestrator call — a JSON
 * body (at most 1 MiB) whose envVars are merged into the environment of
 * every later process (names checked as Start checks them), defaultUser and
 * defaultWorkdir change the defaults; then the process service's hook sees
 * the whole body.
 *
 * Uses files.c's answers and the server's setters. Never applies part of a
 * request it refuses; never keeps the body past the request. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define INIT_MAX_BODY (1u << 20)

void dshd_init_begin(dshd_req_t *r) {}

void dshd_init_body(dshd_req_t *r, const char *data, size_t n) {
  if (dshd_files_failed(r)) return;
  if (r->body_len + n > INIT_MAX_BODY) {
    free(r->body);
    r->body = NULL;
    return dshd_files_error(r, 413, "request body exceeds %u bytes", INIT_MAX_BODY);
  }
  if (r->body_len + n > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap * 2 : 4096;
    while (cap < r->body_len + n) cap *= 2;
    char *nb = realloc(r->body, cap);
    if (!nb) return dshd_files_error(r, 500, "out of memory");
    r->body = nb;
    r->body_cap = cap;
  }
  memcpy(r->body + r->body_len, data, n);
  r->body_len += n;
}

int dshd_env_name_valid(const char *name) {
  return name && *name && !strchr(name, '=');
}

/* Everything is checked before anything is applied. */
void dshd_init_finish(dshd_req_t *r) {
  json_t *o = NULL;
  if (r->body_len) {
    json_error_t je;
    o = json_loadb(r->body, r->body_len, 0, &je);
    if (!o || !json_is_object(o)) {
      json_decref(o);
      return dshd_files_error(r, 400, "invalid JSON body: %s", o ? "expected an object" : je.text);
    }
  }
  json_t *envs = o ? json_object_get(o, "envVars") : NULL;
  if (json_is_null(envs)) envs = NULL;
  if (envs && !json_is_object(envs)) {
    json_decref(o);
    return dshd_files_error(r, 400, "envVars: expected an object of strings");
  }
  const char *k;
  json_t *v;
  json_object_foreach(envs, k, v) {
    /* (k belongs to o: the answer is made before o goes) */
    if (!json_is_string(v)) {
      dshd_files_error(r, 400, "envVars.%.200s: expected a string", k);
      json_decref(o);
      return;
    }
    if (!dshd_env_name_valid(k)) { /* what Start refuses would break every later Start */
      dshd_files_error(r, 400, "envVars: invalid variable name '%.200s'", k);
      json_decref(o);
      return;
    }
  }
  json_t *du = o ? json_object_get(o, "defaultUser") : NULL;
  const char *user = json_is_string(du) && *json_string_value(du) ? json_string_value(du) : NULL;
  dshd_user_t u;
  dshd_err_t err = {0};
  if (user && dshd_user_lookup(user, &u, &err) != 0) {
    dshd_files_error(r, 400, "defaultUser: %s", err.message);
    json_decref(o);
    return;
  }
  json_t *dw = o ? json_object_get(o, "defaultWorkdir") : NULL;
  const char *workdir = json_is_string(dw) && *json_string_value(dw) ? json_string_value(dw) : NULL;
  if (workdir && strlen(workdir) >= PATH_MAX) {
    json_decref(o);
    return dshd_files_error(r, 400, "defaultWorkdir: path too long");
  }
  if (envs) {
    json_t *merged = json_deep_copy(dshd_env_vars());
    json_object_update(merged, envs);
    dshd_server_set_envs(merged);
  }
  if (user && dshd_set_default_user(user, &err) == 0) dshd_server_user_changed();
  if (workdir) dshd_server_set_workdir(workdir);
  if (dshd_process_init) {
    if (!o) o = json_object();
    if (dshd_process_init(o, &err) != 0) {
      json_decref(o);
      unsigned st = (unsigned)dshd_code_http_status(err.code ? err.code : "internal");
      return dshd_files_error(r, st, "%s", err.message);
    }
  }
  json_decref(o);
  struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  dshd_req_answer(r, MHD_HTTP_NO_CONTENT, resp);
}
