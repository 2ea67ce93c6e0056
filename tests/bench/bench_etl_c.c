/* bench_etl_c — the ETL benchmark's baseline: the jsonl filter + project of
 * scripts/bench-etl.sh written as one single-purpose C program, with no framework, to set
 * `streambatch run` beside (issue 16, goal 1).
 *
 *   bench_etl_c [--threads N] [--no-validate] FIELD VALUE KEEP[,KEEP...] OUT_DIR FILE...
 *
 * Keeps the records whose top-level FIELD is the string VALUE (the filter op's `eq` on a string)
 * and writes each as an object of only the KEEP members, in that order, values copied verbatim
 * (the project op), one line each. N threads (default 2), each taking the next input file:
 * read() in 4 MiB blocks into one reused buffer, split lines, for each line find the members and
 * copy the kept ones into an output buffer, write() it out in 4 MiB blocks to OUT_DIR/part-K.jsonl
 * (a temporary file, fsync'ed and renamed into place, as the engine's file sink does).
 *
 * The work is the engine's: blank lines (spaces, tabs, '\r') are skipped, a '\r' before '\n'
 * and a UTF-8 byte order mark at a file's start are dropped, every input byte is checked to be
 * UTF-8 and every record to be one strict RFC 8259 JSON value (no tree, no allocation: one pass
 * that validates and notes where the wanted top-level members are; the first occurrence of a
 * duplicated key counts; keys and the string compared are decoded when they hold escapes).
 * An invalid record stops the program with its file, line and byte offset. --no-validate
 * drops the UTF-8 and JSON checks (it still skips strings and nested values to find the
 * top-level members): the lower bound of the same job on input one trusts.
 *
 * Output: "RESULT etl_c seconds=S bytes=N records=N kept=N cpu_seconds=C" on stdout (wall
 * time from the first open to the last rename); exit status 1 with the error on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define BLOCK ((size_t)4 << 20)
#define MAX_KEEP 16
#define MAX_DEPTH 256

typedef struct {
    const char *p;
    size_t n;
} span;

/* What the program was asked, shared read-only by the threads. */
static span g_field;
static span g_value;
static span g_keep[MAX_KEEP];
static size_t g_nkeep;
static const char *g_out;
static bool g_validate = true;
static char **g_files;
static size_t g_nfiles;
static atomic_size_t g_next;
static atomic_uint_fast64_t g_bytes, g_records, g_kept;
static atomic_int g_failed;

/* ---- strict JSON, one pass ------------------------------------------------------------- */

typedef struct {
    const unsigned char *s, *e;
    const unsigned char *bad; /* where validation failed */
    const char *why;
} jp;

static const unsigned char *fail_at(jp *j, const unsigned char *p, const char *why)
{
    j->bad = p;
    j->why = why;
    return NULL;
}

static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *e)
{
    while (p < e && *p <= ' ' && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static inline bool is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

/* At '"': the byte after the closing quote; *esc when the string has escapes. */
static const unsigned char *j_str(jp *j, const unsigned char *p, bool *esc)
{
    const unsigned char *e = j->e;
    p++;
    *esc = false;
    for (;;) {
#if defined(__SSE2__)
        const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), c1f = _mm_set1_epi8(0x1f);
        while (e - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, q), _mm_cmpeq_epi8(x, bs)),
                                       _mm_cmpeq_epi8(_mm_max_epu8(x, c1f), c1f));
            int m = _mm_movemask_epi8(hit);
            if (m != 0) {
                p += __builtin_ctz((unsigned)m);
                break;
            }
            p += 16;
        }
        if (e - p < 16 && p < e && e - j->s >= 16) { /* the tail: the record's last 16 bytes */
            const unsigned char *t = e - 16;
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)t);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, q), _mm_cmpeq_epi8(x, bs)),
                                       _mm_cmpeq_epi8(_mm_max_epu8(x, c1f), c1f));
            unsigned m = (unsigned)_mm_movemask_epi8(hit) >> (p - t);
            p = m != 0 ? p + __builtin_ctz(m) : e;
        }
#endif
        while (p < e && *p != '"' && *p != '\\' && *p >= 0x20)
            p++;
        if (p >= e)
            return fail_at(j, p, "unterminated string");
        if (*p == '"')
            return p + 1;
        if (*p < 0x20)
            return fail_at(j, p, "control character in a string");
        *esc = true;
        if (++p >= e)
            return fail_at(j, p, "unterminated string");
        if (*p == 'u') {
            if (e - p < 5 || !is_hex(p[1]) || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]))
                return fail_at(j, p, "invalid \\u escape");
            p += 5;
        } else if (strchr("\"\\/bfnrt", *p) != NULL && *p != '\0') {
            p++;
        } else {
            return fail_at(j, p, "invalid escape");
        }
    }
}

