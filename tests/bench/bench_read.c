/* bench_read — a pipeline source's read path alone, for scripts/bench-storage.sh.
 *
 *   bench_read URI FORMAT PARTITION_BYTES THREADS [CHUNK_BYTES]
 *
 * Plans the source's splits exactly as the controller does (sb_io_plan_splits) and reads them
 * with the worker's reader (sb_io_read_split: ranged streamed reads through the storage layer,
 * line ownership, UTF-8 checks, partition building) on THREADS threads, each taking the next
 * split, as THREADS one-slot workers would (malloc tuned as in the worker process); the
 * partitions are freed as they are emitted. What
 * is left out of a whole run is process start-up, the scheduler and the ops: this is the figure
 * to set beside `curl` downloading the same object.
 *
 * Output: one line "RESULT read bytes=N rows=N splits=N seconds=S cpu_seconds=C" on stdout;
 * exit status 1 with the error on stderr on any failure.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "io/reader.h"
#include "io/split.h"
#include "partition/partition.h"
#include "rpc/rpc.h"

typedef struct {
    sb_io_split *splits;
    size_t n;
    sb_format fmt;
    size_t target;
    size_t chunk; /* 0: sealed partitions of `target` (sb_io_read_split) */
    atomic_size_t next;
    atomic_uint_fast64_t rows;
    atomic_int failed;
} job;

static int discard(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)len;
    job *j = ud;
    atomic_fetch_add(&j->rows, rows);
    sb_part_free(blob);
    return 0;
}

static void *worker(void *arg)
{
    job *j = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n || atomic_load(&j->failed))
            return NULL;
        sb_err err = {0};
        int rc = j->chunk
                     ? sb_io_read_splits_chunked(&j->splits[i], 1, j->fmt, NULL, j->target,
                                                 j->chunk, discard, j, &err)
                     : sb_io_read_split(&j->splits[i], j->fmt, NULL, j->target, discard, j, &err);
        if (rc != 0) {
            fprintf(stderr, "bench_read: %s\n", err.msg);
            atomic_store(&j->failed, 1);
            return NULL;
        }
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: bench_read URI FORMAT PARTITION_BYTES THREADS [CHUNK_BYTES]\n");
        return 2;
    }
    int fmt = -1;
    for (int i = 0; sb_format_names[i] != NULL; i++)
        if (strcmp(sb_format_names[i], argv[2]) == 0)
            fmt = i;
    if (fmt < 0) {
        fprintf(stderr, "bench_read: unknown format \"%s\"\n", argv[2]);
        return 2;
    }
    long long psize = atoll(argv[3]);
    int threads = atoi(argv[4]);
    long long chunk = argc == 6 ? atoll(argv[5]) : 0;
    if (psize <= 0 || threads <= 0 || threads > 64 || chunk < 0) {
        fprintf(stderr, "bench_read: bad partition size or thread count\n");
        return 2;
    }
    sb_rpc_tune_malloc(0); /* as the worker process does */
    sb_source_spec src = {.uri = argv[1], .format = (sb_format)fmt, .partition_size = psize};
    job j = {.fmt = (sb_format)fmt, .target = (size_t)psize, .chunk = (size_t)chunk};
    sb_err err = {0};
    double t0 = now(), c0 = cpu();
    if (sb_io_plan_splits(&src, &j.splits, &j.n, &err) != 0) {
        fprintf(stderr, "bench_read: %s\n", err.msg);
        return 1;
    }
    pthread_t tid[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, worker, &j);
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    double secs = now() - t0, cs = cpu() - c0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < j.n; i++)
        bytes += j.splits[i].end - j.splits[i].start;
    sb_io_splits_free(j.splits, j.n);
    if (atomic_load(&j.failed))
        return 1;
    printf("RESULT read bytes=%" PRIu64 " rows=%" PRIu64
           " splits=%zu seconds=%.3f cpu_seconds=%.3f\n",
           bytes, (uint64_t)atomic_load(&j.rows), j.n, secs, cs);
    return 0;
}
