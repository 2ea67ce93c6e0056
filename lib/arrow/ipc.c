/* ipc.c — Arrow IPC stream messages (see ipc.h). Field ids and enum values below are those of
 * Arrow's format/Message.fbs and format/Schema.fbs. */
#include "arrow/ipc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrow/flatbuf.h"
#include "partition/utf8.h"

#define CONTINUATION 0xFFFFFFFFu
#define METADATA_V4 3
#define METADATA_V5 4

enum { MSG_VERSION, MSG_HEADER_TYPE, MSG_HEADER, MSG_BODY_LENGTH };
enum { HDR_SCHEMA = 1, HDR_DICTIONARY_BATCH, HDR_RECORD_BATCH, HDR_TENSOR, HDR_SPARSE_TENSOR };
enum { SCHEMA_ENDIANNESS, SCHEMA_FIELDS };
enum { FIELD_NAME, FIELD_NULLABLE, FIELD_TYPE_TYPE, FIELD_TYPE, FIELD_DICTIONARY, FIELD_CHILDREN };
enum { RB_LENGTH, RB_NODES, RB_BUFFERS, RB_COMPRESSION };
enum {
    T_NULL = 1,
    T_INT,
    T_FLOAT,
    T_BINARY,
    T_UTF8,
    T_BOOL,
    T_DATE = 8,
    T_TIMESTAMP = 10,
    T_FIXED_LIST = 16,
    T_LARGE_BINARY = 19,
    T_LARGE_UTF8 = 20,
};

static const char *const type_names[] = {
    "NONE",          "Null",      "Int",           "FloatingPoint",
    "Binary",        "Utf8",      "Bool",          "Decimal",
    "Date",          "Time",      "Timestamp",     "Interval",
    "List",          "Struct",    "Union",         "FixedSizeBinary",
    "FixedSizeList", "Map",       "Duration",      "LargeBinary",
    "LargeUtf8",     "LargeList", "RunEndEncoded", "BinaryView",
    "Utf8View",      "ListView",  "LargeListView",
};

static const char *type_name(unsigned t)
{
    return t < sizeof type_names / sizeof *type_names ? type_names[t] : "unknown";
}

/* ---- output buffer ----------------------------------------------------------------------- */

static int reserve(sb_ipc_buf *b, size_t more, sb_err *err)
{
    if (b->cap - b->len >= more)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more) {
        if (cap > SIZE_MAX / 2)
            return sb_err_set(err, "arrow ipc: message too large");
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL)
        return sb_err_set(err, "arrow ipc: out of memory");
    b->p = p;
    b->cap = cap;
    return 0;
}

static void put(sb_ipc_buf *b, const void *d, size_t n)
{
    if (n == 0)
        return;
    if (d != NULL)
        memcpy(b->p + b->len, d, n);
    else
        memset(b->p + b->len, 0, n);
    b->len += n;
}

static size_t round8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

void sb_ipc_buf_free(sb_ipc_buf *b)
{
    free(b->p);
    *b = (sb_ipc_buf){0};
}

/* ---- writing ----------------------------------------------------------------------------- */

/* Starts a Message; returns the slot of its header reference. */
static size_t message(sb_fbw *w, uint8_t header_type, size_t body_len)
{
    size_t root = sb_fbw_begin(w);
    sb_fb_field f[4] = {{2, false, METADATA_V5},
                        {1, false, header_type},
                        {4, true, 0},
                        {8, false, (uint64_t)body_len}};
    size_t slot[4] = {0};
    size_t t = sb_fbw_table(w, f, 4, slot);
    sb_fbw_ref_to(w, root, t);
    return slot[MSG_HEADER];
}

/* Frames the finished metadata into out and reserves room for the body. */
static int frame(sb_ipc_buf *out, sb_fbw *w, size_t body_len, sb_err *err)
{
    if (w->oom)
        return sb_err_set(err, "arrow ipc: out of memory");
    size_t meta = round8(w->len);
    if (meta > SB_IPC_MAX_METADATA)
        return sb_err_set(err, "arrow ipc: %zu bytes of metadata is more than the limit", meta);
    if (reserve(out, 8 + meta + body_len, err) != 0)
        return -1;
    uint32_t pre[2] = {CONTINUATION, (uint32_t)meta};
    put(out, pre, 8);
    put(out, w->p, w->len);
    put(out, NULL, meta - w->len);
    return 0;
}

/* Arrow's TimeUnit of a timestamp (1 millisecond, 2 microsecond, 3 nanosecond) and back. */
static int16_t ts_unit(sb_logical l)
{
    return (int16_t)(l - SB_LOGICAL_TS_MILLIS + 1);
}

