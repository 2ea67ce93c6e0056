/* groupby.c — groupby's aggregates (xchg.h): a hash table from each key's canonical encoding to
 * its aggregates (count, sum, min, max, mean, std, first, last, collect), emitted as one JSON
 * record per key in the order of the keys' encodings (the same output whatever order the rows
 * came in, but for first, last, collect). The table stays within the stage's share of the
 * memory budget: when full, the map side sends its partials on early (a full hook), and the
 * reduce side spills the table as a run of partials sorted by key, then merges the runs at the
 * end (an external merge), so the output is the one an unbounded table would give. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pct.h"
#include "spec/quantity.h"
#include "worker/ops/exchange/xchg.h"

typedef enum { A_COUNT, A_SUM, A_MIN, A_MAX, A_MEAN, A_STD, A_FIRST, A_LAST, A_COLLECT } aop;
static const char *const aop_names[] = {"count", "sum",   "min",  "max",     "mean",
                                        "std",   "first", "last", "collect", NULL};

typedef struct {
    aop op;
    const char *field; /* NULL for count */
    char *as;          /* the output member's name, JSON-escaped with its quotes */
    size_t slot;       /* its field's place in the scan's keys (after the key fields) */
} aspec;

/* One aggregate of one group. Sums are Neumaier-compensated (exact to the last bits in double
 * precision for the inputs' magnitudes that occur in practice); std is Welford's, sample
 * (n - 1). */
typedef struct {
    uint64_t n; /* rows (count) or values seen (the others) */
    int64_t isum;
    uint8_t all_int, overflow, kind; /* kind (min/max): 1 number, 2 string */
    double dsum, dcomp, mean, m2;
    double vd; /* min/max: the number held */
    int64_t vi;
    uint8_t vint;
    xbuf text; /* min/max/first/last: the value's JSON; collect: "[v,v" */
} astate;

typedef struct {
    xbuf keytext; /* "\"k\":v,..." of the first row of the group */
    astate *a;    /* its naggs aggregates: xgroupby.states[gi * naggs ..] */
} group;

struct xgroupby {
    xkeys keys;
    aspec *aggs;
    size_t naggs;
    sb_op_json_key *scan; /* key fields, then aggregate fields */
    size_t nscan;
    char **keyname; /* key field names JSON-escaped with quotes */
    cJSON *root;
    xset set;
    group *groups;
    size_t capgroups;
    /* every group's aggregates in one array, group gi's at gi * naggs. Each row updates its
     * group's: with a malloc of their own per group, 10,000 groups' aggregates lay scattered
     * over the heap and the update waited on the pointer and then the state (36% of a groupby
     * worker's CPU under perf). In one array, the 1 GiB groupby of bench-a2a took 0.76-0.99x
     * the time (7 rounds alternating, median 0.90x). */
    astate *states;
    size_t capstates; /* in groups */
    uint64_t memory, bytes;
    xbuf kb;               /* scratch: one row's key encoding */
    xgroupby_full_fn full; /* the map side's hook when the table is full (NULL: spill a run) */
    void *full_ud;
    xruns *runs; /* spilled runs (reduce side; made on the first spill) */
};

static char *json_quote(const char *s)
{
    cJSON *j = cJSON_CreateString(s);
    char *out = j != NULL ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return out;
}

const xkeys *xgroupby_keys(const xgroupby *g)
{
    return &g->keys;
}

static int agg_parse(xgroupby *g, const cJSON *it, aspec *a, sb_err *err)
{
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(it, "field");
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(it, "as");
    size_t k = 0;
    while (cJSON_IsString(op) && aop_names[k] != NULL && strcmp(aop_names[k], op->valuestring))
        k++;
    if (!cJSON_IsString(op) || aop_names[k] == NULL)
        return sb_err_permanent(err, "op groupby: an aggregate's op must be one of count, sum, "
                                     "min, max, mean, std, first, last, collect");
    a->op = (aop)k;
    if ((a->op == A_COUNT) != (f == NULL) || (f != NULL && !cJSON_IsString(f)))
        return sb_err_permanent(err, "op groupby: %s",
                                a->op == A_COUNT ? "count takes no field"
                                                 : "an aggregate needs a field");
    a->field = f != NULL ? f->valuestring : NULL;
    char dflt[512];
    snprintf(dflt, sizeof dflt, "%s%s%s", aop_names[k], a->field ? "_" : "",
             a->field ? a->field : "");
    if ((a->as = json_quote(cJSON_IsString(as) ? as->valuestring : dflt)) == NULL)
        return sb_err_set(err, "out of memory");
    if (a->field != NULL) {
        a->slot = g->nscan;
        g->scan[g->nscan].name = a->field;
        g->scan[g->nscan++].len = strlen(a->field);
    }
    return 0;
}

