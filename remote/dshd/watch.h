/* watch.h: the inotify core of filesystem watches (watch.c), shared by the
 * WatchDir stream and the polling watchers (watch_rpc.c).
 *
 * A watch reports events as JSON objects {"name","type"[,"entry"]} through
 * on_event, and a failure (inotify queue overflow, a read error) once through
 * on_fail, after which it reports nothing more. */
#ifndef DSHD_WATCH_H
#define DSHD_WATCH_H

#include "dshd.h"

enum { FSEV_CREATE = 1, FSEV_WRITE = 2, FSEV_REMOVE = 3, FSEV_RENAME = 4, FSEV_CHMOD = 5 };

typedef struct watch watch_t;
typedef void (*watch_event_fn)(void *ud, json_t *event); /* takes event */
typedef void (*watch_fail_fn)(void *ud, const dshd_err_t *err);

/* Watches root (recursive: and every directory below it); include_entry
 * attaches EntryInfo to CREATE/WRITE/CHMOD. NULL with err set on failure. */
watch_t *watch_open(const char *root, int recursive, int include_entry, watch_event_fn on_event,
                    watch_fail_fn on_fail, void *ud, dshd_err_t *err);
/* Stops the watch; freed now, or when its callback unwinds. NULL is fine. */
void watch_close(watch_t *w);

#endif
