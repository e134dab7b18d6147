/* baselines.c: the raw operations bench/dshd.lua compares dshd against,
 * measured in the same run (build/bin/dsh-bench-baselines MODE ...).
 *
 *   spawn N [ARGV]   posix_spawn(ARGV, default /bin/true; our environment) +
 *                    waitpid, N times after 20 warm-ups; prints the N round
 *                    trips in milliseconds on one line
 *   pipe BYTES KIND  a child writes BYTES into a pipe (KIND zero: `head -c BYTES
 *                    /dev/zero`; random: this program's `gen`), we read it as
 *                    dshd reads output pipes (1 MiB pipe, reads of up to
 *                    256 KiB); prints "bytes seconds"
 *   pty N            openpty + a `cat` child in canonical mode; write one byte,
 *                    time until the terminal's echo is read back, then erase it
 *                    (DEL, echoed as "\b \b", untimed) so the line never fills;
 *                    prints the N echoes in milliseconds on one line
 *   pingpong N       one byte back and forth over loopback TCP (TCP_NODELAY)
 *                    between us and a forked echo child, N times after 100
 *                    warm-ups; prints the N round trips in milliseconds: the
 *                    price of two wakeups on this machine, which every RPC pays
 *   start ADDR N     a minimal HTTP/1.1 client in C on one keep-alive connection
 *                    to dshd at ADDR (127.0.0.1:PORT): POST Start for /bin/true,
 *                    read the chunked body to its end; N times after 20
 *                    warm-ups; prints the N round trips in milliseconds (what
 *                    dshd costs without any client-side work)
 *   gen BYTES        writes BYTES of pseudo-random bytes to stdout in 64 KiB
 *                    writes, no chunk equal to another: data no LuaJIT string
 *                    interning can deduplicate, and far cheaper than
 *                    /dev/urandom
 *   rss PID MS       samples VmRSS of PID every MS milliseconds until its own
 *                    stdin reaches end of file (or PID is gone); prints
 *                    "peak_kib samples" (a sampler outside the Lua loop, which
 *                    may be too busy reading to sample on time)
 *
 * A benchmark helper, not a test: it measures and prints, the driver judges.
 * Plain libc on purpose (no dsh core): it is what the system should add
 * little on top of. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what) {
  fprintf(stderr, "dsh-bench-baselines: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void print_samples(const double *ms, int n) {
  for (int i = 0; i < n; i++) printf(i ? " %.4f" : "%.4f", ms[i]);
  printf("\n");
}

static void spawn_wait(char *const argv[]) {
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
  if (rc) {
    errno = rc;
    die("posix_spawn");
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) die("waitpid");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    errno = ECHILD;
    die(argv[0]);
  }
}

static int mode_spawn(int n, char *const argv[]) {
  static char *const true_argv[] = {"/bin/true", NULL};
  if (!argv[0]) argv = true_argv;
  double *ms = calloc((size_t)n, sizeof *ms);
  for (int i = 0; i < 20; i++) spawn_wait(argv);
  for (int i = 0; i < n; i++) {
    double t = now();
    spawn_wait(argv);
    ms[i] = (now() - t) * 1e3;
  }
  print_samples(ms, n);
  free(ms);
  return 0;
}

/* A 1 MiB + 64 KiB pool of xorshift bytes made once; each 64 KiB write
 * takes the next window of it (at a stride that never lines up with the
 * pool) after stamping a fresh 64-bit counter every 1 KiB, so no chunk a
 * reader sees twice is equal, at the cost of a few stores per write rather
 * than generating every byte (which would compete for the CPU). */
