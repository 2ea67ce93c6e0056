/* backend.h — how the controller gets workers: one interface, two implementations. The local
 * backend (controller/local/workers.h) forks worker processes on this machine; the Kubernetes
 * backend (with the operator) creates worker pods. The scheduler and the Control service do not
 * know which one runs: workers of either kind register over gRPC the same way, and the backend
 * reports the ones that end so recovery starts at once.
 *
 * Memory: a backend owns its own state; sb_backend_stop() releases it.
 */
#ifndef SB_CTL_BACKEND_H
#define SB_CTL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct sb_backend {
    void *impl;
    /* Sets how many workers a pool should have (the backend starts or stops workers; a
     * backend may start fewer, e.g. when the cluster has no room). */
    int (*set_pool_size)(void *impl, const char *pool, uint32_t workers);
    /* Workers of the pool alive now (started and not ended). */
    uint32_t (*pool_size)(void *impl, const char *pool);
    /* Sum of the resident memory of the workers it can see (bytes; 0 if unknown). */
    uint64_t (*rss)(void *impl);
    /* Stops every worker (grace period, then forcefully) and frees the backend. */
    void (*stop)(void *impl, int grace_ms);
} sb_backend;

static inline void sb_backend_stop(sb_backend *b, int grace_ms)
{
    if (b != NULL && b->stop != NULL)
        b->stop(b->impl, grace_ms);
}

#endif
