/* out.c — sb_op_out (see ops.h): the output operators append records, rows or whole columns to,
 * under one schema, cut into partitions of the target size and handed to the emit callback as
 * they fill. Owns the builder of the partition being made and the schema's field copies. */

#include <stdlib.h>
#include <string.h>

#include "worker/ops/ops.h"

struct sb_op_out {
    size_t target;
    sb_op_emit_fn emit;
    void *ud;
    sb_field *fields; /* the schema, names owned */
    size_t nfields;
    bool has_schema;
    sb_batch_builder *b;
    uint8_t *scratch; /* shifted validity bitmaps */
    size_t scratch_cap;
    uint64_t rows_emitted, parts, bytes;
    bool unsealed;      /* blobs for a consumer in this process: no checksums */
    size_t held;        /* sb_op_out_set_held's bytes (0: not set) */
    sb_op_spare *spare; /* sb_op_out_set_spare's (NULL: none) */
};

sb_op_out *sb_op_out_new(size_t target_bytes, sb_op_emit_fn emit, void *ud, sb_err *err)
{
    if (target_bytes == 0 || emit == NULL) {
        sb_err_set(err, "op output: target size must be positive and emit must be set");
        return NULL;
    }
    sb_op_out *o = calloc(1, sizeof *o);
    if (o == NULL) {
        sb_err_set(err, "op output: out of memory");
        return NULL;
    }
    o->target = target_bytes;
    o->emit = emit;
    o->ud = ud;
    return o;
}

static void free_fields(sb_op_out *o)
{
    for (size_t i = 0; i < o->nfields; i++)
        free((char *)o->fields[i].name);
    free(o->fields);
    o->fields = NULL;
    o->nfields = 0;
}

void sb_op_out_free(sb_op_out *o)
{
    if (o == NULL)
        return;
    sb_batch_builder_free(o->b);
    free_fields(o);
    free(o->scratch);
    free(o);
}

void sb_op_out_set_unsealed(sb_op_out *o)
{
    o->unsealed = true;
}

void sb_op_out_set_spare(sb_op_out *o, sb_op_spare *s)
{
    o->spare = s;
}

void sb_op_out_set_held(sb_op_out *o, size_t bytes)
{
    o->unsealed = true;
    o->held = bytes;
}

void sb_op_out_recycle(sb_op_out *o, void *blob)
{
    if (o->b != NULL)
        sb_batch_builder_recycle(o->b, blob);
    else
        sb_part_free(blob);
}

bool sb_op_out_has_schema(const sb_op_out *o)
{
    return o->has_schema;
}

static bool same_field(const sb_field *a, const sb_field *b)
{
    return strcmp(a->name, b->name) == 0 && a->type == b->type && a->child_type == b->child_type &&
           a->list_size == b->list_size && a->nullable == b->nullable && a->logical == b->logical;
}

/* Equal but for the widths of fixed-size lists (images of different sizes) or the logical types
 * (files whose timestamps have different units): a new partition, never a reinterpretation. */
static bool same_but_widths(const sb_field *a, const sb_field *b)
{
    return strcmp(a->name, b->name) == 0 && a->type == b->type && a->child_type == b->child_type &&
           a->nullable == b->nullable;
}

