/* test_rpc_bench.c — throughput of one Data.Fetch-style stream over loopback: 64 MiB in 1 MiB
 * chunks, received into one destination buffer, three ways:
 *   raw      plain TCP (send 1 MiB writes, recv straight into the destination): the ceiling;
 *   zerocopy lib/rpc: the chunk header + the caller's payload (not copied) + trailer, received
 *            as slices and copied once into place (sb_rpc_chunk_parse + copy_data);
 *   packed   the naive way: protobuf-c packs each chunk (a copy), the receiver flattens the
 *            message (a copy), protobuf-c unpacks it (a copy) and the data is copied into place.
 * Every run checks the destination byte for byte and that every pinned payload came back. The
 * best of 5 runs is reported on stderr ("rpc-bench: ...") with the CPU seconds (client + server,
 * user + system) and page faults per GiB. Speeds are reported, not asserted: on a shared 2-core
 * machine wall-clock ratios swing by 2x between runs. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rpc/chunkmsg.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"

#define CHUNK (1024u * 1024u)
#define TOTAL (64u * CHUNK)
#define NCHUNK (TOTAL / CHUNK)
#define RUNS 5
#define M_BENCH "/test.Bench/Fetch"

static uint8_t *g_src;
static uint32_t g_crc[NCHUNK];
static atomic_long g_unpinned;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* CPU seconds (user + system, all threads: client and server live in this process). */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static double gibps(double secs)
{
    return (double)TOTAL / secs / (1024.0 * 1024.0 * 1024.0);
}

static void src_init(void)
{
    if (g_src)
        return;
    g_src = malloc(TOTAL);
    for (size_t i = 0; i < TOTAL; i += 8) {
        uint64_t v = i * 0x9e3779b97f4a7c15ull;
        memcpy(g_src + i, &v, 8);
    }
    for (size_t k = 0; k < NCHUNK; k++) /* any value: the receiver does not verify here */
        g_crc[k] = (uint32_t)(k * 2654435761u) | 1u;
}

/* ------------------------------------------------------------------------------ raw TCP */

typedef struct raw_tx {
    int fd;
} raw_tx;

static void *raw_send(void *arg)
{
    raw_tx *t = arg;
    for (size_t off = 0; off < TOTAL;) {
        ssize_t n = send(t->fd, g_src + off, CHUNK - (off % CHUNK), 0);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    return NULL;
}

static double run_raw(uint8_t *dst)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    cr_assert_eq(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(ls, 1), 0);
    cr_assert_eq(getsockname(ls, (struct sockaddr *)&a, &l), 0);
    int cs = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(connect(cs, (struct sockaddr *)&a, sizeof a), 0);
    int ss = accept(ls, NULL, NULL);
    cr_assert_geq(ss, 0);
    raw_tx t = {.fd = ss};
    double t0 = now_s();
    pthread_t th;
    pthread_create(&th, NULL, raw_send, &t);
    size_t got = 0;
    while (got < TOTAL) {
        ssize_t n = recv(cs, dst + got, TOTAL - got, 0);
        cr_assert_gt(n, 0);
        got += (size_t)n;
    }
    double dt = now_s() - t0;
    pthread_join(th, NULL);
    close(cs);
    close(ss);
    close(ls);
    return dt;
}

/* ------------------------------------------------------------------------------ gRPC */

typedef struct bctx {
    sb_rpc_call *call;
    uint32_t k;
    int packed;
} bctx;

static void unpin_count(void *ud)
{
    (void)ud;
    atomic_fetch_add(&g_unpinned, 1);
}

static void unpin_free(void *ud)
{
    free(ud);
    atomic_fetch_add(&g_unpinned, 1);
}

static void bench_ready(sb_rpc_call *call, void *ud)
{
    bctx *b = ud;
    sb_err err;
    if (b->k == NCHUNK) {
        sb_rpc_call_finish(call, SB_RPC_OK, NULL);
        free(b);
        return;
    }
    const uint8_t *data = g_src + (size_t)b->k * CHUNK;
    int rc;
    if (b->packed) {
        Streambatch__V1__Chunk c = STREAMBATCH__V1__CHUNK__INIT;
        c.offset = (uint64_t)b->k * CHUNK;
        c.data.data = (uint8_t *)data;
        c.data.len = CHUNK;
        c.crc32c = g_crc[b->k];
        c.total_length = TOTAL;
        size_t n = streambatch__v1__chunk__get_packed_size(&c);
        uint8_t *buf = malloc(n);
        streambatch__v1__chunk__pack(&c, buf);
        sb_rpc_zc_msg m = {.payload = buf, .payload_len = n, .unpin = unpin_free, .unpin_ud = buf};
        rc = sb_rpc_stream_write_zc(call, &m, &err);
    } else {
        rc = sb_rpc_stream_write_chunk(call, (uint64_t)b->k * CHUNK, data, CHUNK, g_crc[b->k],
                                       TOTAL, unpin_count, NULL, &err);
    }
    if (rc < 0) {
        sb_rpc_call_finish(call, SB_RPC_CANCELLED, "%s", err.msg);
        free(b);
        return;
    }
    b->k++;
}

static void h_bench(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    bctx *b = calloc(1, sizeof *b);
    b->call = call;
    b->packed = len == 1 && req[0] == 'p';
    sb_rpc_stream_set_ready_cb(call, bench_ready, b);
}

