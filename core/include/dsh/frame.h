/* frame.h: NDJSON-base64 frames (harness-behaviour.md §3.1), the framing of the
 * code-runner and LSP-proxy channels.
 *
 * A frame is base64(utf8(JSON)) followed by "\n". The decoder is incremental,
 * bounded and strict, and reports the reference's exact messages:
 *   DSH_ENONASCII  "E2B frame stream contained non-ASCII data"
 *   DSH_EBASE64    "E2B frame contained invalid base64 or exceeded its byte limit"
 *   DSH_ELIMIT     "E2B frame exceeded its byte limit"
 *   DSH_EUTF8      "E2B frame contained invalid UTF-8"
 *   DSH_EJSON      "E2B frame contained invalid JSON"
 *   DSH_ETRUNCATED "E2B frame stream ended mid-frame"
 *   DSH_EINVAL     "E2B frame maxFrameBytes must be a positive safe integer"
 * Errors are sticky: once one is reported every later call returns it.
 *
 * Use: push(chunk), then next() until it returns 0 (or an error), then push the
 * next chunk; finish() at end of stream. push copies the chunk, so it may be
 * reused at once. Pushing or finishing before next() has returned 0 is misuse
 * (DSH_ESTATE, not sticky): this keeps the buffer within maxEncodedChars plus
 * one chunk. The decoder owns its buffers; the caller owns the decoder and
 * frees it with dsh_frame_decoder_free. */
#ifndef DSH_FRAME_H
#define DSH_FRAME_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_frame_decoder dsh_frame_decoder_t;

/* DSH_OK if 1 <= max_frame_bytes <= 2^53 - 1, else DSH_EINVAL. */
int dsh_frame_check_max(uint64_t max_frame_bytes);

/* The reference message for a frame status ("" for DSH_OK; dsh_strerror's text
 * for statuses frames do not produce). Static string. */
const char *dsh_frame_message(int status);

/* max_frame_bytes bounds the decoded JSON of one frame. DSH_EINVAL (bad max),
 * DSH_ENOMEM. */
int dsh_frame_decoder_new(uint64_t max_frame_bytes, dsh_frame_decoder_t **out);
void dsh_frame_decoder_free(dsh_frame_decoder_t *d);

/* Rejects the whole chunk if any byte is not '\n' or 0x20..0x7E, then buffers
 * it. DSH_OK, a sticky error, DSH_ESTATE or DSH_ENOMEM. */
int dsh_frame_decoder_push(dsh_frame_decoder_t *d, const uint8_t *data, size_t n);

/* 1: lends the next frame's JSON text (valid until the next call on d);
 * 0: no complete frame left (push more); < 0: error. */
int dsh_frame_decoder_next(dsh_frame_decoder_t *d, const uint8_t **json, size_t *len);

/* End of stream: DSH_ETRUNCATED if a partial frame is buffered. */
int dsh_frame_decoder_finish(dsh_frame_decoder_t *d);

/* The sticky status (DSH_OK if none) and its message ("" if none). */
int dsh_frame_decoder_status(const dsh_frame_decoder_t *d);
const char *dsh_frame_decoder_error(const dsh_frame_decoder_t *d);

/* Bytes dsh_frame_encode writes for n bytes of JSON: base64 length + 1. */
size_t dsh_frame_encoded_len(size_t n);

/* Encodes n bytes of JSON text (not checked: the caller serialised it) as one
 * frame. DSH_EINVAL (bad max, or cap < dsh_frame_encoded_len(n)), DSH_ELIMIT
 * (n > max_frame_bytes). */
int dsh_frame_encode(const uint8_t *json, size_t n, uint64_t max_frame_bytes, char *out, size_t cap,
                     size_t *out_n);

#endif
