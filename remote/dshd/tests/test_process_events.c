/* test_process_events.c: the JSON of process stream messages (remote/dshd/process_events.c):
 * data events built in place, start with replay, end events as envd (Go)
 * writes them, with and without the exit-signals extension. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "process_events.h"

/* Raw wait statuses as the kernel reports them. */
#define EXITED(code) ((code) << 8)
#define SIGNALED(sig, core) ((sig) | ((core) ? 0x80 : 0))

static void test_data(void) {
  char buf[256];
  const uint8_t bytes[] = {'h', 'i', '\n'};
  CHECK(dshd_procev_data_max(3) < sizeof buf);
  size_t n = dshd_procev_data(buf, DSHD_PROCEV_STDOUT, bytes, 3, 0, 0);
  CHECK_MEM(buf, n, "{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}", 36);
  n = dshd_procev_data(buf, DSHD_PROCEV_STDERR, bytes, 2, 18446744073709551615ull, 1);
  const char *want = "{\"event\":{\"data\":{\"stderr\":\"aGk=\",\"offset\":18446744073709551615}}}";
  CHECK_MEM(buf, n, want, strlen(want));
  CHECK(n <= dshd_procev_data_max(2));
  n = dshd_procev_data(buf, DSHD_PROCEV_PTY, bytes, 0, 7, 1);
  want = "{\"event\":{\"data\":{\"pty\":\"\",\"offset\":7}}}";
  CHECK_MEM(buf, n, want, strlen(want));
  /* a large event stays within its bound */
  size_t big = 256 << 10;
  uint8_t *raw = calloc(1, big);
  char *out = malloc(dshd_procev_data_max(big));
  n = dshd_procev_data(out, DSHD_PROCEV_STDOUT, raw, big, 123456789, 1);
  CHECK(n <= dshd_procev_data_max(big));
  CHECK(n > big * 4 / 3);
  CHECK(memcmp(out + n - 3, "}}}", 3) == 0);
  free(raw);
  free(out);
}

static void test_start(void) {
  char buf[512];
  size_t n = dshd_procev_start(buf, sizeof buf, 1234, NULL);
  CHECK_MEM(buf, n, "{\"event\":{\"start\":{\"pid\":1234}}}", 32);
  dshd_procev_replay_t rp[] = {{DSHD_PROCEV_STDOUT, 10, 20}, {DSHD_PROCEV_STDERR, 0, 0}, {0, 0, 0}};
  n = dshd_procev_start(buf, sizeof buf, 7, rp);
  const char *want =
      "{\"event\":{\"start\":{\"pid\":7,\"replay\":{\"stdout\":{\"requested\":10,\"from\":20},"
      "\"stderr\":{\"requested\":0,\"from\":0}}}}}";
  CHECK_MEM(buf, n, want, strlen(want));
}

static void check_end(int st, int ext, const char *want) {
  char buf[256];
  size_t n = dshd_procev_end(buf, sizeof buf, st, ext);
  CHECK_MEM(buf, n, want, strlen(want));
}

static void test_end(void) {
  check_end(EXITED(0), 1, "{\"event\":{\"end\":{\"exited\":true,\"status\":\"exit status 0\"}}}");
  check_end(EXITED(3), 1,
            "{\"event\":{\"end\":{\"exitCode\":3,\"exited\":true,\"status\":\"exit status 3\","
            "\"error\":\"exit status 3\"}}}");
  check_end(SIGNALED(SIGKILL, 0), 0,
            "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,\"status\":\"signal: killed\","
            "\"error\":\"signal: killed\"}}}");
  check_end(
      SIGNALED(SIGTERM, 0), 1,
      "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,\"status\":\"signal: terminated\","
      "\"error\":\"signal: terminated\",\"signal\":15,\"coreDumped\":false}}}");
  check_end(SIGNALED(SIGSEGV, 1), 1,
            "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,"
            "\"status\":\"signal: segmentation fault (core dumped)\","
            "\"error\":\"signal: segmentation fault (core "
            "dumped)\",\"signal\":11,\"coreDumped\":true}}}");
  char s[64];
  dshd_procev_status_string(SIGNALED(SIGINT, 0), s, sizeof s);
  CHECK_STR(s, "signal: interrupt");
  dshd_procev_status_string(SIGNALED(SIGHUP, 0), s, sizeof s);
  CHECK_STR(s, "signal: hangup");
  dshd_procev_signal_string(40, s, sizeof s);
  CHECK_STR(s, "signal 40");
  dshd_procev_signal_string(SIGTSTP, s, sizeof s);
  CHECK_STR(s, "stopped");
}

static void test_misc(void) {
  char buf[64];
  size_t n = dshd_procev_group(buf, sizeof buf, 1, 0);
  CHECK_MEM(buf, n, "{\"leaderExited\":true,\"quiescent\":false}", 39);
  CHECK_STR(dshd_procev_keepalive, "{\"event\":{\"keepalive\":{}}}");
}

int main(void) {
  test_data();
  test_start();
  test_end();
  test_misc();
  CHECK_DONE();
}
