/* Unit tests of lib/io: split planning (files, directories, globs, binary alignment),
 * split encoding, and the split reader (line ownership across every boundary, CRLF, blank
 * lines, long lines, partition sizes, bad input). Each test works in its own mkdtemp()
 * directory and removes it. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partition/partition.h"
#include "io/reader.h"
#include "io/split.h"
#include "testutil.h"

static char g_dir[64];
static char g_cwd[4096];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    chmod(path, 0700);
    return remove(path);
}

static void setup(void)
{
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-test-io");
    cr_assert_not_null(mkdtemp(g_dir));
    cr_assert_not_null(getcwd(g_cwd, sizeof g_cwd));
}

static void teardown(void)
{
    if (chdir(g_cwd) != 0)
        perror("chdir");
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(io, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ---------------------------------------------------------------------------- */

static const char *path_in(const char *name)
{
    static char buf[8][512];
    static int slot;
    char *b = buf[slot++ % 8];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    if (n > 0)
        cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

typedef struct {
    char *p;
    size_t n;
} rec;

typedef struct {
    rec *v;
    size_t n, cap;
    size_t parts;
    size_t *plen; /* blob length of each partition */
    size_t *prows;
    size_t pcap;
    int refuse_at;      /* partition number (1-based) to refuse; 0: never */
    sb_err *refuse_err; /* when set, the refusal writes its cause there (the reader's err) */
    sb_type want_type;
} coll;

static void coll_add(coll *c, const void *p, size_t n)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->v = realloc(c->v, c->cap * sizeof *c->v);
        cr_assert_not_null(c->v);
    }
    c->v[c->n].p = malloc(n + 1);
    cr_assert_not_null(c->v[c->n].p);
    if (n > 0)
        memcpy(c->v[c->n].p, p, n);
    c->v[c->n].p[n] = '\0';
    c->v[c->n].n = n;
    c->n++;
}

static void coll_free(coll *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->v[i].p);
    free(c->v);
    free(c->plen);
    free(c->prows);
    memset(c, 0, sizeof *c);
}

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    coll *c = ud;
    c->parts++;
    if (c->parts > c->pcap) {
        c->pcap = c->pcap ? c->pcap * 2 : 16;
        c->plen = realloc(c->plen, c->pcap * sizeof *c->plen);
        c->prows = realloc(c->prows, c->pcap * sizeof *c->prows);
        cr_assert(c->plen != NULL && c->prows != NULL);
    }
    c->plen[c->parts - 1] = len;
    c->prows[c->parts - 1] = (size_t)rows;
    if (c->refuse_at != 0 && (int)c->parts == c->refuse_at) {
        sb_part_free(blob);
        if (c->refuse_err != NULL)
            return sb_err_set(c->refuse_err, "filter: record 5005 is not valid JSON at byte 47");
        return 7;
    }
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_rows(b), rows);
    cr_assert_gt(rows, 0, "empty partitions are never emitted");
    cr_assert_eq(sb_batch_ncols(b), 1);
    const sb_column *col = sb_batch_column(b, 0);
    cr_assert_str_eq(col->name, "record");
    cr_assert_eq(col->type, c->want_type ? c->want_type : SB_TYPE_UTF8);
    for (size_t r = 0; r < rows; r++) {
        size_t n;
        const void *p = sb_column_binary(col, r, &n);
        coll_add(c, p, n);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* The lines of s[0..n) by a straightforward reference rule: split at '\n', drop one '\r'
 * before it, a last line without '\n' counts; jsonl drops blank lines and a leading BOM. */
static void ref_lines(const char *s, size_t n, bool jsonl, coll *out)
{
    size_t i = 0;
    if (jsonl && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '\n')
            j++;
        size_t len = j - i;
        if (len > 0 && s[i + len - 1] == '\r')
            len--;
        bool blank = true;
        for (size_t k = i; k < i + len; k++)
            if (s[k] != ' ' && s[k] != '\t' && s[k] != '\r')
                blank = false;
        if (!(jsonl && blank))
            coll_add(out, s + i, len);
        i = j + 1;
    }
}

static void assert_same(const coll *got, const coll *want, const char *what)
{
    cr_assert_eq(got->n, want->n, "%s: %zu records, expected %zu", what, got->n, want->n);
    for (size_t i = 0; i < want->n; i++) {
        cr_assert_eq(got->v[i].n, want->v[i].n, "%s: record %zu has %zu bytes, expected %zu", what,
                     i, got->v[i].n, want->v[i].n);
        cr_assert(memcmp(got->v[i].p, want->v[i].p, want->v[i].n) == 0,
                  "%s: record %zu differs: \"%s\" vs \"%s\"", what, i, got->v[i].p, want->v[i].p);
    }
}

static int read_range(const char *path, uint64_t start, uint64_t end, uint64_t size, sb_format fmt,
                      const char *args, size_t target, coll *c, sb_err *e)
{
    sb_io_split sp = {.path = (char *)path, .start = start, .end = end, .file_size = size};
    return sb_io_read_split(&sp, fmt, args, target, collect, c, e);
}

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

