/* test_utf8.c: strict validation (exhaustive over 1..3-byte inputs against a
 * naive decoder), strict and lossy streaming at every split, and cuts. */
#include <stdlib.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/utf8.h"

/* Naive reference: decode code point by code point. Returns 1 if valid. */
static int ref_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t b = s[i];
    size_t len;
    uint32_t cp;
    if (b < 0x80) {
      len = 1;
      cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      cp = b & 0x07;
    } else
      return 0;
    if (i + len > n) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    i += len;
  }
  return 1;
}

static void exhaustive(void) {
  uint8_t s[4];
  long mismatches = 0;
  for (uint32_t v = 0; v < (1u << 24); v++) {
    s[0] = (uint8_t)(v >> 16);
    s[1] = (uint8_t)(v >> 8);
    s[2] = (uint8_t)v;
    for (size_t n = 1; n <= 3; n++) {
      if (n < 3 && (v & ((1u << (8 * (3 - n))) - 1))) continue; /* each prefix once */
      if ((dsh_utf8_validate(s, n, NULL) == DSH_OK) != ref_valid(s, n)) mismatches++;
    }
  }
  /* 4-byte: every lead and second byte, sampled third and fourth bytes. */
  static const uint8_t tails[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0xA0, 0xBF, 0xC0, 0xFF};
  for (int a = 0xE0; a < 0x100; a++)
    for (int b = 0; b < 0x100; b++)
      for (size_t c = 0; c < sizeof tails; c++)
        for (size_t d = 0; d < sizeof tails; d++) {
          s[0] = (uint8_t)a, s[1] = (uint8_t)b, s[2] = tails[c], s[3] = tails[d];
          if ((dsh_utf8_validate(s, 4, NULL) == DSH_OK) != ref_valid(s, 4)) mismatches++;
        }
  CHECK_EQ_INT(mismatches, 0);
}

static void offsets(void) {
  size_t off = 99;
  const char *ok = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF";
  CHECK_EQ_INT(dsh_utf8_validate((const uint8_t *)ok, strlen(ok), &off), DSH_OK);
  struct {
    const char *s;
    size_t off;
  } bad[] = {{"ab\xC0\x80", 2},       {"\xE0\x80\x80", 0}, {"xx\xED\xA0\x80", 2},
             {"\xF4\x90\x80\x80", 0}, {"abc\xF5", 3},      {"\xFF", 0},
             {"a\xE2\x82", 1},        {"\x80", 0},         {"a\xC3\xA9\xC3", 3},
             {"\xC2\x41", 0}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_EQ_INT(dsh_utf8_validate((const uint8_t *)bad[i].s, strlen(bad[i].s), &off), DSH_EUTF8);
    CHECK_EQ_INT(off, bad[i].off);
  }
  /* a long ASCII run before the error (fast path) */
  uint8_t big[300];
  memset(big, 'x', sizeof big);
  big[257] = 0x80;
  CHECK_EQ_INT(dsh_utf8_validate(big, sizeof big, &off), DSH_EUTF8);
  CHECK_EQ_INT(off, 257);
}

/* Feeds s in chunks of k bytes (k = 0: split once at every position via
 * `at`); returns the concatenated output and the final status. */
static int feed_all(const uint8_t *s, size_t n, size_t k, int lossy, uint8_t *out, size_t *outn) {
  dsh_utf8_state_t st = {{0}, 0};
  size_t o = 0;
  for (size_t i = 0; i < n; i += k) {
    size_t m = n - i < k ? n - i : k, got;
    uint8_t tmp[64];
    int rc = lossy ? dsh_utf8_feed_lossy(&st, s + i, m, tmp, sizeof tmp, &got)
                   : dsh_utf8_feed(&st, s + i, m, tmp, sizeof tmp, &got);
    if (rc) return rc;
    memcpy(out + o, tmp, got);
    o += got;
  }
  size_t got = 0;
  int rc = lossy ? dsh_utf8_finish_lossy(&st, out + o, 3, &got) : dsh_utf8_finish(&st);
  *outn = o + got;
  return rc;
}

