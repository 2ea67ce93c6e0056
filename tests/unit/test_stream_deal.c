/* The stream:// sink in the scheduler (sched.h, "Stream sink") and its dealer (deal.h), driven
 * by a deterministic simulation: one worker runs the tasks and reports one partition per task,
 * ranks ask for slices in an interleaving the test chooses and acknowledge them, and the test
 * checks after every step what the design promises: every row of an epoch dealt to exactly one
 * rank, ranks within one batch of each other, the budget held while nobody reads, epochs in
 * order, and the run's end once every partition was consumed. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/stream/deal.h"
#include "controller/sched/sched.h"
#include "spec_fixture.h"

#define MiB (1024ull * 1024)
#define NSPLITS 12
#define EPOCHS 2
#define BATCH 40

/* The spec, with a memory budget of budget_mib MiB (every partition is 1 MiB). */
static const char *yaml(uint64_t budget_mib)
{
    static char y[512];
    snprintf(y, sizeof y,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: t}\n"
             "spec:\n  source: {uri: 'file:///in', format: jsonl, partitionSize: 1Mi}\n"
             "  stages:\n  - {name: a, op: identity}\n"
             "  sink: {uri: 'stream://', format: jsonl}\n"
             "  execution: {memoryBudget: %" PRIu64 "Mi}\n",
             budget_mib);
    return y;
}

typedef struct {
    spec_holder h;
    sb_sched *s;
    sb_deal *d;
    uint64_t now;
    char splits[NSPLITS][32];
    sb_storage_split sp[NSPLITS];
    /* rows dealt, per epoch and partition (a partition of task t has rows_of(t) rows) */
    uint8_t dealt[EPOCHS][NSPLITS * EPOCHS][200];
    char started[64][64]; /* the split of each op 0 task, in the order they started */
    size_t nstarted;
    const char *worker; /* the live worker's id */
    int cache;          /* stream_cache: every epoch deals epoch 0's partitions */
    uint32_t first;     /* stream_first: the epochs before it are not run (task 0 is its) */
    uint64_t budget;    /* bytes */
} sim;

static uint64_t rows_of(uint64_t index)
{
    return 60 + index * 7 % 90; /* uneven: slices cut partitions between ranks */
}

static uint32_t sim_first; /* the next sim's stream_first (a new leader's) */

static void sim_init_budget(sim *m, int shuffle, uint64_t seed, int cache, uint64_t budget_mib)
{
    memset(m, 0, sizeof *m);
    m->cache = cache;
    m->first = sim_first;
    m->budget = budget_mib * MiB;
    spec_fixture_load(&m->h, yaml(budget_mib));
    for (size_t i = 0; i < NSPLITS; i++) {
        snprintf(m->splits[i], sizeof m->splits[i], "split-%zu", i);
        m->sp[i] = (sb_storage_split){.split = m->splits[i], .bytes = MiB};
    }
    sb_sched_config cfg = {.pipeline = &m->h.p,
                           .pipeline_id = "t",
                           .stream = 1,
                           .stream_epochs = EPOCHS,
                           .stream_shuffle = shuffle,
                           .stream_seed = seed,
                           .stream_cache = cache,
                           .stream_first = sim_first};
    sb_err err;
    m->s = sb_sched_new(&cfg, m->sp, NSPLITS, &err);
    cr_assert_not_null(m->s, "%s", err.msg);
    cr_assert_eq(sb_sched_stream_epochs(m->s), EPOCHS);
    cr_assert_eq(sb_sched_worker_add(m->s, "c1", "cpu", "127.0.0.1:1", 2, NULL, 0, 0, &err), 0);
    m->worker = "c1";
    m->d = sb_deal_new(m->s);
    cr_assert_not_null(m->d);
}

static void sim_init_cache(sim *m, int shuffle, uint64_t seed, int cache)
{
    sim_init_budget(m, shuffle, seed, cache, 4);
}

static void sim_init(sim *m, int shuffle, uint64_t seed)
{
    sim_init_cache(m, shuffle, seed, 0);
}

static void sim_free(sim *m)
{
    sb_deal_free(m->d);
    sb_sched_free(m->s);
    spec_fixture_free(&m->h);
}

/* The worker asks for work and finishes what it got at once: one partition per task; the
 * partitions in flight stay within `bound` bytes. */
static void work_within(sim *m, uint64_t bound)
{
    sb_sched_task t[4];
    size_t n = sb_sched_assign(m->s, m->worker, 2, m->now, t);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(t[i].writes_sink, 0, "a stream's last op writes no sink");
        if (t[i].op == 0 && m->nstarted < 64)
            snprintf(m->started[m->nstarted++], 64, "%" PRIu64 ":%s", t[i].index, t[i].split);
        char id[128];
        snprintf(id, sizeof id, "s0-t%" PRIu64 "-p0", t[i].index);
        sb_storage_output o = {.id = id, .bytes = MiB, .rows = rows_of(t[i].index)};
        sb_sched_metrics mt = {.wall_seconds = 0.01};
        sb_err err;
        cr_assert_eq(sb_sched_complete(m->s, m->worker, t[i].task_id, t[i].attempt, SB_SCHED_OK,
                                       NULL, &o, 1, NULL, 0, &mt, m->now, &err),
                     1, "%s", err.msg);
    }
    char **rel = NULL;
    size_t nrel = sb_sched_take_releases(m->s, m->worker, &rel);
    for (size_t i = 0; i < nrel; i++)
        free(rel[i]);
    free(rel);
    sb_sched_stats st;
    sb_sched_get_stats(m->s, &st);
    cr_assert_leq(st.partition_bytes, bound, "the budget holds: %" PRIu64, st.partition_bytes);
}

static void work(sim *m)
{
    work_within(m, m->budget + MiB);
}

static sb_deal_reply last_slice; /* the latest reply (its strings: until the next call) */

typedef struct {
    int ended;
    uint64_t dealt;
    uint64_t logrows;    /* rows of the slices dealt to it (its sequence), lost ones too */
    uint64_t unconsumed; /* the last rows of it not consumed yet (acknowledged: the rest) */
    uint64_t resend;     /* rows to come again after a restart (counted in dealt already) */
    uint64_t session;    /* 0: the rank's number + 1 */
    const uint8_t *bits; /* consumed beyond logrows - unconsumed (shuffled consumption) */
    size_t nbits;
    uint8_t seq_t[2048];   /* each row of its sequence: the task of its partition, */
    uint8_t seq_row[2048]; /* and its row there */
    sb_deal_reply last;    /* (its strings: until the next call) */
    char last_id[128];     /* the last slice's partition */
    /* LB-BSP ranks: the sizes of their iterations as the replies listed them */
    int lbbsp;
    uint32_t us_per_row; /* the speed it reports (0: reports nothing) */
    uint32_t sizes[512];
    uint32_t nsizes, iteration; /* iterations known; the batch it forms next */
    uint64_t end_rows;
    uint64_t more_rows;   /* > 0: each request asks for slices until their rows reach it */
    uint64_t more_slices; /* slices it got past a request's first */
} rank;

