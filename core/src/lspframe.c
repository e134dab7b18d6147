/* lspframe.c: LSP Content-Length framing (harness §2.5): decoder and header
 * encoder.
 *
 * The decoder scans for the blank line (resuming where the previous scan
 * stopped), parses the header block, checks the announced length against the
 * limit before any body byte is buffered, then lends the body in place. Uses
 * only libc and dsh_fail. Must never read past its buffer, parse JSON, or hold
 * more than one header block (<= 64 KiB) or body plus one chunk. */
#include "dsh/lspframe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsh/buf.h"
#include "dsh/errors.h"
#include "dsh/fail.h"

#define MAX_HEADER 65536
#define SHRINK_ABOVE (8u << 20) /* idle buffers bigger than this are released */

struct dsh_lsp_decoder {
  uint64_t max;
  dsh_buf_t in;  /* unconsumed input */
  size_t scan;   /* header: its first scan bytes hold no complete CRLFCRLF */
  uint64_t body; /* announced body length, valid when in_body */
  int in_body;
  int status;  /* sticky */
  int drained; /* next() returned 0 since the last push */
  char msg[128];
};

static const char BAD_LENGTH[] = "LSP message has a missing or invalid Content-Length";

int dsh_lsp_decoder_new(uint64_t max, dsh_lsp_decoder_t **out) {
  dsh_lsp_decoder_t *d = calloc(1, sizeof *d);
  *out = d;
  if (!d) return DSH_ENOMEM;
  d->max = max;
  d->drained = 1;
  return DSH_OK;
}

void dsh_lsp_decoder_free(dsh_lsp_decoder_t *d) {
  if (!d) return;
  dsh_buf_free(&d->in);
  free(d);
}

int dsh_lsp_decoder_status(const dsh_lsp_decoder_t *d) {
  return d->status;
}

const char *dsh_lsp_decoder_error(const dsh_lsp_decoder_t *d) {
  return d->status ? d->msg : "";
}

int dsh_lsp_decoder_push(dsh_lsp_decoder_t *d, const uint8_t *data, size_t n) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (n == 0) return DSH_OK;
  /* drained: at most one partial message (headers and body) is buffered */
  uint64_t extra = (uint64_t)MAX_HEADER + n;
  uint64_t bound = d->max > UINT64_MAX - extra ? UINT64_MAX : d->max + extra;
  if (dsh_buf_append(&d->in, data, n, bound > SIZE_MAX ? SIZE_MAX : (size_t)bound) != DSH_OK)
    return DSH_ENOMEM;
  d->drained = 0;
  return DSH_OK;
}

static int more(dsh_lsp_decoder_t *d) {
  d->drained = 1;
  dsh_buf_shrink(&d->in, SHRINK_ABOVE);
  return 0;
}

/* Offset of the first "\r\n\r\n" in p[from, n), or (size_t)-1. */
static size_t find_blank(const uint8_t *p, size_t from, size_t n) {
  while (from + 4 <= n) {
    const uint8_t *r = memchr(p + from, '\r', n - from - 3);
    if (!r) return (size_t)-1;
    size_t k = (size_t)(r - p);
    if (p[k + 1] == '\n' && p[k + 2] == '\r' && p[k + 3] == '\n') return k;
    from = k + 1;
  }
  return (size_t)-1;
}

static int is_ows(uint8_t c) {
  return c == ' ' || c == '\t';
}

static int bad_length(dsh_lsp_decoder_t *d) {
  return d->status = dsh_fail(d->msg, sizeof d->msg, DSH_EFRAME, "%s", BAD_LENGTH);
}

