/* bridge_json.c: the JSON tokenizer of the bridge decoder (bridge.h).
 *
 * Reads the decoded, UTF-8-checked bytes of the current line from r, emits a
 * token per scalar, key and container boundary, and decodes string escapes in
 * place (output never outruns input: an escape is at least as long as what it
 * stands for). It stops, to start again from the same byte, at an escape,
 * number or literal the checked bytes cut short, and at the token cap; the
 * line's end (eof) closes a number or literal there. Containers nest on a bit
 * stack (MAX_DEPTH levels, deeper is bad JSON). Uses only libc. Must never
 * read past lim, write before the open string, or recurse. */
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "bridge_internal.h"
#include "dsh/errors.h"

static inline int is_ws(uint8_t c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}
static inline int is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}
static inline int hexval(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
static inline int top_is_object(const dsh_bridge_decoder_t *d) {
  return d->depth && (d->stack[(d->depth - 1) >> 3] >> ((d->depth - 1) & 7) & 1);
}

/* 4 hex digits at p: the value, or -1. */
static int hex4(const uint8_t *p) {
  int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), e = hexval(p[3]);
  if (a < 0 || b < 0 || c < 0 || e < 0) return -1;
  return a << 12 | b << 8 | c << 4 | e;
}

static size_t put_utf8(uint8_t *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (uint8_t)(0xC0 | cp >> 6);
    o[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (uint8_t)(0xE0 | cp >> 12);
    o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (uint8_t)(0xF0 | cp >> 18);
  o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

/* After a value: the next phase. */
static void value_done(dsh_bridge_decoder_t *d) {
  d->phase = d->depth ? P_AFTER : P_DONE;
}

/* The string body from r. 1: closed (token made); 0: needs more bytes; -1: bad
 * JSON; -2: out of memory. */
static int scan_string(dsh_bridge_decoder_t *d, size_t lim, int eof) {
  uint8_t *t = d->text;
  size_t r = d->r, w = d->sw;
  for (;;) {
    size_t k = r;
    while (k < lim && t[k] != '"' && t[k] != '\\' && t[k] >= 0x20) k++;
    if (k > r) {
      if (w != r) memmove(t + w, t + r, k - r);
      w += k - r;
      r = k;
    }
    if (r >= lim) break;
    uint8_t c = t[r];
    if (c < 0x20) return -1;
    if (c == '"') {
      dsh_bridge_token_t *tok =
          dsh_bridge_token(d, d->str_key ? DSH_BRIDGE_KEY : DSH_BRIDGE_STRING);
      if (!tok) return -2;
      tok->off = d->sstart;
      tok->len = w - d->sstart;
      tok->wtf8 = d->wtf8;
      d->r = r + 1;
      d->in_str = 0;
      return 1;
    }
    /* an escape */
    if (r + 1 >= lim) break;
    uint8_t e = t[r + 1];
    uint8_t one = 0;
    switch (e) {
      case '"':
        one = '"';
        break;
      case '\\':
        one = '\\';
        break;
      case '/':
        one = '/';
        break;
      case 'b':
        one = '\b';
        break;
      case 'f':
        one = '\f';
        break;
      case 'n':
        one = '\n';
        break;
      case 'r':
        one = '\r';
        break;
      case 't':
        one = '\t';
        break;
      case 'u':
        break;
      default:
        return -1;
    }
    if (one) {
      t[w++] = one;
      r += 2;
      continue;
    }
    if (r + 6 > lim) break;
    int cp = hex4(t + r + 2);
    if (cp < 0) return -1;
    size_t used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      /* a high surrogate: a low one must follow at once to make a pair */
      if (r + 6 < lim && t[r + 6] == '\\') {
        if (r + 12 > lim) {
          if (!eof) break;
        } else if (t[r + 7] == 'u') {
          int lo = hex4(t + r + 8);
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            used = 12;
          }
        }
      } else if (r + 6 >= lim && !eof) {
        break;
      }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) d->wtf8 = 1; /* lone: WTF-8, never valid UTF-8 */
    w += put_utf8(t + w, (uint32_t)cp);
    r += used;
  }
  d->r = r;
  d->sw = w;
  return 0;
}

