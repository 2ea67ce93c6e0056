/* record.c — operators on jsonl records: filter and project.
 *
 * filter {field, op, value}: keeps the records whose top-level `field` compares true with
 * `value` under op (eq ne lt le gt ge). A number value compares numerically with numbers
 * (exactly when both are integers that fit int64, else as doubles); a string value compares
 * byte-wise (i.e. by code point) with strings after decoding escapes; a boolean value compares
 * with booleans by eq/ne only. A record without the field, or whose field has another type
 * (null included), or that is not a JSON object, does not satisfy any comparison: eq lt le gt
 * ge drop it and ne keeps it (ne is exactly the complement of eq). Kept records pass through
 * unchanged (every column of the input is kept).
 *
 * project {fields}: rewrites each record as an object with only the listed top-level fields,
 * in the listed order (the first occurrence of a duplicated key; fields the record lacks are
 * omitted, a repeated name in `fields` counts once). Values are copied verbatim. The output has
 * one column, "record", of the input's records column type. A record that is not an object is
 * an error. On typed input (columns without a "record" column: the image source, tensor.mlp's
 * outputs, exec's Arrow framing) it keeps the listed columns in the listed order; a listed
 * column the input lacks is a data error naming the input's columns.
 *
 * Invalid JSON is an error naming the record's row index in the input partition and the
 * beginning of the record. Records are validated once per task: after a filter in the same task
 * (which passed on only records it scanned), filter and project find the members without
 * checking the record again (sb_op_json_find).
 *
 * A filter followed by project in the same task runs as one op (absorb_next): its one scan of
 * each record finds the compared field and the projected fields, and a kept record is written
 * out projected, not copied into an intermediate partition first. The output and its errors are
 * those of the two ops, except that an error of project names the record's row in the filter's
 * input.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/prune.h"
#include "partition/utf8.h"
#include "worker/ops/impls.h"
#include "partition/rowjson.h"
#include "worker/ops/json.h"

/* Checks a record and scans it; -1 + err naming the record on invalid UTF-8 or JSON. `valid`:
 * the previous op of this task validated it (input_valid_json): only its members are found. */
static int scan_record(const char *op, const sb_column *c, size_t row, const char *p, size_t n,
                       const sb_op_json_key *keys, size_t nkeys, sb_op_json_span *found,
                       sb_op_json_type *top, bool valid, sb_err *err)
{
    char msg[160], ex[64];
    size_t bad;
    if (valid) {
        sb_op_json_type t = sb_op_json_find(p, n, keys, nkeys, found);
        if (top != NULL)
            *top = t;
        return 0;
    }
    if (c->type == SB_TYPE_BINARY && !sb_utf8_valid(p, n, &bad)) {
        return sb_err_data(err, "%s: record %zu is not valid UTF-8 (byte %zu)", op, row, bad);
    }
    if (sb_op_json_scan(p, n, keys, nkeys, found, top, msg, sizeof msg) != 0) {
        return sb_err_data(err, "%s: record %zu is not valid JSON (%s): %s", op, row, msg,
                           sb_op_excerpt(p, n, ex, sizeof ex));
    }
    return 0;
}

/* project's state (its functions below), which a filter that absorbed it holds and calls */
typedef struct project_st {
    size_t n;
    sb_op_json_key *keys; /* decoded names */
    char **enc;           /* "\"name\":" */
    size_t *enc_len;
    sb_op_json_span *found;
    size_t enc_total;
    char *buf; /* the output record */
    size_t cap;
    bool input_valid; /* the previous op validated every record (input_valid_json) */
} project_st;
static void project_free(void *state);
static bool typed_input(const sb_batch *in);
static int project_record(project_st *st, size_t r, const char *p, size_t len, sb_op_json_type top,
                          const sb_op_json_span *found, sb_op_out *out, sb_err *err);
static int project_columns(const project_st *st, const sb_batch *in, size_t first, size_t n,
                           sb_op_out *out, sb_err *err);

/* ---- filter ---------------------------------------------------------------------------- */

typedef enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE } cmp_op;
static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge", NULL};

