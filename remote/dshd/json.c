/* json.c: Connect errors and the protobuf-JSON helpers of dshd.h.
 *
 * Reading follows protojson with DiscardUnknown (envd-protocol.md §1.8): both
 * field-name spellings, integers as numbers or decimal strings, enums by name
 * or number, loose base64 for bytes, null = absent. Writing gives strings that
 * are always valid UTF-8 and int64 as decimal strings. Uses jansson and the
 * core's base64/utf8; never keeps state. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsh/base64.h"
#include "dsh/utf8.h"
#include "dshd.h"

int dshd_errf(dshd_err_t *err, const char *code, const char *fmt, ...) {
  if (!err) return -1;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return -1;
}

static const struct {
  const char *code;
  int status;
} g_codes[] = {
    {"canceled", 499},
    {"unknown", 500},
    {"invalid_argument", 400},
    {"deadline_exceeded", 504},
    {"not_found", 404},
    {"already_exists", 409},
    {"permission_denied", 403},
    {"resource_exhausted", 429},
    {"failed_precondition", 400},
    {"aborted", 409},
    {"out_of_range", 400},
    {"unimplemented", 501},
    {"internal", 500},
    {"unavailable", 503},
    {"data_loss", 500},
    {"unauthenticated", 401},
};

int dshd_code_http_status(const char *code) {
  if (code)
    for (size_t i = 0; i < sizeof g_codes / sizeof g_codes[0]; i++)
      if (strcmp(g_codes[i].code, code) == 0) return g_codes[i].status;
  return 500;
}

/* --- reading ------------------------------------------------------------------ */

json_t *dshd_json_field(json_t *obj, const char *camel, const char *snake) {
  if (!json_is_object(obj)) return NULL;
  json_t *v = json_object_get(obj, camel);
  if ((!v || json_is_null(v)) && snake) v = json_object_get(obj, snake);
  if (v && json_is_null(v)) return NULL;
  return v;
}

int dshd_json_object(json_t *obj, const char *camel, const char *snake, json_t **out,
                     dshd_err_t *err) {
  json_t *v = dshd_json_field(obj, camel, snake);
  *out = NULL;
  if (!v) return 0;
  if (!json_is_object(v))
    return dshd_errf(err, "invalid_argument",
                     "invalid value for message field %s: expected an object", camel);
  *out = v;
  return 0;
}

int dshd_json_string(json_t *obj, const char *camel, const char *snake, const char **out,
                     dshd_err_t *err) {
  json_t *v = dshd_json_field(obj, camel, snake);
  *out = "";
  if (!v) return 0;
  if (!json_is_string(v))
    return dshd_errf(err, "invalid_argument", "invalid value for string field %s", camel);
  *out = json_string_value(v);
  return 0;
}

/* Decimal digits with an optional leading '-' (when allowed); no spaces. */
static int parse_decimal(const char *s, int allow_neg, int *neg, uint64_t *mag) {
  *neg = 0;
  if (allow_neg && *s == '-') {
    *neg = 1;
    s++;
  }
  if (!*s) return -1;
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *mag = v;
  return 0;
}

/* A JSON number or string holding an integral value: sign and magnitude. */
static int integral(json_t *v, int *neg, uint64_t *mag) {
  if (json_is_integer(v)) {
    json_int_t i = json_integer_value(v);
    *neg = i < 0;
    *mag = i < 0 ? (uint64_t)(-(i + 1)) + 1 : (uint64_t)i;
    return 0;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (d != d || d >= 18446744073709551616.0 || d <= -9223372036854775809.0) return -1;
    if (d != (double)(int64_t)d && !(d >= 9223372036854775808.0 && d == (double)(uint64_t)d))
      return -1;
    *neg = d < 0;
    *mag = d < 0 ? (uint64_t)(-d) : (uint64_t)d;
    return 0;
  }
  if (json_is_string(v)) return parse_decimal(json_string_value(v), 1, neg, mag);
  return -1;
}

int dshd_json_uint(json_t *obj, const char *camel, const char *snake, uint64_t dflt, uint64_t *out,
                   dshd_err_t *err) {
  json_t *v = dshd_json_field(obj, camel, snake);
  *out = dflt;
  if (!v) return 0;
  int neg;
  uint64_t mag;
  if (integral(v, &neg, &mag) != 0 || (neg && mag != 0))
    return dshd_errf(err, "invalid_argument", "invalid value for unsigned integer field %s", camel);
  *out = mag;
  return 0;
}

