/* codecs.c: throughput of the pure codecs of the C core against memcpy,
 * measured in the same run (build/bin/dsh-bench-codecs).
 *
 * Each row moves about 256 MiB through the codec from 16 MiB buffers reused
 * over and over, after one warm-up pass, and prints GB/s (10^9 bytes per
 * second) and the ratio to the baseline: memcpy of the same 16 MiB in 64 KiB
 * chunks into one reused buffer, the least any decoder does. Bytes counted: the raw data for base64
 * (input of encode, output of decode), the wire stream for the decoders, the
 * input for the validators. A benchmark, not a test: no thresholds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsh/base64.h"
#include "dsh/envelope.h"
#include "dsh/frame.h"
#include "dsh/json.h"
#include "dsh/ledger.h"
#include "dsh/lspframe.h"
#include "dsh/utf8.h"

#define BUF (16u << 20)
#define TOTAL (256ull << 20)
#define CHUNK 65536
#define MSG 32768

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint8_t rnd8(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint8_t)(rng >> 24);
}

static volatile size_t sink;
static double memcpy_gbps;

static void row(const char *name, double bytes, double secs) {
  double gbps = bytes / secs / 1e9;
  if (memcpy_gbps == 0) memcpy_gbps = gbps;
  printf("%-36s %8.2f %8.2f\n", name, gbps, gbps / memcpy_gbps);
  fflush(stdout);
}

/* Runs fn(arg) until about TOTAL bytes (fn returns bytes per call) moved. */
typedef size_t (*job_fn)(void *arg);
static void measure(const char *name, job_fn fn, void *arg) {
  size_t per = fn(arg); /* warm-up */
  size_t reps = (size_t)(TOTAL / per);
  if (reps < 1) reps = 1;
  double t = now();
  for (size_t i = 0; i < reps; i++) sink += fn(arg);
  row(name, (double)per * (double)reps, now() - t);
}

static uint8_t *raw, *dst;
static char *b64;
static size_t b64_len;

/* The baseline: what any decoder must at least do, copy the stream once in
 * CHUNK pieces into a reused buffer. */
static size_t job_memcpy_chunks(void *arg) {
  for (size_t i = 0; i < BUF; i += CHUNK) memcpy(dst, raw + i, CHUNK);
  sink += dst[rnd8()];
  return BUF;
}
static size_t job_memcpy(void *arg) {
  memcpy(dst, raw, BUF);
  sink += dst[rnd8()];
  return BUF;
}
static size_t job_encode(void *arg) {
  sink += dsh_base64_encode(raw, BUF, b64);
  return BUF;
}
static size_t job_decode(void *arg) {
  size_t n;
  if (dsh_base64_decode(b64, b64_len, dst, &n)) abort();
  return n;
}

/* A stream of envelopes/frames/messages in `stream`, pushed in CHUNK pieces. */
static uint8_t *stream;
static size_t stream_len;

static size_t job_envelope(void *arg) {
  dsh_envelope_decoder_t *d;
  dsh_envelope_decoder_new(MSG, &d);
  size_t got = 0;
  for (size_t i = 0; i < stream_len; i += CHUNK) {
    size_t m = stream_len - i < CHUNK ? stream_len - i : CHUNK;
    if (dsh_envelope_decoder_push(d, stream + i, m)) abort();
    uint8_t flags;
    const uint8_t *p;
    uint32_t len;
    while (dsh_envelope_decoder_next(d, &flags, &p, &len) == 1) got += len;
  }
  if (dsh_envelope_decoder_finish(d)) abort();
  dsh_envelope_decoder_free(d);
  sink += got;
  return stream_len;
}

static size_t job_frame(void *arg) {
  dsh_frame_decoder_t *d;
  dsh_frame_decoder_new(1u << 20, &d);
  size_t got = 0;
  for (size_t i = 0; i < stream_len; i += CHUNK) {
    size_t m = stream_len - i < CHUNK ? stream_len - i : CHUNK;
    if (dsh_frame_decoder_push(d, stream + i, m)) abort();
    const uint8_t *json;
    size_t len;
    int rc;
    while ((rc = dsh_frame_decoder_next(d, &json, &len)) == 1) got += len;
    if (rc) abort();
  }
  if (dsh_frame_decoder_finish(d)) abort();
  dsh_frame_decoder_free(d);
  sink += got;
  return stream_len;
}

static size_t job_lsp(void *arg) {
  dsh_lsp_decoder_t *d;
  dsh_lsp_decoder_new(1u << 20, &d);
  size_t got = 0;
  for (size_t i = 0; i < stream_len; i += CHUNK) {
    size_t m = stream_len - i < CHUNK ? stream_len - i : CHUNK;
    if (dsh_lsp_decoder_push(d, stream + i, m)) abort();
    const uint8_t *body;
    size_t len;
    while (dsh_lsp_decoder_next(d, &body, &len) == 1) got += len;
  }
  if (dsh_lsp_decoder_finish(d)) abort();
  dsh_lsp_decoder_free(d);
  sink += got;
  return stream_len;
}

