/* test_data_many.c — many small partitions in one Data.Fetch stream (FetchRequest.
 * next_partition_ids; worker/data/service.c sends them, sb_data_fetch_many() in
 * worker/data/fetch.c receives them): every partition arrives whole and equal, in memory or
 * spilled, on a small chunk grid or the default; an id the peer does not hold fails naming it and
 * its index; the offset applies to the first partition only (the resume point); bad lists are
 * refused before anything is sent; every pin is released once the stream is over. The tests use
 * an in-process store + data server on 127.0.0.1. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partition/partition.h"
#include "rpc/chunkmsg.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"
#include "streambatch.pb-c.h"
#include "worker/data/fetch.h"
#include "worker/data/service.h"
#include "worker/store/store.h"
#include "testutil.h"

TestSuite(data_many, .timeout = 90);

#define NPART 200

typedef struct srv {
    sb_store *store;
    sb_data_server *ds;
    sb_rpc_server *rpc;
    sb_rpc_channel *ch;
    char addr[64];
    char spill[64];
    char ids[NPART][32];
    const char *idp[NPART];
    void *copy[NPART]; /* what each partition holds */
    size_t len[NPART];
} srv;

/* A partition of `rows` int64 values (i * 7 + r): a few hundred bytes to a few KiB. */
static void *part(int i, size_t rows, size_t *len)
{
    sb_err err;
    sb_field f = {.name = "v", .type = SB_TYPE_INT64};
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &err);
    for (size_t r = 0; r < rows; r++)
        cr_assert_eq(sb_batch_builder_append_int(b, 0, (int64_t)(i * 7 + (int)r), &err), 0);
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    return blob;
}

/* NPART partitions "s1-t0-p<i>" in a store whose memory budget holds only some of them (the rest
 * are spilled: both of the server's paths), and a server and a channel to it. */
static void srv_start(srv *s)
{
    memset(s, 0, sizeof *s);
    sb_test_tmpl(s->spill, sizeof s->spill, "test_data_many");
    cr_assert_not_null(mkdtemp(s->spill));
    sb_err err;
    sb_store_config cfg = {.memory_budget = 64 << 10, .spill_dir = s->spill};
    cr_assert_eq(sb_store_open(&cfg, &s->store, &err), 0, "%s", err.msg);
    for (int i = 0; i < NPART; i++) {
        snprintf(s->ids[i], sizeof s->ids[i], "s1-t0-p%d", i);
        s->idp[i] = s->ids[i];
        void *blob = part(i, (size_t)(20 + (i * 37) % 400), &s->len[i]);
        s->copy[i] = malloc(s->len[i]);
        memcpy(s->copy[i], blob, s->len[i]);
        cr_assert_eq(sb_store_put(s->store, s->ids[i], blob, s->len[i], NULL, &err), 0, "%s",
                     err.msg);
    }
    sb_data_server_config dc = {.store = s->store};
    cr_assert_eq(sb_data_server_new(&dc, &s->ds, &err), 0, "%s", err.msg);
    s->rpc = sb_rpc_server_new(NULL, &err);
    cr_assert_not_null(s->rpc, "%s", err.msg);
    cr_assert_eq(sb_data_server_register(s->ds, s->rpc, &err), 0, "%s", err.msg);
    int port = sb_rpc_server_listen(s->rpc, "127.0.0.1:0", &err);
    cr_assert_gt(port, 0, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_start(s->rpc, &err), 0, "%s", err.msg);
    snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", port);
    s->ch = sb_rpc_channel_new(s->addr, NULL, &err);
    cr_assert_not_null(s->ch, "%s", err.msg);
}

static void srv_stop(srv *s)
{
    sb_rpc_channel_free(s->ch);
    sb_rpc_server_shutdown(s->rpc, 2000);
    sb_data_server_free(s->ds);
    sb_rpc_server_free(s->rpc);
    sb_store_close(s->store);
    for (int i = 0; i < NPART; i++)
        free(s->copy[i]);
    rmdir(s->spill);
}

/* Every stream over and every pin released (the server's stats), or the test fails. */
static void expect_idle(srv *s)
{
    sb_err err;
    cr_assert_eq(sb_data_server_wait_idle(s->ds, 5000, &err), 0, "%s", err.msg);
    sb_data_server_stats st;
    sb_data_server_get_stats(s->ds, &st);
    cr_expect_eq(st.pinned, 0, "pins left: %zu", st.pinned);
}

