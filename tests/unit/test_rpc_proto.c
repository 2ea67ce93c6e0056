/* test_rpc_proto.c — lib/rpc without the network: the zero-copy Chunk framing (byte-identical to
 * protobuf-c, parsed from arbitrary splits), partition ids, the method table and checked
 * decoding of every protocol message (malformed, truncated and invalid input). */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/chunkmsg.h"
#include "rpc/proto.h"

/* Packs a Chunk with protobuf-c (the reference encoding). */
static uint8_t *pack_chunk(uint64_t off, const uint8_t *data, size_t len, uint32_t crc,
                           uint64_t total, size_t *n)
{
    Streambatch__V1__Chunk c = STREAMBATCH__V1__CHUNK__INIT;
    c.offset = off;
    c.data.data = (uint8_t *)data;
    c.data.len = len;
    c.crc32c = crc;
    c.total_length = total;
    uint8_t *buf = malloc(streambatch__v1__chunk__get_packed_size(&c) + 1);
    *n = streambatch__v1__chunk__pack(&c, buf);
    return buf;
}

/* head + data + tail from the zero-copy framing, flattened. */
static uint8_t *frame_chunk(uint64_t off, const uint8_t *data, size_t len, uint32_t crc,
                            uint64_t total, size_t *n)
{
    sb_rpc_chunk_frame f;
    sb_rpc_chunk_frame_encode(&f, off, len, crc, total);
    uint8_t *buf = malloc(f.head_len + len + f.tail_len + 1);
    memcpy(buf, f.head, f.head_len);
    if (len)
        memcpy(buf + f.head_len, data, len);
    memcpy(buf + f.head_len + len, f.tail, f.tail_len);
    *n = f.head_len + len + f.tail_len;
    return buf;
}

Test(rpc_chunk, frame_is_byte_identical_to_protobuf_c)
{
    static const uint64_t offs[] = {0, 1, 127, 128, 1u << 20, UINT64_MAX};
    static const size_t lens[] = {0, 1, 127, 128, 16384, 1u << 20};
    static const uint32_t crcs[] = {0, 1, 0xdeadbeef};
    static const uint64_t totals[] = {0, 300, UINT64_MAX};
    uint8_t *data = malloc(1u << 20);
    for (size_t i = 0; i < (1u << 20); i++)
        data[i] = (uint8_t)(i * 31 + 7);
    int cases = 0;
    for (size_t a = 0; a < 6; a++)
        for (size_t b = 0; b < 6; b++)
            for (size_t c = 0; c < 3; c++)
                for (size_t d = 0; d < 3; d++) {
                    size_t n1, n2;
                    uint8_t *p1 = pack_chunk(offs[a], data, lens[b], crcs[c], totals[d], &n1);
                    uint8_t *p2 = frame_chunk(offs[a], data, lens[b], crcs[c], totals[d], &n2);
                    cr_assert_eq(n1, n2, "length differs for off=%llu len=%zu",
                                 (unsigned long long)offs[a], lens[b]);
                    cr_assert(memcmp(p1, p2, n1) == 0, "bytes differ for off=%llu len=%zu",
                              (unsigned long long)offs[a], lens[b]);
                    free(p1);
                    free(p2);
                    cases++;
                }
    cr_assert_eq(cases, 324);
    free(data);
}

/* Splits buf into pieces at the given cut points. */
static size_t split(const uint8_t *buf, size_t n, const size_t *cuts, size_t ncuts,
                    sb_rpc_piece *out)
{
    size_t np = 0, at = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        if (end > n)
            end = n;
        if (end < at)
            end = at;
        out[np].ptr = buf + at;
        out[np].len = end - at;
        np++;
        at = end;
    }
    return np;
}

