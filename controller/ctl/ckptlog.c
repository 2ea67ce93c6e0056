/* ckptlog.c — the checkpoint log (ckptlog.h): the summary an owner keeps, the text of a base or
 * segment and its strict parse, the writer that appends what is new or compacts, and the reader
 * that walks the highest generation's chain and refuses foreign, stale or damaged files. The
 * directory I/O is plain POSIX (write a temporary, sync, rename, sync the directory). */

#include "controller/ctl/ckptlog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/sched/ranges.h"
#include "core/num.h"

#define MAGIC "streambatch-checkpoint 1"
#define CHUNKS_MAGIC "streambatch-checkpoint-chunks 1" /* a chunked base's manifest */
#define MAX_CHUNKS 65536
#define FNV_OFFSET 14695981039346656037ULL
#define MAX_FILE_BYTES ((size_t)1 << 31)
#define MAX_SPLITS ((size_t)1 << 24) /* as checkpoint.c's readers bound a plan */

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int is_hex16(const char *v)
{
    return v != NULL && strlen(v) == 16 && strspn(v, "0123456789abcdef") == 16;
}

static int hex16_parse(const char *v, uint64_t *out)
{
    if (!is_hex16(v))
        return -1;
    *out = strtoull(v, NULL, 16);
    return 0;
}

/* An absolute path, or (through an io) a URI "<scheme>://...". */
static int location_ok(const char *dir, int uri_ok)
{
    return dir != NULL && (dir[0] == '/' || (uri_ok && strstr(dir, "://") != NULL));
}

/* ---- the summary ---------------------------------------------------------------------------- */

cJSON *sb_ckptlog_summary_json(const sb_ckptlog_summary *s)
{
    cJSON *j = cJSON_CreateObject();
    if (j == NULL)
        return NULL;
    int ok =
        cJSON_AddStringToObject(j, "format", "log") != NULL &&
        cJSON_AddNumberToObject(j, "epoch", s->epoch) != NULL &&
        (s->spec_hash[0] == '\0' || cJSON_AddStringToObject(j, "specHash", s->spec_hash) != NULL) &&
        (s->plan_hash[0] == '\0' || cJSON_AddStringToObject(j, "planHash", s->plan_hash) != NULL) &&
        cJSON_AddStringToObject(j, "location", s->location) != NULL &&
        cJSON_AddStringToObject(j, "id", s->id) != NULL &&
        cJSON_AddNumberToObject(j, "generation", s->generation) != NULL &&
        cJSON_AddNumberToObject(j, "segments", s->segments) != NULL &&
        cJSON_AddNumberToObject(j, "parts", (double)s->parts) != NULL &&
        cJSON_AddNumberToObject(j, "splits", (double)s->splits) != NULL &&
        cJSON_AddStringToObject(j, "hash", s->hash) != NULL;
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int sb_ckptlog_is_summary(const cJSON *j)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format");
    return cJSON_IsString(f) && strcmp(f->valuestring, "log") == 0;
}

/* An integer field in [0, max]: 0, or -1 + err. */
static int num_field(const cJSON *j, const char *what, const char *name, double max, uint64_t *out,
                     sb_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > max ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return sb_err_set(err, "%s.%s: must be an integer in [0, %.0f]", what, name, max);
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* A 16-hex-digit field into out (optional: "" when absent). 0, or -1 + err. */
static int hex_field(const cJSON *j, const char *what, const char *name, int optional, char out[17],
                     sb_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    out[0] = '\0';
    if (v == NULL && optional)
        return 0;
    if (!cJSON_IsString(v) || !is_hex16(v->valuestring))
        return sb_err_set(err, "%s.%s: must be 16 lowercase hex digits", what, name);
    memcpy(out, v->valuestring, 17);
    return 0;
}

int sb_ckptlog_summary_parse(const cJSON *j, const char *what, sb_ckptlog_summary *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(j) || !sb_ckptlog_is_summary(j))
        return sb_err_set(err, "%s: must be an object with \"format\": \"log\"", what);
    uint64_t ep, gen, segs;
    if (num_field(j, what, "epoch", 4294967295.0, &ep, err) != 0 ||
        num_field(j, what, "generation", 4294967295.0, &gen, err) != 0 ||
        num_field(j, what, "segments", 4294967295.0, &segs, err) != 0 ||
        num_field(j, what, "parts", 9007199254740992.0, &out->parts, err) != 0 ||
        num_field(j, what, "splits", 9007199254740992.0, &out->splits, err) != 0 ||
        hex_field(j, what, "specHash", 1, out->spec_hash, err) != 0 ||
        hex_field(j, what, "planHash", 1, out->plan_hash, err) != 0 ||
        hex_field(j, what, "id", 0, out->id, err) != 0 ||
        hex_field(j, what, "hash", 0, out->hash, err) != 0)
        return -1;
    out->epoch = (uint32_t)ep;
    out->generation = (uint32_t)gen;
    out->segments = (uint32_t)segs;
    const cJSON *loc = cJSON_GetObjectItemCaseSensitive(j, "location");
    if (!cJSON_IsString(loc) || !location_ok(loc->valuestring, 1) ||
        strlen(loc->valuestring) >= sizeof out->location)
        return sb_err_set(err, "%s.location: must be an absolute directory path or a URI", what);
    memcpy(out->location, loc->valuestring, strlen(loc->valuestring) + 1);
    if (out->generation == 0)
        return sb_err_set(err, "%s.generation: must be at least 1", what);
    return 0;
}

/* ---- the text of a file --------------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} buf;

static void bput(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bput(buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p != NULL && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)k + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (q == NULL) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

char *sb_ckptlog_encode(sb_ckptlog_file *f, const char *ranges, const sb_storage_output *parts,
                        size_t nparts, size_t *len)
{
    buf b = {0};
    bput(&b,
         MAGIC "\nid %s\nkind %s\ngeneration %" PRIu32 "\nsequence %" PRIu32 "\nepoch %" PRIu32
               "\nspecHash %s\nplanHash %s\nprev %016" PRIx64 "\nsplits %s\nparts %zu\n",
         f->id, f->base ? "base" : "segment", f->generation, f->sequence, f->epoch, f->spec_hash,
         f->plan_hash, f->prev, ranges ? ranges : "", nparts);
    for (size_t i = 0; i < nparts; i++) {
        const sb_storage_output *p = &parts[i];
        bput(&b, "%s:%" PRIu64 ":%" PRIu64 ":%" PRIu32 "%s%s\n", p->id, p->rows, p->bytes,
             p->crc32c, p->order ? ":" : "", p->order ? p->order : "");
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    char prev[17];
    snprintf(prev, sizeof prev, "%016" PRIx64, f->prev);
    f->chain = fnv(fnv(FNV_OFFSET, prev, 16), b.p, b.n);
    bput(&b, "end %016" PRIx64 "\n", f->chain);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

/* The next line of text[*off..len), cut at its '\n' (NULL at the end: no '\n' left). */
static char *next_line(char *text, size_t len, size_t *off)
{
    if (*off >= len)
        return NULL;
    char *s = text + *off, *nl = memchr(s, '\n', len - *off);
    if (nl == NULL)
        return NULL;
    *nl = '\0';
    *off = (size_t)(nl - text) + 1;
    return s;
}

