-- Declarations of core/include/dsh/sha256.h for ffi.cdef.
return [[
typedef struct dsh_sha256 {
  uint32_t h[8];
  uint64_t nbytes;
  uint8_t buf[64];
  uint32_t nbuf;
} dsh_sha256_t;
void dsh_sha256_init(dsh_sha256_t *c);
void dsh_sha256_update(dsh_sha256_t *c, const uint8_t *data, size_t n);
void dsh_sha256_final(dsh_sha256_t *c, uint8_t out[32]);
void dsh_sha256(const uint8_t *data, size_t n, uint8_t out[32]);
]]
