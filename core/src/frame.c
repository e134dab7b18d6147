/* frame.c: the NDJSON-base64 frame decoder and encoder (harness §3.1).
 *
 * push checks the chunk's bytes (32 at a time with SSE2) and copies it once
 * into a buffer that holds at most maxEncodedChars + one chunk; next finds a
 * line with memchr, decodes it with the strict base64 decoder into a second
 * buffer, then runs the UTF-8 and JSON validators over the result and lends
 * it. Uses base64, utf8 and json. Must never read past its buffers, grow
 * without bound, or hand out a frame that failed any check. */
#include "dsh/frame.h"

#include <stdlib.h>
#include <string.h>

#include "dsh/base64.h"
#include "dsh/errors.h"
#include "dsh/json.h"
#include "dsh/utf8.h"

#define MAX_SAFE_INTEGER 9007199254740991ull
#define SHRINK_ABOVE (8u << 20) /* idle buffers bigger than this are released */

struct dsh_frame_decoder {
  uint64_t max, max_enc;
  uint8_t *buf; /* unconsumed input is buf[start, end) */
  size_t cap, start, end;
  size_t scan;  /* buf[start, scan) is known to hold no '\n' */
  uint8_t *out; /* the decoded frame lent by next() */
  size_t out_cap;
  int status;  /* sticky */
  int drained; /* next() returned 0 since the last push */
};

int dsh_frame_check_max(uint64_t max) {
  return max >= 1 && max <= MAX_SAFE_INTEGER ? DSH_OK : DSH_EINVAL;
}

const char *dsh_frame_message(int status) {
  switch (status) {
    case DSH_OK:
      return "";
    case DSH_ENONASCII:
      return "E2B frame stream contained non-ASCII data";
    case DSH_EBASE64:
      return "E2B frame contained invalid base64 or exceeded its byte limit";
    case DSH_ELIMIT:
      return "E2B frame exceeded its byte limit";
    case DSH_EUTF8:
      return "E2B frame contained invalid UTF-8";
    case DSH_EJSON:
      return "E2B frame contained invalid JSON";
    case DSH_ETRUNCATED:
      return "E2B frame stream ended mid-frame";
    case DSH_EINVAL:
      return "E2B frame maxFrameBytes must be a positive safe integer";
    case DSH_ESTATE:
      return "E2B frame decoder misuse: drain next() before push() or finish()";
    default:
      return dsh_strerror(status);
  }
}

int dsh_frame_decoder_new(uint64_t max, dsh_frame_decoder_t **out) {
  *out = NULL;
  if (dsh_frame_check_max(max)) return DSH_EINVAL;
  dsh_frame_decoder_t *d = calloc(1, sizeof *d);
  if (!d) return DSH_ENOMEM;
  d->max = max;
  d->max_enc = (max + 2) / 3 * 4;
  d->drained = 1;
  *out = d;
  return DSH_OK;
}

void dsh_frame_decoder_free(dsh_frame_decoder_t *d) {
  if (!d) return;
  free(d->buf);
  free(d->out);
  free(d);
}

int dsh_frame_decoder_status(const dsh_frame_decoder_t *d) {
  return d->status;
}

const char *dsh_frame_decoder_error(const dsh_frame_decoder_t *d) {
  return dsh_frame_message(d->status);
}

static int fail(dsh_frame_decoder_t *d, int status) {
  d->status = status;
  return status;
}

/* 1 if every byte is '\n' or 0x20..0x7E. */
#if defined(__SSE2__)
#include <emmintrin.h>
static int frame_ascii(const uint8_t *p, size_t n) {
  const __m128i lo = _mm_set1_epi8(0x1F), hi = _mm_set1_epi8(0x7F), nl = _mm_set1_epi8('\n');
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m128i a = _mm_loadu_si128((const __m128i *)(p + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + i + 16));
    /* signed compares: bytes >= 0x80 are negative, so they fail "> 0x1F" */
    __m128i oka = _mm_and_si128(_mm_cmpgt_epi8(a, lo), _mm_cmplt_epi8(a, hi));
    __m128i okb = _mm_and_si128(_mm_cmpgt_epi8(b, lo), _mm_cmplt_epi8(b, hi));
    if ((_mm_movemask_epi8(_mm_and_si128(oka, okb))) == 0xFFFF) continue;
    oka = _mm_or_si128(oka, _mm_cmpeq_epi8(a, nl));
    okb = _mm_or_si128(okb, _mm_cmpeq_epi8(b, nl));
    if ((_mm_movemask_epi8(_mm_and_si128(oka, okb))) != 0xFFFF) return 0;
  }
  for (; i < n; i++)
    if ((p[i] < 0x20 || p[i] > 0x7E) && p[i] != '\n') return 0;
  return 1;
}
#else
/* Words with a suspicious byte (any '\n' among them) are rechecked bytewise. */
static int frame_ascii(const uint8_t *p, size_t n) {
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w, t;
    memcpy(&w, p + i, 8);
    t = w ^ (ones * 0x7F);
    if ((((w - ones * 0x20) & ~w) | ((t - ones) & ~t) | w) & high) {
      for (size_t k = i; k < i + 8; k++)
        if ((p[k] < 0x20 || p[k] > 0x7E) && p[k] != '\n') return 0;
    }
  }
  for (; i < n; i++)
    if ((p[i] < 0x20 || p[i] > 0x7E) && p[i] != '\n') return 0;
  return 1;
}
#endif