/* Random lines: lengths 0..maxlen, some whitespace-only, multi-byte UTF-8, CRLF endings, and
 * sometimes no final newline. */
static char *random_lines(unsigned seed, size_t nlines, size_t maxlen, size_t *n_out)
{
    unsigned s = seed;
    size_t cap = nlines * (maxlen * 2 + 4) + 8, n = 0;
    char *b = malloc(cap);
    cr_assert_not_null(b);
    for (size_t l = 0; l < nlines; l++) {
        unsigned kind = rnd(&s) % 10;
        size_t len = kind == 0 ? 0 : rnd(&s) % (maxlen + 1);
        for (size_t k = 0; k < len; k++) {
            unsigned c = rnd(&s) % 20;
            if (kind == 1)
                b[n++] = c % 2 ? ' ' : '\t';
            else if (c == 0) {
                memcpy(b + n, "\xC3\xA9", 2); /* é */
                n += 2;
            } else if (c == 1)
                b[n++] = ' ';
            else if (c == 2)
                b[n++] = '{';
            else
                b[n++] = (char)('a' + c);
        }
        if (rnd(&s) % 4 == 0)
            b[n++] = '\r';
        if (l + 1 < nlines || rnd(&s) % 2 == 0)
            b[n++] = '\n';
    }
    *n_out = n;
    return b;
}

/* Lines of a text file counted another way: newlines, plus an unterminated last line. */
static size_t count_text_lines(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k + (n > 0 && s[n - 1] != '\n');
}

/* Reads the file as the tiling [0, c1) [c1, c2) ... [ck, n) and returns the records. */
static void read_tiling_args(const char *path, size_t n, const size_t *cuts, size_t ncuts,
                             sb_format fmt, const char *args, size_t target, coll *got)
{
    size_t prev = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        if (end == prev)
            continue;
        sb_err e;
        size_t parts0 = got->parts;
        cr_assert_eq(read_range(path, prev, end, n, fmt, args, target, got, &e), 0, "%s", e.msg);
        /* every partition but the last of a split reached the target */
        for (size_t p = parts0; p + 1 < got->parts; p++)
            cr_assert_geq(got->plen[p], target, "partition %zu: %zu bytes < target %zu", p,
                          got->plen[p], target);
        prev = end;
    }
}

static void read_tiling(const char *path, size_t n, const size_t *cuts, size_t ncuts, sb_format fmt,
                        size_t target, coll *got)
{
    read_tiling_args(path, n, cuts, ncuts, fmt, NULL, target, got);
}

/* ---- line ownership: every line exactly once, for every way of cutting the file -------- */

Test(io, every_boundary_reads_every_line_once)
{
    for (unsigned seed = 1; seed <= 12; seed++) {
        size_t n;
        char *data = random_lines(seed, 10 + seed % 7, seed % 3 == 0 ? 3 : 25, &n);
        const char *path = path_in("lines.txt");
        write_file(path, data, n);
        for (int f = 0; f < 2; f++) {
            sb_format fmt = f == 0 ? SB_FMT_TEXT : SB_FMT_JSONL;
            coll want = {0};
            ref_lines(data, n, fmt == SB_FMT_JSONL, &want);
            /* independent count: newlines, plus an unterminated last line (text) */
            if (fmt == SB_FMT_TEXT)
                cr_assert_eq(want.n, count_text_lines(data, n));
            /* two splits cut at every byte */
            for (size_t c = 1; c < n; c++) {
                coll got = {0};
                read_tiling(path, n, &c, 1, fmt, 1 << 20, &got);
                char what[64];
                snprintf(what, sizeof what, "seed %u fmt %d cut %zu", seed, f, c);
                assert_same(&got, &want, what);
                coll_free(&got);
            }
            /* uniform split sizes 1..n, with small partition targets */
            for (size_t sz = 1; sz <= n; sz++) {
                size_t ncuts = (n - 1) / sz;
                size_t *cuts = calloc(ncuts + 1, sizeof *cuts);
                for (size_t k = 0; k < ncuts; k++)
                    cuts[k] = (k + 1) * sz;
                coll got = {0};
                read_tiling(path, n, cuts, ncuts, fmt, 1 + (sz * 7) % 300, &got);
                char what[64];
                snprintf(what, sizeof what, "seed %u fmt %d size %zu", seed, f, sz);
                assert_same(&got, &want, what);
                coll_free(&got);
                free(cuts);
            }
            coll_free(&want);
        }
        free(data);
    }
}

Test(io, random_tilings_and_targets)
{
    unsigned s = 99;
    for (unsigned seed = 20; seed < 60; seed++) {
        size_t n;
        char *data = random_lines(seed, 5 + seed % 40, 60, &n);
        write_file(path_in("r.jsonl"), data, n);
        sb_format fmt = seed % 2 ? SB_FMT_TEXT : SB_FMT_JSONL;
        coll want = {0};
        ref_lines(data, n, fmt == SB_FMT_JSONL, &want);
        for (int t = 0; t < 20; t++) {
            size_t ncuts = rnd(&s) % 8, cuts[8];
            for (size_t k = 0; k < ncuts; k++)
                cuts[k] = rnd(&s) % (n + 1);
            for (size_t a = 1; a < ncuts; a++) /* sort */
                for (size_t b = a; b > 0 && cuts[b - 1] > cuts[b]; b--) {
                    size_t x = cuts[b];
                    cuts[b] = cuts[b - 1];
                    cuts[b - 1] = x;
                }
            coll got = {0};
            read_tiling(path_in("r.jsonl"), n, cuts, ncuts, fmt, 1 + rnd(&s) % 2000, &got);
            assert_same(&got, &want, "random tiling");
            coll_free(&got);
        }
        coll_free(&want);
        free(data);
    }
}

