/* files.c: GET and POST /files (protocol §4.2-§4.3) and POST /init (§1.2).
 *
 * Downloads are served from the file descriptor (libmicrohttpd sends it with
 * sendfile; single byte ranges and If-Modified-Since as Go's ServeContent
 * does), never read into memory. Uploads stream to disk as the body arrives:
 * the body goes through an optional gzip inflater (zlib, bounded output
 * buffer) into either the raw writer (application/octet-stream) or a bounded
 * multipart/form-data parser (parts named "file" only; target = ?path or the
 * part's filename taken verbatim as a path). Each file: parents created
 * (0755, chowned), a directory target refused, O_WRONLY|O_CREAT|O_TRUNC 0666,
 * chowned, X-Metadata-* headers stored as user.e2b.* xattrs. After an error
 * the rest of the body is discarded and the error answered at the end.
 * Errors are envd's JSON {"code":<status>,"message":...}. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "dsh/utf8.h"
#include "multipart.h"
#include "server.h"

#define ZOUT (64u << 10)
#define XATTR_PREFIX "user.e2b."
#define MAX_METADATA_TOTAL 4096
#define INIT_MAX_BODY (1u << 20)

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

/* --- helpers ------------------------------------------------------------------------- */

static void http_error(dshd_req_t *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void http_error(dshd_req_t *r, unsigned status, const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  dshd_req_answer(r, status, dshd_response_http_error(status, "%s", msg));
}

static int failed(dshd_req_t *r) {
  return r->answer != NULL || r->answered;
}

static void up_close_file(struct files_upload *up) {
  if (up->fd >= 0) close(up->fd);
  up->fd = -1;
  up->part_file = 0;
}

static void up_free(struct files_upload *up) {
  if (!up) return;
  up_close_file(up);
  if (up->z_inited) inflateEnd(&up->z);
  free(up->zout);
  dshd_mp_free(up->mp);
  free(up->query_path);
  json_decref(up->metadata);
  json_decref(up->results);
  free(up);
}

/* User for ?username= (NULL/absent = default). 0, or answers and -1. */
static int files_user(dshd_req_t *r, const char *username, dshd_user_t *u) {
  dshd_err_t err = {0};
  if (dshd_user_lookup(username, u, &err) == 0) return 0;
  const char *name = username && *username ? username : dshd_default_user();
  if (strcmp(err.code, "permission_denied") == 0)
    http_error(r, 403, "%s", err.message);
  else if (strcmp(err.code, "unauthenticated") == 0)
    http_error(r, 401, "error looking up user '%s': user: unknown user %s", name, name);
  else
    http_error(r, 500, "%s", err.message);
  return -1;
}

/* Access token header or URL signature (§1.4). 0, or answers 401 and -1. */
static int files_auth(dshd_req_t *r, const char *path, const char *op) {
  if (!dshd_auth_has_token()) return 0;
  const char *hdr = dshd_req_header(r, "X-Access-Token");
  if (hdr && *hdr) {
    if (dshd_auth_header_ok(r)) return 0;
    http_error(r, 401, "access token present in header but does not match");
    return -1;
  }
  const char *why;
  const char *user = dshd_req_query(r, "username");
  if (dshd_auth_signature_ok(path ? path : "", op, user ? user : "", dshd_req_query(r, "signature"),
                             dshd_req_query(r, "signature_expiration"), &why) == 0)
    return 0;
  http_error(r, 401, "%s", why);
  return -1;
}

static const char *query_checked(dshd_req_t *r, const char *name, int *bad) {
  int nul = 0;
  const char *v = dshd_req_query_n(r, name, &nul);
  if (nul) *bad = 1;
  return v;
}

/* --- GET /files ------------------------------------------------------------------------ */

static int is_token_char(unsigned char c) {
  return c > 0x20 && c < 0x7f && !strchr("()<>@,;:\\\"/[]?=", c);
}

/* Go's mime.FormatMediaType("inline", {"filename": base}). */
static void content_disposition(const char *base, char *out, size_t outlen) {
  int token = *base != 0, ascii = 1;
  for (const unsigned char *p = (const unsigned char *)base; *p; p++) {
    if (!is_token_char(*p)) token = 0;
    if (*p >= 0x80 || *p < 0x20 || *p == 0x7f) ascii = 0;
  }
  size_t n = (size_t)snprintf(out, outlen, "inline; filename");
  if (token) {
    snprintf(out + n, outlen - n, "=%s", base);
  } else if (ascii) {
    n += (size_t)snprintf(out + n, outlen - n, "=\"");
    for (const char *p = base; *p && n + 4 < outlen; p++) {
      if (*p == '"' || *p == '\\') out[n++] = '\\';
      out[n++] = *p;
    }
    snprintf(out + n, outlen - n, "\"");
  } else {
    n += (size_t)snprintf(out + n, outlen - n, "*=utf-8''");
    for (const unsigned char *p = (const unsigned char *)base; *p && n + 4 < outlen; p++) {
      if (is_token_char(*p) && *p != '%' && *p != '\'' && *p != '*')
        out[n++] = (char)*p;
      else
        n += (size_t)snprintf(out + n, outlen - n, "%%%02X", *p);
    }
    out[n] = 0;
  }
}

static void http_date(time_t t, char out[64]) {
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, 64, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

static const char *mime_by_ext(const char *path) {
  static const struct {
    const char *ext, *type;
  } types[] = {
      {".txt", "text/plain; charset=utf-8"},
      {".html", "text/html; charset=utf-8"},
      {".htm", "text/html; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".json", "application/json"},
      {".xml", "text/xml; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".webp", "image/webp"},
      {".pdf", "application/pdf"},
      {".wasm", "application/wasm"},
      {".zip", "application/zip"},
      {".gz", "application/gzip"},
      {".csv", "text/csv; charset=utf-8"},
      {".md", "text/markdown; charset=utf-8"},
  };
  const char *dot = strrchr(path, '.');
  const char *slash = strrchr(path, '/');
  if (!dot || (slash && dot < slash)) return NULL;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (strcasecmp(dot, types[i].ext) == 0) return types[i].type;
  return NULL;
}

/* Go's http.DetectContentType, reduced to text vs. binary. */
static const char *sniff(int fd) {
  unsigned char buf[512];
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  if (n <= 0) return "text/plain; charset=utf-8";
  for (ssize_t i = 0; i < n; i++)
    if (buf[i] < 0x20 && buf[i] != '\t' && buf[i] != '\n' && buf[i] != '\r' && buf[i] != 0x0c &&
        buf[i] != 0x1b)
      return "application/octet-stream";
  size_t bad = 0;
  if (dsh_utf8_validate(buf, (size_t)n, &bad) != 0 && bad + 4 < (size_t)n)
    return "application/octet-stream";
  return "text/plain; charset=utf-8";
}

/* Identity refused by Accept-Encoding ("identity;q=0", or "*;q=0" without
 * identity accepted)? */
static int identity_refused(const char *ae) {
  if (!ae) return 0;
  int id_rej = 0, id_ok = 0, star_rej = 0;
  const char *p = ae;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    char item[128];
    size_t len = (size_t)(e - p) < sizeof item - 1 ? (size_t)(e - p) : sizeof item - 1;
    memcpy(item, p, len);
    item[len] = 0;
    char *semi = strchr(item, ';');
    double q = 1.0;
    if (semi) {
      *semi = 0;
      char *qp = strstr(semi + 1, "q=");
      if (!qp) qp = strstr(semi + 1, "Q=");
      if (qp) q = strtod(qp + 2, NULL);
    }
    char *name = item;
    while (*name == ' ') name++;
    size_t nl = strlen(name);
    while (nl && name[nl - 1] == ' ') name[--nl] = 0;
    if (strcasecmp(name, "identity") == 0) {
      if (q == 0)
        id_rej = 1;
      else
        id_ok = 1;
    } else if (strcmp(name, "*") == 0 && q == 0) {
      star_rej = 1;
    }
    p = e;
  }
  return id_rej || (star_rej && !id_ok);
}

/* "bytes=a-b" (one range) against size: 1 with [*off, *len), 0 = no usable
 * Range (serve all), -1 = unsatisfiable. */
static int parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len) {
  if (!h || strncmp(h, "bytes=", 6) != 0) return 0;
  const char *p = h + 6;
  if (strchr(p, ',')) return 0; /* several ranges: serve the whole file */
  while (*p == ' ') p++;
  char *end;
  if (*p == '-') {
    unsigned long long n = strtoull(p + 1, &end, 10);
    if (end == p + 1 || *end) return 0;
    if (n == 0) return -1;
    if (n > size) n = size;
    *off = size - n;
    *len = n;
    return size ? 1 : -1;
  }
  unsigned long long a = strtoull(p, &end, 10);
  if (end == p || *end != '-') return 0;
  p = end + 1;
  unsigned long long b = size ? size - 1 : 0;
  if (*p) {
    b = strtoull(p, &end, 10);
    if (end == p || *end) return 0;
    if (b >= size) b = size - 1;
  }
  if (a >= size || b < a) return -1;
  *off = a;
  *len = b - a + 1;
  return 1;
}

static void files_get(dshd_req_t *r) {
  int bad = 0;
  const char *qpath = query_checked(r, "path", &bad);
  const char *username = query_checked(r, "username", &bad);
  if (files_auth(r, qpath, "read") != 0) return;
  if (bad) return http_error(r, 400, "invalid query parameter: NUL byte");
  dshd_user_t u;
  if (files_user(r, username, &u) != 0) return;
  char path[PATH_MAX];
  dshd_err_t err = {0};
  if (dshd_resolve_path(&u, qpath ? qpath : "", 1, path, sizeof path, &err) != 0)
    return http_error(r, 400, "error expanding and resolving path '%s': %s", qpath ? qpath : "",
                      err.message);
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) return http_error(r, 404, "path '%s' does not exist", path);
    return http_error(r, 500, "error checking if path exists '%s': stat %s: %s", path, path,
                      dshd_strerror(e));
  }
  if (S_ISDIR(st.st_mode)) return http_error(r, 400, "path '%s' is a directory", path);
  if (!S_ISREG(st.st_mode)) return http_error(r, 400, "path '%s' is not a regular file", path);
  if (identity_refused(dshd_req_header(r, MHD_HTTP_HEADER_ACCEPT_ENCODING)))
    return http_error(r, 406,
                      "error parsing Accept-Encoding: no acceptable encoding found, supported: "
                      "[gzip]");
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return http_error(r, 500, "error opening file '%s': open %s: %s", path, path,
                      dshd_strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return http_error(r, 500, "error opening file '%s': not a regular file", path);
  }
  const char *slash = strrchr(path, '/');
  const char *base = slash && slash[1] ? slash + 1 : path;
  char cd[PATH_MAX * 3 + 64], lm[64];
  content_disposition(base, cd, sizeof cd);
  http_date(st.st_mtim.tv_sec, lm);
  const char *ctype = mime_by_ext(qpath ? qpath : path);
  if (!ctype) ctype = sniff(fd);
  uint64_t size = (uint64_t)st.st_size;
  const char *ims = dshd_req_header(r, MHD_HTTP_HEADER_IF_MODIFIED_SINCE);
  if (ims && !dshd_req_header(r, MHD_HTTP_HEADER_IF_NONE_MATCH)) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(ims, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (end && !*end && st.st_mtim.tv_sec <= timegm(&tm)) {
      close(fd);
      struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
      MHD_add_response_header(resp, MHD_HTTP_HEADER_LAST_MODIFIED, lm);
      return dshd_req_answer(r, MHD_HTTP_NOT_MODIFIED, resp);
    }
  }
  uint64_t off = 0, len = size;
  int rr = parse_range(dshd_req_header(r, MHD_HTTP_HEADER_RANGE), size, &off, &len);
  unsigned status = MHD_HTTP_OK;
  if (rr < 0) {
    close(fd);
    struct MHD_Response *resp =
        dshd_response_bytes("text/plain; charset=utf-8", "invalid range: failed to overlap\n", 33);
    char cr[64];
    snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)size);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    return dshd_req_answer(r, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
  }
  struct MHD_Response *resp;
  if (len == 0) {
    close(fd);
    resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  } else {
    resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
    if (!resp) {
      close(fd);
      return http_error(r, 500, "error serving '%s': out of memory", path);
    }
  }
  if (rr > 0) {
    char cr[96];
    snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1), (unsigned long long)size);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    status = MHD_HTTP_PARTIAL_CONTENT;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, cd);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_LAST_MODIFIED, lm);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
  dshd_req_answer(r, status, resp);
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
        http_error(r, 507, "not enough space for file metadata: %s", dshd_strerror(e));
        return -1;
      }
      http_error(r, 500, "error writing file metadata: %s", dshd_strerror(e));
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
    http_error(r, 500, "error ensuring directories: %s", err.message);
    return -1;
  }
  struct stat st;
  int exists = 0;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      http_error(r, 400, "path is a directory: %s", path);
      return -1;
    }
    exists = 1;
  } else if (errno != ENOENT) {
    http_error(r, 500, "error getting file info: stat %s: %s", path, dshd_strerror(errno));
    return -1;
  }
  int chowned = 0;
  if (exists) {
    int rc = dshd_chown_path(&up->u, path);
    if (rc == 0)
      chowned = 1;
    else if (rc != -ENOENT) {
      http_error(r, 500, "error changing file ownership: chown %s: %s", path, dshd_strerror(-rc));
      return -1;
    }
  }
  up->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
  if (up->fd < 0) {
    int e = errno;
    if (e == ENOSPC)
      http_error(r, 507, "not enough inodes available: open %s: %s", path, dshd_strerror(e));
    else if (e == EISDIR)
      http_error(r, 400, "path is a directory: %s", path);
    else
      http_error(r, 500, "error opening file: open %s: %s", path, dshd_strerror(e));
    return -1;
  }
  if (!chowned) {
    int rc = dshd_chown_fd(&up->u, up->fd);
    if (rc != 0) {
      http_error(r, 500, "error changing file ownership: chown %s: %s", path, dshd_strerror(-rc));
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
          http_error(r, 507, "attempted to write %llu bytes: not enough disk space available",
                     (unsigned long long)up->content_length);
        else
          http_error(r, 507, "not enough disk space available");
      } else {
        http_error(r, 500, "error writing file: write %s: %s", up->path, dshd_strerror(e));
      }
      up_close_file(up);
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int file_finish(dshd_req_t *r, struct files_upload *up) {
  if (write_metadata(up, r) != 0) {
    up_close_file(up);
    return -1;
  }
  if (close(up->fd) != 0 && (errno == ENOSPC || errno == EDQUOT)) {
    up->fd = -1;
    http_error(r, 507, "not enough disk space available");
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
      return http_error(r, 400,
                        "error getting multipart custom part file name: filename not found in "
                        "Content-Disposition header");
    target = part->filename;
  }
  char path[PATH_MAX];
  dshd_err_t err = {0};
  if (dshd_resolve_path(&up->u, target, 1, path, sizeof path, &err) != 0)
    return http_error(r, 400, "error resolving path: %s", err.message);
  size_t i;
  json_t *e;
  json_array_foreach(up->results, i, e) {
    if (strcmp(json_string_value(json_object_get(e, "path")), path) == 0)
      return http_error(r, 400,
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
  return failed(up->r);
}

static const dshd_mp_ops_t mp_ops = {part_begin, part_data, part_end, part_stopped};

/* --- body pipeline -------------------------------------------------------------------------- */

static void consume(dshd_req_t *r, struct files_upload *up, const char *data, size_t n) {
  if (up->mode == UP_RAW) {
    if (up->fd >= 0) file_write(r, up, data, n);
  } else {
    char why[128];
    if (dshd_mp_feed(up->mp, data, n, why, sizeof why) != 0)
      http_error(r, 500, "error reading form: %s", why);
  }
}

static void inflate_feed(dshd_req_t *r, struct files_upload *up, const char *data, size_t n) {
  up->z.next_in = (Bytef *)(uintptr_t)data;
  up->z.avail_in = (uInt)n;
  while (!failed(r) && (up->z.avail_in || !up->z_end)) {
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
        http_error(r, 400, "error decompressing request body: gzip: %s",
                   up->z.msg ? up->z.msg : "invalid header");
      else
        http_error(r, 500, "error writing file: gzip: %s", up->z.msg ? up->z.msg : "invalid data");
      return;
    }
  }
}

/* --- POST /files -------------------------------------------------------------------------------
 */

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

static void files_post_begin(dshd_req_t *r) {
  int bad = 0;
  const char *qpath = query_checked(r, "path", &bad);
  const char *username = query_checked(r, "username", &bad);
  if (files_auth(r, qpath, "write") != 0) return;
  if (bad) return http_error(r, 400, "invalid query parameter: NUL byte");
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
      return http_error(r, 400,
                        "error decompressing request body: unsupported Content-Encoding: %.60s, "
                        "supported: [gzip]",
                        ce);
  }
  struct files_upload *up = calloc(1, sizeof *up);
  if (!up) return http_error(r, 500, "out of memory");
  r->up = up;
  up->r = r;
  up->fd = -1;
  if (files_user(r, username, &up->u) != 0) return;
  struct md_ctx mc = {.md = json_object()};
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect_metadata, &mc);
  if (!mc.err[0] && mc.total > MAX_METADATA_TOTAL)
    snprintf(mc.err, sizeof mc.err, "total metadata size %zu exceeds %d bytes", mc.total,
             MAX_METADATA_TOTAL);
  if (mc.err[0]) {
    json_decref(mc.md);
    return http_error(r, 400, "invalid metadata: %s", mc.err);
  }
  up->metadata = mc.md;
  up->results = json_array();
  const char *cl = dshd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl) up->content_length = strtoull(cl, NULL, 10);
  if (qpath && !(up->query_path = strdup(qpath))) return http_error(r, 500, "out of memory");
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
    if (!qpath) return http_error(r, 400, "path query parameter is required for raw body upload");
    char path[PATH_MAX];
    dshd_err_t err = {0};
    if (dshd_resolve_path(&up->u, qpath, 1, path, sizeof path, &err) != 0)
      return http_error(r, 400, "error resolving path: %s", err.message);
    if (file_open(r, up, path) != 0) return;
  } else if (strncmp(mt, "multipart/", 10) == 0) {
    up->mode = UP_MULTIPART;
    char why[128];
    if (dshd_mp_new(ct, &mp_ops, up, &up->mp, why, sizeof why) != 0)
      return http_error(r, 500, "error parsing multipart form: %s", why);
  } else {
    return http_error(r, 400,
                      "unsupported content type: %.100s, expected multipart/form-data or "
                      "application/octet-stream",
                      ct ? ct : "");
  }
  if (gzip) {
    up->gzip = 1;
    up->zout = malloc(ZOUT);
    if (!up->zout || inflateInit2(&up->z, 16 + MAX_WBITS) != Z_OK)
      return http_error(r, 500, "out of memory");
    up->z_inited = 1;
  }
}

