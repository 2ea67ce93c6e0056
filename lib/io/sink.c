/* sink.c — the sink's files (see sink.h): writing one part file per partition (through the
 * storage interface: file:// or s3://), preparing and aborting a sink directory, and the commit
 * that checks the parts, removes strays and writes the manifest and _SUCCESS. Owns no state
 * between calls; the part list is the caller's. */

#include "io/sink.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/idmap.h"
#include "parquet/records.h"
#include "parquet/write.h"
#include "partition/crc32c.h"
#include "partition/partition.h"
#include "partition/rowjson.h"
#include "partition/utf8.h"
#include "io/common.h"
#include "io/csv.h"
#include "io/reader.h"
#include "io/schemes.h"
#include "io/sinkmode.h"
#include "partition/id.h"

#define PART_PREFIX "part-"
#define STAGED_PREFIX ".sbatt-"
#define STAGED_NAME_MAX (SB_IO_PART_NAME_MAX + 16)

static const char *ext_of(sb_format f)
{
    switch (f) {
    case SB_FMT_JSONL:
        return "jsonl";
    case SB_FMT_TEXT:
        return "txt";
    case SB_FMT_CSV:
        return "csv";
    case SB_FMT_PARQUET:
        return "parquet";
    default:
        return "bin";
    }
}

/* The sink directory's storage URI (a local path for file://), after checking the scheme and
 * format: malloc'd, NULL + err. */
static char *sink_dir(const sb_sink_spec *sink, sb_err *err)
{
    if (sink == NULL) {
        sb_err_set(err, "sink: no sink spec");
        return NULL;
    }
    if (sink->uri == NULL || strstr(sink->uri, "://") == NULL) {
        sb_err_set(err, "sink uri \"%.200s\": no scheme (expected file:///path or s3://)",
                   sink->uri ? sink->uri : "");
        return NULL;
    }
    if (sb_io_check_format(sink->format, "sink", 1, err) != 0 ||
        sb_io_backend_of(sink->uri, 1, err) == NULL) {
        sb_err_wrap(err, "sink");
        return NULL;
    }
    char *dir = sb_io_uri_norm(sink->uri, err);
    if (dir == NULL) {
        sb_err_wrap(err, "sink");
        return NULL;
    }
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/' && dir[n - 2] != '/')
        dir[--n] = '\0';
    return dir;
}

/* Writes dir/name atomically with the given content. */
static int put_file(const char *dir, const char *name, const char *content, sb_err *err)
{
    char *uri = sb_io_uri_join(dir, name);
    if (uri == NULL)
        return sb_err_set(err, "sink: out of memory");
    int rc = sb_io_put(uri, content, strlen(content), err);
    if (rc != 0)
        sb_err_wrap(err, "sink: writing %.300s", uri);
    free(uri);
    return rc;
}

static int valid_id(const char *id);

int sb_io_sink_part_name(const sb_sink_spec *sink, const char *partition_id,
                         char out[SB_IO_PART_NAME_MAX], sb_err *err)
{
    if (!valid_id(partition_id))
        return sb_err_set(err,
                          "sink: partition id \"%.64s\" is not 1..%d characters of "
                          "[A-Za-z0-9._-] (not starting with '.')",
                          partition_id ? partition_id : "(null)", SB_IO_PART_ID_MAX);
    const char *tag = sink->mode == SB_SINK_APPEND ? sink->part_tag : "";
    int k = snprintf(out, SB_IO_PART_NAME_MAX, PART_PREFIX "%s%s%s.%s", tag, tag[0] ? "-" : "",
                     partition_id, ext_of(sink->format));
    if (k < 0 || k >= SB_IO_PART_NAME_MAX)
        return sb_err_set(err, "sink: part name for partition \"%.64s...\" is too long",
                          partition_id);
    return 0;
}

static int valid_id(const char *id)
{
    size_t n = 0;
    if (id == NULL || id[0] == '.' || id[0] == '\0')
        return 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
        if (n >= SB_IO_PART_ID_MAX)
            return 0;
    }
    return 1;
}

/* The column holding the records: "record", else the only column when it is binary/utf8. NULL
 * with *typed set when there is neither (typed columns: rows_as_json), NULL + err otherwise. */
static const sb_column *record_column(const sb_batch *b, bool *typed, sb_err *err)
{
    *typed = false;
    int i = sb_batch_find(b, SB_IO_RECORD_COLUMN);
    if (i < 0 && sb_batch_ncols(b) == 1)
        i = 0;
    if (i < 0) {
        *typed = true;
        return NULL;
    }
    const sb_column *c = sb_batch_column(b, (size_t)i);
    if (c->type != SB_TYPE_BINARY && c->type != SB_TYPE_UTF8) {
        if (strcmp(c->name, SB_IO_RECORD_COLUMN) != 0) { /* one typed column */
            *typed = true;
            return NULL;
        }
        sb_err_set(err, "column \"%.64s\" is %s, not binary or utf8", c->name,
                   sb_type_name(c->type));
        return NULL;
    }
    return c;
}

/* Typed columns (no record column: exec with framing arrow, plugins) as one JSON object per row,
 * for the formats that write JSON records; *jb and *jblob own the new batch. */
static const sb_column *rows_as_json(const sb_sink_spec *sink, const sb_batch *b, sb_batch **jb,
                                     void **jblob, sb_err *err)
{
    if (sink->format != SB_FMT_JSONL && sink->format != SB_FMT_CSV) {
        sb_err_set(err,
                   "format %s writes one record column (\"record\", or a lone binary/utf8 "
                   "column); this partition has %zu typed columns (the first is \"%.64s\"): use "
                   "jsonl or csv, or output a \"record\" column",
                   sb_format_names[sink->format], sb_batch_ncols(b),
                   sb_batch_ncols(b) ? sb_batch_column(b, 0)->name : "");
        return NULL;
    }
    size_t len;
    if (sb_batch_rows_json(b, jblob, &len, err) != 0 || sb_batch_open(*jblob, len, jb, err) != 0)
        return NULL;
    return sb_batch_column(*jb, 0);
}

