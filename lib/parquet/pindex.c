/* pindex.c — the page index (see pindex.h): ColumnIndex and OffsetIndex decoded with the
 * Thrift reader and checked against their chunk, the filter column's pages turned into row
 * ranges by prune.c's statistics rule, and a column's overlapping pages fetched and decoded
 * through column.c's span mode. */
#include "parquet/pindex.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "parquet/thrift.h"

#define STRUCT_LOOP(r, last, id, t)                                                                \
    int16_t last = 0, id = 0;                                                                      \
    uint8_t t = 0;                                                                                 \
    while (sb_tc_field(r, &last, &id, &t) && t != SB_TC_STOP)

void sb_pq_offidx_free(sb_pq_offidx *o)
{
    free(o->off);
    free(o->first);
    free(o->size);
    memset(o, 0, sizeof *o);
}

void sb_pq_colidx_free(sb_pq_colidx *c)
{
    free(c->null_pages);
    free(c->min);
    free(c->max);
    free(c->min_len);
    free(c->max_len);
    free(c->nulls);
    memset(c, 0, sizeof *c);
}

static void page_location(sb_tc_reader *r, sb_pq_offidx *o, size_t i)
{
    int64_t v;
    STRUCT_LOOP(r, last, id, t)
    {
        if (id >= 1 && id <= 3 && sb_tc_int_field(r, t, &v)) {
            if (id == 1)
                o->off[i] = v;
            else if (id == 2)
                o->size[i] = v < 0 || v > INT32_MAX ? -1 : (int32_t)v;
            else
                o->first[i] = v;
        } else if (!sb_tc_skip(r, t)) {
            break;
        }
    }
}

/* The checks of sb_pq_offidx_parse on decoded locations. */
static int offidx_check(const sb_pq_offidx *o, const sb_pq_chunk *ch, int64_t rows, sb_err *err)
{
    if (o->n == 0)
        return sb_err_data(err, "the offset index lists no page");
    if (o->first[0] != 0)
        return sb_err_data(err, "the offset index's first page starts at row %" PRId64,
                           o->first[0]);
    uint64_t end = ch->start + ch->len, prev_end = ch->start;
    for (size_t i = 0; i < o->n; i++) {
        if (o->first[i] >= rows || (i > 0 && o->first[i] <= o->first[i - 1]))
            return sb_err_data(err,
                               "offset index page %zu starts at row %" PRId64
                               " (rows must ascend, below %" PRId64 ")",
                               i, o->first[i], rows);
        if (o->size[i] <= 0 || o->off[i] < 0 || (uint64_t)o->off[i] < prev_end ||
            (uint64_t)o->off[i] > end || (uint64_t)o->size[i] > end - (uint64_t)o->off[i])
            return sb_err_data(err,
                               "offset index page %zu: bytes [%" PRId64 ", +%d) are not inside "
                               "the chunk [%" PRIu64 ", %" PRIu64 ") after the page before",
                               i, o->off[i], o->size[i], ch->start, end);
        prev_end = (uint64_t)o->off[i] + (uint64_t)o->size[i];
    }
    return 0;
}

int sb_pq_offidx_parse(const uint8_t *p, size_t n, const sb_pq_chunk *ch, int64_t rows,
                       sb_pq_offidx *o, sb_err *err)
{
    memset(o, 0, sizeof *o);
    sb_tc_reader r;
    sb_tc_init(&r, p, n);
    bool seen = false;
    STRUCT_LOOP(&r, last, id, t)
    {
        if (id != 1 || t != SB_TC_LIST || seen) {
            if (!sb_tc_skip(&r, t))
                break;
            continue;
        }
        uint8_t et;
        size_t k;
        if (!sb_tc_list(&r, &et, &k))
            break;
        if (et != SB_TC_STRUCT) {
            sb_tc_fail(&r, "page_locations is not a list of structs");
            break;
        }
        seen = true;
        o->off = calloc(k + 1, sizeof *o->off);
        o->first = calloc(k + 1, sizeof *o->first);
        o->size = calloc(k + 1, sizeof *o->size);
        if (o->off == NULL || o->first == NULL || o->size == NULL) {
            sb_pq_offidx_free(o);
            return sb_err_set(err, "out of memory");
        }
        o->n = k;
        for (size_t i = 0; i < k && !r.bad; i++) {
            o->first[i] = -1;
            page_location(&r, o, i);
        }
    }
    int rc = 0;
    if (r.bad)
        rc = sb_err_data(err, "offset index: %s", r.msg);
    else if (!seen)
        rc = sb_err_data(err, "offset index without page_locations");
    else
        rc = offidx_check(o, ch, rows, err);
    if (rc != 0)
        sb_pq_offidx_free(o);
    return rc;
}

