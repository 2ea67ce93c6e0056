/* split.c — planning, encoding and decoding of source splits (see split.h). */
#include "io/split.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/common.h"

typedef struct {
    char *path;
    uint64_t size;
} infile;

typedef struct {
    infile *v;
    size_t n, cap;
} infiles;

static void infiles_free(infiles *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->v[i].path);
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

static int infiles_add(infiles *f, const char *path, uint64_t size, sb_err *err)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        infile *v = realloc(f->v, cap * sizeof *v);
        if (v == NULL)
            return sb_err_set(err, "source: out of memory listing input files");
        f->v = v;
        f->cap = cap;
    }
    char *p = strdup(path);
    if (p == NULL)
        return sb_err_set(err, "source: out of memory listing input files");
    f->v[f->n].path = p;
    f->v[f->n].size = size;
    f->n++;
    return 0;
}

static int infile_cmp(const void *a, const void *b)
{
    return strcmp(((const infile *)a)->path, ((const infile *)b)->path);
}

static int skipped_name(const char *base)
{
    return base[0] == '.' || base[0] == '_';
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s != NULL ? s + 1 : path;
}

static int list_dir(const char *uri, const char *dir, infiles *f, sb_err *err)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return sb_err_set(err, "source uri \"%.200s\": cannot open directory %.200s: %s", uri, dir,
                          strerror(errno));
    size_t dlen = strlen(dir);
    while (dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    int rc = 0;
    struct dirent *de;
    char path[PATH_MAX];
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (skipped_name(de->d_name))
            continue;
        if ((size_t)snprintf(path, sizeof path, "%.*s/%s", (int)dlen, dir, de->d_name) >=
            sizeof path) {
            rc = sb_err_set(err, "source uri \"%.200s\": path too long in %.200s", uri, dir);
            break;
        }
        struct stat st;
        if (stat(path, &st) != 0) {
            if (errno == ENOENT) /* a dangling link, or removed meanwhile */
                continue;
            rc = sb_err_set(err, "source uri \"%.200s\": cannot stat %.200s: %s", uri, path,
                            strerror(errno));
            break;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        if ((rc = infiles_add(f, path, (uint64_t)st.st_size, err)) != 0)
            break;
        errno = 0;
    }
    if (rc == 0 && errno != 0)
        rc = sb_err_set(err, "source uri \"%.200s\": reading directory %.200s: %s", uri, dir,
                        strerror(errno));
    closedir(d);
    if (rc == 0 && f->n == 0)
        rc = sb_err_set(err,
                        "source uri \"%.200s\": directory %.200s has no input files (names "
                        "starting with '.' or '_' are skipped)",
                        uri, dir);
    return rc;
}

static int glob_errfn(const char *epath, int eerrno)
{
    (void)epath;
    (void)eerrno;
    return 0; /* unreadable directories are skipped, like a shell does */
}

static int list_glob(const char *uri, const char *pattern, infiles *f, sb_err *err)
{
    glob_t g;
    memset(&g, 0, sizeof g);
    int grc = glob(pattern, GLOB_NOSORT, glob_errfn, &g);
    if (grc == GLOB_NOMATCH) {
        globfree(&g);
        return sb_err_set(err, "source uri \"%.200s\": no files match %.200s", uri, pattern);
    }
    if (grc != 0) {
        globfree(&g);
        return sb_err_set(err, "source uri \"%.200s\": glob failed (%s)", uri,
                          grc == GLOB_NOSPACE ? "out of memory" : "read error");
    }
    char pfirst = base_name(pattern)[0];
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
        const char *p = g.gl_pathv[i];
        const char *b = base_name(p);
        if (skipped_name(b) && b[0] != pfirst)
            continue;
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        rc = infiles_add(f, p, (uint64_t)st.st_size, err);
    }
    globfree(&g);
    if (rc == 0 && f->n == 0)
        rc = sb_err_set(err, "source uri \"%.200s\": no regular files match %.200s", uri, pattern);
    return rc;
}

static int has_glob_chars(const char *s)
{
    return strpbrk(s, "*?[") != NULL;
}

