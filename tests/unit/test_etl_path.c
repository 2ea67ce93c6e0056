/* Unit tests of the jsonl ETL fast path (issue 16, goal 1): the JSON scanner's pointer walk
 * (exact error offsets for every kind of error, strings ending anywhere near the end of a record
 * (its last 16-byte step reads back from the end), escapes, nested values, duplicate keys,
 * whitespace), the filter's batched appends of kept runs, the builder's range copy, blank-line
 * skipping and unsealed blobs, and the reader's chunked, unsealed partitions. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/reader.h"
#include "io/split.h"
#include "partition/partition.h"
#include "worker/ops/json.h"
#include "worker/ops/ops.h"

TestSuite(etl, .timeout = 60);

/* ---- the scanner: errors name the byte ---------------------------------------------------- */

Test(etl, scanner_errors_name_the_byte)
{
    static const struct {
        const char *in, *msg;
    } cases[] = {
        {"", "empty record (no JSON value) at the end (byte 0)"},
        {"  \t", "empty record (no JSON value) at the end (byte 3)"},
        {"{\"a\":1,}", "expected a member name (a string) at byte 7 ('}')"},
        {"{\"a\" 1}", "expected ':' after a member name at byte 5 ('1')"},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}' in an object at byte 7 ('\"')"},
        {"[1 2]", "expected ',' or ']' in an array at byte 3 ('2')"},
        {"[1,]", "expected a value at byte 3 (']')"},
        {"{\"a\":}", "expected a value at byte 5 ('}')"},
        {"{\"a\":", "expected a value at the end (byte 5)"},
        {"{\"a\":01}", "invalid number (leading zero) at byte 6 ('1')"},
        {"{\"a\":-}", "invalid number (expected a digit) at byte 6 ('}')"},
        {"{\"a\":1.}", "invalid number (expected a digit) at byte 7 ('}')"},
        {"{\"a\":1e+}", "invalid number (expected a digit) at byte 8 ('}')"},
        {"-", "invalid number (expected a digit) at the end (byte 1)"},
        {"{\"a\":tru}", "invalid literal (expected true, false or null) at byte 5 ('t')"},
        {"{\"a\":\"x", "unterminated string at the end (byte 7)"},
        {"{\"a\":\"x\\", "unterminated string at the end (byte 8)"},
        {"{\"a\":\"\\q\"}", "invalid escape in a string at byte 7 ('q')"},
        {"{\"a\":\"\\u12G4\"}", "invalid \\u escape (needs 4 hex digits) at byte 10 ('G')"},
        {"{\"a\":\"\\u12", "invalid \\u escape (needs 4 hex digits) at the end (byte 10)"},
        {"{\"a\":\"x\ty\"}",
         "control character in a string (must be escaped) at byte 7 (byte 0x09)"},
        {"{\"a\":1} x", "unexpected data after the JSON value at byte 8 ('x')"},
        {"{\"a\":[1,{\"b\":[2,}]}]}", "expected a value at byte 16 ('}')"},
        {"{a:1}", "expected a member name (a string) at byte 1 ('a')"},
    };
    sb_op_json_key k = {"a", 1};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char msg[160] = "";
        sb_op_json_span f;
        cr_assert_eq(
            sb_op_json_scan(cases[i].in, strlen(cases[i].in), &k, 1, &f, NULL, msg, sizeof msg), -1,
            "case %zu (%s) accepted", i, cases[i].in);
        cr_assert_str_eq(msg, cases[i].msg, "case %zu (%s)", i, cases[i].in);
        cr_assert_eq(f.type, SB_OP_JSON_NONE, "nothing is reported found on an error");
    }
    /* nesting: 256 levels inside a member are refused at the 257th opening bracket */
    char deep[700];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{\"a\":");
    for (int d = 0; d < 256; d++)
        deep[n++] = '[';
    char msg[160];
    cr_assert_eq(sb_op_json_scan(deep, n, NULL, 0, NULL, NULL, msg, sizeof msg), -1);
    cr_assert_str_eq(msg, "nesting deeper than 256 levels at byte 260 ('[')");
}

/* The end of every string is found wherever it falls: strings closing at each byte near the end
 * of records of every length around the 16-byte step, with quotes, backslashes and control
 * characters just before the string (read by the last step, and ignored). */
