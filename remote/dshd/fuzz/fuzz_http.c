/* fuzz_http.c: dshd's HTTP request handling end to end under libFuzzer —
 * libmicrohttpd's parsing, dshd's accept loop and connection policing,
 * screening (framing, token, Host/Origin), dispatch, the Connect protocol
 * (unary calls, server and client streams, envelopes), /files uploads and
 * downloads, /init and /health, all as linked into dshd. Each input is the
 * byte stream of one client: it is written to a fresh connection to the
 * daemon's unix socket, the client half-closes, the loop runs until nothing
 * more happens, whatever came back is read and dropped, and the client
 * closes. The daemon lives for the whole run, so state carried from one
 * input to the next (streams, connections, /init) is exercised too.
 *
 * Two targets are built from this file:
 *   dshd_fuzz_http      the services are fuzz_http_services.c's (echo
 *                       handlers, no processes): the server core alone;
 *   dshd_fuzz_http_rpc  (DSHD_FUZZ_REAL_SERVICES) dshd's real process and
 *                       filesystem services: Start, Connect, SendInput,
 *                       Stat, ListDir, WatchDir, ... really run. After each
 *                       input every process in the fuzzer's PID namespace
 *                       is SIGKILLed (dshd sees them end as it would any
 *                       kill) and every polled watcher removed, so nothing
 *                       accumulates from one input to the next.
 *
 * The fuzzer confines itself first: a mount namespace in which every mount
 * is read-only and without devices except a private tmpfs on /tmp (where
 * the seeds write) and the working directory (libFuzzer's corpus), entered
 * through a user namespace so that the read-only flags are locked (even
 * the namespace's root cannot clear them). dshd_fuzz_http_rpc also gets a
 * network namespace (no network) and a PID namespace whose init is the
 * fuzzer itself (a child; the first process only waits for it), so every
 * process left in the namespace dies with it. So /files and the processes can change nothing of
 * this machine and leave nothing behind. Without namespaces (or on a
 * kernel without mount_setattr, Linux < 5.12) the target fails at once: it
 * never runs unconfined. */
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../server.h"
#ifdef DSHD_FUZZ_REAL_SERVICES
#include "../process.h"
#endif

#define SOCK "/tmp/dshd.sock"
#define TOKEN "fuzz-token" /* the seeds carry it, so mutations get past the token check */

static void die(const char *what) {
  fprintf(stderr, "fuzz_http: %s: %s\n", what, strerror(errno));
  abort();
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) die(path);
}

static void map_id(const char *file, unsigned outside) {
  char line[64];
  snprintf(line, sizeof line, "0 %u 1\n", outside);
  int fd = open(file, O_WRONLY);
  if (fd < 0 || write(fd, line, strlen(line)) < 0 || close(fd) != 0) die(file);
}

static void set_attr(const char *path, unsigned flags, uint64_t set, uint64_t clr) {
  struct mount_attr attr = {.attr_set = set, .attr_clr = clr};
  if (mount_setattr(AT_FDCWD, path, flags, &attr, sizeof attr) != 0) die(path);
}

static void enter_user_ns(int flags, unsigned uid, unsigned gid) {
  if (unshare(CLONE_NEWUSER | flags) != 0) die("unshare(user namespace)");
  int fd = open("/proc/self/setgroups", O_WRONLY);
  if (fd >= 0) {
    if (write(fd, "deny", 4) < 0) die("setgroups");
    close(fd);
  }
  map_id("/proc/self/uid_map", uid);
  map_id("/proc/self/gid_map", gid);
}

#ifdef DSHD_FUZZ_REAL_SERVICES
static pid_t g_fuzzer = -1;

static void forward(int sig) {
  if (g_fuzzer > 0) kill(g_fuzzer, sig);
}

/* After unsharing the PID namespace: the fuzzer goes on in a child, the
 * namespace's init (so every process dshd starts, and every orphan, is in
 * it, and all die when it ends); this process only waits for it and exits
 * as it did. */
