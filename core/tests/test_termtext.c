/* test_termtext.c: the sanitizer's pins (harness-behaviour.md §6.8 items 1-5),
 * its output at every split of a mixed stream, and the text buffer's limits,
 * code-point-safe cuts and newest-first line pages. */
#include <stdlib.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/termtext.h"
#include "dsh/utf8.h"

typedef struct {
  char text[4096];
  size_t n;
  uint32_t flags;
} res_t;

static res_t feed(dsh_tsan_t *s, const char *in) {
  res_t r;
  size_t n = strlen(in);
  CHECK_EQ_INT(dsh_tsan_feed(s, (const uint8_t *)in, n, (uint8_t *)r.text, n + 1, &r.n, &r.flags),
               DSH_OK);
  r.text[r.n] = 0;
  return r;
}

static res_t flush(dsh_tsan_t *s) {
  res_t r;
  CHECK_EQ_INT(dsh_tsan_flush(s, (uint8_t *)r.text, 1, &r.n, &r.flags), DSH_OK);
  r.text[r.n] = 0;
  return r;
}

static dsh_tsan_t *tsan(uint32_t max_pending) {
  dsh_tsan_t *s;
  CHECK_EQ_INT(dsh_tsan_new(max_pending, &s), DSH_OK);
  return s;
}

static void test_pins(void) {
  dsh_tsan_t *s = tsan(4096);
  /* 1: a split CSI; a split marker */
  res_t r = feed(s, "\x1b[31mred\x1b[");
  CHECK_STR(r.text, "red");
  r = feed(s, "0m text\n");
  CHECK_STR(r.text, " text\n");
  r = feed(s, "\x1b]133;D;0");
  CHECK_STR(r.text, "");
  CHECK_EQ_INT(r.flags, 0);
  r = feed(s,
           "\x07"
           "dsh> ");
  CHECK_STR(r.text, "dsh> ");
  CHECK_EQ_INT(r.flags, DSH_TSAN_PROMPT | DSH_TSAN_PROMPT_TEXT);
  /* 2: OSC by ST or BEL, ESC 7, BEL; a trailing ESC is held, flush drops it */
  r = feed(s,
           "a\x1b]0;title\x1b\\b\x1b]2;t\x07"
           "c\x1b"
           "7d\x07"
           "e\x1b");
  CHECK_STR(r.text, "abcde");
  CHECK_EQ_INT(r.flags, 0);
  r = flush(s);
  CHECK_STR(r.text, "");
  /* 3: CR handling */
  r = feed(s, "a\r\nb\rc\x07");
  CHECK_STR(r.text, "a\nb\nc");
  r = feed(s, "x\r");
  CHECK_STR(r.text, "x");
  r = feed(s, "\ny\r");
  CHECK_STR(r.text, "\ny");
  r = flush(s);
  CHECK_STR(r.text, "\n");
  /* 4: a lone marker, then the prompt text in the next chunk */
  r = feed(s, "\x1b]133;D;0\x07");
  CHECK_STR(r.text, "");
  CHECK_EQ_INT(r.flags, DSH_TSAN_PROMPT);
  r = feed(s, "\n");
  CHECK_EQ_INT(r.flags, 0); /* a line feed is not prompt text */
  r = feed(s, "dsh> ");
  CHECK_EQ_INT(r.flags, DSH_TSAN_PROMPT_TEXT);
  r = feed(s, "more");
  CHECK_EQ_INT(r.flags, 0); /* reported once per marker */
  /* text before a second marker in the same chunk does not count for it */
  r = feed(s, "\x1b]133;D;1\x07x\x1b]133;D;0\x07");
  CHECK_STR(r.text, "x");
  CHECK_EQ_INT(r.flags, DSH_TSAN_PROMPT);
  dsh_tsan_free(s);

  /* 5: overlong OSC and CSI (cap 8) are discarded through their terminator,
   * with an ST split across chunks and a false ESC; no marker from them */
  s = tsan(8);
  r = feed(s, "a\x1b]133;D;0123456789");
  CHECK_STR(r.text, "a");
  r = feed(s, "more\x1bxstill\x1b");
  CHECK_STR(r.text, "");
  r = feed(s, "\\b");
  CHECK_STR(r.text, "b");
  CHECK_EQ_INT(r.flags, 0);
  r = feed(s, "\x1b[1;2;3;4;5;6;7");
  CHECK_STR(r.text, "");
  r = feed(s, ";8;9mc");
  CHECK_STR(r.text, "c");
  /* a marker inside one chunk is fine whatever its length */
  r = feed(s, "\x1b]133;D;0\x07p");
  CHECK_EQ_INT(r.flags, DSH_TSAN_PROMPT | DSH_TSAN_PROMPT_TEXT);
  dsh_tsan_free(s);

  CHECK_EQ_INT(dsh_tsan_new(0, &s), DSH_EINVAL);
  s = tsan(16);
  uint8_t out[4];
  size_t n;
  uint32_t fl;
  CHECK_EQ_INT(dsh_tsan_feed(s, (const uint8_t *)"abcd", 4, out, 4, &n, &fl), DSH_EINVAL);
  dsh_tsan_free(s);
}

