/* libFuzzer target: the inputs of lib/io and worker/ops that come from outside — split
 * strings (they arrive over the network), jsonl records (user data) through the JSON scanner,
 * filter and project, op arguments, and files through the split reader. The low 3 bits of the
 * first byte pick the mode, the rest is a selector. Besides crashes, sanitizer reports and
 * leaks, these properties are findings (they trap):
 *   - a split string (one piece or several) that decodes re-encodes to exactly the same bytes;
 *   - splits cut anywhere read every line of a file exactly once, in order (compared with a
 *     plain reference line splitter);
 *   - every member span the scanner reports is itself a valid JSON value of the reported type,
 *     inside the record, and an unescaped string is never longer than its span;
 *   - filter keeps a subsequence of its input; project's outputs are valid JSON objects.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "partition/partition.h"
#include "partition/utf8.h"
#include "io/reader.h"
#include "io/split.h"
#include "worker/ops/json.h"
#include "worker/ops/ops.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

/* Several pieces ("m\t..."): what decodes re-encodes to the same bytes. */
static void fuzz_splits(const char *s, size_t n)
{
    sb_io_split *v;
    size_t k;
    sb_err e;
    if (sb_io_splits_decode(s, n, &v, &k, &e) != 0) {
        CHECK(v == NULL);
        CHECK(memchr(e.msg, '\0', sizeof e.msg) != NULL);
        return;
    }
    CHECK(k >= 1 && k <= SB_IO_MAX_FILES_PER_SPLIT);
    char *enc = sb_io_splits_encode(v, k, &e);
    CHECK(enc != NULL);
    CHECK(strlen(enc) == n && memcmp(enc, s, n) == 0);
    free(enc);
    sb_io_splits_free(v, k);
}

static void fuzz_split(const char *s, size_t n)
{
    fuzz_splits(s, n);
    sb_io_split sp;
    sb_err e;
    if (sb_io_split_decode(s, n, &sp, &e) != 0) {
        CHECK(sp.path == NULL);
        CHECK(memchr(e.msg, '\0', sizeof e.msg) != NULL);
        return;
    }
    char *enc = sb_io_split_encode(&sp, &e);
    CHECK(enc != NULL);
    CHECK(strlen(enc) == n && memcmp(enc, s, n) == 0);
    sb_io_split again;
    CHECK(sb_io_split_decode(enc, strlen(enc), &again, &e) == 0);
    CHECK(again.start == sp.start && again.end == sp.end && again.file_size == sp.file_size);
    CHECK(strcmp(again.path, sp.path) == 0);
    sb_io_split_clear(&again);
    sb_io_split_clear(&sp);
    free(enc);
}

static void fuzz_scan(const char *s, size_t n)
{
    sb_op_json_key keys[3] = {{"a", 1}, {"b", 1}, {"\xC3\xA9", 2}};
    sb_op_json_span f[3];
    sb_op_json_type top;
    char msg[160];
    if (sb_op_json_scan(s, n, keys, 3, f, &top, msg, sizeof msg) != 0) {
        CHECK(memchr(msg, '\0', sizeof msg) != NULL);
        return;
    }
    for (int k = 0; k < 3; k++) {
        if (f[k].type == SB_OP_JSON_NONE)
            continue;
        CHECK(top == SB_OP_JSON_OBJECT);
        CHECK(f[k].p >= s && f[k].p + f[k].n <= s + n && f[k].n > 0);
        sb_op_json_type t;
        CHECK(sb_op_json_scan(f[k].p, f[k].n, NULL, 0, NULL, &t, NULL, 0) == 0);
        CHECK(t == f[k].type);
        if (t == SB_OP_JSON_STRING) {
            char buf[64];
            size_t dn = sb_op_json_unescape(f[k].p, f[k].n, buf, sizeof buf);
            CHECK(dn <= f[k].n);
        }
        if (t == SB_OP_JSON_NUMBER) {
            double d;
            int64_t i;
            bool is_int;
            sb_op_json_number(f[k].p, f[k].n, &d, &i, &is_int);
            CHECK(!is_int || (double)i == d);
            char num[512];
            if (f[k].n < sizeof num) { /* the fast path agrees with strtod to the bit */
                memcpy(num, f[k].p, f[k].n);
                num[f[k].n] = '\0';
                double want = strtod(num, NULL);
                CHECK(memcmp(&d, &want, sizeof d) == 0);
            }
        }
    }
}

typedef struct {
    size_t rows;
    int project;
} sink_st;

