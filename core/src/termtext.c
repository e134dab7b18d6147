/* termtext.c: the terminal sanitizer and the bounded text buffer of termtext.h.
 *
 * The sanitizer's text state copies 16 bytes at a time (SSE2 where the
 * compiler has it) and stops only at ESC, CR and BEL, so plain output moves
 * at close to memcpy speed; the escape states walk byte by byte. Uses libc and
 * utf8.c; never allocates after _new, never reads past in + n or writes past
 * out + cap. */
#include "dsh/termtext.h"

#include <stdlib.h>
#include <string.h>

#include "dsh/errors.h"
#include "dsh/utf8.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* --- sanitizer ----------------------------------------------------------------- */

enum { S_TEXT, S_ESC, S_NF, S_CSI, S_STR, S_STR_ESC };

static const char MARKER[] = "133;D;";
#define MARKER_LEN 6

struct dsh_tsan {
  uint32_t max_pending;
  int state;
  int cr;          /* a CR waits for the next byte (LF or not, it is one LF) */
  int osc;         /* the string sequence is an OSC (a marker candidate) */
  int overlong;    /* held across a feed beyond max_pending: no marker */
  int marker_wait; /* a marker was seen and no text has followed it yet */
  uint64_t seq_len;
  uint8_t head[MARKER_LEN];
  uint32_t nhead;
};

int dsh_tsan_new(uint32_t max_pending, dsh_tsan_t **out) {
  *out = NULL;
  if (max_pending == 0) return DSH_EINVAL;
  dsh_tsan_t *s = calloc(1, sizeof *s);
  if (!s) return DSH_ENOMEM;
  s->max_pending = max_pending;
  *out = s;
  return DSH_OK;
}

void dsh_tsan_free(dsh_tsan_t *s) {
  free(s);
}

static const uint8_t SPECIAL[256] = {[0x07] = 1, [0x0d] = 1, [0x1b] = 1};

/* Copies in[0..) to out up to the first ESC, CR or BEL; returns how many.
 * May write up to 15 bytes past the copied span, within out's n + 1 bytes. */
static size_t copy_text(const uint8_t *in, size_t n, uint8_t *out) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128i esc = _mm_set1_epi8(0x1b), cr = _mm_set1_epi8(0x0d), bel = _mm_set1_epi8(0x07);
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(in + i));
    _mm_storeu_si128((__m128i *)(out + i), v);
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, esc), _mm_cmpeq_epi8(v, cr)),
                             _mm_cmpeq_epi8(v, bel));
    int mask = _mm_movemask_epi8(m);
    if (mask) return i + (size_t)__builtin_ctz((unsigned)mask);
  }
#endif
  for (; i < n && !SPECIAL[in[i]]; i++) out[i] = in[i];
  return i;
}

static int has_text(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != '\n') return 1;
  return 0;
}

/* A string sequence ended: was it the prompt marker? */
static void end_string(dsh_tsan_t *s, uint32_t *fl) {
  if (s->osc && !s->overlong && s->nhead == MARKER_LEN && !memcmp(s->head, MARKER, MARKER_LEN)) {
    *fl |= DSH_TSAN_PROMPT;
    *fl &= ~(uint32_t)DSH_TSAN_PROMPT_TEXT;
    s->marker_wait = 1;
  }
  s->state = S_TEXT;
}

static void head_add(dsh_tsan_t *s, const uint8_t *p, size_t n) {
  while (n-- && s->nhead < MARKER_LEN) s->head[s->nhead++] = *p++;
}