/* A number at r. 1: token made; 0: may go on past lim; -1: bad JSON. */
static int scan_number(dsh_bridge_decoder_t *d, size_t lim, int eof) {
  const uint8_t *s = d->text;
  size_t i = d->r;
  if (s[i] == '-') i++;
  if (i >= lim) return eof ? -1 : 0;
  if (s[i] == '0') {
    i++;
  } else if (is_digit(s[i])) {
    while (i < lim && is_digit(s[i])) i++;
  } else {
    return -1;
  }
  if (i < lim && s[i] == '.') {
    i++;
    if (i >= lim) return eof ? -1 : 0;
    if (!is_digit(s[i])) return -1;
    while (i < lim && is_digit(s[i])) i++;
  }
  if (i < lim && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < lim && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= lim) return eof ? -1 : 0;
    if (!is_digit(s[i])) return -1;
    while (i < lim && is_digit(s[i])) i++;
  }
  if (i >= lim && !eof) return 0; /* more digits may follow */
  size_t n = i - d->r;
  char small[64];
  char *z = n < sizeof small ? small : malloc(n + 1);
  if (!z) return -2;
  memcpy(z, s + d->r, n);
  z[n] = 0;
  static locale_t c_locale;
  if (!c_locale) c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  double v = c_locale ? strtod_l(z, NULL, c_locale) : strtod(z, NULL);
  if (z != small) free(z);
  dsh_bridge_token_t *tok = dsh_bridge_token(d, DSH_BRIDGE_NUMBER);
  if (!tok) return -2;
  tok->num = v;
  d->r = i;
  return 1;
}

/* A literal at r. 1: token made; 0: cut by lim; -1: bad JSON. */
static int scan_literal(dsh_bridge_decoder_t *d, size_t lim, const char *word, int kind) {
  size_t n = strlen(word), have = lim - d->r;
  if (memcmp(d->text + d->r, word, have < n ? have : n)) return -1;
  if (have < n) return 0;
  if (!dsh_bridge_token(d, kind)) return -2;
  d->r += n;
  return 1;
}

static int open_container(dsh_bridge_decoder_t *d, int object) {
  if (d->depth >= MAX_DEPTH) return -1;
  if (object)
    d->stack[d->depth >> 3] |= (uint8_t)(1u << (d->depth & 7));
  else
    d->stack[d->depth >> 3] &= (uint8_t) ~(1u << (d->depth & 7));
  d->depth++;
  if (!dsh_bridge_token(d, object ? DSH_BRIDGE_OBJECT : DSH_BRIDGE_ARRAY)) return -2;
  d->phase = object ? P_OBJECT_FIRST : P_ARRAY_FIRST;
  d->r++;
  return 1;
}

static int close_container(dsh_bridge_decoder_t *d) {
  d->depth--;
  if (!dsh_bridge_token(d, DSH_BRIDGE_END)) return -2;
  d->r++;
  value_done(d);
  return 1;
}

static int start_string(dsh_bridge_decoder_t *d, int key) {
  d->in_str = 1;
  d->str_key = key;
  d->wtf8 = 0;
  d->r++;
  d->sstart = d->sw = d->r;
  return 1;
}

int dsh_bridge_tokenize(dsh_bridge_decoder_t *d, size_t lim, int eof) {
  for (;;) {
    if (d->ntok >= TOKENS_PER_CALL && !eof) return 1;
    if (d->in_str) {
      int rc = scan_string(d, lim, eof);
      if (rc <= 0) return rc == 0 && eof ? -1 : rc;
      if (!d->str_key) {
        value_done(d);
      } else {
        d->phase = P_COLON;
      }
      continue;
    }
    while (d->r < lim && is_ws(d->text[d->r])) d->r++;
    if (d->r >= lim) return 0;
    uint8_t c = d->text[d->r];
    int rc;
    switch (d->phase) {
      case P_DONE:
        return -1;
      case P_COLON:
        if (c != ':') return -1;
        d->r++;
        d->phase = P_VALUE;
        continue;
      case P_OBJECT_FIRST:
        if (c == '}') {
          rc = close_container(d);
          break;
        }
        /* fall through */
      case P_KEY:
        if (c != '"') return -1;
        rc = start_string(d, 1);
        break;
      case P_AFTER:
        if (c == ',') {
          d->r++;
          d->phase = top_is_object(d) ? P_KEY : P_VALUE;
          continue;
        }
        if (c != (top_is_object(d) ? '}' : ']')) return -1;
        rc = close_container(d);
        break;
      case P_ARRAY_FIRST:
        if (c == ']') {
          rc = close_container(d);
          break;
        }
        /* fall through */
      default: /* P_VALUE */
        switch (c) {
          case '{':
            rc = open_container(d, 1);
            break;
          case '[':
            rc = open_container(d, 0);
            break;
          case '"':
            rc = start_string(d, 0);
            break;
          case 't':
            rc = scan_literal(d, lim, "true", DSH_BRIDGE_TRUE);
            break;
          case 'f':
            rc = scan_literal(d, lim, "false", DSH_BRIDGE_FALSE);
            break;
          case 'n':
            rc = scan_literal(d, lim, "null", DSH_BRIDGE_NULL);
            break;
          default:
            if (c != '-' && !is_digit(c)) return -1;
            rc = scan_number(d, lim, eof);
            break;
        }
        if (rc == 1 && c != '{' && c != '[' && c != '"') value_done(d);
        break;
    }
    if (rc < 0) return rc;
    if (rc == 0) return eof ? -1 : 0;
  }
}