/* a * b / c without overflow for a <= c (b, c < 2^63). */
static uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c)
{
    return (uint64_t)((unsigned __int128)a * b / c);
}

int sb_io_plan_splits(const sb_source_spec *src, sb_io_split **out, size_t *n, sb_err *err)
{
    *out = NULL;
    *n = 0;
    if (src == NULL)
        return sb_err_set(err, "source: no source spec");
    char path[PATH_MAX];
    if (sb_io_uri_path(src->uri, "source", 0, path, sizeof path, err) != 0)
        return -1;
    if (sb_io_check_format(src->format, "source", 0, err) != 0)
        return -1;
    if (src->partition_size <= 0)
        return sb_err_set(err,
                          "source uri \"%.200s\": partitionSize must be positive, got %" PRId64,
                          src->uri, src->partition_size);
    uint64_t rs = 1;
    if (src->format == SB_FMT_BINARY) {
        if (sb_io_record_size(src->args_json, 1, "source", &rs, err) != 0)
            return -1;
    }

    infiles f = {0};
    struct stat st;
    int rc = 0;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            rc = list_dir(src->uri, path, &f, err);
        else if (S_ISREG(st.st_mode))
            rc = infiles_add(&f, path, (uint64_t)st.st_size, err);
        else
            rc = sb_err_set(err,
                            "source uri \"%.200s\": %.200s is not a regular file or a "
                            "directory",
                            src->uri, path);
    } else if (errno == ENOENT && has_glob_chars(path)) {
        rc = list_glob(src->uri, path, &f, err);
    } else {
        rc = sb_err_set(err, "source uri \"%.200s\": %.200s: %s", src->uri, path, strerror(errno));
    }
    if (rc != 0) {
        infiles_free(&f);
        return -1;
    }
    qsort(f.v, f.n, sizeof *f.v, infile_cmp);

    /* Count first, so the array is allocated once and the limit is checked before. */
    uint64_t ps = (uint64_t)src->partition_size;
    size_t total = 0;
    for (size_t i = 0; i < f.n; i++) {
        uint64_t size = f.v[i].size;
        if (size % rs != 0) {
            rc = sb_err_set(err,
                            "source: %.300s has %" PRIu64 " bytes, not a multiple of "
                            "recordSize %" PRIu64 " (%" PRIu64 " bytes left over)",
                            f.v[i].path, size, rs, size % rs);
            break;
        }
        uint64_t k = size == 0 ? 0 : (size + ps - 1) / ps;
        if (k > size / rs)
            k = size / rs;
        if (k > SB_IO_MAX_SPLITS - total) {
            rc = sb_err_set(err,
                            "source uri \"%.200s\": more than %zu splits (partitionSize %" PRIu64
                            " is too small for the input)",
                            src->uri, SB_IO_MAX_SPLITS, ps);
            break;
        }
        total += (size_t)k;
    }
    sb_io_split *v = NULL;
    if (rc == 0 && total > 0) {
        v = calloc(total, sizeof *v);
        if (v == NULL)
            rc = sb_err_set(err, "source: out of memory for %zu splits", total);
    }
    size_t j = 0;
    for (size_t i = 0; rc == 0 && i < f.n; i++) {
        uint64_t size = f.v[i].size;
        if (size == 0)
            continue;
        uint64_t recs = size / rs;
        uint64_t k = (size + ps - 1) / ps;
        if (k > recs)
            k = recs;
        for (uint64_t p = 0; p < k; p++) {
            v[j].path = strdup(f.v[i].path);
            if (v[j].path == NULL) {
                rc = sb_err_set(err, "source: out of memory for split paths");
                break;
            }
            v[j].start = muldiv(recs, p, k) * rs;
            v[j].end = muldiv(recs, p + 1, k) * rs;
            v[j].file_size = size;
            j++;
        }
    }
    infiles_free(&f);
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

static int split_check(const sb_io_split *s, sb_err *err)
{
    if (s->path == NULL || s->path[0] != '/')
        return sb_err_set(err, "split: path must be absolute, got \"%.200s\"",
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
    if (s[pos] != '/')
        return sb_err_set(err, "split \"%s\": byte %zu: path is not absolute", head, pos);
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