int sb_op_out_set_schema(sb_op_out *o, const sb_field *fields, size_t n, sb_err *err)
{
    if (o->has_schema) {
        bool same = n == o->nfields, widths = n == o->nfields;
        for (size_t i = 0; same && i < n; i++)
            same = same_field(&fields[i], &o->fields[i]);
        for (size_t i = 0; !same && widths && i < n; i++)
            widths = same_but_widths(&fields[i], &o->fields[i]);
        if (same)
            return 0;
        if (!widths)
            return sb_err_set(err,
                              "op output: the inputs of one task have different schemas "
                              "(%zu columns, then %zu)",
                              o->nfields, n);
        /* only list widths or logical types differ: the rows so far become a partition of their
         * own */
        if (sb_op_out_flush(o, err) != 0)
            return -1;
        sb_batch_builder_free(o->b);
        o->b = NULL;
        free_fields(o);
        o->has_schema = false;
    }
    sb_batch_builder *b = sb_batch_builder_new(fields, n, err);
    if (b == NULL)
        return sb_err_wrap(err, "op output");
    /* records for the next op of this task (small partitions) or held by an op
     * (sb_op_out_set_held): built in place, so that a flush copies only the offsets (room for
     * records of 64 bytes on average); held ones reserve their values at once, since growing a
     * buffer built in place copies it */
    size_t span = o->held > 0 ? o->held : o->target;
    if (o->unsealed && n == 1 &&
        (fields[0].type == SB_TYPE_BINARY || fields[0].type == SB_TYPE_UTF8) &&
        (sb_batch_builder_build_in_place(b, span / 64 + 16, err) != 0 ||
         (o->held > 0 && sb_batch_builder_reserve(b, 0, 0, o->held, err) != 0))) {
        sb_batch_builder_free(b);
        return sb_err_wrap(err, "op output");
    }
    sb_field *f = calloc(n ? n : 1, sizeof *f);
    if (f == NULL) {
        sb_batch_builder_free(b);
        return sb_err_set(err, "op output: out of memory");
    }
    o->fields = f;
    for (size_t i = 0; i < n; i++) {
        f[i] = fields[i];
        f[i].name = strdup(fields[i].name);
        o->nfields = i + 1;
        if (f[i].name == NULL) {
            sb_batch_builder_free(b);
            free_fields(o);
            return sb_err_set(err, "op output: out of memory");
        }
    }
    o->nfields = n;
    o->b = b;
    o->has_schema = true;
    return 0;
}

int sb_op_out_set_schema_like(sb_op_out *o, const sb_batch *in, sb_err *err)
{
    size_t n = sb_batch_ncols(in);
    sb_field stack[16];
    sb_field *f = n <= 16 ? stack : calloc(n, sizeof *f);
    if (f == NULL)
        return sb_err_set(err, "op output: out of memory");
    for (size_t i = 0; i < n; i++) {
        f[i] = sb_field_of(sb_batch_column(in, i));
    }
    int rc = sb_op_out_set_schema(o, f, n, err);
    if (f != stack)
        free(f);
    return rc;
}

sb_batch_builder *sb_op_out_builder(sb_op_out *o)
{
    return o->b;
}

/* Hands blob (rows rows, owned from now on by the emit callback) to the consumer, counted. */
static int emit_blob(sb_op_out *o, void *blob, size_t len, uint64_t rows, sb_err *err)
{
    o->parts++;
    o->rows_emitted += rows;
    o->bytes += len;
    sb_err_clear(err); /* a consumer sharing err leaves its cause there: keep and wrap it */
    int rc = o->emit(blob, len, rows, o->ud);
    if (rc != 0 && err != NULL && err->msg[0] != '\0')
        return sb_err_wrap(err, "output partition %llu", (unsigned long long)o->parts);
    if (rc != 0)
        return sb_err_set(err,
                          "op output: the consumer refused output partition %llu (returned %d)",
                          (unsigned long long)o->parts, rc);
    return 0;
}

/* The pending rows as a partition; with empty_ok also none (a schema must be set). */
static int flush_rows(sb_op_out *o, int empty_ok, sb_err *err)
{
    if (o->b == NULL)
        return 0;
    size_t rows = sb_batch_builder_rows(o->b);
    if (rows == 0 && !empty_ok)
        return 0;
    void *blob;
    size_t len;
    sb_op_spare *sp = o->spare;
    size_t need = sp != NULL && !sp->lent ? sb_batch_builder_bytes(o->b) : 0;
    if (need > 0 && need <= SB_OP_SPARE_MAX) {
        if (sp->cap < need) {
            sb_part_free(sp->p);
            size_t cap = need + need / 8 < SB_OP_SPARE_MAX ? need + need / 8 : SB_OP_SPARE_MAX;
            sp->p = sb_part_alloc(cap);
            sp->cap = sp->p != NULL ? cap : 0;
        }
        if (sp->p != NULL &&
            sb_batch_builder_finish_into_unsealed(o->b, sp->p, sp->cap, &len, err) == 0) {
            sp->lent = true;
            return emit_blob(o, sp->p, len, rows, err);
        }
        sb_err_clear(err); /* too small after all (the builder is unchanged): a new blob */
    }
    int frc = o->unsealed ? sb_batch_builder_finish_unsealed(o->b, &blob, &len, err)
                          : sb_batch_builder_finish(o->b, &blob, &len, err);
    if (frc != 0)
        return sb_err_wrap(err, "op output");
    return emit_blob(o, blob, len, rows, err);
}

