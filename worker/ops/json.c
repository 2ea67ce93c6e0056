/* json.c — strict one-pass JSON validation of jsonl records with top-level member lookup (see
 * json.h), for the filter and project ops: no tree and no allocation; every result points into
 * the record. */

#include "worker/ops/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/pct.h"

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
    cp = (unsigned)(sb_hex_digit(p[2]) << 12 | sb_hex_digit(p[3]) << 8 | sb_hex_digit(p[4]) << 4 |
                    sb_hex_digit(p[5]));
    size_t used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (n >= 12 && p[6] == '\\' && p[7] == 'u') {
            int h[4] = {sb_hex_digit(p[8]), sb_hex_digit(p[9]), sb_hex_digit(p[10]),
                        sb_hex_digit(p[11])};
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

/* ---- validation ------------------------------------------------------------------------
 *
 * The scanner walks the record with a pointer and no recursion: scalars inline, nested arrays
 * and objects in one loop with a stack of their kinds (at most SB_OP_JSON_MAX_DEPTH). A failure
 * returns NULL after noting where and what in a jfail; sb_op_json_scan() turns that into the
 * message. Strings are skipped 16 bytes per step with SSE2. */

typedef struct {
    const unsigned char *base; /* the record's first byte (reads never go below it) */
    const unsigned char *at;   /* where it failed */
    const char *what;
} jfail;

static const unsigned char *failed(jfail *f, const unsigned char *at, const char *what)
{
    f->at = at;
    f->what = what;
    return NULL;
}

static inline const unsigned char *ws(const unsigned char *p, const unsigned char *e)
{
    while (p < e && *p <= ' ' && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

#if defined(__SSE2__)
/* Bit i set when x's byte i ends a plain run. */
static inline unsigned stops16(__m128i x)
{
    const __m128i quote = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), c1f = _mm_set1_epi8(0x1f);
    __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bs)),
                               _mm_cmpeq_epi8(_mm_max_epu8(x, c1f), c1f));
    return (unsigned)_mm_movemask_epi8(hit);
}
#endif

/* The first byte at or after p that ends a plain run inside a string: '"', '\\' or a control
 * character; e when there is none. 16 bytes per step with SSE2; the last step reads the
 * record's last 16 bytes (never before `base`, the record's start) and ignores those before p. */
static inline const unsigned char *plain_run(const unsigned char *p, const unsigned char *e,
                                             const unsigned char *base)
{
#if defined(__SSE2__)
    while (e - p >= 16) {
        unsigned m = stops16(_mm_loadu_si128((const __m128i *)(const void *)p));
        if (m != 0)
            return p + __builtin_ctz(m);
        p += 16;
    }
    if (p < e && e - base >= 16) {
        const unsigned char *q = e - 16;
        unsigned m = stops16(_mm_loadu_si128((const __m128i *)(const void *)q)) >> (p - q);
        return m != 0 ? p + __builtin_ctz(m) : e;
    }
#else
    (void)base;
#endif
    while (p < e && *p != '"' && *p != '\\' && *p >= 0x20)
        p++;
    return p;
}

/* An escape's tail, p at the byte after '\\': the byte after the escape, or NULL. */
static const unsigned char *escape(const unsigned char *p, const unsigned char *e, jfail *f)
{
    if (p >= e)
        return failed(f, p, "unterminated string");
    switch (*p) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return p + 1;
    case 'u':
        for (size_t k = 1; k <= 4; k++)
            if (p + k >= e || sb_hex_digit(p[k]) < 0)
                return failed(f, p + k < e ? p + k : e, "invalid \\u escape (needs 4 hex digits)");
        return p + 5;
    default:
        return failed(f, p, "invalid escape in a string");
    }
}

/* At '"': the byte after the closing quote, or NULL. *esc tells whether it has escapes. */
__attribute__((always_inline)) static inline const unsigned char *
str(const unsigned char *p, const unsigned char *e, bool *esc, jfail *f)
{
    p++;
    *esc = false;
    for (;;) {
        p = plain_run(p, e, f->base);
        if (p >= e)
            return failed(f, e, "unterminated string");
        if (*p == '"')
            return p + 1;
        if (*p < 0x20)
            return failed(f, p, "control character in a string (must be escaped)");
        *esc = true;
        if ((p = escape(p + 1, e, f)) == NULL)
            return NULL;
    }
}

/* The digits at p: the byte after them, or NULL when there are none. Eight bytes per step: a
 * byte is a digit when its high nibble is 3 and adding 6 keeps it so (a carry out of a byte that
 * is not a digit can only disturb the bytes after it, which do not count). */