Test(etl, scanner_finds_string_ends_near_the_record_end)
{
    sb_op_json_key k = {"k", 1};
    for (size_t pad = 0; pad < 40; pad++) {
        for (int variant = 0; variant < 3; variant++) {
            char rec[128];
            size_t n = 0;
            const char *pre = variant == 0 ? "{\"q\":\"\\\"\\\\\"," : variant == 1 ? "{" : "[0,{";
            n += (size_t)snprintf(rec + n, sizeof rec - n, "%s\"k\":\"", pre);
            size_t vs = n - 1;
            memset(rec + n, 'x', pad);
            n += pad;
            rec[n++] = '"';
            size_t ve = n;
            rec[n++] = '}';
            if (variant == 2)
                rec[n++] = ']';
            sb_op_json_span f;
            sb_op_json_type t;
            char msg[160] = "";
            /* exact-size heap copy: the scanner must not read past the record */
            char *r = malloc(n);
            memcpy(r, rec, n);
            cr_assert_eq(sb_op_json_scan(r, n, &k, 1, &f, &t, msg, sizeof msg), 0,
                         "pad %zu variant %d: %s", pad, variant, msg);
            if (variant < 2) {
                cr_assert_eq(f.type, SB_OP_JSON_STRING);
                cr_assert_eq(f.p, r + vs, "pad %zu variant %d", pad, variant);
                cr_assert_eq(f.n, ve - vs, "pad %zu variant %d", pad, variant);
            } else {
                cr_assert_eq(f.type, SB_OP_JSON_NONE); /* not a top-level member */
                cr_assert_eq(t, SB_OP_JSON_ARRAY);
            }
            /* the same record cut before its closing quote, or with a control character in the
             * tail: the error is at the end, or at that character */
            cr_assert_eq(sb_op_json_scan(r, ve - 1, &k, 1, &f, NULL, msg, sizeof msg), -1);
            char want[128];
            snprintf(want, sizeof want, "unterminated string at the end (byte %zu)", ve - 1);
            cr_assert_str_eq(msg, want, "pad %zu variant %d", pad, variant);
            if (pad > 0) {
                r[ve - 2] = '\n';
                cr_assert_eq(sb_op_json_scan(r, n, &k, 1, &f, NULL, msg, sizeof msg), -1,
                             "pad %zu variant %d accepted", pad, variant);
                snprintf(want, sizeof want,
                         "control character in a string (must be escaped) at byte %zu (byte 0x0a)",
                         ve - 2);
                cr_assert_str_eq(msg, want, "pad %zu variant %d: %s", pad, variant, msg);
            }
            free(r);
        }
    }
}

Test(etl, scanner_members_escapes_duplicates_nesting_whitespace)
{
    /* duplicates: the first occurrence wins, also when it is spelled with escapes; the same
     * names inside nested values are not top-level members */
    const char *rec = " \t{ \"x\" : {\"k\":1,\"a\":[{\"k\":2}]} ,\r\n \"\\u006b\" :\t\"v\\\"w\" , "
                      "\"k\":9,\"a\":[ 1 , \"]\" ,{}],\"e\\\\\":true,\"\":null } \r\n";
    sb_op_json_key keys[5] = {{"k", 1}, {"a", 1}, {"x", 1}, {"e\\", 2}, {"", 0}};
    sb_op_json_span f[5];
    sb_op_json_type top;
    char msg[160] = "";
    cr_assert_eq(sb_op_json_scan(rec, strlen(rec), keys, 5, f, &top, msg, sizeof msg), 0, "%s",
                 msg);
    cr_assert_eq(top, SB_OP_JSON_OBJECT);
    cr_assert_eq(f[0].type, SB_OP_JSON_STRING);
    cr_assert_eq(f[0].n, 6);
    cr_assert(memcmp(f[0].p, "\"v\\\"w\"", 6) == 0);
    cr_assert_eq(f[1].type, SB_OP_JSON_ARRAY);
    cr_assert(f[1].n == strlen("[ 1 , \"]\" ,{}]") &&
              memcmp(f[1].p, "[ 1 , \"]\" ,{}]", f[1].n) == 0);
    cr_assert_eq(f[2].type, SB_OP_JSON_OBJECT);
    cr_assert_eq(f[2].n, strlen("{\"k\":1,\"a\":[{\"k\":2}]}"));
    cr_assert_eq(f[3].type, SB_OP_JSON_BOOL);
    cr_assert_eq(f[4].type, SB_OP_JSON_NULL);
    /* all wanted members found early: the rest of the record is still validated */
    const char *late = "{\"k\":1,\"z\":[1,}";
    cr_assert_eq(sb_op_json_scan(late, strlen(late), keys, 1, f, NULL, msg, sizeof msg), -1);
    cr_assert_str_eq(msg, "expected a value at byte 14 ('}')");
    /* not an object: nothing found, the type reported */
    const char *arr = "[{\"k\":1}]";
    cr_assert_eq(sb_op_json_scan(arr, strlen(arr), keys, 1, f, &top, NULL, 0), 0);
    cr_assert_eq(top, SB_OP_JSON_ARRAY);
    cr_assert_eq(f[0].type, SB_OP_JSON_NONE);
    /* records of only a scalar, shorter than one 16-byte step */
    static const char *const scalars[] = {"\"\"",    "\"a\"", " 0 ",
                                          "-1.5E-3", "false", "\"\\u00e9\""};
    for (size_t i = 0; i < sizeof scalars / sizeof *scalars; i++)
        cr_assert_eq(
            sb_op_json_scan(scalars[i], strlen(scalars[i]), NULL, 0, NULL, &top, msg, sizeof msg),
            0, "%s: %s", scalars[i], msg);
}