/* "<key> <value>" into *val: 0, or -1 when the line is another key. */
static int keyed(const char *line, const char *key, const char **val)
{
    size_t k = strlen(key);
    if (line == NULL || strncmp(line, key, k) != 0 || line[k] != ' ')
        return -1;
    *val = line + k + 1;
    return 0;
}

static int u32_parse(const char *v, uint32_t *out)
{
    uint64_t x;
    const char *p = v;
    if (sb_num_parse_dec(&p, UINT32_MAX, &x) != 0 || *p != '\0')
        return -1;
    *out = (uint32_t)x;
    return 0;
}

/* The header lines (up to "parts <n>") into f, ranges and *n. 0, or -1 + err with the line. */
static int decode_header(char *text, size_t len, size_t *off, const char *what, sb_ckptlog_file *f,
                         const char **ranges, uint64_t *n, int *lineno, sb_err *err)
{
    static const char *keys[] = {"id",       "kind",     "generation", "sequence", "epoch",
                                 "specHash", "planHash", "prev",       "splits",   "parts"};
    char *line = next_line(text, len, off);
    *lineno = 1;
    if (line == NULL || strcmp(line, MAGIC) != 0)
        return sb_err_set(err, "%s: line 1: not a streambatch checkpoint file (expected \"%s\")",
                          what, MAGIC);
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *v;
        line = next_line(text, len, off);
        ++*lineno;
        if (keyed(line, keys[k], &v) != 0)
            return sb_err_set(err, "%s: line %d: expected \"%s ...\"%s", what, *lineno, keys[k],
                              line == NULL ? " (the file is cut short)" : "");
        int bad = 0;
        switch (k) {
        case 0:
            bad = !is_hex16(v);
            if (!bad)
                memcpy(f->id, v, 17);
            break;
        case 1:
            f->base = strcmp(v, "base") == 0;
            bad = !f->base && strcmp(v, "segment") != 0;
            break;
        case 2:
            bad = u32_parse(v, &f->generation) != 0 || f->generation == 0;
            break;
        case 3:
            bad = u32_parse(v, &f->sequence) != 0 || (f->sequence == 0) != f->base;
            break;
        case 4:
            bad = u32_parse(v, &f->epoch) != 0;
            break;
        case 5:
        case 6:
            bad = !is_hex16(v);
            if (!bad)
                memcpy(k == 5 ? f->spec_hash : f->plan_hash, v, 17);
            break;
        case 7:
            bad = hex16_parse(v, &f->prev) != 0;
            break;
        case 8:
            *ranges = v;
            break;
        default: {
            const char *p = v;
            bad = sb_num_parse_dec(&p, UINT32_MAX, n) != 0 || *p != '\0';
        }
        }
        if (bad)
            return sb_err_set(err, "%s: line %d: bad %s \"%.40s\"", what, *lineno, keys[k], v);
    }
    return 0;
}

/* FNV-1a over text whose '\n' were cut to '\0' by next_line: hashed as the '\n' they were. */
static uint64_t fnv_lines(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)(p[i] == '\0' ? '\n' : p[i])) * 1099511628211ULL;
    return h;
}

/* Checks ranges text v (ascending, so its last number is its largest). 0, or -1 + err. */
static int ranges_check(const char *v, sb_err *err)
{
    size_t k = strlen(v), d = k;
    while (d > 0 && v[d - 1] >= '0' && v[d - 1] <= '9')
        d--;
    uint64_t last = 0;
    const char *p = v + d;
    if (k > 0 && (d == k || sb_num_parse_dec(&p, MAX_SPLITS - 1, &last) != 0))
        return sb_err_set(err, "bad splits \"%.60s\" (ranges of split indices below %zu)", v,
                          MAX_SPLITS);
    uint8_t *set = calloc((size_t)last + 2, 1);
    if (set == NULL)
        return sb_err_set(err, "out of memory");
    sb_err e2;
    int rc = sb_ranges_parse(v, set, (size_t)last + 1 + (k == 0), &e2);
    free(set);
    return rc == 0 ? 0 : sb_err_set(err, "bad splits: %s", e2.msg);
}

/* The part lines of a decoded file, n of them, from text[*off..body). 0, or -1 + err. */
static int decode_parts(char *text, size_t body, size_t *off, const char *what, int lineno,
                        uint64_t n, sb_storage_output **parts, size_t *nparts, sb_err *err)
{
    *parts = calloc((size_t)n + 1, sizeof **parts);
    if (*parts == NULL)
        return sb_err_set(err, "%s: out of memory for %" PRIu64 " parts", what, n);
    for (uint64_t i = 0; i < n; i++) {
        char *line = next_line(text, body, off);
        lineno++;
        sb_err e2;
        if (line == NULL) {
            sb_err_set(err, "%s: announces %" PRIu64 " parts, holds %" PRIu64, what, n, i);
            break;
        }
        if (sb_ckpt_part_parse(line, &(*parts)[i], &e2) != 0) {
            sb_err_set(err, "%s: line %d: %s", what, lineno, e2.msg);
            break;
        }
        ++*nparts;
    }
    if (*nparts == n && *off < body)
        sb_err_set(err, "%s: line %d: more lines than the %" PRIu64 " parts announced", what,
                   lineno + 1, n);
    else if (*nparts == n)
        return 0;
    sb_sched_parts_free(*parts, *nparts);
    *parts = NULL;
    *nparts = 0;
    return -1;
}

/* The "end <16 hex>" line that closes text[0..len): *body the offset where it starts, *chain its
 * hash (endhex its digits). 0, or -1 when the text does not end with one. */
static int end_line(const char *text, size_t len, size_t *body, uint64_t *chain, char endhex[17])
{
    size_t b = len - 1;
    while (b > 0 && text[b - 1] != '\n')
        b--;
    *body = b;
    if (text[len - 1] != '\n' || len - b != 21 || strncmp(text + b, "end ", 4) != 0)
        return -1;
    memcpy(endhex, text + b + 4, 16);
    endhex[16] = '\0';
    return hex16_parse(endhex, chain);
}

