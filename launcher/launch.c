/* launch.c: dsh-launch's command line and the order of its steps (launch.h
 * says what each step is for). Uses mounts.c and idmap.c; libc only. */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TOKEN 4096
#define MAX_INFO 65536

void launch_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dsh-launch: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(EXIT_LAUNCH);
}

static void usage(void) {
  fputs(
      "usage: dsh-launch [--cgroup-procs FILE]... [--rlimit nproc=N|nofile=N]...\n"
      "  [--stage DIR=PATH] [--disk IMAGE=DIR] [--mkdir PATH=MODE:UID:GID]... [--copy SRC=DST]...\n"
      "  [--listen PATH] [--token] [--info] [--tun UID:GID] [--as UID:GID]\n"
      "  [--map-uids MAP --map-gids MAP]\n"
      "  [--ns-sysctl NAME=VALUE]... -- COMMAND...\n",
      stderr);
  exit(2);
}

static long long number(const char *s, const char *what) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !*s || *end || v < 0) launch_die("%s: not a number: %s", what, s);
  return v;
}

/* "A=B" into its two halves (a copy of the argument). */
static void split(const char *arg, char sep, const char **a, const char **b, const char *what) {
  char *c = strdup(arg);
  char *at = c ? strchr(c, sep) : NULL;
  if (!at || at == c || !at[1]) launch_die("%s: expected X%cY, got %s", what, sep, arg);
  *at = 0;
  *a = c;
  *b = at + 1;
}

static void parse(int argc, char **argv, launch_opts_t *o, const char **mkdirs, int *n_mkdirs) {
  memset(o, 0, sizeof *o);
  o->nproc = o->nofile = o->as_uid = o->as_gid = o->tun_uid = o->tun_gid = -1;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--") == 0) break;
    int takes = strcmp(a, "--token") != 0 && strcmp(a, "--info") != 0;
    if (takes && !v) usage();
    if (strcmp(a, "--cgroup-procs") == 0 && o->n_cgroup_procs < MAX_ITEMS) {
      o->cgroup_procs[o->n_cgroup_procs++] = v;
    } else if (strcmp(a, "--rlimit") == 0) {
      const char *name, *n;
      split(v, '=', &name, &n, a);
      if (strcmp(name, "nproc") == 0)
        o->nproc = number(n, a);
      else if (strcmp(name, "nofile") == 0)
        o->nofile = number(n, a);
      else
        launch_die("--rlimit: nproc or nofile expected, got %s", name);
    } else if (strcmp(a, "--stage") == 0) {
      split(v, '=', &o->stage_src, &o->stage_dst, a);
    } else if (strcmp(a, "--disk") == 0) {
      split(v, '=', &o->disk_img, &o->disk_dir, a);
    } else if (strcmp(a, "--mkdir") == 0 && *n_mkdirs < MAX_ITEMS) {
      mkdirs[(*n_mkdirs)++] = v;
    } else if (strcmp(a, "--copy") == 0 && o->n_copies < MAX_ITEMS) {
      split(v, '=', &o->copy_src[o->n_copies], &o->copy_dst[o->n_copies], a);
      o->n_copies++;
    } else if (strcmp(a, "--listen") == 0) {
      o->listen = v;
    } else if (strcmp(a, "--token") == 0) {
      o->token = 1;
    } else if (strcmp(a, "--info") == 0) {
      o->info = 1;
    } else if (strcmp(a, "--tun") == 0) {
      const char *u, *g;
      split(v, ':', &u, &g, a);
      o->tun_uid = number(u, a);
      o->tun_gid = number(g, a);
    } else if (strcmp(a, "--as") == 0) {
      const char *u, *g;
      split(v, ':', &u, &g, a);
      o->as_uid = number(u, a);
      o->as_gid = number(g, a);
    } else if (strcmp(a, "--map-uids") == 0) {
      o->uid_map = v;
    } else if (strcmp(a, "--map-gids") == 0) {
      o->gid_map = v;
    } else if (strcmp(a, "--ns-sysctl") == 0 && o->n_sysctls < MAX_ITEMS) {
      split(v, '=', &o->sysctl_name[o->n_sysctls], &o->sysctl_value[o->n_sysctls], a);
      o->n_sysctls++;
    } else {
      launch_die("unknown or repeated too often: %s", a);
    }
    if (takes) i++;
  }
  if (i + 1 >= argc) usage();
  if (!o->uid_map != !o->gid_map) launch_die("--map-uids and --map-gids go together");

  if (o->disk_img && !o->stage_src) launch_die("--disk needs --stage (a private mount namespace)");
  o->argv = argv + i + 1;
}

