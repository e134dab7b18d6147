/* test_json.c: the strict RFC 8259 validator: accepted and rejected documents,
 * error offsets, the nesting bound, and memory safety on truncations. */
#include <stdlib.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/json.h"

static int v(const char *s) {
  return dsh_json_validate((const uint8_t *)s, strlen(s), NULL);
}

static void accepted(void) {
  static const char *ok[] = {
      "0",
      "-0",
      "1",
      "-1",
      "123",
      "1.5",
      "-1.5e10",
      "1E+2",
      "1e-2",
      "0.0",
      "0e0",
      "true",
      "false",
      "null",
      "\"\"",
      "\"abc\"",
      " \t\r\n 1 \t\r\n ",
      "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\\uABCD\"",
      "\"\xC3\xA9\xF0\x9F\x98\x80\"",
      "\"\x7F\"",
      "[]",
      "{}",
      "[ ]",
      "{ }",
      "[1,2,3]",
      "[1, [2, [3, {}]]]",
      "{\"a\":1}",
      "{ \"a\" : [ true , false , null ] , \"b\" : { \"c\" : \"d\" } }",
      "{\"type\":\"stdout\",\"data\":\"aGVsbG8=\"}",
      "[\"\",\"\"]",
      "{\"\":\"\"}",
      "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\\\"aaaaaaaaaaaaaaaaaaa\"",
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    int rc = v(ok[i]);
    if (rc) fprintf(stderr, "rejected: %s\n", ok[i]);
    CHECK_EQ_INT(rc, DSH_OK);
  }
}

static void rejected(void) {
  static const char *bad[] = {
      "",          " ",           "01",
      "-",         "+1",          "1.",
      ".5",        "1e",          "1e+",
      "-a",        "0x10",        "1 2",
      "NaN",       "Infinity",    "tru",
      "truee",     "nul",         "True",
      "\"",        "\"abc",       "\"\\x\"",
      "\"\\u12\"", "\"\\u12G4\"", "\"a\tb\"",
      "\"a\nb\"",  "\"\x01\"",    "'a'",
      "[",         "]",           "[1,]",
      "[,1]",      "[1 2]",       "{",
      "{\"a\"}",   "{\"a\":}",    "{\"a\":1,}",
      "{a:1}",     "{1:1}",       "{\"a\" 1}",
      "[1}",       "{\"a\":1]",   "[]]",
      "{}}",       "[][]",        "1,",
      "\"\\\"",    "\v1",         "\f1",
      "[\"a\",]",  "{,}",         "{\"a\":1\"b\":2}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc = v(bad[i]);
    if (rc != DSH_EJSON) fprintf(stderr, "accepted or wrong status %d: %s\n", rc, bad[i]);
    CHECK_EQ_INT(rc, DSH_EJSON);
  }
  size_t off = 0;
  CHECK_EQ_INT(dsh_json_validate((const uint8_t *)"[1, 2, x]", 9, &off), DSH_EJSON);
  CHECK_EQ_INT(off, 7);
  CHECK_EQ_INT(dsh_json_validate((const uint8_t *)"{\"a\":\"b\x01\"}", 10, &off), DSH_EJSON);
  CHECK_EQ_INT(off, 7);
  CHECK_EQ_INT(dsh_json_validate((const uint8_t *)"1 ", 2, &off), DSH_OK);
  /* An embedded NUL ends nothing: it is just a bad byte. */
  CHECK_EQ_INT(dsh_json_validate((const uint8_t *)"[1]\0", 4, &off), DSH_EJSON);
  CHECK_EQ_INT(off, 3);
}

static void nesting(void) {
  size_t depth = 100000, n = 2 * depth + 2;
  uint8_t *s = malloc(n);
  for (size_t i = 0; i < depth; i++) s[i] = '[', s[2 * depth - 1 - i] = ']';
  CHECK_EQ_INT(dsh_json_validate(s, 2 * depth, NULL), DSH_OK);
  /* one more level */
  memmove(s + 1, s, 2 * depth);
  s[0] = '[';
  s[2 * depth + 1] = ']';
  size_t off = 0;
  CHECK_EQ_INT(dsh_json_validate(s, 2 * depth + 2, &off), DSH_ELIMIT);
  CHECK_EQ_INT(off, depth);
  free(s);
  /* objects count too: {"a":{"a":...1}...} one level too deep */
  size_t od = 100001, on = od * 5 + od;
  uint8_t *o = malloc(on);
  for (size_t i = 0; i < od; i++) memcpy(o + 5 * i, "{\"a\":", 5);
  memset(o + 5 * od, '}', od);
  o[5 * od] = '1';
  CHECK_EQ_INT(dsh_json_validate(o, on, NULL), DSH_ELIMIT);
  free(o);
}

/* Every prefix of a valid document is invalid (except where a number ends),
 * and validating it stays in bounds: each prefix is copied into its own
 * exact-size heap block for ASan. */
static void truncations(void) {
  const char *doc = "{\"k\":[1,-2.5e+3,true,false,null,\"s\\u00e9\\n\",{\"x\":[]}],\"z\":0}";
  size_t n = strlen(doc);
  for (size_t k = 0; k < n; k++) {
    uint8_t *p = malloc(k ? k : 1);
    memcpy(p, doc, k);
    CHECK_EQ_INT(dsh_json_validate(p, k, NULL), DSH_EJSON);
    free(p);
  }
  CHECK_EQ_INT(v(doc), DSH_OK);
}

/* A special byte at each offset of a long string (vector and scalar paths). */
static void string_scan(void) {
  const uint8_t specials[] = {0x00, 0x01, 0x1F, '"', '\\', 0x20, 0x7F, 0x80, 0xFF, 'a'};
  for (size_t p = 0; p < 100; p++)
    for (size_t k = 0; k < sizeof specials; k++) {
      uint8_t s[102];
      memset(s + 1, 'a', 100);
      s[0] = s[101] = '"';
      uint8_t c = specials[k];
      s[1 + p] = c;
      size_t off = 0;
      int rc = dsh_json_validate(s, sizeof s, &off);
      int bad = c < 0x20 || c == '"' || c == '\\';
      CHECK_EQ_INT(rc, bad ? DSH_EJSON : DSH_OK);
      if (c < 0x20) CHECK_EQ_INT(off, 1 + p);
      /* a bad escape is reported at its backslash; at the end, \" escapes the
       * closing quote and the string runs off the end */
      if (c == '\\') CHECK_EQ_INT(off, p == 99 ? 102 : 1 + p);
    }
}

int main(void) {
  string_scan();
  accepted();
  rejected();
  nesting();
  truncations();
  CHECK_DONE();
}
