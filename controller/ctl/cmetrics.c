/* cmetrics.c — the Prometheus figures of the pipelines a controller runs (see cmetrics.h): per
 * stage partitions, re-runs, task durations and rows, and per pool the worker figures summed,
 * all made from controller snapshots at scrape time. Keeps no figures of its own between
 * scrapes. */

#include "controller/ctl/cmetrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/families.h"

enum {
    /* controller families */
    C_PARTITIONS,
    C_RECOVERED,
    C_ERRORED,
    C_RERUNS,
    C_SPECULATIVE,
    C_ROWS_OUT,
    C_BYTES_OUT,
    C_QUEUED_BYTES,
    C_BACKPRESSURE,
    C_SPILLED,
    C_OUTSIDE,
    C_MEM_USED,
    C_MEM_BUDGET,
    C_POOL_WORKERS,
    C_DRAINED,
    C_PQ_ROW_GROUPS,
    C_PQ_PAGES,
    C_PQ_BYTES,
    C_RANK_BATCH,
    C_RANK_STEP,
    C_RANK_HELD,
    C_STREAM_WAITING,
    NC,
    /* then the worker families, summed per pool (lib/metrics/families.h) */
    NALL = NC + SB_WF_COUNT
};

/* label sets */
enum {
    L_PIPE,
    L_STAGE,
    L_STAGE_STATE,
    L_STAGE_CAUSE,
    L_STAGE_OUTCOME,
    L_POOL_STATE,
    L_PIPE_STATE,
    L_RANK,
    L_WORKER
};
static const char *const labelsets[][6] = {
    [L_PIPE] = {"namespace", "pipeline", NULL},
    [L_PIPE_STATE] = {"namespace", "pipeline", "state", NULL},
    [L_STAGE] = {"namespace", "pipeline", "stage", NULL},
    [L_STAGE_STATE] = {"namespace", "pipeline", "stage", "state", NULL},
    [L_STAGE_CAUSE] = {"namespace", "pipeline", "stage", "cause", NULL},
    [L_STAGE_OUTCOME] = {"namespace", "pipeline", "stage", "outcome", NULL},
    [L_POOL_STATE] = {"namespace", "pipeline", "pool", "state", NULL},
    [L_RANK] = {"namespace", "pipeline", "rank", NULL},
    [L_WORKER] = {"namespace", "pipeline", "worker", NULL},
};