static void streaming(void) {
  const char *text = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xBD\xA0!";
  size_t n = strlen(text);
  uint8_t out[256];
  size_t on = 0;
  for (size_t k = 1; k <= 8; k++) {
    CHECK_EQ_INT(feed_all((const uint8_t *)text, n, k, 0, out, &on), DSH_OK);
    CHECK_MEM(out, on, text, n);
    CHECK_EQ_INT(feed_all((const uint8_t *)text, n, k, 1, out, &on), DSH_OK);
    CHECK_MEM(out, on, text, n);
  }
  /* A chunk ending mid-code-point is held back, then released whole. */
  dsh_utf8_state_t st = {{0}, 0};
  CHECK_EQ_INT(dsh_utf8_feed(&st, (const uint8_t *)"a\xE2\x82", 3, out, sizeof out, &on), DSH_OK);
  CHECK_MEM(out, on, "a", 1);
  CHECK_EQ_INT(st.npending, 2);
  /* An invalid continuation: error, state unchanged. */
  CHECK_EQ_INT(dsh_utf8_feed(&st, (const uint8_t *)"A", 1, out, sizeof out, &on), DSH_EUTF8);
  CHECK_EQ_INT(on, 0);
  CHECK_EQ_INT(st.npending, 2);
  CHECK_EQ_INT(dsh_utf8_feed(&st, (const uint8_t *)"\xAC", 1, out, sizeof out, &on), DSH_OK);
  CHECK_MEM(out, on, "\xE2\x82\xAC", 3);
  CHECK_EQ_INT(st.npending, 0);
  CHECK_EQ_INT(dsh_utf8_feed(&st, (const uint8_t *)"\xF0\x9F", 2, out, sizeof out, &on), DSH_OK);
  CHECK_EQ_INT(on, 0);
  CHECK_EQ_INT(dsh_utf8_finish(&st), DSH_EUTF8);
  CHECK_EQ_INT(st.npending, 0);
  CHECK_EQ_INT(dsh_utf8_finish(&st), DSH_OK);
  /* Strict errors in the middle of a chunk and an impossible carry. */
  CHECK_EQ_INT(dsh_utf8_feed(&st, (const uint8_t *)"ok\xC0\x80ok", 6, out, sizeof out, &on),
               DSH_EUTF8);
  CHECK_EQ_INT(dsh_utf8_feed(&st, (const uint8_t *)"\xED\xA0", 2, out, sizeof out, &on), DSH_EUTF8);
  CHECK_EQ_INT(st.npending, 0);
  /* Output too small. */
  CHECK_EQ_INT(dsh_utf8_feed(&st, (const uint8_t *)"abc", 3, out, 2, &on), DSH_EINVAL);
  CHECK_EQ_INT(dsh_utf8_feed_lossy(&st, (const uint8_t *)"abc", 3, out, 8, &on), DSH_EINVAL);
}

/* Unicode 3.9, Table 3-8: maximal subparts, each one U+FFFD. */
static void lossy(void) {
  const uint8_t in[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2,
                        0x62, 0x80, 0x63, 0x80, 0xBF, 0x64};
  const char *want =
      "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
      "b\xEF\xBF\xBD"
      "c\xEF\xBF\xBD\xEF\xBF\xBD"
      "d";
  uint8_t out[256];
  size_t on = 0;
  for (size_t k = 1; k <= sizeof in; k++) {
    CHECK_EQ_INT(feed_all(in, sizeof in, k, 1, out, &on), DSH_OK);
    CHECK_MEM(out, on, want, strlen(want));
  }
  /* More TextDecoder cases: surrogates, overlongs, truncation at the end. */
  struct {
    const char *in, *out;
  } cases[] = {
      {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xF0\x9F\x98", "\xEF\xBF\xBD"},
      {"\xF0\x9F\x98x", "\xEF\xBF\xBDx"},
      {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xC3", "\xEF\xBF\xBD"},
      {"\xFF\xFE", "\xEF\xBF\xBD\xEF\xBF\xBD"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (size_t k = 1; k <= 4; k++) {
      CHECK_EQ_INT(feed_all((const uint8_t *)cases[i].in, strlen(cases[i].in), k, 1, out, &on),
                   DSH_OK);
      CHECK_MEM(out, on, cases[i].out, strlen(cases[i].out));
    }
}

static void cuts(void) {
  const uint8_t *s = (const uint8_t *)"a\xE2\x82\xAC" "b\xF0\x9F\x98\x80"; /* a € b 😀 */
  size_t n = 9;
  size_t want_prefix[] = {0, 1, 1, 1, 4, 5, 5, 5, 5, 9, 9};
  for (size_t max = 0; max <= 10; max++)
    CHECK_EQ_INT(dsh_utf8_prefix_len(s, n, max), want_prefix[max]);
  /* tail_start(max): smallest i >= n - max on a boundary */
  size_t want_tail[] = {9, 9, 9, 9, 5, 4, 4, 4, 1, 0, 0, 0};
  for (size_t max = 0; max <= 11; max++)
    CHECK_EQ_INT(dsh_utf8_tail_start(s, n, max), want_tail[max]);
  /* invalid input: stray bytes are units of their own */
  const uint8_t *bad = (const uint8_t *)"\x80\x80\x80\x80" "ab\xE2\x82";
  CHECK_EQ_INT(dsh_utf8_prefix_len(bad, 8, 2), 2);
  CHECK_EQ_INT(dsh_utf8_prefix_len(bad, 8, 7), 7); /* truncated E2 82: two stray bytes */
  CHECK_EQ_INT(dsh_utf8_tail_start(bad, 8, 6), 2);
  CHECK_EQ_INT(dsh_utf8_tail_start(bad, 8, 1), 7);
  CHECK_EQ_INT(dsh_utf8_prefix_len(bad, 0, 5), 0);
  CHECK_EQ_INT(dsh_utf8_tail_start(bad, 0, 5), 0);
}

int main(void) {
  exhaustive();
  offsets();
  streaming();
  lossy();
  cuts();
  CHECK_DONE();
}
