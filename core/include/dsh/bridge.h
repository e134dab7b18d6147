/* bridge.h: the Code Mode bridge in C, both ways, so the host never looks at
 * a payload byte in Lua.
 *
 * Decoder: NDJSON-base64 frames (frame.h's format, checks and messages) in,
 * a stream of JSON tokens out, as the bytes arrive. push() buffers a chunk
 * (rejected whole if any byte is not '\n' or 0x20..0x7E); next() decodes a
 * bounded amount of it (base64, strict UTF-8, JSON with its escapes and
 * numbers) and lends the tokens it completed. A frame that passed every
 * check ends with a DSH_BRIDGE_FRAME token. A frame that fails a check stops
 * the decoder with frame.h's status for it (sticky; dsh_frame_message gives
 * the reference's text), chosen in the order frame.h's decoder checks a line:
 * base64 (and length) first, then the byte bound, UTF-8, JSON. Tokens of a
 * frame are lent before its last check has run: a consumer builds
 * tentatively and drops what it built when next() fails before the frame's
 * DSH_BRIDGE_FRAME token. A line longer than maxEncodedChars is refused as
 * soon as it is seen (DSH_EBASE64 when its '\n' is in the chunk, else
 * DSH_ELIMIT), so the decoder holds at most one chunk plus the string,
 * number or escape that is open, however long the frame.
 *
 * Tokens: scalars and keys are one token each; a container is its opening
 * token, its children, then DSH_BRIDGE_END (an object's children are KEY,
 * value pairs). A string's bytes are text(d) + off, len (escapes decoded; a
 * lone surrogate escape leaves WTF-8 and sets wtf8), valid until the next
 * call on the decoder. Numbers are doubles (strtod in the C locale: JSON
 * "-0" is -0 and "1e400" is infinity; the consumer judges them).
 *
 * Encoder: JSON text built from pieces (raw syntax the caller wrote, strings
 * escaped as JSON.stringify does after a strict UTF-8 check, numbers written
 * as ECMAScript's Number::toString writes them), bounded by max_frame_bytes,
 * then handed out as the frame's base64 in pieces, the last one ending with
 * '\n'. It holds the JSON text once; no piece is larger than asked for.
 *
 * Both own their buffers; the caller owns each object and frees it with its
 * _free. Nothing here allocates without bound, recurses, or reads past what
 * it was given. */
#ifndef DSH_BRIDGE_H
#define DSH_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

enum dsh_bridge_kind {
  DSH_BRIDGE_NULL = 1,
  DSH_BRIDGE_FALSE = 2,
  DSH_BRIDGE_TRUE = 3,
  DSH_BRIDGE_NUMBER = 4,
  DSH_BRIDGE_STRING = 5,
  DSH_BRIDGE_KEY = 6,
  DSH_BRIDGE_ARRAY = 7,
  DSH_BRIDGE_OBJECT = 8,
  DSH_BRIDGE_END = 9,
  DSH_BRIDGE_FRAME = 10
};

typedef struct dsh_bridge_token {
  int32_t kind;  /* enum dsh_bridge_kind */
  uint32_t wtf8; /* strings and keys: 1 if a lone surrogate escape was decoded */
  double num;    /* numbers */
  uint64_t off;  /* strings and keys: bytes at dsh_bridge_decoder_text() + off */
  uint64_t len;
} dsh_bridge_token_t;

typedef struct dsh_bridge_decoder dsh_bridge_decoder_t;

/* max_frame_bytes bounds the decoded JSON of one frame (1 .. 2^53 - 1, else
 * DSH_EINVAL). DSH_ENOMEM. */
int dsh_bridge_decoder_new(uint64_t max_frame_bytes, dsh_bridge_decoder_t **out);
void dsh_bridge_decoder_free(dsh_bridge_decoder_t *d);

/* Buffers a chunk (copied). DSH_OK, the sticky status, DSH_ENONASCII (sticky),
 * DSH_ENOMEM, or DSH_ESTATE (not sticky) when next() has not returned 0 since
 * the last push. */
int dsh_bridge_decoder_push(dsh_bridge_decoder_t *d, const uint8_t *data, size_t n);

/* Decodes at most about 1 MiB of the buffered input and lends the tokens it
 * completed (*toks, *n; possibly none). 1: input is left, call again; 0: the
 * input is used up, push more; < 0: a frame failed (the status, sticky); the
 * tokens lent with it are still valid. */
int dsh_bridge_decoder_next(dsh_bridge_decoder_t *d, const dsh_bridge_token_t **toks, size_t *n);

/* The lent tokens are read: releases what they held (a frame's long string)
 * now rather than at the next call. Lends nothing afterwards. */
void dsh_bridge_decoder_trim(dsh_bridge_decoder_t *d);

/* The base of the lent strings (valid until the next call on d). */
const uint8_t *dsh_bridge_decoder_text(const dsh_bridge_decoder_t *d);

/* End of stream: DSH_ETRUNCATED if a partial frame was pushed; the sticky
 * status; DSH_ESTATE before next() returned 0. */
int dsh_bridge_decoder_finish(dsh_bridge_decoder_t *d);

/* The sticky status (DSH_OK if none). */
int dsh_bridge_decoder_status(const dsh_bridge_decoder_t *d);

/* Bytes the decoder holds (its buffers' capacity), for accounting. */
uint64_t dsh_bridge_decoder_held(const dsh_bridge_decoder_t *d);

typedef struct dsh_bridge_encoder dsh_bridge_encoder_t;

/* DSH_EINVAL (bad max), DSH_ENOMEM. */
int dsh_bridge_encoder_new(uint64_t max_frame_bytes, dsh_bridge_encoder_t **out);
void dsh_bridge_encoder_free(dsh_bridge_encoder_t *e);

/* Starts a new frame (drops the text built so far; keeps a small buffer). */
void dsh_bridge_encoder_reset(dsh_bridge_encoder_t *e);

/* Appends JSON syntax as it is (not checked). DSH_OK, DSH_ELIMIT (the text
 * would pass max_frame_bytes; nothing appended), DSH_ENOMEM. */
int dsh_bridge_encoder_raw(dsh_bridge_encoder_t *e, const uint8_t *s, size_t n);

/* Appends (part of) a JSON string. The first call for a string writes its
 * opening quote; each call takes up to about 1 MiB of s, ending on a code
 * point, and says how much in *used; the call that takes the last byte (or
 * an empty s) writes the closing quote. DSH_OK, DSH_EUTF8 (s is not strict
 * UTF-8; the string stays open: reset before the next frame), DSH_ELIMIT,
 * DSH_ENOMEM. */
int dsh_bridge_encoder_string(dsh_bridge_encoder_t *e, const uint8_t *s, size_t n, size_t *used);

/* Appends a finite number other than -0 as JSON.stringify writes it.
 * DSH_EINVAL for NaN, infinities and -0; DSH_ELIMIT; DSH_ENOMEM. */
int dsh_bridge_encoder_number(dsh_bridge_encoder_t *e, double x);

/* Bytes of JSON text built so far. */
uint64_t dsh_bridge_encoder_len(const dsh_bridge_encoder_t *e);

/* The next piece of the frame: the base64 of the next JSON bytes, at most
 * cap characters (cap >= 5; the last piece also gets the '\n', within cap).
 * 1: more pieces follow; 0: that was the last (the encoder is then reset).
 * DSH_EINVAL (cap < 5). */
int dsh_bridge_encoder_emit(dsh_bridge_encoder_t *e, char *out, size_t cap, size_t *out_n);

#endif
