/* auth.c: the access token — the X-Access-Token header (compared as
 * SHA-256 digests in constant time) and envd's v1 URL signatures of /files
 * (protocol §1.4).
 *
 * Uses the core's sha256 and base64. Keeps the token only as the pointer it
 * was given (the configuration owns it) and its digest; never logs either. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsh/base64.h"
#include "server.h"

static const char *g_token;
static uint8_t g_token_hash[32];
static int g_has_token;

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++) d |= a[i] ^ b[i];
  return d == 0;
}

void dshd_auth_init(const char *token) {
  g_token = token;
  g_has_token = token != NULL;
  if (token) dsh_sha256((const uint8_t *)token, strlen(token), g_token_hash);
}

int dshd_auth_has_token(void) {
  return g_has_token;
}

int dshd_auth_header_ok(dshd_req_t *r) {
  if (!g_has_token) return 1;
  const char *h = dshd_req_header(r, "X-Access-Token");
  if (!h) return 0;
  uint8_t hh[32];
  dsh_sha256((const uint8_t *)h, strlen(h), hh);
  return ct_equal(hh, g_token_hash, 32);
}

int dshd_auth_signature_ok(const char *path, const char *operation, const char *username,
                           const char *signature, const char *expiration, const char **why) {
  *why = "invalid signature";
  if (!g_has_token || !g_token) return 0;
  if (!signature) {
    *why = "missing signature query parameter";
    return -1;
  }
  long long exp = 0;
  if (expiration) {
    char *end;
    errno = 0;
    exp = strtoll(expiration, &end, 10);
    if (errno || end == expiration || *end) return -1;
  }
  dsh_sha256_t c;
  dsh_sha256_init(&c);
  const char *parts[] = {path, ":", operation, ":", username, ":", g_token};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    dsh_sha256_update(&c, (const uint8_t *)parts[i], strlen(parts[i]));
  if (expiration) {
    char eb[32];
    int en = snprintf(eb, sizeof eb, ":%lld", exp);
    dsh_sha256_update(&c, (const uint8_t *)eb, (size_t)en);
  }
  uint8_t digest[32];
  dsh_sha256_final(&c, digest);
  char want[3 + 44 + 1] = "v1_";
  size_t n = dsh_base64_encode(digest, 32, want + 3);
  while (n && want[3 + n - 1] == '=') n--; /* RawStdEncoding: no padding */
  want[3 + n] = 0;
  size_t wl = 3 + n, sl = strlen(signature);
  if (wl != sl || !ct_equal((const uint8_t *)want, (const uint8_t *)signature, wl)) return -1;
  if (expiration && exp < (long long)time(NULL)) {
    *why = "signature is already expired";
    return -1;
  }
  return 0;
}
