/* slice.c — a shorter CFS time slice for the calling thread (see slice.h), through the
 * sched_setattr and sched_getattr system calls, so a slot waiting on the accelerator preempts
 * CPU-bound threads when it wakes. Owns nothing. */

#include "worker/slice.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sched_attr (include/uapi/linux/sched/types.h, version 1 of the layout
 * with util_min/util_max): glibc before 2.41 has no wrapper, and <linux/sched/types.h> clashes
 * with <sched.h>'s sched_param. */
typedef struct {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
    uint32_t sched_util_min;
    uint32_t sched_util_max;
} slice_attr;

static int attr_get(slice_attr *a, sb_err *err)
{
    memset(a, 0, sizeof *a);
    if (syscall(SYS_sched_getattr, 0, a, (unsigned)sizeof *a, 0u) != 0)
        return sb_err_set(err, "sched_getattr: %s", strerror(errno));
    return 0;
}

int sb_slice_set(uint32_t us, sb_err *err)
{
    slice_attr a;
    if (attr_get(&a, err) != 0)
        return -1;
    if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH)
        return 1;
    slice_attr n = {.size = sizeof n,
                    .sched_policy = a.sched_policy,
                    .sched_nice = a.sched_nice,
                    .sched_flags = 1, /* SCHED_FLAG_RESET_ON_FORK */
                    .sched_runtime = (uint64_t)us * 1000u};
    if (syscall(SYS_sched_setattr, 0, &n, 0u) != 0)
        return sb_err_set(err, "sched_setattr (a %u us slice): %s", us, strerror(errno));
    return 0;
}

int64_t sb_slice_get(sb_err *err)
{
    slice_attr a;
    if (attr_get(&a, err) != 0)
        return -1;
    if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH)
        return 0;
    return (int64_t)(a.sched_runtime / 1000u);
}