static double run_grpc(sb_rpc_channel *ch, int packed, uint8_t *dst)
{
    sb_err err;
    uint8_t *flat = packed ? malloc(CHUNK + 64) : NULL;
    double t0 = now_s();
    sb_rpc_reader *r = sb_rpc_stream_open(ch, M_BENCH, packed ? "p" : "z", 1, 60000, 0, &err);
    cr_assert_not_null(r, "%s", err.msg);
    const sb_rpc_piece *pc;
    size_t np, len;
    int rc;
    uint32_t k = 0;
    while ((rc = sb_rpc_reader_next(r, &pc, &np, &len, &err)) == 1) {
        if (packed) {
            cr_assert_leq(len, CHUNK + 64);
            sb_rpc_pieces_copy(pc, np, flat);
            Streambatch__V1__Chunk *c = streambatch__v1__chunk__unpack(NULL, len, flat);
            cr_assert_not_null(c);
            cr_assert_eq(c->offset, (uint64_t)k * CHUNK);
            memcpy(dst + c->offset, c->data.data, c->data.len);
            streambatch__v1__chunk__free_unpacked(c, NULL);
        } else {
            sb_rpc_chunk c;
            cr_assert_eq(sb_rpc_chunk_parse(pc, np, &c, &err), 0, "%s", err.msg);
            cr_assert_eq(c.offset, (uint64_t)k * CHUNK);
            cr_assert_eq(c.crc32c, g_crc[k]);
            cr_assert_eq(sb_rpc_chunk_copy_data(pc, np, &c, dst + c.offset, TOTAL - c.offset, &err),
                         0);
        }
        k++;
    }
    double dt = now_s() - t0;
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(k, NCHUNK);
    sb_rpc_reader_close(r);
    free(flat);
    return dt;
}

/* SB_RPC_BENCH_WAYS=raw,zc,packed (default all) picks the variants, e.g. for profiling. */
static int way_wanted(int way)
{
    static const char *names[] = {"raw", "zc", "packed"};
    const char *w = getenv("SB_RPC_BENCH_WAYS");
    return !w || strstr(w, names[way]) != NULL;
}

Test(rpc_bench, loopback_64MiB_of_1MiB_chunks)
{
    /* as a worker does at startup (SB_RPC_BENCH_NO_TUNE=1 measures glibc's defaults) */
    if (!getenv("SB_RPC_BENCH_NO_TUNE") && sb_rpc_tune_malloc(0) < 0)
        /* not cr_log_warn: Criterion 2.4.1 then exits 1 although every test passed */
        fprintf(stderr, "note: malloc tuning refused (sanitizer allocator?)\n");
    src_init();
    uint8_t *dst = malloc(TOTAL);
    double best[3] = {1e9, 1e9, 1e9}, cpu[3] = {1e9, 1e9, 1e9};
    long faults[3] = {0, 0, 0};
    sb_err err;
    sb_rpc_server *srv = sb_rpc_server_new(NULL, &err);
    cr_assert_not_null(srv, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_add_stream(srv, M_BENCH, h_bench, NULL, &err), 0);
    int port = sb_rpc_server_listen(srv, "127.0.0.1:0", &err);
    cr_assert_gt(port, 0, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_start(srv, &err), 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    sb_rpc_channel *ch = sb_rpc_channel_new(target, NULL, &err);
    cr_assert_eq(sb_rpc_channel_wait_ready(ch, 10000, &err), 0, "%s", err.msg);
    /* warm the connection (HTTP/2 windows grow with use) and the buffers */
    memset(dst, 0, TOTAL);
    run_grpc(ch, 0, dst);
    for (int run = 0; run < RUNS; run++) {
        for (int way = 0; way < 3; way++) {
            if (!way_wanted(way))
                continue;
            memset(dst, 0, TOTAL);
            double c0 = cpu_s();
            long f0 = minflt();
            double dt = way == 0 ? run_raw(dst) : run_grpc(ch, way == 2, dst);
            double dc = cpu_s() - c0;
            faults[way] += minflt() - f0;
            cr_assert(memcmp(dst, g_src, TOTAL) == 0, "way %d: destination differs", way);
            if (dt < best[way])
                best[way] = dt;
            if (dc < cpu[way])
                cpu[way] = dc;
        }
    }
    sb_rpc_channel_free(ch);
    sb_rpc_server_free(srv);
    /* every payload handed to gRPC came back */
    long streams = 1 + RUNS * (way_wanted(1) + way_wanted(2));
    cr_assert_eq(atomic_load(&g_unpinned), streams * NCHUNK);
    static const char *label[] = {"raw TCP", "zero-copy", "protobuf-c packed"};
    char line[512];
    int at = snprintf(line, sizeof line,
                      "rpc-bench: 64 MiB in 1 MiB chunks over loopback, best of %d:", RUNS);
    for (int w = 0; w < 3; w++) {
        if (!way_wanted(w))
            continue;
        at += snprintf(line + at, sizeof line - (size_t)at, " %s %.2f GiB/s", label[w],
                       gibps(best[w]));
        if (w > 0 && way_wanted(0))
            at +=
                snprintf(line + at, sizeof line - (size_t)at, " (%.2f of raw)", best[0] / best[w]);
        at += snprintf(line + at, sizeof line - (size_t)at, " [%.2f CPU-s/GiB, %ld faults/GiB]%s",
                       cpu[w] * 16, faults[w] * 16 / RUNS, w < 2 ? "," : "");
    }
    fprintf(stderr, "%s\n", line);
    cr_log_info("%s", line + 11);
    free(dst);
}
