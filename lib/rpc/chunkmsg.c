/* chunkmsg.c — the Data.Fetch Chunk message without copying its payload (see chunkmsg.h): the
 * frame header encoded around a blob's bytes, and a piecewise parser that finds offset, crc32c,
 * total length and the data's pieces across the buffers gRPC delivers. Allocates nothing. */

#include "rpc/chunkmsg.h"

#include <string.h>

/* Field tags: (number << 3) | wire type. */
enum {
    TAG_OFFSET = (1 << 3) | 0, /* varint */
    TAG_DATA = (2 << 3) | 2,   /* length-delimited */
    TAG_CRC = (3 << 3) | 5,    /* fixed32 */
    TAG_TOTAL = (4 << 3) | 0,  /* varint */
};

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

void sb_rpc_chunk_frame_encode(sb_rpc_chunk_frame *f, uint64_t offset, size_t data_len,
                               uint32_t crc32c, uint64_t total_length)
{
    size_t n = 0;
    if (offset) {
        f->head[n++] = TAG_OFFSET;
        n += put_varint(f->head + n, offset);
    }
    if (data_len) {
        f->head[n++] = TAG_DATA;
        n += put_varint(f->head + n, (uint64_t)data_len);
    }
    f->head_len = n;
    n = 0;
    if (crc32c) {
        f->tail[n++] = TAG_CRC;
        for (int i = 0; i < 4; i++)
            f->tail[n++] = (uint8_t)(crc32c >> (8 * i));
    }
    if (total_length) {
        f->tail[n++] = TAG_TOTAL;
        n += put_varint(f->tail + n, total_length);
    }
    f->tail_len = n;
}

/* A read cursor over a list of pieces. */
typedef struct cursor {
    const sb_rpc_piece *p;
    size_t n;
    size_t i;   /* current piece */
    size_t off; /* offset within it */
    size_t pos; /* absolute position (for messages) */
} cursor;

static void cur_settle(cursor *c)
{
    while (c->i < c->n && c->off >= c->p[c->i].len) {
        c->i++;
        c->off = 0;
    }
}

static int cur_byte(cursor *c, uint8_t *b)
{
    cur_settle(c);
    if (c->i >= c->n)
        return -1;
    *b = c->p[c->i].ptr[c->off++];
    c->pos++;
    return 0;
}

/* Skips k bytes; -1 if fewer remain. */
static int cur_skip(cursor *c, uint64_t k)
{
    while (k > 0) {
        cur_settle(c);
        if (c->i >= c->n)
            return -1;
        size_t avail = c->p[c->i].len - c->off;
        size_t step = k < avail ? (size_t)k : avail;
        c->off += step;
        c->pos += step;
        k -= step;
    }
    return 0;
}

