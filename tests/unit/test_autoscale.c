/* The autoscaling policy: up at once within max, never below min (nor 0) while active, down
 * only after the delay, 0 when inactive, odd input (min > max, slots 0, clock going back)
 * handled. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "controller/sched/autoscale.h"

static sb_autoscale_in base(void)
{
    return (sb_autoscale_in){.min = 1,
                             .max = 8,
                             .ready = 2,
                             .pending = 0,
                             .slots = 2,
                             .queued = 0,
                             .running = 4,
                             .active = 1,
                             .now_ms = 100000,
                             .idle_since_ms = 0,
                             .scale_down_delay_ms = 10000};
}

Test(autoscale, scales_up_at_once_bounded_by_max)
{
    sb_autoscale_in in = base();
    cr_expect_eq(sb_autoscale_desired(&in), 2, "4 running on 2x2 slots: steady");
    in.queued = 5; /* 9 tasks / 2 slots */
    cr_expect_eq(sb_autoscale_desired(&in), 5);
    in.queued = 1000;
    cr_expect_eq(sb_autoscale_desired(&in), 8, "bounded by max");
    in.pending = 3; /* pending pods are part of the size, the target stays */
    cr_expect_eq(sb_autoscale_desired(&in), 8);
    in.queued = UINT64_MAX; /* no overflow */
    cr_expect_eq(sb_autoscale_desired(&in), 8);
}

Test(autoscale, never_below_min_while_active)
{
    sb_autoscale_in in = base();
    in.min = 3;
    in.running = 0;
    in.ready = 0;
    cr_expect_eq(sb_autoscale_desired(&in), 3);
    in.min = 0;
    cr_expect_eq(sb_autoscale_desired(&in), 1, "at least one while active");
    in.ready = 5;
    in.min = 4;
    in.idle_since_ms = 1; /* idle for long */
    cr_expect_eq(sb_autoscale_desired(&in), 4, "down, but not below min");
}

Test(autoscale, scales_down_only_after_the_delay)
{
    sb_autoscale_in in = base();
    in.ready = 6;
    in.running = 2; /* demand 1 */
    cr_expect_eq(sb_autoscale_desired(&in), 6, "not idle: keep");
    in.idle_since_ms = in.now_ms - 9999;
    cr_expect_eq(sb_autoscale_desired(&in), 6, "idle, but not for the delay yet");
    in.idle_since_ms = in.now_ms - 10000;
    cr_expect_eq(sb_autoscale_desired(&in), 1);
    in.scale_down_delay_ms = 0; /* the default, 10 s */
    in.idle_since_ms = in.now_ms - 5000;
    cr_expect_eq(sb_autoscale_desired(&in), 6);
    in.idle_since_ms = in.now_ms + 50; /* a clock that went back: no time elapsed */
    cr_expect_eq(sb_autoscale_desired(&in), 6);
    /* max lowered live: down to it at once */
    in = base();
    in.ready = 6;
    in.max = 3;
    in.queued = 100;
    cr_expect_eq(sb_autoscale_desired(&in), 3);
}

Test(autoscale, zero_when_inactive)
{
    sb_autoscale_in in = base();
    in.active = 0;
    in.min = 2;
    in.queued = 10;
    cr_expect_eq(sb_autoscale_desired(&in), 0, "the pool's ops finished");
}

Test(autoscale, odd_input)
{
    sb_autoscale_in in = base();
    in.min = 5;
    in.max = 2;
    in.ready = 0;
    cr_expect_eq(sb_autoscale_desired(&in), 2, "min > max reads as max");
    in = base();
    in.slots = 0;
    in.queued = 3;
    in.running = 0;
    cr_expect_eq(sb_autoscale_desired(&in), 3, "slots 0 counts as 1");
    in.max = 0;
    cr_expect_eq(sb_autoscale_desired(&in), 0, "max 0: none");
    sb_autoscale_in zero = {0};
    cr_expect_eq(sb_autoscale_desired(&zero), 0);
    zero.active = 1;
    cr_expect_eq(sb_autoscale_desired(&zero), 0, "max 0 even while active");
}
