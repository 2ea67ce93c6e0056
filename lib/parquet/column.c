/* column.c — one column chunk's pages into a flat column (see column.h): the page loop (header,
 * bounds, decompression), the levels (which rows are null, where list rows start), and the value
 * decoders per encoding, which append dense values that are then spread over the rows. */
#include "parquet/column.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/encoding.h"

typedef struct {
    const sb_pq_chunk_ctx *cx;
    const sb_pq_schema_el *el;
    const sb_pq_chunk *ch;
    sb_pq_colbuf *c;
    /* dictionary */
    bool have_dict;
    size_t dict_n;
    uint8_t *dict_vals; /* fixed: dict_n*width; binary: the bytes */
    size_t *dict_offs;  /* binary: dict_n+1 */
    /* scratch for a page */
    uint8_t *page;
    size_t page_cap;
    uint32_t *levels, *reps, *idx;
    size_t levels_cap, reps_cap, idx_cap;
    bool all_def; /* the page's definition levels are one run of max_def: s->levels unused */
    size_t *lens; /* binary: lengths of the page's dense values */
    size_t lens_cap;
    uint64_t *deltas;
    size_t deltas_cap;
    int64_t values_seen;
    size_t page_no;
    uint32_t cur_list; /* list: values of the row being read */
    bool in_row;
    int16_t rep_def; /* list: the definition level of the repeated group */
} st;

static int grow(void **p, size_t *cap, size_t need, size_t elem, size_t limit, sb_err *err)
{
    if (need <= *cap && *p != NULL)
        return 0;
    if (need == 0)
        need = 1; /* a buffer always exists: no pointer arithmetic on NULL */
    if (need > limit / elem)
        return sb_err_data(err, "the decoded column would pass %zu bytes", limit);
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    if (n > limit / elem)
        n = need;
    void *q = realloc(*p, n * elem);
    if (q == NULL)
        return sb_err_set(err, "out of memory for %zu bytes of a column", n * elem);
    *p = q;
    *cap = n;
    return 0;
}

#define GROW(s, ptr, cap, need)                                                                    \
    grow((void **)&(ptr), &(cap), (need), sizeof *(ptr), (s)->cx->max_decoded, err)

void sb_pq_colbuf_free(sb_pq_colbuf *c)
{
    free(c->valid);
    free(c->vals);
    free(c->offs);
    memset(c, 0, sizeof *c);
}

/* ---- dense values ------------------------------------------------------------------------ */

/* Appends `len` bytes as one binary value. */
static int bin_put(st *s, const uint8_t *p, size_t len, size_t k, sb_err *err)
{
    sb_pq_colbuf *c = s->c;
    if (GROW(s, c->vals, c->vals_cap, c->vals_len + len) != 0)
        return -1;
    memcpy(c->vals + c->vals_len, p, len);
    c->vals_len += len;
    s->lens[k] = len;
    return 0;
}

static int plain_binary(st *s, const uint8_t *p, size_t n, size_t nn, bool dict, sb_err *err)
{
    size_t pos = 0;
    size_t fixed = s->el->type == SB_PQ_FLBA ? (size_t)s->el->type_length : 0;
    for (size_t k = 0; k < nn; k++) {
        size_t len = fixed;
        if (!fixed) {
            if (n - pos < 4)
                return sb_err_data(err, "PLAIN value %zu: length past the page", k);
            uint32_t l32;
            memcpy(&l32, p + pos, 4);
            pos += 4;
            len = l32;
        }
        if (len > n - pos)
            return sb_err_data(err, "PLAIN value %zu: %zu bytes past the page", k, len);
        if (dict) {
            s->dict_offs[k + 1] = s->dict_offs[k] + len;
        } else if (bin_put(s, p + pos, len, k, err) != 0) {
            return -1;
        }
        pos += len;
    }
    return 0;
}

