/* proc.h: processes in their own group (or session), on the loop.
 *
 * dsh_proc_spawn() starts argv with an exact environment and cwd in a new
 * process group (pgid == pid), or a new session when new_session is set or a
 * PTY is requested. The child gets a clean signal mask and default
 * dispositions, and no fds beyond 0, 1 and 2. Bytes pass through unaltered.
 *
 * Reaping happens only through libev (ev_child on the default loop). After the
 * leader is reaped the group may still have members (grandchildren); the
 * module checks kill(-pgid, 0) on every reap and on a short backoff timer and
 * reports DSH_EV_PROC_QUIET once no member is left.
 *
 * Output: in buffered mode (the default) the module reads each output stream
 * into a buffer of at most max_buffer_bytes and stops reading while it is full
 * (back-pressure); the owner takes bytes with dsh_proc_peek()/dsh_proc_consume().
 * In manual_io mode the module never touches the parent-side fds; the owner
 * reads and writes them itself (dsh_proc_fd), as dshd does.
 *
 * Events go to the loop queue with the proc's id, or to notify() when set (C
 * users only; notify must not free the proc). DSH_EV_PROC_EXIT carries the raw
 * wait status in n and always precedes DSH_EV_PROC_QUIET. DSH_EV_PROC_DATA is
 * queued once per stream until the next peek of that stream.
 *
 * Ownership: the caller owns the proc and frees it with dsh_proc_free(), which
 * SIGKILLs the group if it is not quiescent, closes the fds and stops every
 * watcher. Pointers returned by peek are valid until the next call on the proc. */
#ifndef DSH_PROC_H
#define DSH_PROC_H

#include <stddef.h>
#include <stdint.h>

#include "dsh/loop.h"

typedef struct dsh_proc dsh_proc_t;

enum dsh_stdio_mode {
  DSH_STDIO_NULL = 0,   /* /dev/null */
  DSH_STDIO_PIPE = 1,   /* a pipe to the parent */
  DSH_STDIO_INHERIT = 2 /* the parent's own fd */
};

enum dsh_proc_stream { DSH_PROC_STDIN = 0, DSH_PROC_STDOUT = 1, DSH_PROC_STDERR = 2 };

typedef void (*dsh_proc_notify_fn)(void *ud, dsh_proc_t *p, uint32_t kind, int32_t status,
                                   int64_t n);

typedef struct dsh_proc_opts {
  const char *const *argv; /* NULL-terminated; argv[0] is a path, or a name looked
                              up in PATH of envp (not of the parent) */
  const char *const *envp; /* NULL-terminated exact environment; NULL = empty */
  const char *cwd;         /* NULL = the parent's */
  int32_t stdin_mode, stdout_mode, stderr_mode; /* enum dsh_stdio_mode; ignored with pty */
  int32_t pty; /* non-zero: the child's 0/1/2 are a new PTY's slave */
  uint16_t pty_rows, pty_cols;
  int32_t new_session; /* non-zero: setsid() instead of setpgid(0, 0) */
  int32_t uid, gid;    /* >= 0: switch to them (as root); -1: unchanged. With
                          init_groups and uid >= 0: the supplementary groups
                          of uid's account, and gid -1 means its primary group */
  int32_t init_groups;
  int32_t manual_io;         /* non-zero: the owner does all I/O on the fds */
  uint32_t max_buffer_bytes; /* per output stream in buffered mode; 0 = 65536 */
  uint32_t max_open_files;   /* > 0: the child's RLIMIT_NOFILE, soft and hard (it can
                                only lower it then); 0 = inherited */
  dsh_proc_notify_fn notify; /* NULL = queue events on the loop */
  void *notify_ud;
} dsh_proc_opts_t;