int sb_op_out_flush(sb_op_out *o, sb_err *err)
{
    return flush_rows(o, 0, err);
}

int sb_op_out_cut(sb_op_out *o, sb_err *err)
{
    return flush_rows(o, 1, err);
}

int sb_op_out_put_blob(sb_op_out *o, void *blob, size_t len, uint64_t rows, sb_err *err)
{
    if (sb_op_out_flush(o, err) != 0) {
        sb_part_free(blob);
        return -1;
    }
    return emit_blob(o, blob, len, rows, err);
}

int sb_op_out_rows_done(sb_op_out *o, sb_err *err)
{
    if (o->b != NULL && sb_batch_builder_bytes(o->b) >= o->target)
        return sb_op_out_flush(o, err);
    return 0;
}

int sb_op_out_append_binary(sb_op_out *o, const void *p, size_t n, sb_err *err)
{
    if (!o->has_schema || o->nfields != 1 ||
        (o->fields[0].type != SB_TYPE_BINARY && o->fields[0].type != SB_TYPE_UTF8))
        return sb_err_set(err, "op output: append of one value needs a schema of one binary or "
                               "utf8 column");
    if (sb_batch_builder_append_binary(o->b, 0, p, n, err) != 0)
        return -1;
    return sb_op_out_rows_done(o, err);
}

/* in's validity bits [first, first+n) shifted to start at bit 0, into o->scratch; *out is
 * NULL when the column has no nulls. -1 when out of memory. */
static int shifted_validity(sb_op_out *o, const sb_column *c, size_t first, size_t n,
                            const uint8_t **out)
{
    *out = NULL;
    if (c->validity == NULL)
        return 0;
    size_t bytes = (n + 7) / 8;
    if (bytes > o->scratch_cap) {
        uint8_t *s = realloc(o->scratch, bytes);
        if (s == NULL)
            return -1;
        o->scratch = s;
        o->scratch_cap = bytes;
    }
    memset(o->scratch, 0, bytes);
    for (size_t i = 0; i < n; i++)
        if (sb_column_valid(c, first + i))
            o->scratch[i >> 3] |= (uint8_t)(1u << (i & 7));
    *out = o->scratch;
    return 0;
}

/* verify: c is not a column of an opened batch (an Arrow view a plugin or exec returned), so
 * its UTF-8 is checked; an opened batch's utf8 column is copied as it is. */
static int copy_column(sb_op_out *o, size_t ci, const sb_column *c, size_t first, size_t n,
                       bool verify, sb_err *err)
{
    switch (c->type) {
    case SB_TYPE_BINARY:
    case SB_TYPE_UTF8:
        return sb_batch_builder_append_range(o->b, ci, c, first, n, verify, err);
    case SB_TYPE_BOOL:
        for (size_t r = first; r < first + n; r++) {
            int rc = sb_column_valid(c, r)
                         ? sb_batch_builder_append_bool(o->b, ci, sb_column_bool(c, r), err)
                         : sb_batch_builder_append_null(o->b, ci, err);
            if (rc != 0)
                return -1;
        }
        return 0;
    default: {
        size_t w = c->type == SB_TYPE_FIXED_LIST ? c->list_size * sb_type_width(c->child_type)
                                                 : sb_type_width(c->type);
        const uint8_t *v;
        if (shifted_validity(o, c, first, n, &v) != 0)
            return sb_err_set(err, "op output: out of memory");
        return sb_batch_builder_append_values(o->b, ci, (const uint8_t *)c->values + first * w, n,
                                              v, err);
    }
    }
}

/* An upper bound on how much sb_batch_builder_bytes() grows when rows [at(ci), at(ci)+j) of
 * every column are appended to a builder of rows0 rows: the values, offsets and bitmaps, plus
 * one alignment per buffer (and one for a builder finished in place turning into a copy). */
