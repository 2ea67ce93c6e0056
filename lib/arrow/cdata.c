/* cdata.c — the Arrow C Data Interface both ways (see cdata.h): exporting an opened batch as a
 * "+s" struct array with zero copies, and viewing an imported struct array as partition columns
 * (sb_arrow_view). Owns the exported structs (freed by their release callbacks) and a view's
 * field table and re-aligned bitmaps; never the column data. */

#include "arrow/cdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sb_arrow_format(sb_type t, uint32_t list_size, char buf[16])
{
    switch (t) {
    case SB_TYPE_BOOL:
        return "b";
    case SB_TYPE_INT8:
        return "c";
    case SB_TYPE_INT16:
        return "s";
    case SB_TYPE_INT32:
        return "i";
    case SB_TYPE_INT64:
        return "l";
    case SB_TYPE_UINT8:
        return "C";
    case SB_TYPE_UINT16:
        return "S";
    case SB_TYPE_UINT32:
        return "I";
    case SB_TYPE_UINT64:
        return "L";
    case SB_TYPE_FLOAT32:
        return "f";
    case SB_TYPE_FLOAT64:
        return "g";
    case SB_TYPE_BINARY:
        return "z";
    case SB_TYPE_UTF8:
        return "u";
    case SB_TYPE_FIXED_LIST:
        snprintf(buf, 16, "+w:%u", (unsigned)list_size);
        return buf;
    default:
        return NULL;
    }
}

/* Arrow's format of a logical type: date32 (days) and timestamps without a time zone, in the
 * same order as sb_logical. */
static const char *const logical_formats[] = {NULL, "tdD", "tsm:", "tsu:", "tsn:"};

/* Every node (schema or array) owns one allocation holding its children's structs, the
 * pointers to them, and (schema) its strings or (array) its buffer pointers. A parent's
 * release releases the children that are still unreleased (the consumer may have moved some
 * out), then frees its allocation. */

static void release_schema(struct ArrowSchema *s)
{
    for (int64_t i = 0; i < s->n_children; i++)
        if (s->children[i]->release != NULL)
            s->children[i]->release(s->children[i]);
    free(s->private_data);
    s->release = NULL;
}

static int schema_init(struct ArrowSchema *s, const char *format, const char *name, int64_t flags,
                       size_t n)
{
    size_t fl = strlen(format) + 1, nl = strlen(name) + 1;
    uint8_t *m = malloc(n * (sizeof(struct ArrowSchema) + sizeof(struct ArrowSchema *)) + fl + nl);
    if (m == NULL)
        return -1;
    struct ArrowSchema *kids = (struct ArrowSchema *)(void *)m;
    struct ArrowSchema **ptrs = (struct ArrowSchema **)(void *)(kids + n);
    char *f = (char *)(ptrs + n);
    memcpy(f, format, fl);
    memcpy(f + fl, name, nl);
    for (size_t i = 0; i < n; i++) {
        kids[i].release = NULL;
        ptrs[i] = &kids[i];
    }
    *s = (struct ArrowSchema){.format = f,
                              .name = f + fl,
                              .metadata = NULL,
                              .flags = flags,
                              .n_children = (int64_t)n,
                              .children = n > 0 ? ptrs : NULL,
                              .dictionary = NULL,
                              .release = release_schema,
                              .private_data = m};
    return 0;
}

static void release_array(struct ArrowArray *a)
{
    for (int64_t i = 0; i < a->n_children; i++)
        if (a->children[i]->release != NULL)
            a->children[i]->release(a->children[i]);
    free(a->private_data);
    a->release = NULL;
}

static int array_init(struct ArrowArray *a, int64_t length, int64_t null_count, size_t nbuf,
                      const void *const *bufs, size_t n)
{
    uint8_t *m = malloc(n * (sizeof(struct ArrowArray) + sizeof(struct ArrowArray *)) +
                        nbuf * sizeof(void *));
    if (m == NULL)
        return -1;
    struct ArrowArray *kids = (struct ArrowArray *)(void *)m;
    struct ArrowArray **ptrs = (struct ArrowArray **)(void *)(kids + n);
    const void **b = (const void **)(ptrs + n);
    for (size_t i = 0; i < nbuf; i++)
        b[i] = bufs[i];
    for (size_t i = 0; i < n; i++) {
        kids[i].release = NULL;
        ptrs[i] = &kids[i];
    }
    *a = (struct ArrowArray){.length = length,
                             .null_count = null_count,
                             .offset = 0,
                             .n_buffers = (int64_t)nbuf,
                             .n_children = (int64_t)n,
                             .buffers = b,
                             .children = n > 0 ? ptrs : NULL,
                             .dictionary = NULL,
                             .release = release_array,
                             .private_data = m};
    return 0;
}

