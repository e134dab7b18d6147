-- Declarations of core/include/dsh/termtext.h for ffi.cdef. Keep in step with the header.
return [[
typedef struct dsh_tsan dsh_tsan_t;
enum dsh_tsan_flags { DSH_TSAN_PROMPT = 1, DSH_TSAN_PROMPT_TEXT = 2 };
int dsh_tsan_new(uint32_t max_pending, dsh_tsan_t **out);
void dsh_tsan_free(dsh_tsan_t *s);
int dsh_tsan_feed(dsh_tsan_t *s, const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                  size_t *out_n, uint32_t *flags);
int dsh_tsan_flush(dsh_tsan_t *s, uint8_t *out, size_t cap, size_t *out_n, uint32_t *flags);

typedef struct dsh_textbuf dsh_textbuf_t;
typedef struct dsh_textbuf_stats {
  uint64_t bytes; uint64_t lines; uint64_t appended; uint64_t dropped; int32_t truncated;
} dsh_textbuf_stats_t;
int dsh_textbuf_new(uint64_t max_bytes, uint64_t max_lines, dsh_textbuf_t **out);
void dsh_textbuf_free(dsh_textbuf_t *b);
int dsh_textbuf_append(dsh_textbuf_t *b, const uint8_t *s, size_t n);
void dsh_textbuf_clear(dsh_textbuf_t *b);
int dsh_textbuf_stats(const dsh_textbuf_t *b, dsh_textbuf_stats_t *st);
int dsh_textbuf_data(const dsh_textbuf_t *b, const uint8_t **data, size_t *n);
int dsh_textbuf_tail_lines(const dsh_textbuf_t *b, uint64_t skip, uint64_t count,
                           const uint8_t **data, size_t *n, uint64_t *got);
]]
