/* proc_spawn.c: process creation for proc.c — stdio pipes, /dev/null, a PTY,
 * the new process group or session, exec with PATH from the child's env.
 *
 * Uses clone(CLONE_VM | CLONE_VFORK) on a private stack (kept for the next
 * spawn), as glibc's posix_spawn does: the cost does not grow with the
 * parent's memory (a LuaJIT host), and the parent is suspended until the
 * child has called execve or exited, so the child reports a failed step as
 * {stage, errno} in the shared plan and the parent learns the outcome
 * synchronously.
 *
 * The child shares our memory: it runs only async-signal-safe calls that touch
 * nothing but its own stack and the read-only plan (no malloc, no stdio, no
 * locks; libcurl may have threads), uses raw syscalls for set*id (glibc's
 * wrappers would signal our threads), and is not instrumented by sanitizers.
 * Every signal is blocked across clone so no handler of ours runs in it.
 *
 * Never reaps a child that exec'd (libev does that); only a child that failed
 * before exec, which nobody else knows about, is waited for here. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "dsh/errors.h"
#include "dsh/fail.h"
#include "proc_internal.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

enum stage {
  ST_SESSION = 1,
  ST_PGID,
  ST_CTTY,
  ST_STDIO,
  ST_FDS,
  ST_RLIMIT,
  ST_GROUPS,
  ST_SETGID,
  ST_SETUID,
  ST_CWD,
  ST_EXEC
};

#define CHILD_STACK_BYTES (256 * 1024)

/* No sanitizer instrumentation in code that runs on the child's stack in our
 * address space (it would poison shadow memory for frames that never return). */
#define CHILD_CODE __attribute__((noinline, no_sanitize("address", "undefined")))

/* Everything the child reads, and the one thing it writes (the report). */
struct plan {
  const dsh_proc_opts_t *o;
  const char *const *envp;
  const char *path; /* PATH from envp, or the default */
  int src[3];       /* fd to install as 0/1/2, or -1 to inherit the parent's */
  int ctty;         /* pty slave, or -1 */
  int set_groups;   /* call setgroups(ngroups, groups) */
  const gid_t *groups;
  int ngroups;
  gid_t one_gid;
  int32_t gid;                 /* opts->gid, or the account's with init_groups; -1 = keep */
  volatile int32_t stage, err; /* written by the child when a step fails */
};

/* --- child side: async-signal-safe only ----------------------------------- */

CHILD_CODE __attribute__((noreturn)) static void child_fail(struct plan *pl, int stage, int err) {
  pl->err = err;
  pl->stage = stage;
  _exit(127);
}

/* Marks every fd above 2 close-on-exec (the dup'ed stdio sources are still
 * needed until execve). close_range where the kernel has it, else
 * /proc/self/fd. */
CHILD_CODE static int child_cloexec_all(void) {
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return 0;
  int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  char buf[4096];
  for (;;) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n < 0) return -1;
    if (n == 0) break;
    for (long off = 0; off < n;) {
      /* struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name */
      unsigned short reclen;
      memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char *name = buf + off + 19;
      int fd = 0, ok = name[0] != '\0';
      for (const char *c = name; *c; c++) {
        if (*c < '0' || *c > '9')
          ok = 0;
        else
          fd = fd * 10 + (*c - '0');
      }
      if (ok && fd > 2 && fd != dir) fcntl(fd, F_SETFD, FD_CLOEXEC);
      off += reclen;
    }
  }
  close(dir);
  return 0;
}