typedef struct {
    sb_op_json_key key;
    char *field;
    cmp_op op;
    sb_op_json_type vtype; /* NUMBER, STRING or BOOL */
    double d;
    int64_t i;
    bool is_int;
    bool b;
    char *str;
    size_t str_len;
    char *scratch; /* decoded string fields */
    size_t scratch_cap;
    bool input_valid; /* the previous op validated every record (input_valid_json) */
    /* the project that follows in the same task, absorbed (absorb_next), or NULL; then the
     * scan looks for keys[0] = key and keys[1..] = project's, into found[] */
    project_st *proj;
    sb_op_json_key *keys;
    sb_op_json_span *found;
} filter_st;

static void filter_free(void *state)
{
    filter_st *st = state;
    if (st == NULL)
        return;
    free(st->field);
    free(st->str);
    free(st->scratch);
    project_free(st->proj);
    free(st->keys);
    free(st->found);
    free(st);
}

static int filter_init(const char *args_json, void **state, sb_err *err)
{
    *state = NULL;
    cJSON *root = args_json != NULL ? cJSON_Parse(args_json) : NULL;
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sb_err_set(err, "op filter: args must be an object with field, op and value");
    }
    filter_st *st = calloc(1, sizeof *st);
    int rc = 0;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "field");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "op");
    if (st == NULL) {
        rc = sb_err_set(err, "op filter: out of memory");
        goto out;
    }
    if (!cJSON_IsString(f) || f->valuestring[0] == '\0') {
        rc = sb_err_set(err, "op filter: args.field must be a non-empty string");
        goto out;
    }
    if ((st->field = strdup(f->valuestring)) == NULL) {
        rc = sb_err_set(err, "op filter: out of memory");
        goto out;
    }
    st->key = (sb_op_json_key){st->field, strlen(st->field)};
    size_t k = 0;
    while (cJSON_IsString(o) && cmp_names[k] != NULL && strcmp(cmp_names[k], o->valuestring))
        k++;
    if (!cJSON_IsString(o) || cmp_names[k] == NULL) {
        rc = sb_err_set(err, "op filter: args.op must be one of eq, ne, lt, le, gt, ge");
        goto out;
    }
    st->op = (cmp_op)k;
    /* The value's exact text (cJSON keeps numbers only as doubles). */
    sb_op_json_key vk = {"value", 5};
    sb_op_json_span v;
    if (sb_op_json_scan(args_json, strlen(args_json), &vk, 1, &v, NULL, NULL, 0) != 0 ||
        (v.type != SB_OP_JSON_NUMBER && v.type != SB_OP_JSON_STRING && v.type != SB_OP_JSON_BOOL)) {
        rc = sb_err_set(err, "op filter: args.value must be a string, number or boolean");
        goto out;
    }
    st->vtype = v.type;
    if (v.type == SB_OP_JSON_NUMBER) {
        sb_op_json_number(v.p, v.n, &st->d, &st->i, &st->is_int);
    } else if (v.type == SB_OP_JSON_BOOL) {
        st->b = v.p[0] == 't';
        if (st->op != CMP_EQ && st->op != CMP_NE) {
            rc = sb_err_set(err,
                            "op filter: op %s does not apply to a boolean value (use eq or "
                            "ne)",
                            cmp_names[st->op]);
            goto out;
        }
    } else {
        if ((st->str = malloc(v.n)) == NULL) {
            rc = sb_err_set(err, "op filter: out of memory");
            goto out;
        }
        st->str_len = sb_op_json_unescape(v.p, v.n, st->str, v.n);
    }
out:
    cJSON_Delete(root);
    if (rc != 0) {
        filter_free(st);
        return rc;
    }
    *state = st;
    return 0;
}

static bool apply(cmp_op op, int c)
{
    switch (op) {
    case CMP_EQ:
        return c == 0;
    case CMP_NE:
        return c != 0;
    case CMP_LT:
        return c < 0;
    case CMP_LE:
        return c <= 0;
    case CMP_GT:
        return c > 0;
    case CMP_GE:
        return c >= 0;
    }
    return false;
}