/* The end of the digits at p, eight bytes per step (a byte is a digit when its high nibble is 3
 * and adding 6 keeps it so). */
static inline const unsigned char *skip_digits(const unsigned char *p, const unsigned char *e)
{
    while (e - p >= 8) {
        uint64_t w, hi = 0xF0F0F0F0F0F0F0F0ull, three = 0x3030303030303030ull;
        memcpy(&w, p, 8);
        uint64_t nd = ((w & hi) ^ three) | (((w + 0x0606060606060606ull) & hi) ^ three);
        if (nd != 0)
            return p + (__builtin_ctzll(nd) >> 3);
        p += 8;
    }
    while (p < e && *p >= '0' && *p <= '9')
        p++;
    return p;
}

static const unsigned char *j_num(jp *j, const unsigned char *p)
{
    const unsigned char *e = j->e;
    if (*p == '-')
        p++;
    if (p >= e || *p < '0' || *p > '9')
        return fail_at(j, p, "invalid number");
    if (*p == '0') {
        p++;
        if (p < e && *p >= '0' && *p <= '9')
            return fail_at(j, p, "leading zero");
    } else {
        p = skip_digits(p, e);
    }
    if (p < e && *p == '.') {
        const unsigned char *d = ++p;
        p = skip_digits(p, e);
        if (p == d)
            return fail_at(j, p, "invalid number");
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        const unsigned char *d = p;
        p = skip_digits(p, e);
        if (p == d)
            return fail_at(j, p, "invalid number");
    }
    return p;
}

static const unsigned char *j_value(jp *j, const unsigned char *p, int depth);

static const unsigned char *j_container(jp *j, const unsigned char *p, int depth)
{
    const unsigned char *e = j->e;
    bool obj = *p == '{';
    unsigned char close = obj ? '}' : ']';
    if (depth >= MAX_DEPTH)
        return fail_at(j, p, "nesting too deep");
    p = skip_ws(p + 1, e);
    if (p < e && *p == close)
        return p + 1;
    for (;;) {
        if (obj) {
            bool esc;
            if (p >= e || *p != '"')
                return fail_at(j, p, "expected a member name");
            if ((p = j_str(j, p, &esc)) == NULL)
                return NULL;
            p = skip_ws(p, e);
            if (p >= e || *p != ':')
                return fail_at(j, p, "expected ':'");
            p = skip_ws(p + 1, e);
        }
        if ((p = j_value(j, p, depth + 1)) == NULL)
            return NULL;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == close)
            return p + 1;
        return fail_at(j, p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static const unsigned char *j_value(jp *j, const unsigned char *p, int depth)
{
    const unsigned char *e = j->e;
    bool esc;
    if (p >= e)
        return fail_at(j, p, "expected a value");
    switch (*p) {
    case '{':
    case '[':
        return j_container(j, p, depth);
    case '"':
        return j_str(j, p, &esc);
    case 't':
        return e - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : fail_at(j, p, "invalid literal");
    case 'f':
        return e - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : fail_at(j, p, "invalid literal");
    case 'n':
        return e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : fail_at(j, p, "invalid literal");
    default:
        return j_num(j, p);
    }
}

/* --no-validate: the end of the value at p, skipping strings and nested values only. */
static const unsigned char *skip_string(const unsigned char *p, const unsigned char *e)
{
    p++;
    for (;;) {
#if defined(__SSE2__)
        const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
        while (e - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            int m = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, q), _mm_cmpeq_epi8(x, bs)));
            if (m != 0) {
                p += __builtin_ctz((unsigned)m);
                break;
            }
            p += 16;
        }
#endif
        while (p < e && *p != '"' && *p != '\\')
            p++;
        if (p >= e)
            return e;
        if (*p == '"')
            return p + 1;
        p += 2; /* an escape */
    }
}

static const unsigned char *skip_value(const unsigned char *p, const unsigned char *e)
{
    if (p < e && *p == '"')
        return skip_string(p, e);
    if (p < e && (*p == '{' || *p == '[')) {
        int depth = 0;
        while (p < e) {
            unsigned char c = *p;
            if (c == '"') {
                p = skip_string(p, e);
                continue;
            }
            p++;
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return p;
        }
        return p;
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\r' &&
           *p != '\n')
        p++;
    return p;
}

