/* sb_arrow_ipc — lib/arrow/ipc.h from the command line, so tests can check it against another
 * Arrow implementation (pyarrow: tests/sdk/test-arrow-ipc.py).
 *
 *   sb_arrow_ipc sample   writes an IPC stream to stdout: the sample batch (every column type,
 *                         with nulls; formula in sample_value below and in the Python test) as
 *                         three record batches: rows 0-4, rows 5-12 (a slice that starts in the
 *                         middle of a bitmap byte) and an empty one, then end of stream.
 *   sb_arrow_ipc dump     reads an IPC stream on stdin and prints each row as one JSON object
 *                         (null, numbers, true/false, strings; binary as "0x<hex>"; fixed-size
 *                         lists as arrays), then "batches N rows N"; exit status 1 with the
 *                         reader's error on stderr for a stream it refuses.
 *   sb_arrow_ipc echo [options]
 *                         an exec stage with framing arrow (tests/unit/test_exec_arrow.c): reads
 *                         the stream message by message and writes each batch back as it comes
 *                         (so it answers mode batches too), then end of stream at end of input.
 *       --seen            adds an int64 column "seen": batches this process has read so far
 *       --times K         writes each batch K times (K = 0: answers nothing)
 *       --exit-after N    exits with status 0 on reading batch N, without answering it
 *       --hang-at N       stops answering (sleeps) at batch N
 *       --garbage         writes a line of text instead of a stream
 *       --empty-first     answers batch 1 with a stream of no columns and no rows, then starts
 *                         a new stream with the real schema
 *       --stderr TEXT     writes TEXT to stderr and exits with status 3 at batch 1
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrow/ipc.h"

#define ROWS 13

static bool is_null(size_t i)
{
    return i % 4 == 1;
}

static int build_sample(void **blob, size_t *len, sb_err *err)
{
    sb_field f[] = {
        {"i8", SB_TYPE_INT8, 0, 0, true, SB_LOGICAL_NONE},
        {"i16", SB_TYPE_INT16, 0, 0, false, SB_LOGICAL_NONE},
        {"i32", SB_TYPE_INT32, 0, 0, true, SB_LOGICAL_NONE},
        {"i64", SB_TYPE_INT64, 0, 0, false, SB_LOGICAL_NONE},
        {"u8", SB_TYPE_UINT8, 0, 0, false, SB_LOGICAL_NONE},
        {"u16", SB_TYPE_UINT16, 0, 0, false, SB_LOGICAL_NONE},
        {"u32", SB_TYPE_UINT32, 0, 0, false, SB_LOGICAL_NONE},
        {"u64", SB_TYPE_UINT64, 0, 0, false, SB_LOGICAL_NONE},
        {"f32", SB_TYPE_FLOAT32, 0, 0, false, SB_LOGICAL_NONE},
        {"f64", SB_TYPE_FLOAT64, 0, 0, true, SB_LOGICAL_NONE},
        {"b", SB_TYPE_BOOL, 0, 0, true, SB_LOGICAL_NONE},
        {"s", SB_TYPE_UTF8, 0, 0, true, SB_LOGICAL_NONE},
        {"bin", SB_TYPE_BINARY, 0, 0, false, SB_LOGICAL_NONE},
        {"t", SB_TYPE_FIXED_LIST, SB_TYPE_FLOAT32, 3, true, SB_LOGICAL_NONE},
        {"ti", SB_TYPE_FIXED_LIST, SB_TYPE_INT64, 2, false, SB_LOGICAL_NONE},
    };
    sb_batch_builder *b = sb_batch_builder_new(f, sizeof f / sizeof *f, err);
    if (b == NULL)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < ROWS && rc == 0; i++) {
        int64_t k = (int64_t)i;
        bool nul = is_null(i);
        char s[64];
        snprintf(s, sizeof s, "row-%zu-\u00e9\u2713", i);
        uint8_t bin[4] = {(uint8_t)i, 0, 255, (uint8_t)i};
        float t[3] = {(float)i, (float)i + 0.25f, -(float)i};
        int64_t ti[2] = {k, -k * k};
        rc |= nul ? sb_batch_builder_append_null(b, 0, err)
                  : sb_batch_builder_append_int(b, 0, k * 9 - 60, err);
        rc |= sb_batch_builder_append_int(b, 1, -30000 + k * 1000, err);
        rc |= nul ? sb_batch_builder_append_null(b, 2, err)
                  : sb_batch_builder_append_int(b, 2, k * -123456, err);
        rc |= sb_batch_builder_append_int(b, 3, k * 1000000000000007LL, err);
        rc |= sb_batch_builder_append_uint(b, 4, (uint64_t)k * 19, err);
        rc |= sb_batch_builder_append_uint(b, 5, (uint64_t)k * 5000, err);
        rc |= sb_batch_builder_append_uint(b, 6, (uint64_t)k * 300000000u, err);
        rc |= sb_batch_builder_append_uint(b, 7, (uint64_t)k * 1400000000000000000ULL, err);
        rc |= sb_batch_builder_append_double(b, 8, (double)k * 0.5 - 1, err);
        rc |= nul ? sb_batch_builder_append_null(b, 9, err)
                  : sb_batch_builder_append_double(b, 9, (double)k / 3.0, err);
        rc |= nul ? sb_batch_builder_append_null(b, 10, err)
                  : sb_batch_builder_append_bool(b, 10, i % 3 == 0, err);
        rc |= nul ? sb_batch_builder_append_null(b, 11, err)
                  : sb_batch_builder_append_binary(b, 11, s, i == 6 ? 0 : strlen(s), err);
        rc |= sb_batch_builder_append_binary(b, 12, bin, sizeof bin, err);
        rc |= nul ? sb_batch_builder_append_null(b, 13, err)
                  : sb_batch_builder_append_list(b, 13, t, 3, err);
        rc |= sb_batch_builder_append_list(b, 14, ti, 2, err);
    }
    if (rc == 0 && sb_batch_builder_finish(b, blob, len, err) != 0)
        rc = -1;
    sb_batch_builder_free(b);
    return rc ? -1 : 0;
}

static int sample(void)
{
    sb_err err = {0};
    void *blob = NULL;
    size_t len = 0;
    sb_batch *bt = NULL;
    sb_ipc_buf out = {0};
    int rc = 1;
    if (build_sample(&blob, &len, &err) != 0 || sb_batch_open(blob, len, &bt, &err) != 0)
        goto done;
    size_t n = sb_batch_ncols(bt);
    sb_field f[16];
    sb_column c[16];
    for (size_t i = 0; i < n; i++) {
        c[i] = *sb_batch_column(bt, i);
        f[i] = sb_field_of(&c[i]);
    }
    if (sb_ipc_write_schema(&out, f, n, &err) != 0 ||
        sb_ipc_write_batch(&out, c, n, 0, 5, &err) != 0 ||
        sb_ipc_write_batch(&out, c, n, 5, ROWS - 5, &err) != 0 ||
        sb_ipc_write_batch(&out, c, n, ROWS, 0, &err) != 0 || sb_ipc_write_eos(&out, &err) != 0)
        goto done;
    rc = fwrite(out.p, 1, out.len, stdout) == out.len ? 0 : 1;
done:
    if (rc != 0 && err.msg[0])
        fprintf(stderr, "sb_arrow_ipc: %s\n", err.msg);
    sb_batch_close(bt);
    sb_part_free(blob);
    sb_ipc_buf_free(&out);
    return rc;
}

static cJSON *number(const sb_column *c, sb_type t, const void *base, size_t i)
{
    char buf[48];
    const uint8_t *p = (const uint8_t *)base + i * sb_type_width(t);
    switch (t) {
    case SB_TYPE_INT8:
        snprintf(buf, sizeof buf, "%d", *(const int8_t *)p);
        break;
    case SB_TYPE_INT16:
        snprintf(buf, sizeof buf, "%d", *(const int16_t *)(const void *)p);
        break;
    case SB_TYPE_INT32:
        snprintf(buf, sizeof buf, "%" PRId32, *(const int32_t *)(const void *)p);
        break;
    case SB_TYPE_INT64:
        snprintf(buf, sizeof buf, "%" PRId64, *(const int64_t *)(const void *)p);
        break;
    case SB_TYPE_UINT8:
        snprintf(buf, sizeof buf, "%u", *p);
        break;
    case SB_TYPE_UINT16:
        snprintf(buf, sizeof buf, "%u", *(const uint16_t *)(const void *)p);
        break;
    case SB_TYPE_UINT32:
        snprintf(buf, sizeof buf, "%" PRIu32, *(const uint32_t *)(const void *)p);
        break;
    case SB_TYPE_UINT64:
        snprintf(buf, sizeof buf, "%" PRIu64, *(const uint64_t *)(const void *)p);
        break;
    case SB_TYPE_FLOAT32:
        snprintf(buf, sizeof buf, "%.17g", (double)*(const float *)(const void *)p);
        break;
    default:
        snprintf(buf, sizeof buf, "%.17g", *(const double *)(const void *)p);
        break;
    }
    (void)c;
    return cJSON_CreateRaw(buf); /* exact digits: a double would round 64-bit integers */
}

