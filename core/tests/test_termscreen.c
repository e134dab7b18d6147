/* test_termscreen.c: rows as text with the cursor, wide characters, the
 * alternate screen, replies to queries, and reflow on resize. */
#include "check.h"
#include "dsh/errors.h"
#include "dsh/termscreen.h"

static void feed(dsh_screen_t *s, const char *in) {
  CHECK_EQ_INT(dsh_screen_feed(s, (const uint8_t *)in, strlen(in)), DSH_OK);
}

static void check_text(dsh_screen_t *s, const char *want) {
  const uint8_t *t;
  size_t n;
  CHECK_EQ_INT(dsh_screen_text(s, &t, &n), DSH_OK);
  CHECK_MEM(t, n, want, strlen(want));
}

static void check_cursor(dsh_screen_t *s, int row, int col) {
  dsh_screen_info_t in;
  dsh_screen_info(s, &in);
  CHECK_EQ_INT(in.cursor_row, row);
  CHECK_EQ_INT(in.cursor_col, col);
}

static void test_basics(void) {
  dsh_screen_t *s;
  CHECK_EQ_INT(dsh_screen_new(0, 80, &s), DSH_EINVAL);
  CHECK_EQ_INT(dsh_screen_new(4, 10, &s), DSH_OK);
  check_text(s, "\n\n\n");
  dsh_screen_info_t in;
  dsh_screen_info(s, &in);
  uint64_t changes = in.changes;
  feed(s, "hello\r\n\x1b[31mw\xc3\xb6rld\x1b[0m  \r\n\xe4\xbd\xa0\xe5\xa5\xbd!");
  check_text(s, "hello\nw\xc3\xb6rld\n\xe4\xbd\xa0\xe5\xa5\xbd!\n");
  check_cursor(s, 2, 5);
  dsh_screen_info(s, &in);
  CHECK(in.changes > changes);
  CHECK_EQ_INT(in.fed, 33);
  /* overwrite, clear to end of line, cursor moves */
  feed(s, "\x1b[1;1HJ\x1b[1;3H\x1b[K\x1b[4;9Hxy");
  check_text(s, "Je\nw\xc3\xb6rld\n\xe4\xbd\xa0\xe5\xa5\xbd!\n        xy");
  /* scrolling */
  feed(s, "\r\nlast");
  check_text(s, "w\xc3\xb6rld\n\xe4\xbd\xa0\xe5\xa5\xbd!\n        xy\nlast");
  dsh_screen_free(s);
}

static void test_altscreen_and_replies(void) {
  dsh_screen_t *s;
  dsh_screen_new(3, 20, &s);
  feed(s, "$ less file\r\n");
  feed(s, "\x1b[?1049h\x1b[H\x1b[2Jpage 1\r\n~\r\n(END)");
  dsh_screen_info_t in;
  dsh_screen_info(s, &in);
  CHECK_EQ_INT(in.altscreen, 1);
  check_text(s, "page 1\n~\n(END)");
  CHECK_EQ_INT(dsh_screen_resize(s, 4, 30), DSH_OK); /* the program redraws; no reflow */
  dsh_screen_info(s, &in);
  CHECK_EQ_INT(in.rows, 4);
  CHECK_EQ_INT(in.cols, 30);
  feed(s, "\x1b[?1049l");
  dsh_screen_info(s, &in);
  CHECK_EQ_INT(in.altscreen, 0);
  check_text(s, "$ less file\n\n\n");
  /* a cursor position report and device attributes are answered */
  feed(s, "\x1b[2;3H\x1b[6n");
  const uint8_t *r;
  size_t n;
  dsh_screen_replies(s, &r, &n);
  CHECK_MEM(r, n, "\x1b[2;3R", 6);
  dsh_screen_consume_replies(s);
  dsh_screen_replies(s, &r, &n);
  CHECK_EQ_INT(n, 0);
  feed(s, "\x1b[?25l");
  dsh_screen_info(s, &in);
  CHECK_EQ_INT(in.cursor_visible, 0);
  dsh_screen_free(s);
}

static void test_reflow(void) {
  dsh_screen_t *s;
  dsh_screen_new(5, 10, &s);
  /* a 23-character line wraps onto three rows; the prompt follows */
  feed(s, "abcdefghijklmnopqrstuvw\r\ndsh> ls");
  check_text(s, "abcdefghij\nklmnopqrst\nuvw\ndsh> ls\n");
  check_cursor(s, 3, 7);
  CHECK_EQ_INT(dsh_screen_resize(s, 5, 25), DSH_OK);
  check_text(s, "abcdefghijklmnopqrstuvw\ndsh> ls\n\n\n");
  check_cursor(s, 1, 7);
  /* narrower again: the lines above the cursor that fit are kept */
  CHECK_EQ_INT(dsh_screen_resize(s, 3, 8), DSH_OK);
  check_text(s, "ijklmnop\nqrstuvw\ndsh> ls");
  check_cursor(s, 2, 7);
  /* wide characters do not split across rows */
  dsh_screen_free(s);
  dsh_screen_new(2, 6, &s);
  feed(s, "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\xe5\xa5\xbd");
  check_text(s, "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\n\xe5\xa5\xbd");
  CHECK_EQ_INT(dsh_screen_resize(s, 2, 5), DSH_OK);
  check_text(s, "\xe4\xbd\xa0\xe5\xa5\xbd\n\xe4\xbd\xa0\xe5\xa5\xbd");
  check_cursor(s, 1, 4);
  CHECK_EQ_INT(dsh_screen_resize(s, 2, 1001), DSH_EINVAL);
  dsh_screen_free(s);
}