typedef struct dsh_proc_status {
  int32_t pid;         /* also the pgid (and sid with new_session/pty) */
  int32_t running;     /* leader not yet reaped */
  int32_t exit_code;   /* -1 unless the leader exited normally */
  int32_t term_signal; /* 0 unless the leader was killed by a signal */
  int32_t core_dumped;
  int32_t quiescent;                   /* leader reaped and no member of the group is left */
  int32_t stdout_eof, stderr_eof;      /* output streams done (always 1 when not piped;
                                          never set in manual_io mode, nor the byte counts) */
  int32_t stdin_open;                  /* stdin pipe or pty still writable */
  int32_t term_requested;              /* dsh_proc_terminate() was called */
  int32_t kill_sent;                   /* the terminate ladder escalated to SIGKILL */
  uint64_t stdout_bytes, stderr_bytes; /* total bytes read so far */
  uint64_t stdin_pending;              /* bytes accepted by write but not yet in the pipe */
} dsh_proc_status_t;

/* Starts the process and returns once the child has exec'd. On failure
 * nothing is left running and err says why: DSH_ESPAWN for the child's own
 * failures ("spawn \"/nope\": No such file or directory", "spawn: cwd \"/x\":
 * ..."), DSH_ESYS for ours (pipes, pty), DSH_EINVAL for bad opts. */
int dsh_proc_spawn(dsh_loop_t *loop, const dsh_proc_opts_t *opts, uint64_t id, dsh_proc_t **out,
                   char *err, size_t errlen);

int32_t dsh_proc_pid(const dsh_proc_t *p);
uint64_t dsh_proc_id(const dsh_proc_t *p);
int dsh_proc_status(const dsh_proc_t *p, dsh_proc_status_t *st);

/* Parent-side fd of a stream (pty: the master for every stream), or -1. */
int dsh_proc_fd(const dsh_proc_t *p, int stream);

/* Buffered output. peek lends the buffered bytes of stream (DSH_EAGAIN when
 * empty and not at EOF, DSH_EEOF when empty and at EOF); consume drops n of
 * them and resumes reading when the buffer has room. */
int dsh_proc_peek(dsh_proc_t *p, int stream, const uint8_t **data, size_t *n);
int dsh_proc_consume(dsh_proc_t *p, int stream, size_t n);

/* Stdin (pipe or pty master). write copies the bytes and sends them as the
 * fd accepts them; DSH_EV_PROC_DRAIN reports when the buffer is empty again
 * (status DSH_ECLOSED when the reader went away: the backlog is dropped).
 * write returns DSH_ECLOSED once that happened, DSH_ESTATE after close_stdin
 * or without a stdin pipe. close_stdin closes after pending bytes are written
 * (at once in manual_io mode; pty: DSH_ESTATE). */
int dsh_proc_write(dsh_proc_t *p, const uint8_t *data, size_t n);
int dsh_proc_close_stdin(dsh_proc_t *p);

/* Signals: to the whole group (kill(-pgid)) when group is non-zero, else to the
 * leader. A group that is already gone is not an error (returns DSH_OK). */
int dsh_proc_signal(dsh_proc_t *p, int sig, int32_t group);

/* SIGTERM (then SIGCONT, so stopped members see it) to the group now, SIGKILL
 * to the group after grace_ms unless it is quiescent by then. Idempotent; a
 * second call never restarts the grace timer. */
int dsh_proc_terminate(dsh_proc_t *p, int64_t grace_ms);

/* 1 when the leader is reaped and kill(-pgid, 0) finds no member, else 0. */
int dsh_proc_quiescent(dsh_proc_t *p);

/* PTY window size (TIOCSWINSZ on the master; the kernel sends SIGWINCH). */
int dsh_proc_resize(dsh_proc_t *p, uint16_t rows, uint16_t cols);

/* Signal names of this platform: "TERM", "SIGTERM" or "sigterm" -> SIGTERM
 * (0 when unknown); a number -> "SIGTERM" (NULL when unknown). */
int dsh_proc_signum(const char *name);
const char *dsh_proc_signame(int sig);

void dsh_proc_free(dsh_proc_t *p);

/* Number of procs alive in this process (for leak checks in tests). */
int64_t dsh_proc_live_count(void);

#endif
