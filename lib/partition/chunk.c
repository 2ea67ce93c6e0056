/* chunk.c — partition blobs cut into checksummed chunks for the wire (see chunk.h): the sender's
 * iterator over a blob, and the receiver's assembler that checks each chunk's crc32c, offset and
 * total and rebuilds the blob. The assembler owns the buffer until sb_part_asm_take hands it
 * out. */

#include "partition/chunk.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "partition/crc32c.h"
#include "partition/partition.h"

size_t sb_part_chunk_count(size_t len, size_t chunk_size)
{
    if (chunk_size == 0)
        chunk_size = SB_PART_CHUNK_MAX;
    return len / chunk_size + (len % chunk_size != 0);
}

int sb_part_chunks_begin(sb_part_chunk_iter *it, const void *blob, size_t len, size_t chunk_size,
                         size_t start, sb_err *err)
{
    if (chunk_size == 0)
        chunk_size = SB_PART_CHUNK_MAX;
    if (chunk_size > SB_PART_CHUNK_MAX)
        return sb_err_set(err, "partition chunks: chunk size %zu exceeds the maximum %zu",
                          chunk_size, SB_PART_CHUNK_MAX);
    if (start > len)
        return sb_err_set(err, "partition chunks: start offset %zu is past the blob's %zu bytes",
                          start, len);
    if (blob == NULL && len > 0)
        return sb_err_set(err, "partition chunks: NULL blob");
    it->blob = blob;
    it->len = len;
    it->chunk_size = chunk_size;
    it->pos = start;
    return 0;
}

bool sb_part_chunks_next(sb_part_chunk_iter *it, sb_part_chunk *out)
{
    if (it->pos >= it->len)
        return false;
    size_t index = it->pos / it->chunk_size;
    size_t end = (index + 1) * it->chunk_size; /* no overflow: pos < len */
    if (end > it->len || end < it->pos)
        end = it->len;
    out->index = index;
    out->offset = it->pos;
    out->len = end - it->pos;
    out->data = it->blob + it->pos;
    out->crc = sb_crc32c(0, out->data, out->len);
    it->pos = end;
    return true;
}

struct sb_part_asm {
    size_t max_len;
    uint8_t *dst; /* destination, cap bytes, or NULL */
    size_t cap;
    uint64_t total;   /* 0 until the header's first 16 bytes have arrived */
    uint64_t next;    /* bytes [0, next) have arrived and been verified */
    uint8_t head[16]; /* the first bytes while the total is unknown */
};

sb_part_asm *sb_part_asm_new(size_t max_len, sb_err *err)
{
    sb_part_asm *a = calloc(1, sizeof *a);
    if (a == NULL) {
        sb_err_set(err, "partition assembler: out of memory");
        return NULL;
    }
    a->max_len = max_len;
    return a;
}

void sb_part_asm_free(sb_part_asm *a)
{
    if (a == NULL)
        return;
    sb_part_free(a->dst);
    free(a);
}

void sb_part_asm_reset(sb_part_asm *a)
{
    a->total = 0;
    a->next = 0;
}

uint64_t sb_part_asm_next_offset(const sb_part_asm *a)
{
    return a->next;
}

uint64_t sb_part_asm_total(const sb_part_asm *a)
{
    return a->total;
}

bool sb_part_asm_done(const sb_part_asm *a)
{
    return a->total != 0 && a->next == a->total;
}

static uint32_t crc_pieces(const sb_part_piece *pieces, size_t n)
{
    uint32_t crc = 0;
    for (size_t i = 0; i < n; i++)
        crc = sb_crc32c(crc, pieces[i].p, pieces[i].len);
    return crc;
}

/* Copies the pieces' bytes to dst. */
static void copy_pieces(uint8_t *dst, const sb_part_piece *pieces, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (pieces[i].len > 0)
            memcpy(dst, pieces[i].p, pieces[i].len);
        dst += pieces[i].len;
    }
}

#define CHUNK_FMT "partition assembler: chunk %" PRIu64 " at offset %" PRIu64 ": "

static int crc_mismatch(sb_err *err, const sb_part_chunk *c, uint32_t got)
{
    return sb_err_set(err, CHUNK_FMT "crc32c mismatch (chunk says 0x%08x, bytes give 0x%08x)",
                      c->index, c->offset, c->crc, got);
}

/* Learns the total from the header bytes in a->head and allocates the destination. */
static int learn_total(sb_part_asm *a, const sb_part_chunk *c, sb_err *err)
{
    uint64_t total;
    sb_err perr;
    if (sb_part_peek(a->head, sizeof a->head, &total, NULL, &perr) != 0)
        return sb_err_set(err, CHUNK_FMT "%s", c->index, c->offset, perr.msg);
    if (total > a->max_len)
        return sb_err_set(
            err, CHUNK_FMT "the partition is %" PRIu64 " bytes, more than the limit of %zu",
            c->index, c->offset, total, a->max_len);
    if (c->offset + c->len > total)
        return sb_err_set(err,
                          CHUNK_FMT "%zu bytes run past the end of the %" PRIu64 "-byte partition",
                          c->index, c->offset, c->len, total);
    if (a->dst == NULL || a->cap < total) {
        sb_part_free(a->dst);
        a->cap = 0;
        a->dst = sb_part_alloc((size_t)total);
        if (a->dst == NULL)
            return sb_err_set(err, CHUNK_FMT "out of memory for a %" PRIu64 "-byte partition",
                              c->index, c->offset, total);
        a->cap = (size_t)total;
    }
    a->total = total;
    return 0;
}

