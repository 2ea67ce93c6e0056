/* exchange.h — all-to-all stages in the scheduler's plan (issue 41): which ops exchange rows by
 * key, how many buckets (reduce tasks) a stage gets, and the args its two halves run with.
 *
 * An exchange stage (repartition, random_shuffle, groupby, distinct) is planned as two ops: its
 * map half ends the op group before it (fused with the stages before it, or alone) and writes
 * every task's rows into N buckets, one output partition per bucket (the partition's sequence
 * number is its bucket, "s<op>-t<task>-p<bucket>"); its reduce half starts the next op group,
 * whose task b reads bucket b of every map output once the map op is finished (a barrier). The
 * halves are the worker ops "exchange.map" and "exchange.reduce" (worker/ops/exchange), given
 * the stage's op and args wrapped as {"op": OP, "buckets": N, "memory": BYTES, "args": ARGS}.
 *
 * Memory: strings returned are malloc'd; the caller frees them.
 */
#ifndef SB_SCHED_EXCHANGE_H
#define SB_SCHED_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "spec/pipeline.h"
#include "storage/storage.h"

#define SB_EXCHANGE_MAP_OP "exchange.map"
#define SB_EXCHANGE_REDUCE_OP "exchange.reduce"
#define SB_EXCHANGE_MAX_BUCKETS 4096 /* the most reduce tasks a stage gets (validate's bound) */

/* The buckets of an exchange stage: 1 for limit (limit.h); args.partitions when given; repartition
 * {bytes: SIZE}: the source bytes over SIZE (at least 1); else one per source split, between 1
 * and 64. */
uint32_t sb_exchange_buckets(const sb_stage_spec *st, const sb_storage_split *splits,
                             size_t nsplits);

/* The args of one half (role SB_EXCHANGE_MAP_OP or SB_EXCHANGE_REDUCE_OP) of stage st: the
 * wrapper above. NULL when out of memory. */
char *sb_exchange_args(const sb_stage_spec *st, uint32_t buckets, uint64_t memory);

#endif
