/* ref_cost.h: the ledger's JSON byte cost written as the spec reads (one
 * unit at a time, slowly), for the test and the fuzzer to check the fast
 * code against. Test-only. */
#ifndef DSH_TEST_REF_COST_H
#define DSH_TEST_REF_COST_H

#include <stddef.h>
#include <stdint.h>

#include "dsh/errors.h"
#include "dsh/utf8.h"

/* Reference JSON.stringify cost, one unit at a time (the spec, slowly). */
static size_t ref_cost(const uint8_t *s, size_t n) {
  size_t cost = 2, i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      cost += c == '"' || c == '\\' || c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
                  ? 2
              : c < 0x20 ? 6
                         : 1;
      i++;
      continue;
    }
    if (c == 0xED && i + 2 < n && s[i + 1] >= 0xA0 && s[i + 1] <= 0xBF && s[i + 2] >= 0x80 &&
        s[i + 2] <= 0xBF) {
      cost += 6;
      i += 3;
      continue;
    }
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i + len <= n && dsh_utf8_validate(s + i, len, NULL) == DSH_OK) {
      cost += len;
      i += len;
    } else {
      cost += 3;
      i++;
    }
  }
  return cost;
}

#endif
