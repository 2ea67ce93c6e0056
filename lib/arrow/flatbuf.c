/* flatbuf.c — the FlatBuffers wire format for Arrow IPC metadata (see flatbuf.h): a writer that
 * lays tables, vectors and strings out front to back, and a reader that checks every offset,
 * size and alignment before it reads. The writer owns its growing buffer; the reader copies
 * nothing. */

#include "arrow/flatbuf.h"

#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "FlatBuffers are little-endian and this code stores scalars in host order"
#endif

/* ---- writing ---------------------------------------------------------------------------- */

static bool grow(sb_fbw *w, size_t more)
{
    if (w->oom)
        return false;
    if (w->cap - w->len >= more)
        return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap - w->len < more) {
        if (cap > SIZE_MAX / 2) {
            w->oom = true;
            return false;
        }
        cap *= 2;
    }
    uint8_t *p = realloc(w->p, cap);
    if (p == NULL) {
        w->oom = true;
        return false;
    }
    w->p = p;
    w->cap = cap;
    return true;
}

static size_t put(sb_fbw *w, const void *d, size_t n)
{
    size_t at = w->len;
    if (!grow(w, n))
        return at;
    if (d != NULL)
        memcpy(w->p + w->len, d, n);
    else
        memset(w->p + w->len, 0, n);
    w->len += n;
    return at;
}

void sb_fbw_pad(sb_fbw *w, size_t align)
{
    size_t r = w->len % align;
    if (r != 0)
        put(w, NULL, align - r);
}

/* Pads until len % m == want. */
static void pad_to(sb_fbw *w, size_t m, size_t want)
{
    while (!w->oom && w->len % m != want)
        put(w, NULL, 1);
}

static void store_u32(sb_fbw *w, size_t at, uint32_t v)
{
    if (!w->oom && at + 4 <= w->len)
        memcpy(w->p + at, &v, 4);
}

size_t sb_fbw_begin(sb_fbw *w)
{
    w->len = 0;
    return put(w, NULL, 4);
}

void sb_fbw_ref_to(sb_fbw *w, size_t slot, size_t target)
{
    store_u32(w, slot, (uint32_t)(target - slot));
}

size_t sb_fbw_table(sb_fbw *w, const sb_fb_field *f, size_t n, size_t *slot)
{
    /* table layout: the vtable offset (4 bytes) at the table's start, then the fields by size,
     * largest first, with the table placed so that 8-byte fields land on multiples of 8 */
    uint16_t off[64] = {0};
    if (n > 64) {
        w->oom = true;
        return 0;
    }
    uint16_t at = 4;
    for (unsigned sz = 8; sz >= 1; sz /= 2)
        for (size_t i = 0; i < n; i++)
            if (f[i].size == sz) {
                off[i] = at;
                at = (uint16_t)(at + sz);
            }
    uint16_t vt[2 + 64];
    vt[0] = (uint16_t)(4 + 2 * n);
    vt[1] = at;
    memcpy(vt + 2, off, 2 * n);
    sb_fbw_pad(w, 2);
    size_t vpos = put(w, vt, 4 + 2 * n);
    pad_to(w, 8, 4);
    size_t t = put(w, NULL, at);
    if (w->oom)
        return 0;
    int32_t so = (int32_t)(t - vpos);
    memcpy(w->p + t, &so, 4);
    for (size_t i = 0; i < n; i++) {
        if (f[i].size == 0)
            continue;
        if (f[i].ref) {
            if (slot != NULL)
                slot[i] = t + off[i];
            continue;
        }
        memcpy(w->p + t + off[i], &f[i].value, f[i].size); /* little-endian: the low bytes */
    }
    return t;
}

size_t sb_fbw_ref_vector(sb_fbw *w, size_t n)
{
    sb_fbw_pad(w, 4);
    uint32_t c = (uint32_t)n;
    size_t at = put(w, &c, 4);
    put(w, NULL, 4 * n);
    return at;
}

size_t sb_fbw_struct_vector(sb_fbw *w, const void *items, size_t n, size_t size)
{
    pad_to(w, 8, 4);
    uint32_t c = (uint32_t)n;
    size_t at = put(w, &c, 4);
    put(w, items, n * size);
    return at;
}

size_t sb_fbw_string(sb_fbw *w, const char *s, size_t n)
{
    sb_fbw_pad(w, 4);
    uint32_t c = (uint32_t)n;
    size_t at = put(w, &c, 4);
    put(w, s, n);
    put(w, NULL, 1);
    return at;
}

void sb_fbw_free(sb_fbw *w)
{
    free(w->p);
    *w = (sb_fbw){0};
}

/* ---- reading ---------------------------------------------------------------------------- */

static const sb_fbt absent = {0, 0, 0, 0};

static uint16_t ld16(const sb_fbr *r, size_t at)
{
    uint16_t v;
    memcpy(&v, r->b + at, 2);
    return v;
}

static uint32_t ld32(const sb_fbr *r, size_t at)
{
    uint32_t v;
    memcpy(&v, r->b + at, 4);
    return v;
}

int64_t sb_fbr_load_i64(const sb_fbr *r, size_t at)
{
    int64_t v;
    memcpy(&v, r->b + at, 8);
    return v;
}

static void set_bad(sb_fbr *r, const char *why)
{
    if (r->bad == NULL)
        r->bad = why;
}

