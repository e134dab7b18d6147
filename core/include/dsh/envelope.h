/* envelope.h: Connect streaming envelopes (envd-protocol.md §1.6).
 *
 * An envelope is a 5-byte prefix -- flags, then the payload length as a 32-bit
 * big-endian integer -- followed by the payload. Flag 0x02 marks the
 * end-of-stream message (reported through *flags, not an error); 0x01
 * (compressed) is rejected; any other bit is a framing error. Statuses and
 * messages (sticky, see dsh_envelope_decoder_error):
 *   DSH_ECOMPRESSED "compressed envelope not supported"
 *   DSH_ELIMIT      "envelope of N bytes exceeds the M-byte limit"
 *   DSH_EFRAME      "envelope has unknown flags 0xNN"
 *   DSH_ETRUNCATED  "stream ended inside an envelope"
 * A header is checked as soon as its 5 bytes are buffered.
 *
 * Use: push(chunk), then next() until it returns 0 (or an error), then push the
 * next chunk; finish() at end of stream. push copies the chunk (it may be
 * reused at once); pushing or finishing before next() has returned 0 is misuse
 * (DSH_ESTATE, not sticky). So the buffer never holds more than one partial
 * envelope (<= max_message_bytes + 5) plus one chunk. The caller owns the
 * decoder; free it with dsh_envelope_decoder_free. */
#ifndef DSH_ENVELOPE_H
#define DSH_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_envelope_decoder dsh_envelope_decoder_t;

/* Writes the 5-byte prefix of an envelope. */
void dsh_envelope_header(uint8_t flags, uint32_t len, uint8_t out[5]);

int dsh_envelope_decoder_new(uint32_t max_message_bytes, dsh_envelope_decoder_t **out);
void dsh_envelope_decoder_free(dsh_envelope_decoder_t *d);

/* DSH_OK, a sticky error, DSH_ESTATE or DSH_ENOMEM. */
int dsh_envelope_decoder_push(dsh_envelope_decoder_t *d, const uint8_t *data, size_t n);

/* 1: lends the next envelope (payload valid until the next call on d);
 * 0: none complete (push more); < 0: error. */
int dsh_envelope_decoder_next(dsh_envelope_decoder_t *d, uint8_t *flags, const uint8_t **payload,
                              uint32_t *len);

/* End of stream: DSH_ETRUNCATED if part of an envelope is buffered. Whether an
 * end-of-stream envelope arrived is the caller's business. */
int dsh_envelope_decoder_finish(dsh_envelope_decoder_t *d);

/* The sticky status (DSH_OK if none) and its message ("" if none). */
int dsh_envelope_decoder_status(const dsh_envelope_decoder_t *d);
const char *dsh_envelope_decoder_error(const dsh_envelope_decoder_t *d);

#endif
