/* proc_internal.h: what proc.c (the object, its watchers and buffers) and
 * proc_spawn.c (clone, child setup, exec) share. Not installed, not FFI. */
#ifndef DSH_PROC_INTERNAL_H
#define DSH_PROC_INTERNAL_H

#include <stddef.h>

#include "dsh/proc.h"

/* What a successful launch leaves to the parent. Every fd is CLOEXEC and
 * non-blocking; -1 when the stream is not piped. With a pty, master is the
 * pty master and in/out/err are -1. */
typedef struct dsh_spawned {
  int pid;
  int in, out, err;
  int master;
} dsh_spawned_t;

/* Starts opts->argv and returns once the child has called execve (or failed
 * to: then the child is already reaped, nothing is left open, and err says
 * why). Validation of opts is the caller's. */
int dsh_proc_launch(const dsh_proc_opts_t *opts, dsh_spawned_t *out, char *err, size_t errlen);

#endif
