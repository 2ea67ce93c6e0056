/* test_data_rpc.c — what worker/data needs from lib/rpc, as regression tests. Found while building
 * worker/data (issue 3):
 *
 *  1. A graceful sb_rpc_server_shutdown() cut off the tail of a stream whose client was still
 *     reading: once the last call had finished on the server side (its last message accepted by
 *     flow control, not yet read by the client), the connection was torn down and the client got
 *     "UNAVAILABLE: Broken pipe" with the last chunk(s) lost — in about half the rounds of 8 slow
 *     readers. e26ce35 added a linger after the last stream ended, but after gRPC's own graceful
 *     shutdown, which had already closed every connection whose streams were done (its
 *     notification comes only once they are all closed): on a loaded machine a reader whose
 *     transport had not yet drained its socket still lost the tail to a reset ("recvmsg:
 *     Connection reset by peer"). lib/rpc now drains (new calls refused), lingers with the
 *     connections up, and only then shuts gRPC down: the_connections_stay_up_through_the_linger
 *     failed before (the connection was gone 300 ms into a 3 s linger, every run), and
 *     graceful_shutdown_delivers_the_tail_to_slow_readers (five rounds, no
 *     sb_data_server_drain) failed in up to 7 runs of 30 on a loaded machine (busy loops and
 *     compiles beside it; 0 of 200 after). Every wait of these tests is bounded (the shutdown
 *     runs in a thread joined with a time limit), so a shutdown that hangs fails the test with
 *     what was still running instead of reaching Criterion's timeout.
 *
 *  2. sb_rpc_call_finish() from a thread of the application (worker/data ends NOT_FOUND and
 *     OUT_OF_RANGE calls from its I/O threads) reads the call after dropping its reference: in
 *     lib/rpc/rpcserver.c call_unref_locked() looks at c->m after unlocking, when the status batch
 * may already have completed on a server thread and freed the call (a heap-use-after-free under
 *     ASan, since e26ce35). Only the sanitizer and valgrind builds can see it: the test makes
 *     thousands of such calls.
 *
 * The tests use an in-process store + worker/data server on 127.0.0.1. */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "partition/partition.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"
#include "streambatch.pb-c.h"
#include "worker/data/fetch.h"
#include "worker/data/service.h"
#include "worker/store/store.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

/* One timeout for the suite (per-test ones make Criterion 2.4.1 leak under --jobs 2: see
 * test_data.c), well under the runner's 180 s: the slowest test takes ~12 s (~20 s under ASan),
 * and the shutdown tests' own bounded waits fail first, with a message, when one hangs. */
TestSuite(data_rpc, .timeout = 90);

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* pthread_join() for at most ms milliseconds: 0, or ETIMEDOUT (the thread keeps running). */
static int join_within(pthread_t th, int ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    return pthread_timedjoin_np(th, NULL, &dl);
}

typedef struct srv {
    sb_store *store;
    sb_data_server *ds;
    sb_rpc_server *rpc;
    char addr[64];
    char spill[64];
} srv;

/* One in-memory partition "s7-t0-p0" of about `bytes` bytes. */
static void srv_start(srv *s, size_t bytes)
{
    memset(s, 0, sizeof *s);
    sb_test_tmpl(s->spill, sizeof s->spill, "test_data_rpc");
    cr_assert_not_null(mkdtemp(s->spill));
    sb_err err;
    sb_store_config cfg = {.memory_budget = bytes + MIB, .spill_dir = s->spill};
    cr_assert_eq(sb_store_open(&cfg, &s->store, &err), 0, "%s", err.msg);
    sb_field f = {.name = "v", .type = SB_TYPE_INT64};
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &err);
    size_t rows = (bytes - 256) / 8;
    int64_t *v = calloc(rows, sizeof *v);
    cr_assert_eq(sb_batch_builder_append_values(b, 0, v, rows, NULL, &err), 0, "%s", err.msg);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    free(v);
    sb_batch_builder_free(b);
    cr_assert_eq(sb_store_put(s->store, "s7-t0-p0", blob, len, NULL, &err), 0, "%s", err.msg);
    sb_data_server_config dc = {.store = s->store};
    cr_assert_eq(sb_data_server_new(&dc, &s->ds, &err), 0, "%s", err.msg);
    s->rpc = sb_rpc_server_new(NULL, &err);
    cr_assert_not_null(s->rpc, "%s", err.msg);
    cr_assert_eq(sb_data_server_register(s->ds, s->rpc, &err), 0, "%s", err.msg);
    int port = sb_rpc_server_listen(s->rpc, "127.0.0.1:0", &err);
    cr_assert_gt(port, 0, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_start(s->rpc, &err), 0, "%s", err.msg);
    snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", port);
}

