/* allops.c — what validate checks of the all-to-all ops beyond their args' types (allops.h):
 * groupby's aggregates and output names, missingKey, repartition's bytes, and the pipeline
 * settings these ops cannot run with yet. */
#include <stdio.h>
#include <string.h>

#include "spec/allops.h"
#include "spec/join.h"
#include "spec/quantity.h"
#include "spec/schema.h"

int sb_spec_allop(const char *op)
{
    static const char *const names[] = {"repartition", "random_shuffle", "groupby",
                                        "distinct",    "limit",          "sort"};
    for (size_t i = 0; op != NULL && i < sizeof names / sizeof *names; i++)
        if (strcmp(op, names[i]) == 0)
            return 1;
    return 0;
}

static const char *const agg_ops[] = {"count", "sum",   "min",  "max",     "mean",
                                      "std",   "first", "last", "collect", NULL};

static int is_str(const sb_node *n)
{
    return n != NULL && n->kind == SB_NODE_STRING;
}

/* One aggregate {op, field, as}: its output name into *as (NULL when not a string). */
static void agg_check(const sb_node *a, const char *path, sb_diags *d, const char **as, char *dflt,
                      size_t dlen)
{
    *as = NULL;
    if (a->kind != SB_NODE_MAP) {
        sb_diags_add(d, path, a->line, a->col, "must be a map {op, field, as}");
        return;
    }
    char buf[512];
    for (size_t k = 0; k < a->n; k++) {
        const char *key = a->keys[k]->text;
        if (strcmp(key, "op") && strcmp(key, "field") && strcmp(key, "as"))
            sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, key), a->keys[k]->line,
                         a->keys[k]->col, "unknown field \"%s\" of an aggregate (op, field, as)",
                         key);
    }
    const sb_node *op = sb_node_get(a, "op"), *f = sb_node_get(a, "field");
    const sb_node *asn = sb_node_get(a, "as");
    size_t i = 0;
    while (is_str(op) && agg_ops[i] != NULL && strcmp(agg_ops[i], op->text) != 0)
        i++;
    if (!is_str(op) || agg_ops[i] == NULL) {
        const char *got = is_str(op) ? op->text : NULL;
        int line = op != NULL ? op->line : a->line, col = op != NULL ? op->col : a->col;
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "op"), line, col,
                     "must be one of count, sum, min, max, mean, std, first, last, collect%s%s%s",
                     got ? ", got \"" : "", got ? got : "", got ? "\"" : "");
        return;
    }
    int count = strcmp(op->text, "count") == 0;
    if (count && f != NULL)
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "field"), f->line, f->col,
                     "count takes no field: it counts the group's rows");
    else if (!count && !is_str(f))
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "field"), f ? f->line : a->line,
                     f ? f->col : a->col, "%s needs a field (a name)", op->text);
    if (asn != NULL && (!is_str(asn) || asn->text[0] == '\0')) {
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "as"), asn->line, asn->col,
                     "must be a non-empty name");
        return;
    }
    snprintf(dflt, dlen, "%s%s%s", op->text, count || !is_str(f) ? "" : "_",
             count || !is_str(f) ? "" : f->text);
    *as = asn != NULL ? asn->text : dflt;
}

/* groupby: keys unique, aggregates well formed, output names unique and apart from the keys. */
static void groupby_check(const sb_node *args, const char *path, sb_diags *d)
{
    const sb_node *keys = sb_node_get(args, "keys"), *aggs = sb_node_get(args, "aggregates");
    char buf[512], ib[512];
    const char *names[256];
    size_t nn = 0;
    for (size_t i = 0; keys != NULL && keys->kind == SB_NODE_SEQ && i < keys->n && nn < 256; i++)
        if (is_str(keys->items[i]))
            names[nn++] = keys->items[i]->text;
    if (keys != NULL && keys->kind == SB_NODE_SEQ && keys->n == 0)
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "keys"), keys->line, keys->col,
                     "must name at least one field (distinct takes the whole record)");
    if (aggs == NULL || aggs->kind == SB_NODE_NULL)
        return;
    sb_spec_path_field(buf, sizeof buf, path, "aggregates");
    if (aggs->kind != SB_NODE_SEQ) {
        sb_diags_add(d, buf, aggs->line, aggs->col, "must be a list of {op, field, as}");
        return;
    }
    if (aggs->n > 64)
        sb_diags_add(d, buf, aggs->line, aggs->col, "has %zu aggregates; at most 64", aggs->n);
    char dflts[64][160]; /* default output names, while names[] points at them */
    for (size_t i = 0; i < aggs->n && i < 64 && nn < 256; i++) {
        const char *as;
        sb_spec_path_index(ib, sizeof ib, buf, i);
        agg_check(aggs->items[i], ib, d, &as, dflts[i], sizeof dflts[0]);
        if (as == NULL)
            continue;
        for (size_t k = 0; k < nn; k++) {
            if (strcmp(names[k], as) != 0)
                continue;
            sb_diags_add(d, ib, aggs->items[i]->line, aggs->items[i]->col,
                         "output name \"%s\" is taken (by a key or an earlier aggregate): give "
                         "it another `as`",
                         as);
            break;
        }
        names[nn++] = as;
    }
}

