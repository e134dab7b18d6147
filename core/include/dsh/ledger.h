/* ledger.h: the Code Mode output ledger (harness-behaviour.md §2.6) and the
 * JSON string byte costs it is built on.
 *
 * Costs follow JSON.stringify of the JavaScript string a UTF-8 byte string
 * decodes to: '"' and '\\' -> 2; \b \t \n \f \r -> 2; other controls < 0x20 ->
 * 6; anything else its UTF-8 length (astral = 4). For invalid UTF-8: an encoded
 * surrogate (ED A0..BF 80..BF) costs 6 (a lone surrogate is escaped as \uXXXX);
 * any other invalid byte costs 3 (it becomes U+FFFD). Cuts never split a valid
 * sequence or an encoded surrogate.
 *
 * The ledger counts the JSON bytes of the logs array plus the value or failure
 * message: it starts at 2 for "[]", each log adds its quoted cost plus 1 per
 * separator. It is a plain struct the caller owns (Lua reads it directly). */
#ifndef DSH_LEDGER_H
#define DSH_LEDGER_H

#include <stddef.h>
#include <stdint.h>

/* Quoted JSON cost of s, including the two quotes. */
size_t dsh_json_string_cost(const uint8_t *s, size_t n);

/* Byte length of the longest code-point-safe prefix of s whose quoted cost is
 * <= budget (0 if budget < 2). */
size_t dsh_json_string_prefix(const uint8_t *s, size_t n, size_t budget);

typedef struct dsh_ledger {
  uint64_t max_bytes;
  uint64_t used;
  uint64_t nlogs;
  int32_t limited;
} dsh_ledger_t;

/* max_bytes >= 4, else DSH_EINVAL. used starts at 2. */
int dsh_ledger_init(dsh_ledger_t *l, uint64_t max_bytes);

/* Counts one log (cost + 1 separator after the first). Fits -> DSH_OK with
 * *prefix_len = n. Does not fit -> DSH_ELIMIT, limited = 1, *prefix_len = the
 * longest code-point-safe prefix that still fits after its separator: the
 * caller keeps the earlier logs whole plus that prefix if non-empty (used and
 * nlogs then include it). Once limited, every call returns DSH_ELIMIT with
 * *prefix_len = 0 and changes nothing. */
int dsh_ledger_add_log(dsh_ledger_t *l, const uint8_t *s, size_t n, size_t *prefix_len);

/* Counts a value or failure message of json_bytes (no separator). Fits ->
 * DSH_OK; else DSH_ELIMIT, limited = 1, used unchanged. */
int dsh_ledger_add_value(dsh_ledger_t *l, uint64_t json_bytes);

/* Writes "outer output exceeded <max> bytes", cut so its quoted cost fits in
 * max - used (empty if fewer than 2 bytes remain). 64 bytes of out always
 * suffice; less than needed -> DSH_EINVAL. */
int dsh_ledger_limit_message(const dsh_ledger_t *l, char *out, size_t cap, size_t *out_n);

#endif
