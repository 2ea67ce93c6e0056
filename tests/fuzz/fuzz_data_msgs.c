/* libFuzzer target for worker/data's receiving side: sb_data_recv_feed() must never read out of
 * bounds, crash, leak or accept an inconsistent blob, whatever Chunk messages arrive and however
 * gRPC cut them into pieces. (lib/partition's fuzzer covers the assembler on its own; this one
 * goes through the protobuf Chunk parsing, the size checks against the server's and the header's
 * claims, and the piece handling that the fetch client adds.)
 *
 * Input, first byte = mode:
 *   even: raw messages. Then [u16 length][u8 piece size][length bytes] records: each record is
 *         fed as one message cut into pieces of that size (0 = one piece).
 *   odd:  a blob sent as correct chunks. Bytes 1-2: chunk grid (1..4096), byte 3: a chunk index
 *         to damage (crc, payload or total, by byte 4; 255: none), byte 5: expected-length mode,
 *         then the blob. Chunks get their real crc32c and offsets; pieces of 1..64 KiB.
 * Invariants checked: the next offset never passes the total; a complete blob has exactly the
 * blob's bytes; an undamaged, well-formed blob that opens must equal the input.
 * Seeds: tests/fuzz/corpus/data_msgs/ (real partition blobs in blob mode, raw chunk messages). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "partition/crc32c.h"
#include "partition/partition.h"
#include "rpc/chunkmsg.h"
#include "worker/data/fetch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static sb_data_recv *g_r;

/* Feeds msg cut into pieces of `step` bytes (0: one piece), copied so that ASan sees each
 * piece's bounds. */
static int feed_cut(const uint8_t *msg, size_t n, size_t step, sb_err *err)
{
    enum { MAXP = 512 };
    sb_rpc_piece pc[MAXP];
    uint8_t *copies[MAXP];
    size_t k = 0;
    if (step == 0 || n / step >= MAXP)
        step = n ? n : 1;
    for (size_t at = 0; at < n && k < MAXP; at += step, k++) {
        size_t len = n - at < step ? n - at : step;
        copies[k] = malloc(len);
        memcpy(copies[k], msg + at, len);
        pc[k].ptr = copies[k];
        pc[k].len = len;
    }
    int rc = sb_data_recv_feed(g_r, pc, k, err);
    for (size_t i = 0; i < k; i++)
        free(copies[i]);
    return rc;
}

static void check_state(void)
{
    uint64_t next = sb_data_recv_next_offset(g_r), total = sb_data_recv_total(g_r);
    CHECK(total == 0 || next <= total);
    size_t len = 0;
    const void *v = sb_data_recv_view(g_r, &len);
    CHECK((v != NULL) == sb_data_recv_done(g_r));
    if (v) {
        CHECK(len == total);
        sb_batch *b = NULL;
        sb_err err;
        if (sb_batch_open_ex(v, len, SB_BATCH_OPEN_SKIP_CHECKSUM, &b, &err) == 0)
            sb_batch_close(b);
    }
}

static void raw_mode(const uint8_t *p, size_t n)
{
    sb_data_recv_reset(g_r, "s1-t0-p0", 0, 1 << 24, 4096);
    sb_err err;
    while (n >= 3) {
        size_t len = (size_t)p[0] | (size_t)p[1] << 8;
        size_t step = p[2];
        p += 3;
        n -= 3;
        if (len > n)
            len = n;
        (void)feed_cut(p, len, step, &err);
        check_state();
        p += len;
        n -= len;
    }
}

static void blob_mode(const uint8_t *p, size_t n)
{
    if (n < 6)
        return;
    size_t grid = ((size_t)p[1] | (size_t)p[2] << 8) % 4096 + 1;
    unsigned bad = p[3], how = p[4] % 3, exp_mode = p[5] % 3;
    const uint8_t *blob = p + 6;
    size_t len = n - 6;
    size_t expected = exp_mode == 0 ? 0 : exp_mode == 1 ? len : len + 64;
    sb_data_recv_reset(g_r, "s1-t0-p0", expected, 1 << 24, grid);
    uint8_t *msg = malloc(grid + SB_RPC_CHUNK_HEAD_MAX + SB_RPC_CHUNK_TAIL_MAX);
    sb_err err;
    int damaged = 0, failed = 0;
    for (size_t off = 0, idx = 0; off < len; off += grid, idx++) {
        size_t clen = len - off < grid ? len - off : grid;
        uint32_t crc = sb_crc32c(0, blob + off, clen);
        uint64_t total = len;
        sb_rpc_chunk_frame f;
        int hit = bad != 255 && idx == bad;
        if (hit && how == 0)
            crc ^= 0x10000u;
        if (hit && how == 2)
            total += 64;
        sb_rpc_chunk_frame_encode(&f, off, clen, crc, total);
        memcpy(msg, f.head, f.head_len);
        memcpy(msg + f.head_len, blob + off, clen);
        if (hit && how == 1)
            msg[f.head_len + clen / 2] ^= 0x01;
        memcpy(msg + f.head_len + clen, f.tail, f.tail_len);
        damaged |= hit;
        size_t step = (size_t)(blob[off % len] % 64 + 1) * 1024;
        if (feed_cut(msg, f.head_len + clen + f.tail_len, step, &err) != 0) {
            failed = 1;
            check_state();
            break;
        }
        check_state();
    }
    free(msg);
    size_t got;
    const void *v = sb_data_recv_view(g_r, &got);
    if (v) {
        /* Everything arrived: it must be the blob, and nothing damaged can have passed. */
        CHECK(!damaged && !failed);
        CHECK(got == len && memcmp(v, blob, len) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sb_err err;
    if (!g_r && !(g_r = sb_data_recv_new(&err)))
        __builtin_trap();
    if (size == 0)
        return 0;
    if (data[0] & 1)
        blob_mode(data, size);
    else
        raw_mode(data + 1, size - 1);
    /* Half the time hand the blob over instead of keeping it for the next input. */
    size_t len;
    void *taken = (data[0] & 2) ? sb_data_recv_take(g_r, &len) : NULL;
    sb_part_free(taken);
    return 0;
}