Test(rpc_chunk, parse_from_every_two_way_split_and_empty_pieces)
{
    uint8_t data[300];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(255 - i);
    size_t n;
    uint8_t *msg = pack_chunk(4096, data, sizeof data, 0xabcdef01, 9999, &n);
    for (size_t cut1 = 0; cut1 <= n; cut1++) {
        size_t cuts[3] = {cut1, cut1, (cut1 + 5 < n) ? cut1 + 5 : n}; /* includes an empty piece */
        sb_rpc_piece pieces[4];
        size_t np = split(msg, n, cuts, 3, pieces);
        sb_rpc_chunk c;
        sb_err err;
        cr_assert_eq(sb_rpc_chunk_parse(pieces, np, &c, &err), 0, "cut %zu: %s", cut1, err.msg);
        cr_assert_eq(c.offset, 4096);
        cr_assert_eq(c.crc32c, 0xabcdef01);
        cr_assert_eq(c.total_length, 9999);
        cr_assert_eq(c.data_len, sizeof data);
        uint8_t out[300];
        memset(out, 0, sizeof out);
        cr_assert_eq(sb_rpc_chunk_copy_data(pieces, np, &c, out, sizeof out, &err), 0);
        cr_assert(memcmp(out, data, sizeof data) == 0, "cut %zu: data differs", cut1);
        /* the iterator yields pointers into the pieces, never copies */
        sb_rpc_chunk_iter it;
        sb_rpc_piece p;
        size_t got = 0, runs = 0;
        sb_rpc_chunk_data_begin(&c, &it);
        while (sb_rpc_chunk_data_next(pieces, np, &it, &p)) {
            cr_assert(p.ptr >= msg && p.ptr + p.len <= msg + n);
            cr_assert(memcmp(p.ptr, data + got, p.len) == 0);
            got += p.len;
            runs++;
        }
        cr_assert_eq(got, sizeof data);
        cr_assert(runs >= 1 && runs <= 3);
    }
    free(msg);
}