/* Lines longer than the 1 MiB read buffer, and many lines across several buffer refills. */
Test(io, long_lines_across_buffers)
{
    size_t big = (9u << 20) + 17, n = 0;
    size_t cap = big + (6u << 20);
    char *data = malloc(cap);
    cr_assert_not_null(data);
    memcpy(data + n, "first\n", 6);
    n += 6;
    memset(data + n, 'x', big);
    n += big;
    data[n++] = '\r';
    data[n++] = '\n';
    unsigned s = 5;
    while (n < cap - 200) {
        size_t len = rnd(&s) % 150;
        memset(data + n, 'a' + (int)(len % 26), len);
        n += len;
        data[n++] = '\n';
    }
    memcpy(data + n, "last", 4);
    n += 4;
    const char *path = path_in("big.txt");
    write_file(path, data, n);
    coll want = {0};
    ref_lines(data, n, false, &want);
    size_t cutsets[][3] = {
        {3, 6, 7}, /* inside "first", at the big line's start, inside it */
        {6 + big / 2, 6 + big, 6 + big + 1}, /* inside the big line, at its '\r', at its '\n' */
        {1u << 20, 5u << 20, 12u << 20},     /* 1 MiB, inside big, in the short lines */
        {6 + big + 2, n - 4, n - 1},         /* just after the big line, in "last" */
    };
    for (size_t k = 0; k < sizeof cutsets / sizeof *cutsets; k++) {
        coll got = {0};
        /* a 9 MiB line is over the default limit (4x the 1 MiB target): raise it */
        read_tiling_args(path, n, cutsets[k], 3, SB_FMT_TEXT, "{\"maxRecordSize\": 16777216}",
                         1u << 20, &got);
        assert_same(&got, &want, "long lines");
        cr_assert_eq(got.v[1].n, big);
        /* partitions pass the 1 MiB target by less than one line */
        for (size_t p = 0; p < got.parts; p++)
            cr_assert(got.plen[p] < (1u << 20) + 4096 ||
                          (got.plen[p] > big && got.plen[p] < big + (1u << 20) + 4096),
                      "partition %zu: %zu bytes", p, got.plen[p]);
        coll_free(&got);
    }
    /* Without maxRecordSize the 9 MiB line is refused (4 MiB limit) with file and offset,
     * whichever split holds its start; the read buffer never grew past the limit. */
    coll got = {0};
    sb_err e;
    cr_assert_eq(read_range(path, 0, n, n, SB_FMT_TEXT, NULL, 1u << 20, &got, &e), -1);
    cr_assert(strstr(e.msg, path) != NULL && strstr(e.msg, "byte offset 6") != NULL &&
                  strstr(e.msg, "longer than 4194304 bytes") != NULL &&
                  strstr(e.msg, "maxRecordSize") != NULL,
              "%s", e.msg);
    cr_assert(e.data, "a record over the limit is a data error (not retried)");
    coll_free(&got);
    coll_free(&want);
    free(data);
}

Test(io, crlf_blank_lines_bom_and_final_line)
{
    const char text[] = "\xEF\xBB\xBF{\"a\":1}\r\n\r\n  \t\n{\"b\":2}\n\n{\"c\":3}\r";
    const char *path = path_in("x.jsonl");
    write_file(path, text, sizeof text - 1);
    coll got = {0};
    sb_err e;
    cr_assert_eq(read_range(path, 0, sizeof text - 1, sizeof text - 1, SB_FMT_JSONL, NULL, 1 << 20,
                            &got, &e),
                 0, "%s", e.msg);
    cr_assert_eq(got.n, 3);
    cr_assert_str_eq(got.v[0].p, "{\"a\":1}");
    cr_assert_str_eq(got.v[1].p, "{\"b\":2}");
    cr_assert_str_eq(got.v[2].p, "{\"c\":3}");
    coll_free(&got);

    const char t2[] = "one\r\n\r\n\nfour\nfive";
    write_file(path, t2, sizeof t2 - 1);
    cr_assert_eq(
        read_range(path, 0, sizeof t2 - 1, sizeof t2 - 1, SB_FMT_TEXT, NULL, 1 << 20, &got, &e), 0,
        "%s", e.msg);
    const char *want[] = {"one", "", "", "four", "five"};
    cr_assert_eq(got.n, 5);
    for (size_t i = 0; i < 5; i++)
        cr_assert_str_eq(got.v[i].p, want[i]);
    cr_assert_eq(got.parts, 1);
    coll_free(&got);
}

