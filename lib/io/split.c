/* split.c — planning, encoding and decoding of source splits, and their labels in messages
 * (see split.h). */
#include "io/split.h"

#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/redact.h"
#include "io/common.h"
#include "io/csv.h"
#include "io/decomp.h"
#include "io/schemes.h"

/* a * b / c without overflow for a <= c (b, c < 2^63). */
static uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c)
{
    return (uint64_t)((unsigned __int128)a * b / c);
}

/* The source's objects: the listing of `uri` (sorted by URI), or each entry of `uris` listed in
 * the order given (a URL is one object). */
static int list_source(const sb_source_spec *src, sb_io_obj **out, size_t *n, sb_err *err)
{
    if (src->uri != NULL)
        return sb_io_list(src->uri, 0, out, n, err);
    sb_io_obj *all = NULL;
    size_t nall = 0;
    for (size_t i = 0; i < src->nuris; i++) {
        sb_io_obj *o = NULL;
        size_t k = 0;
        if (sb_io_list(src->uris[i], 0, &o, &k, err) != 0) {
            sb_io_objs_free(all, nall);
            return sb_err_wrap(err, "uris[%zu]", i);
        }
        sb_io_obj *grown = k > 0 ? realloc(all, (nall + k) * sizeof *all) : all;
        if (k > 0 && grown == NULL) {
            sb_io_objs_free(o, k);
            sb_io_objs_free(all, nall);
            return sb_err_set(err, "source: out of memory listing uris");
        }
        all = grown;
        memcpy(all + nall, o, k * sizeof *o);
        nall += k;
        free(o); /* the entries' strings moved to all */
    }
    *out = all;
    *n = nall;
    return 0;
}

/* How a source's files are cut: a record's bytes (binary's recordSize, else 1), files never
 * cut (images, multiline csv) and the compression argument (decomp.h). */
typedef struct split_rules {
    uint64_t rs, ps;
    int whole_files, carg;
} split_rules;

/* Checks the source's URIs, format and partitionSize and reads its cutting rules. 0, or -1
 * naming what is wrong. */
static int split_rules_read(const sb_source_spec *src, const char *suri, split_rules *r,
                            sb_err *err)
{
    for (size_t i = 0; i < (src->uri != NULL ? 1 : src->nuris); i++) {
        const char *u = src->uri != NULL ? src->uri : src->uris[i];
        if (u == NULL || strstr(u, "://") == NULL)
            return sb_err_set(err,
                              "source uri \"%.200s\": no scheme (expected file:///path, s3:// "
                              "or http(s)://)",
                              u ? u : "");
    }
    if (sb_io_check_format(src->format, "source", 0, err) != 0)
        return -1;
    if (src->partition_size <= 0)
        return sb_err_set(err,
                          "source uri \"%.200s\": partitionSize must be positive, got %" PRId64,
                          suri, src->partition_size);
    r->rs = 1;
    r->ps = (uint64_t)src->partition_size;
    if (src->format == SB_FMT_BINARY &&
        sb_io_record_size(src->args_json, 1, "source", &r->rs, err) != 0)
        return -1;
    /* csv with multiline records: a file is never cut (a quoted newline may sit anywhere). */
    r->whole_files = src->format == SB_FMT_IMAGE; /* an image is decoded whole */
    if (src->format == SB_FMT_CSV) {
        sb_csv_opts co;
        if (sb_csv_opts_parse(src->args_json, &co, err) != 0)
            return sb_err_wrap(err, "source");
        r->whole_files = co.multiline;
        sb_csv_opts_free(&co);
    }
    /* A compressed file (decomp.h) is read from its first byte: one split, never cut. */
    r->carg = SB_IO_CODEC_NONE;
    if (src->format != SB_FMT_BINARY && src->format != SB_FMT_IMAGE &&
        sb_io_compression_arg(src->args_json, &r->carg, err) != 0)
        return -1;
    return 0;
}

/* The splits of one listed object: its records over partitionSize, at most one per record,
 * and one for an object the server cannot read from an offset, a multiline csv or a
 * compressed file. */