/* Does the field's value pass? -1 only when out of memory. */
static int filter_match(filter_st *st, const sb_op_json_span *v, bool *keep, sb_err *err)
{
    *keep = false;
    if (v->type != st->vtype) {
        *keep = st->op == CMP_NE; /* not comparable: does not satisfy eq, so ne keeps it */
        return 0;
    }
    int c;
    if (v->type == SB_OP_JSON_NUMBER) {
        double d;
        int64_t i;
        bool is_int;
        sb_op_json_number(v->p, v->n, &d, &i, &is_int);
        if (is_int && st->is_int)
            c = i < st->i ? -1 : i > st->i;
        else
            c = d < st->d ? -1 : d > st->d;
    } else if (v->type == SB_OP_JSON_BOOL) {
        c = (v->p[0] == 't') != st->b;
    } else {
        const char *s = v->p + 1;
        size_t n = v->n - 2;
        if (memchr(s, '\\', n) != NULL) {
            if (v->n > st->scratch_cap) {
                char *nb = realloc(st->scratch, v->n);
                if (nb == NULL)
                    return sb_err_set(err, "filter: out of memory for a %zu-byte string", v->n);
                st->scratch = nb;
                st->scratch_cap = v->n;
            }
            n = sb_op_json_unescape(v->p, v->n, st->scratch, st->scratch_cap);
            s = st->scratch;
        }
        size_t m = n < st->str_len ? n : st->str_len;
        c = m > 0 ? memcmp(s, st->str, m) : 0;
        if (c == 0)
            c = n < st->str_len ? -1 : n > st->str_len;
    }
    *keep = apply(st->op, c);
    return 0;
}

/* Kept runs waiting to be appended (appending them in batches keeps the per-call cost of the
 * output off every kept record when the kept rows are scattered). */
#define FILTER_RUNS 256

/* Appends kept runs: unchanged, or (an absorbed project over typed input) their listed
 * columns. */
static int filter_put_runs(const filter_st *st, const sb_batch *in, const size_t *rs,
                           const size_t *rn, size_t nruns, sb_op_out *out, sb_err *err)
{
    if (st->proj == NULL)
        return sb_op_out_append_runs(out, in, rs, rn, nruns, err);
    for (size_t i = 0; i < nruns; i++)
        if (project_columns(st->proj, in, rs[i], rn[i], out, err) != 0)
            return -1;
    return 0;
}

/* The kept rows of a filter call, gathered as runs: rows [run, r) are kept and not yet in
 * rs/rn. */
typedef struct {
    size_t rs[FILTER_RUNS], rn[FILTER_RUNS], n, run;
} kept_runs;

/* Row r is dropped: the run before it is complete. */
static int runs_drop(const filter_st *st, kept_runs *k, const sb_batch *in, size_t r,
                     sb_op_out *out, sb_err *err)
{
    if (r > k->run) {
        k->rs[k->n] = k->run;
        k->rn[k->n++] = r - k->run;
        if (k->n == FILTER_RUNS) {
            if (filter_put_runs(st, in, k->rs, k->rn, k->n, out, err) != 0)
                return -1;
            k->n = 0;
        }
    }
    k->run = r + 1;
    return 0;
}

static int runs_end(const filter_st *st, kept_runs *k, const sb_batch *in, size_t end,
                    sb_op_out *out, sb_err *err)
{
    if (end > k->run) {
        k->rs[k->n] = k->run;
        k->rn[k->n++] = end - k->run;
    }
    return filter_put_runs(st, in, k->rs, k->rn, k->n, out, err);
}

/* Compares row r of a typed column with the filter's value: 0 with *keep set (a value of
 * another kind, or NaN, is not comparable: only ne keeps it, as with records). */
