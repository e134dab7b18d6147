/* tty.h: the host's own terminal, for interactive commands (`dsh shell`):
 * raw mode and its undo, the window size, and non-blocking reads.
 *
 * dsh_tty_raw() puts fd's terminal in raw mode (no echo, no line editing, no
 * signals from keys, 8-bit bytes through) and returns the previous settings;
 * dsh_tty_restore() puts them back and frees them. The caller owns the saved
 * settings. Uses termios and ioctl only; never blocks. */
#ifndef DSH_TTY_H
#define DSH_TTY_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_tty dsh_tty_t;

/* 1 when fd is a terminal, else 0. */
int dsh_tty_isatty(int fd);

/* DSH_OK, DSH_ESYS (not a terminal, or tcsetattr failed) or DSH_ENOMEM. */
int dsh_tty_raw(int fd, dsh_tty_t **saved);

/* Restores the settings saved by dsh_tty_raw and frees them (NULL: nothing). */
int dsh_tty_restore(dsh_tty_t *saved);

/* The window size of fd's terminal; DSH_ESYS when unknown. */
int dsh_tty_size(int fd, uint16_t *rows, uint16_t *cols);

/* Makes fd non-blocking (on non-zero) or blocking. */
int dsh_fd_nonblock(int fd, int32_t on);

/* Reads up to cap bytes: DSH_OK with *n > 0, DSH_EAGAIN when nothing is
 * there now, DSH_EEOF at end of file, DSH_ESYS on an error. */
int dsh_fd_read(int fd, uint8_t *buf, size_t cap, size_t *n);

#endif
