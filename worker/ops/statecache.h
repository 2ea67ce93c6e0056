/* statecache.h — op states kept by a worker between its tasks, so that an op's init (parsing
 * its args, loading a model, creating CUDA streams and pinned buffers, starting a process) runs
 * once per worker and stage+args rather than once per task (ops.h, "Lifetime of an op state").
 *
 * A state is keyed by its op, its stage name and the exact args JSON. A task takes one out of
 * the cache (sb_op_cache_get: the most recently returned idle state of that key, else a new one
 * from impl->init), so one state belongs to one task at a time; at the task's successful end it
 * goes back (sb_op_cache_put: impl->reset, then kept idle), and a failed task frees it. At most
 * max_idle states are kept idle; the least recently returned one beyond that is freed. An op
 * without a reset hook is never kept (today's init and free per task).
 *
 * Thread safety: every function may be called from any slot thread (one mutex). init, reset and
 * free run outside the lock.
 */
#ifndef SB_WORKER_OPS_STATECACHE_H
#define SB_WORKER_OPS_STATECACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "worker/ops/ops.h"

typedef struct sb_op_cache sb_op_cache;

/* Counts since the cache was made: states made by init, tasks that got an idle state instead,
 * idle states freed to stay within the limit, and the idle states now. */
typedef struct {
    uint64_t created, reused, evicted;
    size_t idle;
} sb_op_cache_stats;

/* A cache keeping at most max_idle idle states (0: none, every state is freed at its task's
 * end). NULL when out of memory. */
sb_op_cache *sb_op_cache_new(size_t max_idle);

/* Frees every idle state and the cache. NULL is fine. */
void sb_op_cache_free(sb_op_cache *c);

/* The worker process's cache (one worker per process; max_idle 2 until set). sb_op_shutdown()
 * clears it before the ops' own shutdown hooks (a cached tensor.mlp state points at a model
 * they free). */
sb_op_cache *sb_op_cache_worker(void);

/* Sets the limit (the worker: 2 x its slots) and frees the least recently used idle states
 * beyond it. */
void sb_op_cache_set_limit(sb_op_cache *c, size_t max_idle);

/* An idle state of (impl, stage, args) taken out of the cache, else a new one from
 * impl->init(args). args: the args JSON or NULL (the same key as ""). Returns impl->init's
 * result (0 when reused); the caller owns *state until sb_op_cache_put() or impl->free(). */
int sb_op_cache_get(sb_op_cache *c, const sb_op_impl *impl, const char *stage, const char *args,
                    void **state, sb_err *err);

/* Returns a state whose task finished successfully: impl->reset() makes it ready for the next
 * task and the cache keeps it; an op without reset, a reset that fails, or a cache out of
 * memory frees it (impl->free) instead. The least recently returned idle states beyond the
 * limit are freed. */
void sb_op_cache_put(sb_op_cache *c, const sb_op_impl *impl, const char *stage, const char *args,
                     void *state);

/* Frees every idle state (the worker's exit, sb_op_shutdown()). */
void sb_op_cache_clear(sb_op_cache *c);

void sb_op_cache_stats_get(sb_op_cache *c, sb_op_cache_stats *out);

#endif
