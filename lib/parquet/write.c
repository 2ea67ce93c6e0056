/* write.c — the Parquet writer (write.h): levels and PLAIN values of a page built from a
 * partition column, page compression, column chunks with their statistics, and the footer
 * (FileMetaData in the Thrift compact protocol, thrift.h). The file streams out as it is
 * built: only one page and the footer's small per-chunk records are held at a time. */

#include "parquet/write.h"

#include <math.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "parquet/encoding.h"
#include "parquet/meta.h"
#include "parquet/thrift.h"

void sb_pq_buf_put(sb_pq_buf *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (q == NULL) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void sb_pq_buf_free(sb_pq_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void put_varint(sb_pq_buf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            t[n] |= 0x80;
        n++;
    } while (v);
    sb_pq_buf_put(b, t, n);
}

/* Length of the run of values equal to v[i] starting at i. */
static size_t run_at(const uint32_t *v, size_t n, size_t i)
{
    size_t k = i + 1;
    while (k < n && v[k] == v[i])
        k++;
    return k - i;
}

/* One bit-packed run of `groups` groups of 8 values from v[i..] (values past n are 0), LSB
 * first through a 64-bit accumulator (bw <= 32: at most 39 bits are ever pending). */
static void put_packed(const uint32_t *v, size_t n, size_t i, size_t groups, int bw, sb_pq_buf *o)
{
    put_varint(o, (uint64_t)groups << 1 | 1);
    size_t need = groups * (size_t)bw;
    if (o->oom)
        return;
    if (o->cap - o->len < need) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap - o->len < need)
            cap *= 2;
        uint8_t *q = realloc(o->p, cap);
        if (q == NULL) {
            o->oom = true;
            return;
        }
        o->p = q;
        o->cap = cap;
    }
    uint8_t *d = o->p + o->len;
    uint64_t acc = 0;
    int nb = 0;
    for (size_t k = 0, end = i + groups * 8; i + k < end; k++) {
        uint64_t x = i + k < n ? v[i + k] : 0;
        acc |= x << nb;
        nb += bw;
        while (nb >= 8) {
            *d++ = (uint8_t)acc;
            acc >>= 8;
            nb -= 8;
        }
    }
    o->len += need;
}

void sb_pq_rle_encode(const uint32_t *v, size_t n, int bw, sb_pq_buf *o)
{
    size_t i = 0, vb = ((size_t)bw + 7) / 8;
    while (i < n) {
        size_t run = run_at(v, n, i);
        if (run >= 8 || bw == 0) {
            put_varint(o, (uint64_t)run << 1);
            uint8_t le[4] = {(uint8_t)v[i], (uint8_t)(v[i] >> 8), (uint8_t)(v[i] >> 16),
                             (uint8_t)(v[i] >> 24)};
            sb_pq_buf_put(o, le, vb);
            i += run;
            continue;
        }
        /* Groups of 8 until a long run starts at a group boundary (or the end). */
        size_t start = i, groups = 0;
        while (i < n && groups < 1024) {
            if (groups > 0 && run_at(v, n, i) >= 8)
                break;
            i = i + 8 < n ? i + 8 : n;
            groups++;
        }
        put_packed(v, n, start, groups, bw, o);
    }
}

int sb_pq_codec_parse(const char *name)
{
    static const struct {
        const char *name;
        int codec;
    } t[] = {{"zstd", SB_PQ_ZSTD},
             {"snappy", SB_PQ_SNAPPY},
             {"gzip", SB_PQ_GZIP},
             {"none", SB_PQ_UNCOMPRESSED}};
    for (size_t i = 0; name != NULL && i < sizeof t / sizeof t[0]; i++)
        if (strcmp(name, t[i].name) == 0)
            return t[i].codec;
    return -1;
}

static int reserve(sb_pq_buf *out, size_t n, sb_err *err)
{
    out->len = 0;
    if (n <= out->cap)
        return 0;
    uint8_t *q = realloc(out->p, n);
    if (q == NULL)
        return sb_err_set(err, "parquet: out of memory for a compressed page of %zu bytes", n);
    out->p = q;
    out->cap = n;
    return 0;
}

static int gzip_compress(const void *src, size_t n, sb_pq_buf *out, sb_err *err)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return sb_err_set(err, "parquet: gzip: deflateInit2 failed");
    int rc = reserve(out, deflateBound(&zs, (uLong)n), err);
    if (rc == 0) {
        zs.next_in = (Bytef *)(uintptr_t)src;
        zs.avail_in = (uInt)n;
        zs.next_out = out->p;
        zs.avail_out = (uInt)out->cap;
        if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
            rc = sb_err_set(err, "parquet: gzip compression failed");
        else
            out->len = zs.total_out;
    }
    deflateEnd(&zs);
    return rc;
}

int sb_pq_compress(int codec, const void *src, size_t n, sb_pq_buf *out, sb_err *err)
{
    if (n > SB_PQ_MAX_PAGE)
        return sb_err_set(err, "parquet: a page of %zu bytes is over the %u-byte limit", n,
                          SB_PQ_MAX_PAGE);
    switch (codec) {
    case SB_PQ_UNCOMPRESSED:
        if (reserve(out, n ? n : 1, err) != 0)
            return -1;
        if (n > 0)
            memcpy(out->p, src, n);
        out->len = n;
        return 0;
    case SB_PQ_ZSTD: {
        if (reserve(out, ZSTD_compressBound(n), err) != 0)
            return -1;
        size_t k = ZSTD_compress(out->p, out->cap, src, n, 1);
        if (ZSTD_isError(k))
            return sb_err_set(err, "parquet: zstd: %s", ZSTD_getErrorName(k));
        out->len = k;
        return 0;
    }
    case SB_PQ_SNAPPY: {
        if (reserve(out, snappy_max_compressed_length(n), err) != 0)
            return -1;
        size_t k = out->cap;
        if (snappy_compress(src, n, (char *)out->p, &k) != SNAPPY_OK)
            return sb_err_set(err, "parquet: snappy compression failed");
        out->len = k;
        return 0;
    }
    case SB_PQ_GZIP:
        return gzip_compress(src, n, out, err);
    default:
        return sb_err_set(err, "parquet: codec %s is not written", sb_pq_codec_name(codec));
    }
}

