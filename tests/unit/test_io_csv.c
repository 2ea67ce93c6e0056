/* The csv format (lib/io/csv.h): RFC 4180 parsing into JSON object records, number inference,
 * header handling, errors, the writer, and csv files read through the split reader (several
 * splits, multiline) and written through the sink, compared with an independent reading by
 * Python's csv module. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/csv.h"
#include "io/reader.h"
#include "io/sink.h"
#include "io/split.h"
#include "partition/partition.h"
#include "testutil.h"

static char g_dir[256];

static void setup(void)
{
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-test-csv");
    cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(csv, .init = setup, .fini = teardown, .timeout = 60);

static sb_csv_opts opts(const char *args)
{
    sb_csv_opts o;
    sb_err e;
    cr_assert_eq(sb_csv_opts_parse(args, &o, &e), 0, "%s", e.msg);
    return o;
}

/* The JSON of one record under header `hdr` (a csv line). */
static char *to_json(const char *args, const char *hdr, const char *rec, sb_err *e, int *rc)
{
    sb_csv_opts o = opts(args);
    sb_csv_header h;
    cr_assert_eq(sb_csv_header_parse(hdr, strlen(hdr), &o, &h, e), 0, "%s", e->msg);
    sb_csv_buf b = {0};
    *rc = sb_csv_record_to_json(rec, strlen(rec), &o, &h, &b, e);
    char *out = strndup(b.p ? b.p : "", b.len);
    sb_csv_buf_free(&b);
    sb_csv_header_free(&h);
    sb_csv_opts_free(&o);
    return out;
}

static void json_is(const char *args, const char *hdr, const char *rec, const char *want)
{
    sb_err e;
    int rc;
    char *got = to_json(args, hdr, rec, &e, &rc);
    cr_assert_eq(rc, 0, "[%s]: %s", rec, e.msg);
    cr_assert_str_eq(got, want, "record [%s]: [%s]", rec, got);
    free(got);
}

static void json_fails(const char *hdr, const char *rec, const char *needle)
{
    sb_err e;
    int rc;
    char *got = to_json(NULL, hdr, rec, &e, &rc);
    cr_assert_eq(rc, -1, "%s parsed as %s", rec, got);
    cr_assert(strstr(e.msg, needle) != NULL, "\"%s\" lacks \"%s\"", e.msg, needle);
    free(got);
}

Test(csv, rfc4180_fields_and_types)
{
    json_is(NULL, "a,b,c\n", "1,x,2.5\n", "{\"a\":1,\"b\":\"x\",\"c\":2.5}");
    /* quoted fields, doubled quotes, delimiter and CRLF inside quotes, CRLF terminator */
    json_is(NULL, "a,b\r\n", "\"x,y\",\"say \"\"hi\"\"\"\r\n",
            "{\"a\":\"x,y\",\"b\":\"say \\\"hi\\\"\"}");
    /* empty unquoted = null, quoted empty = "", "007" and " 1" stay strings, -0.5e3 a number */
    json_is(NULL, "a,b,c,d,e\n", ",\"\",007, 1,-0.5e3\n",
            "{\"a\":null,\"b\":\"\",\"c\":\"007\",\"d\":\" 1\",\"e\":-0.5e3}");
    /* a quoted number is a string; backslashes and control bytes are escaped */
    json_is(NULL, "a,b\n", "\"12\",x\\y\ttab\n", "{\"a\":\"12\",\"b\":\"x\\\\y\\ttab\"}");
    json_is("{\"delimiter\": \";\"}", "a;b\n", "1,5;\"q;r\"\n", "{\"a\":\"1,5\",\"b\":\"q;r\"}");
    json_is("{\"delimiter\": \"\\t\"}", "a\tb\n", "x y\t3", "{\"a\":\"x y\",\"b\":3}");
    /* a newline inside quotes (multiline records) */
    json_is("{\"multiline\": true}", "a,b\n", "\"l1\nl2\",2\n", "{\"a\":\"l1\\nl2\",\"b\":2}");
}

