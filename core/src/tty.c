/* tty.c: raw mode, window size and non-blocking reads of tty.h.
 * Uses termios, ioctl, fcntl and read only; never blocks. */
#include "dsh/tty.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "dsh/errors.h"

struct dsh_tty {
  int fd;
  struct termios saved;
};

int dsh_tty_isatty(int fd) {
  return isatty(fd) ? 1 : 0;
}

int dsh_tty_raw(int fd, dsh_tty_t **saved) {
  *saved = NULL;
  dsh_tty_t *t = malloc(sizeof *t);
  if (!t) return DSH_ENOMEM;
  t->fd = fd;
  if (tcgetattr(fd, &t->saved) != 0) {
    free(t);
    return DSH_ESYS;
  }
  struct termios raw = t->saved;
  cfmakeraw(&raw);
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  if (tcsetattr(fd, TCSANOW, &raw) != 0) {
    free(t);
    return DSH_ESYS;
  }
  *saved = t;
  return DSH_OK;
}

int dsh_tty_restore(dsh_tty_t *saved) {
  if (!saved) return DSH_OK;
  int rc = tcsetattr(saved->fd, TCSANOW, &saved->saved) == 0 ? DSH_OK : DSH_ESYS;
  free(saved);
  return rc;
}

int dsh_tty_size(int fd, uint16_t *rows, uint16_t *cols) {
  struct winsize ws;
  if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) return DSH_ESYS;
  *rows = ws.ws_row;
  *cols = ws.ws_col;
  return DSH_OK;
}

int dsh_fd_nonblock(int fd, int32_t on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return DSH_ESYS;
  fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
  return fcntl(fd, F_SETFL, fl) == 0 ? DSH_OK : DSH_ESYS;
}

int dsh_fd_read(int fd, uint8_t *buf, size_t cap, size_t *n) {
  *n = 0;
  for (;;) {
    ssize_t r = read(fd, buf, cap);
    if (r > 0) {
      *n = (size_t)r;
      return DSH_OK;
    }
    if (r == 0) return DSH_EEOF;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return DSH_EAGAIN;
    return DSH_ESYS;
  }
}
