/* keys.c — what the all-to-all ops compare and hash (xchg.h): the canonical encoding of JSON
 * values (numbers by value, 1 == 1.0; strings by decoded bytes; objects with sorted members),
 * the key fields of a record, a row hash over any schema, and a hash set of byte strings. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/exchange/xchg.h"

int xbuf_reserve(xbuf *b, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (np == NULL)
            return -1;
        b->p = np;
        b->cap = cap;
    }
    return 0;
}

int xbuf_put(xbuf *b, const void *p, size_t n)
{
    if (xbuf_reserve(b, n) != 0)
        return -1;
    if (n > 0)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

void xbuf_free(xbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int put_tag_u32(xbuf *b, char tag, uint32_t v)
{
    char t[5] = {tag};
    memcpy(t + 1, &v, 4);
    return xbuf_put(b, t, 5);
}

/* ---- the canonical encoding of valid JSON text ------------------------------------------- */

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string starting at p (its opening quote). */
static const char *skip_string(const char *p, const char *e)
{
    for (p++; p < e && *p != '"'; p++)
        if (*p == '\\')
            p++;
    return p < e ? p + 1 : e;
}

const char *xjson_skip(const char *p, const char *e)
{
    p = skip_ws(p, e);
    if (p < e && *p == '"')
        return skip_string(p, e);
    if (p < e && (*p == '{' || *p == '[')) {
        int depth = 0;
        for (; p < e; p++) {
            if (*p == '"') {
                p = skip_string(p, e) - 1;
            } else if (*p == '{' || *p == '[') {
                depth++;
            } else if ((*p == '}' || *p == ']') && --depth == 0) {
                return p + 1;
            }
        }
        return e;
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' &&
           *p != '\r')
        p++;
    return p;
}

static int enc_number(const char *p, size_t n, xbuf *out)
{
    double d;
    int64_t i;
    bool is_int;
    sb_op_json_number(p, n, &d, &i, &is_int);
    char t[9];
    if (!is_int && d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
        i = (int64_t)d; /* 1.0, 1e0 and -0.0 are the integers they equal */
        is_int = true;
    }
    t[0] = is_int ? 'i' : 'd';
    if (is_int)
        memcpy(t + 1, &i, 8);
    else
        memcpy(t + 1, &d, 8);
    return xbuf_put(out, t, 9);
}

static int enc_string(const char *p, size_t n, xbuf *out)
{
    size_t len = sb_op_json_unescape(p, n, NULL, 0);
    if (put_tag_u32(out, 's', (uint32_t)len) != 0 || xbuf_reserve(out, len) != 0)
        return -1;
    sb_op_json_unescape(p, n, out->p + out->n, len);
    out->n += len;
    return 0;
}

static int enc_value(const char *p, const char *e, xbuf *out);

/* Members of the object at p, sorted by their decoded names (the encoding ignores order). */
static int enc_object(const char *p, const char *e, xbuf *out)
{
    xbuf tmp = {0};
    size_t *off = NULL, n = 0, cap = 0;
    int rc = -1;
    p = skip_ws(p + 1, e);
    while (p < e && *p == '"') {
        const char *ke = skip_string(p, e);
        if (n == cap) {
            size_t *no = realloc(off, (cap = cap ? cap * 2 : 8) * sizeof *off);
            if (no == NULL)
                goto done;
            off = no;
        }
        off[n++] = tmp.n;
        const char *v = skip_ws(skip_ws(ke, e) + 1, e); /* past the ':' */
        const char *ve = xjson_skip(v, e);
        if (enc_string(p, (size_t)(ke - p), &tmp) != 0 || enc_value(v, ve, &tmp) != 0)
            goto done;
        p = skip_ws(ve, e);
        if (p < e && *p == ',')
            p = skip_ws(p + 1, e);
    }
    /* insertion sort of the members by name (objects of records are small) */
    for (size_t i = 1; i < n; i++) {
        for (size_t k = i; k > 0; k--) {
            uint32_t la, lb;
            memcpy(&la, tmp.p + off[k - 1] + 1, 4);
            memcpy(&lb, tmp.p + off[k] + 1, 4);
            int c = memcmp(tmp.p + off[k - 1] + 5, tmp.p + off[k] + 5, la < lb ? la : lb);
            if (c < 0 || (c == 0 && la <= lb))
                break;
            size_t x = off[k];
            off[k] = off[k - 1];
            off[k - 1] = x;
        }
    }
    if (put_tag_u32(out, 'o', (uint32_t)n) != 0)
        goto done;
    for (size_t i = 0; i < n; i++) {
        size_t end = tmp.n;
        for (size_t k = 0; k < n; k++) /* the next member's start in tmp */
            if (off[k] > off[i] && off[k] < end)
                end = off[k];
        if (xbuf_put(out, tmp.p + off[i], end - off[i]) != 0)
            goto done;
    }
    rc = 0;
done:
    free(off);
    xbuf_free(&tmp);
    return rc;
}

