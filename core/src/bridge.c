/* bridge.c: the streaming side of bridge.h — NDJSON-base64 frames decoded into
 * JSON tokens as their bytes arrive.
 *
 * Per line: base64 quartets are decoded as they come (strictly, with
 * dsh_base64_decode) and appended to `text`; each appended run is checked as
 * UTF-8 up to the last whole code point; the tokenizer (bridge_json.c) reads
 * the checked bytes and decodes string escapes in place. Checks that fail are
 * remembered by rank and reported at the end of the line in frame.h's order
 * (a later check is not run once an earlier-ranked one failed). Uses base64
 * and utf8. Must never read past its buffers, keep more than the open token
 * plus one chunk, or lend a token of a frame that failed a check it has run. */
#include "dsh/bridge.h"

#include <stdlib.h>
#include <string.h>

#include "bridge_internal.h"
#include "dsh/base64.h"
#include "dsh/errors.h"
#include "dsh/utf8.h"

#define MAX_SAFE_INTEGER 9007199254740991ull
#define STEP (1u << 20)         /* encoded characters one next() decodes at most */
#define SHRINK_ABOVE (8u << 20) /* idle buffers bigger than this are released */
#define COMPACT_ABOVE (64u << 10)

static int grow(uint8_t **buf, size_t *cap, size_t need) {
  if (need <= *cap) return DSH_OK;
  size_t want = *cap * 2 > need ? *cap * 2 : need;
  if (want < 4096) want = 4096;
  uint8_t *p = realloc(*buf, want);
  if (!p) return DSH_ENOMEM;
  *buf = p;
  *cap = want;
  return DSH_OK;
}

int dsh_bridge_decoder_new(uint64_t max, dsh_bridge_decoder_t **out) {
  *out = NULL;
  if (max < 1 || max > MAX_SAFE_INTEGER) return DSH_EINVAL;
  dsh_bridge_decoder_t *d = calloc(1, sizeof *d);
  if (!d) return DSH_ENOMEM;
  d->max = max;
  d->max_enc = (max + 2) / 3 * 4;
  d->drained = 1;
  *out = d;
  return DSH_OK;
}

void dsh_bridge_decoder_free(dsh_bridge_decoder_t *d) {
  if (!d) return;
  free(d->in);
  free(d->text);
  free(d->toks);
  free(d);
}

int dsh_bridge_decoder_status(const dsh_bridge_decoder_t *d) {
  return d->status;
}

const uint8_t *dsh_bridge_decoder_text(const dsh_bridge_decoder_t *d) {
  return d->text;
}

uint64_t dsh_bridge_decoder_held(const dsh_bridge_decoder_t *d) {
  return (uint64_t)d->in_cap + d->tcap + d->tok_cap * sizeof(dsh_bridge_token_t);
}

static int fail(dsh_bridge_decoder_t *d, int status) {
  d->status = status;
  return status;
}

static void note(dsh_bridge_decoder_t *d, int rank) {
  if (rank > d->rank) d->rank = rank;
}

/* 1 if every byte is '\n' or 0x20..0x7E (branch-free, so it vectorises). */
static int chunk_ascii(const uint8_t *p, size_t n) {
  uint8_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    bad |= (uint8_t)(((uint8_t)(c - 0x20) > 0x5E) & (c != '\n'));
  }
  return !bad;
}

int dsh_bridge_decoder_push(dsh_bridge_decoder_t *d, const uint8_t *data, size_t n) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (n == 0) return DSH_OK;
  if (!chunk_ascii(data, n)) return fail(d, DSH_ENONASCII);
  if (n > d->in_cap || (d->in_cap > SHRINK_ABOVE && n < d->in_cap / 4)) {
    free(d->in);
    d->in = malloc(n);
    d->in_cap = d->in ? n : 0;
    if (!d->in) return DSH_ENOMEM;
  }
  memcpy(d->in, data, n);
  d->in_len = n;
  d->in_off = 0;
  d->drained = 0;
  return DSH_OK;
}
/* Tokens ---------------------------------------------------------------------- */

