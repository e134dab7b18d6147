/* fuzz_http_services.c: the services fuzz_http.c links in place of the
 * process and filesystem services — handlers of every kind the server core
 * drives (unary, server stream, client stream, an extension route) that
 * only echo, so the fuzzer reaches all of the core's Connect paths and
 * starts no process and touches no file.
 *
 * Uses dshd.h only, like a real service. Never blocks; a stream sends at
 * most 64 messages. */
#include <stdlib.h>
#include <string.h>

#include "../dshd.h"

/* {"text":S,"count":N,"data":B64,"fail":CODE} -> the same, validated. */
static int read_msg(json_t *req, const char **text, uint64_t *count, dshd_err_t *err) {
  uint8_t *bytes = NULL;
  size_t n = 0;
  const char *fail;
  if (dshd_json_string(req, "text", NULL, text, err) != 0 ||
      dshd_json_uint(req, "count", NULL, 1, count, err) != 0 ||
      dshd_json_bytes(req, "data", NULL, &bytes, &n, err) != 0 ||
      dshd_json_string(req, "fail", NULL, &fail, err) != 0)
    return -1;
  free(bytes);
  if (*fail) { /* err->code must outlive req: one of the static names */
    static const char *const codes[] = {
        "invalid_argument", "not_found", "permission_denied", "resource_exhausted",
        "unimplemented",    "internal",  "unavailable",       "deadline_exceeded"};
    const char *code = "unknown";
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
      if (strcmp(fail, codes[i]) == 0) code = codes[i];
    return dshd_errf(err, code, "failed as asked: %s", *text);
  }
  if (*count > 64) *count = 64;
  return 0;
}

static int echo_unary(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err) {
  const char *text;
  uint64_t count;
  if (read_msg(req, &text, &count, err) != 0) return -1;
  *resp = json_object();
  json_object_set_new(*resp, "text", dshd_json_str(text));
  const char *user = dshd_req_basic_user(r);
  if (user) json_object_set_new(*resp, "user", dshd_json_str(user));
  return 0;
}

typedef struct echo_stream {
  char *text;
  uint64_t left;
} echo_stream_t;

static int echo_pull(void *ud, dshd_stream_t *s) {
  echo_stream_t *e = ud;
  if (!e->left) {
    dshd_stream_end(s, NULL);
    return 1;
  }
  e->left--;
  json_t *m = json_object();
  json_object_set_new(m, "text", dshd_json_str(e->text));
  json_object_set_new(m, "left", json_integer((json_int_t)e->left));
  dshd_stream_message_json(s, m);
  dshd_stream_wake(s);
  return 1;
}

static void echo_closed(void *ud, dshd_stream_t *s, int client_gone) {
  (void)s, (void)client_gone;
  echo_stream_t *e = ud;
  free(e->text);
  free(e);
}

static void echo_probe(void *ud, dshd_stream_t *s) {
  (void)ud;
  dshd_stream_message(s, "{}", 2);
  dshd_stream_wake(s);
}

static const dshd_stream_ops_t echo_ops = {echo_pull, echo_closed, echo_probe};

static int echo_stream(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err) {
  (void)r;
  const char *text;
  uint64_t count;
  if (read_msg(req, &text, &count, err) != 0) return -1;
  echo_stream_t *e = calloc(1, sizeof *e);
  if (!e || !(e->text = strdup(text))) {
    free(e);
    return dshd_errf(err, "resource_exhausted", "out of memory");
  }
  e->left = count;
  dshd_stream_attach(s, &echo_ops, e);
  dshd_stream_wake(s);
  return 0;
}

static int echo_input(dshd_req_t *r, json_t *msg, void **state, dshd_err_t *err) {
  (void)r;
  if (!msg) {
    free(*state);
    *state = NULL;
    return 0;
  }
  if (!*state && !(*state = calloc(1, sizeof(uint64_t))))
    return dshd_errf(err, "resource_exhausted", "out of memory");
  const char *text;
  uint64_t count;
  if (read_msg(msg, &text, &count, err) != 0) return -1;
  *(uint64_t *)*state += count;
  return 0;
}

const dshd_route_t dshd_process_routes[] = {
    {"/fuzz.Echo/Unary", echo_unary, NULL, NULL, 0},
    {"/fuzz.Echo/Stream", NULL, echo_stream, NULL, 0},
    {"/fuzz.Echo/Input", NULL, NULL, echo_input, 1},
    {"/fuzz.Echo/Extension", echo_unary, NULL, NULL, 1},
    {NULL, NULL, NULL, NULL, 0},
};

const dshd_route_t dshd_filesystem_routes[] = {
    {NULL, NULL, NULL, NULL, 0},
};

/* The server core stops the filesystem service's watchers at exit. */
void dshd_watchers_shutdown(void) {}