Test(csv, malformed_records_are_errors)
{
    json_fails("a,b\n", "1,2,3\n", "3 fields, the header has 2 columns");
    json_fails("a,b\n", "1\n", "1 fields, the header has 2 columns");
    json_fails("a,b\n", "1,x\"y\n", "a quote inside an unquoted field");
    json_fails("a,b\n", "\"1\"x,2\n", "after the closing quote");
    json_fails("a,b\n", "\"1,2\n", "quote not closed");
    sb_csv_opts o = opts(NULL);
    sb_csv_header h;
    sb_err e;
    cr_assert_eq(sb_csv_header_parse("a,,b\n", 5, &o, &h, &e), -1);
    cr_assert(strstr(e.msg, "column 2 has no name") != NULL, "%s", e.msg);
    cr_assert_eq(sb_csv_header_parse("a,b,a\n", 6, &o, &h, &e), -1);
    cr_assert(strstr(e.msg, "repeats the name \"a\"") != NULL, "%s", e.msg);
    /* record boundaries: a quoted newline is refused unless multiline */
    cr_assert_eq(sb_csv_record_len("\"a\nb\",1\nnext\n", 13, &o, false, &e), -1);
    cr_assert(strstr(e.msg, "args.multiline") != NULL, "%s", e.msg);
    sb_csv_opts m = opts("{\"multiline\": true}");
    cr_assert_eq(sb_csv_record_len("\"a\nb\",1\nnext\n", 13, &m, false, &e), 8);
    cr_assert_eq(sb_csv_record_len("\"a\nb", 4, &m, false, &e), 0);
    cr_assert_eq(sb_csv_record_len("\"a\nb", 4, &m, true, &e), -1);
    sb_csv_opts_free(&m);
    sb_csv_opts_free(&o);
    const char *bad[] = {"{\"delimiter\": \"\\\"\"}", "{\"delimiter\": \"ab\"}",
                         "{\"columns\": [\"a\", \"a\"]}", "{\"header\": 1}"};
    for (size_t i = 0; i < 4; i++) {
        sb_csv_opts x;
        cr_assert_eq(sb_csv_opts_parse(bad[i], &x, &e), -1, "%s accepted", bad[i]);
    }
}

static char *write_rows(const char *args, const char *const *recs, size_t n, int *rc, sb_err *e)
{
    sb_csv_opts o = opts(args);
    sb_csv_writer w = {.o = &o};
    sb_csv_buf b = {0};
    *rc = 0;
    for (size_t i = 0; i < n && *rc == 0; i++)
        *rc = sb_csv_write_record(&w, recs[i], strlen(recs[i]), &b, e);
    char *out = strndup(b.p ? b.p : "", b.len);
    sb_csv_buf_free(&b);
    sb_csv_writer_free(&w);
    sb_csv_opts_free(&o);
    return out;
}

Test(csv, writer_quotes_and_columns)
{
    const char *recs[] = {"{\"a\":1,\"b\":\"x,y\",\"c\":\"42\"}",
                          "{\"b\":\"say \\\"hi\\\"\",\"a\":true,\"c\":\"\"}",
                          "{\"a\":[1,2],\"b\":\" pad\",\"c\":\"l1\\nl2\"}", "{\"a\":{\"k\":1}}"};
    int rc;
    sb_err e;
    char *got = write_rows(NULL, recs, 4, &rc, &e);
    cr_assert_eq(rc, 0, "%s", e.msg);
    cr_assert_str_eq(got, "a,b,c\n"
                          "1,\"x,y\",\"42\"\n"
                          "true,\"say \"\"hi\"\"\",\"\"\n"
                          "\"[1,2]\",\" pad\",\"l1\nl2\"\n"
                          "\"{\"\"k\"\":1}\",,\n");
    free(got);
    /* explicit columns and delimiter, no header; a key outside the columns is an error */
    const char *two[] = {"{\"b\":2,\"a\":1}", "{\"a\":3,\"z\":4}"};
    got = write_rows("{\"columns\": [\"a\", \"b\"], \"delimiter\": \";\", \"header\": false}", two,
                     2, &rc, &e);
    cr_assert_eq(rc, -1);
    cr_assert(strstr(e.msg, "key \"z\" is not a column") != NULL, "%s", e.msg);
    cr_assert_str_eq(got, "1;2\n");
    free(got);
    const char *notobj[] = {"[1,2]"};
    got = write_rows(NULL, notobj, 1, &rc, &e);
    cr_assert_eq(rc, -1);
    cr_assert(strstr(e.msg, "not a JSON object") != NULL, "%s", e.msg);
    free(got);
}

/* ---- through the split reader and the sink ---- */

typedef struct {
    char **recs;
    size_t n, cap;
} coll;

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    coll *c = ud;
    sb_batch *b = NULL;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *col = sb_batch_column(b, 0);
    cr_assert_eq(col->length, rows);
    for (size_t r = 0; r < col->length; r++) {
        size_t n;
        const void *p = sb_column_binary(col, r, &n);
        if (c->n == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 64;
            c->recs = realloc(c->recs, c->cap * sizeof *c->recs);
        }
        c->recs[c->n++] = strndup(p, n);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

static void coll_free(coll *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->recs[i]);
    free(c->recs);
}

/* Plans `path` with partitionSize psize and reads every split; returns the records. */
static int read_all(const char *path, const char *args, int64_t psize, coll *c, size_t *nsplits,
                    sb_err *e)
{
    char uri[600];
    snprintf(uri, sizeof uri, "file://%s", path);
    sb_source_spec src = {
        .uri = uri, .format = SB_FMT_CSV, .partition_size = psize, .args_json = (char *)args};
    sb_io_split *sp = NULL;
    size_t n = 0;
    if (sb_io_plan_splits(&src, &sp, &n, e) != 0)
        return -1;
    *nsplits = n;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = sb_io_read_split(&sp[i], SB_FMT_CSV, args, 1 << 12, collect, c, e);
    sb_io_splits_free(sp, n);
    return rc;
}

