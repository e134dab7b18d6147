/* termscreen.c: termscreen.h over libvterm (Debian's libvterm 0.1).
 *
 * libvterm parses the stream and keeps the cells; this file counts changes,
 * collects the terminal's replies, renders rows as text and reflows the
 * normal screen on resize by laying its logical lines out again in a fresh
 * VTerm. Uses libvterm, libc and buf.c; never calls back into its owner. */
#include "dsh/termscreen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vterm.h>

#include "dsh/buf.h"
#include "dsh/errors.h"

#define MAX_DIM 1000
#define MAX_REPLIES (64u << 10)

struct dsh_screen {
  VTerm *vt;
  VTermScreen *scr;
  VTermState *st;
  int rows, cols;
  int cursor_visible, altscreen;
  int margins; /* a scroll region may be set (DECSTBM seen): no jump scrolling */
  uint64_t fed, changes;
  dsh_buf_t text, replies;
  uint8_t carry[4]; /* a UTF-8 sequence the last feed ended inside, not given to libvterm yet */
  size_t ncarry;
};

/* --- libvterm callbacks --------------------------------------------------------- */

static int cb_damage(VTermRect r, void *u) {
  (void)r;
  ((dsh_screen_t *)u)->changes++;
  return 1;
}

static int cb_movecursor(VTermPos p, VTermPos old, int visible, void *u) {
  (void)p, (void)old, (void)visible;
  ((dsh_screen_t *)u)->changes++;
  return 1;
}

static int cb_settermprop(VTermProp prop, VTermValue *val, void *u) {
  dsh_screen_t *s = u;
  if (prop == VTERM_PROP_ALTSCREEN) s->altscreen = val->boolean;
  if (prop == VTERM_PROP_CURSORVISIBLE) s->cursor_visible = val->boolean;
  s->changes++;
  return 1;
}

static int cb_bell(void *u) {
  (void)u;
  return 1;
}

static int cb_resize(int rows, int cols, void *u) {
  (void)rows, (void)cols, (void)u;
  return 1;
}

static const VTermScreenCallbacks CALLBACKS = {
    .damage = cb_damage,
    .movecursor = cb_movecursor,
    .settermprop = cb_settermprop,
    .bell = cb_bell,
    .resize = cb_resize,
};

static void cb_output(const char *data, size_t n, void *u) {
  dsh_screen_t *s = u;
  if (s->replies.len + n <= MAX_REPLIES) dsh_buf_append(&s->replies, data, n, 0);
}

static int open_vterm(dsh_screen_t *s, int rows, int cols) {
  VTerm *vt = vterm_new(rows, cols);
  if (!vt) return DSH_ENOMEM;
  vterm_set_utf8(vt, 1);
  vterm_output_set_callback(vt, cb_output, s);
  s->vt = vt;
  s->st = vterm_obtain_state(vt);
  s->scr = vterm_obtain_screen(vt);
  vterm_screen_set_callbacks(s->scr, &CALLBACKS, s);
  vterm_screen_set_damage_merge(s->scr, VTERM_DAMAGE_SCROLL);
  vterm_screen_enable_altscreen(s->scr, 1);
  vterm_screen_reset(s->scr, 1);
  s->rows = rows;
  s->cols = cols;
  s->cursor_visible = 1;
  s->altscreen = 0;
  return DSH_OK;
}

int dsh_screen_new(uint16_t rows, uint16_t cols, dsh_screen_t **out) {
  *out = NULL;
  if (rows < 1 || cols < 1 || rows > MAX_DIM || cols > MAX_DIM) return DSH_EINVAL;
  dsh_screen_t *s = calloc(1, sizeof *s);
  if (!s) return DSH_ENOMEM;
  if (open_vterm(s, rows, cols) != DSH_OK) {
    free(s);
    return DSH_ENOMEM;
  }
  *out = s;
  return DSH_OK;
}

void dsh_screen_free(dsh_screen_t *s) {
  if (!s) return;
  vterm_free(s->vt);
  dsh_buf_free(&s->text);
  dsh_buf_free(&s->replies);
  free(s);
}

/* Only text, CR LF, TAB, BS and colour changes (ESC [ digits ; m)? Such
 * bytes change nothing but the cells they print on. */
