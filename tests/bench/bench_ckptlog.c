/* bench_ckptlog — the checkpoint log's write cost (issue 38): N sink parts (one a split, as
 * one-record input files make) committed in batches, each batch one sb_ckptlog_update with every
 * part committed so far, as the local driver and the operator call it (the operator once a
 * second). Prints the bytes written per committed part against the bytes of the log's own lines,
 * the writes and compactions, the seconds, then a read back and a resumed writer's first write.
 * Usage: bench_ckptlog [parts] [batch] [dir] (defaults 200000, 1000, /dev/shm/...). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller/ctl/ckptlog.h"
#include "controller/sched/sched.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, const sb_err *err)
{
    fprintf(stderr, "bench_ckptlog: %s: %s\n", what, err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    size_t batch = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000;
    char dir[512];
    if (argc > 3)
        snprintf(dir, sizeof dir, "%s", argv[3]);
    else
        snprintf(dir, sizeof dir, "/dev/shm/sb-bench-ckptlog-%d/_streambatch/checkpoint",
                 (int)getpid());
    if (n == 0 || batch == 0)
        return 2;
    sb_storage_output *parts = calloc(n, sizeof *parts);
    char(*ids)[32] = calloc(n, sizeof *ids);
    if (parts == NULL || ids == NULL)
        return 1;
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "s1-t%zu-p0-%08" PRIx32, i, (uint32_t)(i * 2654435761u));
        parts[i] = (sb_storage_output){
            .id = ids[i], .rows = 1, .bytes = 40 + i % 50, .crc32c = (uint32_t)(i * 40503u)};
    }
    sb_ckptlog w;
    sb_err err = {0};
    if (sb_ckptlog_init(&w, dir, NULL, 0, "0123456789abcdef", &err) != 0)
        return fail("init", &err);
    double t0 = now_s();
    uint32_t compactions = 0;
    char ranges[64];
    for (size_t done = 0; done < n;) {
        done = done + batch < n ? done + batch : n;
        snprintf(ranges, sizeof ranges, "0-%zu", done - 1);
        uint32_t gen = w.sum.generation;
        int wrote = 0;
        if (sb_ckptlog_update(&w, "fedcba9876543210", n, ranges, parts, done, &wrote, &err) != 0)
            return fail("update", &err);
        compactions += w.sum.generation != gen;
    }
    double t_write = now_s() - t0;
    uint64_t log_bytes = w.base_bytes + w.seg_bytes;
    printf("parts %zu, batch %zu: %" PRIu64 " writes (%u compactions, final %u segments), %" PRIu64
           " bytes written = %.1f B per committed part; the log itself %" PRIu64
           " bytes = %.1f B per part; %.2f s in updates (%.2f s encoding and writing)\n",
           n, batch, w.writes, compactions, w.sum.segments, w.bytes, (double)w.bytes / (double)n,
           log_bytes, (double)log_bytes / (double)n, t_write, w.seconds);
    sb_ckptlog_summary sum = w.sum, found;
    uint64_t written = w.bytes, writes = w.writes;
    sb_ckptlog_free(&w);
    sb_ckpt c;
    t0 = now_s();
    if (sb_ckptlog_load(&sum, &c, &found, &err) != 0)
        return fail("load", &err);
    double t_load = now_s() - t0;
    if (c.nparts != n || c.ncommitted != n) {
        fprintf(stderr, "bench_ckptlog: read back %zu parts, %zu splits of %zu\n", c.nparts,
                c.ncommitted, n);
        return 1;
    }
    /* a resumed run continues the log it read (its first write appends) */
    if (sb_ckptlog_init(&w, dir, found.id, 1, "0123456789abcdef", &err) != 0 ||
        sb_ckptlog_continue(&w, &found, &c, &err) != 0)
        return fail("continue", &err);
    sb_ckpt_free(&c);
    printf("read back %zu parts exactly in %.2f s; a resumed writer continues generation %u\n", n,
           t_load, w.sum.generation);
    printf("{\"bench\": \"ckptlog\", \"parts\": %zu, \"batch\": %zu, \"writes\": %" PRIu64
           ", \"compactions\": %u, \"bytesPerPart\": %.1f, \"logBytesPerPart\": %.1f, "
           "\"writeSeconds\": %.2f, \"loadSeconds\": %.2f}\n",
           n, batch, writes, compactions, (double)written / (double)n,
           (double)log_bytes / (double)n, t_write, t_load);
    sb_ckptlog_free(&w);
    if (argc <= 3) { /* the log, its _streambatch, then the directory made for it */
        (void)sb_ckptlog_remove(dir, &err);
        *strstr(dir, "/_streambatch") = '\0';
        (void)rmdir(dir);
    }
    free(parts);
    free(ids);
    return 0;
}