static void test_escapes(void) {
  dsh_tsan_t *s = tsan(4096);
  /* ESC ( B (a charset designation), DCS, APC; ESC before UTF-8 keeps the code point */
  res_t r = feed(s,
                 "1\x1b(B2\x1bP1$r\x1b\\3\x1b_apc\x07"
                 "4\x1b\xe4\xbd\xa0\x1b\x1b[0m5");
  CHECK_STR(r.text,
            "1234\xe4\xbd\xa0"
            "5");
  /* a CSI cut short by a line end or a new escape (output cut mid-sequence) */
  r = feed(s,
           "x\x1b[3\r\n\x1b]133;D;0\x07"
           "dsh> \x1b[1\xe4\xbd\xa0");
  CHECK_STR(r.text, "x\ndsh> \xe4\xbd\xa0");
  CHECK_EQ_INT(r.flags, DSH_TSAN_PROMPT | DSH_TSAN_PROMPT_TEXT);
  /* other controls pass: tab, backspace */
  r = feed(s, "a\tb\bc");
  CHECK_STR(r.text, "a\tb\bc");
  dsh_tsan_free(s);
}

/* One stream at every split point gives the same text. */
static void test_splits(void) {
  const char *in =
      "ls\r\n\x1b[0m\x1b[01;34mdir\x1b[0m  \xe4\xbd\xa0\xe5\xa5\xbd.txt\r\n\x1b]0;t\x1b\\"
      "\x1b]133;D;0\x07"
      "dsh> \x07\r";
  size_t n = strlen(in);
  const char *want = "ls\ndir  \xe4\xbd\xa0\xe5\xa5\xbd.txt\ndsh> \n";
  for (size_t cut = 0; cut <= n; cut++) {
    dsh_tsan_t *s = tsan(4096);
    char out[512];
    size_t o = 0, got;
    uint32_t fl, all = 0;
    dsh_tsan_feed(s, (const uint8_t *)in, cut, (uint8_t *)out, cut + 1, &got, &fl);
    o += got;
    all |= fl;
    dsh_tsan_feed(s, (const uint8_t *)in + cut, n - cut, (uint8_t *)out + o, n - cut + 1, &got,
                  &fl);
    o += got;
    all |= fl;
    dsh_tsan_flush(s, (uint8_t *)out + o, 1, &got, &fl);
    o += got;
    CHECK_MEM(out, o, want, strlen(want));
    CHECK_EQ_INT(all, DSH_TSAN_PROMPT | DSH_TSAN_PROMPT_TEXT);
    CHECK_EQ_INT(dsh_utf8_validate((const uint8_t *)out, o, NULL), DSH_OK);
    dsh_tsan_free(s);
  }
}

/* Long plain runs take the vector path; specials at every offset of a block. */
static void test_long(void) {
  char in[200], want[200];
  for (int pos = 0; pos < 40; pos++) {
    size_t w = 0;
    for (int i = 0; i < 100; i++) {
      in[i] = (char)('a' + i % 26);
      if (i == pos) in[i] = '\r';
      if (i == pos + 1) in[i] = '\n';
      if (i != pos) want[w++] = in[i];
    }
    dsh_tsan_t *s = tsan(64);
    char out[201];
    size_t n;
    uint32_t fl;
    dsh_tsan_feed(s, (const uint8_t *)in, 100, (uint8_t *)out, 101, &n, &fl);
    CHECK_MEM(out, n, want, w);
    dsh_tsan_free(s);
  }
}

static dsh_textbuf_t *tbuf(uint64_t max_bytes, uint64_t max_lines) {
  dsh_textbuf_t *b;
  CHECK_EQ_INT(dsh_textbuf_new(max_bytes, max_lines, &b), DSH_OK);
  return b;
}