static uint64_t object_splits(const sb_io_obj *o, const split_rules *r)
{
    uint64_t k = o->size == 0 ? 0 : (o->size + r->ps - 1) / r->ps;
    if (k > o->size / r->rs)
        k = o->size / r->rs;
    if (k > 1 && (o->whole || r->whole_files || sb_io_codec_for(r->carg, o->uri) != 0))
        k = 1;
    return k;
}

/* Counts the listing's splits before any is made, so the array is allocated once and the
 * limit is checked first. 0, or -1 (a binary file that is not whole records, or too many). */
static int splits_count(const sb_io_obj *v, size_t nv, const split_rules *r, const char *suri,
                        size_t *total, sb_err *err)
{
    *total = 0;
    for (size_t i = 0; i < nv; i++) {
        if (v[i].size % r->rs != 0)
            return sb_err_set(err,
                              "source: %.300s has %" PRIu64 " bytes, not a multiple of "
                              "recordSize %" PRIu64 " (%" PRIu64 " bytes left over)",
                              v[i].uri, v[i].size, r->rs, v[i].size % r->rs);
        uint64_t k = object_splits(&v[i], r);
        if (k > SB_IO_MAX_SPLITS - *total)
            return sb_err_set(err,
                              "source uri \"%.200s\": more than %zu splits (partitionSize %" PRIu64
                              " is too small for the input)",
                              suri, SB_IO_MAX_SPLITS, r->ps);
        *total += (size_t)k;
    }
    return 0;
}

int sb_io_plan_splits(const sb_source_spec *src, sb_io_split **out, size_t *n, sb_err *err)
{
    *out = NULL;
    *n = 0;
    if (src == NULL)
        return sb_err_set(err, "source: no source spec");
    const char *suri = src->uri != NULL ? src->uri : src->nuris > 0 ? src->uris[0] : NULL;
    if (suri == NULL || suri[0] == '\0')
        return sb_err_set(err, "source: no uri given");
    split_rules r;
    if (split_rules_read(src, suri, &r, err) != 0)
        return -1;

    /* The listing is sorted by URI, so a split's index is stable for an unchanged source. */
    sb_io_obj *f = NULL;
    size_t nf = 0, total = 0;
    if (list_source(src, &f, &nf, err) != 0)
        return -1; /* the backend names the URI; the caller says it is the source */
    int rc = splits_count(f, nf, &r, suri, &total, err);
    sb_io_split *v = NULL;
    if (rc == 0 && total > 0) {
        v = calloc(total, sizeof *v);
        if (v == NULL)
            rc = sb_err_set(err, "source: out of memory for %zu splits", total);
    }
    size_t j = 0;
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        uint64_t recs = f[i].size / r.rs, k = object_splits(&f[i], &r);
        for (uint64_t p = 0; p < k; p++) {
            v[j].path = strdup(f[i].uri);
            if (v[j].path == NULL) {
                rc = sb_err_set(err, "source: out of memory for split paths");
                break;
            }
            v[j].start = muldiv(recs, p, k) * r.rs;
            v[j].end = muldiv(recs, p + 1, k) * r.rs;
            v[j].file_size = f[i].size;
            j++;
        }
    }
    sb_io_objs_free(f, nf);
    if (rc != 0) {
        sb_io_splits_free(v, j);
        return -1;
    }
    *out = v;
    *n = total;
    return 0;
}

void sb_io_split_clear(sb_io_split *s)
{
    if (s == NULL)
        return;
    free(s->path);
    memset(s, 0, sizeof *s);
}

void sb_io_splits_free(sb_io_split *s, size_t n)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(s[i].path);
    free(s);
}

/* A split names an absolute local path or an object of a remote backend. */
static int located(const char *p, size_t n)
{
    if (n > 0 && p[0] == '/')
        return 1;
    static const char *const schemes[] = {"s3://", "http://", "https://"};
    for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++) {
        size_t k = strlen(schemes[i]);
        if (n > k && strncmp(p, schemes[i], k) == 0)
            return 1;
    }
    return 0;
}

