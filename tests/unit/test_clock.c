/* Unit tests of lib/core/clock.c: the monotonic clock never runs backwards, and a sleep of N ms
 * lasts at least N ms on it (the deadlines of the operator's uninstall hook and `helm test`
 * runner rely on both). */
#include <criterion/criterion.h>

#include "core/clock.h"

Test(clock, monotonic_and_sleep_lasts_at_least_the_time_asked)
{
    uint64_t a = sb_clock_mono_ms();
    sb_clock_sleep_ms(30);
    uint64_t b = sb_clock_mono_ms();
    cr_expect_geq(b, a + 30, "slept 30 ms, clock moved %llu ms", (unsigned long long)(b - a));
    cr_expect_lt(b - a, 5000, "a 30 ms sleep took %llu ms", (unsigned long long)(b - a));
    sb_clock_sleep_ms(0);
    cr_expect_geq(sb_clock_mono_ms(), b);
}
