/* queue.h — a rate-limited work queue of string keys, modelled on client-go's workqueue.
 *
 * Semantics:
 *   - a key is queued at most once (adding a queued key is a no-op);
 *   - a key handed out by sb_k8s_queue_get() is "processing" until sb_k8s_queue_done(); adding
 *     it meanwhile marks it dirty, and done() queues it again, so no two workers ever process
 *     the same key at once;
 *   - sb_k8s_queue_add_rate_limited() delays the key by the larger of a per-key exponential
 *     backoff (base_delay * 2^failures, capped at max_delay; 5 ms -> 1000 s by default) and an
 *     overall token bucket (qps, burst; 10/100 by default); sb_k8s_queue_forget() resets the
 *     key's failure count;
 *   - sb_k8s_queue_get() blocks until a key is ready, the timeout passes or the queue is shut
 *     down (shutdown lets workers drain nothing more: get returns NULL at once).
 *
 * Ownership: the queue copies every key it is given. sb_k8s_queue_get() returns a malloc'd copy
 * the caller frees (after calling sb_k8s_queue_done() with it). All functions are thread-safe.
 * Bookkeeping is linear in the number of distinct keys (fine for the operator's hundreds).
 */
#ifndef SB_K8S_QUEUE_H
#define SB_K8S_QUEUE_H

#include <stddef.h>

#include "core/err.h"

typedef struct sb_k8s_queue_opts {
    double base_delay_s; /* per-key backoff for the first failure; default 0.005 */
    double max_delay_s;  /* cap of the per-key backoff; default 1000 */
    double qps;          /* overall token bucket refill rate; 0: default 10; < 0 disables it */
    double burst;        /* bucket size; default 100 */
} sb_k8s_queue_opts;

typedef struct sb_k8s_queue sb_k8s_queue;

/* opts may be NULL (defaults); zero fields take their defaults too. */
sb_k8s_queue *sb_k8s_queue_new(const sb_k8s_queue_opts *opts, sb_err *err);
/* Frees the queue; call after every worker has returned from get(). */
void sb_k8s_queue_free(sb_k8s_queue *q);

/* Queues key now. Returns 0, or -1 when out of memory or shut down. */
int sb_k8s_queue_add(sb_k8s_queue *q, const char *key);
/* Queues key after delay_ms (an earlier pending time for the same key wins). */
int sb_k8s_queue_add_after(sb_k8s_queue *q, const char *key, long delay_ms);
/* Queues key after its rate-limit delay and counts one more failure for it. */
int sb_k8s_queue_add_rate_limited(sb_k8s_queue *q, const char *key);
/* Clears key's failure count (call after a successful reconcile). */
void sb_k8s_queue_forget(sb_k8s_queue *q, const char *key);
/* Failures counted for key since the last forget. */
int sb_k8s_queue_num_requeues(sb_k8s_queue *q, const char *key);

/* Waits for a ready key: timeout_ms < 0 waits forever. Returns a malloc'd copy (caller frees)
 * or NULL on timeout or shutdown (sb_k8s_queue_is_shutdown() tells which). */
char *sb_k8s_queue_get(sb_k8s_queue *q, long timeout_ms);
/* Marks key as processed; if it was added meanwhile, it is queued again. */
void sb_k8s_queue_done(sb_k8s_queue *q, const char *key);

/* Keys ready to be handed out (not counting delayed or processing keys). */
size_t sb_k8s_queue_len(sb_k8s_queue *q);
/* Keys waiting for their delay to pass. */
size_t sb_k8s_queue_delayed(sb_k8s_queue *q);

/* Wakes every get() (they return NULL) and refuses further adds. */
void sb_k8s_queue_shutdown(sb_k8s_queue *q);
int sb_k8s_queue_is_shutdown(sb_k8s_queue *q);

#endif