static int split_check(const sb_io_split *s, sb_err *err)
{
    if (s->path == NULL || !located(s->path, strlen(s->path)))
        return sb_err_set(err,
                          "split: path must be absolute or an s3:// or http(s):// URI, got "
                          "\"%.200s\"",
                          s->path ? s->path : "(null)");
    if (strlen(s->path) >= PATH_MAX)
        return sb_err_set(err, "split: path is longer than %d bytes", PATH_MAX - 1);
    if (s->start >= s->end || s->end > s->file_size)
        return sb_err_set(err,
                          "split of %.200s: range [%" PRIu64 ", %" PRIu64 ") is empty or past "
                          "the file size %" PRIu64,
                          s->path, s->start, s->end, s->file_size);
    return 0;
}

char *sb_io_split_encode(const sb_io_split *s, sb_err *err)
{
    if (s == NULL) {
        sb_err_set(err, "split: NULL");
        return NULL;
    }
    if (split_check(s, err) != 0)
        return NULL;
    size_t cap = strlen(s->path) + 3 * 21 + 4;
    char *buf = malloc(cap);
    if (buf == NULL) {
        sb_err_set(err, "split: out of memory");
        return NULL;
    }
    snprintf(buf, cap, "%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%s", s->start, s->end, s->file_size,
             s->path);
    return buf;
}

/* Parses a canonical decimal at s[*pos..len) followed by a tab; `q` is the (sanitized,
 * terminated) beginning of the string, quoted in messages. */
static int parse_u64(const char *s, size_t len, const char *q, size_t *pos, const char *what,
                     uint64_t *v, sb_err *err)
{
    size_t i = *pos;
    if (i >= len || s[i] < '0' || s[i] > '9')
        return sb_err_set(err, "split \"%s\": byte %zu: expected the %s (a decimal number)", q, i,
                          what);
    if (s[i] == '0' && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9')
        return sb_err_set(err, "split \"%s\": byte %zu: %s has a leading zero", q, i, what);
    uint64_t x = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9') {
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return sb_err_set(err, "split \"%s\": byte %zu: %s is too large", q, *pos, what);
        x = x * 10 + d;
        i++;
    }
    if (i >= len || s[i] != '\t')
        return sb_err_set(err, "split \"%s\": byte %zu: expected a tab after the %s", q, i, what);
    *v = x;
    *pos = i + 1;
    return 0;
}

int sb_io_split_decode(const char *s, size_t len, sb_io_split *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    if (s == NULL)
        return sb_err_set(err, "split: NULL string");
    if (len > SB_IO_SPLIT_ENCODED_MAX)
        return sb_err_set(err, "split: %zu bytes, longer than the limit %d", len,
                          SB_IO_SPLIT_ENCODED_MAX);
    const char *nul = memchr(s, '\0', len);
    if (nul != NULL)
        return sb_err_set(err, "split: NUL byte at offset %zu", (size_t)(nul - s));
    /* s need not be NUL-terminated: messages quote a terminated, sanitized copy of its
     * beginning. */
    char head[81];
    size_t hl = len < sizeof head - 1 ? len : sizeof head - 1;
    memcpy(head, s, hl);
    head[hl] = '\0';
    for (size_t i = 0; i < hl; i++)
        if ((unsigned char)head[i] < 0x20 || (unsigned char)head[i] >= 0x7f)
            head[i] = '?';
    size_t pos = 0;
    uint64_t start, end, size;
    if (parse_u64(s, len, head, &pos, "start offset", &start, err) != 0 ||
        parse_u64(s, len, head, &pos, "end offset", &end, err) != 0 ||
        parse_u64(s, len, head, &pos, "file size", &size, err) != 0)
        return -1;
    size_t plen = len - pos;
    if (plen == 0)
        return sb_err_set(err, "split \"%s\": byte %zu: missing path", head, pos);
    if (!located(s + pos, plen))
        return sb_err_set(err,
                          "split \"%s\": byte %zu: path is not absolute (nor an s3:// or "
                          "http(s):// URI)",
                          head, pos);
    if (plen >= PATH_MAX)
        return sb_err_set(err, "split: path is %zu bytes, longer than %d", plen, PATH_MAX - 1);
    if (start >= end)
        return sb_err_set(err, "split \"%s\": empty range (start %" PRIu64 " >= end %" PRIu64 ")",
                          head, start, end);
    if (end > size)
        return sb_err_set(err, "split \"%s\": end %" PRIu64 " is past the file size %" PRIu64, head,
                          end, size);
    char *p = malloc(plen + 1);
    if (p == NULL)
        return sb_err_set(err, "split: out of memory");
    memcpy(p, s + pos, plen);
    p[plen] = '\0';
    out->path = p;
    out->start = start;
    out->end = end;
    out->file_size = size;
    return 0;
}