/* execvpe with PATH taken from the child's own environment. */
CHILD_CODE __attribute__((noreturn)) static void child_exec(struct plan *pl) {
  const char *file = pl->o->argv[0];
  char *const *argv = (char *const *)pl->o->argv;
  char *const *envp = (char *const *)pl->envp;
  if (strchr(file, '/')) {
    execve(file, argv, envp);
    child_fail(pl, ST_EXEC, errno);
  }
  size_t flen = strlen(file);
  int eacces = 0;
  char buf[PATH_MAX];
  const char *dir = pl->path;
  for (;;) {
    const char *end = strchrnul(dir, ':');
    size_t dlen = (size_t)(end - dir);
    if (dlen + flen + 2 <= sizeof buf) {
      size_t at = 0;
      if (dlen) { /* an empty entry means the current directory */
        memcpy(buf, dir, dlen);
        buf[dlen] = '/';
        at = dlen + 1;
      }
      memcpy(buf + at, file, flen + 1);
      execve(buf, argv, envp);
      switch (errno) {
        case EACCES:
          eacces = 1;
          break;
        case ENOENT:
        case ENOTDIR:
        case ESTALE:
        case ELOOP:
        case ENAMETOOLONG:
        case ENODEV:
        case ETIMEDOUT:
          break;
        default:
          child_fail(pl, ST_EXEC, errno);
      }
    }
    if (!*end) break;
    dir = end + 1;
  }
  child_fail(pl, ST_EXEC, eacces ? EACCES : ENOENT);
}

CHILD_CODE __attribute__((noreturn)) static void child_run(struct plan *pl) {
  const dsh_proc_opts_t *o = pl->o;
  /* Signals are all blocked (the parent did it before clone): reset every
   * disposition first, so nothing inherited can run here or survive exec. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);

  if (o->new_session || o->pty) {
    if (setsid() < 0) child_fail(pl, ST_SESSION, errno);
  } else if (setpgid(0, 0) < 0) {
    child_fail(pl, ST_PGID, errno);
  }
  if (pl->ctty >= 0 && ioctl(pl->ctty, TIOCSCTTY, 0) < 0) child_fail(pl, ST_CTTY, errno);

  /* Move every source above 2 first so installing one never clobbers another. */
  int tmp[3];
  for (int i = 0; i < 3; i++) {
    tmp[i] = pl->src[i] < 0 ? -1 : fcntl(pl->src[i], F_DUPFD_CLOEXEC, 3);
    if (pl->src[i] >= 0 && tmp[i] < 0) child_fail(pl, ST_STDIO, errno);
  }
  for (int i = 0; i < 3; i++) {
    if (tmp[i] >= 0) {
      if (dup2(tmp[i], i) < 0) child_fail(pl, ST_STDIO, errno);
    } else {
      fcntl(i, F_SETFD, 0); /* inherited: keep it across exec */
    }
  }
  if (child_cloexec_all() < 0) child_fail(pl, ST_FDS, errno);

  if (o->max_open_files > 0) {
    struct rlimit rl = {o->max_open_files, o->max_open_files};
    if (syscall(SYS_setrlimit, RLIMIT_NOFILE, &rl) < 0) child_fail(pl, ST_RLIMIT, errno);
  }
  /* raw syscalls: glibc's set*id wrappers would broadcast to our threads */
  if (pl->set_groups && syscall(SYS_setgroups, (size_t)pl->ngroups, pl->groups) < 0)
    child_fail(pl, ST_GROUPS, errno);
  if (pl->gid >= 0 && syscall(SYS_setgid, (gid_t)pl->gid) < 0) child_fail(pl, ST_SETGID, errno);
  if (o->uid >= 0 && syscall(SYS_setuid, (uid_t)o->uid) < 0) child_fail(pl, ST_SETUID, errno);
  /* After the switch, so the new user needs access to cwd. */
  if (o->cwd && chdir(o->cwd) < 0) child_fail(pl, ST_CWD, errno);

  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  child_exec(pl);
}

CHILD_CODE static int child_main(void *arg) {
  child_run(arg);
}

/* --- parent side ------------------------------------------------------------ */

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static const char *errstr(int e, char *buf, size_t len) {
  return strerror_r(e, buf, len);
}

static int sys_fail(char *err, size_t errlen, const char *what) {
  char eb[128];
  return dsh_fail(err, errlen, DSH_ESYS, "spawn: %s: %s", what, errstr(errno, eb, sizeof eb));
}

/* The child's stack, kept for the next spawn instead of unmapped: with
 * CLONE_VFORK the child is done with it (exec'd or exited) once clone
 * returns, and unmapping memory costs a TLB shootdown, an interrupt to every
 * CPU that ran us (measured on a 2-vCPU VM: 0.06-0.09 ms of each spawn).
 * One per thread (a few KiB resident), never freed. */