static void filter_typed_match(const filter_st *st, const sb_column *c, size_t r, bool *keep)
{
    int cmp = 0, comparable = 1;
    switch (c->type) {
    case SB_TYPE_INT8:
    case SB_TYPE_INT16:
    case SB_TYPE_INT32:
    case SB_TYPE_INT64:
    case SB_TYPE_UINT8:
    case SB_TYPE_UINT16:
    case SB_TYPE_UINT32:
    case SB_TYPE_UINT64: {
        comparable = st->vtype == SB_OP_JSON_NUMBER;
        int64_t v = sb_column_int(c, r);
        if (c->type == SB_TYPE_UINT64 && v < 0)
            cmp = 1; /* above INT64_MAX: greater than any value a filter holds */
        else if (st->is_int)
            cmp = v < st->i ? -1 : v > st->i;
        else
            cmp = (double)v < st->d ? -1 : (double)v > st->d;
        break;
    }
    case SB_TYPE_FLOAT32:
    case SB_TYPE_FLOAT64: {
        double v = sb_column_double(c, r);
        comparable = st->vtype == SB_OP_JSON_NUMBER && !isnan(v);
        cmp = v < st->d ? -1 : v > st->d;
        break;
    }
    case SB_TYPE_BOOL:
        comparable = st->vtype == SB_OP_JSON_BOOL;
        cmp = sb_column_bool(c, r) != st->b;
        break;
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY: {
        comparable = st->vtype == SB_OP_JSON_STRING;
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        size_t m = len < st->str_len ? len : st->str_len;
        cmp = m > 0 ? memcmp(p, st->str, m) : 0;
        if (cmp == 0)
            cmp = len < st->str_len ? -1 : len > st->str_len;
        break;
    }
    default: /* a tensor */
        comparable = 0;
    }
    *keep = comparable ? apply(st->op, cmp) : st->op == CMP_NE;
}

/* filter over typed columns (a parquet source, exec with framing arrow, a plugin) when the
 * field names one of them: compared by its type; a null does not satisfy eq (ne keeps it).
 * A field that is not a column is looked up in the JSON of the input's record column, as
 * before typed columns could be compared (sb_op_record_column says when there is none). */
static int filter_typed(filter_st *st, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                        sb_err *err)
{
    int ci = sb_batch_find(in, st->field);
    if (st->proj == NULL && sb_op_out_set_schema_like(out, in, err) != 0)
        return -1;
    const sb_column *c = sb_batch_column(in, (size_t)ci);
    kept_runs k = {.run = first};
    for (size_t r = first; r < first + n; r++) {
        bool keep = st->op == CMP_NE;
        if (sb_column_valid(c, r))
            filter_typed_match(st, c, r, &keep);
        if (!keep && runs_drop(st, &k, in, r, out, err) != 0)
            return -1;
    }
    return runs_end(st, &k, in, first + n, out, err);
}

static int filter_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                          sb_err *err)
{
    filter_st *st = state;
    if (typed_input(in) && sb_batch_find(in, st->field) >= 0)
        return filter_typed(st, in, first, n, out, err);
    int ci = sb_op_record_column(in, "filter", err);
    if (ci < 0)
        return -1;
    const sb_column *c = sb_batch_column(in, (size_t)ci);
    /* with an absorbed project over records: each kept record is written projected */
    bool projected = st->proj != NULL && !typed_input(in);
    const sb_op_json_key *keys = &st->key;
    sb_op_json_span one, *found = &one;
    size_t nkeys = 1;
    if (projected) {
        sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = c->type};
        if (sb_op_out_set_schema(out, &f, 1, err) != 0)
            return sb_err_wrap(err, "project");
        keys = st->keys;
        found = st->found;
        nkeys = 1 + st->proj->n;
    } else if (st->proj == NULL && sb_op_out_set_schema_like(out, in, err) != 0) {
        return -1;
    }
    kept_runs k = {.run = first};
    size_t end = first + n;
    for (size_t r = first; r < end; r++) {
        bool keep = st->op == CMP_NE; /* a null row does not satisfy eq */
        bool valid = sb_column_valid(c, r);
        size_t len = 0;
        const char *p = NULL;
        sb_op_json_type top = SB_OP_JSON_NONE;
        if (valid) {
            p = sb_column_binary(c, r, &len);
            if (scan_record("filter", c, r, p, len, keys, nkeys, found, &top, st->input_valid,
                            err) != 0)
                return -1;
            if (filter_match(st, &found[0], &keep, err) != 0)
                return -1;
        }
        if (projected) {
            if (!keep)
                continue;
            if (!valid)
                return sb_err_data(err, "project: record %zu is null", r);
            if (project_record(st->proj, r, p, len, top, found + 1, out, err) != 0)
                return -1;
            continue;
        }
        if (!keep && runs_drop(st, &k, in, r, out, err) != 0)
            return -1;
    }
    if (projected)
        return 0;
    return runs_end(st, &k, in, end, out, err);
}

