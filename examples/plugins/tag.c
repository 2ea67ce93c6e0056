/* tag.c — an example streambatch plugin (api/plugin/streambatch_plugin.h): adds to every jsonl
 * record (an object, in the utf8 column "record") a field holding the record's length in bytes.
 *
 *     {op: plugin, args: {path: /plugins/libtag.so, config: {field: bytes}}}
 *     {"a":1}  ->  {"bytes":7,"a":1}
 *
 * Build: cc -O2 -fPIC -shared -Iapi/plugin examples/plugins/tag.c -o libtag.so
 * It reads the input in place (honouring the array's offset) and returns a new utf8 column it
 * allocated, released by the worker through the release callbacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streambatch_plugin.h"

typedef struct {
    char field[64];
} tag_state;

static int tag_init(const char *config, void **state, char *err, size_t errcap)
{
    tag_state *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errcap, "out of memory");
        return 1;
    }
    strcpy(s->field, "bytes");
    /* config is JSON: {"field": "<name>"} or null (a real plugin would use a JSON library) */
    const char *f = strstr(config, "\"field\"");
    if (f != NULL) {
        const char *q = strchr(f + 7, '"');
        const char *e = q ? strchr(q + 1, '"') : NULL;
        if (q == NULL || e == NULL || e - q - 1 <= 0 || e - q - 1 >= (long)sizeof s->field) {
            snprintf(err, errcap, "config.field must be a string of 1 to 63 characters");
            free(s);
            return 1;
        }
        memcpy(s->field, q + 1, (size_t)(e - q - 1));
        s->field[e - q - 1] = '\0';
    }
    *state = s;
    return 0;
}

/* The output's schema and array each own one allocation, freed by their own release (the
 * worker may release them in any order); children are released with their parent. */
typedef struct {
    struct ArrowSchema kid, *kid_p;
} schema_mem;

typedef struct {
    struct ArrowArray kid, *kid_p;
    const void *struct_buffers[1];
    const void *kid_buffers[3];
    int32_t *offsets;
    char *data;
} array_mem;

static void release_kid_schema(struct ArrowSchema *s)
{
    s->release = NULL;
}

static void release_schema(struct ArrowSchema *s)
{
    schema_mem *m = s->private_data;
    if (m->kid.release != NULL)
        m->kid.release(&m->kid);
    free(m);
    s->release = NULL;
}

static void release_kid_array(struct ArrowArray *a)
{
    a->release = NULL;
}

static void release_array(struct ArrowArray *a)
{
    array_mem *m = a->private_data;
    if (m->kid.release != NULL)
        m->kid.release(&m->kid);
    free(m->offsets);
    free(m->data);
    free(m);
    a->release = NULL;
}

static int tag_process(void *state, const struct ArrowSchema *in_schema,
                       const struct ArrowArray *in, struct ArrowSchema *out_schema,
                       struct ArrowArray *out, char *err, size_t errcap)
{
    tag_state *s = state;
    int64_t col = -1;
    for (int64_t i = 0; i < in_schema->n_children; i++)
        if (strcmp(in_schema->children[i]->name, "record") == 0)
            col = i;
    if (col < 0 || strcmp(in_schema->children[col]->format, "u") != 0) {
        snprintf(err, errcap, "the input has no utf8 column \"record\"");
        return 1;
    }
    const struct ArrowArray *c = in->children[col];
    const int32_t *off = (const int32_t *)c->buffers[1] + c->offset + in->offset;
    const char *data = c->buffers[2];
    int64_t n = in->length;
    size_t flen = strlen(s->field), total = 0;
    for (int64_t r = 0; r < n; r++)
        total += (size_t)(off[r + 1] - off[r]) + flen + 32;
    array_mem *m = calloc(1, sizeof *m);
    schema_mem *sm = calloc(1, sizeof *sm);
    int32_t *o = malloc(((size_t)n + 1) * sizeof *o);
    char *d = malloc(total + 1);
    if (m == NULL || sm == NULL || o == NULL || d == NULL) {
        free(m), free(sm), free(o), free(d);
        snprintf(err, errcap, "out of memory");
        return 1;
    }
    size_t at = 0;
    o[0] = 0;
    for (int64_t r = 0; r < n; r++) {
        const char *p = data + off[r];
        int32_t len = off[r + 1] - off[r];
        if (len < 2 || p[0] != '{') {
            free(m), free(sm), free(o), free(d);
            snprintf(err, errcap, "record %lld is not a JSON object", (long long)r);
            return 1;
        }
        int empty = len == 2 && p[1] == '}';
        at += (size_t)sprintf(d + at, "{\"%s\":%d%s", s->field, (int)len, empty ? "" : ",");
        memcpy(d + at, p + 1, (size_t)len - 1);
        at += (size_t)len - 1;
        o[r + 1] = (int32_t)at;
    }
    sm->kid = (struct ArrowSchema){.format = "u", .name = "record", .release = release_kid_schema};
    sm->kid_p = &sm->kid;
    *out_schema = (struct ArrowSchema){.format = "+s",
                                       .name = "",
                                       .n_children = 1,
                                       .children = &sm->kid_p,
                                       .release = release_schema,
                                       .private_data = sm};
    m->offsets = o;
    m->data = d;
    m->kid_buffers[1] = o;
    m->kid_buffers[2] = d;
    m->kid = (struct ArrowArray){
        .length = n, .n_buffers = 3, .buffers = m->kid_buffers, .release = release_kid_array};
    m->kid_p = &m->kid;
    *out = (struct ArrowArray){.length = n,
                               .n_buffers = 1,
                               .n_children = 1,
                               .buffers = m->struct_buffers,
                               .children = &m->kid_p,
                               .release = release_array,
                               .private_data = m};
    return 0;
}

static void tag_free(void *state)
{
    free(state);
}

static const sb_plugin_v1 table = {
    .abi_version = STREAMBATCH_PLUGIN_ABI_VERSION,
    .name = "tag",
    .init = tag_init,
    .process = tag_process,
    .finish = NULL,
    .free = tag_free,
};

const sb_plugin_v1 *streambatch_plugin_v1(void)
{
    return &table;
}
