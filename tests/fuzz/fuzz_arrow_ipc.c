/* libFuzzer target for lib/arrow/ipc.h: the IPC stream reader takes bytes from user processes
 * (the exec operator's framing "arrow"), so no input may make it read out of bounds, leak,
 * hang, or hand out columns that break their own invariants.
 *
 * Each input is read as a stream (frame, then read, message by message, from an 8-aligned copy
 * and, once, from a misaligned one). Every batch that is accepted is touched completely (every
 * value a column says it has), written back with the IPC writer and read again: the second
 * reading must give the same rows, value for value.
 * Seeds: tests/fuzz/corpus/arrow_ipc/ (our sample stream and pyarrow's streams of every type). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arrow/ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__ubsan_default_options(void);

const char *__ubsan_default_options(void)
{
    return "halt_on_error=1:print_stacktrace=1";
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

#define MAX_MSG (1u << 22)

static volatile uint8_t sink;

static bool valid(const sb_column *c, size_t i)
{
    return c->validity == NULL || ((c->validity[i >> 3] >> (i & 7)) & 1);
}

/* Bytes of row i of c (after checking its offsets) for comparisons. */
static const uint8_t *row(const sb_column *c, size_t i, size_t *n)
{
    switch (c->type) {
    case SB_TYPE_BOOL:
        *n = 0;
        return NULL;
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY:
        CHECK(c->offsets[i] >= 0 && c->offsets[i] <= c->offsets[i + 1]);
        CHECK((size_t)c->offsets[i + 1] <= c->values_len);
        *n = (size_t)(c->offsets[i + 1] - c->offsets[i]);
        return (const uint8_t *)c->values + c->offsets[i];
    case SB_TYPE_FIXED_LIST:
        *n = c->list_size * sb_type_width(c->child_type);
        CHECK((i + 1) * *n <= c->values_len);
        return (const uint8_t *)c->values + i * *n;
    default:
        *n = sb_type_width(c->type);
        CHECK((i + 1) * *n <= c->values_len);
        return (const uint8_t *)c->values + i * *n;
    }
}

static bool bool_at(const sb_column *c, size_t i)
{
    return (((const uint8_t *)c->values)[i >> 3] >> (i & 7)) & 1;
}

static void touch(const sb_ipc_reader *r)
{
    for (size_t ci = 0; ci < r->ncols; ci++) {
        const sb_column *c = &r->cols[ci];
        CHECK(c->length == r->rows);
        for (size_t i = 0; i < c->length; i++) {
            size_t n;
            const uint8_t *p = row(c, i, &n);
            uint8_t acc = valid(c, i);
            if (c->type == SB_TYPE_BOOL)
                acc ^= bool_at(c, i);
            for (size_t k = 0; k < n; k++)
                acc ^= p[k];
            sink ^= acc;
        }
    }
}

/* Writes the reader's last batch and reads it back: the same values. */
static void round_trip(const sb_ipc_reader *r)
{
    sb_ipc_buf out = {0};
    sb_err err = {0};
    size_t first = r->rows > 3 ? 3 : 0; /* a slice, to exercise the writer's shifting */
    CHECK(sb_ipc_write_schema(&out, r->fields, r->ncols, &err) == 0);
    CHECK(sb_ipc_write_batch(&out, r->cols, r->ncols, first, r->rows - first, &err) == 0);
    CHECK(sb_ipc_write_eos(&out, &err) == 0);
    sb_ipc_reader r2;
    sb_ipc_reader_init(&r2);
    size_t at = 0;
    for (int m = 0; m < 3; m++) {
        size_t total;
        CHECK(sb_ipc_frame(out.p + at, out.len - at, out.len, &total, &err) == 0);
        uint8_t *msg = malloc(total);
        memcpy(msg, out.p + at, total);
        sb_ipc_kind kind;
        CHECK(sb_ipc_read(&r2, msg, total, &kind, &err) == 0);
        CHECK((int)kind == m + 1);
        if (kind == SB_IPC_BATCH) {
            CHECK(r2.rows == r->rows - first && r2.ncols == r->ncols);
            for (size_t ci = 0; ci < r->ncols; ci++) {
                const sb_column *a = &r->cols[ci], *b = &r2.cols[ci];
                CHECK(a->type == b->type && a->list_size == b->list_size);
                for (size_t i = 0; i < r2.rows; i++) {
                    CHECK(valid(a, first + i) == valid(b, i));
                    if (!valid(b, i))
                        continue;
                    size_t na, nb;
                    const uint8_t *pa = row(a, first + i, &na), *pb = row(b, i, &nb);
                    CHECK(na == nb && (na == 0 || memcmp(pa, pb, na) == 0));
                    if (a->type == SB_TYPE_BOOL)
                        CHECK(bool_at(a, first + i) == bool_at(b, i));
                }
            }
        }
        free(msg);
        at += total;
    }
    CHECK(at == out.len);
    sb_ipc_reader_free(&r2);
    sb_ipc_buf_free(&out);
}

static void read_stream(const uint8_t *data, size_t size, size_t misalign)
{
    sb_ipc_reader r;
    sb_ipc_reader_init(&r);
    sb_err err = {0};
    size_t at = 0;
    while (at < size) {
        size_t total;
        int fr = sb_ipc_frame(data + at, size - at, MAX_MSG, &total, &err);
        if (fr != 0)
            break;
        CHECK(total > 0 && total <= size - at);
        uint8_t *buf = malloc(total + misalign);
        memcpy(buf + misalign, data + at, total);
        sb_ipc_kind kind;
        int rc = sb_ipc_read(&r, buf + misalign, total, &kind, &err);
        if (rc == 0 && kind == SB_IPC_BATCH) {
            touch(&r);
            if (misalign == 0)
                round_trip(&r);
        }
        free(buf);
        if (rc != 0 || kind == SB_IPC_EOS)
            break;
        at += total;
    }
    sb_ipc_reader_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_stream(data, size, 0);
    read_stream(data, size, 1);
    return 0;
}
