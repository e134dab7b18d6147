/* test_http.c: the HTTP client in C against a tiny in-process server on a unix
 * socket (no network): event order, 1xx heads skipped, connection reuse,
 * back-pressure bounds, streamed bodies with pauses, the head limit,
 * cancellation, stall limits (a stalled answer fails, a dripping one and a
 * paused reader or writer do not), and freeing a client with live requests
 * (run under ASan/LSan for the ownership rules). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/http.h"

/* ---- server: a thread per connection, keep-alive, blocking I/O ---------- */

static char g_path[108];
static int g_listen = -1;

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* Reads one request head (and a Content-Length body, summed into *sum);
 * returns the path, or NULL when the peer closed. */
static char *read_request(int fd, char *buf, size_t cap, size_t *body_len, unsigned *sum) {
  size_t n = 0;
  char *end;
  buf[0] = 0;
  while (!(end = strstr(buf, "\r\n\r\n"))) {
    ssize_t k = read(fd, buf + n, cap - 1 - n);
    if (k <= 0) return NULL;
    n += (size_t)k;
    buf[n] = 0;
  }
  char *cl = strstr(buf, "Content-Length: ");
  size_t want = cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
  size_t have = n - (size_t)(end + 4 - buf);
  *body_len = want;
  *sum = 0;
  for (size_t i = 0; i < have; i++) *sum += (unsigned char)end[4 + i];
  char chunk[65536];
  while (have < want) {
    ssize_t k = read(fd, chunk, sizeof chunk);
    if (k <= 0) return NULL;
    for (ssize_t i = 0; i < k; i++) *sum += (unsigned char)chunk[i];
    have += (size_t)k;
  }
  char *path = strchr(buf, ' ');
  if (!path) return NULL;
  path++;
  *strchr(path, ' ') = 0;
  return path;
}

