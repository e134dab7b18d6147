/* mounts.c: what dsh-launch mounts and prepares before bubblewrap starts, all
 * in a mount namespace of its own (nothing of it shows on the host, and all
 * of it goes when the sandbox's last process does: the loop device of the
 * disk image is released then too). Uses mount(2) and, for the loop device,
 * util-linux's mount(8). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"

static void run(char *const argv[]) {
  pid_t pid = fork();
  if (pid < 0) launch_die("fork: %s", strerror(errno));
  if (pid == 0) {
    execv(argv[0], argv);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) launch_die("waitpid: %s", strerror(errno));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    launch_die("%s %s failed (status %d)", argv[0], argv[1], WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

void launch_mounts(const launch_opts_t *o) {
  if (!o->stage_src) return;
  if (unshare(CLONE_NEWNS) != 0) launch_die("unshare(CLONE_NEWNS): %s", strerror(errno));
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    launch_die("making mounts private: %s", strerror(errno));
  if (mount(o->stage_src, o->stage_dst, NULL, MS_BIND, NULL) != 0)
    launch_die("bind %s at %s: %s", o->stage_src, o->stage_dst, strerror(errno));
  if (o->disk_img) {
    /* the image is the host's file: never a link the sandbox could have planted */
    struct stat st;
    if (lstat(o->disk_img, &st) != 0 || !S_ISREG(st.st_mode))
      launch_die("disk image %s is not a regular file", o->disk_img);
    char *argv[] = {"/bin/mount",
                    "-t",
                    "ext4",
                    "-o",
                    "loop,nodev,nosuid,noinit_itable,discard",
                    (char *)o->disk_img,
                    (char *)o->disk_dir,
                    NULL};
    run(argv);
  }
}

/* /dev/net/tun for one uid: a tmpfs over /dev/net in our own mount namespace
 * with a tun node (10, 200) it owns; the host's node stays as it is. */
void launch_tun(const launch_opts_t *o) {
  if (o->tun_uid < 0) return;
  if (!o->stage_src && unshare(CLONE_NEWNS) != 0)
    launch_die("unshare(CLONE_NEWNS): %s", strerror(errno));
  if (!o->stage_src && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    launch_die("making mounts private: %s", strerror(errno));
  if (mount("tun", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16k,mode=0755") != 0 ||
      mknod("/dev/net/tun", S_IFCHR | 0600, makedev(10, 200)) != 0 ||
      chown("/dev/net/tun", (uid_t)o->tun_uid, (gid_t)o->tun_gid) != 0)
    launch_die("a private /dev/net/tun: %s", strerror(errno));
}

void launch_mkdirs(const char *const *specs, int count) {
  for (int i = 0; i < count; i++) {
    char path[4096];
    unsigned mode, uid = 0, gid = 0;
    const char *eq = strrchr(specs[i], '=');
    int n = eq ? sscanf(eq + 1, "%o:%u:%u", &mode, &uid, &gid) : 0;
    if (!eq || (size_t)(eq - specs[i]) >= sizeof path || (n != 1 && n != 3))
      launch_die("--mkdir: PATH=MODE[:UID:GID] expected, got %s", specs[i]);
    memcpy(path, specs[i], (size_t)(eq - specs[i]));
    path[eq - specs[i]] = 0;
    struct stat st;
    if (lstat(path, &st) == 0) {
      if (!S_ISDIR(st.st_mode)) launch_die("%s is not a directory", path);
      continue; /* made by an earlier start: its owner and mode are the sandbox's business */
    }
    if (mkdir(path, 0700) != 0 || (n == 3 && chown(path, uid, gid) != 0) || chmod(path, mode) != 0)
      launch_die("cannot make %s: %s", path, strerror(errno));
  }
}

/* The missing parents of path (0755). */
static void parents(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      launch_die("cannot make %s: %s", buf, strerror(errno));
    *p = '/';
  }
}

static void copy_one(const char *src, const char *dst) {
  parents(dst);
  int in = open(src, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (in < 0 || fstat(in, &st) != 0 || !S_ISREG(st.st_mode))
    launch_die("cannot read %s: %s", src, in < 0 ? strerror(errno) : "not a regular file");
  unlink(dst);
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0755);
  if (out < 0) launch_die("cannot create %s: %s", dst, strerror(errno));
  char buf[65536];
  for (;;) {
    ssize_t k = read(in, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) launch_die("reading %s: %s", src, strerror(errno));
    if (k == 0) break;
    for (ssize_t off = 0; off < k;) {
      ssize_t w = write(out, buf + off, (size_t)(k - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) launch_die("writing %s: %s", dst, strerror(errno));
      off += w;
    }
  }
  if (fchmod(out, st.st_mode & 0755) != 0 || close(out) != 0)
    launch_die("writing %s: %s", dst, strerror(errno));
  close(in);
}

void launch_copies(const launch_opts_t *o) {
  for (int i = 0; i < o->n_copies; i++) copy_one(o->copy_src[i], o->copy_dst[i]);
}
