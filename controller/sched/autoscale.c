/* autoscale.c — the autoscaling policy of one worker pool (see autoscale.h): the number of
 * workers it should have now, from the scheduler's demand and the ready and pending pods.
 * A pure function: no state, no clock, no I/O. */

#include "controller/sched/autoscale.h"

uint32_t sb_autoscale_desired(const sb_autoscale_in *in)
{
    if (!in->active || in->max == 0)
        return 0;
    uint32_t hi = in->max;
    uint32_t lo = in->min > hi ? hi : in->min;
    if (lo < 1)
        lo = 1; /* active: at least one worker */
    uint64_t slots = in->slots ? in->slots : 1;
    uint64_t tasks = in->queued + in->running;
    if (tasks < in->queued) /* overflow */
        tasks = UINT64_MAX;
    uint64_t need = tasks / slots + (tasks % slots != 0);
    if (need < lo)
        need = lo;
    if (need > hi)
        need = hi;
    uint64_t current = (uint64_t)in->ready + in->pending;
    if (current > hi)
        return hi;
    if (need >= current)
        return (uint32_t)need; /* up (or steady) at once */
    uint64_t delay =
        in->scale_down_delay_ms ? in->scale_down_delay_ms : SB_AUTOSCALE_DEFAULT_DELAY_MS;
    int idle_long = in->idle_since_ms != 0 && in->now_ms >= in->idle_since_ms &&
                    in->now_ms - in->idle_since_ms >= delay;
    return (uint32_t)(idle_long ? need : current);
}
