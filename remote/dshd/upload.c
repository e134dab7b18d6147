/* upload.c: POST /files (protocol §4.3) — uploads streamed to disk as the
 * body arrives: the body goes through an optional gzip inflater (zlib,
 * bounded output buffer) into either the raw writer
 * (application/octet-stream) or a bounded multipart/form-data parser
 * (multipart.c; parts named "file" only; target = ?path or the part's
 * filename taken verbatim as a path). Each file: parents created (0755,
 * chowned), a directory target refused, O_WRONLY|O_CREAT|O_TRUNC 0666,
 * chowned, X-Metadata-* headers stored as user.e2b.* xattrs. After an error
 * the rest of the body is discarded and the error answered at the end.
 *
 * Uses files.c's checks and answers, users.c's dirs and chown. Never holds
 * more of a body than one gzip output buffer and the multipart window. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>

#include "dsh/utf8.h"
#include "multipart.h"
#include "server.h"

#define ZOUT (64u << 10)
#define XATTR_PREFIX "user.e2b."
#define MAX_METADATA_TOTAL 4096

enum { UP_RAW = 1, UP_MULTIPART };

struct files_upload {
  dshd_user_t u;
  int mode;
  char *query_path;
  json_t *metadata; /* object or NULL */
  json_t *results;  /* array of {"path","name","type"} */
  uint64_t content_length;
  /* gzip */
  int gzip;
  z_stream z;
  int z_inited, z_end;
  unsigned char *zout;
  /* current file */
  int fd;
  char path[PATH_MAX];
  int part_file; /* the current part is written */
  dshd_mp_t *mp; /* multipart */
  dshd_req_t *r;
};

static void up_close_file(struct files_upload *up) {
  if (up->fd >= 0) close(up->fd);
  up->fd = -1;
  up->part_file = 0;
}

/* A file that did not get its whole body (a write failed, the disk filled,
 * the body ended early or the client went away) must not stay behind looking
 * complete: it is removed, if the path still names the file written. */
static void up_abandon_file(struct files_upload *up) {
  struct stat a, b;
  if (up->fd >= 0 && fstat(up->fd, &a) == 0 && lstat(up->path, &b) == 0 && a.st_dev == b.st_dev &&
      a.st_ino == b.st_ino)
    unlink(up->path);
  up_close_file(up);
}

void dshd_upload_free(struct files_upload *up) {
  if (!up) return;
  if (up->part_file) up_abandon_file(up); /* the body never ended */
  up_close_file(up);
  if (up->z_inited) inflateEnd(&up->z);
  free(up->zout);
  dshd_mp_free(up->mp);
  free(up->query_path);
  json_decref(up->metadata);
  json_decref(up->results);
  free(up);
}

/* --- POST /files: writing one file ------------------------------------------------------- */

static int write_metadata(struct files_upload *up, dshd_req_t *r) {
  /* Replace user.e2b.* with the request's set (envd WriteMetadata). */
  char names[MAX_METADATA_TOTAL * 4];
  ssize_t n = flistxattr(up->fd, names, sizeof names);
  if (n < 0 && (errno == ENOTSUP || errno == EOPNOTSUPP)) return 0;
  size_t plen = strlen(XATTR_PREFIX);
  for (char *p = names; n > 0 && p < names + n; p += strlen(p) + 1) {
    if (strncmp(p, XATTR_PREFIX, plen) != 0) continue;
    if (up->metadata && json_object_get(up->metadata, p + plen)) continue;
    fremovexattr(up->fd, p);
  }
  const char *key;
  json_t *val;
  json_object_foreach(up->metadata, key, val) {
    char name[300];
    snprintf(name, sizeof name, "%s%s", XATTR_PREFIX, key);
    const char *v = json_string_value(val);
    if (fsetxattr(up->fd, name, v, strlen(v), 0) != 0) {
      int e = errno;
      if (e == ENOTSUP || e == EOPNOTSUPP) return 0;
      if (e == ENOSPC || e == EDQUOT) {
        dshd_files_error(r, 507, "not enough space for file metadata: %s", dshd_strerror(e));
        return -1;
      }
      dshd_files_error(r, 500, "error writing file metadata: %s", dshd_strerror(e));
      return -1;
    }
  }
  return 0;
}

