/* test_sha256.c: FIPS 180-2 / NIST CSHA vectors ("abc", "", the 448- and
 * 896-bit messages, one million 'a'), padding boundaries around 55/56/64
 * bytes, and incremental feeding split at every offset agreeing with one-shot. */
#include <stdlib.h>

#include "check.h"
#include "dsh/sha256.h"

static void hex(const uint8_t d[32], char out[65]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = digits[d[i] >> 4];
    out[2 * i + 1] = digits[d[i] & 15];
  }
  out[64] = 0;
}

static void check_one(const char *msg, size_t n, const char *want) {
  uint8_t d[32];
  char h[65];
  dsh_sha256((const uint8_t *)msg, n, d);
  hex(d, h);
  CHECK_STR(h, want);
}

static void nist_vectors(void) {
  check_one("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  check_one("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_one(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_one(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *m896 =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmno"
      "pqrsmn"
      "opqrstnopqrstu";
  check_one(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

  /* one million 'a', fed in uneven pieces */
  static char a[1000];
  memset(a, 'a', sizeof a);
  dsh_sha256_t c;
  dsh_sha256_init(&c);
  size_t left = 1000000, step = 1;
  while (left) {
    size_t k = step < left ? step : left;
    if (k > sizeof a) k = sizeof a;
    dsh_sha256_update(&c, (const uint8_t *)a, k);
    left -= k;
    step = step * 3 % 997 + 1;
  }
  uint8_t d[32];
  char h[65];
  dsh_sha256_final(&c, d);
  hex(d, h);
  CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Padding edges: byte i of the message is (7 i + 3) & 255; digests from
 * Python's hashlib. */
static void padding_boundaries(void) {
  static const struct {
    size_t n;
    const char *want;
  } v[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {127, "a8d23e75d936f303d248888d9b165ee543f4cbafcad3c9dd2a79bd84faa11d07"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
  };
  uint8_t msg[128];
  for (int i = 0; i < 128; i++) msg[i] = (uint8_t)((i * 7 + 3) & 255);
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    check_one((const char *)msg, v[i].n, v[i].want);
}

/* Every two-way and a sample of three-way splits of a 300-byte message agree
 * with the one-shot digest; final wipes the context. */
static void incremental_splits(void) {
  uint8_t msg[300], want[32], got[32];
  for (int i = 0; i < 300; i++) msg[i] = (uint8_t)(i * 31 + 7);
  dsh_sha256(msg, sizeof msg, want);
  for (size_t a = 0; a <= sizeof msg; a++) {
    for (size_t b = a; b <= sizeof msg; b += (a % 13) + 17) {
      dsh_sha256_t c;
      dsh_sha256_init(&c);
      dsh_sha256_update(&c, msg, a);
      dsh_sha256_update(&c, msg + a, b - a);
      dsh_sha256_update(&c, msg + b, sizeof msg - b);
      dsh_sha256_final(&c, got);
      CHECK(memcmp(got, want, 32) == 0);
      CHECK_EQ_INT(c.nbytes, 0);
      CHECK_EQ_INT(c.nbuf, 0);
    }
  }
}

int main(void) {
  nist_vectors();
  padding_boundaries();
  incremental_splits();
  CHECK_DONE();
}
