/* crash.c — a test plugin that dies with SIGSEGV inside process() when a record contains
 * "CRASH" (a bug in native user code), and returns nothing otherwise. */
#include <stdio.h>
#include <string.h>

#include "streambatch_plugin.h"

volatile int *volatile bad; /* NULL, opaque to the compiler */

static int c_init(const char *config, void **state, char *err, size_t errcap)
{
    (void)config, (void)err, (void)errcap;
    *state = NULL;
    return 0;
}

static int c_process(void *state, const struct ArrowSchema *in_schema, const struct ArrowArray *in,
                     struct ArrowSchema *out_schema, struct ArrowArray *out, char *err,
                     size_t errcap)
{
    (void)state, (void)in_schema, (void)out_schema, (void)out, (void)err, (void)errcap;
    const struct ArrowArray *c = in->children[0];
    const int32_t *off = (const int32_t *)c->buffers[1] + c->offset + in->offset;
    const char *data = c->buffers[2];
    for (int64_t r = 0; r < in->length; r++)
        if (memmem(data + off[r], (size_t)(off[r + 1] - off[r]), "CRASH", 5) != NULL)
            *bad = 1; /* SIGSEGV */
    return 0;
}

static void c_free(void *state)
{
    (void)state;
}

static const sb_plugin_v1 table = {
    STREAMBATCH_PLUGIN_ABI_VERSION, "crash", c_init, c_process, NULL, c_free};

const sb_plugin_v1 *streambatch_plugin_v1(void)
{
    return &table;
}