/* A list field of the column index: its header, checked to hold npages elements of type et. */
static bool index_list(sb_tc_reader *r, uint8_t want, size_t npages)
{
    uint8_t et;
    size_t k;
    if (!sb_tc_list(r, &et, &k))
        return false;
    /* bools in a list: some writers give the element type as TRUE (1), others as FALSE (2) */
    bool ok = want == SB_TC_TRUE ? et == SB_TC_TRUE || et == SB_TC_FALSE : et == want;
    if (!ok || k != npages)
        return sb_tc_fail(r, "a list of the wrong type or length");
    return true;
}

static void colidx_field(sb_tc_reader *r, int16_t id, uint8_t t, size_t np, sb_pq_colidx *c,
                         unsigned *seen)
{
    if (t != SB_TC_LIST || id < 1 || id > 5 || id == 4 || (*seen & (1u << id))) {
        sb_tc_skip(r, t);
        return;
    }
    *seen |= 1u << id;
    if (!index_list(r, id == 1 ? SB_TC_TRUE : id == 5 ? SB_TC_I64 : SB_TC_BINARY, np))
        return;
    for (size_t i = 0; i < np && !r->bad; i++) {
        if (id == 1) {
            c->null_pages[i] = sb_tc_byte(r) == 1;
        } else if (id == 5) {
            c->nulls[i] = sb_tc_i64(r);
        } else {
            size_t len = 0;
            const uint8_t *b = sb_tc_binary(r, &len);
            if (id == 2) {
                c->min[i] = b;
                c->min_len[i] = len;
            } else {
                c->max[i] = b;
                c->max_len[i] = len;
            }
        }
    }
}

int sb_pq_colidx_parse(const uint8_t *p, size_t n, size_t npages, sb_pq_colidx *c, sb_err *err)
{
    memset(c, 0, sizeof *c);
    size_t k = npages + 1;
    c->null_pages = calloc(k, sizeof *c->null_pages);
    c->min = calloc(k, sizeof *c->min);
    c->max = calloc(k, sizeof *c->max);
    c->min_len = calloc(k, sizeof *c->min_len);
    c->max_len = calloc(k, sizeof *c->max_len);
    c->nulls = calloc(k, sizeof *c->nulls);
    if (!c->null_pages || !c->min || !c->max || !c->min_len || !c->max_len || !c->nulls) {
        sb_pq_colidx_free(c);
        return sb_err_set(err, "out of memory");
    }
    c->n = npages;
    sb_tc_reader r;
    sb_tc_init(&r, p, n);
    unsigned seen = 0;
    STRUCT_LOOP(&r, last, id, t)
    {
        colidx_field(&r, id, t, npages, c, &seen);
        if (r.bad)
            break;
    }
    int rc = 0;
    if (r.bad)
        rc = sb_err_data(err, "column index: %s", r.msg);
    else if ((seen & 0xe) != 0xe)
        rc = sb_err_data(err, "column index without null_pages, min_values or max_values");
    if (rc != 0) {
        sb_pq_colidx_free(c);
        return rc;
    }
    if (!(seen & (1u << 5))) {
        free(c->nulls);
        c->nulls = NULL;
    }
    return 0;
}