int dshd_json_int(json_t *obj, const char *camel, const char *snake, int64_t dflt, int64_t *out,
                  dshd_err_t *err) {
  json_t *v = dshd_json_field(obj, camel, snake);
  *out = dflt;
  if (!v) return 0;
  int neg;
  uint64_t mag;
  if (integral(v, &neg, &mag) != 0 || (!neg && mag > (uint64_t)INT64_MAX) ||
      (neg && mag > (uint64_t)INT64_MAX + 1))
    return dshd_errf(err, "invalid_argument", "invalid value for integer field %s", camel);
  *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
  return 0;
}

int dshd_json_bool(json_t *obj, const char *camel, const char *snake, int dflt, int *out,
                   dshd_err_t *err) {
  json_t *v = dshd_json_field(obj, camel, snake);
  *out = dflt;
  if (!v) return 0;
  if (!json_is_boolean(v))
    return dshd_errf(err, "invalid_argument", "invalid value for bool field %s", camel);
  *out = json_is_true(v);
  return 0;
}

int dshd_json_bytes(json_t *obj, const char *camel, const char *snake, uint8_t **out,
                    size_t *outlen, dshd_err_t *err) {
  json_t *v = dshd_json_field(obj, camel, snake);
  *out = NULL;
  *outlen = 0;
  if (!v) return 0;
  if (!json_is_string(v))
    return dshd_errf(err, "invalid_argument", "invalid value for bytes field %s", camel);
  const char *s = json_string_value(v);
  size_t n = json_string_length(v);
  uint8_t *buf = malloc(dsh_base64_decoded_max(n) + 1);
  if (!buf) return dshd_errf(err, "resource_exhausted", "out of memory decoding field %s", camel);
  size_t got = 0;
  if (dsh_base64_decode_loose(s, n, buf, &got) != 0) {
    free(buf);
    return dshd_errf(err, "invalid_argument", "invalid value for bytes field %s: invalid base64",
                     camel);
  }
  *out = buf;
  *outlen = got;
  return 0;
}

int dshd_json_enum(json_t *obj, const char *camel, const char *snake, const dshd_enum_t *names,
                   int32_t dflt, int32_t *out, dshd_err_t *err) {
  json_t *v = dshd_json_field(obj, camel, snake);
  *out = dflt;
  if (!v) return 0;
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    for (const dshd_enum_t *e = names; e && e->name; e++)
      if (strcmp(e->name, s) == 0) {
        *out = e->value;
        return 0;
      }
    return 0; /* unknown name: discarded */
  }
  int neg;
  uint64_t mag;
  if (!json_is_number(v) || integral(v, &neg, &mag) != 0 || (!neg && mag > INT32_MAX) ||
      (neg && mag > (uint64_t)INT32_MAX + 1))
    return dshd_errf(err, "invalid_argument", "invalid value for enum field %s", camel);
  *out = neg ? (int32_t)(0 - (int64_t)mag) : (int32_t)mag;
  return 0;
}

const char *dshd_enum_name(const dshd_enum_t *names, int32_t value) {
  for (const dshd_enum_t *e = names; e && e->name; e++)
    if (e->value == value) return e->name;
  return NULL;
}

/* --- writing ------------------------------------------------------------------ */

json_t *dshd_json_strn(const char *s, size_t len) {
  if (dsh_utf8_validate((const uint8_t *)s, len, NULL) == 0) return json_stringn(s, len);
  /* Repair: every maximal invalid subpart becomes U+FFFD. NUL bytes are kept
   * (jansson strings carry a length). */
  size_t cap = 3 * len + 8;
  uint8_t *buf = malloc(cap);
  if (!buf) return NULL;
  dsh_utf8_state_t st = {{0}, 0};
  size_t n = 0, m = 0;
  dsh_utf8_feed_lossy(&st, (const uint8_t *)s, len, buf, cap, &n);
  dsh_utf8_finish_lossy(&st, buf + n, cap - n, &m);
  json_t *v = json_stringn((const char *)buf, n + m);
  free(buf);
  return v;
}

json_t *dshd_json_str(const char *s) {
  return dshd_json_strn(s ? s : "", s ? strlen(s) : 0);
}

json_t *dshd_json_int64_string(int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  return json_string(buf);
}
