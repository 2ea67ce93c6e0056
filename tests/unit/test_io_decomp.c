/* Unit tests of compressed text inputs (lib/io/decomp.c, the reader's compressed path and the
 * planner's one-split rule): files compressed by the gzip and zstd command-line tools (not by
 * our code) read exactly as their plain text does, concatenated members and frames included;
 * corrupt, truncated and trailing-garbage files are data errors naming the file and the
 * compressed byte offset; a compressed file is never cut into byte ranges. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/decomp.h"
#include "io/reader.h"
#include "io/split.h"
#include "partition/partition.h"

TestSuite(decomp, .timeout = 60);

static char dir[] = "/tmp/sb-decomp-XXXXXX";

static void setup(void)
{
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

#define MAXP 4096
typedef struct {
    size_t n;
    uint64_t rows;
    size_t bytes[MAXP];
} cuts;

static int keep(void *blob, size_t len, uint64_t rows, void *ud)
{
    cuts *c = ud;
    cr_assert_lt(c->n, MAXP);
    c->bytes[c->n++] = len;
    c->rows += rows;
    sb_part_free(blob);
    return 0;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    return (uint64_t)st.st_size;
}

/* Reads path whole as one split; 0 with *c filled, or -1 with *e. */
static int read_whole(const char *path, sb_format fmt, const char *args, cuts *c, sb_err *e)
{
    memset(c, 0, sizeof *c);
    uint64_t size = file_size(path);
    sb_io_split sp = {.path = (char *)path, .start = 0, .end = size, .file_size = size};
    return sb_io_read_split(&sp, fmt, args, 64 << 10, keep, c, e);
}

static void sh(const char *fmt, const char *a)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, a, a, a, a);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* dir/NAME with `lines` lines of varied length (csv: a header row first). */
static void write_plain(const char *name, sb_format fmt, size_t lines, size_t first)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    if (fmt == SB_FMT_CSV)
        fprintf(f, "id,text\n");
    char s[200];
    for (size_t i = first; i < first + lines; i++) {
        size_t n = (i * 7919u) % 180u + 1;
        memset(s, 'a' + (int)(i % 26), n);
        s[n] = '\0';
        if (fmt == SB_FMT_CSV)
            fprintf(f, "%zu,%s\n", i, s);
        else if (fmt == SB_FMT_JSONL)
            fprintf(f, "{\"i\":%zu,\"s\":\"%s\"}\n", i, s);
        else
            fprintf(f, "%s\n", s);
    }
    fclose(f);
}

static void expect_same(const cuts *a, const cuts *b, const char *what)
{
    cr_expect_eq(a->rows, b->rows, "%s: rows %lu vs %lu", what, (unsigned long)a->rows,
                 (unsigned long)b->rows);
    cr_expect_eq(a->n, b->n, "%s: partitions %zu vs %zu", what, a->n, b->n);
    for (size_t i = 0; i < a->n && i < b->n; i++)
        cr_expect_eq(a->bytes[i], b->bytes[i], "%s: partition %zu: %zu vs %zu bytes", what, i,
                     a->bytes[i], b->bytes[i]);
}

Test(decomp, gzip_and_zstd_read_as_their_plain_text, .init = setup, .fini = teardown)
{
    static const sb_format fmts[] = {SB_FMT_JSONL, SB_FMT_TEXT, SB_FMT_CSV};
    static const char *const names[] = {"d.jsonl", "d.txt", "d.csv"};
    static const char *const args[] = {NULL, NULL, "{\"header\": true}"};
    static cuts plain, gz, zst;
    for (int k = 0; k < 3; k++) {
        write_plain(names[k], fmts[k], 20000, 0);
        char p[256], g[256], z[256];
        snprintf(p, sizeof p, "%s/%s", dir, names[k]);
        snprintf(g, sizeof g, "%s.gz", p);
        snprintf(z, sizeof z, "%s.zst", p);
        sh("gzip -6 -k -c '%s' > '%s.gz' && zstd -q -3 -c '%s' > '%s.zst'", p);
        sb_err e;
        cr_assert_eq(read_whole(p, fmts[k], args[k], &plain, &e), 0, "%s", e.msg);
        cr_assert_eq(read_whole(g, fmts[k], args[k], &gz, &e), 0, "%s", e.msg);
        cr_assert_eq(read_whole(z, fmts[k], args[k], &zst, &e), 0, "%s", e.msg);
        cr_expect_eq(plain.rows, 20000, "%s: %lu rows", names[k], (unsigned long)plain.rows);
        cr_expect_gt(plain.n, 10, "several partitions: %zu", plain.n);
        expect_same(&plain, &gz, g);
        expect_same(&plain, &zst, z);
    }
}