static uint8_t wire_type(sb_type t, sb_logical l)
{
    if (l == SB_LOGICAL_DATE)
        return T_DATE;
    if (l != SB_LOGICAL_NONE)
        return T_TIMESTAMP;
    switch (t) {
    case SB_TYPE_BOOL:
        return T_BOOL;
    case SB_TYPE_FLOAT32:
    case SB_TYPE_FLOAT64:
        return T_FLOAT;
    case SB_TYPE_BINARY:
        return T_BINARY;
    case SB_TYPE_UTF8:
        return T_UTF8;
    case SB_TYPE_FIXED_LIST:
        return T_FIXED_LIST;
    default:
        return T_INT;
    }
}

static void write_type(sb_fbw *w, size_t slot, sb_type t, sb_logical l, uint32_t list_size)
{
    sb_fb_field f[2] = {{0}, {0}};
    size_t n = 0;
    if (l != SB_LOGICAL_NONE) {
        /* Date {unit: DAY (0)}, written although Arrow's default is MILLISECOND;
         * Timestamp {unit, no timezone} */
        f[0] = (sb_fb_field){2, false, l == SB_LOGICAL_DATE ? 0 : (uint64_t)ts_unit(l)};
        sb_fbw_ref_to(w, slot, sb_fbw_table(w, f, 1, NULL));
        return;
    }
    switch (t) {
    case SB_TYPE_INT8:
    case SB_TYPE_INT16:
    case SB_TYPE_INT32:
    case SB_TYPE_INT64:
    case SB_TYPE_UINT8:
    case SB_TYPE_UINT16:
    case SB_TYPE_UINT32:
    case SB_TYPE_UINT64: {
        bool sgn = t <= SB_TYPE_INT64;
        f[0] = (sb_fb_field){4, false, 8 * sb_type_width(t)};
        f[1] = (sb_fb_field){1, false, sgn};
        n = 2;
        break;
    }
    case SB_TYPE_FLOAT32:
    case SB_TYPE_FLOAT64:
        f[0] = (sb_fb_field){2, false, t == SB_TYPE_FLOAT32 ? 1 : 2};
        n = 1;
        break;
    case SB_TYPE_FIXED_LIST:
        f[0] = (sb_fb_field){4, false, list_size};
        n = 1;
        break;
    default: /* Bool, Utf8, Binary: empty tables */
        break;
    }
    sb_fbw_ref_to(w, slot, sb_fbw_table(w, f, n, NULL));
}

static void write_field(sb_fbw *w, size_t slot, const char *name, sb_type t, sb_logical l,
                        sb_type child, uint32_t list_size, bool nullable)
{
    sb_fb_field f[6] = {{4, true, 0}, {1, false, nullable}, {1, false, wire_type(t, l)},
                        {4, true, 0}, {0, false, 0},        {4, true, 0}};
    size_t s[6] = {0};
    sb_fbw_ref_to(w, slot, sb_fbw_table(w, f, 6, s));
    sb_fbw_ref_to(w, s[FIELD_NAME], sb_fbw_string(w, name, strlen(name)));
    write_type(w, s[FIELD_TYPE], t, l, list_size);
    size_t kids = t == SB_TYPE_FIXED_LIST ? 1 : 0; /* Arrow's readers require the vector */
    size_t v = sb_fbw_ref_vector(w, kids);
    sb_fbw_ref_to(w, s[FIELD_CHILDREN], v);
    if (kids)
        write_field(w, v + 4, "item", child, SB_LOGICAL_NONE, 0, 0, false);
}

int sb_ipc_write_schema(sb_ipc_buf *out, const sb_field *fields, size_t n, sb_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (fields[i].type < SB_TYPE_BOOL || fields[i].type > SB_TYPE_FIXED_LIST ||
            (fields[i].type == SB_TYPE_FIXED_LIST && sb_type_width(fields[i].child_type) == 0) ||
            sb_logical_problem(fields[i].logical, fields[i].type) != NULL)
            return sb_err_set(err, "arrow ipc: column %zu has no Arrow type (type %d)", i,
                              (int)fields[i].type);
    sb_fbw w = {0};
    size_t hs = message(&w, HDR_SCHEMA, 0);
    sb_fb_field f[2] = {{2, false, 0}, {4, true, 0}};
    size_t s[2] = {0};
    sb_fbw_ref_to(&w, hs, sb_fbw_table(&w, f, 2, s));
    size_t v = sb_fbw_ref_vector(&w, n);
    sb_fbw_ref_to(&w, s[SCHEMA_FIELDS], v);
    for (size_t i = 0; i < n; i++)
        write_field(&w, v + 4 + 4 * i, fields[i].name, fields[i].type, fields[i].logical,
                    fields[i].child_type, fields[i].list_size, fields[i].nullable);
    int rc = frame(out, &w, 0, err);
    sb_fbw_free(&w);
    return rc;
}

/* One buffer of a batch's body and how to produce it from the column. */
typedef enum { B_RAW, B_BITS, B_OFFSETS } body_kind;
typedef struct {
    body_kind kind;
    const uint8_t *src; /* RAW: the bytes; BITS: the bitmap */
    const int32_t *offs;
    size_t len;  /* bytes in the body */
    size_t bit0; /* BITS: first bit */
    size_t n;    /* BITS: bits; OFFSETS: values (n+1 offsets) */
} body_buf;