/* Parses the header lines in p[0, n) (CRLF-separated, no blank line). */
static int parse_headers(dsh_lsp_decoder_t *d, const uint8_t *p, size_t n) {
  static const char name[] = "content-length";
  const size_t name_len = sizeof name - 1;
  int seen = 0, overflow = 0;
  uint64_t len = 0;
  const uint8_t *digits = NULL;
  size_t ndigits = 0;
  size_t i = 0;
  while (i <= n) {
    size_t e = i;
    while (e + 1 < n && !(p[e] == '\r' && p[e + 1] == '\n')) e++;
    if (e + 1 >= n) e = n; /* the last line */
    const uint8_t *line = p + i;
    size_t ll = e - i;
    const uint8_t *colon = memchr(line, ':', ll);
    if (colon && (size_t)(colon - line) == name_len) {
      int match = 1;
      for (size_t k = 0; k < name_len && match; k++) {
        uint8_t c = line[k];
        if (c >= 'A' && c <= 'Z') c = (uint8_t)(c + 32);
        match = c == (uint8_t)name[k];
      }
      if (match) {
        const uint8_t *v = colon + 1, *ve = line + ll;
        while (v < ve && is_ows(*v)) v++;
        while (ve > v && is_ows(ve[-1])) ve--;
        if (v == ve) return bad_length(d);
        uint64_t x = 0;
        int ovf = 0;
        for (const uint8_t *q = v; q < ve; q++) {
          if (*q < '0' || *q > '9') return bad_length(d);
          if (x > (UINT64_MAX - 9) / 10) ovf = 1;
          x = ovf ? UINT64_MAX : x * 10 + (uint64_t)(*q - '0');
        }
        if (seen && (x != len || ovf != overflow)) return bad_length(d);
        seen = 1;
        len = x;
        overflow = ovf;
        digits = v;
        ndigits = (size_t)(ve - v);
      }
    }
    i = e + 2;
  }
  if (!seen) return bad_length(d);
  if (overflow || len > d->max) {
    while (ndigits > 1 && *digits == '0') digits++, ndigits--;
    if (ndigits > 40) ndigits = 40;
    return d->status = dsh_fail(d->msg, sizeof d->msg, DSH_ELIMIT,
                                "LSP message of %.*s bytes exceeds the %llu-byte limit",
                                (int)ndigits, (const char *)digits, (unsigned long long)d->max);
  }
  d->body = len;
  d->in_body = 1;
  return DSH_OK;
}

int dsh_lsp_decoder_next(dsh_lsp_decoder_t *d, const uint8_t **body, size_t *len) {
  *body = NULL;
  *len = 0;
  if (d->status) return d->status;
  if (!d->in_body) {
    const uint8_t *p = dsh_buf_data(&d->in);
    size_t avail = d->in.len;
    if (avail >= 2 && p[0] == '\r' && p[1] == '\n') return bad_length(d); /* no headers */
    size_t k = find_blank(p, d->scan, avail);
    if (k == (size_t)-1) {
      if (avail >= MAX_HEADER) goto too_big;
      d->scan = avail > 3 ? avail - 3 : 0;
      return more(d);
    }
    if (k + 4 > MAX_HEADER) goto too_big;
    int rc = parse_headers(d, p, k);
    if (rc) return rc;
    dsh_buf_drop(&d->in, k + 4);
    d->scan = 0;
  }
  if ((uint64_t)d->in.len < d->body) return more(d);
  *body = dsh_buf_data(&d->in);
  *len = (size_t)d->body;
  dsh_buf_drop(&d->in, (size_t)d->body); /* the body stays put until the next call */
  d->in_body = 0;
  return 1;
too_big:
  return d->status = dsh_fail(d->msg, sizeof d->msg, DSH_ELIMIT,
                              "LSP header block exceeds %d bytes", MAX_HEADER);
}

int dsh_lsp_decoder_finish(dsh_lsp_decoder_t *d) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (d->in_body || d->in.len)
    return d->status =
               dsh_fail(d->msg, sizeof d->msg, DSH_ETRUNCATED, "LSP stream ended mid-message");
  return DSH_OK;
}

int dsh_lsp_encode_header(size_t body_len, char *out, size_t cap, size_t *out_n) {
  char tmp[48];
  int k = snprintf(tmp, sizeof tmp, "Content-Length: %zu\r\n\r\n", body_len);
  *out_n = 0;
  if (k < 0 || (size_t)k > cap) return DSH_EINVAL;
  memcpy(out, tmp, (size_t)k);
  *out_n = (size_t)k;
  return DSH_OK;
}
