/* test_proc.c: process groups on the real loop — spawn, stdio, exit codes,
 * signals, the terminate ladder, spawn errors, PTY, notify and manual modes. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/loop.h"
#include "dsh/proc.h"

static dsh_loop_t *L;

/* What one proc's events produced. */
struct rec {
  dsh_proc_t *p;
  uint64_t id;
  char *out[3];
  size_t n[3], cap[3];
  int eof[3], exited, quiet, drains, drain_status, data_events;
  int exit_before_quiet;
};

static void rec_init(struct rec *r) {
  memset(r, 0, sizeof *r);
  r->id = dsh_loop_new_id(L);
  r->exit_before_quiet = 1;
}

static void rec_free(struct rec *r) {
  for (int i = 0; i < 3; i++) free(r->out[i]);
}

static void take(struct rec *r, int stream) {
  const uint8_t *d;
  size_t n;
  while (dsh_proc_peek(r->p, stream, &d, &n) == DSH_OK) {
    if (r->n[stream] + n + 1 > r->cap[stream]) {
      r->cap[stream] = (r->n[stream] + n + 1) * 2;
      r->out[stream] = realloc(r->out[stream], r->cap[stream]);
    }
    memcpy(r->out[stream] + r->n[stream], d, n);
    r->n[stream] += n;
    r->out[stream][r->n[stream]] = 0;
    dsh_proc_consume(r->p, stream, n);
  }
}