static void record(sim *m, rank *rk, uint32_t r, uint32_t epoch, const sb_deal_reply *p);

/* The rank's rows before iteration k (its listed sizes summed). */
static uint64_t rows_before(const rank *rk, uint32_t k)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < k; i++)
        n += rk->sizes[i];
    return n;
}

/* Rank r asks once (acknowledging its last slice, or saying it could not read it); records the
 * rows dealt. */
static sb_deal_kind ask_lost(sim *m, rank *rk, uint32_t r, uint32_t world, uint32_t epoch,
                             const sb_deal_lost *lost)
{
    sb_deal_request q = {.rank = r,
                         .world = world,
                         .epoch = epoch,
                         .batch = BATCH,
                         .session = rk->session ? rk->session : r + 1,
                         .consumed_base = rk->logrows - rk->unconsumed,
                         .consumed_bits = rk->bits,
                         .nconsumed_bits = rk->nbits,
                         .lost = lost,
                         .nlost = lost != NULL,
                         .balance = rk->lbbsp ? SB_DEAL_LBBSP : SB_DEAL_EQUAL,
                         .iteration = rk->iteration,
                         .step_rows = rk->us_per_row ? BATCH : 0,
                         .step_us = (uint64_t)rk->us_per_row * BATCH,
                         .steps = 1};
    if (lost != NULL) { /* its rows are not the rank's: the test's record forgets them */
        uint64_t t;
        cr_assert_eq(sscanf(lost->id, "s0-t%" SCNu64 "-p0", &t), 1);
        for (uint64_t x = lost->lo; x < lost->hi; x++)
            m->dealt[epoch][t][x] = 0;
        rk->dealt -= lost->hi - lost->lo;
    }
    sb_deal_reply rep;
    sb_deal_next(m->d, m->s, &q, m->now, &rep);
    record(m, rk, r, epoch, &rep);
    /* with more_rows, the slices one request gets (Control.StreamNext's max_rows) */
    for (uint64_t got = rep.kind == SB_DEAL_SLICE ? rep.row_hi - rep.row_lo : 0;
         rk->more_rows > 0 && rep.kind == SB_DEAL_SLICE && got < rk->more_rows;) {
        sb_deal_reply more;
        sb_deal_more(m->d, m->s, &q, m->now, &more);
        cr_assert(more.kind == SB_DEAL_SLICE || more.kind == SB_DEAL_WAIT,
                  "more slices, or a wait: never the end (kind %d)", (int)more.kind);
        if (more.kind != SB_DEAL_SLICE)
            break;
        record(m, rk, r, epoch, &more);
        got += more.row_hi - more.row_lo;
        rk->more_slices++;
        rep = more;
    }
    return rep.kind;
}

/* Records one reply of rank r (a slice's rows, the end, LB-BSP's sizes), asserting what the
 * dealer promises. */
static void record(sim *m, rank *rk, uint32_t r, uint32_t epoch, const sb_deal_reply *p)
{
    sb_deal_reply rep = *p;
    if (rep.kind == SB_DEAL_SLICE) {
        uint64_t t;
        cr_assert_eq(sscanf(rep.part_id, "s0-t%" SCNu64 "-p0", &t), 1, "%s", rep.part_id);
        cr_assert_lt(t, NSPLITS * EPOCHS);
        cr_assert_eq(t / NSPLITS + m->first, m->cache ? m->first : epoch,
                     "partition %s dealt in epoch %u", rep.part_id, epoch);
        cr_assert_eq(rep.rows, rows_of(t));
        cr_assert_lt(rep.row_lo, rep.row_hi);
        for (uint64_t x = rep.row_lo; x < rep.row_hi; x++) {
            cr_assert_eq(m->dealt[epoch][t][x], 0, "row %" PRIu64 " of %s dealt twice", x,
                         rep.part_id);
            m->dealt[epoch][t][x] = (uint8_t)(r + 1);
        }
        if (rk->resend >= rep.row_hi - rep.row_lo)
            rk->resend -= rep.row_hi - rep.row_lo;
        else
            rk->dealt += rep.row_hi - rep.row_lo;
        cr_assert_eq(rk->dealt, rep.dealt_rows);
        cr_assert_eq(rep.seq, rk->logrows, "slices come in the rank's sequence");
        for (uint64_t x = rep.row_lo; x < rep.row_hi && rk->logrows + x - rep.row_lo < 2048; x++) {
            rk->seq_t[rk->logrows + x - rep.row_lo] = (uint8_t)t;
            rk->seq_row[rk->logrows + x - rep.row_lo] = (uint8_t)x;
        }
        rk->logrows += rep.row_hi - rep.row_lo;
    } else if (rep.kind == SB_DEAL_END) {
        rk->ended = 1;
        cr_assert_eq(rep.dealt_rows, rk->dealt);
        cr_assert(rk->lbbsp || rep.end_rows % BATCH == 0);
        cr_assert_leq(rep.end_rows, rep.floor_rows);
    }
    cr_assert_neq(rep.kind, SB_DEAL_ERROR, "%s", rep.message);
    if (rk->lbbsp) { /* the listed sizes never change once decided */
        for (size_t i = 0; i < rep.nsizes && rk->iteration + i < 512; i++) {
            uint32_t k = rk->iteration + (uint32_t)i;
            cr_assert(k >= rk->nsizes || rk->sizes[k] == rep.sizes[i],
                      "iteration %u's size changed", k);
            rk->sizes[k] = rep.sizes[i];
            if (k >= rk->nsizes)
                rk->nsizes = k + 1;
        }
        cr_assert_leq(rows_before(rk, rk->nsizes) - rk->sizes[rk->nsizes - 1],
                      rk->dealt + BATCH * 3,
                      "sizes are decided about an iteration ahead, not more");
        while (rk->iteration < rk->nsizes && rows_before(rk, rk->iteration + 1) <= rk->dealt)
            rk->iteration++;
        if (rep.kind == SB_DEAL_END)
            rk->end_rows = rep.end_rows;
    }
    last_slice = rep;
    rk->last = rep;
    if (rep.kind == SB_DEAL_SLICE)
        snprintf(rk->last_id, sizeof rk->last_id, "%s", rep.part_id);
}

static sb_deal_kind ask(sim *m, rank *rk, uint32_t r, uint32_t world, uint32_t epoch)
{
    return ask_lost(m, rk, r, world, epoch, NULL);
}