static void join_cgroups(const launch_opts_t *o) {
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  for (int i = 0; i < o->n_cgroup_procs; i++) {
    int fd = open(o->cgroup_procs[i], O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, pid, (size_t)n) != n)
      launch_die("cannot join cgroup %s: %s", o->cgroup_procs[i], strerror(errno));
    close(fd);
  }
}

static void set_limit(int resource, long long n, const char *name) {
  if (n < 0) return;
  struct rlimit rl = {(rlim_t)n, (rlim_t)n};
  if (setrlimit(resource, &rl) != 0) launch_die("setrlimit %s %lld: %s", name, n, strerror(errno));
}

/* The host end of dshd's socket: made here, where the sandbox never reaches. */
static int listen_socket(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) launch_die("socket path too long: %s", path);
  strcpy(a.sun_path, path);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) launch_die("%s exists and is not a socket", path);
    unlink(path);
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  mode_t old = umask(0177);
  int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (rc != 0 || listen(fd, 1024) != 0)
    launch_die("cannot listen on %s: %s", path, strerror(errno));
  return fd;
}

/* The token from stdin into a pipe of its own (at most MAX_TOKEN bytes). */
static int token_pipe(void) {
  char buf[MAX_TOKEN];
  size_t n = 0;
  for (;;) {
    ssize_t k = read(0, buf + n, sizeof buf - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) launch_die("reading the access token: %s", strerror(errno));
    if (k == 0) break;
    n += (size_t)k;
    if (n == sizeof buf) launch_die("the access token is longer than %d bytes", MAX_TOKEN - 1);
  }
  int p[2];
  if (n == 0) launch_die("no access token on stdin");
  if (pipe2(p, O_CLOEXEC) != 0 || write(p[1], buf, n) != (ssize_t)n)
    launch_die("token pipe: %s", strerror(errno));
  memset(buf, 0, sizeof buf);
  close(p[1]);
  return p[0];
}

/* Bubblewrap's info ({"child-pid": N, ...}, then EOF): the pid. */
static pid_t read_child_pid(int fd) {
  static char buf[MAX_INFO + 1];
  size_t n = 0;
  for (;;) {
    ssize_t k = read(fd, buf + n, MAX_INFO - n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    n += (size_t)k;
    if (n == MAX_INFO) break;
  }
  buf[n] = 0;
  const char *at = strstr(buf, "\"child-pid\"");
  long pid = 0;
  if (at && (at = strchr(at, ':'))) pid = strtol(at + 1, NULL, 10);
  return pid > 0 ? (pid_t)pid : 0;
}

static volatile sig_atomic_t g_child;

static void forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

/* In the child: all three ids to uid/gid (and no supplementary groups). */
static void become(long long uid, long long gid, const char *what) {
  setgroups(0, NULL); /* EPERM where setgroups is denied: nothing to drop then */
  if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) ||
      setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid)) {
    fprintf(stderr, "dsh-launch: cannot become %s (%lld): %s\n", what, uid, strerror(errno));
    _exit(EXIT_LAUNCH);
  }
}

/* Move fd to want in the child (the sources sit above 10 beforehand). */
static void place(int fd, int want) {
  if (fd >= 0 && dup2(fd, want) < 0) _exit(EXIT_LAUNCH);
}

