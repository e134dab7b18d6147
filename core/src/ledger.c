/* ledger.c: JSON.stringify byte costs of UTF-8 strings, code-point-safe cuts
 * by cost, and the output ledger (harness §2.6).
 *
 * Plain ASCII runs are skipped 16 bytes at a time (SSE2) and a table gives
 * the cost of the other ASCII bytes; from a non-ASCII byte, the utf8
 * validator measures the valid run, which costs its length plus its ASCII
 * escapes; a small decoder classifies what is left (encoded surrogate, stray
 * byte). Uses utf8 and libc. Must never read past s + n, allocate, or split a unit. */
#include "dsh/ledger.h"

#include <stdio.h>
#include <string.h>

#include "dsh/errors.h"
#include "dsh/utf8.h"

/* Quoted-string cost of each ASCII byte. */
/* clang-format off */
static const uint8_t ASCII_COST[128] = {
    6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 6, 2, 2, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
    1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
/* clang-format on */

/* The unit at s[0] (avail >= 1, s[0] >= 0x80): sets *len (bytes) and returns
 * its cost. */
static size_t unit(const uint8_t *s, size_t avail, size_t *len) {
  uint8_t b0 = s[0];
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) { /* A0..BF are encoded surrogates: a unit of their own */
      if (avail >= 3 && s[1] >= 0xA0 && s[1] <= 0xBF && s[2] >= 0x80 && s[2] <= 0xBF) {
        *len = 3;
        return 6;
      }
      hi = 0x9F;
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return 3;
  }
  if (avail < need || s[1] < lo || s[1] > hi) goto stray;
  for (size_t k = 2; k < need; k++)
    if (s[k] < 0x80 || s[k] > 0xBF) goto stray;
  *len = need;
  return need; /* UTF-8 length; astral (4 bytes) = a surrogate pair = 4 */
stray:
  *len = 1;
  return 3;
}

/* Offset of the first byte at or after i that is '"', '\\', < 0x20, or (if
 * high) >= 0x80; may return n. 16 bytes per step with SSE2. */
#if defined(__SSE2__)
#include <emmintrin.h>
static inline size_t skip_until(const uint8_t *s, size_t i, size_t n, int high) {
  const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1F);
  while (i + 16 <= n) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, quote), _mm_cmpeq_epi8(a, bslash)),
                                _mm_cmpeq_epi8(_mm_min_epu8(a, ctl), a));
    uint32_t m = (uint32_t)(_mm_movemask_epi8(stop) | (high ? _mm_movemask_epi8(a) : 0));
    if (m) return i + (size_t)__builtin_ctz(m);
    i += 16;
  }
  while (i < n && !(s[i] == '"' || s[i] == '\\' || s[i] < 0x20 || (high && s[i] >= 0x80))) i++;
  return i;
}
#else
static inline size_t skip_until(const uint8_t *s, size_t i, size_t n, int high) {
  while (i < n && !(s[i] == '"' || s[i] == '\\' || s[i] < 0x20 || (high && s[i] >= 0x80))) i++;
  return i;
}
#endif

/* Cost of valid UTF-8 s[i, end) without quotes: every sequence costs its
 * length, so only ASCII escapes add to it. */
static size_t valid_cost(const uint8_t *s, size_t i, size_t end) {
  size_t cost = end - i;
  while ((i = skip_until(s, i, end, 0)) < end) cost += ASCII_COST[s[i++]] - 1u;
  return cost;
}

size_t dsh_json_string_cost(const uint8_t *s, size_t n) {
  size_t cost = 2, i = 0;
  while (i < n) {
    size_t j = skip_until(s, i, n, 1);
    cost += j - i;
    i = j;
    if (i >= n) break;
    uint8_t c = s[i];
    if (c < 0x80) {
      cost += ASCII_COST[c];
      i++;
      continue;
    }
    /* Non-ASCII: cost the valid run from here in bulk, then one bad unit. */
    size_t off = n - i;
    dsh_utf8_validate(s + i, n - i, &off);
    if (off) {
      cost += valid_cost(s, i, i + off);
      i += off;
      continue;
    }
    size_t len;
    cost += unit(s + i, n - i, &len);
    i += len;
  }
  return cost;
}

size_t dsh_json_string_prefix(const uint8_t *s, size_t n, size_t budget) {
  if (budget < 2) return 0;
  size_t left = budget - 2, i = 0;
  while (i < n) {
    size_t j = skip_until(s, i, n, 1);
    if (j - i >= left) return i + left; /* plain bytes cost 1 each */
    left -= j - i;
    i = j;
    if (i >= n) break;
    uint8_t c = s[i];
    size_t len = 1, cost = c < 0x80 ? ASCII_COST[c] : unit(s + i, n - i, &len);
    if (cost > left) break;
    left -= cost;
    i += len;
  }
  return i;
}

int dsh_ledger_init(dsh_ledger_t *l, uint64_t max_bytes) {
  memset(l, 0, sizeof *l);
  if (max_bytes < 4) return DSH_EINVAL;
  l->max_bytes = max_bytes;
  l->used = 2;
  return DSH_OK;
}

int dsh_ledger_add_log(dsh_ledger_t *l, const uint8_t *s, size_t n, size_t *prefix_len) {
  *prefix_len = 0;
  if (l->limited) return DSH_ELIMIT;
  uint64_t sep = l->nlogs ? 1 : 0;
  uint64_t room = l->used < l->max_bytes ? l->max_bytes - l->used : 0;
  /* Every byte costs at least 1: skip the scan of a log that cannot fit. */
  if ((uint64_t)n + 2 + sep <= room) {
    uint64_t cost = dsh_json_string_cost(s, n) + sep;
    if (cost <= room) {
      l->used += cost;
      l->nlogs++;
      *prefix_len = n;
      return DSH_OK;
    }
  }
  l->limited = 1;
  if (room > sep) {
    uint64_t budget = room - sep;
    size_t p = dsh_json_string_prefix(s, n, budget > SIZE_MAX ? SIZE_MAX : (size_t)budget);
    if (p) {
      l->used += sep + dsh_json_string_cost(s, p);
      l->nlogs++;
      *prefix_len = p;
    }
  }
  return DSH_ELIMIT;
}

int dsh_ledger_add_value(dsh_ledger_t *l, uint64_t json_bytes) {
  uint64_t room = l->used < l->max_bytes ? l->max_bytes - l->used : 0;
  if (json_bytes > room) {
    l->limited = 1;
    return DSH_ELIMIT;
  }
  l->used += json_bytes;
  return DSH_OK;
}

int dsh_ledger_limit_message(const dsh_ledger_t *l, char *out, size_t cap, size_t *out_n) {
  char msg[64];
  int k = snprintf(msg, sizeof msg, "outer output exceeded %llu bytes",
                   (unsigned long long)l->max_bytes);
  uint64_t room = l->used < l->max_bytes ? l->max_bytes - l->used : 0;
  size_t p =
      dsh_json_string_prefix((const uint8_t *)msg, (size_t)k, room > 1024 ? 1024 : (size_t)room);
  *out_n = 0;
  if (p > cap) return DSH_EINVAL;
  memcpy(out, msg, p);
  *out_n = p;
  return DSH_OK;
}
