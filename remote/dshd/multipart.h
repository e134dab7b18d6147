/* multipart.h: a streaming multipart/form-data parser for POST /files
 * (private to dshd).
 *
 * Bounded: one 96 KiB working buffer, part headers at most 16 KiB, the
 * boundary at most 200 bytes. Part bodies are handed over in pieces as they
 * arrive (never buffered whole); only what might begin a delimiter is held
 * back. The parser never allocates after dshd_mp_new. */
#ifndef DSHD_MULTIPART_H
#define DSHD_MULTIPART_H

#include <limits.h>
#include <stddef.h>

typedef struct dshd_mp dshd_mp_t;

/* What a part's Content-Disposition says (Go's mime.ParseMediaType rules:
 * quoted-string escapes, RFC 2231 filename*). A malformed or missing header
 * leaves form_data 0. */
typedef struct dshd_mp_part {
  int form_data;
  char name[256];
  int has_filename;
  char filename[PATH_MAX];
} dshd_mp_part_t;

typedef struct dshd_mp_ops {
  void (*begin)(void *ud, const dshd_mp_part_t *part);
  void (*data)(void *ud, const char *p, size_t n);
  void (*end)(void *ud);
  int (*stopped)(void *ud); /* nonzero: the consumer failed; parse no further */
} dshd_mp_ops_t;

/* From a multipart Content-Type; -1 with why when it has no usable boundary. */
int dshd_mp_new(const char *content_type, const dshd_mp_ops_t *ops, void *ud, dshd_mp_t **out,
                char *why, size_t whylen);
/* 0, or -1 with why on malformed input (sticky). */
int dshd_mp_feed(dshd_mp_t *mp, const char *data, size_t n, char *why, size_t whylen);
/* At the end of the body: 0 when the closing delimiter was seen, else -1 and
 * *in_part = 1 when the body ended inside a part. */
int dshd_mp_finish(dshd_mp_t *mp, int *in_part);
void dshd_mp_free(dshd_mp_t *mp);

#endif
