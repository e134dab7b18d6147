/* listen.c: dshd's listening sockets — parses --listen (IPv4, [IPv6],
 * localhost, a bare port, a unix socket path, or fd:N, a socket already
 * listening that dshd inherited), binds and listens, and writes the ready
 * file with the address actually bound.
 *
 * Uses the socket API only. Never accepts, never touches libmicrohttpd (the
 * server starts a daemon on each socket it returns); a unix socket is made
 * 0600 and only a stale socket file is ever replaced. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "server.h"

static int tcp_socket(int family, const char *host, unsigned port, unsigned *bound, char *why,
                      size_t whylen) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(why, whylen, "socket: %s", strerror(errno));
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage ss;
  socklen_t sl;
  memset(&ss, 0, sizeof ss);
  if (family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
      snprintf(why, whylen, "bad IPv4 address '%s'", host);
      close(fd);
      return -1;
    }
    sl = sizeof *a;
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) {
      snprintf(why, whylen, "bad IPv6 address '%s'", host);
      close(fd);
      return -1;
    }
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sl = sizeof *a;
  }
  if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
    snprintf(why, whylen, "bind %s port %u: %s", host, port, strerror(errno));
    close(fd);
    return -1;
  }
  sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *bound = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                   : ((struct sockaddr_in6 *)&ss)->sin6_port);
  return fd;
}

static int unix_socket(const char *path, char *why, size_t whylen) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path) {
    snprintf(why, whylen, "socket path too long: %s", path);
    return -1;
  }
  strcpy(a.sun_path, path);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      snprintf(why, whylen, "%s exists and is not a socket", path);
      return -1;
    }
    unlink(path); /* stale socket of an earlier run */
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(why, whylen, "socket: %s", strerror(errno));
    return -1;
  }
  mode_t old = umask(0177);
  int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (rc != 0 || chmod(path, 0600) != 0 || listen(fd, 1024) != 0) {
    snprintf(why, whylen, "bind %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

static int is_loopback(int family, const char *host) {
  unsigned char a[16];
  if (inet_pton(family, host, a) != 1) return 0;
  if (family == AF_INET) return a[0] == 127;
  static const unsigned char one[16] = {[15] = 1};
  return memcmp(a, one, 16) == 0;
}

/* fd:N — a listening stream socket made by whoever started dshd (a local
 * sandbox's launcher binds it on the host, where the sandbox cannot reach its
 * path). Its path, if any, is never unlinked by dshd. */
static int inherited_socket(const char *spec, dshd_listen_t *out, char *why, size_t whylen) {
  char *end;
  long fd = strtol(spec + 3, &end, 10);
  int listening = 0, type = 0;
  socklen_t l = sizeof listening;
  if (!spec[3] || *end || fd < 0 || fd > INT_MAX) {
    snprintf(why, whylen, "bad listen address '%s' (fd:N expected)", spec);
    return -1;
  }
  if (getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l) != 0 || !listening ||
      getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &(socklen_t){sizeof type}) != 0 ||
      type != SOCK_STREAM) {
    snprintf(why, whylen, "--listen %s: fd %ld is not a listening stream socket", spec, fd);
    return -1;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  memset(&ss, 0, sizeof ss);
  if (getsockname((int)fd, (struct sockaddr *)&ss, &sl) != 0) {
    snprintf(why, whylen, "--listen %s: getsockname: %s", spec, strerror(errno));
    return -1;
  }
  int fl = fcntl((int)fd, F_GETFL);
  if (fl < 0 || fcntl((int)fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0) {
    snprintf(why, whylen, "--listen %s: fcntl: %s", spec, strerror(errno));
    return -1;
  }
  out->fds[0] = (int)fd;
  if (ss.ss_family == AF_UNIX) {
    out->loopback = 1;
    snprintf(out->address, sizeof out->address, "%s", spec);
  } else {
    char host[INET6_ADDRSTRLEN] = "";
    unsigned port = 0;
    if (ss.ss_family == AF_INET) {
      struct sockaddr_in *a = (struct sockaddr_in *)&ss;
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
      snprintf(out->address, sizeof out->address, "%s:%u", host, port);
    } else {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
      snprintf(out->address, sizeof out->address, "[%s]:%u", host, port);
    }
    out->loopback = is_loopback(ss.ss_family, host);
  }
  return 0;
}

int dshd_listen_open(const char *spec, dshd_listen_t *out, char *why, size_t whylen) {
  memset(out, 0, sizeof *out);
  out->fds[0] = out->fds[1] = -1;
  if (strncmp(spec, "fd:", 3) == 0) return inherited_socket(spec, out, why, whylen);
  if (strchr(spec, '/')) {
    int fd = unix_socket(spec, why, whylen);
    if (fd < 0) return -1;
    out->fds[0] = fd;
    out->loopback = 1;
    snprintf(out->unix_path, sizeof out->unix_path, "%s", spec);
    snprintf(out->address, sizeof out->address, "%s", spec);
    return 0;
  }
  const char *colon = strrchr(spec, ':');
  char host[256];
  const char *portstr;
  if (!colon) { /* just a port */
    snprintf(host, sizeof host, "127.0.0.1");
    portstr = spec;
  } else {
    size_t hl = (size_t)(colon - spec);
    if (hl >= sizeof host) {
      snprintf(why, whylen, "bad listen address '%s'", spec);
      return -1;
    }
    memcpy(host, spec, hl);
    host[hl] = 0;
    portstr = colon + 1;
  }
  char *end;
  unsigned long port = strtoul(portstr, &end, 10);
  if (!*portstr || *end || port > 65535) {
    snprintf(why, whylen, "bad port in listen address '%s'", spec);
    return -1;
  }
  unsigned bound = 0;
  if (strcmp(host, "localhost") == 0 || host[0] == 0) {
    int fd4 = tcp_socket(AF_INET, "127.0.0.1", (unsigned)port, &bound, why, whylen);
    if (fd4 < 0) return -1;
    char why6[256];
    unsigned b6;
    out->fds[0] = fd4;
    out->loopback = 1;
    out->fds[1] = tcp_socket(AF_INET6, "::1", bound, &b6, why6, sizeof why6); /* optional */
    snprintf(out->address, sizeof out->address, "127.0.0.1:%u", bound);
    return 0;
  }
  int v6 = host[0] == '[';
  if (v6) {
    size_t hl = strlen(host);
    if (hl < 3 || host[hl - 1] != ']') {
      snprintf(why, whylen, "bad listen address '%s'", spec);
      return -1;
    }
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = 0;
  }
  int fd = tcp_socket(v6 ? AF_INET6 : AF_INET, host, (unsigned)port, &bound, why, whylen);
  if (fd < 0) return -1;
  out->fds[0] = fd;
  out->loopback = is_loopback(v6 ? AF_INET6 : AF_INET, host);
  if (v6)
    snprintf(out->address, sizeof out->address, "[%s]:%u", host, bound);
  else
    snprintf(out->address, sizeof out->address, "%s:%u", host, bound);
  return 0;
}

int dshd_listen_ready_file(const char *path, const char *address, char *why, size_t whylen) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
    snprintf(why, whylen, "ready file path too long");
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(why, whylen, "ready file %s: %s", tmp, strerror(errno));
    return -1;
  }
  char line[PATH_MAX + 32];
  int n = snprintf(line, sizeof line, "%s\n", address);
  int ok = write(fd, line, (size_t)n) == n;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    snprintf(why, whylen, "ready file %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}
