/* Unit tests of io/sink: part files per partition (contents, rows, bytes, CRC),
 * overwrite on re-run, manifest + _SUCCESS on commit (synced there, not per part), abort and
 * prepare cleaning up, checking a part against a checkpoint, and bad input. Each test works in its
 * own mkdtemp() directory and removes it. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "partition/crc32c.h"
#include "partition/partition.h"
#include "io/sink.h"
#include "io/schemes.h"
#include "testutil.h"

static char g_dir[64];
static char g_uri[256];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void)
{
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-test-sink");
    cr_assert_not_null(mkdtemp(g_dir));
    snprintf(g_uri, sizeof g_uri, "file://%s/out/nested/", g_dir);
}

static void teardown(void)
{
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(sink, .init = setup, .fini = teardown, .timeout = 60);

static const char *out_path(const char *name)
{
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ % 4];
    snprintf(b, 512, "%s/out/nested/%s", g_dir, name);
    return b;
}

static bool exists(const char *name)
{
    struct stat st;
    return stat(out_path(name), &st) == 0;
}

/* Names in the sink directory, sorted, joined by ','. */
static void listing(char *buf, size_t cap)
{
    char names[64][256];
    size_t n = 0;
    DIR *d = opendir(out_path(""));
    cr_assert_not_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 64)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            snprintf(names[n++], 256, "%s", de->d_name);
    closedir(d);
    for (size_t a = 1; a < n; a++)
        for (size_t b = a; b > 0 && strcmp(names[b - 1], names[b]) > 0; b--) {
            char t[256];
            memcpy(t, names[b], 256);
            memcpy(names[b], names[b - 1], 256);
            memcpy(names[b - 1], t, 256);
        }
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strncat(buf, names[i], cap - strlen(buf) - 1);
        if (i + 1 < n)
            strncat(buf, ",", cap - strlen(buf) - 1);
    }
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    b[len] = '\0';
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* A partition with one column "record" of `type` holding recs[0..n). */
static void *make_part(sb_type type, const char *const *recs, size_t n, size_t *len)
{
    sb_field f = {.name = "record", .type = type};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &e);
    cr_assert_not_null(b, "%s", e.msg);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, recs[i], strlen(recs[i]), &e), 0, "%s",
                     e.msg);
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    return blob;
}

static sb_sink_spec spec(sb_format fmt, const char *args)
{
    return (sb_sink_spec){.uri = g_uri, .format = fmt, .args_json = (char *)args};
}

static void write_part(const sb_sink_spec *s, const char *id, const char *const *recs, size_t n,
                       sb_io_part_info *info)
{
    size_t len;
    void *blob = make_part(SB_TYPE_UTF8, recs, n, &len);
    sb_err e;
    cr_assert_eq(sb_io_sink_write_part(s, id, blob, len, info, &e), 0, "%s", e.msg);
    sb_part_free(blob);
}

Test(sink, parts_manifest_and_success)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *r1[] = {"{\"a\":1}", "{\"a\":2}", "{\"é\":\"x\"}"};
    const char *r2[] = {"{}"};
    sb_io_part_info info[3];
    write_part(&s, "s2-t0-p0", r1, 3, &info[0]);
    write_part(&s, "s2-t1-p0", r2, 1, &info[1]);
    write_part(&s, "s2-t2-p0", NULL, 0, &info[2]); /* an empty partition: an empty part */

    size_t n;
    char *got = slurp(out_path("part-s2-t0-p0.jsonl"), &n);
    const char want[] = "{\"a\":1}\n{\"a\":2}\n{\"é\":\"x\"}\n";
    cr_assert_str_eq(got, want);
    cr_assert_str_eq(info[0].name, "part-s2-t0-p0.jsonl");
    cr_assert_eq(info[0].rows, 3);
    cr_assert_eq(info[0].bytes, sizeof want - 1);
    cr_assert_eq(info[0].crc32c, sb_crc32c_portable(0, want, sizeof want - 1));
    free(got);
    cr_assert_eq(info[1].rows, 1);
    cr_assert_eq(info[1].bytes, 3);
    cr_assert_eq(info[2].rows, 0);
    cr_assert_eq(info[2].bytes, 0);
    cr_assert(!exists("_SUCCESS"));

    /* a skipped (errored) partition is listed: its records are not in the parts */
    sb_io_errored skipped = {"pick", "split in/bad.jsonl", "record 1 is not valid JSON"};
    cr_assert_eq(sb_io_sink_commit(&s, info, 3, &skipped, 1, &e), 0, "%s", e.msg);
    cr_assert(exists("_SUCCESS"));
    char *m = slurp(out_path("_manifest.json"), &n);
    cJSON *j = cJSON_Parse(m);
    cr_assert_not_null(j, "manifest is not JSON: %s", m);
    const cJSON *errored = cJSON_GetObjectItem(j, "errored");
    cr_assert_eq(cJSON_GetArraySize(errored), 1, "%s", m);
    const cJSON *e0 = cJSON_GetArrayItem(errored, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(e0, "stage")->valuestring, "pick");
    cr_assert_str_eq(cJSON_GetObjectItem(e0, "split")->valuestring, "split in/bad.jsonl");
    cr_assert_str_eq(cJSON_GetObjectItem(e0, "error")->valuestring, "record 1 is not valid JSON");
    const cJSON *parts = cJSON_GetObjectItem(j, "parts");
    cr_assert_eq(cJSON_GetArraySize(parts), 3);
    const cJSON *p0 = cJSON_GetArrayItem(parts, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(p0, "name")->valuestring, "part-s2-t0-p0.jsonl");
    cr_assert_eq(cJSON_GetObjectItem(p0, "rows")->valuedouble, 3);
    cr_assert_eq(cJSON_GetObjectItem(p0, "bytes")->valuedouble, (double)(sizeof want - 1));
    cr_assert_eq(cJSON_GetObjectItem(p0, "crc32c")->valuedouble, (double)info[0].crc32c);
    const cJSON *tot = cJSON_GetObjectItem(j, "totals");
    cr_assert_eq(cJSON_GetObjectItem(tot, "parts")->valuedouble, 3);
    cr_assert_eq(cJSON_GetObjectItem(tot, "rows")->valuedouble, 4);
    cr_assert_eq(cJSON_GetObjectItem(tot, "bytes")->valuedouble, (double)(sizeof want - 1 + 3));
    cr_assert_str_eq(cJSON_GetObjectItem(j, "format")->valuestring, "jsonl");
    cJSON_Delete(j);
    free(m);
    char ls[1024];
    listing(ls, sizeof ls);
    cr_assert_str_eq(ls, "_SUCCESS,_manifest.json,part-s2-t0-p0.jsonl,part-s2-t1-p0.jsonl,"
                         "part-s2-t2-p0.jsonl");
}

