-- Declarations of core/include/dsh/termscreen.h for ffi.cdef. Keep in step with the header.
return [[
typedef struct dsh_screen dsh_screen_t;
typedef struct dsh_screen_info {
  uint16_t rows, cols;
  uint16_t cursor_row, cursor_col;
  int32_t cursor_visible;
  int32_t altscreen;
  uint64_t fed;
  uint64_t changes;
} dsh_screen_info_t;
int dsh_screen_new(uint16_t rows, uint16_t cols, dsh_screen_t **out);
void dsh_screen_free(dsh_screen_t *s);
int dsh_screen_feed(dsh_screen_t *s, const uint8_t *data, size_t n);
int dsh_screen_resize(dsh_screen_t *s, uint16_t rows, uint16_t cols);
int dsh_screen_info(const dsh_screen_t *s, dsh_screen_info_t *out);
int dsh_screen_text(dsh_screen_t *s, const uint8_t **text, size_t *n);
int dsh_screen_replies(const dsh_screen_t *s, const uint8_t **data, size_t *n);
void dsh_screen_consume_replies(dsh_screen_t *s);
]]
