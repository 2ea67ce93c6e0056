/* testauth.h — fixed pipeline credentials (rpc/auth.h) for tests that start a controller, a
 * worker or a gRPC client of theirs. Header-only like testutil.h (every function static
 * inline). A controller refuses to start without credentials and a worker without its
 * environment, so a test uses:
 *
 *   sb_ctl_start(&cfg, sb_test_ctl_opts(NULL), &err);     the controller's server
 *   sb_rpc_channel_new(addr, sb_test_worker_opts(&o), &e); a worker's client (o: more options)
 *   sb_test_worker_env();                                  setenv for worker processes spawned
 *
 * The tokens are constants: never use them outside tests. */
#ifndef SB_TESTAUTH_H
#define SB_TESTAUTH_H

#include <stdio.h>
#include <stdlib.h>

#include "rpc/auth.h"
#include "rpc/rpc.h"

#define SB_TEST_WORKER_TOKEN "7e57000000000000000000000000000000000000000000000000000000000001"
#define SB_TEST_CONTROLLER_TOKEN "7e57000000000000000000000000000000000000000000000000000000000002"

/* A copy of base (NULL: defaults) carrying the controller's credentials. */
static inline const sb_rpc_opts *sb_test_ctl_opts(const sb_rpc_opts *base)
{
    static sb_rpc_creds creds;
    static sb_rpc_opts o;
    if (sb_rpc_creds_controller(&creds, SB_TEST_WORKER_TOKEN, SB_TEST_CONTROLLER_TOKEN, NULL) != 0)
        abort();
    o = base != NULL ? *base : (sb_rpc_opts){0};
    o.auth = &creds;
    return &o;
}

/* The worker's credentials (its servers accept the worker and the controller tokens). */
static inline const sb_rpc_creds *sb_test_worker_creds(void)
{
    static sb_rpc_creds creds;
    char d[SB_RPC_DIGEST_HEX + 1];
    sb_rpc_token_digest_hex(SB_TEST_CONTROLLER_TOKEN, d);
    if (sb_rpc_creds_worker(&creds, SB_TEST_WORKER_TOKEN, d, NULL) != 0)
        abort();
    return &creds;
}

/* A copy of base (NULL: defaults) carrying a worker's credentials (one static copy: set it up
 * again for other options). */
static inline const sb_rpc_opts *sb_test_worker_opts(const sb_rpc_opts *base)
{
    static sb_rpc_opts o;
    o = base != NULL ? *base : (sb_rpc_opts){0};
    o.auth = sb_test_worker_creds();
    return &o;
}

/* The environment a worker process reads its credentials from (inherited by what the test
 * spawns next). */
static inline void sb_test_worker_env(void)
{
    char d[SB_RPC_DIGEST_HEX + 1];
    sb_rpc_token_digest_hex(SB_TEST_CONTROLLER_TOKEN, d);
    setenv(SB_AUTH_ENV_TOKEN, SB_TEST_WORKER_TOKEN, 1);
    setenv(SB_AUTH_ENV_CONTROLLER_SHA256, d, 1);
}

#endif