int sb_ckptlog_decode(char *text, size_t len, const char *what, sb_ckptlog_file *f, char **ranges,
                      sb_storage_output **parts, size_t *nparts, sb_err *err)
{
    memset(f, 0, sizeof *f);
    *ranges = NULL;
    *parts = NULL;
    *nparts = 0;
    if (len == 0 || memchr(text, '\0', len) != NULL)
        return sb_err_set(err, "%s: empty or not text (damaged)", what);
    /* the end line first: a file without it was cut short */
    size_t body;
    uint64_t chain;
    char endhex[17] = "";
    if (end_line(text, len, &body, &chain, endhex) != 0)
        return sb_err_set(err,
                          "%s: no \"end <hash>\" line at the end (the file is cut short or "
                          "damaged)",
                          what);
    size_t off = 0;
    const char *rv = NULL;
    uint64_t n = 0;
    int lineno = 0;
    if (decode_header(text, body, &off, what, f, &rv, &n, &lineno, err) != 0)
        return -1;
    char prev[17];
    snprintf(prev, sizeof prev, "%016" PRIx64, f->prev);
    uint64_t h = fnv_lines(fnv(FNV_OFFSET, prev, 16), text, body);
    if (h != chain)
        return sb_err_set(err,
                          "%s: its contents do not match its end hash (%s, computed %016" PRIx64
                          "): the file was changed or damaged",
                          what, endhex, h);
    f->chain = chain;
    sb_err e2;
    if (ranges_check(rv, &e2) != 0)
        return sb_err_set(err, "%s: line 10: %s", what, e2.msg);
    if (decode_parts(text, body, &off, what, lineno, n, parts, nparts, err) != 0)
        return -1;
    *ranges = strdup(rv);
    if (*ranges == NULL) {
        sb_sched_parts_free(*parts, *nparts);
        *parts = NULL;
        *nparts = 0;
        return sb_err_set(err, "out of memory");
    }
    return 0;
}

/* ---- the directory -------------------------------------------------------------------------- */

/* mkdir -p dir. 0, or -1 + err. */
static int make_dirs(const char *dir, sb_err *err)
{
    char d[PATH_MAX];
    if (snprintf(d, sizeof d, "%s", dir) >= (int)sizeof d)
        return sb_err_set(err, "checkpoint %.200s: the path is too long", dir);
    for (char *p = d + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(d, 0755) != 0 && errno != EEXIST)
            return sb_err_set(err, "checkpoint: cannot create %.300s: %s", d, strerror(errno));
        *p = c;
        if (c == '\0')
            return 0;
    }
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int sb_ckptlog_write_file(const char *dir, const char *name, const char *data, size_t n,
                          sb_err *err)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && make_dirs(dir, err) == 0)
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sb_err_set(err, "checkpoint: cannot write %.300s: %s", tmp, strerror(errno));
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, data + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            close(fd);
            unlink(tmp);
            return sb_err_set(err, "checkpoint: writing %.300s: %s", tmp, strerror(e));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return sb_err_set(err, "checkpoint: syncing %.300s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return sb_err_set(err, "checkpoint: renaming %.300s: %s", tmp, strerror(e));
    }
    sync_dir(dir);
    return 0;
}

/* Reads dir/name whole (malloc'd, *n bytes, NUL after). 1, 0 when missing, -1 + err. */
static int read_whole(const char *path, char **out, size_t *n, sb_err *err)
{
    *out = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return sb_err_set(err, "checkpoint %.300s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size > MAX_FILE_BYTES) {
        close(fd);
        return sb_err_set(err, "checkpoint %.300s: unreadable or larger than 2 GiB", path);
    }
    char *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (b != NULL && got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (b == NULL || got != (size_t)st.st_size) {
        free(b);
        return sb_err_set(err, "checkpoint %.300s: %s", path,
                          b == NULL ? "out of memory" : "cannot be read");
    }
    b[got] = '\0';
    *out = b;
    *n = got;
    return 1;
}

/* What a name in the directory is: 1 a base (*gen), 2 a segment (*gen, *seq), 3 a temporary,
 * 4 a chunk of a base (*gen, *seq: its number), 0 anything else (left alone). */
static int name_kind(const char *name, uint32_t *gen, uint32_t *seq)
{
    unsigned g = 0, s = 0;
    int k = 0;
    char tail[8];
    if (strncmp(name, ".tmp-", 5) == 0 &&
        (strncmp(name + 5, "base-", 5) == 0 || strncmp(name + 5, "seg-", 4) == 0))
        return 3;
    if (strlen(name) == 5 + 8 + 5 && sscanf(name, "base-%8x%5s%n", &g, tail, &k) == 2 && k == 18 &&
        strcmp(tail, ".sbck") == 0)
        k = 1;
    else if (strlen(name) == 5 + 8 + 1 + 8 + 5 &&
             sscanf(name, "base-%8x-%8x%5s%n", &g, &s, tail, &k) == 3 && k == 27 &&
             strcmp(tail, ".sbck") == 0)
        k = 4;
    else if (strlen(name) == 4 + 8 + 1 + 8 + 5 &&
             sscanf(name, "seg-%8x-%8x%5s%n", &g, &s, tail, &k) == 3 && k == 26 &&
             strcmp(tail, ".sbck") == 0)
        k = 2;
    else
        return 0;
    *gen = g;
    *seq = s;
    return k;
}

/* The highest generation with a base in dir (0: none). -1 + err when dir cannot be read;
 * a missing dir has none. With del (a compaction that wrote generation keep): removes every
 * other base, segment and temporary. */
static int scan_dir(const sb_ckptlog_io *io, const char *dir, uint32_t keep, int del,
                    uint32_t *maxgen, sb_err *err)
{
    *maxgen = 0;
    if (io != NULL) {
        char **names = NULL;
        size_t n = 0;
        if (io->list != NULL && io->list(io->ud, dir, &names, &n, err) != 0)
            return -1;
        for (size_t i = 0; i < n; i++) {
            uint32_t g = 0, s = 0;
            int k = name_kind(names[i], &g, &s);
            if (k == 1 && g > *maxgen)
                *maxgen = g;
            sb_err ignored;
            if (del && k != 0 && !((k == 1 || k == 4) && g == keep) && io->del != NULL)
                (void)io->del(io->ud, dir, names[i], &ignored);
            free(names[i]);
        }
        free(names);
        return 0;
    }
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT)
            return 0;
        return sb_err_set(err, "checkpoint %.300s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint32_t g = 0, s = 0;
        int k = name_kind(e->d_name, &g, &s);
        if (k == 1 && g > *maxgen)
            *maxgen = g;
        if (del && k != 0 && !((k == 1 || k == 4) && g == keep)) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            (void)unlink(p); /* a leftover that stays is skipped by readers, removed next time */
        }
    }
    closedir(d);
    return 0;
}

/* ---- the writer ----------------------------------------------------------------------------- */