/* Digit runs of every length (the scanner takes eight bytes per step), ended by every kind of
 * byte, also by bytes whose carry would spill into the next one (0xFA..0xFF). */
Test(etl, scanner_number_digits_of_every_length)
{
    static const char *const ends[] = {"}", ",\"b\":1}", ".5}", "e7}", "x}", "\xff}", "/}", ":}"};
    sb_op_json_key k = {"a", 1};
    for (size_t len = 1; len <= 20; len++) {
        for (size_t t = 0; t < sizeof ends / sizeof *ends; t++) {
            char rec[64];
            size_t n = (size_t)snprintf(rec, sizeof rec, "{\"a\":");
            for (size_t d = 0; d < len; d++)
                rec[n++] = (char)('1' + (d % 9));
            n += (size_t)snprintf(rec + n, sizeof rec - n, "%s", ends[t]);
            char *r = malloc(n);
            memcpy(r, rec, n);
            sb_op_json_span f;
            char msg[160] = "";
            int rc = sb_op_json_scan(r, n, &k, 1, &f, NULL, msg, sizeof msg);
            if (t < 4) {
                cr_assert_eq(rc, 0, "len %zu end %zu: %s", len, t, msg);
                cr_assert_eq(f.type, SB_OP_JSON_NUMBER);
                size_t want = len + (t == 2 || t == 3 ? 2 : 0);
                cr_assert_eq(f.n, want, "len %zu end %zu: span %zu", len, t, f.n);
            } else {
                cr_assert_eq(rc, -1, "len %zu end %zu accepted", len, t);
                char want[128];
                snprintf(want, sizeof want, "expected ',' or '}' in an object at byte %zu",
                         5 + len);
                cr_assert(strncmp(msg, want, strlen(want)) == 0, "len %zu end %zu: %s", len, t,
                          msg);
            }
            free(r);
        }
    }
    /* a fraction or exponent without digits, a lone minus, a leading zero */
    static const struct {
        const char *in, *msg;
    } bad[] = {
        {"{\"a\":12345678.}", "invalid number (expected a digit) at byte 14 ('}')"},
        {"{\"a\":123456789e}", "invalid number (expected a digit) at byte 15 ('}')"},
        {"{\"a\":-x}", "invalid number (expected a digit) at byte 6 ('x')"},
        {"{\"a\":00000000001}", "invalid number (leading zero) at byte 6 ('0')"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char msg[160] = "";
        sb_op_json_span f;
        cr_assert_eq(
            sb_op_json_scan(bad[i].in, strlen(bad[i].in), &k, 1, &f, NULL, msg, sizeof msg), -1,
            "%s", bad[i].in);
        cr_assert_str_eq(msg, bad[i].msg);
    }
}

/* ---- the filter hands kept runs to the output in batches ---------------------------------- */

typedef struct {
    size_t rows, parts;
    size_t max_blob;
    char *all; /* the kept records, '\n'-joined */
    size_t len;
} sink;

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    sink *s = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, 0);
    for (size_t r = 0; r < rows; r++) {
        size_t n;
        const char *p = sb_column_binary(c, r, &n);
        s->all = realloc(s->all, s->len + n + 1);
        memcpy(s->all + s->len, p, n);
        s->all[s->len + n] = '\n';
        s->len += n + 1;
    }
    s->rows += rows;
    s->parts++;
    if (len > s->max_blob)
        s->max_blob = len;
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