/* ---- columns ---------------------------------------------------------------------------- */

/* How a column's values compare for statistics. */
enum { K_SIGNED, K_UNSIGNED, K_FLOAT, K_BOOL, K_BYTES };

typedef struct {
    bool has;      /* min/max seen */
    int64_t nulls; /* rows (entries) without a value */
    union {
        int64_t i;
        uint64_t u;
        double d;
    } mn, mx;
    const uint8_t *bmn, *bmx; /* K_BYTES: into the batch */
    size_t bmn_len, bmx_len;
} cstats;

/* What the footer keeps of one column chunk. */
typedef struct {
    int64_t num_values, data_off, comp, uncomp;
    int64_t dict_off; /* -1: no dictionary page */
    cstats st;
} chunk_meta;

typedef struct {
    const sb_column *c;
    sb_type vt; /* the value type: the column's, or a list's child type */
    int ptype, kind;
    bool list;
    int16_t max_def, max_rep;
} colw;

static int ptype_of(sb_type t)
{
    switch (t) {
    case SB_TYPE_BOOL:
        return SB_PQ_BOOLEAN;
    case SB_TYPE_INT8:
    case SB_TYPE_INT16:
    case SB_TYPE_INT32:
    case SB_TYPE_UINT8:
    case SB_TYPE_UINT16:
    case SB_TYPE_UINT32:
        return SB_PQ_INT32;
    case SB_TYPE_INT64:
    case SB_TYPE_UINT64:
        return SB_PQ_INT64;
    case SB_TYPE_FLOAT32:
        return SB_PQ_FLOAT;
    case SB_TYPE_FLOAT64:
        return SB_PQ_DOUBLE;
    case SB_TYPE_BINARY:
    case SB_TYPE_UTF8:
        return SB_PQ_BYTE_ARRAY;
    default:
        return -1;
    }
}

static int kind_of(sb_type t)
{
    switch (t) {
    case SB_TYPE_UINT8:
    case SB_TYPE_UINT16:
    case SB_TYPE_UINT32:
    case SB_TYPE_UINT64:
        return K_UNSIGNED;
    case SB_TYPE_FLOAT32:
    case SB_TYPE_FLOAT64:
        return K_FLOAT;
    case SB_TYPE_BOOL:
        return K_BOOL;
    case SB_TYPE_BINARY:
    case SB_TYPE_UTF8:
        return K_BYTES;
    default:
        return K_SIGNED;
    }
}

static int colw_init(const sb_column *c, colw *w, sb_err *err)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    w->list = c->type == SB_TYPE_FIXED_LIST;
    w->vt = w->list ? c->child_type : c->type;
    w->ptype = ptype_of(w->vt);
    w->kind = kind_of(w->vt);
    if (w->ptype < 0 || (w->list && (w->kind == K_BOOL || w->kind == K_BYTES)))
        return sb_err_set(err, "parquet: column \"%.200s\" of type %s is not written", c->name,
                          sb_type_name(c->type));
    w->max_rep = w->list ? 1 : 0;
    w->max_def = (int16_t)((c->nullable ? 1 : 0) + (w->list ? 1 : 0));
    return 0;
}

static int bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int r = memcmp(a, b, an < bn ? an : bn);
    return r != 0 ? r : (an > bn) - (an < bn);
}

/* Folds one value into the statistics (NaN never becomes a bound). */
static void stat_num(cstats *s, int kind, int64_t iv, uint64_t uv, double dv)
{
    if (kind == K_FLOAT && isnan(dv))
        return;
    if (!s->has) {
        s->has = true;
        s->mn.i = s->mx.i = iv;
        if (kind == K_UNSIGNED || kind == K_BOOL)
            s->mn.u = s->mx.u = uv;
        if (kind == K_FLOAT)
            s->mn.d = s->mx.d = dv;
        return;
    }
    if (kind == K_SIGNED) {
        s->mn.i = iv < s->mn.i ? iv : s->mn.i;
        s->mx.i = iv > s->mx.i ? iv : s->mx.i;
    } else if (kind == K_FLOAT) {
        s->mn.d = dv < s->mn.d ? dv : s->mn.d;
        s->mx.d = dv > s->mx.d ? dv : s->mx.d;
    } else {
        s->mn.u = uv < s->mn.u ? uv : s->mn.u;
        s->mx.u = uv > s->mx.u ? uv : s->mx.u;
    }
}

static void put_bytes(const colw *w, size_t r, sb_pq_buf *o, cstats *s)
{
    size_t n;
    const uint8_t *p = sb_column_binary(w->c, r, &n);
    uint32_t len = (uint32_t)n;
    sb_pq_buf_put(o, &len, 4);
    sb_pq_buf_put(o, p, n);
    if (!s->has || bytes_cmp(p, n, s->bmn, s->bmn_len) < 0) {
        s->bmn = p;
        s->bmn_len = n;
    }
    if (!s->has || bytes_cmp(p, n, s->bmx, s->bmx_len) > 0) {
        s->bmx = p;
        s->bmx_len = n;
    }
    s->has = true;
}

