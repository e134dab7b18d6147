/* test_base64.c: RFC 4648 vectors, strict and loose rejection rules, and
 * agreement of the scalar and AVX2 paths on random and mutated input. */
#include <stdlib.h>

#include "check.h"
#include "dsh/base64.h"
#include "dsh/errors.h"

static int dec(const char *s, char *out, size_t *n) {
  return dsh_base64_decode(s, strlen(s), (uint8_t *)out, n);
}
static int loose(const char *s, char *out, size_t *n) {
  return dsh_base64_decode_loose(s, strlen(s), (uint8_t *)out, n);
}

static void vectors(void) {
  static const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  static const char *enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (int i = 0; i < 7; i++) {
    char out[16], back[16];
    size_t n = dsh_base64_encode((const uint8_t *)plain[i], strlen(plain[i]), out);
    CHECK_MEM(out, n, enc[i], strlen(enc[i]));
    CHECK_EQ_INT(dsh_base64_encoded_len(strlen(plain[i])), strlen(enc[i]));
    size_t m;
    CHECK_EQ_INT(dec(enc[i], back, &m), DSH_OK);
    CHECK_MEM(back, m, plain[i], strlen(plain[i]));
    CHECK_EQ_INT(loose(enc[i], back, &m), DSH_OK);
    CHECK_MEM(back, m, plain[i], strlen(plain[i]));
  }
  CHECK_EQ_INT(dsh_base64_decoded_max(0), 0);
  CHECK_EQ_INT(dsh_base64_decoded_max(4), 3);
  CHECK_EQ_INT(dsh_base64_decoded_max(6), 6);
}

static void strict_rules(void) {
  static const char *bad[] = {"Zg=",  "Zg",   "Z",        "YR==",     "Zh==",      "Zm9=",
                              "=Zg=", "Z===", "====",     "Zg==Zg==", "Zm9v\n",    "Zm 9v",
                              "-_==", "Zm9_", "Zm9vYmF=", "Zg=A",     "Zm9vYmFy=", "Zg==="};
  char out[32];
  size_t n;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc = dec(bad[i], out, &n);
    if (rc != DSH_EBASE64) fprintf(stderr, "accepted \"%s\"\n", bad[i]);
    CHECK_EQ_INT(rc, DSH_EBASE64);
  }
  CHECK_EQ_INT(dec("YQ==", out, &n), DSH_OK);
  CHECK_MEM(out, n, "a", 1);
  CHECK_EQ_INT(dec("/w==", out, &n), DSH_OK);
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT((uint8_t)out[0], 0xFF);
  CHECK_EQ_INT(dec("+/+/", out, &n), DSH_OK);
  CHECK_EQ_INT(n, 3);
}

static void loose_rules(void) {
  char out[32];
  size_t n;
  CHECK_EQ_INT(loose("Zg", out, &n), DSH_OK);
  CHECK_MEM(out, n, "f", 1);
  CHECK_EQ_INT(loose("Zm8", out, &n), DSH_OK);
  CHECK_MEM(out, n, "fo", 2);
  CHECK_EQ_INT(loose("-_8", out, &n), DSH_OK);
  CHECK_EQ_INT(n, 2);
  CHECK_EQ_INT((uint8_t)out[0], 0xFB);
  CHECK_EQ_INT((uint8_t)out[1], 0xFF);
  CHECK_EQ_INT(loose("+/8=", out, &n), DSH_OK);
  CHECK_EQ_INT((uint8_t)out[0], 0xFB);
  CHECK_EQ_INT(loose("-/+_", out, &n), DSH_OK); /* mixed alphabets */
  CHECK_EQ_INT(n, 3);
  CHECK_EQ_INT(loose("YR==", out, &n), DSH_OK); /* unused bits ignored */
  CHECK_MEM(out, n, "a", 1);
  static const char *bad[] = {
      "Z", "Zm9vY", "Zg=", "Z=", "====", "Zg==Zg==", "Zm9v\n", " Zm9v", "Zm.v", "Zg===", "A==="};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc = loose(bad[i], out, &n);
    if (rc != DSH_EBASE64) fprintf(stderr, "loose accepted \"%s\"\n", bad[i]);
    CHECK_EQ_INT(rc, DSH_EBASE64);
  }
  CHECK_EQ_INT(loose("", out, &n), DSH_OK);
  CHECK_EQ_INT(n, 0);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)rng;
}

/* Round trips at every small length and some large ones, on both paths, with
 * exact-size output buffers (so ASan catches any overrun). */
static void round_trips(void) {
  size_t lens[400], nl = 0;
  for (size_t i = 0; i < 300; i++) lens[nl++] = i;
  for (size_t i = 0; i < 40; i++) lens[nl++] = 300 + rnd() % 100000;
  for (int simd = 0; simd < 2; simd++) {
    dsh_base64_use_simd(simd);
    for (size_t k = 0; k < nl; k++) {
      size_t n = lens[k];
      uint8_t *src = malloc(n + 1);
      for (size_t i = 0; i < n; i++) src[i] = (uint8_t)rnd();
      size_t el = dsh_base64_encoded_len(n);
      char *enc = malloc(el + 1);
      CHECK_EQ_INT(dsh_base64_encode(src, n, enc), el);
      uint8_t *back = malloc(n + 1);
      size_t m = 0;
      CHECK_EQ_INT(dsh_base64_decode(enc, el, back, &m), DSH_OK);
      CHECK_MEM(back, m, src, n);
      CHECK_EQ_INT(dsh_base64_decode_loose(enc, el, back, &m), DSH_OK);
      CHECK_MEM(back, m, src, n);
      free(src);
      free(enc);
      free(back);
    }
  }
  dsh_base64_use_simd(1);
}

/* One character of a long valid encoding replaced by every byte value: both
 * paths must agree, and accept exactly the alphabet characters. */
static void mutations(void) {
  enum { N = 3000 };
  uint8_t src[N], a[N], b[N];
  char enc[4004];
  for (size_t i = 0; i < N; i++) src[i] = (uint8_t)rnd();
  size_t el = dsh_base64_encode(src, N, enc);
  static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t positions[] = {0, 1, 5, 31, 32, 33, 63, 100, 777, 2000, 3900, el - 5, el - 1};
  for (size_t p = 0; p < sizeof positions / sizeof *positions; p++) {
    size_t pos = positions[p];
    char saved = enc[pos];
    for (int c = 0; c < 256; c++) {
      enc[pos] = (char)c;
      size_t na, nb;
      dsh_base64_use_simd(0);
      int ra = dsh_base64_decode(enc, el, a, &na);
      dsh_base64_use_simd(1);
      int rb = dsh_base64_decode(enc, el, b, &nb);
      CHECK_EQ_INT(ra, rb);
      if (ra == DSH_OK) CHECK_MEM(a, na, b, nb);
      int in_alpha = c != 0 && memchr(alpha, c, 64) != NULL;
      if (!(c == '=' && pos == el - 1)) CHECK_EQ_INT(ra == DSH_OK, in_alpha);
    }
    enc[pos] = saved;
  }
}

int main(void) {
  vectors();
  strict_rules();
  loose_rules();
  round_trips();
  mutations();
  CHECK_DONE();
}
