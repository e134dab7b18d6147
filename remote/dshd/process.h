/* process.h: what the files of the process service share — process.c (the
 * RPC handlers and the route table), process_spawn.c (environment and spill
 * files for Start), process_record.c (the process records), process_output.c
 * and process_input.c (their output and input sides), process_streams.c (the
 * Start/Connect/WatchGroup streams attached to them) and process_events.c
 * (the JSON of stream messages). The server core sees only
 * dshd_process_routes and the hooks in dshd.h.
 *
 * A process record (record_t) owns one dsh_proc_t in manual_io mode: it reads
 * the output fds into replay rings (one per stream, replay.h), writes queued
 * input to stdin or the PTY master, and turns the proc's EXIT/QUIET
 * notifications into the envd end event and the quiescence state.
 * Subscribers (subscriber_t, one per open Start/Connect/WatchGroup stream) keep
 * their own offsets into the rings and hold reading back while they would
 * lose bytes. A record outlives its process: once it has ended and its
 * group is empty it lingers (rings, end event) for late Connects, bounded
 * in time and in total memory, then goes away.
 *
 * Everything runs on the one libev loop; nothing blocks. */
#ifndef DSHD_PROCESS_H
#define DSHD_PROCESS_H

#include <ev.h>
#include <limits.h>
#include <stdint.h>

#include "dsh/buf.h"
#include "dsh/proc.h"
#include "dshd.h"
#include "replay.h"

#define PROCESS_READ_CHUNK (256u << 10) /* most bytes per read() of an output pipe */
#define PROCESS_EVENT_MAX (256u << 10)  /* most raw bytes per data event */
#define PROCESS_PULL_BUDGET (1u << 20)  /* raw bytes a pull appends at most */
#define PROCESS_STDIN_MAX (8u << 20)    /* queued input per process */
#define PROCESS_PIPE_SIZE (1 << 20)     /* F_SETPIPE_SZ of output pipes */
#define PROCESS_LAG_MS 1000             /* a subscriber holding reading back this long ... */
#define PROCESS_MARKS_MAX 1024          /* stdout/stderr interleaving marks kept */
#define PROCESS_LINGER_MAX 1024         /* most lingering records */

typedef struct record record_t;
typedef struct subscriber subscriber_t;

struct record_out {
  ev_io w;
  record_t *pp;
  int idx;           /* 1 stdout (or pty), 2 stderr */
  int fd;            /* the proc's fd; -1 when not piped */
  int open;          /* still to be read (not EOF, not stopped) */
  int paused;        /* held back by a subscriber (or the mark log) */
  int enlarged;      /* F_SETPIPE_SZ done (only for streams that carry a lot) */
  int drain_stop;    /* after a kill, the leader gone: read what the pipe holds now, then stop */
  size_t drain_left; /* ... that many bytes (FIONREAD at the time), or until EAGAIN */
  dshd_ring_t ring;
  int spill_fd;        /* spill extension: a copy of the bytes goes here; -1 none */
  uint64_t spill_left; /* bytes the spill file still takes */
};

struct record {
  record_t *next, *prev; /* the table, newest first */
  record_t *hnext;       /* the pid index's chain (pids are unique in the table) */
  uint64_t id;           /* unique for the daemon's life */
  int32_t pid;
  dsh_proc_t *proc; /* NULL once freed (ended and quiescent) */
  json_t *config;   /* ProcessConfig as sent, for List; NULL once the leader exited */
  char *tag;
  int pty;
  struct record_out out[3]; /* [1], [2] */
  dshd_marks_t marks;

  ev_io in_w; /* stdin pipe or pty master, while input is queued */
  int in_fd;  /* -1 when there is no (more) stdin */
  int in_close_req;
  int in_err;   /* errno of a failed write: input is refused from then on */
  dsh_buf_t in; /* input the fd has not taken yet */

  int leader_exited, wait_status, quiescent;
  int cancel_reading; /* SIGKILL/SIGTERM/timeout asked: stop reading once the leader is gone */
  int ended;          /* end event built: the record lingers */
  int finalized;      /* ended and quiescent: proc freed, linger timer running */
  int linger_expired;
  char end_json[256];
  size_t end_len;
  double ended_at;
  size_t held;         /* memory counted in --exited-max-bytes once ended (record_memory) */
  ev_timer deadline_t; /* Start's Connect-Timeout-Ms: SIGKILL */
  ev_timer linger_t;
  ev_timer kick_t; /* deferred work (drain reads, proc free) out of callbacks */
  ev_timer lag_t;  /* reading paused for a subscriber: does it starve another? */
  subscriber_t *subs;
};

/* --- process_record.c ---------------------------------------------------------------- */

typedef struct record_spawn {
  const char *const *argv;
  const char *const *envp;
  const char *cwd;
  int pty;
  uint16_t rows, cols;
  int stdin_pipe;
  int32_t uid, gid;      /* -1: unchanged */
  int64_t timeout_ms;    /* 0: none */
  json_t *config;        /* taken */
  const char *tag;       /* NULL: none */
  int spill_fd[3];       /* spill extension, [1] stdout, [2] stderr: taken on success */
  uint64_t spill_cap[3]; /* bytes to copy into spill_fd[i]; 0: no spill (spill_fd ignored) */
} record_spawn_t;

int record_start(const record_spawn_t *o, record_t **out, dshd_err_t *err);

/* Lookup by pid or tag. live_only: only records whose end was not yet sent
 * (envd's table); else lingering ones too. NULL when absent. */
record_t *record_find(uint32_t pid, const char *tag, int live_only);
/* not_found "process with pid N not found" / "... tag T ...". */
int record_not_found(uint32_t pid, const char *tag, dshd_err_t *err);

