/* json.c — strict one-pass JSON validation with top-level member lookup (see json.h). */
#include "worker/ops/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    const unsigned char *s;
    size_t n, i;
    char *msg;
    size_t msgcap;
} js;

const char *sb_op_json_type_name(sb_op_json_type t)
{
    switch (t) {
    case SB_OP_JSON_NULL:
        return "null";
    case SB_OP_JSON_BOOL:
        return "boolean";
    case SB_OP_JSON_NUMBER:
        return "number";
    case SB_OP_JSON_STRING:
        return "string";
    case SB_OP_JSON_ARRAY:
        return "array";
    case SB_OP_JSON_OBJECT:
        return "object";
    default:
        return "absent";
    }
}

static int fail(js *j, const char *what)
{
    if (j->msg != NULL && j->msgcap > 0) {
        if (j->i >= j->n)
            snprintf(j->msg, j->msgcap, "%s at the end (byte %zu)", what, j->i);
        else if (j->s[j->i] >= 0x21 && j->s[j->i] < 0x7f)
            snprintf(j->msg, j->msgcap, "%s at byte %zu ('%c')", what, j->i, j->s[j->i]);
        else
            snprintf(j->msg, j->msgcap, "%s at byte %zu (byte 0x%02x)", what, j->i, j->s[j->i]);
    }
    return -1;
}

static inline void ws(js *j)
{
    while (j->i < j->n) {
        unsigned char c = j->s[j->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        j->i++;
    }
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The offset of the first byte at or after i that ends a plain run inside a string: '"', '\\'
 * or a control character; n when there is none. 16 bytes per step with SSE2. */
static inline size_t plain_run(const unsigned char *s, size_t i, size_t n)
{
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), c1f = _mm_set1_epi8(0x1f);
    for (; i + 16 <= n; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bs)),
                                   _mm_cmpeq_epi8(_mm_max_epu8(x, c1f), c1f));
        int m = _mm_movemask_epi8(hit);
        if (m != 0)
            return i + (size_t)__builtin_ctz((unsigned)m);
    }
#endif
    while (i < n && s[i] != '"' && s[i] != '\\' && s[i] >= 0x20)
        i++;
    return i;
}

/* At '"': skips the string. *esc tells whether it has escapes. */
static int str(js *j, bool *esc)
{
    const unsigned char *s = j->s;
    size_t n = j->n;
    size_t i = j->i + 1;
    *esc = false;
    for (;;) {
        i = plain_run(s, i, n);
        if (i >= n) {
            j->i = i;
            return fail(j, "unterminated string");
        }
        if (s[i] == '"') {
            j->i = i + 1;
            return 0;
        }
        if (s[i] < 0x20) {
            j->i = i;
            return fail(j, "control character in a string (must be escaped)");
        }
        *esc = true;
        i++;
        if (i >= n) {
            j->i = i;
            return fail(j, "unterminated string");
        }
        switch (s[i]) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            i++;
            break;
        case 'u':
            for (size_t k = 1; k <= 4; k++)
                if (i + k >= n || hexval(s[i + k]) < 0) {
                    j->i = i + k < n ? i + k : n;
                    return fail(j, "invalid \\u escape (needs 4 hex digits)");
                }
            i += 5;
            break;
        default:
            j->i = i;
            return fail(j, "invalid escape in a string");
        }
    }
}

static int digits(js *j)
{
    size_t i0 = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9')
        j->i++;
    return j->i > i0 ? 0 : fail(j, "invalid number (expected a digit)");
}

static int num(js *j)
{
    if (j->s[j->i] == '-')
        j->i++;
    if (j->i >= j->n)
        return fail(j, "invalid number (expected a digit)");
    if (j->s[j->i] == '0') {
        j->i++;
        if (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9')
            return fail(j, "invalid number (leading zero)");
    } else if (digits(j) != 0) {
        return -1;
    }
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        if (digits(j) != 0)
            return -1;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-'))
            j->i++;
        if (digits(j) != 0)
            return -1;
    }
    return 0;
}