static int check_out(void *blob, size_t len, uint64_t rows, void *ud)
{
    sink_st *st = ud;
    sb_batch *b;
    sb_err e;
    CHECK(sb_batch_open(blob, len, &b, &e) == 0);
    CHECK(sb_batch_rows(b) == rows);
    const sb_column *c = sb_batch_column(b, 0);
    for (size_t r = 0; st->project && r < rows; r++) {
        size_t n;
        const char *p = sb_column_binary(c, r, &n);
        sb_op_json_type t;
        CHECK(sb_op_json_scan(p, n, NULL, 0, NULL, &t, NULL, 0) == 0);
        CHECK(t == SB_OP_JSON_OBJECT);
    }
    st->rows += rows;
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* Records = the input's lines (a binary column, so any bytes); selector picks the op. */
static void fuzz_ops(unsigned sel, const char *s, size_t n)
{
    static const char *const filters[] = {
        "{\"field\":\"a\",\"op\":\"eq\",\"value\":1}",
        "{\"field\":\"a\",\"op\":\"lt\",\"value\":2.5}",
        "{\"field\":\"b\",\"op\":\"ge\",\"value\":\"m\"}",
        "{\"field\":\"b\",\"op\":\"ne\",\"value\":true}",
        "{\"field\":\"\\u00e9\",\"op\":\"gt\",\"value\":-9223372036854775808}",
    };
    sb_field f = {.name = "record", .type = SB_TYPE_BINARY};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, NULL);
    if (bb == NULL)
        return;
    size_t used;
    if (sb_batch_builder_append_lines(bb, 0, s, n, false, true, &used, NULL) != 0) {
        sb_batch_builder_free(bb);
        return;
    }
    void *blob;
    size_t len;
    int ok = sb_batch_builder_finish(bb, &blob, &len, NULL) == 0;
    sb_batch_builder_free(bb);
    if (!ok)
        return;
    sb_batch *in;
    if (sb_batch_open(blob, len, &in, NULL) != 0) {
        sb_part_free(blob);
        return;
    }
    int project = sel % 6 == 5;
    const sb_op_impl *op = sb_op_find(project ? "project" : "filter");
    const char *args = project ? "{\"fields\":[\"b\",\"a\",\"b\",\"\\u00e9\"]}" : filters[sel % 6];
    void *st;
    sb_err e;
    CHECK(op->init(args, &st, &e) == 0);
    sink_st ss = {.project = project};
    sb_op_out *o = sb_op_out_new(1 + sel * 97, check_out, &ss, &e);
    CHECK(o != NULL);
    int rc = sb_op_run(op, st, in, sel % 4, o, &e);
    if (rc == 0)
        rc = sb_op_out_flush(o, &e);
    CHECK(rc != 0 || ss.rows <= sb_batch_rows(in));
    CHECK(rc != 0 || !project || ss.rows == sb_batch_rows(in));
    sb_op_out_free(o);
    op->free(st);
    sb_batch_close(in);
    sb_part_free(blob);
}

/* The input as op arguments. */
static void fuzz_args(const char *s, size_t n)
{
    char *z = malloc(n + 1);
    if (z == NULL)
        return;
    memcpy(z, s, n);
    z[n] = '\0';
    const char *names[] = {"filter", "project", "bench.spin", "bench.sleep"};
    for (size_t i = 0; i < 4; i++) {
        const sb_op_impl *op = sb_op_find(names[i]);
        void *st = NULL;
        sb_err e;
        if (op->init(z, &st, &e) == 0)
            op->free(st);
    }
    free(z);
}

/* The records a reference splitter expects, consumed in order by the reader's partitions. */
typedef struct {
    const char *s;
    size_t n, pos; /* next line starts at pos */
    bool jsonl;
} ref_st;

/* The next expected record; false at the end. */
static bool ref_next(ref_st *r, const char **p, size_t *len)
{
    for (;;) {
        if (r->pos >= r->n)
            return false;
        size_t i = r->pos, j = i;
        while (j < r->n && r->s[j] != '\n')
            j++;
        r->pos = j + 1;
        size_t l = j - i;
        if (l > 0 && r->s[i + l - 1] == '\r')
            l--;
        bool blank = true;
        for (size_t k = i; k < i + l && blank; k++)
            blank = r->s[k] == ' ' || r->s[k] == '\t' || r->s[k] == '\r';
        if (r->jsonl && blank)
            continue;
        *p = r->s + i;
        *len = l;
        return true;
    }
}

static int check_lines(void *blob, size_t len, uint64_t rows, void *ud)
{
    ref_st *r = ud;
    sb_batch *b;
    CHECK(sb_batch_open(blob, len, &b, NULL) == 0);
    CHECK(rows > 0 && sb_batch_rows(b) == rows);
    const sb_column *c = sb_batch_column(b, 0);
    for (size_t i = 0; i < rows; i++) {
        size_t n, wn;
        const char *p = sb_column_binary(c, i, &n), *w;
        CHECK(ref_next(r, &w, &wn));
        CHECK(n == wn && memcmp(p, w, n) == 0);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* The input as a text or jsonl file, read as 1..4 splits cut at selector-derived offsets. */
static void fuzz_reader(unsigned sel, const char *s, size_t n)
{
    if (n == 0 || !sb_utf8_valid(s, n, NULL))
        return;
    int fd = memfd_create("fuzz_io", 0);
    if (fd < 0)
        return;
    if (write(fd, s, n) != (ssize_t)n) {
        close(fd);
        return;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    bool jsonl = sel & 1;
    ref_st r = {.s = s, .n = n, .jsonl = jsonl};
    if (jsonl && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
        r.pos = 3;
    size_t ncuts = (sel >> 1) % 4, prev = 0;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    for (size_t k = 0; k <= ncuts; k++) {
        size_t end = k < ncuts ? prev + (h >> (k * 8)) % (n - prev + 1) : n;
        if (end == prev)
            continue;
        sb_io_split sp = {.path = path, .start = prev, .end = end, .file_size = n};
        sb_err e;
        CHECK(sb_io_read_split(&sp, jsonl ? SB_FMT_JSONL : SB_FMT_TEXT, NULL, 1 + (sel >> 3) * 61,
                               check_lines, &r, &e) == 0);
        prev = end;
    }
    const char *p;
    size_t l;
    CHECK(!ref_next(&r, &p, &l)); /* nothing was missed */
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    unsigned sel = data[0] >> 3;
    switch (data[0] & 7) {
    case 0:
        fuzz_split(s, n);
        break;
    case 1:
        fuzz_scan(s, n);
        break;
    case 2:
        fuzz_ops(sel, s, n);
        break;
    case 3:
        fuzz_args(s, n);
        break;
    default:
        fuzz_reader(sel, s, n);
        break;
    }
    return 0;
}
