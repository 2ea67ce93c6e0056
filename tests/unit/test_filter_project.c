/* Unit tests of a filter that absorbed the project after it (sb_op_impl.absorb_next, the task
 * runtime's fusion of the two in one task): the same partitions' records as the two ops run
 * one after the other, on jsonl records (utf8 and binary, validated or not by an op before)
 * and on typed columns; the same errors, which name the record's row in the filter's input;
 * and what it refuses to absorb. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/partition.h"
#include "partition/rowjson.h"
#include "worker/ops/ops.h"

#include "testparts.h"

TestSuite(filter_project, .timeout = 60);

/* What an output received: each partition's schema ("#schema name:type ...") and its rows, one
 * line each: a "record" column's values as they are, typed rows as JSON (rowjson). */
typedef struct {
    char *all;
    size_t len;
    size_t rows;
} dump;

static void dump_add(dump *d, const char *s, size_t n)
{
    d->all = realloc(d->all, d->len + n + 2);
    memcpy(d->all + d->len, s, n);
    d->all[d->len + n] = '\n';
    d->len += n + 1;
    d->all[d->len] = '\0';
}

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    dump *d = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    char schema[256] = "#schema";
    for (size_t i = 0; i < sb_batch_ncols(b); i++) {
        const sb_column *c = sb_batch_column(b, i);
        snprintf(schema + strlen(schema), sizeof schema - strlen(schema), " %s:%d", c->name,
                 (int)c->type);
    }
    dump_add(d, schema, strlen(schema));
    /* records as they are; typed rows as JSON */
    bool records = sb_batch_ncols(b) == 1 && strcmp(sb_batch_column(b, 0)->name, "record") == 0;
    void *jb = NULL;
    size_t jl;
    sb_batch *j = b;
    if (!records) {
        cr_assert_eq(sb_batch_rows_json(b, &jb, &jl, &e), 0, "%s", e.msg);
        cr_assert_eq(sb_batch_open(jb, jl, &j, &e), 0, "%s", e.msg);
    }
    for (size_t r = 0; r < rows; r++) {
        size_t n;
        const char *p = sb_column_binary(sb_batch_column(j, 0), r, &n);
        dump_add(d, p, n);
    }
    d->rows += rows;
    if (!records) {
        sb_batch_close(j);
        sb_part_free(jb);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* A partition of one "record" column of type t; NULL entries are null rows. */
static void *records_part(sb_type t, const char *const *recs, size_t n, size_t *len)
{
    sb_field f = {.name = "record", .type = t, .nullable = true};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &e);
    cr_assert_not_null(b, "%s", e.msg);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(recs[i] ? sb_batch_builder_append_binary(b, 0, recs[i], strlen(recs[i]), &e)
                             : sb_batch_builder_append_null(b, 0, &e),
                     0, "%s", e.msg);
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    return blob;
}

typedef struct {
    int rc;
    bool data;
    char msg[512];
    dump out;
} result;

/* Runs filter (fargs) then project (pargs) over the partition blob: fused (filter absorbs
 * project) or as two ops, the filter's output partitions fed to project as the runtime feeds
 * a chain. `trusted`: an op before them validated the records (input_valid_json). The
 * partition is processed in calls of `batch` rows. */
typedef struct {
    const sb_op_impl *next;
    void *state;
    sb_op_out *out;
    sb_err *err;
} feed;

static int feed_next(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    feed *f = ud;
    sb_batch *b;
    cr_assert_eq(sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM, &b, f->err), 0, "%s",
                 f->err->msg);
    int rc = sb_op_run(f->next, f->state, b, 0, f->out, f->err);
    sb_batch_close(b);
    sb_part_free(blob);
    return rc;
}

