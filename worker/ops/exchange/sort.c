/* sort.c — the sort op over two exchanges (xchg.h; the plan: controller/sched/exchange.h).
 * Round 0 (the map half) spreads each task's rows evenly over the buckets and adds to every
 * bucket a sample of the task's keys; round 1 (the middle op, task b reads bucket b of every map
 * output, so every task of it holds every map task's sample) picks the same range boundaries in
 * every task and writes its rows into range buckets; round 2 (the reduce) sorts its range. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/quantity.h"
#include "worker/ops/exchange/xchg.h"

#define SAMPLE_MAX 128 /* keys a map task samples at most (between 64 and 128 once past 128) */
/* One key per SAMPLE_EVERY rows at least: every bucket gets a copy of every map task's sample,
 * so tiny map tasks must not send every key (the samples would be the data times the buckets) */
#define SAMPLE_EVERY 64
/* A sample record: tag, 16 hex digits of its weight, 16 of its id (a hash of the map task and
 * the sample's place in its sample), the key in hex. */
#define TAG_SAMPLE '\x01'
#define SAMPLE_HEAD 33  /* the tag and the two numbers */
#define SAMPLE_ROOM 256 /* room per sample record a map bucket reserves (more grows it) */
#define SAMPLE_SEED 0x73616d706c65ull
/* Round 1 thins the samples it holds past an eighth of the share it was made with (not the
 * worker's room, which differs between tasks) by keeping those whose id has `level` leading zero
 * bits, one level more each time: the ids are hashes, so each level keeps a random half, every
 * task of the round ends at the same level (the least that fits: the samples are the same in
 * every task, whatever the order they come in), and so picks the same boundaries. A level
 * thins every map task's sample alike, so the weights need no change. */
#define SAMPLE_SHARE 8
#define TAG_STABLE '\x02' /* stable: tag, 16 hex digits of the task, 16 of the row, the record */
#define STABLE_PREFIX 33
/* Round 2 takes its input SORT_SLICE rows at a time, and judges its memory after each slice. */
#define SORT_SLICE 4096
/* What sorting a held row takes beyond the row and its key: the key's offset (8), its (prefix,
 * row) pair and the merge's copy of it (2 x 16), its place in the order (8). */
#define SORT_ROW_BYTES 48

struct xsort {
    int round;
    uint32_t buckets;
    uint64_t memory;
    xkeys keys;
    uint8_t *desc; /* per key field: descending */
    int nulls_first, stable;
    int nopfx;      /* a key without a prefix met (NaN): this task compares keys alone */
    uint64_t task;  /* stable: the map task's index (xsort_task) */
    xwhole *bk;     /* rounds 0 and 1: per bucket */
    xwhole all;     /* rounds 1 and 2: the task's rows */
    bool finishing; /* the finish runs: no rows come after those held (held_drop frees them) */
    /* round 2: the held rows' keys, encoded as the rows came (back to back), and each row's
     * offset in them (hkoff[hrows] is the end) */
    xbuf hkeys;
    size_t *hkoff;
    size_t hrows, hkcap;
    uint64_t rows, every, rr;
    xbuf samples; /* each sampled key (u64 weight, u64 id, u32 length, bytes) */
    size_t *soff; /* per sample: its offset in samples */
    size_t nsamples, capsoff;
    uint64_t samples_max; /* round 1: the samples' bytes before thinning (0: no bound) */
    int level;            /* round 1: ids kept have this many leading zero bits */
    xbuf kb, rb;          /* scratch: one key; one record */
    /* spilling (runs.c) past half the task's memory: round 1 writes its rows as they came to
     * runs, then by range bucket to ranges; round 2 writes sorted runs to runs */
    xruns *runs, *ranges;
    xbuf chunk;      /* round 1: rows routed to their buckets, not yet spilled (u32 + bytes) */
    size_t *coff;    /* per row in chunk: its offset */
    uint32_t *cbk;   /* per row in chunk: its bucket */
    size_t cn, ccap; /* rows in chunk; room */
    char *colname;   /* the records column (the schema of the rows spilled) */
    sb_type coltype;
    bool colnullable;
};

/* w's output made (once) with the schema of like. */
static int whole_open(xwhole *w, const sb_batch *like, sb_err *err)
{
    if (w->out == NULL && (w->out = sb_op_out_new(XWHOLE_TARGET, xwhole_emit, w, err)) == NULL)
        return -1;
    return sb_op_out_has_schema(w->out) ? 0 : sb_op_out_set_schema_like(w->out, like, err);
}

/* The task's held rows (rounds 1 and 2) made (once) with the schema of like: built in place for
 * the half of the task's memory they spill at (must_spill), so that the cut a spill or the
 * finish makes (held_batch) copies only the offsets: sorting them then holds the rows once
 * beside their keys, not twice (a 1 GiB sort's reduce tasks held 2.7x their rows before). */
static int held_open(xsort *so, const sb_batch *like, sb_err *err)
{
    xwhole *w = &so->all;
    if (w->out == NULL) {
        if ((w->out = sb_op_out_new(XWHOLE_TARGET, xwhole_emit, w, err)) == NULL)
            return -1;
        sb_op_out_set_held(w->out, so->memory > 0 ? (size_t)so->memory : (size_t)16 << 20);
    }
    return sb_op_out_has_schema(w->out) ? 0 : sb_op_out_set_schema_like(w->out, like, err);
}

/* ---- keys and their order ------------------------------------------------------------------ */

static const char *enc_skip(const char *p)
{
    uint32_t n;
    switch (*p) {
    case 'i':
    case 'd':
        return p + 9;
    case 's':
        memcpy(&n, p + 1, 4);
        return p + 5 + n;
    case 'a':
    case 'o': {
        memcpy(&n, p + 1, 4);
        uint64_t items = (uint64_t)n * (*p == 'o' ? 2 : 1); /* an object: names and values */
        p += 5;
        for (uint64_t k = 0; k < items; k++)
            p = enc_skip(p);
        return p;
    }
    default: /* N, T, F */
        return p + 1;
    }
}

/* The order across types: null, false, true, numbers, strings, arrays, objects. */
static int enc_rank(char tag)
{
    switch (tag) {
    case 'N':
        return 0;
    case 'F':
        return 1;
    case 'T':
        return 2;
    case 'i':
    case 'd':
        return 3;
    case 's':
        return 4;
    case 'a':
        return 5;
    default:
        return 6;
    }
}

static long double enc_num(const char *p)
{
    if (*p == 'i') {
        int64_t i;
        memcpy(&i, p + 1, 8);
        return (long double)i; /* exact: a long double's mantissa holds 64 bits */
    }
    double d;
    memcpy(&d, p + 1, 8);
    return d;
}

/* Compares the encoded values at *a and *b (xchg.h's encoding) and moves both past them:
 * numbers by value, strings by their bytes (code point order), arrays element by element then
 * by length, objects as the list of their members sorted by name (name, value, ...). */