static const struct {
    sb_metric_type type;
    const char *name, *help;
    int labels;
} defs[NC] = {
    [C_PARTITIONS] = {SB_METRIC_GAUGE, "streambatch_stage_partitions",
                      "The stage's units of work (one task each) by state: total planned, "
                      "committed, running now, queued.",
                      L_STAGE_STATE},
    [C_RECOVERED] = {SB_METRIC_COUNTER, "streambatch_stage_partitions_recovered_total",
                     "Partitions re-made by lineage after they were lost.", L_STAGE},
    [C_ERRORED] = {SB_METRIC_COUNTER, "streambatch_stage_partitions_errored_total",
                   "Partitions given up (after their retries, or at once on a data error).",
                   L_STAGE},
    [C_RERUNS] = {SB_METRIC_COUNTER, "streambatch_stage_task_reruns_total",
                  "Task attempts run again, by cause: error (retries) or lost (recovery).",
                  L_STAGE_CAUSE},
    [C_SPECULATIVE] = {SB_METRIC_COUNTER, "streambatch_stage_speculative_copies_total",
                       "Copies of straggling tasks run on idle workers: started, and won "
                       "(finished before the original).",
                       L_STAGE_OUTCOME},
    [C_ROWS_OUT] = {SB_METRIC_COUNTER, "streambatch_stage_rows_out_total",
                    "Records the stage produced.", L_STAGE},
    [C_BYTES_OUT] = {SB_METRIC_COUNTER, "streambatch_stage_bytes_out_total",
                     "Bytes the stage produced.", L_STAGE},
    [C_QUEUED_BYTES] = {SB_METRIC_GAUGE, "streambatch_stage_queued_input_bytes",
                        "Bytes produced upstream that wait for this stage.", L_STAGE},
    [C_BACKPRESSURE] = {SB_METRIC_COUNTER, "streambatch_stage_backpressure_seconds_total",
                        "Time the stage had a task ready but the memory budget held it back.",
                        L_STAGE},
    [C_SPILLED] = {SB_METRIC_COUNTER, "streambatch_stage_op_spilled_bytes_total",
                   "Bytes the stage's ops wrote to their own spill files (groupby's and "
                   "random_shuffle's sorted runs).",
                   L_STAGE},
    [C_OUTSIDE] = {SB_METRIC_COUNTER, "streambatch_stage_inputs_outside_budget_bytes_total",
                   "Bytes of the stage's inputs too large for the room their worker's store "
                   "could make, read into memory outside the budget.",
                   L_STAGE},
    [C_MEM_USED] = {SB_METRIC_GAUGE, "streambatch_pipeline_memory_used_bytes",
                    "Bytes counted against the memory budget.", L_PIPE},
    [C_MEM_BUDGET] = {SB_METRIC_GAUGE, "streambatch_pipeline_memory_budget_bytes",
                      "The memory budget.", L_PIPE},
    [C_POOL_WORKERS] = {SB_METRIC_GAUGE, "streambatch_pool_workers",
                        "Workers of the pool by state: desired, ready, pending.", L_POOL_STATE},
    [C_DRAINED] = {SB_METRIC_COUNTER, "streambatch_pipeline_workers_drained_total",
                   "Workers drained as sick nodes (persistently far slower than their pool) "
                   "and replaced.",
                   L_PIPE},
    [C_PQ_ROW_GROUPS] = {SB_METRIC_COUNTER, "streambatch_pipeline_parquet_row_groups_total",
                         "Parquet source row groups the tasks read, and those a filter's "
                         "pushdown skipped (state: read, skipped).",
                         L_PIPE_STATE},
    [C_PQ_PAGES] = {SB_METRIC_COUNTER, "streambatch_pipeline_parquet_pages_total",
                    "Parquet source pages of the row groups read that the tasks fetched through "
                    "the page index, and those it let them skip (state: read, skipped).",
                    L_PIPE_STATE},
    [C_PQ_BYTES] = {SB_METRIC_COUNTER, "streambatch_pipeline_parquet_source_bytes_total",
                    "Parquet source bytes fetched, and the column chunk bytes that pushdown "
                    "skipped (state: read, skipped).",
                    L_PIPE_STATE},
    [C_RANK_BATCH] = {SB_METRIC_GAUGE, "streambatch_stream_rank_batch_rows",
                      "A stream's trainer rank: its batch size in the latest iteration (LB-BSP "
                      "sizes it by the rank's speed; else the batch_size asked).",
                      L_RANK},
    [C_RANK_STEP] = {SB_METRIC_GAUGE, "streambatch_stream_rank_step_seconds",
                     "A stream's trainer rank: its latest reported training step time.", L_RANK},
    [C_RANK_HELD] = {SB_METRIC_GAUGE, "streambatch_stream_rank_held_bytes",
                     "A stream's trainer rank: bytes of the partitions it has a slice open of "
                     "(dealt ahead or not acknowledged), held to its share of the budget.",
                     L_RANK},
    [C_STREAM_WAITING] = {SB_METRIC_GAUGE, "streambatch_stream_partitions_waiting",
                          "A stream's partitions made and not yet dealt to a rank, by the worker "
                          "holding them (the backlog a slow trainer leaves).",
                          L_WORKER},
};

struct sb_cmetrics {
    sb_metric *f[NALL];
    int workers;
};

