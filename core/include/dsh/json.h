/* json.h: a strict RFC 8259 validator (no parse tree).
 *
 * Exactly one value with optional whitespace (space, tab, LF, CR) around it;
 * strings with only the standard escapes (\" \\ \/ \b \f \n \r \t \uXXXX) and
 * no raw control characters < 0x20; numbers per the RFC grammar; literals
 * true/false/null. Nesting is tracked on a fixed bit stack: deeper than
 * 100000 -> DSH_ELIMIT. Bytes >= 0x80 inside strings are not checked here (the
 * frame decoder validates UTF-8 first); on any input the validator stays in
 * bounds, uses no heap and a bounded amount of stack (~13 KiB). */
#ifndef DSH_JSON_H
#define DSH_JSON_H

#include <stddef.h>
#include <stdint.h>

/* DSH_OK, DSH_EJSON or DSH_ELIMIT; *err_offset (if non-NULL) = where it failed. */
int dsh_json_validate(const uint8_t *s, size_t n, size_t *err_offset);

#endif
