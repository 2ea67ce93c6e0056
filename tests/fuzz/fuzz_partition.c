/* libFuzzer target for lib/partition: the blob reader, the chunk assembler and the line
 * splitter must never read out of bounds, leak or accept something inconsistent.
 *
 * Each input is used four ways:
 *   1. opened as a blob as is (checksums make most inputs fail early, as they should);
 *   2. resealed (checksums recomputed) and opened again, so that every structural check is
 *      reachable; whatever opens is read completely, exported to Arrow, rebuilt row by row
 *      through the builder (the rebuilt blob must hold the same values, and rebuilding it again
 *      must give identical bytes), and sent through chunking + the assembler;
 *   3. fed to an assembler as chunks with correct crcs (garbage headers, size limit);
 *   4. split into lines into a utf8 column (when valid) and a binary column.
 * Seeds: tests/fuzz/corpus/partition/ (blobs of every column type, plus text). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arrow/cdata.h"
#include "partition/chunk.h"
#include "partition/crc32c.h"
#include "partition/partition.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__ubsan_default_options(void);

/* Undefined behaviour is a finding, also where the build lets UBSan recover. */
const char *__ubsan_default_options(void)
{
    return "halt_on_error=1:print_stacktrace=1";
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static volatile uint8_t sink;

/* Touches every byte a reader may touch. */
static void read_all(const sb_batch *b)
{
    uint8_t acc = 0;
    for (size_t c = 0; c < sb_batch_ncols(b); c++) {
        const sb_column *col = sb_batch_column(b, c);
        CHECK(col != NULL && strlen(col->name) == col->name_len);
        for (size_t k = 0; k < col->values_len; k++)
            acc ^= ((const uint8_t *)col->values)[k];
        size_t nulls = 0;
        for (size_t r = 0; r < col->length; r++) {
            nulls += !sb_column_valid(col, r);
            if (col->type == SB_TYPE_BINARY || col->type == SB_TYPE_UTF8) {
                size_t n;
                const uint8_t *p = sb_column_binary(col, r, &n);
                CHECK(p >= (const uint8_t *)col->values &&
                      p + n <= (const uint8_t *)col->values + col->values_len);
                if (n > 0)
                    acc ^= p[0] ^ p[n - 1];
            } else if (col->type == SB_TYPE_FIXED_LIST) {
                const uint8_t *p = sb_column_list(col, r);
                acc ^= p[col->list_size * sb_type_width(col->child_type) - 1];
            } else if (col->type == SB_TYPE_BOOL) {
                acc ^= sb_column_bool(col, r);
            } else {
                double d = sb_column_double(col, r);
                uint64_t bits;
                memcpy(&bits, &d, sizeof bits);
                acc ^= (uint8_t)sb_column_int(col, r) ^ (uint8_t)bits;
            }
        }
        CHECK(nulls == col->null_count);
    }
    sink = acc;
}

static void export_and_release(const sb_batch *b)
{
    struct ArrowSchema s;
    struct ArrowArray a;
    if (sb_batch_export(b, &s, &a, NULL) != 0)
        return;
    CHECK(s.n_children == (int64_t)sb_batch_ncols(b) && a.n_children == s.n_children);
    CHECK(a.length == (int64_t)sb_batch_rows(b));
    a.release(&a);
    s.release(&s);
}

/* Rebuilds b row by row; returns the new blob (or NULL when the builder refuses, which is only
 * allowed for reasons the reader also enforces, so it is a failure). */
static void *rebuild(const sb_batch *b, size_t *len)
{
    sb_err err;
    sb_batch_builder *bb = sb_batch_builder_new_like(b, &err);
    CHECK(bb != NULL);
    for (size_t c = 0; c < sb_batch_ncols(b); c++) {
        const sb_column *col = sb_batch_column(b, c);
        size_t w = col->type == SB_TYPE_FIXED_LIST ? col->list_size * sb_type_width(col->child_type)
                                                   : sb_type_width(col->type);
        for (size_t r = 0; r < col->length; r++) {
            int rc;
            if (!sb_column_valid(col, r)) {
                rc = sb_batch_builder_append_null(bb, c, &err);
            } else if (col->type == SB_TYPE_BINARY || col->type == SB_TYPE_UTF8) {
                size_t n;
                const void *p = sb_column_binary(col, r, &n);
                rc = sb_batch_builder_append_binary(bb, c, p, n, &err);
            } else if (col->type == SB_TYPE_BOOL) {
                uint8_t v = sb_column_bool(col, r);
                rc = sb_batch_builder_append_values(bb, c, &v, 1, NULL, &err);
            } else {
                rc = sb_batch_builder_append_values(bb, c, (const uint8_t *)col->values + r * w, 1,
                                                    NULL, &err);
            }
            CHECK(rc == 0);
        }
    }
    size_t predicted = sb_batch_builder_bytes(bb);
    void *out = NULL;
    CHECK(sb_batch_builder_finish(bb, &out, len, &err) == 0);
    CHECK(*len == predicted);
    sb_batch_builder_free(bb);
    return out;
}

/* Same rows, nulls and (for valid rows) values. */
static void same_values(const sb_batch *x, const sb_batch *y)
{
    CHECK(sb_batch_rows(x) == sb_batch_rows(y) && sb_batch_ncols(x) == sb_batch_ncols(y));
    for (size_t c = 0; c < sb_batch_ncols(x); c++) {
        const sb_column *a = sb_batch_column(x, c), *b = sb_batch_column(y, c);
        CHECK(a->type == b->type && a->null_count == b->null_count &&
              strcmp(a->name, b->name) == 0 && a->list_size == b->list_size);
        size_t w = a->type == SB_TYPE_FIXED_LIST ? a->list_size * sb_type_width(a->child_type)
                                                 : sb_type_width(a->type);
        for (size_t r = 0; r < a->length; r++) {
            CHECK(sb_column_valid(a, r) == sb_column_valid(b, r));
            if (!sb_column_valid(a, r))
                continue;
            if (a->type == SB_TYPE_BINARY || a->type == SB_TYPE_UTF8) {
                size_t na, nb;
                const void *pa = sb_column_binary(a, r, &na), *pb = sb_column_binary(b, r, &nb);
                CHECK(na == nb && memcmp(pa, pb, na) == 0);
            } else if (a->type == SB_TYPE_BOOL) {
                CHECK(sb_column_bool(a, r) == sb_column_bool(b, r));
            } else {
                CHECK(memcmp((const uint8_t *)a->values + r * w, (const uint8_t *)b->values + r * w,
                             w) == 0);
            }
        }
    }
}

/* Chunks `blob` (chunk size and piece size from `seed`) through an assembler; must round-trip. */
static void transfer(const uint8_t *blob, size_t len, unsigned seed)
{
    size_t cs = 1 + (seed * 97u) % 4096, piece = 1 + (seed >> 3) % 700;
    sb_part_asm *a = sb_part_asm_new(1 << 24, NULL);
    CHECK(a != NULL);
    sb_part_chunk_iter it;
    CHECK(sb_part_chunks_begin(&it, blob, len, cs, 0, NULL) == 0);
    sb_part_chunk c;
    sb_part_piece pieces[8];
    while (sb_part_chunks_next(&it, &c)) {
        size_t np = 0, off = 0;
        while (off < c.len) {
            size_t n = np == 7 ? c.len - off : (c.len - off < piece ? c.len - off : piece);
            pieces[np].p = (const uint8_t *)c.data + off;
            pieces[np].len = n;
            off += n;
            np++;
        }
        CHECK(sb_part_asm_add(a, &c, pieces, np, NULL) == 0);
    }
    size_t out_len;
    void *out = sb_part_asm_take(a, &out_len, NULL);
    CHECK(out != NULL && out_len == len && memcmp(out, blob, len) == 0);
    sb_part_free(out);
    sb_part_asm_free(a);
}

static void exercise(const sb_batch *b, unsigned seed)
{
    read_all(b);
    export_and_release(b);
    size_t len1, len2;
    void *r1 = rebuild(b, &len1);
    sb_batch *b1;
    sb_err err;
    CHECK(sb_batch_open(r1, len1, &b1, &err) == 0);
    same_values(b, b1);
    void *r2 = rebuild(b1, &len2);
    CHECK(len1 == len2 && memcmp(r1, r2, len1) == 0); /* the builder's output is canonical */
    transfer(r1, len1, seed);
    sb_batch_close(b1);
    sb_part_free(r1);
    sb_part_free(r2);
}

/* The raw input as a chunk stream with correct crcs (exercises the header phase on garbage),
 * driven by a PRNG from `seed` that also re-sends earlier bytes, damages chunks and leaves gaps:
 * damaged chunks and gaps must be refused without progress, and a completed blob must equal
 * the input's prefix. */
static void assemble_raw(const uint8_t *data, size_t size, unsigned seed)
{
    sb_part_asm *a = sb_part_asm_new(1 << 16, NULL);
    CHECK(a != NULL);
    uint32_t r = seed * 2654435761u + 1;
    size_t cs = 1 + seed % 64;
    for (int step = 0; step < 4096 && !sb_part_asm_done(a); step++) {
        r = r * 1103515245u + 12345u;
        uint64_t next = sb_part_asm_next_offset(a);
        unsigned action = (r >> 16) % 8;
        uint64_t off = next;
        if (action == 1 && next > 0)
            off = next - 1 - (r >> 8) % next; /* a re-send from earlier */
        else if (action == 2)
            off = next + 1 + (r >> 8) % 64; /* a gap */
        if (off >= size)
            break;
        sb_part_chunk c = {.index = off / cs, .offset = off};
        c.len = size - off < cs ? size - (size_t)off : cs;
        c.crc = sb_crc32c(0, data + off, c.len) ^ (action == 3 ? 1u << (r % 32) : 0u);
        int rc = sb_part_asm_add_bytes(a, &c, data + off, NULL);
        if (action == 2 || action == 3) {
            CHECK(rc != 0 && sb_part_asm_next_offset(a) == next);
            continue;
        }
        if (rc != 0)
            break; /* a bad header or size: the stream is over */
        CHECK(sb_part_asm_next_offset(a) >= next);
    }
    if (sb_part_asm_done(a)) {
        size_t len;
        const void *v = sb_part_asm_view(a, &len, NULL);
        CHECK(v != NULL && len <= size && memcmp(v, data, len) == 0);
    }
    sb_part_asm_free(a);
}

static void lines(const uint8_t *data, size_t size)
{
    sb_field f[1] = {{.name = "line", .type = SB_TYPE_BINARY}};
    for (int utf8 = 0; utf8 < 2; utf8++) {
        f[0].type = utf8 ? SB_TYPE_UTF8 : SB_TYPE_BINARY;
        sb_batch_builder *b = sb_batch_builder_new(f, 1, NULL);
        CHECK(b != NULL);
        size_t used = 0;
        int rc = sb_batch_builder_append_lines(b, 0, data, size, size & 1, true, &used, NULL);
        CHECK(rc == 0 ? used == size : (utf8 && sb_batch_builder_rows(b) == 0));
        size_t want_rows = 0;
        if (rc == 0) {
            for (size_t i = 0; i < size; i++)
                want_rows += data[i] == '\n';
            want_rows += size > 0 && data[size - 1] != '\n';
            CHECK(sb_batch_builder_rows(b) == want_rows);
        }
        void *blob;
        size_t len;
        CHECK(sb_batch_builder_finish(b, &blob, &len, NULL) == 0);
        sb_batch *bt;
        CHECK(sb_batch_open(blob, len, &bt, NULL) == 0);
        CHECK(sb_batch_rows(bt) == want_rows);
        sb_batch_close(bt);
        sb_part_free(blob);
        sb_batch_builder_free(b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned seed = size > 0 ? data[size - 1] : 0;
    uint8_t *blob = sb_part_alloc(size);
    if (blob == NULL)
        return 0;
    if (size > 0)
        memcpy(blob, data, size);
    sb_batch *b;
    if (sb_batch_open(blob, size, &b, NULL) == 0) {
        exercise(b, seed);
        sb_batch_close(b);
    }
    if (sb_part_seal(blob, size, NULL) == 0) {
        for (unsigned flags = 0; flags < 2; flags++) {
            if (sb_batch_open_ex(blob, size, flags ? SB_BATCH_OPEN_SKIP_UTF8 : 0, &b, NULL) != 0)
                continue;
            if (flags == 0)
                exercise(b, seed);
            else
                read_all(b);
            sb_batch_close(b);
        }
    }
    sb_part_free(blob);
    assemble_raw(data, size, seed);
    lines(data, size);
    return 0;
}