static inline const unsigned char *digits(const unsigned char *p, const unsigned char *e, jfail *f)
{
    const unsigned char *p0 = p;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t hi = 0xF0F0F0F0F0F0F0F0ull, three = 0x3030303030303030ull;
    while (e - p >= 8) {
        uint64_t w;
        memcpy(&w, p, sizeof w);
        uint64_t nd = ((w & hi) ^ three) | (((w + 0x0606060606060606ull) & hi) ^ three);
        if (nd != 0) {
            p += __builtin_ctzll(nd) >> 3;
            return p > p0 ? p : failed(f, p, "invalid number (expected a digit)");
        }
        p += 8;
    }
#endif
    while (p < e && *p >= '0' && *p <= '9')
        p++;
    return p > p0 ? p : failed(f, p, "invalid number (expected a digit)");
}

static inline const unsigned char *num(const unsigned char *p, const unsigned char *e, jfail *f)
{
    if (*p == '-')
        p++;
    if (p >= e)
        return failed(f, p, "invalid number (expected a digit)");
    if (*p == '0') {
        p++;
        if (p < e && *p >= '0' && *p <= '9')
            return failed(f, p, "invalid number (leading zero)");
    } else if ((p = digits(p, e, f)) == NULL) {
        return NULL;
    }
    if (p < e && *p == '.' && (p = digits(p + 1, e, f)) == NULL)
        return NULL;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        return digits(p, e, f);
    }
    return p;
}

static inline const unsigned char *lit(const unsigned char *p, const unsigned char *e,
                                       const char *w, size_t len, jfail *f)
{
    if ((size_t)(e - p) < len || memcmp(p, w, len) != 0)
        return failed(f, p, "invalid literal (expected true, false or null)");
    return p + len;
}

/* A value that is not an array or object, at p (no whitespace before it). */
static inline const unsigned char *scalar(const unsigned char *p, const unsigned char *e,
                                          sb_op_json_type *t, jfail *f)
{
    bool esc;
    if (p >= e)
        return failed(f, p, "expected a value");
    switch (*p) {
    case '"':
        *t = SB_OP_JSON_STRING;
        return str(p, e, &esc, f);
    case 't':
        *t = SB_OP_JSON_BOOL;
        return lit(p, e, "true", 4, f);
    case 'f':
        *t = SB_OP_JSON_BOOL;
        return lit(p, e, "false", 5, f);
    case 'n':
        *t = SB_OP_JSON_NULL;
        return lit(p, e, "null", 4, f);
    default:
        if (*p == '-' || (*p >= '0' && *p <= '9')) {
            *t = SB_OP_JSON_NUMBER;
            return num(p, e, f);
        }
        return failed(f, p, "expected a value");
    }
}

/* An array or object at p ('[' or '{') that is nested `depth` levels deep (0: the record
 * itself): the byte after it, or NULL. One loop, the kinds of the open containers on a stack. */
static const unsigned char *container(const unsigned char *p, const unsigned char *e, int depth,
                                      jfail *f)
{
    unsigned char open[SB_OP_JSON_MAX_DEPTH]; /* closing byte of each open container */
    int top = 0;
    bool esc;
    sb_op_json_type t;
    for (;;) {
        /* p is at '[' or '{' */
        if (depth + top >= SB_OP_JSON_MAX_DEPTH)
            return failed(f, p, "nesting deeper than 256 levels");
        open[top++] = *p == '{' ? '}' : ']';
        p = ws(p + 1, e);
        if (p < e && *p == open[top - 1]) {
            p++;
            goto closed;
        }
    next: /* a member or element starts at p */
        if (open[top - 1] == '}') {
            if (p >= e || *p != '"')
                return failed(f, p, "expected a member name (a string)");
            if ((p = str(p, e, &esc, f)) == NULL)
                return NULL;
            p = ws(p, e);
            if (p >= e || *p != ':')
                return failed(f, p, "expected ':' after a member name");
            p = ws(p + 1, e);
        }
        if (p < e && (*p == '{' || *p == '['))
            continue; /* opens a nested one */
        if ((p = scalar(p, e, &t, f)) == NULL)
            return NULL;
    after: /* a member or element ended at p */
        p = ws(p, e);
        if (p < e && *p == ',') {
            p = ws(p + 1, e);
            goto next;
        }
        if (p < e && *p == open[top - 1]) {
            p++;
            goto closed;
        }
        return failed(f, p,
                      open[top - 1] == '}' ? "expected ',' or '}' in an object"
                                           : "expected ',' or ']' in an array");
    closed:
        if (--top == 0)
            return p;
        goto after;
    }
}