static int groupby_parse(xgroupby *g, const char *args_json, sb_err *err)
{
    g->root = args_json != NULL ? cJSON_Parse(args_json) : NULL;
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(g->root, "keys");
    const cJSON *aggs = cJSON_GetObjectItemCaseSensitive(g->root, "aggregates");
    if (!cJSON_IsArray(keys) || cJSON_GetArraySize(keys) == 0)
        return sb_err_permanent(err, "op groupby: keys must be a non-empty list of field names");
    if (xkeys_parse(keys, cJSON_GetObjectItemCaseSensitive(g->root, "missingKey"), "groupby",
                    &g->keys, err) != 0)
        return -1;
    size_t na = cJSON_IsArray(aggs) ? (size_t)cJSON_GetArraySize(aggs) : 0;
    g->aggs = calloc(na + 1, sizeof *g->aggs);
    g->scan = calloc(g->keys.n + na + 1, sizeof *g->scan);
    g->keyname = calloc(g->keys.n + 1, sizeof *g->keyname);
    if (g->aggs == NULL || g->scan == NULL || g->keyname == NULL)
        return sb_err_set(err, "out of memory");
    memcpy(g->scan, g->keys.k, g->keys.n * sizeof *g->scan);
    g->nscan = g->keys.n;
    for (size_t i = 0; i < g->keys.n; i++)
        if ((g->keyname[i] = json_quote(g->keys.k[i].name)) == NULL)
            return sb_err_set(err, "out of memory");
    for (const cJSON *it = cJSON_IsArray(aggs) ? aggs->child : NULL; it != NULL; it = it->next)
        if (agg_parse(g, it, &g->aggs[g->naggs++], err) != 0)
            return -1;
    return 0;
}

void xgroupby_set_memory(xgroupby *g, uint64_t memory)
{
    g->memory = memory;
}