Test(decomp, concatenated_members_and_frames_and_a_named_codec, .init = setup, .fini = teardown)
{
    static cuts plain, gz, zst, named;
    write_plain("a.jsonl", SB_FMT_JSONL, 3000, 0);
    write_plain("b.jsonl", SB_FMT_JSONL, 5000, 3000);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cat a.jsonl b.jsonl > ab.jsonl && gzip -c a.jsonl > m.gz && "
             "gzip -1 -c b.jsonl >> m.gz && zstd -q -c a.jsonl > m.zst && "
             "zstd -q -19 -c b.jsonl >> m.zst && cp m.gz gz-without-suffix",
             dir);
    cr_assert_eq(system(cmd), 0);
    char p[256];
    sb_err e;
    snprintf(p, sizeof p, "%s/ab.jsonl", dir);
    cr_assert_eq(read_whole(p, SB_FMT_JSONL, NULL, &plain, &e), 0, "%s", e.msg);
    snprintf(p, sizeof p, "%s/m.gz", dir);
    cr_assert_eq(read_whole(p, SB_FMT_JSONL, NULL, &gz, &e), 0, "%s", e.msg);
    snprintf(p, sizeof p, "%s/m.zst", dir);
    cr_assert_eq(read_whole(p, SB_FMT_JSONL, NULL, &zst, &e), 0, "%s", e.msg);
    snprintf(p, sizeof p, "%s/gz-without-suffix", dir);
    cr_assert_eq(read_whole(p, SB_FMT_JSONL, "{\"compression\": \"gzip\"}", &named, &e), 0, "%s",
                 e.msg);
    cr_expect_eq(plain.rows, 8000);
    expect_same(&plain, &gz, "two gzip members");
    expect_same(&plain, &zst, "two zstd frames");
    expect_same(&plain, &named, "args.compression: gzip");
    /* "none" reads the compressed bytes as text: not UTF-8, a data error */
    snprintf(p, sizeof p, "%s/m.gz", dir);
    cr_expect_neq(read_whole(p, SB_FMT_JSONL, "{\"compression\": \"none\"}", &named, &e), 0);
    cr_expect_neq(read_whole(p, SB_FMT_JSONL, "{\"compression\": \"lzma\"}", &named, &e), 0);
    cr_expect(strstr(e.msg, "args.compression") != NULL, "%s", e.msg);
}

/* Rewrites path with byte `at` xor'ed, or cut to `len` bytes, or with `extra` appended. */
static void damage(const char *path, long at, long len, const char *extra)
{
    FILE *f = fopen(path, "r+");
    cr_assert_not_null(f);
    if (at >= 0) {
        fseek(f, at, SEEK_SET);
        int c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ 0x5a, f);
    }
    if (extra != NULL) {
        fseek(f, 0, SEEK_END);
        fputs(extra, f);
    }
    fclose(f);
    if (len >= 0)
        cr_assert_eq(truncate(path, len), 0);
}

Test(decomp, corrupt_truncated_and_trailing_garbage_are_data_errors, .init = setup,
     .fini = teardown)
{
    write_plain("x.jsonl", SB_FMT_JSONL, 20000, 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && for n in c t g; do gzip -c x.jsonl > $n.jsonl.gz; "
             "zstd -q -c x.jsonl > $n.jsonl.zst; done",
             dir);
    cr_assert_eq(system(cmd), 0);
    static const char *const ext[] = {"gz", "zst"};
    for (int k = 0; k < 2; k++) {
        char c[256], t[256], g[256];
        snprintf(c, sizeof c, "%s/c.jsonl.%s", dir, ext[k]);
        snprintf(t, sizeof t, "%s/t.jsonl.%s", dir, ext[k]);
        snprintf(g, sizeof g, "%s/g.jsonl.%s", dir, ext[k]);
        long size = (long)file_size(c);
        damage(c, size / 2, -1, NULL);
        damage(t, -1, size / 2, NULL);
        damage(g, -1, -1, "not a member\n");
        static cuts got;
        sb_err e;
        cr_expect_neq(read_whole(c, SB_FMT_JSONL, NULL, &got, &e), 0, "%s read", c);
        cr_expect(e.data, "a corrupt file is a data error: %s", e.msg);
        cr_expect(strstr(e.msg, c) != NULL && strstr(e.msg, "compressed byte offset") != NULL, "%s",
                  e.msg);
        cr_expect_neq(read_whole(t, SB_FMT_JSONL, NULL, &got, &e), 0, "%s read", t);
        cr_expect(e.data && strstr(e.msg, "truncated") != NULL && strstr(e.msg, t) != NULL, "%s",
                  e.msg);
        cr_expect_neq(read_whole(g, SB_FMT_JSONL, NULL, &got, &e), 0, "%s read", g);
        cr_expect(e.data && strstr(e.msg, g) != NULL, "%s", e.msg);
    }
}