static int child_stack(void **out, char *err, size_t errlen) {
  static __thread void *stack;
  if (!stack) {
    void *s = mmap(NULL, CHILD_STACK_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (s == MAP_FAILED) return sys_fail(err, errlen, "mmap");
    mprotect(s, 4096, PROT_NONE); /* guard page below the child's stack */
    stack = s;
  }
  *out = stack;
  return DSH_OK;
}

static int open_pty(const dsh_proc_opts_t *o, int *master, int *slave, char *err, size_t errlen) {
  *master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*master < 0) return sys_fail(err, errlen, "posix_openpt");
  char name[128];
  if (grantpt(*master) < 0 || unlockpt(*master) < 0 || ptsname_r(*master, name, sizeof name) != 0) {
    int rc = sys_fail(err, errlen, "pty setup");
    close_fd(master);
    return rc;
  }
  *slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*slave < 0) {
    int rc = sys_fail(err, errlen, "open pty slave");
    close_fd(master);
    return rc;
  }
  struct termios tio;
  if (tcgetattr(*slave, &tio) == 0) { /* UTF-8 aware line editing (erase) */
    tio.c_iflag |= IUTF8;
    tcsetattr(*slave, TCSANOW, &tio);
  }
  struct winsize ws = {.ws_row = o->pty_rows ? o->pty_rows : 24,
                       .ws_col = o->pty_cols ? o->pty_cols : 80};
  if (ioctl(*slave, TIOCSWINSZ, &ws) < 0 || set_nonblock(*master) < 0) {
    int rc = sys_fail(err, errlen, "pty setup");
    close_fd(master);
    close_fd(slave);
    return rc;
  }
  return DSH_OK;
}

/* The child-side and parent-side fd of one stdio stream. */
static int open_stdio(int mode, int is_input, int *devnull, int *child_fd, int *parent_fd,
                      char *err, size_t errlen) {
  *child_fd = *parent_fd = -1;
  if (mode == DSH_STDIO_INHERIT) return DSH_OK;
  if (mode == DSH_STDIO_NULL) {
    if (*devnull < 0) *devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (*devnull < 0) return sys_fail(err, errlen, "open /dev/null");
    *child_fd = *devnull;
    return DSH_OK;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return sys_fail(err, errlen, "pipe");
  *child_fd = is_input ? fds[0] : fds[1];
  *parent_fd = is_input ? fds[1] : fds[0];
  if (set_nonblock(*parent_fd) < 0) {
    close_fd(&fds[0]);
    close_fd(&fds[1]);
    *child_fd = *parent_fd = -1;
    return sys_fail(err, errlen, "fcntl");
  }
  return DSH_OK;
}

/* Supplementary groups for the child, computed before clone (getpwuid_r and
 * getgrouplist allocate). Only root may call setgroups. */
static int plan_groups(const dsh_proc_opts_t *o, struct plan *pl, gid_t **owned, char *err,
                       size_t errlen) {
  *owned = NULL;
  if ((o->uid < 0 && o->gid < 0) || geteuid() != 0) return DSH_OK;
  pl->set_groups = 1;
  if (!(o->init_groups && o->uid >= 0)) {
    pl->one_gid = (gid_t)(o->gid >= 0 ? o->gid : (int32_t)getegid());
    pl->groups = &pl->one_gid;
    pl->ngroups = o->gid >= 0 ? 1 : 0;
    return DSH_OK;
  }
  struct passwd pw, *res = NULL;
  char buf[4096];
  int e = getpwuid_r((uid_t)o->uid, &pw, buf, sizeof buf, &res);
  if (!res) {
    char eb[128];
    return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: uid %d: %s", (int)o->uid,
                    e ? errstr(e, eb, sizeof eb) : "no such account (init_groups)");
  }
  gid_t base = (gid_t)(o->gid >= 0 ? o->gid : (int32_t)pw.pw_gid);
  pl->gid = (int32_t)base;
  int n = 32;
  for (;;) {
    gid_t *g = realloc(*owned, (size_t)n * sizeof *g);
    if (!g) return dsh_fail(err, errlen, DSH_ENOMEM, "spawn: out of memory");
    *owned = g;
    int want = n;
    if (getgrouplist(pw.pw_name, base, g, &want) >= 0) {
      pl->groups = g;
      pl->ngroups = want;
      return DSH_OK;
    }
    n = want > n ? want : n * 2;
  }
}