int dsh_tsan_feed(dsh_tsan_t *s, const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                  size_t *out_n, uint32_t *flags) {
  *out_n = 0;
  *flags = 0;
  if (cap < n + 1) return DSH_EINVAL;
  uint8_t *o = out;
  uint32_t fl = 0;
  size_t i = 0;
  while (i < n) {
    uint8_t c;
    switch (s->state) {
      case S_TEXT: {
        if (s->cr) {
          s->cr = 0;
          *o++ = '\n';
          if (in[i] == '\n') {
            i++;
            continue;
          }
        }
        size_t k = copy_text(in + i, n - i, o);
        if (k) {
          if (s->marker_wait && has_text(o, k)) {
            fl |= DSH_TSAN_PROMPT_TEXT;
            s->marker_wait = 0;
          }
          o += k;
          i += k;
          if (i == n) break;
        }
        c = in[i++];
        if (c == 0x0d) {
          s->cr = 1;
        } else if (c == 0x1b) {
          s->state = S_ESC;
          s->seq_len = 1;
          s->overlong = 0;
        } /* BEL: dropped */
        break;
      }
      case S_ESC:
        c = in[i];
        if (c >= 0x80 || (c < 0x20 && c != 0x1b)) {
          s->state = S_TEXT; /* a lone ESC: dropped; the byte is text (or a control) */
          break;
        }
        i++;
        s->seq_len++;
        if (c == '[') {
          s->state = S_CSI;
        } else if (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') {
          s->state = S_STR;
          s->osc = c == ']';
          s->nhead = 0;
        } else if (c == 0x1b) {
          s->seq_len = 1; /* ESC ESC: the first one is dropped */
        } else if (c >= 0x20 && c <= 0x2f) {
          s->state = S_NF;
        } else {
          s->state = S_TEXT; /* two-byte escape: ESC 7, ESC =, ... */
        }
        break;
      case S_NF:
        c = in[i];
        if (c >= 0x80 || c < 0x20) {
          s->state = S_TEXT;
          break;
        }
        i++;
        s->seq_len++;
        if (c >= 0x30) s->state = S_TEXT;
        break;
      case S_CSI: { /* parameters and intermediates 0x20..0x3F, then a final byte */
        size_t j = i;
        while (j < n && in[j] >= 0x20 && in[j] < 0x40) j++;
        s->seq_len += j - i;
        i = j;
        if (j < n) {
          s->state = S_TEXT;
          /* anything else (ESC, CR, a code point) ends the sequence as a
           * terminal would and is taken as it is */
          if (in[j] >= 0x40 && in[j] <= 0x7e) i++, s->seq_len++;
        }
        break;
      }
      case S_STR: {
        size_t j = i;
        while (j < n && in[j] != 0x07 && in[j] != 0x1b) j++;
        if (s->osc) head_add(s, in + i, j - i);
        s->seq_len += j - i;
        i = j;
        if (j < n) {
          s->seq_len++;
          i++;
          if (in[j] == 0x07)
            end_string(s, &fl);
          else
            s->state = S_STR_ESC;
        }
        break;
      }
      case S_STR_ESC:
        c = in[i++];
        s->seq_len++;
        if (c == '\\' || c == 0x07) {
          end_string(s, &fl);
        } else if (c != 0x1b) { /* a false ESC: both bytes belong to the string */
          const uint8_t esc = 0x1b;
          if (s->osc) {
            head_add(s, &esc, 1);
            head_add(s, &c, 1);
          }
          s->state = S_STR;
        }
        break;
    }
  }
  if (s->state != S_TEXT && s->seq_len > s->max_pending) s->overlong = 1;
  *out_n = (size_t)(o - out);
  *flags = fl;
  return DSH_OK;
}

int dsh_tsan_flush(dsh_tsan_t *s, uint8_t *out, size_t cap, size_t *out_n, uint32_t *flags) {
  *out_n = 0;
  *flags = 0;
  if (s->cr) {
    if (cap < 1) return DSH_EINVAL;
    out[0] = '\n';
    *out_n = 1;
  }
  uint32_t max_pending = s->max_pending;
  memset(s, 0, sizeof *s);
  s->max_pending = max_pending;
  return DSH_OK;
}

/* --- text buffer ----------------------------------------------------------------- */

struct dsh_textbuf {
  uint8_t *p;
  size_t off, len, cap;
  uint64_t max_bytes, max_lines;
  uint64_t newlines; /* LFs held */
  uint64_t appended, dropped;
  int truncated;
};

int dsh_textbuf_new(uint64_t max_bytes, uint64_t max_lines, dsh_textbuf_t **out) {
  *out = NULL;
  if (max_bytes == 0 || max_bytes > SIZE_MAX / 4) return DSH_EINVAL;
  dsh_textbuf_t *b = calloc(1, sizeof *b);
  if (!b) return DSH_ENOMEM;
  b->max_bytes = max_bytes;
  b->max_lines = max_lines;
  *out = b;
  return DSH_OK;
}

void dsh_textbuf_free(dsh_textbuf_t *b) {
  if (!b) return;
  free(b->p);
  free(b);
}

static uint64_t count_lf(const uint8_t *p, size_t n) {
  uint64_t k = 0;
  const uint8_t *end = p + n;
  while (p < end && (p = memchr(p, '\n', (size_t)(end - p)))) {
    k++;
    p++;
  }
  return k;
}

static uint64_t lines_of(const dsh_textbuf_t *b) {
  if (!b->len) return 0;
  return b->newlines + (b->p[b->off + b->len - 1] != '\n');
}

static void drop_front(dsh_textbuf_t *b, size_t k, uint64_t lfs) {
  b->off += k;
  b->len -= k;
  b->newlines -= lfs;
  b->dropped += k;
  b->truncated = 1;
  if (!b->len) b->off = 0;
}