/* Epoch e is over for its n ranks: each was told so, their rows are within one batch of each
 * other, and every row of the epoch reached one of them (ask() asserts: never two). */
static void epoch_whole(const sim *m, const rank *rk, uint32_t n, uint32_t e)
{
    uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
    for (uint32_t r = 0; r < n; r++) {
        cr_assert(rk[r].ended, "epoch %u ended for rank %u", e, r);
        lo = rk[r].dealt < lo ? rk[r].dealt : lo;
        hi = rk[r].dealt > hi ? rk[r].dealt : hi;
        sum += rk[r].dealt;
    }
    cr_assert_leq(hi - lo, BATCH, "ranks within one batch: %" PRIu64 "..%" PRIu64, lo, hi);
    uint64_t want = 0;
    /* cached: the first epoch's partitions again */
    uint64_t first = m->cache ? 0 : (e - m->first) * NSPLITS;
    for (uint64_t t = first; t < first + NSPLITS; t++) {
        want += rows_of(t);
        for (uint64_t x = 0; x < rows_of(t); x++)
            cr_assert_neq(m->dealt[e][t][x], 0, "row %" PRIu64 " of task %" PRIu64 " lost", x, t);
    }
    cr_assert_eq(sum, want);
}

/* Three ranks read both epochs; rank 2 asks only every third step (a slow rank). The progress
 * the status shows follows: the epochs ended, and the rows the ranks got of the one they read. */
static void run_epochs(sim *m)
{
    uint32_t ended;
    uint64_t rows;
    for (uint32_t e = m->first; e < EPOCHS; e++) {
        rank rk[3] = {0};
        for (int step = 0; step < 100000 && !(rk[0].ended && rk[1].ended && rk[2].ended); step++) {
            m->now += 1;
            work(m);
            for (uint32_t r = 0; r < 3; r++)
                if (!rk[r].ended && (r < 2 || step % 3 == 0))
                    ask(m, &rk[r], r, 3, e);
            sb_deal_progress(m->d, &ended, &rows);
            if (!(rk[0].ended && rk[1].ended && rk[2].ended)) {
                cr_assert_eq(ended, e, "epoch %u not ended by every rank", e);
                cr_assert_eq(rows, rk[0].dealt + rk[1].dealt + rk[2].dealt);
            }
        }
        epoch_whole(m, rk, 3, e);
        sb_deal_progress(m->d, &ended, &rows);
        cr_assert_eq(ended, e + 1);
        cr_assert_eq(rows, 0, "no rank asked for epoch %u yet", e + 1);
    }
}

Test(stream_deal, every_row_once_ranks_balanced_epochs_in_order)
{
    sim m;
    sim_init(&m, 0, 0);
    run_epochs(&m);
    /* epochs in order: no task of epoch 1 started before every task of epoch 0 */
    int seen1 = 0;
    for (size_t i = 0; i < m.nstarted; i++) {
        uint64_t idx = strtoull(m.started[i], NULL, 10);
        if (idx >= NSPLITS)
            seen1 = 1;
        else
            cr_assert_not(seen1, "epoch 0's task %s after an epoch 1 task", m.started[i]);
    }
    for (int k = 0; k < 3; k++) /* the last acks were sent with the END requests */
        work(&m);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED);
    cr_assert(sb_deal_all_ended(m.d));
    sim_free(&m);
}

/* Ranks that ask for a batch's rows in one request (sb_deal_more, as the consumer does: one
 * call per batch of one-row partitions instead of one per row): every row still goes to exactly
 * one rank, in each rank's sequence, the ranks stay within a batch, and the end comes only as a
 * request's first answer, so the run ends only after the ranks had their slices. */
Test(stream_deal, several_slices_per_request_keep_the_promises)
{
    sim m;
    sim_init(&m, 1, 7);
    uint64_t more = 0;
    for (uint32_t e = 0; e < EPOCHS; e++) {
        rank rk[3] = {0};
        for (uint32_t r = 0; r < 3; r++)
            rk[r].more_rows = BATCH + 25 * r; /* over a partition's rows, and several sizes */
        for (int step = 0; step < 100000 && !(rk[0].ended && rk[1].ended && rk[2].ended); step++) {
            m.now += 1;
            work(&m);
            for (uint32_t r = 0; r < 3; r++)
                if (!rk[r].ended && (r < 2 || step % 3 == 0))
                    ask(&m, &rk[r], r, 3, e);
        }
        epoch_whole(&m, rk, 3, e);
        for (uint32_t r = 0; r < 3; r++)
            more += rk[r].more_slices;
    }
    cr_assert_gt(more, 0, "requests got more than one slice");
    for (int k = 0; k < 3; k++)
        work(&m);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED);
    cr_assert(sb_deal_all_ended(m.d));
    sim_free(&m);
}

Test(stream_deal, nobody_reads_the_budget_holds)
{
    sim m;
    sim_init(&m, 0, 0);
    for (int i = 0; i < 50; i++) {
        m.now++;
        work(&m);
    }
    sb_sched_stats st;
    sb_sched_get_stats(m.s, &st);
    cr_assert_eq(st.partition_bytes, 4 * MiB, "the budget's worth waits: %" PRIu64,
                 st.partition_bytes);
    cr_assert_eq(st.tasks_run, 4, "then the pipeline pauses");
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_RUNNING);
    /* one rank takes and acknowledges a slice: the partition is freed, one more task runs */
    rank rk = {0};
    cr_assert_eq(ask(&m, &rk, 0, 1, 0), SB_DEAL_SLICE);
    work(&m);
    sb_sched_get_stats(m.s, &st);
    cr_assert_eq(st.tasks_run, 4, "taken but not acknowledged: still held");
    cr_assert_eq(ask(&m, &rk, 0, 1, 0), SB_DEAL_SLICE); /* acks the first */
    work(&m);
    sb_sched_get_stats(m.s, &st);
    cr_assert_eq(st.tasks_run, 5, "acknowledged: the room is used again");
    sim_free(&m);
}

/* sink.args.cacheEpochs: the source is read once (NSPLITS tasks) though its 12 MiB of output
 * is 3 budgets; each epoch still deals every row of it once (run_epochs), epoch 1 in another
 * order with a seed; an epoch done with a partition leaves it out of the budget, kept, and the
 * last epoch releases it: the run then succeeds with nothing held. */
