/* tlsdir.c — mutual TLS from a directory in the cert-manager Secret layout (see tlsdir.h):
 * finding and checking tls.crt, tls.key and ca.crt, a self-test and a check against a server,
 * and applying them to the rpc options. Keeps the files' paths, not their contents. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/tlsdir.h"

/* The file must be readable and hold a PEM block ("-----BEGIN ") in its first 64 KiB. */
static int check_pem(const char *dir, const char *path, const char *name, const char *what,
                     sb_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return sb_err_set(err, "--tls-dir %s: cannot read %s (%s, %s): %s", dir, name, what, path,
                          strerror(errno));
    enum { CAP = 65536 };
    char *buf = malloc(CAP + 1);
    if (buf == NULL) {
        fclose(f);
        return sb_err_set(err, "--tls-dir %s: out of memory reading %s", dir, name);
    }
    size_t n = fread(buf, 1, CAP, f);
    int failed = ferror(f), errnum = errno;
    fclose(f);
    buf[n] = '\0';
    int found = memmem(buf, n, "-----BEGIN ", 11) != NULL;
    free(buf);
    if (failed)
        return sb_err_set(err, "--tls-dir %s: cannot read %s (%s, %s): %s", dir, name, what, path,
                          strerror(errnum));
    if (!found)
        return sb_err_set(err, "--tls-dir %s: %s (%s, %s) is not PEM", dir, name, what, path);
    return 0;
}

int sb_rpc_tlsdir_load(sb_rpc_tlsdir *t, const char *dir, const char *server_name, sb_err *err)
{
    memset(t, 0, sizeof *t);
    if (dir == NULL || *dir == '\0')
        return sb_err_set(err, "--tls-dir: empty directory name");
    if (strlen(dir) >= sizeof t->dir)
        return sb_err_set(err, "--tls-dir: directory name too long (%zu bytes)", strlen(dir));
    if (server_name == NULL || *server_name == '\0')
        server_name = SB_RPC_TLS_DEFAULT_SERVER_NAME;
    if (strlen(server_name) >= sizeof t->server_name)
        return sb_err_set(err, "--tls-server-name: too long (%zu bytes)", strlen(server_name));
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    snprintf(t->server_name, sizeof t->server_name, "%s", server_name);
    size_t n = strlen(dir);
    const char *sep = n > 0 && dir[n - 1] == '/' ? "" : "/";
    snprintf(t->cert, sizeof t->cert, "%s%stls.crt", dir, sep);
    snprintf(t->key, sizeof t->key, "%s%stls.key", dir, sep);
    snprintf(t->ca, sizeof t->ca, "%s%sca.crt", dir, sep);
    if (check_pem(dir, t->cert, "tls.crt", "the certificate", err) != 0 ||
        check_pem(dir, t->key, "tls.key", "the private key", err) != 0 ||
        check_pem(dir, t->ca, "ca.crt", "the CA certificate", err) != 0)
        return -1;
    return 0;
}

int sb_rpc_tlsdir_check(const sb_rpc_tlsdir *t, const char *addr, int timeout_ms, sb_err *err)
{
    sb_rpc_opts o = {0};
    sb_rpc_tlsdir_apply(t, &o);
    sb_err e = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, &o, &e);
    if (ch == NULL)
        return sb_err_set(err, "--tls-dir %s: %s", t->dir, e.msg);
    uint8_t *resp = NULL;
    size_t len = 0;
    /* a method no server has: UNIMPLEMENTED means the handshake went through both ways */
    sb_rpc_code code =
        sb_rpc_unary(ch, "/streambatch.v1.TLS/SelfCheck", "", 0, timeout_ms, 0, &resp, &len, &e);
    free(resp);
    sb_rpc_channel_free(ch);
    if (code == SB_RPC_UNIMPLEMENTED || code == SB_RPC_OK)
        return 0;
    return sb_err_set(err,
                      "--tls-dir %s: a TLS connection to this process's own server at %s failed "
                      "(%s: %s): check that tls.crt is signed by ca.crt, that tls.key is its key "
                      "and that it carries the DNS name \"%s\" (--tls-server-name)",
                      t->dir, addr, sb_rpc_code_name(code), e.msg, t->server_name);
}

int sb_rpc_tlsdir_selftest(const sb_rpc_tlsdir *t, int timeout_ms, sb_err *err)
{
    sb_rpc_opts o = {.threads = 1};
    sb_rpc_tlsdir_apply(t, &o);
    sb_err e = {0};
    sb_rpc_server *srv = sb_rpc_server_new(&o, &e);
    int port = srv ? sb_rpc_server_listen(srv, "127.0.0.1:0", &e) : -1;
    if (port < 0 || sb_rpc_server_start(srv, &e) != 0) {
        sb_rpc_server_free(srv);
        return sb_err_set(err, "--tls-dir %s: cannot start a TLS server with it: %s", t->dir,
                          e.msg);
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    int rc = sb_rpc_tlsdir_check(t, addr, timeout_ms, err);
    sb_rpc_server_shutdown(srv, 0);
    sb_rpc_server_free(srv);
    return rc;
}

void sb_rpc_tlsdir_apply(const sb_rpc_tlsdir *t, sb_rpc_opts *o)
{
    o->tls_ca_file = t->ca;
    o->tls_cert_file = t->cert;
    o->tls_key_file = t->key;
    o->tls_require_client_cert = 1;
    o->tls_server_name = t->server_name;
}
