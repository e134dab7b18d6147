/* fail.h: the error-buffer formatter of the core's fallible functions.
 *
 * Internal to the core: used by its modules, never by Lua (varargs and an
 * attribute keep it out of the FFI surface, and the linker version script
 * keeps it out of libdsh.so's symbols). */
#ifndef DSH_FAIL_H
#define DSH_FAIL_H

#include <stddef.h>

/* Formats into buf (if non-NULL) and returns status, so callers can write
 * `return dsh_fail(err, errlen, DSH_EINVAL, "spawn: %s", why);`. */
int dsh_fail(char *buf, size_t len, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