typedef struct {
    int64_t a, b;
} i64pair; /* FieldNode {length, null_count} and Buffer {offset, length} */

static bool bit(const uint8_t *m, size_t i)
{
    return (m[i >> 3] >> (i & 7)) & 1;
}

static size_t count_nulls(const sb_column *c, size_t first, size_t n)
{
    if (c->validity == NULL || c->null_count == 0)
        return 0;
    size_t k = 0;
    for (size_t i = first; i < first + n; i++)
        k += !bit(c->validity, i);
    return k;
}

static void fill_body(sb_ipc_buf *out, const body_buf *b)
{
    uint8_t *d = out->p + out->len;
    switch (b->kind) {
    case B_RAW:
        put(out, b->src, b->len);
        break;
    case B_BITS:
        if (b->bit0 % 8 == 0) {
            put(out, b->src + b->bit0 / 8, b->len);
        } else {
            memset(d, 0, b->len);
            for (size_t i = 0; i < b->n; i++)
                if (bit(b->src, b->bit0 + i))
                    d[i >> 3] |= (uint8_t)(1u << (i & 7));
            out->len += b->len;
        }
        break;
    case B_OFFSETS:
        for (size_t i = 0; i <= b->n; i++) {
            int32_t v = b->offs[i] - b->offs[0];
            memcpy(d + 4 * i, &v, 4);
        }
        out->len += b->len;
        break;
    }
    put(out, NULL, round8(b->len) - b->len);
}

int sb_ipc_write_batch(sb_ipc_buf *out, const sb_column *cols, size_t ncols, size_t first, size_t n,
                       sb_err *err)
{
    i64pair *nodes = calloc(2 * ncols + 1, sizeof *nodes);
    i64pair *bufs = calloc(3 * ncols + 1, sizeof *bufs);
    body_buf *bb = calloc(3 * ncols + 1, sizeof *bb);
    sb_fbw w = {0};
    int rc = -1;
    if (nodes == NULL || bufs == NULL || bb == NULL) {
        sb_err_set(err, "arrow ipc: out of memory");
        goto out;
    }
    size_t nn = 0, nb = 0;
    for (size_t ci = 0; ci < ncols; ci++) {
        const sb_column *c = &cols[ci];
        if (first > c->length || n > c->length - first) {
            sb_err_set(err, "arrow ipc: rows [%zu, %zu) of a column of %zu rows", first, first + n,
                       c->length);
            goto out;
        }
        size_t nulls = count_nulls(c, first, n);
        nodes[nn++] = (i64pair){(int64_t)n, (int64_t)nulls};
        bb[nb++] = nulls ? (body_buf){B_BITS, c->validity, NULL, (n + 7) / 8, first, n}
                         : (body_buf){B_RAW, NULL, NULL, 0, 0, 0};
        switch (c->type) {
        case SB_TYPE_BOOL:
            bb[nb++] = (body_buf){B_BITS, c->values, NULL, (n + 7) / 8, first, n};
            break;
        case SB_TYPE_BINARY:
        case SB_TYPE_UTF8: {
            bb[nb++] = (body_buf){B_OFFSETS, NULL, c->offsets + first, 4 * (n + 1), 0, n};
            size_t a = (size_t)c->offsets[first], z = (size_t)c->offsets[first + n];
            bb[nb++] = (body_buf){B_RAW, (const uint8_t *)c->values + a, NULL, z - a, 0, 0};
            break;
        }
        case SB_TYPE_FIXED_LIST: {
            size_t w1 = c->list_size * sb_type_width(c->child_type);
            nodes[nn++] = (i64pair){(int64_t)(n * c->list_size), 0};
            bb[nb++] = (body_buf){B_RAW, NULL, NULL, 0, 0, 0};
            bb[nb++] =
                (body_buf){B_RAW, (const uint8_t *)c->values + first * w1, NULL, n * w1, 0, 0};
            break;
        }
        default: {
            size_t w1 = sb_type_width(c->type);
            if (w1 == 0) {
                sb_err_set(err, "arrow ipc: column %zu has no Arrow type (type %d)", ci,
                           (int)c->type);
                goto out;
            }
            bb[nb++] =
                (body_buf){B_RAW, (const uint8_t *)c->values + first * w1, NULL, n * w1, 0, 0};
            break;
        }
        }
    }
    size_t body = 0;
    for (size_t i = 0; i < nb; i++) {
        bufs[i] = (i64pair){(int64_t)body, (int64_t)bb[i].len};
        body += round8(bb[i].len);
    }
    size_t hs = message(&w, HDR_RECORD_BATCH, body);
    sb_fb_field f[3] = {{8, false, (uint64_t)n}, {4, true, 0}, {4, true, 0}};
    size_t s[3] = {0};
    sb_fbw_ref_to(&w, hs, sb_fbw_table(&w, f, 3, s));
    sb_fbw_ref_to(&w, s[RB_NODES], sb_fbw_struct_vector(&w, nodes, nn, sizeof *nodes));
    sb_fbw_ref_to(&w, s[RB_BUFFERS], sb_fbw_struct_vector(&w, bufs, nb, sizeof *bufs));
    if (frame(out, &w, body, err) != 0)
        goto out;
    for (size_t i = 0; i < nb; i++)
        fill_body(out, &bb[i]);
    rc = 0;
out:
    sb_fbw_free(&w);
    free(nodes);
    free(bufs);
    free(bb);
    return rc;
}