static int lit(js *j, const char *w, size_t len)
{
    if (j->n - j->i < len || memcmp(j->s + j->i, w, len) != 0)
        return fail(j, "invalid literal (expected true, false or null)");
    j->i += len;
    return 0;
}

/* Decodes one escape at p[0..n) (p[0] == '\\'); writes up to 4 UTF-8 bytes to out, returns the
 * number of input bytes used and *olen the output bytes. Input is validated by str(). */
static size_t unescape_one(const unsigned char *p, size_t n, unsigned char out[4], size_t *olen)
{
    unsigned cp;
    switch (p[1]) {
    case 'b':
        out[0] = '\b';
        *olen = 1;
        return 2;
    case 'f':
        out[0] = '\f';
        *olen = 1;
        return 2;
    case 'n':
        out[0] = '\n';
        *olen = 1;
        return 2;
    case 'r':
        out[0] = '\r';
        *olen = 1;
        return 2;
    case 't':
        out[0] = '\t';
        *olen = 1;
        return 2;
    case 'u':
        break;
    default: /* '"', '\\', '/' */
        out[0] = p[1];
        *olen = 1;
        return 2;
    }
    cp = (unsigned)(hexval(p[2]) << 12 | hexval(p[3]) << 8 | hexval(p[4]) << 4 | hexval(p[5]));
    size_t used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (n >= 12 && p[6] == '\\' && p[7] == 'u') {
            int h[4] = {hexval(p[8]), hexval(p[9]), hexval(p[10]), hexval(p[11])};
            if (h[0] >= 0 && h[1] >= 0 && h[2] >= 0 && h[3] >= 0) {
                unsigned lo = (unsigned)(h[0] << 12 | h[1] << 8 | h[2] << 4 | h[3]);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    used = 12;
                } else {
                    cp = 0xFFFD;
                }
            } else {
                cp = 0xFFFD;
            }
        } else {
            cp = 0xFFFD;
        }
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        cp = 0xFFFD;
    }
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        *olen = 1;
    } else if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        *olen = 2;
    } else if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        *olen = 3;
    } else {
        out[0] = (unsigned char)(0xF0 | cp >> 18);
        out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (unsigned char)(0x80 | (cp & 0x3F));
        *olen = 4;
    }
    return used;
}

size_t sb_op_json_unescape(const char *p_, size_t n, char *dst, size_t cap)
{
    const unsigned char *p = (const unsigned char *)p_;
    if (n < 2)
        return 0;
    p++; /* the quotes */
    n -= 2;
    size_t out = 0, i = 0;
    while (i < n) {
        const unsigned char *bs = memchr(p + i, '\\', n - i);
        size_t run = bs != NULL ? (size_t)(bs - (p + i)) : n - i;
        if (out < cap)
            memcpy(dst + out, p + i, run < cap - out ? run : cap - out);
        out += run;
        i += run;
        if (bs == NULL)
            break;
        unsigned char u[4];
        size_t ol;
        i += unescape_one(p + i, n - i, u, &ol);
        for (size_t k = 0; k < ol; k++, out++)
            if (out < cap)
                dst[out] = (char)u[k];
    }
    return out;
}

/* Does the raw key k[0..kn) (between the quotes) decode to name[0..nn)? */
static bool key_equals(const unsigned char *k, size_t kn, const char *name, size_t nn)
{
    size_t i = 0, o = 0;
    while (i < kn) {
        if (k[i] != '\\') {
            if (o >= nn || (unsigned char)name[o] != k[i])
                return false;
            i++;
            o++;
            continue;
        }
        unsigned char u[4];
        size_t ol;
        i += unescape_one(k + i, kn - i, u, &ol);
        if (o + ol > nn || memcmp(name + o, u, ol) != 0)
            return false;
        o += ol;
    }
    return o == nn;
}