static size_t growth_bound(const sb_column *cols, size_t ncols, const size_t *firsts, size_t first,
                           size_t done, size_t j, size_t rows0, bool slack)
{
    size_t g = 0;
    for (size_t ci = 0; ci < ncols; ci++) {
        const sb_column *c = &cols[ci];
        size_t at = (firsts ? firsts[ci] : first) + done;
        switch (c->type) {
        case SB_TYPE_BINARY:
        case SB_TYPE_UTF8:
            g += (size_t)(c->offsets[at + j] - c->offsets[at]) + j * sizeof(int32_t) +
                 (slack ? 3 * 64 : 0);
            break;
        case SB_TYPE_BOOL:
            g += j / 8 + (slack ? 1 + 64 : 0);
            break;
        default: {
            size_t w = c->type == SB_TYPE_FIXED_LIST ? c->list_size * sb_type_width(c->child_type)
                                                     : sb_type_width(c->type);
            g += j * w + (slack ? 64 : 0);
        }
        }
        if (!slack)
            continue;
        /* the validity bitmap: all rows when this run's nulls make the first one */
        g += (c->validity != NULL ? rows0 + j : j) / 8 + 1 + 64 + 64;
    }
    return g;
}

/* Whether c's rows are rows of one of from's binary/utf8 columns: the same values buffer and
 * offsets inside that column's (an op or plugin that passes a column through, or a slice of it).
 * Those bytes were checked when from was made. Addresses compared as integers: c may point
 * anywhere. */
static bool slice_of(const sb_batch *from, const sb_column *c)
{
    if (from == NULL || (c->type != SB_TYPE_UTF8 && c->type != SB_TYPE_BINARY) ||
        c->offsets == NULL)
        return false;
    uintptr_t off = (uintptr_t)c->offsets;
    for (size_t j = 0; j < sb_batch_ncols(from); j++) {
        const sb_column *f = sb_batch_column(from, j);
        if (f->type != c->type || f->values != c->values || f->offsets == NULL)
            continue;
        uintptr_t lo = (uintptr_t)f->offsets, hi = (uintptr_t)(f->offsets + f->length);
        if (off >= lo && off <= hi && (off - lo) % sizeof *c->offsets == 0 &&
            c->length <= (hi - off) / sizeof *c->offsets)
            return true;
    }
    return false;
}

/* A builder reserves ahead for at most a partition of the target, and at most for AHEAD_CALLS
 * calls like the first one: a task that emits a few rows does not touch a partition's worth of
 * memory (buffers from 4 MiB up are on transparent huge pages, so a touch costs 2 MiB). Targets
 * past RESERVE_MAX (a whole-output builder) grow by doubling, as before. */
#define RESERVE_MAX ((size_t)256 << 20)
#define AHEAD_CALLS 16

/* An empty builder about to take n rows: its buffers are reserved at once for the rows the
 * partition will hold (at most the target's worth, at most AHEAD_CALLS calls like this one),
 * sized by these rows' bytes per column, instead of growing by doubling from 64 bytes. Growing
 * 64 MiB of an op's output that way copied ~64 MiB more and faulted ~128 MiB of fresh pages:
 * bench_mlp (16 -> 1000 model, CPU): a median 94 -> 37 ms per 16,384 rows without it. Only
 * address space is reserved; pages are touched as rows arrive. Var-width columns are sized by
 * these rows' average; a later shortfall grows by doubling as before. */
static int reserve_ahead(sb_op_out *o, const sb_column *cols, const size_t *firsts, size_t first,
                         size_t ncols, size_t n, sb_err *err)
{
    if (sb_batch_builder_rows(o->b) != 0 || o->target > RESERVE_MAX || n == 0)
        return 0;
    size_t call = growth_bound(cols, ncols, firsts, first, 0, n, 0, false); /* n rows' bytes */
    size_t row = call / n + 1, rows = o->target / row + 1;
    if (n < rows / AHEAD_CALLS)
        rows = n * AHEAD_CALLS;
    for (size_t ci = 0; ci < ncols; ci++) {
        const sb_column *c = &cols[ci];
        size_t at = firsts ? firsts[ci] : first, data = 0;
        if (c->type == SB_TYPE_BINARY || c->type == SB_TYPE_UTF8) {
            size_t bytes = (size_t)(c->offsets[at + n] - c->offsets[at]);
            data = bytes / n * rows + bytes % n + 1; /* no overflow: bytes/n * rows <= target */
        }
        if (sb_batch_builder_reserve(o->b, ci, rows, data, err) != 0)
            return sb_err_wrap(err, "op output");
    }
    return 0;
}