/* A project right after this filter: one scan finds the compared field and the projected ones
 * (keys[0] and keys[1..]). */
static bool filter_absorb_next(void *state, const sb_op_impl *next, void *next_state)
{
    filter_st *st = state;
    if (next != &sb_op_project_impl || st->proj != NULL)
        return false;
    const project_st *pj = next_state;
    size_t nk = 1 + pj->n;
    sb_op_json_key *keys = malloc(nk * sizeof *keys);
    sb_op_json_span *found = calloc(nk, sizeof *found);
    if (keys == NULL || found == NULL) { /* not fused: the two ops run as they are */
        free(keys);
        free(found);
        return false;
    }
    keys[0] = st->key;
    memcpy(keys + 1, pj->keys, pj->n * sizeof *keys);
    st->keys = keys;
    st->found = found;
    st->proj = next_state;
    return true;
}

static int no_finish(void *state, sb_op_out *out, sb_err *err)
{
    (void)state;
    (void)out;
    (void)err;
    return 0;
}

static void filter_input_valid(void *state)
{
    ((filter_st *)state)->input_valid = true;
}

/* input_valid is the last task's (the runtime sets it again per task). A filter that absorbed a
 * project is not reused (the runtime frees such a chain; refused here too). */
static int filter_reset(void *state, sb_err *err)
{
    filter_st *st = state;
    if (st->proj != NULL)
        return sb_err_set(err, "filter: a filter that absorbed a project is not reused");
    st->input_valid = false;
    return 0;
}

/* The comparison for a Parquet source to skip row groups by (prune.h has the same semantics
 * as filter_typed_match: only its bounds are compared there). */
static bool filter_pushdown(void *state, sb_pq_pred *p)
{
    const filter_st *st = state;
    static const sb_pq_cmp ops[] = {[CMP_EQ] = SB_PQ_EQ, [CMP_NE] = SB_PQ_NE, [CMP_LT] = SB_PQ_LT,
                                    [CMP_LE] = SB_PQ_LE, [CMP_GT] = SB_PQ_GT, [CMP_GE] = SB_PQ_GE};
    *p = (sb_pq_pred){.column = st->field,
                      .op = ops[st->op],
                      .kind = st->vtype == SB_OP_JSON_NUMBER   ? SB_PQ_VNUMBER
                              : st->vtype == SB_OP_JSON_STRING ? SB_PQ_VSTRING
                                                               : SB_PQ_VBOOL,
                      .i = st->i,
                      .is_int = st->is_int,
                      .d = st->d,
                      .str = st->str,
                      .str_len = st->str_len,
                      .b = st->b};
    return true;
}

const sb_op_impl sb_op_filter_impl = {
    .name = "filter",
    .init = filter_init,
    .process = filter_process,
    .finish = no_finish,
    .free = filter_free,
    .reset = filter_reset,
    .emits_valid_json = true, /* it passes on only records it scanned */
    .input_valid_json = filter_input_valid,
    .absorb_next = filter_absorb_next,
    .pushdown = filter_pushdown,
};

/* ---- project --------------------------------------------------------------------------- */

static void project_free(void *state)
{
    project_st *st = state;
    if (st == NULL)
        return;
    for (size_t i = 0; i < st->n; i++) {
        free((char *)st->keys[i].name);
        free(st->enc[i]);
    }
    free(st->keys);
    free(st->enc);
    free(st->enc_len);
    free(st->found);
    free(st->buf);
    free(st);
}