static int value(js *j, int depth, sb_op_json_type *t, const sb_op_json_key *keys, size_t nkeys,
                 sb_op_json_span *found);

static int object(js *j, int depth, const sb_op_json_key *keys, size_t nkeys,
                  sb_op_json_span *found)
{
    j->i++; /* '{' */
    ws(j);
    if (j->i < j->n && j->s[j->i] == '}') {
        j->i++;
        return 0;
    }
    for (;;) {
        if (j->i >= j->n || j->s[j->i] != '"')
            return fail(j, "expected a member name (a string)");
        size_t ks = j->i + 1;
        bool esc;
        if (str(j, &esc) != 0)
            return -1;
        size_t ke = j->i - 1;
        ws(j);
        if (j->i >= j->n || j->s[j->i] != ':')
            return fail(j, "expected ':' after a member name");
        j->i++;
        ws(j);
        size_t vs = j->i;
        sb_op_json_type vt;
        if (value(j, depth + 1, &vt, NULL, 0, NULL) != 0)
            return -1;
        for (size_t k = 0; k < nkeys; k++) {
            if (found[k].type != SB_OP_JSON_NONE)
                continue;
            bool eq =
                esc ? key_equals(j->s + ks, ke - ks, keys[k].name, keys[k].len)
                    : (ke - ks == keys[k].len && memcmp(j->s + ks, keys[k].name, keys[k].len) == 0);
            if (eq) {
                found[k].p = (const char *)j->s + vs;
                found[k].n = j->i - vs;
                found[k].type = vt;
            }
        }
        ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            ws(j);
            continue;
        }
        if (j->i < j->n && j->s[j->i] == '}') {
            j->i++;
            return 0;
        }
        return fail(j, "expected ',' or '}' in an object");
    }
}

static int array(js *j, int depth)
{
    j->i++; /* '[' */
    ws(j);
    if (j->i < j->n && j->s[j->i] == ']') {
        j->i++;
        return 0;
    }
    for (;;) {
        sb_op_json_type vt;
        if (value(j, depth + 1, &vt, NULL, 0, NULL) != 0)
            return -1;
        ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            ws(j);
            continue;
        }
        if (j->i < j->n && j->s[j->i] == ']') {
            j->i++;
            return 0;
        }
        return fail(j, "expected ',' or ']' in an array");
    }
}

/* At the first byte of a value (no whitespace before it). */
static int value(js *j, int depth, sb_op_json_type *t, const sb_op_json_key *keys, size_t nkeys,
                 sb_op_json_span *found)
{
    if (j->i >= j->n)
        return fail(j, "expected a value");
    bool esc;
    switch (j->s[j->i]) {
    case '{':
        if (depth >= SB_OP_JSON_MAX_DEPTH)
            return fail(j, "nesting deeper than 256 levels");
        *t = SB_OP_JSON_OBJECT;
        return object(j, depth, keys, nkeys, found);
    case '[':
        if (depth >= SB_OP_JSON_MAX_DEPTH)
            return fail(j, "nesting deeper than 256 levels");
        *t = SB_OP_JSON_ARRAY;
        return array(j, depth);
    case '"':
        *t = SB_OP_JSON_STRING;
        return str(j, &esc);
    case 't':
        *t = SB_OP_JSON_BOOL;
        return lit(j, "true", 4);
    case 'f':
        *t = SB_OP_JSON_BOOL;
        return lit(j, "false", 5);
    case 'n':
        *t = SB_OP_JSON_NULL;
        return lit(j, "null", 4);
    default:
        if (j->s[j->i] == '-' || (j->s[j->i] >= '0' && j->s[j->i] <= '9')) {
            *t = SB_OP_JSON_NUMBER;
            return num(j);
        }
        return fail(j, "expected a value");
    }
}