/* The record (row) holding byte `at` of the values buffer. */
static size_t row_of_byte(const sb_column *c, size_t at)
{
    size_t lo = 0, hi = c->length; /* offsets[lo] <= at < offsets[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((size_t)c->offsets[mid] <= at)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

typedef struct {
    sb_io_wr *h;
    sb_err *err;
    char *buf;
    size_t cap, len;
    uint32_t crc;
    uint64_t bytes;
} wbuf;

static int wb_flush(wbuf *w)
{
    if (w->len == 0)
        return 0;
    w->crc = sb_crc32c(w->crc, w->buf, w->len);
    w->bytes += w->len;
    int rc = sb_io_write(w->h, w->buf, w->len, w->err);
    w->len = 0;
    return rc;
}

static int wb_put(wbuf *w, const void *p, size_t n)
{
    if (n > w->cap - w->len && wb_flush(w) != 0)
        return -1;
    if (n > w->cap) { /* larger than the buffer: write it through */
        w->crc = sb_crc32c(w->crc, p, n);
        w->bytes += n;
        return sb_io_write(w->h, p, n, w->err);
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return 0;
}

/* Checks the records of c against the format; 0 or -1 + err. */
static int check_records(const sb_sink_spec *sink, const sb_column *c, uint64_t rs, sb_err *err)
{
    if (c->null_count > 0) {
        for (size_t r = 0; r < c->length; r++)
            if (!sb_column_valid(c, r))
                return sb_err_set(err, "record %zu is null", r);
    }
    if (sink->format == SB_FMT_BINARY) {
        if (rs == 0)
            return 0;
        for (size_t r = 0; r < c->length; r++) {
            size_t n = (size_t)(c->offsets[r + 1] - c->offsets[r]);
            if (n != rs)
                return sb_err_set(
                    err, "record %zu has %zu bytes, the sink's recordSize is %" PRIu64, r, n, rs);
        }
        return 0;
    }
    size_t total = (size_t)c->offsets[c->length];
    size_t bad;
    if (c->type == SB_TYPE_BINARY && !sb_utf8_valid(c->values, total, &bad))
        return sb_err_set(err, "record %zu is not valid UTF-8 (byte %zu of the record)",
                          row_of_byte(c, bad), bad - (size_t)c->offsets[row_of_byte(c, bad)]);
    const char *nl = total > 0 ? memchr(c->values, '\n', total) : NULL;
    if (nl != NULL) {
        size_t at = (size_t)(nl - (const char *)c->values);
        return sb_err_set(err, "record %zu contains a newline; it cannot be written as one line",
                          row_of_byte(c, at));
    }
    return 0;
}

/* csv: each record (a JSON object) becomes a row, after the header row. */
static int write_csv(const sb_csv_opts *co, const sb_column *c, wbuf *w)
{
    sb_csv_writer cw = {.o = co};
    sb_csv_buf row = {0};
    int rc = 0;
    for (size_t r = 0; rc == 0 && r < c->length; r++) {
        size_t n;
        const void *p = sb_column_binary(c, r, &n);
        row.len = 0;
        if (sb_csv_write_record(&cw, p, n, &row, w->err) != 0)
            rc = sb_err_wrap(w->err, "record %zu", r);
        else
            rc = wb_put(w, row.p, row.len);
    }
    sb_csv_writer_free(&cw);
    sb_csv_buf_free(&row);
    return rc;
}

static int write_records(const sb_sink_spec *sink, const sb_csv_opts *co, const sb_column *c,
                         wbuf *w)
{
    if (sink->format == SB_FMT_BINARY)
        return wb_put(w, c->values, (size_t)c->offsets[c->length]);
    if (sink->format == SB_FMT_CSV)
        return write_csv(co, c, w);
    for (size_t r = 0; r < c->length; r++) {
        size_t n;
        const void *p = sb_column_binary(c, r, &n);
        if (n + 1 <= w->cap - w->len) { /* the common case: room for the line */
            memcpy(w->buf + w->len, p, n);
            w->buf[w->len + n] = '\n';
            w->len += n + 1;
            continue;
        }
        if (wb_put(w, p, n) != 0 || wb_put(w, "\n", 1) != 0)
            return -1;
    }
    return 0;
}

/* parquet: the batch's columns, or its records typed by sink.args.schema, as one Parquet file
 * (lib/parquet/write.h) through the same storage writes. */
static int pq_out(void *ud, const void *p, size_t n, sb_err *err)
{
    (void)err; /* wbuf carries its own */
    return wb_put(ud, p, n);
}

/* The records schema of this write: args.schema, else the one the controller sent
 * (sink->schema_json), else one inferred from these records when the task must infer it
 * (sink->infer_out). *rec: the record column to type, NULL when the partition is written as it
 * is. -1 + err. */
