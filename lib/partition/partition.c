/* partition.c — the partition format (see partition.h): the batch builder that appends values
 * column by column and serializes them into one sealed blob, and the checking reader that opens
 * a blob in place (header, checksums, column table, buffers, offsets, UTF-8) as an sb_batch.
 * Owns the builder's growing buffers; an opened batch points into the caller's blob. */

#include "partition/partition.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "partition/crc32c.h"
#include "partition/utf8.h"

/* valgrind's client request, where its header is (zero_untouched); nothing otherwise */
#if defined(__has_include) && __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define MAKE_DEFINED(p, n) (void)VALGRIND_MAKE_MEM_DEFINED((p), (n))
#else
#define MAKE_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the partition format is little-endian and this code reads it in place"
#endif

/* Offsets inside the fixed header (see partition.h). */
enum {
    H_MAGIC = 0,
    H_VERSION = 4,
    H_HSIZE = 6,
    H_TOTAL = 8,
    H_ROWS = 16,
    H_NCOLS = 24,
    H_NBUF = 28,
    H_DATA_OFF = 32,
    H_FLAGS = 36,
    H_RESERVED1 = 40,
    H_HCRC = 48,
    H_DCRC = 52,
    H_RESERVED2 = 56,
    COL_ENTRY = 32,
    BUF_ENTRY = 16,
};

static inline uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void wr16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, sizeof v);
}
static inline void wr32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}
static inline void wr64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}

static inline size_t align_up(size_t n)
{
    return (n + (SB_PART_ALIGN - 1)) & ~(size_t)(SB_PART_ALIGN - 1);
}

static inline size_t bitmap_bytes(size_t bits)
{
    return bits / 8 + (bits % 8 != 0);
}

/* ---- types ---------------------------------------------------------------------------- */

static const char *const type_names[] = {
    [SB_TYPE_BOOL] = "bool",       [SB_TYPE_INT8] = "int8",
    [SB_TYPE_INT16] = "int16",     [SB_TYPE_INT32] = "int32",
    [SB_TYPE_INT64] = "int64",     [SB_TYPE_UINT8] = "uint8",
    [SB_TYPE_UINT16] = "uint16",   [SB_TYPE_UINT32] = "uint32",
    [SB_TYPE_UINT64] = "uint64",   [SB_TYPE_FLOAT32] = "float32",
    [SB_TYPE_FLOAT64] = "float64", [SB_TYPE_BINARY] = "binary",
    [SB_TYPE_UTF8] = "utf8",       [SB_TYPE_FIXED_LIST] = "fixed_list",
};

static bool type_known(unsigned t)
{
    return t >= SB_TYPE_BOOL && t <= SB_TYPE_FIXED_LIST;
}

const char *sb_type_name(sb_type t)
{
    return type_known((unsigned)t) ? type_names[t] : "?";
}