/* Rows [at(ci), at(ci)+n) of every column: firsts[ci] when firsts is set, else first.
 *
 * Partitions are cut where the rows alone say, never where the input batches happened to end
 * (a lineage re-run must remake a lost partition exactly): the builder is flushed right after
 * the first row that brings sb_batch_builder_bytes() to the target. Rows go in runs that
 * growth_bound() says cannot reach it, found from the offsets in O(log n) steps; near the
 * target, a run one row longer than the values alone fit, and rows dropped from its end
 * (sb_batch_builder_truncate, no copy) while the partition stays full. */
static int append_columns(sb_op_out *o, const sb_field *fields, const sb_column *cols, size_t ncols,
                          const size_t *firsts, size_t first, size_t n, bool verify,
                          const sb_batch *from, sb_err *err)
{
    if (n == 0)
        return 0;
    for (size_t ci = 0; ci < ncols; ci++) {
        size_t at = firsts ? firsts[ci] : first;
        if (at > cols[ci].length || n > cols[ci].length - at)
            return sb_err_set(err, "op output: rows [%zu, %zu) of a column of %zu rows", at, at + n,
                              cols[ci].length);
    }
    if (sb_op_out_set_schema(o, fields, ncols, err) != 0)
        return -1;
    if (sb_op_out_rows_done(o, err) != 0) /* rows appended through the builder */
        return -1;
    if (reserve_ahead(o, cols, firsts, first, ncols, n, err) != 0)
        return -1;
    size_t done = 0;
    while (done < n) {
        size_t cur = sb_batch_builder_bytes(o->b);
        size_t room = cur < o->target ? o->target - cur : 0;
        size_t rows0 = sb_batch_builder_rows(o->b), left = n - done, k = 1;
        bool safe =
            left > 1 && growth_bound(cols, ncols, firsts, first, done, 2, rows0, true) < room;
        /* safe: the most rows whose growth bound stays below the room (no cut among them);
         * else near the target: one row more than the values alone fit, then rows are dropped
         * from the end while the partition stays full (monotone in its rows) */
        size_t lo = safe ? 2 : 0, hi = left;
        while (lo < hi) {
            size_t mid = lo + (hi - lo + 1) / 2;
            if (growth_bound(cols, ncols, firsts, first, done, mid, rows0, safe) < room + !safe)
                lo = mid;
            else
                hi = mid - 1;
        }
        k = safe ? lo : (lo < left ? lo + 1 : left);
        if (k == 0)
            k = 1;
        for (size_t ci = 0; ci < ncols; ci++) {
            size_t at = (firsts ? firsts[ci] : first) + done;
            bool check = verify && !slice_of(from, &cols[ci]); /* once per run of rows */
            if (copy_column(o, ci, &cols[ci], at, k, check, err) != 0) {
                sb_batch_builder_truncate(o->b, rows0);
                return sb_err_wrap(err, "op output: copying rows %zu..%zu", at, at + k);
            }
        }
        if (sb_batch_builder_bytes(o->b) < o->target) {
            done += k;
            continue;
        }
        size_t have = k; /* the first `have` rows fill it; do fewer? */
        while (have > 1) {
            sb_batch_builder_truncate(o->b, rows0 + have - 1);
            if (sb_batch_builder_bytes(o->b) < o->target) {
                for (size_t ci = 0; ci < ncols; ci++) { /* row have-1 fills it: back in */
                    size_t at = (firsts ? firsts[ci] : first) + done + have - 1;
                    bool check = verify && !slice_of(from, &cols[ci]);
                    if (copy_column(o, ci, &cols[ci], at, 1, check, err) != 0) {
                        sb_batch_builder_truncate(o->b, rows0);
                        return sb_err_wrap(err, "op output: copying row %zu", at);
                    }
                }
                break;
            }
            have--;
        }
        if (sb_op_out_flush(o, err) != 0)
            return -1;
        done += have;
    }
    return 0;
}