/* Jump scrolling: one big chunk (lines that scroll off skipped) shows what
 * the same bytes fed one at a time (never skipped) show. */
static uint32_t rnd_state = 12345;
static uint32_t rnd(void) {
  rnd_state = rnd_state * 1103515245u + 12345u;
  return rnd_state >> 8;
}

static void check_same(const char *in, size_t n, int rows, int cols) {
  dsh_screen_t *a, *b;
  dsh_screen_new((uint16_t)rows, (uint16_t)cols, &a);
  dsh_screen_new((uint16_t)rows, (uint16_t)cols, &b);
  dsh_screen_feed(a, (const uint8_t *)in, n);
  for (size_t i = 0; i < n; i++) dsh_screen_feed(b, (const uint8_t *)in + i, 1);
  const uint8_t *ta, *tb;
  size_t na, nb;
  dsh_screen_text(a, &ta, &na);
  char copy[8192];
  memcpy(copy, ta, na);
  dsh_screen_text(b, &tb, &nb);
  CHECK_MEM(copy, na, tb, nb);
  dsh_screen_info_t ia, ib;
  dsh_screen_info(a, &ia);
  dsh_screen_info(b, &ib);
  CHECK_EQ_INT(ia.cursor_row, ib.cursor_row);
  CHECK_EQ_INT(ia.cursor_col, ib.cursor_col);
  dsh_screen_free(a);
  dsh_screen_free(b);
}

static void test_jump_scroll(void) {
  static const char *pieces[] = {"word ",
                                 "\x1b[32mgreen\x1b[0m ",
                                 "\xe4\xbd\xa0",
                                 "\r\n",
                                 "\r\n",
                                 "\t",
                                 "0123456789012345678901234567890123456789",
                                 "\x1b[2;3H",
                                 "\x1b[K",
                                 "\x1b[1;4r",
                                 "\x1b[r",
                                 "\x1b[?1049h",
                                 "\x1b[?1049l",
                                 "\n",
                                 "\b"};
  char in[6000];
  for (int round = 0; round < 300; round++) {
    size_t n = 0;
    uint32_t odd = round % 3 == 0 ? 0 : round % 3 == 1 ? 2 : 50; /* per 1000: other sequences */
    while (n < sizeof in - 64) {
      uint32_t k = rnd() % 1000;
      /* mostly lines of text; now and then a cursor move, a scroll region, the alternate screen */
      int i = k < odd   ? 7 + (int)(rnd() % 8)
              : k < 300 ? 0
              : k < 450 ? 1
              : k < 550 ? 2
              : k < 800 ? 3
              : k < 900 ? 6
                        : 5;
      size_t len = strlen(pieces[i]);
      memcpy(in + n, pieces[i], len);
      n += len;
    }
    check_same(in, n, 4 + (int)(rnd() % 6), 10 + (int)(rnd() % 30));
  }
}

/* Characters cut between feeds at every byte, after text and at the start. */
static void test_cut_characters(void) {
  static const char word[] =
      "a\xc3\xa9\xe4\xbd\xa0\xf0\x9f\x99\x82"
      "b";
  size_t n = strlen(word);
  for (size_t i = 0; i <= n; i++) {
    for (size_t j = i; j <= n; j++) {
      dsh_screen_t *s;
      CHECK_EQ_INT(dsh_screen_new(2, 20, &s), DSH_OK);
      feed(s, "x ");
      CHECK_EQ_INT(dsh_screen_feed(s, (const uint8_t *)word, i), DSH_OK);
      CHECK_EQ_INT(dsh_screen_feed(s, (const uint8_t *)word + i, j - i), DSH_OK);
      CHECK_EQ_INT(dsh_screen_feed(s, (const uint8_t *)word + j, n - j), DSH_OK);
      check_text(s,
                 "x a\xc3\xa9\xe4\xbd\xa0\xf0\x9f\x99\x82"
                 "b\n");
      dsh_screen_free(s);
    }
  }
  /* a sequence that a new character breaks is not kept back: what follows shows */
  dsh_screen_t *s;
  CHECK_EQ_INT(dsh_screen_new(2, 20, &s), DSH_OK);
  feed(s, "a\xe4\xbd");
  feed(s, "b");
  const uint8_t *t;
  size_t tn;
  CHECK_EQ_INT(dsh_screen_text(s, &t, &tn), DSH_OK);
  CHECK(tn >= 3 && t[0] == 'a' && t[tn - 2] == 'b' && t[tn - 1] == '\n');
  dsh_screen_free(s);
}

int main(void) {
  test_cut_characters();
  test_jump_scroll();
  { /* a scroll region, then many lines: fed in full */
    char in[4000];
    size_t n = (size_t)snprintf(in, sizeof in, "\x1b[2;3r\x1b[5;1H");
    for (int i = 0; i < 200; i++) n += (size_t)snprintf(in + n, sizeof in - n, "line %d\r\n", i);
    check_same(in, n, 6, 20);
  }
  test_basics();
  test_altscreen_and_replies();
  test_reflow();
  CHECK_DONE();
}