static result run(const void *blob, size_t len, const char *fargs, const char *pargs, bool fused,
                  bool trusted, size_t batch)
{
    result res = {0};
    const sb_op_impl *flt = sb_op_find("filter"), *prj = sb_op_find("project");
    sb_err e = {0};
    void *fs, *ps;
    cr_assert_eq(flt->init(fargs, &fs, &e), 0, "%s", e.msg);
    cr_assert_eq(prj->init(pargs, &ps, &e), 0, "%s", e.msg);
    if (fused)
        cr_assert(flt->absorb_next(fs, prj, ps));
    if (trusted)
        flt->input_valid_json(fs);
    if (!fused && flt->emits_valid_json)
        prj->input_valid_json(ps); /* as the runtime does */
    sb_op_out *last = sb_op_out_new(1 << 20, collect, &res.out, &e);
    feed f = {prj, ps, last, &e};
    /* unfused: the filter hands on small partitions (as a chain's SOURCE_CHUNK does) */
    sb_op_out *first = fused ? last : sb_op_out_new(64, feed_next, &f, &e);
    cr_assert(last != NULL && first != NULL);
    if (!fused)
        sb_op_out_set_unsealed(first);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    res.rc = sb_op_run(flt, fs, b, batch, first, &e);
    if (res.rc == 0 && !fused)
        res.rc = sb_op_out_flush(first, &e);
    if (res.rc == 0)
        res.rc = sb_op_out_flush(last, &e);
    sb_batch_close(b);
    res.data = e.data;
    snprintf(res.msg, sizeof res.msg, "%s", res.rc ? e.msg : "");
    if (!fused)
        sb_op_out_free(first);
    sb_op_out_free(last);
    flt->free(fs); /* fused: frees project's state too */
    if (!fused)
        prj->free(ps);
    return res;
}

static const char *const g_recs[] = {
    "{\"id\":1,\"lang\":\"en\",\"score\":0.5,\"text\":\"a\"}",
    "{\"lang\":\"de\",\"id\":2,\"score\":1}",
    "{ \"score\" : [1, {\"x\":2}] , \"id\" : \"three\", \"lang\" : \"en\" }",
    "{\"id\":4,\"lang\":\"e\\u006e\",\"id\":44,\"score\":null}",
    "{\"lang\":\"en\"}",
    "{\"id\":6,\"lang\":\"fr\",\"s\\u0063ore\":6}",
    "{\"i\\u0064\":7,\"lang\":\"en\",\"score\":{\"nested\":{\"lang\":\"de\"}}}",
    "{}",
    "{\"id\":9,\"lang\":\"en\",\"score\":-1e3}",
    "{\"id\":10,\"lang\":\"\\\"en\\\"\",\"score\":\"x\"}",
};
#define NREC (sizeof g_recs / sizeof *g_recs)

/* Fused and unfused give the same partitions' records, for every compare op and field list,
 * both record column types, validated input or not, whole partitions and 3-row calls. */