static void become_init(void) {
  g_fuzzer = fork();
  if (g_fuzzer < 0) die("fork into the PID namespace");
  if (g_fuzzer == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* (its parent is outside: getppid() is 0) */
    if (getpid() != 1) abort();
    return;
  }
  signal(SIGINT, forward);
  signal(SIGTERM, forward);
  signal(SIGHUP, forward);
  int st;
  while (waitpid(g_fuzzer, &st, 0) < 0)
    if (errno != EINTR) die("waitpid");
  _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* Kills every other process of the namespace (dshd's, and any that left
 * its group: kill(-1) from the namespace's init reaches exactly those),
 * runs the loop until dshd saw its processes end (the loop reaps orphans
 * too), and removes the polled watchers. */
static void reset_services(void) {
  if (getpid() != 1) abort(); /* kill(-1) anywhere else would reach the machine */
  kill(-1, SIGKILL);
  for (int round = 0; round < 2000; round++) {
    json_t *list = json_array();
    record_list(list);
    size_t live = json_array_size(list);
    json_decref(list);
    if (!live) break;
    ev_run(dshd_ev(), EVRUN_NOWAIT);
    if (round > 8) usleep(1000);
  }
  dshd_watchers_shutdown();
}
#define MORE_NAMESPACES (CLONE_NEWPID | CLONE_NEWNET)
#else
#define MORE_NAMESPACES 0
#endif

/* In a private mount namespace: every mount read-only and without devices,
 * a fresh tmpfs on /tmp (where the seeds write), and the working directory
 * (libFuzzer's corpus and crash files) writable; then a nested user (and
 * mount) namespace, which locks those flags. */
static void confine(void) {
  uid_t uid = geteuid();
  gid_t gid = getegid();
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) die("getcwd");
  if (uid != 0) {
    enter_user_ns(CLONE_NEWNS, uid, gid);
  } else if (unshare(CLONE_NEWNS) != 0) {
    die("unshare(mount namespace)");
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("make / private");
  if (mount(cwd, cwd, NULL, MS_BIND | MS_REC, NULL) != 0) die("bind the working directory");
  /* into the bind mount: relative paths (crash files) must not resolve on the read-only one below
   */
  if (chdir(cwd) != 0) die("chdir into the working directory");
  set_attr("/", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV, 0);
  set_attr(cwd, 0, 0, MOUNT_ATTR_RDONLY);
  /* A tree that lives under /tmp (a clone made there, as CI does) would be
   * hidden by the private /tmp: carry its top directory over onto it. */
  char top[4096] = "";
  int tree = -1;
  if (strncmp(cwd, "/tmp/", 5) == 0) {
    const char *end = strchr(cwd + 5, '/');
    size_t n = end ? (size_t)(end - cwd) : strlen(cwd);
    memcpy(top, cwd, n);
    top[n] = '\0';
    tree = open_tree(AT_FDCWD, top, OPEN_TREE_CLONE | AT_RECURSIVE);
    if (tree < 0) die(top);
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NODEV | MS_NOSUID, "size=64m,mode=1777") != 0)
    die("mount tmpfs on /tmp");
  if (tree >= 0) {
    if (mkdir(top, 0755) != 0) die(top);
    if (move_mount(tree, "", AT_FDCWD, top, MOVE_MOUNT_F_EMPTY_PATH) != 0) die(top);
    close(tree);
    if (chdir(cwd) != 0) die("chdir into the working directory under /tmp");
  }
  write_file("/tmp/hello.txt", "hello from the fuzzer's /tmp\n");
  /* the nested namespace's id maps are written through /proc */
  set_attr("/proc", 0, 0, MOUNT_ATTR_RDONLY);
  /* ids are 0 from here on when we were not root: map 0 to 0 */
  enter_user_ns(CLONE_NEWNS | MORE_NAMESPACES, uid ? 0 : uid, uid ? 0 : gid);
  set_attr("/proc", 0, MOUNT_ATTR_RDONLY, 0);
#ifdef DSHD_FUZZ_REAL_SERVICES
  become_init();
#endif
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  confine();
  static char token[] = TOKEN;
  dshd_config_t cfg = {
      .listen = SOCK,
      .access_token = token,
      .replay_bytes = 1u << 20,
      .max_rpc_body_bytes = 1u << 20,
      .exited_ttl_ms = 1000,
      .exited_max_bytes = 1u << 20,
  };
  dshd_server_opts_t opts = {
      .connection_memory_bytes = 32u << 10,
      .header_timeout_ms = 1000,
      .keepalive_timeout_ms = 1000,
  };
  char why[512];
  if (dshd_server_start(&cfg, &opts, why, sizeof why) != 0) {
    fprintf(stderr, "fuzz_http: dshd did not start: %s\n", why);
    abort();
  }
  return 0;
}

/* Runs the loop without blocking until rounds pass with nothing to do on
 * the client's side; reads (and drops) what the daemon sent. */
static void pump(int fd, const uint8_t **data, size_t *left, int idle_rounds) {
  static char sink[65536];
  int idle = 0;
  while (idle < idle_rounds) {
    ev_run(dshd_ev(), EVRUN_NOWAIT);
    int moved = 0;
    if (*left) {
      ssize_t n = send(fd, *data, *left, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        *data += n;
        *left -= (size_t)n;
        moved = 1;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        *left = 0; /* the daemon closed: nothing more to send */
      }
    }
    ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (r > 0) moved = 1;
    if (r == 0) return; /* the daemon closed the connection */
    idle = moved ? 0 : idle + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strcpy(a.sun_path, SOCK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("connect");
  size_t left = size;
  pump(fd, &data, &left, 64);
  shutdown(fd, SHUT_WR); /* a half-closed client must still get its answers */
  pump(fd, &data, &left, 64);
  close(fd);
  for (int i = 0; i < 8; i++) ev_run(dshd_ev(), EVRUN_NOWAIT); /* the daemon sees it go */
#ifdef DSHD_FUZZ_REAL_SERVICES
  reset_services();
#endif
  return 0;
}