/* Fetches an index's bytes [off, off + len) of the file into *out (malloc'd): 1 when absent. */
static int index_bytes(const sb_pq_file *f, int64_t off, int32_t len, uint8_t **out, sb_err *err)
{
    *out = NULL;
    if (off == 0 && len == 0)
        return 1;
    if (off < 4 || len <= 0 || (uint32_t)len > SB_PQ_MAX_INDEX || f->size < 8 ||
        (uint64_t)off > f->size - 8 || (uint64_t)len > f->size - 8 - (uint64_t)off)
        return sb_err_data(err, "index bytes [%" PRId64 ", +%d) are not inside the file", off, len);
    *out = malloc((size_t)len);
    if (*out == NULL)
        return sb_err_set(err, "out of memory");
    if (f->read(f->ud, (uint64_t)off, *out, (size_t)len, err) != 0) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int sb_pq_offidx_read(const sb_pq_file *f, size_t rg, size_t leaf, sb_pq_offidx *o, sb_err *err)
{
    memset(o, 0, sizeof *o);
    const sb_pq_chunk *ch = &f->meta.rgs[rg].cols[leaf];
    uint8_t *b;
    int r = index_bytes(f, ch->oi_off, ch->oi_len, &b, err);
    if (r != 0)
        return r;
    r = sb_pq_offidx_parse(b, (size_t)ch->oi_len, ch, f->meta.rgs[rg].num_rows, o, err);
    free(b);
    return r;
}

/* The row after page i's last one. */
static int64_t page_end(const sb_pq_offidx *o, size_t i, int64_t rows)
{
    return i + 1 < o->n ? o->first[i + 1] : rows;
}

/* Row ranges of the pages not excluded (keep[i]), adjacent pages merged. */
static int ranges_of(const sb_pq_offidx *o, const bool *keep, int64_t rows, sb_pq_rowsel *sel,
                     sb_err *err)
{
    memset(sel, 0, sizeof *sel);
    sel->first = calloc(o->n, sizeof *sel->first);
    sel->count = calloc(o->n, sizeof *sel->count);
    if (sel->first == NULL || sel->count == NULL) {
        sb_pq_rowsel_free(sel);
        return sb_err_set(err, "out of memory");
    }
    for (size_t i = 0; i < o->n; i++) {
        if (!keep[i])
            continue;
        int64_t a = o->first[i], n = page_end(o, i, rows) - a;
        if (sel->n > 0 && sel->first[sel->n - 1] + sel->count[sel->n - 1] == a) {
            sel->count[sel->n - 1] += n;
        } else {
            sel->first[sel->n] = a;
            sel->count[sel->n++] = n;
        }
    }
    return 0;
}

/* Which pages of the filter column may match: keep[i]; the number excluded. */
static size_t pages_kept(const sb_pq_file *f, const sb_pq_plan *p, int col, int64_t rows,
                         const sb_pq_offidx *o, const sb_pq_colidx *ci, const sb_pq_pred *pr,
                         bool *keep)
{
    size_t excluded = 0;
    for (size_t i = 0; i < o->n; i++) {
        int64_t prow = page_end(o, i, rows) - o->first[i];
        sb_pq_stats st = {0};
        if (ci->null_pages[i]) {
            st.has_null_count = true;
            st.null_count = prow;
        } else {
            st.has_min = st.has_max = true;
            st.min = ci->min[i];
            st.min_len = ci->min_len[i];
            st.max = ci->max[i];
            st.max_len = ci->max_len[i];
            if (ci->nulls != NULL) {
                st.has_null_count = true;
                st.null_count = ci->nulls[i];
            }
        }
        keep[i] = !sb_pq_stats_exclude(&f->meta, p, col, prow, &st, pr);
        excluded += !keep[i];
    }
    return excluded;
}

int sb_pq_select_rows(const sb_pq_file *f, const sb_pq_plan *p, int col, size_t rg,
                      const sb_pq_pred *pred, sb_pq_rowsel *sel, sb_err *err)
{
    memset(sel, 0, sizeof *sel);
    if (col < 0 || (size_t)col >= p->ncols || rg >= f->meta.nrgs)
        return 0;
    size_t leaf = (size_t)p->cols[col].leaf;
    const sb_pq_chunk *ch = &f->meta.rgs[rg].cols[leaf];
    int64_t rows = f->meta.rgs[rg].num_rows;
    if (ch->ci_len == 0 || ch->oi_len == 0)
        return 0;
    sb_pq_offidx o;
    int r = sb_pq_offidx_read(f, rg, leaf, &o, err);
    if (r != 0)
        return r > 0 ? 0 : -1;
    uint8_t *b = NULL;
    sb_pq_colidx ci = {0};
    bool *keep = calloc(o.n, sizeof *keep);
    r = keep == NULL ? sb_err_set(err, "out of memory") : 0;
    if (r == 0)
        r = index_bytes(f, ch->ci_off, ch->ci_len, &b, err);
    if (r == 0)
        r = sb_pq_colidx_parse(b, (size_t)ch->ci_len, o.n, &ci, err);
    if (r == 0 && pages_kept(f, p, col, rows, &o, &ci, pred, keep) > 0)
        r = ranges_of(&o, keep, rows, sel, err) == 0 ? 1 : -1;
    sb_pq_colidx_free(&ci);
    free(b);
    free(keep);
    sb_pq_offidx_free(&o);
    return r;
}

/* The pages of o overlapping a range of sel: want[i]; their spans (relative to the chunk start,
 * spans[0] the bytes before the first data page), the rows they hold, the skipped bytes. */
static size_t pages_wanted(const sb_pq_offidx *o, const sb_pq_rowsel *sel, int64_t rows, bool *want,
                           uint64_t *skipped_bytes)
{
    size_t j = 0, nw = 0;
    for (size_t i = 0; i < o->n; i++) {
        int64_t a = o->first[i], b = page_end(o, i, rows);
        while (j < sel->n && sel->first[j] + sel->count[j] <= a)
            j++;
        want[i] = j < sel->n && sel->first[j] < b;
        nw += want[i];
        if (!want[i])
            *skipped_bytes += (uint64_t)o->size[i];
    }
    return nw;
}

/* Fetches the wanted pages (adjacent ones in one read) and the prefix into buf, laid out as in
 * the file from the chunk's start; fills spans. */
static int fetch_pages(const sb_pq_file *f, const sb_pq_chunk *ch, const sb_pq_offidx *o,
                       const bool *want, uint8_t *buf, sb_pq_span *spans, sb_err *err)
{
    size_t pre = (size_t)((uint64_t)o->off[0] - ch->start), ns = 1;
    spans[0].off = 0;
    spans[0].len = pre;
    if (pre > 0 && f->read(f->ud, ch->start, buf, pre, err) != 0)
        return -1;
    for (size_t i = 0; i < o->n; i++) {
        if (!want[i])
            continue;
        size_t k = i;
        while (k + 1 < o->n && want[k + 1] && o->off[k] + o->size[k] == o->off[k + 1])
            k++;
        uint64_t at = (uint64_t)o->off[i] - ch->start;
        uint64_t n = (uint64_t)(o->off[k] + o->size[k] - o->off[i]);
        if (f->read(f->ud, (uint64_t)o->off[i], buf + at, (size_t)n, err) != 0)
            return -1;
        for (size_t q = i; q <= k; q++) {
            spans[ns].off = (size_t)((uint64_t)o->off[q] - ch->start);
            spans[ns++].len = (size_t)o->size[q];
        }
        i = k;
    }
    return 0;
}

/* Where each range of sel starts among the decoded rows of the wanted pages. */
static void range_starts(const sb_pq_offidx *o, const bool *want, int64_t rows,
                         const sb_pq_rowsel *sel, size_t *pos)
{
    size_t i = 0;
    int64_t before = 0; /* decoded rows of the wanted pages before page i */
    for (size_t j = 0; j < sel->n; j++) {
        while (i + 1 < o->n && o->first[i + 1] <= sel->first[j]) {
            if (want[i])
                before += page_end(o, i, rows) - o->first[i];
            i++;
        }
        pos[j] = (size_t)(before + sel->first[j] - o->first[i]);
    }
}

/* Logs why a chunk's offset index is not used; 1 (read the chunk whole). */
static int not_used(const sb_pq_file *f, const sb_pq_chunk_ctx *cx, const char *why)
{
    char path[256], where[64];
    sb_pq_leaf_path(cx->m, cx->leaf, path, sizeof path);
    snprintf(where, sizeof where, "%zu", cx->rg);
    sb_log(SB_LOG_WARN, "parquet: offset index not used, the column chunk is read whole", "file",
           f->name, "row_group", where, "column", path, "reason", why, NULL);
    return 1;
}

int sb_pq_read_pages(const sb_pq_file *f, const sb_pq_chunk_ctx *cx, const sb_pq_rowsel *sel,
                     sb_pq_colbuf *out, size_t *pos, sb_pq_page_stats *ps, sb_err *err)
{
    const sb_pq_chunk *ch = &f->meta.rgs[cx->rg].cols[cx->leaf];
    int64_t rows = f->meta.rgs[cx->rg].num_rows;
    if (ch->oi_len == 0 || ch->len > cx->max_decoded)
        return 1;
    sb_pq_offidx o;
    sb_err e2 = {0};
    int r = sb_pq_offidx_read(f, cx->rg, cx->leaf, &o, &e2);
    if (r != 0)
        return r > 0 ? 1 : not_used(f, cx, e2.msg);
    bool *want = calloc(o.n, sizeof *want);
    sb_pq_span *spans = calloc(o.n + 1, sizeof *spans);
    uint8_t *buf = malloc(ch->len ? (size_t)ch->len : 1);
    uint64_t skipped = 0;
    size_t nw = 0;
    if (want == NULL || spans == NULL || buf == NULL) {
        r = sb_err_set(err, "out of memory");
        goto done;
    }
    nw = pages_wanted(&o, sel, rows, want, &skipped);
    if (fetch_pages(f, ch, &o, want, buf, spans, &e2) != 0) {
        r = not_used(f, cx, e2.msg);
        goto done;
    }
    sb_pq_chunk_ctx px = *cx;
    px.spans = spans;
    px.nspans = nw + 1;
    int64_t expect = 0;
    for (size_t i = 0; i < o.n; i++)
        expect += want[i] ? page_end(&o, i, rows) - o.first[i] : 0;
    if (sb_pq_read_chunk(&px, buf, (size_t)ch->len, out, &e2) != 0) {
        r = not_used(f, cx, e2.msg);
        goto done;
    }
    if ((int64_t)out->rows != expect) {
        sb_pq_colbuf_free(out);
        r = not_used(f, cx, "its pages hold other rows than the offset index says");
        goto done;
    }
    range_starts(&o, want, rows, sel, pos);
    if (ps != NULL) {
        ps->pages_read += nw;
        ps->pages_skipped += o.n - nw;
        ps->bytes_skipped += skipped;
    }
done:
    free(want);
    free(spans);
    free(buf);
    sb_pq_offidx_free(&o);
    return r;
}
