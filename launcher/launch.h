/* launch.h: dsh-launch, the host-side launcher of a local sandbox.
 *
 * The supervisor (lua/dsh/sandbox/supervisor.lua) runs it, as root or as the
 * host user, with the sandbox's bubblewrap command line after "--". It does,
 * in this order, what bubblewrap cannot do for itself and what must happen
 * before any code of the sandbox runs: join the sandbox's cgroups, set
 * resource limits, make the state directory reachable in a private mount
 * namespace and mount the sandbox's disk image there, bind dshd's listening
 * socket on the host, hand over the access token through a pipe, drop to the
 * sandbox's host uid, and make the sandbox's user namespace with its two
 * identities (dshd as root, commands as `user`) and its limits, in which
 * bubblewrap then starts as root (it makes the other namespaces). Then it
 * waits for bubblewrap and exits with its status.
 *
 * Descriptors the command inherits (bubblewrap passes them on to dshd):
 *   3  the listening unix socket (--listen)        dshd --listen fd:3
 *   4  a pipe holding the access token (--token)    dshd --access-token-fd 4
 *   5  bubblewrap's --info-fd (--info): the launcher reads the sandbox's
 *      first pid from it and prints "command M" (the command's pid) and
 *      "pid N" (the sandbox's first process) on stdout
 * It also starts slirp4netns for a root host (--tun UID:GID --as UID:GID):
 * in a mount namespace of its own, /dev/net/tun is a node that uid may open,
 * so slirp4netns runs as the sandbox's root uid, not as the host's root.
 * Exit status: the command's (128 + N when a signal ended it), or 125 when a
 * step of the launcher failed (its message is on stderr).
 *
 * Never runs anything of the sandbox's, never reads a file the sandbox can
 * write, and keeps no privilege past the drop (--as). */
#ifndef DSH_LAUNCH_H
#define DSH_LAUNCH_H

#include <stddef.h>
#include <sys/types.h>

enum { FD_LISTEN = 3, FD_TOKEN = 4, FD_INFO = 5 };
enum { EXIT_LAUNCH = 125 };

#define MAX_ITEMS 16

typedef struct launch_opts {
  const char *cgroup_procs[MAX_ITEMS];
  int n_cgroup_procs;
  long long nproc, nofile;           /* -1: unchanged */
  const char *stage_src, *stage_dst; /* --stage SRC=DST */
  const char *disk_img, *disk_dir;   /* --disk IMAGE=DIR (after the stage) */
  const char *copy_src[MAX_ITEMS], *copy_dst[MAX_ITEMS];
  int n_copies;
  const char *listen;            /* --listen PATH */
  int token;                     /* --token: the token on stdin */
  int info;                      /* --info: read the command's fd 5 */
  long long as_uid, as_gid;      /* --as UID:GID; -1: stay (the user namespace's owner) */
  long long tun_uid, tun_gid;    /* --tun UID:GID: a private /dev/net/tun for that uid */
  const char *uid_map, *gid_map; /* --map-uids "0 A 1 1000 B 1": a user namespace with these */
  const char *sysctl_name[MAX_ITEMS], *sysctl_value[MAX_ITEMS];
  int n_sysctls;
  char *const *argv; /* the command */
} launch_opts_t;

/* A step failed: message on stderr, exit 125. */
__attribute__((noreturn, format(printf, 1, 2))) void launch_die(const char *fmt, ...);

/* mounts.c: the private mount namespace, the stage and the disk image; the
 * copies (each replaces its destination, with the source's mode, its missing
 * parents made); and, in the command's process once it is the sandbox's
 * root, directories made when missing ("PATH=MODE[:UID:GID]", mode in octal,
 * ids as the sandbox's user namespace sees them). */
void launch_mounts(const launch_opts_t *o);
void launch_tun(const launch_opts_t *o);
void launch_mkdirs(const char *const *specs, int n);
void launch_copies(const launch_opts_t *o);

/* idmap.c: the user namespace of process pid gets its uid and gid maps and
 * its sysctls; 0, or -1 with why. */
int launch_idmap(const launch_opts_t *o, pid_t pid, char *why, size_t whylen);

#endif