static int parquet_schema(const sb_sink_spec *sink, const sb_batch *b, sb_pq_sink_opts *o,
                          const sb_column **rec, sb_err *err)
{
    *rec = NULL;
    bool given = o->schema != NULL, typed;
    if (!given && sink->schema_json != NULL && strcmp(sink->schema_json, "[]") != 0) {
        if (sb_pq_schema_parse(sink->schema_json, o, err) != 0)
            return -1;
        given = o->closed = true; /* inferred by the run's first sink task */
    }
    bool infer = !given && sink->infer_out != NULL && *sink->infer_out == NULL;
    if (!given && !infer)
        return 0;
    const sb_column *c = record_column(b, &typed, err);
    if (c == NULL && !typed)
        return -1;
    if (c == NULL && given)
        return sb_err_data(err, "sink.args.schema types records, but the partition has typed "
                                "columns and no \"record\" column");
    if (c == NULL || (infer && sb_batch_rows(b) == 0)) /* typed: nothing to infer or enforce */
        return infer && typed && (*sink->infer_out = strdup("[]")) == NULL
                   ? sb_err_set(err, "out of memory")
                   : 0;
    if (infer) {
        if (sb_pq_infer_schema(c, o, err) != 0)
            return sb_err_wrap(err, "inferring the records' schema");
        if ((*sink->infer_out = sb_pq_schema_json(o)) == NULL)
            return sb_err_set(err, "out of memory");
        o->closed = true;
    }
    *rec = c;
    return 0;
}

static int write_parquet(const sb_sink_spec *sink, const sb_batch *b, sb_io_wr *h, wbuf *w,
                         uint64_t *rows)
{
    sb_pq_sink_opts o;
    if (sb_pq_sink_opts_parse(sink->args_json, &o, w->err) != 0)
        return -1;
    sb_batch *tb = NULL;
    void *tblob = NULL;
    size_t tlen = 0;
    const sb_column *c = NULL;
    int rc = parquet_schema(sink, b, &o, &c, w->err);
    if (rc == 0 && c != NULL &&
        (sb_pq_records_batch(&o, c, &tblob, &tlen, w->err) != 0 ||
         sb_batch_open(tblob, tlen, &tb, w->err) != 0))
        rc = -1;
    w->h = h;
    if (rc == 0)
        rc = sb_pq_write_batch(tb ? tb : b, &o.w, pq_out, w, w->err);
    if (rc == 0)
        rc = wb_flush(w);
    *rows = sb_batch_rows(tb ? tb : b);
    sb_batch_close(tb);
    sb_part_free(tblob);
    sb_pq_sink_opts_free(&o);
    return rc;
}

static int write_parquet_part(const sb_sink_spec *sink, const char *partition_id, const sb_batch *b,
                              char *uri, const char *final, sb_io_part_info *info, sb_err *err)
{
    sb_io_wr *h = NULL;
    wbuf w = {.err = err, .cap = SB_IO_BUF_SIZE};
    uint64_t rows = 0;
    int rc = sb_io_write_open(uri, &h, err);
    if (rc == 0 && (w.buf = malloc(w.cap)) == NULL)
        rc = sb_err_set(err, "sink: out of memory for the write buffer");
    if (rc == 0 && write_parquet(sink, b, h, &w, &rows) != 0)
        rc = -1;
    free(w.buf);
    if (rc != 0 && h != NULL)
        sb_io_write_abort(h);
    else if (rc == 0 && sb_io_write_commit(h, err) != 0)
        rc = -1;
    if (rc != 0)
        sb_err_wrap(err, "sink: writing %.300s (partition %s)", uri, partition_id);
    else if (info != NULL) {
        memset(info, 0, sizeof *info);
        snprintf(info->name, sizeof info->name, "%s", final);
        info->rows = rows;
        info->bytes = w.bytes;
        info->crc32c = w.crc;
    }
    return rc;
}

/* Writes the part of partition_id under `name` (its final name, or a staged one); info names
 * the final one. */
static int write_part_as(const sb_sink_spec *sink, const char *partition_id, const char *final,
                         const char *name, const void *blob, size_t len, sb_io_part_info *info,
                         sb_err *err)
{
    char *dir = sink_dir(sink, err);
    if (dir == NULL)
        return -1;
    uint64_t rs = 0;
    if (sink->format == SB_FMT_BINARY &&
        sb_io_record_size(sink->args_json, 0, "sink", &rs, err) != 0) {
        free(dir);
        return -1;
    }
    sb_batch *b = NULL;
    if (sb_batch_open(blob, len, &b, err) != 0) {
        free(dir);
        return sb_err_wrap(err, "sink: partition %s", partition_id);
    }
    if (sink->format == SB_FMT_PARQUET) {
        char *puri = sb_io_uri_join(dir, name);
        int prc = puri ? write_parquet_part(sink, partition_id, b, puri, final, info, err)
                       : sb_err_set(err, "sink: out of memory");
        free(puri);
        free(dir);
        sb_batch_close(b);
        return prc;
    }
    bool typed;
    sb_batch *jb = NULL;
    void *jblob = NULL;
    const sb_column *c = record_column(b, &typed, err);
    if (c == NULL && typed)
        c = rows_as_json(sink, b, &jb, &jblob, err);
    if (c == NULL || check_records(sink, c, rs, err) != 0) {
        sb_batch_close(jb);
        sb_part_free(jblob);
        sb_batch_close(b);
        free(dir);
        return sb_err_wrap(err, "sink: partition %s", partition_id);
    }
    char *uri = sb_io_uri_join(dir, name);
    free(dir);
    sb_io_wr *h = NULL;
    if (uri == NULL) {
        sb_batch_close(b);
        sb_batch_close(jb);
        sb_part_free(jblob);
        return sb_err_set(err, "sink: out of memory");
    }
    if (sb_io_write_open(uri, &h, err) != 0) {
        sb_batch_close(b);
        sb_batch_close(jb);
        sb_part_free(jblob);
        sb_err_wrap(err, "sink: partition %s", partition_id);
        free(uri);
        return -1;
    }
    size_t data = (size_t)c->offsets[c->length] + c->length;
    sb_csv_opts co;
    memset(&co, 0, sizeof co);
    wbuf w = {
        .h = h, .err = err, .cap = data < SB_IO_BUF_SIZE ? (data > 0 ? data : 1) : SB_IO_BUF_SIZE};
    if (sink->format == SB_FMT_BINARY)
        w.cap = 1; /* binary writes the values buffer straight through */
    w.buf = malloc(w.cap);
    int rc = 0;
    if (w.buf == NULL)
        rc = sb_err_set(err, "sink: out of memory for the write buffer");
    else if (sink->format == SB_FMT_CSV && sb_csv_opts_parse(sink->args_json, &co, err) != 0)
        rc = sb_err_wrap(err, "sink");
    else if (write_records(sink, &co, c, &w) != 0 || wb_flush(&w) != 0)
        rc = sb_err_wrap(err, "sink: writing %.300s (partition %s)", uri, partition_id);
    sb_csv_opts_free(&co);
    free(w.buf);
    uint64_t rows = c->length;
    sb_batch_close(b);
    sb_batch_close(jb);
    sb_part_free(jblob);
    if (rc != 0) {
        sb_io_write_abort(h);
        free(uri);
        return -1;
    }
    if (sb_io_write_commit(h, err) != 0) {
        sb_err_wrap(err, "sink: writing %.300s", uri);
        free(uri);
        return -1;
    }
    free(uri);
    if (info != NULL) {
        memset(info, 0, sizeof *info);
        snprintf(info->name, sizeof info->name, "%s", final);
        info->rows = rows;
        info->bytes = w.bytes;
        info->crc32c = w.crc;
    }
    return 0;
}