static int enc_array(const char *p, const char *e, xbuf *out)
{
    size_t at = out->n;
    uint32_t n = 0;
    if (put_tag_u32(out, 'a', 0) != 0)
        return -1;
    p = skip_ws(p + 1, e);
    while (p < e && *p != ']') {
        const char *ve = xjson_skip(p, e);
        if (enc_value(p, ve, out) != 0)
            return -1;
        n++;
        p = skip_ws(ve, e);
        if (p < e && *p == ',')
            p = skip_ws(p + 1, e);
    }
    memcpy(out->p + at + 1, &n, 4);
    return 0;
}

static int enc_value(const char *p, const char *e, xbuf *out)
{
    p = skip_ws(p, e);
    while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        e--;
    if (p >= e)
        return xkey_null(out);
    switch (*p) {
    case '"':
        return enc_string(p, (size_t)(e - p), out);
    case '{':
        return enc_object(p, e, out);
    case '[':
        return enc_array(p, e, out);
    case 't':
        return xbuf_put(out, "T", 1);
    case 'f':
        return xbuf_put(out, "F", 1);
    case 'n':
        return xkey_null(out);
    default:
        return enc_number(p, (size_t)(e - p), out);
    }
}

int xkey_encode(const char *p, size_t n, xbuf *out)
{
    return enc_value(p, p + n, out);
}

int xkey_null(xbuf *out)
{
    return xbuf_put(out, "N", 1);
}

/* ---- hashes ------------------------------------------------------------------------------ */

uint64_t xhash(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 33; /* murmur3's finalizer: FNV's low bits alone are poor bucket numbers */
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h ? h : 1;
}

uint64_t xrow_hash(const sb_batch *b, size_t row, uint64_t seed)
{
    uint64_t h = seed;
    for (size_t ci = 0; ci < sb_batch_ncols(b); ci++) {
        const sb_column *c = sb_batch_column(b, ci);
        size_t n = 0;
        const void *v = NULL;
        unsigned char bit;
        if (!sb_column_valid(c, row)) {
            v = "\0null";
            n = 5;
        } else if (c->type == SB_TYPE_BINARY || c->type == SB_TYPE_UTF8) {
            v = sb_column_binary(c, row, &n);
        } else if (c->type == SB_TYPE_BOOL) {
            bit = sb_column_bool(c, row);
            v = &bit;
            n = 1;
        } else if (c->type == SB_TYPE_FIXED_LIST) {
            n = sb_type_width(c->child_type) * c->list_size;
            v = sb_column_list(c, row);
        } else {
            n = sb_type_width(c->type);
            v = (const char *)c->values + row * n;
        }
        h = xhash(v, n, h);
    }
    return h;
}

/* ---- key fields --------------------------------------------------------------------------- */

int xkeys_missing_null(const cJSON *missing)
{
    return cJSON_IsNull(missing) ||
           (cJSON_IsString(missing) && strcmp(missing->valuestring, "null") == 0);
}

int xkeys_parse(const cJSON *list, const cJSON *missing, const char *op, xkeys *ks, sb_err *err)
{
    memset(ks, 0, sizeof *ks);
    ks->missing_null = xkeys_missing_null(missing);
    if (list == NULL)
        return 0;
    if (!cJSON_IsArray(list))
        return sb_err_permanent(err, "op %s: the key fields must be a list of names", op);
    int n = cJSON_GetArraySize(list);
    ks->k = calloc(n > 0 ? (size_t)n : 1, sizeof *ks->k);
    if (ks->k == NULL)
        return sb_err_set(err, "out of memory");
    for (const cJSON *it = list->child; it != NULL; it = it->next) {
        if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
            return sb_err_permanent(err, "op %s: a key field must be a non-empty name", op);
        ks->k[ks->n].name = it->valuestring;
        ks->k[ks->n++].len = strlen(it->valuestring);
    }
    return 0;
}

void xkeys_free(xkeys *ks)
{
    free(ks->k);
    memset(ks, 0, sizeof *ks);
}

