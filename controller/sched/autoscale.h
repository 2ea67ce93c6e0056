/* autoscale.h — the autoscaling policy of one worker pool: how many workers it should have
 * now. A pure function of its inputs (no clock, no I/O), so the operator's tick calls it with
 * what the scheduler (sb_sched_pool_demand) and the backend (ready/pending pods) report.
 *
 * Policy: the demand is ceil((queued + running) / slots) workers. Up at once to the demand
 * within [min, max] (at least 1 while the pool is active and max >= 1); down only after the
 * demand stayed below the current size (ready + pending) for scale_down_delay_ms (the caller
 * keeps idle_since_ms: when the demand last dropped below capacity, 0 while it is not below);
 * 0 when the pool is no longer active (its ops finished). A size outside new bounds (min/max
 * changed live) moves into them at once. Robust to odd input: slots 0 counts as 1, min > max
 * is read as max, a clock that went back as no time elapsed. The caller removes only workers
 * that sb_sched_worker_removable() allows.
 */
#ifndef SB_CTL_AUTOSCALE_H
#define SB_CTL_AUTOSCALE_H

#include <stdint.h>

#define SB_AUTOSCALE_DEFAULT_DELAY_MS 10000

typedef struct sb_autoscale_in {
    uint32_t min, max;              /* pool bounds */
    uint32_t ready, pending;        /* workers registered/running, pods not yet running */
    uint32_t slots;                 /* per worker */
    uint64_t queued, running;       /* tasks of the pool's ops */
    int active;                     /* the pool's ops can still get work */
    uint64_t now_ms, idle_since_ms; /* idle_since_ms: when demand last dropped below capacity
                                       (0 = not idle) */
    uint32_t scale_down_delay_ms;   /* 0: SB_AUTOSCALE_DEFAULT_DELAY_MS */
} sb_autoscale_in;

/* The desired number of workers of the pool. */
uint32_t sb_autoscale_desired(const sb_autoscale_in *in);

#endif