Test(rpc_chunk, copy_refuses_small_destination)
{
    uint8_t data[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, out[9];
    size_t n;
    uint8_t *msg = pack_chunk(0, data, 10, 0, 0, &n);
    sb_rpc_piece p = {msg, n};
    sb_rpc_chunk c;
    sb_err err;
    cr_assert_eq(sb_rpc_chunk_parse(&p, 1, &c, &err), 0);
    cr_assert_eq(sb_rpc_chunk_copy_data(&p, 1, &c, out, sizeof out, &err), -1);
    cr_assert(strstr(err.msg, "do not fit"), "%s", err.msg);
    free(msg);
}

Test(rpc_chunk, every_truncation_is_an_error_or_a_shorter_valid_message)
{
    uint8_t data[200];
    memset(data, 0x5a, sizeof data);
    size_t n;
    uint8_t *msg = pack_chunk(70000, data, sizeof data, 0x01020304, 123456, &n);
    int errors = 0;
    for (size_t cut = 0; cut < n; cut++) {
        sb_rpc_piece p = {msg, cut};
        sb_rpc_chunk c;
        sb_err err;
        int rc = sb_rpc_chunk_parse(&p, 1, &c, &err);
        /* protobuf-c must agree on which prefixes are messages */
        Streambatch__V1__Chunk *ref = streambatch__v1__chunk__unpack(NULL, cut, msg);
        cr_assert_eq(rc == 0, ref != NULL, "cut %zu: ours %d, protobuf-c %s", cut, rc,
                     ref ? "ok" : "error");
        if (ref) {
            cr_assert_eq(c.offset, ref->offset);
            cr_assert_eq(c.data_len, ref->data.len);
            cr_assert_eq(c.crc32c, ref->crc32c);
            cr_assert_eq(c.total_length, ref->total_length);
            streambatch__v1__chunk__free_unpacked(ref, NULL);
        } else {
            errors++;
            cr_assert(strstr(err.msg, "chunk:"), "message: %s", err.msg);
        }
    }
    cr_assert(errors > (int)(n / 2), "most truncations must fail (%d of %zu)", errors, n);
    free(msg);
}

Test(rpc_chunk, malformed_inputs)
{
    struct {
        const char *what;
        const uint8_t b[16];
        size_t n;
        const char *msg;
    } cases[] = {
        {"field 0", {0x00, 0x01}, 2, "invalid field number"},
        {"wrong wire type for data", {0x10, 0x05}, 2, "wire type"},
        {"wrong wire type for crc", {0x18, 0x05}, 2, "wire type"},
        {"group", {0x2b}, 1, "unsupported wire type"},
        {"length past end", {0x12, 0x05, 0x01}, 3, "remain"},
        {"overlong varint",
         {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
         12,
         "overlong"},
        {"truncated fixed32", {0x1d, 0x01, 0x02}, 3, "truncated fixed32"},
        {"truncated fixed64 in unknown field", {0x29, 0x01}, 2, "truncated fixed64"},
        {"huge length", {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}, 6, "remain"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_rpc_piece p = {cases[i].b, cases[i].n};
        sb_rpc_chunk c;
        sb_err err = {0};
        cr_assert_eq(sb_rpc_chunk_parse(&p, 1, &c, &err), -1, "%s parsed", cases[i].what);
        cr_assert(strstr(err.msg, cases[i].msg), "%s: message \"%s\"", cases[i].what, err.msg);
    }
}

Test(rpc_chunk, unknown_fields_skipped_and_last_data_wins)
{
    /* unknown varint (5), unknown fixed64 (6), unknown bytes (7), two data fields */
    const uint8_t msg[] = {0x28, 0x96, 0x01, 0x31, 1,    2,   3,    4,    5,   6,   7,    8,   0x3a,
                           0x02, 'x',  'y',  0x12, 0x01, 'A', 0x12, 0x02, 'B', 'C', 0x08, 0x07};
    sb_rpc_piece p = {msg, sizeof msg};
    sb_rpc_chunk c;
    sb_err err;
    cr_assert_eq(sb_rpc_chunk_parse(&p, 1, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.offset, 7);
    cr_assert_eq(c.data_len, 2);
    char out[2];
    cr_assert_eq(sb_rpc_chunk_copy_data(&p, 1, &c, out, 2, &err), 0);
    cr_assert(out[0] == 'B' && out[1] == 'C');
    Streambatch__V1__Chunk *ref = streambatch__v1__chunk__unpack(NULL, sizeof msg, msg);
    cr_assert_not_null(ref);
    cr_assert_eq(ref->data.len, 2);
    cr_assert_eq(ref->data.data[0], 'B');
    streambatch__v1__chunk__free_unpacked(ref, NULL);
}

Test(rpc_chunk, empty_message_is_all_zero)
{
    sb_rpc_chunk c;
    sb_err err;
    cr_assert_eq(sb_rpc_chunk_parse(NULL, 0, &c, &err), 0);
    cr_assert_eq(c.data_len + c.offset + c.total_length + c.crc32c, 0);
}

/* ------------------------------------------------------------------------------ ids */

Test(rpc_ids, format_and_parse_round_trip)
{
    char buf[SB_PART_ID_MAX];
    cr_assert_eq(sb_part_id_format(buf, sizeof buf, 1, 42, 0), 9);
    cr_assert_str_eq(buf, "s1-t42-p0");
    cr_assert_gt(sb_part_id_format(buf, sizeof buf, UINT32_MAX, UINT64_MAX, UINT32_MAX), 0);
    uint32_t st, sq;
    uint64_t tk;
    sb_err err;
    cr_assert_eq(sb_part_id_parse(buf, &st, &tk, &sq, &err), 0, "%s", err.msg);
    cr_assert_eq(st, UINT32_MAX);
    cr_assert_eq(tk, UINT64_MAX);
    cr_assert_eq(sq, UINT32_MAX);
    cr_assert_eq(sb_part_id_format(buf, 5, 1, 42, 0), -1, "too small a buffer");
}

Test(rpc_ids, rejects_malformed)
{
    static const char *bad[] = {"",
                                "s1-t2",
                                "s1-t2-p",
                                "S1-t2-p3",
                                "s01-t2-p3",
                                "s1-t2-p3x",
                                "s1-t2-p3 ",
                                "s-1-t2-p3",
                                "s1_t2_p3",
                                "s4294967296-t0-p0",
                                "s0-t18446744073709551616-p0",
                                "s1-t2-p-3",
                                "s1--t2-p3",
                                "t1-s2-p3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sb_err err = {0};
        cr_assert_eq(sb_part_id_parse(bad[i], NULL, NULL, NULL, &err), -1, "\"%s\" accepted",
                     bad[i]);
        cr_assert(err.msg[0], "no message for \"%s\"", bad[i]);
    }
    cr_assert_eq(sb_part_id_parse("s0-t0-p0", NULL, NULL, NULL, NULL), 0);
}

/* ------------------------------------------------------------------------------ messages */

Test(rpc_msgs, method_table)
{
    size_t n;
    const sb_rpc_method_info *m = sb_rpc_methods(&n);
    cr_assert_eq(n, 7); /* Control: 5 (StreamNext for stream sinks), Data: 1, Worker: 1 */
    const sb_rpc_method_info *f = sb_rpc_method_find(SB_RPC_DATA_FETCH);
    cr_assert_not_null(f);
    cr_assert(f->server_streaming);
    cr_assert_eq(f->response, &streambatch__v1__chunk__descriptor);
    cr_assert_null(sb_rpc_method_find("/streambatch.v1.Control/Nope"));
    /* every method of every service generated from the proto is in the table, with its types */
    const ProtobufCServiceDescriptor *svcs[] = {&streambatch__v1__control__descriptor,
                                                &streambatch__v1__data__descriptor,
                                                &streambatch__v1__worker__descriptor};
    size_t total = 0;
    for (size_t k = 0; k < sizeof svcs / sizeof svcs[0]; k++) {
        const ProtobufCServiceDescriptor *cs = svcs[k];
        for (unsigned i = 0; i < cs->n_methods; i++, total++) {
            char path[128];
            snprintf(path, sizeof path, "/%s/%s", cs->name, cs->methods[i].name);
            const sb_rpc_method_info *mi = sb_rpc_method_find(path);
            cr_assert_not_null(mi, "%s missing from the table", path);
            cr_assert_eq(mi->request, cs->methods[i].input);
            cr_assert_eq(mi->response, cs->methods[i].output);
        }
    }
    cr_assert_eq(total, n, "the table has methods the proto does not");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(m[i].server_streaming, strcmp(m[i].path, SB_RPC_DATA_FETCH) == 0);
}

Test(rpc_msgs, rebind_request_needs_an_address)
{
    Streambatch__V1__RebindRequest r = STREAMBATCH__V1__REBIND_REQUEST__INIT;
    sb_err err;
    cr_assert_lt(sb_rpc_msg_validate(&r.base, &err), 0);
    cr_assert(strstr(err.msg, "controller_address") != NULL, "%s", err.msg);
    r.controller_address = "127.0.0.5:7000";
    r.epoch = 2;
    cr_assert_eq(sb_rpc_msg_validate(&r.base, &err), 0, "%s", err.msg);
}

Test(rpc_msgs, stream_next_consumed_bits_bounded)
{
    Streambatch__V1__StreamNextRequest r = STREAMBATCH__V1__STREAM_NEXT_REQUEST__INIT;
    r.world_size = 2;
    r.rank = 1;
    r.batch_size = 64;
    static uint8_t bits[(1u << 20) + 1];
    r.consumed_bits.data = bits;
    r.consumed_bits.len = 1u << 20;
    sb_err err;
    cr_assert_eq(sb_rpc_msg_validate(&r.base, &err), 0, "%s", err.msg);
    r.consumed_bits.len++; /* a window of 8 Mi rows: more than any consumer keeps */
    cr_assert_lt(sb_rpc_msg_validate(&r.base, &err), 0);
    cr_assert(strstr(err.msg, "consumed_bits") != NULL, "%s", err.msg);
}

static uint8_t *encode(const ProtobufCMessage *m, size_t *n)
{
    sb_err err;
    uint8_t *b = sb_rpc_msg_encode(m, n, &err);
    cr_assert_not_null(b, "%s", err.msg);
    return b;
}

Test(rpc_msgs, register_request_valid_and_invalid)
{
    Streambatch__V1__PartitionInfo p0 = STREAMBATCH__V1__PARTITION_INFO__INIT;
    p0.id = "s1-t42-p0";
    p0.bytes = 1000;
    p0.rows = 10;
    Streambatch__V1__PartitionInfo *parts[] = {&p0};
    Streambatch__V1__RegisterRequest r = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
    r.worker_id = "w-1";
    r.pool = "cpu";
    r.address = "127.0.0.1:7000";
    r.slots = 4;
    r.n_partitions = 1;
    r.partitions = parts;
    size_t n;
    uint8_t *b = encode(&r.base, &n);
    sb_err err;
    ProtobufCMessage *m =
        sb_rpc_msg_decode(&streambatch__v1__register_request__descriptor, b, n, &err);
    cr_assert_not_null(m, "%s", err.msg);
    Streambatch__V1__RegisterRequest *d = (Streambatch__V1__RegisterRequest *)m;
    cr_assert_str_eq(d->worker_id, "w-1");
    cr_assert_eq(d->n_partitions, 1);
    cr_assert_eq(d->partitions[0]->bytes, 1000);
    sb_rpc_msg_free(m);
    /* a strict prefix is truncated, or misses required fields, or (cut exactly where the
     * repeated partitions field starts) is the same worker holding no partitions */
    int accepted = 0;
    for (size_t cut = 0; cut < n; cut++) {
        m = sb_rpc_msg_decode(&streambatch__v1__register_request__descriptor, b, cut, &err);
        if (m) {
            accepted++;
            cr_assert_eq(((Streambatch__V1__RegisterRequest *)m)->n_partitions, 0,
                         "prefix of %zu bytes accepted", cut);
            sb_rpc_msg_free(m);
        }
    }
    cr_assert_eq(accepted, 1);
    free(b);

    Streambatch__V1__RegisterRequest r2 = r;
    r2.slots = 0;
    b = encode(&r2.base, &n);
    cr_assert_null(sb_rpc_msg_decode(&streambatch__v1__register_request__descriptor, b, n, &err));
    cr_assert(strstr(err.msg, "slots"), "%s", err.msg);
    free(b);
    r2 = r;
    r2.worker_id = "has space";
    b = encode(&r2.base, &n);
    cr_assert_null(sb_rpc_msg_decode(&streambatch__v1__register_request__descriptor, b, n, &err));
    cr_assert(strstr(err.msg, "worker_id"), "%s", err.msg);
    free(b);
    p0.id = "part-7";
    b = encode(&r.base, &n);
    cr_assert_null(sb_rpc_msg_decode(&streambatch__v1__register_request__descriptor, b, n, &err));
    cr_assert(strstr(err.msg, "partitions[0]"), "%s", err.msg);
    free(b);
}

Test(rpc_msgs, garbage_is_rejected_for_every_message)
{
    static const uint8_t garbage[][8] = {
        {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, /* overlong key */
        {0x0a, 0x7f, 'a'},                                /* string longer than the input */
        {0x07},                                           /* field 0, wire type 7 */
        {0x0b, 0x0c},                                     /* groups */
    };
    static const size_t glen[] = {8, 3, 1, 2};
    size_t n;
    const sb_rpc_method_info *m = sb_rpc_methods(&n);
    for (size_t i = 0; i < n; i++)
        for (size_t g = 0; g < 4; g++) {
            sb_err err = {0};
            ProtobufCMessage *x = sb_rpc_msg_decode(m[i].request, garbage[g], glen[g], &err);
            cr_assert_null(x, "%s accepted garbage %zu", m[i].request->name, g);
            cr_assert(err.msg[0]);
        }
}

Test(rpc_msgs, empty_requests_miss_required_fields)
{
    size_t n;
    const sb_rpc_method_info *m = sb_rpc_methods(&n);
    for (size_t i = 0; i < n; i++) {
        sb_err err = {0};
        cr_assert_null(sb_rpc_msg_decode(m[i].request, (const uint8_t *)"", 0, &err),
                       "empty %s accepted", m[i].request->name);
        cr_assert(strstr(err.msg, "missing") || strstr(err.msg, "empty"), "%s", err.msg);
    }
}

Test(rpc_msgs, complete_task_and_replies)
{
    Streambatch__V1__TaskMetrics tm = STREAMBATCH__V1__TASK_METRICS__INIT;
    tm.cpu_seconds = 1.5;
    tm.wall_seconds = 2.0;
    Streambatch__V1__PartitionInfo out = STREAMBATCH__V1__PARTITION_INFO__INIT;
    out.id = "s2-t7-p3";
    Streambatch__V1__PartitionInfo *outs[] = {&out};
    Streambatch__V1__CompleteTaskRequest c = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    c.worker_id = "w1";
    c.task_id = "pipe/s2-t7";
    c.attempt = 1;
    c.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    c.n_outputs = 1;
    c.outputs = outs;
    c.metrics = &tm;
    sb_err err;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), 0, "%s", err.msg);
    c.status = 0;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), -1);
    cr_assert(strstr(err.msg, "TaskStatus"), "%s", err.msg);
    c.status = 99;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), -1);
    c.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR;
    tm.cpu_seconds = -1;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), -1);
    cr_assert(strstr(err.msg, "cpu_seconds"), "%s", err.msg);
    tm.cpu_seconds = 0;
    /* a partial report (early outputs) is a running task's: status OK only, and never in a
     * poll's completions (its answer, CompleteTaskReply.wait, has no place in a poll's reply) */
    c.partial = 1;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), -1);
    cr_assert(strstr(err.msg, "partial"), "%s", err.msg);
    c.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), 0, "%s", err.msg);
    Streambatch__V1__CompleteTaskRequest *cs[] = {&c};
    Streambatch__V1__PollTasksRequest pq = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    pq.worker_id = "w1";
    pq.free_slots = 1;
    pq.n_completions = 1;
    pq.completions = cs;
    cr_assert_eq(sb_rpc_msg_validate(&pq.base, &err), -1);
    cr_assert(strstr(err.msg, "completions[0]") && strstr(err.msg, "partial"), "%s", err.msg);
    c.partial = 0;
    cr_assert_eq(sb_rpc_msg_validate(&pq.base, &err), 0, "%s", err.msg);
    /* an early reduce's ask for inputs (want_inputs) is a partial report; its reply's inputs are
     * checked as a task's are */
    c.want_inputs = 1;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), -1);
    cr_assert(strstr(err.msg, "want_inputs"), "%s", err.msg);
    c.partial = 1;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), 0, "%s", err.msg);
    c.partial = 0;
    c.want_inputs = 0;
    Streambatch__V1__PartitionRef more = STREAMBATCH__V1__PARTITION_REF__INIT, *mores[] = {&more};
    more.id = "s1-t1-p0";
    more.worker_address = "10.0.0.1:7070";
    Streambatch__V1__CompleteTaskReply cr = STREAMBATCH__V1__COMPLETE_TASK_REPLY__INIT;
    cr.accepted = 1;
    cr.n_more_inputs = 1;
    cr.more_inputs = mores;
    cr_assert_eq(sb_rpc_msg_validate(&cr.base, &err), 0, "%s", err.msg);
    more.id = "../etc/passwd";
    cr_assert_eq(sb_rpc_msg_validate(&cr.base, &err), -1);
    c.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR;

    /* a PollTasks reply with a task whose input id is bad */
    Streambatch__V1__OpArgs op = STREAMBATCH__V1__OP_ARGS__INIT;
    op.op = "bench.spin";
    op.args_json = "{\"cpu_per_byte\": 10}";
    Streambatch__V1__OpArgs *ops[] = {&op};
    Streambatch__V1__PartitionRef in = STREAMBATCH__V1__PARTITION_REF__INIT;
    in.id = "s1-t1-p0";
    in.worker_address = "10.0.0.1:7070";
    in.bytes = 64 << 20;
    Streambatch__V1__PartitionRef *ins[] = {&in};
    Streambatch__V1__Task t = STREAMBATCH__V1__TASK__INIT;
    t.task_id = "pipe/s2-t7";
    t.pipeline = "pipe";
    t.stage = "resize";
    t.n_ops = 1;
    t.ops = ops;
    t.n_inputs = 1;
    t.inputs = ins;
    Streambatch__V1__Task *tasks[] = {&t};
    Streambatch__V1__PollTasksReply pr = STREAMBATCH__V1__POLL_TASKS_REPLY__INIT;
    pr.n_tasks = 1;
    pr.tasks = tasks;
    size_t n;
    uint8_t *b = encode(&pr.base, &n);
    ProtobufCMessage *m =
        sb_rpc_msg_decode(&streambatch__v1__poll_tasks_reply__descriptor, b, n, &err);
    cr_assert_not_null(m, "%s", err.msg);
    Streambatch__V1__PollTasksReply *d = (void *)m;
    cr_assert_str_eq(d->tasks[0]->ops[0]->args_json, "{\"cpu_per_byte\": 10}");
    cr_assert_eq(d->tasks[0]->inputs[0]->bytes, 64 << 20);
    sb_rpc_msg_free(m);
    free(b);
    in.id = "s1-t1";
    cr_assert_eq(sb_rpc_msg_validate(&pr.base, &err), -1);
    cr_assert(strstr(err.msg, "tasks[0]") && strstr(err.msg, "inputs[0]"), "%s", err.msg);
    in.id = "s1-t1-p0";
    t.n_ops = 0;
    cr_assert_eq(sb_rpc_msg_validate(&pr.base, &err), -1);
    cr_assert(strstr(err.msg, "ops is empty"), "%s", err.msg);

    Streambatch__V1__HeartbeatReply hr = STREAMBATCH__V1__HEARTBEAT_REPLY__INIT;
    char *rel[] = {"s1-t1-p0", "s1-t1-p1"};
    hr.n_release = 2;
    hr.release = rel;
    hr.drain = 1;
    cr_assert_eq(sb_rpc_msg_validate(&hr.base, &err), 0, "%s", err.msg);
    rel[1] = "";
    cr_assert_eq(sb_rpc_msg_validate(&hr.base, &err), -1);
    cr_assert(strstr(err.msg, "release[1]"), "%s", err.msg);
}