int xkeys_encode_found(const xkeys *ks, const char *op, size_t row, const sb_op_json_span *found,
                       xbuf *out, sb_err *err)
{
    for (size_t i = 0; i < ks->n; i++) {
        int rc;
        if (found[i].type == SB_OP_JSON_NONE) {
            if (!ks->missing_null)
                return sb_err_data(err,
                                   "%s: record %zu has no field %s (missingKey: null takes such "
                                   "records' key as null)",
                                   op, row, ks->k[i].name);
            rc = xkey_null(out);
        } else {
            rc = xkey_encode(found[i].p, found[i].n, out);
        }
        if (rc != 0)
            return sb_err_set(err, "out of memory");
    }
    return 0;
}

int xkeys_encode(const xkeys *ks, const char *op, const char *r, size_t len, size_t row,
                 sb_op_json_span *spans, xbuf *out, sb_err *err)
{
    sb_op_json_span local[16], *found = spans != NULL ? spans : local;
    if (spans == NULL && ks->n > 16)
        return sb_err_set(err, "op %s: more than 16 key fields", op);
    sb_op_json_type top;
    char msg[160];
    if (sb_op_json_scan(r, len, ks->k, ks->n, found, &top, msg, sizeof msg) != 0)
        return sb_err_data(err, "%s: record %zu is not valid JSON: %s", op, row, msg);
    if (ks->n == 0)
        return xkey_encode(r, len, out) == 0 ? 0 : sb_err_set(err, "out of memory");
    if (top != SB_OP_JSON_OBJECT)
        return sb_err_data(err, "%s: record %zu is a JSON %s, not an object", op, row,
                           sb_op_json_type_name(top));
    return xkeys_encode_found(ks, op, row, found, out, err);
}

/* ---- a hash set of byte strings ------------------------------------------------------------ */

static int xset_grow(xset *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    uint64_t *h = calloc(cap, sizeof *h);
    uint32_t *e = calloc(cap, sizeof *e);
    if (h == NULL || e == NULL) {
        free(h);
        free(e);
        return -1;
    }
    for (size_t i = 0; i < s->cap; i++) {
        if (s->hash[i] == 0)
            continue;
        size_t j = s->hash[i] & (cap - 1);
        while (h[j] != 0)
            j = (j + 1) & (cap - 1);
        h[j] = s->hash[i];
        e[j] = s->entry[i];
    }
    free(s->hash);
    free(s->entry);
    s->hash = h;
    s->entry = e;
    s->cap = cap;
    return 0;
}

const char *xset_key(const xset *s, size_t i, size_t *n)
{
    uint32_t len;
    memcpy(&len, s->keys.p + s->key_off[i], 4);
    *n = len;
    return s->keys.p + s->key_off[i] + 4;
}

long xset_find_add(xset *s, const void *p, size_t n, uint64_t h, int *added)
{
    *added = 0;
    if ((s->n + 1) * 4 > s->cap * 3 && xset_grow(s) != 0)
        return -1;
    size_t j = h & (s->cap - 1);
    for (; s->hash[j] != 0; j = (j + 1) & (s->cap - 1)) {
        size_t kn;
        const char *k = xset_key(s, s->entry[j], &kn);
        if (s->hash[j] == h && kn == n && memcmp(k, p, n) == 0)
            return (long)s->entry[j];
    }
    if (s->n == s->capent) {
        size_t cap = s->capent ? s->capent * 2 : 64;
        size_t *no = realloc(s->key_off, cap * sizeof *no);
        if (no == NULL)
            return -1;
        s->key_off = no;
        s->capent = cap;
    }
    uint32_t len = (uint32_t)n;
    s->key_off[s->n] = s->keys.n;
    if (xbuf_put(&s->keys, &len, 4) != 0 || xbuf_put(&s->keys, p, n) != 0)
        return -1;
    s->hash[j] = h;
    s->entry[j] = (uint32_t)s->n;
    *added = 1;
    return (long)s->n++;
}

long xset_find(const xset *s, const void *p, size_t n, uint64_t h)
{
    for (size_t j = h & (s->cap - 1); s->cap > 0 && s->hash[j] != 0; j = (j + 1) & (s->cap - 1)) {
        size_t kn;
        const char *k = xset_key(s, s->entry[j], &kn);
        if (s->hash[j] == h && kn == n && memcmp(k, p, n) == 0)
            return (long)s->entry[j];
    }
    return -1;
}

uint64_t xset_bytes(const xset *s)
{
    return s->cap * (sizeof *s->hash + sizeof *s->entry) + s->keys.cap +
           s->capent * sizeof *s->key_off;
}

void xset_clear(xset *s)
{
    if (s->hash != NULL)
        memset(s->hash, 0, s->cap * sizeof *s->hash);
    s->n = 0;
    s->keys.n = 0;
}

void xset_free(xset *s)
{
    free(s->hash);
    free(s->entry);
    free(s->key_off);
    xbuf_free(&s->keys);
    memset(s, 0, sizeof *s);
}