Test(filter_project, fused_equals_the_two_ops_on_records)
{
    static const char *const fargs[] = {
        "{\"field\":\"lang\",\"op\":\"eq\",\"value\":\"en\"}",
        "{\"field\":\"lang\",\"op\":\"ne\",\"value\":\"en\"}",
        "{\"field\":\"id\",\"op\":\"ge\",\"value\":4}",
        "{\"field\":\"score\",\"op\":\"lt\",\"value\":1}",
    };
    static const char *const pargs[] = {
        "{\"fields\":[\"id\",\"score\"]}",
        "{\"fields\":[\"score\",\"lang\",\"id\",\"lang\"]}", /* the filter's field too, twice */
        "{\"fields\":[\"missing\"]}",
        "{\"fields\":[\"text\",\"id\"]}",
    };
    static const sb_type types[] = {SB_TYPE_UTF8, SB_TYPE_BINARY};
    size_t kept_somewhere = 0;
    for (size_t ti = 0; ti < 2; ti++) {
        size_t len;
        void *blob = records_part(types[ti], g_recs, NREC, &len);
        for (size_t fi = 0; fi < sizeof fargs / sizeof *fargs; fi++)
            for (size_t pi = 0; pi < sizeof pargs / sizeof *pargs; pi++)
                for (int mode = 0; mode < 4; mode++) {
                    bool trusted = mode & 1;
                    size_t batch = mode & 2 ? 3 : 0;
                    result a = run(blob, len, fargs[fi], pargs[pi], false, trusted, batch);
                    result b = run(blob, len, fargs[fi], pargs[pi], true, trusted, batch);
                    cr_assert_eq(a.rc, 0, "%s", a.msg);
                    cr_assert_eq(b.rc, 0, "%s", b.msg);
                    cr_assert_eq(b.out.rows, a.out.rows, "%s %s", fargs[fi], pargs[pi]);
                    cr_assert_str_eq(b.out.all ? b.out.all : "", a.out.all ? a.out.all : "",
                                     "type %zu, %s then %s, mode %d", ti, fargs[fi], pargs[pi],
                                     mode);
                    kept_somewhere += a.out.rows;
                    free(a.out.all);
                    free(b.out.all);
                }
        sb_part_free(blob);
    }
    cr_assert_gt(kept_somewhere, 100, "the cases keep records");
    /* one expected output spelled out: lang == "en" (decoded), then [id, score] */
    size_t len;
    void *blob = records_part(SB_TYPE_UTF8, g_recs, NREC, &len);
    result r = run(blob, len, fargs[0], pargs[0], true, false, 0);
    cr_assert_eq(r.rc, 0, "%s", r.msg);
    char want[512];
    snprintf(want, sizeof want,
             "#schema record:%d\n"
             "{\"id\":1,\"score\":0.5}\n"
             "{\"id\":\"three\",\"score\":[1, {\"x\":2}]}\n"
             "{\"id\":4,\"score\":null}\n"
             "{}\n"
             "{\"id\":7,\"score\":{\"nested\":{\"lang\":\"de\"}}}\n"
             "{\"id\":9,\"score\":-1e3}\n",
             (int)SB_TYPE_UTF8);
    cr_assert_str_eq(r.out.all, want);
    free(r.out.all);
    sb_part_free(blob);
}

/* Errors: the fused op fails where the two would, with the same kind of message (a data
 * error), naming the record's row in the filter's input. */
Test(filter_project, errors_name_the_row_of_the_filters_input)
{
    static const char *const ne1 = "{\"field\":\"a\",\"op\":\"ne\",\"value\":1}",
                             *const eq2 = "{\"field\":\"a\",\"op\":\"eq\",\"value\":2}";
    static const struct {
        sb_type type;
        const char *recs[4];
        size_t n;
        const char *fargs;
        /* in the two ops' message (project names its row in a partition the filter made), in
         * the fused op's (the row of the input); "=": the fused message equals the other */
        const char *unfused, *fused;
    } cases[] = {
        /* ne keeps the null row, which project refuses */
        {SB_TYPE_UTF8,
         {"{\"a\":1}", "{\"a\":2}", NULL},
         3,
         ne1,
         "project: record 0 is null",
         "project: record 2 is null"},
        /* ne keeps a record that is not an object */
        {SB_TYPE_UTF8,
         {"{\"a\":1}", "{\"a\":2}", "{\"a\":1}", "[1,2]"},
         4,
         ne1,
         "project: record 0 is a JSON array, not an object: [1,2]",
         "project: record 3 is a JSON array, not an object: [1,2]"},
        /* invalid JSON and UTF-8: the filter's own message, the same row, both ways */
        {SB_TYPE_UTF8,
         {"{\"a\":1}", "{\"a\":2}", "{\"a\":1,}"},
         3,
         eq2,
         "filter: record 2 is not valid JSON (expected a member name",
         "="},
        {SB_TYPE_BINARY,
         {"{\"a\":2}", "{\"a\":\"\xc3\"}"},
         2,
         eq2,
         "filter: record 1 is not valid UTF-8",
         "="},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t len;
        void *blob = records_part(cases[i].type, cases[i].recs, cases[i].n, &len);
        const char *pa = "{\"fields\":[\"a\"]}";
        result a = run(blob, len, cases[i].fargs, pa, false, false, 0),
               b = run(blob, len, cases[i].fargs, pa, true, false, 0);
        cr_assert(a.rc == -1 && b.rc == -1, "case %zu", i);
        cr_assert(a.data && b.data, "case %zu: a data error", i);
        cr_assert(strstr(a.msg, cases[i].unfused) != NULL, "case %zu: %s", i, a.msg);
        if (strcmp(cases[i].fused, "=") == 0)
            cr_assert_str_eq(b.msg, a.msg, "case %zu", i);
        else
            cr_assert(strstr(b.msg, cases[i].fused) != NULL, "case %zu: %s", i, b.msg);
        free(a.out.all);
        free(b.out.all);
        sb_part_free(blob);
    }
}

