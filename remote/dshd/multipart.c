/* multipart.c: the streaming multipart/form-data parser of POST /files.
 *
 * The delimiter "\r\n--<boundary>" is searched in a fixed working buffer that
 * starts with a virtual "\r\n", so the first boundary line matches like the
 * others. Part bodies go to the consumer as soon as they cannot be the start
 * of a delimiter; part headers are parsed for Content-Disposition only (what
 * envd reads). Uses libc only; never allocates after dshd_mp_new. */
#include "multipart.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MP_BUF (96u << 10)
#define MP_MAX_HEADERS (16u << 10)
#define MAX_BOUNDARY 200

enum { MP_PREAMBLE, MP_AFTER_DELIM, MP_HEADERS, MP_BODY, MP_DONE, MP_FAILED };

struct dshd_mp {
  const dshd_mp_ops_t *ops;
  void *ud;
  char delim[MAX_BOUNDARY + 8];
  size_t dlen;
  char *buf;
  size_t blen, pos;
  int state;
  dshd_mp_part_t part;
};

static int is_token_char(unsigned char c) {
  return c > 0x20 && c < 0x7f && !strchr("()<>@,;:\\\"/[]?=", c);
}

/* Go's mime.ParseMediaType applied to a Content-Disposition value. */
static int parse_disposition(const char *v, dshd_mp_part_t *part) {
  char type[32];
  size_t i = 0;
  while (*v == ' ' || *v == '\t') v++;
  while (*v && is_token_char((unsigned char)*v) && i + 1 < sizeof type)
    type[i++] = (char)tolower((unsigned char)*v++);
  type[i] = 0;
  if (!i) return -1;
  int have_ext = 0;
  for (;;) {
    while (*v == ' ' || *v == '\t') v++;
    if (!*v) break;
    if (*v != ';') return -1;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    if (!*v) break;
    char key[64];
    i = 0;
    while (*v && is_token_char((unsigned char)*v) && i + 1 < sizeof key)
      key[i++] = (char)tolower((unsigned char)*v++);
    key[i] = 0;
    if (!i || *v != '=') return -1;
    v++;
    char val[PATH_MAX * 3];
    size_t vl = 0;
    if (*v == '"') {
      v++;
      while (*v && *v != '"') {
        if (*v == '\\' && v[1]) v++;
        if (vl + 1 < sizeof val) val[vl++] = *v;
        v++;
      }
      if (*v != '"') return -1;
      v++;
    } else {
      while (*v && is_token_char((unsigned char)*v)) {
        if (vl + 1 < sizeof val) val[vl++] = *v;
        v++;
      }
      if (!vl) return -1;
    }
    val[vl] = 0;
    if (strcmp(key, "name") == 0) {
      size_t k = vl < sizeof part->name - 1 ? vl : sizeof part->name - 1;
      memcpy(part->name, val, k);
      part->name[k] = 0;
    } else if (strcmp(key, "filename") == 0 && !have_ext) {
      size_t k = vl < sizeof part->filename - 1 ? vl : sizeof part->filename - 1;
      memcpy(part->filename, val, k);
      part->filename[k] = 0;
      part->has_filename = 1;
    } else if (strcmp(key, "filename*") == 0) { /* charset'lang'pct-encoded */
      char *q1 = strchr(val, '\''), *q2 = q1 ? strchr(q1 + 1, '\'') : NULL;
      if (!q2) continue;
      *q1 = 0;
      if (strcasecmp(val, "utf-8") != 0 && strcasecmp(val, "us-ascii") != 0) continue;
      size_t o = 0;
      for (const char *p = q2 + 1; *p && o + 1 < sizeof part->filename; p++) {
        if (*p == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
          char hx[3] = {p[1], p[2], 0};
          part->filename[o++] = (char)strtol(hx, NULL, 16);
          p += 2;
        } else {
          part->filename[o++] = *p;
        }
      }
      part->filename[o] = 0;
      part->has_filename = 1;
      have_ext = 1;
    }
  }
  part->form_data = strcmp(type, "form-data") == 0;
  return 0;
}

/* Headers of a part are [a, b). */
static void begin_part(dshd_mp_t *mp, const char *a, const char *b) {
  dshd_mp_part_t *part = &mp->part;
  memset(part, 0, sizeof *part);
  for (const char *line = a; line < b;) {
    const char *eol = memmem(line, (size_t)(b - line), "\r\n", 2);
    if (!eol) eol = b;
    size_t ll = (size_t)(eol - line);
    if (ll > 20 && strncasecmp(line, "content-disposition:", 20) == 0) {
      char *v = strndup(line + 20, ll - 20);
      if (!v || parse_disposition(v, part) != 0) memset(part, 0, sizeof *part);
      free(v);
    }
    line = eol + 2;
  }
  mp->ops->begin(mp->ud, part);
}

static int stopped(dshd_mp_t *mp) {
  return mp->ops->stopped && mp->ops->stopped(mp->ud);
}

static int fail(dshd_mp_t *mp, const char *msg, char *why, size_t whylen) {
  mp->state = MP_FAILED;
  snprintf(why, whylen, "%s", msg);
  return -1;
}

