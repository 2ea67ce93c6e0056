/* operator.h — the Pipeline operator: informers on Pipelines and on their worker pods, a
 * rate-limited work queue, reconciler threads, leader election, and the metrics/health server.
 *
 * Behaviour (docs/operator.md is the user's description): a finalizer on every Pipeline;
 * deletion stops the run, deletes the pods, waits for them, removes the finalizer. Invalid specs
 * get phase Failed with condition InvalidSpec. Valid ones run (Pending -> Running) with the
 * engine, a Control service per pipeline and worker pods; each running pipeline is ticked about
 * every 500 ms (autoscale, pods, status at a bounded rate with the checkpoint, stall watchdog)
 * until it ends (Succeeded/Failed, pods deleted). suspend stops the workers and keeps the
 * checkpoint; resuming starts a new epoch from it. ttlSecondsAfterFinished deletes finished
 * Pipelines. Spec changes a running pipeline cannot take are refused (SpecChangeRefused).
 *
 * Leader election: only the leader reconciles. A new leader resumes Running pipelines from
 * status.checkpoint at epoch + 1 and adopts their pods. Losing the lease makes sb_operator_run
 * return 1 at once (the process must exit: never two leaders).
 *
 * Memory: the config is borrowed for the duration of sb_operator_run.
 */
#ifndef SB_CTL_OPERATOR_H
#define SB_CTL_OPERATOR_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "controller/operator/operator_plan.h"
#include "core/err.h"
#include "rpc/rpc.h"

typedef struct sb_operator_config {
    const char *kubeconfig; /* NULL: in-cluster when $KUBERNETES_SERVICE_HOST, else default */
    const char *context;
    const char *const *namespaces; /* watched namespaces; none: all */
    size_t nnamespaces;
    const char *grpc_host;    /* Control services listen on <host>:0 */
    const char *metrics_host; /* NULL: no metrics server */
    uint16_t metrics_port;
    int leader_elect;
    const char *lease_name, *lease_namespace;
    long lease_ms, renew_ms, retry_ms;
    const char *identity; /* unique per process */
    const char *worker_image;
    const char *worker_gpu_image; /* pools with GPUs (the CUDA build); NULL: the default */
    uint32_t max_pending;
    long status_interval_ms;
    int workers; /* reconcile threads */
    uint32_t heartbeat_timeout_ms;
    /* Mutual TLS (--tls-dir, rpc/tlsdir.h): the Control services and the Rebind calls use rpc;
     * worker pods mount the Secret tls_secret (the same CA) and check tls_server_name. NULL:
     * plaintext. Borrowed for the whole run. */
    const sb_rpc_opts *rpc;
    const char *tls_secret, *tls_server_name;
    /* The operator's key (bytes; borrowed): each Pipeline's worker and controller tokens are
     * derived from it and the Pipeline's uid (rpc/auth.h), so every leader holding the same key
     * holds the same tokens. Required. */
    const uint8_t *auth_key;
    size_t auth_key_len;
    /* Cost-aware placement (operator_plan.h): the controller's prices (Helm `pricing`, under a
     * Pipeline's spec.execution.pricing), the re-plan threshold and interval. */
    sb_operator_plan_config plan;
    volatile sig_atomic_t *stop; /* set by a signal handler: orderly stop */
} sb_operator_config;

/* Runs until *stop (returns 0; the lease is released) or the lease is lost (returns 1). Returns
 * -1 with err when it cannot start (config, informers, listen address). */
int sb_operator_run(const sb_operator_config *cfg, sb_err *err);

#endif