/* Any value at p (no whitespace before it), nested `depth` levels deep. */
static inline const unsigned char *value(const unsigned char *p, const unsigned char *e, int depth,
                                         sb_op_json_type *t, jfail *f)
{
    if (p < e && (*p == '{' || *p == '[')) {
        *t = *p == '{' ? SB_OP_JSON_OBJECT : SB_OP_JSON_ARRAY;
        return container(p, e, depth, f);
    }
    return scalar(p, e, t, f);
}

/* Does the raw key k[0..kn) (between the quotes, no escapes) equal name[0..nn)? */
static inline bool key_is(const unsigned char *k, size_t kn, const char *name, size_t nn)
{
    if (kn != nn)
        return false;
    for (size_t i = 0; i < kn; i++)
        if (k[i] != (unsigned char)name[i])
            return false;
    return true;
}

/* The record's top-level object at p ('{'), noting where the wanted members' values are. */
static const unsigned char *top_object(const unsigned char *p, const unsigned char *e,
                                       const sb_op_json_key *keys, size_t nkeys,
                                       sb_op_json_span *found, jfail *f)
{
    size_t left = nkeys; /* wanted members not found yet */
    p = ws(p + 1, e);
    if (p < e && *p == '}')
        return p + 1;
    for (;;) {
        if (p >= e || *p != '"')
            return failed(f, p, "expected a member name (a string)");
        const unsigned char *ks = p + 1;
        bool esc;
        if ((p = str(p, e, &esc, f)) == NULL)
            return NULL;
        size_t kn = (size_t)(p - 1 - ks);
        p = ws(p, e);
        if (p >= e || *p != ':')
            return failed(f, p, "expected ':' after a member name");
        p = ws(p + 1, e);
        const unsigned char *vs = p;
        sb_op_json_type vt;
        if ((p = value(p, e, 1, &vt, f)) == NULL)
            return NULL;
        for (size_t k = 0; left > 0 && k < nkeys; k++) {
            if (found[k].type != SB_OP_JSON_NONE)
                continue;
            if (esc ? key_equals(ks, kn, keys[k].name, keys[k].len)
                    : key_is(ks, kn, keys[k].name, keys[k].len)) {
                found[k] = (sb_op_json_span){(const char *)vs, (size_t)(p - vs), vt};
                left--;
            }
        }
        p = ws(p, e);
        if (p < e && *p == ',') {
            p = ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}')
            return p + 1;
        return failed(f, p, "expected ',' or '}' in an object");
    }
}

int sb_op_json_scan(const char *s, size_t n, const sb_op_json_key *keys, size_t nkeys,
                    sb_op_json_span *found, sb_op_json_type *top, char *msg, size_t msgcap)
{
    const unsigned char *b = (const unsigned char *)s, *e = b + n, *p;
    jfail f = {b, NULL, NULL};
    for (size_t k = 0; k < nkeys; k++)
        found[k] = (sb_op_json_span){0};
    if (top != NULL)
        *top = SB_OP_JSON_NONE;
    sb_op_json_type t = SB_OP_JSON_NONE;
    p = ws(b, e);
    if (p >= e) {
        p = failed(&f, p, "empty record (no JSON value)");
    } else if (*p == '{') {
        t = SB_OP_JSON_OBJECT;
        p = top_object(p, e, keys, nkeys, found, &f);
    } else {
        p = value(p, e, 0, &t, &f);
    }
    if (p != NULL && (p = ws(p, e)) < e)
        p = failed(&f, p, "unexpected data after the JSON value");
    if (p == NULL) {
        for (size_t k = 0; k < nkeys; k++)
            found[k] = (sb_op_json_span){0};
        if (msg != NULL && msgcap > 0) {
            size_t at = (size_t)(f.at - b);
            if (at >= n)
                snprintf(msg, msgcap, "%s at the end (byte %zu)", f.what, at);
            else if (b[at] >= 0x21 && b[at] < 0x7f)
                snprintf(msg, msgcap, "%s at byte %zu ('%c')", f.what, at, b[at]);
            else
                snprintf(msg, msgcap, "%s at byte %zu (byte 0x%02x)", f.what, at, b[at]);
        }
        return -1;
    }
    if (top != NULL)
        *top = t;
    return 0;
}

/* ---- finding members of a record that was validated before ----------------------------- */