Test(etl, filter_keeps_scattered_and_long_runs_in_order)
{
    /* 3000 records: kept in runs of 1 (more than one batch of runs), then long runs */
    size_t n = 3000;
    sb_field fd = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(&fd, 1, &e);
    char *want = calloc(1, n * 64);
    size_t wl = 0, wrows = 0;
    for (size_t i = 0; i < n; i++) {
        bool keep = i < 1500 ? i % 3 == 0 : (i / 100) % 2 == 0;
        char rec[64];
        int k = snprintf(rec, sizeof rec, "{\"i\":%zu,\"t\":\"%s\"}", i, keep ? "y" : "n");
        cr_assert_eq(sb_batch_builder_append_binary(bb, 0, rec, (size_t)k, &e), 0);
        if (keep) {
            memcpy(want + wl, rec, (size_t)k);
            want[wl + (size_t)k] = '\n';
            wl += (size_t)k + 1;
            wrows++;
        }
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0);
    sb_batch_builder_free(bb);
    for (size_t target = 4096; target <= ((size_t)64 << 20); target *= 128) {
        const sb_op_impl *op = sb_op_find("filter");
        void *st;
        cr_assert_eq(op->init("{\"field\":\"t\",\"op\":\"eq\",\"value\":\"y\"}", &st, &e), 0);
        sink s = {0};
        sb_op_out *o = sb_op_out_new(target, collect, &s, &e);
        sb_batch *b;
        cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
        cr_assert_eq(sb_op_run(op, st, b, 0, o, &e), 0, "%s", e.msg);
        cr_assert_eq(sb_op_out_flush(o, &e), 0);
        cr_assert_eq(s.rows, wrows);
        cr_assert_eq(s.len, wl);
        cr_assert(memcmp(s.all, want, wl) == 0, "kept records in input order");
        if (target == 4096) {
            cr_assert_gt(s.parts, 3);
            cr_assert_lt(s.max_blob, target + 512, "partitions stay near the target: %zu",
                         s.max_blob);
        }
        sb_batch_close(b);
        sb_op_out_free(o);
        op->free(st);
        free(s.all);
    }
    sb_part_free(blob);
    free(want);
}

/* ---- builder: range copy, blank lines, unsealed blobs -------------------------------------- */

static const sb_column *open_col(sb_type t, const char *const *v, size_t n, bool with_null,
                                 void **blob, sb_batch **b)
{
    sb_field f = {.name = "c", .type = t, .nullable = with_null};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    for (size_t i = 0; i < n; i++) {
        if (with_null && i == 1)
            cr_assert_eq(sb_batch_builder_append_null(bb, 0, &e), 0, "%s", e.msg);
        else
            cr_assert_eq(sb_batch_builder_append_binary(bb, 0, v[i], strlen(v[i]), &e), 0);
    }
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, blob, &len, &e), 0);
    sb_batch_builder_free(bb);
    cr_assert_eq(sb_batch_open(*blob, len, b, &e), 0, "%s", e.msg);
    return sb_batch_column(*b, 0);
}

