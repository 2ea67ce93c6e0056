/* limit.c — limit's rows (xchg.h): both halves keep the first rows they see, the map half of
 * its task's (an upper bound on what the task can contribute), the reduce half of the map
 * outputs, which come in split order (controller/sched/limit.h). */
#include "worker/ops/exchange/xchg.h"

int xlimit_take(sb_op_out *out, const sb_batch *in, size_t first, size_t n, uint64_t max,
                uint64_t *taken, sb_err *err)
{
    if (n == 0 || *taken >= max)
        return sb_op_out_has_schema(out) ? 0 : sb_op_out_set_schema_like(out, in, err);
    size_t take = max - *taken < n ? (size_t)(max - *taken) : n;
    *taken += take;
    return sb_op_out_append_rows(out, in, first, take, err);
}
