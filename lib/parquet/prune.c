/* prune.c — row-group pruning by statistics (see prune.h): the chunk's min and max decoded by
 * the column's physical type, trusted only where the Parquet spec's sort-order rules say they
 * bound the values, then compared with the filter's value by the filter's own comparison, which
 * is monotonic in the column's order, so the two bounds' comparisons bound every row's. */
#include "parquet/prune.h"

#include <math.h>
#include <string.h>

int sb_pq_pred_column(const sb_pq_plan *p, const sb_pq_pred *pred)
{
    int at = -1;
    for (size_t i = 0; i < p->ncols; i++) {
        if (strcmp(p->cols[i].field.name, "record") == 0)
            return -1; /* records: the filter reads the JSON in that column */
        if (strcmp(p->cols[i].field.name, pred->column) == 0)
            at = (int)i;
    }
    if (p->ncols == 1 &&
        (p->cols[0].field.type == SB_TYPE_BINARY || p->cols[0].field.type == SB_TYPE_UTF8))
        return -1;
    return at;
}

/* A bound decoded: an integer (uint64 values above INT64_MAX flagged big), a double, bytes or
 * a boolean, by what the partition column holds. */
typedef struct {
    int64_t i;
    bool big;
    double d;
    const uint8_t *s;
    size_t n;
    bool b;
} bound;

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Decodes a PLAIN min/max of column type t (physical type phys); false when malformed. */
static bool decode(sb_type t, int phys, const uint8_t *p, size_t n, bound *v)
{
    memset(v, 0, sizeof *v);
    switch (t) {
    case SB_TYPE_BOOL:
        if (n != 1)
            return false;
        v->b = (p[0] & 1) != 0;
        return true;
    case SB_TYPE_INT8:
    case SB_TYPE_INT16:
    case SB_TYPE_INT32:
    case SB_TYPE_UINT8:
    case SB_TYPE_UINT16:
    case SB_TYPE_UINT32:
    case SB_TYPE_INT64:
    case SB_TYPE_UINT64:
        if (phys == SB_PQ_INT32 && n == 4) {
            uint32_t u = rd32(p);
            bool uns = t == SB_TYPE_UINT8 || t == SB_TYPE_UINT16 || t == SB_TYPE_UINT32;
            v->i = uns ? (int64_t)u : (int64_t)(int32_t)u;
            return true;
        }
        if (phys == SB_PQ_INT64 && n == 8) {
            uint64_t u = rd64(p);
            v->big = t == SB_TYPE_UINT64 && u > (uint64_t)INT64_MAX;
            v->i = (int64_t)u;
            return true;
        }
        return false;
    case SB_TYPE_FLOAT32:
    case SB_TYPE_FLOAT64:
        if (phys == SB_PQ_FLOAT && n == 4) {
            uint32_t u = rd32(p);
            float f;
            memcpy(&f, &u, 4);
            v->d = f;
        } else if (phys == SB_PQ_DOUBLE && n == 8) {
            uint64_t u = rd64(p);
            memcpy(&v->d, &u, 8);
        } else {
            return false;
        }
        return !isnan(v->d); /* the spec: a NaN bound is ignored */
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY:
        v->s = p;
        v->n = n;
        return true;
    default:
        return false;
    }
}

/* The filter's comparison of a value with the predicate's (record.c filter_typed_match):
 * -1, 0, 1. */
static int cmp_bound(sb_type t, const bound *v, const sb_pq_pred *pr)
{
    switch (t) {
    case SB_TYPE_FLOAT32:
    case SB_TYPE_FLOAT64:
        return v->d < pr->d ? -1 : v->d > pr->d;
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY: {
        size_t m = v->n < pr->str_len ? v->n : pr->str_len;
        int c = m > 0 ? memcmp(v->s, pr->str, m) : 0;
        if (c != 0)
            return c < 0 ? -1 : 1;
        return v->n < pr->str_len ? -1 : v->n > pr->str_len;
    }
    default: /* integers */
        if (v->big)
            return 1;
        if (pr->is_int)
            return v->i < pr->i ? -1 : v->i > pr->i;
        return (double)v->i < pr->d ? -1 : (double)v->i > pr->d;
    }
}

/* Whether lo > hi (wrong statistics) in the column's order. */
static bool inverted(sb_type t, const bound *lo, const bound *hi)
{
    switch (t) {
    case SB_TYPE_BOOL:
        return lo->b && !hi->b;
    case SB_TYPE_FLOAT32:
    case SB_TYPE_FLOAT64:
        return lo->d > hi->d;
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY: {
        size_t m = lo->n < hi->n ? lo->n : hi->n;
        int c = m > 0 ? memcmp(lo->s, hi->s, m) : 0;
        return c > 0 || (c == 0 && lo->n > hi->n);
    }
    default:
        if (lo->big != hi->big)
            return lo->big;
        return lo->big ? (uint64_t)lo->i > (uint64_t)hi->i : lo->i > hi->i;
    }
}

