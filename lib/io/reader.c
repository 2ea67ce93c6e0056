/* reader.c — split reader for jsonl, text, csv and binary files, and the entry to the image
 * reader (imgread.c) and the parquet reader (pqread.c) (see reader.h). */
#include "io/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partition/partition.h"
#include "partition/utf8.h"
#include "io/common.h"
#include "io/csv.h"
#include "io/decomp.h"
#include "io/imgread.h"
#include "io/pqread.h"
#include "io/schemes.h"

/* The split's bytes as one sequential stream from the storage layer. The first request covers
 * the split itself; reading past its end (to finish the last line) continues with requests of
 * growing size, so a remote split never downloads the rest of a large object. */
typedef struct {
    const char *uri;
    sb_io_rd *h;
    uint64_t pos;  /* next byte to read */
    uint64_t lim;  /* end of the current request */
    uint64_t size; /* planned object size */
    uint64_t ext;  /* size of the next extension request */
} src;

static int src_open(src *s, uint64_t from, uint64_t to, sb_err *err)
{
    sb_io_read_close(s->h);
    s->h = NULL;
    if (to > s->size)
        to = s->size;
    if (sb_io_read_open(s->uri, from, to, &s->h, err) != 0)
        return -1;
    s->pos = from;
    s->lim = to;
    return 0;
}

/* Opens the next range after the one read to its end (to finish a split's last line): each
 * extension four times the last, up to 64 MiB. */
static int src_more(src *s, sb_err *err)
{
    if (src_open(s, s->pos, s->pos + s->ext, err) != 0)
        return -1;
    if (s->ext < ((uint64_t)64 << 20))
        s->ext *= 4;
    return 0;
}