static const char *written_id(const void *ctx, size_t i)
{
    return ((const sb_ckptlog *)ctx)->ids[i];
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A new log id: 64 random bits (the clock and pid when /dev/urandom cannot say). */
static void draw_id(char out[17])
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t s[3] = {(uint64_t)t.tv_sec, (uint64_t)t.tv_nsec, (uint64_t)getpid()};
        v = fnv(FNV_OFFSET, s, sizeof s);
    }
    if (fd >= 0)
        close(fd);
    snprintf(out, 17, "%016" PRIx64, v);
}

int sb_ckptlog_init(sb_ckptlog *w, const char *dir, const char *id, uint32_t epoch,
                    const char *spec_hash, sb_err *err)
{
    return sb_ckptlog_init_io(w, NULL, dir, id, epoch, spec_hash, err);
}

int sb_ckptlog_init_io(sb_ckptlog *w, const sb_ckptlog_io *io, const char *dir, const char *id,
                       uint32_t epoch, const char *spec_hash, sb_err *err)
{
    memset(w, 0, sizeof *w);
    w->io = io;
    if (!location_ok(dir, io != NULL) || strlen(dir) >= sizeof w->sum.location - 64)
        return sb_err_set(err, "checkpoint: \"%.200s\" is not an absolute directory path%s",
                          dir ? dir : "", io != NULL ? " or URI" : "");
    snprintf(w->sum.location, sizeof w->sum.location, "%s", dir);
    if (id != NULL && is_hex16(id))
        memcpy(w->sum.id, id, 17);
    else
        draw_id(w->sum.id);
    w->sum.epoch = epoch;
    snprintf(w->sum.spec_hash, sizeof w->sum.spec_hash, "%s", spec_hash ? spec_hash : "");
    sb_idmap_init(&w->idx, written_id, w);
    w->chunk_bytes = SB_CKPTLOG_CHUNK_BYTES;
    w->min_compact = SB_CKPTLOG_MIN_COMPACT;
    return 0;
}

void sb_ckptlog_free(sb_ckptlog *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->nids; i++)
        free(w->ids[i]);
    free(w->ids);
    free(w->done);
    free(w->seed_ranges);
    sb_idmap_free(&w->idx);
    memset(w, 0, sizeof *w);
}

/* Forgets what was written (the next update compacts). */
static void writer_forget(sb_ckptlog *w)
{
    for (size_t i = 0; i < w->nids; i++)
        free(w->ids[i]);
    w->nids = 0;
    sb_idmap_free(&w->idx);
    sb_idmap_init(&w->idx, written_id, w);
    w->wrote_any = 0;
    free(w->seed_ranges);
    w->seed_ranges = NULL;
}

void sb_ckptlog_forget(sb_ckptlog *w)
{
    writer_forget(w);
}

/* Records id as written. 0, or -1 when out of memory. */
static int writer_add(sb_ckptlog *w, const char *id)
{
    if (w->nids == w->capids) {
        size_t cap = w->capids ? w->capids * 2 : 1024;
        char **q = realloc(w->ids, cap * sizeof *q);
        if (q == NULL)
            return -1;
        w->ids = q;
        w->capids = cap;
    }
    char *c = strdup(id);
    if (c == NULL)
        return -1;
    w->ids[w->nids] = c;
    if (sb_idmap_put(&w->idx, c, w->nids) != 0) {
        free(c);
        return -1;
    }
    w->nids++;
    return 0;
}

/* Puts text as name in the log's directory (through io, or a local file). 0, or -1 + err. */
static int writer_put_text(sb_ckptlog *w, const char *name, const char *text, size_t len,
                           sb_err *err)
{
    int rc = w->io != NULL ? w->io->put(w->io->ud, w->sum.location, name, text, len, err)
                           : sb_ckptlog_write_file(w->sum.location, name, text, len, err);
    if (rc == 0) {
        w->writes++;
        w->bytes += len;
    }
    return rc;
}

/* A base of len bytes as chunks base-G-1, base-G-2, ... of at most w->chunk_bytes, then the
 * manifest base-G naming each chunk's size and hash, written last: until it is, readers take
 * the older generation, whole. So no single file passes chunk_bytes (an object store's
 * single-PUT limit, a storage job's size). 0, or -1 + err. */
static int writer_put_chunked(sb_ckptlog *w, const sb_ckptlog_file *f, const char *name,
                              const char *text, size_t len, sb_err *err)
{
    size_t k = (len + w->chunk_bytes - 1) / w->chunk_bytes;
    if (k > MAX_CHUNKS)
        return sb_err_set(err, "checkpoint: a base of %zu bytes needs more than %d chunks", len,
                          MAX_CHUNKS);
    buf m = {0};
    bput(&m, CHUNKS_MAGIC "\nid %s\ngeneration %" PRIu32 "\nchunks %zu\n", f->id, f->generation, k);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < k; i++) {
        size_t off = i * w->chunk_bytes,
               n = len - off < w->chunk_bytes ? len - off : w->chunk_bytes;
        char cname[64];
        snprintf(cname, sizeof cname, "base-%08" PRIx32 "-%08zx.sbck", f->generation, i + 1);
        rc = writer_put_text(w, cname, text + off, n, err);
        bput(&m, "chunk %zu %zu %016" PRIx64 "\n", i + 1, n, fnv(FNV_OFFSET, text + off, n));
    }
    if (rc == 0 && !m.oom)
        bput(&m, "end %016" PRIx64 "\n", fnv(FNV_OFFSET, m.p, m.n));
    if (rc == 0 && m.oom)
        rc = sb_err_set(err, "checkpoint: out of memory");
    if (rc == 0)
        rc = writer_put_text(w, name, m.p, m.n, err);
    free(m.p);
    return rc;
}

/* Writes f with ranges and parts as file name (a base past w->chunk_bytes in chunks); *len the
 * file's text length; counts the cost. 0, or -1 + err. */
static int writer_put(sb_ckptlog *w, sb_ckptlog_file *f, const char *name, const char *ranges,
                      const sb_storage_output *parts, size_t nparts, size_t *len, sb_err *err)
{
    double t0 = now_s();
    char *text = sb_ckptlog_encode(f, ranges, parts, nparts, len);
    if (text == NULL)
        return sb_err_set(err, "checkpoint: out of memory encoding %zu parts", nparts);
    int rc = f->base && *len > w->chunk_bytes ? writer_put_chunked(w, f, name, text, *len, err)
                                              : writer_put_text(w, name, text, *len, err);
    free(text);
    if (rc == 0) {
        w->parts_written += nparts;
        w->seconds += now_s() - t0;
    }
    return rc;
}