static int project_init(const char *args_json, void **state, sb_err *err)
{
    *state = NULL;
    cJSON *root = args_json != NULL ? cJSON_Parse(args_json) : NULL;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "fields");
    int rc = 0;
    project_st *st = NULL;
    int nf = cJSON_GetArraySize(f);
    if (!cJSON_IsObject(root) || !cJSON_IsArray(f) || nf == 0) {
        rc = sb_err_set(err, "op project: args.fields must be a non-empty list of strings");
        goto out;
    }
    st = calloc(1, sizeof *st);
    if (st == NULL || (st->keys = calloc((size_t)nf, sizeof *st->keys)) == NULL ||
        (st->enc = calloc((size_t)nf, sizeof *st->enc)) == NULL ||
        (st->enc_len = calloc((size_t)nf, sizeof *st->enc_len)) == NULL ||
        (st->found = calloc((size_t)nf, sizeof *st->found)) == NULL) {
        rc = sb_err_set(err, "op project: out of memory");
        goto out;
    }
    const cJSON *it;
    size_t idx = 0;
    cJSON_ArrayForEach(it, f)
    {
        idx++;
        if (!cJSON_IsString(it) || it->valuestring[0] == '\0') {
            rc =
                sb_err_set(err, "op project: args.fields[%zu] must be a non-empty string", idx - 1);
            goto out;
        }
        const char *name = it->valuestring;
        size_t len = strlen(name);
        bool dup = false;
        for (size_t k = 0; k < st->n && !dup; k++)
            dup = st->keys[k].len == len && memcmp(st->keys[k].name, name, len) == 0;
        if (dup)
            continue;
        size_t qn = sb_json_quote(name, len, NULL, 0);
        char *key = strdup(name);
        char *enc = malloc(qn + 1);
        if (key == NULL || enc == NULL) {
            free(key);
            free(enc);
            rc = sb_err_set(err, "op project: out of memory");
            goto out;
        }
        sb_json_quote(name, len, enc, qn);
        enc[qn] = ':';
        st->keys[st->n] = (sb_op_json_key){key, len};
        st->enc[st->n] = enc;
        st->enc_len[st->n] = qn + 1;
        st->enc_total += qn + 2; /* with a comma */
        st->n++;
    }
out:
    cJSON_Delete(root);
    if (rc != 0) {
        project_free(st);
        return rc;
    }
    *state = st;
    return 0;
}

/* A listed column the input lacks: a data error naming the input's columns (names, listed
 * with names_add). */
static int no_column(const char *want, const char *names, sb_err *err)
{
    return sb_err_data(err, "project: the input has no column \"%.100s\" (its columns: %s)", want,
                       names);
}

static void names_add(char *names, size_t cap, size_t *o, const char *name)
{
    if (*o < cap - 1)
        *o += (size_t)snprintf(names + *o, cap - *o, "%s%s", *o ? ", " : "", name);
}

/* Typed input (columns, not jsonl records): the listed columns in the listed order. */
static int project_columns(const project_st *st, const sb_batch *in, size_t first, size_t n,
                           sb_op_out *out, sb_err *err)
{
    sb_field f[64];
    sb_column cols[64];
    if (st->n > 64)
        return sb_err_set(err, "project: more than 64 columns listed");
    for (size_t k = 0; k < st->n; k++) {
        int ci = sb_batch_find(in, st->keys[k].name);
        if (ci < 0) {
            char names[256] = "";
            size_t o = 0;
            for (size_t i = 0; i < sb_batch_ncols(in); i++)
                names_add(names, sizeof names, &o, sb_batch_column(in, i)->name);
            return no_column(st->keys[k].name, names, err);
        }
        cols[k] = *sb_batch_column(in, (size_t)ci);
        f[k] = sb_field_of(&cols[k]);
    }
    return sb_op_out_append_columns_of(out, in, f, cols, st->n, first, n, err);
}

int sb_op_project_columns_at(const void *state, const sb_column *cols, const size_t *firsts,
                             size_t ncols, size_t n, sb_op_out *out, sb_err *err)
{
    const project_st *st = state;
    sb_field f[64];
    sb_column sel[64];
    size_t sfirst[64];
    if (st->n > 64)
        return sb_err_set(err, "project: more than 64 columns listed");
    for (size_t k = 0; k < st->n; k++) {
        size_t ci = 0;
        while (ci < ncols && (cols[ci].name_len != st->keys[k].len ||
                              memcmp(cols[ci].name, st->keys[k].name, st->keys[k].len) != 0))
            ci++;
        if (ci == ncols) {
            char names[256] = "";
            size_t o = 0;
            for (size_t i = 0; i < ncols; i++)
                names_add(names, sizeof names, &o, cols[i].name);
            return no_column(st->keys[k].name, names, err);
        }
        sel[k] = cols[ci];
        sfirst[k] = firsts[ci];
        f[k] = sb_field_of(&sel[k]);
    }
    return sb_op_out_append_columns_at(out, f, sel, sfirst, st->n, n, 0, err);
}