int sb_part_asm_add(sb_part_asm *a, const sb_part_chunk *c, const sb_part_piece *pieces,
                    size_t npieces, sb_err *err)
{
    size_t sum = 0;
    for (size_t i = 0; i < npieces; i++) {
        if (pieces[i].p == NULL && pieces[i].len > 0)
            return sb_err_set(err, CHUNK_FMT "piece %zu is NULL", c->index, c->offset, i);
        sum += pieces[i].len;
    }
    if (sum != c->len)
        return sb_err_set(err, CHUNK_FMT "header says %zu bytes but the pieces hold %zu", c->index,
                          c->offset, c->len, sum);
    if (c->len == 0 || c->len > SB_PART_CHUNK_MAX)
        return sb_err_set(err, CHUNK_FMT "length %zu is not between 1 and %zu", c->index, c->offset,
                          c->len, SB_PART_CHUNK_MAX);
    if (c->offset > a->next)
        return sb_err_set(err,
                          CHUNK_FMT "expected offset %" PRIu64 " (chunks must arrive in order)",
                          c->index, c->offset, a->next);
    if (a->total != 0 && (c->offset >= a->total || c->len > a->total - c->offset))
        return sb_err_set(err,
                          CHUNK_FMT "%zu bytes run past the end of the %" PRIu64 "-byte partition",
                          c->index, c->offset, c->len, a->total);
    uint64_t end = c->offset + c->len;

    if (a->total == 0) {
        /* Header phase: verify first, then stage the first bytes until the size is known. */
        uint32_t got = crc_pieces(pieces, npieces);
        if (got != c->crc)
            return crc_mismatch(err, c, got);
        if (c->offset < sizeof a->head) {
            uint8_t tmp[sizeof a->head];
            size_t take = sizeof a->head - (size_t)c->offset;
            if (take > c->len)
                take = c->len;
            /* Gather the first `take` bytes of the pieces. */
            size_t got_n = 0;
            for (size_t i = 0; i < npieces && got_n < take; i++) {
                size_t l = pieces[i].len < take - got_n ? pieces[i].len : take - got_n;
                memcpy(tmp + got_n, pieces[i].p, l);
                got_n += l;
            }
            memcpy(a->head + c->offset, tmp, take);
        }
        if (end < sizeof a->head) {
            a->next = end > a->next ? end : a->next;
            return 0;
        }
        if (learn_total(a, c, err) != 0)
            return -1;
        memcpy(a->dst, a->head, (size_t)c->offset); /* bytes before this chunk */
        copy_pieces(a->dst + c->offset, pieces, npieces);
        a->next = end;
        return 0;
    }

    if (c->offset == a->next) {
        /* Common case: copy into place, then checksum the (cache-hot) destination. */
        copy_pieces(a->dst + c->offset, pieces, npieces);
        uint32_t got = sb_crc32c(0, a->dst + c->offset, c->len);
        if (got != c->crc)
            return crc_mismatch(err, c, got);
        a->next = end;
        return 0;
    }
    /* A re-sent chunk overlapping verified bytes: verify before touching them. */
    uint32_t got = crc_pieces(pieces, npieces);
    if (got != c->crc)
        return crc_mismatch(err, c, got);
    copy_pieces(a->dst + c->offset, pieces, npieces);
    if (end > a->next)
        a->next = end;
    return 0;
}

int sb_part_asm_add_bytes(sb_part_asm *a, const sb_part_chunk *c, const void *bytes, sb_err *err)
{
    sb_part_piece piece = {.p = bytes, .len = c->len};
    return sb_part_asm_add(a, c, &piece, 1, err);
}

const void *sb_part_asm_view(const sb_part_asm *a, size_t *len_out, sb_err *err)
{
    if (!sb_part_asm_done(a)) {
        sb_err_set(err, "partition assembler: incomplete (%" PRIu64 " of %" PRIu64 " bytes)",
                   a->next, a->total);
        return NULL;
    }
    if (len_out != NULL)
        *len_out = (size_t)a->total;
    return a->dst;
}

void *sb_part_asm_take(sb_part_asm *a, size_t *len_out, sb_err *err)
{
    if (sb_part_asm_view(a, len_out, err) == NULL)
        return NULL;
    void *blob = a->dst;
    a->dst = NULL;
    a->cap = 0;
    sb_part_asm_reset(a);
    return blob;
}