int sb_ipc_write_eos(sb_ipc_buf *out, sb_err *err)
{
    if (reserve(out, 8, err) != 0)
        return -1;
    uint32_t eos[2] = {CONTINUATION, 0};
    put(out, eos, 8);
    return 0;
}

/* ---- reading ----------------------------------------------------------------------------- */

/* The prefix of a message: its length and the metadata length. -1 when more bytes are needed. */
static int prefix(const uint8_t *p, size_t len, size_t *pre, uint32_t *meta)
{
    if (len < 4)
        return -1;
    uint32_t v;
    memcpy(&v, p, 4);
    if (v != CONTINUATION) { /* the pre-1.0 framing: the length alone */
        *pre = 4;
        *meta = v;
        return 0;
    }
    if (len < 8)
        return -1;
    memcpy(meta, p + 4, 4);
    *pre = 8;
    return 0;
}

int sb_ipc_frame(const uint8_t *p, size_t len, size_t max, size_t *total, sb_err *err)
{
    size_t pre;
    uint32_t meta;
    *total = 0;
    if (prefix(p, len, &pre, &meta) != 0)
        return 1;
    if (meta == 0) {
        *total = pre;
        return 0;
    }
    if (meta > SB_IPC_MAX_METADATA || pre + meta > max)
        return sb_err_set(err,
                          "arrow ipc: a message's metadata length is %u bytes (more than the "
                          "limit: not an Arrow IPC stream?)",
                          meta);
    if (len < pre + meta)
        return 1;
    sb_fbr r = {p + pre, meta, NULL};
    int64_t body = sb_fbr_i64(&r, sb_fbr_root(&r), MSG_BODY_LENGTH, 0);
    if (r.bad)
        return sb_err_set(err, "arrow ipc: invalid message metadata: %s", r.bad);
    if (body < 0 || (uint64_t)body > max - pre - meta)
        return sb_err_set(err, "arrow ipc: a message body of %lld bytes (more than the limit)",
                          (long long)body);
    *total = pre + meta + (size_t)body;
    return len >= *total ? 0 : 1;
}

void sb_ipc_reader_init(sb_ipc_reader *r)
{
    memset(r, 0, sizeof *r);
}

static void drop_scratch(sb_ipc_reader *r)
{
    for (size_t i = 0; i < r->nscratch; i++)
        free(r->scratch[i]);
    r->nscratch = 0;
}

void sb_ipc_reader_free(sb_ipc_reader *r)
{
    drop_scratch(r);
    free(r->scratch);
    for (size_t i = 0; i < r->ncols; i++)
        free((char *)r->fields[i].name);
    free(r->fields);
    free(r->wide);
    free(r->cols);
    memset(r, 0, sizeof *r);
}

static void *scratch(sb_ipc_reader *r, size_t n)
{
    if (r->nscratch == r->capscratch) {
        size_t cap = r->capscratch ? 2 * r->capscratch : 8;
        void **s = realloc(r->scratch, cap * sizeof *s);
        if (s == NULL)
            return NULL;
        r->scratch = s;
        r->capscratch = cap;
    }
    void *p = malloc(n ? n : 1);
    if (p != NULL)
        r->scratch[r->nscratch++] = p;
    return p;
}