static int enc_cmp(const char **a, const char **b)
{
    const char *x = *a, *y = *b;
    int rx = enc_rank(*x), ry = enc_rank(*y);
    *a = enc_skip(x);
    *b = enc_skip(y);
    if (rx != ry)
        return rx < ry ? -1 : 1;
    if (rx == 3) {
        if (*x == 'i' && *y == 'i') {
            int64_t i, j;
            memcpy(&i, x + 1, 8);
            memcpy(&j, y + 1, 8);
            return (i > j) - (i < j);
        }
        long double u = enc_num(x), v = enc_num(y);
        return (u > v) - (u < v);
    }
    uint32_t nx, ny;
    if (rx == 4) {
        memcpy(&nx, x + 1, 4);
        memcpy(&ny, y + 1, 4);
        int c = memcmp(x + 5, y + 5, nx < ny ? nx : ny);
        return c != 0 ? (c < 0 ? -1 : 1) : (nx > ny) - (nx < ny);
    }
    if (rx < 3)
        return 0;
    memcpy(&nx, x + 1, 4);
    memcpy(&ny, y + 1, 4);
    uint64_t m = rx == 6 ? 2 : 1, n = (nx < ny ? nx : ny) * m;
    x += 5;
    y += 5;
    for (uint64_t k = 0; k < n; k++) {
        int c = enc_cmp(&x, &y);
        if (c != 0)
            return c;
    }
    return (nx > ny) - (nx < ny);
}

/* The sort order of two keys (every field's encoding, in order): per field, null first or last
 * whatever the direction, else by value, reversed when descending. */
static int key_cmp(const xsort *so, const char *a, const char *b)
{
    for (size_t i = 0; i < so->keys.n; i++) {
        int na = *a == 'N', nb = *b == 'N', c;
        if (na || nb) {
            a = enc_skip(a);
            b = enc_skip(b);
            c = na == nb ? 0 : (na ? -1 : 1) * (so->nulls_first ? 1 : -1);
        } else {
            c = enc_cmp(&a, &b);
            if (so->desc[i])
                c = -c;
        }
        if (c != 0)
            return c;
    }
    return 0;
}

int xsort_key_cmp(const xsort *so, const char *a, const char *b)
{
    return key_cmp(so, a, b);
}

/* Record p[0..*len) (row r) past a stable tag into *rec, *len, and its key into so->kb. */
static int rec_key(xsort *so, const char *p, size_t r, const char **rec, size_t *len, sb_err *err)
{
    if (so->stable && so->round > 0 && *len >= STABLE_PREFIX && p[0] == TAG_STABLE) {
        p += STABLE_PREFIX;
        *len -= STABLE_PREFIX;
    }
    *rec = p;
    so->kb.n = 0;
    return xkeys_encode(&so->keys, "sort", p, *len, r, NULL, &so->kb, err);
}

/* Row r's record (past a stable tag) and its key into so->kb. */
static int row_key(xsort *so, const sb_column *c, size_t r, const char **rec, size_t *len,
                   sb_err *err)
{
    return rec_key(so, sb_column_binary(c, r, len), r, rec, len, err);
}

/* ---- the 8-byte prefix of a key, compared before the key ------------------------------------
 * A key's prefix is a u64 whose unsigned order never contradicts key_cmp on the first field:
 * prefix(a) < prefix(b) only when a sorts before b, so a sort compares the prefixes held beside
 * the row indices (no cache miss) and reads the keys only on equal prefixes. Null is 0 (nulls
 * first) or all ones (last); any other value is its type's rank (enc_rank: 1 to 6) in the top
 * byte, then 7 bytes of a number's order-preserving bits or a string's first bytes (zeros past
 * its end), the whole inverted when descending (inside (0, all ones): nulls keep their end). */

/* A double's bits as a u64 whose unsigned order is the numeric order (-0.0 as 0.0). */
static uint64_t dbl_order(double d)
{
    uint64_t u;
    if (d == 0)
        d = 0.0;
    memcpy(&u, &d, 8);
    return u >> 63 ? ~u : u | (1ULL << 63);
}

int xsort_key_prefix(const xsort *so, const char *key, uint64_t *pfx)
{
    char tag = *key;
    if (tag == 'N') {
        *pfx = so->nulls_first ? 0 : UINT64_MAX;
        return 0;
    }
    uint64_t v = (uint64_t)enc_rank(tag) << 56;
    if (tag == 'i' || tag == 'd') {
        double d;
        int64_t i;
        if (tag == 'i') {
            memcpy(&i, key + 1, 8);
            d = (double)i; /* rounding keeps the order (ties to the prefix's equality) */
        } else {
            memcpy(&d, key + 1, 8);
        }
        if (isnan(d))
            return -1; /* enc_cmp takes NaN as equal to every number: no prefix can say that */
        v |= dbl_order(d) >> 8;
    } else if (tag == 's') {
        uint32_t n;
        memcpy(&n, key + 1, 4);
        for (uint32_t k = 0; k < 7 && k < n; k++)
            v |= (uint64_t)(unsigned char)key[5 + k] << (48 - 8 * k);
    }
    *pfx = so->desc[0] ? ~v : v;
    return 0;
}

/* Key's prefix; a key without one (NaN) turns the prefixes off for the task (so->nopfx). */
static uint64_t key_prefix(xsort *so, const char *key)
{
    uint64_t p = 0;
    if (xsort_key_prefix(so, key, &p) != 0)
        so->nopfx = 1;
    return p;
}

/* ---- a merge sort of (prefix, index) pairs ------------------------------------------------ */

typedef struct {
    uint64_t p; /* the key's prefix */
    size_t r;   /* the row (or sample) */
} pent;

/* The order of the items at indices a and b whose prefixes are equal (or off). */
typedef int (*idx_cmp)(const void *ctx, size_t a, size_t b);

static int pent_cmp(int nopfx, const pent *a, const pent *b, idx_cmp cmp, const void *ctx)
{
    if (!nopfx && a->p != b->p)
        return a->p < b->p ? -1 : 1;
    return cmp(ctx, a->r, b->r);
}

/* Sorts e[0..n) (stable). nopfx: the prefixes say nothing; cmp alone orders. */
static int merge_sort(pent *e, size_t n, int nopfx, idx_cmp cmp, const void *ctx)
{
    pent *tmp = malloc((n ? n : 1) * sizeof *tmp), *src = e, *dst = tmp;
    if (tmp == NULL)
        return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                dst[k++] = pent_cmp(nopfx, &src[b], &src[a], cmp, ctx) < 0 ? src[b++] : src[a++];
            while (a < mid)
                dst[k++] = src[a++];
            while (b < hi)
                dst[k++] = src[b++];
        }
        pent *t = src;
        src = dst;
        dst = t;
    }
    if (src != e)
        memcpy(e, src, n * sizeof *e);
    free(tmp);
    return 0;
}