Test(sink, rewrite_overwrites_and_commit_drops_strays)
{
    sb_sink_spec s = spec(SB_FMT_TEXT, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *a[] = {"first try", "x"};
    const char *b[] = {"second try"};
    sb_io_part_info i1, i2, stray;
    write_part(&s, "s1-t7-p0", a, 2, &i1);
    write_part(&s, "s1-t9-p0", a, 1, &stray); /* an attempt the final list does not include */
    write_part(&s, "s1-t7-p0", b, 1, &i2);    /* the task re-ran */
    /* files a user keeps in the sink directory, some named like parts: never removed */
    const char *mine[] = {"part-00000.txt", "part-s1-t9.txt", "part-x-s1-t9-p0.txt", "notes.txt"};
    for (size_t k = 0; k < 4; k++) {
        FILE *uf = fopen(out_path(mine[k]), "w");
        cr_assert_not_null(uf);
        fputs("user data\n", uf);
        fclose(uf);
    }
    char ls[1024];
    listing(ls, sizeof ls);
    cr_assert_str_eq(ls, "notes.txt,part-00000.txt,part-s1-t7-p0.txt,part-s1-t9-p0.txt,"
                         "part-s1-t9.txt,part-x-s1-t9-p0.txt");
    size_t n;
    char *got = slurp(out_path("part-s1-t7-p0.txt"), &n);
    cr_assert_str_eq(got, "second try\n");
    free(got);
    cr_assert_eq(i2.rows, 1);

    /* a stale report of the first attempt no longer matches the file */
    cr_assert_eq(sb_io_sink_commit(&s, &i1, 1, NULL, 0, &e), -1);
    cr_assert(strstr(e.msg, "has 11 bytes, reported 12") != NULL, "%s", e.msg);
    cr_assert(!exists("_SUCCESS"));
    /* the same part reported twice identically counts once; twice differently is an error */
    sb_io_part_info twice[2] = {i2, i2};
    cr_assert_eq(sb_io_sink_commit(&s, twice, 2, NULL, 0, &e), 0, "%s", e.msg);
    listing(ls, sizeof ls);
    cr_assert_str_eq(ls, "_SUCCESS,_manifest.json,notes.txt,part-00000.txt,part-s1-t7-p0.txt,"
                         "part-s1-t9.txt,part-x-s1-t9-p0.txt");
    char *m = slurp(out_path("_manifest.json"), &n);
    cJSON *j = cJSON_Parse(m);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "parts")), 1);
    cJSON_Delete(j);
    free(m);
    twice[1].crc32c ^= 1;
    cr_assert_eq(sb_io_sink_commit(&s, twice, 2, NULL, 0, &e), -1);
    cr_assert(strstr(e.msg, "listed twice with different contents") != NULL, "%s", e.msg);
}

/* A part reported more than once, not next to itself in the list (reports of a re-sent batch
 * interleave with others): identical copies count once, wherever they are; a different copy
 * is an error naming the part and both sizes, the first report's first. */
Test(sink, repeated_reports_anywhere_in_the_list_count_once)
{
    sb_sink_spec s = spec(SB_FMT_TEXT, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *r[] = {"row one", "row two"};
    sb_io_part_info a, b, c;
    write_part(&s, "s1-t3-p0", r, 2, &a);
    write_part(&s, "s1-t1-p0", r, 1, &b);
    write_part(&s, "s1-t2-p0", r, 2, &c);
    sb_io_part_info list[6] = {a, b, c, a, b, a};
    cr_assert_eq(sb_io_sink_commit(&s, list, 6, NULL, 0, &e), 0, "%s", e.msg);
    size_t n;
    char *m = slurp(out_path("_manifest.json"), &n);
    cJSON *j = cJSON_Parse(m);
    cr_assert_not_null(j, "%s", m);
    const cJSON *parts = cJSON_GetObjectItem(j, "parts");
    cr_assert_eq(cJSON_GetArraySize(parts), 3, "%s", m);
    /* in the order first reported */
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(parts, 0), "name")->valuestring,
                     "part-s1-t3-p0.txt");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(parts, 2), "name")->valuestring,
                     "part-s1-t2-p0.txt");
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "totals"), "rows")->valuedouble, 5);
    cJSON_Delete(j);
    free(m);
    list[5].bytes += 1; /* the third report of s1-t3-p0 differs from the first */
    cr_assert_eq(sb_io_sink_commit(&s, list, 6, NULL, 0, &e), -1);
    char want[160];
    snprintf(want, sizeof want,
             "part part-s1-t3-p0.txt is listed twice with different contents (%llu and %llu "
             "bytes)",
             (unsigned long long)a.bytes, (unsigned long long)a.bytes + 1);
    cr_expect(strstr(e.msg, want) != NULL, "%s", e.msg);
}