/* Room for n more bytes at the end. Compacts only when at most half is in
 * use (so each byte moves O(1) times); grows geometrically. */
static int reserve(dsh_textbuf_t *b, size_t n) {
  if (b->off + b->len + n <= b->cap) return DSH_OK;
  if (b->len + n <= b->cap / 2) {
    memmove(b->p, b->p + b->off, b->len);
    b->off = 0;
    return DSH_OK;
  }
  size_t want = 2 * (b->len + n), ncap = b->cap ? 2 * b->cap : 4096;
  if (ncap < want) ncap = want;
  size_t most = 2 * (size_t)b->max_bytes;
  if (ncap > most && want <= most) ncap = most;
  uint8_t *np = malloc(ncap);
  if (!np) return DSH_ENOMEM;
  if (b->len) memcpy(np, b->p + b->off, b->len);
  free(b->p);
  b->p = np;
  b->cap = ncap;
  b->off = 0;
  return DSH_OK;
}

int dsh_textbuf_append(dsh_textbuf_t *b, const uint8_t *s, size_t n) {
  if (!n) return DSH_OK;
  b->appended += n;
  if (n >= b->max_bytes) { /* only the new text's tail can stay */
    size_t t = dsh_utf8_tail_start(s, n, (size_t)b->max_bytes);
    if (b->len) drop_front(b, b->len, b->newlines);
    b->dropped += t;
    if (t) b->truncated = 1;
    s += t;
    n -= t;
  } else if (b->len + n > b->max_bytes) { /* drop first, so the append never moves a full buffer */
    const uint8_t *d = b->p + b->off;
    size_t excess = b->len + n - (size_t)b->max_bytes, cut;
    if (excess >= b->len) {
      cut = b->len;
    } else {
      cut = dsh_utf8_tail_start(d, b->len, b->len - excess);
    }
    drop_front(b, cut, count_lf(d, cut));
  }
  if (!n) return DSH_OK;
  if (reserve(b, n) != DSH_OK) return DSH_ENOMEM;
  memcpy(b->p + b->off + b->len, s, n);
  b->len += n;
  b->newlines += count_lf(s, n);
  if (b->len > b->max_bytes) { /* cannot happen (dropped above); kept as the invariant's guard */
    const uint8_t *d = b->p + b->off;
    size_t cut = dsh_utf8_tail_start(d, b->len, (size_t)b->max_bytes);
    drop_front(b, cut, count_lf(d, cut));
  }
  if (b->max_lines) {
    uint64_t lines = lines_of(b);
    if (lines > b->max_lines) {
      uint64_t excess = lines - b->max_lines;
      const uint8_t *d = b->p + b->off, *q = d;
      for (uint64_t k = 0; k < excess; k++)
        q = (const uint8_t *)memchr(q, '\n', b->len - (size_t)(q - d)) + 1;
      drop_front(b, (size_t)(q - d), excess);
    }
  }
  return DSH_OK;
}

void dsh_textbuf_clear(dsh_textbuf_t *b) {
  b->off = b->len = 0;
  b->newlines = 0;
  if (b->cap > (1u << 20)) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

int dsh_textbuf_stats(const dsh_textbuf_t *b, dsh_textbuf_stats_t *st) {
  st->bytes = b->len;
  st->lines = lines_of(b);
  st->appended = b->appended;
  st->dropped = b->dropped;
  st->truncated = b->truncated;
  return DSH_OK;
}

int dsh_textbuf_data(const dsh_textbuf_t *b, const uint8_t **data, size_t *n) {
  *data = b->p ? b->p + b->off : (const uint8_t *)"";
  *n = b->len;
  return DSH_OK;
}

int dsh_textbuf_tail_lines(const dsh_textbuf_t *b, uint64_t skip, uint64_t count,
                           const uint8_t **data, size_t *n, uint64_t *got) {
  const uint8_t *d = b->p ? b->p + b->off : (const uint8_t *)"";
  *data = d;
  *n = 0;
  *got = 0;
  if (!b->len || !count) return DSH_OK;
  size_t hi = b->len - (d[b->len - 1] == '\n'), lo;
  for (uint64_t k = 0; k < skip; k++) {
    const uint8_t *q = memrchr(d, '\n', hi);
    if (!q) return DSH_OK;
    hi = (size_t)(q - d);
  }
  lo = hi;
  uint64_t g = 0;
  while (g < count) {
    g++;
    const uint8_t *q = memrchr(d, '\n', lo);
    if (!q) {
      lo = 0;
      break;
    }
    lo = (size_t)(q - d);
    if (g == count) lo++;
  }
  *data = d + lo;
  *n = hi - lo;
  *got = g;
  return DSH_OK;
}