Test(stream_deal, cached_epochs_read_the_source_once)
{
    /* zeroed: the memcmp below reads each id's 32 bytes, past its terminator too */
    char order[EPOCHS][NSPLITS][32];
    memset(order, 0, sizeof order);
    sim m;
    sim_init_cache(&m, 1, 5, 1);
    run_epochs(&m);
    cr_assert_eq(m.nstarted, NSPLITS, "the source was read once: %zu tasks", m.nstarted);
    for (int k = 0; k < 3; k++)
        work(&m);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED);
    sb_sched_stats st;
    sb_sched_get_stats(m.s, &st);
    cr_assert_eq(st.partition_bytes, 0, "nothing held at the end: %" PRIu64, st.partition_bytes);
    sim_free(&m);
    /* the order each epoch dealt the partitions in, by one rank alone */
    sim_init_cache(&m, 1, 5, 1);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        rank rk = {0};
        size_t n = 0;
        char prev[128] = "";
        for (int step = 0; step < 100000 && !rk.ended; step++) {
            m.now++;
            work(&m);
            if (ask(&m, &rk, 0, 1, e) == SB_DEAL_SLICE && strcmp(prev, rk.last_id) != 0 &&
                n < NSPLITS) {
                snprintf(order[e][n++], 32, "%s", rk.last_id);
                snprintf(prev, sizeof prev, "%s", rk.last_id);
            }
        }
        cr_assert(rk.ended);
        cr_assert_eq(n, NSPLITS);
    }
    cr_assert_neq(memcmp(order[0], order[1], sizeof order[0]), 0,
                  "epoch 1 deals the kept partitions in another order");
    sim_free(&m);
}

static void split_order(uint64_t seed, int shuffle, char out[EPOCHS][NSPLITS][32])
{
    sim m;
    sim_init(&m, shuffle, seed);
    run_epochs(&m);
    cr_assert_eq(m.nstarted, NSPLITS * EPOCHS);
    for (size_t i = 0; i < m.nstarted; i++) {
        uint64_t idx = strtoull(m.started[i], NULL, 10);
        snprintf(out[idx / NSPLITS][idx % NSPLITS], 32, "%s", strchr(m.started[i], ':') + 1);
    }
    sim_free(&m);
}

Test(stream_deal, seed_shuffles_each_epochs_splits)
{
    static char a[EPOCHS][NSPLITS][32], b[EPOCHS][NSPLITS][32], c[EPOCHS][NSPLITS][32],
        plain[EPOCHS][NSPLITS][32];
    split_order(7, 1, a);
    split_order(7, 1, b);
    split_order(8, 1, c);
    split_order(0, 0, plain);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "the same seed, the same order");
    cr_assert_neq(memcmp(a[0], a[1], sizeof a[0]), 0, "epochs differ");
    cr_assert_neq(memcmp(a, c, sizeof a), 0, "seeds differ");
    for (int e = 0; e < EPOCHS; e++)
        for (int i = 0; i < NSPLITS; i++) {
            char want[32];
            snprintf(want, sizeof want, "split-%d", i);
            cr_assert_str_eq(plain[e][i], want, "no seed: the plan's order");
        }
}

/* An operator leader that took a stream over once every rank had ended epoch 0 under its
 * predecessor (status.stream.epochsEnded 1): it reads the source for epoch 1 alone, its splits in
 * the order the seed gives epoch 1 (the predecessor's order for it), refuses epoch 0 naming it,
 * and ends once every rank ended epoch 1. */
Test(stream_deal, a_new_leader_serves_from_the_first_epoch_not_ended)
{
    static char whole[EPOCHS][NSPLITS][32];
    split_order(7, 1, whole);
    sim_first = 1;
    sim m;
    sim_init(&m, 1, 7);
    sim_first = 0;
    cr_assert_eq(sb_sched_stream_first(m.s), 1);
    uint32_t ended;
    uint64_t rows;
    sb_deal_progress(m.d, &ended, &rows);
    cr_assert_eq(ended, 1, "epoch 0 counts as ended");
    sb_deal_reply rep;
    sb_deal_request q = {.rank = 0, .world = 3, .epoch = 0, .batch = BATCH};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR);
    cr_assert(strstr(rep.message, "epoch 0 ended before this controller took the stream over"),
              "%s", rep.message);
    run_epochs(&m);
    cr_assert_eq(m.nstarted, NSPLITS, "epoch 1 alone read the source: %zu tasks", m.nstarted);
    for (size_t i = 0; i < m.nstarted; i++) {
        uint64_t idx = strtoull(m.started[i], NULL, 10);
        cr_assert_lt(idx, NSPLITS);
        cr_assert_str_eq(strchr(m.started[i], ':') + 1, whole[1][idx],
                         "task %" PRIu64 " reads epoch 1's split of the whole run", idx);
    }
    for (int k = 0; k < 3; k++)
        work(&m);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED);
    cr_assert(sb_deal_all_ended(m.d));
    sim_free(&m);
}

/* A leader that took over after every rank ended every epoch (its predecessor died before it
 * wrote Succeeded) runs nothing and ends. */
Test(stream_deal, a_new_leader_after_the_last_epoch_ends_at_once)
{
    sim_first = EPOCHS + 3; /* clamped to the epochs */
    sim m;
    sim_init(&m, 1, 7);
    sim_first = 0;
    cr_assert_eq(sb_sched_stream_first(m.s), EPOCHS);
    uint32_t ended;
    uint64_t rows;
    sb_deal_progress(m.d, &ended, &rows);
    cr_assert_eq(ended, EPOCHS);
    cr_assert(sb_deal_all_ended(m.d));
    for (int k = 0; k < 3; k++)
        work(&m);
    cr_assert_eq(m.nstarted, 0);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED);
    sim_free(&m);
}

/* Rank r of world asks for epoch e and is refused with an error that starts with want. */
static void q_refused(sim *m, uint32_t r, uint32_t world, uint32_t e, const char *want)
{
    sb_deal_reply rep;
    sb_deal_request q = {.rank = r, .world = world, .epoch = e, .batch = BATCH, .session = r + 1};
    sb_deal_next(m->d, m->s, &q, m->now, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR, "rank %u, epoch %u: not refused", r, e);
    cr_assert(strncmp(rep.message, want, strlen(want)) == 0, "%s", rep.message);
}

/* A leader whose status lagged (the leader before died within a status interval of the end of
 * epoch 0, so the status said no epoch ended): it serves epoch 0 again, but every rank asks for
 * epoch 1, having ended 0. Epoch 0 is skipped once every rank passed it over (its partitions made
 * and released unread, the budget held meanwhile), and epoch 1 is dealt as usual. */
