/* download.c: GET and HEAD /files (protocol §4.2) — a file read from its
 * descriptor into libmicrohttpd's write buffer as the client takes it
 * (single byte ranges and If-Modified-Since as Go's ServeContent does),
 * never read into memory whole; Content-Type from the extension or sniffed
 * (text vs. binary). A file that ends early ends the connection.
 *
 * Uses files.c's checks and answers. Never serves anything but a regular
 * file; never waits in open() (O_NONBLOCK). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dsh/utf8.h"
#include "server.h"

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

/* The body is read by us, not sent with sendfile(): a file that ends before
 * the Content-Length it was served with (truncated meanwhile, or a sysfs
 * file whose size is a page) then ends the response and the connection,
 * where libmicrohttpd 0.9.75's sendfile path would wait forever. */
#define READ_BLOCK (64u << 10)

struct file_body {
  int fd;
  uint64_t off;
};

static ssize_t file_read(void *cls, uint64_t pos, char *buf, size_t max) {
  struct file_body *fb = cls;
  for (;;) {
    ssize_t n = pread(fb->fd, buf, max, (off_t)(fb->off + pos));
    if (n > 0) return n;
    if (n < 0 && errno == EINTR) continue;
    return MHD_CONTENT_READER_END_WITH_ERROR; /* ended early, or failed */
  }
}

static void file_free(void *cls) {
  struct file_body *fb = cls;
  close(fb->fd);
  free(fb);
}

void dshd_download(dshd_req_t *r) {
  int bad = 0;
  const char *qpath = dshd_files_query(r, "path", &bad);
  const char *username = dshd_files_query(r, "username", &bad);
  if (dshd_files_auth(r, qpath, "read") != 0) return;
  if (bad) return dshd_files_error(r, 400, "invalid query parameter: NUL byte");
  dshd_user_t u;
  if (dshd_files_user(r, username, &u) != 0) return;
  char path[PATH_MAX];
  dshd_err_t err = {0};
  if (dshd_resolve_path(&u, qpath ? qpath : "", 1, path, sizeof path, &err) != 0)
    return dshd_files_error(r, 400, "error expanding and resolving path '%s': %s",
                            qpath ? qpath : "", err.message);
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      return dshd_files_error(r, 404, "path '%s' does not exist", path);
    return dshd_files_error(r, 500, "error checking if path exists '%s': stat %s: %s", path, path,
                            dshd_strerror(e));
  }
  if (S_ISDIR(st.st_mode)) return dshd_files_error(r, 400, "path '%s' is a directory", path);
  if (!S_ISREG(st.st_mode))
    return dshd_files_error(r, 400, "path '%s' is not a regular file", path);
  if (identity_refused(dshd_req_header(r, MHD_HTTP_HEADER_ACCEPT_ENCODING)))
    return dshd_files_error(
        r, 406,
        "error parsing Accept-Encoding: no acceptable encoding found, supported: "
        "[gzip]");
  /* O_NONBLOCK: whatever replaced the file since stat(), open() returns at once. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return dshd_files_error(r, 500, "error opening file '%s': open %s: %s", path, path,
                            dshd_strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return dshd_files_error(r, 500, "error opening file '%s': not a regular file", path);
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
    struct file_body *fb = malloc(sizeof *fb);
    if (fb) *fb = (struct file_body){.fd = fd, .off = off};
    resp = fb ? MHD_create_response_from_callback(len, READ_BLOCK, file_read, fb, file_free) : NULL;
    if (!resp) {
      free(fb);
      close(fd);
      return dshd_files_error(r, 500, "error serving '%s': out of memory", path);
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
