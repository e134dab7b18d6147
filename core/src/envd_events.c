/* envd_events.c: envelopes in, process events out, data decoded in C.
 *
 * Uses the envelope decoder and base64. The matcher accepts only the exact
 * shape of a data event and hands anything else to the caller as JSON, so a
 * message is never misread; it must never read past the payload. */
#include "dsh/envd_events.h"

#include <stdlib.h>
#include <string.h>

#include "dsh/base64.h"
#include "dsh/envd_match.h"
#include "dsh/envelope.h"
#include "dsh/errors.h"

struct dsh_envd_events {
  dsh_envelope_decoder_t *env;
  uint8_t *buf; /* decoded bytes of the current data event */
  size_t cap;
  char err[160];
};

int dsh_envd_events_new(uint32_t max_message_bytes, dsh_envd_events_t **out) {
  dsh_envd_events_t *e = calloc(1, sizeof *e);
  if (!e) return DSH_ENOMEM;
  int rc = dsh_envelope_decoder_new(max_message_bytes, &e->env);
  if (rc != DSH_OK) {
    free(e);
    return rc;
  }
  *out = e;
  return DSH_OK;
}

void dsh_envd_events_free(dsh_envd_events_t *e) {
  if (!e) return;
  dsh_envelope_decoder_free(e->env);
  free(e->buf);
  free(e);
}

int dsh_envd_events_push(dsh_envd_events_t *e, const uint8_t *data, size_t n) {
  return dsh_envelope_decoder_push(e->env, data, n);
}

int dsh_envd_events_finish(dsh_envd_events_t *e) {
  return dsh_envelope_decoder_finish(e->env);
}

const char *dsh_envd_events_error(const dsh_envd_events_t *e) {
  if (e->err[0]) return e->err;
  return dsh_envelope_decoder_error(e->env);
}

/* --- the matcher ------------------------------------------------------------ */

typedef struct {
  const uint8_t *p, *end;
} cur_t;

static void ws(cur_t *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int lit(cur_t *c, char ch) {
  ws(c);
  if (c->p < c->end && *c->p == (uint8_t)ch) {
    c->p++;
    return 1;
  }
  return 0;
}

/* A key without escapes, then ':'. Returns its span. */
static int key(cur_t *c, const uint8_t **k, size_t *klen) {
  if (!lit(c, '"')) return 0;
  const uint8_t *s = c->p;
  while (c->p < c->end && *c->p != '"') {
    if (*c->p == '\\' || *c->p < 0x20) return 0;
    c->p++;
  }
  if (c->p >= c->end) return 0;
  *k = s;
  *klen = (size_t)(c->p - s);
  c->p++;
  return lit(c, ':');
}

static int key_is(const uint8_t *k, size_t klen, const char *want) {
  size_t n = strlen(want);
  return klen == n && memcmp(k, want, n) == 0;
}

static int number(cur_t *c, int64_t *out) {
  ws(c);
  int quoted = c->p < c->end && *c->p == '"';
  if (quoted) c->p++;
  const uint8_t *s = c->p;
  int64_t v = 0;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    if (v > (INT64_MAX - 9) / 10) return 0;
    v = v * 10 + (*c->p - '0');
    c->p++;
  }
  if (c->p == s) return 0;
  if (quoted && !lit(c, '"')) return 0;
  *out = v;
  return 1;
}

int dsh_envd_match_data(const uint8_t *payload, size_t len, int32_t *stream, int64_t *offset,
                        const uint8_t **b64, size_t *b64_len) {
  cur_t c = {payload, payload + len};
  const uint8_t *k;
  size_t klen;
  if (!lit(&c, '{') || !key(&c, &k, &klen) || !key_is(k, klen, "event")) return 0;
  if (!lit(&c, '{') || !key(&c, &k, &klen) || !key_is(k, klen, "data")) return 0;
  if (!lit(&c, '{')) return 0;
  int32_t which = 0;
  int64_t off = -1;
  int seen_offset = 0;
  for (int member = 0; member < 2; member++) {
    if (!key(&c, &k, &klen)) return 0;
    int32_t s = key_is(k, klen, "stdout")   ? DSH_ENVD_STDOUT
                : key_is(k, klen, "stderr") ? DSH_ENVD_STDERR
                : key_is(k, klen, "pty")    ? DSH_ENVD_PTY
                                            : 0;
    if (s) {
      if (which || !lit(&c, '"')) return 0;
      const uint8_t *start = c.p;
      const uint8_t *q = memchr(c.p, '"', (size_t)(c.end - c.p));
      if (!q || memchr(start, '\\', (size_t)(q - start))) return 0;
      which = s;
      *b64 = start;
      *b64_len = (size_t)(q - start);
      c.p = q + 1;
    } else if (key_is(k, klen, "offset")) {
      if (seen_offset || !number(&c, &off)) return 0;
      seen_offset = 1;
    } else {
      return 0;
    }
    if (lit(&c, '}')) break;
    if (!lit(&c, ',')) return 0;
    if (member == 1) return 0;
  }
  if (!which || !lit(&c, '}') || !lit(&c, '}')) return 0;
  ws(&c);
  if (c.p != c.end) return 0;
  *stream = which;
  *offset = off;
  return 1;
}

int dsh_envd_events_next(dsh_envd_events_t *e, dsh_envd_event_t *ev) {
  uint8_t flags;
  const uint8_t *payload;
  uint32_t len;
  int rc = dsh_envelope_decoder_next(e->env, &flags, &payload, &len);
  if (rc <= 0) return rc;
  memset(ev, 0, sizeof *ev);
  ev->offset = -1;
  ev->data = payload;
  ev->len = len;
  if (flags & 0x02) {
    ev->kind = DSH_ENVD_END;
    return 1;
  }
  ev->kind = DSH_ENVD_MESSAGE;
  int32_t stream;
  int64_t off;
  const uint8_t *b64;
  size_t b64_len;
  if (!dsh_envd_match_data(payload, len, &stream, &off, &b64, &b64_len)) return 1;
  size_t need = dsh_base64_decoded_max(b64_len);
  if (need > e->cap) {
    uint8_t *nb = realloc(e->buf, need ? need : 1);
    if (!nb) return DSH_ENOMEM;
    e->buf = nb;
    e->cap = need;
  }
  size_t n;
  /* envd and dshd write canonical padded base64, which the vectorised strict
   * decoder takes; protobuf JSON also allows URL-safe or unpadded forms. */
  if (dsh_base64_decode((const char *)b64, b64_len, e->buf, &n) != DSH_OK &&
      dsh_base64_decode_loose((const char *)b64, b64_len, e->buf, &n) != DSH_OK) {
    return 1; /* not valid base64: let the caller's generic path report it */
  }
  ev->kind = DSH_ENVD_DATA;
  ev->stream = stream;
  ev->offset = off;
  ev->data = e->buf;
  ev->len = n;
  return 1;
}