sb_cmetrics *sb_cmetrics_new(sb_metrics *reg, int worker_families, sb_err *err)
{
    sb_cmetrics *m = calloc(1, sizeof *m);
    if (m == NULL) {
        sb_err_set(err, "controller metrics: out of memory");
        return NULL;
    }
    m->workers = worker_families;
    if (worker_families && sb_metrics_add_worker_families(reg, m->f + NC, err) != 0) {
        free(m);
        return NULL;
    }
    for (int i = 0; i < NC; i++) {
        int h = defs[i].type == SB_METRIC_HISTOGRAM;
        m->f[i] = sb_metrics_add(reg, defs[i].type, defs[i].name, defs[i].help,
                                 labelsets[defs[i].labels], h ? sb_metrics_task_buckets : NULL,
                                 h ? sb_metrics_task_nbuckets : 0, err);
        if (m->f[i] == NULL) {
            free(m);
            return NULL;
        }
    }
    return m;
}

void sb_cmetrics_free(sb_cmetrics *m)
{
    free(m);
}

void sb_cmetrics_clear(sb_cmetrics *m)
{
    for (int i = 0; i < NALL; i++)
        sb_metric_clear(m->f[i]);
}

static void stage_figures(sb_cmetrics *m, const char *ns, const char *pl,
                          const sb_sched_group_stats *o)
{
    const char *st = o->name ? o->name : "";
    const char *const v[] = {ns, pl, st};
    static const char *const states[] = {"total", "committed", "running", "queued"};
    const uint64_t counts[] = {o->tasks_total, o->tasks_done, o->tasks_running, o->tasks_queued};
    for (size_t k = 0; k < 4; k++)
        sb_metric_set(m->f[C_PARTITIONS], (const char *const[]){ns, pl, st, states[k]},
                      (double)counts[k]);
    sb_metric_set(m->f[C_RECOVERED], v, (double)o->recovered);
    sb_metric_set(m->f[C_ERRORED], v, (double)o->errored);
    sb_metric_set(m->f[C_RERUNS], (const char *const[]){ns, pl, st, "error"}, (double)o->retries);
    sb_metric_set(m->f[C_RERUNS], (const char *const[]){ns, pl, st, "lost"}, (double)o->recovered);
    sb_metric_set(m->f[C_SPECULATIVE], (const char *const[]){ns, pl, st, "started"},
                  (double)o->speculated);
    sb_metric_set(m->f[C_SPECULATIVE], (const char *const[]){ns, pl, st, "won"},
                  (double)o->spec_won);
    sb_metric_set(m->f[C_ROWS_OUT], v, (double)o->rows_out);
    sb_metric_set(m->f[C_BYTES_OUT], v, (double)o->bytes_out);
    sb_metric_set(m->f[C_QUEUED_BYTES], v, (double)o->queued_input_bytes);
    sb_metric_set(m->f[C_BACKPRESSURE], v, o->backpressure_seconds);
    sb_metric_set(m->f[C_SPILLED], v, (double)o->spilled_bytes);
    sb_metric_set(m->f[C_OUTSIDE], v, (double)o->outside_bytes);
    if (!m->workers)
        return;
    const char *pool = o->pool ? o->pool : "";
    const char *const w[] = {ns, pl, pool, st};
    uint64_t finished = o->tasks_done > o->resumed ? o->tasks_done - o->resumed : 0;
    sb_metric_set(m->f[NC + SB_WF_TASKS_STARTED], w, (double)o->attempts);
    sb_metric_set(m->f[NC + SB_WF_TASKS_FINISHED], w, (double)finished);
    sb_metric_set(m->f[NC + SB_WF_TASKS_FAILED], w, (double)o->failed_attempts);
    sb_metric_set(m->f[NC + SB_WF_ROWS_IN], w, (double)o->rows_in);
    sb_metric_set(m->f[NC + SB_WF_BYTES_IN], w, (double)o->bytes_in);
    sb_metric_set(m->f[NC + SB_WF_ROWS_OUT], w, (double)o->rows_out);
    sb_metric_set(m->f[NC + SB_WF_BYTES_OUT], w, (double)o->bytes_out);
    sb_metric_set_histogram(m->f[NC + SB_WF_DURATION], w, o->duration_buckets,
                            SB_SCHED_DURATION_BUCKETS, o->timed_tasks, o->task_seconds);
}

