#include "partition/arrow.h"

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
        const char *fmt = sb_arrow_format(c->type, c->list_size, fbuf);
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
