/* fuzz_envd_events.c: the envd event reader must never read out of bounds, and
 * a data event it decodes in C must mean exactly what the generic path (the
 * matcher's base64 span decoded loosely) would give. The first byte picks the
 * chunk size. */
#include <stdlib.h>
#include <string.h>

#include "dsh/base64.h"
#include "dsh/envd_events.h"
#include "dsh/envd_match.h"
#include "dsh/envelope.h"
#include "dsh/errors.h"

static void check_data_event(const dsh_envd_event_t *ev) {
  if (ev->stream < 1 || ev->stream > 3) abort();
  if (ev->len && !ev->data) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t k = (size_t)data[0] % 64 + 1;
  data++, size--;

  /* The matcher alone on the raw bytes, as one payload. */
  int32_t stream;
  int64_t offset;
  const uint8_t *b64;
  size_t b64_len;
  if (dsh_envd_match_data(data, size, &stream, &offset, &b64, &b64_len)) {
    if (b64 < data || b64 + b64_len > data + size) abort();
    if (stream < 1 || stream > 3 || offset < -1) abort();
  }

  /* The same bytes wrapped as one envelope, pushed in k-byte chunks. */
  uint8_t *wire = malloc(size + 5);
  if (!wire) return 0;
  dsh_envelope_header(0, (uint32_t)size, wire);
  memcpy(wire + 5, data, size);
  dsh_envd_events_t *e;
  if (dsh_envd_events_new(1 << 20, &e)) abort();
  int rc = 0, events = 0;
  for (size_t i = 0; i < size + 5 && rc >= 0; i += k) {
    size_t m = size + 5 - i < k ? size + 5 - i : k;
    if (dsh_envd_events_push(e, wire + i, m) != DSH_OK) break;
    dsh_envd_event_t ev;
    while ((rc = dsh_envd_events_next(e, &ev)) == 1) {
      events++;
      if (ev.kind == DSH_ENVD_DATA) {
        check_data_event(&ev);
        uint8_t *ref = malloc(dsh_base64_decoded_max(b64_len) + 1);
        size_t n;
        if (!ref || dsh_base64_decode_loose((const char *)b64, b64_len, ref, &n) != DSH_OK) abort();
        if (n != ev.len || (n && memcmp(ref, ev.data, n))) abort();
        free(ref);
      } else if (ev.kind == DSH_ENVD_MESSAGE) {
        if (ev.len != size || (size && memcmp(ev.data, data, size))) abort();
      } else {
        abort(); /* flags were 0: never an end-of-stream message */
      }
    }
  }
  if (rc >= 0 && events != 1) abort();
  dsh_envd_events_free(e);
  free(wire);
  return 0;
}