static int mode_gen(unsigned long long bytes) {
  enum { W = 65536, POOL = 1 << 20, STAMP = 1024 };
  static uint8_t pool[POOL + W];
  uint64_t x = 0x9E3779B97F4A7C15ull, counter = 0;
  for (size_t i = 0; i + 8 <= sizeof pool; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(pool + i, &x, 8);
  }
  signal(SIGPIPE, SIG_DFL);
  size_t pos = 0;
  while (bytes) {
    uint8_t *p = pool + pos;
    for (size_t k = 0; k < W; k += STAMP) {
      counter++;
      memcpy(p + k, &counter, 8);
    }
    size_t want = bytes < W ? (size_t)bytes : W, off = 0;
    while (off < want) {
      ssize_t k = write(1, p + off, want - off);
      if (k < 0) {
        if (errno == EINTR) continue;
        return 1;
      }
      off += (size_t)k;
    }
    bytes -= want;
    pos = (pos + 40961) % POOL;
  }
  return 0;
}

static int mode_pipe(const char *self, unsigned long long bytes, const char *kind) {
  char count[32];
  snprintf(count, sizeof count, "%llu", bytes);
  char *zero[] = {"head", "-c", count, "/dev/zero", NULL};
  char *rnd[] = {(char *)self, "gen", count, NULL};
  char **argv = strcmp(kind, "random") == 0 ? rnd : zero;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC)) die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  if (rc) {
    errno = rc;
    die("posix_spawnp");
  }
  close(fds[1]);
  fcntl(fds[0], F_SETPIPE_SZ, 1 << 20); /* as dshd does for output pipes */
  static char buf[256 * 1024];          /* dshd's most per read() */
  unsigned long long got = 0;
  double t = now();
  for (;;) {
    ssize_t k = read(fds[0], buf, sizeof buf);
    if (k < 0) {
      if (errno == EINTR) continue;
      die("read");
    }
    if (k == 0) break;
    got += (unsigned long long)k;
  }
  double secs = now() - t;
  int st;
  waitpid(pid, &st, 0);
  close(fds[0]);
  printf("%llu %.6f\n", got, secs);
  return got == bytes ? 0 : 1;
}

/* Read from fd until `want` bytes arrived (the echo). */
static void read_exact(int fd, size_t want) {
  char buf[256];
  size_t got = 0;
  while (got < want) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 5000) <= 0) {
      errno = ETIMEDOUT;
      die("pty echo");
    }
    ssize_t k = read(fd, buf, want - got < sizeof buf ? want - got : sizeof buf);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      die("read pty");
    }
    got += (size_t)k;
  }
}

static int mode_pty(int n) {
  int master, slave;
  struct winsize ws = {.ws_row = 24, .ws_col = 80};
  if (openpty(&master, &slave, NULL, NULL, &ws)) die("openpty");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    setsid();
    ioctl(slave, TIOCSCTTY, 0);
    dup2(slave, 0);
    dup2(slave, 1);
    dup2(slave, 2);
    close(master);
    if (slave > 2) close(slave);
    execlp("cat", "cat", (char *)NULL);
    _exit(127);
  }
  close(slave);
  double *ms = calloc((size_t)n, sizeof *ms);
  for (int i = -20; i < n; i++) {
    double t = now();
    if (write(master, "x", 1) != 1) die("write pty");
    read_exact(master, 1);
    if (i >= 0) ms[i] = (now() - t) * 1e3;
    if (write(master, "\x7f", 1) != 1) die("write pty");
    read_exact(master, 3); /* "\b \b" */
  }
  print_samples(ms, n);
  free(ms);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(master);
  return 0;
}

static int mode_pingpong(int n) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &alen))
    die("listen");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    int c = accept(ls, NULL, NULL);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b[64];
    while (read(c, b, sizeof b) > 0)
      if (write(c, b, 1) != 1) break;
    _exit(0);
  }
  close(ls);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) die("connect");
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  double *ms = calloc((size_t)n, sizeof *ms);
  char b[64];
  for (int i = -100; i < n; i++) {
    double t = now();
    if (write(s, "x", 1) != 1 || read(s, b, sizeof b) != 1) die("ping-pong");
    if (i >= 0) ms[i] = (now() - t) * 1e3;
  }
  print_samples(ms, n);
  free(ms);
  close(s);
  waitpid(pid, NULL, 0);
  return 0;
}