Test(stream_deal, an_epoch_every_rank_passed_over_is_skipped)
{
    sim m;
    sim_init(&m, 0, 0);
    rank rk[3] = {0};
    uint32_t ended;
    uint64_t rows;
    for (int step = 0; step < 20; step++) { /* ranks 0 and 1 ask: they wait */
        m.now++;
        work(&m);
        for (uint32_t r = 0; r < 2; r++)
            cr_assert_eq(ask(&m, &rk[r], r, 3, 1), SB_DEAL_WAIT);
    }
    sb_deal_progress(m.d, &ended, &rows);
    cr_assert_eq(ended, 0, "epoch 0 is not skipped while rank 2 may still read it");
    for (int step = 0; step < 100000 && !(rk[0].ended && rk[1].ended && rk[2].ended); step++) {
        m.now++;
        work(&m);
        for (uint32_t r = 0; r < 3; r++)
            if (!rk[r].ended)
                ask(&m, &rk[r], r, 3, 1);
    }
    epoch_whole(&m, rk, 3, 1);
    sb_deal_progress(m.d, &ended, &rows);
    cr_assert_eq(ended, 2);
    for (uint64_t t = 0; t < NSPLITS; t++)
        for (uint64_t x = 0; x < rows_of(t); x++)
            cr_assert_eq(m.dealt[0][t][x], 0, "epoch 0's row %" PRIu64 " of task %" PRIu64 " dealt",
                         x, t);
    for (int k = 0; k < 3; k++)
        work(&m);
    cr_assert_eq(m.nstarted, 2 * NSPLITS, "epoch 0 was made again, then released unread");
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED);
    sb_sched_stats st;
    sb_sched_get_stats(m.s, &st);
    cr_assert_eq(st.partition_bytes, 0);
    cr_assert(sb_deal_all_ended(m.d));
    q_refused(&m, 0, 3, 0, "epoch 0 ended before this controller took the stream over");
    sim_free(&m);
}

/* After a takeover, a rank that had ended epoch 0 asks for epoch 1 while another reads epoch 0
 * again: the first is told to read epoch 0 again too (else the other would wait for its share),
 * and once it does, both read epoch 0, then 1. */
Test(stream_deal, a_rank_passing_over_an_epoch_others_read_is_refused)
{
    sim m;
    sim_init(&m, 0, 0);
    rank rk[2] = {0};
    m.now++;
    work(&m);
    cr_assert_neq(ask(&m, &rk[1], 1, 2, 0), SB_DEAL_ERROR);
    q_refused(&m, 0, 2, 1, "epoch 0 is served again from its start after a controller takeover");
    for (uint32_t e = 0; e < EPOCHS; e++) {
        rank r2[2] = {0};
        if (e == 0)
            r2[1] = rk[1];
        for (int step = 0; step < 100000 && !(r2[0].ended && r2[1].ended); step++) {
            m.now++;
            work(&m);
            for (uint32_t r = 0; r < 2; r++)
                if (!r2[r].ended)
                    ask(&m, &r2[r], r, 2, e);
        }
        cr_assert(r2[0].ended && r2[1].ended, "epoch %u ended", e);
    }
    sim_free(&m);
}

Test(stream_deal, bad_requests_are_errors)
{
    sim m;
    sim_init(&m, 0, 0);
    sb_deal_reply rep;
    sb_deal_request q = {.rank = 0, .world = 2, .epoch = EPOCHS, .batch = 8};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR);
    cr_assert(strstr(rep.message, "runs 2 epochs"), "%s", rep.message);
    q = (sb_deal_request){.rank = 2, .world = 2, .epoch = 0, .batch = 8};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR, "rank >= world");
    q = (sb_deal_request){.rank = 0, .world = 2, .epoch = 0, .batch = 8};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_neq(rep.kind, SB_DEAL_ERROR, "%s", rep.message);
    q = (sb_deal_request){.rank = 1, .world = 3, .epoch = 0, .batch = 8};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR);
    cr_assert(strstr(rep.message, "every rank must ask the same"), "%s", rep.message);
    /* a first request that says it consumed rows read the epoch from a controller before this
     * one: refused, saying so */
    q = (sb_deal_request){
        .rank = 1, .world = 2, .epoch = 0, .batch = 8, .session = 9, .consumed_base = 1000};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR);
    cr_assert(strstr(rep.message, "from a controller that was replaced"), "%s", rep.message);
    /* after a first request, acknowledgements of rows never dealt, or bits past them, free
     * nothing and break nothing */
    const uint8_t bits[] = {0xff, 0xff};
    q = (sb_deal_request){.rank = 1, .world = 2, .epoch = 0, .batch = 8, .session = 9};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_neq(rep.kind, SB_DEAL_ERROR, "%s", rep.message);
    q.consumed_base = 1000;
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_neq(rep.kind, SB_DEAL_ERROR, "%s", rep.message);
    q = (sb_deal_request){.rank = 1,
                          .world = 2,
                          .epoch = 0,
                          .batch = 8,
                          .session = 9,
                          .consumed_bits = bits,
                          .nconsumed_bits = 2};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_neq(rep.kind, SB_DEAL_ERROR, "%s", rep.message);
    sim_free(&m);
}

Test(stream_deal, worker_lost_before_the_fetch_rows_dealt_again_once)
{
    sim m;
    sim_init(&m, 0, 0);
    for (int i = 0; i < 3; i++) {
        m.now++;
        work(&m);
    }
    rank rk[2] = {0};
    cr_assert_eq(ask(&m, &rk[0], 0, 2, 0), SB_DEAL_SLICE);
    cr_assert_eq(ask(&m, &rk[1], 1, 2, 0), SB_DEAL_SLICE);
    char lost_id[128];
    /* rank 0's slice: worker c1 is lost before rank 0 read it; rank 1 had read its own */
    cr_assert_eq(ask(&m, &rk[0], 0, 2, 0), SB_DEAL_SLICE);
    snprintf(lost_id, sizeof lost_id, "%s", last_slice.part_id);
    sb_deal_lost lost = {.id = lost_id, .lo = last_slice.row_lo, .hi = last_slice.row_hi};
    sb_sched_worker_lost(m.s, "c1", "killed", m.now);
    sb_err err;
    cr_assert_eq(sb_sched_worker_add(m.s, "c2", "cpu", "127.0.0.1:2", 2, NULL, 0, m.now, &err), 0);
    m.worker = "c2";
    cr_assert_neq(ask_lost(&m, &rk[0], 0, 2, 0, &lost), SB_DEAL_ERROR);
    /* the rest of the epoch: the lost rows come again, re-made on c2, to exactly one rank */
    for (int step = 0; step < 100000 && !(rk[0].ended && rk[1].ended); step++) {
        m.now++;
        work(&m);
        for (uint32_t r = 0; r < 2; r++)
            if (!rk[r].ended)
                ask(&m, &rk[r], r, 2, 0);
    }
    cr_assert(rk[0].ended && rk[1].ended);
    uint64_t want = 0;
    for (uint64_t t = 0; t < NSPLITS; t++) {
        want += rows_of(t);
        for (uint64_t x = 0; x < rows_of(t); x++)
            cr_assert_neq(m.dealt[0][t][x], 0, "row %" PRIu64 " of task %" PRIu64 " lost", x, t);
    }
    cr_assert_eq(rk[0].dealt + rk[1].dealt, want, "every row once (ask() asserts: never twice)");
    sb_sched_stats st;
    sb_sched_get_stats(m.s, &st);
    cr_assert_geq(st.partitions_recovered, 1, "the lost partition was re-made by lineage");
    sim_free(&m);
}