static cJSON *value(const sb_column *c, size_t i)
{
    if (c->validity != NULL && !((c->validity[i >> 3] >> (i & 7)) & 1))
        return cJSON_CreateNull();
    switch (c->type) {
    case SB_TYPE_BOOL:
        return cJSON_CreateBool((((const uint8_t *)c->values)[i >> 3] >> (i & 7)) & 1);
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY: {
        const char *p = (const char *)c->values + c->offsets[i];
        size_t n = (size_t)(c->offsets[i + 1] - c->offsets[i]);
        if (c->type == SB_TYPE_UTF8) {
            char *s = strndup(p, n);
            cJSON *j = cJSON_CreateString(s ? s : "");
            free(s);
            return j;
        }
        char *h = malloc(2 * n + 3);
        strcpy(h, "0x");
        for (size_t k = 0; k < n; k++)
            snprintf(h + 2 + 2 * k, 3, "%02x", (unsigned char)p[k]);
        cJSON *j = cJSON_CreateString(h);
        free(h);
        return j;
    }
    case SB_TYPE_FIXED_LIST: {
        cJSON *a = cJSON_CreateArray();
        for (size_t k = 0; k < c->list_size; k++)
            cJSON_AddItemToArray(a, number(c, c->child_type, c->values, i * c->list_size + k));
        return a;
    }
    default:
        return number(c, c->type, c->values, i);
    }
}

