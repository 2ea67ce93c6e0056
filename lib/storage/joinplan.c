/* joinplan.c — a join's right side sized at plan time (joinplan.h): listed like a source, its
 * bytes summed and compared with broadcastBelow; the exchanged ones reported by stage. */
#include <stdlib.h>
#include <string.h>

#include "io/split.h"
#include "spec/join.h"
#include "storage/joinplan.h"

int sb_storage_join_plan(const sb_pipeline *p, uint64_t **right, sb_err *err)
{
    *right = NULL;
    for (size_t i = 0; i < p->spec.nstages; i++) {
        const sb_stage_spec *st = &p->spec.stages[i];
        if (strcmp(st->op, "join") != 0)
            continue;
        sb_source_spec src;
        if (sb_spec_join_right(st->args_json, &src, err) != 0)
            goto fail;
        sb_io_split *sp = NULL;
        size_t n = 0;
        int rc = sb_io_plan_splits(&src, &sp, &n, err);
        uint64_t bytes = 0;
        for (size_t k = 0; rc == 0 && k < n; k++)
            bytes += sp[k].end - sp[k].start;
        sb_io_splits_free(sp, n);
        sb_spec_join_right_free(&src);
        if (rc != 0) {
            sb_err_wrap(err, "spec.stages[%zu] (join %s): the right side", i, st->name);
            goto fail;
        }
        if ((int64_t)bytes < sb_spec_join_broadcast_below(st->args_json))
            continue; /* broadcast */
        if (*right == NULL && (*right = calloc(p->spec.nstages, sizeof **right)) == NULL) {
            sb_err_set(err, "planning the joins: out of memory");
            goto fail;
        }
        (*right)[i] = bytes;
    }
    return 0;
fail:
    free(*right);
    *right = NULL;
    return -1;
}
