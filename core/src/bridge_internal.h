/* bridge_internal.h: what bridge.c (frames: input, base64, UTF-8, lines) and
 * bridge_json.c (the JSON tokenizer over the decoded bytes) share. Not
 * installed, not FFI. */
#ifndef DSH_BRIDGE_INTERNAL_H
#define DSH_BRIDGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dsh/bridge.h"

#define MAX_DEPTH 100000
#define TOKENS_PER_CALL 4096 /* tokens one next() lends at most (soft) */

/* Failure ranks, in frame.h's order of checks (higher is checked first). */
enum { R_NONE, R_JSON, R_UTF8, R_LIMIT, R_BASE64 };

/* Tokenizer phases. */
enum { P_VALUE, P_ARRAY_FIRST, P_OBJECT_FIRST, P_KEY, P_COLON, P_AFTER, P_DONE };

struct dsh_bridge_decoder {
  uint64_t max, max_enc;
  int status; /* sticky */
  int drained;
  /* the pushed chunk, consumed from in_off */
  uint8_t *in;
  size_t in_len, in_off, in_cap;
  /* the current line */
  uint64_t enc, dec;
  char quad[4];
  uint32_t nquad, padded;
  int rank; /* worst failed check so far */
  /* decoded bytes: checked up to u8, tokenized up to r */
  uint8_t *text;
  size_t tlen, tcap, u8, r;
  /* tokenizer */
  int phase, in_str, str_key;
  uint32_t wtf8;
  size_t sstart, sw; /* the open string's first byte and write position */
  uint64_t depth;
  uint8_t stack[MAX_DEPTH / 8 + 1]; /* bit d: level d is an object */
  /* tokens lent by the last next() */
  dsh_bridge_token_t *toks;
  size_t ntok, tok_cap;
};

/* Appends a token to the batch next() lends; NULL when out of memory. */
dsh_bridge_token_t *dsh_bridge_token(dsh_bridge_decoder_t *d, int kind);

/* Tokenizes text[r, lim). 1: stopped at the token cap; 0: used what it could
 * (more bytes needed, or none left); -1: bad JSON; -2: out of memory. eof: the
 * line ended at lim (a number or literal ends there). */
int dsh_bridge_tokenize(dsh_bridge_decoder_t *d, size_t lim, int eof);

#endif