/* The page of rows [r0, r1): levels into reps/defs (entries), values into vals. */
typedef struct {
    uint32_t *reps, *defs;
    size_t nlev, cap;
    sb_pq_buf vals;
    uint8_t bits; /* BOOLEAN: bits pending in `acc` */
    uint8_t acc;
    /* RLE_DICTIONARY (byte arrays): each value's dictionary index, in row order */
    const uint32_t *idx;
    size_t idx_pos;
    int idx_bw;
} page_st;

/* Room for `need` level entries. */
static int lev_reserve(page_st *p, size_t need)
{
    if (need <= p->cap)
        return 0;
    uint32_t *r = realloc(p->reps, need * sizeof *r);
    if (r == NULL)
        return -1;
    p->reps = r;
    uint32_t *d = realloc(p->defs, need * sizeof *d);
    if (d == NULL)
        return -1;
    p->defs = d;
    p->cap = need;
    return 0;
}

/* The levels of rows [r0, r1) (none for a required column that is not a list) and the nulls. */
static int page_levels(const colw *w, size_t r0, size_t r1, page_st *p, cstats *s)
{
    const sb_column *c = w->c;
    size_t ls = w->list ? c->list_size : 1;
    if (w->max_def == 0)
        return 0;
    if (lev_reserve(p, (r1 - r0) * ls) != 0)
        return -1;
    size_t n = 0;
    for (size_t r = r0; r < r1; r++) {
        if (!sb_column_valid(c, r)) {
            s->nulls++;
            p->reps[n] = 0;
            p->defs[n++] = 0;
            continue;
        }
        for (size_t k = 0; k < ls; k++) {
            p->reps[n] = k > 0;
            p->defs[n++] = (uint32_t)w->max_def;
        }
    }
    p->nlev = n;
    return 0;
}

static void put_bool(page_st *p, bool v, cstats *s)
{
    stat_num(s, K_BOOL, 0, v, 0);
    p->acc |= (uint8_t)((v ? 1u : 0u) << p->bits);
    if (++p->bits == 8) {
        sb_pq_buf_put(&p->vals, &p->acc, 1);
        p->acc = p->bits = 0;
    }
}

/* n values of C type T from vals[i0..] as PLAIN type PT into dst, their min/max (NaN skipped
 * when FLT) folded into the stats as KIND through the int64/uint64/double slot ACC. */
#define NUM_RUN(T, PT, FLT, KIND, ACC)                                                             \
    do {                                                                                           \
        const T *v = (const T *)vals + i0;                                                         \
        T lo = 0, hi = 0;                                                                          \
        bool any = false;                                                                          \
        for (size_t k = 0; k < n; k++) {                                                           \
            T x = v[k];                                                                            \
            PT y = (PT)x;                                                                          \
            memcpy(dst + k * sizeof(PT), &y, sizeof(PT));                                          \
            if (FLT && isnan((double)x))                                                           \
                continue;                                                                          \
            if (!any) {                                                                            \
                lo = hi = x;                                                                       \
                any = true;                                                                        \
            }                                                                                      \
            lo = x < lo ? x : lo;                                                                  \
            hi = x > hi ? x : hi;                                                                  \
        }                                                                                          \
        if (any) {                                                                                 \
            fold(s, KIND, (ACC)lo);                                                                \
            fold(s, KIND, (ACC)hi);                                                                \
        }                                                                                          \
        out_len = n * sizeof(PT);                                                                  \
    } while (0)

static void fold_i(cstats *s, int kind, int64_t v)
{
    stat_num(s, kind, v, 0, 0);
}
static void fold_u(cstats *s, int kind, uint64_t v)
{
    stat_num(s, kind, 0, v, 0);
}
static void fold_d(cstats *s, int kind, double v)
{
    stat_num(s, kind, 0, 0, v);
}

/* n numeric values from flat index i0 of the column's values, PLAIN, with their statistics. */
static int put_nums(const colw *w, const void *vals, size_t i0, size_t n, sb_pq_buf *o, cstats *s)
{
    size_t need = n * 8, out_len = 0;
    if (o->cap - o->len < need) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap - o->len < need)
            cap *= 2;
        uint8_t *q = realloc(o->p, cap);
        if (q == NULL)
            return -1;
        o->p = q;
        o->cap = cap;
    }
    uint8_t *dst = o->p + o->len;
#define fold(s, k, v) _Generic((v), int64_t : fold_i, uint64_t : fold_u, double : fold_d)(s, k, v)
    switch (w->vt) {
    case SB_TYPE_INT8:
        NUM_RUN(int8_t, int32_t, 0, K_SIGNED, int64_t);
        break;
    case SB_TYPE_INT16:
        NUM_RUN(int16_t, int32_t, 0, K_SIGNED, int64_t);
        break;
    case SB_TYPE_INT32:
        NUM_RUN(int32_t, int32_t, 0, K_SIGNED, int64_t);
        break;
    case SB_TYPE_INT64:
        NUM_RUN(int64_t, int64_t, 0, K_SIGNED, int64_t);
        break;
    case SB_TYPE_UINT8:
        NUM_RUN(uint8_t, uint32_t, 0, K_UNSIGNED, uint64_t);
        break;
    case SB_TYPE_UINT16:
        NUM_RUN(uint16_t, uint32_t, 0, K_UNSIGNED, uint64_t);
        break;
    case SB_TYPE_UINT32:
        NUM_RUN(uint32_t, uint32_t, 0, K_UNSIGNED, uint64_t);
        break;
    case SB_TYPE_UINT64:
        NUM_RUN(uint64_t, uint64_t, 0, K_UNSIGNED, uint64_t);
        break;
    case SB_TYPE_FLOAT32:
        NUM_RUN(float, float, 1, K_FLOAT, double);
        break;
    case SB_TYPE_FLOAT64:
        NUM_RUN(double, double, 1, K_FLOAT, double);
        break;
    default:
        break;
    }
