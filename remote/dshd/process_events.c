/* process_events.c: process stream messages as JSON text (see process_events.h).
 *
 * Uses the core's base64 encoder for data events, snprintf for the small
 * fixed shapes. Never allocates and never writes past the sizes documented
 * in the header. */
#include "process_events.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "dsh/base64.h"

const char dshd_procev_keepalive[] = "{\"event\":{\"keepalive\":{}}}";

static const char *stream_name(int stream) {
  switch (stream) {
    case DSHD_PROCEV_STDERR:
      return "stderr";
    case DSHD_PROCEV_PTY:
      return "pty";
    default:
      return "stdout";
  }
}

/* {"event":{"data":{"stdout":"   — 28 bytes for the longest name */
#define DATA_HEAD_MAX 32
/* ","offset":18446744073709551615}}} */
#define DATA_TAIL_MAX 40

size_t dshd_procev_data_max(size_t n) {
  return DATA_HEAD_MAX + dsh_base64_encoded_len(n) + DATA_TAIL_MAX;
}

size_t dshd_procev_data(char *dst, int stream, const uint8_t *p, size_t n, uint64_t offset,
                        int with_offset) {
  static const char head[] = "{\"event\":{\"data\":{\"";
  const char *name = stream_name(stream);
  size_t at = 0, k = sizeof head - 1, nl = strlen(name);
  memcpy(dst, head, k);
  at = k;
  memcpy(dst + at, name, nl);
  at += nl;
  memcpy(dst + at, "\":\"", 3);
  at += 3;
  at += dsh_base64_encode(p, n, dst + at);
  dst[at++] = '"';
  if (with_offset) {
    char num[24];
    int m = snprintf(num, sizeof num, "%" PRIu64, offset);
    memcpy(dst + at, ",\"offset\":", 10);
    at += 10;
    memcpy(dst + at, num, (size_t)m);
    at += (size_t)m;
  }
  memcpy(dst + at, "}}}", 3);
  return at + 3;
}

static size_t clamp(int n, size_t len) {
  if (n < 0) return 0;
  return (size_t)n < len ? (size_t)n : (len ? len - 1 : 0);
}

size_t dshd_procev_start(char *buf, size_t len, int32_t pid, const dshd_procev_replay_t *replay) {
  size_t at = clamp(snprintf(buf, len, "{\"event\":{\"start\":{\"pid\":%" PRId32, pid), len);
  if (replay && replay[0].stream) {
    at += clamp(snprintf(buf + at, len - at, ",\"replay\":{"), len - at);
    for (int i = 0; replay[i].stream; i++)
      at +=
          clamp(snprintf(buf + at, len - at,
                         "%s\"%s\":{\"requested\":%" PRIu64 ",\"from\":%" PRIu64 "}", i ? "," : "",
                         stream_name(replay[i].stream), replay[i].requested, replay[i].from),
                len - at);
    at += clamp(snprintf(buf + at, len - at, "}"), len - at);
  }
  at += clamp(snprintf(buf + at, len - at, "}}}"), len - at);
  return at;
}

/* Go's zerrors_linux signal table (syscall.Signal.String). */
static const char *const go_signals[] = {
    [1] = "hangup",
    [2] = "interrupt",
    [3] = "quit",
    [4] = "illegal instruction",
    [5] = "trace/breakpoint trap",
    [6] = "aborted",
    [7] = "bus error",
    [8] = "floating point exception",
    [9] = "killed",
    [10] = "user defined signal 1",
    [11] = "segmentation fault",
    [12] = "user defined signal 2",
    [13] = "broken pipe",
    [14] = "alarm clock",
    [15] = "terminated",
    [16] = "stack fault",
    [17] = "child exited",
    [18] = "continued",
    [19] = "stopped (signal)",
    [20] = "stopped",
    [21] = "stopped (tty input)",
    [22] = "stopped (tty output)",
    [23] = "urgent I/O condition",
    [24] = "CPU time limit exceeded",
    [25] = "file size limit exceeded",
    [26] = "virtual timer expired",
    [27] = "profiling timer expired",
    [28] = "window changed",
    [29] = "I/O possible",
    [30] = "power failure",
    [31] = "bad system call",
};

void dshd_procev_signal_string(int sig, char *buf, size_t len) {
  if (sig > 0 && (size_t)sig < sizeof go_signals / sizeof go_signals[0] && go_signals[sig])
    snprintf(buf, len, "%s", go_signals[sig]);
  else
    snprintf(buf, len, "signal %d", sig);
}

void dshd_procev_status_string(int st, char *buf, size_t len) {
  if (WIFEXITED(st)) {
    snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
  } else if (WIFSIGNALED(st)) {
    char name[64];
    dshd_procev_signal_string(WTERMSIG(st), name, sizeof name);
    snprintf(buf, len, "signal: %s%s", name, WCOREDUMP(st) ? " (core dumped)" : "");
  } else {
    snprintf(buf, len, "exit status %d", -1);
  }
}

size_t dshd_procev_end(char *buf, size_t len, int st, int with_ext) {
  char status[96];
  dshd_procev_status_string(st, status, sizeof status);
  int exited = WIFEXITED(st);
  int code = exited ? WEXITSTATUS(st) : -1;
  size_t at = clamp(snprintf(buf, len, "{\"event\":{\"end\":{"), len);
  if (code != 0) at += clamp(snprintf(buf + at, len - at, "\"exitCode\":%d,", code), len - at);
  at += clamp(snprintf(buf + at, len - at, "\"exited\":%s,\"status\":\"%s\"",
                       exited ? "true" : "false", status),
              len - at);
  if (code != 0) at += clamp(snprintf(buf + at, len - at, ",\"error\":\"%s\"", status), len - at);
  if (with_ext && WIFSIGNALED(st))
    at += clamp(snprintf(buf + at, len - at, ",\"signal\":%d,\"coreDumped\":%s", WTERMSIG(st),
                         WCOREDUMP(st) ? "true" : "false"),
                len - at);
  at += clamp(snprintf(buf + at, len - at, "}}}"), len - at);
  return at;
}

size_t dshd_procev_group(char *buf, size_t len, int leader_exited, int quiescent) {
  return clamp(snprintf(buf, len, "{\"leaderExited\":%s,\"quiescent\":%s}",
                        leader_exited ? "true" : "false", quiescent ? "true" : "false"),
               len);
}
