/* deal.h — the dealer of a stream:// sink: which rows of the output each consumer (a trainer
 * rank) gets next. It decides; it does no I/O. The controller (ctl.c, Control.StreamNext) calls
 * it under its lock with the scheduler whose stream it deals (sched.h, "Stream sink").
 *
 * The deal. Ranks ask one at a time, in any order. A rank gets a slice of the oldest partition
 * not yet dealt: rows [lo, hi) of it, so one partition may be split between ranks, and every
 * row of an epoch goes to exactly one rank. A rank is never dealt more than batch_size rows
 * past the rank with the fewest (it waits instead): the ranks' totals at the end of an epoch
 * then differ by at most one batch, so with drop_last=False their batch counts differ by at most
 * one, and with drop_last=True each rank yields floor(min / batch) whole batches (end_rows), the
 * same count everywhere. A rank that has not connected yet counts with 0 rows, so the others wait
 * for it after one batch: the split waits where it must to keep the counts equal.
 *
 * Per-rank shares. A rank at that cap does not wait for the ranks behind it to ask: they are
 * dealt their next rows ahead (the oldest rows not dealt, up to their own caps), kept in a queue
 * per rank that the rank gets first when it asks, and the floor moves. Each rank's slices open
 * (dealt ahead, or sent and not acknowledged) may hold at most its share of the memory budget,
 * budget / world_size, counting every partition it has a slice of in full (a partition is freed
 * whole, once every slice of it is acknowledged); nothing more is dealt ahead to a rank past its
 * share (one holding nothing gets one slice whatever its size). So a rank that stops reading
 * stalls the others only once its share is full: until then they go on, and its rows wait for
 * it. A rank's own requests are not held to its share: what it has in hand is bounded by its
 * batch (and prefetch), acknowledged as it goes. Rows dealt ahead count in the balance like any
 * others, so the batch counts and exactly-once are as above.
 *
 * Acknowledgements. A rank says in each request which of its rows it has consumed (ranklog.h: a
 * batch counts as consumed once the next one is requested); a partition whose every slice was
 * consumed is released (its worker frees it, the budget gets the room back). A slice the rank
 * could not read (its worker was lost before the fetch) comes back in `lost`: its rows leave the
 * rank's count, the partition is re-made by lineage, and those rows are dealt again before
 * anything else, so no row is lost and none reaches two ranks.
 *
 * Restarts. Each consumer sends a session (random, per open). A request of the same rank and
 * epoch with a new session is a restarted rank: its rows not consumed are dealt to it again
 * first, in their order, then the rest of its share; the reply says what it had consumed
 * (resume_rows, resume_batches), so that its counts go on from there. The replaced session's
 * requests are refused from then on.
 *
 * LB-BSP (balance = SB_DEAL_LBBSP). The epoch runs in iterations: in iteration k rank r gets
 * size[k][r] rows, and sum_r size[k][r] = world * batch (the global batch stays constant). An
 * iteration's sizes are decided once, when the deal first needs them (about one iteration ahead
 * of the slowest rank), in proportion to each rank's measured speed: rows per second of the steps
 * it reported (step_rows / step_us, averaged with a half-life of one report), equal while nothing
 * is measured. So sizes change only at iteration boundaries (the seed's semi-dynamic balancing).
 * The balance rule is in iterations instead of rows: a rank is dealt at most up to the end of
 * iteration m + 1, m being the iterations every rank has been dealt in full; floor_rows is its
 * rows up to iteration m, so with drop_last every rank yields m batches at the end of the epoch
 * (the same count), and without it the counts differ by at most one. A reply lists the rank's
 * sizes from the iteration it asked about (sizes[], as far as decided).
 *
 * A new leader. The scheduler of an operator leader that took a stream over starts at the first
 * epoch some rank had not ended, as the status said (sb_sched_stream_first): requests for the
 * epochs before it are refused, naming them, and they count as ended. The epoch in progress is
 * served again from its start. The status lags (it is written every few seconds), so the ranks
 * may have ended that epoch too: ranks read epochs in order, so a rank whose first request here
 * is for a later epoch passed the earlier ones over. An epoch every rank passed over is skipped
 * (its partitions are released unread as they are made, and it counts as ended); a rank that
 * passed over an epoch other ranks read again is refused, naming it, since they would wait for
 * its share. A rank asking for a later epoch never forces a task past the budget while an
 * earlier epoch is still being made (that task would only make more of the earlier epoch).
 *
 * Memory: the dealer owns its strings; a reply's strings stay valid until the next call.
 */
#ifndef SB_SCHED_STREAM_DEAL_H
#define SB_SCHED_STREAM_DEAL_H

#include <stddef.h>
#include <stdint.h>

#include "controller/sched/sched.h"

typedef struct sb_deal sb_deal;

typedef enum { SB_DEAL_SLICE, SB_DEAL_WAIT, SB_DEAL_END, SB_DEAL_ERROR } sb_deal_kind;

