/* fuzz_rpc_msgs.c — libFuzzer target for what lib/rpc does with bytes from the network before a
 * handler sees them. The first input byte picks the path:
 *   0: dispatch — the next byte picks a method of streambatch.v1 (or an unknown path made from
 *      the input); the rest is decoded (unpack + validation) as that method's request and
 *      response. Whatever decodes must re-encode and decode again to the same bytes.
 *   1: Chunk parsing from pieces — the next bytes give cut points, the rest is the message. The
 *      piecewise parser must agree with protobuf-c on the flattened bytes (same fields, same
 *      data), never read outside the pieces, and its data iterator must cover data_len bytes.
 *   2: partition ids — parse; what parses must format back to the same string.
 *   3: Chunk framing — header/trailer for fuzzed field values + payload must parse back. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/chunkmsg.h"
#include "rpc/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            abort();                                                                               \
    } while (0)

static void round_trip(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len)
{
    sb_err err;
    ProtobufCMessage *m = sb_rpc_msg_decode(d, buf, len, &err);
    if (!m) {
        CHECK(err.msg[0] != '\0');
        return;
    }
    size_t n1, n2;
    uint8_t *e1 = sb_rpc_msg_encode(m, &n1, &err);
    CHECK(e1);
    ProtobufCMessage *m2 = sb_rpc_msg_decode(d, e1, n1, &err);
    CHECK(m2); /* a valid message stays valid once re-encoded */
    uint8_t *e2 = sb_rpc_msg_encode(m2, &n2, &err);
    CHECK(e2 && n1 == n2 && memcmp(e1, e2, n1) == 0);
    free(e1);
    free(e2);
    sb_rpc_msg_free(m2);
    sb_rpc_msg_free(m);
}

static void fuzz_dispatch(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    size_t n;
    const sb_rpc_method_info *tab = sb_rpc_methods(&n);
    const sb_rpc_method_info *mi;
    if (data[0] < 2 * n) {
        mi = sb_rpc_method_find(tab[data[0] % n].path);
        CHECK(mi == &tab[data[0] % n]);
    } else { /* an arbitrary path: must not be found unless it is a real one */
        char path[64];
        size_t l = size - 1 < sizeof path - 1 ? size - 1 : sizeof path - 1;
        memcpy(path, data + 1, l);
        path[l] = '\0';
        mi = sb_rpc_method_find(path);
        CHECK(!mi || strcmp(mi->path, path) == 0);
        return;
    }
    round_trip(mi->request, data + 1, size - 1);
    round_trip(mi->response, data + 1, size - 1);
}

static void fuzz_chunk(const uint8_t *data, size_t size)
{
    if (size < 3)
        return;
    /* up to 3 cut points from the first bytes, then the message (copied so that ASan sees
     * reads past any piece as reads past the whole buffer) */
    size_t ncuts = data[0] % 4;
    if (size < 1 + ncuts)
        return;
    const uint8_t *msg = data + 1 + ncuts;
    size_t len = size - 1 - ncuts;
    uint8_t *buf = malloc(len ? len : 1);
    memcpy(buf, msg, len);
    sb_rpc_piece pieces[4];
    size_t np = 0, at = 0;
    for (size_t i = 0; i < ncuts; i++) {
        size_t cut = len ? (size_t)data[1 + i] * len / 255 : 0;
        if (cut < at)
            cut = at;
        pieces[np].ptr = buf + at;
        pieces[np].len = cut - at;
        np++;
        at = cut;
    }
    pieces[np].ptr = buf + at;
    pieces[np].len = len - at;
    np++;

    sb_rpc_chunk c;
    sb_err err;
    int rc = sb_rpc_chunk_parse(pieces, np, &c, &err);
    Streambatch__V1__Chunk *ref = streambatch__v1__chunk__unpack(NULL, len, buf);
    int ref_valid = ref != NULL;
    for (unsigned i = 0; ref && i < ref->base.n_unknown_fields; i++)
        if (ref->base.unknown_fields[i].tag == 0 || ref->base.unknown_fields[i].tag > 0x1fffffff)
            ref_valid = 0; /* protobuf-c lets invalid field numbers through; we do not */
    if (ref_valid)
        CHECK(rc == 0); /* whatever protobuf-c rightly accepts, the piecewise parser accepts */
    if (rc == 0) {
        CHECK(c.data_len <= len);
        sb_rpc_chunk_iter it;
        sb_rpc_piece p;
        size_t got = 0;
        sb_rpc_chunk_data_begin(&c, &it);
        while (sb_rpc_chunk_data_next(pieces, np, &it, &p)) {
            CHECK(p.ptr >= buf && p.ptr + p.len <= buf + len);
            got += p.len;
        }
        CHECK(got == c.data_len);
        uint8_t *out = malloc(c.data_len ? c.data_len : 1);
        CHECK(sb_rpc_chunk_copy_data(pieces, np, &c, out, c.data_len, &err) == 0);
        if (ref) {
            CHECK(ref->offset == c.offset && ref->crc32c == c.crc32c &&
                  ref->total_length == c.total_length && ref->data.len == c.data_len);
            CHECK(c.data_len == 0 || memcmp(out, ref->data.data, c.data_len) == 0);
        }
        free(out);
    }
    if (ref)
        streambatch__v1__chunk__free_unpacked(ref, NULL);
    free(buf);
}

static void fuzz_id(const uint8_t *data, size_t size)
{
    char s[80];
    size_t l = size < sizeof s - 1 ? size : sizeof s - 1;
    memcpy(s, data, l);
    s[l] = '\0';
    uint32_t st, sq;
    uint64_t tk;
    sb_err err;
    if (sb_part_id_parse(s, &st, &tk, &sq, &err) == 0) {
        char back[SB_PART_ID_MAX];
        CHECK(sb_part_id_format(back, sizeof back, st, tk, sq) > 0);
        CHECK(strcmp(back, s) == 0);
    } else {
        CHECK(err.msg[0] != '\0');
    }
}

static uint64_t take64(const uint8_t **p, size_t *n)
{
    uint64_t v = 0;
    for (int i = 0; i < 8 && *n > 0; i++, (*p)++, (*n)--)
        v |= (uint64_t) * *p << (8 * i);
    return v;
}

static void fuzz_frame(const uint8_t *data, size_t size)
{
    uint64_t off = take64(&data, &size), total = take64(&data, &size);
    uint32_t crc = (uint32_t)take64(&data, &size);
    sb_rpc_chunk_frame f;
    sb_rpc_chunk_frame_encode(&f, off, size, crc, total);
    CHECK(f.head_len <= SB_RPC_CHUNK_HEAD_MAX && f.tail_len <= SB_RPC_CHUNK_TAIL_MAX);
    sb_rpc_piece pieces[3] = {{f.head, f.head_len}, {data, size}, {f.tail, f.tail_len}};
    sb_rpc_chunk c;
    sb_err err;
    CHECK(sb_rpc_chunk_parse(pieces, 3, &c, &err) == 0);
    CHECK(c.offset == off && c.total_length == total && c.crc32c == crc && c.data_len == size);
    uint8_t *out = malloc(size ? size : 1);
    CHECK(sb_rpc_chunk_copy_data(pieces, 3, &c, out, size, &err) == 0);
    CHECK(size == 0 || memcmp(out, data, size) == 0);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0:
        fuzz_dispatch(data + 1, size - 1);
        break;
    case 1:
        fuzz_chunk(data + 1, size - 1);
        break;
    case 2:
        fuzz_id(data + 1, size - 1);
        break;
    default:
        fuzz_frame(data + 1, size - 1);
        break;
    }
    return 0;
}