int sb_ckptlog_continue(sb_ckptlog *w, const sb_ckptlog_summary *found, const sb_ckpt *loaded,
                        sb_err *err)
{
    if (w->wrote_any || found->generation == 0 || strcmp(found->id, w->sum.id) != 0 ||
        strcmp(found->location, w->sum.location) != 0 ||
        strcmp(found->spec_hash, w->sum.spec_hash) != 0 || found->parts != loaded->nparts)
        return sb_err_set(err, "checkpoint %.300s: the log read is not this writer's to continue",
                          found->location);
    w->seed_ranges = strdup(loaded->committed_splits ? loaded->committed_splits : "");
    for (size_t i = 0; w->seed_ranges != NULL && i < loaded->nparts; i++)
        if (writer_add(w, loaded->parts[i].id) != 0) {
            writer_forget(w); /* frees seed_ranges */
            break;
        }
    if (w->seed_ranges == NULL) {
        writer_forget(w);
        return sb_err_set(err, "checkpoint: out of memory");
    }
    w->sum.generation = found->generation;
    w->sum.segments = found->segments;
    w->sum.parts = found->parts;
    w->sum.splits = found->splits;
    memcpy(w->sum.hash, found->hash, sizeof w->sum.hash);
    memcpy(w->sum.plan_hash, found->plan_hash, sizeof w->sum.plan_hash);
    w->base_bytes = found->base_bytes;
    w->seg_bytes = found->seg_bytes;
    w->base_parts = found->base_parts;
    w->wrote_any = 1;
    return 0;
}

/* The splits sb_ckptlog_continue carried, over the plan's nsplits now that it is known; what
 * does not parse against the plan makes this update a compaction. */
static void writer_seed(sb_ckptlog *w, size_t nsplits)
{
    uint8_t *d = w->wrote_any ? calloc(nsplits + 1, 1) : NULL;
    if (d != NULL && sb_ranges_parse(w->seed_ranges, d, nsplits, NULL) == 0) {
        free(w->done);
        w->done = d;
        w->nsplits = nsplits;
        free(w->seed_ranges);
        w->seed_ranges = NULL;
        return;
    }
    free(d);
    writer_forget(w);
}

static uint64_t set_count(const uint8_t *set, size_t n)
{
    uint64_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += set[i] != 0;
    return c;
}

/* Compaction: a new base with everything (cur: the committed set, owned from here on). */
static int writer_compact(sb_ckptlog *w, const char *plan_hash, uint8_t *cur, size_t nsplits,
                          const char *ranges, const sb_storage_output *parts, size_t nparts,
                          sb_err *err)
{
    uint32_t maxgen = 0;
    if (scan_dir(w->io, w->sum.location, 0, 0, &maxgen, err) != 0) {
        free(cur);
        return -1;
    }
    uint32_t gen = (maxgen > w->sum.generation ? maxgen : w->sum.generation) + 1;
    sb_ckptlog_file f = {.base = 1, .generation = gen, .epoch = w->sum.epoch};
    memcpy(f.id, w->sum.id, 17);
    memcpy(f.spec_hash, is_hex16(w->sum.spec_hash) ? w->sum.spec_hash : "0000000000000000", 17);
    memcpy(f.plan_hash, is_hex16(plan_hash) ? plan_hash : "0000000000000000", 17);
    char name[64];
    snprintf(name, sizeof name, "base-%08" PRIx32 ".sbck", gen);
    size_t len = 0;
    if (writer_put(w, &f, name, ranges, parts, nparts, &len, err) != 0) {
        free(cur);
        return -1;
    }
    sb_err ignored;
    (void)scan_dir(w->io, w->sum.location, gen, 1, &maxgen, &ignored); /* older files: leftovers */
    writer_forget(w);
    free(w->done);
    w->done = cur;
    w->nsplits = nsplits;
    w->wrote_any = 1;
    for (size_t i = 0; i < nparts; i++)
        if (writer_add(w, parts[i].id) != 0) {
            writer_forget(w); /* the next update compacts again */
            break;
        }
    w->sum.generation = gen;
    w->sum.segments = 0;
    w->sum.parts = nparts;
    w->sum.splits = set_count(cur, nsplits);
    memcpy(w->sum.plan_hash, f.plan_hash, 17);
    snprintf(w->sum.hash, sizeof w->sum.hash, "%016" PRIx64, f.chain);
    w->base_bytes = len;
    w->seg_bytes = 0;
    w->base_parts = nparts;
    return 0;
}

/* A segment with the splits in cur but not written and the parts flagged in fresh. */
static int writer_append(sb_ckptlog *w, uint8_t *cur, const sb_storage_output *parts, size_t nparts,
                         const uint8_t *fresh, size_t nfresh, sb_err *err)
{
    size_t nnew = 0;
    for (size_t i = 0; i < w->nsplits; i++) {
        cur[i] = cur[i] && !w->done[i];
        nnew += cur[i] != 0;
    }
    sb_storage_output *np = calloc(nfresh + 1, sizeof *np);
    char *ranges = sb_ranges_format(cur, w->nsplits);
    if (np == NULL || ranges == NULL) {
        free(np);
        free(ranges);
        return sb_err_set(err, "checkpoint: out of memory");
    }
    for (size_t i = 0, k = 0; i < nparts; i++)
        if (fresh[i])
            np[k++] = parts[i]; /* borrowed for the encoding */
    uint64_t prev = 0;
    (void)hex16_parse(w->sum.hash, &prev);
    sb_ckptlog_file f = {.generation = w->sum.generation,
                         .sequence = w->sum.segments + 1,
                         .epoch = w->sum.epoch,
                         .prev = prev};
    memcpy(f.id, w->sum.id, 17);
    memcpy(f.spec_hash, is_hex16(w->sum.spec_hash) ? w->sum.spec_hash : "0000000000000000", 17);
    memcpy(f.plan_hash, w->sum.plan_hash, 17);
    char name[64];
    snprintf(name, sizeof name, "seg-%08" PRIx32 "-%08" PRIx32 ".sbck", f.generation, f.sequence);
    size_t len = 0;
    int rc = writer_put(w, &f, name, ranges, np, nfresh, &len, err);
    free(ranges);
    if (rc == 0) {
        for (size_t i = 0; i < w->nsplits; i++)
            w->done[i] |= cur[i];
        for (size_t i = 0; i < nfresh; i++)
            if (writer_add(w, np[i].id) != 0) {
                writer_forget(w);
                break;
            }
        w->sum.segments++;
        w->sum.parts += nfresh;
        w->sum.splits += nnew;
        snprintf(w->sum.hash, sizeof w->sum.hash, "%016" PRIx64, f.chain);
        w->seg_bytes += len;
    }
    free(np);
    return rc;
}

