/* rowjson.c — typed columns as JSON records (see rowjson.h): each row of a batch becomes one
 * JSON object in a single utf8 "record" column, so sinks that write records can write the output
 * of stages that produce typed columns; also the JSON string quoting and float formatting it
 * uses. The blob it returns is the caller's. */

#include "partition/rowjson.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/utf8.h"

size_t sb_json_quote(const char *s, size_t n, char *dst, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (o < cap)                                                                               \
            dst[o] = (c);                                                                          \
        o++;                                                                                       \
    } while (0)
    PUT('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            PUT('\\');
            PUT((char)c);
        } else if (c < 0x20) {
            PUT('\\');
            PUT('u');
            PUT('0');
            PUT('0');
            PUT(hex[c >> 4]);
            PUT(hex[c & 15]);
        } else {
            PUT((char)c);
        }
    }
    PUT('"');
#undef PUT
    return o;
}

typedef struct {
    char *p;
    size_t len, cap;
} text;

static int grow(text *t, size_t more)
{
    if (t->cap - t->len >= more)
        return 0;
    size_t cap = t->cap ? t->cap : 256;
    while (cap - t->len < more)
        cap *= 2;
    char *p = realloc(t->p, cap);
    if (p == NULL)
        return -1;
    t->p = p;
    t->cap = cap;
    return 0;
}

static int add(text *t, const char *s, size_t n)
{
    if (grow(t, n) != 0)
        return -1;
    memcpy(t->p + t->len, s, n);
    t->len += n;
    return 0;
}

static int add_quoted(text *t, const char *s, size_t n)
{
    size_t q = sb_json_quote(s, n, NULL, 0);
    if (grow(t, q) != 0)
        return -1;
    sb_json_quote(s, n, t->p + t->len, q);
    t->len += q;
    return 0;
}

size_t sb_json_float(char buf[40], double v, bool single)
{
    int n = 0;
    for (int prec = single ? 6 : 15; prec <= (single ? 9 : 17); prec++) {
        n = snprintf(buf, 40, "%.*g", prec, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
            break;
    }
    return (size_t)n;
}

static int add_float(text *t, double v, bool single)
{
    char b[40];
    size_t n = sb_json_float(b, v, single);
    return add(t, b, n);
}

/* Value i of a numeric column's values (fixed-size list children too). Returns -1 for a value
 * JSON cannot hold (NaN, infinity). */
static int add_number(text *t, sb_type type, const void *values, size_t i)
{
    char b[32];
    int n;
    const uint8_t *p = (const uint8_t *)values + i * sb_type_width(type);
    switch (type) {
    case SB_TYPE_INT8:
        n = snprintf(b, sizeof b, "%d", *(const int8_t *)p);
        break;
    case SB_TYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        n = snprintf(b, sizeof b, "%d", v);
        break;
    }
    case SB_TYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        n = snprintf(b, sizeof b, "%" PRId32, v);
        break;
    }
    case SB_TYPE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        n = snprintf(b, sizeof b, "%" PRId64, v);
        break;
    }
    case SB_TYPE_UINT8:
        n = snprintf(b, sizeof b, "%u", *p);
        break;
    case SB_TYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        n = snprintf(b, sizeof b, "%u", v);
        break;
    }
    case SB_TYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        n = snprintf(b, sizeof b, "%" PRIu32, v);
        break;
    }
    case SB_TYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        n = snprintf(b, sizeof b, "%" PRIu64, v);
        break;
    }
    case SB_TYPE_FLOAT32: {
        float v;
        memcpy(&v, p, 4);
        if (!isfinite(v))
            return -2;
        return add_float(t, v, true);
    }
    case SB_TYPE_FLOAT64: {
        double v;
        memcpy(&v, p, 8);
        if (!isfinite(v))
            return -2;
        return add_float(t, v, false);
    }
    default:
        return -1;
    }
    return add(t, b, (size_t)n);
}

/* Appends row r of column c as a JSON value. -1 out of memory, -2 a value JSON cannot hold
 * (err set). */
static int add_value(text *t, const sb_column *c, size_t r, sb_err *err)
{
    if (!sb_column_valid(c, r))
        return add(t, "null", 4);
    switch (c->type) {
    case SB_TYPE_BOOL:
        return sb_column_bool(c, r) ? add(t, "true", 4) : add(t, "false", 5);
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY: {
        size_t n, bad;
        const char *p = sb_column_binary(c, r, &n);
        if (c->type == SB_TYPE_BINARY && !sb_utf8_valid(p, n, &bad)) {
            sb_err_set(err,
                       "column \"%.100s\", row %zu: binary that is not UTF-8 (byte %zu) cannot be "
                       "a JSON string (encode it, e.g. base64, in the stage)",
                       c->name, r, bad);
            return -2;
        }
        return add_quoted(t, p, n);
    }
    case SB_TYPE_FIXED_LIST: {
        if (add(t, "[", 1) != 0)
            return -1;
        for (size_t k = 0; k < c->list_size; k++) {
            if (k > 0 && add(t, ",", 1) != 0)
                return -1;
            int rc = add_number(t, c->child_type, c->values, r * c->list_size + k);
            if (rc == -2)
                sb_err_set(err,
                           "column \"%.100s\", row %zu, element %zu: NaN or infinity "
                           "cannot be written as JSON",
                           c->name, r, k);
            if (rc != 0)
                return rc;
        }
        return add(t, "]", 1);
    }
    default: {
        int rc = add_number(t, c->type, c->values, r);
        if (rc == -2)
            sb_err_set(err, "column \"%.100s\", row %zu: NaN or infinity cannot be written as JSON",
                       c->name, r);
        return rc;
    }
    }
}

int sb_batch_rows_json(const sb_batch *b, void **blob, size_t *len, sb_err *err)
{
    *blob = NULL;
    *len = 0;
    size_t ncols = sb_batch_ncols(b), rows = sb_batch_rows(b);
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, err);
    if (bb == NULL)
        return -1;
    text t = {0};
    int rc = 0;
    for (size_t r = 0; rc == 0 && r < rows; r++) {
        t.len = 0;
        rc = add(&t, "{", 1);
        for (size_t ci = 0; rc == 0 && ci < ncols; ci++) {
            const sb_column *c = sb_batch_column(b, ci);
            if (ci > 0 && add(&t, ",", 1) != 0) {
                rc = -1;
                break;
            }
            if (add_quoted(&t, c->name, c->name_len) != 0 || add(&t, ":", 1) != 0) {
                rc = -1;
                break;
            }
            rc = add_value(&t, c, r, err);
        }
        if (rc == 0)
            rc = add(&t, "}", 1);
        if (rc == -1)
            sb_err_set(err, "out of memory writing rows as JSON");
        if (rc == 0 && sb_batch_builder_append_binary(bb, 0, t.p, t.len, err) != 0)
            rc = -1;
    }
    if (rc == 0 && sb_batch_builder_finish(bb, blob, len, err) != 0)
        rc = -1;
    free(t.p);
    sb_batch_builder_free(bb);
    return rc == 0 ? 0 : -1;
}
