/* Small files grouped into splits (lib/io/split.h, "coalescing small files"): the grouping
 * rules, the multi-piece encoding (strict decoder), and reading a split of several files into
 * the same partitions (every record once, in listing order; csv headers per file). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/reader.h"
#include "io/split.h"
#include "partition/partition.h"
#include "testutil.h"

static char g_dir[256];

static void setup(void)
{
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-io-group");
    cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        perror("rm");
}

TestSuite(io_group, .init = setup, .fini = teardown, .timeout = 60);

static void write_named(const char *name, const char *text, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, n, f), n);
    fclose(f);
}

/* A file of exactly `bytes` bytes (>= 16): one jsonl line {"f":<file>,"p":"xx..."}. */
static void write_sized(const char *name, int file, size_t bytes)
{
    char *buf = malloc(bytes + 1);
    int w = snprintf(buf, bytes + 1, "{\"f\":%d,\"p\":\"", file);
    memset(buf + w, 'x', bytes - (size_t)w - 3);
    memcpy(buf + bytes - 3, "\"}\n", 3);
    write_named(name, buf, bytes);
    free(buf);
}

/* groups of the directory's plan: first[] and the piece count */
static void plan_groups(sb_format fmt, int64_t ps, sb_io_split **sp, size_t *n, size_t **first,
                        size_t *ng)
{
    char uri[600];
    snprintf(uri, sizeof uri, "file://%s/", g_dir);
    sb_source_spec src = {.uri = uri, .format = fmt, .partition_size = ps};
    sb_err e = {0};
    cr_assert_eq(sb_io_plan_splits(&src, sp, n, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_io_plan_group(&src, *sp, *n, first, ng, &e), 0, "%s", e.msg);
}

Test(io_group, small_whole_files_share_splits_up_to_the_partition_size)
{
    /* a b c: 30 bytes each (90 <= 100: one split); d: 250 bytes (cut in 3, each alone);
     * e f: 60 + 50 > 100 (two splits); g: 40 joins f (90) */
    write_sized("a", 0, 30);
    write_sized("b", 1, 30);
    write_sized("c", 2, 30);
    write_sized("d", 3, 250);
    write_sized("e", 4, 60);
    write_sized("f", 5, 50);
    write_sized("g", 6, 40);
    sb_io_split *sp;
    size_t n, *first, ng;
    plan_groups(SB_FMT_JSONL, 100, &sp, &n, &first, &ng);
    cr_assert_eq(n, 3 + 3 + 3, "pieces: a b c, d in 3 ranges, e f g");
    size_t want[] = {0, 3, 4, 5, 6, 7};
    cr_assert_eq(ng, sizeof want / sizeof *want, "%zu groups", ng);
    for (size_t g = 0; g < ng; g++)
        cr_expect_eq(first[g], want[g], "group %zu starts at piece %zu", g, first[g]);
    free(first);
    /* images group alike (d is never cut: an image is read whole) */
    plan_groups(SB_FMT_IMAGE, 100, &sp, &n, &first, &ng);
    size_t want_img[] = {0, 3, 4, 5};
    cr_assert_eq(ng, sizeof want_img / sizeof *want_img, "%zu image groups", ng);
    for (size_t g = 0; g < ng; g++)
        cr_expect_eq(first[g], want_img[g], "image group %zu starts at piece %zu", g, first[g]);
    free(first);
    sb_io_splits_free(sp, n);
}

Test(io_group, at_most_256_files_per_split)
{
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%03d", i);
        write_named(name, "{}\n", 3);
    }
    sb_io_split *sp;
    size_t n, *first, ng;
    plan_groups(SB_FMT_JSONL, 1 << 20, &sp, &n, &first, &ng);
    cr_assert_eq(n, 300);
    cr_assert_eq(ng, 2);
    cr_expect_eq(first[1], SB_IO_MAX_FILES_PER_SPLIT);
    char *enc = sb_io_splits_encode(sp, SB_IO_MAX_FILES_PER_SPLIT, NULL);
    cr_assert_not_null(enc);
    cr_expect_leq(strlen(enc), SB_IO_SPLITS_ENCODED_MAX);
    free(enc);
    free(first);
    sb_io_splits_free(sp, n);
}

