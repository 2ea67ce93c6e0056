/* auth.h — who may call a streambatch gRPC service: per-pipeline bearer tokens with roles.
 *
 * Every Control, Data and Worker call carries a token ("authorization: Bearer <token>"). A
 * pipeline has two: the WORKER token, which every one of its workers holds and sends, and the
 * CONTROLLER token, which only its controller holds. A server is given the SHA-256 digests of
 * the tokens it accepts, each with the role it grants (sb_rpc_key), never the tokens
 * themselves: a worker knows the controller token's digest, so it can check a Rebind, but
 * cannot make one. A call whose token matches no key is answered UNAUTHENTICATED before any
 * handler runs; a method may also require a role (sb_rpc_server_require_role: Rebind takes the
 * controller role only), refused with PERMISSION_DENIED. The check is independent of TLS: TLS
 * hides the token on the wire and authenticates the server; the token says which pipeline and
 * which role the caller has (docs/operator.md, "Threat model").
 *
 * Tokens are 64 hex characters (256 random bits). The operator derives a pipeline's two tokens
 * from its own key and the Pipeline's uid (HMAC-SHA-256), so a new leader after a failover
 * holds the same tokens without reading any Secret; `streambatch run` draws random ones per
 * run. Comparisons are constant-time. Everything here is plain data: no allocation.
 */
#ifndef SB_RPC_AUTH_H
#define SB_RPC_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define SB_RPC_ROLE_WORKER 0x1u
#define SB_RPC_ROLE_CONTROLLER 0x2u
#define SB_RPC_ROLE_ANY (SB_RPC_ROLE_WORKER | SB_RPC_ROLE_CONTROLLER)

#define SB_RPC_TOKEN_HEX 64  /* characters of a token */
#define SB_RPC_DIGEST_HEX 64 /* characters of a digest in hex */
#define SB_RPC_AUTH_MAX_KEYS 4

/* The environment variables a worker reads its credentials from (then unsets). */
#define SB_AUTH_ENV_TOKEN "SB_AUTH_TOKEN"
#define SB_AUTH_ENV_CONTROLLER_SHA256 "SB_AUTH_CONTROLLER_SHA256"

/* One accepted credential: the SHA-256 of a token and the roles it grants. */
typedef struct sb_rpc_key {
    uint8_t digest[32];
    unsigned roles;
} sb_rpc_key;

/* A pipeline's credentials as one process holds them. */
typedef struct sb_rpc_creds {
    char token[SB_RPC_TOKEN_HEX + 1]; /* what this process sends */
    sb_rpc_key keys[SB_RPC_AUTH_MAX_KEYS];
    size_t nkeys; /* what its servers accept */
} sb_rpc_creds;

/* Fills out with a fresh random token (64 hex + NUL). 0, or -1 with err. */
int sb_rpc_token_new(char out[SB_RPC_TOKEN_HEX + 1], sb_err *err);
/* A token derived from `key` (any bytes) for `role` and `scope` (e.g. a Pipeline's uid). */
void sb_rpc_token_derive(const void *key, size_t keylen, unsigned role, const char *scope,
                         char out[SB_RPC_TOKEN_HEX + 1]);
/* SHA-256 of the token's text, as bytes and as 64 hex characters. */
void sb_rpc_token_digest(const char *token, uint8_t out[32]);
void sb_rpc_token_digest_hex(const char *token, char out[SB_RPC_DIGEST_HEX + 1]);
/* 0 when `s` is 64 hex characters (a token or a digest), -1 with err naming `what` otherwise. */
int sb_rpc_hex64_check(const char *s, const char *what, sb_err *err);

/* Adds a key to c (by token or by hex digest). 0, or -1 with err (full, or not 64 hex). */
int sb_rpc_creds_accept_token(sb_rpc_creds *c, const char *token, unsigned roles, sb_err *err);
int sb_rpc_creds_accept_digest_hex(sb_rpc_creds *c, const char *hex, unsigned roles, sb_err *err);

/* The roles `token` has among keys (0: none), comparing every key in constant time. */
unsigned sb_rpc_keys_match(const sb_rpc_key *keys, size_t nkeys, const char *token, size_t len);

/* A controller's credentials for a pipeline: sends `controller` (Rebind), accepts `worker`
 * (role WORKER: the Control service serves workers only). */
int sb_rpc_creds_controller(sb_rpc_creds *c, const char *worker, const char *controller,
                            sb_err *err);
/* A worker's: sends `worker`, accepts `worker` (WORKER: the other workers' fetches) and the
 * controller token's digest (CONTROLLER). */
int sb_rpc_creds_worker(sb_rpc_creds *c, const char *worker, const char *controller_sha256_hex,
                        sb_err *err);

#endif
