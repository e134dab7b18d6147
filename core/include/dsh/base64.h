/* base64.h: RFC 4648 base64, standard alphabet, canonical padded output.
 *
 * dsh_base64_decode is strict (what the frame decoder and envd's writer need):
 * length a multiple of 4, standard alphabet only, no whitespace, '=' only as
 * the last one or two characters, and the unused bits of the last symbol zero
 * ("YQ==" decodes, "YR==" does not). dsh_base64_decode_loose is for protobuf
 * JSON `bytes` fields: standard or URL-safe alphabet, padded or not.
 *
 * No allocation: the caller owns src and dst and sizes dst with
 * dsh_base64_encoded_len / dsh_base64_decoded_max. Thread-safe. */
#ifndef DSH_BASE64_H
#define DSH_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Characters needed to encode n bytes (padded): 4 * ceil(n / 3). */
size_t dsh_base64_encoded_len(size_t n);

/* Writes dsh_base64_encoded_len(n) characters to dst (no NUL); returns that
 * length. */
size_t dsh_base64_encode(const uint8_t *src, size_t n, char *dst);

/* An upper bound on the bytes n characters decode to: 3 * ceil(n / 4). */
size_t dsh_base64_decoded_max(size_t n);

/* Strict decode. DSH_OK with *out_n bytes in dst, or DSH_EBASE64 (dst may then
 * hold garbage). dst must hold dsh_base64_decoded_max(n) bytes. */
int dsh_base64_decode(const char *src, size_t n, uint8_t *dst, size_t *out_n);

/* Loose decode: '+' '/' or '-' '_' (either, even mixed), with or without
 * padding; when padded, the length must be a multiple of 4. Rejects whitespace,
 * other characters and impossible lengths (4k+1). Unused low bits are ignored. */
int dsh_base64_decode_loose(const char *src, size_t n, uint8_t *dst, size_t *out_n);

/* Turns the vector paths (AVX2 on x86-64, used by default when the CPU has it)
 * on or off for the whole process; returns 1 if they are now in use. Results
 * never depend on it; tests and the benchmark use it to compare both paths. */
int dsh_base64_use_simd(int enable);

#endif