/* Dynamic partitioning: 8 MiB of lines with a 1 MiB target. */
Test(io, partitions_reach_the_target)
{
    size_t n = 8u << 20;
    char *data = malloc(n);
    cr_assert_not_null(data);
    unsigned s = 11;
    size_t i = 0;
    while (i < n) {
        size_t len = 20 + rnd(&s) % 200;
        for (size_t k = 0; k < len && i < n - 1; k++)
            data[i++] = 'k';
        data[i++] = '\n';
    }
    const char *path = path_in("p.txt");
    write_file(path, data, n);
    coll got = {0};
    sb_err e;
    size_t target = 1u << 20;
    cr_assert_eq(read_range(path, 0, n, n, SB_FMT_TEXT, NULL, target, &got, &e), 0, "%s", e.msg);
    cr_assert_eq(got.n, count_text_lines(data, n));
    cr_assert_geq(got.parts, 8);
    for (size_t p = 0; p < got.parts; p++) {
        if (p + 1 < got.parts)
            cr_assert_geq(got.plen[p], target);
        cr_assert_lt(got.plen[p], target + 256 + 64, "partition %zu: %zu bytes", p, got.plen[p]);
    }
    coll_free(&got);
    free(data);
}

/* ---- binary --------------------------------------------------------------------------- */

Test(io, binary_splits_are_record_aligned)
{
    const size_t rs = 16, nrec = 37;
    unsigned char data[16 * 37];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 7 + i / 16);
    write_file(path_in("r.bin"), data, sizeof data);
    char uri[600];
    snprintf(uri, sizeof uri, "file://%s", path_in("r.bin"));
    for (int64_t ps = 1; ps <= 700; ps += 13) {
        sb_source_spec src = {.uri = uri,
                              .format = SB_FMT_BINARY,
                              .partition_size = ps,
                              .args_json = "{\"recordSize\":16}"};
        sb_io_split *sp;
        size_t n;
        sb_err e;
        cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), 0, "%s", e.msg);
        cr_assert_gt(n, 0);
        uint64_t prev = 0;
        coll got = {.want_type = SB_TYPE_BINARY};
        for (size_t k = 0; k < n; k++) {
            cr_assert_eq(sp[k].start, prev);
            cr_assert_eq(sp[k].start % rs, 0);
            cr_assert_eq(sp[k].end % rs, 0);
            cr_assert_gt(sp[k].end, sp[k].start);
            cr_assert(sp[k].end - sp[k].start <= (uint64_t)(ps < 16 ? 16 : ps + 16),
                      "split of %llu bytes for partitionSize %lld",
                      (unsigned long long)(sp[k].end - sp[k].start), (long long)ps);
            prev = sp[k].end;
            cr_assert_eq(
                sb_io_read_split(&sp[k], SB_FMT_BINARY, src.args_json, 50, collect, &got, &e), 0,
                "%s", e.msg);
        }
        cr_assert_eq(prev, sizeof data);
        cr_assert_eq(got.n, nrec);
        for (size_t r = 0; r < nrec; r++) {
            cr_assert_eq(got.v[r].n, rs);
            cr_assert(memcmp(got.v[r].p, data + r * rs, rs) == 0);
        }
        coll_free(&got);
        sb_io_splits_free(sp, n);
    }
}

Test(io, binary_ragged_file_is_an_error)
{
    char data[100] = {0};
    write_file(path_in("ragged.bin"), data, sizeof data);
    char uri[600];
    snprintf(uri, sizeof uri, "file://%s", path_in("ragged.bin"));
    sb_source_spec src = {.uri = uri,
                          .format = SB_FMT_BINARY,
                          .partition_size = 64,
                          .args_json = "{\"recordSize\":16}"};
    sb_io_split *sp = NULL;
    size_t n = 9;
    sb_err e;
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), -1);
    cr_assert_null(sp);
    cr_assert_eq(n, 0);
    cr_assert(strstr(e.msg, path_in("ragged.bin")) != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "100 bytes") != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "recordSize 16") != NULL, "%s", e.msg);

    src.args_json = NULL;
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), -1);
    cr_assert(strstr(e.msg, "recordSize") != NULL, "%s", e.msg);
    src.args_json = "{\"recordSize\":0}";
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), -1);
    cr_assert(strstr(e.msg, "recordSize must be an integer") != NULL, "%s", e.msg);

    /* a split not aligned to recordSize (hand-made, e.g. from a bad planner) */
    sb_io_split bad = {
        .path = (char *)path_in("ragged.bin"), .start = 8, .end = 40, .file_size = 100};
    coll got = {0};
    cr_assert_eq(
        sb_io_read_split(&bad, SB_FMT_BINARY, "{\"recordSize\":16}", 64, collect, &got, &e), -1);
    cr_assert(strstr(e.msg, "not aligned to recordSize 16") != NULL, "%s", e.msg);
    coll_free(&got);
}

/* ---- planning ------------------------------------------------------------------------- */

static void plan(const char *uri, sb_format fmt, int64_t ps, sb_io_split **sp, size_t *n)
{
    sb_source_spec src = {.uri = (char *)uri, .format = fmt, .partition_size = ps};
    sb_err e;
    cr_assert_eq(sb_io_plan_splits(&src, sp, n, &e), 0, "%s: %s", uri, e.msg);
}