static uint8_t *text;
static size_t text_len;
static size_t job_utf8(void *arg) {
  if (dsh_utf8_validate(text, text_len, NULL)) abort();
  return text_len;
}
static size_t job_json(void *arg) {
  if (dsh_json_validate(text, text_len, NULL)) abort();
  return text_len;
}
static size_t job_cost(void *arg) {
  sink += dsh_json_string_cost(text, text_len);
  return text_len;
}

/* One ~32 KiB JSON message {"type":"stdout","data":"<base64>"} into j. */
static size_t stdout_json(uint8_t *j) {
  static const char head[] = "{\"type\":\"stdout\",\"data\":\"";
  size_t n = sizeof head - 1, raw_n = (MSG - 40) / 4 * 3;
  memcpy(j, head, n);
  n += dsh_base64_encode(raw + rnd8() * 1024, raw_n, (char *)j + n);
  j[n++] = '"';
  j[n++] = '}';
  return n;
}

static void build_frames(void) {
  uint8_t *j = malloc(MSG + 64);
  size_t cap = BUF + 2 * MSG;
  stream = malloc(cap);
  stream_len = 0;
  while (stream_len + 2 * MSG < BUF) {
    size_t n = stdout_json(j), got;
    if (dsh_frame_encode(j, n, 1u << 20, (char *)stream + stream_len, cap - stream_len, &got))
      abort();
    stream_len += got;
  }
  free(j);
}

static void build_envelopes(void) {
  stream = malloc(BUF);
  stream_len = 0;
  while (stream_len + MSG + 5 <= BUF) {
    dsh_envelope_header(0, MSG, stream + stream_len);
    memcpy(stream + stream_len + 5, raw + stream_len % (BUF / 2), MSG);
    stream_len += MSG + 5;
  }
}

static void build_lsp(void) {
  uint8_t *j = malloc(MSG + 64);
  stream = malloc(BUF);
  stream_len = 0;
  while (stream_len + 2 * MSG < BUF) {
    size_t n = stdout_json(j), h;
    dsh_lsp_encode_header(n, (char *)stream + stream_len, 64, &h);
    memcpy(stream + stream_len + h, j, n);
    stream_len += h + n;
  }
  free(j);
}

int main(void) {
  raw = malloc(BUF);
  dst = malloc(BUF + 64);
  b64 = malloc(dsh_base64_encoded_len(BUF) + 64);
  for (size_t i = 0; i < BUF; i++) raw[i] = rnd8();
  b64_len = dsh_base64_encode(raw, BUF, b64);

  printf("dsh codecs: %u MiB buffers, ~%llu MiB per row, chunks of %u bytes\n", BUF >> 20,
         TOTAL >> 20, CHUNK);
  printf("%-36s %8s %8s\n", "codec", "GB/s", "/memcpy");
  measure("memcpy (64 KiB chunks, baseline)", job_memcpy_chunks, NULL);
  measure("memcpy (16 MiB to 16 MiB)", job_memcpy, NULL);
  int simd = dsh_base64_use_simd(1);
  measure(simd ? "base64 encode (AVX2)" : "base64 encode", job_encode, NULL);
  measure(simd ? "base64 decode strict (AVX2)" : "base64 decode strict", job_decode, NULL);
  if (simd) {
    dsh_base64_use_simd(0);
    measure("base64 encode (scalar)", job_encode, NULL);
    measure("base64 decode strict (scalar)", job_decode, NULL);
    dsh_base64_use_simd(1);
  }

  build_envelopes();
  measure("envelope decode (32 KiB msgs)", job_envelope, NULL);
  free(stream);

  build_frames();
  measure("frame decode (32 KiB JSON)", job_frame, NULL);
  /* the same JSON, concatenated into one array for the validators */
  text = malloc(BUF + 2 * MSG);
  text_len = 0;
  text[text_len++] = '[';
  uint8_t *j = malloc(MSG + 64);
  while (text_len + 2 * MSG < BUF) {
    if (text_len > 1) text[text_len++] = ',';
    size_t n = stdout_json(j);
    memcpy(text + text_len, j, n);
    text_len += n;
  }
  text[text_len++] = ']';
  free(j);
  free(stream);
  measure("utf8 validate (ASCII JSON)", job_utf8, NULL);
  measure("json validate (stdout JSON)", job_json, NULL);
  measure("json string cost (ASCII)", job_cost, NULL);

  build_lsp();
  measure("lsp decode (32 KiB bodies)", job_lsp, NULL);
  free(stream);

  /* Mixed scripts: Latin, CJK, emoji, ASCII. */
  static const char sample[] = "héllo wörld — 你好，世界 😀🚀 ok; ";
  size_t sl = sizeof sample - 1;
  text_len = 0;
  while (text_len + sl <= BUF) {
    memcpy(text + text_len, sample, sl);
    text_len += sl;
  }
  measure("utf8 validate (mixed scripts)", job_utf8, NULL);
  measure("json string cost (mixed)", job_cost, NULL);
  free(text);
  free(raw);
  free(dst);
  free(b64);
  return 0;
}
