/* process_events.h: the JSON of process.Process stream messages (envd protocol
 * §2.3) and of the quiescence extension, written straight into caller
 * buffers: data events are built in place in a stream's reserved space with
 * base64 encoded from the output ring, the rest are small fixed shapes.
 *
 * Pure formatting: no loop, no jansson, no allocation. Strings follow Go's
 * os.ProcessState formatting ("exit status 1", "signal: killed (core dumped)"). */
#ifndef DSHD_PROCESS_EVENTS_H
#define DSHD_PROCESS_EVENTS_H

#include <stddef.h>
#include <stdint.h>

enum { DSHD_PROCEV_STDOUT = 1, DSHD_PROCEV_STDERR = 2, DSHD_PROCEV_PTY = 3 };

/* Upper bound of a data event's JSON for n raw bytes. */
size_t dshd_procev_data_max(size_t n);
/* {"event":{"data":{"<stream>":"<base64>"[,"offset":N]}}}; with_offset adds the
 * replay extension field. dst holds dshd_procev_data_max(n) bytes; returns the length. */
size_t dshd_procev_data(char *dst, int stream, const uint8_t *p, size_t n, uint64_t offset,
                        int with_offset);

/* One line of the start event's "replay" object (extension). */
typedef struct dshd_procev_replay {
  int stream; /* DSHD_PROCEV_*; 0 ends the list */
  uint64_t requested, from;
} dshd_procev_replay_t;

/* {"event":{"start":{"pid":N[,"replay":{...}]}}}; replay may be NULL. Returns
 * the length written (buf of 512 bytes always suffices). */
size_t dshd_procev_start(char *buf, size_t len, int32_t pid, const dshd_procev_replay_t *replay);

/* {"event":{"end":{...}}} from a raw wait status; with_ext adds "signal" and
 * "coreDumped" for a process killed by a signal (exit-signals extension).
 * buf of 256 bytes always suffices. */
size_t dshd_procev_end(char *buf, size_t len, int wait_status, int with_ext);

/* Go's ProcessState.String() of a raw wait status. */
void dshd_procev_status_string(int wait_status, char *buf, size_t len);
/* Go's syscall.Signal.String() ("killed", "terminated", or "signal 40"). */
void dshd_procev_signal_string(int sig, char *buf, size_t len);

extern const char dshd_procev_keepalive[]; /* {"event":{"keepalive":{}}} */

/* {"leaderExited":B,"quiescent":B} */
size_t dshd_procev_group(char *buf, size_t len, int leader_exited, int quiescent);

#endif