static int dump(void)
{
    size_t cap = 1 << 16, len = 0;
    uint8_t *in = malloc(cap);
    for (;;) {
        if (len == cap)
            in = realloc(in, cap *= 2);
        ssize_t r = read(0, in + len, cap - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    sb_ipc_reader rd;
    sb_ipc_reader_init(&rd);
    sb_err err = {0};
    size_t at = 0, rows = 0;
    int rc = 1;
    for (;;) {
        size_t total;
        int fr = sb_ipc_frame(in + at, len - at, len, &total, &err);
        if (fr < 0)
            goto done;
        if (fr > 0) {
            snprintf(err.msg, sizeof err.msg, "the stream ends inside a message (at byte %zu)", at);
            goto done;
        }
        /* a private, 8-aligned copy, as a pipe reader would hold it */
        uint8_t *m = malloc(total ? total : 1);
        memcpy(m, in + at, total);
        sb_ipc_kind kind;
        int r = sb_ipc_read(&rd, m, total, &kind, &err);
        if (r == 0 && kind == SB_IPC_BATCH) {
            for (size_t i = 0; i < rd.rows; i++) {
                cJSON *o = cJSON_CreateObject();
                for (size_t ci = 0; ci < rd.ncols; ci++)
                    cJSON_AddItemToObject(o, rd.cols[ci].name, value(&rd.cols[ci], i));
                char *s = cJSON_PrintUnformatted(o);
                printf("%s\n", s);
                free(s);
                cJSON_Delete(o);
            }
            rows += rd.rows;
        }
        free(m);
        if (r != 0)
            goto done;
        at += total;
        if (kind == SB_IPC_EOS)
            break;
    }
    printf("batches %" PRIu64 " rows %zu\n", rd.batches, rows);
    rc = 0;
done:
    if (rc != 0)
        fprintf(stderr, "sb_arrow_ipc: %s\n", err.msg);
    sb_ipc_reader_free(&rd);
    free(in);
    return rc;
}

/* Reads exactly one message from fd 0 into *buf (grown as needed); 0 at end of input. */
static size_t read_message(uint8_t **buf, size_t *cap, sb_err *err, int *rc)
{
    size_t len = 0, total = 0;
    *rc = 0;
    for (;;) {
        int fr = sb_ipc_frame(*buf, len, 1u << 30, &total, err);
        if (fr < 0) {
            *rc = -1;
            return 0;
        }
        if (fr == 0)
            return total;
        size_t want = total > len ? total - len : (len < 8 ? 8 - len : 4);
        if (len + want > *cap) {
            while (len + want > *cap)
                *cap *= 2;
            *buf = realloc(*buf, *cap);
        }
        ssize_t r = read(0, *buf + len, want);
        if (r <= 0)
            return 0;
        len += (size_t)r;
    }
}

static int echo(int argc, char **argv)
{
    bool seen = false, garbage = false, empty_first = false;
    long times = 1, exit_after = -1, hang_at = -1;
    const char *stderr_text = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--seen") == 0)
            seen = true;
        else if (strcmp(argv[i], "--garbage") == 0)
            garbage = true;
        else if (strcmp(argv[i], "--empty-first") == 0)
            empty_first = true;
        else if (strcmp(argv[i], "--times") == 0 && i + 1 < argc)
            times = atol(argv[++i]);
        else if (strcmp(argv[i], "--exit-after") == 0 && i + 1 < argc)
            exit_after = atol(argv[++i]);
        else if (strcmp(argv[i], "--hang-at") == 0 && i + 1 < argc)
            hang_at = atol(argv[++i]);
        else if (strcmp(argv[i], "--stderr") == 0 && i + 1 < argc)
            stderr_text = argv[++i];
        else
            return fprintf(stderr, "echo: unknown option %s\n", argv[i]), 2;
    }
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    sb_ipc_reader rd;
    sb_ipc_reader_init(&rd);
    sb_err err = {0};
    sb_ipc_buf out = {0};
    bool schema_out = false;
    long n = 0;
    int rc = 0;
    int64_t *seen_vals = NULL;
    for (;;) {
        size_t total = read_message(&buf, &cap, &err, &rc);
        if (total == 0)
            break;
        sb_ipc_kind kind;
        if ((rc = sb_ipc_read(&rd, buf, total, &kind, &err)) != 0 || kind == SB_IPC_EOS)
            break;
        if (kind != SB_IPC_BATCH)
            continue;
        n++;
        if (n == exit_after)
            goto done;
        if (stderr_text != NULL) {
            fprintf(stderr, "%s\n", stderr_text);
            rc = 3;
            goto done;
        }
        while (n == hang_at)
            sleep(60);
        if (garbage) {
            fputs("hello, this is not arrow\n", stdout);
            fflush(stdout);
            continue;
        }
        out.len = 0;
        if (empty_first && n == 1) {
            sb_ipc_write_schema(&out, NULL, 0, &err);
            sb_ipc_write_batch(&out, NULL, 0, 0, 0, &err);
            sb_ipc_write_eos(&out, &err);
        } else {
            size_t nc = rd.ncols + (seen ? 1 : 0);
            sb_field f[64];
            sb_column c[64];
            if (nc > 64)
                return fprintf(stderr, "echo: too many columns\n"), 2;
            memcpy(f, rd.fields, rd.ncols * sizeof *f);
            memcpy(c, rd.cols, rd.ncols * sizeof *c);
            if (seen) {
                seen_vals = realloc(seen_vals, (rd.rows ? rd.rows : 1) * sizeof *seen_vals);
                for (size_t i = 0; i < rd.rows; i++)
                    seen_vals[i] = n;
                f[rd.ncols] = (sb_field){.name = "seen", .type = SB_TYPE_INT64};
                c[rd.ncols] = (sb_column){.name = "seen",
                                          .name_len = 4,
                                          .type = SB_TYPE_INT64,
                                          .length = rd.rows,
                                          .values = seen_vals,
                                          .values_len = 8 * rd.rows};
            }
            if (!schema_out)
                sb_ipc_write_schema(&out, f, nc, &err);
            schema_out = true;
            for (long k = 0; k < times; k++)
                sb_ipc_write_batch(&out, c, nc, 0, rd.rows, &err);
        }
        fflush(stdout); /* one write(): an answer and what follows it arrive together */
        if (write(1, out.p, out.len) != (ssize_t)out.len)
            break;
    }
    if (rc == 0 && !garbage) {
        out.len = 0;
        sb_ipc_write_eos(&out, &err);
        fwrite(out.p, 1, out.len, stdout);
    }
done:
    if (rc == -1)
        fprintf(stderr, "echo: %s\n", err.msg);
    sb_ipc_reader_free(&rd);
    sb_ipc_buf_free(&out);
    free(buf);
    free(seen_vals);
    return rc == 0 ? 0 : rc == 3 ? 3 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "echo") == 0)
        return echo(argc, argv);
    if (argc == 2 && strcmp(argv[1], "sample") == 0)
        return sample();
    if (argc == 2 && strcmp(argv[1], "dump") == 0)
        return dump();
    fprintf(stderr, "usage: sb_arrow_ipc sample|dump|echo [options]\n");
    return 2;
}