static void srv_stop(srv *s)
{
    sb_rpc_server_shutdown(s->rpc, 2000);
    sb_data_server_free(s->ds);
    sb_rpc_server_free(s->rpc);
    sb_store_close(s->store);
    rmdir(s->spill);
}

/* A shutdown in a thread of its own, so that the test can bound its wait for it. */
typedef struct shut_job {
    sb_rpc_server *rpc;
    int grace_ms, linger_ms; /* linger_ms < 0: sb_rpc_server_shutdown(grace_ms) */
    int rc;
    int64_t ms; /* how long it took */
} shut_job;

static void *shut_main(void *arg)
{
    shut_job *j = arg;
    int64_t t0 = now_ms();
    j->rc = j->linger_ms < 0 ? sb_rpc_server_shutdown(j->rpc, j->grace_ms)
                             : sb_rpc_server_shutdown_linger(j->rpc, j->grace_ms, j->linger_ms);
    j->ms = now_ms() - t0;
    return NULL;
}

/* Describes what the data server still holds, for a failure message. */
static void ds_state(sb_data_server *ds, char *buf, size_t cap)
{
    sb_data_server_stats st;
    sb_data_server_get_stats(ds, &st);
    snprintf(buf, cap,
             "data server: %zu fetches alive, %zu pins, %" PRIu64 " ended OK, %" PRIu64
             " cancelled, %" PRIu64 " chunks sent",
             st.active, st.pinned, st.ok, st.cancelled, st.chunks);
}

typedef struct slow_job {
    const char *addr;
    atomic_int chunks;
    atomic_int done;
    int rc;
    char msg[SB_ERR_MAX];
} slow_job;

static int on_chunk_slow(void *ud, uint64_t off, size_t len, uint64_t total)
{
    (void)off;
    (void)len;
    (void)total;
    atomic_fetch_add((atomic_int *)ud, 1);
    sleep_ms(20);
    return 0;
}

#define SLOW_FETCH_MS 20000 /* a slow reader's deadline (it needs ~0.2 s) */

static void *slow_main(void *arg)
{
    slow_job *j = arg;
    sb_data_fetch_opts o = {
        .on_chunk = on_chunk_slow, .on_chunk_ud = &j->chunks, .max_retries = -1};
    void *blob = NULL;
    size_t len;
    sb_err err = {0};
    j->rc =
        sb_data_fetch_addr(j->addr, "s7-t0-p0", 0, 0, SLOW_FETCH_MS, &o, &blob, &len, NULL, &err);
    snprintf(j->msg, sizeof j->msg, "%s", err.msg);
    sb_part_free(blob);
    atomic_store(&j->done, 1);
    return NULL;
}