dsh_bridge_token_t *dsh_bridge_token(dsh_bridge_decoder_t *d, int kind) {
  if (d->ntok == d->tok_cap) {
    size_t want = d->tok_cap ? d->tok_cap * 2 : 256;
    dsh_bridge_token_t *p = realloc(d->toks, want * sizeof *p);
    if (!p) return NULL;
    d->toks = p;
    d->tok_cap = want;
  }
  dsh_bridge_token_t *t = &d->toks[d->ntok++];
  memset(t, 0, sizeof *t);
  t->kind = kind;
  return t;
}

/* Lines ----------------------------------------------------------------------- */

/* A new line. Its bytes go after the last one's: tokens lent in this call
 * may point at those (compact() drops them in the next call). */
static void reset_line(dsh_bridge_decoder_t *d) {
  d->enc = d->dec = 0;
  d->nquad = d->padded = 0;
  d->rank = R_NONE;
  d->u8 = d->r = d->tlen;
  d->phase = P_VALUE;
  d->in_str = 0;
  d->depth = 0;
}

/* Checks text[u8, tlen) as UTF-8 up to its last whole code point. */
static void check_utf8(dsh_bridge_decoder_t *d) {
  size_t end = d->tlen;
  /* hold back a trailing sequence that is not complete yet */
  for (size_t k = 1; k <= 3 && k <= end - d->u8; k++) {
    uint8_t b = d->text[end - k];
    if (b < 0x80) break;
    if (b >= 0xC0) {
      size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
      if (need > k) end -= k;
      break;
    }
  }
  if (end > d->u8 && dsh_utf8_validate(d->text + d->u8, end - d->u8, NULL)) note(d, R_UTF8);
  d->u8 = end;
}

/* Drops decoded bytes nothing needs any more (tokens of the last call are
 * consumed by now), when that frees enough to pay for the move. */
static void compact(dsh_bridge_decoder_t *d) {
  size_t keep = d->in_str ? d->sstart : d->r;
  if (keep == d->tlen && d->tcap > SHRINK_ABOVE) { /* after a huge frame */
    free(d->text);
    d->text = NULL;
    d->tcap = d->tlen = d->u8 = d->r = d->sstart = d->sw = 0;
    return;
  }
  if (keep < COMPACT_ABOVE || keep < d->tlen - keep) return;
  memmove(d->text, d->text + keep, d->tlen - keep);
  d->tlen -= keep;
  d->u8 -= keep;
  d->r -= keep;
  if (d->in_str) {
    d->sstart -= keep;
    d->sw -= keep;
  }
}

/* A line that failed a check keeps only what the checks still to run need:
 * the held-back tail of its UTF-8 (bytes before r may be lent tokens'). */
static void drop_checked(dsh_bridge_decoder_t *d) {
  memmove(d->text + d->r, d->text + d->u8, d->tlen - d->u8);
  d->tlen = d->r + (d->tlen - d->u8);
  d->u8 = d->r;
  d->in_str = 0;
}

/* Decodes n characters of the current line (no '\n' among them). */
static int line_chars(dsh_bridge_decoder_t *d, const char *p, size_t n) {
  d->enc += n;
  if (d->rank >= R_BASE64) return DSH_OK;
  if (d->padded && n) {
    note(d, R_BASE64);
    return DSH_OK;
  }
  while (n) {
    int store = d->rank < R_UTF8; /* decoded bytes are kept while UTF-8 is still checked */
    const char *src = p;
    size_t len;
    if (d->nquad || n < 4) {
      size_t take = 4 - d->nquad < n ? 4 - d->nquad : n;
      memcpy(d->quad + d->nquad, p, take);
      d->nquad += (uint32_t)take;
      p += take;
      n -= take;
      if (d->nquad < 4) break;
      src = d->quad;
      len = 4;
      d->nquad = 0;
    } else {
      len = n / 4 * 4;
      p += len;
      n -= len;
    }
    if (store && grow(&d->text, &d->tcap, d->tlen + len / 4 * 3)) return DSH_ENOMEM;
    uint8_t tmp[3];
    uint8_t *dst = store ? d->text + d->tlen : NULL;
    size_t m = 0;
    /* unstored: decode quartet by quartet into tmp, only to check and count */
    if (dst) {
      if (dsh_base64_decode(src, len, dst, &m)) {
        note(d, R_BASE64);
        return DSH_OK;
      }
    } else {
      for (size_t i = 0; i < len; i += 4) {
        size_t k;
        if (dsh_base64_decode(src + i, 4, tmp, &k) || (k < 3 && i + 4 < len)) {
          note(d, R_BASE64);
          return DSH_OK;
        }
        m += k;
      }
    }
    if (src[len - 1] == '=') d->padded = 1;
    if (d->padded && n) {
      note(d, R_BASE64);
      return DSH_OK;
    }
    d->dec += m;
    if (d->dec > d->max) {
      note(d, R_LIMIT);
      continue;
    }
    if (store) {
      d->tlen += m;
      check_utf8(d);
      if (d->rank != R_NONE) drop_checked(d);
    }
  }
  return DSH_OK;
}

