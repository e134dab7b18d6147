/* fuzz_bridge.c: the bridge decoder agrees with the frame decoder on every
 * input and chunking (the same status, as many frames), lends tokens of
 * frames that passed identically whatever the chunking, and every string it
 * lends without the WTF-8 flag is valid UTF-8. The encoder's text of each
 * string token decodes back to the same token. The first byte picks the
 * bound, the second the chunk size. */
#include <stdlib.h>
#include <string.h>

#include "dsh/bridge.h"
#include "dsh/errors.h"
#include "dsh/frame.h"
#include "dsh/utf8.h"

typedef struct {
  uint8_t *log;                /* tokens of the frames that passed */
  size_t n, cap, frames, pend; /* pend: where the frame under way starts */
  int rc;
} result_t;

static void put(result_t *r, const void *p, size_t n) {
  if (r->n + n > r->cap) {
    r->cap = (r->n + n) * 2 + 64;
    r->log = realloc(r->log, r->cap);
    if (!r->log) abort();
  }
  memcpy(r->log + r->n, p, n);
  r->n += n;
}

static void string_roundtrip(const uint8_t *s, size_t n) {
  dsh_bridge_encoder_t *e;
  if (dsh_bridge_encoder_new(1u << 30, &e)) abort();
  size_t at = 0, used;
  do {
    if (dsh_bridge_encoder_string(e, s + at, n - at, &used)) abort();
    at += used;
  } while (at < n);
  char *frame = malloc((size_t)dsh_bridge_encoder_len(e) / 3 * 4 + 16);
  size_t total = 0, piece;
  while (dsh_bridge_encoder_emit(e, frame + total, 4096, &piece) == 1) total += piece;
  total += piece;
  dsh_bridge_decoder_t *d;
  if (dsh_bridge_decoder_new(1u << 30, &d) || dsh_bridge_decoder_push(d, (uint8_t *)frame, total))
    abort();
  int rc, seen = 0;
  do {
    const dsh_bridge_token_t *t;
    size_t nt;
    rc = dsh_bridge_decoder_next(d, &t, &nt);
    for (size_t i = 0; i < nt; i++) {
      if (t[i].kind == DSH_BRIDGE_STRING) {
        if (t[i].len != n || memcmp(dsh_bridge_decoder_text(d) + t[i].off, s, n)) abort();
        seen++;
      }
    }
  } while (rc == 1);
  if (rc || seen != 1 || dsh_bridge_decoder_finish(d)) abort();
  dsh_bridge_decoder_free(d);
  dsh_bridge_encoder_free(e);
  free(frame);
}

static void run(const uint8_t *s, size_t n, uint64_t max, size_t k, result_t *r, int check) {
  dsh_bridge_decoder_t *d;
  if (dsh_bridge_decoder_new(max, &d)) abort();
  memset(r, 0, sizeof *r);
  for (size_t i = 0; i < n && !r->rc; i += k) {
    size_t m = n - i < k ? n - i : k;
    r->rc = dsh_bridge_decoder_push(d, s + i, m);
    int got = 1;
    while (!r->rc && got == 1) {
      const dsh_bridge_token_t *t;
      size_t nt;
      got = dsh_bridge_decoder_next(d, &t, &nt);
      const uint8_t *text = dsh_bridge_decoder_text(d);
      for (size_t j = 0; j < nt; j++) {
        put(r, &t[j].kind, sizeof t[j].kind);
        if (t[j].kind == DSH_BRIDGE_STRING || t[j].kind == DSH_BRIDGE_KEY) {
          if (t[j].len > max) abort();
          put(r, &t[j].wtf8, sizeof t[j].wtf8);
          put(r, &t[j].len, sizeof t[j].len);
          put(r, text + t[j].off, (size_t)t[j].len);
        } else if (t[j].kind == DSH_BRIDGE_NUMBER) {
          put(r, &t[j].num, sizeof t[j].num);
        } else if (t[j].kind == DSH_BRIDGE_FRAME) {
          r->frames++;
          r->pend = r->n;
        }
      }
      /* even a frame that fails later lends only checked bytes */
      if (check) {
        for (size_t j = 0; j < nt; j++) {
          if (t[j].kind == DSH_BRIDGE_STRING && !t[j].wtf8) {
            if (dsh_utf8_validate(text + t[j].off, (size_t)t[j].len, NULL)) abort();
            if (t[j].len < 4096) string_roundtrip(text + t[j].off, (size_t)t[j].len);
          }
        }
      }
      if (got < 0) r->rc = got;
    }
  }
  if (!r->rc) r->rc = dsh_bridge_decoder_finish(d);
  if (r->rc != dsh_bridge_decoder_status(d)) abort();
  r->n = r->pend; /* tokens of a frame that did not pass are dropped */
  dsh_bridge_decoder_free(d);
}

static int frame_run(const uint8_t *s, size_t n, uint64_t max, size_t k, size_t *frames) {
  dsh_frame_decoder_t *d;
  if (dsh_frame_decoder_new(max, &d)) abort();
  int rc = 0;
  *frames = 0;
  for (size_t i = 0; i < n && !rc; i += k) {
    rc = dsh_frame_decoder_push(d, s + i, n - i < k ? n - i : k);
    const uint8_t *json;
    size_t len;
    int got;
    while (!rc && (got = dsh_frame_decoder_next(d, &json, &len)) != 0) {
      if (got < 0)
        rc = got;
      else
        (*frames)++;
    }
  }
  if (!rc) rc = dsh_frame_decoder_finish(d);
  dsh_frame_decoder_free(d);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  uint64_t max = data[0] < 250 ? (uint64_t)data[0] + 1 : 9007199254740991ull;
  size_t k = (size_t)(data[1] & 0x7F) % 17 + 1;
  int frame_it = data[1] & 0x80;
  data += 2;
  size -= 2;
  uint8_t *framed = NULL;
  if (frame_it) { /* the rest is JSON lines: make each a frame, so the tokenizer sees it all */
    framed = malloc(size / 3 * 4 + 2 * size + 16);
    size_t out = 0, start = 0;
    for (size_t i = 0; i <= size; i++) {
      if (i < size && data[i] != '\n') continue;
      size_t got;
      if (dsh_frame_encode(data + start, i - start, 9007199254740991ull, (char *)framed + out,
                           dsh_frame_encoded_len(i - start), &got))
        abort();
      out += got;
      start = i + 1;
    }
    data = framed;
    size = out;
  }
  size_t whole_k = size ? size : 1;
  result_t whole, split;
  run(data, size, max, whole_k, &whole, 1);
  run(data, size, max, k, &split, 0);
  size_t f_whole, f_split;
  if (frame_run(data, size, max, whole_k, &f_whole) != whole.rc) abort();
  if (frame_run(data, size, max, k, &f_split) != split.rc) abort();
  if (f_whole != whole.frames || f_split != split.frames) abort();
  /* the frames both runs passed lend the same tokens */
  size_t common = whole.frames < split.frames ? whole.frames : split.frames;
  if (common == whole.frames && common == split.frames &&
      (whole.n != split.n || (whole.n && memcmp(whole.log, split.log, whole.n))))
    abort();
  free(whole.log);
  free(split.log);
  free(framed);
  return 0;
}