Test(etl, builder_append_range)
{
    const char *v[] = {"ab", "", "cde", "\xc3\xa9", "f"};
    void *blob;
    sb_batch *b;
    const sb_column *src = open_col(SB_TYPE_UTF8, v, 5, false, &blob, &b);
    sb_field f = {.name = "d", .type = SB_TYPE_UTF8, .nullable = true};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    cr_assert_eq(sb_batch_builder_append_binary(bb, 0, "x", 1, &e), 0);
    cr_assert_eq(sb_batch_builder_append_range(bb, 0, src, 1, 3, false, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_builder_append_null(bb, 0, &e), 0);
    cr_assert_eq(sb_batch_builder_append_range(bb, 0, src, 4, 1, true, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_builder_append_range(bb, 0, src, 4, 2, false, &e), -1, "past the end");
    void *ob;
    size_t ol;
    cr_assert_eq(sb_batch_builder_finish(bb, &ob, &ol, &e), 0);
    sb_batch *o;
    cr_assert_eq(sb_batch_open(ob, ol, &o, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(o, 0);
    const char *want[] = {"x", "", "cde", "\xc3\xa9", NULL, "f"};
    cr_assert_eq(c->length, 6);
    for (size_t r = 0; r < 6; r++) {
        size_t n;
        const char *p = sb_column_binary(c, r, &n);
        if (want[r] == NULL) {
            cr_assert(!sb_column_valid(c, r));
            continue;
        }
        cr_assert(sb_column_valid(c, r));
        cr_assert(n == strlen(want[r]) && memcmp(p, want[r], n) == 0, "row %zu", r);
    }
    sb_batch_close(o);
    sb_part_free(ob);
    sb_batch_close(b);
    sb_part_free(blob);

    /* binary into utf8 is validated (the error names the row and byte); nulls are kept */
    const char *bin[] = {"ok", "skip", "bad\xff!", "z"};
    src = open_col(SB_TYPE_BINARY, bin, 4, true, &blob, &b);
    bb = sb_batch_builder_new(&f, 1, &e);
    cr_assert_eq(sb_batch_builder_append_range(bb, 0, src, 0, 2, false, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_builder_append_range(bb, 0, src, 2, 2, false, &e), -1);
    cr_assert(strstr(e.msg, "row 2 is not valid UTF-8 (byte 3)") != NULL, "%s", e.msg);
    cr_assert_eq(sb_batch_builder_rows(bb), 2);
    cr_assert_eq(sb_batch_builder_finish(bb, &ob, &ol, &e), 0);
    cr_assert_eq(sb_batch_open(ob, ol, &o, &e), 0, "%s", e.msg);
    cr_assert(!sb_column_valid(sb_batch_column(o, 0), 1));
    sb_batch_close(o);
    sb_part_free(ob);
    sb_batch_builder_free(bb);
    sb_batch_close(b);
    sb_part_free(blob);
}

Test(etl, builder_range_verify_checks_a_view)
{
    /* a column described elsewhere (like an Arrow view) that claims utf8 but is not */
    int32_t offs[3] = {0, 2, 5};
    sb_column view = {.name = "v",
                      .type = SB_TYPE_UTF8,
                      .length = 2,
                      .offsets = offs,
                      .values = "ok\xc3(x",
                      .values_len = 5};
    sb_field f = {.name = "d", .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    cr_assert_eq(sb_batch_builder_append_range(bb, 0, &view, 0, 2, true, &e), -1);
    cr_assert(strstr(e.msg, "row 1 is not valid UTF-8 (byte 0)") != NULL, "%s", e.msg);
    cr_assert_eq(sb_batch_builder_rows(bb), 0, "all or nothing");
    sb_batch_builder_free(bb);
}

Test(etl, builder_nonblank_lines_and_unsealed_blobs)
{
    const char *text = "{\"a\":1}\r\n\n  \t\r\n \"x\"\n\t\n{}\r\nlast";
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    size_t used;
    cr_assert_eq(
        sb_batch_builder_append_nonblank_lines(bb, 0, text, strlen(text), false, &used, &e), 0);
    cr_assert_eq(used, strlen(text) - 4, "the unterminated last line waits");
    cr_assert_eq(sb_batch_builder_append_nonblank_lines(bb, 0, text + used, 4, true, &used, &e), 0);
    const char *want[] = {"{\"a\":1}", " \"x\"", "{}", "last"};
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish_unsealed(bb, &blob, &len, &e), 0);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), -1, "an unsealed blob fails the checksum");
    cr_assert_eq(sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, 0);
    cr_assert_eq(c->length, 4);
    for (size_t r = 0; r < 4; r++) {
        size_t n;
        const char *p = sb_column_binary(c, r, &n);
        cr_assert(n == strlen(want[r]) && memcmp(p, want[r], n) == 0, "row %zu", r);
    }
    sb_batch_close(b);
    cr_assert_eq(sb_part_seal(blob, len, &e), 0);
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "sealed afterwards: %s", e.msg);
    sb_batch_close(b);
    sb_part_free(blob);
    sb_batch_builder_free(bb);
}

/* ---- the reader's chunked partitions ------------------------------------------------------ */

typedef struct {
    size_t parts, rows, max_len;
} chunks;

static int count_chunk(void *blob, size_t len, uint64_t rows, void *ud)
{
    chunks *c = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM, &b, &e), 0, "%s", e.msg);
    sb_batch_close(b);
    c->parts++;
    c->rows += rows;
    if (len > c->max_len)
        c->max_len = len;
    sb_part_free(blob);
    return 0;
}