/* LB-BSP: rank 1 reports steps twice as slow per row as rank 0's. The iterations' sizes move to
 * 2:1 once both reported, each iteration's sizes sum to the global batch (2 * BATCH), every row
 * is dealt once, and drop_last's rows are the same number of whole iterations on both ranks. */
Test(stream_deal, lbbsp_sizes_follow_speeds_global_batch_constant)
{
    sim m;
    sim_init(&m, 0, 0);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        rank rk[2] = {{.lbbsp = 1, .us_per_row = 100}, {.lbbsp = 1, .us_per_row = 200}};
        for (int step = 0; step < 100000 && !(rk[0].ended && rk[1].ended); step++) {
            m.now++;
            work(&m);
            for (uint32_t r = 0; r < 2; r++)
                if (!rk[r].ended && (r == 0 || step % 2 == 0)) /* rank 1 asks half as often */
                    ask(&m, &rk[r], r, 2, e);
        }
        cr_assert(rk[0].ended && rk[1].ended, "epoch %u ended", e);
        uint64_t want = 0;
        for (uint64_t t = e * NSPLITS; t < (e + 1) * NSPLITS; t++)
            want += rows_of(t);
        cr_assert_eq(rk[0].dealt + rk[1].dealt, want,
                     "every row once (ask() asserts: never twice)");
        uint32_t n = rk[0].nsizes < rk[1].nsizes ? rk[0].nsizes : rk[1].nsizes;
        cr_assert_geq(n, 8, "iterations: %u", n);
        for (uint32_t k = 0; k < n; k++)
            cr_assert_eq(rk[0].sizes[k] + rk[1].sizes[k], 2 * BATCH,
                         "epoch %u iteration %u: %u + %u", e, k, rk[0].sizes[k], rk[1].sizes[k]);
        if (e == 0)
            cr_assert_eq(rk[0].sizes[0], BATCH, "nothing measured yet: equal batches");
        /* 2:1 of 80 rows: 53 and 27 */
        cr_assert_eq(rk[0].sizes[n - 1], 53, "the fast rank's last size: %u", rk[0].sizes[n - 1]);
        cr_assert_eq(rk[1].sizes[n - 1], 27);
        uint32_t it[2];
        for (int r = 0; r < 2; r++) {
            it[r] = 0;
            while (it[r] < rk[r].nsizes && rows_before(&rk[r], it[r] + 1) <= rk[r].end_rows)
                it[r]++;
            cr_assert_eq(rows_before(&rk[r], it[r]), rk[r].end_rows,
                         "rank %d's drop_last rows are whole iterations", r);
            cr_assert_leq(rk[r].end_rows, rk[r].dealt);
        }
        cr_assert_eq(it[0], it[1], "the same number of batches: %u, %u", it[0], it[1]);
        cr_assert_geq(it[0] + 2, n, "fewer than two iterations dropped");
    }
    sb_deal_rank fig[4];
    cr_assert_eq(sb_deal_ranks(m.d, fig, 4), 2);
    cr_assert_eq(fig[0].batch_rows, 53);
    cr_assert_eq(fig[1].batch_rows, 27);
    cr_assert_float_eq(fig[1].step_seconds, 200e-6 * BATCH, 1e-9);
    cr_assert_float_eq(fig[0].rows_per_s, 1e4, 1e-6);
    sim_free(&m);
}

Test(stream_deal, lbbsp_ranks_must_agree)
{
    sim m;
    sim_init(&m, 0, 0);
    sb_deal_reply rep;
    sb_deal_request q = {.rank = 0, .world = 2, .epoch = 0, .batch = 8, .balance = SB_DEAL_LBBSP};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_neq(rep.kind, SB_DEAL_ERROR, "%s", rep.message);
    cr_assert_eq(rep.nsizes, 1, "iteration 0 decided: %zu", rep.nsizes);
    cr_assert_eq(rep.sizes[0], 8);
    q = (sb_deal_request){.rank = 1, .world = 2, .epoch = 0, .batch = 8};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR);
    cr_assert(strstr(rep.message, "balance lbbsp"), "%s", rep.message);
    q = (sb_deal_request){.rank = 1, .world = 2, .epoch = 1, .batch = 8, .balance = 7};
    sb_deal_next(m.d, m.s, &q, 0, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR);
    sim_free(&m);
}

/* A rank restarted mid-epoch (a new session): it gets again exactly its rows not consumed (here
 * its last slice, and three rows of the one before that a shuffle left), first and in order,
 * told what it had consumed; the rest of its share follows; the other rank gets none of them; the
 * old session is refused; and every partition is still released at the end (the run succeeds). */
