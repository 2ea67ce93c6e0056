/* pqread.c — the parquet source format over lib/io (see pqread.h): ranged reads of the footer
 * and of each owned row group's selected column chunks, the args.columns option. */
#include "io/pqread.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/schemes.h"
#include "parquet/pindex.h"

void sb_io_parquet_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int sb_io_parquet_columns(const char *args_json, char ***names, size_t *n, sb_err *err)
{
    *names = NULL;
    *n = 0;
    if (args_json == NULL || args_json[0] == '\0')
        return 0;
    cJSON *root = cJSON_Parse(args_json);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sb_err_set(err, "format args are not a JSON object: %.80s", args_json);
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "columns");
    int rc = 0;
    if (c != NULL && !cJSON_IsNull(c)) {
        if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) == 0) {
            rc = sb_err_set(err, "args.columns must be a non-empty list of column names");
        } else {
            size_t k = (size_t)cJSON_GetArraySize(c);
            *names = calloc(k, sizeof **names);
            if (*names == NULL)
                rc = sb_err_set(err, "out of memory");
            const cJSON *it;
            cJSON_ArrayForEach(it, c)
            {
                if (rc != 0)
                    break;
                if (!cJSON_IsString(it)) {
                    rc = sb_err_set(err, "args.columns must list strings");
                    break;
                }
                (*names)[*n] = strdup(it->valuestring);
                if ((*names)[*n] == NULL)
                    rc = sb_err_set(err, "out of memory");
                else
                    (*n)++;
            }
        }
    }
    cJSON_Delete(root);
    if (rc != 0) {
        sb_io_parquet_names_free(*names, *n);
        *names = NULL;
        *n = 0;
    }
    return rc;
}

typedef struct {
    const char *uri;
    sb_pq_scan_stats *scan;
} io_ctx;

/* One ranged request per read: the footer, then one per column chunk. */
static int io_read(void *ud, uint64_t off, void *buf, size_t n, sb_err *err)
{
    io_ctx *c = ud;
    const char *uri = c->uri;
    sb_io_rd *h = NULL;
    if (n == 0)
        return 0;
    if (sb_io_read_open(uri, off, off + n, &h, err) != 0)
        return -1;
    ssize_t k = sb_io_read_full(h, buf, n, err);
    sb_io_read_close(h);
    if (k < 0)
        return -1;
    if (c->scan != NULL)
        c->scan->bytes_read += (uint64_t)k;
    if ((size_t)k != n)
        return sb_err_set(err,
                          "%.300s: object ends at byte offset %" PRIu64 " (it changed since "
                          "planning)",
                          uri, off + (uint64_t)k);
    return 0;
}

/* The bytes of row group g's chunks that plan p reads. */
static uint64_t rg_plan_bytes(const sb_pq_file *f, const sb_pq_plan *p, size_t g)
{
    uint64_t b = 0;
    for (size_t i = 0; i < p->ncols; i++)
        if (p->cols[i].leaf >= 0 && (size_t)p->cols[i].leaf < f->meta.nleaves)
            b += f->meta.rgs[g].cols[p->cols[i].leaf].len;
    return b;
}

/* Reads row group g, only the rows that the page index of the filter column lets match where
 * it has one (an unusable index is reported and the row group read whole). */
static int read_pages_of(const sb_pq_file *f, const sb_pq_plan *plan, int col, size_t g,
                         const sb_pq_read_opts *o, const sb_pq_pred *pred, sb_pq_scan_stats *scan,
                         sb_pq_emit_fn emit, void *ud, sb_err *err)
{
    sb_pq_rowsel sel = {0};
    sb_err e2 = {0};
    int r = col >= 0 ? sb_pq_select_rows(f, plan, col, g, pred, &sel, &e2) : 0;
    if (r < 0) {
        char rg[24];
        snprintf(rg, sizeof rg, "%zu", g);
        sb_log(SB_LOG_WARN, "parquet: page index not used, the row group is read whole", "file",
               f->name, "row_group", rg, "reason", e2.msg, NULL);
    }
    sb_pq_page_stats ps = {0};
    sb_pq_read_opts po = *o;
    if (r > 0) {
        po.sel = &sel;
        po.pages = &ps;
    }
    r = sb_pq_read_row_group(f, plan, g, &po, emit, ud, err);
    sb_pq_rowsel_free(&sel);
    if (scan != NULL) {
        scan->pages_read += ps.pages_read;
        scan->pages_skipped += ps.pages_skipped;
        scan->bytes_skipped += ps.bytes_skipped;
    }
    return r;
}

/* Reads the owned row groups that pred does not exclude. */
static int read_owned(const sb_pq_file *f, const sb_pq_plan *plan, const sb_io_split *split,
                      const sb_pq_read_opts *o, const sb_pq_pred *pred, sb_pq_scan_stats *scan,
                      sb_pq_emit_fn emit, void *ud, sb_err *err)
{
    int col = pred != NULL ? sb_pq_pred_column(plan, pred) : -1;
    for (size_t g = 0; g < f->meta.nrgs; g++) {
        if (!sb_pq_owns(f, g, split->start, split->end))
            continue;
        if (col >= 0 && sb_pq_rg_excluded(&f->meta, plan, col, g, pred)) {
            if (scan != NULL) {
                scan->rgs_skipped++;
                scan->bytes_skipped += rg_plan_bytes(f, plan, g);
            }
            continue;
        }
        if (scan != NULL)
            scan->rgs_read++;
        if (read_pages_of(f, plan, col, g, o, pred, scan, emit, ud, err) != 0)
            return -1;
    }
    return 0;
}

int sb_io_read_parquet(const sb_io_split *split, const char *args_json, size_t target_bytes,
                       bool unsealed, const sb_pq_pred *pred, sb_pq_scan_stats *scan,
                       sb_pq_emit_fn emit, void *ud, sb_err *err)
{
    char **names;
    size_t nnames;
    if (sb_io_parquet_columns(args_json, &names, &nnames, err) != 0)
        return sb_err_wrap(err, "read split: %.300s", split->path);
    uint64_t now = 0;
    int exists = 0;
    if (sb_io_stat(split->path, &now, &exists, err) != 0) {
        sb_io_parquet_names_free(names, nnames);
        return sb_err_wrap(err, "read split");
    }
    if (!exists || now != split->file_size) {
        sb_io_parquet_names_free(names, nnames);
        return sb_err_set(err,
                          "read split: %.300s %s (planned as %" PRIu64 " bytes; it changed "
                          "since planning)",
                          split->path, exists ? "changed size" : "was removed", split->file_size);
    }
    sb_pq_file f;
    io_ctx ctx = {.uri = split->path, .scan = scan};
    int rc = sb_pq_open(&f, split->path, split->file_size, io_read, &ctx, err);
    sb_pq_plan plan = {0};
    if (rc == 0)
        rc = sb_pq_plan_make(&f, (const char *const *)names, nnames, &plan, err);
    sb_pq_read_opts o = {.target_bytes = target_bytes, .unsealed = unsealed};
    if (rc == 0)
        rc = read_owned(&f, &plan, split, &o, pred, scan, emit, ud, err);
    sb_pq_plan_free(&plan);
    sb_pq_close(&f);
    sb_io_parquet_names_free(names, nnames);
    return rc;
}
