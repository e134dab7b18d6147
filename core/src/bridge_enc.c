/* bridge_enc.c: the encoding side of bridge.h — JSON text built from pieces,
 * then handed out as base64 frame pieces.
 *
 * Strings are checked as strict UTF-8 and escaped as JSON.stringify escapes
 * them (two passes over each slice: the size, then the bytes), numbers are
 * written as ECMAScript's Number::toString writes them (the shortest digits
 * that read back, laid out by the spec's rules), and the text is bounded by
 * max_frame_bytes before anything is appended. Uses base64 and utf8. Must
 * never write past its buffer or grow beyond the bound plus one slice. */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsh/base64.h"
#include "dsh/bridge.h"
#include "dsh/errors.h"
#include "dsh/utf8.h"

#define MAX_SAFE_INTEGER 9007199254740991ull
#define SLICE (1u << 20)     /* string bytes one call takes at most */
#define KEEP_CAP (64u << 10) /* what reset keeps of a grown buffer */

struct dsh_bridge_encoder {
  uint64_t max;
  uint8_t *buf;
  size_t len, cap;
  size_t emitted; /* JSON bytes already handed out as base64 */
  int in_str;
};

/* Bytes JSON.stringify writes for each byte of valid UTF-8 text. */
static uint8_t ESC_LEN[256];
__attribute__((constructor)) static void esc_init(void) {
  for (int c = 0; c < 256; c++) ESC_LEN[c] = 1;
  for (int c = 0; c < 0x20; c++) ESC_LEN[c] = 6;
  ESC_LEN['"'] = ESC_LEN['\\'] = ESC_LEN['\b'] = ESC_LEN['\f'] = 2;
  ESC_LEN['\n'] = ESC_LEN['\r'] = ESC_LEN['\t'] = 2;
}

int dsh_bridge_encoder_new(uint64_t max, dsh_bridge_encoder_t **out) {
  *out = NULL;
  if (max < 1 || max > MAX_SAFE_INTEGER) return DSH_EINVAL;
  dsh_bridge_encoder_t *e = calloc(1, sizeof *e);
  if (!e) return DSH_ENOMEM;
  e->max = max;
  *out = e;
  return DSH_OK;
}

void dsh_bridge_encoder_free(dsh_bridge_encoder_t *e) {
  if (!e) return;
  free(e->buf);
  free(e);
}

void dsh_bridge_encoder_reset(dsh_bridge_encoder_t *e) {
  e->len = e->emitted = 0;
  e->in_str = 0;
  if (e->cap > KEEP_CAP) {
    free(e->buf);
    e->buf = NULL;
    e->cap = 0;
  }
}

uint64_t dsh_bridge_encoder_len(const dsh_bridge_encoder_t *e) {
  return e->len;
}

/* Room for n more bytes within the bound. */
static int room(dsh_bridge_encoder_t *e, size_t n) {
  if ((uint64_t)e->len + n > e->max) return DSH_ELIMIT;
  if (e->len + n <= e->cap) return DSH_OK;
  size_t want = e->cap * 2 > e->len + n ? e->cap * 2 : e->len + n;
  if (want < 4096) want = 4096;
  if ((uint64_t)want > e->max) want = (size_t)e->max;
  uint8_t *p = realloc(e->buf, want);
  if (!p) return DSH_ENOMEM;
  e->buf = p;
  e->cap = want;
  return DSH_OK;
}

int dsh_bridge_encoder_raw(dsh_bridge_encoder_t *e, const uint8_t *s, size_t n) {
  int rc = room(e, n);
  if (rc) return rc;
  memcpy(e->buf + e->len, s, n);
  e->len += n;
  return DSH_OK;
}

static const char HEX[] = "0123456789abcdef";