static void app(dsh_textbuf_t *b, const char *s) {
  CHECK_EQ_INT(dsh_textbuf_append(b, (const uint8_t *)s, strlen(s)), DSH_OK);
}

static void check_page(dsh_textbuf_t *b, uint64_t skip, uint64_t count, const char *want,
                       uint64_t want_got) {
  const uint8_t *p;
  size_t n;
  uint64_t got;
  CHECK_EQ_INT(dsh_textbuf_tail_lines(b, skip, count, &p, &n, &got), DSH_OK);
  CHECK_MEM(p, n, want, strlen(want));
  CHECK_EQ_INT(got, want_got);
}

static void test_textbuf(void) {
  dsh_textbuf_t *b = tbuf(1000, 3);
  dsh_textbuf_stats_t st;
  check_page(b, 0, 5, "", 0);
  app(b, "a\nb\nc");
  dsh_textbuf_stats(b, &st);
  CHECK_EQ_INT(st.lines, 3);
  CHECK_EQ_INT(st.truncated, 0);
  check_page(b, 0, 2, "b\nc", 2);
  check_page(b, 1, 5, "a\nb", 2);
  check_page(b, 2, 5, "a", 1);
  check_page(b, 3, 5, "", 0);
  app(b, "\n");
  check_page(b, 0, 1, "c", 1); /* the LF ends line c; no empty line after it */
  app(b, "d\n");
  dsh_textbuf_stats(b, &st);
  CHECK_EQ_INT(st.lines, 3);
  CHECK_EQ_INT(st.truncated, 1);
  check_page(b, 0, 10, "b\nc\nd", 3);
  app(b, "\n\n");
  check_page(b, 0, 10, "d\n\n", 3); /* two empty lines */
  dsh_textbuf_clear(b);
  dsh_textbuf_stats(b, &st);
  CHECK_EQ_INT(st.bytes, 0);
  CHECK_EQ_INT(st.lines, 0);
  dsh_textbuf_free(b);

  /* bytes: the tail, never starting inside a code point */
  b = tbuf(7, 0);
  app(b, "ab\xe4\xbd\xa0");
  app(b, "\xe5\xa5\xbd");
  const uint8_t *p;
  size_t n;
  dsh_textbuf_data(b, &p, &n);
  CHECK_MEM(p, n, "b\xe4\xbd\xa0\xe5\xa5\xbd", 7);
  app(b, "x");
  dsh_textbuf_data(b, &p, &n);
  CHECK_MEM(p, n, "\xe4\xbd\xa0\xe5\xa5\xbdx", 7);
  app(b, "yz");
  dsh_textbuf_data(b, &p, &n);
  CHECK_MEM(p, n, "\xe5\xa5\xbdxyz", 6);
  app(b, "0123456789\xe4\xbd\xa0"); /* longer than the limit on its own */
  dsh_textbuf_data(b, &p, &n);
  CHECK_MEM(p, n, "6789\xe4\xbd\xa0", 7);
  dsh_textbuf_stats(b, &st);
  CHECK_EQ_INT(st.appended, 5 + 3 + 1 + 2 + 13);
  CHECK_EQ_INT(st.dropped + st.bytes, st.appended);
  dsh_textbuf_free(b);

  /* a 3-byte character with a 2-byte limit leaves nothing */
  b = tbuf(2, 0);
  app(b, "\xe4\xbd\xa0");
  dsh_textbuf_data(b, &p, &n);
  CHECK_EQ_INT(n, 0);
  dsh_textbuf_free(b);

  /* many appends to a full buffer stay within the limits */
  b = tbuf(4096, 100);
  char line[32];
  for (int i = 0; i < 100000; i++) {
    int k = snprintf(line, sizeof line, "line %d\n", i);
    CHECK_EQ_INT(dsh_textbuf_append(b, (const uint8_t *)line, (size_t)k), DSH_OK);
  }
  dsh_textbuf_stats(b, &st);
  CHECK_EQ_INT(st.lines, 100);
  CHECK(st.bytes <= 4096);
  check_page(b, 0, 2, "line 99998\nline 99999", 2);
  check_page(b, 99, 5, "line 99900", 1);
  dsh_textbuf_free(b);

  CHECK_EQ_INT(dsh_textbuf_new(0, 0, &b), DSH_EINVAL);
}

int main(void) {
  test_pins();
  test_escapes();
  test_splits();
  test_long();
  test_textbuf();
  CHECK_DONE();
}
