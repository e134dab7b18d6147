-- Declarations of core/include/dsh/{base64,envelope,frame,lspframe,utf8,json,ledger}.h
-- for ffi.cdef. Keep in step with the headers.
return [[
size_t dsh_base64_encoded_len(size_t n);
size_t dsh_base64_encode(const uint8_t *src, size_t n, char *dst);
size_t dsh_base64_decoded_max(size_t n);
int dsh_base64_decode(const char *src, size_t n, uint8_t *dst, size_t *out_n);
int dsh_base64_decode_loose(const char *src, size_t n, uint8_t *dst, size_t *out_n);
int dsh_base64_use_simd(int enable);

typedef struct dsh_envelope_decoder dsh_envelope_decoder_t;
void dsh_envelope_header(uint8_t flags, uint32_t len, uint8_t out[5]);
int dsh_envelope_decoder_new(uint32_t max_message_bytes, dsh_envelope_decoder_t **out);
void dsh_envelope_decoder_free(dsh_envelope_decoder_t *d);
int dsh_envelope_decoder_push(dsh_envelope_decoder_t *d, const uint8_t *data, size_t n);
int dsh_envelope_decoder_next(dsh_envelope_decoder_t *d, uint8_t *flags,
                              const uint8_t **payload, uint32_t *len);
int dsh_envelope_decoder_finish(dsh_envelope_decoder_t *d);
int dsh_envelope_decoder_status(const dsh_envelope_decoder_t *d);
const char *dsh_envelope_decoder_error(const dsh_envelope_decoder_t *d);

typedef struct dsh_frame_decoder dsh_frame_decoder_t;
int dsh_frame_check_max(uint64_t max_frame_bytes);
const char *dsh_frame_message(int status);
int dsh_frame_decoder_new(uint64_t max_frame_bytes, dsh_frame_decoder_t **out);
void dsh_frame_decoder_free(dsh_frame_decoder_t *d);
int dsh_frame_decoder_push(dsh_frame_decoder_t *d, const uint8_t *data, size_t n);
int dsh_frame_decoder_next(dsh_frame_decoder_t *d, const uint8_t **json, size_t *len);
int dsh_frame_decoder_finish(dsh_frame_decoder_t *d);
int dsh_frame_decoder_status(const dsh_frame_decoder_t *d);
const char *dsh_frame_decoder_error(const dsh_frame_decoder_t *d);
size_t dsh_frame_encoded_len(size_t n);
int dsh_frame_encode(const uint8_t *json, size_t n, uint64_t max_frame_bytes, char *out,
                     size_t cap, size_t *out_n);

typedef struct dsh_lsp_decoder dsh_lsp_decoder_t;
int dsh_lsp_decoder_new(uint64_t max_message_bytes, dsh_lsp_decoder_t **out);
void dsh_lsp_decoder_free(dsh_lsp_decoder_t *d);
int dsh_lsp_decoder_push(dsh_lsp_decoder_t *d, const uint8_t *data, size_t n);
int dsh_lsp_decoder_next(dsh_lsp_decoder_t *d, const uint8_t **body, size_t *len);
int dsh_lsp_decoder_finish(dsh_lsp_decoder_t *d);
int dsh_lsp_decoder_status(const dsh_lsp_decoder_t *d);
const char *dsh_lsp_decoder_error(const dsh_lsp_decoder_t *d);
int dsh_lsp_encode_header(size_t body_len, char *out, size_t cap, size_t *out_n);

int dsh_utf8_validate(const uint8_t *s, size_t n, size_t *err_offset);
typedef struct dsh_utf8_state { uint8_t pending[4]; uint32_t npending; } dsh_utf8_state_t;
int dsh_utf8_feed(dsh_utf8_state_t *st, const uint8_t *in, size_t n, uint8_t *out,
                  size_t cap, size_t *out_n);
int dsh_utf8_finish(dsh_utf8_state_t *st);
int dsh_utf8_feed_lossy(dsh_utf8_state_t *st, const uint8_t *in, size_t n, uint8_t *out,
                        size_t cap, size_t *out_n);
int dsh_utf8_finish_lossy(dsh_utf8_state_t *st, uint8_t *out, size_t cap, size_t *out_n);
size_t dsh_utf8_prefix_len(const uint8_t *s, size_t n, size_t max);
size_t dsh_utf8_tail_start(const uint8_t *s, size_t n, size_t max);

int dsh_json_validate(const uint8_t *s, size_t n, size_t *err_offset);

size_t dsh_json_string_cost(const uint8_t *s, size_t n);
size_t dsh_json_string_prefix(const uint8_t *s, size_t n, size_t budget);
typedef struct dsh_ledger {
  uint64_t max_bytes; uint64_t used; uint64_t nlogs; int32_t limited;
} dsh_ledger_t;
int dsh_ledger_init(dsh_ledger_t *l, uint64_t max_bytes);
int dsh_ledger_add_log(dsh_ledger_t *l, const uint8_t *s, size_t n, size_t *prefix_len);
int dsh_ledger_add_value(dsh_ledger_t *l, uint64_t json_bytes);
int dsh_ledger_limit_message(const dsh_ledger_t *l, char *out, size_t cap, size_t *out_n);
]]