static void on_event(struct rec *r, uint32_t kind, int32_t status, int64_t n) {
  switch (kind) {
    case DSH_EV_PROC_DATA:
      r->data_events++;
      take(r, (int)n);
      break;
    case DSH_EV_PROC_EOF:
      take(r, (int)n);
      r->eof[n] = 1;
      break;
    case DSH_EV_PROC_EXIT:
      r->exited = 1;
      break;
    case DSH_EV_PROC_QUIET:
      if (!r->exited) r->exit_before_quiet = 0;
      r->quiet = 1;
      break;
    case DSH_EV_PROC_DRAIN:
      r->drains++;
      r->drain_status = status;
      break;
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs the loop, routing queued events to r, until *flag is set or 10 s pass. */
static int pump_until(struct rec *r, const int *flag) {
  double deadline = now_ms() + 10000;
  dsh_event_t ev[64];
  while (!*flag && now_ms() < deadline) {
    dsh_loop_run(L, 50);
    size_t n;
    while ((n = dsh_loop_poll(L, ev, 64)) > 0)
      for (size_t i = 0; i < n; i++)
        if (ev[i].id == r->id) on_event(r, ev[i].kind, ev[i].status, ev[i].n);
  }
  return *flag;
}

static int spawn(struct rec *r, dsh_proc_opts_t *o, char *err) {
  rec_init(r);
  return dsh_proc_spawn(L, o, r->id, &r->p, err, 256);
}

static void test_echo(void) {
  const char *argv[] = {"/bin/echo", "hello", "world", NULL};
  dsh_proc_opts_t o = {.argv = argv, .stdout_mode = DSH_STDIO_PIPE, .stderr_mode = DSH_STDIO_PIPE};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  CHECK(dsh_proc_pid(r.p) > 0);
  CHECK(pump_until(&r, &r.quiet));
  CHECK(pump_until(&r, &r.eof[1]));
  CHECK_STR(r.out[1] ? r.out[1] : "", "hello world\n");
  CHECK(r.exit_before_quiet);
  dsh_proc_status_t st;
  CHECK_EQ_INT(dsh_proc_status(r.p, &st), DSH_OK);
  CHECK_EQ_INT(st.running, 0);
  CHECK_EQ_INT(st.exit_code, 0);
  CHECK_EQ_INT(st.term_signal, 0);
  CHECK_EQ_INT(st.quiescent, 1);
  CHECK_EQ_INT(st.stdout_bytes, 12);
  CHECK_EQ_INT(dsh_proc_quiescent(r.p), 1);
  CHECK_EQ_INT(dsh_proc_live_count(), 1);
  dsh_proc_free(r.p);
  CHECK_EQ_INT(dsh_proc_live_count(), 0);
  rec_free(&r);
}

static void test_env_and_path(void) {
  /* "env" is found through the PATH of envp; nothing of ours is inherited */
  const char *argv[] = {"env", NULL};
  const char *envp[] = {"PATH=/nonexistent:/usr/bin:/bin", "A=1", "B=two words", NULL};
  dsh_proc_opts_t o = {.argv = argv, .envp = envp, .cwd = "/", .stdout_mode = DSH_STDIO_PIPE};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  CHECK(pump_until(&r, &r.eof[1]));
  CHECK_STR(r.out[1] ? r.out[1] : "", "PATH=/nonexistent:/usr/bin:/bin\nA=1\nB=two words\n");
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_free(r.p);
  rec_free(&r);

  const char *pwd[] = {"/bin/sh", "-c", "pwd; echo $$ $(ps -o pgid= -p $$)", NULL};
  const char *envp2[] = {"PATH=/usr/bin:/bin", NULL};
  dsh_proc_opts_t o2 = {.argv = pwd, .envp = envp2, .cwd = "/tmp", .stdout_mode = DSH_STDIO_PIPE};
  CHECK_EQ_INT(spawn(&r, &o2, err), DSH_OK);
  CHECK(pump_until(&r, &r.eof[1]));
  char want[128];
  snprintf(want, sizeof want, "/tmp\n%d %d\n", dsh_proc_pid(r.p), dsh_proc_pid(r.p));
  CHECK_STR(r.out[1] ? r.out[1] : "", want);
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_free(r.p);
  rec_free(&r);
}

static void test_cat_round_trip(void) {
  const char *argv[] = {"cat", NULL};
  dsh_proc_opts_t o = {.argv = argv,
                       .stdin_mode = DSH_STDIO_PIPE,
                       .stdout_mode = DSH_STDIO_PIPE,
                       .max_buffer_bytes = 4096};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  size_t len = 300000;
  uint8_t *data = malloc(len);
  for (size_t i = 0; i < len; i++) data[i] = (uint8_t)(i * 7 + i / 256);
  CHECK_EQ_INT(dsh_proc_write(r.p, data, len), DSH_OK);
  dsh_proc_status_t st;
  dsh_proc_status(r.p, &st);
  CHECK(st.stdin_pending > 0); /* more than two pipes hold: some waits */
  CHECK_EQ_INT(dsh_proc_close_stdin(r.p), DSH_OK);
  CHECK_EQ_INT(dsh_proc_write(r.p, data, 1), DSH_ESTATE);
  CHECK(pump_until(&r, &r.eof[1]));
  CHECK_EQ_INT(r.drains, 1);
  CHECK_EQ_INT(r.drain_status, 0);
  CHECK_MEM(r.out[1], r.n[1], data, len);
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_status(r.p, &st);
  CHECK_EQ_INT(st.exit_code, 0);
  CHECK_EQ_INT(st.stdin_open, 0);
  CHECK_EQ_INT(st.stdin_pending, 0);
  dsh_proc_free(r.p);
  rec_free(&r);
  free(data);
}

static void test_broken_stdin(void) {
  /* the reader exits without reading: the pending bytes fail with ECLOSED */
  const char *argv[] = {"/bin/sh", "-c", "exec 0<&-; sleep 0.05", NULL};
  dsh_proc_opts_t o = {.argv = argv, .stdin_mode = DSH_STDIO_PIPE};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  static uint8_t big[1 << 20];
  int rc = dsh_proc_write(r.p, big, sizeof big);
  if (rc == DSH_OK) {
    CHECK(pump_until(&r, &r.drains));
    CHECK_EQ_INT(r.drain_status, DSH_ECLOSED);
  } else {
    CHECK_EQ_INT(rc, DSH_ECLOSED);
  }
  CHECK_EQ_INT(dsh_proc_write(r.p, big, 1), DSH_ECLOSED);
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_free(r.p);
  rec_free(&r);
}

static void test_exit_codes_and_signals(void) {
  const char *argv[] = {"/bin/sh", "-c", "exit 3", NULL};
  dsh_proc_opts_t o = {.argv = argv};
  struct rec r;
  char err[256] = "";
  dsh_proc_status_t st;
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_status(r.p, &st);
  CHECK_EQ_INT(st.exit_code, 3);
  CHECK_EQ_INT(st.stdout_eof, 1); /* not piped */
  dsh_proc_free(r.p);
  rec_free(&r);

  const char *sl[] = {"/bin/sleep", "10", NULL};
  dsh_proc_opts_t o2 = {.argv = sl};
  CHECK_EQ_INT(spawn(&r, &o2, err), DSH_OK);
  CHECK_EQ_INT(dsh_proc_quiescent(r.p), 0);
  CHECK_EQ_INT(dsh_proc_signal(r.p, SIGUSR1, 1), DSH_OK);
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_status(r.p, &st);
  CHECK_EQ_INT(st.exit_code, -1);
  CHECK_EQ_INT(st.term_signal, SIGUSR1);
  CHECK_EQ_INT(dsh_proc_signal(r.p, SIGTERM, 1), DSH_OK); /* gone: not an error */
  CHECK_EQ_INT(dsh_proc_signal(r.p, SIGTERM, 0), DSH_OK);
  dsh_proc_free(r.p);
  rec_free(&r);
}

static void test_terminate_ladder(void) {
  /* the leader ignores TERM (and so does its child): KILL after the grace */
  const char *argv[] = {"/bin/sh", "-c", "trap '' TERM; sleep 10 & wait", NULL};
  dsh_proc_opts_t o = {.argv = argv, .new_session = 1};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  usleep(20000); /* let the shell install its trap */
  double t0 = now_ms();
  CHECK_EQ_INT(dsh_proc_terminate(r.p, 150), DSH_OK);
  CHECK_EQ_INT(dsh_proc_terminate(r.p, 0), DSH_OK); /* idempotent: no restart */
  CHECK(pump_until(&r, &r.quiet));
  double elapsed = now_ms() - t0;
  CHECK(elapsed >= 140);
  dsh_proc_status_t st;
  dsh_proc_status(r.p, &st);
  CHECK_EQ_INT(st.term_requested, 1);
  CHECK_EQ_INT(st.kill_sent, 1);
  CHECK_EQ_INT(st.term_signal, SIGKILL);
  dsh_proc_free(r.p);
  rec_free(&r);

  /* an obedient group: no KILL */
  const char *sl[] = {"/bin/sleep", "10", NULL};
  dsh_proc_opts_t o2 = {.argv = sl};
  CHECK_EQ_INT(spawn(&r, &o2, err), DSH_OK);
  CHECK_EQ_INT(dsh_proc_terminate(r.p, 5000), DSH_OK);
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_status(r.p, &st);
  CHECK_EQ_INT(st.kill_sent, 0);
  CHECK_EQ_INT(st.term_signal, SIGTERM);
  dsh_proc_free(r.p);
  rec_free(&r);
}

static void test_grandchild_quiescence(void) {
  /* the leader exits at once; its orphan keeps the group alive */
  const char *argv[] = {"/bin/sh", "-c", "sleep 0.2 &", NULL};
  dsh_proc_opts_t o = {.argv = argv};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  CHECK(pump_until(&r, &r.exited));
  double t0 = now_ms();
  CHECK_EQ_INT(r.quiet, 0);
  CHECK(pump_until(&r, &r.quiet));
  CHECK(now_ms() - t0 >= 100);
  CHECK_EQ_INT(dsh_proc_quiescent(r.p), 1);
  dsh_proc_free(r.p);
  rec_free(&r);
}

static void test_spawn_errors(void) {
  char err[256] = "";
  struct rec r;
  const char *a1[] = {"/nope", NULL};
  dsh_proc_opts_t o = {.argv = a1, .stdout_mode = DSH_STDIO_PIPE};
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_ESPAWN);
  CHECK_STR(err, "spawn \"/nope\": No such file or directory");
  CHECK(r.p == NULL);

  const char *a2[] = {"no-such-program-dsh", NULL};
  const char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  o.argv = a2;
  o.envp = envp;
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_ESPAWN);
  CHECK_STR(err, "spawn \"no-such-program-dsh\": No such file or directory");

  const char *a3[] = {"/bin/true", NULL};
  o.argv = a3;
  o.cwd = "/nonexistent-dir";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_ESPAWN);
  CHECK_STR(err, "spawn: cwd \"/nonexistent-dir\": No such file or directory");

  const char *a4[] = {"/etc/passwd", NULL};
  o.argv = a4;
  o.cwd = NULL;
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_ESPAWN);
  CHECK_STR(err, "spawn \"/etc/passwd\": Permission denied");

  const char *a5[] = {"", NULL};
  o.argv = a5;
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_EINVAL);
  o.argv = a3;
  o.stdin_mode = 7;
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_EINVAL);

  CHECK_EQ_INT(dsh_proc_live_count(), 0);
  /* the failed children were reaped: no zombie waits for us */
  CHECK_EQ_INT(waitpid(-1, NULL, WNOHANG), -1);
}

