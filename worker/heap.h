/* heap.h — keeping the worker's freed heap from staying resident outside the budget.
 *
 * The worker keeps freed blocks on purpose (sb_rpc_tune_malloc: up to 64 MiB per arena, so
 * that the data plane's receive buffers are reused instead of faulting in fresh pages), and
 * the exchange ops trim the heap after each task, as partition releases do. Within a task,
 * though, the holes its blocks leave stay resident: a 512 MiB sort under `memoryBudget: 512Mi`
 * peaked 30-60 MiB higher so (docs/benchmarks.md). The worker's main thread calls
 * sb_heap_check every quarter second; it trims when the process's anonymous resident memory
 * exceeds what malloc has handed out (blocks in use, mapped blocks at their whole size: an
 * upper bound on their resident part) by more than `keep`: then at least that much freed heap
 * is resident. That bound is blind beside blocks reserved ahead and touched as they fill: a
 * sort's reduce reserves 264 MiB of mapped blocks and touches ~100, and the ~130 MiB of freed
 * inputs it left resident hid under the rest. So it also trims when the process holds more
 * than `keep` past what its store accounts for (sb_heap_outside) while the arenas hold more
 * than `keep` free: some of that may be resident, and giving it back beats spilling
 * partitions for it (a sort of 2 GiB into 12 parts under 512Mi: tree peak 586-639 MiB against
 * 645-684, 3 rounds alternating). Trimming every time instead cost an identity pipeline 0.2-0.3 s
 * of its 0.6 s (it re-faulted the buffers it reuses); these two rules leave such a pipeline, within
 * its budget, untrimmed.
 *
 * The same reading tells the store how much memory the process holds outside it (sb_heap_outside):
 * the store's admission limit shrinks by what passes SB_HEAP_ALLOWANCE, so that what the budget
 * does not count (fragments, gRPC's buffers, a task's working memory beyond its reservation) is
 * paid for by spilling partitions instead of growing the process. At 2 GiB sorted under 512Mi
 * each worker held ~320 MiB against its 256 MiB store budget (docs/benchmarks.md).
 *
 * What counts is the most it held outside over the last two seconds (sb_heap_peak), read every
 * pass of the worker's main loop (~20 ms), not one reading every quarter second: a sort's
 * reduce tasks, 0.45 s each, swing the process by ~170 MiB (their freed heap stays resident
 * until a trim), and readings that fell between the swings let the store refill to its whole
 * budget just before the next one. With the peak the store keeps room for the swing the next
 * task will make: the 2 GiB sort's tree peaked at 513-542 MiB instead of 636-662 (3 runs
 * each, alternating).
 *
 * Thread-safe (malloc's own locks); owns nothing. An sb_heap_peak is its one caller's (the
 * worker's main thread), unlocked.
 */
#ifndef SB_WORKER_HEAP_H
#define SB_WORKER_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* The anonymous memory a worker may hold outside its store's budget (its threads, the tasks'
 * and the data plane's buffers) before the store makes room for it by spilling. Issue 41's goal
 * is the budget + 40 MiB per worker for the whole tree; measured at 10 GiB sorted under 512Mi
 * with 2 workers, the rest of it is ~7 MiB of file pages per worker (code and libraries, Pss)
 * and 16 MiB for `streambatch run` (controller): (80 - 16 - 2 x 7) / 2 = 25 MiB per worker.
 * At 32 MiB, both workers at their store's budget plus the allowance made 606 MiB against 592. */
#define SB_HEAP_ALLOWANCE ((size_t)24 << 20)

/* The most of the readings over the last SB_HEAP_PEAK_SLOTS slots of SB_HEAP_PEAK_SLOT_MS (the
 * current one included): each slot keeps its largest reading. Zero-initialize. */
#define SB_HEAP_PEAK_SLOTS 8
#define SB_HEAP_PEAK_SLOT_MS 250
typedef struct sb_heap_peak {
    size_t slot[SB_HEAP_PEAK_SLOTS];
    uint64_t at; /* the newest reading's slot: its time / SB_HEAP_PEAK_SLOT_MS */
} sb_heap_peak;

/* Adds a reading of `bytes` at now_ms (a monotonic clock); returns the window's most. */
size_t sb_heap_peak_add(sb_heap_peak *p, uint64_t now_ms, size_t bytes);

/* The process's anonymous resident bytes (statm's resident less its shared), or 0 when
 * /proc/self/statm cannot be read. */
size_t sb_heap_anon(void);

/* What of a worker's anonymous memory lies beyond its store's bytes (store_mem: resident and
 * reserved) and the allowance: what the store should make room for (sb_store_set_outside). */
size_t sb_heap_outside(size_t anon, size_t store_mem, size_t allowance);

/* The freed heap a worker with this store budget may keep resident: a sixteenth of the budget,
 * between 4 and 32 MiB. */
size_t sb_heap_keep(size_t store_budget);

/* Trims the heap (malloc_trim) when more than `keep` bytes of it are free and resident, or may
 * be while the process is past its store's accounting, as above, given the process's anonymous
 * resident bytes (sb_heap_anon) and what of them lies outside the store (sb_heap_outside).
 * 1 when it trimmed (the reading is then stale), 0 when not, -1 when anon is 0 (statm could
 * not be read). */
int sb_heap_check(size_t anon, size_t outside, size_t keep);

#endif