/* Whether the filter compares this column type with the predicate's kind of value at all. */
static bool comparable(sb_type t, const sb_pq_pred *pr)
{
    switch (t) {
    case SB_TYPE_BOOL:
        return pr->kind == SB_PQ_VBOOL;
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY:
        return pr->kind == SB_PQ_VSTRING;
    case SB_TYPE_FIXED_LIST:
        return false;
    default:
        return pr->kind == SB_PQ_VNUMBER;
    }
}

/* Whether min/max bound the values in the filter's order. The spec: the deprecated min/max
 * were written in signed order whatever the type, so they hold only for types whose order is
 * signed (booleans, signed integers, floats); min_value/max_value follow the ColumnOrder, and a
 * file without column_orders gives no order, so they too are trusted only where every order a
 * writer could have used agrees (signed types). Byte arrays and unsigned integers need
 * TYPE_ORDER (unsigned bytes, unsigned integers). */
static bool bounds_trusted(const sb_pq_meta *m, int leaf, sb_type t, const sb_pq_stats *s)
{
    bool signed_order = t != SB_TYPE_UTF8 && t != SB_TYPE_BINARY && t != SB_TYPE_UINT8 &&
                        t != SB_TYPE_UINT16 && t != SB_TYPE_UINT32 && t != SB_TYPE_UINT64;
    if (s->deprecated)
        return signed_order;
    return signed_order || (m->type_order != NULL && m->type_order[leaf]);
}

bool sb_pq_stats_exclude(const sb_pq_meta *m, const sb_pq_plan *p, int col, int64_t rows,
                         const sb_pq_stats *s, const sb_pq_pred *pr)
{
    if (col < 0 || (size_t)col >= p->ncols)
        return false;
    const sb_pq_out *o = &p->cols[col];
    sb_type t = o->as_list ? SB_TYPE_FIXED_LIST : o->field.type;
    if (rows <= 0 || o->leaf < 0 || (size_t)o->leaf >= m->nleaves)
        return false;
    if (!comparable(t, pr)) /* every row, null or not, satisfies only ne */
        return pr->op != SB_PQ_NE;
    const sb_pq_schema_el *e = &m->schema[m->leaves[o->leaf]];
    bool known_nulls = s->has_null_count && s->null_count >= 0 && s->null_count <= rows;
    if (pr->op != SB_PQ_NE && known_nulls && s->null_count == rows)
        return true; /* all null: a null satisfies only ne */
    bound lo, hi;
    if (!s->has_min || !s->has_max || !bounds_trusted(m, o->leaf, t, s) ||
        !decode(t, e->type, s->min, s->min_len, &lo) ||
        !decode(t, e->type, s->max, s->max_len, &hi))
        return false;
    if (inverted(t, &lo, &hi))
        return false; /* min above max: the statistics are wrong, so read */
    bool no_nulls = known_nulls && s->null_count == 0;
    if (t == SB_TYPE_BOOL) { /* false < true: which of the two the group can hold */
        bool can_true = hi.b, can_false = !lo.b;
        if (pr->op == SB_PQ_EQ)
            return !(pr->b ? can_true : can_false);
        return no_nulls && !(pr->b ? can_false : can_true); /* ne (validate allows no other) */
    }
    int a = cmp_bound(t, &lo, pr), b = cmp_bound(t, &hi, pr);
    switch (pr->op) {
    case SB_PQ_EQ:
        return a > 0 || b < 0;
    case SB_PQ_LT:
        return a >= 0;
    case SB_PQ_LE:
        return a > 0;
    case SB_PQ_GT:
        return b <= 0;
    case SB_PQ_GE:
        return b < 0;
    case SB_PQ_NE:
        /* every row equal and none null; floats may hold NaNs, which the bounds leave out */
        return a == 0 && b == 0 && no_nulls && t != SB_TYPE_FLOAT32 && t != SB_TYPE_FLOAT64;
    }
    return false;
}

bool sb_pq_rg_excluded(const sb_pq_meta *m, const sb_pq_plan *p, int col, size_t rg,
                       const sb_pq_pred *pr)
{
    if (col < 0 || (size_t)col >= p->ncols || rg >= m->nrgs)
        return false;
    int leaf = p->cols[col].leaf;
    if (leaf < 0 || (size_t)leaf >= m->nleaves)
        return false;
    const sb_pq_row_group *g = &m->rgs[rg];
    return sb_pq_stats_exclude(m, p, col, g->num_rows, &g->cols[leaf].stats, pr);
}
