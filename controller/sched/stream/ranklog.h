/* ranklog.h — what the stream's dealer (deal.h) remembers of one trainer rank in one epoch: the
 * slices dealt to it, in order, each at a position (seq) in the rank's sequence of rows, and which
 * of those rows the rank has consumed. It is what makes acknowledgement at use (a batch counts as
 * consumed once the next one is requested) and rank restarts possible: a rank that comes back
 * with a new session gets its rows not yet consumed again, and no others.
 *
 * Consumption is reported as (base, bits): every row before seq `base` is consumed, and row
 * base + i is consumed when bit i of bits is set (LSB first). Rows are consumed in order without
 * a shuffle (bits empty); with local_shuffle_buffer the rows beyond base are a window's worth.
 * A slice whose rows are all consumed is released (its partition's count goes down). A slice
 * the rank could not read (lost) stays in the log, marked, its rows consumed as far as this log
 * goes: the dealer deals them elsewhere.
 *
 * Memory: the log owns its entries' strings; an entry returned by sb_ranklog_resend is valid
 * until the next mutating call.
 */
#ifndef SB_SCHED_STREAM_RANKLOG_H
#define SB_SCHED_STREAM_RANKLOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct sb_ranklog_ent {
    char *id, *address;
    uint64_t bytes, rows; /* the partition's */
    uint64_t lo, hi;      /* its rows dealt */
    uint64_t seq;         /* the position of row lo in the rank's sequence */
    int lost;
} sb_ranklog_ent;

typedef struct sb_ranklog {
    sb_ranklog_ent *e;
    size_t first, n, cap;      /* live entries: [first, n) */
    size_t resend, resend_end; /* after a restart: entries [resend, resend_end) to deal again */
    uint64_t next_seq;
    uint64_t session;  /* the rank's current consumer (0: none yet, or one that sends none) */
    uint64_t *retired; /* sessions replaced by a restart: their requests are refused */
    size_t nretired;
    uint64_t done_rows; /* rows consumed (entries dropped, and before restarts), lost ones not */
    uint64_t batches;   /* batches consumed, as the rank last said */
    uint64_t base;      /* the latest report: rows before base consumed, */
    uint8_t *bits;      /* and these beyond it */
    size_t nbits;       /* bytes */
} sb_ranklog;

/* Calls on an entry's partition: one slice of it more held (+1) or one fewer (-1). */
typedef void (*sb_ranklog_hold_fn)(void *ctx, const char *id, int delta);

void sb_ranklog_free(sb_ranklog *l);

/* Appends a slice dealt to the rank; *seq: its position. 0, or -1 out of memory. */
int sb_ranklog_add(sb_ranklog *l, const char *id, const char *address, uint64_t bytes,
                   uint64_t rows, uint64_t lo, uint64_t hi, uint64_t *seq);

/* The slice [lo, hi) of partition id could not be read: 1 marked lost, 0 no such live slice. */
int sb_ranklog_lost(sb_ranklog *l, const char *id, uint64_t lo, uint64_t hi);

/* A consumption report: entries consumed in full are dropped, hold(-1) for those not lost. A
 * report that cannot be (base past the rows dealt) changes nothing: -1; else 0. */
int sb_ranklog_ack(sb_ranklog *l, uint64_t base, const uint8_t *bits, size_t nbits,
                   uint64_t batches, sb_ranklog_hold_fn hold, void *ctx);

/* The session of a request: 0 the current one (or the first, or none given), 1 a new one (the
 * rank restarted: call sb_ranklog_restart), -1 one replaced earlier (refuse it). */
int sb_ranklog_session(const sb_ranklog *l, uint64_t session);

/* The rank restarted with `session`: the log is rebuilt from the rows not consumed (in their
 * order, at seqs from 0; hold(+1) per new slice, hold(-1) per old one), and they are to be dealt
 * again first (sb_ranklog_resend). *rows and *batches: what the rank consumed before. 0, or -1
 * out of memory (the log is unchanged then). */
int sb_ranklog_restart(sb_ranklog *l, uint64_t session, sb_ranklog_hold_fn hold, void *ctx,
                       uint64_t *rows, uint64_t *batches);

/* The next slice to deal again after a restart, or NULL. */
const sb_ranklog_ent *sb_ranklog_resend(sb_ranklog *l);

#endif