Test(stream_deal, restarted_rank_gets_its_rows_not_consumed_again)
{
    sim m;
    sim_init(&m, 0, 0);
    rank rk[2] = {0};
    for (int step = 0; step < 6; step++) {
        m.now++;
        work(&m);
        for (uint32_t r = 0; r < 2; r++)
            ask(&m, &rk[r], r, 2, 0);
    }
    /* from now on it reports its last 5 rows not consumed but rows 1 and 3 of them (a
     * shuffle's holes); it asks until it gets one more slice, then dies before consuming it */
    static const uint8_t holes[] = {0x0a};
    cr_assert_geq(rk[0].logrows, 5);
    uint64_t base = rk[0].logrows - 5;
    rk[0].unconsumed = 5;
    rk[0].bits = holes;
    rk[0].nbits = 1;
    while (ask(&m, &rk[0], 0, 2, 0) != SB_DEAL_SLICE) {
        m.now++;
        work(&m);
        ask(&m, &rk[1], 1, 2, 0);
    }
    uint64_t last_rows = rk[0].last.row_hi - rk[0].last.row_lo;
    uint64_t lost_seq[256], nlost = 0;
    for (uint64_t q = base; q < rk[0].logrows; q++)
        if (!(q - base < 8 && (holes[0] >> (q - base) & 1)))
            lost_seq[nlost++] = q;
    cr_assert_geq(nlost, last_rows + 3);
    /* the restart: what it did not consume is not its yet, as far as the test's record goes */
    for (uint64_t i = 0; i < nlost; i++)
        m.dealt[0][rk[0].seq_t[lost_seq[i]]][rk[0].seq_row[lost_seq[i]]] = 0;
    uint64_t consumed_before = rk[0].dealt - nlost;
    rank again = {.session = 77, .dealt = rk[0].dealt, .resend = nlost};
    cr_assert_eq(ask(&m, &again, 0, 2, 0), SB_DEAL_SLICE);
    cr_assert(again.last.restarted, "the reply says it restarted");
    cr_assert_eq(again.last.resume_rows, consumed_before,
                 "it had consumed %" PRIu64 ", the reply says %" PRIu64, consumed_before,
                 again.last.resume_rows);
    while (again.logrows < nlost)
        cr_assert_eq(ask(&m, &again, 0, 2, 0), SB_DEAL_SLICE, "its rows first, at once");
    cr_assert_eq(again.logrows, nlost, "exactly its rows not consumed came again");
    for (uint64_t i = 0; i < nlost; i++)
        cr_assert(again.seq_t[i] == rk[0].seq_t[lost_seq[i]] &&
                      again.seq_row[i] == rk[0].seq_row[lost_seq[i]],
                  "in their order: row %" PRIu64, i);
    /* the replaced consumer is refused */
    sb_deal_request old = {.rank = 0, .world = 2, .epoch = 0, .batch = BATCH, .session = 1};
    sb_deal_reply rep;
    sb_deal_next(m.d, m.s, &old, m.now, &rep);
    cr_assert_eq(rep.kind, SB_DEAL_ERROR);
    cr_assert(strstr(rep.message, "was restarted"), "%s", rep.message);
    for (int step = 0; step < 100000 && !(again.ended && rk[1].ended); step++) {
        m.now++;
        work(&m);
        if (!again.ended)
            ask(&m, &again, 0, 2, 0);
        if (!rk[1].ended)
            ask(&m, &rk[1], 1, 2, 0);
    }
    cr_assert(again.ended && rk[1].ended);
    uint64_t want = 0;
    for (uint64_t t = 0; t < NSPLITS; t++) {
        want += rows_of(t);
        for (uint64_t x = 0; x < rows_of(t); x++)
            cr_assert_neq(m.dealt[0][t][x], 0, "row %" PRIu64 " of task %" PRIu64 " lost", x, t);
    }
    cr_assert_eq(again.dealt + rk[1].dealt, want, "every row once (ask() asserts: never twice)");
    /* epoch 1, read whole, so that the run can end: then every partition was released */
    rank e1[2] = {0};
    for (int step = 0; step < 100000 && !(e1[0].ended && e1[1].ended); step++) {
        m.now++;
        work(&m);
        for (uint32_t r = 0; r < 2; r++)
            if (!e1[r].ended)
                ask(&m, &e1[r], r, 2, 1);
    }
    for (int k = 0; k < 3; k++)
        work(&m);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED, "nothing held forever");
    sim_free(&m);
}

/* Slices reported lost while their partition is still being dealt (the head): every third slice
 * of rank 0 comes back lost in its next request (its partition is still on the worker, so it is
 * dealt again at once). The partition must stay held until its last rows are dealt and
 * consumed: released early, its rows past the lost slice would be dealt from a partition the
 * worker freed (an error, or rows that never come). Every row once, and the run ends. */
Test(stream_deal, lost_slices_of_the_head_keep_it_held_until_all_dealt)
{
    sim m;
    sim_init(&m, 0, 0);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        rank rk[2] = {0};
        int got0 = 0;
        for (int step = 0; step < 100000 && !(rk[0].ended && rk[1].ended); step++) {
            m.now++;
            work(&m);
            for (uint32_t r = 0; r < 2; r++) {
                if (rk[r].ended)
                    continue;
                sb_deal_lost lost;
                char id[128];
                int lose = r == 0 && rk[0].last.kind == SB_DEAL_SLICE && ++got0 % 3 == 0;
                if (lose) {
                    snprintf(id, sizeof id, "%s", rk[0].last_id);
                    lost =
                        (sb_deal_lost){.id = id, .lo = rk[0].last.row_lo, .hi = rk[0].last.row_hi};
                }
                ask_lost(&m, &rk[r], r, 2, e, lose ? &lost : NULL);
            }
        }
        cr_assert(rk[0].ended && rk[1].ended, "epoch %u ended", e);
        uint64_t want = 0;
        for (uint64_t t = e * NSPLITS; t < (e + 1) * NSPLITS; t++)
            want += rows_of(t);
        cr_assert_eq(rk[0].dealt + rk[1].dealt, want,
                     "every row once (ask() asserts: never twice)");
    }
    for (int k = 0; k < 3; k++)
        work(&m);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED, "every partition released");
    sim_free(&m);
}

/* Rank 1 of 2 asks once, then stops; rank 0 asks on (steps times), the worker working between.
 * Checks at every step that rank 1's partitions (those it has a slice of open, its rows dealt
 * ahead included) stay within its share of the budget (half). */
static void rank1_stops(sim *m, rank *rk, int steps)
{
    work(m);
    cr_assert_eq(ask(m, &rk[1], 1, 2, 0), SB_DEAL_SLICE);
    for (int step = 0; step < steps && !rk[0].ended; step++) {
        m->now++;
        work(m);
        ask(m, &rk[0], 0, 2, 0);
        sb_deal_rank fig[2];
        cr_assert_eq(sb_deal_ranks(m->d, fig, 2), 2);
        cr_assert_leq(fig[1].held_bytes, m->budget / 2, "rank 1 holds %" PRIu64 " past its share",
                      fig[1].held_bytes);
    }
}

/* Then rank 1 reads again: both ranks to the end of the epoch, which is whole (epoch_whole). */
static void both_to_the_end(sim *m, rank *rk)
{
    for (int step = 0; step < 100000 && !(rk[0].ended && rk[1].ended); step++) {
        m->now++;
        work(m);
        for (uint32_t r = 0; r < 2; r++)
            if (!rk[r].ended)
                ask(m, &rk[r], r, 2, 0);
    }
    epoch_whole(m, rk, 2, 0);
    cr_assert_eq(rk[0].last.end_rows, rk[1].last.end_rows, "drop_last: the same whole batches");
}

/* Per-rank shares (deal.h): rank 1 stops after its first slice. Rank 0 is not held one batch
 * past it: rank 1's next rows are dealt ahead, so rank 0 goes on, until rank 1's partitions fill
 * its share (4 MiB of the 8 MiB budget: 4 partitions); then rank 0 waits (at its cap), the
 * budget holding (work() asserts). Rank 1 then reads again: its rows dealt ahead come first, and
 * the epoch is whole, once each, the ranks within one batch. */
