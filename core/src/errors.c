/* errors.c: status names and messages from the catalogue in errors.h, and the
 * error-buffer formatter every core module uses. No allocation, no state. */
#include "dsh/errors.h"

#include <stdarg.h>
#include <stdio.h>

#include "dsh/fail.h"

const char *dsh_strerror(int status) {
  switch (status) {
#define X(name, value, msg) \
  case value:               \
    return msg;
    DSH_STATUS_LIST(X)
#undef X
  }
  return "unknown status";
}

const char *dsh_status_name(int status) {
  switch (status) {
#define X(name, value, msg) \
  case value:               \
    return #name;
    DSH_STATUS_LIST(X)
#undef X
  }
  return "EUNKNOWN";
}

int dsh_fail(char *buf, size_t len, int status, const char *fmt, ...) {
  if (buf && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
  }
  return status;
}
