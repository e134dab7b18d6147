/* main.c: dshd's command line. Makes the process non-dumpable before anything
 * else (so that no process of another identity, nor one of the same uid
 * without ptrace rights, can read its memory or take its fds), parses flags
 * into a dshd_config_t, reads the access token (preferably from a file
 * descriptor, so it never shows in /proc/<pid>/cmdline; a token given in argv
 * is wiped from argv at once), installs the sandbox's system-call filter when
 * asked, starts the server and maps its end to the exit status: 0 after
 * SIGTERM or SIGINT, 3 after the idle timeout, 1 on a start-up failure, 2 on
 * usage. Never prints the token, and never keeps it in argv. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "server.h"

#define MAX_ORIGINS 16

static void usage(FILE *f) {
  fputs(
      "usage: dshd [options]\n"
      "\n"
      "envd-compatible sandbox daemon (Connect over HTTP/1.1 + /files + /health).\n"
      "\n"
      "  --listen ADDR            127.0.0.1:PORT, [::1]:PORT, localhost:PORT (127.0.0.1 and ::1),\n"
      "                           a unix socket path (contains '/'), or fd:N (a listening socket\n"
      "                           dshd inherits as fd N); default 127.0.0.1:49983;\n"
      "                           port 0 picks a free port; an address beyond loopback\n"
      "                           (0.0.0.0, [::]) needs an access token\n"
      "  --ready-file PATH        once listening, write the address + newline there (atomically)\n"
      "  --access-token-fd FD     read the access token from FD (then close it); preferred\n"
      "  --access-token TOKEN     the access token (visible to other local users until wiped)\n"
      "  --user NAME              default user (default: 'user' if it exists, else our own)\n"
      "  --workdir PATH           default working directory for empty paths (default: home)\n"
      "  --allow-tokenless-network  listen beyond loopback without an access token (anyone\n"
      "                           who reaches it can run commands)\n"
      "  --allow-origin ORIGIN    without a token, accept requests carrying this Origin\n"
      "                           (browsers send one; others are refused; repeatable)\n"
      "  --envd-compat            behave exactly like stock envd: no dshd extensions\n"
      "  --replay-bytes N         output kept per process for replay (default 1048576)\n"
      "  --exited-ttl-ms N        an exited process's record (end event, output) is kept\n"
      "                           this long for late Connects (default 60000)\n"
      "  --exited-max-bytes N     memory all exited processes' records may hold\n"
      "                           (default 67108864; their output goes first)\n"
      "  --max-rpc-body-bytes N   request body bound for RPCs (default 67108864)\n"
      "  --idle-timeout-ms N      exit with status 3 after N ms without requests or streams\n"
      "  --max-open-files N       every process started gets RLIMIT_NOFILE N (soft and hard)\n"
      "  --seccomp                install the sandbox's system-call filter (docs/security.md)\n"
      "  --connection-memory-kib N  per-connection buffer pool of libmicrohttpd (default 128)\n"
      "  --header-timeout-ms N    a new connection's request header must be complete within N ms\n"
      "                           (default 5000; 0 = no limit)\n"
      "  --keepalive-timeout-ms N close a kept-alive connection idle for N ms (default 30000)\n"
      "  -v, --verbose            log one line per request (never headers or tokens)\n"
      "  --version                print the version\n"
      "  -h, --help               this text\n",
      f);
}

static int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-') return -1;
  *out = v;
  return 0;
}

static char *read_token_fd(const char *arg) {
  uint64_t fdv;
  if (parse_u64(arg, &fdv) != 0 || fdv > INT_MAX) return NULL;
  int fd = (int)fdv;
  char buf[4097];
  size_t n = 0;
  for (;;) {
    ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      close(fd);
      return NULL;
    }
    if (k == 0) break;
    n += (size_t)k;
    if (n == sizeof buf - 1) break;
  }
  close(fd);
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) n--;
  buf[n] = 0;
  char *t = n ? strdup(buf) : NULL;
  memset(buf, 0, sizeof buf);
  return t;
}

static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* fds 0-2 open (on /dev/null when closed), so that no socket or file dshd
 * opens later becomes its stdout or stderr. */
static void stdio_sane(void) {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0) {
      int n = open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) {
        dup2(n, fd);
        close(n);
      }
    }
}

