/* uninstall — `streambatch-controller --uninstall DEPLOYMENT`, what the chart's pre-delete hook
 * runs before `helm uninstall` removes the release, so that no Pipeline is left with a
 * finalizer nothing can clear (issue 38). In order:
 *   1. the controller Deployment is scaled to 0 and its pods (its spec.selector) waited for:
 *      each controller ends on SIGTERM as usual (a last status with the checkpoint, the Lease
 *      released), and no controller is left to add the finalizer again;
 *   2. every Pipeline of the watched namespaces (all when none are given) is stopped: its
 *      worker pods are deleted and `streambatch.dev/finalizer` is removed (a merge patch
 *      guarded by resourceVersion, retried on a conflict), and an Event `Uninstalled` says so
 *      on it (best effort). The Pipelines themselves are kept,
 *      with their status and checkpoint: a later install resumes the Running ones, and
 *      `kubectl delete pipeline` now completes at once;
 *   3. the Lease and the helm test pod of the release, when named, are deleted.
 * Each step is bounded and idempotent (a 404 is success), so a hook run again after a partial
 * failure finishes the job. Needs, beyond the controller's own rules: deployments get and
 * patch (the one Deployment), leases delete (the one Lease), pods list and delete in the
 * release namespace (the chart's <release>-uninstall Role).
 *
 * Ownership: every pointer in sb_uninstall_opts is borrowed for the call. */
#ifndef SB_CONTROLLER_UNINSTALL_H
#define SB_CONTROLLER_UNINSTALL_H

#include <stddef.h>
#include <stdio.h>

#include "core/err.h"

typedef struct sb_uninstall_opts {
    const char *kubeconfig; /* with context: a kubeconfig; both NULL: in-cluster, else default */
    const char *context;
    const char *namespace;  /* the release's: Deployment, Lease, test pod; NULL: the config's */
    const char *deployment; /* the controller Deployment (required) */
    const char *lease;      /* the leader-election Lease; NULL: none */
    const char *test_pod;   /* the chart's helm test pod; NULL: none */
    const char *const *namespaces; /* whose Pipelines are stopped; nnamespaces 0: all */
    size_t nnamespaces;
    long timeout_ms; /* for the controller pods to end; 0: 2 minutes */
    FILE *out;       /* a line per step; NULL: none */
} sb_uninstall_opts;

/* 0 when every step succeeded; -1 (err says which step and why, wrapping the API's answer). */
int sb_uninstall_run(const sb_uninstall_opts *o, sb_err *err);

#endif
