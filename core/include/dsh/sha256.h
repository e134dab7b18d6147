/* sha256.h: FIPS 180-4 SHA-256, one-shot and incremental.
 *
 * Used by the fs seam for content-independent version digests and available to
 * dshd (token comparison, URL signatures). No allocation, no global state: the
 * context is a plain struct the caller owns (stack or ffi.new), valid after
 * dsh_sha256_init and until dsh_sha256_final, which leaves it zeroed. Inputs
 * may be split anywhere. Thread-safe; FFI-parsable (no macros, fixed widths). */
#ifndef DSH_SHA256_H
#define DSH_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_sha256 {
  uint32_t h[8];   /* chaining state */
  uint64_t nbytes; /* total bytes fed so far */
  uint8_t buf[64]; /* partial block */
  uint32_t nbuf;   /* bytes in buf (0..63) */
} dsh_sha256_t;

void dsh_sha256_init(dsh_sha256_t *c);
void dsh_sha256_update(dsh_sha256_t *c, const uint8_t *data, size_t n);
/* Writes the 32-byte digest and wipes c (re-init before reuse). */
void dsh_sha256_final(dsh_sha256_t *c, uint8_t out[32]);

/* One shot: dsh_sha256_init + update + final. data may be NULL when n is 0. */
void dsh_sha256(const uint8_t *data, size_t n, uint8_t out[32]);

#endif