/* The table at pos, checked. */
static sb_fbt table_at(sb_fbr *r, size_t pos)
{
    if (r->bad)
        return absent;
    if (pos == 0 || pos % 4 != 0 || pos > r->n || r->n - pos < 4) {
        set_bad(r, "a table offset is outside the metadata or misaligned");
        return absent;
    }
    int32_t so;
    memcpy(&so, r->b + pos, 4);
    int64_t vt = (int64_t)pos - (int64_t)so;
    if (vt < 0 || vt % 2 != 0 || (uint64_t)vt > r->n - 4) {
        set_bad(r, "a vtable offset is outside the metadata or misaligned");
        return absent;
    }
    sb_fbt t = {pos, (size_t)vt, ld16(r, (size_t)vt), ld16(r, (size_t)vt + 2)};
    if (t.vsize < 4 || t.vsize % 2 != 0 || t.vsize > r->n - t.vt || t.tsize < 4 ||
        t.tsize > r->n - pos) {
        set_bad(r, "a vtable or table size is out of bounds");
        return absent;
    }
    return t;
}

sb_fbt sb_fbr_root(sb_fbr *r)
{
    if (r->n < 8) {
        set_bad(r, "the metadata is too short to hold a message");
        return absent;
    }
    return table_at(r, ld32(r, 0));
}

/* The position of field id in t, after checking it holds `size` bytes; 0 when absent. */
static size_t field(sb_fbr *r, sb_fbt t, unsigned id, size_t size)
{
    if (r->bad || t.pos == 0 || 4 + 2 * (size_t)id + 2 > t.vsize)
        return 0;
    uint16_t off = ld16(r, t.vt + 4 + 2 * (size_t)id);
    if (off == 0)
        return 0;
    if (off < 4 || (size_t)off + size > t.tsize) {
        set_bad(r, "a field lies outside its table");
        return 0;
    }
    if ((t.pos + off) % size != 0) {
        set_bad(r, "a field is misaligned");
        return 0;
    }
    return t.pos + off;
}

uint8_t sb_fbr_u8(sb_fbr *r, sb_fbt t, unsigned id, uint8_t def)
{
    size_t at = field(r, t, id, 1);
    return at ? r->b[at] : def;
}

int16_t sb_fbr_i16(sb_fbr *r, sb_fbt t, unsigned id, int16_t def)
{
    size_t at = field(r, t, id, 2);
    return at ? (int16_t)ld16(r, at) : def;
}

int32_t sb_fbr_i32(sb_fbr *r, sb_fbt t, unsigned id, int32_t def)
{
    size_t at = field(r, t, id, 4);
    return at ? (int32_t)ld32(r, at) : def;
}

int64_t sb_fbr_i64(sb_fbr *r, sb_fbt t, unsigned id, int64_t def)
{
    size_t at = field(r, t, id, 8);
    return at ? sb_fbr_load_i64(r, at) : def;
}

/* Where the reference stored at `at` points (0 + bad when outside the buffer). */
static size_t deref(sb_fbr *r, size_t at)
{
    uint32_t off = ld32(r, at);
    if (off == 0 || off > r->n - at) {
        set_bad(r, "an offset points outside the metadata");
        return 0;
    }
    return at + off;
}

sb_fbt sb_fbr_table(sb_fbr *r, sb_fbt t, unsigned id)
{
    size_t at = field(r, t, id, 4);
    if (at == 0)
        return absent;
    size_t to = deref(r, at);
    return to ? table_at(r, to) : absent;
}

/* The vector at pos: checks its count and elements fit. */
static size_t vector_at(sb_fbr *r, size_t pos, size_t elem, size_t *count)
{
    *count = 0;
    if (pos % 4 != 0 || pos > r->n || r->n - pos < 4) {
        set_bad(r, "a vector lies outside the metadata or is misaligned");
        return 0;
    }
    size_t c = ld32(r, pos);
    if (c > (r->n - pos - 4) / elem) {
        set_bad(r, "a vector is longer than the metadata");
        return 0;
    }
    if (elem == 8 || elem == 16) {
        if ((pos + 4) % 8 != 0) {
            set_bad(r, "a vector of structs is misaligned");
            return 0;
        }
    }
    *count = c;
    return pos + 4;
}

size_t sb_fbr_vector(sb_fbr *r, sb_fbt t, unsigned id, size_t elem, size_t *count)
{
    *count = 0;
    size_t at = field(r, t, id, 4);
    if (at == 0)
        return 0;
    size_t to = deref(r, at);
    return to ? vector_at(r, to, elem, count) : 0;
}

sb_fbt sb_fbr_table_at(sb_fbr *r, size_t at, size_t i)
{
    if (r->bad || at == 0)
        return absent;
    size_t to = deref(r, at + 4 * i);
    return to ? table_at(r, to) : absent;
}

const char *sb_fbr_string(sb_fbr *r, sb_fbt t, unsigned id, size_t *len)
{
    *len = 0;
    size_t at = field(r, t, id, 4);
    if (at == 0)
        return NULL;
    size_t to = deref(r, at);
    size_t c;
    size_t p = to ? vector_at(r, to, 1, &c) : 0;
    if (p == 0)
        return NULL;
    *len = c;
    return (const char *)r->b + p;
}