int sb_op_project_record(void *state, size_t row, const char *p, size_t len, sb_op_out *out,
                         sb_err *err)
{
    project_st *st = state;
    const sb_column c = {.type = SB_TYPE_UTF8}; /* what the op before emits: records as UTF-8 */
    sb_op_json_type top;
    if (scan_record("project", &c, row, p, len, st->keys, st->n, st->found, &top, false, err) != 0)
        return -1;
    return project_record(st, row, p, len, top, st->found, out, err);
}

/* Records (jsonl) or typed columns: typed when there is no "record" column and the input is not
 * a single binary/utf8 column (which stands for the records, as everywhere). */
static bool typed_input(const sb_batch *in)
{
    if (sb_batch_find(in, SB_OP_RECORD_COLUMN) >= 0)
        return false;
    size_t nc = sb_batch_ncols(in);
    if (nc != 1)
        return nc > 1;
    sb_type t = sb_batch_column(in, 0)->type;
    return t != SB_TYPE_BINARY && t != SB_TYPE_UTF8;
}

/* Writes record r (p[0..len), of type `top`, its listed members at found[]) projected. */
static int project_record(project_st *st, size_t r, const char *p, size_t len, sb_op_json_type top,
                          const sb_op_json_span *found, sb_op_out *out, sb_err *err)
{
    if (top != SB_OP_JSON_OBJECT) {
        char ex[64];
        return sb_err_data(err, "project: record %zu is a JSON %s, not an object: %s", r,
                           sb_op_json_type_name(top), sb_op_excerpt(p, len, ex, sizeof ex));
    }
    size_t need = 2 + st->enc_total + len;
    if (need > st->cap) {
        char *nb = realloc(st->buf, need);
        if (nb == NULL)
            return sb_err_set(err, "project: out of memory for a %zu-byte record", need);
        st->buf = nb;
        st->cap = need;
    }
    size_t o = 0;
    st->buf[o++] = '{';
    for (size_t k = 0; k < st->n; k++) {
        if (found[k].type == SB_OP_JSON_NONE)
            continue;
        if (o > 1)
            st->buf[o++] = ',';
        memcpy(st->buf + o, st->enc[k], st->enc_len[k]);
        o += st->enc_len[k];
        memcpy(st->buf + o, found[k].p, found[k].n);
        o += found[k].n;
    }
    st->buf[o++] = '}';
    if (sb_op_out_append_binary(out, st->buf, o, err) != 0)
        return sb_err_wrap(err, "project: record %zu", r);
    return 0;
}

static int project_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                           sb_err *err)
{
    project_st *st = state;
    if (typed_input(in))
        return project_columns(st, in, first, n, out, err);
    int ci = sb_op_record_column(in, "project", err);
    if (ci < 0)
        return -1;
    const sb_column *c = sb_batch_column(in, (size_t)ci);
    sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = c->type};
    if (sb_op_out_set_schema(out, &f, 1, err) != 0)
        return sb_err_wrap(err, "project");
    for (size_t r = first; r < first + n; r++) {
        if (!sb_column_valid(c, r)) {
            return sb_err_data(err, "project: record %zu is null", r);
        }
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        sb_op_json_type top;
        if (scan_record("project", c, r, p, len, st->keys, st->n, st->found, &top, st->input_valid,
                        err) != 0 ||
            project_record(st, r, p, len, top, st->found, out, err) != 0)
            return -1;
    }
    return 0;
}

static void project_input_valid(void *state)
{
    ((project_st *)state)->input_valid = true;
}

/* input_valid is the last task's (the runtime sets it again per task); the keys stay parsed. */
static int project_reset(void *state, sb_err *err)
{
    (void)err;
    ((project_st *)state)->input_valid = false;
    return 0;
}

const sb_op_impl sb_op_project_impl = {
    .name = "project",
    .init = project_init,
    .process = project_process,
    .finish = no_finish,
    .free = project_free,
    .reset = project_reset,
    .input_valid_json = project_input_valid,
};