static void test_pty(void) {
  const char *argv[] = {"/bin/sh", "-c",
                        "stty size; tty >/dev/null && echo tty; read x; echo got:$x", NULL};
  const char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  dsh_proc_opts_t o = {.argv = argv, .envp = envp, .pty = 1, .pty_rows = 33, .pty_cols = 77};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  CHECK(dsh_proc_fd(r.p, 0) >= 0);
  CHECK_EQ_INT(dsh_proc_fd(r.p, 0), dsh_proc_fd(r.p, 1));
  CHECK_EQ_INT(dsh_proc_close_stdin(r.p), DSH_ESTATE);
  CHECK_EQ_INT(dsh_proc_write(r.p, (const uint8_t *)"hi\n", 3), DSH_OK);
  CHECK(pump_until(&r, &r.eof[1]));
  /* the typed line is echoed by the terminal, output has \r\n */
  CHECK(r.out[1] && strstr(r.out[1], "33 77\r\n"));
  CHECK(r.out[1] && strstr(r.out[1], "tty\r\n"));
  CHECK(r.out[1] && strstr(r.out[1], "hi\r\n"));
  CHECK(r.out[1] && strstr(r.out[1], "got:hi\r\n"));
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_status_t st;
  dsh_proc_status(r.p, &st);
  CHECK_EQ_INT(st.exit_code, 0);
  CHECK_EQ_INT(st.stderr_eof, 1);
  dsh_proc_free(r.p);
  rec_free(&r);

  /* ^C reaches the foreground group; resize is seen */
  const char *sl[] = {"/bin/sleep", "10", NULL};
  dsh_proc_opts_t o2 = {.argv = sl, .pty = 1};
  CHECK_EQ_INT(spawn(&r, &o2, err), DSH_OK);
  CHECK_EQ_INT(dsh_proc_resize(r.p, 50, 120), DSH_OK);
  CHECK_EQ_INT(dsh_proc_write(r.p, (const uint8_t *)"\x03", 1), DSH_OK);
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_status(r.p, &st);
  CHECK_EQ_INT(st.term_signal, SIGINT);
  dsh_proc_free(r.p);
  rec_free(&r);
}