/* ---- coalescing small files ---------------------------------------------------------------- */

int sb_io_plan_group(const sb_source_spec *src, const sb_io_split *pieces, size_t n, size_t **first,
                     size_t *ngroups, sb_err *err)
{
    *first = malloc((n + 1) * sizeof **first);
    *ngroups = 0;
    if (*first == NULL)
        return sb_err_set(err, "source: out of memory grouping %zu splits", n);
    uint64_t ps = src->partition_size > 0 ? (uint64_t)src->partition_size : 1;
    size_t most =
        src->format == SB_FMT_IMAGE ? SB_IO_MAX_IMAGES_PER_SPLIT : SB_IO_MAX_FILES_PER_SPLIT;
    uint64_t sum = 0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        const sb_io_split *p = &pieces[i];
        int whole_small = p->start == 0 && p->end == p->file_size && p->file_size < ps;
        int joins = whole_small && count > 0 && sum + p->file_size <= ps && count < most;
        if (!joins) {
            (*first)[(*ngroups)++] = i;
            sum = 0;
            count = 0;
        }
        if (whole_small) {
            sum += p->file_size;
            count++;
        } else {
            count = SB_IO_MAX_FILES_PER_SPLIT; /* a cut or large file stays alone */
        }
    }
    return 0;
}

char *sb_io_splits_encode(const sb_io_split *pieces, size_t n, sb_err *err)
{
    if (n == 1)
        return sb_io_split_encode(&pieces[0], err);
    if (n == 0 || n > SB_IO_MAX_FILES_PER_SPLIT) {
        sb_err_set(err, "split: %zu pieces (1 to %d)", n, SB_IO_MAX_FILES_PER_SPLIT);
        return NULL;
    }
    char **enc = calloc(n, sizeof *enc);
    size_t total = 32;
    char *out = NULL;
    if (enc == NULL) {
        sb_err_set(err, "split: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if ((enc[i] = sb_io_split_encode(&pieces[i], err)) == NULL)
            goto done;
        total += strlen(enc[i]) + 24;
    }
    out = malloc(total);
    if (out == NULL) {
        sb_err_set(err, "split: out of memory");
        goto done;
    }
    size_t o = (size_t)snprintf(out, total, "m\t%zu\t", n);
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, total - o, "%zu\t%s", strlen(enc[i]), enc[i]);
done:
    for (size_t i = 0; i < n; i++)
        free(enc[i]);
    free(enc);
    return out;
}

/* A decimal count at s[*pos..len) followed by a tab, at most max. */
static int parse_count(const char *s, size_t len, size_t *pos, size_t max, const char *what,
                       size_t *v, sb_err *err)
{
    size_t i = *pos, x = 0;
    if (i >= len || s[i] < '0' || s[i] > '9' || (s[i] == '0' && i + 1 < len && s[i + 1] != '\t'))
        return sb_err_set(err, "split: byte %zu: expected the %s (a decimal number)", i, what);
    while (i < len && s[i] >= '0' && s[i] <= '9') {
        x = x * 10 + (size_t)(s[i] - '0');
        if (x > max)
            return sb_err_set(err, "split: byte %zu: the %s is over %zu", *pos, what, max);
        i++;
    }
    if (i >= len || s[i] != '\t')
        return sb_err_set(err, "split: byte %zu: expected a tab after the %s", i, what);
    *v = x;
    *pos = i + 1;
    return 0;
}

