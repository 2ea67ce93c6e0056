/* lines_check.h — for the storage tests: reads a text file cut into splits at random points
 * through the line reader (io/reader.h) and collects its records, so a backend's reads (pushed
 * buffers: s3, http) can be compared with the same bytes in a local file (pulled). Functions are
 * static: include in one test file each. Memory: recs.buf is malloc'd, freed by the caller;
 * lines_text() returns a malloc'd text. */
#ifndef SB_TEST_LINES_CHECK_H
#define SB_TEST_LINES_CHECK_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/reader.h"
#include "io/split.h"
#include "partition/partition.h"

typedef struct {
    char *buf; /* records, each followed by '\0' */
    size_t len, cap, rows;
} recs;

static int keep_recs(void *blob, size_t len, uint64_t rows, void *ud)
{
    recs *c = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *col = sb_batch_column(b, 0);
    for (uint64_t r = 0; r < rows; r++) {
        size_t n;
        const void *p = sb_column_binary(col, (size_t)r, &n);
        if (c->len + n + 1 > c->cap) {
            c->cap = (c->len + n + 1) * 2;
            c->buf = realloc(c->buf, c->cap);
            cr_assert_not_null(c->buf);
        }
        memcpy(c->buf + c->len, p, n);
        c->len += n;
        c->buf[c->len++] = '\0';
        c->rows++;
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* Reads the file cut at cuts[0..ncuts) (sorted, inside (0, size)) as splits of `uri`: every
 * record in order, or the first error's message in *msg. */
static int read_cut(const char *uri, uint64_t size, const uint64_t *cuts, size_t ncuts,
                    sb_format fmt, const char *args, recs *out, char *msg, size_t msglen)
{
    uint64_t from = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        uint64_t to = i < ncuts ? cuts[i] : size;
        if (to <= from)
            continue;
        sb_io_split sp = {.path = (char *)uri, .start = from, .end = to, .file_size = size};
        sb_err err = {0};
        if (sb_io_read_split(&sp, fmt, args, 64 << 10, keep_recs, out, &err) != 0) {
            snprintf(msg, msglen, "%s", err.msg);
            return -1;
        }
        from = to;
    }
    return 0;
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Text with what line reading must get right: a byte order mark, blank and space-only lines,
 * CRLF, lines from 0 bytes to ~20 KiB, multi-byte UTF-8, csv quoted fields with commas, doubled
 * quotes (and line breaks when `multiline`: such a file is one split), and (unless
 * `newline_at_end`) a last line without '\n'. */
static char *lines_text(sb_format fmt, uint64_t seed, size_t target, bool newline_at_end,
                        bool multiline, size_t *len)
{
    size_t cap = target + (64 << 10), n = 0;
    char *t = malloc(cap);
    cr_assert_not_null(t);
    if (fmt != SB_FMT_TEXT)
        n += (size_t)sprintf(t, "\xEF\xBB\xBF");
    if (fmt == SB_FMT_CSV)
        n += (size_t)sprintf(t + n, "id,name,note\n");
    uint64_t x = seed | 1;
    for (unsigned i = 0; n < target; i++) {
        unsigned kind = (unsigned)(rnd(&x) % 10);
        size_t pad = (size_t)(rnd(&x) % (kind == 0 ? 20000 : 300));
        if (fmt == SB_FMT_CSV) {
            n += (size_t)sprintf(t + n, "%u,\"n%u, \"\"q\"\"", i, i);
            if (kind == 1 && multiline)
                n += (size_t)sprintf(t + n, "\nsecond line");
            n += (size_t)sprintf(t + n, "\",");
            memset(t + n, 'c', pad);
            n += pad;
        } else if (kind == 2) {
            n += (size_t)sprintf(t + n, "%s", fmt == SB_FMT_TEXT ? "" : "  \t");
        } else {
            n += (size_t)sprintf(t + n, "{\"i\":%u,\"s\":\"\xC3\xA9", i);
            memset(t + n, 'x', pad);
            n += pad;
            n += (size_t)sprintf(t + n, "\"}");
        }
        n += (size_t)sprintf(t + n, "%s", kind == 3 ? "\r\n" : "\n");
    }
    if (!newline_at_end) {
        n += (size_t)sprintf(t + n, fmt == SB_FMT_CSV ? "-1,\"%s\",x" : "{\"i\":-1,\"s\":\"%s\"}",
                             "end");
    }
    *len = n;
    return t;
}

/* Reads text[0..len), stored at `path` and at `uri`, cut at random points (round 0: uncut) in
 * `rounds` rounds, and asserts both give the same records in the same order. */
static void lines_check_same(sb_format fmt, const char *args, const char *text, size_t len,
                             const char *path, const char *uri, const char *name, unsigned rounds)
{
    uint64_t x = 0x5eed ^ len;
    for (unsigned round = 0; round < rounds; round++) {
        uint64_t cuts[40];
        size_t nc = round == 0 ? 0 : 1 + (size_t)(rnd(&x) % 39);
        for (size_t i = 0; i < nc; i++) {
            /* near a line break or anywhere, including 1 and len - 1 */
            uint64_t c = 1 + rnd(&x) % (len - 1);
            const char *nl = memchr(text + c, '\n', len - c);
            if (nl != NULL && rnd(&x) % 2)
                c = (uint64_t)(nl - text) + (rnd(&x) % 3); /* at, after or past the '\n' */
            cuts[i] = c < len ? c : len - 1;
        }
        for (size_t i = 1; i < nc; i++) /* insertion sort */
            for (size_t j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                uint64_t t = cuts[j];
                cuts[j] = cuts[j - 1];
                cuts[j - 1] = t;
            }
        recs a = {0}, b = {0};
        char ea[1024] = "", eb[1024] = "";
        int ra = read_cut(path, len, cuts, nc, fmt, args, &a, ea, sizeof ea);
        int rb = read_cut(uri, len, cuts, nc, fmt, args, &b, eb, sizeof eb);
        cr_assert_eq(ra, 0, "%s round %u: file: %s", name, round, ea);
        cr_assert_eq(rb, 0, "%s round %u: %s: %s", name, round, uri, eb);
        cr_assert_gt(a.rows, 10);
        cr_assert_eq(a.rows, b.rows,
                     "%s round %u (%zu cuts): %zu records from the file, %zu from %s", name, round,
                     nc, a.rows, b.rows, uri);
        cr_assert_eq(a.len, b.len);
        cr_assert(memcmp(a.buf, b.buf, a.len) == 0, "%s round %u: records differ", name, round);
        free(a.buf);
        free(b.buf);
    }
}

#endif
