/* clock.h — the monotonic clock in milliseconds and a millisecond sleep, for deadlines and
 * polling loops. CLOCK_MONOTONIC: wall-clock steps (NTP, a user's `date`) never shorten or
 * stretch a timeout. Stateless; safe from any thread. */
#ifndef SB_CORE_CLOCK_H
#define SB_CORE_CLOCK_H

#include <stdint.h>

/* Milliseconds on the monotonic clock (an arbitrary origin: compare, never print as a date). */
uint64_t sb_clock_mono_ms(void);

/* Sleeps ms milliseconds (a signal may end it early: callers loop on a deadline). */
void sb_clock_sleep_ms(uint64_t ms);

#endif
