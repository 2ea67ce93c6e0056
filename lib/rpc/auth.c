/* auth.c — tokens, their digests and the constant-time match behind rpc/auth.h.
 *
 * OpenSSL's libcrypto (already linked for TLS) gives SHA-256, HMAC and CRYPTO_memcmp; the
 * randomness comes from getrandom(2).
 */
#include "rpc/auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "core/pct.h"

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int sb_rpc_token_new(char out[SB_RPC_TOKEN_HEX + 1], sb_err *err)
{
    uint8_t b[32];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return sb_err_set(err, "cannot draw a random token: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    to_hex(b, sizeof b, out);
    OPENSSL_cleanse(b, sizeof b);
    return 0;
}

void sb_rpc_token_derive(const void *key, size_t keylen, unsigned role, const char *scope,
                         char out[SB_RPC_TOKEN_HEX + 1])
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "streambatch %s token v1\n%s",
                     role == SB_RPC_ROLE_CONTROLLER ? "controller" : "worker", scope ? scope : "");
    size_t len = n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
    uint8_t mac[EVP_MAX_MD_SIZE];
    unsigned maclen = 0;
    HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, len, mac, &maclen);
    to_hex(mac, 32, out);
    OPENSSL_cleanse(mac, sizeof mac);
}

void sb_rpc_token_digest(const char *token, uint8_t out[32])
{
    SHA256((const unsigned char *)token, strlen(token), out);
}

void sb_rpc_token_digest_hex(const char *token, char out[SB_RPC_DIGEST_HEX + 1])
{
    uint8_t d[32];
    sb_rpc_token_digest(token, d);
    to_hex(d, sizeof d, out);
}

int sb_rpc_hex64_check(const char *s, const char *what, sb_err *err)
{
    size_t n = s ? strlen(s) : 0;
    if (n != 64)
        return sb_err_set(err, "%s must be 64 hex characters, got %zu characters", what, n);
    for (size_t i = 0; i < n; i++)
        if (sb_hex_digit(s[i]) < 0)
            return sb_err_set(err, "%s must be 64 hex characters, character %zu is not hex", what,
                              i + 1);
    return 0;
}

static int creds_add(sb_rpc_creds *c, const uint8_t digest[32], unsigned roles, sb_err *err)
{
    if (c->nkeys == SB_RPC_AUTH_MAX_KEYS)
        return sb_err_set(err, "more than %d accepted credentials", SB_RPC_AUTH_MAX_KEYS);
    memcpy(c->keys[c->nkeys].digest, digest, 32);
    c->keys[c->nkeys].roles = roles;
    c->nkeys++;
    return 0;
}

int sb_rpc_creds_accept_token(sb_rpc_creds *c, const char *token, unsigned roles, sb_err *err)
{
    if (sb_rpc_hex64_check(token, "a token", err) != 0)
        return -1;
    uint8_t d[32];
    sb_rpc_token_digest(token, d);
    return creds_add(c, d, roles, err);
}

int sb_rpc_creds_accept_digest_hex(sb_rpc_creds *c, const char *hex, unsigned roles, sb_err *err)
{
    if (sb_rpc_hex64_check(hex, "a token digest", err) != 0)
        return -1;
    uint8_t d[32];
    for (int i = 0; i < 32; i++)
        d[i] = (uint8_t)(sb_hex_digit(hex[2 * i]) << 4 | sb_hex_digit(hex[2 * i + 1]));
    return creds_add(c, d, roles, err);
}

unsigned sb_rpc_keys_match(const sb_rpc_key *keys, size_t nkeys, const char *token, size_t len)
{
    uint8_t d[32];
    SHA256((const unsigned char *)token, len, d);
    unsigned roles = 0;
    for (size_t i = 0; i < nkeys; i++)
        if (CRYPTO_memcmp(d, keys[i].digest, 32) == 0)
            roles |= keys[i].roles;
    return roles;
}

static int set_token(sb_rpc_creds *c, const char *token, const char *what, sb_err *err)
{
    if (sb_rpc_hex64_check(token, what, err) != 0)
        return -1;
    memcpy(c->token, token, SB_RPC_TOKEN_HEX + 1);
    return 0;
}

int sb_rpc_creds_controller(sb_rpc_creds *c, const char *worker, const char *controller,
                            sb_err *err)
{
    memset(c, 0, sizeof *c);
    if (set_token(c, controller, "the controller token", err) != 0 ||
        sb_rpc_creds_accept_token(c, worker, SB_RPC_ROLE_WORKER, err) != 0)
        return -1;
    return 0;
}

int sb_rpc_creds_worker(sb_rpc_creds *c, const char *worker, const char *controller_sha256_hex,
                        sb_err *err)
{
    memset(c, 0, sizeof *c);
    if (set_token(c, worker, "the worker token (" SB_AUTH_ENV_TOKEN ")", err) != 0 ||
        sb_rpc_creds_accept_token(c, worker, SB_RPC_ROLE_WORKER, err) != 0 ||
        sb_rpc_creds_accept_digest_hex(c, controller_sha256_hex, SB_RPC_ROLE_CONTROLLER, err) != 0)
        return sb_err_wrap(err, "worker credentials");
    return 0;
}