Test(etl, reader_chunks_keep_the_targets_record_limit)
{
    char path[] = "/tmp/sb-test-etl-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    size_t rows = 0;
    for (int i = 0; i < 20000; i++, rows++)
        fprintf(f, "{\"i\":%d,\"pad\":\"%080d\"}\n", i, i);
    /* one record of 3 MiB: longer than 4x a 256 KiB chunk, within 4x the 64 MiB target */
    fputs("{\"big\":\"", f);
    for (int i = 0; i < 3 << 20; i++)
        fputc('y', f);
    fputs("\"}\n\n", f);
    rows++;
    fclose(f);
    sb_io_split sp = {.path = path, .start = 0};
    FILE *g = fopen(path, "r");
    fseek(g, 0, SEEK_END);
    sp.end = sp.file_size = (uint64_t)ftell(g);
    fclose(g);
    chunks c = {0};
    sb_err e;
    cr_assert_eq(sb_io_read_splits_chunked(&sp, 1, SB_FMT_JSONL, NULL, (size_t)64 << 20,
                                           (size_t)256 << 10, count_chunk, &c, &e),
                 0, "%s", e.msg);
    cr_assert_eq(c.rows, rows, "every record once, the blank line skipped");
    cr_assert_geq(c.parts, 8, "partitions of about the chunk size: %zu", c.parts);
    cr_assert_lt(c.max_len, (size_t)4 << 20, "the long record is a partition of its own");
    unlink(path);
}

/* ---- members of records validated before: sb_op_json_find and the ops' trusted input ------ */

static const char *const valid_recs[] = {
    "{\"id\":1,\"lang\":\"en\",\"score\":331,\"text\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}",
    " {\"x\" : {\"lang\":\"de\",\"a\":[{\"id\":2}]} ,\r\n \"l\\u0061ng\" :\t\"e\\n\" , \"id\":9} ",
    "{\"lang\":\"\\\\\",\"id\":[ 1 , \"]}\\\"\" ,{}],\"score\":-1.5e+3,\"lang\":\"en\"}",
    "{\"score\":true,\"id\":null,\"e\\\\\":false,\"\":{}}",
    "{}",
    "[{\"id\":1}]",
    "\"lang\"",
    "-0.5",
    "{\"id\":\"\\ud83d\\ude00\",\"lang\":\"\\\"en\\\"\"}",
};

Test(etl, find_matches_the_scan_on_valid_records)
{
    sb_op_json_key keys[4] = {{"id", 2}, {"lang", 4}, {"score", 5}, {"e\\", 2}};
    for (size_t i = 0; i < sizeof valid_recs / sizeof *valid_recs; i++) {
        size_t n = strlen(valid_recs[i]);
        char *r = malloc(n);
        memcpy(r, valid_recs[i], n);
        sb_op_json_span a[4], b[4];
        sb_op_json_type ta;
        char msg[160] = "";
        cr_assert_eq(sb_op_json_scan(r, n, keys, 4, a, &ta, msg, sizeof msg), 0, "%zu: %s", i, msg);
        sb_op_json_type tb = sb_op_json_find(r, n, keys, 4, b);
        cr_assert_eq(ta, tb, "record %zu", i);
        for (size_t k = 0; k < 4; k++) {
            cr_assert_eq(a[k].type, b[k].type, "record %zu key %zu", i, k);
            cr_assert_eq(a[k].p, b[k].p, "record %zu key %zu", i, k);
            cr_assert_eq(a[k].n, b[k].n, "record %zu key %zu", i, k);
        }
        free(r);
    }
}

