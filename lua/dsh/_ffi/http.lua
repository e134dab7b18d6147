-- Declarations of core/include/dsh/http.h for ffi.cdef.
return [[
typedef struct dsh_http dsh_http_t;
typedef struct dsh_http_req dsh_http_req_t;
typedef struct dsh_http_req_opts {
  const char *method; const char *url; const char *unix_socket;
  const char *const *headers; size_t nheaders;
  const uint8_t *body; size_t body_len;
  int32_t stream_body;
  int64_t timeout_ms; int64_t connect_timeout_ms;
  uint32_t max_buffer_bytes; uint32_t max_header_bytes;
} dsh_http_req_opts_t;
typedef struct dsh_http_stats { int64_t requests; int64_t connections; int64_t live; } dsh_http_stats_t;
typedef struct dsh_http_req_info {
  uint64_t id; int32_t status; int32_t done;
  int64_t body_bytes; int64_t buffered; int64_t buffered_peak;
  int64_t sent_bytes; int64_t send_pending;
} dsh_http_req_info_t;
int dsh_http_new(dsh_loop_t *loop, dsh_http_t **out);
void dsh_http_free(dsh_http_t *h);
int dsh_http_stats(const dsh_http_t *h, dsh_http_stats_t *st);
int dsh_http_start(dsh_http_t *h, const dsh_http_req_opts_t *opts, uint64_t id,
                   dsh_http_req_t **out, char *err, size_t errlen);
int32_t dsh_http_status(const dsh_http_req_t *r);
int dsh_http_headers(const dsh_http_req_t *r, const char **data, size_t *n);
int dsh_http_info(const dsh_http_req_t *r, dsh_http_req_info_t *out);
int dsh_http_peek(dsh_http_req_t *r, const uint8_t **data, size_t *n);
int dsh_http_consume(dsh_http_req_t *r, size_t n);
int dsh_http_send(dsh_http_req_t *r, const uint8_t *data, size_t n, size_t *accepted);
int dsh_http_send_end(dsh_http_req_t *r);
int dsh_http_cancel(dsh_http_req_t *r);
int dsh_http_result(const dsh_http_req_t *r, char *err, size_t errlen);
void dsh_http_req_free(dsh_http_req_t *r);
]]