Test(io_group, at_most_64_images_per_split)
{
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "i%03d", i);
        write_named(name, "img", 3);
    }
    sb_io_split *sp;
    size_t n, *first, ng;
    plan_groups(SB_FMT_IMAGE, 1 << 20, &sp, &n, &first, &ng);
    cr_assert_eq(n, 300);
    cr_assert_eq(ng, 5, "300 images in splits of 64: %zu", ng);
    for (size_t g = 0; g < ng; g++)
        cr_expect_eq(first[g], g * SB_IO_MAX_IMAGES_PER_SPLIT);
    free(first);
    sb_io_splits_free(sp, n);
}

Test(io_group, encoding_round_trips_and_the_decoder_is_strict)
{
    sb_io_split p[3] = {{.path = "/d/a", .start = 0, .end = 5, .file_size = 5},
                        {.path = "/d/b\tc", .start = 0, .end = 7, .file_size = 7},
                        {.path = "s3://bk/x", .start = 0, .end = 1, .file_size = 1}};
    sb_err e = {0};
    char *enc = sb_io_splits_encode(p, 3, &e);
    cr_assert_not_null(enc, "%s", e.msg);
    cr_expect_str_eq(enc, "m\t3\t10\t0\t5\t5\t/d/a12\t0\t7\t7\t/d/b\tc15\t0\t1\t1\ts3://bk/x");
    sb_io_split *d;
    size_t n;
    cr_assert_eq(sb_io_splits_decode(enc, strlen(enc), &d, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(d[1].path, "/d/b\tc");
    cr_expect_eq(d[1].end, 7);
    sb_io_splits_free(d, n);
    free(enc);
    /* one piece: exactly the single-file form, and both decode */
    enc = sb_io_splits_encode(p, 1, &e);
    cr_expect_str_eq(enc, "0\t5\t5\t/d/a");
    cr_assert_eq(sb_io_splits_decode(enc, strlen(enc), &d, &n, &e), 0, "%s", e.msg);
    cr_expect_eq(n, 1);
    sb_io_splits_free(d, n);
    free(enc);
    const char *bad[][2] = {
        {"m\t1\t10\t0\t5\t5\t/d/a", "1 pieces in a multi-piece split"},
        {"m\t0\t", "0 pieces"},
        {"m\t2\t10\t0\t5\t5\t/d/a", "expected the piece length"},
        {"m\t2\t10\t0\t5\t5\t/d/a99\t0\t5\t5\t/d/a", "runs past the end"},
        {"m\t2\t10\t0\t5\t5\t/d/a10\t0\t5\t5\t/d/bX", "unexpected text after the last piece"},
        {"m\t2\t10\t0\t5\t5\t/d/a10\t5\t5\t5\t/d/b", "split piece 1"},
        {"m\t02\t", "expected the piece count"},
        {"m\t999\t", "the piece count is over 256"},
        {"m\t", "expected the piece count"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        d = (sb_io_split *)1;
        cr_expect_eq(sb_io_splits_decode(bad[i][0], strlen(bad[i][0]), &d, &n, &e), -1,
                     "accepted %s", bad[i][0]);
        cr_expect_null(d);
        cr_expect(strstr(e.msg, bad[i][1]) != NULL, "%s: %s", bad[i][0], e.msg);
    }
}

typedef struct {
    char text[8192];
    size_t len;
    int parts;
} got_t;

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    got_t *g = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, 0);
    for (size_t r = 0; r < rows; r++) {
        size_t n;
        const char *p = sb_column_binary(c, r, &n);
        cr_assert_lt(g->len + n + 1, sizeof g->text);
        memcpy(g->text + g->len, p, n);
        g->len += n;
        g->text[g->len++] = '\n';
    }
    g->text[g->len] = '\0';
    g->parts++;
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

Test(io_group, a_split_of_several_files_reads_each_once_in_order)
{
    write_named("1.jsonl", "{\"a\":1}\n{\"a\":2}\n", 16);
    write_named("2.jsonl", "{\"a\":3}", 7); /* no final newline */
    write_named("3.jsonl", "\n{\"a\":4}\n", 9);
    sb_io_split *sp;
    size_t n, *first, ng;
    plan_groups(SB_FMT_JSONL, 1 << 20, &sp, &n, &first, &ng);
    cr_assert_eq(ng, 1);
    got_t g = {0};
    sb_err e = {0};
    cr_assert_eq(sb_io_read_splits(sp, n, SB_FMT_JSONL, NULL, 1 << 20, collect, &g, &e), 0, "%s",
                 e.msg);
    cr_expect_str_eq(g.text, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n");
    cr_expect_eq(g.parts, 1, "one partition for the whole split");
    /* a file changed since planning is named */
    write_named("2.jsonl", "{\"a\":33}", 8);
    memset(&g, 0, sizeof g);
    cr_assert_eq(sb_io_read_splits(sp, n, SB_FMT_JSONL, NULL, 1 << 20, collect, &g, &e), -1);
    cr_expect(strstr(e.msg, "2.jsonl has 8 bytes, planned as 7") != NULL, "%s", e.msg);
    free(first);
    sb_io_splits_free(sp, n);
}

Test(io_group, csv_files_in_one_split_keep_their_own_headers)
{
    write_named("1.csv", "a,b\n1,2\n", 8);
    write_named("2.csv", "b,c\n3,4\n", 8);
    sb_io_split *sp;
    size_t n, *first, ng;
    plan_groups(SB_FMT_CSV, 1 << 20, &sp, &n, &first, &ng);
    cr_assert_eq(ng, 1);
    got_t g = {0};
    sb_err e = {0};
    cr_assert_eq(
        sb_io_read_splits(sp, n, SB_FMT_CSV, "{\"header\":true}", 1 << 20, collect, &g, &e), 0,
        "%s", e.msg);
    cr_expect_str_eq(g.text, "{\"a\":1,\"b\":2}\n{\"b\":3,\"c\":4}\n");
    free(first);
    sb_io_splits_free(sp, n);
}

/* Errors and the sink's _manifest.json named a failed split by its encoding ("0\t24\t24\t/in/a"):
 * sb_io_split_describe gives the file and range, several files as the first and a count, paths
 * and undecodable text bounded. */
Test(io_group, a_split_is_described_for_humans)
{
    char buf[200];
    cr_expect_str_eq(sb_io_split_describe("0\t24\t24\t/in/a.jsonl", buf, sizeof buf),
                     "/in/a.jsonl");
    cr_expect_str_eq(sb_io_split_describe("0\t4096\t9000\ts3://b/in/part-7.jsonl", buf, sizeof buf),
                     "s3://b/in/part-7.jsonl bytes 0-4096");
    cr_expect_str_eq(sb_io_split_describe("m\t3\t16\t0\t5\t5\t/d/a.jsonl16\t0\t5\t5\t/d/b.jsonl"
                                          "16\t0\t5\t5\t/d/c.jsonl",
                                          buf, sizeof buf),
                     "/d/a.jsonl and 2 more files");
    cr_expect_str_eq(sb_io_split_describe("m\t2\t16\t0\t5\t5\t/d/a.jsonl16\t0\t5\t5\t/d/b.jsonl",
                                          buf, sizeof buf),
                     "/d/a.jsonl and 1 more file");
    cr_expect_str_eq(sb_io_split_describe("7\tsplit-3", buf, sizeof buf), "7 split-3");
    /* a long path keeps its tail (the file name), the label stays bounded */
    char enc[600];
    int n = snprintf(enc, sizeof enc, "0\t10\t10\t/");
    for (int i = 0; i < 400; i++)
        enc[n++] = 'd';
    snprintf(enc + n, sizeof enc - (size_t)n, "/part-9.jsonl");
    sb_io_split_describe(enc, buf, sizeof buf);
    cr_expect(strlen(buf) <= 130, "%zu bytes: %s", strlen(buf), buf);
    cr_expect(strstr(buf, "part-9.jsonl") != NULL, "%s", buf);
    cr_expect(strchr(buf, '\t') == NULL, "%s", buf);
    /* a small buffer truncates */
    char small[8];
    sb_io_split_describe("0\t24\t24\t/in/a.jsonl", small, sizeof small);
    cr_expect_eq(strlen(small), 7);
}