int sb_ckptlog_update(sb_ckptlog *w, const char *plan_hash, size_t nsplits, const char *ranges,
                      const sb_storage_output *parts, size_t nparts, int *wrote, sb_err *err)
{
    *wrote = 0;
    if (nsplits > MAX_SPLITS)
        return sb_err_set(err, "checkpoint: %zu splits, more than a checkpoint holds (%zu)",
                          nsplits, MAX_SPLITS);
    uint8_t *cur = calloc(nsplits + 1, 1);
    uint8_t *fresh = calloc(nparts + 1, 1);
    sb_err e2;
    if (cur == NULL || fresh == NULL || sb_ranges_parse(ranges, cur, nsplits, &e2) != 0) {
        free(cur);
        free(fresh);
        return sb_err_set(err, "checkpoint: %s", cur && fresh ? e2.msg : "out of memory");
    }
    if (w->seed_ranges != NULL)
        writer_seed(w, nsplits);
    /* a rewrite costs the whole log and saves nothing in bytes (segments hold no line twice):
     * only when the segments hold SB_CKPTLOG_SEG_RATIO times the base's parts (so each base is
     * 8 times the last and all rewrites add up to at most 8/7 of the log; counted in parts, as
     * a segment's header would make many small appends look heavy), or when a reader would
     * have too many files to list */
    int compact =
        !w->wrote_any || nsplits != w->nsplits ||
        strcmp(is_hex16(plan_hash) ? plan_hash : "0000000000000000", w->sum.plan_hash) != 0 ||
        w->sum.segments >= SB_CKPTLOG_MAX_SEGMENTS ||
        (w->sum.parts - w->base_parts > SB_CKPTLOG_SEG_RATIO * w->base_parts &&
         w->seg_bytes > w->min_compact);
    size_t nfresh = 0, nold = 0;
    for (size_t i = 0; !compact && i < nsplits; i++)
        compact = w->done[i] && !cur[i]; /* a split taken back: rewrite what is true now */
    for (size_t i = 0; !compact && i < nparts; i++) {
        fresh[i] = !sb_idmap_get(&w->idx, parts[i].id, NULL);
        nfresh += fresh[i];
        nold += !fresh[i];
    }
    compact = compact || nold != w->nids;
    int rc = 0;
    if (compact) {
        if (nparts == 0 && set_count(cur, nsplits) == 0 && !w->wrote_any &&
            w->sum.generation == 0) {
            free(cur); /* nothing committed yet: nothing to keep */
        } else {
            rc = writer_compact(w, plan_hash, cur, nsplits, ranges, parts, nparts, err);
            *wrote = rc == 0;
        }
    } else {
        size_t nnew = 0;
        for (size_t i = 0; i < nsplits; i++)
            nnew += cur[i] && !w->done[i];
        if (nnew > 0 || nfresh > 0) {
            rc = writer_append(w, cur, parts, nparts, fresh, nfresh, err);
            *wrote = rc == 0;
        }
        free(cur);
    }
    free(fresh);
    return rc;
}

/* ---- the reader ----------------------------------------------------------------------------- */

/* What a load gathers across files. */
typedef struct {
    uint8_t *set; /* committed splits, grown as needed */
    size_t nset;
    sb_storage_output *parts;
    size_t nparts, cap;
    sb_idmap idx;
    uint32_t epoch;
} gather;

static const char *gathered_id(const void *ctx, size_t i)
{
    return ((const gather *)ctx)->parts[i].id;
}

/* Adds a decoded file's ranges and parts (taken over: *parts is freed) to g. 0, or -1 + err. */
static int gather_add(gather *g, const char *what, const char *ranges, sb_storage_output *parts,
                      size_t n, sb_err *err)
{
    size_t k = strlen(ranges), d = k;
    while (d > 0 && ranges[d - 1] >= '0' && ranges[d - 1] <= '9')
        d--;
    size_t need = k > 0 ? (size_t)strtoull(ranges + d, NULL, 10) + 1 : 0;
    int rc = 0;
    if (need > g->nset) {
        uint8_t *s = realloc(g->set, need);
        if (s == NULL)
            rc = sb_err_set(err, "out of memory");
        else {
            memset(s + g->nset, 0, need - g->nset);
            g->set = s;
            g->nset = need;
        }
    }
    uint8_t *one = rc == 0 ? calloc(need + 1, 1) : NULL;
    sb_err e2;
    if (rc == 0 && (one == NULL || sb_ranges_parse(ranges, one, need, &e2) != 0))
        rc = sb_err_set(err, "%s: %s", what, one ? e2.msg : "out of memory");
    for (size_t i = 0; rc == 0 && i < need; i++)
        g->set[i] |= one[i];
    free(one);
    if (rc == 0 && g->nparts + n > g->cap) {
        size_t cap = g->cap ? g->cap : 1024;
        while (cap < g->nparts + n)
            cap *= 2;
        sb_storage_output *q = realloc(g->parts, cap * sizeof *q);
        if (q == NULL)
            rc = sb_err_set(err, "out of memory");
        else {
            g->parts = q;
            g->cap = cap;
        }
    }
    size_t i = 0;
    for (; rc == 0 && i < n; i++) {
        if (sb_idmap_get(&g->idx, parts[i].id, NULL)) {
            rc = sb_err_set(err, "%s: part %s is already in an earlier file of the log", what,
                            parts[i].id);
            break;
        }
        g->parts[g->nparts] = parts[i];
        if (sb_idmap_put(&g->idx, parts[i].id, g->nparts) != 0) {
            rc = sb_err_set(err, "out of memory");
            break;
        }
        g->nparts++;
    }
    for (size_t j = i; j < n; j++) { /* what was not taken over */
        free((char *)parts[j].id);
        free((char *)parts[j].order);
    }
    free(parts);
    return rc;
}

/* Reads dir/name whole through io (or a local file). 1, 0 missing, -1 + err. */
static int read_named(const sb_ckptlog_io *io, const char *dir, const char *name, char **text,
                      size_t *n, sb_err *err)
{
    if (io != NULL)
        return io->read != NULL ? io->read(io->ud, dir, name, text, n, err) : 0;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return read_whole(path, text, n, err);
}

/* The manifest's header and chunk lines (text cut into lines): *k chunks, their sizes and
 * hashes into sizes[]/hashes[] (malloc'd). 0, or -1 + err. */
