/* lib/rpc/auth: tokens, digests and their derivation checked against Python's hashlib/hmac
 * (values computed independently), the hex checks, the role match, and a real lib/rpc server
 * with keys: no token or an unknown one -> UNAUTHENTICATED and a role a method does not take ->
 * PERMISSION_DENIED, both before the handler; the right token reaches it with its roles. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/auth.h"
#include "rpc/rpc.h"

#define TOK_W "1111111111111111111111111111111111111111111111111111111111111111"
#define TOK_C "2222222222222222222222222222222222222222222222222222222222222222"

Test(rpc_auth, digest_and_derivation_match_python)
{
    char hex[SB_RPC_DIGEST_HEX + 1];
    sb_rpc_token_digest_hex("abc", hex); /* hashlib.sha256(b'abc').hexdigest() */
    cr_expect_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* hmac.new(key, b'streambatch worker token v1\nuid-1', hashlib.sha256).hexdigest() */
    const char *key = "0123456789abcdef0123456789abcdef";
    char t[SB_RPC_TOKEN_HEX + 1], c[SB_RPC_TOKEN_HEX + 1], o[SB_RPC_TOKEN_HEX + 1];
    sb_rpc_token_derive(key, strlen(key), SB_RPC_ROLE_WORKER, "uid-1", t);
    cr_expect_str_eq(t, "cadcefed19c71af60f59fceec20bc322b7641397dc830ce3359567070ffd182e");
    sb_rpc_token_derive(key, strlen(key), SB_RPC_ROLE_CONTROLLER, "uid-1", c);
    sb_rpc_token_derive(key, strlen(key), SB_RPC_ROLE_WORKER, "uid-2", o);
    cr_expect_str_neq(t, c, "the roles' tokens differ");
    cr_expect_str_neq(t, o, "each Pipeline's differ");
    sb_rpc_token_derive("another key 0123456789abcdef0123", 32, SB_RPC_ROLE_WORKER, "uid-1", o);
    cr_expect_str_neq(t, o, "each key's differ");
    char r1[SB_RPC_TOKEN_HEX + 1], r2[SB_RPC_TOKEN_HEX + 1];
    cr_assert_eq(sb_rpc_token_new(r1, NULL), 0);
    cr_assert_eq(sb_rpc_token_new(r2, NULL), 0);
    cr_expect_eq(strlen(r1), SB_RPC_TOKEN_HEX);
    cr_expect_str_neq(r1, r2);
    cr_expect_eq(sb_rpc_hex64_check(r1, "r1", NULL), 0);
}

Test(rpc_auth, hex_checks_and_role_match)
{
    sb_err err;
    cr_expect_eq(sb_rpc_hex64_check(NULL, "x", &err), -1);
    cr_expect_eq(sb_rpc_hex64_check("abc", "the token", &err), -1);
    cr_expect(strstr(err.msg, "the token must be 64 hex characters, got 3") != NULL, "%s", err.msg);
    char bad[] = TOK_W;
    bad[10] = 'g';
    cr_expect_eq(sb_rpc_hex64_check(bad, "t", &err), -1);
    cr_expect(strstr(err.msg, "character 11") != NULL, "%s", err.msg);
    sb_rpc_creds c;
    char d[SB_RPC_DIGEST_HEX + 1];
    sb_rpc_token_digest_hex(TOK_C, d);
    cr_assert_eq(sb_rpc_creds_worker(&c, TOK_W, d, &err), 0, "%s", err.msg);
    cr_expect_str_eq(c.token, TOK_W);
    cr_expect_eq(sb_rpc_keys_match(c.keys, c.nkeys, TOK_W, 64), SB_RPC_ROLE_WORKER);
    cr_expect_eq(sb_rpc_keys_match(c.keys, c.nkeys, TOK_C, 64), SB_RPC_ROLE_CONTROLLER);
    cr_expect_eq(sb_rpc_keys_match(c.keys, c.nkeys, TOK_C, 63), 0, "a prefix is not the token");
    cr_expect_eq(sb_rpc_keys_match(c.keys, c.nkeys, "", 0), 0);
    cr_expect_eq(sb_rpc_creds_worker(&c, TOK_W, "zz", &err), -1);
    cr_expect(strstr(err.msg, "token digest") != NULL, "%s", err.msg);
    cr_assert_eq(sb_rpc_creds_worker(&c, TOK_W, d, &err), 0, "%s", err.msg); /* 2 keys */
    for (int i = 0; i < SB_RPC_AUTH_MAX_KEYS - 2; i++)
        cr_expect_eq(sb_rpc_creds_accept_token(&c, TOK_W, SB_RPC_ROLE_WORKER, &err), 0);
    cr_expect_eq(sb_rpc_creds_accept_token(&c, TOK_W, SB_RPC_ROLE_WORKER, &err), -1, "full");
}