struct notified {
  int kinds[16];
  int n;
};

static void notify_fn(void *ud, dsh_proc_t *p, uint32_t kind, int32_t status, int64_t n) {
  (void)p, (void)status, (void)n;
  struct notified *nt = ud;
  if (nt->n < 16) nt->kinds[nt->n++] = (int)kind;
}

static void test_notify_and_manual(void) {
  struct notified nt = {{0}, 0};
  const char *argv[] = {"/bin/echo", "manual", NULL};
  dsh_proc_opts_t o = {.argv = argv,
                       .stdout_mode = DSH_STDIO_PIPE,
                       .manual_io = 1,
                       .notify = notify_fn,
                       .notify_ud = &nt};
  dsh_proc_t *p = NULL;
  char err[256] = "";
  CHECK_EQ_INT(dsh_proc_spawn(L, &o, 77, &p, err, sizeof err), DSH_OK);
  int fd = dsh_proc_fd(p, 1);
  CHECK(fd >= 0);
  const uint8_t *d;
  size_t n;
  CHECK_EQ_INT(dsh_proc_peek(p, 1, &d, &n), DSH_ESTATE);
  char buf[64];
  size_t got = 0;
  double deadline = now_ms() + 5000;
  while (now_ms() < deadline) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    poll(&pfd, 1, 100);
    ssize_t k = read(fd, buf + got, sizeof buf - 1 - got);
    if (k == 0) break;
    if (k > 0) got += (size_t)k;
  }
  buf[got] = 0;
  CHECK_STR(buf, "manual\n");
  deadline = now_ms() + 5000;
  while ((nt.n < 2) && now_ms() < deadline) dsh_loop_run(L, 50);
  CHECK_EQ_INT(nt.n, 2);
  CHECK_EQ_INT(nt.kinds[0], DSH_EV_PROC_EXIT);
  CHECK_EQ_INT(nt.kinds[1], DSH_EV_PROC_QUIET);
  CHECK_EQ_INT(dsh_loop_pending(L), 0);
  dsh_proc_free(p);
}