#undef fold
    o->len += out_len;
    return 0;
}

static int page_values(const colw *w, size_t r0, size_t r1, page_st *p, cstats *s)
{
    const sb_column *c = w->c;
    size_t ls = w->list ? c->list_size : 1;
    size_t first = p->idx_pos;
    if (page_levels(w, r0, r1, p, s) != 0)
        return -1;
    if (p->idx != NULL) { /* the indices' bit width, then their runs */
        for (size_t r = r0; r < r1; r++)
            p->idx_pos += sb_column_valid(c, r);
        uint8_t bw = (uint8_t)p->idx_bw;
        sb_pq_buf_put(&p->vals, &bw, 1);
        sb_pq_rle_encode(p->idx + first, p->idx_pos - first, p->idx_bw, &p->vals);
        return p->vals.oom ? -1 : 0;
    }
    for (size_t r = r0; r < r1;) {
        if (!sb_column_valid(c, r)) {
            r++;
            continue;
        }
        size_t e = r + 1; /* a run of valid rows: one typed loop */
        while (e < r1 && sb_column_valid(c, e))
            e++;
        if (w->kind == K_BYTES)
            for (size_t k = r; k < e; k++)
                put_bytes(w, k, &p->vals, s);
        else if (w->kind == K_BOOL)
            for (size_t k = r; k < e; k++)
                put_bool(p, sb_column_bool(c, k), s);
        else if (put_nums(w, c->values, r * ls, (e - r) * ls, &p->vals, s) != 0)
            return -1;
        r = e;
    }
    if (p->bits > 0) {
        sb_pq_buf_put(&p->vals, &p->acc, 1);
        p->acc = p->bits = 0;
    }
    return p->vals.oom ? -1 : 0;
}

/* ---- pages and chunks ------------------------------------------------------------------- */

typedef struct {
    sb_pq_write_fn out;
    void *ud;
    uint64_t off; /* bytes written so far */
    int codec;
    sb_pq_buf body, comp;
    page_st pg;
    sb_err *err;
} wctx;

static int emit(wctx *x, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (x->out(x->ud, p, n, x->err) != 0)
        return -1;
    x->off += n;
    return 0;
}

static void put_levels(const uint32_t *lv, size_t n, int16_t max, sb_pq_buf *body)
{
    size_t at = body->len;
    uint32_t len = 0;
    sb_pq_buf_put(body, &len, 4);
    sb_pq_rle_encode(lv, n, sb_pq_bit_width((uint64_t)max), body);
    if (!body->oom) {
        len = (uint32_t)(body->len - at - 4);
        memcpy(body->p + at, &len, 4);
    }
}

/* Writes one data page v1 of rows [r0, r1) of the column. */
static int write_page(wctx *x, const colw *w, size_t r0, size_t r1, chunk_meta *cm)
{
    page_st *p = &x->pg;
    p->nlev = 0;
    p->vals.len = 0;
    x->body.len = 0;
    if (page_values(w, r0, r1, p, &cm->st) != 0)
        return sb_err_set(x->err, "parquet: out of memory encoding a page");
    size_t nv = w->max_def > 0 ? p->nlev : r1 - r0;
    if (w->max_rep > 0)
        put_levels(p->reps, p->nlev, w->max_rep, &x->body);
    if (w->max_def > 0)
        put_levels(p->defs, p->nlev, w->max_def, &x->body);
    sb_pq_buf_put(&x->body, p->vals.p, p->vals.len);
    if (x->body.oom || x->body.len > INT32_MAX)
        return sb_err_set(x->err, "parquet: out of memory (or a page over 2 GiB) encoding a page");
    if (sb_pq_compress(x->codec, x->body.p, x->body.len, &x->comp, x->err) != 0)
        return -1;
    sb_tc_wbuf h = {0};
    sb_tc_w_i32(&h, 1, SB_PQ_DATA_PAGE);
    sb_tc_w_i32(&h, 2, (int32_t)x->body.len);
    sb_tc_w_i32(&h, 3, (int32_t)x->comp.len);
    sb_tc_w_field(&h, 5, SB_TC_STRUCT);
    sb_tc_w_struct_begin(&h);
    sb_tc_w_i32(&h, 1, (int32_t)nv);
    sb_tc_w_i32(&h, 2, p->idx != NULL ? SB_PQ_ENC_RLE_DICTIONARY : SB_PQ_ENC_PLAIN);
    sb_tc_w_i32(&h, 3, SB_PQ_ENC_RLE);
    sb_tc_w_i32(&h, 4, SB_PQ_ENC_RLE);
    sb_tc_w_struct_end(&h);
    sb_tc_w_struct_end(&h);
    int rc = h.oom ? sb_err_set(x->err, "parquet: out of memory") : 0;
    if (rc == 0)
        rc = emit(x, h.p, h.len);
    if (rc == 0)
        rc = emit(x, x->comp.p, x->comp.len);
    cm->num_values += (int64_t)nv;
    cm->comp += (int64_t)(h.len + x->comp.len);
    cm->uncomp += (int64_t)(h.len + x->body.len);
    sb_tc_wbuf_free(&h);
    return rc;
}

/* Rows per page: about SB_PQ_PAGE_BYTES of values. */
static size_t page_rows(const colw *w, size_t r0, size_t r1)
{
    size_t per = 1;
    if (w->kind == K_BYTES) {
        size_t n = r1 - r0;
        size_t bytes = (size_t)(w->c->offsets[r1] - w->c->offsets[r0]);
        per = n ? bytes / n + 4 : 4;
    } else if (w->kind != K_BOOL) {
        per = (w->ptype == SB_PQ_INT64 || w->ptype == SB_PQ_DOUBLE ? 8 : 4) *
              (w->list ? w->c->list_size : 1);
    }
    size_t rows = SB_PQ_PAGE_BYTES / (per ? per : 1);
    return rows ? rows : 1;
}