/* Varints of up to 10 bytes; bits beyond 64 are dropped, as protobuf parsers do. */
static int cur_varint(cursor *c, uint64_t *v)
{
    uint64_t r = 0;
    for (int i = 0; i < 10; i++) {
        uint8_t b;
        if (cur_byte(c, &b) < 0)
            return -1;
        if (i < 9)
            r |= (uint64_t)(b & 0x7f) << (7 * i);
        else
            r |= (uint64_t)(b & 0x01) << 63;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -2;
}

int sb_rpc_chunk_parse(const sb_rpc_piece *pieces, size_t n, sb_rpc_chunk *out, sb_err *err)
{
    cursor c = {.p = pieces, .n = n};
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (pieces[i].len && !pieces[i].ptr)
            return sb_err_set(err, "chunk: piece %zu has no data", i);
        total += pieces[i].len;
    }
    memset(out, 0, sizeof *out);
    while (c.pos < total) {
        size_t at = c.pos;
        uint64_t key, v;
        int rc = cur_varint(&c, &key);
        if (rc < 0)
            return sb_err_set(err, "chunk: %s field key at byte %zu",
                              rc == -1 ? "truncated" : "overlong", at);
        uint64_t field = key >> 3;
        unsigned wire = (unsigned)(key & 7);
        if (field == 0 || field > 0x1fffffff)
            return sb_err_set(err, "chunk: invalid field number at byte %zu", at);
        int known = field >= 1 && field <= 4;
        static const unsigned expect[5] = {0, 0, 2, 5, 0};
        if (known && wire != expect[field])
            return sb_err_set(err, "chunk: field %u has wire type %u, want %u at byte %zu",
                              (unsigned)field, wire, expect[field], at);
        switch (wire) {
        case 0:
            rc = cur_varint(&c, &v);
            if (rc < 0)
                return sb_err_set(err, "chunk: %s varint in field %u at byte %zu",
                                  rc == -1 ? "truncated" : "overlong", (unsigned)field, at);
            if (field == 1)
                out->offset = v;
            else if (field == 4)
                out->total_length = v;
            break;
        case 1:
            if (cur_skip(&c, 8) < 0)
                return sb_err_set(err, "chunk: truncated fixed64 in field %u at byte %zu",
                                  (unsigned)field, at);
            break;
        case 5: {
            uint32_t x = 0;
            for (int i = 0; i < 4; i++) {
                uint8_t b;
                if (cur_byte(&c, &b) < 0)
                    return sb_err_set(err, "chunk: truncated fixed32 in field %u at byte %zu",
                                      (unsigned)field, at);
                x |= (uint32_t)b << (8 * i);
            }
            if (field == 3)
                out->crc32c = x;
            break;
        }
        case 2:
            rc = cur_varint(&c, &v);
            if (rc < 0)
                return sb_err_set(err, "chunk: %s length in field %u at byte %zu",
                                  rc == -1 ? "truncated" : "overlong", (unsigned)field, at);
            if (v > total - c.pos)
                return sb_err_set(err,
                                  "chunk: field %u claims %llu bytes but %zu remain (byte %zu)",
                                  (unsigned)field, (unsigned long long)v, total - c.pos, at);
            if (field == 2) {
                cur_settle(&c);
                out->data_len = (size_t)v;
                out->data_piece = c.i;
                out->data_off = c.off;
            }
            if (cur_skip(&c, v) < 0)
                return sb_err_set(err, "chunk: truncated field %u", (unsigned)field);
            break;
        default:
            return sb_err_set(err, "chunk: unsupported wire type %u (field %u) at byte %zu", wire,
                              (unsigned)field, at);
        }
    }
    return 0;
}

void sb_rpc_chunk_data_begin(const sb_rpc_chunk *c, sb_rpc_chunk_iter *it)
{
    it->piece = c->data_piece;
    it->off = c->data_off;
    it->left = c->data_len;
}

int sb_rpc_chunk_data_next(const sb_rpc_piece *pieces, size_t n, sb_rpc_chunk_iter *it,
                           sb_rpc_piece *out)
{
    while (it->left > 0 && it->piece < n) {
        const sb_rpc_piece *p = &pieces[it->piece];
        if (it->off >= p->len) {
            it->piece++;
            it->off = 0;
            continue;
        }
        size_t avail = p->len - it->off;
        size_t take = it->left < avail ? it->left : avail;
        out->ptr = p->ptr + it->off;
        out->len = take;
        it->off += take;
        it->left -= take;
        return 1;
    }
    return 0;
}

int sb_rpc_chunk_copy_data(const sb_rpc_piece *pieces, size_t n, const sb_rpc_chunk *c, void *dst,
                           size_t cap, sb_err *err)
{
    if (c->data_len > cap)
        return sb_err_set(err, "chunk: %zu data bytes do not fit in %zu", c->data_len, cap);
    sb_rpc_chunk_iter it;
    sb_rpc_piece p;
    size_t done = 0;
    sb_rpc_chunk_data_begin(c, &it);
    while (sb_rpc_chunk_data_next(pieces, n, &it, &p)) {
        memcpy((uint8_t *)dst + done, p.ptr, p.len);
        done += p.len;
    }
    if (done != c->data_len)
        return sb_err_set(err, "chunk: data ends after %zu of %zu bytes", done, c->data_len);
    return 0;
}