/* Maps a Field's type to a column type. */
static int field_type(sb_fbr *fr, sb_fbt fld, const char *name, sb_field *f, bool *wide, bool child,
                      sb_err *err)
{
    uint8_t tt = sb_fbr_u8(fr, fld, FIELD_TYPE_TYPE, 0);
    sb_fbt ty = sb_fbr_table(fr, fld, FIELD_TYPE);
    if (sb_fbr_table(fr, fld, FIELD_DICTIONARY).pos != 0)
        return sb_err_set(err,
                          "arrow ipc: field \"%.100s\" is dictionary-encoded (not supported: "
                          "decode it before writing)",
                          name);
    *wide = false;
    switch (tt) {
    case T_INT: {
        int32_t bits = sb_fbr_i32(fr, ty, 0, 0);
        bool sgn = sb_fbr_u8(fr, ty, 1, 0) != 0;
        static const sb_type s[] = {SB_TYPE_INT8, SB_TYPE_INT16, SB_TYPE_INT32, SB_TYPE_INT64};
        static const sb_type u[] = {SB_TYPE_UINT8, SB_TYPE_UINT16, SB_TYPE_UINT32, SB_TYPE_UINT64};
        int k = bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2 : bits == 64 ? 3 : -1;
        if (k < 0)
            return sb_err_set(err, "arrow ipc: field \"%.100s\": an integer of %d bits", name,
                              (int)bits);
        f->type = sgn ? s[k] : u[k];
        break;
    }
    case T_FLOAT: {
        int16_t prec = sb_fbr_i16(fr, ty, 0, 0);
        if (prec != 1 && prec != 2)
            return sb_err_set(err,
                              "arrow ipc: field \"%.100s\": %s floats are not supported (float32 "
                              "and float64 are)",
                              name, prec == 0 ? "16-bit" : "unknown");
        f->type = prec == 1 ? SB_TYPE_FLOAT32 : SB_TYPE_FLOAT64;
        break;
    }
    case T_BOOL:
        f->type = SB_TYPE_BOOL;
        break;
    case T_DATE:
    case T_TIMESTAMP: {
        /* date32 (unit DAY) and timestamps in ms/us/ns; a timestamp's time zone is dropped,
         * like the Parquet source drops isAdjustedToUTC */
        int16_t unit = sb_fbr_i16(fr, ty, 0, tt == T_DATE ? 1 : 0);
        if (tt == T_DATE ? unit != 0 : (unit < 1 || unit > 3))
            return sb_err_set(err,
                              "arrow ipc: field \"%.100s\": %s with unit %d is not supported "
                              "(date32 and timestamps in ms, us or ns are)",
                              name, type_name(tt), (int)unit);
        f->type = tt == T_DATE ? SB_TYPE_INT32 : SB_TYPE_INT64;
        f->logical = tt == T_DATE ? SB_LOGICAL_DATE : (sb_logical)(SB_LOGICAL_TS_MILLIS + unit - 1);
        break;
    }
    case T_UTF8:
    case T_LARGE_UTF8:
        f->type = SB_TYPE_UTF8;
        *wide = tt == T_LARGE_UTF8;
        break;
    case T_BINARY:
    case T_LARGE_BINARY:
        f->type = SB_TYPE_BINARY;
        *wide = tt == T_LARGE_BINARY;
        break;
    case T_FIXED_LIST: {
        if (child)
            return sb_err_set(err, "arrow ipc: field \"%.100s\": nested lists are not supported",
                              name);
        int32_t size = sb_fbr_i32(fr, ty, 0, 0);
        size_t nk = 0;
        size_t kv = sb_fbr_vector(fr, fld, FIELD_CHILDREN, 4, &nk);
        if (fr->bad)
            break;
        if (size < 1 || nk != 1)
            return sb_err_set(err,
                              "arrow ipc: field \"%.100s\": a fixed-size list needs a size >= 1 "
                              "and one child (size %d, %zu children)",
                              name, (int)size, nk);
        sb_field cf = {0};
        bool cw;
        if (field_type(fr, sb_fbr_table_at(fr, kv, 0), name, &cf, &cw, true, err) != 0)
            return -1;
        if (!fr->bad && sb_type_width(cf.type) == 0)
            return sb_err_set(err,
                              "arrow ipc: field \"%.100s\": a fixed-size list of %s (only lists "
                              "of numbers are supported)",
                              name, sb_type_name(cf.type));
        f->type = SB_TYPE_FIXED_LIST;
        f->child_type = cf.type;
        f->list_size = (uint32_t)size;
        break;
    }
    default:
        if (fr->bad)
            break;
        return sb_err_set(err,
                          "arrow ipc: field \"%.100s\" has Arrow type %s, which has no column "
                          "type here (supported: bool, int8-64, uint8-64, float32/64, date32, "
                          "timestamp (ms/us/ns), utf8, "
                          "binary, large_utf8, large_binary, fixed-size lists of numbers)",
                          name, type_name(tt));
    }
    return 0;
}

