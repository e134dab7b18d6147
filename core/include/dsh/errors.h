/* errors.h: the one catalogue of dsh statuses and their messages.
 *
 * Every fallible core function returns an int status: 0 (DSH_OK) or one of the
 * negative codes below, and puts detail in a caller-supplied error buffer when
 * it takes one. The list is an X-macro so names, values and messages never drift;
 * the enum it expands to reaches Lua through the generated FFI declarations
 * (dsh/ffi.h), where bindings use the statuses by name (C.DSH_EAGAIN). */
#ifndef DSH_ERRORS_H
#define DSH_ERRORS_H

#include <stddef.h>

#define DSH_STATUS_LIST(X)                                \
  X(OK, 0, "ok")                                          \
  X(EINVAL, -1, "invalid argument")                       \
  X(ENOMEM, -2, "out of memory")                          \
  X(EAGAIN, -3, "no data available yet")                  \
  X(ELIMIT, -4, "limit exceeded")                         \
  X(EBASE64, -5, "invalid base64")                        \
  X(EUTF8, -6, "invalid UTF-8")                           \
  X(EJSON, -7, "invalid JSON")                            \
  X(ENONASCII, -8, "non-ASCII data")                      \
  X(EFRAME, -9, "malformed frame")                        \
  X(ECOMPRESSED, -10, "compressed message not supported") \
  X(ETRUNCATED, -11, "stream ended mid-message")          \
  X(ECLOSED, -12, "object is closed")                     \
  X(ESYS, -13, "system call failed")                      \
  X(ESPAWN, -14, "process could not be started")          \
  X(EHTTP, -15, "HTTP transfer failed")                   \
  X(ETIMEDOUT, -16, "timed out")                          \
  X(ECANCELED, -17, "canceled")                           \
  X(ESTATE, -18, "operation not valid in this state")     \
  X(EEOF, -19, "end of stream")

#define DSH_STATUS_ENUM_(name, value, msg) DSH_##name = value,
typedef enum dsh_status { DSH_STATUS_LIST(DSH_STATUS_ENUM_) } dsh_status_t;
#undef DSH_STATUS_ENUM_

/* Static strings; unknown codes give "unknown status". */
const char *dsh_strerror(int status);
const char *dsh_status_name(int status);

#endif