/* The dictionary page: PLAIN values kept for the data pages' indices. */
static int read_dict(st *s, const uint8_t *p, size_t n, size_t count, sb_err *err)
{
    if (s->have_dict)
        return sb_err_data(err, "a second dictionary page");
    size_t least = s->el->type == SB_PQ_BYTE_ARRAY ? 4
                   : s->el->type == SB_PQ_FLBA     ? (size_t)s->el->type_length
                                                   : s->c->width;
    if (count > n / least)
        return sb_err_data(err, "dictionary of %zu values in %zu bytes", count, n);
    s->dict_n = count;
    if (s->c->binary) {
        s->dict_offs = calloc(count + 1, sizeof *s->dict_offs);
        if (s->dict_offs == NULL)
            return sb_err_set(err, "out of memory for a dictionary of %zu values", count);
        if (plain_binary(s, p, n, count, true, err) != 0)
            return -1;
        s->dict_vals = malloc(n ? n : 1);
        if (s->dict_vals == NULL)
            return sb_err_set(err, "out of memory for the dictionary");
        /* the values are laid back to back without their length prefixes */
        size_t pos = 0, fixed = s->el->type == SB_PQ_FLBA ? (size_t)s->el->type_length : 0;
        for (size_t k = 0; k < count; k++) {
            size_t len = s->dict_offs[k + 1] - s->dict_offs[k];
            pos += fixed ? 0 : 4;
            memcpy(s->dict_vals + s->dict_offs[k], p + pos, len);
            pos += len;
        }
    } else {
        size_t w = s->c->width;
        if (s->el->type == SB_PQ_BOOLEAN)
            return sb_err_data(err, "a dictionary for a BOOLEAN column");
        if (count > n / w)
            return sb_err_data(err, "dictionary of %zu values of %zu bytes in %zu bytes", count, w,
                               n);
        s->dict_vals = malloc(count * w + 1);
        if (s->dict_vals == NULL)
            return sb_err_set(err, "out of memory for the dictionary");
        memcpy(s->dict_vals, p, count * w);
    }
    s->have_dict = true;
    return 0;
}

/* Dense values of a data page at dst (fixed types: nn*width bytes reserved there). */
static int values_fixed(st *s, int enc, const uint8_t *p, size_t n, size_t nn, uint8_t *dst,
                        sb_err *err)
{
    size_t w = s->c->width;
    int pt = s->el->type;
    switch (enc) {
    case SB_PQ_ENC_PLAIN:
        if (pt == SB_PQ_BOOLEAN) {
            if ((nn + 7) / 8 > n)
                return sb_err_data(err, "PLAIN booleans past the page");
            for (size_t i = 0; i < nn; i++)
                dst[i] = (p[i / 8] >> (i % 8)) & 1;
            return 0;
        }
        if (nn > n / w)
            return sb_err_data(err, "PLAIN: %zu values of %zu bytes in %zu bytes", nn, w, n);
        memcpy(dst, p, nn * w);
        return 0;
    case SB_PQ_ENC_RLE: {
        if (pt != SB_PQ_BOOLEAN)
            return sb_err_data(err, "RLE values for a %s column", sb_pq_type_name(pt));
        if (n < 4)
            return sb_err_data(err, "RLE booleans without a length");
        uint32_t len;
        memcpy(&len, p, 4);
        if (len > n - 4)
            return sb_err_data(err, "RLE booleans: length %u past the page", len);
        if (GROW(s, s->idx, s->idx_cap, nn + 1) != 0)
            return -1;
        if (sb_pq_rle_decode(p + 4, len, 1, s->idx, nn, NULL, err) != 0)
            return -1;
        for (size_t i = 0; i < nn; i++)
            dst[i] = (uint8_t)s->idx[i];
        return 0;
    }
    case SB_PQ_ENC_DELTA_BINARY_PACKED: {
        if (pt != SB_PQ_INT32 && pt != SB_PQ_INT64)
            return sb_err_data(err, "DELTA_BINARY_PACKED for a %s column", sb_pq_type_name(pt));
        if (GROW(s, s->deltas, s->deltas_cap, nn + 1) != 0)
            return -1;
        if (sb_pq_delta_decode(p, n, s->deltas, nn, NULL, err) != 0)
            return -1;
        for (size_t i = 0; i < nn; i++) {
            if (w == 4) {
                uint32_t v = (uint32_t)s->deltas[i];
                memcpy(dst + 4 * i, &v, 4);
            } else {
                memcpy(dst + 8 * i, &s->deltas[i], 8);
            }
        }
        return 0;
    }
    case SB_PQ_ENC_BYTE_STREAM_SPLIT:
        if (pt == SB_PQ_BOOLEAN)
            return sb_err_data(err, "BYTE_STREAM_SPLIT for a BOOLEAN column");
        return sb_pq_bss_decode(p, n, w, dst, nn, err);
    default:
        return sb_err_data(err, "encoding %s is not supported for %s values",
                           sb_pq_encoding_name(enc), sb_pq_type_name(pt));
    }
}