static void plan_fails(const char *uri, sb_format fmt, const char *needle)
{
    sb_source_spec src = {.uri = (char *)uri, .format = fmt, .partition_size = 1 << 20};
    sb_io_split *sp = NULL;
    size_t n = 0;
    sb_err e;
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), -1, "%s planned", uri);
    cr_assert_null(sp);
    cr_assert(strstr(e.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", e.msg, needle);
}

Test(io, directory_listing_is_sorted_and_skips_hidden)
{
    mkdir(path_in("in"), 0755);
    mkdir(path_in("in/sub"), 0755);
    write_file(path_in("in/b.jsonl"), "{}\n", 3);
    write_file(path_in("in/a.jsonl"), "{}\n{}\n", 6);
    write_file(path_in("in/C.jsonl"), "{}\n", 3);
    write_file(path_in("in/_SUCCESS"), "", 0);
    write_file(path_in("in/_manifest.json"), "{}", 2);
    write_file(path_in("in/.hidden"), "x\n", 2);
    write_file(path_in("in/empty.jsonl"), "", 0);
    write_file(path_in("in/sub/z.jsonl"), "{}\n", 3);
    cr_assert_eq(symlink(path_in("in/a.jsonl"), path_in("in/link.jsonl")), 0);
    char uri[600];
    snprintf(uri, sizeof uri, "file://%s/", path_in("in"));
    sb_io_split *sp;
    size_t n;
    plan(uri, SB_FMT_JSONL, 1 << 20, &sp, &n);
    const char *want[] = {"in/C.jsonl", "in/a.jsonl", "in/b.jsonl", "in/link.jsonl"};
    cr_assert_eq(n, 4);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(sp[i].path, path_in(want[i]));
        cr_assert_eq(sp[i].start, 0);
        cr_assert_eq(sp[i].end, sp[i].file_size);
    }
    sb_io_splits_free(sp, n);

    /* glob: sorted matches; _SUCCESS skipped by '*', kept when the pattern asks for '_' */
    snprintf(uri, sizeof uri, "file://%s/*", path_in("in"));
    plan(uri, SB_FMT_JSONL, 1 << 20, &sp, &n);
    cr_assert_eq(n, 4); /* C, a, b, link (sub is a directory, empty has no split) */
    cr_assert_str_eq(sp[0].path, path_in("in/C.jsonl"));
    cr_assert_str_eq(sp[3].path, path_in("in/link.jsonl"));
    sb_io_splits_free(sp, n);
    snprintf(uri, sizeof uri, "file://%s/[ab].jsonl", path_in("in"));
    plan(uri, SB_FMT_JSONL, 1 << 20, &sp, &n);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(sp[0].path, path_in("in/a.jsonl"));
    cr_assert_str_eq(sp[1].path, path_in("in/b.jsonl"));
    sb_io_splits_free(sp, n);
    snprintf(uri, sizeof uri, "file://%s/_man*", path_in("in"));
    plan(uri, SB_FMT_JSONL, 1 << 20, &sp, &n);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(sp[0].path, path_in("in/_manifest.json"));
    sb_io_splits_free(sp, n);

    /* only empty files: zero splits, no error */
    snprintf(uri, sizeof uri, "file://%s", path_in("in/empty.jsonl"));
    plan(uri, SB_FMT_JSONL, 1 << 20, &sp, &n);
    cr_assert_eq(n, 0);
    cr_assert_null(sp);
}

Test(io, large_files_are_cut_near_partition_size)
{
    size_t n = 100000;
    char *data = malloc(n);
    cr_assert_not_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = i % 50 == 49 ? '\n' : 'q';
    write_file(path_in("big.txt"), data, n);
    char uri[600];
    snprintf(uri, sizeof uri, "file://%s", path_in("big.txt"));
    sb_io_split *sp;
    size_t k;
    plan(uri, SB_FMT_TEXT, 30000, &sp, &k);
    cr_assert_eq(k, 4);
    uint64_t prev = 0;
    coll got = {0};
    for (size_t i = 0; i < k; i++) {
        cr_assert_eq(sp[i].start, prev);
        cr_assert_leq(sp[i].end - sp[i].start, 30000);
        cr_assert_geq(sp[i].end - sp[i].start, 24999);
        prev = sp[i].end;
        /* encoded and decoded, as a worker receives it */
        sb_err e;
        char *enc = sb_io_split_encode(&sp[i], &e);
        cr_assert_not_null(enc, "%s", e.msg);
        sb_io_split d;
        cr_assert_eq(sb_io_split_decode(enc, strlen(enc), &d, &e), 0, "%s", e.msg);
        cr_assert_str_eq(d.path, sp[i].path);
        cr_assert_eq(d.start, sp[i].start);
        cr_assert_eq(d.end, sp[i].end);
        cr_assert_eq(d.file_size, n);
        cr_assert_eq(sb_io_read_split(&d, SB_FMT_TEXT, NULL, 1 << 20, collect, &got, &e), 0, "%s",
                     e.msg);
        sb_io_split_clear(&d);
        cr_assert_null(d.path);
        free(enc);
    }
    cr_assert_eq(prev, n);
    cr_assert_eq(got.n, n / 50);
    coll_free(&got);
    sb_io_splits_free(sp, k);
    free(data);
}