/* ---- state ---------------------------------------------------------------------------------- */

static int parse_args(xsort *so, const cJSON *args, sb_err *err)
{
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(args, "keys");
    const cJSON *nulls = cJSON_GetObjectItemCaseSensitive(args, "nulls");
    int n = cJSON_GetArraySize(keys);
    if (!cJSON_IsArray(keys) || n < 1 || n > 16)
        return sb_err_permanent(err, "sort: keys must be a list of 1 to 16 {field, descending}");
    so->keys.k = calloc((size_t)n, sizeof *so->keys.k);
    so->desc = calloc((size_t)n, 1);
    if (so->keys.k == NULL || so->desc == NULL)
        return sb_err_set(err, "out of memory");
    for (const cJSON *it = keys->child; it != NULL; it = it->next) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(it, "field");
        if (!cJSON_IsString(f) || f->valuestring[0] == '\0')
            return sb_err_permanent(err, "sort: a key needs a field (a non-empty name)");
        so->desc[so->keys.n] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "descending"));
        so->keys.k[so->keys.n].name = f->valuestring;
        so->keys.k[so->keys.n++].len = strlen(f->valuestring);
    }
    so->keys.missing_null =
        xkeys_missing_null(cJSON_GetObjectItemCaseSensitive(args, "missingKey"));
    so->nulls_first = cJSON_IsString(nulls) && strcmp(nulls->valuestring, "first") == 0;
    so->stable = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "stable"));
    return 0;
}

void xsort_set_memory(xsort *so, uint64_t memory)
{
    so->memory = memory;
}