static int write_pages(wctx *x, const colw *w, size_t r0, size_t r1, chunk_meta *cm);

/* ---- dictionary (byte arrays) ----------------------------------------------------------- */

#define DICT_MAX_BYTES SB_PQ_PAGE_BYTES /* a larger dictionary: the chunk is written PLAIN */

typedef struct {
    uint32_t *slots; /* open addressing: entry + 1, 0 empty */
    size_t mask;
    size_t *rows; /* the row holding each entry's bytes */
    size_t n, bytes;
    uint32_t *idx; /* per value (valid row) */
} dict_st;

/* 8 bytes at a time, multiply-mixed (not for adversaries: a collision costs a compare). */
static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t t = 0;
    memcpy(&t, p + i, n - i);
    h = (h ^ t) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static void dict_free(dict_st *d)
{
    free(d->slots);
    free(d->rows);
    free(d->idx);
    memset(d, 0, sizeof *d);
}

/* Looks up (or adds) row r's bytes: the entry index, or -1 when the dictionary is full. */
static int64_t dict_find(dict_st *d, const sb_column *c, size_t r, cstats *s)
{
    size_t n;
    const uint8_t *p = sb_column_binary(c, r, &n);
    for (size_t i = hash_bytes(p, n) & d->mask;; i = (i + 1) & d->mask) {
        uint32_t e = d->slots[i];
        if (e == 0) {
            if (d->n + 1 > d->mask / 2 || d->bytes + n + 4 > DICT_MAX_BYTES)
                return -1;
            d->slots[i] = (uint32_t)++d->n;
            d->rows[d->n - 1] = r;
            d->bytes += n + 4;
            if (!s->has || bytes_cmp(p, n, s->bmn, s->bmn_len) < 0) {
                s->bmn = p;
                s->bmn_len = n;
            }
            if (!s->has || bytes_cmp(p, n, s->bmx, s->bmx_len) > 0) {
                s->bmx = p;
                s->bmx_len = n;
            }
            s->has = true;
            return (int64_t)d->n - 1;
        }
        size_t m;
        const uint8_t *q = sb_column_binary(c, d->rows[e - 1], &m);
        if (m == n && memcmp(p, q, n) == 0)
            return (int64_t)e - 1;
    }
}

/* Builds the dictionary of rows [r0, r1): 1 when every value is in it, 0 when it would not pay
 * (too many distinct values or bytes: the chunk is written PLAIN), -1 when out of memory. */
static int dict_build(const colw *w, size_t r0, size_t r1, dict_st *d, cstats *s)
{
    size_t nv = 0, slots = 1024;
    for (size_t r = r0; r < r1; r++)
        nv += sb_column_valid(w->c, r);
    while (slots < 2 * nv && slots < ((size_t)1 << 20))
        slots *= 2;
    d->slots = calloc(slots, sizeof *d->slots);
    d->rows = malloc((slots / 2 + 1) * sizeof *d->rows);
    d->idx = malloc((nv ? nv : 1) * sizeof *d->idx);
    d->mask = slots - 1;
    if (d->slots == NULL || d->rows == NULL || d->idx == NULL)
        return -1;
    cstats st = *s;
    size_t k = 0;
    for (size_t r = r0; r < r1; r++) {
        if (!sb_column_valid(w->c, r))
            continue;
        int64_t e = dict_find(d, w->c, r, &st);
        if (e < 0 || (k > 4096 && d->n > k / 2)) /* mostly distinct: PLAIN is as small */
            return 0;
        d->idx[k++] = (uint32_t)e;
    }
    *s = st;
    return 1;
}

/* The dictionary page: the entries' bytes PLAIN, compressed. */
static int write_dict_page(wctx *x, const colw *w, const dict_st *d, chunk_meta *cm)
{
    x->body.len = 0;
    for (size_t i = 0; i < d->n; i++) {
        size_t n;
        const void *p = sb_column_binary(w->c, d->rows[i], &n);
        uint32_t len = (uint32_t)n;
        sb_pq_buf_put(&x->body, &len, 4);
        sb_pq_buf_put(&x->body, p, n);
    }
    if (x->body.oom)
        return sb_err_set(x->err, "parquet: out of memory encoding a dictionary");
    if (sb_pq_compress(x->codec, x->body.p, x->body.len, &x->comp, x->err) != 0)
        return -1;
    sb_tc_wbuf h = {0};
    sb_tc_w_i32(&h, 1, SB_PQ_DICT_PAGE);
    sb_tc_w_i32(&h, 2, (int32_t)x->body.len);
    sb_tc_w_i32(&h, 3, (int32_t)x->comp.len);
    sb_tc_w_field(&h, 7, SB_TC_STRUCT);
    sb_tc_w_struct_begin(&h);
    sb_tc_w_i32(&h, 1, (int32_t)d->n);
    sb_tc_w_i32(&h, 2, SB_PQ_ENC_PLAIN);
    sb_tc_w_struct_end(&h);
    sb_tc_w_struct_end(&h);
    int rc = h.oom ? sb_err_set(x->err, "parquet: out of memory") : 0;
    cm->dict_off = (int64_t)x->off;
    if (rc == 0 && (emit(x, h.p, h.len) != 0 || emit(x, x->comp.p, x->comp.len) != 0))
        rc = -1;
    cm->comp += (int64_t)(h.len + x->comp.len);
    cm->uncomp += (int64_t)(h.len + x->body.len);
    sb_tc_wbuf_free(&h);
    return rc;
}