static int simple(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (c == 0xC2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9F) return 0; /* a C1 control */
    if (c >= 0x20 || c == '\n' || c == '\r' || c == '\t' || c == '\b') continue;
    if (c != 0x1b || i + 1 >= n || p[i + 1] != '[') return 0;
    size_t j = i + 2;
    while (j < n && ((p[j] >= '0' && p[j] <= '9') || p[j] == ';')) j++;
    if (j >= n || p[j] != 'm') return 0;
    i = j;
  }
  return 1;
}

/* Notes scroll regions being set (CSI top;bottom r) and reset (CSI r, ESC c). */
static void track_margins(dsh_screen_t *s, const uint8_t *p, size_t n) {
  const uint8_t *end = p + n;
  while ((p = memchr(p, 0x1b, (size_t)(end - p))) && p + 1 < end) {
    if (p[1] == 'c') s->margins = 0;
    if (p[1] == '[') {
      const uint8_t *q = p + 2;
      while (q < end && ((*q >= '0' && *q <= '9') || *q == ';')) q++;
      if (q < end && *q == 'r') s->margins = q > p + 2;
    }
    p++;
  }
}

static size_t utf8_len(uint8_t lead) {
  return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

/* How many bytes at the end of d[0..n) are a UTF-8 sequence still missing bytes. */
static size_t utf8_open_tail(const uint8_t *d, size_t n) {
  for (size_t k = 1; k <= 3 && k <= n; k++) {
    uint8_t c = d[n - k];
    if ((c & 0xC0) == 0x80) continue; /* a continuation byte: its lead is further back */
    return c >= 0xC0 && utf8_len(c) > k ? k : 0;
  }
  return 0;
}

/* Jump scrolling: when a chunk holds more lines than the screen can show,
 * the lines that would scroll off at once need not be drawn. The chunk's
 * first line is fed (it completes whatever the last chunk left open); then,
 * if what follows up to the last rows + 1 lines is simple text that ends in
 * CR LF, it is skipped: the screen afterwards is the same, since those last
 * lines overwrite every row. The alternate screen, and a screen with a scroll
 * region, are always fed in full.
 *
 * libvterm 0.1 turns a character cut between two writes into U+FFFD when
 * the first write had text before the cut (output read in pieces cuts
 * anywhere), so a feed that ends inside a character keeps those bytes back
 * and the next one gives them with the rest of the character. */
int dsh_screen_feed(dsh_screen_t *s, const uint8_t *data, size_t n) {
  s->fed += n;
  if (!n) return DSH_OK;
  if (s->ncarry) {
    size_t len = utf8_len(s->carry[0]);
    while (n && s->ncarry < len && (data[0] & 0xC0) == 0x80) {
      s->carry[s->ncarry++] = data[0];
      data++, n--;
    }
    if (s->ncarry < len && !n) return DSH_OK;                    /* still open */
    vterm_input_write(s->vt, (const char *)s->carry, s->ncarry); /* complete, or invalid as it is */
    s->ncarry = 0;
    if (!n) return DSH_OK;
  }
  size_t open = utf8_open_tail(data, n);
  if (open) {
    memcpy(s->carry, data + n - open, open);
    s->ncarry = open;
    n -= open;
    if (!n) return DSH_OK;
  }
  track_margins(s, data, n);
  const uint8_t *first = s->altscreen || s->margins ? NULL : memchr(data, '\n', n);
  if (first) {
    size_t head = (size_t)(first - data) + 1, cut = n;
    int lfs = 0;
    while (cut > head &&
           lfs <= s->rows) { /* back to just after the (rows + 1)-th LF from the end */
      const uint8_t *q = memrchr(data + head, '\n', cut - head);
      if (!q) break;
      cut = (size_t)(q - data);
      lfs++;
    }
    if (lfs > s->rows && cut > head + 1 && data[cut - 1] == '\r' &&
        simple(data + head, cut + 1 - head)) {
      vterm_input_write(s->vt, (const char *)data, head);
      vterm_input_write(s->vt, "\r", 1); /* where the skipped CR LF left the cursor */
      vterm_input_write(s->vt, (const char *)data + cut + 1, n - cut - 1);
      s->changes++;
      return DSH_OK;
    }
  }
  vterm_input_write(s->vt, (const char *)data, n);
  return DSH_OK;
}

/* --- cells as text ------------------------------------------------------------------ */

static size_t put_utf8(uint32_t c, uint8_t *o) {
  if (c < 0x80) {
    o[0] = (uint8_t)c;
    return 1;
  }
  if (c < 0x800) {
    o[0] = (uint8_t)(0xC0 | c >> 6);
    o[1] = (uint8_t)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
  if (c < 0x10000) {
    o[0] = (uint8_t)(0xE0 | c >> 12);
    o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    o[2] = (uint8_t)(0x80 | (c & 0x3F));
    return 3;
  }
  if (c > 0x10FFFF) return put_utf8(0xFFFD, o);
  o[0] = (uint8_t)(0xF0 | c >> 18);
  o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
  o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
  o[3] = (uint8_t)(0x80 | (c & 0x3F));
  return 4;
}

/* One cell as text: its UTF-8 in o (up to 24 bytes; a blank is a space), its width. */
typedef struct {
  uint8_t text[24];
  uint8_t len, width, blank;
} cell_t;

static void read_cell(const dsh_screen_t *s, int row, int col, cell_t *c) {
  VTermScreenCell vc;
  VTermPos pos = {.row = row, .col = col};
  memset(c, 0, sizeof *c);
  c->width = 1;
  if (!vterm_screen_get_cell(s->scr, pos, &vc) || vc.chars[0] == 0 || vc.chars[0] > 0x10FFFF ||
      (vc.chars[0] == ' ' && !vc.chars[1])) {
    c->text[0] = ' ';
    c->len = 1;
    c->blank = 1;
    return;
  }
  for (int i = 0; i < VTERM_MAX_CHARS_PER_CELL && vc.chars[i]; i++)
    c->len = (uint8_t)(c->len + put_utf8(vc.chars[i], c->text + c->len));
  c->width = vc.width > 1 ? (uint8_t)vc.width : 1;
}

int dsh_screen_text(dsh_screen_t *s, const uint8_t **text, size_t *n) {
  dsh_buf_reset(&s->text, 1u << 20);
  for (int r = 0; r < s->rows; r++) {
    size_t row_start = s->text.len, keep = row_start;
    for (int col = 0; col < s->cols;) {
      cell_t c;
      read_cell(s, r, col, &c);
      if (dsh_buf_append(&s->text, c.text, c.len, 0)) return DSH_ENOMEM;
      if (!c.blank) keep = s->text.len;
      col += c.width;
    }
    s->text.len = keep; /* trailing blanks go */
    if (r + 1 < s->rows && dsh_buf_append(&s->text, "\n", 1, 0)) return DSH_ENOMEM;
  }
  *text = s->text.len ? dsh_buf_data(&s->text) : (const uint8_t *)"";
  *n = s->text.len;
  return DSH_OK;
}

int dsh_screen_info(const dsh_screen_t *s, dsh_screen_info_t *out) {
  VTermPos pos;
  vterm_state_get_cursorpos(s->st, &pos);
  out->rows = (uint16_t)s->rows;
  out->cols = (uint16_t)s->cols;
  out->cursor_row = (uint16_t)(pos.row < 0 ? 0 : pos.row);
  out->cursor_col = (uint16_t)(pos.col < 0 ? 0 : pos.col);
  out->cursor_visible = s->cursor_visible;
  out->altscreen = s->altscreen;
  out->fed = s->fed;
  out->changes = s->changes;
  return DSH_OK;
}

int dsh_screen_replies(const dsh_screen_t *s, const uint8_t **data, size_t *n) {
  *data = s->replies.len ? dsh_buf_data(&s->replies) : (const uint8_t *)"";
  *n = s->replies.len;
  return DSH_OK;
}

void dsh_screen_consume_replies(dsh_screen_t *s) {
  dsh_buf_reset(&s->replies, 4096);
}

/* --- reflow ------------------------------------------------------------------------------ */

typedef struct {
  cell_t *cells;
  int n;                /* cells up to the last non-blank one */
  int cursor;           /* the cursor's cell offset in this line, or -1 */
  int new_rows;         /* rows at the new width */
  int cur_row, cur_col; /* the cursor at the new width, relative to the line */
} line_t;

/* Lays a line out at width cols: its rows, and where its cursor lands. */
static void layout(line_t *l, int cols) {
  int row = 0, col = 0, off = 0;
  l->cur_row = l->cur_col = 0;
  for (int i = 0; i <= l->n; i++) {
    if (l->cursor >= 0 && off == l->cursor) l->cur_row = row, l->cur_col = col;
    if (i == l->n) break;
    int w = l->cells[i].width;
    if (col + w > cols) row++, col = 0;
    col += w;
    off += w;
  }
  if (l->cursor >= 0 && l->cursor > off) { /* past the text: blanks */
    int extra = l->cursor - off;
    col += extra;
    row += col / cols;
    col %= cols;
    l->cur_row = row, l->cur_col = col;
  }
  if (l->cursor >= 0 && l->cur_col >= cols) l->cur_row++, l->cur_col = 0;
  l->new_rows = row + 1;
  if (l->cursor >= 0 && l->cur_row + 1 > l->new_rows) l->new_rows = l->cur_row + 1;
}

static int reflow(dsh_screen_t *s, int rows, int cols) {
  VTermPos cur;
  vterm_state_get_cursorpos(s->st, &cur);
  line_t *lines = calloc((size_t)s->rows, sizeof *lines);
  cell_t *cells = calloc((size_t)s->rows * (size_t)s->cols, sizeof *cells);
  if (!lines || !cells) {
    free(lines);
    free(cells);
    return DSH_ENOMEM;
  }
  int nlines = 0, used = 0, cursor_line = 0;
  line_t *l = NULL;
  for (int r = 0; r < s->rows; r++) {
    if (!l) {
      l = &lines[nlines++];
      l->cells = cells + used;
      l->cursor = -1;
    }
    int row_base = used, last_blank = 1;
    for (int col = 0; col < s->cols;) {
      cell_t *c = &cells[used++];
      read_cell(s, r, col, c);
      if (!c->blank) l->n = (int)(c - l->cells) + 1;
      last_blank = c->blank;
      col += c->width;
    }
    if (r == cur.row) { /* the cursor's offset in its line, in columns */
      l->cursor = cur.col;
      for (const cell_t *p = l->cells; p < cells + row_base; p++) l->cursor += p->width;
      cursor_line = nlines - 1;
    }
    if (last_blank || r + 1 == s->rows) { /* the row ends its line; its trailing blanks go */
      used = (int)(l->cells - cells) + l->n;
      l = NULL;
    }
  }
  /* Lines that hold the cursor or text, from the top down to the last one. */
  int end = nlines;
  while (end > cursor_line + 1 && lines[end - 1].n == 0) end--;
  for (int i = 0; i < end; i++) layout(&lines[i], cols);
  /* Keep the cursor's line and the lines above it that fit, then below; one
   * more line above fills what is left with its last rows (the rest scrolls
   * off the top as the text is written). */
  int first = cursor_line, total = lines[cursor_line].new_rows;
  while (first > 0 && total + lines[first - 1].new_rows <= rows) total += lines[--first].new_rows;
  int last = cursor_line;
  while (last + 1 < end && total + lines[last + 1].new_rows <= rows)
    total += lines[++last].new_rows;
  if (first > 0 && total < rows) total += lines[--first].new_rows;
  int scrolled = total > rows ? total - rows : 0;

  dsh_buf_t out = {0};
  int cursor_row = 0;
  for (int i = first; i <= last; i++) {
    if (i == cursor_line)
      cursor_row += lines[i].cur_row;
    else if (i < cursor_line)
      cursor_row += lines[i].new_rows;
    for (int k = 0; k < lines[i].n; k++)
      dsh_buf_append(&out, lines[i].cells[k].text, lines[i].cells[k].len, 0);
    if (i < last) dsh_buf_append(&out, "\r\n", 2, 0);
  }
  char cup[32];
  cursor_row -= scrolled;
  if (cursor_row < 0) cursor_row = 0;
  int k = snprintf(cup, sizeof cup, "\x1b[%d;%dH", cursor_row + 1, lines[cursor_line].cur_col + 1);
  dsh_buf_append(&out, cup, (size_t)k, 0);

  VTerm *old = s->vt;
  int rc = open_vterm(s, rows, cols);
  if (rc == DSH_OK) {
    vterm_free(old);
    if (out.len) vterm_input_write(s->vt, (const char *)dsh_buf_data(&out), out.len);
    s->changes++;
  }
  dsh_buf_free(&out);
  free(lines);
  free(cells);
  return rc;
}

int dsh_screen_resize(dsh_screen_t *s, uint16_t rows, uint16_t cols) {
  if (rows < 1 || cols < 1 || rows > MAX_DIM || cols > MAX_DIM) return DSH_EINVAL;
  if (rows == s->rows && cols == s->cols) return DSH_OK;
  if (s->altscreen) {
    vterm_set_size(s->vt, rows, cols);
    s->rows = rows;
    s->cols = cols;
    s->changes++;
    return DSH_OK;
  }
  return reflow(s, rows, cols);
}
