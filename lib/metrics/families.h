/* families.h — the worker metric families of docs/metrics.md ("Worker figures"), defined once:
 * a worker registers them for its own endpoint (worker/wmetrics.c) and `streambatch run`
 * registers the same names for the figures it sums per pool (controller/ctl/cmetrics.c).
 * Labels: namespace, pipeline, pool, and stage where `staged` is set (in that order).
 */
#ifndef SB_METRICS_FAMILIES_H
#define SB_METRICS_FAMILIES_H

#include "metrics/metrics.h"

enum {
    SB_WF_TASKS_STARTED,
    SB_WF_TASKS_FINISHED,
    SB_WF_TASKS_FAILED,
    SB_WF_ROWS_IN,
    SB_WF_ROWS_OUT,
    SB_WF_BYTES_IN,
    SB_WF_BYTES_OUT,
    SB_WF_DURATION, /* histogram, sb_metrics_task_buckets */
    SB_WF_STORE_MEMORY,
    SB_WF_STORE_SPILLED,
    SB_WF_SPILL_TOTAL,
    SB_WF_FETCH_BYTES,
    SB_WF_FETCH_ERRORS,
    SB_WF_ACCELERATOR,
    SB_WF_CPU,
    SB_WF_RSS,
    SB_WF_WORKERS,
    SB_WF_COUNT
};

typedef struct sb_metrics_family {
    sb_metric_type type;
    const char *name, *help;
    int staged; /* has the stage label */
} sb_metrics_family;

extern const sb_metrics_family sb_metrics_worker_families[SB_WF_COUNT];

/* Registers them all on reg into out[SB_WF_COUNT]. 0, or -1 + err. */
int sb_metrics_add_worker_families(sb_metrics *reg, sb_metric **out, sb_err *err);

#endif