static int respond(int fd, const char *path, size_t body_len, unsigned sum) {
  char head[256];
  if (!strcmp(path, "/small")) {
    const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello";
    return write_all(fd, r, strlen(r));
  }
  if (!strcmp(path, "/continue")) {
    const char *r =
        "HTTP/1.1 100 Continue\r\nX-Early: x\r\n\r\n"
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: y\r\n\r\nok";
    return write_all(fd, r, strlen(r));
  }
  if (!strcmp(path, "/sum")) {
    char body[64];
    int m = snprintf(body, sizeof body, "%zu %u", body_len, sum);
    int h = snprintf(head, sizeof head, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n", m);
    return write_all(fd, head, (size_t)h) || write_all(fd, body, (size_t)m);
  }
  if (!strcmp(path, "/big")) { /* 1 MiB, byte i = i % 251 */
    size_t total = 1 << 20;
    int h = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", total);
    if (write_all(fd, head, (size_t)h)) return -1;
    char chunk[4096];
    for (size_t off = 0; off < total; off += sizeof chunk) {
      for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (char)((off + i) % 251);
      if (write_all(fd, chunk, sizeof chunk)) return -1;
    }
    return 0;
  }
  if (!strcmp(path, "/drip")) { /* 20 bytes, one each 50 ms */
    const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n";
    if (write_all(fd, r, strlen(r))) return -1;
    static const char drip[] = "abcdefghijklmnopqrst";
    for (int i = 0; i < 20; i++) {
      nap_ms(50);
      if (write_all(fd, drip + i, 1)) return -1;
    }
    return 0;
  }
  if (!strcmp(path, "/stall") || !strcmp(path, "/silent")) { /* stalls 3 s, then hangs up */
    const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello";
    if (!strcmp(path, "/stall") && write_all(fd, r, strlen(r))) return -1;
    nap_ms(3000);
    return -1;
  }
  const char *r = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
  return write_all(fd, r, strlen(r));
}

static void *serve_connection(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[16384];
  char *path;
  size_t body_len;
  unsigned sum;
  while ((path = read_request(fd, buf, sizeof buf, &body_len, &sum)))
    if (respond(fd, path, body_len, sum)) break;
  close(fd);
  return NULL;
}

static void *serve(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept4(g_listen, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return NULL; /* shut down */
    pthread_t t;
    pthread_create(&t, NULL, serve_connection, (void *)(intptr_t)fd);
    pthread_detach(t);
  }
}

/* ---- client helpers ------------------------------------------------------ */

static dsh_loop_t *g_loop;
static dsh_event_t g_events[4096];
static size_t g_nevents;

/* Runs the loop until an event of kind (or DONE, with or_done) for id is in
 * g_events (callers reset g_nevents); returns its index, or -1 after 5 s of
 * silence. */
static long wait_event(uint32_t kind, uint64_t id, int or_done) {
  for (size_t seen = 0;;) {
    for (; seen < g_nevents; seen++) {
      const dsh_event_t *e = &g_events[seen];
      if (e->id == id && (e->kind == kind || (or_done && e->kind == DSH_EV_HTTP_DONE)))
        return (long)seen;
    }
    if (g_nevents > 4000) g_nevents = seen = 0;
    if (dsh_loop_run(g_loop, 5000) <= 0) return -1;
    g_nevents += dsh_loop_poll(g_loop, g_events + g_nevents, 4096 - g_nevents);
  }
}

static long run_until(uint32_t kind, uint64_t id) {
  return wait_event(kind, id, 0);
}

static dsh_http_req_t *start(dsh_http_t *h, const char *path, uint64_t id, dsh_http_req_opts_t *o) {
  char url[128], err[256];
  dsh_http_req_opts_t dflt = {0};
  if (!o) o = &dflt;
  snprintf(url, sizeof url, "http://localhost%s", path);
  o->url = url;
  o->unix_socket = g_path;
  dsh_http_req_t *r = NULL;
  CHECK_EQ_INT(dsh_http_start(h, o, id, &r, err, sizeof err), DSH_OK);
  return r;
}

/* Drains the whole body; returns its length. */
static size_t drain(dsh_http_req_t *r, uint64_t id, char *out, size_t cap) {
  size_t total = 0;
  for (;;) {
    const uint8_t *d;
    size_t n;
    int rc = dsh_http_peek(r, &d, &n);
    if (rc == DSH_EEOF) return total;
    if (rc == DSH_EAGAIN) {
      g_nevents = 0;
      if (wait_event(DSH_EV_HTTP_DATA, id, 1) < 0) return total;
      continue;
    }
    if (out && total + n <= cap) memcpy(out + total, d, n);
    total += n;
    dsh_http_consume(r, n);
  }
}

/* ---- tests --------------------------------------------------------------- */

static void small_and_reuse(dsh_http_t *h) {
  for (int i = 0; i < 3; i++) {
    g_nevents = 0;
    dsh_http_req_t *r = start(h, "/small", 100 + i, NULL);
    long head = run_until(DSH_EV_HTTP_HEAD, 100 + i);
    long done = run_until(DSH_EV_HTTP_DONE, 100 + i);
    CHECK(head >= 0 && done > head);
    CHECK_EQ_INT(g_events[head].n, 200);
    CHECK_EQ_INT(g_events[done].status, 0);
    CHECK_EQ_INT(dsh_http_status(r), 200);
    const char *hd;
    size_t hn;
    CHECK_EQ_INT(dsh_http_headers(r, &hd, &hn), DSH_OK);
    CHECK_MEM(hd, hn, "Content-Length: 5\r\nX-A: 1\r\n", 27);
    char body[16];
    CHECK_EQ_INT(drain(r, 100 + i, body, sizeof body), 5);
    CHECK_MEM(body, 5, "hello", 5);
    char err[64] = "x";
    CHECK_EQ_INT(dsh_http_result(r, err, sizeof err), 0);
    CHECK_STR(err, "");
    dsh_http_req_free(r);
  }
  dsh_http_stats_t st;
  dsh_http_stats(h, &st);
  CHECK_EQ_INT(st.requests, 3);
  CHECK_EQ_INT(st.connections, 1);
  CHECK_EQ_INT(st.live, 0);
}

static void skips_1xx(dsh_http_t *h) {
  g_nevents = 0;
  dsh_http_req_t *r = start(h, "/continue", 200, NULL);
  CHECK(run_until(DSH_EV_HTTP_DONE, 200) >= 0);
  CHECK_EQ_INT(dsh_http_status(r), 200);
  const char *hd;
  size_t hn;
  dsh_http_headers(r, &hd, &hn);
  CHECK_MEM(hd, hn, "Content-Length: 2\r\nX-Final: y\r\n", 31);
  char body[4];
  CHECK_EQ_INT(drain(r, 200, body, sizeof body), 2);
  dsh_http_req_free(r);
}

static void back_pressure(dsh_http_t *h) {
  dsh_http_req_opts_t o = {.max_buffer_bytes = 32768};
  g_nevents = 0;
  dsh_http_req_t *r = start(h, "/big", 300, &o);
  size_t total = 0;
  int bad = 0;
  for (;;) {
    const uint8_t *d;
    size_t n;
    int rc = dsh_http_peek(r, &d, &n);
    if (rc == DSH_EEOF) break;
    if (rc == DSH_EAGAIN) {
      g_nevents = 0;
      if (wait_event(DSH_EV_HTTP_DATA, 300, 1) < 0) break;
      continue;
    }
    /* let the server push more while we hold the buffer: it must pause */
    dsh_loop_run(g_loop, 1);
    g_nevents += dsh_loop_poll(g_loop, g_events, 4096);
    g_nevents = 0;
    /* running the loop may have appended (and moved) the buffer: peek again */
    CHECK_EQ_INT(dsh_http_peek(r, &d, &n), DSH_OK);
    dsh_http_req_info_t info;
    dsh_http_info(r, &info);
    CHECK(info.buffered <= 32768);
    size_t take = n > 4096 ? 4096 : n; /* consume in small bites */
    for (size_t i = 0; i < take; i++) bad += d[i] != (total + i) % 251;
    total += take;
    dsh_http_consume(r, take);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(total, 1 << 20);
  dsh_http_req_info_t info;
  dsh_http_info(r, &info);
  CHECK(info.buffered_peak >= 16384 && info.buffered_peak <= 32768);
  CHECK_EQ_INT(info.body_bytes, 1 << 20);
  CHECK_EQ_INT(dsh_http_result(r, NULL, 0), 0);
  dsh_http_req_free(r);
}

static void streamed_body(dsh_http_t *h) {
  static uint8_t data[300000];
  unsigned sum = 0;
  for (size_t i = 0; i < sizeof data; i++) sum += data[i] = (uint8_t)(i * 7);
  const char *hdrs[] = {"Content-Length: 300000"};
  dsh_http_req_opts_t o = {
      .method = "PUT", .stream_body = 1, .max_buffer_bytes = 65536, .headers = hdrs, .nheaders = 1};
  g_nevents = 0;
  dsh_http_req_t *r = start(h, "/sum", 400, &o);
  size_t off = 0, accepted;
  int again = 0;
  while (off < sizeof data) {
    int rc = dsh_http_send(r, data + off, sizeof data - off, &accepted);
    if (rc == DSH_EAGAIN) {
      again++;
      g_nevents = 0;
      CHECK(run_until(DSH_EV_HTTP_SEND, 400) >= 0);
      continue;
    }
    CHECK_EQ_INT(rc, DSH_OK);
    off += accepted;
  }
  CHECK(again > 0);
  CHECK_EQ_INT(dsh_http_send_end(r), DSH_OK);
  CHECK_EQ_INT(dsh_http_send(r, data, 1, &accepted), DSH_ESTATE);
  char body[64] = {0}, want[64];
  CHECK(run_until(DSH_EV_HTTP_DONE, 400) >= 0);
  size_t n = drain(r, 400, body, sizeof body - 1);
  snprintf(want, sizeof want, "300000 %u", sum);
  CHECK_MEM(body, n, want, strlen(want));
  CHECK_EQ_INT(dsh_http_status(r), 201);
  CHECK_EQ_INT(dsh_http_send(r, data, 1, &accepted), DSH_ESTATE);
  dsh_http_req_free(r);
}

static void head_limit(dsh_http_t *h) {
  dsh_http_req_opts_t o = {.max_header_bytes = 20};
  g_nevents = 0;
  dsh_http_req_t *r = start(h, "/small", 500, &o);
  long done = run_until(DSH_EV_HTTP_DONE, 500);
  CHECK(done >= 0);
  CHECK_EQ_INT(g_events[done].status, DSH_ELIMIT);
  char err[128];
  CHECK_EQ_INT(dsh_http_result(r, err, sizeof err), DSH_ELIMIT);
  CHECK_STR(err, "response head exceeds max_header_bytes (20)");
  CHECK_EQ_INT(dsh_http_status(r), 0);
  dsh_http_req_free(r);
}

static void cancel_and_free(dsh_http_t *h) {
  dsh_http_stats_t st;
  dsh_http_stats(h, &st);
  g_nevents = 0;
  /* a buffer far below the 1 MiB body: the transfer pauses, so it cannot
   * finish on its own before the cancel */
  dsh_http_req_opts_t small = {.max_buffer_bytes = 65536};
  dsh_http_req_t *r = start(h, "/big", 600, &small);
  CHECK(run_until(DSH_EV_HTTP_DATA, 600) >= 0);
  CHECK_EQ_INT(dsh_http_cancel(r), DSH_OK);
  CHECK_EQ_INT(dsh_http_cancel(r), DSH_OK);
  long done = run_until(DSH_EV_HTTP_DONE, 600);
  CHECK(done >= 0);
  CHECK_EQ_INT(g_events[done].status, DSH_ECANCELED);
  const uint8_t *d;
  size_t n;
  CHECK_EQ_INT(dsh_http_peek(r, &d, &n), DSH_EEOF);
  CHECK_EQ_INT(dsh_http_result(r, NULL, 0), DSH_ECANCELED);
  dsh_http_req_free(r);
  /* a request freed while running, and one freed before it ever ran */
  r = start(h, "/big", 601, NULL);
  CHECK(run_until(DSH_EV_HTTP_HEAD, 601) >= 0);
  dsh_http_req_free(r);
  dsh_http_req_free(start(h, "/small", 602, NULL));
  /* the canceled connections are not reused for the next answer */
  g_nevents = 0;
  r = start(h, "/small", 603, NULL);
  CHECK(run_until(DSH_EV_HTTP_DONE, 603) >= 0);
  char body[8];
  CHECK_EQ_INT(drain(r, 603, body, sizeof body), 5);
  CHECK_MEM(body, 5, "hello", 5);
  dsh_http_req_free(r);
  dsh_http_stats_t after;
  dsh_http_stats(h, &after);
  CHECK(after.connections >= st.connections + 2);
  CHECK_EQ_INT(after.live, 0);
}

/* Runs the loop for ms, collecting events; returns whether DONE came for id. */
static int idle(uint64_t id, double ms) {
  double until = dsh_loop_now_ms(g_loop) + ms;
  int done = 0;
  while (dsh_loop_now_ms(g_loop) < until) {
    dsh_loop_run(g_loop, (int64_t)(until - dsh_loop_now_ms(g_loop)) + 1);
    size_t k = dsh_loop_poll(g_loop, g_events, 4096);
    for (size_t i = 0; i < k; i++)
      done |= g_events[i].id == id && g_events[i].kind == DSH_EV_HTTP_DONE;
  }
  g_nevents = 0;
  return done;
}

static void stalls(dsh_http_t *h) {
  char err[256], body[64];
  dsh_http_req_info_t info;
  /* a head and half the body, then nothing: fails at the limit, well before
   * the server hangs up (3 s), with what arrived still readable */
  dsh_http_req_opts_t o = {.stall_timeout_ms = 300};
  g_nevents = 0;
  dsh_http_req_t *r = start(h, "/stall", 900, &o);
  long done = run_until(DSH_EV_HTTP_DONE, 900);
  CHECK(done >= 0);
  CHECK_EQ_INT(g_events[done].status, DSH_ETIMEDOUT);
  CHECK_EQ_INT(dsh_http_status(r), 200);
  CHECK_EQ_INT(drain(r, 900, body, sizeof body), 5);
  CHECK_MEM(body, 5, "hello", 5);
  CHECK_EQ_INT(dsh_http_result(r, err, sizeof err), DSH_ETIMEDOUT);
  CHECK_STR(err, "connection stalled: nothing received or sent for 300 ms");
  dsh_http_info(r, &info);
  CHECK_EQ_INT(info.stalled, 1);
  dsh_http_req_free(r);
  /* no answer at all: the wait for the head is bounded too */
  g_nevents = 0;
  r = start(h, "/silent", 901, &o);
  done = run_until(DSH_EV_HTTP_DONE, 901);
  CHECK(done >= 0);
  CHECK_EQ_INT(g_events[done].status, DSH_ETIMEDOUT);
  CHECK_EQ_INT(dsh_http_status(r), 0);
  CHECK_EQ_INT(dsh_http_result(r, err, sizeof err), DSH_ETIMEDOUT);
  CHECK_STR(err, "connection stalled: nothing received or sent for 300 ms");
  dsh_http_req_free(r);
  /* slow but moving (a byte each 50 ms for 1 s): completes */
  g_nevents = 0;
  r = start(h, "/drip", 902, &o);
  CHECK(run_until(DSH_EV_HTTP_HEAD, 902) >= 0);
  CHECK_EQ_INT(drain(r, 902, body, sizeof body), 20);
  CHECK_MEM(body, 20, "abcdefghijklmnopqrst", 20);
  CHECK_EQ_INT(dsh_http_result(r, NULL, 0), 0);
  dsh_http_info(r, &info);
  CHECK_EQ_INT(info.stalled, 0);
  dsh_http_req_free(r);
  /* a reader that does not consume for 3x the limit: the transfer is paused
   * by us, not stalled, and completes once read */
  dsh_http_req_opts_t slow = {.stall_timeout_ms = 200, .max_buffer_bytes = 32768};
  g_nevents = 0;
  r = start(h, "/big", 903, &slow);
  CHECK(run_until(DSH_EV_HTTP_DATA, 903) >= 0);
  CHECK_EQ_INT(idle(903, 600), 0);
  CHECK_EQ_INT(drain(r, 903, NULL, 0), 1 << 20);
  CHECK_EQ_INT(dsh_http_result(r, NULL, 0), 0);
  dsh_http_req_free(r);
  /* a streamed body fed only after 3x the limit: no stall either */
  static const uint8_t data[1000] = {1};
  const char *hdrs[] = {"Content-Length: 1000"};
  dsh_http_req_opts_t up = {
      .method = "PUT", .stream_body = 1, .stall_timeout_ms = 200, .headers = hdrs, .nheaders = 1};
  g_nevents = 0;
  r = start(h, "/sum", 904, &up);
  CHECK_EQ_INT(idle(904, 600), 0);
  size_t accepted;
  CHECK_EQ_INT(dsh_http_send(r, data, sizeof data, &accepted), DSH_OK);
  CHECK_EQ_INT(accepted, sizeof data);
  CHECK_EQ_INT(dsh_http_send_end(r), DSH_OK);
  CHECK(run_until(DSH_EV_HTTP_DONE, 904) >= 0);
  CHECK_EQ_INT(dsh_http_result(r, NULL, 0), 0);
  CHECK_EQ_INT(dsh_http_status(r), 201);
  dsh_http_req_free(r);
}

static void transport_error(dsh_http_t *h) {
  char url[] = "http://localhost/small", err[256];
  dsh_http_req_opts_t o = {.url = url, .unix_socket = "/nonexistent/dsh.sock"};
  dsh_http_req_t *r;
  CHECK_EQ_INT(dsh_http_start(h, &o, 700, &r, err, sizeof err), DSH_OK);
  long done = run_until(DSH_EV_HTTP_DONE, 700);
  CHECK(done >= 0);
  CHECK_EQ_INT(g_events[done].status, DSH_EHTTP);
  CHECK_EQ_INT(dsh_http_result(r, err, sizeof err), DSH_EHTTP);
  CHECK(strlen(err) > 0);
  dsh_http_req_free(r);
  o.url = NULL;
  CHECK_EQ_INT(dsh_http_start(h, &o, 701, &r, err, sizeof err), DSH_EINVAL);
  CHECK_STR(err, "http: start: url is required");
  const char *bad[] = {"X-Good: 1", "X-Bad: a\r\nInjected: b"};
  dsh_http_req_opts_t ob = {.url = url, .headers = bad, .nheaders = 2};
  CHECK_EQ_INT(dsh_http_start(h, &ob, 702, &r, err, sizeof err), DSH_EINVAL);
  CHECK_STR(err, "http: start: bad header line 2");
}

static void free_with_live_requests(void) {
  dsh_http_t *h;
  CHECK_EQ_INT(dsh_http_new(g_loop, &h), DSH_OK);
  g_nevents = 0;
  dsh_http_req_opts_t small = {.max_buffer_bytes = 65536}; /* a stays unfinished */
  dsh_http_req_t *a = start(h, "/big", 800, &small), *b = start(h, "/small", 801, NULL);
  CHECK(run_until(DSH_EV_HTTP_HEAD, 800) >= 0);
  dsh_http_free(h);
  CHECK_EQ_INT(dsh_http_result(a, NULL, 0), DSH_ECANCELED);
  CHECK_EQ_INT(dsh_http_cancel(a), DSH_OK);
  dsh_http_req_free(a);
  dsh_http_req_free(b);
}

int main(void) {
  snprintf(g_path, sizeof g_path, "/tmp/dsh-test-http-%d.sock", (int)getpid());
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  memcpy(un.sun_path, g_path, strlen(g_path) + 1);
  unlink(g_path);
  g_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (g_listen < 0 || bind(g_listen, (struct sockaddr *)&un, sizeof un) || listen(g_listen, 16)) {
    perror("test_http: listen");
    return 1;
  }
  pthread_t server;
  pthread_create(&server, NULL, serve, NULL);

  g_loop = dsh_loop_default();
  dsh_http_t *h;
  CHECK_EQ_INT(dsh_http_new(g_loop, &h), DSH_OK);
  small_and_reuse(h);
  skips_1xx(h);
  back_pressure(h);
  streamed_body(h);
  head_limit(h);
  cancel_and_free(h);
  stalls(h);
  transport_error(h);
  dsh_http_free(h);
  free_with_live_requests();

  shutdown(g_listen, SHUT_RDWR);
  pthread_join(server, NULL);
  close(g_listen);
  unlink(g_path);
  CHECK_DONE();
}
