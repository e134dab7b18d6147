/* termtext.h: terminal output as text — the sanitizer that turns a PTY's
 * byte stream into plain lines, and the bounded, code-point-safe text buffer
 * that keeps its scrollback (harness-behaviour.md §2.4 "Shared helpers").
 *
 * Sanitizer. Removes CSI sequences (ESC [, bytes 0x20..0x3F, a final byte
 * 0x40..0x7E; any other byte cuts the sequence short and counts as usual), string
 * sequences (OSC ESC ], and DCS/SOS/PM/APC) ended by BEL or ST (ESC \), other
 * escapes (ESC, intermediates 0x20..0x2F, one final byte: ESC 7, ESC ( B),
 * and BEL. CR LF and a lone CR become LF; a CR at the end of a chunk is
 * carried to the next one (and flushed as LF). An OSC whose text starts
 * "133;D;" is the prompt marker: DSH_TSAN_PROMPT is set in the flags of the
 * feed that completes it; DSH_TSAN_PROMPT_TEXT is set when text other than
 * LF followed the latest marker (in that feed or a later one). A sequence
 * still unterminated at the end of a feed after more than max_pending bytes
 * is discarded through its terminator and cannot be a marker. Bytes >= 0x80
 * are never split from their code point: valid UTF-8 in, valid UTF-8 out.
 * The state is O(1): nothing of a sequence is buffered but the marker's
 * first bytes.
 *
 * Text buffer. The last max_bytes bytes of the text appended (cut on a code
 * point boundary) and, when max_lines > 0, at most that many lines. A line
 * ends at LF; text after the last LF is a line of its own. Lines are
 * addressed newest first, as pty reads page them.
 *
 * Ownership: the caller owns both objects and frees them with their _free
 * function. Pointers lent by the buffer are valid until the next call that
 * changes it. Uses libc and utf8.c only; never blocks. */
#ifndef DSH_TERMTEXT_H
#define DSH_TERMTEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_tsan dsh_tsan_t;

enum dsh_tsan_flags { DSH_TSAN_PROMPT = 1, DSH_TSAN_PROMPT_TEXT = 2 };

/* DSH_OK, DSH_EINVAL (max_pending 0) or DSH_ENOMEM. */
int dsh_tsan_new(uint32_t max_pending, dsh_tsan_t **out);
void dsh_tsan_free(dsh_tsan_t *s);

/* Sanitizes n bytes into out, which needs n + 1 bytes (less: DSH_EINVAL).
 * *flags gets the DSH_TSAN_* bits of this feed. */
int dsh_tsan_feed(dsh_tsan_t *s, const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                  size_t *out_n, uint32_t *flags);

/* End of stream: a carried CR becomes LF (out needs 1 byte), an unfinished
 * sequence is dropped; the sanitizer starts afresh. */
int dsh_tsan_flush(dsh_tsan_t *s, uint8_t *out, size_t cap, size_t *out_n, uint32_t *flags);

typedef struct dsh_textbuf dsh_textbuf_t;

typedef struct dsh_textbuf_stats {
  uint64_t bytes;    /* held now */
  uint64_t lines;    /* held now */
  uint64_t appended; /* bytes appended in total */
  uint64_t dropped;  /* bytes dropped from the front in total */
  int32_t truncated; /* anything was ever dropped */
} dsh_textbuf_stats_t;

/* max_bytes >= 1; max_lines 0 = no line limit. DSH_EINVAL or DSH_ENOMEM. */
int dsh_textbuf_new(uint64_t max_bytes, uint64_t max_lines, dsh_textbuf_t **out);
void dsh_textbuf_free(dsh_textbuf_t *b);

/* Appends text, then drops from the front what the limits require. Append
 * whole code points (a split one may leave the front starting inside it). */
int dsh_textbuf_append(dsh_textbuf_t *b, const uint8_t *s, size_t n);

/* Empties the buffer (the totals and truncated stay). */
void dsh_textbuf_clear(dsh_textbuf_t *b);

int dsh_textbuf_stats(const dsh_textbuf_t *b, dsh_textbuf_stats_t *st);

/* Everything held, lent. */
int dsh_textbuf_data(const dsh_textbuf_t *b, const uint8_t **data, size_t *n);

/* Lines counted from the newest: skips `skip` of them, then lends up to
 * `count` older ones, oldest first, joined by LF (no LF after the last);
 * *got is how many. */
int dsh_textbuf_tail_lines(const dsh_textbuf_t *b, uint64_t skip, uint64_t count,
                           const uint8_t **data, size_t *n, uint64_t *got);

#endif