static void files_post_body(dshd_req_t *r, const char *data, size_t n) {
  struct files_upload *up = r->up;
  if (!up || failed(r)) return;
  if (up->gzip)
    inflate_feed(r, up, data, n);
  else
    consume(r, up, data, n);
}

static void files_post_finish(dshd_req_t *r) {
  struct files_upload *up = r->up;
  if (!up || failed(r)) return;
  if (up->gzip && !up->z_end) {
    if (up->z.total_in == 0 && up->z.total_out == 0)
      return http_error(r, 400,
                        "error decompressing request body: failed to create gzip reader: EOF");
    return http_error(r, 500, "error writing file: unexpected EOF");
  }
  if (up->mode == UP_RAW) {
    if (up->fd >= 0 && file_finish(r, up) != 0) return;
  } else {
    int in_part;
    if (dshd_mp_finish(up->mp, &in_part) != 0) {
      if (in_part && up->part_file) {
        up_close_file(up);
        return http_error(r, 500, "error writing file: unexpected EOF");
      }
      return http_error(r, 500, "error reading form: multipart: NextPart: EOF");
    }
  }
  /* No file part at all: [] as envd answers (the SDK then reports it). */
  json_t *res = up->results;
  up->results = NULL;
  dshd_req_answer(r, MHD_HTTP_OK, dshd_response_json(res));
}