/* sort: keys a list of 1 to 16 maps {field: NAME, descending: BOOL}. */
static void sort_check(const sb_node *args, const char *path, sb_diags *d)
{
    const sb_node *keys = sb_node_get(args, "keys");
    char buf[512], ib[512], fb[512];
    if (keys == NULL)
        return; /* the argspec says it is required */
    sb_spec_path_field(buf, sizeof buf, path, "keys");
    if (keys->kind != SB_NODE_SEQ || keys->n < 1 || keys->n > 16) {
        sb_diags_add(d, buf, keys->line, keys->col,
                     "must be a list of 1 to 16 keys {field: NAME, descending: false}");
        return;
    }
    for (size_t i = 0; i < keys->n; i++) {
        const sb_node *k = keys->items[i];
        sb_spec_path_index(ib, sizeof ib, buf, i);
        if (k->kind != SB_NODE_MAP) {
            sb_diags_add(d, ib, k->line, k->col, "must be a map {field: NAME, descending: false}");
            continue;
        }
        for (size_t j = 0; j < k->n; j++)
            if (strcmp(k->keys[j]->text, "field") && strcmp(k->keys[j]->text, "descending"))
                sb_diags_add(d, sb_spec_path_field(fb, sizeof fb, ib, k->keys[j]->text),
                             k->keys[j]->line, k->keys[j]->col,
                             "unknown field \"%s\" of a sort key (field, descending)",
                             k->keys[j]->text);
        const sb_node *f = sb_node_get(k, "field"), *ds = sb_node_get(k, "descending");
        if (!is_str(f) || f->text[0] == '\0')
            sb_diags_add(d, sb_spec_path_field(fb, sizeof fb, ib, "field"), f ? f->line : k->line,
                         f ? f->col : k->col, "must be a non-empty field name");
        if (ds != NULL && ds->kind != SB_NODE_BOOL)
            sb_diags_add(d, sb_spec_path_field(fb, sizeof fb, ib, "descending"), ds->line, ds->col,
                         "must be true or false");
    }
}

void sb_spec_allop_args_check(const char *op, const sb_node *args, const sb_node *stage,
                              const char *path, sb_diags *d)
{
    char ap[512], buf[512];
    sb_spec_path_field(ap, sizeof ap, path, "args");
    /* "null" as a string too: client-side `kubectl apply` deletes a field whose value is null
     * (its merge rule), so on the operator a null never reaches us when applied that way */
    const sb_node *mk = sb_node_get(args, "missingKey");
    if (mk != NULL && mk->kind != SB_NODE_NULL &&
        !(mk->kind == SB_NODE_STRING && strcmp(mk->text, "null") == 0))
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ap, "missingKey"), mk->line, mk->col,
                     "takes only null, or the string \"null\" (a record without a key field then "
                     "has the key null); leave it out to make such a record a data error");
    if (strcmp(op, "groupby") == 0)
        groupby_check(args, ap, d);
    if (strcmp(op, "sort") == 0)
        sort_check(args, ap, d);
    if (strcmp(op, "repartition") != 0)
        return;
    const sb_node *b = sb_node_get(args, "bytes"), *p = sb_node_get(args, "partitions");
    if ((b == NULL) == (p == NULL))
        sb_diags_add(d, ap, args ? args->line : stage->line, args ? args->col : stage->col,
                     "op \"repartition\" needs exactly one of \"partitions\" or \"bytes\"");
    int64_t v = 0;
    sb_err err;
    if (b != NULL && !(b->kind == SB_NODE_INT && b->v.i > 0) &&
        !(is_str(b) && sb_quantity_value(b->text, &v, &err) == 0 && v > 0))
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ap, "bytes"), b->line, b->col,
                     "must be a size above 0 (bytes, or a quantity such as 64Mi)");
}