xgroupby *xgroupby_new(const char *args_json, uint64_t memory, sb_err *err)
{
    xgroupby *g = calloc(1, sizeof *g);
    if (g == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    g->memory = memory;
    if (groupby_parse(g, args_json, err) != 0) {
        xgroupby_free(g);
        return NULL;
    }
    return g;
}

static void groups_clear(xgroupby *g)
{
    for (size_t i = 0; i < g->set.n; i++) {
        xbuf_free(&g->groups[i].keytext);
        for (size_t k = 0; g->groups[i].a != NULL && k < g->naggs; k++)
            xbuf_free(&g->groups[i].a[k].text); /* (a: NULL where group_init ran out of memory) */
    }
    xset_clear(&g->set);
    g->bytes = 0;
}

void xgroupby_reset(xgroupby *g)
{
    groups_clear(g);
    /* the table sized by the task's keys goes with it (ops.h: an idle state is outside the
     * budget); groups_clear alone keeps it for a task's next table */
    xset_free(&g->set);
    free(g->groups);
    g->groups = NULL;
    g->capgroups = 0;
    free(g->states);
    g->states = NULL;
    g->capstates = 0;
    xruns_clear(g->runs);
}

void xgroupby_on_full(xgroupby *g, xgroupby_full_fn fn, void *ud)
{
    g->full = fn;
    g->full_ud = ud;
}

uint64_t xgroupby_spilled(const xgroupby *g)
{
    return xruns_spilled(g->runs);
}

void xgroupby_free(xgroupby *g)
{
    if (g == NULL)
        return;
    groups_clear(g);
    xruns_free(g->runs);
    xset_free(&g->set);
    free(g->groups);
    free(g->states);
    for (size_t i = 0; i < g->naggs; i++)
        free(g->aggs[i].as);
    free(g->aggs);
    for (size_t i = 0; g->keyname != NULL && i < g->keys.n; i++)
        free(g->keyname[i]);
    free(g->keyname);
    free(g->scan);
    xkeys_free(&g->keys);
    xbuf_free(&g->kb);
    cJSON_Delete(g->root);
    free(g);
}

/* A new group's state: its key members' text from this row. */
static int group_init(xgroupby *g, size_t gi, const sb_op_json_span *found, sb_err *err)
{
    if (gi >= g->capgroups) {
        size_t cap = g->capgroups ? g->capgroups * 2 : 64;
        group *ng = realloc(g->groups, cap * sizeof *ng);
        if (ng == NULL)
            return sb_err_set(err, "out of memory");
        g->groups = ng;
        g->capgroups = cap;
    }
    group *gr = &g->groups[gi];
    memset(gr, 0, sizeof *gr);
    if (gi >= g->capstates) { /* grown: the groups before gi point into the new array */
        size_t cap = g->capstates ? g->capstates * 2 : 64;
        astate *ns = realloc(g->states, cap * (g->naggs ? g->naggs : 1) * sizeof *ns);
        if (ns == NULL)
            return sb_err_set(err, "out of memory");
        g->states = ns;
        g->capstates = cap;
        for (size_t j = 0; j < gi; j++)
            g->groups[j].a = &ns[j * g->naggs];
    }
    gr->a = &g->states[gi * g->naggs];
    memset(gr->a, 0, g->naggs * sizeof *gr->a);
    for (size_t i = 0; i < g->keys.n; i++) {
        int none = found[i].type == SB_OP_JSON_NONE;
        if ((i && xbuf_put(&gr->keytext, ",", 1) != 0) ||
            xbuf_put(&gr->keytext, g->keyname[i], strlen(g->keyname[i])) != 0 ||
            xbuf_put(&gr->keytext, ":", 1) != 0 ||
            xbuf_put(&gr->keytext, none ? "null" : found[i].p, none ? 4 : found[i].n) != 0)
            return sb_err_set(err, "out of memory");
    }
    for (size_t k = 0; k < g->naggs; k++)
        gr->a[k].all_int = 1;
    g->bytes += sizeof *gr + gr->keytext.cap + g->naggs * sizeof(astate);
    return 0;
}

/* min/max: -1, 0, 1 comparing the value v (number or decoded string) with the one held. */
static int value_cmp(const astate *a, const sb_op_json_span *v, double d, int64_t i, int is_int)
{
    if (v->type == SB_OP_JSON_NUMBER) {
        if (is_int && a->vint)
            return (i > a->vi) - (i < a->vi);
        long double x = is_int ? (long double)i : (long double)d;
        long double y = a->vint ? (long double)a->vi : (long double)a->vd;
        return (x > y) - (x < y);
    }
    char *s = malloc(v->n + 1), *t = malloc(a->text.n + 1);
    int c = 0;
    if (s != NULL && t != NULL) {
        size_t ls = sb_op_json_unescape(v->p, v->n, s, v->n);
        size_t lt = sb_op_json_unescape(a->text.p, a->text.n, t, a->text.n);
        c = memcmp(s, t, ls < lt ? ls : lt);
        c = c != 0 ? c : (ls > lt) - (ls < lt);
    }
    free(s);
    free(t);
    return c;
}

static int set_text(astate *a, const char *p, size_t n)
{
    a->text.n = 0;
    return xbuf_put(&a->text, p, n);
}

static int agg_minmax(const aspec *sp, astate *a, const sb_op_json_span *v, size_t row, sb_err *err)
{
    int kind = v->type == SB_OP_JSON_NUMBER ? 1 : v->type == SB_OP_JSON_STRING ? 2 : 0;
    if (kind == 0 || (a->kind != 0 && a->kind != kind))
        return sb_err_data(err, "groupby: record %zu: %s of field %s meets a %s after %s", row,
                           aop_names[sp->op], sp->field, sb_op_json_type_name(v->type),
                           a->kind == 0   ? "nothing it can order"
                           : a->kind == 1 ? "numbers"
                                          : "strings");
    double d = 0;
    int64_t i = 0;
    bool is_int = false;
    if (kind == 1)
        sb_op_json_number(v->p, v->n, &d, &i, &is_int);
    int c = a->kind == 0 ? 0 : value_cmp(a, v, d, i, is_int);
    if (a->kind == 0 || (sp->op == A_MIN ? c < 0 : c > 0)) {
        a->kind = (uint8_t)kind;
        a->vd = d;
        a->vi = i;
        a->vint = is_int;
        if (set_text(a, v->p, v->n) != 0)
            return sb_err_set(err, "out of memory");
    }
    return 0;
}

/* sum, mean, std: a number; Neumaier's compensated sum, Welford's mean and squares. */
static int agg_number(const aspec *sp, astate *a, const sb_op_json_span *v, size_t row, sb_err *err)
{
    if (v->type != SB_OP_JSON_NUMBER)
        return sb_err_data(err, "groupby: record %zu: %s of field %s meets a %s, not a number", row,
                           aop_names[sp->op], sp->field, sb_op_json_type_name(v->type));
    double d;
    int64_t i;
    bool is_int;
    sb_op_json_number(v->p, v->n, &d, &i, &is_int);
    a->n++;
    if (!is_int)
        a->all_int = 0;
    else if (a->all_int && __builtin_add_overflow(a->isum, i, &a->isum))
        a->overflow = 1;
    double t = a->dsum + d;
    a->dcomp += fabs(a->dsum) >= fabs(d) ? (a->dsum - t) + d : (d - t) + a->dsum;
    a->dsum = t;
    double delta = d - a->mean;
    a->mean += delta / (double)a->n;
    a->m2 += delta * (d - a->mean);
    return 0;
}

static int agg_add(const aspec *sp, astate *a, const sb_op_json_span *v, size_t row, sb_err *err)
{
    int none = v == NULL || v->type == SB_OP_JSON_NONE;
    const char *txt = none ? "null" : v->p;
    size_t tn = none ? 4 : v->n;
    switch (sp->op) {
    case A_COUNT:
        a->n++;
        return 0;
    case A_FIRST:
        if (a->n++ > 0)
            return 0;
        return set_text(a, txt, tn) == 0 ? 0 : sb_err_set(err, "out of memory");
    case A_LAST:
        a->n++;
        return set_text(a, txt, tn) == 0 ? 0 : sb_err_set(err, "out of memory");
    case A_COLLECT:
        if (xbuf_put(&a->text, a->n++ ? "," : "[", 1) != 0 || xbuf_put(&a->text, txt, tn) != 0)
            return sb_err_set(err, "out of memory");
        return 0;
    default:
        break;
    }
    if (none || v->type == SB_OP_JSON_NULL)
        return 0; /* nulls and missing fields are skipped, as in SQL */
    if (sp->op == A_MIN || sp->op == A_MAX)
        return agg_minmax(sp, a, v, row, err);
    return agg_number(sp, a, v, row, err);
}

static int row_add(xgroupby *g, const char *r, size_t len, size_t row, sb_op_json_span *found,
                   sb_err *err)
{
    sb_op_json_type top;
    char msg[160];
    if (sb_op_json_scan(r, len, g->scan, g->nscan, found, &top, msg, sizeof msg) != 0)
        return sb_err_data(err, "groupby: record %zu is not valid JSON: %s", row, msg);
    if (top != SB_OP_JSON_OBJECT)
        return sb_err_data(err, "groupby: record %zu is a JSON %s, not an object", row,
                           sb_op_json_type_name(top));
    g->kb.n = 0;
    if (xkeys_encode_found(&g->keys, "groupby", row, found, &g->kb, err) != 0)
        return -1;
    int added;
    long gi = xset_find_add(&g->set, g->kb.p, g->kb.n, xhash(g->kb.p, g->kb.n, 0), &added);
    if (gi < 0)
        return sb_err_set(err, "out of memory");
    if (added && group_init(g, (size_t)gi, found, err) != 0)
        return -1;
    group *gr = &g->groups[gi];
    for (size_t k = 0; k < g->naggs; k++) {
        size_t before = gr->a[k].text.cap;
        const sb_op_json_span *v = g->aggs[k].field ? &found[g->aggs[k].slot] : NULL;
        if (agg_add(&g->aggs[k], &gr->a[k], v, row, err) != 0)
            return -1;
        g->bytes += gr->a[k].text.cap - before;
    }
    return 0;
}

static int spill_run(xgroupby *g, sb_err *err);

/* The table outgrew g->memory: hand it on (map side) or spill it (reduce side). One group that
 * alone outgrows it (a collect of a huge list) cannot go anywhere: a permanent error. */
static int table_full(xgroupby *g, sb_err *err)
{
    size_t groups = g->set.n;
    if (groups > 1 && (g->full != NULL ? g->full(g->full_ud, err) : spill_run(g, err)) != 0)
        return -1;
    if (g->bytes + xset_bytes(&g->set) <= g->memory)
        return 0;
    char b1[32];
    return sb_err_permanent(err,
                            "groupby: %s than %s, its share of execution.memoryBudget: give "
                            "the pipeline a larger memoryBudget",
                            groups > 1 ? "the groups of one task still take more"
                                       : "one group's aggregates take more",
                            sb_quantity_format_bytes((int64_t)g->memory, b1, sizeof b1));
}

typedef int (*row_fn)(xgroupby *g, const char *r, size_t len, size_t row, sb_op_json_span *found,
                      sb_err *err);

/* fn over rows [first, first+n) of records column col, within the memory bound. */
static int add_rows(xgroupby *g, const sb_batch *in, int col, size_t first, size_t n, row_fn fn,
                    sb_err *err)
{
    sb_op_json_span *found = calloc(g->nscan + 1, sizeof *found);
    if (found == NULL)
        return sb_err_set(err, "out of memory");
    const sb_column *c = sb_batch_column(in, (size_t)col);
    int rc = 0;
    for (size_t r = first; r < first + n && rc == 0; r++) {
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        rc = fn(g, p, len, r, found, err);
        if (rc == 0 && g->memory > 0 && g->bytes + xset_bytes(&g->set) > g->memory)
            rc = table_full(g, err);
    }
    free(found);
    return rc;
}

static int partial_add(xgroupby *g, const char *r, size_t len, size_t row, sb_op_json_span *found,
                       sb_err *err);

int xgroupby_add(xgroupby *g, const sb_batch *in, int col, size_t first, size_t n, sb_err *err)
{
    return add_rows(g, in, col, first, n, row_add, err);
}

/* A reduce task's input record: a partial ('P' and its JSON) or a row passed on as it was. */
static int partial_or_row(xgroupby *g, const char *r, size_t len, size_t row,
                          sb_op_json_span *found, sb_err *err)
{
    if (len > 0 && r[0] == 'P')
        return partial_add(g, r + 1, len - 1, row, found, err);
    return row_add(g, r, len, row, found, err);
}

int xgroupby_add_partials(xgroupby *g, const sb_batch *in, int col, size_t first, size_t n,
                          sb_err *err)
{
    return add_rows(g, in, col, first, n, partial_or_row, err);
}

size_t xgroupby_groups(const xgroupby *g)
{
    return g->set.n;
}

/* Appends aggregate a's value as JSON to out. */
static int agg_value(const aspec *sp, const astate *a, xbuf *out)
{
    char num[64];
    switch (sp->op) {
    case A_COUNT:
        snprintf(num, sizeof num, "%llu", (unsigned long long)a->n);
        break;
    case A_SUM:
        if (a->n > 0 && a->all_int && !a->overflow)
            snprintf(num, sizeof num, "%lld", (long long)a->isum);
        else
            snprintf(num, sizeof num, "%.17g", a->dsum + a->dcomp);
        break;
    case A_MEAN:
        snprintf(num, sizeof num, "%.17g", (a->dsum + a->dcomp) / (double)a->n);
        break;
    case A_STD:
        snprintf(num, sizeof num, "%.17g", sqrt(a->m2 / (double)(a->n - 1)));
        break;
    case A_COLLECT:
        if (a->n == 0)
            return xbuf_put(out, "[]", 2);
        return xbuf_put(out, a->text.p, a->text.n) != 0 || xbuf_put(out, "]", 1) != 0 ? -1 : 0;
    default:
        return a->text.n ? xbuf_put(out, a->text.p, a->text.n) : xbuf_put(out, "null", 4);
    }
    int null = (sp->op != A_COUNT && a->n == 0) || (sp->op == A_STD && a->n < 2) ||
               strstr(num, "inf") != NULL || strstr(num, "nan") != NULL;
    return null ? xbuf_put(out, "null", 4) : xbuf_put(out, num, strlen(num));
}

typedef struct {
    const char *k;
    size_t n, gi;
} korder;

static int korder_cmp(const void *a, const void *b)
{
    const korder *x = a, *y = b;
    int c = memcmp(x->k, y->k, x->n < y->n ? x->n : y->n);
    return c != 0 ? c : (x->n > y->n) - (x->n < y->n);
}

/* The groups' indices in the order of their keys' encodings; NULL out of memory. */
static korder *groups_sorted(const xgroupby *g)
{
    korder *ord = calloc(g->set.n + 1, sizeof *ord);
    if (ord == NULL)
        return NULL;
    for (size_t i = 0; i < g->set.n; i++) {
        ord[i].k = xset_key(&g->set, i, &ord[i].n);
        ord[i].gi = i;
    }
    qsort(ord, g->set.n, sizeof *ord, korder_cmp);
    return ord;
}

/* Group gr's output record {keys..., as: value...} into rec (cleared first). -1 out of memory. */
static int group_record(const xgroupby *g, const group *gr, xbuf *rec)
{
    rec->n = 0;
    int bad = xbuf_put(rec, "{", 1) || xbuf_put(rec, gr->keytext.p, gr->keytext.n);
    for (size_t k = 0; k < g->naggs && !bad; k++)
        bad = xbuf_put(rec, ",", 1) || xbuf_put(rec, g->aggs[k].as, strlen(g->aggs[k].as)) ||
              xbuf_put(rec, ":", 1) || agg_value(&g->aggs[k], &gr->a[k], rec);
    return bad || xbuf_put(rec, "}", 1) != 0 ? -1 : 0;
}

static int merge_runs(xgroupby *g, sb_op_out *out, sb_err *err);

int xgroupby_emit(xgroupby *g, sb_op_out *out, sb_err *err)
{
    if (xruns_count(g->runs) > 0) /* the rest joins the runs, and the runs merge */
        return spill_run(g, err) != 0 ? -1 : merge_runs(g, out, err);
    korder *ord = groups_sorted(g);
    xbuf rec = {0};
    int rc = ord == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t i = 0; rc == 0 && i < g->set.n; i++)
        rc = group_record(g, &g->groups[ord[i].gi], &rec) != 0
                 ? sb_err_set(err, "out of memory")
                 : sb_op_out_append_binary(out, rec.p, rec.n, err);
    free(ord);
    xbuf_free(&rec);
    groups_clear(g);
    return rc;
}

