/* bench_sched — the scheduler core's own overhead: tasks assigned and completed per second with
 * no work in them (two ops, so partitions move through the lineage table; or one, source ->
 * sink, as bench_ctl_load runs), in one thread, and the lineage table's memory per partition
 * made at the end (sb_sched_memory_get). Prints one JSON line. Usage: bench_sched [tasks] [ops] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/sched/sched.h"
#include "doc/doc.h"
#include "spec/pipeline.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 100000;
    int ops = argc > 2 ? atoi(argv[2]) : 2;
    if (n == 0 || (ops != 1 && ops != 2)) {
        fprintf(stderr, "usage: bench_sched [tasks > 0] [ops: 1 or 2]\n");
        return 2;
    }
    const char *y =
        ops == 2 ? "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: b}\n"
                   "spec:\n  source: {uri: 'file:///in', format: text, partitionSize: 1Ki}\n"
                   "  stages:\n  - {name: a, op: identity}\n"
                   "  - {name: g, op: identity, resources: {gpu: 1}}\n"
                   "  sink: {uri: 'file:///out', format: text}\n"
                   "  execution: {memoryBudget: 1Gi}\n"
                 : "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: b}\n"
                   "spec:\n  source: {uri: 'file:///in', format: text, partitionSize: 1Ki}\n"
                   "  stages:\n  - {name: a, op: identity}\n"
                   "  sink: {uri: 'file:///out', format: text}\n"
                   "  execution: {memoryBudget: 1Gi}\n";
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    sb_pipeline p;
    sb_diags dg = {0};
    sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg);
    sb_storage_split *sp = calloc(n, sizeof *sp);
    char(*names)[64] = calloc(n, 64);
    for (size_t i = 0; i < n; i++) { /* as lib/io encodes a file's split (offset, size, path) */
        snprintf(names[i], 64, "0\t1024\t1024\t/in/f%07zu.txt", i);
        sp[i].split = names[i];
        sp[i].bytes = 1024;
    }
    sb_sched_config cfg = {.pipeline = &p, .pipeline_id = "bench"};
    sb_err err;
    double t0 = now_s(), c0 = cpu_s();
    sb_sched *s = sb_sched_new(&cfg, sp, n, &err);
    if (s == NULL) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    sb_sched_worker_add(s, "c", "cpu", "127.0.0.1:1", 8, NULL, 0, 0, NULL);
    sb_sched_worker_add(s, "g", "gpu", "127.0.0.1:2", 8, NULL, 0, 0, NULL);
    sb_sched_task t[8];
    uint64_t done = 0, now = 1;
    char id[64];
    while (sb_sched_state_get(s, NULL) == SB_SCHED_RUNNING) {
        const char *ws[2] = {"c", "g"};
        size_t progressed = 0;
        for (int w = 0; w < 2; w++) {
            size_t k = sb_sched_assign(s, ws[w], 8, now, t);
            char tids[8][64];
            uint32_t att[8], op[8];
            uint64_t idx[8];
            for (size_t i = 0; i < k; i++) {
                snprintf(tids[i], 64, "%s", t[i].task_id);
                att[i] = t[i].attempt;
                op[i] = t[i].op;
                idx[i] = t[i].index;
            }
            for (size_t i = 0; i < k; i++) {
                snprintf(id, sizeof id, "s%u-t%" PRIu64 "-p0", op[i], idx[i]);
                sb_storage_output o = {.id = id, .bytes = 1024, .rows = 10};
                sb_sched_complete(s, ws[w], tids[i], att[i], SB_SCHED_OK, NULL, &o, 1, NULL, 0,
                                  NULL, now, NULL);
                char **rel;
                size_t nr = sb_sched_take_releases(s, ws[w], &rel);
                for (size_t r = 0; r < nr; r++)
                    free(rel[r]);
                free(rel);
                done++;
            }
            progressed += k;
            now++;
        }
        if (progressed == 0)
            break;
    }
    double wall = now_s() - t0, cpu = cpu_s() - c0;
    sb_sched_memory m;
    sb_sched_memory_get(s, &m);
    /* one checkpoint of the finished lineage (what each status or checkpoint write computes,
     * under the controller's lock) */
    double k0 = now_s();
    char *ranges = NULL;
    sb_storage_output *cparts = NULL;
    size_t ncparts = 0;
    int ck = sb_sched_checkpoint(s, &ranges, &cparts, &ncparts, &err);
    double ck_ms = (now_s() - k0) * 1e3;
    free(ranges);
    sb_sched_parts_free(cparts, ncparts);
    double parts = (double)(m.parts + m.sink_parts);
    printf("{\"tasks\": %" PRIu64 ", \"seconds\": %.4f, \"tasksPerSecond\": %.0f, "
           "\"cpuMicrosPerTask\": %.2f, \"state\": %d, \"partitions\": %.0f, "
           "\"lineageBytesPerPartition\": %.1f, \"perPartition\": {\"tasks\": %.1f, "
           "\"parts\": %.1f, \"sink\": %.1f, \"maps\": %.1f, \"splits\": %.1f}, "
           "\"checkpointMs\": %.1f, \"checkpointParts\": %zu}\n",
           done, wall, (double)done / wall, cpu * 1e6 / (double)done,
           (int)sb_sched_state_get(s, NULL), parts, (double)m.total_bytes / parts,
           (double)m.task_bytes / parts, (double)m.part_bytes / parts, (double)m.sink_bytes / parts,
           (double)m.map_bytes / parts, (double)m.split_bytes / parts, ck == 0 ? ck_ms : -1.0,
           ncparts);
    sb_sched_free(s);
    free(sp);
    free(names);
    sb_pipeline_free(&p);
    sb_diags_free(&dg);
    sb_doc_free(d);
    return 0;
}
