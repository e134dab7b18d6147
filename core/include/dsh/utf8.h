/* utf8.h: strict UTF-8 validation, incremental projection of a byte stream onto
 * whole code points (strict or lossy), and code-point-safe cuts.
 *
 * "Strict" means RFC 3629: no overlong forms, no surrogates (U+D800..DFFF), no
 * code points above U+10FFFF. The lossy variant replaces each maximal invalid
 * subpart with U+FFFD exactly as the WHATWG TextDecoder does.
 *
 * No allocation. The state is a plain struct the caller owns (zero it to start);
 * Lua reads it directly. */
#ifndef DSH_UTF8_H
#define DSH_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* DSH_OK, or DSH_EUTF8 with *err_offset (if non-NULL) = offset of the first
 * byte of the first invalid or truncated sequence. */
int dsh_utf8_validate(const uint8_t *s, size_t n, size_t *err_offset);

/* Bytes of an incomplete (but so far valid) trailing sequence, carried between
 * feeds. npending is 0..3. */
typedef struct dsh_utf8_state {
  uint8_t pending[4];
  uint32_t npending;
} dsh_utf8_state_t;

/* Strict projection: writes to out the carried bytes plus the longest prefix of
 * in that ends on a code-point boundary, and carries an incomplete tail. out
 * needs n + 4 bytes (precisely n + st->npending); less -> DSH_EINVAL. An invalid
 * sequence -> DSH_EUTF8 with *out_n = 0 and st unchanged (the call had no
 * effect). */
int dsh_utf8_feed(dsh_utf8_state_t *st, const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                  size_t *out_n);

/* End of stream: DSH_EUTF8 if bytes are pending, else DSH_OK. Resets st. */
int dsh_utf8_finish(dsh_utf8_state_t *st);

/* Lossy projection for display: like dsh_utf8_feed but each maximal invalid
 * subpart becomes U+FFFD (EF BF BD). out needs 3 * n + 4 bytes; never fails
 * otherwise. */
int dsh_utf8_feed_lossy(dsh_utf8_state_t *st, const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                        size_t *out_n);

/* End of a lossy stream: writes U+FFFD if bytes are pending (out needs 3 bytes),
 * resets st. */
int dsh_utf8_finish_lossy(dsh_utf8_state_t *st, uint8_t *out, size_t cap, size_t *out_n);

/* Cuts. A "unit" is a complete valid sequence, or any other single byte (so the
 * functions are safe on invalid input and never split a valid code point).
 * prefix_len: the largest k <= max (and <= n) at a unit boundary.
 * tail_start: the smallest i >= n - max (clamped at 0) at a unit boundary; the
 * rest of a code point cut by n - max is skipped forward. */
size_t dsh_utf8_prefix_len(const uint8_t *s, size_t n, size_t max);
size_t dsh_utf8_tail_start(const uint8_t *s, size_t n, size_t max);

#endif
