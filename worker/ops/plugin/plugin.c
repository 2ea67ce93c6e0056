/* plugin.c — the plugin operator: native user code loaded with dlopen, speaking the C ABI of
 * api/plugin/streambatch_plugin.h (batches as Arrow C Data Interface structs).
 *
 * Args: path (the shared object, required), symbol (the entry point; default
 * STREAMBATCH_PLUGIN_ENTRY), config (any JSON, passed to the plugin's init as text).
 *
 * Each call exports the input rows with arrow/cdata.h (zero copy: the plugin reads the
 * partition's buffers), calls process(), and copies the returned batch into the op's output
 * through a view of its buffers, before the input is released (so a plugin may return arrays
 * that point into its input). The library is loaded once per worker process and stays loaded
 * (RTLD_NODELETE): each task's state takes a dlopen reference, but its dlclose no longer unloads
 * and reloads (and relocates) the library for every task (~0.1 ms each: 1-2% of a plugin
 * identity over 4 MiB partitions).
 */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/plugin/streambatch_plugin.h"
#include "arrow/cdata.h"
#include "worker/ops/impls.h"

#define ERRCAP 400

typedef struct {
    void *dl;
    const sb_plugin_v1 *api;
    void *st;
    bool inited;
    char name[128];
} plugin_state;

static void plugin_free(void *state)
{
    plugin_state *s = state;
    if (s == NULL)
        return;
    if (s->inited && s->api->free != NULL)
        s->api->free(s->st);
    if (s->dl != NULL)
        dlclose(s->dl);
    free(s);
}