Test(sink, abort_and_prepare_clean_up)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    /* abort before anything exists is fine */
    cr_assert_eq(sb_io_sink_abort(&s, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *r[] = {"{\"k\":true}"};
    sb_io_part_info info;
    write_part(&s, "s3-t0-p1", r, 1, &info);
    cr_assert_eq(sb_io_sink_commit(&s, &info, 1, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert(exists("_SUCCESS"));
    /* leftovers of an interrupted writer */
    FILE *f = fopen(out_path(".sbtmp-123-0-part-s3-t0-p2.jsonl"), "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(sb_io_sink_abort(&s, &e), 0, "%s", e.msg);
    char ls[1024];
    listing(ls, sizeof ls);
    cr_assert_str_eq(ls, "part-s3-t0-p1.jsonl");

    /* a new run: prepare removes a stale _SUCCESS, manifest and temp files, keeps parts */
    cr_assert_eq(sb_io_sink_commit(&s, &info, 1, NULL, 0, &e), 0, "%s", e.msg);
    f = fopen(out_path(".sbtmp-9-9-_manifest.json"), "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    listing(ls, sizeof ls);
    cr_assert_str_eq(ls, "part-s3-t0-p1.jsonl");
}

Test(sink, failed_writes_leave_nothing_behind)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *ok[] = {"{\"v\":1}"};
    sb_io_part_info info;
    write_part(&s, "s1-t0-p0", ok, 1, &info);

    /* a record with a newline cannot be one jsonl line; the old part stays as it was */
    const char *bad[] = {"{\"v\":2}", "{\"v\":\n3}"};
    size_t len;
    void *blob = make_part(SB_TYPE_UTF8, bad, 2, &len);
    cr_assert_eq(sb_io_sink_write_part(&s, "s1-t0-p0", blob, len, &info, &e), -1);
    cr_assert(strstr(e.msg, "record 1 contains a newline") != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "s1-t0-p0") != NULL, "%s", e.msg);
    /* bad ids */
    const char *ids[] = {"", "../x", ".hidden", "a/b", "a b", NULL};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        cr_assert_eq(sb_io_sink_write_part(&s, ids[i], blob, len, NULL, &e), -1, "id %zu", i);
        cr_assert(strstr(e.msg, "partition id") != NULL, "%s", e.msg);
    }
    /* a corrupted blob */
    ((unsigned char *)blob)[len - 1] ^= 0xFF;
    cr_assert_eq(sb_io_sink_write_part(&s, "s1-t0-p5", blob, len, NULL, &e), -1);
    cr_assert(strstr(e.msg, "partition s1-t0-p5") != NULL, "%s", e.msg);
    sb_part_free(blob);
    /* binary records against the sink's recordSize */
    sb_sink_spec sb = spec(SB_FMT_BINARY, "{\"recordSize\":4}");
    const char *recs[] = {"abcd", "efg"};
    blob = make_part(SB_TYPE_BINARY, recs, 2, &len);
    cr_assert_eq(sb_io_sink_write_part(&sb, "s1-t0-p1", blob, len, NULL, &e), -1);
    cr_assert(strstr(e.msg, "record 1 has 3 bytes, the sink's recordSize is 4") != NULL, "%s",
              e.msg);
    sb_part_free(blob);
    const char *recs4[] = {"abcd", "efgh"};
    blob = make_part(SB_TYPE_BINARY, recs4, 2, &len);
    cr_assert_eq(sb_io_sink_write_part(&sb, "s1-t0-p1", blob, len, &info, &e), 0, "%s", e.msg);
    sb_part_free(blob);
    cr_assert_str_eq(info.name, "part-s1-t0-p1.bin");
    cr_assert_eq(info.bytes, 8);
    size_t n;
    char *got = slurp(out_path("part-s1-t0-p1.bin"), &n);
    cr_assert_str_eq(got, "abcdefgh");
    free(got);

    char ls[1024];
    listing(ls, sizeof ls);
    cr_assert_str_eq(ls, "part-s1-t0-p0.jsonl,part-s1-t0-p1.bin");
    got = slurp(out_path("part-s1-t0-p0.jsonl"), &n);
    cr_assert_str_eq(got, "{\"v\":1}\n");
    free(got);

    /* commit with a part that is not there: no _SUCCESS */
    sb_io_part_info missing = {.name = "part-s1-t4-p0.jsonl", .rows = 1, .bytes = 8};
    cr_assert_eq(sb_io_sink_commit(&s, &missing, 1, NULL, 0, &e), -1);
    cr_assert(strstr(e.msg, "part-s1-t4-p0.jsonl") != NULL, "%s", e.msg);
    sb_io_part_info evil = {.name = "part-../../x.jsonl"};
    cr_assert_eq(sb_io_sink_commit(&s, &evil, 1, NULL, 0, &e), -1);
    cr_assert(strstr(e.msg, "invalid name") != NULL, "%s", e.msg);
    cr_assert(!exists("_SUCCESS"));
}

Test(sink, bad_sinks)
{
    sb_err e;
    const char *r[] = {"x"};
    size_t len;
    void *blob = make_part(SB_TYPE_UTF8, r, 1, &len);
    sb_sink_spec s = {.uri = "https://example.com/out/", .format = SB_FMT_JSONL};
    cr_assert_eq(sb_io_sink_write_part(&s, "s1-t0-p0", blob, len, NULL, &e), -1);
    cr_assert(strstr(e.msg, "read only") != NULL, "%s", e.msg);
    s.uri = "gs://bucket/out/";
    cr_assert_eq(sb_io_sink_prepare(&s, &e), -1);
    cr_assert(strstr(e.msg, "unsupported scheme \"gs\"") != NULL, "%s", e.msg);
    s = spec(SB_FMT_CSV, "{\"delimiter\": \";;\"}");
    cr_assert_eq(sb_io_sink_prepare(&s, &e), -1);
    cr_assert(strstr(e.msg, "args.delimiter must be one byte") != NULL, "%s", e.msg);
    /* the sink path is a file */
    char uri[300];
    char file[300];
    snprintf(file, sizeof file, "%s/afile", g_dir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    snprintf(uri, sizeof uri, "file://%s", file);
    s = (sb_sink_spec){.uri = uri, .format = SB_FMT_TEXT};
    cr_assert_eq(sb_io_sink_write_part(&s, "s1-t0-p0", blob, len, NULL, &e), -1);
    cr_assert(strstr(e.msg, "not a directory") != NULL, "%s", e.msg);
    sb_part_free(blob);

    /* a binary column written as text must be UTF-8 */
    const char *bin[] = {"ok", "\xff\xfe"};
    blob = make_part(SB_TYPE_BINARY, bin, 2, &len);
    s = spec(SB_FMT_TEXT, NULL);
    cr_assert_eq(sb_io_sink_write_part(&s, "s1-t0-p0", blob, len, NULL, &e), -1);
    cr_assert(strstr(e.msg, "record 1 is not valid UTF-8") != NULL, "%s", e.msg);
    sb_part_free(blob);
}

/* A partition bigger than the 4 MiB write buffer, with records larger than it too. */
Test(sink, large_partition)
{
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &e);
    size_t big = 5u << 20;
    char *line = malloc(big);
    memset(line, 'y', big);
    uint32_t crc = 0;
    size_t total = 0;
    for (int i = 0; i < 3000; i++) {
        size_t n = i == 1500 ? big : (size_t)(i * 7) % 3000;
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, line, n, &e), 0, "%s", e.msg);
        crc = sb_crc32c_portable(crc, line, n);
        crc = sb_crc32c_portable(crc, "\n", 1);
        total += n + 1;
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    sb_sink_spec s = spec(SB_FMT_TEXT, NULL);
    sb_io_part_info info;
    cr_assert_eq(sb_io_sink_write_part(&s, "s9-t9-p9", blob, len, &info, &e), 0, "%s", e.msg);
    cr_assert_eq(info.rows, 3000);
    cr_assert_eq(info.bytes, total);
    cr_assert_eq(info.crc32c, crc);
    struct stat st;
    cr_assert_eq(stat(out_path("part-s9-t9-p9.txt"), &st), 0);
    cr_assert_eq((size_t)st.st_size, total);
    sb_part_free(blob);
    free(line);
}

/* A partition of typed columns (exec with framing arrow, plugins): no "record" column. */
static void *typed_part(size_t *len, bool nan)
{
    sb_field f[] = {
        {.name = "id", .type = SB_TYPE_INT64},
        {.name = "text", .type = SB_TYPE_UTF8, .nullable = true},
        {.name = "v", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = 2}};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(f, 3, &e);
    cr_assert_not_null(b, "%s", e.msg);
    float v[2][2] = {{0.1f, -2.0f}, {nan ? 0.0f / 0.0f : 1e-3f, 3.0f}};
    cr_assert_eq(sb_batch_builder_append_int(b, 0, 7, &e), 0);
    cr_assert_eq(sb_batch_builder_append_binary(b, 1, "a \"q\"", 5, &e), 0);
    cr_assert_eq(sb_batch_builder_append_list(b, 2, v[0], 2, &e), 0);
    cr_assert_eq(sb_batch_builder_append_int(b, 0, -8, &e), 0);
    cr_assert_eq(sb_batch_builder_append_null(b, 1, &e), 0);
    cr_assert_eq(sb_batch_builder_append_list(b, 2, v[1], 2, &e), 0);
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    return blob;
}

Test(sink, typed_columns_are_written_as_json_objects)
{
    sb_err err = {0};
    size_t len;
    void *blob = typed_part(&len, false);
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    cr_assert_eq(sb_io_sink_prepare(&s, &err), 0, "%s", err.msg);
    sb_io_part_info info;
    cr_assert_eq(sb_io_sink_write_part(&s, "p0", blob, len, &info, &err), 0, "%s", err.msg);
    cr_expect_eq(info.rows, 2);
    size_t n;
    char *got = slurp(out_path("part-p0.jsonl"), &n);
    cr_expect_str_eq(got, "{\"id\":7,\"text\":\"a \\\"q\\\"\",\"v\":[0.1,-2]}\n"
                          "{\"id\":-8,\"text\":null,\"v\":[0.001,3]}\n");
    free(got);
    /* a format that writes one record column cannot: it says which columns it got */
    sb_sink_spec t = spec(SB_FMT_TEXT, NULL);
    cr_assert_eq(sb_io_sink_write_part(&t, "p1", blob, len, &info, &err), -1);
    cr_expect(strstr(err.msg, "format text writes one record column") != NULL &&
                  strstr(err.msg, "3 typed columns (the first is \"id\")") != NULL,
              "%s", err.msg);
    sb_part_free(blob);
    /* NaN has no JSON: an error naming the column, row and element, no part file */
    blob = typed_part(&len, true);
    cr_assert_eq(sb_io_sink_write_part(&s, "p2", blob, len, &info, &err), -1);
    cr_expect(strstr(err.msg, "column \"v\", row 1, element 0: NaN or infinity") != NULL, "%s",
              err.msg);
    cr_expect(!exists("part-p2.jsonl"));
    sb_part_free(blob);
}

/* Parts are written without fsync (temporary name + rename only); the commit makes them
 * durable with a few syncs of the directory, not one per part, and still lists every part. */
Test(sink, parts_are_synced_once_at_commit_not_per_part)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *r[] = {"{\"a\":1}", "{\"b\":2}"};
    enum { N = 20 };
    sb_io_part_info info[N];
    uint64_t before = sb_io_file_syncs();
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "s0-t%d-p0", i);
        write_part(&s, id, r, 2, &info[i]);
    }
    cr_assert_eq(sb_io_file_syncs(), before, "%llu syncs while writing %d parts",
                 (unsigned long long)(sb_io_file_syncs() - before), N);
    cr_assert(exists("part-s0-t19-p0.jsonl"), "a part is visible once written");
    cr_assert_eq(sb_io_sink_commit(&s, info, N, NULL, 0, &e), 0, "%s", e.msg);
    uint64_t syncs = sb_io_file_syncs() - before;
    /* the directory after removing temporaries, the parts and the manifest, then _SUCCESS */
    cr_assert(syncs >= 2 && syncs <= 3, "%llu syncs at commit for %d parts",
              (unsigned long long)syncs, N);
    size_t n;
    char *m = slurp(out_path("_manifest.json"), &n);
    cJSON *j = cJSON_Parse(m);
    cr_assert_not_null(j, "%s", m);
    const cJSON *parts = cJSON_GetObjectItem(j, "parts");
    cr_assert_eq(cJSON_GetArraySize(parts), N, "%s", m);
    for (int i = 0; i < N; i++) {
        const cJSON *p = cJSON_GetArrayItem(parts, i);
        cr_assert_eq(cJSON_GetObjectItem(p, "crc32c")->valuedouble, (double)info[i].crc32c);
    }
    cJSON_Delete(j);
    free(m);
    cr_assert(exists("_SUCCESS"));
}

