/* client.h — a thin Kubernetes API client on libcurl + cJSON.
 *
 * One client holds one libcurl easy handle (so connections and TLS sessions are reused) behind
 * a mutex: a client may be shared by several threads, whose requests then run one at a time
 * (the lock is not held while a retry waits). Use one client per thread for parallel requests.
 * TLS is always verified against the config's CA (the system store when the config has none);
 * client certificates are passed as in-memory blobs; a bearer token is read from the config for
 * every request (so rotated tokens are picked up).
 *
 * Every request runs under a timeout (timeout_ms, or the client default of 30 s when 0).
 * 429 Too Many Requests is retried after Retry-After (else the backoff), and 5xx answers and
 * transport errors are retried with exponential backoff (200 ms doubling, at most 5 s) except
 * for POST; at most `max_attempts` (default 5) attempts in all.
 *
 * Ownership: the client borrows its sb_k8s_config, which must outlive it. Response bodies and
 * cJSON results are returned to the caller, who frees them (free() / cJSON_Delete()). Input
 * objects (const cJSON *) are never modified or kept.
 */
#ifndef SB_K8S_CLIENT_H
#define SB_K8S_CLIENT_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>

#include "core/err.h"
#include "k8s/config.h"

typedef struct sb_k8s_client sb_k8s_client;

sb_k8s_client *sb_k8s_client_new(sb_k8s_config *cfg, sb_err *err);
void sb_k8s_client_free(sb_k8s_client *c);
sb_k8s_config *sb_k8s_client_config(const sb_k8s_client *c);

/* Retry policy: attempts >= 1; base backoff in ms (doubling, capped at 5 s). */
void sb_k8s_client_set_retry(sb_k8s_client *c, int max_attempts, long base_backoff_ms);
void sb_k8s_client_set_timeout(sb_k8s_client *c, long default_timeout_ms);

/* One request (with the retries above). path starts with '/' and may carry a query. body may be
 * NULL; content_type defaults to application/json when body is set. Returns 0 when an HTTP
 * answer came (any status, in *status), with the body in *response (malloc'd, NUL-terminated,
 * caller frees; response may be NULL to discard it); -1 with err set on transport failure or
 * timeout (*status 0). */
int sb_k8s_request(sb_k8s_client *c, const char *method, const char *path, const char *body,
                   const char *content_type, long timeout_ms, long *status, char **response,
                   sb_err *err);

/* Streams a GET (for watches): chunks of a 200 answer go to fn as they arrive (fn returns 0 to
 * go on, non-zero to stop); a non-200 body is collected into *error_body (malloc'd, may be NULL
 * on return). The transfer ends when the server closes it, timeout_ms passes (0: none), fn asks
 * to stop, or *stop becomes non-zero (checked at least once a second). No retries. Returns 0
 * when an answer came (its status in *status; stopping early is not an error), -1 on transport
 * failure. */
typedef int (*sb_k8s_stream_fn)(const char *data, size_t len, void *arg);
int sb_k8s_stream(sb_k8s_client *c, const char *path, long timeout_ms, sb_k8s_stream_fn fn,
                  void *arg, atomic_int *stop, long *status, char **error_body, sb_err *err);

/* Describes a failed answer: "404 NotFound: configmaps \"x\" not found" from a Kubernetes
 * Status body, else "HTTP 502: <start of body>". */
void sb_k8s_describe_status(long status, const char *body, char *out, size_t n);

/* JSON helpers. Each returns the parsed answer of a 2xx response (caller cJSON_Delete()s), or
 * NULL with err set ("GET /api/v1/...: 404 NotFound: configmaps \"x\" not found"); *status
 * (may be NULL) gets the HTTP status (0 on transport failure). */
cJSON *sb_k8s_json(sb_k8s_client *c, const char *method, const char *path, const char *body,
                   const char *content_type, long *status, sb_err *err);
cJSON *sb_k8s_get(sb_k8s_client *c, const char *path, long *status, sb_err *err);
/* label_selector may be NULL; it is URL-encoded. */
cJSON *sb_k8s_list(sb_k8s_client *c, const char *path, const char *label_selector, long *status,
                   sb_err *err);
/* POST obj to a collection path. */
cJSON *sb_k8s_create(sb_k8s_client *c, const char *path, const cJSON *obj, long *status,
                     sb_err *err);
/* PUT obj (with its metadata.resourceVersion: a stale one answers 409). */
cJSON *sb_k8s_update(sb_k8s_client *c, const char *path, const cJSON *obj, long *status,
                     sb_err *err);
/* JSON merge patch (application/merge-patch+json). */
cJSON *sb_k8s_patch(sb_k8s_client *c, const char *path, const char *merge_patch, long *status,
                    sb_err *err);
/* DELETE; returns 0 on 2xx, -1 otherwise (404 included; check *status). */
int sb_k8s_delete(sb_k8s_client *c, const char *path, long *status, sb_err *err);

/* Called after a 409 Conflict with the object just re-read from `path` (the main resource):
 * re-apply the change to `latest` in place; return 0 to retry, -1 (err set) to give up. */
typedef int (*sb_k8s_reapply_fn)(cJSON *latest, void *arg, sb_err *err);

/* PUT obj to path (or path/subresource when subresource is not NULL, e.g. "status"); on 409,
 * GET path, call reapply and PUT again, at most max_attempts times (0: 5). Returns the stored
 * object or NULL (err set; *status the last HTTP status). */
cJSON *sb_k8s_update_retry(sb_k8s_client *c, const char *path, const char *subresource,
                           const cJSON *obj, sb_k8s_reapply_fn reapply, void *arg, int max_attempts,
                           long *status, sb_err *err);
/* sb_k8s_update_retry(c, path, "status", ...). */
cJSON *sb_k8s_update_status(sb_k8s_client *c, const char *path, const cJSON *obj,
                            sb_k8s_reapply_fn reapply, void *arg, long *status, sb_err *err);

#endif