static void test_free_running(void) {
  const char *argv[] = {"/bin/sh", "-c", "sleep 30 & sleep 30", NULL};
  dsh_proc_opts_t o = {.argv = argv, .stdout_mode = DSH_STDIO_PIPE};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  usleep(20000);
  int pgid = dsh_proc_pid(r.p);
  dsh_proc_free(r.p);
  rec_free(&r);
  CHECK_EQ_INT(dsh_proc_live_count(), 0);
  /* libev reaps the killed members (the orphan via the subreaper) */
  double deadline = now_ms() + 5000;
  while (kill(-pgid, 0) == 0 && now_ms() < deadline) dsh_loop_run(L, 10);
  CHECK(kill(-pgid, 0) < 0 && errno == ESRCH);
}

static void test_identity(void) {
  if (geteuid() != 0) return; /* only root may switch */
  const char *argv[] = {"/bin/sh", "-c", "id -u; id -g; id -G", NULL};
  const char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  dsh_proc_opts_t o = {
      .argv = argv, .envp = envp, .stdout_mode = DSH_STDIO_PIPE, .uid = 65534, .gid = 65534};
  struct rec r;
  char err[256] = "";
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  CHECK(pump_until(&r, &r.eof[1]));
  CHECK_STR(r.out[1] ? r.out[1] : "", "65534\n65534\n65534\n");
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_free(r.p);
  rec_free(&r);

  o.init_groups = 1; /* nobody's account: its primary group */
  o.gid = -1;
  CHECK_EQ_INT(spawn(&r, &o, err), DSH_OK);
  CHECK(pump_until(&r, &r.eof[1]));
  CHECK_STR(r.out[1] ? r.out[1] : "", "65534\n65534\n65534\n");
  CHECK(pump_until(&r, &r.quiet));
  dsh_proc_free(r.p);
  rec_free(&r);

  /* the new user may not enter cwd: reported as a cwd failure */
  const char *t[] = {"/bin/true", NULL};
  dsh_proc_opts_t o2 = {.argv = t, .uid = 65534, .gid = 65534, .cwd = "/root"};
  if (access("/root", F_OK) == 0) {
    CHECK_EQ_INT(spawn(&r, &o2, err), DSH_ESPAWN);
    CHECK_STR(err, "spawn: cwd \"/root\": Permission denied");
  }
}

static void test_signal_names(void) {
  CHECK_EQ_INT(dsh_proc_signum("TERM"), SIGTERM);
  CHECK_EQ_INT(dsh_proc_signum("SIGINT"), SIGINT);
  CHECK_EQ_INT(dsh_proc_signum("sigkill"), SIGKILL);
  CHECK_EQ_INT(dsh_proc_signum("NOPE"), 0);
  CHECK_STR(dsh_proc_signame(SIGTERM), "SIGTERM");
  CHECK(dsh_proc_signame(0) == NULL);
  CHECK(dsh_proc_signame(200) == NULL);
}

int main(void) {
  L = dsh_loop_default();
  CHECK(L != NULL);
  test_signal_names();
  test_echo();
  test_env_and_path();
  test_cat_round_trip();
  test_broken_stdin();
  test_exit_codes_and_signals();
  test_terminate_ladder();
  test_grandchild_quiescence();
  test_spawn_errors();
  test_pty();
  test_notify_and_manual();
  test_free_running();
  test_identity();
  CHECK_EQ_INT(dsh_proc_live_count(), 0);
  CHECK_DONE();
}