static int export_schema(const sb_batch *b, struct ArrowSchema *out)
{
    size_t n = sb_batch_ncols(b);
    if (schema_init(out, "+s", "", 0, n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const sb_column *c = sb_batch_column(b, i);
        char fbuf[16], cbuf[16];
        const char *fmt = c->logical != SB_LOGICAL_NONE
                              ? logical_formats[c->logical]
                              : sb_arrow_format(c->type, c->list_size, fbuf);
        bool list = c->type == SB_TYPE_FIXED_LIST;
        struct ArrowSchema *kid = out->children[i];
        if (schema_init(kid, fmt, c->name, c->nullable ? ARROW_FLAG_NULLABLE : 0, list) != 0)
            goto fail;
        if (list && schema_init(kid->children[0], sb_arrow_format(c->child_type, 0, cbuf), "item",
                                0, 0) != 0)
            goto fail;
    }
    return 0;
fail:
    out->release(out);
    return -1;
}

static int export_array(const sb_batch *b, struct ArrowArray *out)
{
    size_t n = sb_batch_ncols(b);
    const void *none[1] = {NULL};
    if (array_init(out, (int64_t)sb_batch_rows(b), 0, 1, none, n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const sb_column *c = sb_batch_column(b, i);
        struct ArrowArray *kid = out->children[i];
        int64_t len = (int64_t)c->length, nulls = (int64_t)c->null_count;
        int rc;
        if (c->type == SB_TYPE_BINARY || c->type == SB_TYPE_UTF8) {
            const void *bufs[3] = {c->validity, c->offsets, c->values};
            rc = array_init(kid, len, nulls, 3, bufs, 0);
        } else if (c->type == SB_TYPE_FIXED_LIST) {
            const void *bufs[1] = {c->validity};
            const void *vals[2] = {NULL, c->values};
            rc = array_init(kid, len, nulls, 1, bufs, 1);
            if (rc == 0)
                rc = array_init(kid->children[0], len * (int64_t)c->list_size, 0, 2, vals, 0);
        } else {
            const void *bufs[2] = {c->validity, c->values};
            rc = array_init(kid, len, nulls, 2, bufs, 0);
        }
        if (rc != 0) {
            out->release(out);
            return -1;
        }
    }
    return 0;
}

int sb_batch_export(const sb_batch *b, struct ArrowSchema *schema, struct ArrowArray *array,
                    sb_err *err)
{
    if (b == NULL)
        return sb_err_set(err, "arrow export: NULL batch");
    if (schema != NULL && export_schema(b, schema) != 0)
        return sb_err_set(err, "arrow export: out of memory");
    if (array != NULL && export_array(b, array) != 0) {
        if (schema != NULL)
            schema->release(schema);
        return sb_err_set(err, "arrow export: out of memory");
    }
    return 0;
}

/* ---- importing -------------------------------------------------------------------------- */

/* A format into its column type; `lg` gets the logical type (a timestamp's time zone, after
 * the colon, is dropped like the Parquet source's isAdjustedToUTC). */
static int parse_format(const char *f, sb_type *t, sb_type *child, uint32_t *list, sb_logical *lg)
{
    static const struct {
        const char *f;
        sb_type t;
    } simple[] = {{"b", SB_TYPE_BOOL},    {"c", SB_TYPE_INT8},    {"s", SB_TYPE_INT16},
                  {"i", SB_TYPE_INT32},   {"l", SB_TYPE_INT64},   {"C", SB_TYPE_UINT8},
                  {"S", SB_TYPE_UINT16},  {"I", SB_TYPE_UINT32},  {"L", SB_TYPE_UINT64},
                  {"f", SB_TYPE_FLOAT32}, {"g", SB_TYPE_FLOAT64}, {"z", SB_TYPE_BINARY},
                  {"u", SB_TYPE_UTF8}};
    *child = 0;
    *list = 0;
    *lg = SB_LOGICAL_NONE;
    for (unsigned l = SB_LOGICAL_DATE; l <= SB_LOGICAL_TS_NANOS; l++) {
        const char *lf = logical_formats[l];
        if (l == SB_LOGICAL_DATE ? strcmp(f, lf) == 0 : strncmp(f, lf, 4) == 0) {
            *t = l == SB_LOGICAL_DATE ? SB_TYPE_INT32 : SB_TYPE_INT64;
            *lg = (sb_logical)l;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++)
        if (strcmp(f, simple[i].f) == 0) {
            *t = simple[i].t;
            return 0;
        }
    if (strncmp(f, "+w:", 3) == 0) {
        char *end;
        unsigned long n = strtoul(f + 3, &end, 10);
        if (*end != '\0' || n == 0 || n > UINT32_MAX || f[3] < '0' || f[3] > '9')
            return -1;
        *t = SB_TYPE_FIXED_LIST;
        *list = (uint32_t)n;
        return 0;
    }
    return -1;
}

/* A bitmap's bits [off, off+n) starting at bit 0: the bitmap itself when off is a multiple of
 * 8, else a shifted copy kept in the view. NULL bitmap stays NULL. */
static int bits_at(sb_arrow_view *v, const void *bitmap, size_t off, size_t n, const uint8_t **out)
{
    *out = NULL;
    if (bitmap == NULL)
        return 0;
    const uint8_t *b = bitmap;
    if (off % 8 == 0) {
        *out = b + off / 8;
        return 0;
    }
    void **ns = realloc(v->scratch, (v->nscratch + 1) * sizeof *ns);
    if (ns == NULL)
        return -1;
    v->scratch = ns;
    uint8_t *c = calloc((n + 7) / 8 + 1, 1);
    if (c == NULL)
        return -1;
    v->scratch[v->nscratch++] = c;
    for (size_t i = 0; i < n; i++)
        if ((b[(off + i) >> 3] >> ((off + i) & 7)) & 1)
            c[i >> 3] |= (uint8_t)(1u << (i & 7));
    *out = c;
    return 0;
}

void sb_arrow_view_close(sb_arrow_view *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->nscratch; i++)
        free(v->scratch[i]);
    free(v->scratch);
    free(v->fields);
    free(v->cols);
    memset(v, 0, sizeof *v);
}

/* Points column c (n rows from row base of child array ca, of type t) at its values, and its
 * offsets for binary and utf8. Returns why the buffers cannot be viewed, or NULL. */
static const char *view_values(sb_arrow_view *v, const struct ArrowSchema *cs,
                               const struct ArrowArray *ca, sb_column *c, sb_type t, uint32_t ls,
                               size_t base, size_t n)
{
    const char *bad = NULL;
    if (t == SB_TYPE_BINARY || t == SB_TYPE_UTF8) {
        const int32_t *off = ca->buffers[1];
        if (off == NULL || (ca->buffers[2] == NULL && n > 0 && off[base + n] != off[base])) {
            bad = "no offsets or data buffer";
        } else {
            for (size_t r = 0; r < n && bad == NULL; r++)
                if (off[base + r] < 0 || off[base + r + 1] < off[base + r])
                    bad = "offsets that decrease";
            c->offsets = off + base;
            c->values = ca->buffers[2] ? ca->buffers[2] : "";
            c->values_len = (size_t)(off[base + n] - off[base]);
        }
    } else if (t == SB_TYPE_BOOL) {
        const uint8_t *vals;
        if (ca->buffers[1] == NULL && n > 0)
            bad = "no values buffer";
        else if (bits_at(v, ca->buffers[1], base, n, &vals) != 0)
            bad = "out of memory";
        else
            c->values = vals, c->values_len = (n + 7) / 8;
    } else if (t == SB_TYPE_FIXED_LIST) {
        const struct ArrowSchema *ks = cs->n_children == 1 ? cs->children[0] : NULL;
        const struct ArrowArray *ka = ca->n_children == 1 ? ca->children[0] : NULL;
        sb_type kt, kk;
        uint32_t kl;
        sb_logical klg;
        if (ks == NULL || ka == NULL || ks->format == NULL ||
            parse_format(ks->format, &kt, &kk, &kl, &klg) != 0 || kt < SB_TYPE_INT8 ||
            kt > SB_TYPE_FLOAT64 || ka->n_buffers != 2 || ka->null_count > 0 || ka->offset < 0 ||
            (ka->buffers[1] == NULL && n > 0) ||
            (uint64_t)ka->length + (uint64_t)ka->offset <
                ((uint64_t)base + n) * ls + (uint64_t)ka->offset) {
            bad = "a fixed-size list needs one numeric child without nulls, long enough";
        } else {
            c->child_type = kt;
            size_t w = sb_type_width(kt);
            c->values = (const uint8_t *)ka->buffers[1] + ((size_t)ka->offset + base * ls) * w;
            c->values_len = n * ls * w;
        }
    } else {
        size_t w = sb_type_width(t);
        if (ca->buffers[1] == NULL && n > 0)
            bad = "no values buffer";
        else
            c->values = (const uint8_t *)ca->buffers[1] + base * w, c->values_len = n * w;
    }
    return bad;
}

/* Column i of the struct array a (schema s) into v->cols[i] and v->fields[i], without copying:
 * a supported format, the buffer count it needs, enough rows, the validity bitmap (re-aligned by
 * bits_at when the offset is not a multiple of 8) and the values. -1 with err set. */
static int view_column(sb_arrow_view *v, const struct ArrowSchema *s, const struct ArrowArray *a,
                       size_t i, sb_err *err)
{
    const struct ArrowSchema *cs = s->children[i];
    const struct ArrowArray *ca = a->children[i];
    const char *name = cs && cs->name ? cs->name : "";
    sb_type t, ct;
    uint32_t ls;
    sb_logical lg = SB_LOGICAL_NONE;
    if (cs == NULL || ca == NULL || cs->format == NULL ||
        parse_format(cs->format, &t, &ct, &ls, &lg) != 0 || cs->dictionary != NULL)
        return sb_err_set(err, "arrow: column %zu \"%.64s\": unsupported format \"%.32s\"", i, name,
                          cs && cs->format ? cs->format : "(null)");
    int64_t need_buf = t == SB_TYPE_BINARY || t == SB_TYPE_UTF8 ? 3
                       : t == SB_TYPE_FIXED_LIST                ? 1
                                                                : 2;
    if (ca->n_buffers != need_buf || ca->offset < 0 || ca->length < 0 ||
        (uint64_t)a->offset + (uint64_t)a->length > (uint64_t)ca->length)
        return sb_err_set(err,
                          "arrow: column %zu \"%.64s\": %lld buffers (want %lld), length "
                          "%lld, offset %lld for %lld rows",
                          i, name, (long long)ca->n_buffers, (long long)need_buf,
                          (long long)ca->length, (long long)ca->offset, (long long)a->length);
    size_t base = (size_t)ca->offset + (size_t)a->offset, n = v->rows;
    sb_column *c = &v->cols[i];
    *c = (sb_column){.name = name,
                     .name_len = strlen(name),
                     .type = t,
                     .child_type = ct,
                     .list_size = ls,
                     .nullable = (cs->flags & ARROW_FLAG_NULLABLE) != 0,
                     .logical = lg,
                     .length = n};
    const uint8_t *valid;
    if (bits_at(v, ca->null_count == 0 ? NULL : ca->buffers[0], base, n, &valid) != 0)
        return sb_err_set(err, "arrow: out of memory");
    c->validity = valid;
    if (valid != NULL) {
        c->nullable = true;
        for (size_t r = 0; r < n; r++)
            c->null_count += !((valid[r >> 3] >> (r & 7)) & 1);
    }
    const char *bad = view_values(v, cs, ca, c, t, ls, base, n);
    if (bad != NULL)
        return sb_err_set(err, "arrow: column %zu \"%.64s\" (%s): %s", i, name, cs->format, bad);
    v->fields[i] = (sb_field){.name = name,
                              .type = t,
                              .child_type = c->child_type,
                              .list_size = ls,
                              .nullable = c->nullable,
                              .logical = lg};
    return 0;
}

int sb_arrow_view_open(const struct ArrowSchema *s, const struct ArrowArray *a, sb_arrow_view *v,
                       sb_err *err)
{
    memset(v, 0, sizeof *v);
    if (s == NULL || a == NULL || s->format == NULL || strcmp(s->format, "+s") != 0)
        return sb_err_set(err,
                          "arrow: the batch must be a struct array (format \"+s\"), got "
                          "\"%.32s\"",
                          s && s->format ? s->format : "(null)");
    if (a->length < 0 || a->offset < 0 || s->n_children < 0 || a->n_children != s->n_children)
        return sb_err_set(err,
                          "arrow: struct array with length %lld, offset %lld, %lld children "
                          "for a schema of %lld",
                          (long long)a->length, (long long)a->offset, (long long)a->n_children,
                          (long long)s->n_children);
    if (s->n_children == 0 || s->n_children > SB_PART_MAX_COLUMNS)
        return sb_err_set(err, "arrow: a batch needs 1 to %d columns, got %lld",
                          SB_PART_MAX_COLUMNS, (long long)s->n_children);
    if (a->null_count != 0 && a->n_buffers > 0 && a->buffers[0] != NULL)
        return sb_err_set(err, "arrow: null rows at the struct level are not supported");
    v->ncols = (size_t)s->n_children;
    v->rows = (size_t)a->length;
    v->fields = calloc(v->ncols, sizeof *v->fields);
    v->cols = calloc(v->ncols, sizeof *v->cols);
    if (v->fields == NULL || v->cols == NULL) {
        sb_arrow_view_close(v);
        return sb_err_set(err, "arrow: out of memory");
    }
    for (size_t i = 0; i < v->ncols; i++)
        if (view_column(v, s, a, i, err) != 0) {
            sb_arrow_view_close(v); /* the messages point into s, not into v */
            return -1;
        }
    return 0;
}