/* A slice its rank could not read (the worker holding it was lost). */
typedef struct sb_deal_lost {
    const char *id;
    uint64_t lo, hi;
} sb_deal_lost;

enum { SB_DEAL_EQUAL = 0, SB_DEAL_LBBSP = 1 };
#define SB_DEAL_SIZES 1024 /* sizes listed in a reply, at most */

typedef struct sb_deal_request {
    uint32_t rank, world, epoch, batch;
    uint32_t balance;   /* SB_DEAL_EQUAL or SB_DEAL_LBBSP (every rank of an epoch the same) */
    uint32_t iteration; /* LBBSP: the batch the rank forms next (0-based): sizes[] start there */
    uint64_t step_rows, step_us, steps; /* steps the rank timed since its last request */
    uint64_t session;                   /* the consumer's (0: none: no restarts) */
    /* consumed: every row of the rank's sequence before consumed_base, and consumed_base + i
     * where bit i of consumed_bits is set (ranklog.h); consumed_batches: its batches consumed */
    uint64_t consumed_base, consumed_batches;
    const uint8_t *consumed_bits;
    size_t nconsumed_bits;    /* bytes */
    int ack_only;             /* only the acknowledgement: no slice dealt (the reply is a WAIT) */
    const sb_deal_lost *lost; /* slices of this epoch the rank could not read: re-made by lineage
                                 (sb_sched_stream_lost) and dealt again, first */
    size_t nlost;
} sb_deal_request;

typedef struct sb_deal_reply {
    sb_deal_kind kind;
    const char *part_id, *address; /* SLICE */
    uint64_t bytes, rows;          /* SLICE: the partition's size and rows */
    uint64_t row_lo, row_hi;       /* SLICE: the rows of it for this rank */
    uint64_t seq;                  /* SLICE: row_lo's position in the rank's sequence */
    int restarted;                 /* a new session of the rank: it had consumed resume_* */
    uint64_t resume_rows, resume_batches;
    int budget_full;     /* WAIT: the partitions held fill the memory budget (nothing more is made
                            until a rank consumes) */
    int at_cap;          /* WAIT: the rank is a batch (LB-BSP: an iteration) ahead of the slowest */
    uint64_t floor_rows; /* rows every rank of the epoch has been dealt so far */
    uint64_t dealt_rows; /* rows dealt to this rank (END: in all) */
    uint64_t end_rows;   /* END: whole batches of floor_rows (drop_last's rows) */
    char message[256];   /* ERROR */
    uint32_t sizes[SB_DEAL_SIZES]; /* LBBSP: the rank's batch rows for iterations iteration.. */
    size_t nsizes;
} sb_deal_reply;

/* A rank's latest figures (LB-BSP's inputs and output; equal batches report batch). */
typedef struct sb_deal_rank {
    uint32_t rank;
    uint64_t batch_rows; /* its batch in the latest iteration decided */
    double step_seconds; /* its latest reported step (0: none yet) */
    double rows_per_s;   /* its measured speed (0: none yet) */
    uint64_t held_bytes; /* partitions it has a slice open of (its share's charge) */
    uint64_t ahead_rows; /* rows dealt ahead to it, not sent yet */
} sb_deal_rank;

/* A dealer for the scheduler's stream (sb_sched_stream_epochs > 0); NULL when out of memory. */
sb_deal *sb_deal_new(const sb_sched *s);
void sb_deal_free(sb_deal *d);

/* Handles one request: a restart, the acknowledgement (partitions released in s), then the next
 * slice for the rank, a wait, the end of its epoch, or an error (a bad rank or epoch, ranks that
 * disagree on world_size, batch_size or balance, a replaced session). */
void sb_deal_next(sb_deal *d, sb_sched *s, const sb_deal_request *req, uint64_t now_ms,
                  sb_deal_reply *rep);

/* One more slice for the request sb_deal_next just answered with a slice, under the same lock
 * (Control.StreamNext's max_rows: several slices in one reply); its acknowledgements, steps and
 * lost slices were taken then. A wait instead when the rank has nothing more now, and never the
 * end (the rank hears it at its next request, after fetching these). The reply's strings are
 * valid until the next call: copy them first. */
void sb_deal_more(sb_deal *d, sb_sched *s, const sb_deal_request *req, uint64_t now_ms,
                  sb_deal_reply *rep);

/* Up to max ranks' figures of the latest epoch any rank asked about; returns how many. */
size_t sb_deal_ranks(const sb_deal *d, sb_deal_rank *out, size_t max);

/* Ranks that got the end of every epoch (all ranks of every epoch: the stream is over). */
int sb_deal_all_ended(const sb_deal *d);

/* How far the consumers are (a Pipeline's status.stream): *ended, the epochs from the first
 * that every rank was told are over; *rows, the rows sent to the ranks in the epoch after them
 * (0 once every epoch ended, or before any rank asked for it). */
void sb_deal_progress(const sb_deal *d, uint32_t *ended, uint64_t *rows);

#endif