static int plugin_init(const char *args_json, void **state, sb_err *err)
{
    *state = NULL;
    cJSON *a = args_json ? cJSON_Parse(args_json) : NULL;
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(a, "path");
    const cJSON *sym = cJSON_GetObjectItemCaseSensitive(a, "symbol");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(a, "config");
    plugin_state *s = calloc(1, sizeof *s);
    char *config = NULL;
    int rc = -1;
    if (s == NULL) {
        sb_err_set(err, "out of memory");
        goto out;
    }
    if (!cJSON_IsString(path) || path->valuestring[0] == '\0') {
        sb_err_set(err, "plugin: args.path must be the path of a shared object");
        goto out;
    }
    if (sym != NULL && (!cJSON_IsString(sym) || sym->valuestring[0] == '\0')) {
        sb_err_set(err, "plugin: args.symbol must be a non-empty string");
        goto out;
    }
    const char *symbol = sym ? sym->valuestring : STREAMBATCH_PLUGIN_ENTRY;
    snprintf(s->name, sizeof s->name, "%s", path->valuestring);
    dlerror();
    s->dl = dlopen(path->valuestring, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (s->dl == NULL) {
        const char *e = dlerror();
        sb_err_set(err, "plugin: cannot load %.200s: %.250s", path->valuestring, e ? e : "?");
        goto out;
    }
    void *entry = dlsym(s->dl, symbol);
    if (entry == NULL) {
        sb_err_set(err,
                   "plugin %.200s: no symbol \"%.64s\" (the entry point; args.symbol names "
                   "another)",
                   s->name, symbol);
        goto out;
    }
    sb_plugin_entry_fn fn;
    memcpy(&fn, &entry, sizeof fn); /* object pointer to function pointer, as dlsym requires */
    s->api = fn();
    if (s->api == NULL) {
        sb_err_set(err, "plugin %.200s: %.64s() returned no table", s->name, symbol);
        goto out;
    }
    if (s->api->abi_version != STREAMBATCH_PLUGIN_ABI_VERSION) {
        sb_err_set(err,
                   "plugin %.200s: ABI version %u, this worker speaks version %d "
                   "(api/plugin/streambatch_plugin.h)",
                   s->name, (unsigned)s->api->abi_version, STREAMBATCH_PLUGIN_ABI_VERSION);
        goto out;
    }
    if (s->api->init == NULL || s->api->process == NULL || s->api->free == NULL) {
        sb_err_set(err, "plugin %.200s: its table lacks init, process or free", s->name);
        goto out;
    }
    if (s->api->name != NULL && s->api->name[0] != '\0')
        snprintf(s->name, sizeof s->name, "%s", s->api->name);
    config = cfg ? cJSON_PrintUnformatted(cfg) : strdup("null");
    if (config == NULL) {
        sb_err_set(err, "out of memory");
        goto out;
    }
    char msg[ERRCAP] = "";
    if (s->api->init(config, &s->st, msg, sizeof msg) != 0) {
        msg[sizeof msg - 1] = '\0';
        sb_err_set(err, "plugin %.100s: init: %s", s->name, msg[0] ? msg : "failed");
        goto out;
    }
    s->inited = true;
    *state = s;
    s = NULL;
    rc = 0;
out:
    free(config);
    plugin_free(s);
    cJSON_Delete(a);
    return rc;
}

/* Copies the batch the plugin returned into out and releases it. Columns it passed through from
 * in (NULL after finish) are not checked for UTF-8 again. */
static int take_output(plugin_state *s, const sb_batch *in, struct ArrowSchema *os,
                       struct ArrowArray *oa, sb_op_out *out, sb_err *err)
{
    int rc = 0;
    if (oa->release != NULL && oa->length > 0) {
        sb_arrow_view v;
        rc = sb_arrow_view_open(os, oa, &v, err);
        if (rc == 0) {
            rc = sb_op_out_append_columns_of(out, in, v.fields, v.cols, v.ncols, 0, v.rows, err);
            sb_arrow_view_close(&v);
        }
        if (rc != 0)
            sb_err_wrap(err, "plugin %.100s: its output", s->name);
    }
    if (oa->release != NULL)
        oa->release(oa);
    if (os->release != NULL)
        os->release(os);
    return rc;
}

static int plugin_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                          sb_err *err)
{
    plugin_state *s = state;
    if (n == 0)
        return 0;
    struct ArrowSchema is;
    struct ArrowArray ia;
    if (sb_batch_export(in, &is, &ia, err) != 0)
        return sb_err_wrap(err, "plugin %.100s", s->name);
    ia.offset = (int64_t)first; /* a struct's offset applies to its children */
    ia.length = (int64_t)n;
    struct ArrowSchema os = {0};
    struct ArrowArray oa = {0};
    char msg[ERRCAP] = "";
    int rc = s->api->process(s->st, &is, &ia, &os, &oa, msg, sizeof msg);
    if (rc != 0) {
        msg[sizeof msg - 1] = '\0';
        sb_err_set(err, "plugin %.100s: process (rows %zu-%zu): %s", s->name, first, first + n - 1,
                   msg[0] ? msg : "failed");
        if (oa.release != NULL)
            oa.release(&oa);
        if (os.release != NULL)
            os.release(&os);
    } else {
        rc = take_output(s, in, &os, &oa, out, err); /* before the input goes: it may point there */
    }
    ia.release(&ia);
    is.release(&is);
    return rc;
}

static int plugin_finish(void *state, sb_op_out *out, sb_err *err)
{
    plugin_state *s = state;
    if (s->api->finish == NULL)
        return 0;
    struct ArrowSchema os = {0};
    struct ArrowArray oa = {0};
    char msg[ERRCAP] = "";
    if (s->api->finish(s->st, &os, &oa, msg, sizeof msg) != 0) {
        msg[sizeof msg - 1] = '\0';
        if (oa.release != NULL)
            oa.release(&oa);
        if (os.release != NULL)
            os.release(&os);
        return sb_err_set(err, "plugin %.100s: finish: %s", s->name, msg[0] ? msg : "failed");
    }
    return take_output(s, NULL, &os, &oa, out, err);
}

const sb_op_impl sb_op_plugin_impl = {
    .name = "plugin",
    .init = plugin_init,
    .process = plugin_process,
    .finish = plugin_finish,
    .free = plugin_free,
};
