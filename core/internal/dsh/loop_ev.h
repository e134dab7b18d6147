/* loop_ev.h: the libev side of the loop, for C users of the core (its own
 * modules and dshd, which link the static core), never for Lua.
 *
 * Core modules queue their events with dsh_loop_push(); C users drive libev
 * watchers of their own on the loop's struct ev_loop. Not part of the FFI
 * surface, not exported from libdsh.so. */
#ifndef DSH_LOOP_EV_H
#define DSH_LOOP_EV_H

#include <stdint.h>

#include "dsh/loop.h"

/* The underlying struct ev_loop *. */
void *dsh_loop_ev(dsh_loop_t *loop);

/* Queue an event. Returns DSH_OK or DSH_ENOMEM. */
int dsh_loop_push(dsh_loop_t *loop, uint32_t kind, uint64_t id, int32_t status, int64_t n);

/* Milliseconds to libev seconds, in one place. */
static inline double dsh_ms_to_ev(int64_t ms) {
  return (double)ms / 1000.0;
}

#endif