/* Appends ProcessInfo of each process whose leader runs. */
void record_list(json_t *array);

/* Go's error text: strerror starting lower-case ("broken pipe"). */
const char *record_errtext(int e);

/* sig to the leader, or to the group; grace_ms > 0 with SIGTERM: the
 * terminate ladder. KILL/TERM also cancel reading once the leader is gone. */
int record_signal(record_t *pp, int sig, int group, int64_t grace_ms, dshd_err_t *err);
int record_resize(record_t *pp, uint32_t rows, uint32_t cols, dshd_err_t *err);

/* --- process_record.c, for process_output.c ------------------------------------ */

size_t record_ring_cap(void);           /* --replay-bytes */
void record_wake_subs(record_t *pp);    /* state changed: every subscriber */
void record_wake_readers(record_t *pp); /* new output: event streams */
void record_kick(record_t *pp);         /* deferred work, out of callbacks */
void record_check_end(record_t *pp);    /* builds the end event once everything is read */

/* --- process_output.c --------------------------------------------------------- */

/* Sets up stream i (1 stdout/pty, 2 stderr) on fd (-1: none), with an
 * optional spill copy of its first spill_cap bytes to spill_fd (taken). */
void record_output_init(record_t *pp, int i, int fd, int spill_fd, uint64_t spill_cap);
/* Stops reading stream i and frees its ring and spill file. */
void record_output_release(record_t *pp, int i);
/* After a kill and the leader's exit: take what the pipes hold now, then
 * stop (a grandchild may keep them open); drain_reads does the reading. */
void record_output_drain(record_t *pp);
void record_output_drain_reads(record_t *pp);
/* Sets up the record's lag check (see process_output.c). */
void record_output_lag_init(record_t *pp);

/* --- process_input.c ---------------------------------------------------------------- */

/* Sets up the record's input side after spawn; drop discards queued bytes
 * and stops writing (the end, or the record going away). */
void record_input_init(record_t *pp);
void record_input_drop(record_t *pp);
/* Input: stdin bytes (pipe) or pty bytes (master); queued beyond what the fd
 * takes now, in order. */
int record_input(record_t *pp, int to_pty, const uint8_t *data, size_t n, dshd_err_t *err);
int record_close_stdin(record_t *pp, dshd_err_t *err);

/* --- process_record.c, for process_streams.c -----------------------------------------------------
 */

/* Subscribers. attach/detach keep pp->subs; resume restarts paused reading
 * after a subscriber took bytes (or left). */
void record_attach(record_t *pp, subscriber_t *sub);
void record_detach(record_t *pp, subscriber_t *sub);
void record_resume(record_t *pp);

/* Frees every record (SIGKILLs groups still alive). */
void record_shutdown_all(void);

/* --- process_streams.c ------------------------------------------------------------------ */

enum { SUB_EVENTS = 1, SUB_GROUP = 2 };

struct subscriber {
  subscriber_t *next, *prev; /* pp->subs */
  record_t *pp;              /* NULL once the record was dropped under it */
  dshd_stream_t *s;
  int kind;
  uint64_t off[3]; /* next stream offset to send, [1], [2] */
  uint64_t mark;   /* cursor in pp->marks */
  int start_sent, finished, deadline_hit, keepalive_due;
  int lagging; /* stopped taking output while another subscriber waited: holds nothing back */
  int sent_any, sent_le, sent_q; /* WatchGroup: last state sent */
  char start_json[512];
  size_t start_len;
  ev_timer keepalive_t, deadline_t;
};

typedef struct subscriber_resume {
  int given; /* ConnectRequest.resume present */
  uint64_t off[3];
} subscriber_resume_t;

/* Start (from_start: offsets 0, before the child ran) or Connect (resume
 * NULL/absent: from now on; else replay from the given offsets). */
int subscriber_open_events(record_t *pp, dshd_stream_t *s, int from_start,
                           const subscriber_resume_t *resume, dshd_err_t *err);
int subscriber_open_group(record_t *pp, dshd_stream_t *s, dshd_err_t *err);
/* Something changed for the subscriber (new output, end, state). */
void subscriber_wake(subscriber_t *sub);
/* The record goes away under the subscriber. */
void subscriber_orphan(subscriber_t *sub);
/* The smallest offset of stream idx an attached subscriber still needs;
 * 0 when no subscriber holds it (then *keep is untouched). */
int subscriber_min_offset(const record_t *pp, int idx, uint64_t *keep);
/* 1 when a subscriber still needs the oldest mark. */
int subscriber_needs_tail_mark(const record_t *pp);

/* --- process_spawn.c --------------------------------------------------------- */

/* The environment of a new process, a NULL-terminated "NAME=value" vector. */
typedef struct process_env {
  char **v;
  size_t n, cap;
} process_env_t;

/* env-scrub extension: StartRequest.envScrub; *rules NULL when absent or in
 * --envd-compat. */
int process_scrub_parse(json_t *req, json_t **rules, dshd_err_t *err);
/* The ambient environment (daemon PATH, HOME/USER/LOGNAME, /init's envVars)
 * minus what the scrub rules drop, then the request's envs (validated). */
int process_env_build(process_env_t *e, const dshd_user_t *u, json_t *envs, json_t *scrub,
                      dshd_err_t *err);
void process_env_free(process_env_t *e);

/* spill extension: opens StartRequest.spill's files into o->spill_fd/_cap
 * (paths kept in paths); close removes what a failed start left. */
typedef char process_spill_paths_t[3][PATH_MAX];
int process_spills_open(json_t *req, const dshd_user_t *u, record_spawn_t *o,
                        process_spill_paths_t paths, dshd_err_t *err);
void process_spills_close(record_spawn_t *o, process_spill_paths_t paths);

#endif