int sb_op_out_append_columns(sb_op_out *o, const sb_field *fields, const sb_column *cols,
                             size_t ncols, size_t first, size_t n, size_t row_bytes, sb_err *err)
{
    (void)row_bytes; /* cuts come from the rows themselves (append_columns) */
    return append_columns(o, fields, cols, ncols, NULL, first, n, true, NULL, err);
}

int sb_op_out_append_columns_of(sb_op_out *o, const sb_batch *from, const sb_field *fields,
                                const sb_column *cols, size_t ncols, size_t first, size_t n,
                                sb_err *err)
{
    return append_columns(o, fields, cols, ncols, NULL, first, n, true, from, err);
}

int sb_op_out_append_columns_at(sb_op_out *o, const sb_field *fields, const sb_column *cols,
                                const size_t *firsts, size_t ncols, size_t n, size_t row_bytes,
                                sb_err *err)
{
    (void)row_bytes;
    return append_columns(o, fields, cols, ncols, firsts, 0, n, true, NULL, err);
}

int sb_op_out_append_rows(sb_op_out *o, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    if (n == 0)
        return 0;
    size_t rows_in = sb_batch_rows(in);
    if (first > rows_in || n > rows_in - first)
        return sb_err_set(err, "op output: rows [%zu, %zu) of a batch of %zu rows", first,
                          first + n, rows_in);
    size_t ncols = sb_batch_ncols(in);
    sb_field fstack[16] = {0};
    sb_column cstack[16] = {0};
    sb_field *f = ncols <= 16 ? fstack : calloc(ncols, sizeof *f);
    sb_column *c = ncols <= 16 ? cstack : calloc(ncols, sizeof *c);
    int rc = -1;
    if (f == NULL || c == NULL) {
        sb_err_set(err, "op output: out of memory");
        goto out;
    }
    for (size_t i = 0; i < ncols; i++) {
        c[i] = *sb_batch_column(in, i);
        f[i] = sb_field_of(&c[i]);
    }
    rc = append_columns(o, f, c, ncols, NULL, first, n, false, NULL, err);
out:
    if (f != fstack)
        free(f);
    if (c != cstack)
        free(c);
    return rc;
}

int sb_op_out_append_runs(sb_op_out *o, const sb_batch *in, const size_t *first, const size_t *n,
                          size_t nruns, sb_err *err)
{
    size_t rows_in = sb_batch_rows(in), ncols = sb_batch_ncols(in);
    for (size_t i = 0; i < nruns; i++)
        if (first[i] > rows_in || n[i] > rows_in - first[i])
            return sb_err_set(err, "op output: rows [%zu, %zu) of a batch of %zu rows", first[i],
                              first[i] + n[i], rows_in);
    if (nruns == 0)
        return 0;
    if (ncols > 16) { /* wide batches: run by run */
        for (size_t i = 0; i < nruns; i++)
            if (sb_op_out_append_rows(o, in, first[i], n[i], err) != 0)
                return -1;
        return 0;
    }
    if (sb_op_out_set_schema_like(o, in, err) != 0)
        return -1;
    const sb_column *c[16];
    for (size_t ci = 0; ci < ncols; ci++)
        c[ci] = sb_batch_column(in, ci);
    for (size_t i = 0; i < nruns; i++) {
        if (n[i] == 0)
            continue;
        if (n[i] > 1) { /* cut at the target within the run, as append_rows does */
            if (sb_op_out_append_rows(o, in, first[i], n[i], err) != 0)
                return -1;
            continue;
        }
        size_t rows0 = sb_batch_builder_rows(o->b);
        for (size_t ci = 0; ci < ncols; ci++) {
            if (copy_column(o, ci, c[ci], first[i], n[i], false, err) != 0) {
                sb_batch_builder_truncate(o->b, rows0);
                return sb_err_wrap(err, "op output: copying rows %zu..%zu", first[i],
                                   first[i] + n[i]);
            }
        }
        if (sb_op_out_rows_done(o, err) != 0)
            return -1;
    }
    return 0;
}

uint64_t sb_op_out_rows_emitted(const sb_op_out *o)
{
    return o->rows_emitted;
}

uint64_t sb_op_out_parts_emitted(const sb_op_out *o)
{
    return o->parts;
}

uint64_t sb_op_out_bytes_emitted(const sb_op_out *o)
{
    return o->bytes;
}