/* Each round takes ~2.2 s (the 2 s linger); every wait is bounded well inside the timeout. */
Test(data_rpc, graceful_shutdown_delivers_the_tail_to_slow_readers)
{
    enum { ROUNDS = 5, N = 8, GRACE_MS = 10000, SHUT_BOUND_MS = 20000 };
    int lost = 0;
    char first[SB_ERR_MAX] = "", state[256];
    for (int round = 0; round < ROUNDS; round++) {
        srv s;
        srv_start(&s, 6 * MIB);
        slow_job j[N];
        pthread_t th[N];
        for (int i = 0; i < N; i++) {
            j[i] = (slow_job){.addr = s.addr};
            pthread_create(&th[i], NULL, slow_main, &j[i]);
        }
        /* every stream is under way (a fetch that failed before its first chunk says why) */
        int64_t t0 = now_ms();
        for (int i = 0; i < N; i++) {
            while (atomic_load(&j[i].chunks) < 1 && !atomic_load(&j[i].done) &&
                   now_ms() - t0 < 15000)
                sleep_ms(5);
            cr_assert_geq(atomic_load(&j[i].chunks), 1,
                          "round %d: reader %d got no chunk in %lld ms: %s", round, i,
                          (long long)(now_ms() - t0),
                          atomic_load(&j[i].done) ? j[i].msg : "(still waiting)");
        }
        shut_job sj = {.rpc = s.rpc, .grace_ms = GRACE_MS, .linger_ms = -1};
        pthread_t sth;
        pthread_create(&sth, NULL, shut_main, &sj);
        if (join_within(sth, SHUT_BOUND_MS) != 0) {
            int running = 0;
            for (int i = 0; i < N; i++)
                running += !atomic_load(&j[i].done);
            ds_state(s.ds, state, sizeof state);
            cr_assert_fail("round %d: sb_rpc_server_shutdown(grace %d ms) still running after %d "
                           "ms (a hang); %d of %d readers still reading; %s",
                           round, GRACE_MS, SHUT_BOUND_MS, running, N, state);
        }
        ds_state(s.ds, state, sizeof state);
        cr_assert_eq(sj.rc, 0, "round %d: the shutdown cancelled %d streams after %lld ms; %s",
                     round, sj.rc, (long long)sj.ms, state);
        for (int i = 0; i < N; i++) {
            cr_assert_eq(join_within(th[i], SLOW_FETCH_MS + 5000), 0,
                         "round %d: reader %d still running %d ms after the shutdown", round, i,
                         SLOW_FETCH_MS + 5000);
            if (j[i].rc != 0) {
                lost++;
                if (!first[0])
                    snprintf(first, sizeof first, "round %d: %s", round, j[i].msg);
            }
        }
        sb_err err;
        cr_assert_eq(sb_data_server_wait_idle(s.ds, 10000, &err), 0,
                     "round %d: after the shutdown: %s", round, err.msg);
        srv_stop(&s);
    }
    cr_expect_eq(lost, 0,
                 "graceful shutdown (grace %d ms, nothing cancelled) lost the tail of %d of %d "
                 "streams; first: %s",
                 GRACE_MS, lost, ROUNDS * N, first);
}

/* The linger keeps the connections up: a stream that ended on the server (its last chunk and
 * status handed to the transport) while its reader paused is still readable, and its
 * connection still there, well into the linger of a shutdown that has started. Before the
 * fix gRPC's graceful shutdown closed the connection at once (and a reader whose socket still
 * held the tail lost it to a reset). New calls during the drain are refused as UNAVAILABLE.
 * The partition (40 KiB in 8 KiB chunks) fits in the stream's first flow-control window, so
 * the stream ends on the server whatever the reader does. */
