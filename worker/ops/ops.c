/* ops.c — the operator registry, the batch-size loop and the "op NAME: " prefix of task
 * errors (see ops.h). */
#include <stdio.h>
#include <string.h>

#include "worker/ops/impls.h"
#include "worker/ops/ops.h"

static const sb_op_impl *const registry[] = {
    &sb_op_identity_impl,        &sb_op_spin_impl,    &sb_op_sleep_impl,
    &sb_op_filter_impl,          &sb_op_project_impl, &sb_op_exec_impl,
    &sb_op_plugin_impl,          &sb_op_mlp_impl,     &sb_op_image_resize_impl,
    &sb_op_image_normalize_impl,
};

/* Every op's shutdown hook, in registry order. */
void sb_op_shutdown(void)
{
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (registry[i]->shutdown != NULL)
            registry[i]->shutdown();
}

const sb_op_impl *sb_op_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

int sb_op_run(const sb_op_impl *op, void *state, const sb_batch *in, size_t batch_size,
              sb_op_out *out, sb_err *err)
{
    size_t rows = sb_batch_rows(in);
    if (rows == 0)
        return op->process(state, in, 0, 0, out, err);
    size_t step = batch_size == 0 ? rows : batch_size;
    for (size_t first = 0; first < rows; first += step) {
        size_t n = rows - first < step ? rows - first : step;
        if (op->process(state, in, first, n, out, err) != 0)
            return -1;
    }
    return 0;
}

int sb_op_err_context(sb_err *err, const char *name)
{
    if (err == NULL || name == NULL)
        return -1;
    size_t nl = strlen(name);
    const char *m = err->msg;
    if (strncmp(m, "op ", 3) == 0 && strncmp(m + 3, name, nl) == 0 && m[3 + nl] == ':')
        return -1; /* the op said it already */
    int data = err->data;
    if (strncmp(m, name, nl) == 0 && (m[nl] == ':' || m[nl] == ' ')) {
        /* the op named itself ("exec: ...", "plugin libx: ..."): say once that it is an op */
        char joined[SB_ERR_MAX + 4];
        snprintf(joined, sizeof joined, "op %s", m);
        memcpy(err->msg, joined, SB_ERR_MAX - 1);
        err->msg[SB_ERR_MAX - 1] = '\0';
        err->data = data;
        return -1;
    }
    return sb_err_wrap(err, "op %s", name);
}

int sb_op_record_column(const sb_batch *in, const char *op, sb_err *err)
{
    int i = sb_batch_find(in, SB_OP_RECORD_COLUMN);
    if (i < 0) {
        for (size_t c = 0; c < sb_batch_ncols(in); c++) {
            sb_type t = sb_batch_column(in, c)->type;
            if (t != SB_TYPE_BINARY && t != SB_TYPE_UTF8)
                continue;
            if (i >= 0) {
                return sb_err_data(err,
                                   "%s: the input has no \"record\" column and several "
                                   "binary/utf8 columns",
                                   op);
            }
            i = (int)c;
        }
        if (i < 0) {
            return sb_err_data(err, "%s: the input has no \"record\" column (jsonl records)", op);
        }
    }
    const sb_column *c = sb_batch_column(in, (size_t)i);
    if (c->type != SB_TYPE_BINARY && c->type != SB_TYPE_UTF8) {
        return sb_err_data(err, "%s: column \"%.64s\" is %s, not utf8 records", op, c->name,
                           sb_type_name(c->type));
    }
    return i;
}

const char *sb_op_excerpt(const char *p, size_t n, char *buf, size_t cap)
{
    size_t max = cap - 4;
    size_t k = n < max ? n : max;
    if (k < n)
        while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80)
            k--;
    for (size_t i = 0; i < k; i++)
        buf[i] = (unsigned char)p[i] < 0x20 || p[i] == 0x7f ? '?' : p[i];
    if (k < n) {
        memcpy(buf + k, "...", 4);
    } else {
        buf[k] = '\0';
    }
    return buf;
}