Test(decomp, a_long_line_names_the_decompressed_offset, .init = setup, .fini = teardown)
{
    char p[256];
    snprintf(p, sizeof p, "%s/long.txt", dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("short\n", f);
    for (int i = 0; i < 5000; i++)
        fputc('x', f);
    fputs("\n", f);
    fclose(f);
    sh("gzip '%s'", p);
    strcat(p, ".gz");
    static cuts got;
    sb_err e;
    cr_expect_neq(read_whole(p, SB_FMT_TEXT, "{\"maxRecordSize\": 1024}", &got, &e), 0);
    cr_expect(strstr(e.msg, "(decompressed gzip): byte offset 6") != NULL, "%s", e.msg);
}

Test(decomp, a_compressed_split_from_an_offset_is_refused, .init = setup, .fini = teardown)
{
    write_plain("o.jsonl", SB_FMT_JSONL, 1000, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/o.jsonl", dir);
    sh("gzip '%s'", p);
    strcat(p, ".gz");
    uint64_t size = file_size(p);
    sb_io_split sp = {.path = p, .start = size / 2, .end = size, .file_size = size};
    static cuts got;
    memset(&got, 0, sizeof got);
    sb_err e;
    cr_expect_neq(sb_io_read_split(&sp, SB_FMT_JSONL, NULL, 1 << 16, keep, &got, &e), 0);
    cr_expect(strstr(e.msg, "one split") != NULL, "%s", e.msg);
    cr_expect_eq(got.rows, 0);
}

Test(decomp, the_planner_never_cuts_a_compressed_file, .init = setup, .fini = teardown)
{
    write_plain("big.jsonl", SB_FMT_JSONL, 20000, 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && gzip -1 -c big.jsonl > big2.jsonl.gz && zstd -q -1 -c big.jsonl > "
             "big3.jsonl.ZST && gzip -1 -c big.jsonl > big4.data",
             dir);
    cr_assert_eq(system(cmd), 0);
    char uri[300];
    snprintf(uri, sizeof uri, "file://%s", dir);
    sb_source_spec src = {.uri = uri, .format = SB_FMT_JSONL, .partition_size = 64 << 10};
    sb_io_split *v = NULL;
    size_t n = 0;
    sb_err e;
    cr_assert_eq(sb_io_plan_splits(&src, &v, &n, &e), 0, "%s", e.msg);
    size_t per[4] = {0};
    for (size_t i = 0; i < n; i++) {
        const char *b = strrchr(v[i].path, '/') + 1;
        int k = strcmp(b, "big.jsonl") == 0        ? 0
                : strcmp(b, "big2.jsonl.gz") == 0  ? 1
                : strcmp(b, "big3.jsonl.ZST") == 0 ? 2
                                                   : 3;
        per[k]++;
        if (k == 1 || k == 2)
            cr_expect(v[i].start == 0 && v[i].end == v[i].file_size, "%s cut", b);
    }
    cr_expect_gt(per[0], 10, "the plain file is cut: %zu splits", per[0]);
    cr_expect_eq(per[1], 1, "the .gz file: %zu splits", per[1]);
    cr_expect_eq(per[2], 1, "the .ZST file: %zu splits", per[2]);
    cr_expect_gt(per[3], 1, "no suffix, auto: cut as text (%zu)", per[3]);
    sb_io_splits_free(v, n);
    src.args_json = "{\"compression\": \"gzip\"}";
    cr_assert_eq(sb_io_plan_splits(&src, &v, &n, &e), 0, "%s", e.msg);
    cr_expect_eq(n, 4, "args.compression gzip: every file one split (%zu)", n);
    sb_io_splits_free(v, n);
}

Test(decomp, codec_by_name)
{
    cr_expect_eq(sb_io_codec_for(-1, "/a/b.jsonl.gz"), SB_IO_CODEC_GZIP);
    cr_expect_eq(sb_io_codec_for(-1, "s3://b/k.csv.zstd"), SB_IO_CODEC_ZSTD);
    cr_expect_eq(sb_io_codec_for(-1, "https://h/x.jsonl.gz?X-Amz-Signature=1"), SB_IO_CODEC_GZIP);
    cr_expect_eq(sb_io_codec_for(-1, "https://h/x.jsonl?name=y.gz"), SB_IO_CODEC_NONE);
    cr_expect_eq(sb_io_codec_for(-1, "s3://b/x.jsonl?v.gz"), SB_IO_CODEC_GZIP,
                 "an S3 key may hold '?': all of it is the name");
    cr_expect_eq(sb_io_codec_for(SB_IO_CODEC_NONE, "/a.gz"), SB_IO_CODEC_NONE);
    cr_expect_eq(sb_io_codec_for(SB_IO_CODEC_ZSTD, "/a"), SB_IO_CODEC_ZSTD);
    int a = 0;
    sb_err e;
    cr_expect_eq(sb_io_compression_arg("{\"compression\": \"auto\"}", &a, &e), 0);
    cr_expect_eq(a, -1);
    cr_expect_neq(sb_io_compression_arg("{\"compression\": 3}", &a, &e), 0);
}