static int report_failure(const dsh_proc_opts_t *o, int stage, int e, char *err, size_t errlen) {
  char eb[128];
  const char *why = errstr(e, eb, sizeof eb);
  switch (stage) {
    case ST_EXEC:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn \"%s\": %s", o->argv[0], why);
    case ST_CWD:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: cwd \"%s\": %s", o->cwd, why);
    case ST_SESSION:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: setsid: %s", why);
    case ST_PGID:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: setpgid: %s", why);
    case ST_CTTY:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: controlling terminal: %s", why);
    case ST_STDIO:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: stdio: %s", why);
    case ST_FDS:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: closing fds: %s", why);
    case ST_RLIMIT:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: RLIMIT_NOFILE %u: %s",
                      (unsigned)o->max_open_files, why);
    case ST_GROUPS:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: setgroups: %s", why);
    case ST_SETGID:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: setgid: %s", why);
    case ST_SETUID:
      return dsh_fail(err, errlen, DSH_ESPAWN, "spawn: setuid %d: %s", (int)o->uid, why);
  }
  return dsh_fail(err, errlen, DSH_ESPAWN, "spawn \"%s\": child setup failed", o->argv[0]);
}

int dsh_proc_launch(const dsh_proc_opts_t *o, dsh_spawned_t *out, char *err, size_t errlen) {
  static const char *const empty_env[] = {NULL};
  struct plan pl;
  memset(&pl, 0, sizeof pl);
  pl.o = o;
  pl.envp = o->envp ? o->envp : empty_env;
  pl.path = DEFAULT_PATH;
  for (const char *const *e = pl.envp; *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0) pl.path = *e + 5;
  pl.ctty = -1;
  pl.gid = o->gid;

  int devnull = -1, slave = -1, child_fd[3] = {-1, -1, -1};
  void *stack = NULL;
  out->pid = -1;
  out->in = out->out = out->err = out->master = -1;
  gid_t *groups = NULL;
  int rc = plan_groups(o, &pl, &groups, err, errlen);
  if (rc) goto fail;
  if (o->pty) {
    if ((rc = open_pty(o, &out->master, &slave, err, errlen))) goto fail;
    pl.src[0] = pl.src[1] = pl.src[2] = pl.ctty = slave;
  } else {
    int *parent_fd[3] = {&out->in, &out->out, &out->err};
    int modes[3] = {o->stdin_mode, o->stdout_mode, o->stderr_mode};
    for (int i = 0; i < 3; i++) {
      rc = open_stdio(modes[i], i == 0, &devnull, &child_fd[i], parent_fd[i], err, errlen);
      if (rc) goto fail;
      pl.src[i] = child_fd[i];
    }
  }
  if ((rc = child_stack(&stack, err, errlen))) goto fail;

  /* Block every signal across clone so no handler of ours (libev's) runs in
   * the child, which shares our memory, before it has reset the dispositions. */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t pid =
      clone(child_main, (char *)stack + CHILD_STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD, &pl);
  int clone_errno = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) {
    errno = clone_errno;
    rc = sys_fail(err, errlen, "clone");
    goto fail;
  }
  /* Back here once the child has exec'd or exited. */
  if (pl.stage) { /* it failed before exec and exited with 127 */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    rc = report_failure(o, pl.stage, pl.err, err, errlen);
    goto fail;
  }
  out->pid = pid;
  rc = DSH_OK;
  goto done;

fail:
  close_fd(&out->in);
  close_fd(&out->out);
  close_fd(&out->err);
  close_fd(&out->master);
done:
  for (int i = 0; i < 3; i++)
    if (child_fd[i] != devnull) close_fd(&child_fd[i]);
  close_fd(&devnull);
  close_fd(&slave);
  free(groups);
  return rc;
}