Test(data_many, every_partition_arrives_whole_in_one_stream)
{
    srv s;
    srv_start(&s);
    sb_data_server_stats st0;
    sb_data_server_get_stats(s.ds, &st0);
    static const uint32_t grids[] = {0, 256}; /* the default, and several chunks a partition */
    for (size_t g = 0; g < 2; g++) {
        void *blobs[NPART];
        size_t lens[NPART], failed = 99, expected[NPART];
        for (int i = 0; i < NPART; i++)
            expected[i] = s.len[i];
        sb_data_fetch_opts o = {.max_chunk_bytes = grids[g]};
        sb_data_fetch_info info;
        sb_err err = {0};
        int rc = sb_data_fetch_many(s.ch, s.idp, expected, NPART, 0, 20000, &o, blobs, lens,
                                    &failed, &info, &err);
        cr_assert_eq(rc, 0, "grid %u: %s", grids[g], err.msg);
        uint64_t total = 0;
        for (int i = 0; i < NPART; i++) {
            cr_assert_eq(lens[i], s.len[i], "grid %u: partition %d", grids[g], i);
            cr_assert_eq(memcmp(blobs[i], s.copy[i], lens[i]), 0, "grid %u: partition %d", grids[g],
                         i);
            total += lens[i];
            sb_part_free(blobs[i]);
        }
        cr_expect_eq(info.total, total);
        cr_expect_eq(info.attempts, 1);
        if (grids[g])
            cr_expect_gt(info.chunks, NPART, "several chunks a partition: %" PRIu64, info.chunks);
    }
    expect_idle(&s);
    sb_data_server_stats st;
    sb_data_server_get_stats(s.ds, &st);
    cr_expect_eq(st.fetches - st0.fetches, 2, "one stream per call");
    cr_expect_eq(st.ok - st0.ok, 2);
    cr_expect_gt(st.spill_chunks, 0, "some partitions were sent from spill files");
    srv_stop(&s);
}

Test(data_many, a_missing_partition_fails_naming_it_and_nothing_is_handed_over)
{
    srv s;
    srv_start(&s);
    const char *ids[6] = {s.ids[0], s.ids[1], s.ids[2], s.ids[3], "s9-t9-p17", s.ids[5]};
    void *blobs[6];
    size_t lens[6], failed = 99;
    sb_err err = {0};
    int rc =
        sb_data_fetch_many(s.ch, ids, NULL, 6, 0, 20000, NULL, blobs, lens, &failed, NULL, &err);
    cr_assert_eq(rc, SB_DATA_ENOTFOUND, "%d: %s", rc, err.msg);
    cr_expect_eq(failed, 4);
    cr_expect(strstr(err.msg, "s9-t9-p17") != NULL, "%s", err.msg);
    for (int i = 0; i < 6; i++)
        cr_expect_null(blobs[i], "blob %d handed over on failure", i);
    /* a wrong expected size is corruption, naming the partition */
    size_t expected[3] = {s.len[0], s.len[1] + 1, s.len[2]};
    rc = sb_data_fetch_many(s.ch, s.idp, expected, 3, 0, 20000, NULL, blobs, lens, &failed, NULL,
                            &err);
    cr_assert_eq(rc, SB_DATA_ECORRUPT, "%d: %s", rc, err.msg);
    cr_expect_eq(failed, 1);
    cr_expect(strstr(err.msg, "s1-t0-p1 ") != NULL, "%s", err.msg);
    expect_idle(&s);
    srv_stop(&s);
}

/* The raw stream of a request: per chunk, its offset and total_length. */
static int raw_chunks(srv *s, const Streambatch__V1__FetchRequest *req, uint64_t *off,
                      uint64_t *tot, int cap, sb_rpc_code *code)
{
    uint8_t buf[4096];
    size_t n = streambatch__v1__fetch_request__get_packed_size(req);
    cr_assert_leq(n, sizeof buf);
    streambatch__v1__fetch_request__pack(req, buf);
    sb_err err;
    sb_rpc_reader *rd = sb_rpc_stream_open(s->ch, SB_RPC_DATA_FETCH, buf, n, 10000, 0, &err);
    cr_assert_not_null(rd, "%s", err.msg);
    const sb_rpc_piece *pc;
    size_t np, len;
    int k = 0, rc;
    while ((rc = sb_rpc_reader_next(rd, &pc, &np, &len, &err)) == 1) {
        sb_rpc_chunk c;
        cr_assert_eq(sb_rpc_chunk_parse(pc, np, &c, &err), 0, "%s", err.msg);
        cr_assert_lt(k, cap);
        off[k] = c.offset;
        tot[k] = c.total_length;
        k++;
    }
    *code = rc == 0 ? SB_RPC_OK : sb_rpc_reader_code(rd);
    sb_rpc_reader_close(rd);
    return k;
}

/* The resume point: offset is a byte of partition_id only; the next partitions come whole. */
Test(data_many, the_offset_applies_to_the_first_partition_only)
{
    srv s;
    srv_start(&s);
    Streambatch__V1__FetchRequest req = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    char *next[2] = {s.ids[3], s.ids[4]};
    req.partition_id = s.ids[2];
    req.offset = 100;
    req.next_partition_ids = next;
    req.n_next_partition_ids = 2;
    uint64_t off[16], tot[16];
    sb_rpc_code code;
    int k = raw_chunks(&s, &req, off, tot, 16, &code);
    cr_assert_eq(code, SB_RPC_OK);
    cr_assert_eq(k, 3, "one chunk each (default grid): %d", k);
    cr_expect_eq(off[0], 100);
    cr_expect_eq(tot[0], s.len[2]);
    cr_expect_eq(off[1], 0);
    cr_expect_eq(tot[1], s.len[3]);
    cr_expect_eq(off[2], 0);
    cr_expect_eq(tot[2], s.len[4]);
    /* a bad id in the list: refused before anything is sent */
    char *bad[2] = {s.ids[3], ""};
    req.next_partition_ids = bad;
    k = raw_chunks(&s, &req, off, tot, 16, &code);
    cr_expect_eq(k, 0);
    cr_expect_eq(code, SB_RPC_INVALID_ARGUMENT, "%s", sb_rpc_code_name(code));
    expect_idle(&s);
    srv_stop(&s);
}