int sb_io_sink_write_part(const sb_sink_spec *sink, const char *partition_id, const void *blob,
                          size_t len, sb_io_part_info *info, sb_err *err)
{
    char final[SB_IO_PART_NAME_MAX];
    if (sb_io_sink_part_name(sink, partition_id, final, err) != 0)
        return -1;
    return write_part_as(sink, partition_id, final, final, blob, len, info, err);
}

/* ".sbatt-<attempt>-<final name>": hidden from readers (a leading '.'), one per attempt. */
static int staged_name(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                       char *final, char *out, size_t len, sb_err *err)
{
    if (sb_io_sink_part_name(sink, partition_id, final, err) != 0)
        return -1;
    snprintf(out, len, STAGED_PREFIX "%" PRIu32 "-%s", attempt, final);
    return 0;
}

int sb_io_sink_write_staged(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                            const void *blob, size_t len, sb_io_part_info *info, sb_err *err)
{
    char final[SB_IO_PART_NAME_MAX], staged[STAGED_NAME_MAX];
    if (staged_name(sink, partition_id, attempt, final, staged, sizeof staged, err) != 0)
        return -1;
    return write_part_as(sink, partition_id, final, staged, blob, len, info, err);
}

/* Moves (publish) or removes (discard) the staged part of one attempt. */
static int staged_act(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                      int publish, sb_err *err)
{
    char final[SB_IO_PART_NAME_MAX], staged[STAGED_NAME_MAX];
    if (staged_name(sink, partition_id, attempt, final, staged, sizeof staged, err) != 0)
        return -1;
    char *dir = sink_dir(sink, err);
    if (dir == NULL)
        return -1;
    char *from = sb_io_uri_join(dir, staged), *to = sb_io_uri_join(dir, final);
    int rc = 0, absent = 0;
    if (from == NULL || to == NULL)
        rc = sb_err_set(err, "sink: out of memory");
    else if (publish && sb_io_move(from, to, &absent, err) != 0)
        rc = absent ? 1 : sb_err_wrap(err, "sink: publishing partition %s", partition_id);
    else if (!publish && sb_io_del(from, err) != 0)
        rc = sb_err_wrap(err, "sink: discarding partition %s", partition_id);
    free(from);
    free(to);
    free(dir);
    return rc;
}

int sb_io_sink_publish_staged(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                              sb_err *err)
{
    return staged_act(sink, partition_id, attempt, 1, err);
}

int sb_io_sink_discard_staged(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                              sb_err *err)
{
    return staged_act(sink, partition_id, attempt, 0, err);
}

/* Removes _SUCCESS, the manifest and the backend's leftovers (temporary files, unfinished
 * uploads) from dir; a missing directory holds nothing. */
static int cleanup(const char *dir, sb_err *err)
{
    const char *names[] = {SB_IO_SUCCESS_NAME, SB_IO_MANIFEST_NAME};
    for (size_t i = 0; i < 2; i++) {
        char *uri = sb_io_uri_join(dir, names[i]);
        if (uri == NULL)
            return sb_err_set(err, "sink: out of memory");
        int rc = sb_io_del(uri, err);
        free(uri);
        if (rc != 0)
            return sb_err_wrap(err, "sink");
    }
    if (sb_io_cleanup(dir, err) != 0)
        return sb_err_wrap(err, "sink");
    return 0;
}

/* Append and ignore keep an earlier run's _SUCCESS and manifest until their own commit. */
static int keeps_commit(const sb_sink_spec *sink)
{
    return sink->mode == SB_SINK_APPEND || sink->mode == SB_SINK_IGNORE;
}

/* Only the backend's leftovers (temporary files, unfinished uploads). */
static int leftovers(const char *dir, sb_err *err)
{
    return sb_io_cleanup(dir, err) != 0 ? sb_err_wrap(err, "sink") : 0;
}

int sb_io_sink_infers_schema(const sb_pipeline *p)
{
    if (p->spec.sink.format != SB_FMT_PARQUET)
        return 0;
    sb_pq_sink_opts o;
    sb_err err = {0};
    if (sb_pq_sink_opts_parse(p->spec.sink.args_json, &o, &err) != 0)
        return 0;
    int infer = o.schema == NULL &&
                (o.infer == 1 || (o.infer == -1 && (p->spec.source.format == SB_FMT_JSONL ||
                                                    p->spec.source.format == SB_FMT_CSV)));
    sb_pq_sink_opts_free(&o);
    return infer;
}

