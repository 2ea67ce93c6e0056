/* config.h — where the Kubernetes API server is and how to authenticate to it.
 *
 * Two sources:
 *   - a kubeconfig file (explicit path, else the first existing file in $KUBECONFIG — a
 *     colon-separated list, files are not merged — else ~/.kube/config): the current context or
 *     a named one; cluster `server`, `certificate-authority` / `-data`; user
 *     `client-certificate` / `-data` + `client-key` / `-data`, or `token` / `tokenFile`; the
 *     context's `namespace` (default "default"). Relative file paths are resolved against the
 *     kubeconfig's directory. `insecure-skip-tls-verify: true` is refused: https is always
 *     verified (a plain http:// server, as kubectl allows, is accepted, e.g. for test mocks).
 * Errors name the file, the field and its line.
 *   - in-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, with `token`,
 *     `ca.crt` and `namespace` from $SB_SERVICEACCOUNT_DIR when set (the test node agent), else
 *     /var/run/secrets/kubernetes.io/serviceaccount.
 *
 * A token read from a file (in-cluster, or kubeconfig tokenFile) is re-read when it is older than
 * the refresh interval (60 s by default), because bound service-account tokens rotate.
 *
 * Ownership: an sb_k8s_config owns copies of everything it read (PEM blobs, token, strings);
 * pointers returned by the getters stay valid until sb_k8s_config_free(), except the token,
 * which sb_k8s_config_token() returns as a malloc'd copy. The config is thread-safe to share
 * (the token cache has a lock); free it after every client that uses it.
 */
#ifndef SB_K8S_CONFIG_H
#define SB_K8S_CONFIG_H

#include <stddef.h>

#include "core/err.h"

typedef struct sb_k8s_config sb_k8s_config;

/* Loads a kubeconfig. path NULL: $KUBECONFIG, else ~/.kube/config. context NULL: the file's
 * current-context. */
sb_k8s_config *sb_k8s_config_load_kubeconfig(const char *path, const char *context, sb_err *err);

/* Parses kubeconfig text; `name` is used in messages and `dir` resolves relative paths. */
sb_k8s_config *sb_k8s_config_parse_kubeconfig(const char *text, size_t len, const char *name,
                                              const char *dir, const char *context, sb_err *err);

/* In-cluster configuration (see above). */
sb_k8s_config *sb_k8s_config_in_cluster(sb_err *err);

/* In-cluster when $KUBERNETES_SERVICE_HOST is set, else the default kubeconfig. */
sb_k8s_config *sb_k8s_config_load_default(sb_err *err);

void sb_k8s_config_free(sb_k8s_config *cfg);

/* "https://host:port" without a trailing slash. */
const char *sb_k8s_config_server(const sb_k8s_config *cfg);
const char *sb_k8s_config_namespace(const sb_k8s_config *cfg);
/* The context used ("" in-cluster). */
const char *sb_k8s_config_context(const sb_k8s_config *cfg);
/* PEM blobs (NULL when absent; len set to 0). */
const char *sb_k8s_config_ca_pem(const sb_k8s_config *cfg, size_t *len);
const char *sb_k8s_config_client_cert_pem(const sb_k8s_config *cfg, size_t *len);
const char *sb_k8s_config_client_key_pem(const sb_k8s_config *cfg, size_t *len);

/* The bearer token as a malloc'd string (caller frees), re-read from its file when stale.
 * Returns NULL with err empty when no token is configured, NULL with err set when re-reading
 * failed and no previous token is known. */
char *sb_k8s_config_token(sb_k8s_config *cfg, sb_err *err);
/* How old a file-read token may get before it is read again (default 60000 ms). */
void sb_k8s_config_set_token_refresh(sb_k8s_config *cfg, long ms);
/* The file the token is read from, or NULL. */
const char *sb_k8s_config_token_file(const sb_k8s_config *cfg);

/* Decodes standard base64 (whitespace ignored). Returns a malloc'd buffer (NUL-terminated
 * beyond *out_len), or NULL on bad input or out of memory. */
char *sb_k8s_base64_decode(const char *in, size_t len, size_t *out_len);

#endif