static int manifest_parse(char *text, size_t body, const char *what, uint32_t gen, size_t *k,
                          size_t **sizes, uint64_t **hashes, sb_err *err)
{
    size_t off = 0;
    char *line = next_line(text, body, &off);
    const char *v;
    uint32_t g = 0;
    uint64_t nk = 0;
    (void)line;
    line = next_line(text, body, &off);
    if (keyed(line, "id", &v) != 0 || !is_hex16(v))
        return sb_err_set(err, "%s: line 2: expected \"id <16 hex>\"", what);
    line = next_line(text, body, &off);
    if (keyed(line, "generation", &v) != 0 || u32_parse(v, &g) != 0 || g != gen)
        return sb_err_set(err, "%s: line 3: expected \"generation %" PRIu32 "\"", what, gen);
    line = next_line(text, body, &off);
    const char *p = NULL;
    if (keyed(line, "chunks", &v) != 0 || (p = v, sb_num_parse_dec(&p, MAX_CHUNKS, &nk)) != 0 ||
        *p != '\0' || nk == 0)
        return sb_err_set(err, "%s: line 4: expected \"chunks <1..%d>\"", what, MAX_CHUNKS);
    *sizes = calloc((size_t)nk, sizeof **sizes);
    *hashes = calloc((size_t)nk, sizeof **hashes);
    if (*sizes == NULL || *hashes == NULL)
        return sb_err_set(err, "%s: out of memory", what);
    for (size_t i = 0; i < nk; i++) {
        line = next_line(text, body, &off);
        size_t idx = 0, sz = 0;
        char hx[17] = "";
        int used = -1;
        if (line == NULL || sscanf(line, "chunk %zu %zu %16s%n", &idx, &sz, hx, &used) != 3 ||
            line[used] != '\0' || idx != i + 1 || sz == 0 || sz > MAX_FILE_BYTES ||
            hex16_parse(hx, &(*hashes)[i]) != 0)
            return sb_err_set(err, "%s: line %zu: expected \"chunk %zu <bytes> <16 hex>\"", what,
                              i + 5, i + 1);
        (*sizes)[i] = sz;
    }
    if (off < body)
        return sb_err_set(err, "%s: line %zu: more lines than the %zu chunks announced", what,
                          (size_t)nk + 5, (size_t)nk);
    *k = (size_t)nk;
    return 0;
}

/* A chunked base: *text (n bytes) is the manifest dir/name of generation gen; it is replaced by
 * the base it names, every chunk read and checked against the manifest's size and hash (a
 * missing, cut, damaged or foreign chunk is refused, naming the file). 0, or -1 + err. */
static int chunks_join(const sb_ckptlog_io *io, const char *dir, const char *name, uint32_t gen,
                       char **text, size_t *n, sb_err *err)
{
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "checkpoint %.3000s/%s", dir, name);
    size_t body = 0, k = 0, *sizes = NULL, total = 0;
    uint64_t chain = 0, *hashes = NULL;
    char endhex[17];
    if (end_line(*text, *n, &body, &chain, endhex) != 0)
        return sb_err_set(err, "%s: the chunk list has no \"end <hash>\" line (cut short)", what);
    if (fnv(FNV_OFFSET, *text, body) != chain)
        return sb_err_set(err, "%s: the chunk list does not match its end hash (damaged)", what);
    int rc = manifest_parse(*text, body, what, gen, &k, &sizes, &hashes, err);
    for (size_t i = 0; rc == 0 && i < k; i++)
        if ((total += sizes[i]) > MAX_FILE_BYTES)
            rc = sb_err_set(err, "%s: the chunks add up to more than 2 GiB", what);
    char *joined = rc == 0 ? malloc(total + 1) : NULL;
    if (rc == 0 && joined == NULL)
        rc = sb_err_set(err, "%s: out of memory for %zu bytes", what, total);
    for (size_t i = 0, off = 0; rc == 0 && i < k; off += sizes[i], i++) {
        char cname[64], *c = NULL;
        size_t cn = 0;
        snprintf(cname, sizeof cname, "base-%08" PRIx32 "-%08zx.sbck", gen, i + 1);
        int r = read_named(io, dir, cname, &c, &cn, err);
        if (r == 0)
            rc = sb_err_set(err,
                            "checkpoint %.3000s/%s is missing: %s names %zu chunks (the chunk was "
                            "removed, or never written)",
                            dir, cname, name, k);
        else if (r > 0 && (cn != sizes[i] || fnv(FNV_OFFSET, c, cn) != hashes[i]))
            rc = sb_err_set(err,
                            "checkpoint %.3000s/%s is cut short, damaged or from another log: "
                            "%zu bytes with hash %016" PRIx64 ", %s names %zu bytes with hash "
                            "%016" PRIx64,
                            dir, cname, cn, fnv(FNV_OFFSET, c, cn), name, sizes[i], hashes[i]);
        else if (r > 0)
            memcpy(joined + off, c, cn);
        rc = r < 0 ? -1 : rc;
        free(c);
    }
    free(sizes);
    free(hashes);
    if (rc != 0) {
        free(joined);
        return -1;
    }
    joined[total] = '\0';
    free(*text);
    *text = joined;
    *n = total;
    return 0;
}

/* Reads and decodes dir/name, checked against the log so far (id, generation, sequence, chain,
 * hashes of base), into g. 1 done, 0 missing, -1 + err. */
static int load_file(const sb_ckptlog_io *io, const char *dir, const char *name,
                     const sb_ckptlog_file *base, uint32_t seq, uint64_t prev, gather *g,
                     sb_ckptlog_file *f, uint64_t *bytes, sb_err *err)
{
    char path[PATH_MAX + 64], *text = NULL;
    snprintf(path, sizeof path, "checkpoint %s/%s", dir, name);
    size_t n = 0;
    int r = read_named(io, dir, name, &text, &n, err);
    if (r <= 0)
        return r;
    uint32_t gen = 0, s2 = 0;
    if (base == NULL && n > strlen(CHUNKS_MAGIC) &&
        strncmp(text, CHUNKS_MAGIC "\n", strlen(CHUNKS_MAGIC) + 1) == 0 &&
        (name_kind(name, &gen, &s2) != 1 ? sb_err_set(err, "%s: a chunk list, not a base", path)
                                         : chunks_join(io, dir, name, gen, &text, &n, err)) != 0) {
        free(text);
        return -1;
    }
    *bytes += n;
    char *ranges = NULL;
    sb_storage_output *parts = NULL;
    size_t np = 0;
    int rc = sb_ckptlog_decode(text, n, path, f, &ranges, &parts, &np, err);
    free(text);
    if (rc != 0)
        return -1;
    if (base != NULL &&
        (f->base || f->generation != base->generation || f->sequence != seq ||
         strcmp(f->id, base->id) != 0 || strcmp(f->spec_hash, base->spec_hash) != 0 ||
         strcmp(f->plan_hash, base->plan_hash) != 0 || f->prev != prev))
        rc = sb_err_set(err,
                        "%s: does not continue the log (id %s, generation %" PRIu32
                        ", sequence %" PRIu32 ", prev %016" PRIx64 "; expected id %s, "
                        "generation %" PRIu32 ", sequence %" PRIu32 ", prev %016" PRIx64
                        ", the base's spec and plan hashes)",
                        path, f->id, f->generation, f->sequence, f->prev, base->id,
                        base->generation, seq, prev);
    else if (base == NULL && !f->base)
        rc = sb_err_set(err, "%s: is a segment, not a base", path);
    if (rc == 0 && f->epoch > g->epoch)
        g->epoch = f->epoch;
    if (rc == 0)
        rc = gather_add(g, path, ranges, parts, np, err);
    else {
        sb_sched_parts_free(parts, np);
    }
    free(ranges);
    return rc == 0 ? 1 : -1;
}

