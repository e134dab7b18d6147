/* idmap.c: the two identities of a sandbox's user namespace, and its limits.
 *
 * Bubblewrap (run with --unshare-user --userns-block-fd) has made the
 * namespace and waits; the maps go in now, in one write each as the kernel
 * requires: as root directly, else through the setuid newuidmap/newgidmap,
 * which allow only what /etc/subuid and /etc/subgid grant the user. Then
 * the namespace's own sysctls (user.max_user_namespaces=0 and the inotify
 * bounds) are written from a child that joined it: in a user namespace these
 * limits are per namespace, and no process of the sandbox can raise them
 * (that needs CAP_SYS_RESOURCE there, which the sandbox never holds). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"

/* "0 A 1 1000 B 1" -> "0 A 1\n1000 B 1\n"; 0 or -1 when malformed. */
static int map_text(const char *spec, char *out, size_t outlen) {
  unsigned long v[3 * 8];
  int n = 0;
  const char *p = spec;
  while (*p && n < 3 * 8) {
    char *end;
    errno = 0;
    v[n] = strtoul(p, &end, 10);
    if (end == p || errno) return -1;
    n++;
    p = end;
    while (*p == ' ') p++;
  }
  if (*p || n == 0 || n % 3) return -1;
  size_t at = 0;
  for (int i = 0; i < n; i += 3) {
    int k = snprintf(out + at, outlen - at, "%lu %lu %lu\n", v[i], v[i + 1], v[i + 2]);
    if (k < 0 || (size_t)k >= outlen - at) return -1;
    at += (size_t)k;
  }
  return 0;
}

static int write_map(pid_t pid, const char *file, const char *text, char *why, size_t whylen) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t len = (ssize_t)strlen(text);
  if (fd < 0 || write(fd, text, (size_t)len) != len) {
    snprintf(why, whylen, "cannot write %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return 0;
}

/* newuidmap PID 0 A 1 1000 B 1 (the same for gids). */
static int helper_map(const char *helper, pid_t pid, const char *spec, char *why, size_t whylen) {
  char *argv[3 * 8 + 4], *copy = strdup(spec), pidbuf[16];
  int n = 0;
  snprintf(pidbuf, sizeof pidbuf, "%d", (int)pid);
  argv[n++] = (char *)helper;
  argv[n++] = pidbuf;
  for (char *t = strtok(copy, " "); t && n < (int)(sizeof argv / sizeof *argv) - 1;
       t = strtok(NULL, " "))
    argv[n++] = t;
  argv[n] = NULL;
  pid_t c = fork();
  if (c == 0) {
    execvp(helper, argv);
    fprintf(stderr, "dsh-launch: cannot run %s: %s\n", helper, strerror(errno));
    _exit(127);
  }
  int st = 0;
  while (c > 0 && waitpid(c, &st, 0) < 0 && errno == EINTR) {
  }
  free(copy);
  if (c < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(why, whylen,
             "%s %s failed: the user needs subordinate ids for the sandbox's two identities "
             "(/etc/subuid and /etc/subgid, package uidmap)",
             helper, spec);
    return -1;
  }
  return 0;
}

/* In a child that joined pid's user namespace (full capabilities there). */
static int sysctls(const launch_opts_t *o, pid_t pid, char *why, size_t whylen) {
  if (o->n_sysctls == 0) return 0;
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    snprintf(why, whylen, "pipe: %s", strerror(errno));
    return -1;
  }
  pid_t c = fork();
  if (c == 0) {
    char path[64], msg[256] = "";
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWUSER) != 0)
      snprintf(msg, sizeof msg, "cannot join the sandbox's user namespace: %s", strerror(errno));
    for (int i = 0; !msg[0] && i < o->n_sysctls; i++) {
      char file[256];
      snprintf(file, sizeof file, "/proc/sys/%s", o->sysctl_name[i]);
      for (char *d = file + 10; *d; d++)
        if (*d == '.') *d = '/';
      int fd = open(file, O_WRONLY | O_CLOEXEC);
      ssize_t len = (ssize_t)strlen(o->sysctl_value[i]);
      if (fd < 0 || write(fd, o->sysctl_value[i], (size_t)len) != len)
        snprintf(msg, sizeof msg, "cannot set %s in the sandbox's user namespace: %s",
                 o->sysctl_name[i], strerror(errno));
      if (fd >= 0) close(fd);
    }
    if (msg[0] && write(pfd[1], msg, strlen(msg)) < 0) _exit(2);
    _exit(msg[0] ? 1 : 0);
  }
  close(pfd[1]);
  int st = 0;
  while (c > 0 && waitpid(c, &st, 0) < 0 && errno == EINTR) {
  }
  ssize_t k = read(pfd[0], why, whylen - 1);
  close(pfd[0]);
  if (c < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    if (k <= 0)
      snprintf(why, whylen, "setting the sandbox's sysctls failed");
    else
      why[k] = 0;
    return -1;
  }
  return 0;
}

int launch_idmap(const launch_opts_t *o, pid_t pid, char *why, size_t whylen) {
  char uids[512], gids[512];
  if (map_text(o->uid_map, uids, sizeof uids) != 0 ||
      map_text(o->gid_map, gids, sizeof gids) != 0) {
    snprintf(why, whylen, "malformed id map: %s / %s", o->uid_map, o->gid_map);
    return -1;
  }
  if (geteuid() == 0) {
    if (write_map(pid, "uid_map", uids, why, whylen) != 0 ||
        write_map(pid, "gid_map", gids, why, whylen) != 0)
      return -1;
  } else if (helper_map("newuidmap", pid, o->uid_map, why, whylen) != 0 ||
             helper_map("newgidmap", pid, o->gid_map, why, whylen) != 0) {
    return -1;
  }
  return sysctls(o, pid, why, whylen);
}