Test(rpc_msgs, chunk_bounds_and_fetch_request)
{
    Streambatch__V1__Chunk c = STREAMBATCH__V1__CHUNK__INIT;
    uint8_t d[10] = {0};
    c.data.data = d;
    c.data.len = 10;
    c.offset = 90;
    c.total_length = 100;
    sb_err err;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), 0);
    c.offset = 91;
    cr_assert_eq(sb_rpc_msg_validate(&c.base, &err), -1);
    cr_assert(strstr(err.msg, "outside"), "%s", err.msg);
    Streambatch__V1__FetchRequest f = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    f.partition_id = "s3-t0-p12";
    f.offset = 1 << 20;
    cr_assert_eq(sb_rpc_msg_validate(&f.base, &err), 0, "%s", err.msg);
    f.partition_id = "s3-t0-p012";
    cr_assert_eq(sb_rpc_msg_validate(&f.base, &err), -1);
    cr_assert(strstr(err.msg, "FetchRequest") && strstr(err.msg, "partition_id"), "%s", err.msg);
}

Test(rpc_msgs, code_names)
{
    cr_assert_str_eq(sb_rpc_code_name(SB_RPC_OK), "OK");
    cr_assert_str_eq(sb_rpc_code_name(SB_RPC_INVALID_ARGUMENT), "INVALID_ARGUMENT");
    cr_assert_str_eq(sb_rpc_code_name(SB_RPC_UNAUTHENTICATED), "UNAUTHENTICATED");
    cr_assert_str_eq(sb_rpc_code_name(17), "UNKNOWN_CODE");
    cr_assert_str_eq(sb_rpc_code_name(-1), "UNKNOWN_CODE");
}