int main(int argc, char **argv) {
  /* first: nothing of ours (the token to come, the listening socket) may be
   * read through /proc/<pid>/mem, ptrace or pidfd_getfd by the code we run */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  stdio_sane();
  int want_seccomp = 0;
  dshd_config_t cfg = {
      .listen = "127.0.0.1:49983",
      .replay_bytes = 1u << 20,
      .max_rpc_body_bytes = 64u << 20,
      .exited_ttl_ms = 60000,
      .exited_max_bytes = 64u << 20,
  };
  dshd_server_opts_t opts = {.verbose = 0,
                             .connection_memory_bytes = 128u << 10,
                             .header_timeout_ms = 5000,
                             .keepalive_timeout_ms = 30000};
  const char *origins[MAX_ORIGINS];
  int norigins = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_ARG                                      \
  do {                                                \
    if (!v) {                                         \
      fprintf(stderr, "dshd: %s needs a value\n", a); \
      return 2;                                       \
    }                                                 \
    i++;                                              \
  } while (0)
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--version") == 0) {
      printf("dshd %s\n", DSHD_VERSION);
      return 0;
    } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
      opts.verbose = 1;
    } else if (strcmp(a, "--allow-tokenless-network") == 0) {
      opts.allow_tokenless_network = 1;
    } else if (strcmp(a, "--allow-origin") == 0) {
      NEED_ARG;
      if (norigins == MAX_ORIGINS) {
        fprintf(stderr, "dshd: --allow-origin: at most %d\n", MAX_ORIGINS);
        return 2;
      }
      origins[norigins++] = v;
    } else if (strcmp(a, "--seccomp") == 0) {
      want_seccomp = 1;
    } else if (strcmp(a, "--max-open-files") == 0) {
      NEED_ARG;
      uint64_t n;
      if (parse_u64(v, &n) != 0 || n < 16 || n > 1048576) {
        fprintf(stderr, "dshd: --max-open-files: 16..1048576 expected: %s\n", v);
        return 2;
      }
      cfg.max_open_files = (uint32_t)n;
    } else if (strcmp(a, "--envd-compat") == 0) {
      cfg.envd_compat = 1;
    } else if (strcmp(a, "--listen") == 0) {
      NEED_ARG;
      cfg.listen = v;
    } else if (strcmp(a, "--ready-file") == 0) {
      NEED_ARG;
      cfg.ready_file = v;
    } else if (strcmp(a, "--user") == 0) {
      NEED_ARG;
      cfg.default_user = v;
    } else if (strcmp(a, "--workdir") == 0) {
      NEED_ARG;
      cfg.default_workdir = v;
    } else if (strcmp(a, "--access-token") == 0) {
      NEED_ARG;
      free(cfg.access_token);
      cfg.access_token = strdup(v);
      memset(argv[i], 'x', strlen(argv[i])); /* hide it from /proc/<pid>/cmdline */
    } else if (strcmp(a, "--access-token-fd") == 0) {
      NEED_ARG;
      free(cfg.access_token);
      cfg.access_token = read_token_fd(v);
      if (!cfg.access_token) {
        fprintf(stderr, "dshd: --access-token-fd %s: cannot read a token\n", v);
        return 2;
      }
    } else if (strcmp(a, "--replay-bytes") == 0) {
      NEED_ARG;
      if (parse_u64(v, &cfg.replay_bytes) != 0) {
        fprintf(stderr, "dshd: --replay-bytes: not a number: %s\n", v);
        return 2;
      }
    } else if (strcmp(a, "--max-rpc-body-bytes") == 0) {
      NEED_ARG;
      if (parse_u64(v, &cfg.max_rpc_body_bytes) != 0 || cfg.max_rpc_body_bytes < 1024 ||
          cfg.max_rpc_body_bytes > UINT32_MAX) {
        fprintf(stderr, "dshd: --max-rpc-body-bytes: 1024..4294967295 expected: %s\n", v);
        return 2;
      }
    } else if (strcmp(a, "--exited-ttl-ms") == 0) {
      NEED_ARG;
      uint64_t ms;
      if (parse_u64(v, &ms) != 0 || ms > 86400000ull * 365) {
        fprintf(stderr, "dshd: --exited-ttl-ms: not a number of milliseconds: %s\n", v);
        return 2;
      }
      cfg.exited_ttl_ms = (int64_t)ms;
    } else if (strcmp(a, "--exited-max-bytes") == 0) {
      NEED_ARG;
      if (parse_u64(v, &cfg.exited_max_bytes) != 0) {
        fprintf(stderr, "dshd: --exited-max-bytes: not a number: %s\n", v);
        return 2;
      }
    } else if (strcmp(a, "--connection-memory-kib") == 0) {
      NEED_ARG;
      uint64_t kib;
      if (parse_u64(v, &kib) != 0 || kib < 32 || kib > 16384) {
        fprintf(stderr, "dshd: --connection-memory-kib: 32..16384 expected: %s\n", v);
        return 2;
      }
      opts.connection_memory_bytes = (size_t)kib << 10;
    } else if (strcmp(a, "--header-timeout-ms") == 0 || strcmp(a, "--keepalive-timeout-ms") == 0) {
      NEED_ARG;
      uint64_t ms;
      if (parse_u64(v, &ms) != 0 || ms > 86400000) {
        fprintf(stderr, "dshd: %s: 0..86400000 expected: %s\n", a, v);
        return 2;
      }
      if (a[2] == 'h')
        opts.header_timeout_ms = (int64_t)ms;
      else
        opts.keepalive_timeout_ms = (int64_t)ms;
    } else if (strcmp(a, "--idle-timeout-ms") == 0) {
      NEED_ARG;
      uint64_t ms;
      if (parse_u64(v, &ms) != 0 || ms > INT64_MAX) {
        fprintf(stderr, "dshd: --idle-timeout-ms: not a number: %s\n", v);
        return 2;
      }
      cfg.idle_timeout_ms = (int64_t)ms;
    } else {
      fprintf(stderr, "dshd: unknown option %s (try --help)\n", a);
      return 2;
    }
#undef NEED_ARG
  }
  if (cfg.access_token && !*cfg.access_token) {
    fprintf(stderr, "dshd: the access token is empty\n");
    return 2;
  }
  opts.allowed_origins = origins;
  opts.n_allowed_origins = norigins;
  raise_nofile();
  char why[512] = "";
  if (want_seccomp && dshd_seccomp_install(why, sizeof why) != 0) {
    fprintf(stderr, "dshd: %s\n", why);
    free(cfg.access_token);
    return 1;
  }
  if (dshd_server_start(&cfg, &opts, why, sizeof why) != 0) {
    fprintf(stderr, "dshd: %s\n", why);
    dshd_server_stop();
    free(cfg.access_token);
    return 1;
  }
  int code = dshd_server_run();
  dshd_server_stop();
  if (cfg.access_token) {
    memset(cfg.access_token, 0, strlen(cfg.access_token));
    free(cfg.access_token);
  }
  return code;
}
