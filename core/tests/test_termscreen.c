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

int main(void) {
  test_basics();
  test_altscreen_and_replies();
  test_reflow();
  CHECK_DONE();
}
