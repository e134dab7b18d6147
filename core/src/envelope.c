/* envelope.c: the Connect envelope decoder and header encoder (envd §1.6).
 *
 * push copies the chunk once behind the buffered partial envelope (which is
 * moved to the front first); next reads a 5-byte header, checks it, and lends
 * the payload in place when all of it is buffered. No per-byte work. Uses only
 * libc and dsh_fail. Must never read past its buffer, hold more than one
 * partial envelope plus one chunk, or lend a payload whose header failed. */
#include "dsh/envelope.h"

#include <stdlib.h>
#include <string.h>

#include "dsh/buf.h"
#include "dsh/errors.h"
#include "dsh/fail.h"

#define SHRINK_ABOVE (8u << 20) /* idle buffers bigger than this are released */

struct dsh_envelope_decoder {
  uint32_t max;
  dsh_buf_t in; /* unconsumed input */
  int status;   /* sticky */
  int drained;  /* next() returned 0 since the last push */
  char msg[96];
};

void dsh_envelope_header(uint8_t flags, uint32_t len, uint8_t out[5]) {
  out[0] = flags;
  out[1] = (uint8_t)(len >> 24);
  out[2] = (uint8_t)(len >> 16);
  out[3] = (uint8_t)(len >> 8);
  out[4] = (uint8_t)len;
}

int dsh_envelope_decoder_new(uint32_t max, dsh_envelope_decoder_t **out) {
  dsh_envelope_decoder_t *d = calloc(1, sizeof *d);
  *out = d;
  if (!d) return DSH_ENOMEM;
  d->max = max;
  d->drained = 1;
  return DSH_OK;
}

void dsh_envelope_decoder_free(dsh_envelope_decoder_t *d) {
  if (!d) return;
  dsh_buf_free(&d->in);
  free(d);
}

int dsh_envelope_decoder_status(const dsh_envelope_decoder_t *d) {
  return d->status;
}

const char *dsh_envelope_decoder_error(const dsh_envelope_decoder_t *d) {
  return d->status ? d->msg : "";
}

int dsh_envelope_decoder_push(dsh_envelope_decoder_t *d, const uint8_t *data, size_t n) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (n == 0) return DSH_OK;
  /* drained: at most one partial envelope is buffered */
  if (dsh_buf_append(&d->in, data, n, (size_t)d->max + 5 + n) != DSH_OK) return DSH_ENOMEM;
  d->drained = 0;
  return DSH_OK;
}

static int more(dsh_envelope_decoder_t *d) {
  d->drained = 1;
  dsh_buf_shrink(&d->in, SHRINK_ABOVE);
  return 0;
}

int dsh_envelope_decoder_next(dsh_envelope_decoder_t *d, uint8_t *flags, const uint8_t **payload,
                              uint32_t *len) {
  *flags = 0;
  *payload = NULL;
  *len = 0;
  if (d->status) return d->status;
  size_t avail = d->in.len;
  if (avail < 5) return more(d);
  const uint8_t *h = dsh_buf_data(&d->in);
  uint32_t n = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
  if (h[0] & ~0x03u)
    return d->status = dsh_fail(d->msg, sizeof d->msg, DSH_EFRAME,
                                "envelope has unknown flags 0x%02x", h[0]);
  if (h[0] & 0x01)
    return d->status = dsh_fail(d->msg, sizeof d->msg, DSH_ECOMPRESSED,
                                "compressed envelope not supported");
  if (n > d->max)
    return d->status = dsh_fail(d->msg, sizeof d->msg, DSH_ELIMIT,
                                "envelope of %u bytes exceeds the %u-byte limit", n, d->max);
  if (avail - 5 < n) return more(d);
  *flags = h[0];
  *payload = h + 5;
  *len = n;
  dsh_buf_drop(&d->in, 5 + (size_t)n); /* the payload stays put until the next call */
  return 1;
}

int dsh_envelope_decoder_finish(dsh_envelope_decoder_t *d) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (d->in.len)
    return d->status =
               dsh_fail(d->msg, sizeof d->msg, DSH_ETRUNCATED, "stream ended inside an envelope");
  return DSH_OK;
}