static atomic_int g_calls;
static atomic_uint g_roles;

static void echo(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    atomic_fetch_add(&g_calls, 1);
    atomic_store(&g_roles, sb_rpc_call_roles(call));
    sb_rpc_call_reply(call, req, len, NULL);
}

static sb_rpc_code call_with(const char *addr, const char *token, const char *method)
{
    static sb_rpc_creds c;
    sb_rpc_opts o = {0};
    if (token != NULL) {
        memset(&c, 0, sizeof c);
        snprintf(c.token, sizeof c.token, "%s", token);
        o.auth = &c;
    }
    sb_err err;
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, &o, &err);
    cr_assert_not_null(ch, "%s", err.msg);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    sb_rpc_code code =
        sb_rpc_unary(ch, method, "hi", 2, 5000, SB_RPC_WAIT_FOR_READY, &resp, &rlen, &err);
    free(resp);
    sb_rpc_channel_free(ch);
    return code;
}

Test(rpc_auth, a_server_with_keys_refuses_before_the_handler)
{
    sb_rpc_creds keys;
    char d[SB_RPC_DIGEST_HEX + 1];
    sb_rpc_token_digest_hex(TOK_C, d);
    sb_err err;
    cr_assert_eq(sb_rpc_creds_worker(&keys, TOK_W, d, &err), 0, "%s", err.msg);
    sb_rpc_opts o = {.auth = &keys};
    sb_rpc_server *s = sb_rpc_server_new(&o, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_add_unary(s, "/t.T/Any", echo, NULL, &err), 0);
    cr_assert_eq(sb_rpc_server_add_unary(s, "/t.T/Ctl", echo, NULL, &err), 0);
    cr_assert_eq(sb_rpc_server_require_role(s, "/t.T/Ctl", SB_RPC_ROLE_CONTROLLER, &err), 0);
    cr_expect_eq(sb_rpc_server_require_role(s, "/t.T/None", SB_RPC_ROLE_CONTROLLER, &err), -1);
    int port = sb_rpc_server_listen(s, "127.0.0.1:0", &err);
    cr_assert_gt(port, 0, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_start(s, &err), 0, "%s", err.msg);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

    cr_expect_eq(call_with(addr, NULL, "/t.T/Any"), SB_RPC_UNAUTHENTICATED);
    cr_expect_eq(call_with(addr, "3333333333333333333333333333333333333333333333333333333333333333",
                           "/t.T/Any"),
                 SB_RPC_UNAUTHENTICATED);
    cr_expect_eq(call_with(addr, TOK_W, "/t.T/Ctl"), SB_RPC_PERMISSION_DENIED);
    cr_expect_eq(atomic_load(&g_calls), 0, "a refused call reached the handler");
    cr_expect_eq(call_with(addr, TOK_W, "/t.T/Any"), SB_RPC_OK);
    cr_expect_eq(atomic_load(&g_roles), SB_RPC_ROLE_WORKER);
    cr_expect_eq(call_with(addr, TOK_C, "/t.T/Ctl"), SB_RPC_OK);
    cr_expect_eq(atomic_load(&g_roles), SB_RPC_ROLE_CONTROLLER);
    cr_expect_eq(call_with(addr, TOK_C, "/t.T/Unknown"), SB_RPC_UNIMPLEMENTED);
    cr_expect_eq(atomic_load(&g_calls), 2);
    sb_rpc_server_free(s);
}
