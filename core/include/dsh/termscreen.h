/* termscreen.h: the screen a terminal shows, from the bytes a PTY printed.
 *
 * A small wrapper around libvterm (whose own headers use bitfields, which the
 * FFI cannot declare): feed it the raw output, read the visible rows as UTF-8
 * text and the cursor. Full-screen programs (vim, less, top) draw on the
 * alternate screen; the rows are whichever screen is showing. Resizing the
 * normal screen reflows it: rows whose last cell is filled are taken to
 * continue on the next row (libvterm 0.1 keeps no wrap flags), joined into
 * logical lines and laid out again at the new width, keeping the cursor's
 * place and as many lines above it as fit. The alternate screen is only
 * resized (its program redraws on SIGWINCH). Answers the terminal owes the
 * program (cursor position reports, device attributes) are collected as
 * replies for the owner to write back to the PTY (at most 64 KiB are kept).
 *
 * Linked into the FFI library only, never into dshd (which has no screen).
 * Ownership: the caller owns the screen and frees it with dsh_screen_free().
 * Pointers it lends stay valid until the next call on the same screen. */
#ifndef DSH_TERMSCREEN_H
#define DSH_TERMSCREEN_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_screen dsh_screen_t;

typedef struct dsh_screen_info {
  uint16_t rows, cols;
  uint16_t cursor_row, cursor_col; /* 0-based */
  int32_t cursor_visible;
  int32_t altscreen; /* the alternate screen is showing */
  uint64_t fed;      /* bytes fed in total */
  uint64_t changes;  /* grows whenever a cell or the cursor changed */
} dsh_screen_info_t;

/* rows, cols in 1..1000. DSH_EINVAL or DSH_ENOMEM. */
int dsh_screen_new(uint16_t rows, uint16_t cols, dsh_screen_t **out);
void dsh_screen_free(dsh_screen_t *s);

int dsh_screen_feed(dsh_screen_t *s, const uint8_t *data, size_t n);

/* rows, cols in 1..1000; reflows the normal screen (see above). */
int dsh_screen_resize(dsh_screen_t *s, uint16_t rows, uint16_t cols);

int dsh_screen_info(const dsh_screen_t *s, dsh_screen_info_t *out);

/* The visible rows, each without trailing blanks, joined by LF (rows - 1 of
 * them), lent. */
int dsh_screen_text(dsh_screen_t *s, const uint8_t **text, size_t *n);

/* Replies for the program, lent; consume_replies empties them. */
int dsh_screen_replies(const dsh_screen_t *s, const uint8_t **data, size_t *n);
void dsh_screen_consume_replies(dsh_screen_t *s);

#endif