/* Runs op over valid_recs with or without input_valid_json; the output records, '\n'-joined. */
static char *run_trusted(const char *name, const char *args, bool trusted)
{
    sb_field fd = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(&fd, 1, &e);
    size_t nrec = sizeof valid_recs / sizeof *valid_recs;
    for (size_t i = 0; i < nrec; i++)
        cr_assert_eq(
            sb_batch_builder_append_binary(bb, 0, valid_recs[i], strlen(valid_recs[i]), &e), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0);
    sb_batch_builder_free(bb);
    const sb_op_impl *op = sb_op_find(name);
    void *st;
    cr_assert_eq(op->init(args, &st, &e), 0, "%s", e.msg);
    cr_assert_not_null(op->input_valid_json);
    if (trusted)
        op->input_valid_json(st);
    sink s = {0};
    sb_op_out *o = sb_op_out_new(1 << 20, collect, &s, &e);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
    /* project refuses records that are not objects: only the objects go to it */
    size_t n = strcmp(name, "project") == 0 ? 5 : nrec;
    cr_assert_eq(op->process(st, b, 0, n, o, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_op_out_flush(o, &e), 0);
    sb_batch_close(b);
    sb_op_out_free(o);
    op->free(st);
    sb_part_free(blob);
    char *out = strndup(s.all ? s.all : "", s.len);
    free(s.all);
    return out;
}

Test(etl, ops_on_validated_input_give_the_same_records)
{
    cr_assert(sb_op_find("filter")->emits_valid_json);
    cr_assert(!sb_op_find("project")->emits_valid_json, "project builds new records");
    static const struct {
        const char *op, *args;
    } cases[] = {
        {"filter", "{\"field\":\"lang\",\"op\":\"eq\",\"value\":\"en\"}"},
        {"filter", "{\"field\":\"lang\",\"op\":\"ne\",\"value\":\"\\\\\"}"},
        {"filter", "{\"field\":\"id\",\"op\":\"ge\",\"value\":2}"},
        {"project", "{\"fields\":[\"score\",\"lang\",\"id\",\"e\\\\\"]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *plain = run_trusted(cases[i].op, cases[i].args, false);
        char *trusted = run_trusted(cases[i].op, cases[i].args, true);
        cr_assert_str_eq(trusted, plain, "case %zu", i);
        cr_assert_neq(strlen(plain), 0, "case %zu keeps something", i);
        free(plain);
        free(trusted);
    }
}

/* ---- building a one-column partition in place --------------------------------------------- */

static void check_blob(void *blob, size_t len, bool sealed, size_t rows, const char *first)
{
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open_ex(blob, len, sealed ? 0 : SB_BATCH_OPEN_SKIP_CHECKSUM, &b, &e), 0,
                 "%s", e.msg);
    cr_assert_eq(sb_batch_rows(b), rows);
    size_t n;
    const char *p = sb_column_binary(sb_batch_column(b, 0), 0, &n);
    cr_assert(n == strlen(first) && memcmp(p, first, n) == 0);
    sb_batch_close(b);
    cr_assert_eq(len % 64, 0);
    cr_assert_eq((uintptr_t)blob % 64, 0);
    sb_part_free(blob);
}

Test(etl, builder_in_place)
{
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8, .nullable = true};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &e);
    cr_assert_eq(sb_batch_builder_build_in_place(b, 8, &e), 0, "%s", e.msg);
    for (int round = 0; round < 3; round++) {
        /* up to 8 rows: in place, bytes() exact */
        for (int i = 0; i < 8; i++) {
            char v[80];
            int k = snprintf(v, sizeof v, "{\"round\":%d,\"i\":%d,\"pad\":\"%040d\"}", round, i, i);
            cr_assert_eq(sb_batch_builder_append_binary(b, 0, v, (size_t)k, &e), 0);
        }
        size_t want = sb_batch_builder_bytes(b), len;
        void *blob;
        bool sealed = round != 1;
        cr_assert_eq(sealed ? sb_batch_builder_finish(b, &blob, &len, &e)
                            : sb_batch_builder_finish_unsealed(b, &blob, &len, &e),
                     0, "%s", e.msg);
        cr_assert_eq(len, want, "round %d: bytes() said %zu, the blob has %zu", round, want, len);
        char first[80];
        snprintf(first, sizeof first, "{\"round\":%d,\"i\":0,\"pad\":\"%040d\"}", round, 0);
        check_blob(blob, len, sealed, 8, first);
    }
    /* more rows than the room: copied as usual, still exact */
    for (int i = 0; i < 20; i++)
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, "x", 1, &e), 0);
    size_t want = sb_batch_builder_bytes(b), len;
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &e), 0);
    cr_assert_eq(len, want);
    check_blob(blob, len, true, 20, "x");
    /* a null: copied as usual (the validity buffer has no room) */
    cr_assert_eq(sb_batch_builder_append_binary(b, 0, "y", 1, &e), 0);
    cr_assert_eq(sb_batch_builder_append_null(b, 0, &e), 0);
    want = sb_batch_builder_bytes(b);
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &e), 0);
    cr_assert_eq(len, want);
    check_blob(blob, len, true, 2, "y");
    /* and in place again afterwards; the reader's lines too */
    size_t used;
    cr_assert_eq(sb_batch_builder_append_nonblank_lines(b, 0, "a\n\nb\n", 5, true, &used, &e), 0);
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &e), 0);
    check_blob(blob, len, true, 2, "a");
    sb_batch_builder_free(b);
    /* only for one binary/utf8 column */
    sb_field two[2] = {{.name = "a", .type = SB_TYPE_UTF8}, {.name = "b", .type = SB_TYPE_INT64}};
    b = sb_batch_builder_new(two, 2, &e);
    cr_assert_eq(sb_batch_builder_build_in_place(b, 8, &e), -1);
    sb_batch_builder_free(b);
    /* a builder freed while it holds in-place values frees them (ASan: no leak) */
    b = sb_batch_builder_new(&f, 1, &e);
    cr_assert_eq(sb_batch_builder_build_in_place(b, 1000, &e), 0);
    cr_assert_eq(sb_batch_builder_append_binary(b, 0, "z", 1, &e), 0);
    sb_batch_builder_free(b);
}

