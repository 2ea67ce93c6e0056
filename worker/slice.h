/* slice.h — asks the kernel's fair scheduler for a shorter time slice for the calling thread, so
 * that its wake-ups preempt CPU-bound threads at once instead of after their slice.
 *
 * Used by the slots of a worker with an accelerator: a slot waiting for the accelerator (or for
 * its sleep, the simulated one) must run the moment it is woken, or the accelerator stands idle
 * while a CPU-bound thread finishes its slice (on two cores kept busy by CPU workers, 0.7-1 ms per
 * accelerator task; docs/benchmarks.md). Linux >= 6.12 (EEVDF's custom slices, `sched_attr`'s
 * `sched_runtime` for SCHED_OTHER/SCHED_BATCH); older kernels accept the call and ignore it.
 *
 * Thread safety: affects only the calling thread. Memory: none.
 */
#ifndef SB_WORKER_SLICE_H
#define SB_WORKER_SLICE_H

#include <stdint.h>

#include "core/err.h"

/* Sets the calling thread's slice to `us` microseconds (the kernel clamps to 100 us - 100 ms),
 * keeping its policy and nice value; threads and processes it starts later begin with the
 * default slice (SCHED_FLAG_RESET_ON_FORK, which also starts them at nice >= 0). 0: set; 1: the
 * thread is not under the fair scheduler (real-time or deadline policy), left alone; -1 + err: the
 * kernel refused (e.g. a seccomp profile without sched_setattr), the thread unchanged. */
int sb_slice_set(uint32_t us, sb_err *err);

/* The calling thread's slice in microseconds as the kernel reports it (its default slice when
 * none was set; 0 on kernels before 6.12 or for a thread not under the fair scheduler); -1 +
 * err on failure. */
int64_t sb_slice_get(sb_err *err);

#endif