static json_t *read_metadata_back(const char *path) {
  char names[MAX_METADATA_TOTAL * 4];
  ssize_t n = listxattr(path, names, sizeof names);
  if (n <= 0) return NULL;
  json_t *md = NULL;
  size_t plen = strlen(XATTR_PREFIX);
  char val[MAX_METADATA_TOTAL + 1];
  for (char *p = names; p < names + n; p += strlen(p) + 1) {
    if (strncmp(p, XATTR_PREFIX, plen) != 0) continue;
    ssize_t vl = getxattr(path, p, val, sizeof val - 1);
    if (vl < 0) continue;
    if (dsh_utf8_validate((const uint8_t *)val, (size_t)vl, NULL) != 0) continue;
    if (!md) md = json_object();
    json_object_set_new(md, p + plen, json_stringn(val, (size_t)vl));
  }
  return md;
}

/* envd processFile up to the copy: parents, directory check, chown, open. */
static int file_open(dshd_req_t *r, struct files_upload *up, const char *path) {
  dshd_act_as(&up->u);
  snprintf(up->path, sizeof up->path, "%s", path);
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  if (slash == parent)
    parent[1] = 0;
  else if (slash)
    *slash = 0;
  dshd_err_t err = {0};
  if (dshd_ensure_dirs(&up->u, parent, &err) != 0) {
    dshd_files_error(r, 500, "error ensuring directories: %s", err.message);
    return -1;
  }
  struct stat st;
  int exists = 0;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      dshd_files_error(r, 400, "path is a directory: %s", path);
      return -1;
    }
    if (!S_ISREG(st.st_mode)) { /* a FIFO would block open(); a device is not a file to fill */
      dshd_files_error(r, 400, "path '%s' is not a regular file", path);
      return -1;
    }
    exists = 1;
  } else if (errno != ENOENT) {
    dshd_files_error(r, 500, "error getting file info: stat %s: %s", path, dshd_strerror(errno));
    return -1;
  }
  int chowned = 0;
  if (exists) {
    int rc = dshd_chown_path(&up->u, path);
    if (rc == 0)
      chowned = 1;
    else if (rc != -ENOENT) {
      dshd_files_error(r, 500, "error changing file ownership: chown %s: %s", path,
                       dshd_strerror(-rc));
      return -1;
    }
  }
  /* O_NONBLOCK: whatever replaced the file since stat(), open() returns at once. */
  up->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666);
  if (up->fd < 0) {
    int e = errno;
    if (e == ENOSPC)
      dshd_files_error(r, 507, "not enough inodes available: open %s: %s", path, dshd_strerror(e));
    else if (e == EISDIR)
      dshd_files_error(r, 400, "path is a directory: %s", path);
    else if (e == ENXIO)
      dshd_files_error(r, 400, "path '%s' is not a regular file", path);
    else
      dshd_files_error(r, 500, "error opening file: open %s: %s", path, dshd_strerror(e));
    return -1;
  }
  if (fstat(up->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(up->fd);
    up->fd = -1;
    dshd_files_error(r, 400, "path '%s' is not a regular file", path);
    return -1;
  }
  if (!chowned) {
    int rc = dshd_chown_fd(&up->u, up->fd);
    if (rc != 0) {
      dshd_files_error(r, 500, "error changing file ownership: chown %s: %s", path,
                       dshd_strerror(-rc));
      up_close_file(up);
      return -1;
    }
  }
  up->part_file = 1;
  return 0;
}