static int read_schema(sb_ipc_reader *r, sb_fbr *fr, sb_fbt sch, sb_err *err)
{
    if (sb_fbr_i16(fr, sch, SCHEMA_ENDIANNESS, 0) != 0)
        return sb_err_set(err, "arrow ipc: the stream is big-endian (not supported)");
    size_t n = 0;
    size_t v = sb_fbr_vector(fr, sch, SCHEMA_FIELDS, 4, &n);
    if (fr->bad)
        return sb_err_set(err, "arrow ipc: invalid schema metadata: %s", fr->bad);
    if (n > SB_PART_MAX_COLUMNS)
        return sb_err_set(err, "arrow ipc: %zu columns (at most %d)", n, SB_PART_MAX_COLUMNS);
    r->fields = calloc(n ? n : 1, sizeof *r->fields);
    r->wide = calloc(n ? n : 1, sizeof *r->wide);
    r->cols = calloc(n ? n : 1, sizeof *r->cols);
    if (r->fields == NULL || r->wide == NULL || r->cols == NULL)
        return sb_err_set(err, "arrow ipc: out of memory");
    for (size_t i = 0; i < n; i++) {
        sb_fbt fld = sb_fbr_table_at(fr, v, i);
        size_t nl = 0;
        const char *name = sb_fbr_string(fr, fld, FIELD_NAME, &nl);
        if (fr->bad)
            break;
        if (nl > SB_PART_MAX_NAME)
            return sb_err_set(err, "arrow ipc: the name of column %zu is %zu bytes (at most %d)", i,
                              nl, SB_PART_MAX_NAME);
        char *nm = malloc(nl + 1);
        if (nm == NULL)
            return sb_err_set(err, "arrow ipc: out of memory");
        if (nl)
            memcpy(nm, name, nl);
        nm[nl] = '\0';
        r->fields[i].name = nm;
        r->ncols = i + 1;
        if (strlen(nm) != nl)
            return sb_err_set(err, "arrow ipc: the name of column %zu holds a NUL byte", i);
        r->fields[i].nullable = sb_fbr_u8(fr, fld, FIELD_NULLABLE, 0) != 0;
        if (field_type(fr, fld, nm, &r->fields[i], &r->wide[i], false, err) != 0)
            return -1;
    }
    if (fr->bad)
        return sb_err_set(err, "arrow ipc: invalid schema metadata: %s", fr->bad);
    r->have_schema = true;
    return 0;
}

/* The cursors of a batch being decoded. */
typedef struct {
    sb_fbr *fr;
    const uint8_t *body;
    size_t body_len;
    size_t nodes, nnodes, bufs, nbufs; /* vector positions and counts */
    size_t ni, bi;                     /* next node, next buffer */
} walk;

static int next_node(walk *w, int64_t *len, int64_t *nulls, const char *name, sb_err *err)
{
    if (w->ni >= w->nnodes)
        return sb_err_set(err, "arrow ipc: column \"%.100s\": the batch has too few field nodes",
                          name);
    *len = sb_fbr_load_i64(w->fr, w->nodes + 16 * w->ni);
    *nulls = sb_fbr_load_i64(w->fr, w->nodes + 16 * w->ni + 8);
    w->ni++;
    if (*len < 0 || *nulls < 0 || *nulls > *len)
        return sb_err_set(err,
                          "arrow ipc: column \"%.100s\": invalid length %lld / null count %lld",
                          name, (long long)*len, (long long)*nulls);
    return 0;
}

/* The next buffer; when need > 0 it must hold that many bytes, aligned to align. */
static int next_buf(walk *w, size_t need, size_t align, const uint8_t **p, size_t *len,
                    const char *name, sb_err *err)
{
    if (w->bi >= w->nbufs)
        return sb_err_set(err, "arrow ipc: column \"%.100s\": the batch has too few buffers", name);
    int64_t off = sb_fbr_load_i64(w->fr, w->bufs + 16 * w->bi);
    int64_t l = sb_fbr_load_i64(w->fr, w->bufs + 16 * w->bi + 8);
    w->bi++;
    if (off < 0 || l < 0 || (uint64_t)off > w->body_len || (uint64_t)l > w->body_len - (size_t)off)
        return sb_err_set(err,
                          "arrow ipc: column \"%.100s\": a buffer (offset %lld, %lld bytes) lies "
                          "outside the message body of %zu bytes",
                          name, (long long)off, (long long)l, w->body_len);
    if ((size_t)l < need)
        return sb_err_set(err,
                          "arrow ipc: column \"%.100s\": a buffer of %lld bytes where %zu are "
                          "needed",
                          name, (long long)l, need);
    if (l > 0 && align > 1 && (size_t)off % align != 0)
        return sb_err_set(err,
                          "arrow ipc: column \"%.100s\": a buffer at offset %lld is not "
                          "%zu-byte aligned",
                          name, (long long)off, align);
    *p = w->body + off;
    *len = (size_t)l;
    return 0;
}