/* --- POST /init ---------------------------------------------------------------------------------
 */

void dshd_init_begin(dshd_req_t *r) {}

void dshd_init_body(dshd_req_t *r, const char *data, size_t n) {
  if (failed(r)) return;
  if (r->body_len + n > INIT_MAX_BODY) {
    free(r->body);
    r->body = NULL;
    return http_error(r, 413, "request body exceeds %u bytes", INIT_MAX_BODY);
  }
  if (r->body_len + n > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap * 2 : 4096;
    while (cap < r->body_len + n) cap *= 2;
    char *nb = realloc(r->body, cap);
    if (!nb) return http_error(r, 500, "out of memory");
    r->body = nb;
    r->body_cap = cap;
  }
  memcpy(r->body + r->body_len, data, n);
  r->body_len += n;
}

void dshd_init_finish(dshd_req_t *r) {
  json_t *o = NULL;
  if (r->body_len) {
    json_error_t je;
    o = json_loadb(r->body, r->body_len, 0, &je);
    if (!o || !json_is_object(o)) {
      json_decref(o);
      return http_error(r, 400, "invalid JSON body: %s", o ? "expected an object" : je.text);
    }
  }
  json_t *envs = o ? json_object_get(o, "envVars") : NULL;
  if (envs && !json_is_null(envs)) {
    if (!json_is_object(envs)) {
      json_decref(o);
      return http_error(r, 400, "envVars: expected an object of strings");
    }
    const char *k;
    json_t *v;
    json_object_foreach(envs, k, v) {
      if (!json_is_string(v)) {
        json_decref(o);
        return http_error(r, 400, "envVars.%s: expected a string", k);
      }
    }
    json_t *merged = json_deep_copy(dshd_env_vars());
    json_object_update(merged, envs);
    dshd_server_set_envs(merged);
  }
  json_t *du = o ? json_object_get(o, "defaultUser") : NULL;
  if (json_is_string(du) && *json_string_value(du)) {
    dshd_err_t err = {0};
    if (dshd_set_default_user(json_string_value(du), &err) != 0) {
      json_decref(o);
      return http_error(r, 400, "defaultUser: %s", err.message);
    }
    dshd_server_user_changed();
  }
  json_t *dw = o ? json_object_get(o, "defaultWorkdir") : NULL;
  if (json_is_string(dw) && *json_string_value(dw)) {
    if (dshd_server_set_workdir(json_string_value(dw)) != 0) {
      json_decref(o);
      return http_error(r, 400, "defaultWorkdir: path too long");
    }
  }
  if (dshd_process_init) {
    dshd_err_t err = {0};
    if (!o) o = json_object();
    if (dshd_process_init(o, &err) != 0) {
      json_decref(o);
      unsigned st = (unsigned)dshd_code_http_status(err.code ? err.code : "internal");
      return http_error(r, st, "%s", err.message);
    }
  }
  json_decref(o);
  struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  dshd_req_answer(r, MHD_HTTP_NO_CONTENT, resp);
}

/* --- dispatch from server.c ----------------------------------------------------------------------
 */

void dshd_files_begin(dshd_req_t *r) {
  if (r->kind == REQ_FILES_GET) {
    /* answered at the end of the (empty) body */
    return;
  }
  files_post_begin(r);
}

void dshd_files_body(dshd_req_t *r, const char *data, size_t len) {
  files_post_body(r, data, len);
}

void dshd_files_finish(dshd_req_t *r) {
  if (r->kind == REQ_FILES_GET)
    files_get(r);
  else
    files_post_finish(r);
}

void dshd_files_completed(dshd_req_t *r) {
  up_free(r->up);
  r->up = NULL;
  free(r->body);
  r->body = NULL;
}