/* The '\n' of the current line: its verdict. DSH_OK (a FRAME token), or the
 * failure (made sticky). */
static int line_end(dsh_bridge_decoder_t *d) {
  if (d->rank < R_BASE64 && (d->enc == 0 || d->nquad)) note(d, R_BASE64);
  if (d->rank < R_UTF8 && d->u8 < d->tlen) note(d, R_UTF8);
  if (d->rank == R_NONE) {
    int rc = dsh_bridge_tokenize(d, d->u8, 1);
    if (rc == -2) return DSH_ENOMEM;
    if (rc < 0 || d->phase != P_DONE) note(d, R_JSON);
  }
  static const int STATUS[] = {DSH_OK, DSH_EJSON, DSH_EUTF8, DSH_ELIMIT, DSH_EBASE64};
  if (d->rank) return fail(d, STATUS[d->rank]);
  if (!dsh_bridge_token(d, DSH_BRIDGE_FRAME)) return DSH_ENOMEM;
  reset_line(d);
  return DSH_OK;
}

/* Tokenizes what is decoded and checked: 0 (go on), 1 (the token cap: return
 * to the caller) or DSH_ENOMEM. Bad JSON is remembered for the line's end. */
static int catch_up(dsh_bridge_decoder_t *d) {
  if (d->rank != R_NONE) return 0;
  int t = dsh_bridge_tokenize(d, d->u8, 0);
  if (t == -2) return DSH_ENOMEM;
  if (t < 0) note(d, R_JSON);
  return t == 1 ? 1 : 0;
}

int dsh_bridge_decoder_next(dsh_bridge_decoder_t *d, const dsh_bridge_token_t **toks, size_t *n) {
  d->ntok = 0;
  *toks = d->toks;
  *n = 0;
  if (d->status) return d->status;
  if (d->drained) return 0;
  compact(d);
  int rc = DSH_OK;
  size_t budget = STEP;
  for (;;) {
    int t = catch_up(d); /* first whatever is decoded and checked but not tokenized */
    if (t) {
      rc = t;
      break;
    }
    if (d->in_off >= d->in_len) {
      d->drained = 1;
      rc = 0;
      break;
    }
    if (!budget) {
      rc = 1;
      break;
    }
    const char *p = (const char *)d->in + d->in_off;
    size_t avail = d->in_len - d->in_off;
    const char *nl = memchr(p, '\n', avail);
    size_t seg = nl ? (size_t)(nl - p) : avail;
    if (d->enc + seg > d->max_enc) {
      rc = fail(d, nl ? DSH_EBASE64 : DSH_ELIMIT);
      break;
    }
    size_t take = seg < budget ? seg : budget;
    take -= take % 4 && take < seg ? take % 4 : 0; /* whole quartets while the line goes on */
    if (take == 0 && seg > 0) take = seg < 4 ? seg : 4;
    int lc = line_chars(d, p, take);
    if (lc) {
      rc = lc;
      break;
    }
    d->in_off += take;
    budget -= take < budget ? take : budget;
    if (take == seg && nl) {
      t = catch_up(d);
      if (t) {
        rc = t;
        break;
      }
      d->in_off++; /* the '\n' */
      int le = line_end(d);
      if (le) {
        rc = le;
        break;
      }
    }
  }
  *toks = d->toks; /* token() may have moved them */
  *n = d->ntok;
  return rc;
}

void dsh_bridge_decoder_trim(dsh_bridge_decoder_t *d) {
  d->ntok = 0;
  compact(d);
}

int dsh_bridge_decoder_finish(dsh_bridge_decoder_t *d) {
  if (d->status) return d->status;
  if (!d->drained) return DSH_ESTATE;
  if (d->enc || d->nquad) return fail(d, DSH_ETRUNCATED);
  return DSH_OK;
}