/* What a resume checks of a part a checkpoint recorded: present, same size, same CRC-32C. */
Test(sink, verify_part_detects_missing_truncated_and_corrupted_parts)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *r[] = {"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"};
    sb_io_part_info info;
    write_part(&s, "s0-t3-p0", r, 3, &info);
    char why[512];
    cr_assert_eq(
        sb_io_sink_verify_part(&s, "s0-t3-p0", info.bytes, info.crc32c, why, sizeof why, &e), 1,
        "%s", why);
    cr_assert_str_eq(why, "");
    cr_assert_eq(
        sb_io_sink_verify_part(&s, "s0-t3-p0", info.bytes, info.crc32c ^ 1, why, sizeof why, &e),
        0);
    cr_assert(strstr(why, "CRC-32C") != NULL, "%s", why);

    /* one byte changed, same size */
    const char *path = out_path("part-s0-t3-p0.jsonl");
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    fseek(f, 3, SEEK_SET);
    fputc('X', f);
    fclose(f);
    cr_assert_eq(
        sb_io_sink_verify_part(&s, "s0-t3-p0", info.bytes, info.crc32c, why, sizeof why, &e), 0);
    cr_assert(strstr(why, "CRC-32C") != NULL, "%s", why);

    /* cut short (what a machine crash can leave of an unsynced file) */
    cr_assert_eq(truncate(path, (off_t)info.bytes - 4), 0);
    cr_assert_eq(
        sb_io_sink_verify_part(&s, "s0-t3-p0", info.bytes, info.crc32c, why, sizeof why, &e), 0);
    cr_assert(strstr(why, "bytes, the checkpoint recorded") != NULL, "%s", why);

    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(
        sb_io_sink_verify_part(&s, "s0-t3-p0", info.bytes, info.crc32c, why, sizeof why, &e), 0);
    cr_assert(strstr(why, "is missing") != NULL, "%s", why);

    cr_assert_eq(sb_io_sink_verify_part(&s, "../x", 1, 1, why, sizeof why, &e), -1);

    /* S3: a written part is durable; nothing is read (no server here) */
    sb_sink_spec s3 = {.uri = "s3://no-such-bucket/out/", .format = SB_FMT_JSONL};
    cr_assert_eq(sb_io_sink_verify_part(&s3, "s0-t3-p0", 10, 1234, why, sizeof why, &e), 1, "%s",
                 e.msg);
}