/* DELTA_LENGTH_BYTE_ARRAY: lengths (delta) then the bytes back to back. *used: bytes taken. */
static int values_dlba(st *s, const uint8_t *p, size_t n, size_t nn, size_t *used, sb_err *err)
{
    if (GROW(s, s->deltas, s->deltas_cap, nn + 1) != 0)
        return -1;
    size_t pos;
    if (sb_pq_delta_decode(p, n, s->deltas, nn, &pos, err) != 0)
        return -1;
    for (size_t k = 0; k < nn; k++) {
        uint64_t len = s->deltas[k];
        if (len > n - pos)
            return sb_err_data(err, "DELTA_LENGTH_BYTE_ARRAY value %zu past the page", k);
        if (bin_put(s, p + pos, (size_t)len, k, err) != 0)
            return -1;
        pos += (size_t)len;
    }
    *used = pos;
    return 0;
}

/* DELTA_BYTE_ARRAY: prefix lengths (delta), then the suffixes as DELTA_LENGTH_BYTE_ARRAY; each
 * value is the previous one's prefix followed by its suffix. */
static int values_dba(st *s, const uint8_t *p, size_t n, size_t nn, sb_err *err)
{
    if (GROW(s, s->deltas, s->deltas_cap, nn + 1) != 0)
        return -1;
    size_t pos;
    if (sb_pq_delta_decode(p, n, s->deltas, nn, &pos, err) != 0)
        return -1;
    uint64_t *prefix = malloc((nn + 1) * sizeof *prefix);
    if (prefix == NULL)
        return sb_err_set(err, "out of memory");
    memcpy(prefix, s->deltas, nn * sizeof *prefix);
    size_t start = s->c->vals_len, used;
    int rc = values_dlba(s, p + pos, n - pos, nn, &used, err);
    if (rc != 0) {
        free(prefix);
        return -1;
    }
    /* the suffixes now lie back to back from `start`; rebuild the values in a new area */
    sb_pq_colbuf *c = s->c;
    size_t sfx_len = c->vals_len - start, total = 0, prev_len = 0;
    for (size_t k = 0; k < nn; k++) {
        if (prefix[k] > prev_len) {
            uint64_t pk = prefix[k];
            free(prefix);
            return sb_err_data(err,
                               "DELTA_BYTE_ARRAY value %zu: prefix %" PRIu64
                               " longer than the previous value (%zu)",
                               k, pk, prev_len);
        }
        prev_len = (size_t)prefix[k] + s->lens[k];
        if (prev_len > s->cx->max_decoded - total) {
            free(prefix);
            return sb_err_data(err, "DELTA_BYTE_ARRAY values pass %zu bytes", s->cx->max_decoded);
        }
        total += prev_len;
    }
    uint8_t *sfx = malloc(sfx_len ? sfx_len : 1);
    if (sfx == NULL) {
        free(prefix);
        return sb_err_set(err, "out of memory");
    }
    memcpy(sfx, c->vals + start, sfx_len);
    c->vals_len = start;
    if (GROW(s, c->vals, c->vals_cap, start + total) != 0) {
        free(prefix);
        free(sfx);
        return -1;
    }
    size_t sp = 0, prev = start;
    for (size_t k = 0; k < nn; k++) {
        size_t at = c->vals_len, pl = (size_t)prefix[k];
        memmove(c->vals + at, c->vals + prev, pl);
        memcpy(c->vals + at + pl, sfx + sp, s->lens[k]);
        sp += s->lens[k];
        s->lens[k] += pl;
        prev = at;
        c->vals_len += s->lens[k];
    }
    free(sfx);
    free(prefix);
    return 0;
}