int sb_io_sink_prepare(const sb_sink_spec *sink, sb_err *err)
{
    char *dir = sink_dir(sink, err);
    if (dir == NULL)
        return -1;
    if (sink->format == SB_FMT_CSV) { /* bad options fail before any task */
        sb_csv_opts co;
        if (sb_csv_opts_parse(sink->args_json, &co, err) != 0) {
            free(dir);
            return sb_err_wrap(err, "sink");
        }
        sb_csv_opts_free(&co);
    }
    if (sink->format == SB_FMT_PARQUET) {
        sb_pq_sink_opts po;
        if (sb_pq_sink_opts_parse(sink->args_json, &po, err) != 0) {
            free(dir);
            return sb_err_wrap(err, "sink");
        }
        sb_pq_sink_opts_free(&po);
    }
    /* Listing first: a sink that is not a directory, a missing bucket or refused credentials
     * fail here, before any task runs. */
    sb_io_obj *o = NULL;
    size_t n = 0;
    int rc = sb_io_list(dir, SB_IO_LIST_ALL | SB_IO_LIST_DIR, &o, &n, err), done = 0;
    if (rc != 0)
        sb_err_wrap(err, "sink");
    else if (sink->mode == SB_SINK_ERROR_IF_EXISTS)
        rc = sb_io_sink_check_empty(dir, ext_of(sink->format), o, n, err);
    else if (sink->mode == SB_SINK_IGNORE)
        rc = sb_io_sink_dir_committed(dir, &done, err);
    sb_io_objs_free(o, n);
    if (rc == 0 && !done)
        rc = keeps_commit(sink) ? leftovers(dir, err) : cleanup(dir, err);
    free(dir);
    return rc;
}

static int commit_remove_staged(const sb_io_obj *objs, size_t nobjs, sb_err *err);

int sb_io_sink_abort(const sb_sink_spec *sink, sb_err *err)
{
    char *dir = sink_dir(sink, err);
    if (dir == NULL)
        return -1;
    int rc = keeps_commit(sink) ? leftovers(dir, err) : cleanup(dir, err);
    sb_io_obj *o = NULL;
    size_t n = 0;
    if (rc == 0 && sb_io_list(dir, SB_IO_LIST_ALL | SB_IO_LIST_DIR, &o, &n, err) != 0)
        rc = sb_err_wrap(err, "sink");
    if (rc == 0) /* staged parts: no commit will publish them now */
        rc = commit_remove_staged(o, n, err);
    sb_io_objs_free(o, n);
    free(dir);
    return rc;
}

static int valid_part_name(const char *name, const char *ext)
{
    size_t n = strnlen(name, SB_IO_PART_NAME_MAX);
    size_t el = strlen(ext);
    if (n == SB_IO_PART_NAME_MAX || n < strlen(PART_PREFIX) + 2 + el)
        return 0;
    if (strncmp(name, PART_PREFIX, strlen(PART_PREFIX)) != 0 || name[n - el - 1] != '.' ||
        strcmp(name + n - el, ext) != 0)
        return 0;
    return strchr(name, '/') == NULL;
}

static char *manifest_json(const sb_sink_spec *sink, const sb_io_part_info *parts,
                           const unsigned char *skip, size_t n, const sb_io_errored *errored,
                           size_t nerrored)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    cJSON *tot = cJSON_CreateObject();
    uint64_t rows = 0, bytes = 0, count = 0;
    char *text = NULL;
    if (root == NULL || arr == NULL || tot == NULL)
        goto done;
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "format", sb_format_names[sink->format]);
    for (size_t i = 0; i < n; i++) {
        if (skip[i])
            continue;
        cJSON *p = cJSON_CreateObject();
        if (p == NULL)
            goto done;
        cJSON_AddItemToArray(arr, p);
        cJSON_AddStringToObject(p, "name", parts[i].name);
        cJSON_AddNumberToObject(p, "rows", (double)parts[i].rows);
        cJSON_AddNumberToObject(p, "bytes", (double)parts[i].bytes);
        cJSON_AddNumberToObject(p, "crc32c", (double)parts[i].crc32c);
        rows += parts[i].rows;
        bytes += parts[i].bytes;
        count++;
    }
    cJSON_AddNumberToObject(tot, "parts", (double)count);
    cJSON_AddNumberToObject(tot, "rows", (double)rows);
    cJSON_AddNumberToObject(tot, "bytes", (double)bytes);
    cJSON_AddItemToObject(root, "parts", arr);
    arr = NULL;
    cJSON_AddItemToObject(root, "totals", tot);
    tot = NULL;
    cJSON *err_arr = cJSON_AddArrayToObject(root, "errored"); /* partitions not in the output */
    if (err_arr == NULL)
        goto done;
    for (size_t i = 0; i < nerrored; i++) {
        cJSON *e = cJSON_CreateObject();
        if (e == NULL)
            goto done;
        cJSON_AddItemToArray(err_arr, e);
        cJSON_AddStringToObject(e, "stage", errored[i].stage ? errored[i].stage : "");
        cJSON_AddStringToObject(e, "split", errored[i].split ? errored[i].split : "");
        cJSON_AddStringToObject(e, "error", errored[i].error ? errored[i].error : "");
    }
    text = cJSON_Print(root);
done:
    cJSON_Delete(arr);
    cJSON_Delete(tot);
    cJSON_Delete(root);
    return text;
}

static int obj_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *part_name_at(const void *ctx, size_t i)
{
    return ((const sb_io_part_info *)ctx)[i].name;
}