int dsh_bridge_encoder_string(dsh_bridge_encoder_t *e, const uint8_t *s, size_t n, size_t *used) {
  *used = 0;
  size_t cut = n;
  if (cut > SLICE) {
    cut = SLICE;
    size_t k = cut;
    while (k > SLICE - 4 && (s[k] & 0xC0) == 0x80) k--; /* end on a code point */
    if ((s[k] & 0xC0) != 0x80) cut = k;
  }
  if (dsh_utf8_validate(s, cut, NULL)) return DSH_EUTF8;
  size_t out = (e->in_str ? 0 : 1) + (cut == n ? 1 : 0);
  for (size_t i = 0; i < cut; i++) out += ESC_LEN[s[i]];
  int rc = room(e, out);
  if (rc) return rc;
  uint8_t *o = e->buf + e->len;
  if (!e->in_str) *o++ = '"';
  for (size_t i = 0; i < cut; i++) {
    uint8_t c = s[i];
    if (ESC_LEN[c] == 1) {
      *o++ = c;
      continue;
    }
    *o++ = '\\';
    switch (c) {
      case '"':
        *o++ = '"';
        break;
      case '\\':
        *o++ = '\\';
        break;
      case '\b':
        *o++ = 'b';
        break;
      case '\f':
        *o++ = 'f';
        break;
      case '\n':
        *o++ = 'n';
        break;
      case '\r':
        *o++ = 'r';
        break;
      case '\t':
        *o++ = 't';
        break;
      default:
        *o++ = 'u';
        *o++ = '0';
        *o++ = '0';
        *o++ = (uint8_t)HEX[c >> 4];
        *o++ = (uint8_t)HEX[c & 15];
    }
  }
  if (cut == n) {
    *o++ = '"';
    e->in_str = 0;
  } else {
    e->in_str = 1;
  }
  e->len = (size_t)(o - e->buf);
  *used = cut;
  return DSH_OK;
}

static locale_t c_locale(void) {
  static locale_t loc;
  if (!loc) loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  return loc;
}

/* ECMAScript Number::toString of finite x != -0 into out (>= 32 bytes). */
static size_t number_text(double x, char *out) {
  if (x == floor(x) && x > -1e15 && x < 1e15)
    return (size_t)snprintf(out, 32, "%lld", (long long)x);
  locale_t loc = c_locale(), old = loc ? uselocale(loc) : (locale_t)0;
  char e[40];
  for (int p = 0; p <= 16; p++) {
    snprintf(e, sizeof e, "%.*e", p, x);
    if (strtod(e, NULL) == x) break;
  }
  if (loc) uselocale(old);
  /* e: [-]d[.ddd]e[+-]xx */
  const char *q = e;
  int neg = *q == '-';
  if (neg) q++;
  char digits[24];
  int k = 0;
  for (; *q && *q != 'e'; q++)
    if (*q >= '0' && *q <= '9') digits[k++] = *q;
  int exp10 = atoi(q + 1);
  while (k > 1 && digits[k - 1] == '0') k--;
  int n = exp10 + 1;
  char *o = out;
  if (neg) *o++ = '-';
  if (k <= n && n <= 21) {
    memcpy(o, digits, (size_t)k);
    o += k;
    for (int i = k; i < n; i++) *o++ = '0';
  } else if (0 < n && n <= 21) {
    memcpy(o, digits, (size_t)n);
    o += n;
    *o++ = '.';
    memcpy(o, digits + n, (size_t)(k - n));
    o += k - n;
  } else if (-6 < n && n <= 0) {
    *o++ = '0';
    *o++ = '.';
    for (int i = 0; i < -n; i++) *o++ = '0';
    memcpy(o, digits, (size_t)k);
    o += k;
  } else {
    *o++ = digits[0];
    if (k > 1) {
      *o++ = '.';
      memcpy(o, digits + 1, (size_t)(k - 1));
      o += k - 1;
    }
    o += snprintf(o, 8, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
  }
  return (size_t)(o - out);
}

int dsh_bridge_encoder_number(dsh_bridge_encoder_t *e, double x) {
  if (!isfinite(x) || (x == 0 && signbit(x))) return DSH_EINVAL;
  char text[48];
  size_t n = number_text(x, text);
  return dsh_bridge_encoder_raw(e, (const uint8_t *)text, n);
}

int dsh_bridge_encoder_emit(dsh_bridge_encoder_t *e, char *out, size_t cap, size_t *out_n) {
  *out_n = 0;
  if (cap < 5) return DSH_EINVAL;
  size_t rest = e->len - e->emitted;
  size_t whole = (cap - 1) / 4 * 3; /* JSON bytes a last piece can take (with its '\n') */
  if (rest <= whole) {
    size_t k = dsh_base64_encode(e->buf + e->emitted, rest, out);
    out[k] = '\n';
    *out_n = k + 1;
    dsh_bridge_encoder_reset(e);
    return 0;
  }
  size_t take = cap / 4 * 3;
  *out_n = dsh_base64_encode(e->buf + e->emitted, take, out);
  e->emitted += take;
  return 1;
}