static int values_binary(st *s, int enc, const uint8_t *p, size_t n, size_t nn, sb_err *err)
{
    int pt = s->el->type;
    size_t used;
    switch (enc) {
    case SB_PQ_ENC_PLAIN:
        return plain_binary(s, p, n, nn, false, err);
    case SB_PQ_ENC_DELTA_LENGTH_BYTE_ARRAY:
        if (pt != SB_PQ_BYTE_ARRAY)
            break;
        return values_dlba(s, p, n, nn, &used, err);
    case SB_PQ_ENC_DELTA_BYTE_ARRAY:
        if (values_dba(s, p, n, nn, err) != 0)
            return -1;
        if (pt == SB_PQ_FLBA)
            for (size_t k = 0; k < nn; k++)
                if (s->lens[k] != (size_t)s->el->type_length)
                    return sb_err_data(err, "DELTA_BYTE_ARRAY value %zu has %zu bytes, not %d", k,
                                       s->lens[k], s->el->type_length);
        return 0;
    case SB_PQ_ENC_BYTE_STREAM_SPLIT: {
        if (pt != SB_PQ_FLBA)
            break;
        size_t w = (size_t)s->el->type_length;
        sb_pq_colbuf *c = s->c;
        if (nn > s->cx->max_decoded / w)
            return sb_err_data(err, "BYTE_STREAM_SPLIT values pass the decode limit");
        if (GROW(s, c->vals, c->vals_cap, c->vals_len + nn * w) != 0)
            return -1;
        if (sb_pq_bss_decode(p, n, w, c->vals + c->vals_len, nn, err) != 0)
            return -1;
        c->vals_len += nn * w;
        for (size_t k = 0; k < nn; k++)
            s->lens[k] = w;
        return 0;
    }
    default:
        break;
    }
    return sb_err_data(err, "encoding %s is not supported for %s values", sb_pq_encoding_name(enc),
                       sb_pq_type_name(pt));
}