/* Checks the committed parts against one listing of the sink directory (objs, nobjs): valid
 * names, repeats only with identical info (skip[i] set for the repeat), each file present with
 * the reported size. Fills named with the parts by name. -1 with err set. */
static int commit_check_parts(const char *dir, const char *ext, const sb_io_part_info *parts,
                              size_t n, const sb_io_obj *objs, size_t nobjs, sb_idmap *named,
                              unsigned char *skip, sb_err *err)
{
    const char **listed = malloc((nobjs ? nobjs : 1) * sizeof *listed);
    if (listed == NULL)
        return sb_err_set(err, "sink: commit: out of memory");
    for (size_t i = 0; i < nobjs; i++)
        listed[i] = objs[i].uri; /* sorted by URI = sorted by name within one directory */
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!valid_part_name(parts[i].name, ext)) {
            rc = sb_err_set(err, "sink: commit: part %zu has an invalid name \"%.64s\"", i,
                            parts[i].name);
            break;
        }
        /* The same name twice: allowed only with identical info (e.g. a report repeated). */
        size_t j;
        if (sb_idmap_get(named, parts[i].name, &j)) {
            if (parts[j].rows != parts[i].rows || parts[j].bytes != parts[i].bytes ||
                parts[j].crc32c != parts[i].crc32c) {
                rc = sb_err_set(err,
                                "sink: commit: part %.64s is listed twice with different "
                                "contents (%" PRIu64 " and %" PRIu64 " bytes)",
                                parts[i].name, parts[j].bytes, parts[i].bytes);
                break;
            }
            skip[i] = 1;
            continue; /* checked against the listing once, as the first */
        }
        if (sb_idmap_put(named, parts[i].name, i) != 0) {
            rc = sb_err_set(err, "sink: commit: out of memory");
            break;
        }
        char *uri = sb_io_uri_join(dir, parts[i].name);
        if (uri == NULL) {
            rc = sb_err_set(err, "sink: commit: out of memory");
            break;
        }
        const char *key = uri;
        const char **hit =
            nobjs > 0 ? bsearch(&key, listed, nobjs, sizeof *listed, obj_name_cmp) : NULL;
        uint64_t size = hit ? objs[hit - listed].size : 0;
        int exists = hit != NULL;
        /* not in the listing: its worker may have published it since (a staged part renamed
         * while the directory was read) */
        if (hit == NULL && sb_io_stat(uri, &size, &exists, err) != 0)
            rc = sb_err_wrap(err, "sink: commit");
        else if (!exists)
            rc = sb_err_set(err, "sink: commit: part file %.300s: No such file or directory", uri);
        else if (size != parts[i].bytes)
            rc = sb_err_set(
                err, "sink: commit: part file %.300s has %" PRIu64 " bytes, reported %" PRIu64, uri,
                size, parts[i].bytes);
        free(uri);
        if (rc != 0)
            break;
    }
    free(listed);
    return rc;
}

/* Part files this engine wrote that the committed list does not name are output of attempts
 * that no longer count: removed, so readers of the directory see no duplicates. Files of other
 * names (a user's own part-00000.jsonl) are left alone. -1 with err set. */
static int commit_remove_strays(const sb_io_obj *objs, size_t nobjs, const char *ext,
                                const sb_idmap *named, sb_err *err)
{
    for (size_t i = 0; i < nobjs; i++) {
        const char *nm = sb_io_uri_base(objs[i].uri);
        if (!sb_io_sink_our_part_name(nm, ext))
            continue;
        if (sb_idmap_get(named, nm, NULL))
            continue;
        if (sb_io_del(objs[i].uri, err) != 0)
            return sb_err_wrap(err, "sink: commit: cannot remove stray part %.300s", objs[i].uri);
    }
    return 0;
}

/* Writes the manifest, then _SUCCESS. Parts are written without a sync (file: temporary name +
 * rename only): one sync of the directory makes every part and the manifest durable before
 * _SUCCESS exists, and one more makes _SUCCESS durable before the pipeline reports success. */
static int commit_publish(const char *dir, const sb_sink_spec *sink, const sb_io_part_info *parts,
                          const unsigned char *skip, size_t n, const sb_io_errored *errored,
                          size_t nerrored, sb_err *err)
{
    char *text = manifest_json(sink, parts, skip, n, errored, nerrored);
    if (text == NULL)
        return sb_err_set(err, "sink: commit: out of memory for the manifest");
    int rc = 0;
    if (put_file(dir, SB_IO_MANIFEST_NAME, text, err) != 0)
        rc = -1;
    else if (sb_io_sync(dir, err) != 0)
        rc = sb_err_wrap(err, "sink: commit: making the parts durable");
    else if (put_file(dir, SB_IO_SUCCESS_NAME, "", err) != 0)
        rc = -1;
    else if (sb_io_sync(dir, err) != 0)
        rc = sb_err_wrap(err, "sink: commit: making _SUCCESS durable");
    free(text);
    return rc;
}

/* Append mode: the parts and errored partitions to commit are the earlier manifest's, then
 * the run's. An earlier part named with this run's tag is this run's own from a commit that did
 * not finish (the driver died after it): the run lists it again, so it is not carried over. */
typedef struct {
    sb_io_prev_manifest prev;
    sb_io_part_info *parts;
    size_t n;
    sb_io_errored *errored;
    size_t nerrored;
} merged;

