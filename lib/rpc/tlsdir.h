/* tlsdir.h — mutual TLS options from a directory in the cert-manager Secret layout.
 *
 * `--tls-dir DIR` (streambatch-controller, streambatch-worker, `streambatch run`) names a
 * directory holding tls.crt (this process's certificate chain), tls.key (its private key) and
 * ca.crt (the CA that signed every peer's certificate): what a cert-manager Certificate's Secret
 * holds, mounted as a volume. sb_rpc_tlsdir_load() checks the three files at start (each must be
 * readable PEM: the error names the file) and sb_rpc_tlsdir_apply() fills sb_rpc_opts so that
 * the same options serve both ends: a server presents tls.crt and requires a client certificate
 * signed by ca.crt; a client presents tls.crt and verifies the server against ca.crt.
 *
 * Peers are reached by IP address, so a client does not check the server certificate for the
 * address it dialled but for a fixed name, SB_RPC_TLS_DEFAULT_SERVER_NAME ("streambatch") unless
 * overridden (--tls-server-name): every certificate carries that name among its DNS SANs.
 */
#ifndef SB_RPC_TLSDIR_H
#define SB_RPC_TLSDIR_H

#include "core/err.h"
#include "rpc/rpc.h"

#define SB_RPC_TLS_DEFAULT_SERVER_NAME "streambatch"

typedef struct sb_rpc_tlsdir {
    char dir[1024];
    char ca[1100], cert[1100], key[1100];
    char server_name[256];
} sb_rpc_tlsdir;

/* Fills `t` from `dir` (tls.crt, tls.key, ca.crt) and `server_name` (NULL/"": the default).
 * 0, or -1 with err naming the directory and the file that is missing, unreadable or not PEM. */
int sb_rpc_tlsdir_load(sb_rpc_tlsdir *t, const char *dir, const char *server_name, sb_err *err);

/* Points o's TLS fields into `t` (which must outlive every *_new() call that uses `o`). */
void sb_rpc_tlsdir_apply(const sb_rpc_tlsdir *t, sb_rpc_opts *o);

/* Connects to a server of this process that uses `t` (at `addr`) as a client with the same
 * certificate: catches, before any peer depends on it, a tls.crt not signed by ca.crt, a key
 * that does not match it, or a certificate without the server name. 0, or -1 with err saying
 * what to check (within timeout_ms). */
int sb_rpc_tlsdir_check(const sb_rpc_tlsdir *t, const char *addr, int timeout_ms, sb_err *err);

/* The same check against a throwaway server on 127.0.0.1 with `t` (for processes whose real
 * servers start later: streambatch-worker, streambatch-controller). 0, or -1 with err. */
int sb_rpc_tlsdir_selftest(const sb_rpc_tlsdir *t, int timeout_ms, sb_err *err);

#endif