int sb_op_json_scan(const char *s, size_t n, const sb_op_json_key *keys, size_t nkeys,
                    sb_op_json_span *found, sb_op_json_type *top, char *msg, size_t msgcap)
{
    js j = {.s = (const unsigned char *)s, .n = n, .msg = msg, .msgcap = msgcap};
    for (size_t k = 0; k < nkeys; k++)
        found[k] = (sb_op_json_span){0};
    if (top != NULL)
        *top = SB_OP_JSON_NONE;
    sb_op_json_type t = SB_OP_JSON_NONE;
    ws(&j);
    if (j.i >= n)
        return fail(&j, "empty record (no JSON value)");
    int rc = value(&j, 0, &t, keys, nkeys, found);
    if (rc == 0) {
        ws(&j);
        if (j.i < n)
            rc = fail(&j, "unexpected data after the JSON value");
    }
    if (rc != 0) {
        for (size_t k = 0; k < nkeys; k++)
            found[k] = (sb_op_json_span){0};
        return -1;
    }
    if (top != NULL)
        *top = t;
    return 0;
}

/* Clinger's fast path: a decimal with at most 15 significant digits m and a power of ten e
 * with |e| <= 22 is m * 10^e or m / 10^-e, both exact doubles, so one correctly rounded
 * operation gives the same double as strtod. false when the number is outside that case. */
static bool fast_decimal(const char *p, size_t n, double *d)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    size_t k = 0;
    bool neg = n > 0 && p[0] == '-';
    if (neg)
        k++;
    uint64_t m = 0;
    int sig = 0, e = 0;
    for (; k < n && p[k] >= '0' && p[k] <= '9'; k++) {
        if (m == 0 && p[k] == '0')
            continue;
        m = m * 10 + (uint64_t)(p[k] - '0');
        if (++sig > 15)
            return false;
    }
    if (k < n && p[k] == '.') {
        for (k++; k < n && p[k] >= '0' && p[k] <= '9'; k++) {
            e--;
            if (m == 0 && p[k] == '0')
                continue;
            m = m * 10 + (uint64_t)(p[k] - '0');
            if (++sig > 15)
                return false;
        }
    }
    if (k < n && (p[k] == 'e' || p[k] == 'E')) {
        k++;
        bool eneg = k < n && p[k] == '-';
        if (k < n && (p[k] == '-' || p[k] == '+'))
            k++;
        int x = 0;
        for (; k < n && p[k] >= '0' && p[k] <= '9'; k++) {
            x = x * 10 + (p[k] - '0');
            if (x > 1000)
                return false;
        }
        e += eneg ? -x : x;
    }
    if (k != n)
        return false;
    double v;
    if (m == 0)
        v = 0.0;
    else if (e >= 0 && e <= 22)
        v = (double)m * pow10[e];
    else if (e < 0 && e >= -22)
        v = (double)m / pow10[-e];
    else
        return false;
    *d = neg ? -v : v;
    return true;
}

void sb_op_json_number(const char *p, size_t n, double *d, int64_t *i, bool *is_int)
{
    *is_int = false;
    *i = 0;
    size_t k = 0;
    bool neg = n > 0 && p[0] == '-';
    k = neg ? 1 : 0;
    uint64_t mag = 0;
    bool ok = k < n;
    for (; ok && k < n; k++) {
        if (p[k] < '0' || p[k] > '9') {
            ok = false;
            break;
        }
        unsigned dg = (unsigned)(p[k] - '0');
        if (mag > (UINT64_MAX - dg) / 10) {
            ok = false;
            break;
        }
        mag = mag * 10 + dg;
    }
    if (ok && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX)) {
        *is_int = true;
        *i = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
        *d = neg && mag == 0 ? -0.0 : (double)*i;
        return;
    }
    if (fast_decimal(p, n, d))
        return;
    char stack[128];
    char *buf = n < sizeof stack ? stack : malloc(n + 1);
    if (buf == NULL) { /* out of memory: parse a prefix (still the right magnitude) */
        buf = stack;
        n = sizeof stack - 1;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
    *d = strtod(buf, NULL);
    if (buf != stack)
        free(buf);
}
