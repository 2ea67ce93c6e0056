/* parquet.c — a Parquet file's footer, the column plan (schema -> partition types) and one row
 * group read into partitions (see parquet.h): chunks read whole through the caller's callback,
 * decoded by column.c, converted to the partition types, then cut into partitions by rows. */
#include "parquet/parquet.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/column.h"
#include "parquet/pindex.h"

int sb_pq_open(sb_pq_file *f, const char *name, uint64_t size, sb_pq_read_fn read, void *ud,
               sb_err *err)
{
    memset(f, 0, sizeof *f);
    f->name = name;
    f->size = size;
    f->read = read;
    f->ud = ud;
    if (size < 12)
        return sb_err_data(err, "%.300s: %" PRIu64 " bytes is too short for a Parquet file", name,
                           size);
    /* the tail in one read: the footer usually fits in the last 64 KiB */
    size_t tail = size < (64u << 10) ? (size_t)size : (64u << 10);
    uint8_t *buf = malloc(tail);
    if (buf == NULL)
        return sb_err_set(err, "%.300s: out of memory", name);
    if (read(ud, size - tail, buf, tail, err) != 0) {
        free(buf);
        return sb_err_wrap(err, "%.300s: reading the footer", name);
    }
    const uint8_t *t = buf + tail - 8;
    if (memcmp(t + 4, "PARE", 4) == 0) {
        free(buf);
        return sb_err_data(err, "%.300s: the footer is encrypted (PARE), which is not read", name);
    }
    if (memcmp(t + 4, "PAR1", 4) != 0) {
        free(buf);
        return sb_err_data(err, "%.300s: not a Parquet file (no PAR1 magic at the end)", name);
    }
    uint32_t flen =
        (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
    if ((uint64_t)flen > size - 12 || flen > SB_PQ_MAX_FOOTER) {
        free(buf);
        return sb_err_data(err,
                           "%.300s: footer length %u does not fit the %" PRIu64 "-byte file "
                           "(at most %u)",
                           name, flen, size, SB_PQ_MAX_FOOTER);
    }
    const uint8_t *foot;
    uint8_t *big = NULL;
    if ((size_t)flen + 8 <= tail) {
        foot = buf + tail - 8 - flen;
    } else {
        big = malloc(flen);
        if (big == NULL) {
            free(buf);
            return sb_err_set(err, "%.300s: out of memory for a %u-byte footer", name, flen);
        }
        if (read(ud, size - 8 - flen, big, flen, err) != 0) {
            free(buf);
            free(big);
            return sb_err_wrap(err, "%.300s: reading the footer", name);
        }
        foot = big;
    }
    uint8_t head[4];
    int rc = read(ud, 0, head, 4, err);
    if (rc == 0 && memcmp(head, "PAR1", 4) != 0)
        rc = sb_err_data(err, "%.300s: not a Parquet file (no PAR1 magic at the start)", name);
    if (rc == 0 && sb_pq_meta_parse(foot, flen, size, &f->meta, err) != 0)
        rc = sb_err_wrap(err, "%.300s", name);
    free(buf);
    free(big);
    return rc;
}

void sb_pq_close(sb_pq_file *f)
{
    sb_pq_meta_free(&f->meta);
}

bool sb_pq_owns(const sb_pq_file *f, size_t rg, uint64_t start, uint64_t end)
{
    const sb_pq_row_group *g = &f->meta.rgs[rg];
    uint64_t mid = g->start + (g->end - g->start) / 2;
    return mid >= start && mid < end;
}

/* ---- the plan ---------------------------------------------------------------------------- */

static const char *type_desc(const sb_pq_schema_el *e, char *buf, size_t cap)
{
    if (e->lt != SB_PQ_LT_NONE && e->lt_name != NULL)
        snprintf(buf, cap, "%s (%s)", e->lt_name, sb_pq_type_name(e->type));
    else
        snprintf(buf, cap, "%s", sb_pq_type_name(e->type));
    return buf;
}

/* The partition type of a primitive leaf; 0 when it is not read. */
static sb_type leaf_type(const sb_pq_schema_el *e)
{
    switch (e->type) {
    case SB_PQ_BOOLEAN:
        return e->lt == SB_PQ_LT_NONE ? SB_TYPE_BOOL : 0;
    case SB_PQ_INT32:
        if (e->lt == SB_PQ_LT_NONE || e->lt == SB_PQ_LT_DATE)
            return SB_TYPE_INT32;
        if (e->lt == SB_PQ_LT_INT) {
            switch (e->int_bits) {
            case 8:
                return e->int_signed ? SB_TYPE_INT8 : SB_TYPE_UINT8;
            case 16:
                return e->int_signed ? SB_TYPE_INT16 : SB_TYPE_UINT16;
            case 32:
                return e->int_signed ? SB_TYPE_INT32 : SB_TYPE_UINT32;
            default:
                return 0;
            }
        }
        return 0;
    case SB_PQ_INT64:
        if (e->lt == SB_PQ_LT_NONE || e->lt == SB_PQ_LT_TIMESTAMP)
            return SB_TYPE_INT64;
        if (e->lt == SB_PQ_LT_INT && e->int_bits == 64)
            return e->int_signed ? SB_TYPE_INT64 : SB_TYPE_UINT64;
        return 0;
    case SB_PQ_FLOAT:
        return e->lt == SB_PQ_LT_NONE ? SB_TYPE_FLOAT32 : 0;
    case SB_PQ_DOUBLE:
        return e->lt == SB_PQ_LT_NONE ? SB_TYPE_FLOAT64 : 0;
    case SB_PQ_BYTE_ARRAY:
        return e->lt == SB_PQ_LT_STRING ? SB_TYPE_UTF8
               : e->lt == SB_PQ_LT_NONE ? SB_TYPE_BINARY
                                        : 0;
    case SB_PQ_FLBA:
        return e->lt == SB_PQ_LT_NONE ? SB_TYPE_BINARY : 0;
    default:
        return 0;
    }
}

/* The partition's logical type of a leaf read as physical type t: DATE stays a date, TIMESTAMP
 * keeps its unit. isAdjustedToUTC is not kept (the integers are the same either way); the sink
 * writes isAdjustedToUTC=false, so a UTC-adjusted input comes back without its time zone. */
static sb_logical logical_of(const sb_pq_schema_el *e, sb_type t)
{
    if (e->lt == SB_PQ_LT_DATE && t == SB_TYPE_INT32)
        return SB_LOGICAL_DATE;
    if (e->lt != SB_PQ_LT_TIMESTAMP || t != SB_TYPE_INT64)
        return SB_LOGICAL_NONE;
    return e->ts_unit == SB_PQ_MILLIS   ? SB_LOGICAL_TS_MILLIS
           : e->ts_unit == SB_PQ_MICROS ? SB_LOGICAL_TS_MICROS
           : e->ts_unit == SB_PQ_NANOS  ? SB_LOGICAL_TS_NANOS
                                        : SB_LOGICAL_NONE;
}

/* The only child of group g, or -1. */
static int only_child(const sb_pq_meta *m, int g)
{
    if (m->schema[g].num_children != 1)
        return -1;
    return g + 1; /* elements are in depth-first order: the first child follows its parent */
}

/* One top-level element (schema index i) into an output column. */
static int plan_one(const sb_pq_file *f, int i, sb_pq_out *o, sb_err *err)
{
    const sb_pq_meta *m = &f->meta;
    const sb_pq_schema_el *e = &m->schema[i];
    char td[96];
    memset(o, 0, sizeof *o);
    o->field.name = e->name;
    if (e->num_children == 0) {
        if (e->repetition == 2)
            return sb_err_data(err,
                               "%.300s: column \"%.200s\" is a repeated %s (a legacy "
                               "list), which is not read",
                               f->name, e->name, type_desc(e, td, sizeof td));
        sb_type t = leaf_type(e);
        if (t == 0)
            return sb_err_data(err, "%.300s: column \"%.200s\" has type %s, which is not read",
                               f->name, e->name, type_desc(e, td, sizeof td));
        o->field.type = t;
        o->field.nullable = e->repetition == 1;
        o->leaf = e->leaf;
        o->field.logical = logical_of(e, t);
        return 0;
    }
    if (e->lt == SB_PQ_LT_LIST && e->repetition != 2) {
        int rep = only_child(m, i), leaf = -1;
        if (rep >= 0 && m->schema[rep].repetition == 2) {
            if (m->schema[rep].num_children == 0)
                leaf = rep; /* two-level: a repeated primitive */
            else if ((leaf = only_child(m, rep)) >= 0 && m->schema[leaf].num_children != 0)
                leaf = -1;
        }
        if (leaf >= 0) {
            const sb_pq_schema_el *le = &m->schema[leaf];
            sb_type ct = leaf_type(le);
            if (ct != 0 && ct != SB_TYPE_BOOL && ct != SB_TYPE_BINARY && ct != SB_TYPE_UTF8) {
                o->field.type = SB_TYPE_FIXED_LIST;
                o->field.child_type = ct;
                o->leaf = le->leaf;
                o->as_list = true;
                return 0;
            }
            return sb_err_data(err,
                               "%.300s: column \"%.200s\" is a LIST of %s: only lists of "
                               "numbers are read",
                               f->name, e->name, type_desc(le, td, sizeof td));
        }
        return sb_err_data(err, "%.300s: column \"%.200s\" is a nested LIST, which is not read",
                           f->name, e->name);
    }
    return sb_err_data(err, "%.300s: column \"%.200s\" is a %s, which is not read", f->name,
                       e->name, e->lt == SB_PQ_LT_MAP ? "MAP" : "struct (group)");
}

int sb_pq_plan_make(const sb_pq_file *f, const char *const *columns, size_t n, sb_pq_plan *p,
                    sb_err *err)
{
    const sb_pq_meta *m = &f->meta;
    memset(p, 0, sizeof *p);
    size_t ntop = 0;
    for (size_t i = 1; i < m->nschema; i++)
        ntop += m->schema[i].parent == 0;
    size_t want = n > 0 ? n : ntop;
    p->cols = calloc(want ? want : 1, sizeof *p->cols);
    if (p->cols == NULL)
        return sb_err_set(err, "out of memory");
    for (size_t k = 0; k < want; k++) {
        int found = -1;
        size_t seen = 0;
        for (size_t i = 1; i < m->nschema && found < 0; i++) {
            if (m->schema[i].parent != 0)
                continue;
            if (n > 0 ? strcmp(m->schema[i].name, columns[k]) == 0 : seen == k)
                found = (int)i;
            seen++;
        }
        if (found < 0) {
            sb_pq_plan_free(p);
            return sb_err_data(err,
                               "%.300s: args.columns names \"%.200s\", which the file "
                               "does not have",
                               f->name, columns[k]);
        }
        if (plan_one(f, found, &p->cols[k], err) != 0) {
            sb_pq_plan_free(p);
            return -1;
        }
        p->ncols++;
    }
    return 0;
}

void sb_pq_plan_free(sb_pq_plan *p)
{
    free(p->cols);
    memset(p, 0, sizeof *p);
}

/* ---- a row group into partitions ----------------------------------------------------------- */

/* A decoded column converted to its partition type: the view appended from. */
typedef struct {
    sb_pq_colbuf c;
    sb_column view; /* binary/utf8: offsets, values, validity over all rows */
    int32_t *offs32;
    uint8_t *bitmap; /* all rows */
    uint8_t *narrow; /* INT32 narrowed to 8/16 bits */
    size_t width;    /* bytes per row in the partition type (list: whole row) */
} conv;

/* Narrows n INT32 values (per_row of them a row: 1, or a list's length) to INT8/16/UINT8/16,
 * with a range check on every value present. The first pass narrows and only notes whether any
 * value is out of range (a loop the compiler vectorizes: a pre-decoded image is millions of
 * values); only then does a second pass find the first present one, to name it. */
static int narrow_ints(conv *v, sb_type t, size_t n, size_t per_row, const char *col, sb_err *err)
{
    size_t w = sb_type_width(t);
    int32_t lo = t == SB_TYPE_INT8 ? INT8_MIN : t == SB_TYPE_INT16 ? INT16_MIN : 0;
    int32_t hi = t == SB_TYPE_INT8    ? INT8_MAX
                 : t == SB_TYPE_INT16 ? INT16_MAX
                 : t == SB_TYPE_UINT8 ? UINT8_MAX
                                      : UINT16_MAX;
    v->narrow = malloc(n * w + 1);
    if (v->narrow == NULL)
        return sb_err_set(err, "out of memory");
    const uint8_t *src = v->c.vals;
    int bad = 0;
    if (w == 1) {
        uint8_t *d = v->narrow;
        for (size_t i = 0; i < n; i++) {
            int32_t x;
            memcpy(&x, src + 4 * i, 4);
            bad |= (x < lo) | (x > hi);
            d[i] = (uint8_t)x;
        }
    } else {
        uint16_t *d = (uint16_t *)(void *)v->narrow; /* malloc's alignment */
        for (size_t i = 0; i < n; i++) {
            int32_t x;
            memcpy(&x, src + 4 * i, 4);
            bad |= (x < lo) | (x > hi);
            d[i] = (uint16_t)x;
        }
    }
    for (size_t i = 0; bad && i < n; i++) {
        size_t r = i / per_row;
        int32_t x;
        memcpy(&x, src + 4 * i, 4);
        if ((x < lo || x > hi) && (v->c.valid == NULL || v->c.valid[r]))
            return sb_err_data(err, "column \"%.200s\", row %zu: %d does not fit its %s type", col,
                               r, x, sb_type_name(t));
    }
    return 0;
}

static int convert(conv *v, const sb_pq_out *o, sb_err *err)
{
    sb_pq_colbuf *c = &v->c;
    if (c->valid != NULL && c->nulls > 0) {
        v->bitmap = calloc(c->rows / 8 + 1, 1);
        if (v->bitmap == NULL)
            return sb_err_set(err, "out of memory");
        for (size_t r = 0; r < c->rows; r++)
            if (c->valid[r])
                v->bitmap[r / 8] |= (uint8_t)(1u << (r % 8));
    }
    if (o->as_list) {
        v->width = (size_t)c->list_len * sb_type_width(o->field.child_type);
        if (c->rows > 0 && c->list_len == 0)
            return sb_err_data(err, "column \"%.200s\": empty lists", o->field.name);
        /* INT32 leaves annotated INT(8|16) hold 4 bytes a value; the list's child type is narrower
         */
        if (c->ptype == SB_PQ_INT32 && sb_type_width(o->field.child_type) < 4)
            return narrow_ints(v, o->field.child_type, c->vals_len / 4, c->list_len, o->field.name,
                               err);
        return 0;
    }
    sb_type t = o->field.type;
    if (c->binary) {
        if (c->rows > 0 && c->offs[c->rows] > INT32_MAX)
            return sb_err_data(err,
                               "column \"%.200s\": more than 2 GiB of bytes in one row "
                               "group",
                               o->field.name);
        v->offs32 = malloc((c->rows + 1) * sizeof *v->offs32);
        if (v->offs32 == NULL)
            return sb_err_set(err, "out of memory");
        for (size_t r = 0; r <= c->rows; r++)
            v->offs32[r] = (int32_t)c->offs[r];
        v->view.name = o->field.name;
        v->view.type = t;
        v->view.nullable = o->field.nullable;
        v->view.length = c->rows;
        v->view.null_count = v->bitmap ? c->nulls : 0;
        v->view.validity = v->bitmap;
        v->view.offsets = v->offs32;
        v->view.values = c->vals;
        v->view.values_len = c->vals_len;
        v->width = 4 + (c->rows ? c->vals_len / c->rows : 0);
        return 0;
    }
    v->width = sb_type_width(t) ? sb_type_width(t) : 1;
    if (c->ptype == SB_PQ_INT32 && sb_type_width(t) < 4)
        return narrow_ints(v, t, c->rows, 1, o->field.name, err);
    return 0;
}

/* Bits [first, first+n) of an all-rows bitmap, as a bitmap starting at bit 0. */
static void sub_bitmap(const uint8_t *all, size_t first, size_t n, uint8_t *out)
{
    memset(out, 0, n / 8 + 1);
    for (size_t i = 0; i < n; i++)
        if (all[(first + i) / 8] >> ((first + i) % 8) & 1)
            out[i / 8] |= (uint8_t)(1u << (i % 8));
}

static int append_slice(sb_batch_builder *b, size_t col, const conv *v, const sb_pq_out *o,
                        size_t first, size_t n, uint8_t *bits, sb_err *err)
{
    /* lent, not copied: the decoded row group outlives the slice's partition (finished before
     * the next slice), so its values go into the blob with one copy */
    const uint8_t *vals = v->narrow != NULL ? v->narrow : v->c.vals;
    if (o->as_list)
        return sb_batch_builder_lend_values(b, col, vals + first * v->width, n, NULL, err);
    if (v->c.binary)
        return sb_batch_builder_append_range(b, col, &v->view, first, n, true, err);
    size_t w = v->width;
    const uint8_t *valid = NULL;
    if (v->bitmap != NULL) {
        sub_bitmap(v->bitmap, first, n, bits);
        valid = bits;
    }
    return sb_batch_builder_lend_values(b, col, vals + first * w, n, valid, err);
}

/* Rows [first, first + n) of the emitted rows of every column: the selection's ranges in
 * order, range j of column k starting at row pos[k * nr + j] of its decoded column. */
typedef struct {
    size_t nr;
    const int64_t *first, *count;
    const size_t *pos;
} cut;

/* Appends the next (at most step) rows of the cut, from range *j, row *in of it. */
static int append_part(sb_batch_builder *b, const sb_pq_file *f, const sb_pq_plan *p, size_t rg,
                       conv *cv, const cut *c, size_t step, size_t *j, size_t *in, size_t *n,
                       uint8_t *bits, sb_err *err)
{
    *n = 0;
    while (*j < c->nr && *n < step) {
        size_t left = (size_t)c->count[*j] - *in, take = left < step - *n ? left : step - *n;
        for (size_t k = 0; take > 0 && k < p->ncols; k++)
            if (append_slice(b, k, &cv[k], &p->cols[k], c->pos[k * c->nr + *j] + *in, take, bits,
                             err) != 0)
                return sb_err_wrap(
                    err, "%.300s: row group %zu, column \"%.200s\", rows %" PRId64 "-%" PRId64,
                    f->name, rg, p->cols[k].field.name, c->first[*j] + (int64_t)*in,
                    c->first[*j] + (int64_t)(*in + take));
        *n += take;
        *in += take;
        if (*in == (size_t)c->count[*j]) {
            (*j)++;
            *in = 0;
        }
    }
    return 0;
}

static int emit_slices(const sb_pq_file *f, const sb_pq_plan *p, size_t rg, conv *cv, const cut *c,
                       const sb_pq_read_opts *o, sb_pq_emit_fn emit, void *ud, sb_err *err)
{
    sb_field *fields = calloc(p->ncols ? p->ncols : 1, sizeof *fields);
    if (fields == NULL)
        return sb_err_set(err, "out of memory");
    size_t per_row = 1;
    for (size_t k = 0; k < p->ncols; k++) {
        fields[k] = p->cols[k].field;
        if (p->cols[k].as_list)
            fields[k].list_size = cv[k].c.list_len;
        /* nullable as the schema says, not as this row group's nulls: every row group of a
         * file has the same partition schema (a task's inputs must; a filter's output too) */
        per_row += cv[k].width;
    }
    size_t step = o->target_bytes / per_row;
    if (step == 0)
        step = 1;
    uint8_t *bits = malloc(step / 8 + 2);
    sb_batch_builder *b = bits ? sb_batch_builder_new(fields, p->ncols, err) : NULL;
    int rc = 0;
    if (bits == NULL)
        rc = sb_err_set(err, "%.300s: out of memory", f->name);
    else if (b == NULL) /* e.g. a column name that is not UTF-8 */
        rc = sb_err_wrap(err, "%.300s: row group %zu", f->name, rg);
    size_t j = 0, in = 0;
    while (rc == 0 && j < c->nr) {
        size_t n = 0;
        rc = append_part(b, f, p, rg, cv, c, step, &j, &in, &n, bits, err);
        if (rc != 0 || n == 0)
            break;
        void *blob = NULL;
        size_t len = 0;
        rc = o->unsealed ? sb_batch_builder_finish_unsealed(b, &blob, &len, err)
                         : sb_batch_builder_finish(b, &blob, &len, err);
        if (rc != 0)
            rc = sb_err_wrap(err, "%.300s: row group %zu", f->name, rg);
        if (rc == 0) {
            sb_err_clear(err);
            if (emit(blob, len, n, ud) != 0)
                rc = err != NULL && err->msg[0] ? -1
                                                : sb_err_set(err,
                                                             "%.300s: the consumer refused "
                                                             "a partition",
                                                             f->name);
        }
    }
    sb_batch_builder_free(b);
    free(bits);
    free(fields);
    return rc;
}

/* Reads column chunk cx whole into c (every row of the row group). */
static int read_whole(const sb_pq_file *f, const sb_pq_chunk_ctx *cx, const char *col, size_t rows,
                      sb_pq_colbuf *c, sb_err *err)
{
    const sb_pq_chunk *ch = &f->meta.rgs[cx->rg].cols[cx->leaf];
    if (ch->len > cx->max_decoded)
        return sb_err_data(
            err, "%.300s: row group %zu, column \"%.200s\": a %" PRIu64 "-byte chunk (at most %zu)",
            f->name, cx->rg, col, ch->len, cx->max_decoded);
    uint8_t *buf = malloc(ch->len ? (size_t)ch->len : 1);
    if (buf == NULL)
        return sb_err_set(err, "%.300s: out of memory for a chunk", f->name);
    if (f->read(f->ud, ch->start, buf, (size_t)ch->len, err) != 0) {
        free(buf);
        return sb_err_wrap(err, "%.300s: row group %zu", f->name, cx->rg);
    }
    int rc = sb_pq_read_chunk(cx, buf, (size_t)ch->len, c, err);
    free(buf);
    if (rc != 0)
        return sb_err_wrap(err, "%.300s", f->name);
    if (c->rows != rows)
        return sb_err_data(err,
                           "%.300s: row group %zu, column \"%.200s\": %zu rows, the row "
                           "group has %zu",
                           f->name, cx->rg, col, c->rows, rows);
    return 0;
}

/* Column k of the plan into cv: only the selected rows' pages where its offset index allows
 * (pos: where each range starts in what was decoded), else the whole chunk. */
static int read_column(const sb_pq_file *f, const sb_pq_plan *p, size_t k, size_t rg,
                       const sb_pq_read_opts *o, size_t rows, conv *cv, size_t *pos, sb_err *err)
{
    sb_pq_chunk_ctx cx = {.m = &f->meta,
                          .rg = rg,
                          .leaf = (size_t)p->cols[k].leaf,
                          .as_list = p->cols[k].as_list,
                          .max_decoded =
                              o->max_decoded ? o->max_decoded : SB_PQ_DEFAULT_MAX_DECODED};
    const char *col = p->cols[k].field.name;
    if (o->sel != NULL) {
        int r = sb_pq_read_pages(f, &cx, o->sel, &cv->c, pos, o->pages, err);
        if (r < 0)
            return -1;
        if (r == 0)
            return convert(cv, &p->cols[k], err) != 0
                       ? sb_err_wrap(err, "%.300s: row group %zu", f->name, rg)
                       : 0;
        for (size_t j = 0; j < o->sel->n; j++) /* no usable offset index: the whole chunk */
            pos[j] = (size_t)o->sel->first[j];
    }
    if (read_whole(f, &cx, col, rows, &cv->c, err) != 0)
        return -1;
    if (convert(cv, &p->cols[k], err) != 0)
        return sb_err_wrap(err, "%.300s: row group %zu", f->name, rg);
    return 0;
}

int sb_pq_read_row_group(const sb_pq_file *f, const sb_pq_plan *p, size_t rg,
                         const sb_pq_read_opts *o, sb_pq_emit_fn emit, void *ud, sb_err *err)
{
    const sb_pq_row_group *g = &f->meta.rgs[rg];
    if (g->num_rows == 0)
        return 0;
    if ((uint64_t)g->num_rows > INT32_MAX)
        return sb_err_data(err, "%.300s: row group %zu has %" PRId64 " rows (at most 2^31-1)",
                           f->name, rg, g->num_rows);
    int64_t rows = g->num_rows, zero = 0;
    cut c = {.nr = 1, .first = &zero, .count = &rows};
    if (o->sel != NULL) {
        c.nr = o->sel->n;
        c.first = o->sel->first;
        c.count = o->sel->count;
        if (c.nr == 0)
            return 0;
        for (size_t j = 0; j < c.nr; j++) /* ascending, disjoint, inside the row group */
            if (c.first[j] < (j > 0 ? c.first[j - 1] + c.count[j - 1] : 0) || c.count[j] < 0 ||
                c.count[j] > rows - c.first[j])
                return sb_err_set(err,
                                  "%.300s: row group %zu: row range %zu [%" PRId64 ", +%" PRId64
                                  ") is out of order or past its %" PRId64 " rows",
                                  f->name, rg, j, c.first[j], c.count[j], rows);
    }
    conv *cv = calloc(p->ncols ? p->ncols : 1, sizeof *cv);
    size_t *pos = calloc(p->ncols * c.nr + 1, sizeof *pos);
    int rc = cv == NULL || pos == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t k = 0; rc == 0 && k < p->ncols; k++)
        rc = read_column(f, p, k, rg, o, (size_t)rows, &cv[k], pos + k * c.nr, err);
    c.pos = pos;
    if (rc == 0)
        rc = emit_slices(f, p, rg, cv, &c, o, emit, ud, err);
    for (size_t k = 0; cv != NULL && k < p->ncols; k++) {
        sb_pq_colbuf_free(&cv[k].c);
        free(cv[k].offs32);
        free(cv[k].bitmap);
        free(cv[k].narrow);
    }
    free(cv);
    free(pos);
    return rc;
}

void sb_pq_rowsel_free(sb_pq_rowsel *s)
{
    free(s->first);
    free(s->count);
    memset(s, 0, sizeof *s);
}