/* Decodes string text s[0..n) (between the quotes) when it has escapes, into out (cap bytes):
 * the length, or SIZE_MAX when it does not fit. \u escapes become UTF-8 (a lone surrogate
 * U+FFFD). */
static size_t unescape(const unsigned char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned cp = s[i];
        if (s[i] != '\\') {
            i++;
        } else if (s[i + 1] != 'u') {
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            cp = (unsigned char)to[strchr(from, s[i + 1]) - from];
            i += 2;
        } else {
            cp = (unsigned)strtoul(
                (const char[]){(char)s[i + 2], (char)s[i + 3], (char)s[i + 4], (char)s[i + 5], 0},
                NULL, 16);
            i += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
                unsigned lo = (unsigned)strtoul((const char[]){(char)s[i + 2], (char)s[i + 3],
                                                               (char)s[i + 4], (char)s[i + 5], 0},
                                                NULL, 16);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF)
                cp = 0xFFFD;
        }
        unsigned char u[4];
        size_t k;
        if (cp < 0x80) {
            u[0] = (unsigned char)cp, k = 1;
        } else if (cp < 0x800) {
            u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 0x3F)),
            k = 2;
        } else if (cp < 0x10000) {
            u[0] = (unsigned char)(0xE0 | cp >> 12);
            u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            u[2] = (unsigned char)(0x80 | (cp & 0x3F)), k = 3;
        } else {
            u[0] = (unsigned char)(0xF0 | cp >> 18);
            u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            u[3] = (unsigned char)(0x80 | (cp & 0x3F)), k = 4;
        }
        if (o + k > cap)
            return SIZE_MAX;
        memcpy(out + o, u, k);
        o += k;
    }
    return o;
}

/* Does the string text s[0..n) (between quotes; esc: it has escapes) equal want? */
static bool str_equals(const unsigned char *s, size_t n, bool esc, span want)
{
    if (!esc)
        return n == want.n && memcmp(s, want.p, n) == 0;
    char tmp[256];
    size_t k = unescape(s, n, tmp, sizeof tmp);
    return k == want.n && memcmp(tmp, want.p, k) == 0;
}

/* One record s[0..n): validates it (unless --no-validate) and finds the wanted top-level
 * members: found[0] is the filter's field, found[1..] the kept ones (p NULL when absent).
 * 0, or -1 with j->bad and j->why. *obj: the record is an object. */
static int scan_record(jp *j, const unsigned char *s, size_t n, span *found, bool *obj)
{
    const unsigned char *e = s + n, *p = skip_ws(s, e);
    j->s = s;
    j->e = e;
    *obj = false;
    for (size_t k = 0; k <= g_nkeep; k++)
        found[k].p = NULL;
    if (p >= e) {
        fail_at(j, p, "empty record");
        return -1;
    }
    if (*p != '{') {
        if (!g_validate)
            return 0;
        p = j_value(j, p, 0);
    } else {
        *obj = true;
        p = skip_ws(p + 1, e);
        if (p < e && *p == '}') {
            p++;
        } else {
            for (;;) {
                bool esc = false;
                if (p >= e || *p != '"') {
                    fail_at(j, p, "expected a member name");
                    return -1;
                }
                const unsigned char *ks = p + 1;
                if (g_validate) {
                    if ((p = j_str(j, p, &esc)) == NULL)
                        return -1;
                } else {
                    p = skip_string(p, e);
                    esc = memchr(ks, '\\', (size_t)(p - 1 - ks)) != NULL;
                }
                size_t kn = (size_t)(p - 1 - ks);
                p = skip_ws(p, e);
                if (p >= e || *p != ':') {
                    fail_at(j, p, "expected ':'");
                    return -1;
                }
                p = skip_ws(p + 1, e);
                const unsigned char *vs = p;
                p = g_validate ? j_value(j, p, 1) : skip_value(p, e);
                if (p == NULL)
                    return -1;
                for (size_t k = 0; k <= g_nkeep; k++) {
                    span want = k == 0 ? g_field : g_keep[k - 1];
                    if (found[k].p == NULL && str_equals(ks, kn, esc, want)) {
                        found[k].p = (const char *)vs;
                        found[k].n = (size_t)(p - vs);
                    }
                }
                p = skip_ws(p, e);
                if (p < e && *p == ',') {
                    p = skip_ws(p + 1, e);
                    continue;
                }
                if (p < e && *p == '}') {
                    p++;
                    break;
                }
                fail_at(j, p, "expected ',' or '}'");
                return -1;
            }
        }
    }
    if (p == NULL)
        return -1;
    p = skip_ws(p, e);
    if (g_validate && p != e) {
        fail_at(j, p, "data after the value");
        return -1;
    }
    return 0;
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */

/* The offset of the first byte of s[0..n) that is not valid UTF-8, or n. */
static size_t utf8_bad(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i + 16 <= n) {
            uint64_t a, b;
            memcpy(&a, s + i, 8);
            memcpy(&b, s + i + 8, 8);
            if (((a | b) & 0x8080808080808080ull) != 0)
                break;
            i += 16;
        }
        if (i >= n)
            break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return i;
        }
        if (n - i <= need || s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
        i += need + 1;
    }
    return n;
}