/* The process's resident bytes (statm), 0 when unreadable. */
static size_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f == NULL)
        return 0;
    int n = fscanf(f, "%lu %lu", &size, &res);
    fclose(f);
    return n == 2 ? (size_t)res * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

/* The room in front of a batch built in place is sized for the most rows its span could hold; a
 * finish that memset the unused part faulted all of it in (a sort's held rows: 32 MiB per task
 * under the default budget). The finish leaves it unbacked now, and it still reads as zeros. */
Test(etl, builder_in_place_leaves_unused_room_unbacked)
{
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &e);
    size_t max_rows = (size_t)16 << 20; /* 64 MiB of offsets' room */
    cr_assert_eq(sb_batch_builder_build_in_place(b, max_rows, &e), 0, "%s", e.msg);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, "{\"a\":1}", 7, &e), 0, "%s", e.msg);
    size_t before = resident_bytes(), len;
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &e), 0, "%s", e.msg);
    size_t after = resident_bytes();
    cr_assert_gt(before, 0);
    cr_assert_lt(after, before + ((size_t)16 << 20),
                 "the finish made %zu KiB resident for a room of 64 MiB it did not use",
                 (after - before) >> 10);
    /* the room between the offsets and the values reads as zeros (the blob is sealed over it) */
    const uint8_t *p = blob;
    size_t zeros = 0;
    for (size_t i = 4096; i < ((size_t)60 << 20); i += 4096)
        zeros += p[i] == 0;
    cr_assert_eq(zeros, (((size_t)60 << 20) - 4096) / 4096);
    check_blob(blob, len, true, 8, "{\"a\":1}"); /* frees it */
    sb_batch_builder_free(b);
}

static int collect_unsealed(void *blob, size_t len, uint64_t rows, void *ud)
{
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), -1, "unsealed: the checksum does not match");
    cr_assert_eq(sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM, &b, &e), 0, "%s", e.msg);
    sb_batch_close(b);
    cr_assert_eq(sb_part_seal(blob, len, &e), 0);
    return collect(blob, len, rows, ud);
}

/* An op output for the next op of a task: unsealed, built in place, the same records. */
Test(etl, op_out_unsealed_in_place)
{
    sb_err e;
    sink s = {0};
    sb_op_out *o = sb_op_out_new(4096, collect_unsealed, &s, &e);
    sb_op_out_set_unsealed(o);
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    cr_assert_eq(sb_op_out_set_schema(o, &f, 1, &e), 0, "%s", e.msg);
    size_t want = 0;
    for (int i = 0; i < 500; i++) {
        char v[64];
        int k = snprintf(v, sizeof v, "{\"i\":%d,\"v\":\"%020d\"}", i, i);
        cr_assert_eq(sb_op_out_append_binary(o, v, (size_t)k, &e), 0, "%s", e.msg);
        want += (size_t)k + 1;
    }
    cr_assert_eq(sb_op_out_flush(o, &e), 0);
    cr_assert_eq(s.rows, 500);
    cr_assert_eq(s.len, want);
    cr_assert_gt(s.parts, 3);
    cr_assert(strncmp(s.all, "{\"i\":0,", 7) == 0);
    sb_op_out_free(o);
    free(s.all);
}
