/* thrift.c — the Thrift compact protocol reader and writer (see thrift.h). The reader checks
 * every length against the bytes left before using it and latches the first error; the writer
 * keeps the per-struct "last field id" stack the compact protocol's field deltas need. */
#include "parquet/thrift.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_tc_init(sb_tc_reader *r, const void *p, size_t n)
{
    memset(r, 0, sizeof *r);
    r->p = r->start = p;
    r->end = r->p + n;
}

size_t sb_tc_pos(const sb_tc_reader *r)
{
    return (size_t)(r->p - r->start);
}

bool sb_tc_fail(sb_tc_reader *r, const char *what)
{
    if (!r->bad) {
        r->bad = true;
        snprintf(r->msg, sizeof r->msg, "%s at byte %zu", what, sb_tc_pos(r));
    }
    r->p = r->end; /* nothing more is read after an error */
    return false;
}

uint64_t sb_tc_varint(sb_tc_reader *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) {
            sb_tc_fail(r, "truncated varint");
            return 0;
        }
        uint8_t b = *r->p++;
        if (shift == 63 && (b & 0x7e) != 0) {
            sb_tc_fail(r, "varint overflows 64 bits");
            return 0;
        }
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0)
            return v;
    }
    sb_tc_fail(r, "varint longer than 10 bytes");
    return 0;
}

int64_t sb_tc_i64(sb_tc_reader *r)
{
    uint64_t u = sb_tc_varint(r);
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

int32_t sb_tc_i32(sb_tc_reader *r)
{
    int64_t v = sb_tc_i64(r);
    if (v < INT32_MIN || v > INT32_MAX) {
        sb_tc_fail(r, "i32 out of range");
        return 0;
    }
    return (int32_t)v;
}

int8_t sb_tc_byte(sb_tc_reader *r)
{
    if (r->p >= r->end) {
        sb_tc_fail(r, "truncated byte");
        return 0;
    }
    return (int8_t)*r->p++;
}

double sb_tc_double(sb_tc_reader *r)
{
    if (r->end - r->p < 8) {
        sb_tc_fail(r, "truncated double");
        return 0;
    }
    double d;
    memcpy(&d, r->p, 8); /* little-endian on the wire, as on every target we build for */
    r->p += 8;
    return d;
}

const uint8_t *sb_tc_binary(sb_tc_reader *r, size_t *n)
{
    uint64_t len = sb_tc_varint(r);
    *n = 0;
    if (r->bad)
        return NULL;
    if (len > (uint64_t)(r->end - r->p)) {
        sb_tc_fail(r, "binary length past the end");
        return NULL;
    }
    const uint8_t *s = r->p;
    r->p += len;
    *n = (size_t)len;
    return s;
}

bool sb_tc_list(sb_tc_reader *r, uint8_t *elem_type, size_t *count)
{
    *count = 0;
    *elem_type = 0;
    if (r->p >= r->end)
        return sb_tc_fail(r, "truncated list header");
    uint8_t h = *r->p++;
    uint64_t n = h >> 4;
    if (n == 15)
        n = sb_tc_varint(r);
    if (r->bad)
        return false;
    *elem_type = h & 0x0f;
    if (n > (uint64_t)(r->end - r->p) && !(n == 0))
        return sb_tc_fail(r, "list count past the end");
    *count = (size_t)n;
    return true;
}

bool sb_tc_field(sb_tc_reader *r, int16_t *last, int16_t *id, uint8_t *type)
{
    if (r->p >= r->end)
        return sb_tc_fail(r, "truncated struct (no stop field)");
    uint8_t h = *r->p++;
    *type = h & 0x0f;
    if (*type == SB_TC_STOP) {
        *id = 0;
        return true;
    }
    if (*type > SB_TC_STRUCT)
        return sb_tc_fail(r, "unknown field type");
    int delta = h >> 4;
    if (delta != 0) {
        int v = *last + delta;
        if (v > INT16_MAX)
            return sb_tc_fail(r, "field id overflow");
        *id = (int16_t)v;
    } else {
        int64_t v = sb_tc_i64(r);
        if (r->bad || v < INT16_MIN || v > INT16_MAX)
            return sb_tc_fail(r, "field id out of range");
        *id = (int16_t)v;
    }
    *last = *id;
    return true;
}

static bool skip_depth(sb_tc_reader *r, uint8_t type, int depth, bool in_list);

static bool skip_struct_depth(sb_tc_reader *r, int depth)
{
    if (depth > SB_TC_MAX_DEPTH)
        return sb_tc_fail(r, "nesting too deep");
    int16_t last = 0, id;
    uint8_t t;
    for (;;) {
        if (!sb_tc_field(r, &last, &id, &t))
            return false;
        if (t == SB_TC_STOP)
            return true;
        if (!skip_depth(r, t, depth + 1, false))
            return false;
    }
}

static bool skip_depth(sb_tc_reader *r, uint8_t type, int depth, bool in_list)
{
    if (depth > SB_TC_MAX_DEPTH)
        return sb_tc_fail(r, "nesting too deep");
    switch (type) {
    case SB_TC_TRUE:
    case SB_TC_FALSE:
        if (in_list) /* a bool element is one byte; a bool field has its value in the type */
            sb_tc_byte(r);
        return !r->bad;
    case SB_TC_BYTE:
        sb_tc_byte(r);
        return !r->bad;
    case SB_TC_I16:
    case SB_TC_I32:
    case SB_TC_I64:
        sb_tc_varint(r);
        return !r->bad;
    case SB_TC_DOUBLE:
        sb_tc_double(r);
        return !r->bad;
    case SB_TC_BINARY: {
        size_t n;
        sb_tc_binary(r, &n);
        return !r->bad;
    }
    case SB_TC_LIST:
    case SB_TC_SET: {
        uint8_t et;
        size_t n;
        if (!sb_tc_list(r, &et, &n))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!skip_depth(r, et, depth + 1, true))
                return false;
        return true;
    }
    case SB_TC_MAP: {
        uint64_t n = sb_tc_varint(r);
        if (r->bad)
            return false;
        if (n == 0)
            return true;
        if (n > (uint64_t)(r->end - r->p))
            return sb_tc_fail(r, "map count past the end");
        uint8_t kv = (uint8_t)sb_tc_byte(r);
        for (uint64_t i = 0; i < n && !r->bad; i++)
            if (!skip_depth(r, kv >> 4, depth + 1, true) ||
                !skip_depth(r, kv & 0x0f, depth + 1, true))
                return false;
        return !r->bad;
    }
    case SB_TC_STRUCT:
        return skip_struct_depth(r, depth + 1);
    default:
        return sb_tc_fail(r, "unknown type to skip");
    }
}