/* Reads exactly n bytes at s->pos (n <= size - pos): the count, or -1 + err. */
static ssize_t src_read(src *s, void *buf, size_t n, sb_err *err)
{
    size_t got = 0;
    while (got < n) {
        if (s->pos == s->lim && src_more(s, err) != 0)
            return -1;
        size_t want = n - got;
        if (want > s->lim - s->pos)
            want = (size_t)(s->lim - s->pos);
        ssize_t k = sb_io_read_full(s->h, (char *)buf + got, want, err);
        if (k < 0)
            return -1;
        if ((size_t)k < want)
            return sb_err_set(err,
                              "reading %.300s: object ends at byte offset %" PRIu64
                              ", planned size %" PRIu64 " (it changed since planning)",
                              s->uri, s->pos + (uint64_t)k, s->size);
        s->pos += (uint64_t)k;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

typedef struct {
    const sb_io_split *sp;
    src *in;
    size_t max_record; /* longest record accepted (bytes) */
    sb_format fmt;
    sb_batch_builder *b;
    size_t target;
    bool unsealed; /* partitions for a consumer in this process: no checksums */
    sb_io_emit_fn emit;
    void *ud;
    uint64_t parts;
    uint64_t seen_bytes, seen_lines; /* line bytes (with '\n') and records appended so far */
    uint64_t records;                /* csv records appended (csv_record) */
    /* csv (csv.h): options, column names, the JSON text of a record, a multi-line record */
    const sb_csv_opts *csv;
    sb_csv_header hdr;
    bool need_header; /* the next record is the file's header row */
    sb_csv_buf json, pend;
    uint64_t pend_off;
    int compression; /* args.compression: -1 by file name, else an sb_io_codec (decomp.h) */
    /* a compressed file's decoded text, as the line reader sees it (read_lines_decomp) */
    sb_io_split dsp;
    char shown[SB_IO_SPLIT_ENCODED_MAX + 32];
} rd;

static int flush(rd *r, sb_err *err)
{
    size_t rows = sb_batch_builder_rows(r->b);
    if (rows == 0)
        return 0;
    void *blob;
    size_t len;
    int rc = r->unsealed ? sb_batch_builder_finish_unsealed(r->b, &blob, &len, err)
                         : sb_batch_builder_finish(r->b, &blob, &len, err);
    if (rc != 0)
        return sb_err_wrap(err, "reading %.300s", r->sp->path);
    r->parts++;
    sb_err_clear(err); /* a consumer sharing err may leave its cause there: keep and wrap it */
    rc = r->emit(blob, len, rows, r->ud);
    if (rc != 0 && err != NULL && err->msg[0] != '\0')
        return sb_err_wrap(err, "reading %.300s: partition %" PRIu64 " (%zu records)", r->sp->path,
                           r->parts, rows);
    if (rc != 0)
        return sb_err_set(err,
                          "reading %.300s: the consumer refused partition %" PRIu64
                          " (%zu records, returned %d)",
                          r->sp->path, r->parts, rows, rc);
    return 0;
}

/* Bytes the builder may still take before the partition reaches the target (at least 1, so
 * that a target below the size of an empty blob still makes progress). */
static size_t room(const rd *r)
{
    size_t cur = sb_batch_builder_bytes(r->b);
    return cur < r->target ? r->target - cur : 1;
}

static int full(const rd *r)
{
    return sb_batch_builder_bytes(r->b) >= r->target;
}

/* Appends whole lines s[0..n) (the last may lack its '\n'); `off` is the file offset of s. */
static int append_run(rd *r, const char *s, size_t n, uint64_t off, sb_err *err)
{
    if (n == 0)
        return 0;
    size_t used;
    int rc = r->fmt == SB_FMT_JSONL
                 ? sb_batch_builder_append_nonblank_lines(r->b, 0, s, n, true, &used, err)
                 : sb_batch_builder_append_lines(r->b, 0, s, n, true, true, &used, err);
    if (rc == 0)
        return 0;
    size_t bad;
    if (!sb_utf8_valid(s, n, &bad)) {
        const char *ls = bad > 0 ? memrchr(s, '\n', bad) : NULL;
        size_t line_at = ls != NULL ? (size_t)(ls - s) + 1 : 0;
        return sb_err_data(err,
                           "%.300s: byte offset %" PRIu64
                           ": the line starting at byte offset %" PRIu64 " is not valid UTF-8",
                           r->sp->path, off + bad, off + line_at);
    }
    return sb_err_wrap(err, "%.300s: lines at byte offset %" PRIu64, r->sp->path, off);
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* One complete csv record rec[0..n) at file offset off: the header row, or a JSON object. */
static int csv_record(rd *r, const char *rec, size_t n, uint64_t off, sb_err *err)
{
    size_t bad;
    if (!sb_utf8_valid(rec, n, &bad))
        return sb_err_data(err, "%.300s: byte offset %" PRIu64 ": not valid UTF-8", r->sp->path,
                           off + bad);
    if (blank(rec, n))
        return 0;
    int rc = 0;
    if (r->need_header) {
        r->need_header = false;
        rc = sb_csv_header_parse(rec, n, r->csv, &r->hdr, err);
        return rc != 0 ? sb_err_wrap(err, "%.300s: byte offset %" PRIu64, r->sp->path, off) : 0;
    }
    if (r->hdr.n == 0 && sb_csv_header_default(rec, n, r->csv, &r->hdr, err) != 0)
        return sb_err_wrap(err, "%.300s: byte offset %" PRIu64, r->sp->path, off);
    if (sb_csv_record_to_json(rec, n, r->csv, &r->hdr, &r->json, err) != 0)
        return sb_err_wrap(err, "%.300s: the csv record at byte offset %" PRIu64, r->sp->path, off);
    if (sb_batch_builder_append_binary(r->b, 0, r->json.p, r->json.len, err) != 0)
        return sb_err_wrap(err, "%.300s: byte offset %" PRIu64, r->sp->path, off);
    r->records++;
    /* the cut right after the record that fills the partition, wherever the read's pieces end */
    if (full(r) && flush(r, err) != 0)
        return -1;
    return 0;
}

/* Appends the csv records of whole lines s[0..n) (the last may lack '\n' only at the end of
 * the data). A record spanning lines (multiline) is gathered in r->pend. */
static int append_csv(rd *r, const char *s, size_t n, uint64_t off, sb_err *err)
{
    size_t pos = 0;
    while (pos < n) {
        const char *nl = memchr(s + pos, '\n', n - pos);
        size_t le = nl != NULL ? (size_t)(nl - s) + 1 : n;
        const char *rec = s + pos;
        size_t len = le - pos;
        uint64_t at = off + pos;
        if (r->pend.len > 0) {
            if (r->pend.len + len > r->max_record)
                return sb_err_data(err,
                                   "%.300s: byte offset %" PRIu64 ": a csv record longer than "
                                   "%zu bytes (args.maxRecordSize)",
                                   r->sp->path, r->pend_off, r->max_record);
            char *p = realloc(r->pend.p, r->pend.len + len);
            if (p == NULL)
                return sb_err_set(err, "%.300s: out of memory", r->sp->path);
            r->pend.p = p;
            memcpy(p + r->pend.len, rec, len);
            r->pend.len += len;
            rec = r->pend.p;
            len = r->pend.len;
            at = r->pend_off;
        }
        ssize_t rl = sb_csv_record_len(rec, len, r->csv, nl == NULL, err);
        if (rl < 0)
            return sb_err_wrap(err, "%.300s: the csv record at byte offset %" PRIu64, r->sp->path,
                               at);
        if (rl == 0) { /* a quoted newline (multiline): the record goes on */
            if (r->pend.len == 0) {
                char *p = malloc(len);
                if (p == NULL)
                    return sb_err_set(err, "%.300s: out of memory", r->sp->path);
                free(r->pend.p);
                r->pend.p = p;
                memcpy(p, rec, len);
                r->pend.len = len;
                r->pend_off = at;
            }
        } else {
            if (csv_record(r, rec, len, at, err) != 0)
                return -1;
            r->pend.len = 0;
        }
        pos = le;
    }
    return 0;
}

/* Appends whole lines s[0..n) (jsonl: blank lines are skipped as they are appended). */
static int append_piece(rd *r, const char *s, size_t n, uint64_t off, sb_err *err)
{
    if (r->fmt == SB_FMT_CSV)
        return append_csv(r, s, n, off, err);
    return append_run(r, s, n, off, err);
}

/* Appends the lines of seg[0..n) (whole lines; the last may lack '\n' only at the end of the
 * split's data), flushing partitions as they fill. A partition grows by the line bytes plus 4
 * bytes of offset per line, so each piece is sized from the average line length seen so far
 * (half the room for the first piece); as the room shrinks the pieces do too, down to one line,
 * so a partition passes the target by less than one line. */
static int add_lines(rd *r, const char *seg, size_t n, uint64_t off, sb_err *err)
{
    while (n > 0) {
        if (full(r) && flush(r, err) != 0)
            return -1;
        size_t rm = room(r);
        size_t want;
        if (r->seen_lines == 0) {
            want = rm / 2;
        } else {
            double avg = (double)r->seen_bytes / (double)r->seen_lines;
            want = (size_t)((double)rm * avg / (avg + sizeof(int32_t)));
        }
        if (want == 0)
            want = 1;
        size_t piece = n;
        if (want < n) {
            const char *nl = memrchr(seg, '\n', want);
            if (nl == NULL)
                nl = memchr(seg + want, '\n', n - want);
            piece = nl != NULL ? (size_t)(nl - seg) + 1 : n;
        }
        size_t rows0 = sb_batch_builder_rows(r->b);
        uint64_t records0 = r->records;
        if (append_piece(r, seg, piece, off, err) != 0)
            return -1;
        if (r->fmt != SB_FMT_CSV && full(r) && sb_batch_builder_rows(r->b) > rows0 + 1) {
            /* the piece passed the target: cut right after the line that reached it, so that
             * the partitions depend on the lines only, not on where the reads' buffers ended
             * (a lineage re-run must make the same ones). Line by line, from rows0 again. */
            sb_batch_builder_truncate(r->b, rows0);
            size_t used = 0;
            while (used < piece && !full(r)) {
                const char *nl = memchr(seg + used, '\n', piece - used);
                size_t ll = nl != NULL ? (size_t)(nl - (seg + used)) + 1 : piece - used;
                if (append_piece(r, seg + used, ll, off + used, err) != 0)
                    return -1;
                used += ll;
            }
            piece = used;
        }
        r->seen_bytes += piece;
        r->seen_lines +=
            r->fmt == SB_FMT_CSV ? r->records - records0 : sb_batch_builder_rows(r->b) - rows0;
        seg += piece;
        n -= piece;
        off += piece;
    }
    if (full(r) && flush(r, err) != 0)
        return -1;
    return 0;
}

/* Where a split's line reading stands (text, jsonl, csv); offsets are the file's. Shared by
 * the pull reader (read_lines_pull: the file's bytes read into our buffer) and the push reader
 * (read_lines_push: the bytes handed over in the storage backend's buffers). */
typedef struct {
    bool skipping; /* before the first line this split owns */
    bool bom_done;
    bool done;        /* the split's data ended */
    uint64_t base;    /* file offset of the first byte not consumed yet */
    uint64_t stop;    /* our data ends at the first '\n' at or after stop */
    uint64_t scanned; /* no '\n' in [stop, scanned) */
} lines_st;

static void lines_init(const rd *r, lines_st *st)
{
    const sb_io_split *sp = r->sp;
    st->skipping = sp->start > 0;
    st->base = st->skipping ? sp->start - 1 : 0;
    st->stop = sp->end - 1;
    st->scanned = st->stop;
    st->bom_done = sp->start > 0 || (r->fmt != SB_FMT_JSONL && r->fmt != SB_FMT_CSV);
    st->done = false;
}

/* Consumes what it can of buf[0..len), which starts at file offset st->base: skips to the first
 * line the split owns, drops a byte order mark, appends whole lines up to the end of the split's
 * data (the first '\n' at or after stop). *used: the bytes consumed; the rest (a line not yet
 * complete) comes again with more bytes. eof: buf ends at the end of the file. */
static int lines_step(rd *r, lines_st *st, const char *buf, size_t len, bool eof, size_t *used,
                      sb_err *err)
{
    size_t at = 0;
    *used = 0;
    if (st->skipping) {
        const char *nl = memchr(buf, '\n', len);
        if (nl == NULL) {
            if (eof || st->base + len >= st->stop)
                st->done = true; /* no line starts in [start, end) */
            st->base += len;
            *used = len;
            return 0;
        }
        at = (size_t)(nl - buf) + 1;
        st->base += at;
        st->skipping = false;
        if (st->base >= r->sp->end) {
            st->done = true; /* the next line starts at or after end: not ours */
            *used = at;
            return 0;
        }
    }
    if (!st->bom_done) {
        if (len - at < 3 && !eof) {
            *used = at; /* too few bytes to tell */
            return 0;
        }
        if (len - at >= 3 && memcmp(buf + at, "\xEF\xBB\xBF", 3) == 0) {
            at += 3;
            st->base += 3;
        }
        st->bom_done = true;
    }
    const char *d = buf + at;
    size_t n = len - at;
    /* Does d hold the end of our data? */
    size_t data = 0;
    bool last = false;
    uint64_t from = st->scanned > st->base ? st->scanned : st->base;
    if (from < st->base + n) {
        const char *nl = memchr(d + (from - st->base), '\n', (size_t)(st->base + n - from));
        if (nl != NULL) {
            data = (size_t)(nl - d) + 1;
            last = true;
        } else {
            st->scanned = st->base + n;
        }
    }
    if (!last && eof) {
        data = n;
        last = true;
    }
    if (last) {
        st->done = true;
        int rc = add_lines(r, d, data, st->base, err);
        st->base += data;
        *used = at + data;
        return rc;
    }
    const char *lnl = n > 0 ? memrchr(d, '\n', n) : NULL;
    if (lnl != NULL) {
        size_t k = (size_t)(lnl - d) + 1;
        if (add_lines(r, d, k, st->base, err) != 0)
            return -1;
        st->base += k;
        at += k;
    }
    *used = at;
    return 0;
}

static int too_long(const rd *r, uint64_t off, sb_err *err)
{
    return sb_err_data(err,
                       "%.300s: byte offset %" PRIu64
                       ": a record longer than %zu bytes (the limit is 4x "
                       "partitionSize; set the source's args.maxRecordSize to raise it)",
                       r->sp->path, off, r->max_record);
}

/* The pull reader's reads (its buffer grows for a longer line, up to the record limit). */
#define READ_BUF ((size_t)1 << 20)

/* The pull reader: large reads into a buffer of our own. */
static int read_lines_pull(rd *r, sb_err *err)
{
    const sb_io_split *sp = r->sp;
    lines_st st;
    lines_init(r, &st);
    /* 1 MiB reads (not SB_IO_BUF_SIZE's 4): the bytes read are still in cache when the lines
     * are copied out of them into the partition (the ETL benchmark: CPU -4%, 2026-11-28) */
    size_t cap = READ_BUF;
    uint64_t span = sp->file_size - st.base;
    if (span < cap)
        cap = (size_t)span; /* small splits: no 1 MiB buffer (span >= 1: start < file_size) */
    if (cap > r->max_record)
        cap = r->max_record; /* else a limit below 1 MiB would not hold */
    char *buf = malloc(cap);
    if (buf == NULL)
        return sb_err_set(err, "reading %.300s: out of memory for the read buffer", sp->path);
    int rc = 0;
    size_t len = 0; /* buf[0] is at file offset st.base */
    for (;;) {
        if (len == cap && st.base + len < sp->file_size) {
            if (cap >= r->max_record) {
                rc = too_long(r, st.base, err);
                break;
            }
            size_t ncap = cap * 2 > r->max_record ? r->max_record : cap * 2;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) {
                rc = sb_err_set(err, "reading %.300s: out of memory for a %zu-byte line buffer",
                                sp->path, ncap);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        /* Never read past the planned size: the file must not change under a plan. */
        uint64_t avail = sp->file_size - (st.base + len);
        size_t want = cap - len < avail ? cap - len : (size_t)avail;
        if (want > 0) {
            if (src_read(r->in, buf + len, want, err) < 0) {
                rc = -1;
                break;
            }
            len += want;
        }
        size_t used;
        if ((rc = lines_step(r, &st, buf, len, st.base + len == sp->file_size, &used, err)) != 0 ||
            st.done)
            break;
        memmove(buf, buf + used, len - used);
        len -= used;
    }
    free(buf);
    return rc;
}

/* The push reader: the storage backend hands its own buffers to on_push; whole lines are taken
 * from there, and only a line cut by a buffer's end is gathered in `carry`. */
typedef struct {
    rd *r;
    lines_st st;
    char *carry;
    size_t clen, ccap;
    int rc;
    sb_err *err;
} push_ctx;

/* Adds p[0..n) to the carry; -1 + err when the line it holds grows past the record limit (the
 * pull reader's rule: a line whose first max_record bytes hold no '\n', with more bytes after). */
static int carry_add(push_ctx *c, const char *p, size_t n, bool complete, bool eof)
{
    rd *r = c->r;
    size_t need = c->clen + n;
    if (need > r->max_record || (need == r->max_record && !complete && !eof))
        return too_long(r, c->st.base, c->err);
    if (need > c->ccap) {
        size_t ncap = c->ccap ? c->ccap : 64u << 10;
        while (ncap < need)
            ncap *= 2;
        char *nb = realloc(c->carry, ncap);
        if (nb == NULL)
            return sb_err_set(c->err, "reading %.300s: out of memory for a %zu-byte line buffer",
                              r->sp->path, ncap);
        c->carry = nb;
        c->ccap = ncap;
    }
    memcpy(c->carry + c->clen, p, n);
    c->clen = need;
    return 0;
}

static int on_push(void *ud, const char *p, size_t n)
{
    push_ctx *c = ud;
    rd *r = c->r;
    r->in->pos += n;
    bool eof_after = r->in->pos == r->sp->file_size; /* p ends at the end of the file */
    size_t used;
    /* A line begun in an earlier buffer: complete it there first (and whatever else the carry
     * cannot give up yet, e.g. a byte order mark still too short to tell). */
    while (c->clen > 0 && n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t k = nl != NULL ? (size_t)(nl - p) + 1 : n;
        if (carry_add(c, p, k, nl != NULL, eof_after && k == n) != 0)
            goto fail;
        p += k;
        n -= k;
        if (nl == NULL && !(eof_after && n == 0))
            return 0; /* still no end of line */
        if (lines_step(r, &c->st, c->carry, c->clen, eof_after && n == 0, &used, c->err) != 0)
            goto fail;
        if (c->st.done)
            return 1;
        memmove(c->carry, c->carry + used, c->clen - used);
        c->clen -= used;
    }
    if (n == 0)
        return 0;
    if (lines_step(r, &c->st, p, n, eof_after, &used, c->err) != 0)
        goto fail;
    if (c->st.done)
        return 1;
    if (used < n && carry_add(c, p + used, n - used, false, eof_after) != 0)
        goto fail;
    return 0;
fail:
    c->rc = -1;
    return 1;
}

static int read_lines_push(rd *r, sb_err *err)
{
    push_ctx c = {.r = r, .err = err};
    lines_init(r, &c.st);
    int rc = 0;
    while (!c.st.done) {
        if (r->in->pos == r->in->lim) {
            if (r->in->pos == r->sp->file_size) {
                /* every byte pushed and the data did not end: cannot happen (eof ends it) */
                rc = sb_err_set(err, "reading %.300s: the read ended before its data", r->sp->path);
                break;
            }
            if (src_more(r->in, err) != 0) {
                rc = -1;
                break;
            }
        }
        int k = sb_io_read_push(r->in->h, on_push, &c, err);
        if (c.rc != 0 || k < 0) {
            rc = -1;
            break;
        }
        if (k == 1 && !c.st.done) {
            rc = sb_err_set(err, "reading %.300s: the read stopped early", r->sp->path);
            break;
        }
        if (k == 0 && r->in->pos != r->in->lim) {
            rc = sb_err_set(err,
                            "reading %.300s: object ends at byte offset %" PRIu64
                            ", planned size %" PRIu64 " (it changed since planning)",
                            r->sp->path, r->in->pos, r->sp->file_size);
            break;
        }
    }
    free(c.carry);
    return rc;
}

/* The compressed reader's input reads: large enough that a remote file is fetched in few
 * requests, small enough to stay in cache while it is decoded. */
#define DECOMP_IN_BUF ((size_t)256 << 10)

/* Grows the line buffer *buf (cap bytes, full) up to the record limit: 0, or -1 + err (a line
 * past the limit, out of memory). */
static int grow_line_buf(rd *r, char **buf, size_t *cap, uint64_t at, sb_err *err)
{
    if (*cap >= r->max_record)
        return too_long(r, at, err);
    size_t ncap = *cap * 2 > r->max_record ? r->max_record : *cap * 2;
    char *nb = realloc(*buf, ncap);
    if (nb == NULL)
        return sb_err_set(err, "reading %.300s: out of memory for a %zu-byte line buffer",
                          r->sp->path, ncap);
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* A compressed file (decomp.h), always one whole-file split: its bytes decoded as one stream
 * into the line reader. The line reader sees a split [0, inf) of the decoded text, named
 * "<path> (decompressed gzip)" so that the byte offsets in its errors are not taken for the
 * file's; the decoder's own errors name the compressed offset. */
static int read_lines_decomp(rd *r, sb_io_codec codec, sb_err *err)
{
    const sb_io_split *file = r->sp;
    snprintf(r->shown, sizeof r->shown, "%s (decompressed %s)", file->path,
             sb_io_codec_name(codec));
    r->dsp =
        (sb_io_split){.path = r->shown, .start = 0, .end = UINT64_MAX, .file_size = UINT64_MAX};
    sb_io_dec *d = sb_io_dec_new(codec, file->path, err);
    if (d == NULL)
        return -1;
    size_t cap = READ_BUF < r->max_record ? READ_BUF : r->max_record;
    char *ib = malloc(DECOMP_IN_BUF), *buf = malloc(cap);
    if (ib == NULL || buf == NULL) {
        free(ib);
        free(buf);
        sb_io_dec_free(d);
        return sb_err_set(err, "reading %.300s: out of memory for the read buffers", file->path);
    }
    r->sp = &r->dsp;
    lines_st st;
    lines_init(r, &st);
    uint64_t left = file->file_size; /* compressed bytes not read yet */
    size_t ipos = 0, ilen = 0, len = 0;
    bool ended = false;
    int rc = 0;
    while (rc == 0) {
        if (ipos == ilen && left > 0) {
            size_t want = left < DECOMP_IN_BUF ? (size_t)left : DECOMP_IN_BUF;
            if (src_read(r->in, ib, want, err) < 0) {
                rc = -1;
                break;
            }
            ipos = 0;
            ilen = want;
            left -= want;
        }
        if (len == cap && !ended && (rc = grow_line_buf(r, &buf, &cap, st.base, err)) != 0)
            break;
        if (!ended) {
            size_t took, made;
            if (sb_io_dec_step(d, ib + ipos, ilen - ipos, &took, buf + len, cap - len, &made,
                               err) != 0) {
                rc = -1;
                break;
            }
            ipos += took;
            len += made;
            if (took == 0 && made == 0) {
                if (ipos < ilen) {
                    rc = sb_err_data(err,
                                     "%.300s: the %s decoder stopped at compressed byte offset "
                                     "%" PRIu64,
                                     file->path, sb_io_codec_name(codec), sb_io_dec_in_total(d));
                    break;
                }
                if (left == 0) {
                    ended = true;
                    if ((rc = sb_io_dec_finish(d, err)) != 0)
                        break;
                }
            }
        }
        size_t used;
        if ((rc = lines_step(r, &st, buf, len, ended, &used, err)) != 0 || st.done)
            break;
        memmove(buf, buf + used, len - used);
        len -= used;
    }
    r->sp = file;
    free(ib);
    free(buf);
    sb_io_dec_free(d);
    return rc;
}

static int read_lines(rd *r, sb_err *err)
{
    if (sb_io_read_can_push(r->in->h))
        return read_lines_push(r, err);
    return read_lines_pull(r, err);
}

static int read_binary(rd *r, uint64_t rs, sb_err *err)
{
    const sb_io_split *sp = r->sp;
    if (sp->start % rs != 0 || sp->end % rs != 0 || sp->file_size % rs != 0)
        return sb_err_set(err,
                          "%.300s: split [%" PRIu64 ", %" PRIu64 ") of a %" PRIu64
                          "-byte file is not aligned to recordSize %" PRIu64,
                          sp->path, sp->start, sp->end, sp->file_size, rs);
    uint64_t per = SB_IO_BUF_SIZE / rs;
    if (per == 0)
        per = 1;
    uint64_t total = sp->end - sp->start;
    size_t cap = (size_t)(per * rs < total ? per * rs : total);
    char *buf = malloc(cap);
    if (buf == NULL)
        return sb_err_set(err, "reading %.300s: out of memory for the read buffer", sp->path);
    int rc = 0;
    for (uint64_t off = sp->start; off < sp->end && rc == 0;) {
        size_t want = (size_t)(sp->end - off < cap ? sp->end - off : cap);
        if (src_read(r->in, buf, want, err) < 0) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < want; i += (size_t)rs) {
            if (sb_batch_builder_append_binary(r->b, 0, buf + i, (size_t)rs, err) != 0) {
                rc = sb_err_wrap(err, "%.300s: record at byte offset %" PRIu64, sp->path, off + i);
                break;
            }
            if (full(r) && (rc = flush(r, err)) != 0)
                break;
        }
        off += want;
    }
    free(buf);
    return rc;
}

/* A split after the first of a csv file with a header: reads the file's first record (a
 * separate ranged read from byte 0) for the column names. */
static int csv_file_header(rd *r, sb_err *err)
{
    src h = {.uri = r->sp->path, .size = r->sp->file_size, .ext = (uint64_t)64 << 10};
    sb_csv_buf b = {0};
    int rc = src_open(&h, 0, 0, err);
    ssize_t len = 0;
    while (rc == 0) {
        size_t want = b.len < 4096 ? 4096 : b.len;
        if (want > h.size - h.pos)
            want = (size_t)(h.size - h.pos);
        if (b.len + want > r->max_record) {
            rc = sb_err_data(err, "%.300s: the csv header row is longer than %zu bytes",
                             r->sp->path, r->max_record);
            break;
        }
        char *p = realloc(b.p, b.len + want + 1);
        if (p == NULL) {
            rc = sb_err_set(err, "%.300s: out of memory", r->sp->path);
            break;
        }
        b.p = p;
        if (want > 0 && src_read(&h, b.p + b.len, want, err) < 0) {
            rc = -1;
            break;
        }
        b.len += want;
        len = sb_csv_record_len(b.p, b.len, r->csv, h.pos == h.size, err);
        if (len < 0)
            rc = sb_err_wrap(err, "%.300s: the csv header row", r->sp->path);
        if (len != 0)
            break;
    }
    if (rc == 0 && sb_csv_header_parse(b.p, (size_t)len, r->csv, &r->hdr, err) != 0)
        rc = sb_err_wrap(err, "%.300s: the csv header row", r->sp->path);
    sb_io_read_close(h.h);
    sb_csv_buf_free(&b);
    return rc;
}

/* Reads one piece (a file's byte range) into r's builder: checks, opens, reads, closes. */
static int read_piece(rd *r, const sb_io_split *split, uint64_t rs, sb_err *err)
{
    if (split == NULL || split->path == NULL)
        return sb_err_set(err, "read split: NULL split");
    if (split->start >= split->end || split->end > split->file_size)
        return sb_err_set(err,
                          "read split: %.300s: range [%" PRIu64 ", %" PRIu64
                          ") is empty or past the file size %" PRIu64,
                          split->path, split->start, split->end, split->file_size);
    uint64_t now = 0;
    int exists = 0;
    if (sb_io_stat(split->path, &now, &exists, err) != 0)
        return sb_err_wrap(err, "read split");
    if (!exists)
        return sb_err_set(
            err, "read split: cannot open %.300s: No such file (it was removed since planning)",
            split->path);
    if (now != split->file_size)
        return sb_err_set(err,
                          "read split: %.300s has %" PRIu64 " bytes, planned as %" PRIu64
                          " (it changed since planning)",
                          split->path, now, split->file_size);
    /* Text and jsonl start one byte early (line ownership); binary exactly at its range. */
    uint64_t from = r->fmt != SB_FMT_BINARY && split->start > 0 ? split->start - 1 : split->start;
    src in = {.uri = split->path, .size = split->file_size, .ext = (uint64_t)64 << 10};
    if (src_open(&in, from, split->end, err) != 0)
        return sb_err_wrap(err, "read split");
    r->sp = split;
    r->in = &in;
    int rc = 0;
    if (r->csv != NULL) {
        r->need_header = r->csv->header && split->start == 0;
        if (r->csv->header && split->start > 0 && csv_file_header(r, err) != 0)
            rc = -1;
    }
    sb_io_codec codec =
        r->fmt == SB_FMT_BINARY ? SB_IO_CODEC_NONE : sb_io_codec_for(r->compression, split->path);
    if (rc == 0 && codec != SB_IO_CODEC_NONE &&
        (split->start != 0 || split->end != split->file_size))
        rc = sb_err_set(err,
                        "read split: %.300s is %s-compressed and cannot be read from byte offset "
                        "%" PRIu64 " (a compressed file is one split)",
                        split->path, sb_io_codec_name(codec), split->start);
    if (rc == 0)
        rc = r->fmt == SB_FMT_BINARY     ? read_binary(r, rs, err)
             : codec != SB_IO_CODEC_NONE ? read_lines_decomp(r, codec, err)
                                         : read_lines(r, err);
    if (rc == 0 && r->pend.len > 0)
        rc = sb_err_data(err,
                         "%.300s: the csv record at byte offset %" PRIu64
                         ": a quoted field is not closed before the end of the file",
                         split->path, r->pend_off);
    r->pend.len = 0;
    sb_csv_header_free(&r->hdr); /* a file's columns are its own */
    sb_io_read_close(in.h);
    r->in = NULL;
    return rc;
}

/* What only a parquet source uses: the filter to push down and the counts (either NULL). */
typedef struct {
    const sb_pq_pred *pred;
    sb_pq_scan_stats *scan;
} pq_pushdown;

static int read_splits(const sb_io_split *pieces, size_t n, sb_format fmt, const char *args_json,
                       size_t target_bytes, size_t chunk_bytes, bool unsealed,
                       const pq_pushdown *pd, sb_io_emit_fn emit, void *ud, sb_err *err);

int sb_io_read_splits(const sb_io_split *pieces, size_t n, sb_format fmt, const char *args_json,
                      size_t target_bytes, sb_io_emit_fn emit, void *ud, sb_err *err)
{
    return read_splits(pieces, n, fmt, args_json, target_bytes, target_bytes, false, NULL, emit, ud,
                       err);
}

int sb_io_read_splits_chunked(const sb_io_split *pieces, size_t n, sb_format fmt,
                              const char *args_json, size_t target_bytes, size_t chunk_bytes,
                              sb_io_emit_fn emit, void *ud, sb_err *err)
{
    return read_splits(pieces, n, fmt, args_json, target_bytes, chunk_bytes, true, NULL, emit, ud,
                       err);
}

int sb_io_read_splits_pushdown(const sb_io_split *pieces, size_t n, sb_format fmt,
                               const char *args_json, size_t target_bytes, size_t chunk_bytes,
                               const sb_pq_pred *pred, sb_pq_scan_stats *scan, sb_io_emit_fn emit,
                               void *ud, sb_err *err)
{
    pq_pushdown pd = {.pred = pred, .scan = scan};
    return read_splits(pieces, n, fmt, args_json, target_bytes, chunk_bytes, true, &pd, emit, ud,
                       err);
}

static int read_splits(const sb_io_split *pieces, size_t n, sb_format fmt, const char *args_json,
                       size_t target_bytes, size_t chunk_bytes, bool unsealed,
                       const pq_pushdown *pd, sb_io_emit_fn emit, void *ud, sb_err *err)
{
    if (pieces == NULL || n == 0 || emit == NULL)
        return sb_err_set(err, "read split: no pieces or no callback");
    if (target_bytes == 0)
        return sb_err_set(err, "read split: %.300s: target partition size is 0",
                          pieces[0].path ? pieces[0].path : "(null)");
    if (sb_io_check_format(fmt, "read split", 0, err) != 0)
        return -1;
    if (fmt == SB_FMT_IMAGE) {
        for (size_t i = 0; i < n; i++)
            if (sb_io_read_image(&pieces[i], args_json, target_bytes, emit, ud, err) != 0)
                return -1;
        return 0;
    }
    if (fmt == SB_FMT_PARQUET) { /* typed columns, by row group (pqread.h) */
        if (chunk_bytes > 0 && chunk_bytes < target_bytes)
            target_bytes = chunk_bytes;
        for (size_t i = 0; i < n; i++)
            if (sb_io_read_parquet(&pieces[i], args_json, target_bytes, unsealed,
                                   pd ? pd->pred : NULL, pd ? pd->scan : NULL, emit, ud, err) != 0)
                return -1;
        return 0;
    }
    uint64_t rs = 0;
    if (fmt == SB_FMT_BINARY && sb_io_record_size(args_json, 1, "read split", &rs, err) != 0)
        return -1;
    size_t max_record = 0;
    if (sb_io_max_record(args_json, target_bytes, "read split", &max_record, err) != 0)
        return -1;
    sb_field f = {.name = SB_IO_RECORD_COLUMN,
                  .type = fmt == SB_FMT_BINARY ? SB_TYPE_BINARY : SB_TYPE_UTF8};
    if (chunk_bytes > 0 && chunk_bytes < target_bytes)
        target_bytes = chunk_bytes; /* the record limit above stays that of the real target */
    rd r = {.max_record = max_record,
            .fmt = fmt,
            .target = target_bytes,
            .unsealed = unsealed,
            .emit = emit,
            .ud = ud};
    if (fmt != SB_FMT_BINARY && sb_io_compression_arg(args_json, &r.compression, err) != 0)
        return sb_err_wrap(err, "read split: %.300s", pieces[0].path);
    sb_csv_opts copts;
    memset(&copts, 0, sizeof copts);
    if (fmt == SB_FMT_CSV) {
        if (sb_csv_opts_parse(args_json, &copts, err) != 0)
            return sb_err_wrap(err, "read split: %.300s", pieces[0].path);
        r.csv = &copts;
    }
    r.b = sb_batch_builder_new(&f, 1, err);
    if (r.b == NULL) {
        sb_csv_opts_free(&copts);
        return -1;
    }
    /* Partitions for this process are built in place (their values where the blob has them),
     * with header room for lines of 64 bytes on average: longer lines copy nothing when a
     * partition is finished; shorter ones fall back to the copy. */
    if (unsealed && sb_batch_builder_build_in_place(r.b, target_bytes / 64 + 16, err) != 0) {
        sb_batch_builder_free(r.b);
        sb_csv_opts_free(&copts);
        return -1;
    }
    uint64_t span = 0;
    for (size_t i = 0; i < n; i++)
        span += pieces[i].end > pieces[i].start ? pieces[i].end - pieces[i].start : 0;
    size_t pre = (size_t)(span < target_bytes ? span : target_bytes) + 4096;
    int rc = sb_batch_builder_reserve(r.b, 0, fmt == SB_FMT_BINARY ? (size_t)(pre / rs) + 1 : 0,
                                      pre, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = read_piece(&r, &pieces[i], rs, err);
    if (rc == 0)
        rc = flush(&r, err);
    sb_batch_builder_free(r.b);
    sb_csv_opts_free(&copts);
    sb_csv_header_free(&r.hdr);
    sb_csv_buf_free(&r.json);
    sb_csv_buf_free(&r.pend);
    return rc;
}

int sb_io_read_split(const sb_io_split *split, sb_format fmt, const char *args_json,
                     size_t target_bytes, sb_io_emit_fn emit, void *ud, sb_err *err)
{
    if (split == NULL || split->path == NULL || emit == NULL)
        return sb_err_set(err, "read split: NULL split or callback");
    return sb_io_read_splits(split, 1, fmt, args_json, target_bytes, emit, ud, err);
}
