/* joinplan.c — a join's right side sized at plan time (joinplan.h): listed like a source, its
 * bytes summed and compared with broadcastBelow. */
#include <string.h>

#include "io/split.h"
#include "spec/join.h"
#include "spec/quantity.h"
#include "storage/joinplan.h"

int sb_storage_join_check(const sb_pipeline *p, sb_err *err)
{
    for (size_t i = 0; i < p->spec.nstages; i++) {
        const sb_stage_spec *st = &p->spec.stages[i];
        if (strcmp(st->op, "join") != 0)
            continue;
        sb_source_spec right;
        if (sb_spec_join_right(st->args_json, &right, err) != 0)
            return sb_err_wrap(err, "spec.stages[%zu]", i);
        sb_io_split *sp = NULL;
        size_t n = 0;
        int rc = sb_io_plan_splits(&right, &sp, &n, err);
        uint64_t bytes = 0;
        for (size_t k = 0; rc == 0 && k < n; k++)
            bytes += sp[k].end - sp[k].start;
        sb_io_splits_free(sp, n);
        sb_spec_join_right_free(&right);
        if (rc != 0)
            return sb_err_wrap(err, "spec.stages[%zu] (join %s): the right side", i, st->name);
        int64_t below = sb_spec_join_broadcast_below(st->args_json);
        if ((int64_t)bytes >= below) {
            char q[32];
            return sb_err_set(err,
                              "spec.stages[%zu] (join %s): the right side is %llu bytes, at or "
                              "above broadcastBelow (%s = %lld bytes): this build joins by "
                              "broadcasting the right side to every task only (the exchanged "
                              "join is not built); raise broadcastBelow (at most a quarter of "
                              "execution.memoryBudget) or make the right side smaller",
                              i, st->name, (unsigned long long)bytes,
                              sb_quantity_format_bytes(below, q, sizeof q), (long long)below);
        }
    }
    return 0;
}