bool sb_tc_skip(sb_tc_reader *r, uint8_t type)
{
    return skip_depth(r, type, 0, false);
}

bool sb_tc_skip_struct(sb_tc_reader *r)
{
    return skip_struct_depth(r, 0);
}

bool sb_tc_int_field(sb_tc_reader *r, uint8_t type, int64_t *out)
{
    switch (type) {
    case SB_TC_TRUE:
        *out = 1;
        return true;
    case SB_TC_FALSE:
        *out = 0;
        return true;
    case SB_TC_BYTE:
        *out = sb_tc_byte(r);
        return !r->bad;
    case SB_TC_I16:
    case SB_TC_I32:
    case SB_TC_I64:
        *out = sb_tc_i64(r);
        return !r->bad;
    default:
        return sb_tc_fail(r, "expected an integer field");
    }
}

/* ---- writer ---------------------------------------------------------------------------- */

void sb_tc_wbuf_free(sb_tc_wbuf *w)
{
    free(w->p);
    memset(w, 0, sizeof *w);
}

static void put(sb_tc_wbuf *w, const void *p, size_t n)
{
    if (w->oom)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *q = realloc(w->p, cap);
        if (q == NULL) {
            w->oom = true;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->len, p, n);
    w->len += n;
}

void sb_tc_w_varint(sb_tc_wbuf *w, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    put(w, b, n);
}

void sb_tc_w_zigzag(sb_tc_wbuf *w, int64_t v)
{
    sb_tc_w_varint(w, ((uint64_t)v << 1) ^ (0 - ((uint64_t)v >> 63)));
}

void sb_tc_w_field(sb_tc_wbuf *w, int16_t id, uint8_t type)
{
    int16_t *last = &w->last[w->depth];
    int delta = id - *last;
    if (delta > 0 && delta <= 15) {
        uint8_t h = (uint8_t)(delta << 4 | type);
        put(w, &h, 1);
    } else {
        put(w, &type, 1);
        sb_tc_w_zigzag(w, id);
    }
    *last = id;
}

void sb_tc_w_binary(sb_tc_wbuf *w, const void *p, size_t n)
{
    sb_tc_w_varint(w, n);
    put(w, p, n);
}

void sb_tc_w_list(sb_tc_wbuf *w, uint8_t elem_type, size_t n)
{
    if (n < 15) {
        uint8_t h = (uint8_t)(n << 4 | elem_type);
        put(w, &h, 1);
    } else {
        uint8_t h = (uint8_t)(0xf0 | elem_type);
        put(w, &h, 1);
        sb_tc_w_varint(w, n);
    }
}

void sb_tc_w_struct_begin(sb_tc_wbuf *w)
{
    if (w->depth + 1 >= SB_TC_MAX_DEPTH) {
        w->oom = true; /* deeper than any Parquet struct: a writer bug, reported as failure */
        return;
    }
    w->last[++w->depth] = 0;
}

void sb_tc_w_struct_end(sb_tc_wbuf *w)
{
    uint8_t z = 0;
    put(w, &z, 1);
    if (w->depth > 0)
        w->depth--;
}

void sb_tc_w_i32(sb_tc_wbuf *w, int16_t id, int32_t v)
{
    sb_tc_w_field(w, id, SB_TC_I32);
    sb_tc_w_zigzag(w, v);
}

void sb_tc_w_i64(sb_tc_wbuf *w, int16_t id, int64_t v)
{
    sb_tc_w_field(w, id, SB_TC_I64);
    sb_tc_w_zigzag(w, v);
}

void sb_tc_w_str(sb_tc_wbuf *w, int16_t id, const void *p, size_t n)
{
    sb_tc_w_field(w, id, SB_TC_BINARY);
    sb_tc_w_binary(w, p, n);
}

void sb_tc_w_bool(sb_tc_wbuf *w, int16_t id, bool v)
{
    sb_tc_w_field(w, id, v ? SB_TC_TRUE : SB_TC_FALSE);
}
