/* limit.c — where a limit stage may run (limit.h): its map half in op 0, whose tasks are the
 * source's splits in order, so "the first N rows" is the source's first N rows and the
 * scheduler can drop the splits past them. */
#include <cjson/cJSON.h>
#include <string.h>

#include "controller/sched/limit.h"

int sb_exchange_limit_setup(const sb_stage_spec *const *stages, size_t nstages, size_t op0_last,
                            uint64_t *rows, sb_err *err)
{
    *rows = 0;
    for (size_t i = 0; i < nstages; i++) {
        if (strcmp(stages[i]->op, "limit") != 0)
            continue;
        if (i != op0_last)
            return sb_err_set(err,
                              "stage %s: limit takes the source's first rows, so it must run "
                              "in the source's tasks (streaming mode, the same pool as every "
                              "stage before it)",
                              stages[i]->name);
        cJSON *a = cJSON_Parse(stages[i]->args_json ? stages[i]->args_json : "{}");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(a, "rows");
        *rows = cJSON_IsNumber(r) && r->valuedouble >= 1 ? (uint64_t)r->valuedouble : 1;
        cJSON_Delete(a);
    }
    return 0;
}
