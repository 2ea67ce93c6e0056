/* passthrough.c — the smallest useful streambatch plugin (api/plugin/streambatch_plugin.h):
 * returns its input unchanged, without copying. The output arrays point at the input's (the
 * worker copies a plugin's output before it releases the input, so this is allowed) and their
 * release callbacks free nothing. `make bench` compares it with the built-in identity op to
 * measure what crossing the plugin boundary costs.
 *
 * Build: cc -O2 -fPIC -shared -Iapi/plugin examples/plugins/passthrough.c -o libpassthrough.so
 */
#include <stdio.h>

#include "streambatch_plugin.h"

static int pt_init(const char *config, void **state, char *err, size_t errcap)
{
    (void)config, (void)err, (void)errcap;
    *state = NULL;
    return 0;
}

static void release_schema(struct ArrowSchema *s)
{
    s->release = NULL;
}

static void release_array(struct ArrowArray *a)
{
    a->release = NULL;
}

static int pt_process(void *state, const struct ArrowSchema *in_schema, const struct ArrowArray *in,
                      struct ArrowSchema *out_schema, struct ArrowArray *out, char *err,
                      size_t errcap)
{
    (void)state, (void)err, (void)errcap;
    *out_schema = *in_schema;
    out_schema->release = release_schema;
    out_schema->private_data = NULL;
    *out = *in;
    out->release = release_array;
    out->private_data = NULL;
    return 0;
}

static void pt_free(void *state)
{
    (void)state;
}

static const sb_plugin_v1 table = {
    .abi_version = STREAMBATCH_PLUGIN_ABI_VERSION,
    .name = "passthrough",
    .init = pt_init,
    .process = pt_process,
    .finish = NULL,
    .free = pt_free,
};

const sb_plugin_v1 *streambatch_plugin_v1(void)
{
    return &table;
}