size_t sb_type_width(sb_type t)
{
    switch (t) {
    case SB_TYPE_INT8:
    case SB_TYPE_UINT8:
        return 1;
    case SB_TYPE_INT16:
    case SB_TYPE_UINT16:
        return 2;
    case SB_TYPE_INT32:
    case SB_TYPE_UINT32:
    case SB_TYPE_FLOAT32:
        return 4;
    case SB_TYPE_INT64:
    case SB_TYPE_UINT64:
    case SB_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

sb_type sb_type_parse(const char *name)
{
    for (unsigned t = SB_TYPE_BOOL; t <= SB_TYPE_FIXED_LIST; t++)
        if (name != NULL && strcmp(name, type_names[t]) == 0)
            return (sb_type)t;
    return (sb_type)0;
}

const char *sb_logical_name(sb_logical l)
{
    static const char *const names[] = {"", "date", "timestamp[ms]", "timestamp[us]",
                                        "timestamp[ns]"};
    return (unsigned)l <= SB_LOGICAL_TS_NANOS ? names[l] : "?";
}

const char *sb_logical_problem(unsigned logical, unsigned type)
{
    if (logical == SB_LOGICAL_NONE)
        return NULL;
    if (logical == SB_LOGICAL_DATE)
        return type == SB_TYPE_INT32 ? NULL : "logical type date needs physical type int32";
    if (logical <= SB_LOGICAL_TS_NANOS)
        return type == SB_TYPE_INT64 ? NULL : "logical type timestamp needs physical type int64";
    return "unknown logical type";
}

static bool is_var(sb_type t)
{
    return t == SB_TYPE_BINARY || t == SB_TYPE_UTF8;
}

/* Buffers per column in the blob. */
static unsigned col_nbuf(sb_type t)
{
    return is_var(t) ? 3 : 2;
}

/* Bytes per row of a fixed-width column (numeric or fixed-size list); 0 for others. Overflow
 * is impossible: list_size <= UINT32_MAX and child width <= 8. */
static size_t row_width(sb_type t, sb_type child, uint32_t list_size)
{
    if (t == SB_TYPE_FIXED_LIST)
        return (size_t)list_size * sb_type_width(child);
    return sb_type_width(t);
}

/* Checks a field's type/child/list-size combination; returns NULL or a description. */
static const char *field_problem(unsigned type, unsigned child, uint64_t list_size)
{
    if (!type_known(type))
        return "unknown type";
    if (type == SB_TYPE_FIXED_LIST) {
        if (sb_type_width((sb_type)child) == 0)
            return "fixed-size list child type must be numeric (int8..float64)";
        if (list_size == 0 || list_size > INT32_MAX)
            return "fixed-size list width must be between 1 and 2147483647";
    } else if (child != 0 || list_size != 0) {
        return "child type and list width are only for fixed-size lists";
    }
    return NULL;
}

/* ---- builder -------------------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
    size_t front; /* bytes allocated before p (64-byte aligned base): a blob's header room */
    size_t want;  /* the capacity the first growth takes at least (finish_in_place) */
} buf;

typedef struct bcol {
    char *name;
    size_t name_len;
    sb_type type, child_type;
    uint32_t list_size;
    bool nullable;
    sb_logical logical;
    bool has_validity; /* bitmap materialized (lazily, on the first null) */
    size_t width;      /* bytes per value for numeric/list, 0 otherwise */
    size_t length, null_count;
    buf validity; /* bits */
    buf values;   /* numeric/list values, bool bits, binary/utf8 bytes */
    buf offsets;  /* binary/utf8: int32[length+1] */
    /* fixed-width values lent by the caller (sb_batch_builder_lend_values) instead of `values`:
     * copied once, into the blob, by finish; into `values` before anything else appends */
    const uint8_t *borrow;
} bcol;

struct sb_batch_builder {
    size_t ncols;
    bcol *cols;
    void *last_in_place; /* the last blob finished in place (sb_batch_builder_recycle) */
};

/* In place (sb_batch_builder_build_in_place): column 0's values sit where the blob will have
 * them, after `front` bytes of room for the header and the offsets. Can this batch be finished
 * there? Then *data_off is where the offsets go. */
static size_t meta_bytes(const sb_batch_builder *b, size_t *nbuf_out);
static bool in_place(const sb_batch_builder *b, size_t *data_off)
{
    if (b->ncols != 1 || b->cols[0].values.front == 0 || b->cols[0].values.p == NULL ||
        b->cols[0].null_count > 0)
        return false;
    size_t nbuf;
    *data_off = meta_bytes(b, &nbuf);
    return *data_off + (b->cols[0].length + 1) * sizeof(int32_t) <= b->cols[0].values.front;
}

static int buf_grow(buf *b, size_t extra)
{
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need))
        return -1;
    size_t cap = b->cap < 64 ? 64 : b->cap;
    if (cap < b->want)
        cap = b->want;
    while (cap < need) {
        if (cap > SIZE_MAX / 2 - SB_PART_ALIGN) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    if (b->front > 0) { /* aligned, with the room in front: no realloc */
        uint8_t *base = NULL;
        cap = align_up(cap);
        if (cap > SIZE_MAX - b->front ||
            posix_memalign((void **)&base, SB_PART_ALIGN, b->front + cap) != 0)
            return -1;
        if (b->len > 0)
            memcpy(base + b->front, b->p, b->len);
        if (b->p != NULL)
            free(b->p - b->front);
        b->p = base + b->front;
        b->cap = cap;
        return 0;
    }
    uint8_t *p;
    if (b->len == 0 && b->p != NULL) { /* nothing to keep: realloc would copy the old capacity */
        free(b->p);
        b->p = NULL;
    }
    if ((p = realloc(b->p, cap)) == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    if (cap >= ((size_t)4 << 20)) {
        /* a large buffer: transparent huge pages where the kernel allows them, so filling it
         * costs one fault per 2 MiB instead of per 4 KiB (as sb_part_alloc does for blobs) */
        uintptr_t a = ((uintptr_t)p + ((uintptr_t)2 << 20) - 1) & ~(((uintptr_t)2 << 20) - 1);
        uintptr_t e = ((uintptr_t)p + cap) & ~(((uintptr_t)2 << 20) - 1);
        if (e > a)
            (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
    }
    return 0;
}

static inline int buf_reserve(buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    return buf_grow(b, extra);
}

static void buf_free(buf *b)
{
    if (b->p != NULL)
        free(b->p - b->front);
    b->p = NULL;
    b->len = b->cap = 0;
}

static int oom(sb_err *err, const bcol *c, size_t col)
{
    return sb_err_set(err, "partition builder: column %zu \"%.64s\": out of memory", col, c->name);
}

/* Sets or clears bit i of a bitmap whose byte length covers bits [0, i) (appends a byte when
 * i starts a new one). Capacity must be reserved. */
static inline void bit_put(buf *bm, size_t i, bool v)
{
    size_t byte = i >> 3;
    if (byte >= bm->len)
        bm->p[bm->len++] = 0;
    if (v)
        bm->p[byte] |= (uint8_t)(1u << (i & 7));
    else
        bm->p[byte] &= (uint8_t) ~(1u << (i & 7));
}

/* Makes sure one more validity bit fits; materializes the bitmap (all valid so far) if asked. */
static int validity_prepare(bcol *c, bool materialize)
{
    if (!c->has_validity && !materialize)
        return 0;
    if (!c->has_validity) {
        size_t bytes = bitmap_bytes(c->length);
        if (buf_reserve(&c->validity, bytes + 1) != 0)
            return -1;
        memset(c->validity.p, 0xff, bytes);
        c->validity.len = bytes;
        c->has_validity = true;
        return 0;
    }
    return buf_reserve(&c->validity, 1);
}

sb_batch_builder *sb_batch_builder_new(const sb_field *fields, size_t nfields, sb_err *err)
{
    if (nfields > SB_PART_MAX_COLUMNS) {
        sb_err_set(err, "partition builder: %zu columns, at most %d are allowed", nfields,
                   SB_PART_MAX_COLUMNS);
        return NULL;
    }
    if (nfields > 0 && fields == NULL) {
        sb_err_set(err, "partition builder: no fields given");
        return NULL;
    }
    sb_batch_builder *b = calloc(1, sizeof *b);
    if (b == NULL)
        goto oom;
    b->cols = calloc(nfields ? nfields : 1, sizeof *b->cols);
    if (b->cols == NULL)
        goto oom;
    b->ncols = nfields;
    for (size_t i = 0; i < nfields; i++) {
        const sb_field *f = &fields[i];
        bcol *c = &b->cols[i];
        if (f->name == NULL) {
            sb_err_set(err, "partition builder: field %zu has no name", i);
            goto fail;
        }
        size_t nl = strlen(f->name);
        if (nl > SB_PART_MAX_NAME) {
            sb_err_set(err, "partition builder: field %zu: name is %zu bytes, at most %d allowed",
                       i, nl, SB_PART_MAX_NAME);
            goto fail;
        }
        if (!sb_utf8_valid(f->name, nl, NULL)) {
            sb_err_set(err, "partition builder: field %zu: name is not valid UTF-8", i);
            goto fail;
        }
        const char *why = field_problem((unsigned)f->type, (unsigned)f->child_type, f->list_size);
        if (why == NULL)
            why = sb_logical_problem((unsigned)f->logical, (unsigned)f->type);
        if (why != NULL) {
            sb_err_set(err, "partition builder: field %zu \"%.64s\" (%s): %s", i, f->name,
                       sb_type_name(f->type), why);
            goto fail;
        }
        c->name = malloc(nl + 1);
        if (c->name == NULL)
            goto oom;
        memcpy(c->name, f->name, nl + 1);
        c->name_len = nl;
        c->type = f->type;
        c->child_type = f->child_type;
        c->list_size = f->list_size;
        c->nullable = f->nullable;
        c->logical = f->logical;
        c->width = row_width(f->type, f->child_type, f->list_size);
        if (is_var(c->type)) {
            if (buf_reserve(&c->offsets, 64 * sizeof(int32_t)) != 0)
                goto oom;
            memset(c->offsets.p, 0, sizeof(int32_t));
            c->offsets.len = sizeof(int32_t);
        }
    }
    return b;
oom:
    sb_err_set(err, "partition builder: out of memory");
fail:
    sb_batch_builder_free(b);
    return NULL;
}

sb_field sb_field_of(const sb_column *c)
{
    return (sb_field){.name = c->name,
                      .type = c->type,
                      .child_type = c->child_type,
                      .list_size = c->list_size,
                      .nullable = c->nullable,
                      .logical = c->logical};
}

sb_batch_builder *sb_batch_builder_new_like(const sb_batch *batch, sb_err *err)
{
    size_t n = sb_batch_ncols(batch);
    sb_field *fields = calloc(n ? n : 1, sizeof *fields);
    if (fields == NULL) {
        sb_err_set(err, "partition builder: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        fields[i] = sb_field_of(sb_batch_column(batch, i));
    sb_batch_builder *b = sb_batch_builder_new(fields, n, err);
    free(fields);
    return b;
}

void sb_batch_builder_free(sb_batch_builder *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->ncols; i++) {
        free(b->cols[i].name);
        buf_free(&b->cols[i].validity);
        buf_free(&b->cols[i].values);
        buf_free(&b->cols[i].offsets);
    }
    free(b->cols);
    free(b);
}

size_t sb_batch_builder_ncols(const sb_batch_builder *b)
{
    return b->ncols;
}

int sb_batch_builder_find(const sb_batch_builder *b, const char *name)
{
    for (size_t i = 0; i < b->ncols; i++)
        if (strcmp(b->cols[i].name, name) == 0)
            return (int)i;
    return -1;
}

size_t sb_batch_builder_rows(const sb_batch_builder *b)
{
    if (b->ncols == 0)
        return 0;
    size_t rows = SIZE_MAX;
    for (size_t i = 0; i < b->ncols; i++)
        if (b->cols[i].length < rows)
            rows = b->cols[i].length;
    return rows;
}

size_t sb_batch_builder_col_length(const sb_batch_builder *b, size_t col)
{
    return col < b->ncols ? b->cols[col].length : 0;
}

/* Lengths of the column's blob buffers, in blob order. Returns how many. */
static unsigned bcol_buffers(const bcol *c, size_t lens[3], const uint8_t *ptrs[3])
{
    size_t rows = c->length;
    lens[0] = c->null_count > 0 ? bitmap_bytes(rows) : 0;
    ptrs[0] = c->validity.p;
    if (is_var(c->type)) {
        lens[1] = (rows + 1) * sizeof(int32_t);
        ptrs[1] = c->offsets.p;
        lens[2] = c->values.len;
        ptrs[2] = c->values.p;
        return 3;
    }
    lens[1] = c->type == SB_TYPE_BOOL ? bitmap_bytes(rows) : rows * c->width;
    ptrs[1] = c->borrow != NULL ? c->borrow : c->values.p;
    return 2;
}

static size_t meta_bytes(const sb_batch_builder *b, size_t *nbuf_out)
{
    size_t nbuf = 0, names = 0;
    for (size_t i = 0; i < b->ncols; i++) {
        nbuf += col_nbuf(b->cols[i].type);
        names += b->cols[i].name_len + 1;
    }
    *nbuf_out = nbuf;
    return align_up(SB_PART_HEADER_SIZE + COL_ENTRY * b->ncols + BUF_ENTRY * nbuf + names);
}

/* The size of the blob when the buffers are copied into it (finish_into). */
static size_t copy_bytes(const sb_batch_builder *b)
{
    size_t nbuf;
    size_t total = meta_bytes(b, &nbuf);
    for (size_t i = 0; i < b->ncols; i++) {
        size_t lens[3];
        const uint8_t *ptrs[3];
        unsigned n = bcol_buffers(&b->cols[i], lens, ptrs);
        for (unsigned k = 0; k < n; k++)
            total += align_up(lens[k]);
    }
    return total;
}

size_t sb_batch_builder_bytes(const sb_batch_builder *b)
{
    size_t data_off;
    if (in_place(b, &data_off))
        return b->cols[0].values.front + align_up(b->cols[0].values.len);
    return copy_bytes(b);
}

static bcol *get_col(sb_batch_builder *b, size_t col, sb_err *err)
{
    if (col >= b->ncols) {
        sb_err_set(err, "partition builder: column %zu out of range (the batch has %zu)", col,
                   b->ncols);
        return NULL;
    }
    bcol *c = &b->cols[col];
    if (c->borrow != NULL) { /* lent values: copied in before the column changes */
        size_t bytes = c->length * c->width;
        c->values.len = 0;
        if (buf_reserve(&c->values, bytes) != 0) {
            sb_err_set(err, "partition builder: column %zu \"%.64s\": out of memory", col, c->name);
            return NULL;
        }
        memcpy(c->values.p, c->borrow, bytes);
        c->values.len = bytes;
        c->borrow = NULL;
    }
    return c;
}

static int wrong_type(sb_err *err, const bcol *c, size_t col, const char *what)
{
    return sb_err_set(err, "partition builder: column %zu \"%.64s\" is %s, cannot append %s", col,
                      c->name, sb_type_name(c->type), what);
}

/* Appends one fixed-width value (w bytes) plus its validity bit. */
static inline int push_fixed(bcol *c, size_t col, const void *v, size_t w, sb_err *err)
{
    if (buf_reserve(&c->values, w) != 0 || validity_prepare(c, false) != 0)
        return oom(err, c, col);
    memcpy(c->values.p + c->values.len, v, w);
    c->values.len += w;
    if (c->has_validity)
        bit_put(&c->validity, c->length, true);
    c->length++;
    return 0;
}

int sb_batch_builder_append_null(sb_batch_builder *b, size_t col, sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (!c->nullable)
        return sb_err_set(err, "partition builder: column %zu \"%.64s\" is not nullable", col,
                          c->name);
    size_t extra = c->type == SB_TYPE_BOOL ? 1 : c->width;
    buf *vb = is_var(c->type) ? &c->offsets : &c->values;
    if (is_var(c->type))
        extra = sizeof(int32_t);
    if (buf_reserve(vb, extra) != 0 || validity_prepare(c, true) != 0)
        return oom(err, c, col);
    if (c->type == SB_TYPE_BOOL) {
        bit_put(&c->values, c->length, false);
    } else if (is_var(c->type)) {
        int32_t end = (int32_t)c->values.len;
        memcpy(c->offsets.p + c->offsets.len, &end, sizeof end);
        c->offsets.len += sizeof end;
    } else {
        memset(c->values.p + c->values.len, 0, c->width);
        c->values.len += c->width;
    }
    bit_put(&c->validity, c->length, false);
    c->null_count++;
    c->length++;
    return 0;
}

int sb_batch_builder_append_int(sb_batch_builder *b, size_t col, int64_t v, sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    int64_t lo, hi;
    switch (c->type) {
    case SB_TYPE_INT8:
        lo = INT8_MIN, hi = INT8_MAX;
        break;
    case SB_TYPE_INT16:
        lo = INT16_MIN, hi = INT16_MAX;
        break;
    case SB_TYPE_INT32:
        lo = INT32_MIN, hi = INT32_MAX;
        break;
    case SB_TYPE_INT64:
        return push_fixed(c, col, &v, 8, err);
    case SB_TYPE_UINT8:
        lo = 0, hi = UINT8_MAX;
        break;
    case SB_TYPE_UINT16:
        lo = 0, hi = UINT16_MAX;
        break;
    case SB_TYPE_UINT32:
        lo = 0, hi = UINT32_MAX;
        break;
    case SB_TYPE_UINT64:
        if (v < 0)
            goto range;
        return push_fixed(c, col, &v, 8, err);
    default:
        return wrong_type(err, c, col, "an integer");
    }
    if (v < lo || v > hi)
        goto range;
    switch (c->width) {
    case 1: {
        uint8_t x = (uint8_t)v;
        return push_fixed(c, col, &x, 1, err);
    }
    case 2: {
        uint16_t x = (uint16_t)v;
        return push_fixed(c, col, &x, 2, err);
    }
    default: {
        uint32_t x = (uint32_t)v;
        return push_fixed(c, col, &x, 4, err);
    }
    }
range:
    return sb_err_set(err,
                      "partition builder: column %zu \"%.64s\": %" PRId64 " is out of %s range",
                      col, c->name, v, sb_type_name(c->type));
}

int sb_batch_builder_append_uint(sb_batch_builder *b, size_t col, uint64_t v, sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (c->type == SB_TYPE_UINT64)
        return push_fixed(c, col, &v, 8, err);
    if (sb_type_width(c->type) == 0 || c->type == SB_TYPE_FLOAT32 || c->type == SB_TYPE_FLOAT64)
        return wrong_type(err, c, col, "an integer");
    if (v > INT64_MAX)
        return sb_err_set(err,
                          "partition builder: column %zu \"%.64s\": %" PRIu64 " is out of %s range",
                          col, c->name, v, sb_type_name(c->type));
    return sb_batch_builder_append_int(b, col, (int64_t)v, err);
}

int sb_batch_builder_append_double(sb_batch_builder *b, size_t col, double v, sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (c->type == SB_TYPE_FLOAT64)
        return push_fixed(c, col, &v, 8, err);
    if (c->type == SB_TYPE_FLOAT32) {
        float f = (float)v;
        return push_fixed(c, col, &f, 4, err);
    }
    return wrong_type(err, c, col, "a floating-point value");
}

int sb_batch_builder_append_bool(sb_batch_builder *b, size_t col, bool v, sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (c->type != SB_TYPE_BOOL)
        return wrong_type(err, c, col, "a bool");
    if (buf_reserve(&c->values, 1) != 0 || validity_prepare(c, false) != 0)
        return oom(err, c, col);
    bit_put(&c->values, c->length, v);
    if (c->has_validity)
        bit_put(&c->validity, c->length, true);
    c->length++;
    return 0;
}

static int too_big(sb_err *err, const bcol *c, size_t col)
{
    return sb_err_set(err,
                      "partition builder: column %zu \"%.64s\": binary data would exceed %d bytes "
                      "(Arrow int32 offsets); finish the batch first",
                      col, c->name, INT32_MAX);
}

/* Appends a binary/utf8 value without any checks but capacity and size. */
static inline int push_var(bcol *c, size_t col, const void *p, size_t n, sb_err *err)
{
    if (n > (size_t)INT32_MAX - c->values.len)
        return too_big(err, c, col);
    if (buf_reserve(&c->values, n) != 0 || buf_reserve(&c->offsets, sizeof(int32_t)) != 0 ||
        validity_prepare(c, false) != 0)
        return oom(err, c, col);
    if (n > 0)
        memcpy(c->values.p + c->values.len, p, n);
    c->values.len += n;
    int32_t end = (int32_t)c->values.len;
    memcpy(c->offsets.p + c->offsets.len, &end, sizeof end);
    c->offsets.len += sizeof end;
    if (c->has_validity)
        bit_put(&c->validity, c->length, true);
    c->length++;
    return 0;
}

int sb_batch_builder_append_binary(sb_batch_builder *b, size_t col, const void *p, size_t n,
                                   sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (!is_var(c->type))
        return wrong_type(err, c, col, "bytes");
    if (p == NULL && n > 0)
        return sb_err_set(err, "partition builder: column %zu \"%.64s\": NULL value pointer", col,
                          c->name);
    size_t bad;
    if (c->type == SB_TYPE_UTF8 && !sb_utf8_valid(p, n, &bad))
        return sb_err_set(err,
                          "partition builder: column %zu \"%.64s\" (utf8): value for row %zu is "
                          "not valid UTF-8 (byte %zu)",
                          col, c->name, c->length, bad);
    return push_var(c, col, p, n, err);
}

int sb_batch_builder_append_range(sb_batch_builder *b, size_t col, const sb_column *src,
                                  size_t first, size_t n, bool verify, sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (!is_var(c->type) || src == NULL || !is_var(src->type))
        return wrong_type(err, c, col, "a range of a binary/utf8 column");
    if (first > src->length || n > src->length - first)
        return sb_err_set(err,
                          "partition builder: column %zu \"%.64s\": rows [%zu, %zu) of a column "
                          "of %zu",
                          col, c->name, first, first + n, src->length);
    if (n == 0)
        return 0;
    if (src->null_count > 0) { /* value by value, nulls kept */
        for (size_t r = first; r < first + n; r++) {
            size_t len;
            const void *p = sb_column_binary(src, r, &len);
            int rc = !sb_column_valid(src, r) ? sb_batch_builder_append_null(b, col, err)
                     : src->type == SB_TYPE_UTF8 && !verify
                         ? push_var(c, col, p, len, err)
                         : sb_batch_builder_append_binary(b, col, p, len, err);
            if (rc != 0)
                return -1;
        }
        return 0;
    }
    const int32_t *o = src->offsets + first;
    size_t bytes = (size_t)(o[n] - o[0]);
    const uint8_t *data = src->values == NULL ? NULL : (const uint8_t *)src->values + o[0];
    size_t bad;
    bool check = c->type == SB_TYPE_UTF8 && (verify || src->type != SB_TYPE_UTF8);
    if (check && !sb_utf8_valid(data, bytes, &bad)) {
        size_t r = first;
        while (r + 1 < first + n && (size_t)(src->offsets[r + 1] - o[0]) <= bad)
            r++;
        return sb_err_set(err,
                          "partition builder: column %zu \"%.64s\" (utf8): value for row %zu is "
                          "not valid UTF-8 (byte %zu)",
                          col, c->name, c->length + (r - first),
                          bad - (size_t)(src->offsets[r] - o[0]));
    }
    /* the bytes are valid as a whole; each value must be too: no row may start inside a
     * character (offsets of their own over valid text can cut one in two) */
    for (size_t i = 1; check && i < n; i++) {
        size_t at = (size_t)(o[i] - o[0]);
        if (at < bytes && (data[at] & 0xC0) == 0x80)
            return sb_err_set(err,
                              "partition builder: column %zu \"%.64s\" (utf8): value for row %zu "
                              "is not valid UTF-8 (it ends inside a character, at its byte %zu)",
                              col, c->name, c->length + i - 1, at - (size_t)(o[i - 1] - o[0]));
    }
    size_t ob;
    if (bytes > (size_t)INT32_MAX - c->values.len)
        return too_big(err, c, col);
    if (__builtin_mul_overflow(n, sizeof(int32_t), &ob) || buf_reserve(&c->values, bytes) != 0 ||
        buf_reserve(&c->offsets, ob) != 0 ||
        (c->has_validity && buf_reserve(&c->validity, bitmap_bytes(c->length + n) + 1) != 0))
        return oom(err, c, col);
    if (bytes > 0)
        memcpy(c->values.p + c->values.len, data, bytes);
    int32_t shift = (int32_t)c->values.len - o[0];
    uint8_t *dst = c->offsets.p + c->offsets.len;
    for (size_t i = 0; i < n; i++) {
        int32_t v = o[i + 1] + shift;
        memcpy(dst + i * sizeof v, &v, sizeof v);
    }
    c->values.len += bytes;
    c->offsets.len += ob;
    if (c->has_validity)
        for (size_t i = 0; i < n; i++)
            bit_put(&c->validity, c->length + i, true);
    c->length += n;
    return 0;
}

int sb_batch_builder_append_list(sb_batch_builder *b, size_t col, const void *values, size_t n,
                                 sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (c->type != SB_TYPE_FIXED_LIST)
        return wrong_type(err, c, col, "a list");
    if (n != c->list_size)
        return sb_err_set(err,
                          "partition builder: column %zu \"%.64s\": list of %zu values, the "
                          "column's fixed width is %" PRIu32,
                          col, c->name, n, c->list_size);
    if (values == NULL)
        return sb_err_set(err, "partition builder: column %zu \"%.64s\": NULL list", col, c->name);
    return push_fixed(c, col, values, c->width, err);
}

static size_t count_zero_bits(const uint8_t *bm, size_t from, size_t to);

static int append_values(sb_batch_builder *b, size_t col, const void *values, size_t n,
                         const uint8_t *validity, bool lend, sb_err *err);

int sb_batch_builder_append_values(sb_batch_builder *b, size_t col, const void *values, size_t n,
                                   const uint8_t *validity, sb_err *err)
{
    return append_values(b, col, values, n, validity, false, err);
}

int sb_batch_builder_lend_values(sb_batch_builder *b, size_t col, const void *values, size_t n,
                                 const uint8_t *validity, sb_err *err)
{
    return append_values(b, col, values, n, validity, true, err);
}

static int append_values(sb_batch_builder *b, size_t col, const void *values, size_t n,
                         const uint8_t *validity, bool lend, sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (is_var(c->type))
        return wrong_type(err, c, col, "fixed-width values");
    if (n == 0)
        return 0;
    if (values == NULL)
        return sb_err_set(err, "partition builder: column %zu \"%.64s\": NULL values", col,
                          c->name);
    size_t nulls = validity != NULL ? count_zero_bits(validity, 0, n) : 0;
    if (nulls > 0 && !c->nullable)
        return sb_err_set(err,
                          "partition builder: column %zu \"%.64s\" is not nullable but %zu of "
                          "the values are null",
                          col, c->name, nulls);
    size_t bytes;
    if (c->type == SB_TYPE_BOOL)
        bytes = bitmap_bytes(c->length + n) - bitmap_bytes(c->length);
    else if (__builtin_mul_overflow(n, c->width, &bytes))
        return oom(err, c, col);
    lend = lend && c->length == 0 && c->type != SB_TYPE_BOOL; /* else copied as usual */
    if (!lend && buf_reserve(&c->values, bytes) != 0)
        return oom(err, c, col);
    if (nulls > 0 || c->has_validity) {
        if (validity_prepare(c, true) != 0 ||
            buf_reserve(&c->validity, bitmap_bytes(c->length + n) - c->validity.len) != 0)
            return oom(err, c, col);
    }
    if (c->type == SB_TYPE_BOOL) {
        const uint8_t *v = values;
        for (size_t i = 0; i < n; i++)
            bit_put(&c->values, c->length + i, v[i] != 0);
    } else if (lend) {
        c->borrow = values;
    } else {
        memcpy(c->values.p + c->values.len, values, bytes);
        c->values.len += bytes;
    }
    if (c->has_validity) {
        for (size_t i = 0; i < n; i++)
            bit_put(&c->validity, c->length + i,
                    validity == NULL || ((validity[i >> 3] >> (i & 7)) & 1) != 0);
    }
    c->null_count += nulls;
    c->length += n;
    return 0;
}

/* Is the line s[0..n) empty or only spaces, tabs and '\r'? */
static inline bool blank_line(const char *s, size_t n)
{
    if (n > 0 && (unsigned char)s[0] > ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

static int append_lines(sb_batch_builder *b, size_t col, const void *buf_, size_t len,
                        bool strip_cr, bool final, bool skip_blank, size_t *consumed, sb_err *err)
{
    const char *s = buf_;
    if (consumed != NULL)
        *consumed = 0;
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    if (!is_var(c->type))
        return wrong_type(err, c, col, "lines");
    if (len == 0)
        return 0;
    if (s == NULL)
        return sb_err_set(err, "partition builder: column %zu \"%.64s\": NULL buffer", col,
                          c->name);
    const char *last_nl = memrchr(s, '\n', len);
    size_t use = final ? len : last_nl != NULL ? (size_t)(last_nl - s) + 1 : 0;
    if (use == 0)
        return 0;
    size_t bad;
    if (c->type == SB_TYPE_UTF8 && !sb_utf8_valid(s, use, &bad)) {
        size_t line = 1;
        for (const char *q = s; (q = memchr(q, '\n', (size_t)(s + bad - q))) != NULL; q++)
            line++;
        return sb_err_set(err,
                          "partition builder: column %zu \"%.64s\" (utf8): line %zu of the "
                          "buffer is not valid UTF-8 (buffer byte %zu)",
                          col, c->name, line, bad);
    }
    if (use > (size_t)INT32_MAX - c->values.len)
        return too_big(err, c, col);
    if (buf_reserve(&c->values, use) != 0)
        return oom(err, c, col);
    /* Undo state in case an allocation fails halfway. */
    size_t len0 = c->length, vlen0 = c->values.len, olen0 = c->offsets.len, blen0 = c->validity.len;
    size_t pos = 0;
    while (pos < use) {
        const char *nl = memchr(s + pos, '\n', use - pos);
        size_t end = nl != NULL ? (size_t)(nl - s) : use;
        size_t n = end - pos;
        if (strip_cr && n > 0 && s[end - 1] == '\r')
            n--;
        if (skip_blank && blank_line(s + pos, n)) {
            pos = end + 1;
            continue;
        }
        if (buf_reserve(&c->offsets, sizeof(int32_t)) != 0 || validity_prepare(c, false) != 0) {
            c->length = len0, c->values.len = vlen0, c->offsets.len = olen0,
            c->validity.len = blen0;
            return oom(err, c, col);
        }
        memcpy(c->values.p + c->values.len, s + pos, n);
        c->values.len += n;
        int32_t off = (int32_t)c->values.len;
        memcpy(c->offsets.p + c->offsets.len, &off, sizeof off);
        c->offsets.len += sizeof off;
        if (c->has_validity)
            bit_put(&c->validity, c->length, true);
        c->length++;
        pos = end + 1;
    }
    if (consumed != NULL)
        *consumed = use;
    return 0;
}

int sb_batch_builder_append_lines(sb_batch_builder *b, size_t col, const void *lines, size_t len,
                                  bool strip_cr, bool final, size_t *consumed, sb_err *err)
{
    return append_lines(b, col, lines, len, strip_cr, final, false, consumed, err);
}

int sb_batch_builder_append_nonblank_lines(sb_batch_builder *b, size_t col, const void *lines,
                                           size_t len, bool final, size_t *consumed, sb_err *err)
{
    return append_lines(b, col, lines, len, true, final, true, consumed, err);
}

static size_t count_zero_bits(const uint8_t *bm, size_t from, size_t to)
{
    size_t zeros = 0;
    size_t i = from;
    while (i < to && (i & 7) != 0) {
        zeros += ((bm[i >> 3] >> (i & 7)) & 1) == 0;
        i++;
    }
    while (i + 64 <= to) {
        uint64_t w;
        memcpy(&w, bm + (i >> 3), 8);
        zeros += 64 - (size_t)__builtin_popcountll(w);
        i += 64;
    }
    while (i + 8 <= to) {
        zeros += 8 - (size_t)__builtin_popcount(bm[i >> 3]);
        i += 8;
    }
    while (i < to) {
        zeros += ((bm[i >> 3] >> (i & 7)) & 1) == 0;
        i++;
    }
    return zeros;
}

void sb_batch_builder_truncate(sb_batch_builder *b, size_t rows)
{
    for (size_t i = 0; i < b->ncols; i++) {
        bcol *c = &b->cols[i];
        if (c->length <= rows)
            continue;
        if (c->has_validity) {
            c->null_count -= count_zero_bits(c->validity.p, rows, c->length);
            c->validity.len = bitmap_bytes(rows);
        }
        if (is_var(c->type)) {
            int32_t end;
            memcpy(&end, c->offsets.p + rows * sizeof(int32_t), sizeof end);
            c->values.len = (size_t)end;
            c->offsets.len = (rows + 1) * sizeof(int32_t);
        } else if (c->type == SB_TYPE_BOOL) {
            c->values.len = bitmap_bytes(rows);
        } else if (c->borrow == NULL) {
            c->values.len = rows * c->width;
        } else if (rows == 0) {
            c->borrow = NULL; /* (lent values: the first rows are still the lender's) */
        }
        c->length = rows;
    }
}

void sb_batch_builder_reset(sb_batch_builder *b)
{
    sb_batch_builder_truncate(b, 0);
    for (size_t i = 0; i < b->ncols; i++) {
        b->cols[i].has_validity = false;
        b->cols[i].validity.len = 0;
        b->cols[i].null_count = 0;
    }
}

static void seal(uint8_t *blob, size_t data_off, size_t total)
{
    uint32_t h = sb_crc32c(0, blob, H_HCRC);
    h = sb_crc32c(h, blob + SB_PART_HEADER_SIZE, data_off - SB_PART_HEADER_SIZE);
    wr32(blob + H_HCRC, h);
    wr32(blob + H_DCRC, sb_crc32c(0, blob + data_off, total - data_off));
}

static int finish_into(sb_batch_builder *b, void *dst, size_t cap, size_t *len_out, bool sealed,
                       sb_err *err);

int sb_batch_builder_finish_into(sb_batch_builder *b, void *dst, size_t cap, size_t *len_out,
                                 sb_err *err)
{
    return finish_into(b, dst, cap, len_out, true, err);
}

int sb_batch_builder_finish_into_unsealed(sb_batch_builder *b, void *dst, size_t cap,
                                          size_t *len_out, sb_err *err)
{
    return finish_into(b, dst, cap, len_out, false, err);
}

static int finish_into(sb_batch_builder *b, void *dst, size_t cap, size_t *len_out, bool sealed,
                       sb_err *err)
{
    size_t rows = b->ncols > 0 ? b->cols[0].length : 0;
    for (size_t i = 1; i < b->ncols; i++)
        if (b->cols[i].length != rows)
            return sb_err_set(err,
                              "partition builder: column %zu \"%.64s\" has %zu values but column "
                              "0 \"%.64s\" has %zu",
                              i, b->cols[i].name, b->cols[i].length, b->cols[0].name, rows);
    size_t total = copy_bytes(b);
    if (dst == NULL || cap < total)
        return sb_err_set(err, "partition builder: output buffer of %zu bytes, %zu needed", cap,
                          total);
    size_t nbuf;
    size_t data_off = meta_bytes(b, &nbuf);
    if (data_off > UINT32_MAX)
        return sb_err_set(err, "partition builder: header of %zu bytes is too large", data_off);
    uint8_t *out = dst;
    memset(out, 0, data_off);
    memcpy(out + H_MAGIC, SB_PART_MAGIC, 4);
    wr16(out + H_VERSION, SB_PART_VERSION);
    wr16(out + H_HSIZE, SB_PART_HEADER_SIZE);
    wr64(out + H_TOTAL, total);
    wr64(out + H_ROWS, rows);
    wr32(out + H_NCOLS, (uint32_t)b->ncols);
    wr32(out + H_NBUF, (uint32_t)nbuf);
    wr32(out + H_DATA_OFF, (uint32_t)data_off);
    uint8_t *bt = out + SB_PART_HEADER_SIZE + COL_ENTRY * b->ncols;
    size_t name_off = SB_PART_HEADER_SIZE + COL_ENTRY * b->ncols + BUF_ENTRY * nbuf;
    size_t off = data_off;
    for (size_t i = 0; i < b->ncols; i++) {
        bcol *c = &b->cols[i];
        uint8_t *ce = out + SB_PART_HEADER_SIZE + COL_ENTRY * i;
        ce[0] = (uint8_t)c->type;
        ce[1] = (uint8_t)c->child_type;
        ce[2] = c->nullable ? 1 : 0;
        ce[3] = (uint8_t)c->logical;
        wr32(ce + 4, c->list_size);
        wr64(ce + 8, c->null_count);
        wr32(ce + 16, (uint32_t)name_off);
        wr32(ce + 20, (uint32_t)c->name_len);
        memcpy(out + name_off, c->name, c->name_len + 1);
        name_off += c->name_len + 1;
        size_t lens[3];
        const uint8_t *ptrs[3];
        unsigned n = bcol_buffers(c, lens, ptrs);
        for (unsigned k = 0; k < n; k++) {
            wr64(bt, off);
            wr64(bt + 8, lens[k]);
            bt += BUF_ENTRY;
            if (lens[k] > 0)
                memcpy(out + off, ptrs[k], lens[k]);
            size_t end = align_up(off + lens[k]);
            memset(out + off + lens[k], 0, end - off - lens[k]);
            /* Bits past the last row of a bitmap are zero in the blob. */
            bool bitmap = k == 0 || (k == 1 && c->type == SB_TYPE_BOOL);
            if (bitmap && lens[k] > 0 && (rows & 7) != 0)
                out[off + lens[k] - 1] &= (uint8_t)((1u << (rows & 7)) - 1);
            off = end;
        }
    }
    if (sealed)
        seal(out, data_off, total);
    if (len_out != NULL)
        *len_out = total;
    sb_batch_builder_reset(b);
    return 0;
}

/* Large blobs: 2 MiB-aligned and marked for transparent huge pages, so that first touching a
 * fresh multi-megabyte blob costs one fault per 2 MiB instead of per 4 KiB (measured: filling a
 * new 100 MiB blob goes from ~1.9 to ~6 GiB/s). */
#define HUGE_ALIGN ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

void *sb_part_alloc(size_t n)
{
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX - HUGE_ALIGN)
        return NULL;
    if (n >= HUGE_MIN) {
        void *p = NULL;
        size_t len = (n + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
        if (posix_memalign(&p, HUGE_ALIGN, len) != 0)
            return NULL;
        (void)madvise(p, len, MADV_HUGEPAGE); /* a hint; fine if unsupported */
        return p;
    }
    return aligned_alloc(SB_PART_ALIGN, align_up(n));
}

void sb_part_free(void *blob)
{
    free(blob);
}

/* Zeroes n bytes at p inside one malloc()ed block, most of which was never written: the room
 * in front of a batch built in place, sized for the most rows its span could hold (a sort's held
 * rows: 32 MiB of offsets' room under the default budget, ~3x what ~200-byte records use). A
 * memset faulted all of it in only to write zeros: 4 GiB zeroed in a 2 GiB sort under an 8Gi
 * budget. Instead the whole pages inside are handed back (MADV_DONTNEED: a private anonymous
 * page, as malloc's are, reads as zeros afterwards, and an untouched one stays unbacked); the
 * partial pages at the ends, and all of a small gap, are memset. */
static void zero_untouched(uint8_t *p, size_t n)
{
    const size_t least = (size_t)1 << 20;
    long pg = sysconf(_SC_PAGESIZE);
    if (n >= least && pg > 0) {
        uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
        uintptr_t e = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
        if (e > a && madvise((void *)a, e - a, MADV_DONTNEED) == 0) {
            MAKE_DEFINED((void *)a, e - a); /* valgrind cannot know they read as zeros */
            memset(p, 0, a - (uintptr_t)p);
            memset((void *)e, 0, (uintptr_t)p + n - e);
            return;
        }
    }
    memset(p, 0, n);
}

/* Finishes an in_place() batch: the header and the offsets go in front of the values, whose
 * allocation becomes the blob; the column gets a new buffer for the next batch. */
static void finish_in_place(sb_batch_builder *b, size_t data_off, void **blob_out, size_t *len_out,
                            bool sealed)
{
    bcol *c = &b->cols[0];
    size_t rows = c->length, front = c->values.front, olen = (rows + 1) * sizeof(int32_t);
    size_t total = front + align_up(c->values.len);
    uint8_t *out = c->values.p - front;
    memset(out, 0, data_off);
    memcpy(out + H_MAGIC, SB_PART_MAGIC, 4);
    wr16(out + H_VERSION, SB_PART_VERSION);
    wr16(out + H_HSIZE, SB_PART_HEADER_SIZE);
    wr64(out + H_TOTAL, total);
    wr64(out + H_ROWS, rows);
    wr32(out + H_NCOLS, 1);
    wr32(out + H_NBUF, 3);
    wr32(out + H_DATA_OFF, (uint32_t)data_off);
    uint8_t *ce = out + SB_PART_HEADER_SIZE, *bt = ce + COL_ENTRY;
    size_t name_off = SB_PART_HEADER_SIZE + COL_ENTRY + 3 * BUF_ENTRY;
    ce[0] = (uint8_t)c->type;
    ce[2] = c->nullable ? 1 : 0;
    ce[3] = (uint8_t)c->logical; /* always 0: binary/utf8 carry no logical type */
    wr32(ce + 16, (uint32_t)name_off);
    wr32(ce + 20, (uint32_t)c->name_len);
    memcpy(out + name_off, c->name, c->name_len + 1);
    const uint64_t offs[3] = {data_off, data_off, front}, lens[3] = {0, olen, c->values.len};
    for (unsigned k = 0; k < 3; k++) {
        wr64(bt + BUF_ENTRY * k, offs[k]);
        wr64(bt + BUF_ENTRY * k + 8, lens[k]);
    }
    memcpy(out + data_off, c->offsets.p, olen);
    zero_untouched(out + data_off + olen, front - data_off - olen);
    memset(c->values.p + c->values.len, 0, total - front - c->values.len);
    if (sealed)
        seal(out, data_off, total);
    *blob_out = out;
    if (len_out != NULL)
        *len_out = total;
    /* The next batch gets a buffer as large at once, at its first row: allocated here, it came
     * while this blob was still held, and once the blob was freed the hole it left was split by
     * smaller blocks, so the next buffer could not take it: a sort's reduce, which cuts its
     * held rows into a blob and frees it for each run, grew its heap by ~3x its run per run. */
    c->values.want = c->values.cap;
    b->last_in_place = out;
    c->values.p = NULL;
    c->values.cap = 0;
    c->values.len = 0;
    sb_batch_builder_reset(b);
}

static int finish(sb_batch_builder *b, void **blob_out, size_t *len_out, bool sealed, sb_err *err)
{
    size_t data_off;
    if (in_place(b, &data_off)) {
        finish_in_place(b, data_off, blob_out, len_out, sealed);
        return 0;
    }
    b->last_in_place = NULL; /* a copy: what recycle gets back may sit where that blob was */
    size_t total = copy_bytes(b);
    void *blob = sb_part_alloc(total);
    if (blob == NULL)
        return sb_err_set(err, "partition builder: out of memory for a %zu-byte blob", total);
    size_t len;
    if (finish_into(b, blob, total, &len, sealed, err) != 0) {
        sb_part_free(blob);
        return -1;
    }
    *blob_out = blob;
    if (len_out != NULL)
        *len_out = len;
    return 0;
}

int sb_batch_builder_finish(sb_batch_builder *b, void **blob_out, size_t *len_out, sb_err *err)
{
    return finish(b, blob_out, len_out, true, err);
}

int sb_batch_builder_build_in_place(sb_batch_builder *b, size_t max_rows, sb_err *err)
{
    if (b->ncols != 1 || !is_var(b->cols[0].type))
        return sb_err_set(err, "partition builder: building in place needs one binary/utf8 "
                               "column");
    bcol *c = &b->cols[0];
    size_t nbuf, front;
    if (__builtin_mul_overflow(max_rows + 1, sizeof(int32_t), &front) ||
        __builtin_add_overflow(front, meta_bytes(b, &nbuf), &front) || front > UINT32_MAX)
        return sb_err_set(err, "partition builder: room for %zu rows is too large", max_rows);
    buf_free(&c->values);
    c->values = (buf){.front = align_up(front)};
    b->last_in_place = NULL;
    c->length = 0;
    c->null_count = 0;
    c->has_validity = false;
    c->validity.len = 0;
    c->offsets.len = sizeof(int32_t);
    return 0;
}

void sb_batch_builder_recycle(sb_batch_builder *b, void *blob)
{
    bcol *c = b->ncols == 1 ? &b->cols[0] : NULL;
    if (c == NULL || blob == NULL || blob != b->last_in_place || c->values.p != NULL ||
        c->values.front == 0 || c->values.want == 0) {
        sb_part_free(blob);
        return;
    }
    /* allocated as front + want bytes (buf_grow), the blob's whole room is the values' again */
    c->values.p = (uint8_t *)blob + c->values.front;
    c->values.cap = c->values.want;
    c->values.len = 0;
    b->last_in_place = NULL;
}

int sb_batch_builder_finish_unsealed(sb_batch_builder *b, void **blob_out, size_t *len_out,
                                     sb_err *err)
{
    return finish(b, blob_out, len_out, false, err);
}

int sb_batch_builder_reserve(sb_batch_builder *b, size_t col, size_t values, size_t data_bytes,
                             sb_err *err)
{
    bcol *c = get_col(b, col, err);
    if (c == NULL)
        return -1;
    size_t vbytes = 0;
    bool ok = true;
    if (is_var(c->type)) {
        vbytes = data_bytes;
        size_t ob;
        ok = !__builtin_mul_overflow(values, sizeof(int32_t), &ob) &&
             buf_reserve(&c->offsets, ob) == 0;
    } else if (c->type == SB_TYPE_BOOL) {
        vbytes = values / 8 + 1;
    } else {
        ok = !__builtin_mul_overflow(values, c->width, &vbytes);
    }
    if (!ok || buf_reserve(&c->values, vbytes) != 0)
        return oom(err, c, col);
    return 0;
}

/* ---- reader --------------------------------------------------------------------------- */

struct sb_batch {
    const uint8_t *blob;
    size_t len;
    size_t rows;
    size_t ncols;
    sb_column cols[];
};

static const char *const buf_roles[2][3] = {{"validity", "values", ""},
                                            {"validity", "offsets", "data"}};

/* "column 3 \"name\" (utf8): <msg>" with the standard prefix. */
__attribute__((format(printf, 4, 5))) static int col_err(sb_err *err, size_t i, const sb_column *c,
                                                         const char *fmt, ...)
{
    char msg[SB_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sb_err_set(err, "partition blob: column %zu \"%.64s\" (%s): %s", i, c->name,
                      sb_type_name(c->type), msg);
}

/* Validates that blob[0..len) holds a plausible fixed header and returns its sizes. */
static int check_fixed(const uint8_t *p, size_t len, uint64_t *data_off_out, sb_err *err)
{
    if (len < SB_PART_HEADER_SIZE)
        return sb_err_set(err, "partition blob: %zu bytes is shorter than the %d-byte fixed header",
                          len, SB_PART_HEADER_SIZE);
    uint64_t total;
    if (sb_part_peek(p, len, &total, NULL, err) != 0)
        return -1;
    if (total != len)
        return sb_err_set(
            err, "partition blob: header says the blob is %" PRIu64 " bytes but %zu were given",
            total, len);
    uint64_t ncols = rd32(p + H_NCOLS), nbuf = rd32(p + H_NBUF), data_off = rd32(p + H_DATA_OFF);
    if (ncols > SB_PART_MAX_COLUMNS)
        return sb_err_set(err, "partition blob: header claims %" PRIu64 " columns, at most %d",
                          ncols, SB_PART_MAX_COLUMNS);
    uint64_t tables = SB_PART_HEADER_SIZE + COL_ENTRY * ncols + BUF_ENTRY * nbuf;
    if (data_off % SB_PART_ALIGN != 0 || data_off < tables || data_off > len)
        return sb_err_set(err,
                          "partition blob: data offset %" PRIu64 " is invalid (must be a multiple "
                          "of %d between the %" PRIu64 "-byte header tables and the %zu-byte "
                          "blob end)",
                          data_off, SB_PART_ALIGN, tables, len);
    *data_off_out = data_off;
    return 0;
}

int sb_part_peek(const void *p_, size_t n, uint64_t *total_out, uint64_t *rows_out, sb_err *err)
{
    const uint8_t *p = p_;
    if (p == NULL || n < 16)
        return sb_err_set(err, "partition blob: %zu bytes are too few to read the header", n);
    if (memcmp(p + H_MAGIC, SB_PART_MAGIC, 4) != 0)
        return sb_err_set(err, "partition blob: bad magic (not a partition blob)");
    if (rd16(p + H_VERSION) != SB_PART_VERSION)
        return sb_err_set(err, "partition blob: unsupported version %u (this build reads %d)",
                          (unsigned)rd16(p + H_VERSION), SB_PART_VERSION);
    if (rd16(p + H_HSIZE) != SB_PART_HEADER_SIZE)
        return sb_err_set(err, "partition blob: fixed header size %u, expected %d",
                          (unsigned)rd16(p + H_HSIZE), SB_PART_HEADER_SIZE);
    uint64_t total = rd64(p + H_TOTAL);
    if (total < SB_PART_HEADER_SIZE || total % SB_PART_ALIGN != 0)
        return sb_err_set(err,
                          "partition blob: total length %" PRIu64
                          " is impossible (at least %d and a multiple of %d)",
                          total, SB_PART_HEADER_SIZE, SB_PART_ALIGN);
    if (total_out != NULL)
        *total_out = total;
    if (rows_out != NULL) {
        if (n < 24)
            return sb_err_set(err, "partition blob: %zu bytes are too few to read the row count",
                              n);
        *rows_out = rd64(p + H_ROWS);
    }
    return 0;
}

int sb_part_seal(void *blob, size_t len, sb_err *err)
{
    uint64_t data_off;
    if (check_fixed(blob, len, &data_off, err) != 0)
        return -1;
    seal(blob, (size_t)data_off, len);
    return 0;
}

/* Checks every binary/utf8 offset: starts at 0, never decreases, ends at the data length. */
static int check_offsets(const sb_column *c, size_t ci, const int32_t *o, size_t rows,
                         size_t data_len, sb_err *err)
{
    if (o[0] != 0)
        return col_err(err, ci, c, "offset[0] is %" PRId32 ", must be 0", o[0]);
    int32_t prev = 0;
    size_t bad = SIZE_MAX;
    /* Branch-free scan first (the common, valid case), details only on failure. */
    int32_t worst = 0;
    for (size_t r = 1; r <= rows; r++) {
        worst |= (o[r] < prev) ? 1 : 0;
        prev = o[r];
    }
    if (worst != 0) {
        prev = 0;
        for (size_t r = 1; r <= rows; r++) {
            if (o[r] < prev) {
                bad = r;
                break;
            }
            prev = o[r];
        }
        return col_err(err, ci, c, "offset[%zu]=%" PRId32 " is less than offset[%zu]=%" PRId32, bad,
                       o[bad], bad - 1, o[bad - 1]);
    }
    if ((size_t)o[rows] != data_len)
        return col_err(err, ci, c,
                       "last offset (row %zu) is %" PRId32 " but the data buffer has %zu bytes",
                       rows, o[rows], data_len);
    return 0;
}

static int check_utf8(const sb_column *c, size_t ci, sb_err *err)
{
    const uint8_t *d = c->values;
    size_t bad;
    if (!sb_utf8_valid(d, c->values_len, &bad)) {
        /* Find the row holding the bad byte. */
        size_t lo = 0, hi = c->length;
        while (lo + 1 < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if ((size_t)c->offsets[mid] <= bad)
                lo = mid;
            else
                hi = mid;
        }
        return col_err(err, ci, c, "row %zu is not valid UTF-8 (data byte %zu)", lo, bad);
    }
    /* Valid as a whole; each value is valid too unless a boundary splits a character. */
    for (size_t r = 1; r < c->length; r++) {
        size_t o = (size_t)c->offsets[r];
        if (o < c->values_len && (d[o] & 0xC0) == 0x80)
            return col_err(err, ci, c,
                           "offset[%zu]=%zu splits a UTF-8 character (row %zu is not valid "
                           "UTF-8)",
                           r, o, r - 1);
    }
    return 0;
}

/* What sb_batch_open_ex reads from the fixed header, shared by its phases. */
typedef struct {
    const uint8_t *p;
    size_t len;
    unsigned flags; /* SB_BATCH_OPEN_* */
    uint64_t data_off, rows;
    size_t ncols, nbuf;
} open_ctx;

/* The fixed header: its layout, zero flags and reserved fields, both checksums (unless the caller
 * skips them: a blob it sealed itself) and a row count the columns can hold. */
static int open_header(open_ctx *x, sb_err *err)
{
    const uint8_t *p = x->p;
    if (check_fixed(p, x->len, &x->data_off, err) != 0)
        return -1;
    x->rows = rd64(p + H_ROWS);
    x->ncols = rd32(p + H_NCOLS);
    x->nbuf = rd32(p + H_NBUF);
    if (rd32(p + H_FLAGS) != 0 || rd64(p + H_RESERVED1) != 0 || rd64(p + H_RESERVED2) != 0)
        return sb_err_set(err, "partition blob: nonzero flags or reserved header fields");
    if (!(x->flags & SB_BATCH_OPEN_SKIP_CHECKSUM)) {
        uint32_t h = sb_crc32c(0, p, H_HCRC);
        h = sb_crc32c(h, p + SB_PART_HEADER_SIZE, (size_t)x->data_off - SB_PART_HEADER_SIZE);
        if (h != rd32(p + H_HCRC))
            return sb_err_set(err,
                              "partition blob: header checksum mismatch (stored 0x%08x, computed "
                              "0x%08x)",
                              rd32(p + H_HCRC), h);
        uint32_t d = sb_crc32c(0, p + x->data_off, x->len - (size_t)x->data_off);
        if (d != rd32(p + H_DCRC))
            return sb_err_set(err,
                              "partition blob: data checksum mismatch (stored 0x%08x, computed "
                              "0x%08x)",
                              rd32(p + H_DCRC), d);
    }
    if (x->rows > INT64_MAX || (x->ncols == 0 && x->rows != 0))
        return sb_err_set(err,
                          "partition blob: row count %" PRIu64 " is impossible for %zu columns",
                          x->rows, x->ncols);
    return 0;
}

/* Column entry i into b->cols[i]: a NUL-terminated UTF-8 name inside the name area, a known
 * type, zero reserved bits and a possible null count. */
static int open_column_entry(const open_ctx *x, sb_batch *b, size_t i, sb_err *err)
{
    const uint8_t *p = x->p;
    const size_t names_start = SB_PART_HEADER_SIZE + COL_ENTRY * x->ncols + BUF_ENTRY * x->nbuf;
    const uint8_t *ce = p + SB_PART_HEADER_SIZE + COL_ENTRY * i;
    sb_column *c = &b->cols[i];
    memset(c, 0, sizeof *c);
    size_t noff = rd32(ce + 16), nlen = rd32(ce + 20);
    if (noff < names_start || nlen > SB_PART_MAX_NAME || noff + nlen >= x->data_off ||
        p[noff + nlen] != 0)
        return sb_err_set(err,
                          "partition blob: column %zu: name at %zu (%zu bytes) lies outside the "
                          "name area [%zu, %" PRIu64 ") or lacks its NUL",
                          i, noff, nlen, names_start, x->data_off);
    if (memchr(p + noff, 0, nlen) != NULL || !sb_utf8_valid(p + noff, nlen, NULL))
        return sb_err_set(err, "partition blob: column %zu: name is not NUL-free UTF-8", i);
    c->name = (const char *)p + noff;
    c->name_len = nlen;
    unsigned type = ce[0], child = ce[1];
    c->type = (sb_type)type;
    const char *why = field_problem(type, child, rd32(ce + 4));
    if (why != NULL) {
        if (!type_known(type))
            return sb_err_set(err, "partition blob: column %zu \"%.64s\": unknown type %u", i,
                              c->name, type);
        return col_err(err, i, c, "%s", why);
    }
    if ((ce[2] & ~1u) != 0 || rd64(ce + 24) != 0)
        return col_err(err, i, c, "nonzero reserved bits in the column entry");
    why = sb_logical_problem(ce[3], type);
    if (why != NULL)
        return col_err(err, i, c, "%s (logical byte %u)", why, (unsigned)ce[3]);
    c->logical = (sb_logical)ce[3];
    c->child_type = (sb_type)child;
    c->list_size = rd32(ce + 4);
    c->nullable = (ce[2] & 1) != 0;
    c->length = (size_t)x->rows;
    uint64_t nulls = rd64(ce + 8);
    if (nulls > x->rows || (!c->nullable && nulls != 0))
        return col_err(err, i, c, "null count %" PRIu64 " is impossible (%" PRIu64 " rows, %s)",
                       nulls, x->rows, c->nullable ? "nullable" : "not nullable");
    c->null_count = (size_t)nulls;
    return 0;
}

/* Column i's values (and offsets, for binary and utf8) sized for its row count; offsets in order
 * and utf8 data valid (unless the caller skips that check). bp/bl: the column's nb buffers. */
static int open_column_values(const open_ctx *x, sb_column *c, size_t i, unsigned nb,
                              const uint8_t *const bp[3], const size_t bl[3], sb_err *err)
{
    c->values = bp[nb - 1];
    c->values_len = bl[nb - 1];
    if (nb == 3) {
        size_t want_off;
        if (__builtin_mul_overflow(c->length + 1, sizeof(int32_t), &want_off) || bl[1] != want_off)
            return col_err(err, i, c, "offsets buffer is %zu bytes, %zu rows need (rows+1)*4",
                           bl[1], c->length);
        c->offsets = (const int32_t *)(const void *)bp[1];
        if (check_offsets(c, i, c->offsets, c->length, c->values_len, err) != 0)
            return -1;
        if (c->type == SB_TYPE_UTF8 && !(x->flags & SB_BATCH_OPEN_SKIP_UTF8) &&
            check_utf8(c, i, err) != 0)
            return -1;
        return 0;
    }
    size_t want;
    bool over = false;
    if (c->type == SB_TYPE_BOOL)
        want = bitmap_bytes(c->length);
    else
        over = __builtin_mul_overflow(c->length, row_width(c->type, c->child_type, c->list_size),
                                      &want);
    if (over || c->values_len != want) {
        if (c->type == SB_TYPE_FIXED_LIST)
            return col_err(err, i, c,
                           "values buffer is %zu bytes, %zu rows of %" PRIu32
                           " %s values need %s%zu",
                           c->values_len, c->length, c->list_size, sb_type_name(c->child_type),
                           over ? "more than " : "", over ? SIZE_MAX : want);
        return col_err(err, i, c, "values buffer is %zu bytes, %zu rows need %s%zu", c->values_len,
                       c->length, over ? "more than " : "", over ? SIZE_MAX : want);
    }
    return 0;
}

/* Column i's buffers, entries *bi onwards of the buffer table: in range, aligned, in order (each
 * after *prev_end), a validity bitmap that agrees with the null count, then its values. */
static int open_column_buffers(const open_ctx *x, sb_column *c, size_t i, size_t *bi,
                               size_t *prev_end, sb_err *err)
{
    unsigned nb = col_nbuf(c->type);
    const uint8_t *bp[3] = {0};
    size_t bl[3] = {0};
    for (unsigned k = 0; k < nb; k++, (*bi)++) {
        const uint8_t *be = x->p + SB_PART_HEADER_SIZE + COL_ENTRY * x->ncols + BUF_ENTRY * *bi;
        uint64_t off = rd64(be), blen = rd64(be + 8);
        const char *role = buf_roles[nb == 3][k];
        if (off % SB_PART_ALIGN != 0 || off < *prev_end || off > x->len || blen > x->len - off)
            return col_err(err, i, c,
                           "%s buffer (buffer %zu) at offset %" PRIu64 ", %" PRIu64
                           " bytes: not %d-aligned, overlapping the previous buffer (which ends "
                           "at %zu) or past the blob end (%zu)",
                           role, *bi, off, blen, SB_PART_ALIGN, *prev_end, x->len);
        *prev_end = (size_t)(off + blen);
        bp[k] = x->p + off;
        bl[k] = (size_t)blen;
    }
    size_t want_valid = c->null_count > 0 ? bitmap_bytes(c->length) : 0;
    if (bl[0] != want_valid)
        return col_err(err, i, c,
                       "validity buffer is %zu bytes, %zu expected for %zu rows and %zu nulls",
                       bl[0], want_valid, c->length, c->null_count);
    if (want_valid > 0) {
        c->validity = bp[0];
        size_t z = count_zero_bits(c->validity, 0, c->length);
        if (z != c->null_count)
            return col_err(err, i, c, "validity bitmap has %zu nulls, the header says %zu", z,
                           c->null_count);
    }
    return open_column_values(x, c, i, nb, bp, bl, err);
}

int sb_batch_open_ex(const void *blob, size_t len, unsigned flags, sb_batch **out, sb_err *err)
{
    if (out == NULL)
        return sb_err_set(err, "partition blob: no output pointer");
    *out = NULL;
    open_ctx x = {.p = blob, .len = len, .flags = flags};
    if (x.p == NULL)
        return sb_err_set(err, "partition blob: NULL blob");
    if (((uintptr_t)x.p & 7) != 0)
        return sb_err_set(err, "partition blob: address %p is not 8-byte aligned", blob);
    if (open_header(&x, err) != 0)
        return -1;
    sb_batch *b = malloc(sizeof *b + x.ncols * sizeof(sb_column));
    if (b == NULL)
        return sb_err_set(err, "partition blob: out of memory");
    b->blob = x.p;
    b->len = len;
    b->rows = (size_t)x.rows;
    b->ncols = x.ncols;

    /* Column table and names. */
    size_t want_nbuf = 0;
    for (size_t i = 0; i < x.ncols; i++) {
        if (open_column_entry(&x, b, i, err) != 0)
            goto fail;
        want_nbuf += col_nbuf(b->cols[i].type);
    }
    if (want_nbuf != x.nbuf) {
        sb_err_set(err, "partition blob: header lists %zu buffers, the columns need %zu", x.nbuf,
                   want_nbuf);
        goto fail;
    }

    /* Buffers: in range, aligned, in order, and sized for the row count. */
    size_t bi = 0, prev_end = (size_t)x.data_off;
    for (size_t i = 0; i < x.ncols; i++)
        if (open_column_buffers(&x, &b->cols[i], i, &bi, &prev_end, err) != 0)
            goto fail;
    *out = b;
    return 0;
fail:
    free(b);
    return -1;
}

int sb_batch_open(const void *blob, size_t len, sb_batch **out, sb_err *err)
{
    return sb_batch_open_ex(blob, len, 0, out, err);
}

void sb_batch_close(sb_batch *b)
{
    free(b);
}

size_t sb_batch_rows(const sb_batch *b)
{
    return b->rows;
}

size_t sb_batch_ncols(const sb_batch *b)
{
    return b->ncols;
}

const void *sb_batch_blob(const sb_batch *b)
{
    return b->blob;
}

size_t sb_batch_blob_len(const sb_batch *b)
{
    return b->len;
}

const sb_column *sb_batch_column(const sb_batch *b, size_t col)
{
    return col < b->ncols ? &b->cols[col] : NULL;
}

int sb_batch_find(const sb_batch *b, const char *name)
{
    for (size_t i = 0; i < b->ncols; i++)
        if (strcmp(b->cols[i].name, name) == 0)
            return (int)i;
    return -1;
}

int64_t sb_column_int(const sb_column *c, size_t row)
{
    const void *v = c->values;
    switch (c->type) {
    case SB_TYPE_INT8:
        return ((const int8_t *)v)[row];
    case SB_TYPE_INT16:
        return ((const int16_t *)v)[row];
    case SB_TYPE_INT32:
        return ((const int32_t *)v)[row];
    case SB_TYPE_INT64:
        return ((const int64_t *)v)[row];
    case SB_TYPE_UINT8:
        return ((const uint8_t *)v)[row];
    case SB_TYPE_UINT16:
        return ((const uint16_t *)v)[row];
    case SB_TYPE_UINT32:
        return ((const uint32_t *)v)[row];
    case SB_TYPE_UINT64:
        return (int64_t)((const uint64_t *)v)[row];
    case SB_TYPE_BOOL:
        return sb_column_bool(c, row);
    default:
        return 0;
    }
}

double sb_column_double(const sb_column *c, size_t row)
{
    switch (c->type) {
    case SB_TYPE_FLOAT32:
        return ((const float *)c->values)[row];
    case SB_TYPE_FLOAT64:
        return ((const double *)c->values)[row];
    case SB_TYPE_UINT64:
        return (double)((const uint64_t *)c->values)[row];
    default:
        return (double)sb_column_int(c, row);
    }
}