/* ---- map-side combine: partial records -------------------------------------------------- */

static int agg_value(const aspec *sp, const astate *a, xbuf *out);

/* Partials carry numbers cheaply and doubles exactly: integers in decimal, doubles as their
 * IEEE-754 bits in a string of 16 hex digits ("%.17g" on the map side and strtod on the reduce
 * side took ~8% of a 1 GiB groupby's CPU). Partials never leave the pipeline; state_merge also
 * reads doubles written as JSON numbers. */
static char *put_u64(char *p, uint64_t v)
{
    char t[20];
    int n = 0;
    do
        t[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n > 0)
        *p++ = t[--n];
    return p;
}

static char *put_i64(char *p, int64_t v)
{
    if (v >= 0)
        return put_u64(p, (uint64_t)v);
    *p++ = '-';
    return put_u64(p, (uint64_t)0 - (uint64_t)v);
}

static char *put_bits(char *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    *p++ = '"';
    for (int sh = 60; sh >= 0; sh -= 4)
        *p++ = "0123456789abcdef"[(u >> sh) & 15];
    *p++ = '"';
    return p;
}

/* Aggregate a's partial state as a JSON array (see state_merge for each op's fields). */
static int state_put(const aspec *sp, const astate *a, xbuf *out, sb_err *err)
{
    char num[160], *p = num;
    int bad = 0;
    switch (sp->op) {
    case A_COUNT:
        *p++ = '[';
        p = put_u64(p, a->n);
        break;
    case A_SUM:
    case A_MEAN:
        if (!isfinite(a->dsum) || !isfinite(a->dcomp))
            return sb_err_data(err, "groupby: %s of field %s is beyond double range",
                               aop_names[sp->op], sp->field);
        *p++ = '[';
        p = put_u64(p, a->n);
        *p++ = ',';
        *p++ = a->all_int ? '1' : '0';
        *p++ = ',';
        *p++ = a->overflow ? '1' : '0';
        *p++ = ',';
        p = put_i64(p, a->isum);
        *p++ = ',';
        p = put_bits(p, a->dsum);
        *p++ = ',';
        p = put_bits(p, a->dcomp);
        break;
    case A_STD:
        if (!isfinite(a->mean) || !isfinite(a->m2))
            return sb_err_data(err, "groupby: std of field %s is beyond double range", sp->field);
        *p++ = '[';
        p = put_u64(p, a->n);
        *p++ = ',';
        p = put_bits(p, a->mean);
        *p++ = ',';
        p = put_bits(p, a->m2);
        break;
    case A_MIN:
    case A_MAX:
        return xbuf_put(out, "[", 1) ||
                       xbuf_put(out, a->kind ? a->text.p : "null", a->kind ? a->text.n : 4) ||
                       xbuf_put(out, "]", 1)
                   ? sb_err_set(err, "out of memory")
                   : 0;
    default: /* first, last: [n, value]; collect: [n, [values]] */
        snprintf(num, sizeof num, "[%llu,", (unsigned long long)a->n);
        bad = xbuf_put(out, num, strlen(num)) ||
              (sp->op == A_COLLECT
                   ? agg_value(sp, a, out)
                   : xbuf_put(out, a->text.n ? a->text.p : "null", a->text.n ? a->text.n : 4)) ||
              xbuf_put(out, "]", 1);
        return bad ? sb_err_set(err, "out of memory") : 0;
    }
    *p++ = ']';
    return xbuf_put(out, num, (size_t)(p - num)) ? sb_err_set(err, "out of memory") : 0;
}

