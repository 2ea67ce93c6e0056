/* id.c — partition ids ("s<stage>-t<task>-p<seq>"): the name under which a worker's store
 * holds an output partition, used by the data plane, the sink's part names and checkpoints. */
#include "partition/id.h"

#include <stdio.h>
#include <string.h>

#include "core/num.h"

int sb_part_id_format(char *buf, size_t cap, uint32_t stage, uint64_t task, uint32_t seq)
{
    int n = snprintf(buf, cap, "s%u-t%llu-p%u", (unsigned)stage, (unsigned long long)task,
                     (unsigned)seq);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    return n;
}

int sb_part_id_parse(const char *id, uint32_t *stage, uint64_t *task, uint32_t *seq, sb_err *err)
{
    if (!id || !*id)
        return sb_err_set(err, "partition id is empty");
    if (strlen(id) >= SB_PART_ID_MAX)
        return sb_err_set(err, "partition id is too long (%zu bytes)", strlen(id));
    const char *p = id;
    uint64_t st, tk, sq;
    if (*p++ != 's' || sb_num_parse_dec(&p, UINT32_MAX, &st) < 0 || *p++ != '-' || *p++ != 't' ||
        sb_num_parse_dec(&p, UINT64_MAX, &tk) < 0 || *p++ != '-' || *p++ != 'p' ||
        sb_num_parse_dec(&p, UINT32_MAX, &sq) < 0 || *p != '\0')
        return sb_err_set(err, "partition id \"%.*s\" is not s<stage>-t<task>-p<seq>",
                          SB_PART_ID_MAX, id);
    if (stage)
        *stage = (uint32_t)st;
    if (task)
        *task = tk;
    if (seq)
        *seq = (uint32_t)sq;
    return 0;
}