/* Typed input (no "record" column): the filter compares its JSON column, project keeps the
 * listed columns of the kept rows, fused as unfused. */
Test(filter_project, fused_equals_the_two_ops_on_typed_columns)
{
    size_t len;
    void *blob = sb_test_mixed_part("j", 600, 7, 11, &len);
    static const char *const fargs[] = {
        "{\"field\":\"i\",\"op\":\"ge\",\"value\":40}",
        "{\"field\":\"i\",\"op\":\"ne\",\"value\":7}", /* keeps the null rows */
    };
    for (size_t fi = 0; fi < 2; fi++)
        for (size_t batch = 0; batch <= 7; batch += 7) {
            const char *pa = "{\"fields\":[\"ok\",\"id\"]}";
            result a = run(blob, len, fargs[fi], pa, false, false, batch);
            result b = run(blob, len, fargs[fi], pa, true, false, batch);
            cr_assert_eq(a.rc, 0, "%s", a.msg);
            cr_assert_eq(b.rc, 0, "%s", b.msg);
            cr_assert_gt(a.out.rows, 100);
            cr_assert_eq(b.out.rows, a.out.rows);
            cr_assert_str_eq(b.out.all, a.out.all, "%s batch %zu", fargs[fi], batch);
            cr_assert(strncmp(b.out.all, "#schema ok:", 11) == 0, "%.40s", b.out.all);
            free(a.out.all);
            free(b.out.all);
        }
    /* a listed column the input lacks: project's error, both ways */
    const char *pm = "{\"fields\":[\"nope\"]}";
    result a = run(blob, len, fargs[0], pm, false, false, 0),
           b = run(blob, len, fargs[0], pm, true, false, 0);
    cr_assert(strstr(a.msg, "project: the input has no column \"nope\" (its columns: j, id, ok)") !=
                  NULL,
              "%s", a.msg);
    cr_assert_str_eq(b.msg, "project: the input has no column \"nope\" (its columns: j, id, ok)");
    free(a.out.all);
    free(b.out.all);
    sb_part_free(blob);
}

/* Only a project right after it, and only one. */
Test(filter_project, absorbs_only_one_project)
{
    const sb_op_impl *flt = sb_op_find("filter"), *prj = sb_op_find("project"),
                     *id = sb_op_find("identity");
    cr_assert_not_null(flt->absorb_next);
    cr_assert_null(prj->absorb_next, "project has nothing to absorb");
    sb_err e;
    void *fs, *ps, *ps2, *fs2, *is;
    cr_assert_eq(flt->init("{\"field\":\"a\",\"op\":\"eq\",\"value\":1}", &fs, &e), 0);
    cr_assert_eq(flt->init("{\"field\":\"a\",\"op\":\"eq\",\"value\":1}", &fs2, &e), 0);
    cr_assert_eq(prj->init("{\"fields\":[\"a\"]}", &ps, &e), 0);
    cr_assert_eq(prj->init("{\"fields\":[\"b\"]}", &ps2, &e), 0);
    cr_assert_eq(id->init(NULL, &is, &e), 0);
    cr_assert(!flt->absorb_next(fs, id, is));
    cr_assert(!flt->absorb_next(fs, flt, fs2));
    cr_assert(flt->absorb_next(fs, prj, ps));
    cr_assert(!flt->absorb_next(fs, prj, ps2), "a second project stays an op of its own");
    flt->free(fs); /* and ps */
    flt->free(fs2);
    prj->free(ps2);
    if (id->free)
        id->free(is);
}