/* Checks the base against expect: foreign (another id or spec), stale (an older generation). */
static int check_base(const sb_ckptlog_summary *ex, const sb_ckptlog_file *b, sb_err *err)
{
    const char *dir = ex->location;
    if (strcmp(b->id, ex->id) != 0)
        return sb_err_set(err,
                          "checkpoint %.300s is foreign: its log id is %s, the summary names %s "
                          "(another run's checkpoint)",
                          dir, b->id, ex->id);
    if (ex->spec_hash[0] != '\0' && strcmp(b->spec_hash, ex->spec_hash) != 0)
        return sb_err_set(err,
                          "checkpoint %.300s is foreign: written for spec hash %s, the summary "
                          "names %s",
                          dir, b->spec_hash, ex->spec_hash);
    if (b->generation < ex->generation)
        return sb_err_set(err,
                          "checkpoint %.300s is stale: it holds generation %" PRIu32
                          ", the summary names generation %" PRIu32,
                          dir, b->generation, ex->generation);
    return 0;
}

/* The segments of generation b->generation after the base, in order, into g; *nseg, *chain
 * the last. Checks the summary's hash at its segment. 0, or -1 + err. */
static int load_segments(const sb_ckptlog_io *io, const sb_ckptlog_summary *ex,
                         const sb_ckptlog_file *b, gather *g, uint32_t *nseg, uint64_t *chain,
                         uint64_t *bytes, sb_err *err)
{
    const char *dir = ex->location;
    int same = b->generation == ex->generation;
    uint64_t want = 0;
    (void)hex16_parse(ex->hash, &want);
    *chain = b->chain;
    *nseg = 0;
    if (same && ex->segments == 0 && *chain != want)
        return sb_err_set(err,
                          "checkpoint %.300s is stale or foreign: the base's hash %016" PRIx64
                          " is not the summary's %s",
                          dir, *chain, ex->hash);
    for (uint32_t s = 1;; s++) {
        char name[64];
        snprintf(name, sizeof name, "seg-%08" PRIx32 "-%08" PRIx32 ".sbck", b->generation, s);
        sb_ckptlog_file f;
        int r = load_file(io, dir, name, b, s, *chain, g, &f, bytes, err);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        *chain = f.chain;
        *nseg = s;
        if (same && s == ex->segments && *chain != want)
            return sb_err_set(err,
                              "checkpoint %.300s/%s is stale or foreign: its hash %016" PRIx64
                              " is not the summary's %s",
                              dir, name, *chain, ex->hash);
    }
    if (same && *nseg < ex->segments)
        return sb_err_set(err,
                          "checkpoint %.300s is stale: generation %" PRIu32 " has %" PRIu32
                          " segments, the summary names %" PRIu32 " (seg-%08" PRIx32 "-%08" PRIx32
                          ".sbck is missing)",
                          dir, b->generation, *nseg, ex->segments, b->generation, *nseg + 1);
    return 0;
}

int sb_ckptlog_load(const sb_ckptlog_summary *expect, sb_ckpt *out, sb_ckptlog_summary *found,
                    sb_err *err)
{
    return sb_ckptlog_load_io(expect, NULL, out, found, err);
}

int sb_ckptlog_load_io(const sb_ckptlog_summary *expect, const sb_ckptlog_io *io, sb_ckpt *out,
                       sb_ckptlog_summary *found, sb_err *err)
{
    memset(out, 0, sizeof *out);
    const char *dir = expect->location;
    uint32_t gen = 0;
    if (scan_dir(io, dir, 0, 0, &gen, err) != 0)
        return -1;
    if (gen == 0)
        return sb_err_set(err,
                          "checkpoint %.300s: no base file (base-*.sbck): the log is missing, "
                          "the summary names generation %" PRIu32,
                          dir, expect->generation);
    gather g = {0};
    sb_idmap_init(&g.idx, gathered_id, &g);
    sb_ckptlog_file b;
    char name[64];
    snprintf(name, sizeof name, "base-%08" PRIx32 ".sbck", gen);
    uint32_t nseg = 0;
    uint64_t chain = 0, base_bytes = 0, seg_bytes = 0;
    int r = load_file(io, dir, name, NULL, 0, 0, &g, &b, &base_bytes, err);
    uint64_t base_parts = g.nparts;
    if (r == 0)
        sb_err_set(err, "checkpoint %.300s/%s: removed while it was read", dir, name);
    int rc = r == 1 ? 0 : -1;
    if (rc == 0)
        rc = check_base(expect, &b, err);
    if (rc == 0)
        rc = load_segments(io, expect, &b, &g, &nseg, &chain, &seg_bytes, err);
    if (rc == 0) {
        out->committed_splits = sb_ranges_format(g.set, g.nset);
        out->ncommitted = (size_t)set_count(g.set, g.nset);
        if (out->committed_splits == NULL)
            rc = sb_err_set(err, "out of memory");
    }
    sb_idmap_free(&g.idx);
    free(g.set);
    if (rc != 0) {
        sb_sched_parts_free(g.parts, g.nparts);
        free(out->committed_splits);
        memset(out, 0, sizeof *out);
        return -1;
    }
    out->epoch = g.epoch > expect->epoch ? g.epoch : expect->epoch;
    out->parts = g.parts;
    out->nparts = g.nparts;
    memcpy(out->spec_hash, b.spec_hash, 17);
    memcpy(out->plan_hash, b.plan_hash, 17);
    if (found != NULL) {
        *found = *expect;
        memcpy(found->id, b.id, 17);
        found->epoch = out->epoch;
        found->generation = gen;
        found->segments = nseg;
        found->parts = g.nparts;
        found->splits = out->ncommitted;
        snprintf(found->hash, sizeof found->hash, "%016" PRIx64, chain);
        memcpy(found->spec_hash, b.spec_hash, 17);
        memcpy(found->plan_hash, b.plan_hash, 17);
        found->base_bytes = base_bytes;
        found->seg_bytes = seg_bytes;
        found->base_parts = base_parts;
    }
    return 0;
}

int sb_ckptlog_remove(const char *dir, sb_err *err)
{
    uint32_t g;
    if (scan_dir(NULL, dir, 0, 1, &g, err) != 0)
        return -1;
    if (rmdir(dir) != 0 && errno != ENOENT)
        return sb_err_set(err, "checkpoint: cannot remove %.300s: %s", dir, strerror(errno));
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash != NULL && slash != parent) {
        *slash = '\0';
        const char *base = strrchr(parent, '/');
        if (base != NULL && strcmp(base + 1, "_streambatch") == 0)
            (void)rmdir(parent); /* only when empty */
    }
    return 0;
}
