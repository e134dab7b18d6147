/* lspframe.h: LSP base-protocol framing, "Content-Length: N\r\n\r\n" + body
 * (harness-behaviour.md §2.5). The body is lent as bytes; the caller parses
 * the JSON.
 *
 * The header block (up to and including the blank line) may be at most 65536
 * bytes. Header names are case-insensitive; lines end with CRLF; headers other
 * than Content-Length (and lines without a colon) are ignored. Content-Length
 * must be present and plain decimal digits, optionally surrounded by spaces or
 * tabs; a repeated Content-Length must agree. Statuses and messages (sticky,
 * see dsh_lsp_decoder_error):
 *   DSH_ELIMIT     "LSP header block exceeds 65536 bytes"
 *   DSH_EFRAME     "LSP message has a missing or invalid Content-Length"
 *   DSH_ELIMIT     "LSP message of N bytes exceeds the M-byte limit"
 *   DSH_ETRUNCATED "LSP stream ended mid-message"
 *
 * Use: push(chunk), then next() until it returns 0 (or an error), then push the
 * next chunk; finish() at end of stream. push copies the chunk; pushing or
 * finishing before next() has returned 0 is misuse (DSH_ESTATE, not sticky).
 * The buffer then never holds more than one header block or one body plus one
 * chunk. The caller owns the decoder; free it with dsh_lsp_decoder_free. */
#ifndef DSH_LSPFRAME_H
#define DSH_LSPFRAME_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_lsp_decoder dsh_lsp_decoder_t;

/* max_message_bytes bounds one body. */
int dsh_lsp_decoder_new(uint64_t max_message_bytes, dsh_lsp_decoder_t **out);
void dsh_lsp_decoder_free(dsh_lsp_decoder_t *d);

/* DSH_OK, a sticky error, DSH_ESTATE or DSH_ENOMEM. */
int dsh_lsp_decoder_push(dsh_lsp_decoder_t *d, const uint8_t *data, size_t n);

/* 1: lends the next body (valid until the next call on d); 0: none complete;
 * < 0: error. */
int dsh_lsp_decoder_next(dsh_lsp_decoder_t *d, const uint8_t **body, size_t *len);

/* End of stream: DSH_ETRUNCATED if part of a message is buffered. */
int dsh_lsp_decoder_finish(dsh_lsp_decoder_t *d);

/* The sticky status (DSH_OK if none) and its message ("" if none). */
int dsh_lsp_decoder_status(const dsh_lsp_decoder_t *d);
const char *dsh_lsp_decoder_error(const dsh_lsp_decoder_t *d);

/* Writes "Content-Length: <body_len>\r\n\r\n" (no NUL). DSH_EINVAL if cap is
 * too small (40 bytes always suffice). */
int dsh_lsp_encode_header(size_t body_len, char *out, size_t cap, size_t *out_n);

#endif