/* Rows that filter FARGS keeps of blob (then projected to PROJ), fused and unfused (equal). */
static uint64_t kept(const void *blob, size_t len, const char *fargs, const char *proj)
{
    result a = run(blob, len, fargs, proj, false, false, 0);
    result b = run(blob, len, fargs, proj, true, false, 7);
    cr_assert_eq(a.rc, 0, "%s: %s", fargs, a.msg);
    cr_assert_eq(b.rc, 0, "%s: %s", fargs, b.msg);
    cr_assert_eq(a.out.rows, b.out.rows, "%s: unfused %lu, fused %lu", fargs,
                 (unsigned long)a.out.rows, (unsigned long)b.out.rows);
    free(a.out.all);
    free(b.out.all);
    return a.out.rows;
}

/* Issue 39: a filter whose field is a column of typed input (a parquet source) compares that
 * column by its type (ints, unsigned above INT64_MAX, floats with NaN, bools, strings); a null
 * or a value of another kind satisfies only ne; a field that is no column still reads the JSON
 * of the record column. Before, typed input with several string columns was refused. */
Test(filter_project, compares_typed_columns_by_type)
{
    size_t len;
    void *mixed = sb_test_mixed_part("j", 600, 7, 11, &len);
    uint64_t want = 0;
    for (int i = 300; i < 600; i++)
        want += i % 5 != 1;
    cr_expect_eq(kept(mixed, len, "{\"field\":\"id\",\"op\":\"ge\",\"value\":300000}",
                      "{\"fields\":[\"id\"]}"),
                 want);
    cr_expect_eq(kept(mixed, len, "{\"field\":\"id\",\"op\":\"ne\",\"value\":5000}",
                      "{\"fields\":[\"id\"]}"),
                 599, "nulls satisfy ne");
    cr_expect_eq(kept(mixed, len, "{\"field\":\"ok\",\"op\":\"eq\",\"value\":true}",
                      "{\"fields\":[\"ok\"]}"),
                 200);
    cr_expect_eq(kept(mixed, len, "{\"field\":\"id\",\"op\":\"eq\",\"value\":\"5000\"}",
                      "{\"fields\":[\"id\"]}"),
                 0, "a string is not an int64");
    sb_part_free(mixed);

    sb_field f[4] = {{.name = "f", .type = SB_TYPE_FLOAT64},
                     {.name = "u", .type = SB_TYPE_UINT64},
                     {.name = "s", .type = SB_TYPE_UTF8},
                     {.name = "t", .type = SB_TYPE_UTF8}};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(f, 4, &e);
    cr_assert_not_null(bb, "%s", e.msg);
    for (int i = 0; i < 600; i++) {
        char s[16];
        snprintf(s, sizeof s, "k%03d", i);
        cr_assert_eq(sb_batch_builder_append_double(bb, 0, i % 7 == 0 ? NAN : i * 0.5, &e), 0);
        cr_assert_eq(sb_batch_builder_append_uint(bb, 1, i == 0 ? UINT64_MAX : (uint64_t)i, &e), 0);
        cr_assert_eq(sb_batch_builder_append_binary(bb, 2, s, strlen(s), &e), 0);
        cr_assert_eq(sb_batch_builder_append_binary(bb, 3, "x", 1, &e), 0);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    cr_expect_eq(
        kept(blob, len, "{\"field\":\"f\",\"op\":\"lt\",\"value\":10}", "{\"fields\":[\"f\"]}"), 17,
        "i < 20 but the NaNs (0, 7, 14)");
    cr_expect_eq(
        kept(blob, len, "{\"field\":\"u\",\"op\":\"gt\",\"value\":5}", "{\"fields\":[\"u\"]}"), 595,
        "6..599 and UINT64_MAX");
    cr_expect_eq(kept(blob, len, "{\"field\":\"s\",\"op\":\"ge\",\"value\":\"k500\"}",
                      "{\"fields\":[\"s\",\"u\"]}"),
                 100);
    cr_expect_eq(
        kept(blob, len, "{\"field\":\"f\",\"op\":\"le\",\"value\":2.5}", "{\"fields\":[\"t\"]}"), 5,
        "1, 2, 3, 4, 5 (0 is NaN)");
    sb_part_free(blob);
}
