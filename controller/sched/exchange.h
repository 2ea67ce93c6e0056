/* exchange.h — all-to-all stages in the scheduler's plan (issue 41): which ops exchange rows by
 * key, how many buckets (reduce tasks) a stage gets, and the args its two halves run with.
 *
 * An exchange stage (repartition, random_shuffle, groupby, distinct, sort) is planned as two ops:
 * its map half ends the op group before it (fused with the stages before it, or alone) and writes
 * every task's rows into N buckets, one output partition per bucket (the partition's sequence
 * number is its bucket, "s<op>-t<task>-p<bucket>"); its reduce half starts the next op group,
 * whose task b reads bucket b of every map output once the map op is finished (a barrier; for
 * the ops sb_exchange_early allows, a reduce task may start sooner and take its bucket's map
 * outputs as they come: sched.c, "Early reduces"). The
 * halves are the worker ops "exchange.map" and "exchange.reduce" (worker/ops/exchange), given
 * the stage's op and args wrapped as {"op": OP, "buckets": N, "memory": BYTES, "args": ARGS}.
 *
 * sort runs over two exchanges (three ops): its map half spreads rows and samples keys, a middle
 * op "<stage>.range" (an "exchange.reduce" with "round": 1 in its args, whose task b reads
 * bucket b of every map output) picks the range boundaries from the samples and writes range
 * buckets, and the reduce op sorts each range (worker/ops/exchange/sort.c). The reduce tasks are
 * formed in bucket order, so their indices are the ranges' order (the sink lists them so).
 *
 * The exchanged join (a join whose right side the plan found at or above broadcastBelow:
 * sb_sched_config.join_right) is an exchange stage too, planned only where its map half is op 0's
 * (its map tasks are the source's splits): map task i also reads the right side's pieces j with
 * j % maps == i, so every right row goes through a map output exactly once and a lost one is
 * made again by running its task again (worker/ops/exchange/exchange.c).
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

/* 1 when stage st's reduce tasks may start before its map op finished (sched.c, "Early
 * reduces"): its reduce side gives the same rows whatever order its inputs come in (but for
 * the last bits of a double's sum, mean or std) —
 * repartition, random_shuffle, distinct (none promises an order, and random_shuffle orders by
 * seeded hashes), groupby whose aggregates are all count, sum, min, max, mean or std (first,
 * last and collect keep the map order). Not sort (its boundaries come first), limit, join. */
int sb_exchange_early(const sb_stage_spec *st);

/* The buckets of an exchange stage: 1 for limit (limit.h); args.partitions when given; repartition
 * {bytes: SIZE}: the source bytes over SIZE (at least 1); else one per source split, between 1
 * and 64. */
uint32_t sb_exchange_buckets(const sb_stage_spec *st, const sb_storage_split *splits,
                             size_t nsplits);

/* The args of one half (role SB_EXCHANGE_MAP_OP or SB_EXCHANGE_REDUCE_OP) of stage st: the
 * wrapper above. NULL when out of memory. */
char *sb_exchange_args(const sb_stage_spec *st, uint32_t buckets, uint64_t memory);

/* The exchanges a stage running op needs: 2 for sort, else 1. */
int sb_exchange_rounds(const char *op);

/* The args of the middle op of a two-round stage: the wrapper above with "round": round. NULL
 * when out of memory. */
char *sb_exchange_args_round(const sb_stage_spec *st, uint32_t buckets, uint64_t memory, int round);

/* The args of a join stage's exchange halves: the wrapper above with "maps" (op 0's tasks, one
 * per source split) and "rightBytes" (the right side's bytes the plan listed). NULL when out of
 * memory. */
char *sb_exchange_join_args(const sb_stage_spec *st, uint32_t buckets, uint64_t memory,
                            uint64_t maps, uint64_t right_bytes);

/* The buckets of an exchanged join: at least `buckets` (sb_exchange_buckets), and enough that a
 * bucket's share of right_bytes, at four times its size once in the hash table, fits the reduce
 * task's share of the memory budget (memory / 4, worker/ops/exchange/exchange.c); at most
 * SB_EXCHANGE_MAX_BUCKETS. */
uint32_t sb_exchange_join_buckets(uint32_t buckets, uint64_t right_bytes, uint64_t memory);

#endif
