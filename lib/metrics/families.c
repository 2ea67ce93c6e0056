/* families.c — the worker metric families of docs/metrics.md, "Worker figures" (see
 * families.h): their names, types, help texts and labels, registered the same way by a worker
 * and by `streambatch run`. Owns nothing; the registry owns what is registered. */

#include "metrics/families.h"

const sb_metrics_family sb_metrics_worker_families[SB_WF_COUNT] = {
    [SB_WF_TASKS_STARTED] = {SB_METRIC_COUNTER, "streambatch_worker_tasks_started_total",
                             "Task attempts started.", 1},
    [SB_WF_TASKS_FINISHED] = {SB_METRIC_COUNTER, "streambatch_worker_tasks_finished_total",
                              "Task attempts that completed successfully.", 1},
    [SB_WF_TASKS_FAILED] = {SB_METRIC_COUNTER, "streambatch_worker_tasks_failed_total",
                            "Task attempts that failed (op error, data error, lost input).", 1},
    [SB_WF_ROWS_IN] = {SB_METRIC_COUNTER, "streambatch_worker_rows_in_total",
                       "Records read by tasks (source records or input partitions).", 1},
    [SB_WF_ROWS_OUT] = {SB_METRIC_COUNTER, "streambatch_worker_rows_out_total",
                        "Records in the partitions or sink parts tasks produced.", 1},
    [SB_WF_BYTES_IN] = {SB_METRIC_COUNTER, "streambatch_worker_bytes_in_total",
                        "Bytes of task input (source bytes read, partitions fetched or loaded).",
                        1},
    [SB_WF_BYTES_OUT] = {SB_METRIC_COUNTER, "streambatch_worker_bytes_out_total",
                         "Bytes of the partitions or sink parts tasks produced.", 1},
    [SB_WF_DURATION] = {SB_METRIC_HISTOGRAM, "streambatch_worker_task_duration_seconds",
                        "Wall time of successful task attempts.", 1},
    [SB_WF_STORE_MEMORY] = {SB_METRIC_GAUGE, "streambatch_worker_store_memory_bytes",
                            "Partition bytes held in memory.", 0},
    [SB_WF_STORE_SPILLED] = {SB_METRIC_GAUGE, "streambatch_worker_store_spilled_bytes",
                             "Partition bytes held on local disk (spilled).", 0},
    [SB_WF_SPILL_TOTAL] = {SB_METRIC_COUNTER, "streambatch_worker_spill_bytes_total",
                           "Bytes written to the spill directory.", 0},
    [SB_WF_FETCH_BYTES] = {SB_METRIC_COUNTER, "streambatch_worker_fetch_bytes_total",
                           "Partition bytes received from other workers.", 0},
    [SB_WF_FETCH_ERRORS] = {SB_METRIC_COUNTER, "streambatch_worker_fetch_errors_total",
                            "Fetches from other workers that failed.", 0},
    [SB_WF_ACCELERATOR] = {SB_METRIC_COUNTER, "streambatch_worker_accelerator_busy_seconds_total",
                           "Time tasks held the accelerator.", 0},
    [SB_WF_CPU] = {SB_METRIC_COUNTER, "streambatch_worker_cpu_seconds_total",
                   "Process CPU time (user + system).", 0},
    [SB_WF_RSS] = {SB_METRIC_GAUGE, "streambatch_worker_resident_memory_bytes",
                   "Process resident memory, with the exec operator's child processes.", 0},
    [SB_WF_WORKERS] = {SB_METRIC_GAUGE, "streambatch_workers",
                       "Worker processes behind these figures.", 0},
};

int sb_metrics_add_worker_families(sb_metrics *reg, sb_metric **out, sb_err *err)
{
    static const char *const base[] = {"namespace", "pipeline", "pool", NULL};
    static const char *const staged[] = {"namespace", "pipeline", "pool", "stage", NULL};
    for (int i = 0; i < SB_WF_COUNT; i++) {
        const sb_metrics_family *f = &sb_metrics_worker_families[i];
        int h = f->type == SB_METRIC_HISTOGRAM;
        out[i] = sb_metrics_add(reg, f->type, f->name, f->help, f->staged ? staged : base,
                                h ? sb_metrics_task_buckets : NULL,
                                h ? sb_metrics_task_nbuckets : 0, err);
        if (out[i] == NULL)
            return -1;
    }
    return 0;
}
