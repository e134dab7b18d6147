/* test_ledger.c: JSON.stringify byte costs, cost-bounded cuts, and the output
 * ledger pins of harness-behaviour.md §2.6. */
#include <stdlib.h>

#include "check.h"
#include "dsh/errors.h"
#include "dsh/ledger.h"
#include "dsh/utf8.h"
#include "ref_cost.h"

/* Random strings drawn from a small alphabet of interesting bytes. */
static void random_costs(void) {
  static const uint8_t pool[] = {'a',  ' ',  '"',  '\\', '\n', 0x01, 0x7F, 0x80,
                                 0xBF, 0xC2, 0xC3, 0xA9, 0xE0, 0xE2, 0x82, 0xAC,
                                 0xED, 0xA0, 0xF0, 0x9F, 0x98, 0xF4, 0x90, 0xFF};
  uint64_t x = 88172645463325252ull;
  for (int iter = 0; iter < 20000; iter++) {
    uint8_t s[80];
    size_t n = (size_t)(iter % 80);
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      s[i] = (x >> 40) % 3 ? pool[(x >> 8) % sizeof pool] : 'a';
    }
    size_t c = dsh_json_string_cost(s, n);
    CHECK_EQ_INT(c, ref_cost(s, n));
    size_t b = (size_t)(x % (c + 2));
    size_t p = dsh_json_string_prefix(s, n, b);
    CHECK(b < 2 ? p == 0 : dsh_json_string_cost(s, p) <= b);
  }
}

static size_t cost(const char *s) {
  return dsh_json_string_cost((const uint8_t *)s, strlen(s));
}

static void costs(void) {
  CHECK_EQ_INT(cost(""), 2);
  CHECK_EQ_INT(cost("abc"), 5);
  CHECK_EQ_INT(cost("\"\\"), 6);
  CHECK_EQ_INT(cost("\b\t\n\f\r"), 12);
  CHECK_EQ_INT(cost("\x01"), 8);
  CHECK_EQ_INT(cost("\x0B"), 8);
  CHECK_EQ_INT(cost("\x1F"), 8);
  CHECK_EQ_INT(cost("\x7F"), 3);
  CHECK_EQ_INT(cost("\xC3\xA9"), 4);         /* é */
  CHECK_EQ_INT(cost("\xE4\xBD\xA0"), 5);     /* 你 */
  CHECK_EQ_INT(cost("\xF0\x9F\x98\x80"), 6); /* 😀, astral = 4 */
  CHECK_EQ_INT(cost("\xED\xA0\x80"), 8);     /* encoded lone surrogate -> \ud800 */
  CHECK_EQ_INT(cost("\xED\xA0\x80\xED\xB0\x80"), 14);
  CHECK_EQ_INT(cost("\xFF"), 5); /* U+FFFD */
  CHECK_EQ_INT(cost("\xC3"), 5);
  CHECK_EQ_INT(cost("\xE2\x82"), 8); /* each invalid byte 3 */
  CHECK_EQ_INT(cost("\xED\xA0"
                    "A"),
               9); /* not a full surrogate: 3 + 3 + 1 */
  CHECK_EQ_INT(cost("\xC0\x80"), 8);
}

static void prefixes(void) {
  const uint8_t *s = (const uint8_t *)"a\"\xE4\xBD\xA0" "b\xED\xA0\x80";
  size_t n = 9;
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 0), 0);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 1), 0);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 2), 0);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 3), 1);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 4), 1);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 5), 2); /* a \" */
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 7), 2); /* 你 needs 3 */
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 8), 5);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 9), 6);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 14), 6); /* surrogate needs 6 */
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 15), 9);
  CHECK_EQ_INT(dsh_json_string_prefix(s, n, 1000), 9);
  CHECK_EQ_INT(dsh_json_string_cost(s, n), 15);
}