/* ---- sink.mode (lib/io/sinkmode.h) ---------------------------------------------------------- */

static sb_sink_spec mode_spec(sb_sink_mode m, const char *tag)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    s.mode = m;
    snprintf(s.part_tag, sizeof s.part_tag, "%s", tag ? tag : "");
    return s;
}

/* The manifest's part names joined by ',' and its totals.rows. */
static void manifest_names(char *buf, size_t cap, double *rows)
{
    size_t n;
    char *text = slurp(out_path("_manifest.json"), &n);
    cJSON *m = cJSON_Parse(text);
    cr_assert_not_null(m);
    buf[0] = '\0';
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(m, "parts"))
    {
        if (buf[0])
            strncat(buf, ",", cap - strlen(buf) - 1);
        strncat(buf, cJSON_GetObjectItem(p, "name")->valuestring, cap - strlen(buf) - 1);
    }
    *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "totals"), "rows")->valuedouble;
    cJSON_Delete(m);
    free(text);
}

static void touch(const char *name)
{
    FILE *f = fopen(out_path(name), "w");
    cr_assert_not_null(f);
    fputs("user data\n", f);
    fclose(f);
}

Test(sink, append_keeps_earlier_runs_and_lists_every_part)
{
    const char *r1[] = {"{\"a\":1}", "{\"a\":2}"}, *r2[] = {"{\"b\":3}"};
    sb_io_part_info in[2];
    sb_err e;
    sb_sink_spec a = mode_spec(SB_SINK_APPEND, "00000000000a");
    cr_assert_eq(sb_io_sink_prepare(&a, &e), 0, "%s", e.msg);
    write_part(&a, "s1-t0-p0", r1, 2, &in[0]);
    cr_assert_str_eq(in[0].name, "part-00000000000a-s1-t0-p0.jsonl");
    cr_assert_eq(sb_io_sink_commit(&a, in, 1, NULL, 0, &e), 0, "%s", e.msg);
    /* a second run: the first run's output stays committed while it runs, and after */
    sb_sink_spec b = mode_spec(SB_SINK_APPEND, "00000000000b");
    cr_assert_eq(sb_io_sink_prepare(&b, &e), 0, "%s", e.msg);
    cr_assert(exists("_SUCCESS") && exists("_manifest.json"), "prepare kept the earlier commit");
    write_part(&b, "s1-t0-p0", r2, 1, &in[1]); /* the same partition id: another name */
    cr_assert_eq(sb_io_sink_abort(&b, &e), 0, "%s", e.msg);
    cr_assert(exists("_SUCCESS") && exists("_manifest.json"), "abort kept the earlier commit");
    cr_assert_eq(sb_io_sink_prepare(&b, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_sink_commit(&b, &in[1], 1, NULL, 0, &e), 0, "%s", e.msg);
    char names[512];
    double rows;
    manifest_names(names, sizeof names, &rows);
    cr_expect_str_eq(names, "part-00000000000a-s1-t0-p0.jsonl,part-00000000000b-s1-t0-p0.jsonl");
    cr_expect_eq(rows, 3);
    /* the same run committed again (its driver died after the commit): nothing twice */
    cr_assert_eq(sb_io_sink_commit(&b, &in[1], 1, NULL, 0, &e), 0, "%s", e.msg);
    manifest_names(names, sizeof names, &rows);
    cr_expect_str_eq(names, "part-00000000000a-s1-t0-p0.jsonl,part-00000000000b-s1-t0-p0.jsonl");
    cr_expect_eq(rows, 3);
    /* a failed run's parts are strays the next commit removes; a user's file stays */
    sb_sink_spec c = mode_spec(SB_SINK_APPEND, "00000000000c");
    write_part(&c, "s1-t5-p0", r2, 1, NULL);
    touch("notes.jsonl");
    sb_sink_spec d = mode_spec(SB_SINK_APPEND, "00000000000d");
    cr_assert_eq(sb_io_sink_commit(&d, NULL, 0, NULL, 0, &e), 0, "%s", e.msg);
    cr_expect_not(exists("part-00000000000c-s1-t5-p0.jsonl"), "a failed run's part stayed");
    cr_expect(exists("notes.jsonl") && exists("part-00000000000a-s1-t0-p0.jsonl"));
    manifest_names(names, sizeof names, &rows);
    cr_expect_eq(rows, 3);
}

Test(sink, append_refuses_a_manifest_it_did_not_write)
{
    sb_err e;
    sb_sink_spec o = mode_spec(SB_SINK_OVERWRITE, NULL);
    cr_assert_eq(sb_io_sink_prepare(&o, &e), 0, "%s", e.msg); /* makes the directory */
    FILE *f = fopen(out_path("_manifest.json"), "w");
    fputs("{\"format\": \"jsonl\", \"parts\": [{\"name\": \"../x\", \"rows\": 1, \"bytes\": 2, "
          "\"crc32c\": 3}]}",
          f);
    fclose(f);
    sb_sink_spec a = mode_spec(SB_SINK_APPEND, "0a");
    cr_assert_neq(sb_io_sink_commit(&a, NULL, 0, NULL, 0, &e), 0);
    cr_expect(strstr(e.msg, "_manifest.json: parts[0]") != NULL, "%s", e.msg);
    f = fopen(out_path("_manifest.json"), "w");
    fputs("{\"format\": \"csv\", \"parts\": []}", f);
    fclose(f);
    cr_assert_neq(sb_io_sink_commit(&a, NULL, 0, NULL, 0, &e), 0);
    cr_expect(strstr(e.msg, "format csv") != NULL, "%s", e.msg);
}

Test(sink, error_if_exists_refuses_any_file_but_an_unfinished_runs)
{
    sb_err e;
    sb_sink_spec x = mode_spec(SB_SINK_ERROR_IF_EXISTS, NULL);
    cr_assert_eq(sb_io_sink_prepare(&x, &e), 0, "a missing directory: %s", e.msg);
    const char *r[] = {"{}"};
    write_part(&x, "s1-t0-p0", r, 1, NULL); /* its own part: a resumed run prepares again */
    cr_assert_eq(sb_io_sink_prepare(&x, &e), 0, "%s", e.msg);
    touch("data.csv");
    cr_assert_neq(sb_io_sink_prepare(&x, &e), 0);
    cr_expect(e.permanent, "refused for good, not retried");
    cr_expect(strstr(e.msg, "errorIfExists") != NULL && strstr(e.msg, "data.csv") != NULL, "%s",
              e.msg);
    cr_assert_eq(unlink(out_path("data.csv")), 0);
    touch("_SUCCESS");
    cr_assert_neq(sb_io_sink_prepare(&x, &e), 0, "a committed sink");
}

Test(sink, ignore_leaves_a_committed_sink_alone)
{
    sb_err e;
    const char *r[] = {"{\"k\":1}"};
    sb_io_part_info in;
    sb_sink_spec o = mode_spec(SB_SINK_OVERWRITE, NULL);
    cr_assert_eq(sb_io_sink_prepare(&o, &e), 0, "%s", e.msg);
    write_part(&o, "s1-t0-p0", r, 1, &in);
    cr_assert_eq(sb_io_sink_commit(&o, &in, 1, NULL, 0, &e), 0, "%s", e.msg);
    char before[1024], after[1024];
    size_t n1, n2;
    char *m1 = slurp(out_path("_manifest.json"), &n1);
    listing(before, sizeof before);
    sb_sink_spec g = mode_spec(SB_SINK_IGNORE, NULL);
    int yes = 0;
    cr_assert_eq(sb_io_sink_committed(&g, &yes, &e), 0, "%s", e.msg);
    cr_expect(yes);
    cr_assert_eq(sb_io_sink_prepare(&g, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_sink_commit(&g, NULL, 0, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_sink_abort(&g, &e), 0, "%s", e.msg);
    listing(after, sizeof after);
    char *m2 = slurp(out_path("_manifest.json"), &n2);
    cr_expect_str_eq(before, after);
    cr_expect(n1 == n2 && memcmp(m1, m2, n1) == 0, "the manifest changed");
    free(m1);
    free(m2);
    /* not committed: ignore runs like overwrite */
    cr_assert_eq(unlink(out_path("_SUCCESS")), 0);
    cr_assert_eq(sb_io_sink_committed(&g, &yes, &e), 0, "%s", e.msg);
    cr_expect_not(yes);
    cr_assert_eq(sb_io_sink_commit(&g, NULL, 0, NULL, 0, &e), 0, "%s", e.msg);
    cr_expect(exists("_SUCCESS"));
    cr_expect_not(exists(in.name), "an empty run's commit keeps no earlier part");
}

Test(sink, overwrite_removes_only_the_engines_parts)
{
    sb_err e;
    const char *r[] = {"{}"};
    sb_io_part_info in;
    sb_sink_spec o = mode_spec(SB_SINK_OVERWRITE, NULL);
    sb_sink_spec a = mode_spec(SB_SINK_APPEND, "0123456789ab");
    write_part(&a, "s1-t0-p0", r, 1, NULL); /* an earlier append run's part */
    touch("part-00000.jsonl");              /* a user's, by a name we never write */
    touch("part-s1-t0-p0.jsonl.bak");
    write_part(&o, "s1-t1-p0", r, 1, &in);
    cr_assert_eq(sb_io_sink_commit(&o, &in, 1, NULL, 0, &e), 0, "%s", e.msg);
    char names[1024];
    listing(names, sizeof names);
    cr_expect_str_eq(names, "_SUCCESS,_manifest.json,part-00000.jsonl,part-s1-t0-p0.jsonl.bak,"
                            "part-s1-t1-p0.jsonl");
}

Test(sink, run_tags)
{
    char t[SB_SINK_PART_TAG_MAX], u[SB_SINK_PART_TAG_MAX];
    sb_err e;
    cr_assert_eq(sb_io_sink_tag_new(t, &e), 0);
    cr_assert_eq(sb_io_sink_tag_new(u, &e), 0);
    cr_expect_eq(strlen(t), 12);
    cr_expect_str_neq(t, u);
    cr_assert_eq(sb_io_sink_tag_from_uid("6F1e2d3c-4b5a-4978-8f9e-0d1c2b3a4f5e", t, &e), 0);
    cr_expect_str_eq(t, "6f1e2d3c4b5a");
    cr_expect_eq(sb_io_sink_tag_check(t, SB_SINK_APPEND, &e), 0);
    cr_expect_neq(sb_io_sink_tag_check(t, SB_SINK_OVERWRITE, &e), 0);
    cr_expect_neq(sb_io_sink_tag_check("", SB_SINK_APPEND, &e), 0);
    cr_expect_neq(sb_io_sink_tag_check("../x", SB_SINK_APPEND, &e), 0);
    cr_expect_eq(sb_io_sink_tag_check(NULL, SB_SINK_IGNORE, &e), 0);
    cr_expect_neq(sb_io_sink_tag_from_uid("abc", t, &e), 0);
}

/* Two attempts of one sink task (a speculative copy beside its original, issue 42), as the
 * worker drives them: each writes its parts staged under its attempt's name, hidden from readers;
 * the attempt whose report the controller accepted publishes them, the other discards its own.
 * The loser writes different bytes (a non-deterministic op), so the output shows whose part it
 * is. */
static void write_staged(const sb_sink_spec *s, const char *id, uint32_t attempt,
                         const char *const *recs, size_t n, sb_io_part_info *info)
{
    size_t len;
    void *blob = make_part(SB_TYPE_UTF8, recs, n, &len);
    sb_err e;
    cr_assert_eq(sb_io_sink_write_staged(s, id, attempt, blob, len, info, &e), 0, "%s", e.msg);
    sb_part_free(blob);
}

Test(sink, staged_attempts_only_the_accepted_one_is_published)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *won[] = {"{\"a\":1}", "{\"a\":2}"}, *lost[] = {"{\"a\":9}", "{\"a\":8}"};
    sb_io_part_info wi, li;
    write_staged(&s, "s0-t0-p0", 1, won, 2, &wi); /* the copy, attempt 1, finishes first */
    cr_expect_str_eq(wi.name, "part-s0-t0-p0.jsonl", "info names the final part");
    cr_expect(!exists("part-s0-t0-p0.jsonl"), "nothing visible before the report is accepted");
    cr_expect(exists(".sbatt-1-part-s0-t0-p0.jsonl"));
    cr_assert_eq(sb_io_sink_publish_staged(&s, "s0-t0-p0", 1, &e), 0, "%s", e.msg);
    /* the original, attempt 0, finishes later: its report is stale, it discards its part */
    write_staged(&s, "s0-t0-p0", 0, lost, 2, &li);
    cr_assert_eq(sb_io_sink_discard_staged(&s, "s0-t0-p0", 0, &e), 0, "%s", e.msg);
    cr_expect_eq(sb_io_sink_publish_staged(&s, "s0-t0-p0", 0, &e), 1, "nothing left to publish");
    char l[1024];
    listing(l, sizeof l);
    cr_expect_str_eq(l, "part-s0-t0-p0.jsonl");
    cr_assert_eq(sb_io_sink_commit(&s, &wi, 1, NULL, 0, &e), 0, "%s", e.msg);
    size_t n;
    char *got = slurp(out_path("part-s0-t0-p0.jsonl"), &n);
    cr_expect_str_eq(got, "{\"a\":1}\n{\"a\":2}\n", "the accepted attempt's bytes");
    free(got);
    listing(l, sizeof l);
    cr_expect_str_eq(l, "_SUCCESS,_manifest.json,part-s0-t0-p0.jsonl");
}

/* The accepted attempt's worker died before publishing (or the commit ran first): the commit
 * publishes the staged part with the listed size and CRC, not the loser's of the same size, and
 * removes every other staged file; a loser killed mid-write leaves nothing a reader sees. */
Test(sink, commit_publishes_the_listed_attempts_staged_part_and_removes_the_others)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *won[] = {"{\"a\":1}"}, *lost[] = {"{\"a\":9}"}, *other[] = {"{\"b\":3}"};
    sb_io_part_info wi, li, oi[2];
    write_staged(&s, "s0-t0-p0", 0, lost, 1, &li); /* same size, other bytes */
    write_staged(&s, "s0-t0-p0", 2, won, 1, &wi);
    cr_assert_eq(li.bytes, wi.bytes);
    cr_assert_neq(li.crc32c, wi.crc32c);
    write_staged(&s, "s0-t1-p0", 0, other, 1, &oi[1]);
    cr_assert_eq(sb_io_sink_publish_staged(&s, "s0-t1-p0", 0, &e), 0, "%s", e.msg);
    oi[0] = wi;
    /* a loser killed mid-write: its temporary file */
    cr_assert_eq(sb_io_put(out_path(".sbtmp-dead"), "{\"a\":", 5, &e), 0, "%s", e.msg);
    /* readers of the directory see only published parts */
    sb_io_obj *objs = NULL;
    size_t nobjs = 0;
    cr_assert_eq(sb_io_list(g_uri, SB_IO_LIST_DIR, &objs, &nobjs, &e), 0, "%s", e.msg);
    cr_expect_eq(nobjs, 1, "staged and temporary files are hidden");
    sb_io_objs_free(objs, nobjs);
    cr_assert_eq(sb_io_sink_commit(&s, oi, 2, NULL, 0, &e), 0, "%s", e.msg);
    char l[1024];
    listing(l, sizeof l);
    cr_expect_str_eq(l, "_SUCCESS,_manifest.json,part-s0-t0-p0.jsonl,part-s0-t1-p0.jsonl");
    size_t n;
    char *got = slurp(out_path("part-s0-t0-p0.jsonl"), &n);
    cr_expect_str_eq(got, "{\"a\":1}\n", "the listed attempt's bytes, chosen by CRC");
    free(got);
    char *man = slurp(out_path("_manifest.json"), &n);
    cr_expect_not_null(strstr(man, "part-s0-t0-p0.jsonl"));
    cr_expect_null(strstr(man, "sbatt"), "the manifest names final parts only");
    free(man);
    /* a listed part with no file and no staged one still fails the commit */
    sb_io_part_info gone = wi;
    snprintf(gone.name, sizeof gone.name, "part-s0-t9-p0.jsonl");
    cr_expect_eq(sb_io_sink_commit(&s, &gone, 1, NULL, 0, &e), -1);
    /* abort removes staged parts as well */
    write_staged(&s, "s0-t5-p0", 3, won, 1, NULL);
    cr_assert_eq(sb_io_sink_abort(&s, &e), 0, "%s", e.msg);
    cr_expect(!exists(".sbatt-3-part-s0-t5-p0.jsonl"));
}

/* Overwrite mode: an earlier run's part has the name, and this run's winning attempt is still
 * staged when the commit runs (its worker publishes right after its report is accepted, and the
 * commit may come first): the commit publishes the staged part over the earlier one. It failed
 * before ("has 20 bytes, reported 8"). */
Test(sink, commit_publishes_a_staged_part_over_an_earlier_runs)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *old[] = {"{\"old\":1}", "{\"old\":2}"}, *cur[] = {"{\"a\":1}"};
    sb_io_part_info oi, ci;
    write_part(&s, "s0-t0-p0", old, 2, &oi);
    cr_assert_eq(sb_io_sink_commit(&s, &oi, 1, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg); /* the next run */
    write_staged(&s, "s0-t0-p0", 0, cur, 1, &ci);
    cr_assert_neq(ci.bytes, oi.bytes);
    cr_assert_eq(sb_io_sink_commit(&s, &ci, 1, NULL, 0, &e), 0, "%s", e.msg);
    size_t n;
    char *got = slurp(out_path("part-s0-t0-p0.jsonl"), &n);
    cr_expect_str_eq(got, "{\"a\":1}\n", "this run's part");
    free(got);
    char l[1024];
    listing(l, sizeof l);
    cr_expect_str_eq(l, "_SUCCESS,_manifest.json,part-s0-t0-p0.jsonl");
}

/* The names in the sink directory that start with ".sbtmp-" (temporary files), counted. */
static int tmp_files(void)
{
    char l[2048];
    listing(l, sizeof l);
    int n = 0;
    for (const char *p = l; (p = strstr(p, ".sbtmp-")) != NULL; p++)
        n++;
    return n;
}

/* A prepare, an abort or a commit of the directory while a task still writes its part there (a
 * second prepare, a speculative copy's loser beside the commit, an attempt whose cancel has not
 * reached its worker): the cleanup removed every ".sbtmp-*" file, the writer's too, and its
 * rename failed ("renaming .../.sbtmp-<pid>-<seq>-.sbatt-1-part-s0-t0-p0.jsonl to ...: No such
 * file or directory": the task failed and ran again). Only a dead writer's file goes now. */
Test(sink, cleanup_leaves_a_live_writers_temporary_file)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    FILE *f = fopen(out_path(".sbtmp-77-0-part-s0-t9-p0.jsonl"), "w"); /* a dead writer's */
    cr_assert_not_null(f);
    fclose(f);
    sb_io_wr *h = NULL;
    cr_assert_eq(sb_io_write_open(out_path(".sbatt-1-part-s0-t0-p0.jsonl"), &h, &e), 0, "%s",
                 e.msg);
    cr_assert_eq(sb_io_write(h, "{\"a\":1}\n", 8, &e), 0, "%s", e.msg);
    cr_assert_eq(tmp_files(), 2);
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    cr_expect_eq(tmp_files(), 1, "the dead writer's file goes, the live one's stays");
    cr_assert_eq(sb_io_sink_abort(&s, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_write(h, "{\"a\":2}\n", 8, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_write_commit(h, &e), 0, "the writer's rename: %s", e.msg);
    size_t n;
    char *got = slurp(out_path(".sbatt-1-part-s0-t0-p0.jsonl"), &n);
    cr_expect_str_eq(got, "{\"a\":1}\n{\"a\":2}\n");
    free(got);
    cr_expect_eq(tmp_files(), 0);
    /* an aborted writer removes its own file; the commit's cleanup spares one still writing */
    cr_assert_eq(sb_io_write_open(out_path("part-s0-t1-p0.jsonl"), &h, &e), 0, "%s", e.msg);
    sb_io_write_abort(h);
    cr_expect_eq(tmp_files(), 0);
    cr_assert_eq(sb_io_write_open(out_path(".sbatt-2-part-s0-t0-p0.jsonl"), &h, &e), 0, "%s",
                 e.msg);
    cr_assert_eq(sb_io_sink_commit(&s, NULL, 0, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(tmp_files(), 1);
    cr_assert_eq(sb_io_write_commit(h, &e), 0, "a late loser's rename: %s", e.msg);
}

/* A writer killed mid-write (a worker SIGKILLed, or OOM-killed) holds nothing: its temporary
 * file is garbage that the next cleanup removes, as before. */
Test(sink, cleanup_removes_a_killed_writers_temporary_file)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        sb_io_wr *h = NULL;
        sb_err ce;
        if (sb_io_write_open(out_path("part-s0-t0-p0.jsonl"), &h, &ce) != 0 ||
            sb_io_write(h, "{}\n", 3, &ce) != 0)
            _exit(1);
        (void)!write(fds[1], "w", 1);
        for (;;)
            pause();
    }
    close(fds[1]);
    char c = 0;
    cr_assert_eq(read(fds[0], &c, 1), 1, "the child opened its writer");
    close(fds[0]);
    cr_assert_eq(tmp_files(), 1);
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    cr_expect_eq(tmp_files(), 1, "a live writer in another process keeps its file");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    cr_expect_eq(tmp_files(), 0, "the killed writer's file is removed");
}

/* A file that goes between the commit's readdir and its stat (a speculative copy's loser
 * discarding its staged part, or a winner publishing one, while the commit lists the directory;
 * a dangling link is the same to the listing): it is skipped, and the listing goes on. The stat's
 * ENOENT stayed in errno, so the end of the directory read as a readdir error and the commit
 * failed ("reading directory .../out-s2: No such file or directory", test_run_allops s2) when no
 * regular file came after it. */
Test(sink, a_file_gone_while_the_commit_lists_the_directory)
{
    sb_sink_spec s = spec(SB_FMT_JSONL, NULL);
    sb_err e;
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    /* only the vanished file (any readdir order then ends past it) */
    cr_assert_eq(symlink(out_path("gone"), out_path(".sbatt-2-part-s0-t0-p0.jsonl")), 0);
    sb_io_obj *objs = NULL;
    size_t nobjs = 9;
    cr_assert_eq(sb_io_list(g_uri, SB_IO_LIST_ALL | SB_IO_LIST_DIR, &objs, &nobjs, &e), 0, "%s",
                 e.msg);
    cr_expect_eq(nobjs, 0);
    sb_io_objs_free(objs, nobjs);
    cr_assert_eq(sb_io_sink_commit(&s, NULL, 0, NULL, 0, &e), 0, "%s", e.msg);
    /* beside the winner's part, still staged (the commit publishes it) */
    cr_assert_eq(sb_io_sink_prepare(&s, &e), 0, "%s", e.msg);
    const char *won[] = {"{\"a\":1}"};
    sb_io_part_info wi;
    write_staged(&s, "s0-t0-p0", 1, won, 1, &wi);
    cr_assert_eq(sb_io_sink_commit(&s, &wi, 1, NULL, 0, &e), 0, "%s", e.msg);
    cr_expect(exists("part-s0-t0-p0.jsonl"));
}