Test(stream_deal, a_rank_that_stops_stalls_only_its_share)
{
    sim m;
    sim_init_budget(&m, 0, 0, 0, 8);
    rank rk[2] = {0};
    rank1_stops(&m, rk, 200);
    cr_assert_not(rk[0].ended);
    cr_assert_gt(rk[0].dealt, rk[1].dealt + 2 * BATCH,
                 "rank 0 went on past rank 1: %" PRIu64 " rows, rank 1 %" PRIu64, rk[0].dealt,
                 rk[1].dealt);
    cr_assert_eq(rk[0].last.kind, SB_DEAL_WAIT);
    cr_assert(rk[0].last.at_cap, "then it waits for rank 1, whose share is full");
    sb_deal_rank fig[2];
    sb_deal_ranks(m.d, fig, 2);
    cr_assert_gt(fig[1].held_bytes, MiB, "rank 1's share was used: %" PRIu64, fig[1].held_bytes);
    cr_assert_gt(fig[1].ahead_rows, 0);
    uint64_t before = rk[1].dealt;
    both_to_the_end(&m, rk);
    cr_assert_gt(rk[1].dealt, before + fig[1].ahead_rows - 1, "its rows dealt ahead reached it");
    sim_free(&m);
}

/* With a budget whose half holds the whole epoch (12 partitions of 1 MiB, share 32 MiB), rank
 * 0 reads to the end of the epoch while rank 1 does not ask at all after its first slice; rank
 * 1 then gets the rest of its rows and the same number of whole batches. */
Test(stream_deal, the_other_rank_reads_its_epoch_while_the_share_has_room)
{
    sim m;
    sim_init_budget(&m, 0, 0, 0, 64);
    rank rk[2] = {0};
    rank1_stops(&m, rk, 100000);
    cr_assert(rk[0].ended, "rank 0 read the epoch without rank 1 asking");
    cr_assert_geq(rk[0].last.end_rows + 2 * BATCH, rk[0].dealt);
    both_to_the_end(&m, rk);
    sim_free(&m);
}

/* A stream whose plan exchanges rows (groupby here; an exchanged join alike) runs several epochs
 * only with cacheEpochs: an exchange is planned once over every split it is given, so with each
 * epoch reading the source again its reduce would wait for epochs not let in (the run hung).
 * The scheduler refuses it at start, naming the stage; one epoch, or cacheEpochs, plan. */
/* The deadlock of stream-test's restart case: a consumer's shuffle window leaves a row or two
 * of many slices unconsumed, each pinning its whole partition, and a rank with fewer rows in
 * hand than a batch cannot yield them. Here each rank consumes every row of a slice but its
 * first, and that one only 3 slices later (once newer rows came), so the two ranks pin up to 8
 * partitions against a budget of 2. Every row of the epoch must still be dealt: the dealer tells
 * the scheduler its ranks are starved, and one task at a time runs past the budget, which then
 * holds what the ranks pin and one partition more. Before, the ranks waited for ever with 2
 * partitions dealt. */
Test(stream_deal, ranks_whose_leftover_rows_pin_the_budget_still_get_rows)
{
    sim m;
    sim_init_budget(&m, 0, 0, 0, 2);
    rank rk[2] = {0};
    static uint8_t bits[2][512];
    uint64_t firsts[2][256];
    size_t nf[2] = {0, 0};
    uint64_t total = 0;
    for (size_t i = 0; i < NSPLITS; i++)
        total += rows_of(i);
    for (int step = 0; step < 5000 && rk[0].dealt + rk[1].dealt < total; step++) {
        m.now++;
        work_within(&m, m.budget + 9 * MiB); /* 2 ranks x 4 pinned, + 1 */
        for (uint32_t r = 0; r < 2; r++) {
            rk[r].unconsumed = rk[r].logrows; /* consumed: the bits, from row 0 */
            rk[r].bits = bits[r];
            rk[r].nbits = (size_t)(rk[r].logrows + 7) / 8;
            if (ask(&m, &rk[r], r, 2, 0) != SB_DEAL_SLICE)
                continue;
            uint64_t lo = rk[r].last.seq, n = rk[r].last.row_hi - rk[r].last.row_lo;
            cr_assert_lt(lo + n, sizeof bits[r] * 8);
            cr_assert_lt(nf[r], 256);
            for (uint64_t q = lo + 1; q < lo + n; q++)
                bits[r][q / 8] |= (uint8_t)(1u << (q % 8));
            firsts[r][nf[r]++] = lo;
            if (nf[r] > 3) {
                uint64_t q = firsts[r][nf[r] - 4];
                bits[r][q / 8] |= (uint8_t)(1u << (q % 8));
            }
        }
    }
    cr_assert_eq(rk[0].dealt + rk[1].dealt, total,
                 "%" PRIu64 " + %" PRIu64 " of %" PRIu64 " rows dealt", rk[0].dealt, rk[1].dealt,
                 total);
    sim_free(&m);
}

Test(stream_deal, an_exchange_over_epochs_read_again_is_refused)
{
    static const char *y =
        "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: t}\n"
        "spec:\n  source: {uri: 'file:///in', format: jsonl, partitionSize: 1Mi}\n"
        "  stages:\n  - {name: g, op: groupby, args: {keys: [k], aggregates: [{op: count}]}}\n"
        "  sink: {uri: 'stream://', format: jsonl}\n  execution: {memoryBudget: 4Mi}\n";
    spec_holder h;
    spec_fixture_load(&h, y);
    char names[NSPLITS][32];
    sb_storage_split sp[NSPLITS];
    for (size_t i = 0; i < NSPLITS; i++) {
        snprintf(names[i], sizeof names[i], "split-%zu", i);
        sp[i] = (sb_storage_split){.split = names[i], .bytes = MiB};
    }
    for (int k = 0; k < 3; k++) {
        sb_sched_config cfg = {.pipeline = &h.p,
                               .pipeline_id = "t",
                               .stream = 1,
                               .stream_epochs = k == 0 ? 1 : 2,
                               .stream_cache = k == 2};
        sb_err err = {0};
        sb_sched *s = sb_sched_new(&cfg, sp, NSPLITS, &err);
        if (k == 1) {
            cr_assert_null(s, "2 epochs read again with a groupby: refused");
            cr_assert(strstr(err.msg, "stage g exchanges rows") && strstr(err.msg, "cacheEpochs"),
                      "%s", err.msg);
        } else {
            cr_assert_not_null(s, "%s epochs: %s", k == 0 ? "one epoch" : "cached", err.msg);
            sb_sched_free(s);
        }
    }
    spec_fixture_free(&h);
}