Test(data_rpc, the_connections_stay_up_through_the_linger)
{
    enum { LINGER_MS = 3000, PAUSE_MS = 300 };
    srv s;
    srv_start(&s, 40 * 1024);
    sb_err err = {0};
    char state[256];
    sb_rpc_channel *ch = sb_rpc_channel_new(s.addr, NULL, &err);
    cr_assert_not_null(ch, "%s", err.msg);
    Streambatch__V1__FetchRequest r = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    r.partition_id = "s7-t0-p0";
    r.requester_id = "pausing";
    r.max_chunk_bytes = 8192;
    uint8_t req[128];
    size_t n = streambatch__v1__fetch_request__pack(&r, req);
    sb_rpc_reader *rd = sb_rpc_stream_open(ch, SB_RPC_DATA_FETCH, req, n, 30000, 0, &err);
    cr_assert_not_null(rd, "%s", err.msg);
    const sb_rpc_piece *pc;
    size_t np, plen, got = 0;
    int rc = sb_rpc_reader_next(rd, &pc, &np, &plen, &err);
    cr_assert_eq(rc, 1, "no first chunk: %s", err.msg);
    got += plen;
    /* the stream ends on the server while the reader pauses (gRPC buffers the rest) */
    sb_data_server_stats st;
    int64_t t0 = now_ms();
    do {
        sleep_ms(5);
        sb_data_server_get_stats(s.ds, &st);
    } while (st.ok < 1 && now_ms() - t0 < 15000);
    ds_state(s.ds, state, sizeof state);
    cr_assert_eq(st.ok, 1, "the stream did not end on the server in 15 s; %s", state);
    shut_job sj = {.rpc = s.rpc, .grace_ms = 10000, .linger_ms = LINGER_MS};
    pthread_t sth;
    int64_t t_shut = now_ms();
    pthread_create(&sth, NULL, shut_main, &sj);
    sleep_ms(PAUSE_MS);
    int up = sb_rpc_channel_is_ready(ch);
    int64_t at = now_ms() - t_shut;
    if (at < LINGER_MS - 1000) /* (a machine too loaded to look in time proves nothing) */
        cr_expect(up,
                  "the connection was closed %lld ms into a %d ms linger (the stream had ended on "
                  "the server; its reader had not read it)",
                  (long long)at, LINGER_MS);
    else
        printf("data_rpc: the connection was looked at only %lld ms into a %d ms linger\n",
               (long long)at, LINGER_MS);
    /* a new call meanwhile is refused */
    void *blob = NULL;
    size_t blen;
    sb_data_fetch_opts o = {.max_retries = -1};
    int frc = sb_data_fetch(ch, "s7-t0-p0", 0, 0, 5000, &o, &blob, &blen, NULL, &err);
    cr_expect_eq(frc, SB_DATA_EUNAVAILABLE, "a fetch during the drain: %d (%s)", frc, err.msg);
    sb_part_free(blob);
    /* the reader takes the rest */
    while ((rc = sb_rpc_reader_next(rd, &pc, &np, &plen, &err)) == 1)
        got += plen;
    cr_expect_eq(rc, 0, "the paused reader lost the end of the stream after %zu bytes: %s", got,
                 err.msg);
    sb_rpc_reader_close(rd);
    sb_rpc_channel_free(ch);
    if (join_within(sth, 20000) != 0) {
        ds_state(s.ds, state, sizeof state);
        cr_assert_fail("sb_rpc_server_shutdown_linger(grace 10 s, linger %d ms) still running "
                       "after 20 s (a hang); %s",
                       LINGER_MS, state);
    }
    cr_expect_eq(sj.rc, 0, "the shutdown cancelled %d calls", sj.rc);
    srv_stop(&s);
}

typedef struct nf_job {
    const char *addr;
    int n, failed;
    char msg[SB_ERR_MAX];
} nf_job;

static void *nf_main(void *arg)
{
    nf_job *j = arg;
    sb_err err;
    sb_rpc_channel *ch = sb_rpc_channel_new(j->addr, NULL, &err);
    for (int i = 0; i < j->n && ch; i++) {
        void *blob;
        size_t len;
        int rc = sb_data_fetch(ch, "s9-t9-p9", 0, 0, 10000, NULL, &blob, &len, NULL, &err);
        if (rc != SB_DATA_ENOTFOUND && !j->failed) {
            j->failed = 1;
            snprintf(j->msg, sizeof j->msg, "%s", err.msg);
        }
    }
    sb_rpc_channel_free(ch);
    return NULL;
}

