/* check.h: the few assertions the C unit tests use. Failures are counted and
 * printed with file:line; CHECK_DONE() makes the exit code non-zero if any
 * failed. Header-only, test code only. */
#ifndef DSH_TEST_CHECK_H
#define DSH_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      check_failures++;                                                        \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                  \
  do {                                                                                      \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                         \
    if (check_a_ != check_b_) {                                                             \
      check_failures++;                                                                     \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, \
              check_a_, check_b_);                                                          \
    }                                                                                       \
  } while (0)

#define CHECK_MEM(p, n, q, m)                                                                      \
  do {                                                                                             \
    size_t check_n_ = (size_t)(n), check_m_ = (size_t)(m);                                         \
    if (check_n_ != check_m_ || (check_n_ && memcmp((p), (q), check_n_))) {                        \
      check_failures++;                                                                            \
      fprintf(stderr,                                                                              \
              "%s:%d: CHECK_MEM(%s, %s) failed: \"%.*s\" (%zu) vs "                                \
              "\"%.*s\" (%zu)\n",                                                                  \
              __FILE__, __LINE__, #p, #q, (int)(check_n_ > 80 ? 80 : check_n_), (const char *)(p), \
              check_n_, (int)(check_m_ > 80 ? 80 : check_m_), (const char *)(q), check_m_);        \
    }                                                                                              \
  } while (0)

#define CHECK_STR(s, lit) CHECK_MEM((s), strlen(s), (lit), strlen(lit))

#define CHECK_DONE()                                           \
  do {                                                         \
    if (check_failures) {                                      \
      fprintf(stderr, "%d check(s) failed\n", check_failures); \
      return 1;                                                \
    }                                                          \
    printf("ok\n");                                            \
    return 0;                                                  \
  } while (0)

#endif