Test(io, relative_paths_are_made_absolute)
{
    cr_assert_eq(chdir(g_dir), 0);
    mkdir("rel", 0755);
    write_file("rel/x.txt", "a\nb\n", 4);
    sb_io_split *sp;
    size_t n;
    plan("file://rel/x.txt", SB_FMT_TEXT, 1 << 20, &sp, &n);
    cr_assert_eq(n, 1);
    char want[600];
    char real[4096];
    cr_assert_not_null(realpath(g_dir, real));
    snprintf(want, sizeof want, "%s/rel/x.txt", real);
    cr_assert_str_eq(sp[0].path, want);
    sb_io_splits_free(sp, n);
    plan("file://rel", SB_FMT_TEXT, 1 << 20, &sp, &n);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(sp[0].path, want);
    sb_io_splits_free(sp, n);
}

Test(io, planning_errors_name_the_uri)
{
    char uri[600];
    mkdir(path_in("empty"), 0755);
    write_file(path_in("empty/_SUCCESS"), "", 0);
    snprintf(uri, sizeof uri, "file://%s", path_in("empty"));
    plan_fails(uri, SB_FMT_JSONL, "has no input files");
    plan_fails(uri, SB_FMT_JSONL, uri);
    snprintf(uri, sizeof uri, "file://%s/*.jsonl", path_in("empty"));
    plan_fails(uri, SB_FMT_JSONL, "no files match");
    plan_fails(uri, SB_FMT_JSONL, uri);
    snprintf(uri, sizeof uri, "file://%s", path_in("missing.jsonl"));
    plan_fails(uri, SB_FMT_JSONL, "No such file or directory");
    plan_fails("gs://bucket/data/", SB_FMT_JSONL, "unsupported scheme \"gs\"");
    plan_fails("/no/scheme", SB_FMT_JSONL, "no scheme");
    plan_fails("file://", SB_FMT_JSONL, "empty path");
    write_file(path_in("x.csv"), "a,b\n", 4);
    snprintf(uri, sizeof uri, "file://%s", path_in("x.csv"));
    cr_assert_eq(mkfifo(path_in("fifo"), 0644), 0);
    snprintf(uri, sizeof uri, "file://%s", path_in("fifo"));
    plan_fails(uri, SB_FMT_TEXT, "not a regular file or a directory");
    /* a partitionSize so small the plan would be enormous */
    write_file(path_in("y.txt"), "0123456789", 10);
    sb_source_spec src = {.format = SB_FMT_TEXT, .partition_size = 0};
    snprintf(uri, sizeof uri, "file://%s", path_in("y.txt"));
    src.uri = uri;
    sb_io_split *sp;
    size_t n;
    sb_err e;
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), -1);
    cr_assert(strstr(e.msg, "partitionSize must be positive") != NULL, "%s", e.msg);
}

/* ---- split strings ---------------------------------------------------------------------- */

Test(io, split_encoding_round_trip_and_odd_paths)
{
    sb_io_split s = {.path = "/data/with\ttab and\nnewline/é.jsonl",
                     .start = 0,
                     .end = UINT64_MAX - 1,
                     .file_size = UINT64_MAX};
    sb_err e;
    char *enc = sb_io_split_encode(&s, &e);
    cr_assert_not_null(enc, "%s", e.msg);
    cr_assert_str_eq(enc, "0\t18446744073709551614\t18446744073709551615\t/data/with\ttab "
                          "and\nnewline/é.jsonl");
    sb_io_split d;
    cr_assert_eq(sb_io_split_decode(enc, strlen(enc), &d, &e), 0, "%s", e.msg);
    cr_assert_str_eq(d.path, s.path);
    cr_assert_eq(d.end, UINT64_MAX - 1);
    cr_assert_eq(d.file_size, UINT64_MAX);
    sb_io_split_clear(&d);
    free(enc);
    s.path = "relative";
    cr_assert_null(sb_io_split_encode(&s, &e));
    s.path = "/x";
    s.start = 5;
    s.end = 5;
    cr_assert_null(sb_io_split_encode(&s, &e));
}