/* Binary/utf8 offsets and data: checked (and, for 64-bit ones, narrowed). */
static int read_varlen(sb_ipc_reader *r, walk *w, sb_column *c, bool wide, sb_err *err)
{
    size_t n = c->length, ow = wide ? 8 : 4;
    const uint8_t *op, *dp;
    size_t ol, dl;
    static const int32_t zero[1] = {0};
    if (n > (SIZE_MAX / ow) - 1)
        return sb_err_set(err, "arrow ipc: column \"%.100s\": too many rows", c->name);
    if (next_buf(w, n ? (n + 1) * ow : 0, ow, &op, &ol, c->name, err) != 0 ||
        next_buf(w, 0, 1, &dp, &dl, c->name, err) != 0)
        return -1;
    if (n == 0) { /* offsets may be absent then; nothing to read either way */
        c->offsets = zero;
        c->values = dp;
        c->values_len = 0;
        return 0;
    }
    int32_t *narrow = NULL;
    if (wide && (narrow = scratch(r, (n + 1) * 4)) == NULL)
        return sb_err_set(err, "arrow ipc: out of memory");
    int64_t prev = 0;
    for (size_t i = 0; i <= n; i++) {
        int64_t v;
        if (wide) {
            memcpy(&v, op + 8 * i, 8);
        } else {
            int32_t v32;
            memcpy(&v32, op + 4 * i, 4);
            v = v32;
        }
        if (v < (i ? prev : 0) || (uint64_t)v > dl)
            return sb_err_set(err,
                              "arrow ipc: column \"%.100s\": offset %zu is %lld (offsets must not "
                              "decrease and must lie within the %zu data bytes)",
                              c->name, i, (long long)v, dl);
        if (wide && v > INT32_MAX)
            return sb_err_set(err, "arrow ipc: column \"%.100s\": more than 2 GiB of values",
                              c->name);
        if (wide)
            narrow[i] = (int32_t)v;
        prev = v;
    }
    c->offsets = wide ? narrow : (const int32_t *)(const void *)op;
    c->values = dp;
    c->values_len = dl;
    if (c->type == SB_TYPE_UTF8) {
        for (size_t i = 0; i < n; i++) {
            if (c->validity != NULL && !bit(c->validity, i))
                continue;
            size_t bad;
            size_t a = (size_t)c->offsets[i], z = (size_t)c->offsets[i + 1];
            if (!sb_utf8_valid(dp + a, z - a, &bad))
                return sb_err_set(err,
                                  "arrow ipc: column \"%.100s\", row %zu: not valid UTF-8 "
                                  "(byte %zu)",
                                  c->name, i, bad);
        }
    }
    return 0;
}

/* A fixed-size list column of n rows (its child node, validity and values) into c, whose own
 * validity is set. */
static int read_fixed_list(walk *w, const sb_field *f, sb_column *c, size_t n, sb_err *err)
{
    int64_t len, nulls;
    const uint8_t *bp;
    size_t bl, cw = sb_type_width(f->child_type);
    if (n > SIZE_MAX / f->list_size / cw)
        return sb_err_set(err, "arrow ipc: column \"%.100s\": too many values", f->name);
    if (next_node(w, &len, &nulls, f->name, err) != 0)
        return -1;
    if ((size_t)len != n * f->list_size)
        return sb_err_set(err, "arrow ipc: column \"%.100s\": %lld list values for %zu rows of %u",
                          f->name, (long long)len, n, (unsigned)f->list_size);
    size_t nv = n * f->list_size;
    if (next_buf(w, nulls ? (nv + 7) / 8 : 0, 1, &bp, &bl, f->name, err) != 0)
        return -1;
    /* child nulls are fine under a null row (pyarrow writes them there), not inside a valid one:
     * a tensor has no missing elements here */
    for (size_t i = 0; nulls > 0 && i < n; i++) {
        if (c->validity != NULL && !bit(c->validity, i))
            continue;
        for (size_t k = i * f->list_size; k < (i + 1) * f->list_size; k++)
            if (!bit(bp, k))
                return sb_err_set(err,
                                  "arrow ipc: column \"%.100s\", row %zu: null values inside a "
                                  "fixed-size list (not supported; a whole row may be null)",
                                  f->name, i);
    }
    if (next_buf(w, nv * cw, cw, &bp, &bl, f->name, err) != 0)
        return -1;
    c->values = bp;
    c->values_len = nv * cw;
    return 0;
}

