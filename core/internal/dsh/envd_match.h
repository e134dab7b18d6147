/* envd_match.h: the data-event matcher of envd_events.c on its own, for the C
 * tests and the fuzzer. Internal to the core; see dsh/envd_events.h for the
 * shape it accepts. */
#ifndef DSH_ENVD_MATCH_H
#define DSH_ENVD_MATCH_H

#include <stddef.h>
#include <stdint.h>

/* 1 with *stream, *offset and the base64 span set when payload is a data
 * event in the shape dsh/envd_events.h describes, else 0. */
int dsh_envd_match_data(const uint8_t *payload, size_t len, int32_t *stream, int64_t *offset,
                        const uint8_t **b64, size_t *b64_len);

#endif