/* Group gi's partial record {"k": {keys}, "a": [states]} into rec (cleared first), after the
 * prefix given ("P" for the exchange, "" for a spilled run). */
static int partial_record(const xgroupby *g, size_t gi, const char *prefix, xbuf *rec, sb_err *err)
{
    const group *gr = &g->groups[gi];
    rec->n = 0;
    if (xbuf_put(rec, prefix, strlen(prefix)) || xbuf_put(rec, "{\"k\":{", 6) ||
        xbuf_put(rec, gr->keytext.p, gr->keytext.n) || xbuf_put(rec, "},\"a\":[", 7))
        return sb_err_set(err, "out of memory");
    for (size_t i = 0; i < g->naggs; i++) {
        if (i && xbuf_put(rec, ",", 1) != 0)
            return sb_err_set(err, "out of memory");
        if (state_put(&g->aggs[i], &gr->a[i], rec, err) != 0)
            return -1;
    }
    return xbuf_put(rec, "]}", 2) != 0 ? sb_err_set(err, "out of memory") : 0;
}

int xgroupby_emit_partials(xgroupby *g, uint32_t nbuckets, xgroupby_put_fn put, void *ud,
                           sb_err *err)
{
    xbuf rec = {0};
    int rc = 0;
    for (size_t gi = 0; rc == 0 && gi < g->set.n; gi++) {
        size_t kn;
        const char *k = xset_key(&g->set, gi, &kn);
        /* 'P' marks a partial: no JSON text (a row the map half passed on) starts so */
        rc = partial_record(g, gi, "P", &rec, err);
        if (rc == 0)
            rc = put(ud, (uint32_t)(xhash(k, kn, 0) % nbuckets), rec.p, rec.n, err);
    }
    xbuf_free(&rec);
    groups_clear(g);
    return rc;
}