/* A byte-array chunk with a dictionary that pays: its dictionary page, then x->pg indexes it. */
static int start_dict(wctx *x, const colw *w, size_t r0, size_t r1, dict_st *d, chunk_meta *cm)
{
    int got = dict_build(w, r0, r1, d, &cm->st);
    if (got < 0)
        return sb_err_set(x->err, "parquet: out of memory for a dictionary");
    if (got == 0 || d->n == 0) {
        dict_free(d);
        return 0;
    }
    if (write_dict_page(x, w, d, cm) != 0)
        return -1;
    x->pg.idx = d->idx;
    x->pg.idx_pos = 0;
    x->pg.idx_bw = sb_pq_bit_width(d->n - 1) > 0 ? sb_pq_bit_width(d->n - 1) : 1;
    return 0;
}

static int write_chunk(wctx *x, const colw *w, size_t r0, size_t r1, chunk_meta *cm)
{
    memset(cm, 0, sizeof *cm);
    cm->dict_off = -1;
    dict_st d = {0};
    x->pg.idx = NULL;
    if (w->kind == K_BYTES && start_dict(x, w, r0, r1, &d, cm) != 0) {
        dict_free(&d);
        return sb_err_wrap(x->err, "parquet: column \"%.200s\"", w->c->name);
    }
    int rc = write_pages(x, w, r0, r1, cm);
    x->pg.idx = NULL;
    dict_free(&d);
    return rc;
}

static int write_pages(wctx *x, const colw *w, size_t r0, size_t r1, chunk_meta *cm)
{
    cm->data_off = (int64_t)x->off;
    size_t step = page_rows(w, r0, r1);
    for (size_t r = r0; r < r1 || r == r0; r += step) {
        size_t e = r1 - r > step ? r + step : r1;
        if (write_page(x, w, r, e, cm) != 0)
            return sb_err_wrap(x->err, "parquet: column \"%.200s\"", w->c->name);
        if (e == r1)
            break;
    }
    return 0;
}

/* ---- footer ----------------------------------------------------------------------------- */

/* A statistic value in the physical type's PLAIN bytes. */
static size_t stat_bytes(const colw *w, const cstats *s, bool max, uint8_t out[8])
{
    if (w->kind == K_FLOAT) {
        double d = max ? s->mx.d : s->mn.d;
        if (d == 0) /* the format: a zero bound is written -0.0 as min, +0.0 as max */
            d = max ? 0.0 : -0.0;
        if (w->ptype == SB_PQ_FLOAT) {
            float f = (float)d;
            memcpy(out, &f, 4);
            return 4;
        }
        memcpy(out, &d, 8);
        return 8;
    }
    uint64_t v =
        w->kind == K_SIGNED ? (uint64_t)(max ? s->mx.i : s->mn.i) : (max ? s->mx.u : s->mn.u);
    if (w->ptype == SB_PQ_BOOLEAN) {
        out[0] = (uint8_t)v;
        return 1;
    }
    memcpy(out, &v, 8);
    return w->ptype == SB_PQ_INT32 ? 4 : 8;
}

static void w_stats(sb_tc_wbuf *t, const colw *w, const cstats *s)
{
    sb_tc_w_field(t, 12, SB_TC_STRUCT);
    sb_tc_w_struct_begin(t);
    sb_tc_w_i64(t, 3, s->nulls);
    if (s->has) {
        if (w->kind == K_BYTES) {
            sb_tc_w_str(t, 5, s->bmx, s->bmx_len);
            sb_tc_w_str(t, 6, s->bmn, s->bmn_len);
        } else {
            uint8_t b[8];
            sb_tc_w_str(t, 5, b, stat_bytes(w, s, true, b));
            sb_tc_w_str(t, 6, b, stat_bytes(w, s, false, b));
        }
    }
    sb_tc_w_struct_end(t);
}

static void w_chunk(sb_tc_wbuf *t, const colw *w, const chunk_meta *cm, int codec)
{
    sb_tc_w_struct_begin(t);
    sb_tc_w_i64(t, 2, cm->dict_off >= 0 ? cm->dict_off : cm->data_off);
    sb_tc_w_field(t, 3, SB_TC_STRUCT);
    sb_tc_w_struct_begin(t);
    sb_tc_w_i32(t, 1, w->ptype);
    sb_tc_w_field(t, 2, SB_TC_LIST);
    sb_tc_w_list(t, SB_TC_I32, cm->dict_off >= 0 ? 3 : 2);
    sb_tc_w_zigzag(t, SB_PQ_ENC_PLAIN);
    sb_tc_w_zigzag(t, SB_PQ_ENC_RLE);
    if (cm->dict_off >= 0)
        sb_tc_w_zigzag(t, SB_PQ_ENC_RLE_DICTIONARY);
    sb_tc_w_field(t, 3, SB_TC_LIST);
    const char *name = w->c->name;
    sb_tc_w_list(t, SB_TC_BINARY, w->list ? 3 : 1);
    sb_tc_w_binary(t, name, strlen(name));
    if (w->list) {
        sb_tc_w_binary(t, "list", 4);
        sb_tc_w_binary(t, "element", 7);
    }
    sb_tc_w_i32(t, 4, codec);
    sb_tc_w_i64(t, 5, cm->num_values);
    sb_tc_w_i64(t, 6, cm->uncomp);
    sb_tc_w_i64(t, 7, cm->comp);
    sb_tc_w_i64(t, 9, cm->data_off);
    if (cm->dict_off >= 0)
        sb_tc_w_i64(t, 11, cm->dict_off);
    w_stats(t, w, &cm->st);
    sb_tc_w_struct_end(t);
    sb_tc_w_struct_end(t);
}

