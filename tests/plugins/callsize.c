/* callsize.c — a test plugin (api/plugin/streambatch_plugin.h) that records how its process()
 * calls were cut: each call emits one record {"rows":N,"records":[r0,r1,...]} holding the
 * call's row count and its input records (jsonl objects, in the utf8 column "record") in the
 * order it got them. A test of the batch rule (worker/ops/ops.h) reads the sizes and checks
 * that every input record arrived exactly once, in order within each call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streambatch_plugin.h"

static int cs_init(const char *config, void **state, char *err, size_t errcap)
{
    (void)config;
    (void)err;
    (void)errcap;
    *state = NULL;
    return 0;
}

typedef struct {
    struct ArrowSchema kid, *kid_p;
} schema_mem;

typedef struct {
    struct ArrowArray kid, *kid_p;
    const void *struct_buffers[1];
    const void *kid_buffers[3];
    int32_t offsets[2];
    char *data;
} array_mem;

static void release_kid_schema(struct ArrowSchema *s)
{
    s->release = NULL;
}

static void release_schema(struct ArrowSchema *s)
{
    free(s->private_data);
    s->release = NULL;
}

static void release_kid_array(struct ArrowArray *a)
{
    a->release = NULL;
}

static void release_array(struct ArrowArray *a)
{
    array_mem *m = a->private_data;
    free(m->data);
    free(m);
    a->release = NULL;
}

static int cs_process(void *state, const struct ArrowSchema *in_schema, const struct ArrowArray *in,
                      struct ArrowSchema *out_schema, struct ArrowArray *out, char *err,
                      size_t errcap)
{
    (void)state;
    int64_t col = -1;
    for (int64_t i = 0; i < in_schema->n_children; i++)
        if (strcmp(in_schema->children[i]->name, "record") == 0)
            col = i;
    if (col < 0 || strcmp(in_schema->children[col]->format, "u") != 0) {
        snprintf(err, errcap, "the input has no utf8 column \"record\"");
        return 1;
    }
    out->release = NULL; /* nothing for an empty call */
    int64_t n = in->length;
    if (n == 0)
        return 0;
    const struct ArrowArray *c = in->children[col];
    const int32_t *off = (const int32_t *)c->buffers[1] + c->offset + in->offset;
    const char *data = c->buffers[2];
    size_t total = (size_t)(off[n] - off[0]) + (size_t)n + 64;
    array_mem *m = calloc(1, sizeof *m);
    schema_mem *sm = calloc(1, sizeof *sm);
    char *d = malloc(total);
    if (m == NULL || sm == NULL || d == NULL) {
        free(m), free(sm), free(d);
        snprintf(err, errcap, "out of memory");
        return 1;
    }
    size_t at = (size_t)sprintf(d, "{\"rows\":%lld,\"records\":[", (long long)n);
    for (int64_t r = 0; r < n; r++) {
        if (r > 0)
            d[at++] = ',';
        memcpy(d + at, data + off[r], (size_t)(off[r + 1] - off[r]));
        at += (size_t)(off[r + 1] - off[r]);
    }
    d[at++] = ']';
    d[at++] = '}';
    sm->kid = (struct ArrowSchema){.format = "u", .name = "record", .release = release_kid_schema};
    sm->kid_p = &sm->kid;
    *out_schema = (struct ArrowSchema){.format = "+s",
                                       .name = "",
                                       .n_children = 1,
                                       .children = &sm->kid_p,
                                       .release = release_schema,
                                       .private_data = sm};
    m->offsets[0] = 0;
    m->offsets[1] = (int32_t)at;
    m->data = d;
    m->kid_buffers[1] = m->offsets;
    m->kid_buffers[2] = d;
    m->kid = (struct ArrowArray){
        .length = 1, .n_buffers = 3, .buffers = m->kid_buffers, .release = release_kid_array};
    m->kid_p = &m->kid;
    *out = (struct ArrowArray){.length = 1,
                               .n_buffers = 1,
                               .n_children = 1,
                               .buffers = m->struct_buffers,
                               .children = &m->kid_p,
                               .release = release_array,
                               .private_data = m};
    return 0;
}

static void cs_free(void *state)
{
    (void)state;
}

static const sb_plugin_v1 table = {
    .abi_version = STREAMBATCH_PLUGIN_ABI_VERSION,
    .name = "callsize",
    .init = cs_init,
    .process = cs_process,
    .finish = NULL,
    .free = cs_free,
};

const sb_plugin_v1 *streambatch_plugin_v1(void)
{
    return &table;
}