/* ---- one file -------------------------------------------------------------------------- */

typedef struct {
    int fd;
    char *buf;
    size_t len;
} outbuf;

static int out_flush(outbuf *o)
{
    size_t at = 0;
    while (at < o->len) {
        ssize_t k = write(o->fd, o->buf + at, o->len - at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        at += (size_t)k;
    }
    o->len = 0;
    return 0;
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* Filters and projects the lines of s[0..n) (whole lines; the last may lack '\n'), the first
 * of which is line number *line (1-based) of the file at byte offset off. */
static int do_lines(const char *path, const char *s, size_t n, uint64_t off, uint64_t *line,
                    outbuf *o, uint64_t *recs, uint64_t *kept)
{
    if (g_validate) {
        size_t bad = utf8_bad((const unsigned char *)s, n);
        if (bad < n) {
            fprintf(stderr, "bench_etl_c: %s: byte offset %llu: not valid UTF-8\n", path,
                    (unsigned long long)(off + bad));
            return -1;
        }
    }
    span found[MAX_KEEP + 1];
    jp j;
    size_t pos = 0;
    while (pos < n) {
        const char *nl = memchr(s + pos, '\n', n - pos);
        size_t end = nl != NULL ? (size_t)(nl - s) : n, len = end - pos;
        const char *rec = s + pos;
        pos = end + 1;
        (*line)++;
        if (len > 0 && rec[len - 1] == '\r')
            len--;
        if (blank(rec, len))
            continue;
        (*recs)++;
        bool obj;
        if (scan_record(&j, (const unsigned char *)rec, len, found, &obj) != 0) {
            fprintf(stderr,
                    "bench_etl_c: %s: line %llu (byte offset %llu) is not valid JSON: %s "
                    "at byte %zu of the record\n",
                    path, (unsigned long long)*line,
                    (unsigned long long)(off + (uint64_t)(rec - s)), j.why,
                    (size_t)((const char *)j.bad - rec));
            return -1;
        }
        span v = found[0];
        if (!obj || v.p == NULL || v.p[0] != '"')
            continue;
        bool esc = memchr(v.p + 1, '\\', v.n - 2) != NULL;
        if (!str_equals((const unsigned char *)v.p + 1, v.n - 2, esc, g_value))
            continue;
        (*kept)++;
        size_t need = 3;
        for (size_t k = 0; k < g_nkeep; k++)
            need += g_keep[k].n + 4 + (found[k + 1].p ? found[k + 1].n : 0);
        if (o->len + need > BLOCK && out_flush(o) != 0)
            return -1;
        char *w = o->buf + o->len, *w0 = w;
        *w++ = '{';
        for (size_t k = 0; k < g_nkeep; k++) {
            span f = found[k + 1];
            if (f.p == NULL)
                continue;
            if (w > w0 + 1)
                *w++ = ',';
            *w++ = '"';
            memcpy(w, g_keep[k].p, g_keep[k].n);
            w += g_keep[k].n;
            *w++ = '"';
            *w++ = ':';
            memcpy(w, f.p, f.n);
            w += f.n;
        }
        *w++ = '}';
        *w++ = '\n';
        o->len += (size_t)(w - w0);
    }
    return 0;
}

static int do_file(size_t idx, char *in, outbuf *o)
{
    const char *path = g_files[idx];
    char tmp[4096], final[4096];
    snprintf(tmp, sizeof tmp, "%s/.tmp-part-%zu.jsonl", g_out, idx);
    snprintf(final, sizeof final, "%s/part-%zu.jsonl", g_out, idx);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "bench_etl_c: %s: %s\n", path, strerror(errno));
        return -1;
    }
    o->fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    o->len = 0;
    if (o->fd < 0) {
        fprintf(stderr, "bench_etl_c: %s: %s\n", tmp, strerror(errno));
        close(fd);
        return -1;
    }
    size_t len = 0;
    uint64_t off = 0, line = 0, recs = 0, kept = 0, total = 0;
    int rc = 0;
    bool first = true;
    for (;;) {
        ssize_t k = read(fd, in + len, BLOCK - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            fprintf(stderr, "bench_etl_c: %s: %s\n", path, strerror(errno));
            rc = -1;
            break;
        }
        len += (size_t)k;
        total += (uint64_t)k;
        char *s = in;
        if (first && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3;
            len -= 3;
            off += 3;
        }
        first = false;
        bool eof = k == 0;
        const char *lnl = eof ? s + len - 1 : memrchr(s, '\n', len);
        if (lnl == NULL && len == BLOCK) {
            fprintf(stderr, "bench_etl_c: %s: a line longer than %zu bytes\n", path, BLOCK);
            rc = -1;
            break;
        }
        size_t use = lnl != NULL && len > 0 ? (size_t)(lnl - s) + 1 : 0;
        if (use > 0 && do_lines(path, s, use, off, &line, o, &recs, &kept) != 0) {
            rc = -1;
            break;
        }
        memmove(in, s + use, len - use);
        len -= use;
        off += use;
        if (eof)
            break;
    }
    close(fd);
    if (rc == 0 && (out_flush(o) != 0 || fsync(o->fd) != 0)) {
        fprintf(stderr, "bench_etl_c: %s: %s\n", tmp, strerror(errno));
        rc = -1;
    }
    close(o->fd);
    if (rc == 0 && rename(tmp, final) != 0) {
        fprintf(stderr, "bench_etl_c: %s: %s\n", final, strerror(errno));
        rc = -1;
    }
    if (rc != 0)
        unlink(tmp);
    atomic_fetch_add(&g_bytes, total);
    atomic_fetch_add(&g_records, recs);
    atomic_fetch_add(&g_kept, kept);
    return rc;
}