int main(int argc, char **argv) {
  /* we go with the supervisor that started us (bubblewrap goes with us) */
  pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != parent) return EXIT_LAUNCH;
  launch_opts_t o;
  const char *mkdirs[MAX_ITEMS];
  int n_mkdirs = 0;
  parse(argc, argv, &o, mkdirs, &n_mkdirs);
  join_cgroups(&o);
  set_limit(RLIMIT_NPROC, o.nproc, "nproc");
  set_limit(RLIMIT_NOFILE, o.nofile, "nofile");
  launch_mounts(&o);
  launch_tun(&o);
  launch_copies(&o);

  int lfd = o.listen ? fcntl(listen_socket(o.listen), F_DUPFD_CLOEXEC, 10) : -1;
  int tfd = o.token ? fcntl(token_pipe(), F_DUPFD_CLOEXEC, 10) : -1;
  int info[2] = {-1, -1}, ready[2] = {-1, -1}, go[2] = {-1, -1};
  if (o.info && pipe2(info, O_CLOEXEC) != 0) launch_die("pipe: %s", strerror(errno));
  if (o.uid_map && (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0))
    launch_die("pipe: %s", strerror(errno));

  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  pid_t child = fork();
  if (child < 0) launch_die("fork: %s", strerror(errno));
  if (child == 0) {
    for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
    int moved[3] = {lfd, tfd, info[1]};
    for (int k = 0; k < 3; k++)
      if (moved[k] >= 0 && moved[k] < 10) moved[k] = fcntl(moved[k], F_DUPFD_CLOEXEC, 10);
    place(moved[0], FD_LISTEN);
    place(moved[1], FD_TOKEN);
    place(moved[2], FD_INFO);
    if (o.as_uid >= 0) become(o.as_uid, o.as_gid, "uid");
    if (o.uid_map) {
      /* a user namespace of our own (owned by the uid we now are); the parent
       * writes its two identities, then we become its root */
      char b = 0;
      if (unshare(CLONE_NEWUSER) != 0) {
        fprintf(stderr, "dsh-launch: cannot make a user namespace: %s\n", strerror(errno));
        _exit(EXIT_LAUNCH);
      }
      if (write(ready[1], "1", 1) != 1 || read(go[0], &b, 1) != 1) _exit(EXIT_LAUNCH);
      become(0, 0, "the sandbox's root");
    }
    launch_mkdirs(mkdirs, n_mkdirs); /* as the sandbox's root (ids inside) */
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    sigprocmask(SIG_SETMASK, &old, NULL);
    execvp(o.argv[0], o.argv);
    fprintf(stderr, "dsh-launch: cannot run %s: %s\n", o.argv[0], strerror(errno));
    _exit(EXIT_LAUNCH);
  }
  g_child = child;
  struct sigaction sa = {.sa_handler = forward};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigprocmask(SIG_SETMASK, &old, NULL);
  int *theirs[] = {&lfd, &tfd, &info[1], &ready[1], &go[0]};
  for (size_t k = 0; k < sizeof theirs / sizeof *theirs; k++)
    if (*theirs[k] >= 0) close(*theirs[k]);

  if (o.uid_map) {
    char b = 0, why[512] = "";
    int ok = read(ready[0], &b, 1) == 1 && launch_idmap(&o, child, why, sizeof why) == 0 &&
             write(go[1], "1", 1) == 1;
    close(ready[0]);
    close(go[1]);
    if (!ok) {
      kill(child, SIGKILL);
      waitpid(child, NULL, 0);
      launch_die("%s", why[0] ? why : "the sandbox's user namespace was not made");
    }
  }
  if (o.info) {
    pid_t pid = read_child_pid(info[0]);
    close(info[0]);
    if (pid <= 0) {
      kill(child, SIGKILL);
      waitpid(child, NULL, 0);
      launch_die("the sandbox did not start (no pid from bubblewrap)");
    }
    printf("command %d\npid %d\n", (int)child, (int)pid);
    fflush(stdout);
  }
  int st;
  while (waitpid(child, &st, 0) < 0)
    if (errno != EINTR) launch_die("waitpid: %s", strerror(errno));
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
