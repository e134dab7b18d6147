/* seccomp.c: the system-call filter of a local sandbox (dshd --seccomp).
 *
 * Installed by dshd on itself before it serves anything, so every process of
 * the sandbox inherits it and none can lift it. In the spirit of container
 * runtimes' default profiles: everything ordinary work needs is allowed
 * (compilers, interpreters, debuggers: ptrace of the sandbox's own processes
 * stays possible, the pid namespace hides every other), and the calls that
 * reach the kernel's rarely-needed or host-wide parts fail with EPERM:
 * keyrings, BPF, perf events, userfaultfd, kexec, modules, mounts and the new
 * mount API, swap, clocks, quotas, accounting, file handles, setns, nested
 * user namespaces (clone/unshare with CLONE_NEWUSER), and pushing input into
 * a terminal (TIOCSTI). clone3 and io_uring fail with ENOSYS instead, so the C
 * library and libuv fall back to what the filter can inspect.
 *
 * Uses libseccomp. The filter covers the native ABI and, on x86-64, the i386
 * and x32 ABIs (a call through another ABI must not slip past it). Never
 * logs; dshd_seccomp_install says why it failed. */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>

#include "server.h"

static const char *const denied[] = {
    "add_key",
    "keyctl",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "init_module",
    "finit_module",
    "delete_module",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "open_tree",
    "move_mount",
    "mount_setattr",
    "swapon",
    "swapoff",
    "settimeofday",
    "clock_settime",
    "clock_settime64",
    "clock_adjtime",
    "clock_adjtime64",
    "adjtimex",
    "stime",
    "syslog",
    "acct",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "open_by_handle_at",
    "name_to_handle_at",
    "setns",
    "iopl",
    "ioperm",
    "uselib",
    "vm86",
    "vm86old",
    "nfsservctl",
};

static const char *const absent[] = {"clone3", "io_uring_setup", "io_uring_enter",
                                     "io_uring_register"};

static int rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
                const struct scmp_arg_cmp *cmp) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return 0; /* not a call of this kernel's ABIs */
  int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
  /* -EDOM/-EOPNOTSUPP: the call does not exist on one of the ABIs */
  return rc == -EDOM || rc == -EOPNOTSUPP ? 0 : rc;
}

int dshd_seccomp_install(char *why, size_t whylen) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) {
    snprintf(why, whylen, "seccomp: cannot create a filter");
    return -1;
  }
  int rc = 0;
#if defined(__x86_64__)
  if (seccomp_arch_exist(ctx, SCMP_ARCH_X86) == -EEXIST) rc = seccomp_arch_add(ctx, SCMP_ARCH_X86);
  if (!rc && seccomp_arch_exist(ctx, SCMP_ARCH_X32) == -EEXIST)
    rc = seccomp_arch_add(ctx, SCMP_ARCH_X32);
#endif
  uint32_t eperm = SCMP_ACT_ERRNO(EPERM), enosys = SCMP_ACT_ERRNO(ENOSYS);
  for (size_t i = 0; !rc && i < sizeof denied / sizeof *denied; i++)
    rc = rule(ctx, eperm, denied[i], 0, NULL);
  for (size_t i = 0; !rc && i < sizeof absent / sizeof *absent; i++)
    rc = rule(ctx, enosys, absent[i], 0, NULL);
  /* no new user namespace: clone's and unshare's first argument are flags */
  struct scmp_arg_cmp newuser = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
  if (!rc) rc = rule(ctx, eperm, "clone", 1, &newuser);
  if (!rc) rc = rule(ctx, eperm, "unshare", 1, &newuser);
  struct scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
  if (!rc) rc = rule(ctx, eperm, "ioctl", 1, &sti);
  if (!rc) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc) {
    snprintf(why, whylen, "seccomp: %s", strerror(-rc));
    return -1;
  }
  return 0;
}
