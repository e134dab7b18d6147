/* utf8.c: strict UTF-8 validation, strict and lossy incremental projection onto
 * code points, and code-point-safe prefix/tail cuts.
 *
 * One sequence classifier (Unicode 3.9 table 3-7, "maximal subpart" semantics)
 * serves every function; validation skips ASCII runs 32 bytes at a time and
 * runs other text through a branch-free DFA, classifying only failures. Uses only
 * libc. Must never read past s + n or write past cap, and never allocates. */
#include "dsh/utf8.h"

#include <string.h>

#include "dsh/errors.h"

enum { SEQ_VALID, SEQ_INVALID, SEQ_INCOMPLETE };

/* Total length announced by a lead byte, 0 if it cannot start a sequence. */
/* clang-format off */
static const uint8_t LEN[256] = {
    /* 00..7F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 80..BF continuation, C0..C1 overlong */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    /* E0..EF, F0..F4, F5..FF */
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
/* clang-format on */

/* Allowed range of the second byte after a lead. */
static inline uint8_t second_lo(uint8_t b0) {
  return b0 == 0xE0 ? 0xA0 : b0 == 0xF0 ? 0x90 : 0x80;
}
static inline uint8_t second_hi(uint8_t b0) {
  return b0 == 0xED ? 0x9F : b0 == 0xF4 ? 0x8F : 0xBF;
}

/* Classifies the sequence at s (avail >= 1 bytes). *len: the sequence length
 * (valid), the maximal invalid subpart (>= 1), or avail (incomplete). */
static inline int classify(const uint8_t *s, size_t avail, size_t *len) {
  uint8_t b0 = s[0];
  size_t need = LEN[b0];
  if (need == 1) {
    *len = 1;
    return SEQ_VALID;
  }
  if (need == 0) {
    *len = 1;
    return SEQ_INVALID;
  }
  for (size_t k = 1; k < need; k++) {
    if (k >= avail) {
      *len = k;
      return SEQ_INCOMPLETE;
    }
    uint8_t lo = k == 1 ? second_lo(b0) : 0x80, hi = k == 1 ? second_hi(b0) : 0xBF;
    if (s[k] < lo || s[k] > hi) {
      *len = k;
      return SEQ_INVALID;
    }
  }
  *len = need;
  return SEQ_VALID;
}

/* Offset of the first non-ASCII byte at or after i (n if none). */
static inline size_t skip_ascii(const uint8_t *s, size_t i, size_t n) {
  const uint64_t hi = 0x8080808080808080ull;
  while (i + 32 <= n) {
    uint64_t a, b, c, d;
    memcpy(&a, s + i, 8);
    memcpy(&b, s + i + 8, 8);
    memcpy(&c, s + i + 16, 8);
    memcpy(&d, s + i + 24, 8);
    if ((a | b | c | d) & hi) break;
    i += 32;
  }
  while (i < n && s[i] < 0x80) i++;
  return i;
}

/* A shift-based DFA (after Per Vognsen) for runs of non-ASCII text: each state
 * is a bit offset (6 * index), and DFA[b] packs, for every state, the next
 * state's offset at that state's offset, so a step is one load and one shift
 * with no branch. States: 0 accept, 1 reject (sticky), 2 one continuation
 * left, 3 two left, 4 after E0, 5 after ED, 6 three left, 7 after F0, 8 after
 * F4. Built at load time, read-only afterwards. */
static uint64_t DFA[256];
#define DFA_REJECT 6u

__attribute__((constructor)) static void utf8_dfa_init(void) {
  static const uint8_t next_cont[9][4] = {
      /* next state for continuation ranges 80..8F, 90..9F, A0..BF; [3] unused */
      {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {2, 2, 2}, {1, 1, 2},
      {2, 2, 1}, {3, 3, 3}, {1, 3, 3}, {3, 1, 1}};
  for (int b = 0; b < 256; b++) {
    uint64_t row = 0;
    for (int st = 0; st < 9; st++) {
      int nx = 1;
      if (st == 0) {
        if (b < 0x80)
          nx = 0;
        else if (b >= 0xC2 && b <= 0xDF)
          nx = 2;
        else if (b == 0xE0)
          nx = 4;
        else if (b == 0xED)
          nx = 5;
        else if (b >= 0xE1 && b <= 0xEF)
          nx = 3;
        else if (b == 0xF0)
          nx = 7;
        else if (b >= 0xF1 && b <= 0xF3)
          nx = 6;
        else if (b == 0xF4)
          nx = 8;
      } else if (b >= 0x80 && b <= 0xBF) {
        nx = next_cont[st][b < 0x90 ? 0 : b < 0xA0 ? 1 : 2];
      }
      row |= (uint64_t)(nx * 6) << (st * 6);
    }
    DFA[b] = row;
  }
}

/* Exact scan from a boundary i: used to locate and classify a failure. */
static size_t slow_prefix(const uint8_t *s, size_t i, size_t n, int *how) {
  while (i < n) {
    size_t len;
    int c = classify(s + i, n - i, &len);
    if (c != SEQ_VALID) {
      *how = c;
      return i;
    }
    i += len;
  }
  *how = SEQ_VALID;
  return n;
}

/* Length of the longest valid prefix of s; *how tells why it stopped
 * (SEQ_VALID at n, else the class of the sequence at the returned offset).
 * ASCII is skipped in bulk, other text goes through the DFA 16 bytes at a
 * time; only a failure is rescanned exactly, from the last known boundary. */
static size_t valid_prefix(const uint8_t *s, size_t n, int *how) {
  size_t i = 0, mark = 0; /* s[0, mark) is valid and mark is a boundary */
  uint64_t st = 0;
  while (i < n) {
    if (st == 0) {
      i = skip_ascii(s, i, n);
      mark = i;
      if (i >= n) break;
    }
    size_t end = n - i > 16 ? i + 16 : n;
    for (; i < end; i++) st = DFA[s[i]] >> (st & 63);
    st &= 63;
    if (st == DFA_REJECT) break;
  }
  if (st == 0) {
    *how = SEQ_VALID;
    return n;
  }
  return slow_prefix(s, mark, n, how);
}

int dsh_utf8_validate(const uint8_t *s, size_t n, size_t *err_offset) {
  int how;
  size_t k = valid_prefix(s, n, &how);
  if (how == SEQ_VALID) return DSH_OK;
  if (err_offset) *err_offset = k;
  return DSH_EUTF8;
}

/* Joins the carried bytes with the first input bytes (at most 4 in all). */
static size_t join_pending(const dsh_utf8_state_t *st, const uint8_t *in, size_t n,
                           uint8_t tmp[4]) {
  size_t m = st->npending;
  memcpy(tmp, st->pending, m);
  while (m < 4 && (size_t)(m - st->npending) < n) {
    tmp[m] = in[m - st->npending];
    m++;
  }
  return m;
}

int dsh_utf8_feed(dsh_utf8_state_t *st, const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                  size_t *out_n) {
  *out_n = 0;
  if (st->npending > 3 || cap < n + st->npending) return DSH_EINVAL;
  size_t i = 0, o = 0;
  if (st->npending) {
    uint8_t tmp[4];
    size_t m = join_pending(st, in, n, tmp), len;
    int c = classify(tmp, m, &len);
    if (c == SEQ_INVALID) return DSH_EUTF8;
    if (c == SEQ_INCOMPLETE) { /* all of in was consumed into the carry */
      memcpy(st->pending, tmp, m);
      st->npending = (uint32_t)m;
      return DSH_OK;
    }
    memcpy(out, tmp, len);
    o = len;
    i = len - st->npending;
  }
  int how;
  size_t k = valid_prefix(in + i, n - i, &how);
  if (how == SEQ_INVALID) return DSH_EUTF8;
  memcpy(out + o, in + i, k);
  o += k;
  i += k;
  st->npending = (uint32_t)(n - i); /* 0, or an incomplete tail of <= 3 bytes */
  memcpy(st->pending, in + i, n - i);
  *out_n = o;
  return DSH_OK;
}

int dsh_utf8_finish(dsh_utf8_state_t *st) {
  int rc = st->npending ? DSH_EUTF8 : DSH_OK;
  st->npending = 0;
  return rc;
}

static inline size_t put_fffd(uint8_t *out) {
  out[0] = 0xEF;
  out[1] = 0xBF;
  out[2] = 0xBD;
  return 3;
}

int dsh_utf8_feed_lossy(dsh_utf8_state_t *st, const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                        size_t *out_n) {
  *out_n = 0;
  if (st->npending > 3 || cap < 3 * n + (st->npending ? 3 : 0)) return DSH_EINVAL;
  size_t i = 0, o = 0;
  if (st->npending) {
    uint8_t tmp[4];
    size_t m = join_pending(st, in, n, tmp), len;
    int c = classify(tmp, m, &len);
    if (c == SEQ_INCOMPLETE) {
      memcpy(st->pending, tmp, m);
      st->npending = (uint32_t)m;
      return DSH_OK;
    }
    if (c == SEQ_VALID) {
      memcpy(out, tmp, len);
      o = len;
    } else { /* the carried bytes were a valid prefix: len >= npending */
      o = put_fffd(out);
    }
    i = len - st->npending;
    st->npending = 0;
  }
  while (i < n) {
    size_t a = skip_ascii(in, i, n);
    memcpy(out + o, in + i, a - i);
    o += a - i;
    i = a;
    if (i >= n) break;
    size_t len;
    int c = classify(in + i, n - i, &len);
    if (c == SEQ_VALID) {
      memcpy(out + o, in + i, len);
      o += len;
    } else if (c == SEQ_INVALID) {
      o += put_fffd(out + o);
    } else {
      memcpy(st->pending, in + i, len);
      st->npending = (uint32_t)len;
    }
    i += len;
  }
  *out_n = o;
  return DSH_OK;
}

int dsh_utf8_finish_lossy(dsh_utf8_state_t *st, uint8_t *out, size_t cap, size_t *out_n) {
  *out_n = 0;
  if (!st->npending) return DSH_OK;
  if (cap < 3) return DSH_EINVAL;
  st->npending = 0;
  *out_n = put_fffd(out);
  return DSH_OK;
}

/* Start of the unit containing offset k < n. */
static size_t unit_start(const uint8_t *s, size_t n, size_t k) {
  for (size_t back = 1; back <= 3 && back <= k; back++) {
    size_t j = k - back, len;
    if ((s[j] & 0xC0) == 0x80) continue;
    if (classify(s + j, n - j, &len) == SEQ_VALID && j + len > k) return j;
    return k;
  }
  return k;
}

size_t dsh_utf8_prefix_len(const uint8_t *s, size_t n, size_t max) {
  if (max >= n) return n;
  return unit_start(s, n, max);
}

size_t dsh_utf8_tail_start(const uint8_t *s, size_t n, size_t max) {
  size_t i = n > max ? n - max : 0, len;
  if (i >= n) return n;
  size_t j = unit_start(s, n, i);
  if (j == i) return i;
  classify(s + j, n - j, &len);
  return j + len;
}
