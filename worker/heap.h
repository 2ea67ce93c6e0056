/* heap.h — keeping the worker's freed heap from staying resident outside the budget.
 *
 * The worker keeps freed blocks on purpose (sb_rpc_tune_malloc: up to 64 MiB per arena, so
 * that the data plane's receive buffers are reused instead of faulting in fresh pages), and
 * the exchange ops trim the heap after each task, as partition releases do. Within a task,
 * though, the holes its blocks leave stay resident: a 512 MiB sort under `memoryBudget: 512Mi`
 * peaked 30-60 MiB higher so (docs/benchmarks.md). The worker's main thread calls
 * sb_heap_check every quarter second; it trims only when the process's anonymous resident
 * memory exceeds what malloc has handed out (blocks in use, mapped blocks at their whole
 * size: an upper bound on their resident part) by more than `keep`: then at least that much
 * freed heap is resident. Trimming every time instead cost an identity pipeline 0.2-0.3 s of
 * its 0.6 s (it re-faulted the buffers it reuses).
 *
 * Thread-safe (malloc's own locks); owns nothing.
 */
#ifndef SB_WORKER_HEAP_H
#define SB_WORKER_HEAP_H

#include <stddef.h>

/* The freed heap a worker with this store budget may keep resident: a sixteenth of the budget,
 * between 4 and 32 MiB. */
size_t sb_heap_keep(size_t store_budget);

/* Trims the heap (malloc_trim) when more than `keep` bytes of it are free and resident, as
 * above. 1 when it trimmed, 0 when not, -1 when /proc/self/statm could not be read. */
int sb_heap_check(size_t keep);

#endif
