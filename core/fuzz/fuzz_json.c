/* fuzz_json.c: the validator stays in bounds on any bytes, reports an offset
 * within the input, and anything it accepts stays valid when wrapped in an
 * array or in whitespace. */
#include <stdlib.h>
#include <string.h>

#include "dsh/errors.h"
#include "dsh/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t off = (size_t)-1;
  int rc = dsh_json_validate(data, size, &off);
  if (rc != DSH_OK && rc != DSH_EJSON && rc != DSH_ELIMIT) abort();
  if (rc != DSH_OK && off > size) abort();
  if (rc == DSH_OK) {
    uint8_t *w = malloc(size + 4);
    w[0] = '[';
    memcpy(w + 1, data, size);
    w[size + 1] = ']';
    if (dsh_json_validate(w, size + 2, NULL) != DSH_OK) abort();
    w[0] = ' ';
    w[size + 1] = '\n';
    if (dsh_json_validate(w, size + 2, NULL) != DSH_OK) abort();
    /* no proper prefix of a valid document is valid, unless it ends a number
     * or trailing whitespace */
    if (size > 1) {
      uint8_t last = data[size - 1];
      int numeric = last >= '0' && last <= '9';
      int ws = last == ' ' || last == '\n' || last == '\r' || last == '\t';
      if (!numeric && !ws && dsh_json_validate(data, size - 1, NULL) == DSH_OK) abort();
    }
    free(w);
  }
  return 0;
}
