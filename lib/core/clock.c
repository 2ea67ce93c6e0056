/* clock.c — the monotonic millisecond clock and sleep of clock.h (POSIX clock_gettime and
 * nanosleep). */
#include "core/clock.h"

#include <time.h>

uint64_t sb_clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sb_clock_sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