static int append_merge(const char *dir, const sb_sink_spec *sink, const sb_io_part_info *parts,
                        size_t n, const sb_io_errored *errored, size_t nerrored, merged *m,
                        sb_err *err)
{
    memset(m, 0, sizeof *m);
    if (sb_io_prev_manifest_read(dir, ext_of(sink->format), &m->prev, err) != 0)
        return sb_err_wrap(err, "sink: commit (append)");
    m->parts = calloc(m->prev.nparts + n + 1, sizeof *m->parts);
    m->errored = calloc(m->prev.nerrored + nerrored + 1, sizeof *m->errored);
    if (m->parts == NULL || m->errored == NULL)
        return sb_err_set(err, "sink: commit: out of memory");
    char own[SB_IO_PART_NAME_MAX];
    snprintf(own, sizeof own, PART_PREFIX "%s-", sink->part_tag);
    for (size_t i = 0; i < m->prev.nparts; i++)
        if (sink->part_tag[0] == '\0' || strncmp(m->prev.parts[i].name, own, strlen(own)) != 0)
            m->parts[m->n++] = m->prev.parts[i];
    if (n > 0) /* memcpy from NULL is undefined even for 0 bytes (UBSan stops the worker) */
        memcpy(m->parts + m->n, parts, n * sizeof *parts);
    m->n += n;
    if (m->prev.nerrored > 0)
        memcpy(m->errored, m->prev.errored, m->prev.nerrored * sizeof *errored);
    m->nerrored = m->prev.nerrored;
    for (size_t i = 0; i < nerrored; i++) {
        size_t j = 0; /* an entry already listed (a repeated commit of this run) once */
        while (j < m->prev.nerrored &&
               !(strcmp(m->errored[j].stage, errored[i].stage ? errored[i].stage : "") == 0 &&
                 strcmp(m->errored[j].split, errored[i].split ? errored[i].split : "") == 0 &&
                 strcmp(m->errored[j].error, errored[i].error ? errored[i].error : "") == 0))
            j++;
        if (j == m->prev.nerrored)
            m->errored[m->nerrored++] = errored[i];
    }
    return 0;
}

static void merged_free(merged *m)
{
    sb_io_prev_manifest_free(&m->prev);
    free(m->parts);
    free(m->errored);
}

/* CRC-32C of the object at uri (size bytes). 0, or -1 + err. */
static int object_crc(const char *uri, uint64_t size, uint32_t *crc, sb_err *err)
{
    sb_io_rd *r = NULL;
    unsigned char *buf = malloc(SB_IO_BUF_SIZE);
    if (buf == NULL)
        return sb_err_set(err, "sink: out of memory");
    if (sb_io_read_open(uri, 0, size, &r, err) != 0) {
        free(buf);
        return -1;
    }
    ssize_t got;
    *crc = 0;
    while ((got = sb_io_read(r, buf, SB_IO_BUF_SIZE, err)) > 0)
        *crc = sb_crc32c(*crc, buf, (size_t)got);
    sb_io_read_close(r);
    free(buf);
    return got < 0 ? -1 : 0;
}

/* The final name a staged object's name stands for (NULL when it is not one). */
static const char *staged_final(const char *base)
{
    size_t pl = strlen(STAGED_PREFIX);
    if (strncmp(base, STAGED_PREFIX, pl) != 0)
        return NULL;
    const char *p = base + pl;
    if (*p < '0' || *p > '9')
        return NULL;
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == '-' ? p + 1 : NULL;
}

/* A listed part whose winning attempt's staged file is still there (its worker had not
 * published it yet, or died after its report was accepted) is published here: the staged file
 * with the listed size and CRC-32C (a losing attempt's may differ), over whatever file has the
 * part's name (an earlier run's, in overwrite mode). *moved counts them and the staged files
 * published by their workers while this ran (the listing is then stale). -1 with err set. */
static int commit_adopt_staged(const char *dir, const sb_io_part_info *parts, size_t n,
                               const sb_io_obj *objs, size_t nobjs, size_t *moved, sb_err *err)
{
    sb_idmap byname;
    sb_idmap_init(&byname, part_name_at, parts);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (sb_idmap_put(&byname, parts[i].name, i) != 0)
            rc = sb_err_set(err, "sink: commit: out of memory");
    for (size_t k = 0; rc == 0 && k < nobjs; k++) {
        const char *base = sb_io_uri_base(objs[k].uri), *final = staged_final(base);
        size_t i;
        if (final == NULL || !sb_idmap_get(&byname, final, &i) || objs[k].size != parts[i].bytes)
            continue;
        uint32_t crc = 0;
        uint64_t size = 0;
        int exists = 1, absent = 0;
        if (object_crc(objs[k].uri, objs[k].size, &crc, err) != 0) {
            /* gone since the listing: its worker published it */
            if (sb_io_stat(objs[k].uri, &size, &exists, err) != 0 || exists)
                rc = sb_err_wrap(err, "sink: commit: reading %.300s", objs[k].uri);
            else
                (*moved)++;
            continue;
        }
        if (crc != parts[i].crc32c)
            continue; /* a losing attempt's */
        char *to = sb_io_uri_join(dir, final);
        if (to == NULL)
            rc = sb_err_set(err, "sink: commit: out of memory");
        else if (sb_io_move(objs[k].uri, to, &absent, err) == 0 || absent)
            (*moved)++; /* absent: its worker published it meanwhile */
        else
            rc = sb_err_wrap(err, "sink: commit");
        free(to);
    }
    sb_idmap_free(&byname);
    return rc;
}

int sb_io_sink_is_staged(const char *name)
{
    return staged_final(name) != NULL;
}

/* Staged parts left over (losing attempts', or published copies' sources): removed. */
static int commit_remove_staged(const sb_io_obj *objs, size_t nobjs, sb_err *err)
{
    for (size_t k = 0; k < nobjs; k++)
        if (staged_final(sb_io_uri_base(objs[k].uri)) != NULL && sb_io_del(objs[k].uri, err) != 0)
            return sb_err_wrap(err, "sink: commit: cannot remove staged part %.300s", objs[k].uri);
    return 0;
}