xsort *xsort_new(const struct cJSON *args, int round, uint32_t buckets, uint64_t memory,
                 sb_err *err)
{
    xsort *so = calloc(1, sizeof *so);
    if (so == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    so->round = round;
    so->buckets = buckets;
    so->memory = memory;
    so->samples_max = memory / SAMPLE_SHARE;
    so->every = SAMPLE_EVERY;
    if (parse_args(so, args, err) != 0) {
        xsort_free(so);
        return NULL;
    }
    return so;
}

/* The chunk and its row index go back to the allocator whole. */
static void chunk_free(xsort *so)
{
    xbuf_free(&so->chunk);
    free(so->coff);
    free(so->cbk);
    so->coff = NULL;
    so->cbk = NULL;
    so->cn = so->ccap = 0;
}

void xsort_reset(xsort *so)
{
    for (uint32_t b = 0; so->bk != NULL && b < so->buckets; b++)
        xwhole_free(&so->bk[b]);
    free(so->bk);
    so->bk = NULL;
    xwhole_free(&so->all);
    xbuf_free(&so->hkeys); /* the next task's keys reserve for its memory again */
    free(so->hkoff);
    so->hkoff = NULL;
    so->hrows = so->hkcap = 0;
    xruns_clear(so->runs);
    xruns_clear(so->ranges);
    /* per-task scratch goes with the task: an idle state (the worker keeps it for the stage's
     * next task, ops.h) held round 1's routed chunk, up to half a task's memory, resident and
     * outside the budget while the worker ran other stages' tasks */
    chunk_free(so);
    free(so->colname);
    so->colname = NULL;
    so->rows = so->rr = so->task = 0;
    so->finishing = false;
    so->every = SAMPLE_EVERY;
    so->samples.n = 0;
    so->nsamples = 0;
    so->level = 0;
    so->nopfx = 0;
}

void xsort_free(xsort *so)
{
    if (so == NULL)
        return;
    xsort_reset(so);
    xruns_free(so->runs);
    xruns_free(so->ranges);
    free(so->keys.k);
    free(so->desc);
    free(so->soff);
    xbuf_free(&so->samples);
    xbuf_free(&so->kb);
    xbuf_free(&so->rb);
    free(so);
}

void xsort_task(xsort *so, uint64_t index)
{
    so->task = index;
}

static int add_sample(xsort *so, uint64_t weight, uint64_t id, const char *key, size_t n)
{
    if (so->nsamples == so->capsoff) {
        size_t cap = so->capsoff ? so->capsoff * 2 : 256;
        size_t *no = realloc(so->soff, cap * sizeof *no);
        if (no == NULL)
            return -1;
        so->soff = no;
        so->capsoff = cap;
    }
    so->soff[so->nsamples++] = so->samples.n;
    uint32_t len = (uint32_t)n;
    return xbuf_put(&so->samples, &weight, 8) != 0 || xbuf_put(&so->samples, &id, 8) != 0 ||
                   xbuf_put(&so->samples, &len, 4) != 0 || xbuf_put(&so->samples, key, n) != 0
               ? -1
               : 0;
}

static const char *sample_key(const xsort *so, size_t i, uint64_t *weight)
{
    const char *p = so->samples.p + so->soff[i];
    if (weight != NULL)
        memcpy(weight, p, 8);
    return p + 20;
}

static uint64_t sample_id(const xsort *so, size_t i)
{
    uint64_t id;
    memcpy(&id, so->samples.p + so->soff[i] + 8, 8);
    return id;
}

/* Keeps the samples i for which keep(so, i) holds, in order, in a buffer of their size. -1 out
 * of memory. */
static int samples_keep(xsort *so, int (*keep)(const xsort *, size_t))
{
    xbuf kept = {0};
    size_t n = 0;
    for (size_t i = 0; i < so->nsamples; i++) {
        if (!keep(so, i))
            continue;
        const char *k = sample_key(so, i, NULL);
        uint32_t kl;
        memcpy(&kl, k - 4, 4);
        size_t at = kept.n;
        if (xbuf_put(&kept, so->samples.p + so->soff[i], 20 + kl) != 0) {
            xbuf_free(&kept);
            return -1;
        }
        so->soff[n++] = at;
    }
    xbuf_free(&so->samples);
    so->samples = kept;
    so->nsamples = n;
    return 0;
}

static int at_level(const xsort *so, size_t i)
{
    return so->level == 0 || sample_id(so, i) >> (64 - so->level) == 0;
}

/* The records column of in: its only column, binary or utf8 (sort reads records). */
static int records_column(const sb_batch *in, sb_err *err)
{
    if (sb_batch_ncols(in) == 1 && (sb_batch_column(in, 0)->type == SB_TYPE_UTF8 ||
                                    sb_batch_column(in, 0)->type == SB_TYPE_BINARY))
        return 0;
    return sb_err_permanent(err, "sort works on records (jsonl, csv) in this build, not on typed "
                                 "columns");
}

static uint64_t held_bytes(const xsort *so)
{
    return so->all.out != NULL ? sb_batch_builder_bytes(sb_op_out_builder(so->all.out)) : 0;
}

/* Round 1's rows (routing them copies them once); round 2 has its own measure (must_sort). */
static int must_spill(const xsort *so)
{
    return so->memory > 0 && held_bytes(so) + so->samples.cap > so->memory / 2;
}

/* ---- spilling: the rows held as a batch, the schema of the rows spilled -------------------- */

/* The rows held so far as a batch *b (NULL: none), the records column noted; sb_batch_close it,
 * then held_drop. */
static int held_batch(xsort *so, sb_batch **b, sb_err *err)
{
    xwhole *w = &so->all;
    *b = NULL;
    if (w->out == NULL || sb_op_out_cut(w->out, err) != 0 || w->blob == NULL)
        return w->out == NULL || w->blob == NULL ? 0 : -1;
    if (sb_batch_open_ex(w->blob, w->len, SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, b,
                         err) != 0)
        return -1;
    const sb_column *c = sb_batch_column(*b, 0);
    if (so->colname != NULL)
        return 0;
    so->coltype = c->type;
    so->colnullable = c->nullable;
    return (so->colname = strdup(c->name)) == NULL ? sb_err_set(err, "out of memory") : 0;
}

/* Closes the batch of held_batch; its rows' memory goes back to the output (still open: its
 * schema) for the next rows, or is freed once no more come (kept through the finish, it stayed
 * resident beside a middle task's routing: +64 MiB per worker in a 512 MiB sort). */
static void held_drop(xsort *so, sb_batch *b)
{
    sb_batch_close(b);
    if (so->all.out != NULL && !so->finishing)
        sb_op_out_recycle(so->all.out, so->all.blob);
    else
        sb_part_free(so->all.blob);
    so->all.blob = NULL;
}

/* out's schema: the records column the rows spilled came in. */
static int spilled_schema(const xsort *so, sb_op_out *out, sb_err *err)
{
    sb_field f = {.name = so->colname, .type = so->coltype, .nullable = so->colnullable};
    return sb_op_out_has_schema(out) ? 0 : sb_op_out_set_schema(out, &f, 1, err);
}

static int runs_open(xruns **rs, sb_err *err)
{
    if (*rs == NULL && (*rs = xruns_new("sort")) == NULL)
        return sb_err_set(err, "out of memory");
    return xruns_begin(*rs, err);
}

/* ---- round 0: spread the rows, sample the keys ---------------------------------------------- */

static int hex_put(xbuf *b, const void *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    if (xbuf_reserve(b, 2 * n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        b->p[b->n++] = hx[((const unsigned char *)p)[i] >> 4];
        b->p[b->n++] = hx[((const unsigned char *)p)[i] & 15];
    }
    return 0;
}

static int hex_u64(xbuf *b, uint64_t v)
{
    unsigned char be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (unsigned char)(v >> (56 - 8 * i)); /* big-endian: the hex sorts as the number */
    return hex_put(b, be, 8);
}

/* Keeps every so->every-th row's key; at SAMPLE_MAX keys every other one goes and the step
 * doubles, so a task's sample is evenly spread whatever its length. */
static int even(const xsort *so, size_t i)
{
    (void)so;
    return i % 2 == 0;
}

static int sample_row(xsort *so, const sb_column *c, size_t r, sb_err *err)
{
    if (so->rows++ % so->every != 0)
        return 0;
    const char *rec;
    size_t len;
    if (row_key(so, c, r, &rec, &len, err) != 0)
        return -1;
    if (add_sample(so, 0, 0, so->kb.p, so->kb.n) != 0)
        return sb_err_set(err, "out of memory");
    if (so->nsamples < SAMPLE_MAX)
        return 0;
    if (samples_keep(so, even) != 0)
        return sb_err_set(err, "out of memory");
    so->every *= 2;
    return 0;
}

/* A bucket's output (open, no rows yet) built in place with room for `rows` rows of `bytes`:
 * its rows go straight where the blob will hold them, and the cut writes only the header and
 * offsets in front of them. Grown row by row, a bucket was copied whole into a new blob at the
 * cut: a second copy of the round's output, on fresh pages. A bucket that outgrows its room
 * (more rows than it was sized for) is copied at the cut as before. */
static int bucket_in_place(xwhole *w, size_t rows, size_t bytes, sb_err *err)
{
    sb_batch_builder *b = sb_op_out_builder(w->out);
    if (sb_batch_builder_build_in_place(b, rows, err) != 0 ||
        sb_batch_builder_reserve(b, 0, rows, bytes, err) != 0)
        return -1;
    return 0;
}

/* Map round: bucket b sized for the rows [r, end) of c it starts with and the task's sample (a
 * task of several input batches adds more: then it outgrows its room). */
static int bucket_size(xsort *so, uint32_t b, const sb_column *c, size_t r, size_t end, sb_err *err)
{
    if (sb_batch_builder_rows(sb_op_out_builder(so->bk[b].out)) != 0 || end <= r)
        return 0;
    size_t n0, n1;
    const char *p0 = sb_column_binary(c, r, &n0), *p1 = sb_column_binary(c, end - 1, &n1);
    if (p0 == NULL || p1 == NULL || p1 < p0)
        return 0; /* a null at an end, or values not back to back: grown as usual */
    return bucket_in_place(&so->bk[b], end - r + SAMPLE_MAX,
                           (size_t)(p1 + n1 - p0) + SAMPLE_MAX * SAMPLE_ROOM, err);
}

static int map_process(xsort *so, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    if (records_column(in, err) != 0)
        return -1;
    if (so->bk == NULL && (so->bk = calloc(so->buckets, sizeof *so->bk)) == NULL)
        return sb_err_set(err, "out of memory");
    for (uint32_t b = 0; b < so->buckets; b++)
        if (whole_open(&so->bk[b], in, err) != 0)
            return -1;
    const sb_column *c = sb_batch_column(in, 0);
    for (size_t r = first; r < first + n; r++) {
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        if (len > 0 && (p[0] == TAG_SAMPLE || p[0] == TAG_STABLE))
            return sb_err_data(err, "sort: record %zu is not valid JSON: it starts with byte %d", r,
                               p[0]);
        uint64_t seq = so->rows;
        if (sample_row(so, c, r, err) != 0)
            return -1;
        uint32_t b = (uint32_t)(so->rr++ % so->buckets);
        if (!so->stable) {
            /* a run of rows per bucket: as many rows as the buckets take in turn */
            size_t run = (first + n - r + so->buckets - 1) / so->buckets, end = r + 1;
            for (; end < r + run; end++)
                if (sample_row(so, c, end, err) != 0)
                    return -1;
            if (bucket_size(so, b, c, r, end, err) != 0 ||
                sb_op_out_append_rows(so->bk[b].out, in, r, end - r, err) != 0)
                return -1;
            r = end - 1;
            continue;
        }
        so->rb.n = 0;
        char tag = TAG_STABLE;
        if (xbuf_put(&so->rb, &tag, 1) != 0 || hex_u64(&so->rb, so->task) != 0 ||
            hex_u64(&so->rb, seq) != 0 || xbuf_put(&so->rb, p, len) != 0)
            return sb_err_set(err, "out of memory");
        if (sb_op_out_append_binary(so->bk[b].out, so->rb.p, so->rb.n, err) != 0)
            return -1;
    }
    return 0;
}

/* Every bucket gets the task's sample (each key weighs the rows it stands for), then goes out
 * as one partition, in bucket order. */
static int map_finish(xsort *so, sb_op_out *out, sb_err *err)
{
    uint64_t w = so->nsamples ? (so->rows + so->nsamples - 1) / so->nsamples : 0;
    for (uint32_t b = 0; so->bk != NULL && b < so->buckets; b++) {
        for (size_t i = 0; i < so->nsamples; i++) {
            const char *k = sample_key(so, i, NULL);
            uint32_t kl;
            memcpy(&kl, k - 4, 4);
            char tag = TAG_SAMPLE;
            uint64_t at[2] = {so->task, i};
            so->rb.n = 0;
            if (xbuf_put(&so->rb, &tag, 1) != 0 || hex_u64(&so->rb, w) != 0 ||
                hex_u64(&so->rb, xhash(at, sizeof at, SAMPLE_SEED)) != 0 ||
                hex_put(&so->rb, k, kl) != 0)
                return sb_err_set(err, "out of memory");
            if (sb_op_out_append_binary(so->bk[b].out, so->rb.p, so->rb.n, err) != 0)
                return -1;
        }
    }
    return so->bk != NULL ? xwhole_put_all(so->bk, so->buckets, out, err) : 0;
}

/* ---- round 1: the boundaries, the rows into range buckets ----------------------------------- */

static int unhex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int read_sample(xsort *so, const char *p, size_t len, sb_err *err)
{
    if (len < SAMPLE_HEAD || (len - SAMPLE_HEAD) % 2 != 0)
        return sb_err_permanent(err, "sort: a damaged sample record (%zu bytes)", len);
    uint64_t w = 0, id = 0;
    so->kb.n = 0;
    if (xbuf_reserve(&so->kb, (len - SAMPLE_HEAD) / 2) != 0)
        return sb_err_set(err, "out of memory");
    for (size_t i = 1; i < len; i += 2) {
        int h = unhex(p[i]), l = unhex(p[i + 1]);
        if (h < 0 || l < 0)
            return sb_err_permanent(err, "sort: a damaged sample record");
        if (i < 17)
            w = w << 8 | (uint64_t)(h << 4 | l);
        else if (i < SAMPLE_HEAD)
            id = id << 8 | (uint64_t)(h << 4 | l);
        else
            so->kb.p[so->kb.n++] = (char)(h << 4 | l);
    }
    if (so->level > 0 && id >> (64 - so->level) != 0)
        return 0; /* thinned out at this level */
    if (add_sample(so, w, id, so->kb.p, so->kb.n) != 0)
        return sb_err_set(err, "out of memory");
    while (so->samples_max > 0 && so->samples.n > so->samples_max && so->level < 63) {
        so->level++;
        if (samples_keep(so, at_level) != 0)
            return sb_err_set(err, "out of memory");
    }
    return 0;
}

/* Round 1 past its memory: the rows held go to a run as they came (the boundaries need every
 * map task's sample, so the rows wait for the last input); the key is empty. */
static int mid_spill(xsort *so, sb_err *err)
{
    sb_batch *b = NULL;
    if (held_batch(so, &b, err) != 0)
        return -1;
    if (b == NULL)
        return 0;
    const sb_column *c = sb_batch_column(b, 0);
    int rc = runs_open(&so->runs, err);
    for (size_t r = 0; rc == 0 && r < sb_batch_rows(b); r++) {
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        rc = xruns_put(so->runs, "", 0, p, len, err);
    }
    if (rc == 0)
        rc = xruns_end(so->runs, err);
    held_drop(so, b);
    return rc;
}

static int mid_process(xsort *so, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    if (records_column(in, err) != 0 || held_open(so, in, err) != 0)
        return -1;
    const sb_column *c = sb_batch_column(in, 0);
    size_t run = first;
    for (size_t r = first; r < first + n; r++) {
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        if (len == 0 || p[0] != TAG_SAMPLE)
            continue;
        if ((r > run && sb_op_out_append_rows(so->all.out, in, run, r - run, err) != 0) ||
            read_sample(so, p, len, err) != 0)
            return -1;
        run = r + 1;
    }
    if (first + n > run && sb_op_out_append_rows(so->all.out, in, run, first + n - run, err) != 0)
        return -1;
    return must_spill(so) && mid_spill(so, err) != 0 ? -1 : 0;
}

static int sample_cmp(const void *ctx, size_t a, size_t b)
{
    const xsort *so = ctx;
    return key_cmp(so, sample_key(so, a, NULL), sample_key(so, b, NULL));
}

/* The range boundaries (bucket j starts at key[j], j >= 1) and their prefixes. */
typedef struct {
    const char **key;
    uint64_t *pfx;
} bounds;

static void bounds_free(bounds *bd)
{
    free(bd->key);
    free(bd->pfx);
}

/* The buckets' boundaries: the sample sorted, boundary j the first key at which the weight so
 * far reaches j/N of the whole. Every task of the round has the same samples (every map task
 * wrote its own to every bucket), so every task picks the same boundaries. */
static int boundaries(xsort *so, bounds *bd, sb_err *err)
{
    bd->key = calloc(so->buckets, sizeof *bd->key);
    bd->pfx = calloc(so->buckets, sizeof *bd->pfx);
    pent *e = malloc((so->nsamples + 1) * sizeof *e);
    uint64_t total = 0;
    for (size_t i = 0; e != NULL && i < so->nsamples; i++) {
        uint64_t w;
        e[i].p = key_prefix(so, sample_key(so, i, &w));
        e[i].r = i;
        total += w;
    }
    if (bd->key == NULL || bd->pfx == NULL || e == NULL ||
        merge_sort(e, so->nsamples, so->nopfx, sample_cmp, so) != 0) {
        bounds_free(bd);
        free(e);
        return sb_err_set(err, "out of memory");
    }
    uint64_t cum = 0;
    size_t k = 0;
    for (uint32_t j = 1; j < so->buckets && so->nsamples > 0; j++) {
        long double want = (long double)total * j / so->buckets;
        for (uint64_t w; k < so->nsamples; k++) {
            sample_key(so, e[k].r, &w);
            if ((long double)(cum + w) >= want)
                break;
            cum += w;
        }
        const pent *at = &e[k < so->nsamples ? k : so->nsamples - 1];
        bd->key[j] = sample_key(so, at->r, NULL);
        bd->pfx[j] = at->p;
    }
    free(e);
    return 0;
}

/* The bucket of a key (kp its prefix): how many boundaries are at or below it. */
static uint32_t bucket_of(const xsort *so, const bounds *bd, const char *key, uint64_t kp)
{
    if (so->nsamples == 0)
        return 0;
    uint32_t lo = 1, hi = so->buckets; /* the first boundary above key, in [1, buckets] */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = !so->nopfx && bd->pfx[mid] != kp ? (bd->pfx[mid] < kp ? -1 : 1)
                                                 : key_cmp(so, bd->key[mid], key);
        if (c <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

/* ---- round 1 after a spill: every row to its range bucket through runs ------------------
 * The rows (those spilled as they came, then those held) are routed to their buckets in
 * chunks of half the task's memory; each chunk, ordered by bucket, is a run keyed by the bucket
 * (big-endian, so bytes order it); the merge of those runs is the buckets in order. */

/* Writes the chunk's rows as a run in bucket order (a counting sort keeps their order). */
static int chunk_spill(xsort *so, sb_err *err)
{
    if (so->cn == 0)
        return 0;
    size_t *cnt = calloc((size_t)so->buckets + 1, sizeof *cnt);
    size_t *ord = malloc(so->cn * sizeof *ord);
    int rc = cnt == NULL || ord == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t i = 0; rc == 0 && i < so->cn; i++)
        cnt[so->cbk[i] + 1]++;
    for (uint32_t b = 0; rc == 0 && b < so->buckets; b++)
        cnt[b + 1] += cnt[b];
    for (size_t i = 0; rc == 0 && i < so->cn; i++)
        ord[cnt[so->cbk[i]]++] = i;
    if (rc == 0)
        rc = runs_open(&so->ranges, err);
    for (size_t k = 0; rc == 0 && k < so->cn; k++) {
        size_t i = ord[k];
        uint32_t len, bk = so->cbk[i];
        memcpy(&len, so->chunk.p + so->coff[i], 4);
        unsigned char be[4] = {(unsigned char)(bk >> 24), (unsigned char)(bk >> 16),
                               (unsigned char)(bk >> 8), (unsigned char)bk};
        rc = xruns_put(so->ranges, be, 4, so->chunk.p + so->coff[i] + 4, len, err);
    }
    if (rc == 0)
        rc = xruns_end(so->ranges, err);
    free(cnt);
    free(ord);
    so->chunk.n = so->cn = 0;
    return rc;
}

/* Record p[0..len) (its stable tag kept) into the chunk with its bucket. */
static int route(xsort *so, const bounds *bd, const char *p, size_t len, size_t row, sb_err *err)
{
    const char *rec;
    size_t rl = len;
    if (rec_key(so, p, row, &rec, &rl, err) != 0)
        return -1;
    /* reserved once at its limit (a mapping, touched only as it fills): grown by doubling, it
     * left every smaller size behind as freed arena blocks, resident after the task */
    if (so->chunk.cap == 0 && so->memory > 0 && xbuf_reserve(&so->chunk, so->memory / 2) != 0)
        return sb_err_set(err, "out of memory");
    if (so->cn == so->ccap) {
        size_t cap = so->ccap ? so->ccap * 2 : 1024;
        size_t *no = realloc(so->coff, cap * sizeof *no);
        if (no != NULL)
            so->coff = no;
        uint32_t *nb = no != NULL ? realloc(so->cbk, cap * sizeof *nb) : NULL;
        if (nb == NULL)
            return sb_err_set(err, "out of memory");
        so->cbk = nb;
        so->ccap = cap;
    }
    uint32_t l32 = (uint32_t)len;
    so->coff[so->cn] = so->chunk.n;
    so->cbk[so->cn++] = bucket_of(so, bd, so->kb.p, key_prefix(so, so->kb.p));
    if (xbuf_put(&so->chunk, &l32, 4) != 0 || xbuf_put(&so->chunk, p, len) != 0)
        return sb_err_set(err, "out of memory");
    return so->chunk.n + so->cn * 12 > so->memory / 2 ? chunk_spill(so, err) : 0;
}

typedef struct {
    xsort *so;
    const bounds *bd;
    size_t row;
} router;

static int route_item(void *ctx, const xruns_item *it, sb_err *err)
{
    router *rt = ctx;
    return route(rt->so, rt->bd, it->rec, it->rn, rt->row++, err);
}

/* Run order only: the raw runs read back one after another. */
static int same_cmp(void *ctx, const char *a, size_t an, const char *b, size_t bn)
{
    (void)ctx, (void)a, (void)an, (void)b, (void)bn;
    return 0;
}

/* The bucket being filled (next) and its rows. */
typedef struct {
    xsort *so;
    sb_op_out *out;
    uint32_t next;
    xwhole cur;
} ranger;

/* Puts bucket rg->next (empty too: a partition's place is its bucket) and moves on. */
static int range_put(ranger *rg, sb_err *err)
{
    if (rg->cur.out == NULL &&
        (rg->cur.out = sb_op_out_new(XWHOLE_TARGET, xwhole_emit, &rg->cur, err)) == NULL)
        return -1;
    if (spilled_schema(rg->so, rg->cur.out, err) != 0 || xwhole_put_all(&rg->cur, 1, rg->out, err))
        return -1;
    rg->next++;
    return 0;
}

static int range_item(void *ctx, const xruns_item *it, sb_err *err)
{
    ranger *rg = ctx;
    const unsigned char *k = (const unsigned char *)it->key;
    uint32_t b = (uint32_t)k[0] << 24 | (uint32_t)k[1] << 16 | (uint32_t)k[2] << 8 | k[3];
    while (rg->next < b)
        if (range_put(rg, err) != 0)
            return -1;
    if (rg->cur.out == NULL &&
        (rg->cur.out = sb_op_out_new(XWHOLE_TARGET, xwhole_emit, &rg->cur, err)) == NULL)
        return -1;
    return spilled_schema(rg->so, rg->cur.out, err) != 0
               ? -1
               : sb_op_out_append_binary(rg->cur.out, it->rec, it->rn, err);
}

static int mid_finish_spilled(xsort *so, sb_op_out *out, sb_err *err)
{
    if (mid_spill(so, err) != 0) /* the rows still held join the raw runs */
        return -1;
    bounds bd;
    if (boundaries(so, &bd, err) != 0)
        return -1;
    router rt = {so, &bd, 0};
    int rc = xruns_merge(so->runs, same_cmp, NULL, route_item, &rt, err);
    bounds_free(&bd);
    if (rc == 0)
        rc = chunk_spill(so, err);
    chunk_free(so); /* the range merge reads the runs only: half the task's memory back now */
    ranger rg = {so, out, 0, {0}};
    if (rc == 0)
        rc = xruns_merge(so->ranges, NULL, NULL, range_item, &rg, err);
    while (rc == 0 && rg.next < so->buckets)
        rc = range_put(&rg, err);
    xwhole_free(&rg.cur);
    return rc;
}

/* Every range bucket's output sized exactly, rows[k] rows of bytes[k] bytes, in place
 * (bucket_in_place). */
static int buckets_reserve(xsort *so, const uint64_t *rows, const uint64_t *bytes, sb_err *err)
{
    for (uint32_t k = 0; k < so->buckets; k++)
        if (rows[k] > 0 && bucket_in_place(&so->bk[k], rows[k], bytes[k], err) != 0)
            return -1;
    return 0;
}

/* The rows of b (the task's, held) into their range buckets (so->bk, open): every row's bucket
 * first, so that each bucket's output is sized once, exactly (grown row by row, its regrowth
 * copies and faults on fresh pages were a fifth of the sort), then the rows copied in, rows
 * adjacent in b and in one bucket in one copy. */
static int route_held(xsort *so, const sb_batch *b, const bounds *bd, sb_err *err)
{
    size_t n = sb_batch_rows(b);
    const sb_column *c = sb_batch_column(b, 0);
    uint32_t *bkt = malloc((n ? n : 1) * sizeof *bkt);
    uint64_t *rows = calloc(so->buckets, sizeof *rows), *bytes = calloc(so->buckets, sizeof *bytes);
    int rc = bkt == NULL || rows == NULL || bytes == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t r = 0; rc == 0 && r < n; r++) {
        const char *rec;
        size_t len, whole;
        if ((rc = row_key(so, c, r, &rec, &len, err)) != 0)
            break;
        bkt[r] = bucket_of(so, bd, so->kb.p, key_prefix(so, so->kb.p));
        sb_column_binary(c, r, &whole); /* with a stable tag: the row goes on as it came */
        rows[bkt[r]]++;
        bytes[bkt[r]] += whole;
    }
    if (rc == 0)
        rc = buckets_reserve(so, rows, bytes, err);
    for (size_t r = 0, end; rc == 0 && r < n; r = end) {
        for (end = r + 1; end < n && bkt[end] == bkt[r]; end++)
            ;
        rc = sb_op_out_append_rows(so->bk[bkt[r]].out, b, r, end - r, err);
    }
    free(bkt);
    free(rows);
    free(bytes);
    return rc;
}

static int mid_finish(xsort *so, sb_op_out *out, sb_err *err)
{
    xwhole *w = &so->all;
    if (xruns_count(so->runs) > 0)
        return mid_finish_spilled(so, out, err);
    if (w->out == NULL)
        return 0; /* no input: no buckets */
    if (sb_op_out_cut(w->out, err) != 0)
        return -1;
    sb_batch *b = NULL;
    if (w->blob == NULL ||
        sb_batch_open_ex(w->blob, w->len, SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, &b,
                         err) != 0)
        return w->blob == NULL ? sb_err_set(err, "sort: no rows gathered") : -1;
    bounds bd = {0};
    int rc = boundaries(so, &bd, err);
    if (rc == 0 && (so->bk = calloc(so->buckets, sizeof *so->bk)) == NULL)
        rc = sb_err_set(err, "out of memory");
    for (uint32_t k = 0; rc == 0 && k < so->buckets; k++)
        rc = whole_open(&so->bk[k], b, err);
    if (rc == 0)
        rc = route_held(so, b, &bd, err);
    bounds_free(&bd);
    sb_batch_close(b);
    return rc == 0 ? xwhole_put_all(so->bk, so->buckets, out, err) : -1;
}

/* ---- round 2: sort the range ---------------------------------------------------------------- */

typedef struct {
    const xsort *so;
    const xbuf *keys;
    const size_t *koff;
    const sb_column *c;
} rowsort;

static int row_cmp(const void *ctx, size_t a, size_t b)
{
    const rowsort *rs = ctx;
    int c = key_cmp(rs->so, rs->keys->p + rs->koff[a], rs->keys->p + rs->koff[b]);
    if (c != 0 || !rs->so->stable)
        return c != 0 ? c : (a > b) - (a < b); /* ties: the order rows came in */
    size_t la, lb;
    const char *pa = sb_column_binary(rs->c, a, &la), *pb = sb_column_binary(rs->c, b, &lb);
    return memcmp(pa + 1, pb + 1, STABLE_PREFIX - 1); /* (task, row): source order */
}

static int emit_sorted(xsort *so, const sb_batch *b, const size_t *idx, size_t n, sb_op_out *out,
                       sb_err *err)
{
    const sb_column *c = sb_batch_column(b, 0);
    int rc = sb_op_out_has_schema(out) ? 0 : sb_op_out_set_schema_like(out, b, err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (so->stable) { /* the record past its tag */
            size_t len;
            const char *p = sb_column_binary(c, idx[k], &len);
            size_t skip = len >= STABLE_PREFIX && p[0] == TAG_STABLE ? STABLE_PREFIX : 0;
            rc = sb_op_out_append_binary(out, p + skip, len - skip, err);
            continue;
        }
        /* up to 1024 runs of rows adjacent in b (rows that came in order go out in one copy) */
        size_t first[1024], len[1024], m = 0;
        for (; k < n && m < 1024; k++) {
            if (m > 0 && idx[k] == first[m - 1] + len[m - 1]) {
                len[m - 1]++;
                continue;
            }
            first[m] = idx[k];
            len[m++] = 1;
        }
        rc = sb_op_out_append_runs(out, b, first, len, m, err);
        k--;
    }
    return rc;
}

/* Round 2: the keys of rows [at, at + m) of in (rows just held) to so->hkeys. The buffer is
 * reserved at once for the task's memory (address space: pages are touched as keys are
 * written; must_sort keeps them within it), not grown by doubling: each doubling under the heap's
 * mmap threshold left the old buffer behind as a resident hole of the slot thread's arena. */
static int held_keys(xsort *so, const sb_batch *in, size_t at, size_t m, sb_err *err)
{
    if (so->hrows + m + 1 > so->hkcap) {
        size_t cap = so->hkcap ? so->hkcap : SORT_SLICE;
        while (cap < so->hrows + m + 1)
            cap *= 2;
        size_t *p = realloc(so->hkoff, cap * sizeof *p);
        if (p == NULL)
            return sb_err_set(err, "out of memory");
        so->hkoff = p;
        so->hkcap = cap;
    }
    if (so->hkeys.cap == 0 && so->memory > 0 && xbuf_reserve(&so->hkeys, so->memory) != 0)
        return sb_err_set(err, "out of memory");
    const sb_column *c = sb_batch_column(in, 0);
    for (size_t r = at; r < at + m; r++) {
        const char *rec;
        size_t len;
        so->hkoff[so->hrows] = so->hkeys.n;
        if (row_key(so, c, r, &rec, &len, err) != 0)
            return -1;
        if (xbuf_put(&so->hkeys, so->kb.p, so->kb.n) != 0)
            return sb_err_set(err, "out of memory");
        so->hrows++;
    }
    so->hkoff[so->hrows] = so->hkeys.n;
    return 0;
}

/* Round 2 sorts what it holds into a run once the rows, their keys and what sorting them takes
 * would pass the task's memory less the input in hand (the worker holds that blob while the op
 * reads it; counted up to a quarter of the memory, so that a large input still leaves runs of
 * some size). Before, the rows alone spilled at half the memory, and their keys and the sort's
 * arrays came on top: a 512 MiB sort's reduce tasks held ~150 MiB against a share of 128. */
static int must_sort(const xsort *so, size_t in_bytes)
{
    if (so->memory == 0 || so->hrows == 0)
        return 0;
    uint64_t in = in_bytes < so->memory / 4 ? in_bytes : so->memory / 4;
    return held_bytes(so) + so->hkeys.n + so->hrows * SORT_ROW_BYTES + in > so->memory;
}

/* The rows of b (the rows held, whose keys are so->hkeys) in sort order: idx[0..n) (malloc'd). */
static int sort_rows(xsort *so, const sb_batch *b, size_t **idx, sb_err *err)
{
    size_t n = sb_batch_rows(b);
    if (n != so->hrows)
        return sb_err_set(err, "sort: %zu rows held, %zu keys", n, so->hrows);
    pent *e = malloc((n + 1) * sizeof *e);
    if (e == NULL)
        return sb_err_set(err, "out of memory");
    for (size_t r = 0; r < n; r++)
        e[r] = (pent){key_prefix(so, so->hkeys.p + so->hkoff[r]), r};
    rowsort rs = {so, &so->hkeys, so->hkoff, sb_batch_column(b, 0)};
    int rc = 0;
    if (merge_sort(e, n, so->nopfx, row_cmp, &rs) != 0 ||
        (*idx = malloc((n + 1) * sizeof **idx)) == NULL)
        rc = sb_err_set(err, "out of memory");
    for (size_t k = 0; rc == 0 && k < n; k++)
        (*idx)[k] = e[k].r;
    free(e);
    return rc;
}

/* Writes rows idx[0..n) of b as a run: each row's key (with stable: then its 32 hex digits of
 * task and row) and its record (past the stable tag). */
static int write_run(xsort *so, const sb_batch *b, const size_t *idx, sb_err *err)
{
    const xbuf *keys = &so->hkeys;
    const size_t *koff = so->hkoff;
    size_t n = sb_batch_rows(b);
    const sb_column *c = sb_batch_column(b, 0);
    int rc = runs_open(&so->runs, err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        size_t r = idx[k], len, skip;
        const char *p = sb_column_binary(c, r, &len);
        so->rb.n = 0;
        if (xbuf_put(&so->rb, keys->p + koff[r], koff[r + 1] - koff[r]) != 0)
            return sb_err_set(err, "out of memory");
        skip = so->stable && len >= STABLE_PREFIX && p[0] == TAG_STABLE ? STABLE_PREFIX : 0;
        if (skip > 0 && xbuf_put(&so->rb, p + 1, STABLE_PREFIX - 1) != 0)
            return sb_err_set(err, "out of memory");
        rc = xruns_put(so->runs, so->rb.p, so->rb.n, p + skip, len - skip, err);
    }
    return rc == 0 ? xruns_end(so->runs, err) : -1;
}

/* Round 2: the rows held, sorted, to out (to_run 0) or as a new run (to_run 1). */
static int reduce_sorted(xsort *so, int to_run, sb_op_out *out, sb_err *err)
{
    sb_batch *b = NULL;
    if (held_batch(so, &b, err) != 0)
        return -1;
    if (b == NULL || (to_run && sb_batch_rows(b) == 0)) {
        held_drop(so, b);
        return 0;
    }
    size_t *idx = NULL;
    int rc = sort_rows(so, b, &idx, err);
    if (rc == 0)
        rc = to_run ? write_run(so, b, idx, err)
                    : emit_sorted(so, b, idx, sb_batch_rows(b), out, err);
    free(idx);
    so->hkeys.n = 0; /* the buffer stays for the next run's keys */
    so->hrows = 0;
    held_drop(so, b);
    return rc;
}

/* The merge's order of two run keys: the sort keys, then (stable) task and row. */
static int run_cmp(void *ctx, const char *a, size_t an, const char *b, size_t bn)
{
    const xsort *so = ctx;
    int c = key_cmp(so, a, b);
    if (c != 0 || !so->stable)
        return c;
    size_t ta = an >= STABLE_PREFIX - 1 ? an - (STABLE_PREFIX - 1) : 0;
    size_t tb = bn >= STABLE_PREFIX - 1 ? bn - (STABLE_PREFIX - 1) : 0;
    return memcmp(a + ta, b + tb, STABLE_PREFIX - 1);
}

static int merged_row(void *ctx, const xruns_item *it, sb_err *err)
{
    return sb_op_out_append_binary(ctx, it->rec, it->rn, err);
}

static int reduce_finish(xsort *so, sb_op_out *out, sb_err *err)
{
    int rc = 0;
    if (xruns_count(so->runs) == 0)
        rc = reduce_sorted(so, 0, out, err);
    else if ((rc = reduce_sorted(so, 1, out, err)) == 0 && (rc = spilled_schema(so, out, err)) == 0)
        rc = xruns_merge(so->runs, run_cmp, so, merged_row, out, err);
    xwhole_free(&so->all);
    return rc;
}

uint64_t xsort_spilled(const xsort *so)
{
    return xruns_spilled(so->runs) + xruns_spilled(so->ranges);
}

/* ---- the op's entry points (exchange.c) ------------------------------------------------------ */

int xsort_process(xsort *so, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    if (so->round == 0)
        return map_process(so, in, first, n, err);
    if (so->round == 1)
        return mid_process(so, in, first, n, err);
    if (records_column(in, err) != 0 || held_open(so, in, err) != 0)
        return -1;
    for (size_t at = first, m; at < first + n; at += m) {
        m = first + n - at < SORT_SLICE ? first + n - at : SORT_SLICE;
        if (sb_op_out_append_rows(so->all.out, in, at, m, err) != 0 ||
            held_keys(so, in, at, m, err) != 0)
            return -1;
        if (must_sort(so, sb_batch_blob_len(in)) && reduce_sorted(so, 1, NULL, err) != 0)
            return -1;
    }
    return 0;
}

int xsort_finish(xsort *so, sb_op_out *out, sb_err *err)
{
    so->finishing = true;
    if (so->round == 0)
        return map_finish(so, out, err);
    if (so->round == 1)
        return mid_finish(so, out, err);
    return reduce_finish(so, out, err);
}