static int mode_start(const char *addr, int n) {
  char host[64];
  const char *colon = strrchr(addr, ':');
  if (!colon || (size_t)(colon - addr) >= sizeof host) {
    errno = EINVAL;
    die("start: ADDR must be HOST:PORT");
  }
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) die("start: address");
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) die("start: connect");
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  static const char msg[] = "{\"process\":{\"cmd\":\"/bin/true\"},\"stdin\":false}";
  char req[512];
  size_t ml = sizeof msg - 1;
  int hl = snprintf(req, sizeof req,
                    "POST /process.Process/Start HTTP/1.1\r\nHost: %s\r\n"
                    "Content-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    addr, ml + 5);
  uint8_t env[5] = {0, 0, 0, (uint8_t)(ml >> 8), (uint8_t)ml};
  memcpy(req + hl, env, 5);
  memcpy(req + hl + 5, msg, ml);
  size_t rl = (size_t)hl + 5 + ml;
  double *ms = calloc((size_t)n, sizeof *ms);
  static char buf[65536];
  for (int i = -20; i < n; i++) {
    double t = now();
    if (write(s, req, rl) != (ssize_t)rl) die("start: write");
    size_t got = 0;
    for (;;) { /* the body ends with the last chunk "0\r\n\r\n" */
      ssize_t k = read(s, buf + got, sizeof buf - got);
      if (k <= 0) die("start: read");
      got += (size_t)k;
      if (got >= 7 && memcmp(buf + got - 7, "\r\n0\r\n\r\n", 7) == 0) break;
      if (got == sizeof buf) die("start: answer too long");
    }
    if (i >= 0) ms[i] = (now() - t) * 1e3;
    if (!memmem(buf, got, "\"end\"", 5)) {
      errno = EPROTO;
      die("start: no end event");
    }
  }
  print_samples(ms, n);
  free(ms);
  close(s);
  return 0;
}

static long vmrss_kib(const char *path) {
  char buf[2048];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t k = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (k <= 0) return -1;
  buf[k] = 0;
  char *p = strstr(buf, "VmRSS:");
  return p ? strtol(p + 6, NULL, 10) : -1;
}

static int mode_rss(const char *pid, int period_ms) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/status", pid);
  long peak = 0, samples = 0;
  for (;;) {
    long kib = vmrss_kib(path);
    if (kib < 0) break;
    if (kib > peak) peak = kib;
    samples++;
    struct pollfd p = {.fd = 0, .events = POLLIN};
    if (poll(&p, 1, period_ms) > 0) break; /* end of file (or anything) on stdin: stop */
  }
  printf("%ld %ld\n", peak, samples);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "spawn") == 0) return mode_spawn(atoi(argv[2]), argv + 3);
  if (argc >= 3 && strcmp(argv[1], "gen") == 0) return mode_gen(strtoull(argv[2], NULL, 10));
  if (argc >= 4 && strcmp(argv[1], "pipe") == 0)
    return mode_pipe(argv[0], strtoull(argv[2], NULL, 10), argv[3]);
  if (argc >= 3 && strcmp(argv[1], "pty") == 0) return mode_pty(atoi(argv[2]));
  if (argc >= 4 && strcmp(argv[1], "start") == 0) return mode_start(argv[2], atoi(argv[3]));
  if (argc >= 3 && strcmp(argv[1], "pingpong") == 0) return mode_pingpong(atoi(argv[2]));
  if (argc >= 4 && strcmp(argv[1], "rss") == 0) return mode_rss(argv[2], atoi(argv[3]));
  fprintf(stderr,
          "usage: dsh-bench-baselines spawn N [ARGV] | pipe BYTES zero|random | pty N | pingpong N "
          "| start ADDR N | gen BYTES | rss PID MS\n");
  return 2;
}