void sb_cmetrics_add(sb_cmetrics *m, const char *namespace_, const char *pipeline,
                     const sb_ctl_snapshot *s, const sb_cmetrics_pool *pools, size_t npools)
{
    const char *ns = namespace_ && *namespace_ ? namespace_ : "default";
    const char *pl = pipeline ? pipeline : "";
    const char *const v[] = {ns, pl};
    for (size_t i = 0; i < s->nops; i++)
        stage_figures(m, ns, pl, &s->ops[i]);
    sb_metric_set(m->f[C_MEM_USED], v, (double)s->stats.in_flight_bytes);
    sb_metric_set(m->f[C_MEM_BUDGET], v, (double)s->stats.budget);
    sb_metric_set(m->f[C_DRAINED], v, (double)s->stats.workers_drained);
    if (s->stats.row_groups_read + s->stats.row_groups_skipped > 0) { /* a parquet source */
        const char *const r[] = {ns, pl, "read"}, *const k[] = {ns, pl, "skipped"};
        sb_metric_set(m->f[C_PQ_ROW_GROUPS], r, (double)s->stats.row_groups_read);
        sb_metric_set(m->f[C_PQ_ROW_GROUPS], k, (double)s->stats.row_groups_skipped);
        sb_metric_set(m->f[C_PQ_PAGES], r, (double)s->stats.pages_read);
        sb_metric_set(m->f[C_PQ_PAGES], k, (double)s->stats.pages_skipped);
        sb_metric_set(m->f[C_PQ_BYTES], r, (double)s->stats.source_bytes_read);
        sb_metric_set(m->f[C_PQ_BYTES], k, (double)s->stats.source_bytes_skipped);
    }
    for (size_t i = 0; i < s->nranks; i++) {
        char rank[16];
        snprintf(rank, sizeof rank, "%u", s->ranks[i].rank);
        const char *const r[] = {ns, pl, rank};
        sb_metric_set(m->f[C_RANK_BATCH], r, (double)s->ranks[i].batch_rows);
        sb_metric_set(m->f[C_RANK_STEP], r, s->ranks[i].step_seconds);
        sb_metric_set(m->f[C_RANK_HELD], r, (double)s->ranks[i].held_bytes);
    }
    for (size_t i = 0; i < s->nholders; i++) {
        const char *const w[] = {ns, pl, s->holders[i].worker_id};
        sb_metric_set(m->f[C_STREAM_WAITING], w, (double)s->holders[i].parts);
    }
    for (size_t i = 0; i < npools; i++) {
        static const char *const states[] = {"desired", "ready", "pending"};
        const uint64_t n[] = {pools[i].desired, pools[i].ready, pools[i].pending};
        for (size_t k = 0; k < 3; k++)
            sb_metric_set(m->f[C_POOL_WORKERS],
                          (const char *const[]){ns, pl, pools[i].pool, states[k]}, (double)n[k]);
    }
    if (!m->workers)
        return;
    for (size_t i = 0; i < s->npools; i++) {
        const sb_ctl_pool_figures *p = &s->pools[i];
        const char *const w[] = {ns, pl, p->pool};
        sb_metric_set(m->f[NC + SB_WF_STORE_MEMORY], w, (double)p->sum.store_memory_bytes);
        sb_metric_set(m->f[NC + SB_WF_STORE_SPILLED], w, (double)p->sum.store_spilled_bytes);
        sb_metric_set(m->f[NC + SB_WF_SPILL_TOTAL], w, (double)p->sum.spill_bytes_total);
        sb_metric_set(m->f[NC + SB_WF_FETCH_BYTES], w, (double)p->sum.fetch_bytes_total);
        sb_metric_set(m->f[NC + SB_WF_FETCH_ERRORS], w, (double)p->sum.fetch_errors_total);
        sb_metric_set(m->f[NC + SB_WF_ACCELERATOR], w, p->sum.accelerator_seconds);
        sb_metric_set(m->f[NC + SB_WF_CPU], w, p->sum.cpu_seconds);
        sb_metric_set(m->f[NC + SB_WF_RSS], w, (double)p->sum.rss_bytes);
        sb_metric_set(m->f[NC + SB_WF_WORKERS], w, (double)p->workers);
    }
}