/* INT(bits, signed) as LogicalType field 10 and the matching ConvertedType. */
static void w_int_type(sb_tc_wbuf *t, sb_type vt)
{
    static const struct {
        sb_type t;
        int bits, conv;
        bool sig;
    } m[] = {{SB_TYPE_INT8, 8, 15, true},     {SB_TYPE_INT16, 16, 16, true},
             {SB_TYPE_INT32, 32, 17, true},   {SB_TYPE_INT64, 64, 18, true},
             {SB_TYPE_UINT8, 8, 11, false},   {SB_TYPE_UINT16, 16, 12, false},
             {SB_TYPE_UINT32, 32, 13, false}, {SB_TYPE_UINT64, 64, 14, false}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if (m[i].t != vt)
            continue;
        sb_tc_w_i32(t, 6, m[i].conv);
        sb_tc_w_field(t, 10, SB_TC_STRUCT);
        sb_tc_w_struct_begin(t); /* LogicalType */
        sb_tc_w_field(t, 10, SB_TC_STRUCT);
        sb_tc_w_struct_begin(t); /* IntType */
        sb_tc_w_field(t, 1, SB_TC_BYTE);
        sb_tc_w_varint(t, (uint64_t)m[i].bits); /* a byte under 128 is its own varint */
        sb_tc_w_bool(t, 2, m[i].sig);
        sb_tc_w_struct_end(t);
        sb_tc_w_struct_end(t);
    }
}

/* DATE or TIMESTAMP(isAdjustedToUTC=false, unit) as LogicalType field 10; DATE also as its
 * ConvertedType. The TIMESTAMP_MILLIS/MICROS converted types are left out on purpose: the
 * format says they mean UTC-adjusted instants, and the engine does not keep that flag (the
 * source drops it), so writing them would claim what is not known. */
static void w_time_type(sb_tc_wbuf *t, sb_logical l)
{
    if (l == SB_LOGICAL_DATE)
        sb_tc_w_i32(t, 6, 6); /* ConvertedType DATE */
    sb_tc_w_field(t, 10, SB_TC_STRUCT);
    sb_tc_w_struct_begin(t); /* LogicalType */
    sb_tc_w_field(t, (int16_t)(l == SB_LOGICAL_DATE ? 6 : 8), SB_TC_STRUCT);
    sb_tc_w_struct_begin(t); /* DateType or TimestampType */
    if (l != SB_LOGICAL_DATE) {
        sb_tc_w_bool(t, 1, false); /* isAdjustedToUTC */
        sb_tc_w_field(t, 2, SB_TC_STRUCT);
        sb_tc_w_struct_begin(t); /* TimeUnit: 1 MILLIS, 2 MICROS, 3 NANOS */
        sb_tc_w_field(t, (int16_t)(l - SB_LOGICAL_TS_MILLIS + 1), SB_TC_STRUCT);
        sb_tc_w_struct_begin(t);
        sb_tc_w_struct_end(t);
        sb_tc_w_struct_end(t);
    }
    sb_tc_w_struct_end(t);
    sb_tc_w_struct_end(t);
}

/* One primitive SchemaElement. */
static void w_leaf(sb_tc_wbuf *t, const colw *w, const char *name, int repetition)
{
    sb_tc_w_struct_begin(t);
    sb_tc_w_i32(t, 1, w->ptype);
    sb_tc_w_i32(t, 3, repetition);
    sb_tc_w_str(t, 4, name, strlen(name));
    if (w->vt == SB_TYPE_UTF8) {
        sb_tc_w_i32(t, 6, 0); /* UTF8 */
        sb_tc_w_field(t, 10, SB_TC_STRUCT);
        sb_tc_w_struct_begin(t);
        sb_tc_w_field(t, 1, SB_TC_STRUCT); /* STRING */
        sb_tc_w_struct_begin(t);
        sb_tc_w_struct_end(t);
        sb_tc_w_struct_end(t);
    } else if (!w->list && w->c->logical != SB_LOGICAL_NONE) {
        w_time_type(t, w->c->logical);
    } else {
        w_int_type(t, w->vt);
    }
    sb_tc_w_struct_end(t);
}

static void w_group(sb_tc_wbuf *t, const char *name, int repetition, bool list_annot)
{
    sb_tc_w_struct_begin(t);
    sb_tc_w_i32(t, 3, repetition);
    sb_tc_w_str(t, 4, name, strlen(name));
    sb_tc_w_i32(t, 5, 1);
    if (list_annot) {
        sb_tc_w_i32(t, 6, 3); /* LIST */
        sb_tc_w_field(t, 10, SB_TC_STRUCT);
        sb_tc_w_struct_begin(t);
        sb_tc_w_field(t, 3, SB_TC_STRUCT); /* LIST */
        sb_tc_w_struct_begin(t);
        sb_tc_w_struct_end(t);
        sb_tc_w_struct_end(t);
    }
    sb_tc_w_struct_end(t);
}

static void w_schema(sb_tc_wbuf *t, const colw *ws, size_t nc)
{
    size_t nel = 1;
    for (size_t i = 0; i < nc; i++)
        nel += ws[i].list ? 3 : 1;
    sb_tc_w_field(t, 2, SB_TC_LIST);
    sb_tc_w_list(t, SB_TC_STRUCT, nel);
    sb_tc_w_struct_begin(t); /* the root */
    sb_tc_w_str(t, 4, "schema", 6);
    sb_tc_w_i32(t, 5, (int32_t)nc);
    sb_tc_w_struct_end(t);
    for (size_t i = 0; i < nc; i++) {
        int rep = ws[i].c->nullable ? 1 : 0;
        if (!ws[i].list) {
            w_leaf(t, &ws[i], ws[i].c->name, rep);
            continue;
        }
        w_group(t, ws[i].c->name, rep, true);
        w_group(t, "list", 2, false);
        w_leaf(t, &ws[i], "element", 0);
    }
}

typedef struct {
    int64_t rows;
    chunk_meta *cols;
} rg_meta;