/* limit takes the source's first rows: its map half must run in the source's tasks, so no
 * exchange before it (their output has no source order). Into a stream:// sink it runs: what
 * a stream's epochs cannot run (several epochs reading the source again, --seed's shuffled read
 * order) is `run --serve`'s to refuse, since --epochs and --seed are its options. */
static void limit_check(const sb_pipeline_spec *sp, size_t i, const char *path, const sb_node *on,
                        const sb_node *node, sb_diags *d)
{
    int line = on ? on->line : node->line, col = on ? on->col : node->col;
    for (size_t k = 0; k < i; k++)
        if (sb_spec_allop(sp->stages[k].op)) {
            sb_diags_add(d, path, line, col,
                         "limit takes the first rows in source order, but stage %zu (%s) "
                         "exchanges rows before it: put limit before it",
                         k, sp->stages[k].op);
            break;
        }
}

/* 1 when stage j runs in the same task as stage i (streaming mode fuses stages of one pool). */
static int fused(const sb_pipeline_spec *sp, size_t i, size_t j)
{
    return sp->execution.mode == SB_MODE_STREAMING &&
           strcmp(sb_stage_pool(&sp->stages[i]), sb_stage_pool(&sp->stages[j])) == 0;
}

/* sort at stage i: the stages after it (up to another all-to-all stage) must run in its reduce
 * tasks, or their tasks would take its output in no order; stable: true needs the stages
 * before it in its map tasks, which then are the source's splits in order. */
static void sort_pipeline_check(const sb_pipeline_spec *sp, const sb_node *stages, size_t i,
                                const char *path, sb_diags *d)
{
    char buf[512];
    for (size_t j = i + 1; j < sp->nstages && !sb_spec_allop(sp->stages[j].op); j++) {
        if (fused(sp, i, j))
            continue;
        const sb_node *n = j < stages->n ? stages->items[j] : stages;
        snprintf(buf, sizeof buf, "%s.stages[%zu]", path, j);
        sb_diags_add(d, buf, n->line, n->col,
                     "stage \"%s\" after a sort runs in tasks of its own (%s), which would not "
                     "keep the sort's order: run it on cpu in streaming mode, or before the sort",
                     sp->stages[j].name,
                     sp->execution.mode == SB_MODE_STREAMING ? "it runs on another placement"
                                                             : "execution.mode is not streaming");
        break;
    }
    const sb_node *args = sb_node_get(stages->items[i], "args");
    const sb_node *st = sb_node_get(args, "stable");
    if (st == NULL || st->kind != SB_NODE_BOOL || !st->v.b)
        return;
    for (size_t j = 0; j <= i; j++) {
        if ((j < i && sb_spec_allop(sp->stages[j].op)) || !fused(sp, i, j)) {
            snprintf(buf, sizeof buf, "%s.stages[%zu].args.stable", path, i);
            sb_diags_add(d, buf, st->line, st->col,
                         "stable: true keeps source order only when the sort's map tasks read "
                         "the source: streaming mode, every stage before it on cpu and no "
                         "all-to-all stage before it");
            return;
        }
    }
}

void sb_spec_allop_pipeline_check(const sb_pipeline_spec *sp, const sb_node *node, const char *path,
                                  sb_diags *d)
{
    const sb_node *stages = sb_node_get(node, "stages");
    char buf[512];
    for (size_t i = 0; i < sp->nstages; i++) {
        const char *op = sp->stages[i].op;
        if (op == NULL) /* a stage without an op: reported where stages are decoded */
            continue;
        int join = strcmp(op, "join") == 0; /* not exchanged, checked here too (join.h) */
        if ((!sb_spec_allop(op) && !join) || stages == NULL || i >= stages->n)
            continue;
        const sb_node *on = sb_node_get(stages->items[i], "op");
        snprintf(buf, sizeof buf, "%s.stages[%zu].op", path, i);
        if (join) {
            sb_spec_join_stage_check(sp, i, stages->items[i], buf, on ? on->line : node->line,
                                     on ? on->col : node->col, d);
            continue;
        }
        if (strcmp(op, "limit") == 0)
            limit_check(sp, i, buf, on, node, d);
        if (sp->execution.preserve_order)
            sb_diags_add(d, buf, on ? on->line : node->line, on ? on->col : node->col,
                         "%s exchanges rows between tasks, so execution.preserveOrder cannot "
                         "hold: drop one of them",
                         op);
        if (strcmp(op, "sort") == 0)
            sort_pipeline_check(sp, stages, i, path, d);
    }
}