/* The items of the JSON array span arr, up to max, into it[]; their count. */
static size_t arr_items(const sb_op_json_span *arr, sb_op_json_span *it, size_t max)
{
    const char *p = arr->p + 1, *e = arr->p + arr->n - 1;
    size_t n = 0;
    for (;;) {
        while (p < e && (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r'))
            p++;
        if (p >= e || n == max)
            return n;
        const char *q = xjson_skip(p, e);
        it[n++] = (sb_op_json_span){p, (size_t)(q - p), SB_OP_JSON_NONE};
        p = q;
    }
}

static double span_num(const sb_op_json_span *s, int64_t *i)
{
    if (s->n == 18 && s->p[0] == '"') { /* a double's bits (put_bits) */
        uint64_t u = 0;
        int ok = 1;
        for (size_t k = 1; k <= 16; k++) {
            int h = sb_hex_digit((unsigned char)s->p[k]);
            ok &= h >= 0;
            u = u << 4 | (uint64_t)(h & 15);
        }
        double d;
        memcpy(&d, &u, sizeof d);
        if (i != NULL)
            *i = 0; /* a count or an integer sum is never a double's bits */
        return ok ? d : NAN;
    }
    double d;
    int64_t v = 0;
    bool is_int;
    sb_op_json_number(s->p, s->n, &d, &v, &is_int);
    if (i != NULL)
        *i = is_int ? v : (int64_t)d;
    return d;
}

/* Neumaier's step: x into the compensated sum (dsum, dcomp). */
static void neumaier(astate *a, double x)
{
    double t = a->dsum + x;
    a->dcomp += fabs(a->dsum) >= fabs(x) ? (a->dsum - t) + x : (x - t) + a->dsum;
    a->dsum = t;
}

/* Merges one partial state (the items of its array) into a. */
static int state_merge(const aspec *sp, astate *a, const sb_op_json_span *it, size_t n, size_t row,
                       sb_err *err)
{
    int64_t pn = 0, v = 0;
    if (n > 0 && sp->op != A_MIN && sp->op != A_MAX)
        span_num(&it[0], &pn);
    if (sp->op == A_COUNT) {
        a->n += (uint64_t)pn;
    } else if ((sp->op == A_SUM || sp->op == A_MEAN) && n == 6) {
        a->n += (uint64_t)pn;
        span_num(&it[3], &v);
        a->all_int &= span_num(&it[1], NULL) != 0;
        a->overflow |= span_num(&it[2], NULL) != 0;
        if (a->all_int && !a->overflow && __builtin_add_overflow(a->isum, v, &a->isum))
            a->overflow = 1;
        neumaier(a, span_num(&it[4], NULL));
        neumaier(a, span_num(&it[5], NULL));
    } else if (sp->op == A_STD && n == 3 && pn > 0) { /* Chan et al.'s pairwise update */
        double nb = (double)pn, na = (double)a->n, mb = span_num(&it[1], NULL);
        double delta = mb - a->mean, nt = na + nb;
        a->mean += delta * nb / nt;
        a->m2 += span_num(&it[2], NULL) + delta * delta * na * nb / nt;
        a->n += (uint64_t)pn;
    } else if ((sp->op == A_MIN || sp->op == A_MAX) && n == 1 && it[0].p[0] != 'n') {
        sb_op_json_span val = it[0];
        val.type = val.p[0] == '"' ? SB_OP_JSON_STRING : SB_OP_JSON_NUMBER;
        return agg_minmax(sp, a, &val, row, err);
    } else if ((sp->op == A_FIRST || sp->op == A_LAST) && n == 2 && pn > 0) {
        if ((sp->op == A_LAST || a->n == 0) && set_text(a, it[1].p, it[1].n) != 0)
            return sb_err_set(err, "out of memory");
        a->n += (uint64_t)pn;
    } else if (sp->op == A_COLLECT && n == 2 && pn > 0) { /* its list's items, in order */
        const char *p = it[1].p + 1;
        size_t len = it[1].n - 2;
        if (xbuf_put(&a->text, a->n ? "," : "[", 1) != 0 || xbuf_put(&a->text, p, len) != 0)
            return sb_err_set(err, "out of memory");
        a->n += (uint64_t)pn;
    }
    return 0;
}

static int partial_add(xgroupby *g, const char *r, size_t len, size_t row, sb_op_json_span *found,
                       sb_err *err)
{
    static const sb_op_json_key parts[2] = {{"k", 1}, {"a", 1}};
    sb_op_json_span ka[2];
    char msg[160];
    if (sb_op_json_scan(r, len, parts, 2, ka, NULL, msg, sizeof msg) != 0 ||
        ka[0].type != SB_OP_JSON_OBJECT || ka[1].type != SB_OP_JSON_ARRAY ||
        sb_op_json_scan(ka[0].p, ka[0].n, g->keys.k, g->keys.n, found, NULL, msg, sizeof msg) != 0)
        return sb_err_set(err, "groupby: partial record %zu of the map side is malformed", row);
    g->kb.n = 0;
    if (xkeys_encode_found(&g->keys, "groupby", row, found, &g->kb, err) != 0)
        return -1;
    int added;
    long gi = xset_find_add(&g->set, g->kb.p, g->kb.n, xhash(g->kb.p, g->kb.n, 0), &added);
    if (gi < 0 || (added && group_init(g, (size_t)gi, found, err) != 0))
        return gi < 0 ? sb_err_set(err, "out of memory") : -1;
    sb_op_json_span st[64], it[6];
    size_t ns = arr_items(&ka[1], st, 64);
    if (ns != g->naggs)
        return sb_err_set(err, "groupby: partial record %zu has %zu states for %zu aggregates", row,
                          ns, g->naggs);
    group *gr = &g->groups[gi];
    for (size_t k = 0; k < g->naggs; k++) {
        size_t before = gr->a[k].text.cap;
        if (state_merge(&g->aggs[k], &gr->a[k], it, arr_items(&st[k], it, 6), row, err) != 0)
            return -1;
        g->bytes += gr->a[k].text.cap - before;
    }
    return 0;
}

/* ---- spilling: sorted runs of partials, merged at the end (reduce side) ------------------
 * A run (runs.c) holds one pair per group of the table when it was spilled: the key's encoding
 * and the group's partial record, in the order of the keys' encodings. The merge takes the
 * smallest key, merges its partials from the runs that hold it in run order (run i holds rows
 * that came before run i+1's, which keeps first, last and collect in input order), emits that
 * one group and goes on: its memory is one group plus a record buffer per run. */

static int spill_run(xgroupby *g, sb_err *err)
{
    if (g->runs == NULL && (g->runs = xruns_new("groupby")) == NULL)
        return sb_err_set(err, "out of memory");
    if (xruns_begin(g->runs, err) != 0)
        return -1;
    korder *ord = groups_sorted(g);
    xbuf rec = {0};
    int rc = ord == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t i = 0; rc == 0 && i < g->set.n; i++) {
        rc = partial_record(g, ord[i].gi, "", &rec, err);
        if (rc == 0)
            rc = xruns_put(g->runs, ord[i].k, ord[i].n, rec.p, rec.n, err);
    }
    free(ord);
    xbuf_free(&rec);
    if (xruns_end(g->runs, err) != 0 || rc != 0)
        return -1;
    groups_clear(g);
    xset_free(&g->set); /* give the table's memory back: the next one grows again */
    return 0;
}

/* The merge's state: the key of the group being merged (cur; none yet when have == 0). */
typedef struct {
    xgroupby *g;
    sb_op_out *out;
    sb_op_json_span *found;
    xbuf cur, rec;
    int have;
} gmerge;

/* Emits the group merged so far and clears the table. */
static int merged_emit(gmerge *m, sb_err *err)
{
    xgroupby *g = m->g;
    int rc =
        g->set.n != 1 || group_record(g, &g->groups[0], &m->rec) != 0
            ? sb_err_set(err, "groupby: merging spilled runs went wrong (%zu groups)", g->set.n)
            : sb_op_out_append_binary(m->out, m->rec.p, m->rec.n, err);
    groups_clear(g);
    m->have = 0;
    return rc;
}

/* One pair of the merge: a new key emits the group before it; the partial joins its group. */
static int merged_pair(void *ctx, const xruns_item *it, sb_err *err)
{
    gmerge *m = ctx;
    if (m->have && (m->cur.n != it->kn || memcmp(m->cur.p, it->key, it->kn) != 0) &&
        merged_emit(m, err) != 0)
        return -1;
    if (!m->have) {
        m->cur.n = 0;
        if (xbuf_put(&m->cur, it->key, it->kn) != 0)
            return sb_err_set(err, "out of memory");
        m->have = 1;
    }
    return partial_add(m->g, it->rec, it->rn, 0, m->found, err);
}

static int merge_runs(xgroupby *g, sb_op_out *out, sb_err *err)
{
    gmerge m = {g, out, calloc(g->nscan + 1, sizeof *m.found), {0}, {0}, 0};
    int rc = m.found == NULL ? sb_err_set(err, "out of memory") : 0;
    if (rc == 0)
        rc = xruns_merge(g->runs, NULL, NULL, merged_pair, &m, err);
    if (rc == 0 && m.have)
        rc = merged_emit(&m, err);
    groups_clear(g);
    free(m.found);
    xbuf_free(&m.cur);
    xbuf_free(&m.rec);
    return rc;
}