/* Checks the parts against one listing, removes strays and leftovers, publishes. */
static int commit_listed(const char *dir, const sb_sink_spec *sink, const sb_io_part_info *parts,
                         size_t n, const sb_io_errored *errored, size_t nerrored, sb_err *err)
{
    const char *ext = ext_of(sink->format);
    unsigned char *skip = calloc(n ? n : 1, 1);
    sb_idmap named; /* the committed parts by name: repeats, and strays below */
    sb_idmap_init(&named, part_name_at, parts);
    sb_io_obj *objs = NULL;
    size_t nobjs = 0;
    int rc = 0;
    if (skip == NULL) {
        rc = sb_err_set(err, "sink: commit: out of memory");
        goto out;
    }
    /* One listing gives every part's size (no request per part on S3). */
    if (sb_io_list(dir, SB_IO_LIST_ALL | SB_IO_LIST_DIR, &objs, &nobjs, err) != 0) {
        rc = sb_err_wrap(err, "sink: commit");
        goto out;
    }
    size_t moved = 0;
    rc = commit_adopt_staged(dir, parts, n, objs, nobjs, &moved, err);
    if (rc == 0 && moved > 0) { /* listed again: the sizes below are of the final names */
        sb_io_objs_free(objs, nobjs);
        objs = NULL;
        nobjs = 0;
        if (sb_io_list(dir, SB_IO_LIST_ALL | SB_IO_LIST_DIR, &objs, &nobjs, err) != 0)
            rc = sb_err_wrap(err, "sink: commit");
    }
    if (rc == 0)
        rc = commit_check_parts(dir, ext, parts, n, objs, nobjs, &named, skip, err);
    if (rc == 0)
        rc = commit_remove_strays(objs, nobjs, ext, &named, err);
    if (rc == 0)
        rc = commit_remove_staged(objs, nobjs, err);
    if (rc != 0)
        goto out;
    /* Temporary files and unfinished multipart uploads of workers killed mid-write: every
     * counted part is written by now, so what is still open is garbage (billed, on S3). */
    if (sb_io_cleanup(dir, err) != 0) {
        rc = sb_err_wrap(err, "sink: commit");
        goto out;
    }
    rc = commit_publish(dir, sink, parts, skip, n, errored, nerrored, err);
out:
    sb_io_objs_free(objs, nobjs);
    sb_idmap_free(&named);
    free(skip);
    return rc;
}

int sb_io_sink_commit(const sb_sink_spec *sink, const sb_io_part_info *parts, size_t n,
                      const sb_io_errored *errored, size_t nerrored, sb_err *err)
{
    if (n > 0 && parts == NULL)
        return sb_err_set(err, "sink: commit: NULL parts");
    char *dir = sink_dir(sink, err);
    if (dir == NULL)
        return -1;
    int rc = 0, done = 0;
    if (sink->mode == SB_SINK_IGNORE && n == 0 && nerrored == 0) {
        /* the plan was empty because the sink was committed (sb_storage_splits_make): the
         * earlier output stays exactly as it is */
        if ((rc = sb_io_sink_dir_committed(dir, &done, err)) != 0 || done) {
            free(dir);
            return rc;
        }
    }
    if (sink->mode == SB_SINK_APPEND) {
        merged m;
        rc = append_merge(dir, sink, parts, n, errored, nerrored, &m, err);
        if (rc == 0)
            rc = commit_listed(dir, sink, m.parts, m.n, m.errored, m.nerrored, err);
        merged_free(&m);
    } else {
        rc = commit_listed(dir, sink, parts, n, errored, nerrored, err);
    }
    free(dir);
    return rc;
}

int sb_io_sink_committed(const sb_sink_spec *sink, int *yes, sb_err *err)
{
    *yes = 0;
    char *dir = sink_dir(sink, err);
    if (dir == NULL)
        return -1;
    int rc = sb_io_sink_dir_committed(dir, yes, err);
    free(dir);
    return rc;
}

int sb_io_sink_verify_part(const sb_sink_spec *sink, const char *partition_id, uint64_t bytes,
                           uint32_t crc32c, char *why, size_t len, sb_err *err)
{
    if (len > 0)
        why[0] = '\0';
    char final[SB_IO_PART_NAME_MAX];
    if (sb_io_sink_part_name(sink, partition_id, final, err) != 0)
        return -1;
    char *dir = sink_dir(sink, err);
    if (dir == NULL)
        return -1;
    if (sb_io_backend_of(dir, 1, err) != &sb_io_backend_file) {
        free(dir); /* a committed write is durable there: nothing a crash can undo */
        return 1;
    }
    char *uri = sb_io_uri_join(dir, final);
    free(dir);
    if (uri == NULL)
        return sb_err_set(err, "sink: out of memory");
    uint64_t size = 0;
    int exists = 0, ok = 0;
    uint32_t crc = 0;
    sb_err e = {0};
    if (sb_io_stat(uri, &size, &exists, &e) != 0)
        snprintf(why, len, "%s", e.msg);
    else if (!exists)
        snprintf(why, len, "%s is missing", uri);
    else if (size != bytes)
        snprintf(why, len, "%s has %" PRIu64 " bytes, the checkpoint recorded %" PRIu64, uri, size,
                 bytes);
    else if (object_crc(uri, size, &crc, &e) != 0)
        snprintf(why, len, "%s", e.msg);
    else if (crc != crc32c)
        snprintf(why, len, "%s has CRC-32C %" PRIu32 ", the checkpoint recorded %" PRIu32, uri, crc,
                 crc32c);
    else
        ok = 1;
    free(uri);
    return ok;
}