Test(io, malformed_split_strings_are_rejected)
{
    static const struct {
        const char *s;
        size_t len; /* 0: strlen */
        const char *needle;
    } cases[] = {
        {"", 0, "expected the start offset"},
        {"/data/x.jsonl", 0, "expected the start offset"},
        {"0\t10", 0, "expected a tab after the end offset"},
        {"0\t10\t10", 0, "expected a tab after the file size"},
        {"0\t10\t10\t", 0, "missing path"},
        {"0\t10\t10\tdata/x", 0, "path is not absolute"},
        {"-1\t10\t10\t/x", 0, "expected the start offset"},
        {"+1\t10\t10\t/x", 0, "expected the start offset"},
        {" 1\t10\t10\t/x", 0, "expected the start offset"},
        {"01\t10\t10\t/x", 0, "leading zero"},
        {"1\t0x10\t20\t/x", 0, "expected a tab after the end offset"},
        {"1\t18446744073709551616\t20\t/x", 0, "end offset is too large"},
        {"1\t99999999999999999999999\t20\t/x", 0, "too large"},
        {"5\t5\t10\t/x", 0, "empty range"},
        {"6\t5\t10\t/x", 0, "empty range"},
        {"0\t11\t10\t/x", 0, "past the file size"},
        {"0\t1\t10\t/x\0y", 13, "NUL byte at offset 9"},
        {"1 \t2\t3\t/x", 0, "expected a tab after the start offset"},
        {"1,2,3,/x", 0, "expected a tab after the start offset"},
        {"{\"path\":\"/x\"}", 0, "expected the start offset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].s);
        sb_io_split d = {.path = NULL};
        sb_err e;
        cr_assert_eq(sb_io_split_decode(cases[i].s, len, &d, &e), -1, "case %zu decoded", i);
        cr_assert_null(d.path);
        cr_assert(strstr(e.msg, cases[i].needle) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, e.msg,
                  cases[i].needle);
    }
    /* too long */
    size_t n = SB_IO_SPLIT_ENCODED_MAX + 1;
    char *big = malloc(n);
    memset(big, '/', n);
    memcpy(big, "0\t1\t2\t", 6);
    sb_io_split d;
    sb_err e;
    cr_assert_eq(sb_io_split_decode(big, n, &d, &e), -1);
    cr_assert(strstr(e.msg, "longer than the limit") != NULL, "%s", e.msg);
    /* not NUL-terminated input is fine: only len bytes are read */
    memcpy(big, "0\t1\t2\t/ok", 9);
    cr_assert_eq(sb_io_split_decode(big, 9, &d, &e), 0, "%s", e.msg);
    cr_assert_str_eq(d.path, "/ok");
    sb_io_split_clear(&d);
    free(big);
}

/* ---- reader errors -------------------------------------------------------------------- */

Test(io, invalid_utf8_names_file_and_offset)
{
    const char data[] = "good\nalso good\nbad \xC3\x28 here\nafter\n";
    const char *path = path_in("bad.jsonl");
    write_file(path, data, sizeof data - 1);
    for (int f = 0; f < 2; f++) {
        coll got = {0};
        sb_err e;
        cr_assert_eq(read_range(path, 0, sizeof data - 1, sizeof data - 1,
                                f ? SB_FMT_TEXT : SB_FMT_JSONL, NULL, 1 << 20, &got, &e),
                     -1);
        cr_assert(strstr(e.msg, path) != NULL, "%s", e.msg);
        cr_assert(strstr(e.msg, "byte offset 19") != NULL, "%s", e.msg);
        cr_assert(strstr(e.msg, "line starting at byte offset 15") != NULL, "%s", e.msg);
        cr_assert(strstr(e.msg, "not valid UTF-8") != NULL, "%s", e.msg);
        cr_assert(e.data, "invalid UTF-8 is a data error (not retried)");
        coll_free(&got);
        /* the split that does not own the bad line reads fine */
        cr_assert_eq(read_range(path, 0, 10, sizeof data - 1, f ? SB_FMT_TEXT : SB_FMT_JSONL, NULL,
                                1 << 20, &got, &e),
                     0, "%s", e.msg);
        cr_assert_eq(got.n, 2);
        coll_free(&got);
    }
}

Test(io, unreadable_directory_changed_and_refused)
{
    const char *path = path_in("secret.txt");
    write_file(path, "x\ny\n", 4);
    cr_assert_eq(chmod(path, 0), 0);
    coll got = {0};
    sb_err e;
    /* as root, read permission is not checked: drop to an unprivileged user for the read */
    if (geteuid() == 0)
        cr_assert_eq(seteuid(65534), 0);
    int rc = read_range(path, 0, 4, 4, SB_FMT_TEXT, NULL, 1 << 20, &got, &e);
    if (getuid() == 0)
        cr_assert_eq(seteuid(0), 0);
    cr_assert_eq(rc, -1);
    cr_assert(strstr(e.msg, "cannot open") != NULL && strstr(e.msg, path) != NULL &&
                  strstr(e.msg, "Permission denied") != NULL,
              "%s", e.msg);

    mkdir(path_in("adir"), 0755);
    cr_assert_eq(read_range(path_in("adir"), 0, 4, 4, SB_FMT_TEXT, NULL, 1 << 20, &got, &e), -1);
    cr_assert(strstr(e.msg, "is a directory") != NULL, "%s", e.msg);

    write_file(path_in("grew.txt"), "abc\ndef\n", 8);
    cr_assert_eq(read_range(path_in("grew.txt"), 0, 4, 6, SB_FMT_TEXT, NULL, 1 << 20, &got, &e),
                 -1);
    cr_assert(strstr(e.msg, "changed since planning") != NULL, "%s", e.msg);

    cr_assert_eq(read_range(path_in("nope.txt"), 0, 4, 6, SB_FMT_TEXT, NULL, 1 << 20, &got, &e),
                 -1);
    cr_assert(strstr(e.msg, "No such file") != NULL, "%s", e.msg);

    /* the consumer refuses the second partition: the read stops with a clear error */
    char lines[4000];
    for (size_t i = 0; i < sizeof lines; i++)
        lines[i] = i % 40 == 39 ? '\n' : 'z';
    write_file(path_in("many.txt"), lines, sizeof lines);
    got.refuse_at = 2;
    cr_assert_eq(read_range(path_in("many.txt"), 0, sizeof lines, sizeof lines, SB_FMT_TEXT, NULL,
                            1000, &got, &e),
                 -1);
    cr_assert(strstr(e.msg, "refused partition 2") != NULL, "%s", e.msg);
    cr_assert_eq(got.parts, 2);
    coll_free(&got);

    /* a consumer that says why (it shares the reader's err, as the worker's fused chain does):
     * its message is kept and wrapped, not replaced */
    memset(&got, 0, sizeof got);
    got.refuse_at = 2;
    got.refuse_err = &e;
    cr_assert_eq(read_range(path_in("many.txt"), 0, sizeof lines, sizeof lines, SB_FMT_TEXT, NULL,
                            1000, &got, &e),
                 -1);
    cr_assert(strstr(e.msg, "record 5005 is not valid JSON at byte 47") != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "many.txt") != NULL && strstr(e.msg, "partition 2") != NULL, "%s",
              e.msg);
    coll_free(&got);

    /* bad arguments */
    sb_io_split sp = {
        .path = (char *)path_in("many.txt"), .start = 0, .end = 10, .file_size = sizeof lines};
    cr_assert_eq(sb_io_read_split(&sp, SB_FMT_TEXT, NULL, 0, collect, &got, &e), -1);
    cr_assert(strstr(e.msg, "target partition size is 0") != NULL, "%s", e.msg);
    cr_assert_eq(sb_io_read_split(&sp, SB_FMT_IMAGE, NULL, 10, collect, &got, &e), -1);
    cr_assert(strstr(e.msg, "an image is read whole, but the split is bytes [0, 10) of") != NULL,
              "%s", e.msg);
}