static void *thread_main(void *arg)
{
    (void)arg;
    char *in = malloc(BLOCK);
    outbuf o = {.buf = malloc(BLOCK + 65536)};
    if (in == NULL || o.buf == NULL) {
        fprintf(stderr, "bench_etl_c: out of memory\n");
        atomic_store(&g_failed, 1);
    }
    while (!atomic_load(&g_failed)) {
        size_t i = atomic_fetch_add(&g_next, 1);
        if (i >= g_nfiles)
            break;
        if (do_file(i, in, &o) != 0)
            atomic_store(&g_failed, 1);
    }
    free(in);
    free(o.buf);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int threads = 2, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc)
            threads = atoi(argv[++a]);
        else if (strcmp(argv[a], "--no-validate") == 0)
            g_validate = false;
        else
            break;
    }
    if (argc - a < 5 || threads < 1 || threads > 64) {
        fprintf(stderr, "usage: bench_etl_c [--threads N] [--no-validate] FIELD VALUE "
                        "KEEP[,KEEP...] OUT_DIR FILE...\n");
        return 2;
    }
    g_field = (span){argv[a], strlen(argv[a])};
    g_value = (span){argv[a + 1], strlen(argv[a + 1])};
    for (char *k = argv[a + 2], *c; k != NULL && g_nkeep < MAX_KEEP; k = c) {
        c = strchr(k, ',');
        if (c != NULL)
            *c++ = '\0';
        if (*k != '\0')
            g_keep[g_nkeep++] = (span){k, strlen(k)};
    }
    g_out = argv[a + 3];
    g_files = argv + a + 4;
    g_nfiles = (size_t)(argc - a - 4);
    if (mkdir(g_out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_etl_c: %s: %s\n", g_out, strerror(errno));
        return 1;
    }
    double t0 = now_s();
    pthread_t th[64];
    for (int i = 0; i < threads; i++)
        if (pthread_create(&th[i], NULL, thread_main, NULL) != 0) {
            fprintf(stderr, "bench_etl_c: cannot start a thread\n");
            return 1;
        }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double secs = now_s() - t0;
    if (atomic_load(&g_failed))
        return 1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    printf("RESULT etl_c seconds=%.4f bytes=%llu records=%llu kept=%llu cpu_seconds=%.4f\n", secs,
           (unsigned long long)atomic_load(&g_bytes), (unsigned long long)atomic_load(&g_records),
           (unsigned long long)atomic_load(&g_kept), cpu);
    return 0;
}