static int reserve(uint8_t **buf, size_t *cap, size_t need, size_t soft_max) {
  if (need <= *cap) return DSH_OK;
  size_t want = *cap * 2 > need ? *cap * 2 : need;
  if (want > soft_max && need <= soft_max) want = soft_max;
  if (want < 256) want = 256;
  uint8_t *p = realloc(*buf, want);
  if (!p) return DSH_ENOMEM;
  *buf = p;
  *cap = want;
  return DSH_OK;
}

int dsh_frame_decoder_push(dsh_frame_decoder_t *d, const uint8_t *data, size_t n) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (n == 0) return DSH_OK;
  if (!frame_ascii(data, n)) return fail(d, DSH_ENONASCII);
  /* Drained: the buffer holds only a remainder without '\n'. If that plus the
   * chunk's first line is already too long, it is the next thing next() would
   * reject, so reject it now rather than buffer it. */
  size_t rem = d->end - d->start;
  const uint8_t *nl = memchr(data, '\n', n);
  uint64_t first = (uint64_t)rem + (uint64_t)(nl ? (size_t)(nl - data) : n);
  if (first > d->max_enc) return fail(d, nl ? DSH_EBASE64 : DSH_ELIMIT);
  if (d->start) {
    memmove(d->buf, d->buf + d->start, rem);
    d->start = 0;
    d->end = rem;
  }
  if (reserve(&d->buf, &d->cap, rem + n, (size_t)d->max_enc + n)) return DSH_ENOMEM;
  memcpy(d->buf + d->end, data, n);
  d->scan = d->end;
  d->end += n;
  d->drained = 0;
  return DSH_OK;
}

/* Releases big buffers once the decoder is idle (after a huge frame). */
static void shrink(dsh_frame_decoder_t *d) {
  if (d->out_cap > SHRINK_ABOVE) {
    free(d->out);
    d->out = NULL;
    d->out_cap = 0;
  }
  size_t rem = d->end - d->start;
  if (d->cap > SHRINK_ABOVE && rem <= d->cap / 4) {
    uint8_t *p = malloc(rem > 4096 ? rem : 4096);
    if (!p) return;
    memcpy(p, d->buf + d->start, rem);
    free(d->buf);
    d->buf = p;
    d->cap = rem > 4096 ? rem : 4096;
    d->start = 0;
    d->end = d->scan = rem;
  }
}

int dsh_frame_decoder_next(dsh_frame_decoder_t *d, const uint8_t **json, size_t *len) {
  *json = NULL;
  *len = 0;
  if (d->status) return d->status;
  size_t from = d->scan > d->start ? d->scan : d->start;
  uint8_t *nl = from < d->end ? memchr(d->buf + from, '\n', d->end - from) : NULL;
  if (!nl) {
    size_t rem = d->end - d->start;
    if ((uint64_t)rem > d->max_enc) return fail(d, DSH_ELIMIT);
    if (d->start && rem) memmove(d->buf, d->buf + d->start, rem);
    d->start = 0;
    d->end = d->scan = rem;
    d->drained = 1;
    shrink(d);
    return 0;
  }
  const char *line = (const char *)d->buf + d->start;
  size_t n = (size_t)(nl - (d->buf + d->start));
  d->start += n + 1;
  if (n == 0 || (uint64_t)n > d->max_enc) return fail(d, DSH_EBASE64);
  size_t need = dsh_base64_decoded_max(n);
  if (reserve(&d->out, &d->out_cap, need, need)) return DSH_ENOMEM;
  size_t m;
  if (dsh_base64_decode(line, n, d->out, &m)) return fail(d, DSH_EBASE64);
  if ((uint64_t)m > d->max) return fail(d, DSH_ELIMIT);
  if (dsh_utf8_validate(d->out, m, NULL)) return fail(d, DSH_EUTF8);
  if (dsh_json_validate(d->out, m, NULL)) return fail(d, DSH_EJSON);
  *json = d->out;
  *len = m;
  return 1;
}

int dsh_frame_decoder_finish(dsh_frame_decoder_t *d) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (d->end > d->start) return fail(d, DSH_ETRUNCATED);
  return DSH_OK;
}

size_t dsh_frame_encoded_len(size_t n) {
  return dsh_base64_encoded_len(n) + 1;
}

int dsh_frame_encode(const uint8_t *json, size_t n, uint64_t max, char *out, size_t cap,
                     size_t *out_n) {
  *out_n = 0;
  if (dsh_frame_check_max(max)) return DSH_EINVAL;
  if ((uint64_t)n > max) return DSH_ELIMIT;
  if (cap < dsh_frame_encoded_len(n)) return DSH_EINVAL;
  size_t k = dsh_base64_encode(json, n, out);
  out[k] = '\n';
  *out_n = k + 1;
  return DSH_OK;
}