int sb_io_splits_decode(const char *s, size_t len, sb_io_split **out, size_t *n, sb_err *err)
{
    *out = NULL;
    *n = 0;
    if (s == NULL)
        return sb_err_set(err, "split: NULL string");
    if (len < 2 || s[0] != 'm' || s[1] != '\t') {
        sb_io_split *one = calloc(1, sizeof *one);
        if (one == NULL)
            return sb_err_set(err, "split: out of memory");
        if (sb_io_split_decode(s, len, one, err) != 0) {
            free(one);
            return -1;
        }
        *out = one;
        *n = 1;
        return 0;
    }
    if (len > SB_IO_SPLITS_ENCODED_MAX)
        return sb_err_set(err, "split: %zu bytes, longer than the limit %zu", len,
                          SB_IO_SPLITS_ENCODED_MAX);
    size_t pos = 2, k = 0;
    if (parse_count(s, len, &pos, SB_IO_MAX_FILES_PER_SPLIT, "piece count", &k, err) != 0)
        return -1;
    if (k < 2)
        return sb_err_set(err, "split: %zu pieces in a multi-piece split (2 to %d)", k,
                          SB_IO_MAX_FILES_PER_SPLIT);
    sb_io_split *v = calloc(k, sizeof *v);
    if (v == NULL)
        return sb_err_set(err, "split: out of memory");
    size_t got = 0;
    for (; got < k; got++) {
        size_t plen = 0;
        if (parse_count(s, len, &pos, SB_IO_SPLIT_ENCODED_MAX, "piece length", &plen, err) != 0)
            break;
        if (plen > len - pos) {
            sb_err_set(err, "split: byte %zu: piece %zu runs past the end", pos, got);
            break;
        }
        if (sb_io_split_decode(s + pos, plen, &v[got], err) != 0) {
            sb_err_wrap(err, "split piece %zu", got);
            break;
        }
        pos += plen;
    }
    if (got == k && pos != len)
        sb_err_set(err, "split: byte %zu: unexpected text after the last piece", pos);
    if (got < k || pos != len) {
        sb_io_splits_free(v, got);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

/* A path for a label: its tail when long (the file name is what tells splits apart). */
/* A path or URI for messages: redacted (core/redact.h), without its query (a presigned URL's
 * would push the host and path out), the start cut when long. */
static void path_label(const char *uri, char *buf, size_t cap)
{
    char p[4096];
    sb_redact_uri(uri, p, sizeof p);
    char *q = strpbrk(p, "?#");
    if (q != NULL && q - p + 4 < (ptrdiff_t)sizeof p)
        memcpy(q, "?...", 5);
    size_t n = strlen(p), max = 120;
    if (n <= max)
        snprintf(buf, cap, "%s", p);
    else
        snprintf(buf, cap, "...%s", p + n - (max - 3));
}

const char *sb_io_split_describe(const char *enc, char *buf, size_t cap)
{
    if (buf == NULL || cap == 0)
        return buf;
    sb_io_split *v = NULL;
    size_t n = 0;
    if (enc == NULL) {
        snprintf(buf, cap, "(no split)");
        return buf;
    }
    if (sb_io_splits_decode(enc, strlen(enc), &v, &n, NULL) != 0 || n == 0) {
        /* not a split of ours: its text redacted, bounded, control characters as spaces */
        char red[256];
        sb_redact_text(enc, red, sizeof red);
        size_t k = 0;
        for (; k < 120 && k + 4 < cap && red[k] != '\0'; k++)
            buf[k] = (unsigned char)red[k] < 0x20 || red[k] == 0x7f ? ' ' : red[k];
        snprintf(buf + k, cap - k, "%s", red[k] != '\0' ? "..." : "");
        return buf;
    }
    char p[128];
    path_label(v[0].path, p, sizeof p);
    if (n > 1)
        snprintf(buf, cap, "%s and %zu more file%s", p, n - 1, n > 2 ? "s" : "");
    else if (v[0].start == 0 && v[0].end == v[0].file_size)
        snprintf(buf, cap, "%s", p);
    else
        snprintf(buf, cap, "%s bytes %" PRIu64 "-%" PRIu64, p, v[0].start, v[0].end);
    sb_io_splits_free(v, n);
    return buf;
}
