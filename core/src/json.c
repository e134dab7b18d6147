/* json.c: strict RFC 8259 validation without building anything.
 *
 * An iterative state machine: containers are pushed on a fixed bit stack (1 =
 * object, 0 = array), so depth costs one bit and recursion is never used.
 * String bodies are skipped 32 bytes at a time (SSE2; 8 with portable SWAR)
 * until a quote, backslash or control byte. Uses only libc. Must never read
 * past s + n, allocate, or recurse. */
#include "dsh/json.h"

#include <string.h>

#include "dsh/errors.h"

#define MAX_DEPTH 100000

/* 1 for bytes that end a plain run inside a string: '"', '\\', < 0x20. */
/* clang-format off */
static const uint8_t STR_STOP[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
/* clang-format on */

static inline int is_ws(uint8_t c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}
static inline int is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}
static inline int is_hex(uint8_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static inline size_t skip_ws(const uint8_t *s, size_t i, size_t n) {
  while (i < n && is_ws(s[i])) i++;
  return i;
}

#if defined(__SSE2__)
#include <emmintrin.h>
/* Offset of the first '"', '\\' or control byte at or after i, 32 bytes per
 * step (SSE2 is part of x86-64); may return n. */
static inline size_t skip_plain(const uint8_t *s, size_t i, size_t n) {
  const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1F);
  while (i + 32 <= n) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i sa = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, quote), _mm_cmpeq_epi8(a, bslash)),
                              _mm_cmpeq_epi8(_mm_min_epu8(a, ctl), a));
    __m128i sb = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(b, quote), _mm_cmpeq_epi8(b, bslash)),
                              _mm_cmpeq_epi8(_mm_min_epu8(b, ctl), b));
    uint32_t m = (uint32_t)_mm_movemask_epi8(sa) | (uint32_t)_mm_movemask_epi8(sb) << 16;
    if (m) return i + (size_t)__builtin_ctz(m);
    i += 32;
  }
  while (i < n && !STR_STOP[s[i]]) i++;
  return i;
}
#else
/* True if any byte of w is '"', '\\' or < 0x20 (exact, SWAR). */
static inline int has_stop(uint64_t w) {
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
  uint64_t z = ((q - ones) & ~q) | ((b - ones) & ~b) | (w - ones * 0x20);
  return (z & ~w & high) != 0;
}

static inline size_t skip_plain(const uint8_t *s, size_t i, size_t n) {
  while (i + 8 <= n) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    if (has_stop(w)) break;
    i += 8;
  }
  while (i < n && !STR_STOP[s[i]]) i++;
  return i;
}
#endif

/* s[i] is just past the opening quote. Returns the offset past the closing
 * quote, or (size_t)-1 with *err set. */
static size_t scan_string(const uint8_t *s, size_t i, size_t n, size_t *err) {
  for (;;) {
    i = skip_plain(s, i, n);
    if (i >= n) break;
    uint8_t c = s[i];
    if (c == '"') return i + 1;
    if (c != '\\') break; /* raw control character */
    if (i + 1 >= n) {
      i++;
      break;
    }
    c = s[i + 1];
    if (c == 'u') {
      if (i + 6 > n || !is_hex(s[i + 2]) || !is_hex(s[i + 3]) || !is_hex(s[i + 4]) ||
          !is_hex(s[i + 5]))
        break;
      i += 6;
    } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
               c == 't') {
      i += 2;
    } else {
      break;
    }
  }
  *err = i;
  return (size_t)-1;
}

/* s[i] is '-' or a digit. Returns the offset past the number or (size_t)-1. */
static size_t scan_number(const uint8_t *s, size_t i, size_t n, size_t *err) {
  if (s[i] == '-') i++;
  if (i >= n) goto bad;
  if (s[i] == '0') {
    i++;
  } else if (is_digit(s[i])) {
    while (i < n && is_digit(s[i])) i++;
  } else {
    goto bad;
  }
  if (i < n && s[i] == '.') {
    i++;
    if (i >= n || !is_digit(s[i])) goto bad;
    while (i < n && is_digit(s[i])) i++;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= n || !is_digit(s[i])) goto bad;
    while (i < n && is_digit(s[i])) i++;
  }
  return i;
bad:
  *err = i;
  return (size_t)-1;
}

int dsh_json_validate(const uint8_t *s, size_t n, size_t *err_offset) {
  uint8_t stack[MAX_DEPTH / 8 + 1]; /* bit d set: level d is an object */
  size_t depth = 0, i = 0, err = 0;
  int rc = DSH_EJSON;

value:
  i = skip_ws(s, i, n);
  if (i >= n) goto fail;
  switch (s[i]) {
    case '{':
    case '[':
      if (depth >= MAX_DEPTH) {
        rc = DSH_ELIMIT;
        goto fail;
      }
      if (s[i] == '{')
        stack[depth >> 3] |= (uint8_t)(1u << (depth & 7));
      else
        stack[depth >> 3] &= (uint8_t) ~(1u << (depth & 7));
      depth++;
      i = skip_ws(s, i + 1, n);
      if (i >= n) goto fail;
      if (stack[(depth - 1) >> 3] & (1u << ((depth - 1) & 7))) {
        if (s[i] == '}') {
          depth--;
          i++;
          goto after;
        }
        goto key;
      }
      if (s[i] == ']') {
        depth--;
        i++;
        goto after;
      }
      goto value;
    case '"':
      i = scan_string(s, i + 1, n, &err);
      if (i == (size_t)-1) goto fail_at;
      goto after;
    case 't':
      if (n - i < 4 || memcmp(s + i, "true", 4)) goto fail;
      i += 4;
      goto after;
    case 'f':
      if (n - i < 5 || memcmp(s + i, "false", 5)) goto fail;
      i += 5;
      goto after;
    case 'n':
      if (n - i < 4 || memcmp(s + i, "null", 4)) goto fail;
      i += 4;
      goto after;
    default:
      if (s[i] != '-' && !is_digit(s[i])) goto fail;
      i = scan_number(s, i, n, &err);
      if (i == (size_t)-1) goto fail_at;
      goto after;
  }

key: /* s[i] (in bounds, not whitespace) must open a member name */
  if (s[i] != '"') goto fail;
  i = scan_string(s, i + 1, n, &err);
  if (i == (size_t)-1) goto fail_at;
  i = skip_ws(s, i, n);
  if (i >= n || s[i] != ':') goto fail;
  i++;
  goto value;

after: /* a value ended at i */
  i = skip_ws(s, i, n);
  if (depth == 0) {
    if (i == n) return DSH_OK;
    goto fail;
  }
  if (i >= n) goto fail;
  if (stack[(depth - 1) >> 3] & (1u << ((depth - 1) & 7))) {
    if (s[i] == ',') {
      i = skip_ws(s, i + 1, n);
      if (i >= n) goto fail;
      goto key;
    }
    if (s[i] != '}') goto fail;
  } else {
    if (s[i] == ',') {
      i++;
      goto value;
    }
    if (s[i] != ']') goto fail;
  }
  depth--;
  i++;
  goto after;

fail_at:
  i = err;
fail:
  if (err_offset) *err_offset = i;
  return rc;
}