Test(rpc_msgs, invalid_field_numbers_are_rejected)
{
    /* PollTasksRequest{worker_id: "w"} followed by an unknown varint field numbered 0 (in an
     * over-long encoding) or 1664900330 (> 2^29-1): protobuf-c alone accepts both */
    static const uint8_t zero[] = {0x0a, 0x01, 'w', 0x80, 0x00, 0x01};
    static const uint8_t huge[] = {0x0a, 0x01, 'w', 0xd0, 0xce, 0x8b, 0xcf, 0x31, 0x01};
    static const uint8_t fine[] = {0x0a, 0x01, 'w', 0xb8, 0x01, 0x07}; /* field 23: kept */
    const ProtobufCMessageDescriptor *d = &streambatch__v1__poll_tasks_request__descriptor;
    sb_err err;
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, sizeof zero, zero);
    cr_assert_not_null(m, "protobuf-c changed: it now rejects field 0 itself");
    sb_rpc_msg_free(m);
    cr_assert_null(sb_rpc_msg_decode(d, zero, sizeof zero, &err));
    cr_assert(strstr(err.msg, "invalid field number 0"), "%s", err.msg);
    cr_assert_null(sb_rpc_msg_decode(d, huge, sizeof huge, &err));
    cr_assert(strstr(err.msg, "invalid field number 1664900330"), "%s", err.msg);
    m = sb_rpc_msg_decode(d, fine, sizeof fine, &err);
    cr_assert_not_null(m, "an unknown field from a newer peer is accepted: %s", err.msg);
    cr_assert_eq(m->n_unknown_fields, 1);
    sb_rpc_msg_free(m);
}
