/* fs.h: what the filesystem service shares — filesystem.c, fs_entry.c
 * (EntryInfo), watch.c and watch_rpc.c (private to dshd). */
#ifndef DSHD_FS_H
#define DSHD_FS_H

#include <sys/stat.h>

#include "dshd.h"

/* EntryInfo (protocol §3.2) of path as requested (not symlink-resolved), as
 * a new JSON object; NULL with not_found (missing) or internal. *lst (may be
 * NULL) receives the lstat result. */
json_t *fs_entry_info(const char *path, struct stat *lst, dshd_err_t *err);

/* Resolves the request's user and the path field of req (protocol §2.6). */
int fs_user_and_path(dshd_req_t *r, json_t *req, const char *camel, const char *snake,
                     dshd_user_t *u, char *path, size_t pathlen, dshd_err_t *err);

/* WatchDir/CreateWatcher checks: path exists, is a directory, not on a
 * network mount unless allowed. */
int fs_check_watch_path(const char *path, int allow_network_mounts, dshd_err_t *err);

extern const dshd_enum_t fs_event_types[];

/* watch_rpc.c: WatchDir and the polling watchers. */
int watch_dir_stream(dshd_req_t *r, json_t *req, dshd_stream_t *s, dshd_err_t *err);
int watch_create(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err);
int watch_get_events(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err);
int watch_remove(dshd_req_t *r, json_t *req, json_t **resp, dshd_err_t *err);

#endif