/* Python's csv module's reading of the file, as JSON lines with our typing rule. */
static char *python_records(const char *path, const char *delim)
{
    return sb_test_sh_out(
        "python3 -c \"\nimport csv, json, re, sys\nnum=re.compile(r'-?(0|[1-9][0-9]*)(\\.[0-9]+)?"
        "([eE][+-]?[0-9]+)?$')\nrows=list(csv.reader(open('%s', newline=''), delimiter='%s'))\n"
        "h=rows[0]\nfor r in rows[1:]:\n  if not r: continue\n"
        "  print(json.dumps({k: (json.loads(v) if num.match(v) else v) for k, v in zip(h, r)},"
        " separators=(',', ':')))\n\"",
        path, delim);
}

Test(csv, split_file_reads_every_row_once)
{
    /* ~200 KiB of rows with quotes, delimiters and CRLF, cut into ~13 splits of 16 KiB */
    char path[400];
    snprintf(path, sizeof path, "%s/big.csv", g_dir);
    FILE *f = fopen(path, "w");
    fputs("id,name,score\r\n", f);
    for (int i = 0; i < 4000; i++)
        fprintf(f, "%d,\"n%d, \"\"q\"\" %s\",%d.%d\r\n", i, i, i % 3 ? "x" : "yy", i % 97, i % 10);
    fclose(f);
    coll c = {0};
    size_t nsplits = 0;
    sb_err e;
    cr_assert_eq(read_all(path, NULL, 16 << 10, &c, &nsplits, &e), 0, "%s", e.msg);
    cr_assert_gt(nsplits, 5, "%zu splits", nsplits);
    cr_assert_eq(c.n, 4000, "%zu records", c.n);
    /* every record equals Python's reading (numbers typed by the same rule) */
    char *want = python_records(path, ",");
    char *save = NULL;
    size_t i = 0;
    for (char *line = strtok_r(want, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++)
        cr_assert_str_eq(c.recs[i], line, "record %zu", i);
    cr_assert_eq(i, 4000);
    free(want);
    coll_free(&c);
}

Test(csv, multiline_files_are_one_split_and_quote_errors_are_named)
{
    char path[400];
    snprintf(path, sizeof path, "%s/ml.csv", g_dir);
    FILE *f = fopen(path, "w");
    fputs("a;b\n", f);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "%d;\"line one\nline two; %d\"\n", i, i);
    fclose(f);
    coll c = {0};
    size_t nsplits = 0;
    sb_err e;
    cr_assert_eq(
        read_all(path, "{\"delimiter\": \";\", \"multiline\": true}", 4 << 10, &c, &nsplits, &e), 0,
        "%s", e.msg);
    cr_assert_eq(nsplits, 1, "a multiline csv file was cut into %zu splits", nsplits);
    cr_assert_eq(c.n, 2000);
    char *want = python_records(path, ";");
    char *save = NULL;
    size_t i = 0;
    for (char *line = strtok_r(want, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++)
        cr_assert_str_eq(c.recs[i], line, "record %zu: [%s] [%s]", i, c.recs[i], line);
    free(want);
    coll_free(&c);
    /* the same file without multiline: an error naming the file and the record's offset */
    coll d = {0};
    cr_assert_eq(read_all(path, "{\"delimiter\": \";\"}", 4 << 10, &d, &nsplits, &e), -1);
    cr_assert(strstr(e.msg, path) != NULL && strstr(e.msg, "byte offset 4") != NULL &&
                  strstr(e.msg, "multiline") != NULL,
              "%s", e.msg);
    coll_free(&d);
}

Test(csv, sink_round_trip)
{
    char path[400];
    snprintf(path, sizeof path, "%s/in.csv", g_dir);
    FILE *f = fopen(path, "w");
    fputs("k,v,t\n1,\"a,b\",x\n2,,\"say \"\"hi\"\"\"\n3,\"\",-1.5\n", f);
    fclose(f);
    coll c = {0};
    size_t nsplits;
    sb_err e;
    cr_assert_eq(read_all(path, NULL, 1 << 20, &c, &nsplits, &e), 0, "%s", e.msg);
    cr_assert_eq(c.n, 3);
    /* records -> a partition -> the csv sink -> the same csv text */
    sb_field fld = {.name = SB_IO_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    sb_batch_builder *b = sb_batch_builder_new(&fld, 1, &e);
    for (size_t i = 0; i < c.n; i++)
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, c.recs[i], strlen(c.recs[i]), &e), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    char uri[400];
    snprintf(uri, sizeof uri, "file://%s/out/", g_dir);
    sb_sink_spec s = {.uri = uri, .format = SB_FMT_CSV};
    sb_io_part_info info;
    cr_assert_eq(sb_io_sink_write_part(&s, "s0-t0-p0", blob, len, &info, &e), 0, "%s", e.msg);
    sb_part_free(blob);
    cr_assert_str_eq(info.name, "part-s0-t0-p0.csv");
    char *got = sb_test_sh_out("cat %s/out/part-s0-t0-p0.csv", g_dir);
    cr_assert_str_eq(got, "k,v,t\n1,\"a,b\",x\n2,,\"say \"\"hi\"\"\"\n3,\"\",-1.5");
    free(got);
    coll_free(&c);
}
