/* envd_events.h: a fast reader of envd server streams (process events).
 *
 * Wraps a Connect envelope decoder. A data event
 *   {"event":{"data":{"stdout"|"stderr"|"pty":"<base64>"[,"offset":N]}}}
 * (whitespace tolerated, members in either order, offset as a number or a
 * decimal string) is recognised here and its bytes are base64-decoded in C;
 * every other message is lent as raw JSON for the caller to parse, and so is a
 * data event written in any other form (a JSON escape inside the base64, an
 * unknown member) — the fast path never changes what a message means.
 *
 * Use as the envelope decoder: push(chunk), then next() until it returns 0,
 * then push again; finish() at end of stream. Pointers lent by next() are
 * valid until the next call on the reader. The caller owns the reader and
 * frees it with dsh_envd_events_free(). Bounded by max_message_bytes. */
#ifndef DSH_ENVD_EVENTS_H
#define DSH_ENVD_EVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsh_envd_events dsh_envd_events_t;

enum dsh_envd_event_kind {
  DSH_ENVD_MESSAGE = 1, /* data/len: a normal message's JSON */
  DSH_ENVD_DATA = 2,    /* stream, offset (-1 if absent), data/len: decoded bytes */
  DSH_ENVD_END = 3      /* data/len: the end-of-stream message's JSON */
};

enum dsh_envd_stream { DSH_ENVD_STDOUT = 1, DSH_ENVD_STDERR = 2, DSH_ENVD_PTY = 3 };

typedef struct dsh_envd_event {
  int32_t kind;
  int32_t stream;
  int64_t offset;
  const uint8_t *data;
  size_t len;
} dsh_envd_event_t;

int dsh_envd_events_new(uint32_t max_message_bytes, dsh_envd_events_t **out);
void dsh_envd_events_free(dsh_envd_events_t *e);
int dsh_envd_events_push(dsh_envd_events_t *e, const uint8_t *data, size_t n);
/* 1: an event in *ev; 0: push more; < 0: error (message: dsh_envd_events_error). */
int dsh_envd_events_next(dsh_envd_events_t *e, dsh_envd_event_t *ev);
int dsh_envd_events_finish(dsh_envd_events_t *e);
const char *dsh_envd_events_error(const dsh_envd_events_t *e);

#endif