static int write_footer(wctx *x, const colw *ws, size_t nc, const rg_meta *rgs, size_t nrg,
                        int64_t rows)
{
    sb_tc_wbuf t = {0};
    sb_tc_w_i32(&t, 1, 1);
    w_schema(&t, ws, nc);
    sb_tc_w_i64(&t, 3, rows);
    sb_tc_w_field(&t, 4, SB_TC_LIST);
    sb_tc_w_list(&t, SB_TC_STRUCT, nrg);
    for (size_t g = 0; g < nrg; g++) {
        int64_t comp = 0, uncomp = 0;
        sb_tc_w_struct_begin(&t);
        sb_tc_w_field(&t, 1, SB_TC_LIST);
        sb_tc_w_list(&t, SB_TC_STRUCT, nc);
        for (size_t i = 0; i < nc; i++) {
            w_chunk(&t, &ws[i], &rgs[g].cols[i], x->codec);
            comp += rgs[g].cols[i].comp;
            uncomp += rgs[g].cols[i].uncomp;
        }
        sb_tc_w_i64(&t, 2, uncomp);
        sb_tc_w_i64(&t, 3, rgs[g].rows);
        if (nc > 0)
            sb_tc_w_i64(&t, 5,
                        rgs[g].cols[0].dict_off >= 0 ? rgs[g].cols[0].dict_off
                                                     : rgs[g].cols[0].data_off);
        sb_tc_w_i64(&t, 6, comp);
        sb_tc_w_field(&t, 7, SB_TC_I16);
        sb_tc_w_zigzag(&t, (int64_t)g);
        sb_tc_w_struct_end(&t);
    }
    static const char by[] = "streambatch (lib/parquet/write.c)";
    sb_tc_w_str(&t, 6, by, sizeof by - 1);
    sb_tc_w_field(&t, 7, SB_TC_LIST); /* column_orders: TYPE_ORDER for every leaf */
    sb_tc_w_list(&t, SB_TC_STRUCT, nc);
    for (size_t i = 0; i < nc; i++) {
        sb_tc_w_struct_begin(&t);
        sb_tc_w_field(&t, 1, SB_TC_STRUCT);
        sb_tc_w_struct_begin(&t);
        sb_tc_w_struct_end(&t);
        sb_tc_w_struct_end(&t);
    }
    sb_tc_w_struct_end(&t);
    int rc = t.oom ? sb_err_set(x->err, "parquet: out of memory for the footer") : 0;
    uint32_t len = (uint32_t)t.len;
    if (rc == 0 && t.len > SB_PQ_MAX_FOOTER)
        rc = sb_err_set(x->err, "parquet: a footer of %zu bytes is over the limit", t.len);
    if (rc == 0 && (emit(x, t.p, t.len) != 0 || emit(x, &len, 4) != 0 || emit(x, "PAR1", 4) != 0))
        rc = -1;
    sb_tc_wbuf_free(&t);
    return rc;
}

static int write_groups(wctx *x, const sb_batch *b, const colw *ws, size_t nc, size_t rg_rows,
                        rg_meta *rgs, size_t nrg)
{
    size_t rows = sb_batch_rows(b);
    for (size_t g = 0; g < nrg; g++) {
        size_t r0 = g * rg_rows, r1 = rows - r0 > rg_rows ? r0 + rg_rows : rows;
        rgs[g].rows = (int64_t)(r1 - r0);
        rgs[g].cols = calloc(nc ? nc : 1, sizeof *rgs[g].cols);
        if (rgs[g].cols == NULL)
            return sb_err_set(x->err, "parquet: out of memory");
        for (size_t i = 0; i < nc; i++)
            if (write_chunk(x, &ws[i], r0, r1, &rgs[g].cols[i]) != 0)
                return sb_err_wrap(x->err, "row group %zu", g);
    }
    return write_footer(x, ws, nc, rgs, nrg, (int64_t)rows);
}

int sb_pq_write_batch(const sb_batch *b, const sb_pq_write_opts *o, sb_pq_write_fn out, void *ud,
                      sb_err *err)
{
    size_t nc = sb_batch_ncols(b), rows = sb_batch_rows(b);
    size_t rgb = o->row_group_bytes ? o->row_group_bytes : SB_PQ_DEFAULT_ROW_GROUP;
    size_t per_row = rows ? sb_batch_blob_len(b) / rows : 1;
    size_t rg_rows = rgb / (per_row ? per_row : 1);
    if (rg_rows == 0)
        rg_rows = 1;
    size_t nrg = rows == 0 ? 0 : (rows + rg_rows - 1) / rg_rows;
    colw *ws = calloc(nc ? nc : 1, sizeof *ws);
    rg_meta *rgs = calloc(nrg ? nrg : 1, sizeof *rgs);
    wctx x = {.out = out, .ud = ud, .codec = o->codec, .err = err};
    int rc = ws == NULL || rgs == NULL ? sb_err_set(err, "parquet: out of memory") : 0;
    if (rc == 0 && nc == 0)
        rc = sb_err_set(err, "parquet: a partition without columns cannot be written");
    for (size_t i = 0; rc == 0 && i < nc; i++)
        rc = colw_init(sb_batch_column(b, i), &ws[i], err);
    if (rc == 0)
        rc = emit(&x, "PAR1", 4);
    if (rc == 0)
        rc = write_groups(&x, b, ws, nc, rg_rows, rgs, nrg);
    for (size_t g = 0; rgs != NULL && g < nrg; g++)
        free(rgs[g].cols);
    free(rgs);
    free(ws);
    free(x.pg.reps);
    free(x.pg.defs);
    sb_pq_buf_free(&x.pg.vals);
    sb_pq_buf_free(&x.body);
    sb_pq_buf_free(&x.comp);
    return rc;
}