/* jsonl pieces are appended in bulk unless a line may be blank: rare blank lines, lines with
 * leading whitespace (not blank) and whitespace-only lines at every alignment. */
Test(io, jsonl_rare_blank_lines_in_bulk_pieces)
{
    size_t cap = 3u << 20, n = 0;
    char *data = malloc(cap);
    cr_assert_not_null(data);
    unsigned s = 3;
    while (n < cap - 300) {
        unsigned k = rnd(&s) % 997;
        if (k == 0) {
            data[n++] = '\n'; /* empty */
        } else if (k == 1) {
            memcpy(data + n, " \t\r\n", 4); /* whitespace only */
            n += 4;
        } else if (k == 2) {
            memcpy(data + n, "  {\"lead\":1}\r\n", 14); /* leading spaces: kept */
            n += 14;
        } else {
            n += (size_t)snprintf(data + n, cap - n, "{\"k\":%u,\"pad\":\"%.*s\"}\n", k,
                                  (int)(k % 61),
                                  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
        }
    }
    const char *path = path_in("rare.jsonl");
    write_file(path, data, n);
    coll want = {0};
    ref_lines(data, n, true, &want);
    size_t cuts[2] = {n / 3, n / 3 * 2};
    coll got = {0};
    read_tiling(path, n, cuts, 2, SB_FMT_JSONL, 256u << 10, &got);
    assert_same(&got, &want, "rare blank lines");
    cr_assert_lt(got.n, count_text_lines(data, n)); /* blank lines were dropped */
    coll_free(&got);
    coll_free(&want);
    free(data);
}

Test(io, uris_are_planned_in_the_order_given)
{
    write_file(path_in("z.jsonl"), "{\"a\":1}\n{\"a\":2}\n", 16);
    write_file(path_in("a.jsonl"), "{\"a\":3}\n", 8);
    char u0[600], u1[600], u2[600];
    snprintf(u0, sizeof u0, "file://%s", path_in("z.jsonl"));
    snprintf(u1, sizeof u1, "file://%s", path_in("a.jsonl"));
    snprintf(u2, sizeof u2, "file://%s", path_in("missing.jsonl"));
    char *uris[] = {u0, u1};
    sb_source_spec src = {
        .uris = uris, .nuris = 2, .format = SB_FMT_JSONL, .partition_size = 1 << 20};
    sb_io_split *sp = NULL;
    size_t n = 0;
    sb_err e;
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 2);
    /* the list order, not sorted by name */
    cr_assert_str_eq(sp[0].path, path_in("z.jsonl"));
    cr_assert_str_eq(sp[1].path, path_in("a.jsonl"));
    cr_assert_eq(sp[0].file_size, 16);
    sb_io_splits_free(sp, n);
    /* a missing entry names its index and the URI */
    char *bad[] = {u0, u2};
    src.uris = bad;
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &n, &e), -1);
    cr_assert(strstr(e.msg, "uris[1]") != NULL && strstr(e.msg, "missing.jsonl") != NULL, "%s",
              e.msg);
}