/* Parses buf[pos, blen); keeps what may start a delimiter. */
static int process(dshd_mp_t *mp, char *why, size_t whylen) {
  while (!stopped(mp)) {
    char *b = mp->buf;
    size_t avail = mp->blen - mp->pos;
    switch (mp->state) {
      case MP_PREAMBLE:
      case MP_BODY: {
        char *hit = memmem(b + mp->pos, avail, mp->delim, mp->dlen);
        if (hit) {
          if (mp->state == MP_BODY) {
            if (hit > b + mp->pos)
              mp->ops->data(mp->ud, b + mp->pos, (size_t)(hit - (b + mp->pos)));
            if (stopped(mp)) return 0;
            mp->ops->end(mp->ud);
          }
          mp->pos = (size_t)(hit - b) + mp->dlen;
          mp->state = MP_AFTER_DELIM;
          continue;
        }
        if (avail >= mp->dlen) {
          size_t safe = avail - (mp->dlen - 1);
          if (mp->state == MP_BODY) mp->ops->data(mp->ud, b + mp->pos, safe);
          mp->pos += safe;
        }
        return 0;
      }
      case MP_AFTER_DELIM: {
        if (avail < 2) return 0;
        if (b[mp->pos] == '-' && b[mp->pos + 1] == '-') {
          mp->state = MP_DONE;
          mp->pos = mp->blen;
          return 0;
        }
        char *crlf = memmem(b + mp->pos, avail, "\r\n", 2);
        if (!crlf) return avail > 256 ? fail(mp, "multipart: bad boundary line", why, whylen) : 0;
        for (char *p = b + mp->pos; p < crlf; p++)
          if (*p != ' ' && *p != '\t') return fail(mp, "multipart: bad boundary line", why, whylen);
        mp->pos = (size_t)(crlf - b) + 2;
        mp->state = MP_HEADERS;
        continue;
      }
      case MP_HEADERS: {
        if (avail >= 2 && b[mp->pos] == '\r' && b[mp->pos + 1] == '\n') { /* no headers */
          begin_part(mp, b + mp->pos, b + mp->pos);
          mp->pos += 2;
          mp->state = MP_BODY;
          continue;
        }
        char *end = memmem(b + mp->pos, avail, "\r\n\r\n", 4);
        if (!end)
          return avail > MP_MAX_HEADERS ? fail(mp, "multipart: part headers too large", why, whylen)
                                        : 0;
        begin_part(mp, b + mp->pos, end);
        mp->pos = (size_t)(end - b) + 4;
        mp->state = MP_BODY;
        continue;
      }
      case MP_FAILED:
        return fail(mp, "multipart: malformed body", why, whylen);
      default: /* MP_DONE: the epilogue is ignored */
        mp->pos = mp->blen;
        return 0;
    }
  }
  return 0;
}

int dshd_mp_new(const char *ct, const dshd_mp_ops_t *ops, void *ud, dshd_mp_t **out, char *why,
                size_t whylen) {
  *out = NULL;
  const char *p = ct ? strcasestr(ct, "boundary=") : NULL;
  char bnd[MAX_BOUNDARY + 1];
  size_t n = 0;
  if (p) {
    p += 9;
    if (*p == '"') {
      p++;
      while (*p && *p != '"' && n < MAX_BOUNDARY) bnd[n++] = *p++;
      if (*p != '"') n = 0;
    } else {
      while (*p && *p != ';' && *p != ' ' && *p != '\t' && n < MAX_BOUNDARY) bnd[n++] = *p++;
      if (*p && *p != ';' && *p != ' ' && *p != '\t') n = 0; /* too long */
    }
  }
  bnd[n] = 0;
  if (!n) {
    snprintf(why, whylen, "no multipart boundary param in Content-Type");
    return -1;
  }
  dshd_mp_t *mp = calloc(1, sizeof *mp);
  if (!mp || !(mp->buf = malloc(MP_BUF))) {
    free(mp);
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  mp->ops = ops;
  mp->ud = ud;
  mp->dlen = (size_t)snprintf(mp->delim, sizeof mp->delim, "\r\n--%s", bnd);
  memcpy(mp->buf, "\r\n", 2);
  mp->blen = 2;
  mp->state = MP_PREAMBLE;
  *out = mp;
  return 0;
}

int dshd_mp_feed(dshd_mp_t *mp, const char *data, size_t n, char *why, size_t whylen) {
  if (mp->state == MP_FAILED) return fail(mp, "multipart: malformed body", why, whylen);
  while (n && !stopped(mp)) {
    if (mp->pos) {
      memmove(mp->buf, mp->buf + mp->pos, mp->blen - mp->pos);
      mp->blen -= mp->pos;
      mp->pos = 0;
    }
    size_t k = MP_BUF - mp->blen < n ? MP_BUF - mp->blen : n;
    memcpy(mp->buf + mp->blen, data, k);
    mp->blen += k;
    data += k;
    n -= k;
    if (process(mp, why, whylen) != 0) return -1;
  }
  return 0;
}

int dshd_mp_finish(dshd_mp_t *mp, int *in_part) {
  *in_part = mp->state == MP_BODY;
  return mp->state == MP_DONE ? 0 : -1;
}

void dshd_mp_free(dshd_mp_t *mp) {
  if (!mp) return;
  free(mp->buf);
  free(mp);
}