/* Dictionary indices: a bit-width byte, then hybrid runs; every index is checked. */
static int values_dict(st *s, const uint8_t *p, size_t n, size_t nn, uint8_t *dst, sb_err *err)
{
    if (!s->have_dict)
        return sb_err_data(err, "dictionary-encoded values without a dictionary page");
    if (nn > 0 && n < 1)
        return sb_err_data(err, "dictionary indices without a bit width");
    if (GROW(s, s->idx, s->idx_cap, nn + 1) != 0)
        return -1;
    if (nn > 0 && sb_pq_rle_decode(p + 1, n - 1, p[0], s->idx, nn, NULL, err) != 0)
        return -1;
    for (size_t k = 0; k < nn; k++)
        if (s->idx[k] >= s->dict_n)
            return sb_err_data(err,
                               "dictionary index %u of value %zu is out of range (%zu "
                               "entries)",
                               s->idx[k], k, s->dict_n);
    if (!s->c->binary) {
        size_t w = s->c->width;
        if (w == 4) /* constant sizes: the copies become plain loads and stores */
            for (size_t k = 0; k < nn; k++)
                memcpy(dst + k * 4, s->dict_vals + (size_t)s->idx[k] * 4, 4);
        else if (w == 8)
            for (size_t k = 0; k < nn; k++)
                memcpy(dst + k * 8, s->dict_vals + (size_t)s->idx[k] * 8, 8);
        else
            for (size_t k = 0; k < nn; k++)
                memcpy(dst + k * w, s->dict_vals + (size_t)s->idx[k] * w, w);
        return 0;
    }
    for (size_t k = 0; k < nn; k++) {
        size_t a = s->dict_offs[s->idx[k]], b = s->dict_offs[s->idx[k] + 1];
        if (bin_put(s, s->dict_vals + a, b - a, k, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- levels and rows --------------------------------------------------------------------- */

/* Grows the row arrays for `more` rows. */
static int reserve_rows(st *s, size_t more, sb_err *err)
{
    sb_pq_colbuf *c = s->c;
    size_t need = c->rows + more;
    if (s->el->max_def > 0 && !s->cx->as_list && GROW(s, c->valid, c->valid_cap, need) != 0)
        return -1;
    if (c->binary && GROW(s, c->offs, c->offs_cap, need + 1) != 0)
        return -1;
    if (!c->binary && GROW(s, c->vals, c->vals_cap, need * c->width) != 0)
        return -1;
    return 0;
}

/* A flat column's page: nv levels (defs NULL when required), values already dense for nn of
 * them; spreads them over the rows (fixed values were written at the rows' start, from the
 * end backwards so the move is in place). */
static void spread(st *s, const uint32_t *defs, size_t nv, size_t nn)
{
    sb_pq_colbuf *c = s->c;
    int16_t md = s->el->max_def;
    size_t r0 = c->rows;
    if (c->binary) {
        size_t k = 0;
        for (size_t i = 0; i < nv; i++) {
            bool v = defs == NULL || defs[i] == (uint32_t)md;
            c->offs[r0 + i + 1] = c->offs[r0 + i] + (v ? (int64_t)s->lens[k++] : 0);
        }
    } else if (defs != NULL && nn < nv) {
        size_t w = c->width, k = nn;
        for (size_t i = nv; i-- > 0;) {
            uint8_t *slot = c->vals + (r0 + i) * w;
            if (defs[i] == (uint32_t)md)
                memmove(slot, c->vals + (r0 + --k) * w, w);
            else
                memset(slot, 0, w);
        }
    }
    if (defs != NULL && c->valid != NULL)
        for (size_t i = 0; i < nv; i++) {
            c->valid[r0 + i] = defs[i] == (uint32_t)md;
            c->nulls += defs[i] != (uint32_t)md;
        }
    else if (c->valid != NULL) /* an optional column's page without a null (all_def) */
        memset(c->valid + r0, 1, nv);
    c->rows += nv;
}

/* list_rows for a page that starts at a row boundary once the list length L is known: checks
 * in loops without branches that every level is defined and that the rows start exactly every
 * L values, then counts them. false, with nothing changed, when the
 * page is not of that shape: list_rows then walks it value by value and names what is wrong.
 * (Embedding columns: 64 levels a row, a tenth of a pipeline's CPU in the per-value walk.) */
static bool list_rows_fast(st *s, const uint32_t *defs, const uint32_t *reps, size_t nv)
{
    sb_pq_colbuf *c = s->c;
    size_t L = c->list_len;
    if (L == 0 || nv == 0 || nv % L != 0 || (s->in_row && s->cur_list != L))
        return false;
    uint32_t md = (uint32_t)s->el->max_def, bad = 0;
    for (size_t i = 0; defs != NULL && i < nv; i++)
        bad |= defs[i] ^ md;
    if (s->el->max_rep == 1 && L <= 1024) { /* a row is exactly 0, 1, 1, ...: one memcmp */
        uint32_t pat[1024];
        pat[0] = 0;
        for (size_t j = 1; j < L; j++)
            pat[j] = 1;
        for (size_t i = 0; i < nv && bad == 0; i += L)
            bad |= memcmp(reps + i, pat, L * sizeof *pat) != 0;
    } else {
        for (size_t i = 0; i < nv; i += L) {
            bad |= reps[i];
            for (size_t j = 1; j < L; j++)
                bad |= reps[i + j] == 0;
        }
    }
    if (bad != 0)
        return false;
    c->rows += nv / L - (s->in_row ? 0 : 1); /* a row is counted when the next one starts */
    s->in_row = true;
    s->cur_list = (uint32_t)L;
    return true;
}

/* A list column's page: checks every level is a present element (no null or empty list, no
 * null element) and that every row has the same number of values. */
static int list_rows(st *s, const uint32_t *defs, const uint32_t *reps, size_t nv, sb_err *err)
{
    sb_pq_colbuf *c = s->c;
    if (list_rows_fast(s, defs, reps, nv))
        return 0;
    for (size_t i = 0; i < nv; i++) {
        if (reps[i] == 0) {
            if (s->in_row) {
                if (c->list_len == 0)
                    c->list_len = s->cur_list;
                else if (s->cur_list != c->list_len)
                    return sb_err_data(err,
                                       "row %zu has %u list values, row 0 has %u: only "
                                       "lists of one length are read (fixed-size list)",
                                       c->rows, s->cur_list, c->list_len);
                c->rows++;
            }
            s->in_row = true;
            s->cur_list = 0;
        }
        if (defs != NULL && defs[i] != (uint32_t)s->el->max_def)
            return sb_err_data(err,
                               "row %zu holds a null or empty list or a null element: only "
                               "lists of one length without nulls are read",
                               c->rows);
        s->cur_list++;
    }
    return 0;
}

/* Whether the level data p[0..n) is one RLE run of `max` covering nv values (bit width bw):
 * a page without a null, the usual case, whose levels need no array. */
static bool one_run_of(const uint8_t *p, size_t n, size_t nv, int bw, int16_t max)
{
    uint64_t h = 0;
    size_t pos = 0;
    for (int shift = 0; pos < n && shift < 64; shift += 7) {
        h |= (uint64_t)(p[pos] & 0x7f) << shift;
        if ((p[pos++] & 0x80) == 0) {
            size_t vb = (size_t)(bw + 7) / 8;
            if ((h & 1) != 0 || (h >> 1) < nv || vb > n - pos || vb > 2)
                return false;
            uint32_t v = p[pos] | (vb > 1 ? (uint32_t)p[pos + 1] << 8 : 0);
            return v == (uint32_t)max;
        }
    }
    return false;
}

/* Levels of a page: reps (list columns) and defs into s->reps / s->levels (or s->all_def). `v1`
 * levels carry a 4-byte length; v2 levels have theirs in the header. *used: the bytes the
 * levels took. */
static int read_levels(st *s, const uint8_t *p, size_t n, size_t nv, bool v1, size_t rep_len,
                       size_t def_len, size_t *used, sb_err *err)
{
    size_t pos = 0;
    s->all_def = false;
    for (int which = 0; which < 2; which++) {
        int16_t max = which == 0 ? s->el->max_rep : s->el->max_def;
        if (max == 0)
            continue;
        size_t len = which == 0 ? rep_len : def_len;
        if (v1) {
            if (n - pos < 4)
                return sb_err_data(err, "%s levels without a length",
                                   which == 0 ? "repetition" : "definition");
            uint32_t l32;
            memcpy(&l32, p + pos, 4);
            pos += 4;
            len = l32;
        }
        if (len > n - pos)
            return sb_err_data(err, "%s levels of %zu bytes past the page",
                               which == 0 ? "repetition" : "definition", len);
        uint32_t *out;
        if (which == 0) {
            if (GROW(s, s->reps, s->reps_cap, nv + 1) != 0)
                return -1;
            out = s->reps;
        } else {
            if (GROW(s, s->levels, s->levels_cap, nv + 1) != 0)
                return -1;
            out = s->levels;
        }
        int bw = sb_pq_bit_width((uint64_t)max);
        if (which == 1 && one_run_of(p + pos, len, nv, bw, max)) {
            s->all_def = true;
            pos += len;
            continue;
        }
        if (sb_pq_rle_decode(p + pos, len, bw, out, nv, NULL, err) != 0)
            return sb_err_wrap(err, "%s levels", which == 0 ? "repetition" : "definition");
        /* bw bits hold nothing above max when max is all ones (a list's repetition level 1) */
        for (size_t i = 0; (uint32_t)max != (1u << bw) - 1 && i < nv; i++)
            if (out[i] > (uint32_t)max)
                return sb_err_data(err, "%s level %u above the maximum %d",
                                   which == 0 ? "repetition" : "definition", out[i], max);
        pos += len;
    }
    *used = pos;
    return 0;
}

/* A data page's levels (already located) and values p[0..n). */
static int data_values(st *s, int enc, const uint8_t *p, size_t n, size_t nv, sb_err *err)
{
    sb_pq_colbuf *c = s->c;
    const uint32_t *defs = s->el->max_def > 0 && !s->all_def ? s->levels : NULL;
    size_t nn = nv;
    if (s->cx->as_list) {
        /* every level defined (list_rows refuses any other), so nn == nv; dense values are
         * appended after the ones already read */
        if (list_rows(s, defs, s->reps, nv, err) != 0)
            return -1;
    } else {
        if (defs != NULL) {
            nn = 0;
            for (size_t i = 0; i < nv; i++)
                nn += defs[i] == (uint32_t)s->el->max_def;
        }
        if (reserve_rows(s, nv, err) != 0)
            return -1;
    }
    uint8_t *dst = NULL;
    if (!c->binary) {
        size_t at = s->cx->as_list ? c->vals_len : c->rows * c->width;
        if (GROW(s, c->vals, c->vals_cap, at + nn * c->width) != 0)
            return -1;
        dst = c->vals + at;
    } else if (GROW(s, s->lens, s->lens_cap, nn + 1) != 0) {
        return -1;
    }
    int rc;
    if (enc == SB_PQ_ENC_PLAIN_DICTIONARY || enc == SB_PQ_ENC_RLE_DICTIONARY)
        rc = values_dict(s, p, n, nn, dst, err);
    else if (c->binary)
        rc = values_binary(s, enc, p, n, nn, err);
    else
        rc = values_fixed(s, enc, p, n, nn, dst, err);
    if (rc != 0)
        return -1;
    if (s->cx->as_list)
        c->vals_len += nn * c->width;
    else
        spread(s, defs, nv, nn);
    return 0;
}

/* Decompresses a page body into s->page (exactly `out` bytes); returns it. */
static const uint8_t *inflate_page(st *s, const uint8_t *body, size_t n, size_t out, sb_err *err)
{
    if (s->ch->codec == SB_PQ_UNCOMPRESSED && n == out)
        return body;
    if (grow((void **)&s->page, &s->page_cap, out + 1, 1, SB_PQ_MAX_PAGE + 1, err) != 0)
        return NULL;
    if (sb_pq_decompress(s->ch->codec, body, n, s->page, out, err) != 0)
        return NULL;
    return s->page;
}

static int one_page(st *s, const sb_pq_page_header *h, const uint8_t *body, sb_err *err)
{
    size_t csz = (size_t)h->compressed_size, usz = (size_t)h->uncompressed_size;
    if (h->type == SB_PQ_DICT_PAGE) {
        if (!h->has_dict)
            return sb_err_data(err, "dictionary page without its header");
        if (s->values_seen > 0)
            return sb_err_data(err, "dictionary page after data pages");
        if (h->dict_encoding != SB_PQ_ENC_PLAIN && h->dict_encoding != SB_PQ_ENC_PLAIN_DICTIONARY)
            return sb_err_data(err, "dictionary encoding %s",
                               sb_pq_encoding_name(h->dict_encoding));
        const uint8_t *p = inflate_page(s, body, csz, usz, err);
        return p == NULL ? -1 : read_dict(s, p, usz, (size_t)h->dict_num_values, err);
    }
    if (h->type != SB_PQ_DATA_PAGE && h->type != SB_PQ_DATA_PAGE_V2)
        return 0; /* index pages and unknown page types are skipped, as the format asks */
    bool v2 = h->type == SB_PQ_DATA_PAGE_V2;
    if ((v2 && !h->has_v2) || (!v2 && !h->has_data))
        return sb_err_data(err, "data page without its header");
    size_t nv = (size_t)h->num_values;
    if ((int64_t)nv > s->ch->num_values - s->values_seen)
        return sb_err_data(err, "the pages hold more than the chunk's %" PRId64 " values",
                           s->ch->num_values);
    if (!v2) {
        if ((s->el->max_rep > 0 && h->rep_encoding != SB_PQ_ENC_RLE) ||
            (s->el->max_def > 0 && h->def_encoding != SB_PQ_ENC_RLE))
            return sb_err_data(
                err, "level encoding %s (only RLE is read)",
                sb_pq_encoding_name(s->el->max_def > 0 ? h->def_encoding : h->rep_encoding));
        const uint8_t *p = inflate_page(s, body, csz, usz, err);
        size_t used = 0;
        if (p == NULL || read_levels(s, p, usz, nv, true, 0, 0, &used, err) != 0)
            return -1;
        if (data_values(s, h->encoding, p + used, usz - used, nv, err) != 0)
            return -1;
    } else {
        size_t lv = (size_t)h->rep_len + (size_t)h->def_len, used = 0;
        if (lv > csz || lv > usz)
            return sb_err_data(err, "levels of %zu bytes in a %zu-byte page", lv, csz);
        if (read_levels(s, body, lv, nv, false, (size_t)h->rep_len, (size_t)h->def_len, &used,
                        err) != 0)
            return -1;
        const uint8_t *p = body + lv;
        if (h->is_compressed)
            p = inflate_page(s, body + lv, csz - lv, usz - lv, err);
        else if (csz != usz)
            return sb_err_data(err, "uncompressed page of %zu bytes, declared %zu", csz, usz);
        if (p == NULL || data_values(s, h->encoding, p, usz - lv, nv, err) != 0)
            return -1;
    }
    s->values_seen += (int64_t)nv;
    return 0;
}

static int page_loop(st *s, const uint8_t *chunk, size_t len, sb_err *err)
{
    size_t pos = 0;
    while (s->values_seen < s->ch->num_values) {
        if (pos >= len)
            return sb_err_data(err, "the chunk ends after %" PRId64 " of its %" PRId64 " values",
                               s->values_seen, s->ch->num_values);
        sb_pq_page_header h;
        size_t used, avail = len - pos;
        if (avail > SB_PQ_MAX_PAGE_HEADER)
            avail = SB_PQ_MAX_PAGE_HEADER;
        if (sb_pq_page_header_parse(chunk + pos, avail, &h, &used, err) != 0)
            return sb_err_wrap(err, "page %zu (chunk byte %zu)", s->page_no, pos);
        pos += used;
        if ((size_t)h.compressed_size > len - pos)
            return sb_err_data(err, "page %zu: %d bytes past the end of the column chunk",
                               s->page_no, h.compressed_size);
        if (one_page(s, &h, chunk + pos, err) != 0)
            return sb_err_wrap(err, "page %zu", s->page_no);
        pos += (size_t)h.compressed_size;
        s->page_no++;
    }
    return 0;
}

/* The page-index path: the prefix's pages (dictionary) and then one data page per span. */
static int span_loop(st *s, const uint8_t *chunk, size_t len, sb_err *err)
{
    const sb_pq_span *sp = s->cx->spans;
    for (size_t i = 0; i < s->cx->nspans; i++) {
        if (sp[i].off > len || sp[i].len > len - sp[i].off)
            return sb_err_data(err, "page span %zu is past the %zu-byte chunk", i, len);
        size_t pos = sp[i].off, end = sp[i].off + sp[i].len;
        while (pos < end) {
            sb_pq_page_header h;
            size_t used, avail = end - pos;
            if (avail > SB_PQ_MAX_PAGE_HEADER)
                avail = SB_PQ_MAX_PAGE_HEADER;
            if (sb_pq_page_header_parse(chunk + pos, avail, &h, &used, err) != 0)
                return sb_err_wrap(err, "page at chunk byte %zu", pos);
            pos += used;
            bool data = h.type == SB_PQ_DATA_PAGE || h.type == SB_PQ_DATA_PAGE_V2;
            if ((size_t)h.compressed_size > end - pos || (data && i == 0) ||
                (i > 0 && (!data || pos + (size_t)h.compressed_size != end)))
                return sb_err_data(
                    err, "the page at chunk byte %zu does not match the offset index", pos - used);
            if (one_page(s, &h, chunk + pos, err) != 0)
                return sb_err_wrap(err, "page at chunk byte %zu", pos - used);
            pos += (size_t)h.compressed_size;
            s->page_no++;
        }
    }
    return 0;
}

static size_t phys_width(int t)
{
    switch (t) {
    case SB_PQ_BOOLEAN:
        return 1;
    case SB_PQ_INT32:
    case SB_PQ_FLOAT:
        return 4;
    case SB_PQ_INT64:
    case SB_PQ_DOUBLE:
        return 8;
    default:
        return 0;
    }
}

int sb_pq_read_chunk(const sb_pq_chunk_ctx *cx, const uint8_t *chunk, size_t len, sb_pq_colbuf *out,
                     sb_err *err)
{
    memset(out, 0, sizeof *out);
    const sb_pq_meta *m = cx->m;
    st s = {.cx = cx, .c = out};
    s.el = &m->schema[m->leaves[cx->leaf]];
    s.ch = &m->rgs[cx->rg].cols[cx->leaf];
    out->ptype = s.el->type;
    out->binary = s.el->type == SB_PQ_BYTE_ARRAY || s.el->type == SB_PQ_FLBA;
    out->width = phys_width(s.el->type);
    char path[256];
    sb_pq_leaf_path(m, cx->leaf, path, sizeof path);
    int rc = 0;
    if (!out->binary && out->width == 0)
        rc = sb_err_data(err, "physical type %s is not read", sb_pq_type_name(s.el->type));
    if (rc == 0 && out->binary) {
        out->offs = calloc(1, sizeof *out->offs);
        out->offs_cap = 1;
        if (out->offs == NULL)
            rc = sb_err_set(err, "out of memory");
    }
    if (rc == 0)
        rc = cx->spans != NULL ? span_loop(&s, chunk, len, err) : page_loop(&s, chunk, len, err);
    if (rc == 0 && cx->as_list) {
        if (s.in_row) { /* the last row ends with the chunk */
            if (out->list_len == 0)
                out->list_len = s.cur_list;
            else if (s.cur_list != out->list_len)
                rc = sb_err_data(err,
                                 "row %zu has %u list values, row 0 has %u: only lists of "
                                 "one length are read (fixed-size list)",
                                 out->rows, s.cur_list, out->list_len);
            out->rows++;
        }
    }
    free(s.dict_vals);
    free(s.dict_offs);
    free(s.page);
    free(s.levels);
    free(s.reps);
    free(s.idx);
    free(s.lens);
    free(s.deltas);
    if (rc != 0) {
        sb_pq_colbuf_free(out);
        return sb_err_wrap(err, "row group %zu, column \"%s\"", cx->rg, path);
    }
    return 0;
}