static int read_batch(sb_ipc_reader *r, sb_fbr *fr, sb_fbt rb, const uint8_t *body, size_t body_len,
                      sb_err *err)
{
    int64_t rows = sb_fbr_i64(fr, rb, RB_LENGTH, 0);
    walk w = {.fr = fr, .body = body, .body_len = body_len};
    w.nodes = sb_fbr_vector(fr, rb, RB_NODES, 16, &w.nnodes);
    w.bufs = sb_fbr_vector(fr, rb, RB_BUFFERS, 16, &w.nbufs);
    bool compressed = sb_fbr_table(fr, rb, RB_COMPRESSION).pos != 0;
    if (fr->bad)
        return sb_err_set(err, "arrow ipc: invalid record batch metadata: %s", fr->bad);
    if (compressed)
        return sb_err_set(err, "arrow ipc: the record batch is compressed (not supported: write "
                               "the stream without compression)");
    if (rows < 0)
        return sb_err_set(err, "arrow ipc: a record batch of %lld rows", (long long)rows);
    size_t n = (size_t)rows;
    for (size_t ci = 0; ci < r->ncols; ci++) {
        const sb_field *f = &r->fields[ci];
        sb_column *c = &r->cols[ci];
        *c = (sb_column){.name = f->name,
                         .name_len = strlen(f->name),
                         .type = f->type,
                         .child_type = f->child_type,
                         .list_size = f->list_size,
                         .nullable = f->nullable,
                         .logical = f->logical,
                         .length = n};
        int64_t len, nulls;
        const uint8_t *vp, *bp;
        size_t vl, bl;
        if (next_node(&w, &len, &nulls, f->name, err) != 0)
            return -1;
        if ((size_t)len != n)
            return sb_err_set(err, "arrow ipc: column \"%.100s\" has %lld rows in a batch of %zu",
                              f->name, (long long)len, n);
        if (next_buf(&w, nulls ? (n + 7) / 8 : 0, 1, &vp, &vl, f->name, err) != 0)
            return -1;
        if (nulls > 0) {
            if (!f->nullable)
                return sb_err_set(err,
                                  "arrow ipc: column \"%.100s\" is not nullable but holds "
                                  "%lld nulls",
                                  f->name, (long long)nulls);
            c->validity = vp;
            c->null_count = (size_t)nulls;
        }
        switch (f->type) {
        case SB_TYPE_BOOL:
            if (next_buf(&w, (n + 7) / 8, 1, &bp, &bl, f->name, err) != 0)
                return -1;
            c->values = bp;
            c->values_len = bl;
            break;
        case SB_TYPE_UTF8:
        case SB_TYPE_BINARY:
            if (read_varlen(r, &w, c, r->wide[ci], err) != 0)
                return -1;
            break;
        case SB_TYPE_FIXED_LIST:
            if (read_fixed_list(&w, f, c, n, err) != 0)
                return -1;
            break;
        default: {
            size_t vw = sb_type_width(f->type);
            if (n > SIZE_MAX / vw)
                return sb_err_set(err, "arrow ipc: column \"%.100s\": too many rows", f->name);
            if (next_buf(&w, n * vw, vw, &bp, &bl, f->name, err) != 0)
                return -1;
            c->values = bp;
            c->values_len = n * vw;
            break;
        }
        }
    }
    r->rows = n;
    r->batches++;
    return 0;
}

int sb_ipc_read(sb_ipc_reader *r, const uint8_t *msg, size_t len, sb_ipc_kind *kind, sb_err *err)
{
    size_t pre;
    uint32_t meta;
    drop_scratch(r);
    r->rows = 0;
    if (prefix(msg, len, &pre, &meta) != 0)
        return sb_err_set(err, "arrow ipc: a truncated message (%zu bytes)", len);
    if (meta == 0) {
        *kind = SB_IPC_EOS;
        return 0;
    }
    if (meta > len - pre)
        return sb_err_set(err, "arrow ipc: a truncated message (%zu bytes)", len);
    sb_fbr fr = {msg + pre, meta, NULL};
    sb_fbt m = sb_fbr_root(&fr);
    int16_t version = sb_fbr_i16(&fr, m, MSG_VERSION, 0);
    uint8_t ht = sb_fbr_u8(&fr, m, MSG_HEADER_TYPE, 0);
    sb_fbt h = sb_fbr_table(&fr, m, MSG_HEADER);
    int64_t body_len = sb_fbr_i64(&fr, m, MSG_BODY_LENGTH, 0);
    if (fr.bad)
        return sb_err_set(err, "arrow ipc: invalid message metadata: %s", fr.bad);
    if (version < METADATA_V4)
        return sb_err_set(err,
                          "arrow ipc: metadata version %d (from before Arrow 0.15; V4 or V5 is "
                          "needed)",
                          (int)version + 1);
    if (body_len < 0 || (uint64_t)body_len > len - pre - meta)
        return sb_err_set(err,
                          "arrow ipc: a truncated message body (%lld bytes expected, %zu left)",
                          (long long)body_len, len - pre - meta);
    if (h.pos == 0)
        return sb_err_set(err, "arrow ipc: a message without a header");
    switch (ht) {
    case HDR_SCHEMA:
        if (r->have_schema)
            return sb_err_set(err, "arrow ipc: a second schema in one stream");
        *kind = SB_IPC_SCHEMA;
        return read_schema(r, &fr, h, err);
    case HDR_RECORD_BATCH: {
        if (!r->have_schema)
            return sb_err_set(err, "arrow ipc: a record batch before the schema");
        const uint8_t *body = msg + pre + meta;
        if (((uintptr_t)body & 7) != 0) { /* realign: values are read in place */
            uint8_t *copy = scratch(r, (size_t)body_len);
            if (copy == NULL)
                return sb_err_set(err, "arrow ipc: out of memory");
            memcpy(copy, body, (size_t)body_len);
            body = copy;
        }
        *kind = SB_IPC_BATCH;
        return read_batch(r, &fr, h, body, (size_t)body_len, err);
    }
    case HDR_DICTIONARY_BATCH:
        return sb_err_set(err, "arrow ipc: a dictionary batch (dictionary-encoded columns are "
                               "not supported)");
    default:
        return sb_err_set(err,
                          "arrow ipc: a message of type %u (only Schema and RecordBatch are "
                          "read)",
                          (unsigned)ht);
    }
}
