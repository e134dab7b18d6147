/* test_tty.c: raw mode and its undo on a real pseudo-terminal, the window
 * size, and non-blocking reads (again, data, end of file). */
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/tty.h"

int main(void) {
  int master, slave;
  struct winsize ws = {.ws_row = 30, .ws_col = 100};
  CHECK(openpty(&master, &slave, NULL, NULL, &ws) == 0);
  CHECK_EQ_INT(dsh_tty_isatty(slave), 1);
  uint16_t rows = 0, cols = 0;
  CHECK_EQ_INT(dsh_tty_size(slave, &rows, &cols), DSH_OK);
  CHECK_EQ_INT(rows, 30);
  CHECK_EQ_INT(cols, 100);
  struct termios before, during, after;
  tcgetattr(slave, &before);
  CHECK(before.c_lflag & ECHO);
  dsh_tty_t *saved;
  CHECK_EQ_INT(dsh_tty_raw(slave, &saved), DSH_OK);
  tcgetattr(slave, &during);
  CHECK(!(during.c_lflag & (ECHO | ICANON | ISIG)));
  CHECK_EQ_INT(dsh_tty_restore(saved), DSH_OK);
  tcgetattr(slave, &after);
  CHECK_EQ_INT(after.c_lflag, before.c_lflag);

  int p[2];
  CHECK(pipe(p) == 0);
  CHECK_EQ_INT(dsh_tty_isatty(p[0]), 0);
  CHECK_EQ_INT(dsh_tty_raw(p[0], &saved), DSH_ESYS);
  CHECK_EQ_INT(dsh_tty_size(p[0], &rows, &cols), DSH_ESYS);
  CHECK_EQ_INT(dsh_fd_nonblock(p[0], 1), DSH_OK);
  uint8_t buf[8];
  size_t n;
  CHECK_EQ_INT(dsh_fd_read(p[0], buf, sizeof buf, &n), DSH_EAGAIN);
  CHECK(write(p[1], "hi", 2) == 2);
  CHECK_EQ_INT(dsh_fd_read(p[0], buf, sizeof buf, &n), DSH_OK);
  CHECK_MEM(buf, n, "hi", 2);
  close(p[1]);
  CHECK_EQ_INT(dsh_fd_read(p[0], buf, sizeof buf, &n), DSH_EEOF);
  close(p[0]);
  close(master);
  close(slave);
  CHECK_DONE();
}
