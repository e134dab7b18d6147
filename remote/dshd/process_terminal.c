/* process_terminal.c: terminal sessions (extension "terminal-sessions") — what a PTY
 * process record needs beyond its own process group: the terminal's
 * foreground process group (the job a keyboard's Ctrl-C reaches), signals to
 * every process group of its session (a shell's background jobs), and
 * quiescence of the whole session, so a closed terminal leaves nothing behind.
 *
 * Sessions are found in /proc (field 6 of /proc/<pid>/stat), never by running
 * ps. Nothing reports when a job of another group ends, so once the leader's
 * group is empty the session is looked at again on a short backoff timer
 * until it is empty too. Uses process.h; never blocks. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "process.h"

#define SESSION_FIRST_MS 2
#define SESSION_MAX_MS 100

/* Calls fn(pid, pgid, ud) for every live (not zombie) process of session sid. */
static void each_member(int32_t sid, void (*fn)(int32_t, int32_t, void *), void *ud) {
  DIR *d = opendir("/proc");
  if (!d) return;
  struct dirent *e;
  char path[300], buf[512];
  while ((e = readdir(d))) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    char state;
    int ppid, pgrp, session;
    if (!p || sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) != 4) continue;
    if (session != sid || state == 'Z' || state == 'X') continue;
    fn((int32_t)atoi(e->d_name), (int32_t)pgrp, ud);
  }
  closedir(d);
}

static void count_cb(int32_t pid, int32_t pgid, void *ud) {
  (void)pid, (void)pgid;
  (*(int *)ud)++;
}

int record_session_alive(int32_t sid) {
  int n = 0;
  each_member(sid, count_cb, &n);
  return n > 0;
}

struct sig_ctx {
  int sig, n;
  int32_t done[64]; /* groups already signalled (a few suffice; repeats are harmless) */
};

static void signal_cb(int32_t pid, int32_t pgid, void *ud) {
  (void)pid;
  struct sig_ctx *c = ud;
  for (int i = 0; i < c->n && i < 64; i++)
    if (c->done[i] == pgid) return;
  if (pgid > 1) kill(-pgid, c->sig);
  if (c->n < 64) c->done[c->n] = pgid;
  c->n++;
}

int record_session_signal(int32_t sid, int sig) {
  struct sig_ctx c = {.sig = sig, .n = 0};
  each_member(sid, signal_cb, &c);
  if (sig == SIGTERM) { /* a stopped job would never see the TERM */
    c.sig = SIGCONT;
    c.n = 0;
    each_member(sid, signal_cb, &c);
  }
  return c.n;
}

int record_terminal_foreground(record_t *pp, int32_t *pgid, dshd_err_t *err) {
  if (!pp->pty || !pp->proc)
    return dshd_errf(err, "failed_precondition", "process %d has no terminal", (int)pp->pid);
  pid_t fg = tcgetpgrp(dsh_proc_fd(pp->proc, 1));
  if (fg <= 0)
    return dshd_errf(err, "failed_precondition",
                     "the terminal of process %d has no foreground process group", (int)pp->pid);
  *pgid = (int32_t)fg;
  return 0;
}

static void session_cb(struct ev_loop *ev, ev_timer *w, int revents) {
  (void)revents;
  record_t *pp = w->data;
  if (!record_session_alive(pp->pid)) {
    record_quiet(pp);
    return;
  }
  pp->session_delay_ms *= 2;
  if (pp->session_delay_ms > SESSION_MAX_MS) pp->session_delay_ms = SESSION_MAX_MS;
  ev_timer_set(w, dsh_ms_to_ev(pp->session_delay_ms), 0.);
  ev_timer_start(ev, w);
}

int record_session_wait(record_t *pp) {
  if (!pp->pty || dshd_config()->envd_compat || !record_session_alive(pp->pid)) return 0;
  pp->session_delay_ms = SESSION_FIRST_MS;
  ev_timer_init(&pp->session_t, session_cb, dsh_ms_to_ev(SESSION_FIRST_MS), 0.);
  pp->session_t.data = pp;
  ev_timer_start(dshd_ev(), &pp->session_t);
  return 1;
}