static void ledger(void) {
  dsh_ledger_t l;
  size_t p;
  CHECK_EQ_INT(dsh_ledger_init(&l, 3), DSH_EINVAL);
  CHECK_EQ_INT(dsh_ledger_init(&l, 4), DSH_OK);
  CHECK_EQ_INT(l.used, 2);

  /* cap 64, a 4 KiB ASCII log: keeps 60 bytes (cost 62, used 64) */
  char *big = malloc(4096);
  memset(big, 'x', 4096);
  CHECK_EQ_INT(dsh_ledger_init(&l, 64), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)big, 4096, &p), DSH_ELIMIT);
  CHECK_EQ_INT(p, 60);
  CHECK_EQ_INT(l.used, 64);
  CHECK_EQ_INT(l.nlogs, 1);
  CHECK_EQ_INT(l.limited, 1);
  char msg[64];
  size_t mn = 99;
  CHECK_EQ_INT(dsh_ledger_limit_message(&l, msg, sizeof msg, &mn), DSH_OK);
  CHECK_EQ_INT(mn, 0);
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)"a", 1, &p), DSH_ELIMIT);
  CHECK_EQ_INT(p, 0);
  CHECK_EQ_INT(l.used, 64);

  /* a 1000-byte log with cap 128 does not fit; earlier logs stay whole */
  CHECK_EQ_INT(dsh_ledger_init(&l, 128), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)"hello", 5, &p), DSH_OK);
  CHECK_EQ_INT(p, 5);
  CHECK_EQ_INT(l.used, 9);
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)"world", 5, &p), DSH_OK);
  CHECK_EQ_INT(l.used, 17); /* + separator */
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)big, 1000, &p), DSH_ELIMIT);
  CHECK_EQ_INT(p, 128 - 17 - 1 - 2); /* 108 */
  CHECK_EQ_INT(l.used, 128);
  CHECK_EQ_INT(l.nlogs, 3);

  /* the prefix never splits a code point */
  CHECK_EQ_INT(dsh_ledger_init(&l, 10), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)"ab\xE4\xBD\xA0\xE4\xBD\xA0", 8, &p),
               DSH_ELIMIT);
  CHECK_EQ_INT(p, 5); /* "ab你" costs 2 + 2 + 3 = 7 <= 8 */
  CHECK_EQ_INT(l.used, 9);

  /* nothing fits: the prefix is empty and not counted */
  CHECK_EQ_INT(dsh_ledger_init(&l, 5), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)"a", 1, &p), DSH_OK);
  CHECK_EQ_INT(l.used, 5);
  CHECK_EQ_INT(dsh_ledger_add_log(&l, (const uint8_t *)"b", 1, &p), DSH_ELIMIT);
  CHECK_EQ_INT(p, 0);
  CHECK_EQ_INT(l.nlogs, 1);
  CHECK_EQ_INT(l.used, 5);

  /* values and the limit message */
  CHECK_EQ_INT(dsh_ledger_init(&l, 64), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_add_value(&l, 62), DSH_OK);
  CHECK_EQ_INT(l.used, 64);
  CHECK_EQ_INT(dsh_ledger_init(&l, 64), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_add_value(&l, 63), DSH_ELIMIT);
  CHECK_EQ_INT(l.used, 2);
  CHECK_EQ_INT(l.limited, 1);
  CHECK_EQ_INT(dsh_ledger_limit_message(&l, msg, sizeof msg, &mn), DSH_OK);
  CHECK_MEM(msg, mn, "outer output exceeded 64 bytes", 30);
  CHECK_EQ_INT(dsh_ledger_limit_message(&l, msg, 10, &mn), DSH_EINVAL);
  CHECK_EQ_INT(dsh_ledger_init(&l, 20), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_add_value(&l, 6), DSH_OK); /* 12 left: 10 characters */
  CHECK_EQ_INT(dsh_ledger_limit_message(&l, msg, sizeof msg, &mn), DSH_OK);
  CHECK_MEM(msg, mn, "outer outp", 10);
  CHECK_EQ_INT(dsh_ledger_add_value(&l, 11), DSH_OK);
  CHECK_EQ_INT(dsh_ledger_limit_message(&l, msg, sizeof msg, &mn), DSH_OK);
  CHECK_EQ_INT(mn, 0); /* 1 byte left: under 2 */
  free(big);
}

/* A special byte at each offset of a long string (vector and scalar paths). */
static void long_costs(void) {
  struct {
    uint8_t c;
    size_t cost;
  } sp[] = {{0x01, 6}, {0x0A, 2}, {'"', 2}, {'\\', 2}, {0x7F, 1}, {0xFF, 3}, {'a', 1}};
  for (size_t p = 0; p < 100; p++)
    for (size_t k = 0; k < sizeof sp / sizeof *sp; k++) {
      uint8_t s[100];
      memset(s, 'a', 100);
      s[p] = sp[k].c;
      CHECK_EQ_INT(dsh_json_string_cost(s, 100), 2 + 99 + sp[k].cost);
      /* a budget one short of the whole string cuts just before the last unit */
      size_t whole = dsh_json_string_cost(s, 100);
      CHECK_EQ_INT(dsh_json_string_prefix(s, 100, whole), 100);
      size_t cut = dsh_json_string_prefix(s, 100, whole - 1);
      CHECK(cut < 100);
      CHECK(dsh_json_string_cost(s, cut) <= whole - 1);
      CHECK_EQ_INT(dsh_json_string_prefix(s, 100, 2 + p), p);
    }
}

int main(void) {
  random_costs();
  long_costs();
  costs();
  prefixes();
  ledger();
  CHECK_DONE();
}