static int file_write(dshd_req_t *r, struct files_upload *up, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t n = write(up->fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      if (e == ENOSPC || e == EDQUOT) {
        if (up->content_length)
          dshd_files_error(r, 507, "attempted to write %llu bytes: not enough disk space available",
                           (unsigned long long)up->content_length);
        else
          dshd_files_error(r, 507, "not enough disk space available");
      } else {
        dshd_files_error(r, 500, "error writing file: write %s: %s", up->path, dshd_strerror(e));
      }
      up_abandon_file(up);
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int file_finish(dshd_req_t *r, struct files_upload *up) {
  dshd_act_as(&up->u);
  if (write_metadata(up, r) != 0) {
    up_abandon_file(up);
    return -1;
  }
  struct stat a, b;
  int have = fstat(up->fd, &a) == 0;
  if (close(up->fd) != 0 && (errno == ENOSPC || errno == EDQUOT)) {
    up->fd = -1;
    up->part_file = 0;
    if (have && lstat(up->path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      unlink(up->path);
    dshd_files_error(r, 507, "not enough disk space available");
    return -1;
  }
  up->fd = -1;
  up->part_file = 0;
  json_t *e = json_object();
  json_object_set_new(e, "path", dshd_json_str(up->path));
  const char *slash = strrchr(up->path, '/');
  json_object_set_new(e, "name", dshd_json_str(slash && slash[1] ? slash + 1 : up->path));
  json_object_set_new(e, "type", json_string("file"));
  json_t *md = read_metadata_back(up->path);
  if (md) json_object_set_new(e, "metadata", md);
  json_array_append_new(up->results, e);
  return 0;
}

/* --- multipart/form-data: the parser's consumer ----------------------------------------- */

static void part_begin(void *ud, const dshd_mp_part_t *part) {
  struct files_upload *up = ud;
  dshd_req_t *r = up->r;
  up->part_file = 0;
  if (!part->form_data || strcmp(part->name, "file") != 0) return; /* other parts: skipped */
  const char *target = up->query_path;
  if (!target) {
    if (!part->has_filename)
      return dshd_files_error(
          r, 400,
          "error getting multipart custom part file name: filename not found in "
          "Content-Disposition header");
    target = part->filename;
  }
  char path[PATH_MAX];
  dshd_err_t err = {0};
  if (dshd_resolve_path(&up->u, target, 1, path, sizeof path, &err) != 0)
    return dshd_files_error(r, 400, "error resolving path: %s", err.message);
  size_t i;
  json_t *e;
  json_array_foreach(up->results, i, e) {
    if (strcmp(json_string_value(json_object_get(e, "path")), path) == 0)
      return dshd_files_error(
          r, 400,
          "you cannot upload multiple files to the same path '%s' in one upload "
          "request, only the first specified file was uploaded",
          path);
  }
  file_open(r, up, path);
}

static void part_data(void *ud, const char *p, size_t n) {
  struct files_upload *up = ud;
  if (up->part_file && n) file_write(up->r, up, p, n);
}

static void part_end(void *ud) {
  struct files_upload *up = ud;
  if (up->part_file) file_finish(up->r, up);
}

static int part_stopped(void *ud) {
  struct files_upload *up = ud;
  return dshd_files_failed(up->r);
}

static const dshd_mp_ops_t mp_ops = {part_begin, part_data, part_end, part_stopped};

/* --- body pipeline -------------------------------------------------------------------------- */

static void consume(dshd_req_t *r, struct files_upload *up, const char *data, size_t n) {
  if (up->mode == UP_RAW) {
    if (up->fd >= 0) file_write(r, up, data, n);
  } else {
    char why[128];
    if (dshd_mp_feed(up->mp, data, n, why, sizeof why) != 0)
      dshd_files_error(r, 500, "error reading form: %s", why);
  }
}

static void inflate_feed(dshd_req_t *r, struct files_upload *up, const char *data, size_t n) {
  up->z.next_in = (Bytef *)(uintptr_t)data;
  up->z.avail_in = (uInt)n;
  while (!dshd_files_failed(r) && (up->z.avail_in || !up->z_end)) {
    if (up->z_end) { /* a further gzip member follows */
      if (inflateReset(&up->z) != Z_OK) break;
      up->z_end = 0;
    }
    up->z.next_out = up->zout;
    up->z.avail_out = ZOUT;
    int zr = inflate(&up->z, Z_NO_FLUSH);
    size_t got = ZOUT - up->z.avail_out;
    if (got) consume(r, up, (const char *)up->zout, got);
    if (zr == Z_STREAM_END) {
      up->z_end = 1;
      continue;
    }
    if (zr == Z_BUF_ERROR || (zr == Z_OK && up->z.avail_in == 0 && up->z.avail_out != 0)) break;
    if (zr != Z_OK) {
      if (up->z.total_out == 0 && !got)
        dshd_files_error(r, 400, "error decompressing request body: gzip: %s",
                         up->z.msg ? up->z.msg : "invalid header");
      else
        dshd_files_error(r, 500, "error writing file: gzip: %s",
                         up->z.msg ? up->z.msg : "invalid data");
      return;
    }
  }
}

/* --- POST /files ----------------------------------------------------------------------------- */

struct md_ctx {
  json_t *md;
  size_t total;
  char err[512];
};

static enum MHD_Result collect_metadata(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value) {
  struct md_ctx *c = cls;
  (void)kind;
  static const char pfx[] = "x-metadata-";
  if (c->err[0] || strncasecmp(key, pfx, sizeof pfx - 1) != 0) return MHD_YES;
  const char *k = key + sizeof pfx - 1;
  if (!*k) return MHD_YES;
  char lk[256];
  size_t kl = strlen(k);
  if (kl > 255 - strlen(XATTR_PREFIX)) {
    snprintf(c->err, sizeof c->err, "metadata key \"%.40s...\" exceeds %zu bytes", k,
             255 - strlen(XATTR_PREFIX));
    return MHD_YES;
  }
  for (size_t i = 0; i <= kl; i++) lk[i] = (char)tolower((unsigned char)k[i]);
  if (json_object_get(c->md, lk)) return MHD_YES; /* first value wins */
  for (const char *p = value ? value : ""; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) {
      snprintf(c->err, sizeof c->err,
               "metadata value for key \"%s\" contains non-printable-ASCII byte 0x%02x", lk,
               (unsigned char)*p);
      return MHD_YES;
    }
  for (const char *p = lk; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) {
      snprintf(c->err, sizeof c->err, "metadata key contains non-printable-ASCII byte 0x%02x",
               (unsigned char)*p);
      return MHD_YES;
    }
  c->total += strlen(XATTR_PREFIX) + kl + strlen(value ? value : "");
  json_object_set_new(c->md, lk, json_string(value ? value : ""));
  return MHD_YES;
}

void dshd_upload_begin(dshd_req_t *r) {
  int bad = 0;
  const char *qpath = dshd_files_query(r, "path", &bad);
  const char *username = dshd_files_query(r, "username", &bad);
  if (dshd_files_auth(r, qpath, "write") != 0) return;
  if (bad) return dshd_files_error(r, 400, "invalid query parameter: NUL byte");
  const char *ce = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING);
  int gzip = 0;
  if (ce && *ce) {
    char enc[64];
    size_t i = 0;
    while (ce[i] && ce[i] != ';' && i + 1 < sizeof enc) {
      enc[i] = ce[i];
      i++;
    }
    enc[i] = 0;
    char *e = enc;
    while (*e == ' ') e++;
    size_t el = strlen(e);
    while (el && e[el - 1] == ' ') e[--el] = 0;
    if (strcasecmp(e, "gzip") == 0)
      gzip = 1;
    else if (strcasecmp(e, "identity") != 0)
      return dshd_files_error(
          r, 400,
          "error decompressing request body: unsupported Content-Encoding: %.60s, "
          "supported: [gzip]",
          ce);
  }
  struct files_upload *up = calloc(1, sizeof *up);
  if (!up) return dshd_files_error(r, 500, "out of memory");
  r->up = up;
  up->r = r;
  up->fd = -1;
  if (dshd_files_user(r, username, &up->u) != 0) return;
  struct md_ctx mc = {.md = json_object()};
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect_metadata, &mc);
  if (!mc.err[0] && mc.total > MAX_METADATA_TOTAL)
    snprintf(mc.err, sizeof mc.err, "total metadata size %zu exceeds %d bytes", mc.total,
             MAX_METADATA_TOTAL);
  if (mc.err[0]) {
    json_decref(mc.md);
    return dshd_files_error(r, 400, "invalid metadata: %s", mc.err);
  }
  up->metadata = mc.md;
  up->results = json_array();
  const char *cl = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl) up->content_length = strtoull(cl, NULL, 10);
  if (qpath && !(up->query_path = strdup(qpath))) return dshd_files_error(r, 500, "out of memory");
  const char *ct = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
  char mt[128] = "";
  if (ct) {
    size_t i = 0;
    while (ct[i] && ct[i] != ';' && i + 1 < sizeof mt) {
      mt[i] = (char)tolower((unsigned char)ct[i]);
      i++;
    }
    mt[i] = 0;
    while (i && mt[i - 1] == ' ') mt[--i] = 0;
  }
  if (strcmp(mt, "application/octet-stream") == 0) {
    up->mode = UP_RAW;
    if (!qpath)
      return dshd_files_error(r, 400, "path query parameter is required for raw body upload");
    char path[PATH_MAX];
    dshd_err_t err = {0};
    if (dshd_resolve_path(&up->u, qpath, 1, path, sizeof path, &err) != 0)
      return dshd_files_error(r, 400, "error resolving path: %s", err.message);
    if (file_open(r, up, path) != 0) return;
  } else if (strncmp(mt, "multipart/", 10) == 0) {
    up->mode = UP_MULTIPART;
    char why[128];
    if (dshd_mp_new(ct, &mp_ops, up, &up->mp, why, sizeof why) != 0)
      return dshd_files_error(r, 500, "error parsing multipart form: %s", why);
  } else {
    return dshd_files_error(r, 400,
                            "unsupported content type: %.100s, expected multipart/form-data or "
                            "application/octet-stream",
                            ct ? ct : "");
  }
  if (gzip) {
    up->gzip = 1;
    up->zout = malloc(ZOUT);
    if (!up->zout || inflateInit2(&up->z, 16 + MAX_WBITS) != Z_OK)
      return dshd_files_error(r, 500, "out of memory");
    up->z_inited = 1;
  }
}

void dshd_upload_body(dshd_req_t *r, const char *data, size_t n) {
  struct files_upload *up = r->up;
  if (!up || dshd_files_failed(r)) return;
  if (up->gzip)
    inflate_feed(r, up, data, n);
  else
    consume(r, up, data, n);
}

void dshd_upload_finish(dshd_req_t *r) {
  struct files_upload *up = r->up;
  if (!up || dshd_files_failed(r)) return;
  if (up->gzip && !up->z_end) {
    if (up->z.total_in == 0 && up->z.total_out == 0)
      return dshd_files_error(
          r, 400, "error decompressing request body: failed to create gzip reader: EOF");
    return dshd_files_error(r, 500, "error writing file: unexpected EOF");
  }
  if (up->mode == UP_RAW) {
    if (up->fd >= 0 && file_finish(r, up) != 0) return;
  } else {
    int in_part;
    if (dshd_mp_finish(up->mp, &in_part) != 0) {
      if (in_part && up->part_file) {
        up_abandon_file(up);
        return dshd_files_error(r, 500, "error writing file: unexpected EOF");
      }
      return dshd_files_error(r, 500, "error reading form: multipart: NextPart: EOF");
    }
  }
  /* No file part at all: [] as envd answers (the SDK then reports it). */
  json_t *res = up->results;
  up->results = NULL;
  dshd_req_answer(r, MHD_HTTP_OK, dshd_response_json(res));
}