#if defined(__SSE2__)
/* Bit i set when x's byte i is '"' or '\\'. */
static inline unsigned quotes16(__m128i x)
{
    const __m128i quote = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
    return (unsigned)_mm_movemask_epi8(
        _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bs)));
}
#endif

/* The first '"' or '\\' at or after p (e when none), reading as plain_run() does. */
static inline const unsigned char *quote_run(const unsigned char *p, const unsigned char *e,
                                             const unsigned char *base)
{
#if defined(__SSE2__)
    while (e - p >= 16) {
        unsigned m = quotes16(_mm_loadu_si128((const __m128i *)(const void *)p));
        if (m != 0)
            return p + __builtin_ctz(m);
        p += 16;
    }
    if (p < e && e - base >= 16) {
        const unsigned char *q = e - 16;
        unsigned m = quotes16(_mm_loadu_si128((const __m128i *)(const void *)q)) >> (p - q);
        return m != 0 ? p + __builtin_ctz(m) : e;
    }
#else
    (void)base;
#endif
    while (p < e && *p != '"' && *p != '\\')
        p++;
    return p;
}

/* At '"' of a valid string: the byte after its closing quote. */
static inline const unsigned char *skip_str(const unsigned char *p, const unsigned char *e,
                                            const unsigned char *base, bool *esc)
{
    *esc = false;
    for (p++;;) {
        p = quote_run(p, e, base);
        if (p >= e)
            return e;
        if (*p == '"')
            return p + 1;
        *esc = true;
        p += 2; /* the escaped byte cannot end the string (\u's digits cannot either) */
    }
}

/* The end of the valid value at p, and its type. */
static inline const unsigned char *skip_value(const unsigned char *p, const unsigned char *e,
                                              const unsigned char *base, sb_op_json_type *t)
{
    bool esc;
    switch (*p) {
    case '"':
        *t = SB_OP_JSON_STRING;
        return skip_str(p, e, base, &esc);
    case '{':
    case '[':
        *t = *p == '{' ? SB_OP_JSON_OBJECT : SB_OP_JSON_ARRAY;
        for (size_t depth = 0; p < e;) {
            if (*p == '"') {
                p = skip_str(p, e, base, &esc);
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return e;
    case 't':
    case 'f':
        *t = SB_OP_JSON_BOOL;
        return p + (*p == 't' ? 4 : 5) <= e ? p + (*p == 't' ? 4 : 5) : e;
    case 'n':
        *t = SB_OP_JSON_NULL;
        return p + 4 <= e ? p + 4 : e;
    default: /* a number: digits, then maybe a fraction or an exponent */
        *t = SB_OP_JSON_NUMBER;
        if (*p == '-')
            p++;
        for (;;) {
            const unsigned char *d = digits(p, e, &(jfail){0});
            p = d != NULL ? d : p;
            if (p >= e || (*p != '.' && *p != 'e' && *p != 'E' && *p != '+' && *p != '-'))
                return p;
            p++;
        }
    }
}

sb_op_json_type sb_op_json_find(const char *s, size_t n, const sb_op_json_key *keys, size_t nkeys,
                                sb_op_json_span *found)
{
    const unsigned char *b = (const unsigned char *)s, *e = b + n, *p = ws(b, e);
    for (size_t k = 0; k < nkeys; k++)
        found[k] = (sb_op_json_span){0};
    if (p >= e)
        return SB_OP_JSON_NONE;
    sb_op_json_type t;
    if (*p != '{') {
        skip_value(p, e, b, &t);
        return t;
    }
    size_t left = nkeys;
    p = ws(p + 1, e);
    while (left > 0 && p < e && *p == '"') {
        const unsigned char *ks = p + 1;
        bool esc;
        p = skip_str(p, e, b, &esc);
        size_t kn = (size_t)(p - 1 - ks);
        p = ws(p, e);
        if (p >= e || *p != ':')
            break;
        p = ws(p + 1, e);
        if (p >= e)
            break;
        const unsigned char *vs = p;
        sb_op_json_type vt;
        p = skip_value(p, e, b, &vt);
        for (size_t k = 0; k < nkeys; k++) {
            if (found[k].type != SB_OP_JSON_NONE)
                continue;
            if (esc ? key_equals(ks, kn, keys[k].name, keys[k].len)
                    : key_is(ks, kn, keys[k].name, keys[k].len)) {
                found[k] = (sb_op_json_span){(const char *)vs, (size_t)(p - vs), vt};
                left--;
            }
        }
        p = ws(p, e);
        if (p >= e || *p != ',')
            break;
        p = ws(p + 1, e);
    }
    return SB_OP_JSON_OBJECT;
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
