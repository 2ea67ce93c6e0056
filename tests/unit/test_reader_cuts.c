/* Unit tests of where the split reader (lib/io/reader.c) cuts a file into partitions: the same
 * lines must make the same partitions (rows and bytes of each) however the reads' buffers cut
 * the file (the pull reader's buffer is at most args.maxRecordSize bytes, so a small limit
 * means small reads; an S3 object arrives in the HTTP client's buffers), since a lineage re-run
 * reads a split again and must remake the partition that was lost. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/reader.h"
#include "io/split.h"
#include "partition/partition.h"

TestSuite(reader_cuts, .timeout = 60);

#define MAXP 2048

typedef struct {
    size_t n, rows[MAXP], bytes[MAXP];
} cuts;

static int keep(void *blob, size_t len, uint64_t rows, void *ud)
{
    cuts *c = ud;
    cr_assert_lt(c->n, MAXP);
    c->rows[c->n] = rows;
    c->bytes[c->n++] = len;
    sb_part_free(blob);
    return 0;
}

/* A file of `lines` lines of 1..150 bytes (csv: a header row, then two columns). */
static void write_file(const char *path, sb_format fmt, size_t lines)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    if (fmt == SB_FMT_CSV)
        fprintf(f, "id,text\n");
    char s[160];
    for (size_t i = 0; i < lines; i++) {
        size_t n = (i * 7919u + (i / 50) * 97u) % 150u + 1;
        memset(s, 'a' + (int)(i % 26), n);
        s[n] = '\0';
        if (fmt == SB_FMT_CSV)
            fprintf(f, "%zu,%s\n", i, s);
        else if (fmt == SB_FMT_JSONL)
            fprintf(f, "{\"i\":%zu,\"s\":\"%s\"}\n%s", i, s, i % 11 == 0 ? "\n" : "");
        else
            fprintf(f, "%s\n", s);
    }
    fclose(f);
}

static void read_file(const char *path, sb_format fmt, const char *args, size_t target, cuts *c)
{
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    sb_io_split sp = {
        .path = (char *)path, .start = 0, .end = (uint64_t)size, .file_size = (uint64_t)size};
    sb_err e;
    cr_assert_eq(sb_io_read_split(&sp, fmt, args, target, keep, c, &e), 0, "%s", e.msg);
}

Test(reader_cuts, same_lines_same_partitions_whatever_the_read_sizes)
{
    static const sb_format fmts[] = {SB_FMT_TEXT, SB_FMT_JSONL, SB_FMT_CSV};
    static const char *const args[] = {"{\"maxRecordSize\": 1021}", "{\"maxRecordSize\": 333}",
                                       "{\"maxRecordSize\": 4099}"};
    static cuts ref, got;
    char path[] = "/tmp/sb-reader-cuts-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    for (size_t fi = 0; fi < 3; fi++) {
        write_file(path, fmts[fi], 4000);
        read_file(path, fmts[fi], "{}", 16384, &ref);
        cr_assert_gt(ref.n, 10u);
        for (size_t p = 0; p + 1 < ref.n; p++)
            cr_assert_geq(ref.bytes[p], 16384u, "format %zu: partition %zu of %zu bytes", fi, p,
                          ref.bytes[p]);
        for (size_t a = 0; a < 3; a++) {
            read_file(path, fmts[fi], args[a], 16384, &got);
            cr_assert_eq(ref.n, got.n, "format %zu, %s: %zu partitions, then %zu", fi, args[a],
                         ref.n, got.n);
            for (size_t p = 0; p < ref.n; p++) {
                cr_assert_eq(ref.rows[p], got.rows[p],
                             "format %zu, %s: partition %zu has %zu rows, then %zu", fi, args[a], p,
                             ref.rows[p], got.rows[p]);
                cr_assert_eq(ref.bytes[p], got.bytes[p],
                             "format %zu, %s: partition %zu has %zu bytes, then %zu", fi, args[a],
                             p, ref.bytes[p], got.bytes[p]);
            }
        }
    }
    unlink(path);
}