Test(data_rpc, calls_ended_from_application_threads)
{
    srv s;
    srv_start(&s, MIB);
    enum { T = 4 };
    nf_job j[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        j[i] = (nf_job){.addr = s.addr, .n = 500};
        pthread_create(&th[i], NULL, nf_main, &j[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(j[i].failed, 0, "%s", j[i].msg);
    }
    /* the server counts an answer after sending it: let the last ones finish first */
    sb_err err;
    cr_expect_eq(sb_data_server_wait_idle(s.ds, 10000, &err), 0, "%s", err.msg);
    sb_data_server_stats st;
    sb_data_server_get_stats(s.ds, &st);
    cr_expect_eq(st.not_found, (uint64_t)T * 500);
    srv_stop(&s);
}

/* 3. A slowloris reader of a Fetch stream (issue 17): a client that opens the stream and never
 *    reads kept its partition pinned (and the chunks in flight held) until the worker ended —
 *    there was no progress timeout. lib/rpc now cancels a call whose answer makes no
 *    flow-control progress for stream_stall_ms (here 3 s through $SB_RPC_STREAM_STALL_MS):
 *    the pin must be released within that bound plus the sweep period (at most 1 s), while an
 *    honest reader that is slow but keeps reading (a 1 MiB chunk every 0.25 s; its transport
 *    buffers about 4 chunks ahead, so each send of the server waits about 1 s) gets the whole
 *    partition. Failed before the fix: the pin was still held after 10 s. */
#define STALL_MS 3000

static int on_chunk_paced(void *ud, uint64_t off, size_t len, uint64_t total)
{
    (void)off;
    (void)len;
    (void)total;
    atomic_fetch_add((atomic_int *)ud, 1);
    sleep_ms(250);
    return 0;
}

Test(data_rpc, a_reader_that_never_reads_loses_its_stream_and_its_pin)
{
    setenv("SB_RPC_STREAM_STALL_MS", "3000", 1); /* Criterion runs each test in its own process */
    srv s;
    srv_start(&s, 16 * MIB);
    sb_err err = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(s.addr, NULL, &err);
    cr_assert_not_null(ch, "%s", err.msg);
    Streambatch__V1__FetchRequest r = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    r.partition_id = "s7-t0-p0";
    r.requester_id = "slowloris";
    uint8_t req[128];
    size_t n = streambatch__v1__fetch_request__pack(&r, req);
    sb_rpc_reader *rd = sb_rpc_stream_open(ch, SB_RPC_DATA_FETCH, req, n, 0, 0, &err);
    cr_assert_not_null(rd, "%s", err.msg);
    /* the stream is under way: its partition pinned, chunks handed to gRPC */
    sb_data_server_stats st;
    struct timespec t0, t1;
    for (int i = 0; i < 1000; i++) {
        sb_data_server_get_stats(s.ds, &st);
        if (st.pinned == 1 && st.chunks > 0)
            break;
        sleep_ms(5);
    }
    cr_assert_eq(st.pinned, 1, "the fetch never pinned its partition");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* ... and stays stuck: the client reads nothing */
    for (int i = 0; i < 1000; i++) {
        sb_data_server_get_stats(s.ds, &st);
        if (st.pinned == 0 && st.active == 0)
            break;
        sleep_ms(10);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    cr_expect_eq(st.pinned, 0, "the slowloris stream still pins its partition after %ld ms", ms);
    cr_expect_eq(st.active, 0, "the slowloris fetch is still alive after %ld ms", ms);
    cr_expect_leq(ms, STALL_MS + 2000, "released after %ld ms (bound %d ms)", ms, STALL_MS + 2000);
    cr_expect_eq(st.cancelled, 1, "the stream was cancelled");
    printf("data_rpc: slowloris Fetch stream (%" PRIu64 " chunks sent) released after %ld ms "
           "(stall timeout %d ms)\n",
           st.chunks, ms, STALL_MS);
    /* the reader finds its stream broken */
    const sb_rpc_piece *pc;
    size_t np, plen;
    int rc;
    while ((rc = sb_rpc_reader_next(rd, &pc, &np, &plen, &err)) == 1)
        ;
    cr_expect_lt(rc, 0, "the stream did not end in an error");
    sb_rpc_reader_close(rd);
    sb_rpc_channel_free(ch);

    /* an honest reader taking 0.25 s per 1 MiB chunk is not affected */
    atomic_int chunks = 0;
    sb_data_fetch_opts o = {.on_chunk = on_chunk_paced, .on_chunk_ud = &chunks, .max_retries = -1};
    void *blob = NULL;
    size_t len;
    uint64_t cancelled_before = st.cancelled;
    rc = sb_data_fetch_addr(s.addr, "s7-t0-p0", 0, 0, 60000, &o, &blob, &len, NULL, &err);
    cr_expect_eq(rc, 0, "the slow reader failed: %s", err.msg);
    cr_expect_geq(atomic_load(&chunks), 16, "only %d chunks", atomic_load(&chunks));
    sb_part_free(blob);
    sb_data_server_get_stats(s.ds, &st);
    cr_expect_eq(st.cancelled, cancelled_before, "the slow reader's stream was cancelled");
    srv_stop(&s);
}
