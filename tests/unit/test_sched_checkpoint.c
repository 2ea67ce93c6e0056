/* Scheduler checkpoint and resume (controller failover), worker removability and pool demand.
 * A deterministic simulation like test_sched.c drives the scheduler; after every event the
 * checkpoint is checked against what the simulation knows: it only grows, and no committed
 * split has a task running or a partition waiting for a consumer (a half-done component is
 * never committed). A resumed scheduler runs only the other splits and ends with the resumed
 * parts plus new ones, without id collisions. `streambatch run --resume` drops carried-over
 * parts that are missing or differ from the checkpoint, with their splits (runckpt.h). */
#include <criterion/criterion.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/local/runckpt.h"
#include "controller/sched/ranges.h"
#include "controller/sched/sched.h"
#include "doc/doc.h"
#include "io/sink.h"
#include "partition/partition.h"
#include "spec/pipeline.h"
#include "spec_fixture.h"
#include "testutil.h"

#define MiB (1024ull * 1024)

static void load_spec(spec_holder *h, const char *stages, const char *execution)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: t}\n"
             "spec:\n  source: {uri: 'file:///in', format: text, partitionSize: 64Mi}\n"
             "  stages:\n%s  sink: {uri: 'file:///out', format: text}\n  execution: %s\n",
             stages, execution);
    spec_fixture_load(h, yaml);
}

static const char *ONE_OP = "  - {name: a, op: identity}\n  - {name: b, op: identity}\n";
static const char *CPU_GPU = "  - {name: load, op: identity}\n"
                             "  - {name: infer, op: bench.sleep, args: {msPerMB: 1}, "
                             "resources: {gpu: 1}}\n";

/* ---- simulation ----------------------------------------------------------------------------- */

#define MAXW 8
#define MAXRUN 16
#define MAXSPLITS 64
#define MAXSEQ 8

typedef struct {
    char id[64];
    uint32_t attempt, op;
    uint64_t index, in_bytes, done_at;
    char inputs[64][64];
    size_t ninputs;
} running;

typedef struct {
    char id[16], pool[8], addr[32];
    uint32_t slots;
    int alive;
    running run[MAXRUN];
    size_t nrun;
} simworker;

typedef struct {
    sb_sched *s;
    simworker w[MAXW];
    size_t nw;
    uint64_t now, events, target;
    size_t nsplits, nops;
    uint64_t split_bytes[MAXSPLITS];
    uint32_t source_runs[MAXSPLITS];    /* op-0 attempts assigned per split */
    uint8_t pending[MAXSPLITS][MAXSEQ]; /* op-0 outputs made and not yet given to a consumer */
    uint64_t violations;                /* budget */
    uint64_t coalesced;                 /* tasks reading partitions of several splits */
    /* checkpoint checks */
    int check;
    uint8_t committed[MAXSPLITS];
    size_t ncommitted_parts;
    uint64_t checkpoints_partial; /* checkpoints with some but not all splits committed */
} sim;

static size_t split_of(const char *id) /* "s0-t<split>-p<seq>" */
{
    return (size_t)strtoull(id + 4, NULL, 10);
}

static void check_checkpoint(sim *m)
{
    char *ranges;
    sb_storage_output *parts;
    size_t n;
    sb_err err;
    cr_assert_eq(sb_sched_checkpoint(m->s, &ranges, &parts, &n, &err), 0, "%s", err.msg);
    uint8_t set[MAXSPLITS];
    cr_assert_eq(sb_ranges_parse(ranges, set, m->nsplits, &err), 0, "%s: %s", ranges, err.msg);
    size_t ncommitted = 0;
    for (size_t i = 0; i < m->nsplits; i++) {
        cr_assert(set[i] || !m->committed[i], "split %zu left the checkpoint (%s)", i, ranges);
        m->committed[i] = set[i];
        ncommitted += set[i];
    }
    cr_assert_geq(n, m->ncommitted_parts, "the checkpoint's parts only grow");
    m->ncommitted_parts = n;
    if (ncommitted > 0 && ncommitted < m->nsplits)
        m->checkpoints_partial++;
    /* nothing of a committed split runs or waits */
    for (size_t w = 0; w < m->nw; w++)
        for (size_t k = 0; k < m->w[w].nrun; k++) {
            const running *r = &m->w[w].run[k];
            if (r->op == 0)
                cr_assert(!set[r->index], "split %" PRIu64 " is running yet committed (%s)",
                          r->index, ranges);
            for (size_t i = 0; i < r->ninputs; i++)
                cr_assert(!set[split_of(r->inputs[i])], "task %s reads %s of committed split (%s)",
                          r->id, r->inputs[i], ranges);
        }
    for (size_t i = 0; i < m->nsplits; i++)
        for (size_t q = 0; q < MAXSEQ; q++)
            cr_assert(!m->pending[i][q] || !set[i], "split %zu has a waiting partition (%s)", i,
                      ranges);
    /* every part is a sink part of the scheduler */
    size_t nsink;
    const sb_storage_output *sink = sb_sched_sink_parts(m->s, &nsink);
    for (size_t i = 0; i < n; i++) {
        int found = 0;
        for (size_t k = 0; k < nsink && !found; k++)
            found = strcmp(sink[k].id, parts[i].id) == 0 && sink[k].bytes == parts[i].bytes;
        cr_assert(found, "%s", parts[i].id);
    }
    sb_sched_parts_free(parts, n);
    free(ranges);
}

static void sim_add_worker(sim *m, const char *id, const char *pool, uint32_t slots)
{
    simworker *w = &m->w[m->nw++];
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    snprintf(w->pool, sizeof w->pool, "%s", pool);
    snprintf(w->addr, sizeof w->addr, "127.0.0.1:%zu", 9000 + m->nw);
    w->slots = slots;
    w->alive = 1;
    cr_assert_eq(sb_sched_worker_add(m->s, id, pool, w->addr, slots, NULL, 0, m->now, NULL), 0);
}

static void sim_poll(sim *m, simworker *w)
{
    if (!w->alive || w->nrun >= w->slots)
        return;
    sb_sched_task tasks[MAXRUN];
    size_t n = sb_sched_assign(m->s, w->id, w->slots - w->nrun, m->now, tasks);
    for (size_t i = 0; i < n; i++) {
        running *r = &w->run[w->nrun++];
        memset(r, 0, sizeof *r);
        snprintf(r->id, sizeof r->id, "%s", tasks[i].task_id);
        r->attempt = tasks[i].attempt;
        r->op = tasks[i].op;
        r->index = tasks[i].index;
        if (tasks[i].split != NULL) {
            r->in_bytes = m->split_bytes[r->index];
            m->source_runs[r->index]++;
        }
        for (size_t k = 0; k < tasks[i].ninputs && k < 64; k++) {
            r->in_bytes += tasks[i].inputs[k].bytes;
            snprintf(r->inputs[k], 64, "%s", tasks[i].inputs[k].id);
            r->ninputs++;
            const char *p = strstr(tasks[i].inputs[k].id, "-p");
            m->pending[split_of(tasks[i].inputs[k].id)][strtoul(p + 2, NULL, 10)] = 0;
        }
        for (size_t k = 1; k < r->ninputs; k++)
            if (split_of(r->inputs[k]) != split_of(r->inputs[0])) {
                m->coalesced++;
                break;
            }
        r->done_at = m->now + (r->op == 0 ? 1 : 3) * (r->in_bytes / MiB) + 1;
    }
    sb_sched_stats st;
    sb_sched_get_stats(m->s, &st);
    if (st.partition_bytes >
        st.budget + (st.max_partition_bytes ? st.max_partition_bytes : m->target))
        m->violations++;
}

static void sim_finish(sim *m, simworker *w, size_t k)
{
    running r = w->run[k];
    w->run[k] = w->run[--w->nrun];
    uint64_t out = r.in_bytes;
    sb_storage_output outs[MAXSEQ];
    char ids[MAXSEQ][64];
    size_t n = 0;
    while (out > 0 && n < MAXSEQ) {
        uint64_t b = out > m->target ? m->target : out;
        snprintf(ids[n], sizeof ids[n], "s%u-t%" PRIu64 "-p%zu", r.op, r.index, n);
        outs[n] = (sb_storage_output){ids[n], b, b / 100, (uint32_t)(r.index * 31 + n), NULL};
        out -= b;
        n++;
    }
    int rc = sb_sched_complete(m->s, w->id, r.id, r.attempt, SB_SCHED_OK, NULL, outs, n, NULL, 0,
                               NULL, m->now, NULL);
    cr_assert_geq(rc, 0);
    if (rc == 1 && r.op == 0 && m->nops > 1)
        for (size_t i = 0; i < n; i++)
            m->pending[r.index][i] = 1;
    char **rel;
    size_t nrel = sb_sched_take_releases(m->s, w->id, &rel);
    for (size_t i = 0; i < nrel; i++)
        free(rel[i]);
    free(rel);
}

static void sim_run(sim *m, uint64_t max_events, void (*fault)(sim *, uint64_t))
{
    while (sb_sched_state_get(m->s, NULL) == SB_SCHED_RUNNING && m->events < max_events) {
        for (size_t i = 0; i < m->nw; i++)
            sim_poll(m, &m->w[i]);
        if (m->check)
            check_checkpoint(m);
        simworker *bw = NULL;
        size_t bk = 0;
        for (size_t i = 0; i < m->nw; i++)
            for (size_t k = 0; k < m->w[i].nrun; k++)
                if (m->w[i].alive && (bw == NULL || m->w[i].run[k].done_at < bw->run[bk].done_at)) {
                    bw = &m->w[i];
                    bk = k;
                }
        if (bw == NULL)
            break;
        m->now = bw->run[bk].done_at;
        sim_finish(m, bw, bk);
        m->events++;
        if (fault)
            fault(m, m->events);
        if (m->check)
            check_checkpoint(m);
    }
}

/* Splits of varied sizes, so partitions of several splits get coalesced into one task and
 * some splits yield several partitions. */
static uint64_t split_size(size_t i)
{
    static const uint64_t mb[] = {16, 24, 100, 40, 8, 80, 16, 130, 30};
    return mb[i % (sizeof mb / sizeof mb[0])] * MiB;
}

static void sim_init(sim *m, spec_holder *h, size_t nsplits, const sb_sched_resume *resume,
                     sb_err *err)
{
    memset(m, 0, sizeof *m);
    cr_assert_leq(nsplits, MAXSPLITS);
    m->target = (uint64_t)h->p.spec.source.partition_size;
    m->nsplits = nsplits;
    sb_storage_split sp[MAXSPLITS];
    char names[MAXSPLITS][32];
    for (size_t i = 0; i < nsplits; i++) {
        m->split_bytes[i] = split_size(i);
        snprintf(names[i], 32, "split-%zu", i);
        sp[i] = (sb_storage_split){names[i], m->split_bytes[i]};
    }
    sb_sched_config cfg = {.pipeline = &h->p, .pipeline_id = "ns/t", .resume = resume};
    m->s = sb_sched_new(&cfg, sp, nsplits, err);
    if (m->s != NULL)
        m->nops = sb_sched_group_count(m->s);
}

static uint64_t total_bytes(size_t nsplits)
{
    uint64_t t = 0;
    for (size_t i = 0; i < nsplits; i++)
        t += split_size(i);
    return t;
}

/* ---- tests ---------------------------------------------------------------------------------- */

Test(sched_checkpoint, fused_single_op)
{
    spec_holder h;
    load_spec(&h, ONE_OP, "{memoryBudget: 1Gi}");
    sim m;
    sb_err err;
    sim_init(&m, &h, 10, NULL, &err);
    cr_assert_not_null(m.s, "%s", err.msg);
    cr_assert_eq(m.nops, 1);
    m.check = 1;
    char *ranges;
    sb_storage_output *parts;
    size_t n;
    cr_assert_eq(sb_sched_checkpoint(m.s, &ranges, &parts, &n, &err), 0);
    cr_expect_str_eq(ranges, "", "nothing committed before anything ran");
    cr_expect_eq(n, 0);
    free(ranges);
    sb_sched_parts_free(parts, n);
    sim_add_worker(&m, "c1", "cpu", 2);
    sim_run(&m, 3, NULL); /* splits 0, 1 and 3 finish first (split 2 has 100 MiB) */
    cr_assert_eq(sb_sched_checkpoint(m.s, &ranges, &parts, &n, &err), 0);
    cr_expect_str_eq(ranges, "0-1,3");
    cr_expect_eq(n, 3, "one part per committed split");
    for (size_t i = 0; i < n; i++)
        cr_expect(strncmp(parts[i].id, "s0-t", 4) == 0 && split_of(parts[i].id) != 2, "%s",
                  parts[i].id);
    free(ranges);
    sb_sched_parts_free(parts, n);
    sim_run(&m, 100000, NULL);
    cr_assert_eq(sb_sched_state_get(m.s, NULL), SB_SCHED_SUCCEEDED);
    cr_assert_eq(sb_sched_checkpoint(m.s, &ranges, &parts, &n, &err), 0);
    cr_expect_str_eq(ranges, "0-9");
    size_t nsink;
    sb_sched_sink_parts(m.s, &nsink);
    cr_expect_eq(n, nsink);
    free(ranges);
    sb_sched_parts_free(parts, n);
    sb_sched_free(m.s);
    spec_fixture_free(&h);
}

/* Manual steps with two ops (cpu -> gpu), 64 MiB target: partitions of splits 0 and 1 meet in
 * one gpu task, and split 1 has a second partition still waiting. Split 0 is then fully done
 * but its component is not, so nothing is committed. */
typedef struct {
    char id[64];
    uint32_t attempt;
    size_t ninputs;
} taken;

static taken take(sb_sched *s, const char *w, uint64_t now)
{
    sb_sched_task t;
    cr_assert_eq(sb_sched_assign(s, w, 1, now, &t), 1, "%s got no task", w);
    taken k = {.attempt = t.attempt, .ninputs = t.ninputs};
    snprintf(k.id, sizeof k.id, "%s", t.task_id);
    return k;
}

static void finish(sb_sched *s, const char *w, taken t, const char *const *ids, const uint64_t *mb,
                   size_t n)
{
    sb_storage_output outs[8];
    for (size_t i = 0; i < n; i++)
        outs[i] = (sb_storage_output){ids[i], mb[i] * MiB, mb[i], 7, NULL};
    cr_assert_eq(sb_sched_complete(s, w, t.id, t.attempt, SB_SCHED_OK, NULL, outs, n, NULL, 0, NULL,
                                   0, NULL),
                 1, "%s", t.id);
    char **rel;
    size_t nrel = sb_sched_take_releases(s, w, &rel);
    for (size_t i = 0; i < nrel; i++)
        free(rel[i]);
    free(rel);
}

static void expect_checkpoint(sb_sched *s, const char *want_ranges, size_t want_parts)
{
    char *ranges;
    sb_storage_output *parts;
    size_t n;
    sb_err err;
    cr_assert_eq(sb_sched_checkpoint(s, &ranges, &parts, &n, &err), 0, "%s", err.msg);
    cr_expect_str_eq(ranges, want_ranges);
    cr_expect_eq(n, want_parts, "%zu parts, want %zu (ranges %s)", n, want_parts, ranges);
    free(ranges);
    sb_sched_parts_free(parts, n);
}

Test(sched_checkpoint, half_done_component_is_not_committed)
{
    spec_holder h;
    load_spec(&h, CPU_GPU, "{memoryBudget: 4Gi}");
    sb_storage_split sp[4] = {{"0", 32 * MiB}, {"1", 64 * MiB}, {"2", 32 * MiB}, {"3", 10 * MiB}};
    sb_sched_config cfg = {.pipeline = &h.p, .pipeline_id = "ns/t"};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, sp, 4, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_sched_worker_add(s, "c1", "cpu", "a:1", 1, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "g1", "gpu", "a:2", 1, NULL, 0, 0, NULL), 0);
    uint64_t q, r;
    int act;
    sb_sched_pool_demand(s, "gpu", &q, &r, &act);
    cr_expect(q == 0 && r == 0 && act == 1, "gpu: %" PRIu64 " %" PRIu64 " %d", q, r, act);
    sb_sched_pool_demand(s, "cpu", &q, &r, &act);
    cr_expect(q == 4 && r == 0 && act == 1);

    taken t = take(s, "c1", 0);
    cr_assert_str_eq(t.id, "ns/t/s0-t0");
    cr_expect_eq(sb_sched_worker_removable(s, "c1"), 0, "running a task");
    finish(s, "c1", t, (const char *[]){"s0-t0-p0"}, (uint64_t[]){32}, 1);
    t = take(s, "c1", 0);
    finish(s, "c1", t, (const char *[]){"s0-t1-p0", "s0-t1-p1"}, (uint64_t[]){32, 32}, 2);
    cr_expect_eq(sb_sched_worker_removable(s, "c1"), 0, "holds partitions still needed");
    cr_expect_eq(sb_sched_worker_removable(s, "g1"), 1, "idle and holds nothing");
    cr_expect_eq(sb_sched_worker_removable(s, "nobody"), 0);
    sb_sched_pool_demand(s, "gpu", &q, &r, &act);
    cr_expect(q == 2 && r == 0 && act == 1, "96 MiB waiting = 2 tasks: %" PRIu64, q);
    sb_sched_pool_demand(s, "cpu", &q, &r, &act);
    cr_expect(q == 2 && r == 0 && act == 1);

    t = take(s, "g1", 0);
    cr_assert_str_eq(t.id, "ns/t/s1-t0");
    cr_assert_eq(t.ninputs, 2, "s0-t0-p0 and s0-t1-p0 coalesced");
    sb_sched_pool_demand(s, "gpu", &q, &r, &act);
    cr_expect(q == 1 && r == 1 && act == 1);
    expect_checkpoint(s, "", 0);
    finish(s, "g1", t, (const char *[]){"s1-t0-p0"}, (uint64_t[]){64}, 1);
    /* split 0 is fully done, but joined with split 1 whose s0-t1-p1 still waits */
    expect_checkpoint(s, "", 0);

    t = take(s, "c1", 0);
    finish(s, "c1", t, (const char *[]){"s0-t2-p0"}, (uint64_t[]){32}, 1);
    expect_checkpoint(s, "", 0);
    t = take(s, "g1", 0);
    cr_assert_eq(t.ninputs, 2, "s0-t1-p1 and s0-t2-p0: the component grows to {0,1,2}");
    expect_checkpoint(s, "", 0);
    finish(s, "g1", t, (const char *[]){"s1-t1-p0"}, (uint64_t[]){64}, 1);
    expect_checkpoint(s, "0-2", 2);
    cr_expect_eq(sb_sched_worker_removable(s, "c1"), 1, "everything it held was consumed");

    t = take(s, "c1", 0);
    finish(s, "c1", t, (const char *[]){"s0-t3-p0"}, (uint64_t[]){10}, 1);
    expect_checkpoint(s, "0-2", 2);
    sb_sched_pool_demand(s, "cpu", &q, &r, &act);
    cr_expect(q == 0 && r == 0 && act == 0, "cpu ops finished");
    sb_sched_pool_demand(s, "gpu", &q, &r, &act);
    cr_expect(q == 1 && act == 1);
    t = take(s, "g1", 0);
    finish(s, "g1", t, (const char *[]){"s1-t2-p0"}, (uint64_t[]){10}, 1);
    cr_assert_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    expect_checkpoint(s, "0-3", 3);
    sb_sched_pool_demand(s, "gpu", &q, &r, &act);
    cr_expect(q == 0 && r == 0 && act == 0);
    sb_sched_worker_lost(s, "g1", "test", 0);
    cr_expect_eq(sb_sched_worker_removable(s, "g1"), 0, "lost workers are not the caller's");
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* The simulation with coalescing: the checkpoint is checked after every event. Then a new
 * scheduler resumes from a mid-run checkpoint. */
/* A part's cost in the capped checkpoints below (sb_sched_checkpoint_within). */
static uint64_t part_cost(const sb_storage_output *p, void *ctx)
{
    (void)ctx;
    return strlen(p->id) + 20;
}

/* What a checkpoint costs as sb_sched_checkpoint_within counts it: its parts, and an index and
 * a separator per committed split (the ranges, at their longest). */
static uint64_t checkpoint_cost(const uint8_t *committed, size_t nsplits,
                                const sb_storage_output *parts, size_t nparts)
{
    uint64_t c = 0;
    for (size_t i = 0; i < nsplits; i++)
        if (committed[i])
            c += (uint64_t)snprintf(NULL, 0, "%zu", i) + 1;
    for (size_t i = 0; i < nparts; i++)
        c += part_cost(&parts[i], NULL);
    return c;
}

/* capped: the new leader resumes from a checkpoint taken within half its full size, so some
 * committed splits are left out (and run again) */
static void run_and_resume(const char *stages, size_t nsplits, uint64_t stop_after,
                           void (*fault)(sim *, uint64_t), int capped)
{
    spec_holder h;
    load_spec(&h, stages, "{memoryBudget: 512Mi}");
    sim a;
    sb_err err;
    sim_init(&a, &h, nsplits, NULL, &err);
    cr_assert_not_null(a.s, "%s", err.msg);
    a.check = 1;
    sim_add_worker(&a, "c1", "cpu", 2);
    sim_add_worker(&a, "c2", "cpu", 1);
    if (a.nops > 1)
        sim_add_worker(&a, "g1", "gpu", 1);
    sim_run(&a, stop_after, fault);
    cr_assert_eq(sb_sched_state_get(a.s, NULL), SB_SCHED_RUNNING, "stopped mid-run");
    cr_expect_eq(a.violations, 0);
    cr_expect_gt(a.checkpoints_partial, 0, "the checkpoint moved during the run");
    if (a.nops > 1)
        cr_expect_gt(a.coalesced, 0, "partitions of several splits met in one task");
    sb_sched_stats ast;
    sb_sched_get_stats(a.s, &ast);
    if (fault != NULL)
        cr_expect_gt(ast.partitions_recovered, 0, "the lost worker held needed partitions");
    char *ranges;
    sb_storage_output *parts;
    size_t nparts;
    cr_assert_eq(sb_sched_checkpoint(a.s, &ranges, &parts, &nparts, &err), 0, "%s", err.msg);
    uint8_t committed[MAXSPLITS];
    cr_assert_eq(sb_ranges_parse(ranges, committed, nsplits, &err), 0);
    size_t ncommitted = 0;
    uint64_t resumed_bytes = 0;
    for (size_t i = 0; i < nsplits; i++)
        ncommitted += committed[i];
    for (size_t i = 0; i < nparts; i++)
        resumed_bytes += parts[i].bytes;
    cr_assert(ncommitted > 0 && ncommitted < nsplits, "a partial checkpoint: %s", ranges);
    if (capped) {
        uint64_t full = checkpoint_cost(committed, nsplits, parts, nparts);
        char *cr;
        sb_storage_output *cp;
        size_t ncp, omitted;
        cr_assert_eq(sb_sched_checkpoint_within(a.s, full / 2, part_cost, NULL, &cr, &cp, &ncp,
                                                &omitted, &err),
                     0, "%s", err.msg);
        uint8_t cset[MAXSPLITS];
        cr_assert_eq(sb_ranges_parse(cr, cset, nsplits, &err), 0);
        size_t nc = 0;
        for (size_t i = 0; i < nsplits; i++) {
            cr_assert(!cset[i] || committed[i], "split %zu is in the capped checkpoint only", i);
            nc += cset[i];
        }
        cr_expect_leq(checkpoint_cost(cset, nsplits, cp, ncp), full / 2, "within the limit");
        cr_expect(nc > 0 && nc < ncommitted, "the limit left some out: %s of %s", cr, ranges);
        cr_expect_eq(omitted, ncommitted - nc);
        for (size_t i = 0; i < ncp; i++) {
            int in_full = 0;
            for (size_t k = 0; k < nparts && !in_full; k++)
                in_full = strcmp(parts[k].id, cp[i].id) == 0;
            cr_assert(in_full, "%s is not in the full checkpoint", cp[i].id);
        }
        char *fr;
        sb_storage_output *fp;
        size_t nfp, fo = 1;
        cr_assert_eq(
            sb_sched_checkpoint_within(a.s, full, part_cost, NULL, &fr, &fp, &nfp, &fo, &err), 0);
        cr_expect_str_eq(fr, ranges, "a limit it fits in changes nothing");
        cr_expect_eq(nfp, nparts);
        cr_expect_eq(fo, 0);
        free(fr);
        sb_sched_parts_free(fp, nfp);
        /* the new leader resumes from the capped one */
        free(ranges);
        sb_sched_parts_free(parts, nparts);
        ranges = cr;
        parts = cp;
        nparts = ncp;
        memcpy(committed, cset, sizeof cset);
        ncommitted = nc;
        resumed_bytes = 0;
        for (size_t i = 0; i < nparts; i++)
            resumed_bytes += parts[i].bytes;
    }

    /* the leader is gone; a new one resumes at epoch 1 */
    sb_sched_resume res = {
        .epoch = 1, .committed_splits = ranges, .parts = parts, .nparts = nparts};
    sim b;
    sim_init(&b, &h, nsplits, &res, &err);
    cr_assert_not_null(b.s, "%s", err.msg);
    b.check = 1;
    memcpy(b.committed, committed, sizeof committed);
    b.ncommitted_parts = nparts;
    sb_sched_group_stats os;
    sb_sched_get_group_stats(b.s, 0, &os);
    cr_expect_eq(os.resumed, ncommitted);
    cr_expect_eq(os.tasks_done, ncommitted);
    sb_sched_stats st;
    sb_sched_get_stats(b.s, &st);
    cr_expect_eq(st.sink_parts, nparts);
    cr_expect_eq(st.sink_bytes, resumed_bytes);
    if (capped) { /* what the new leader carries is one block: all of it, or nothing */
        char *cr;
        sb_storage_output *cp;
        size_t ncp, omitted;
        uint64_t carried = checkpoint_cost(committed, nsplits, parts, nparts);
        cr_assert_eq(sb_sched_checkpoint_within(b.s, carried - 1, part_cost, NULL, &cr, &cp, &ncp,
                                                &omitted, &err),
                     0);
        cr_expect_str_eq(cr, "", "a limit below the carried block commits nothing");
        cr_expect_eq(ncp, 0);
        cr_expect_eq(omitted, ncommitted);
        free(cr);
        sb_sched_parts_free(cp, ncp);
        cr_assert_eq(sb_sched_checkpoint_within(b.s, carried, part_cost, NULL, &cr, &cp, &ncp,
                                                &omitted, &err),
                     0);
        cr_expect_str_eq(cr, ranges, "the carried block fits exactly");
        cr_expect_eq(ncp, nparts);
        cr_expect_eq(omitted, 0);
        free(cr);
        sb_sched_parts_free(cp, ncp);
    }
    sim_add_worker(&b, "c1", "cpu", 2);
    if (b.nops > 1)
        sim_add_worker(&b, "g1", "gpu", 2);
    sim_run(&b, 100000, NULL);
    cr_assert_eq(sb_sched_state_get(b.s, NULL), SB_SCHED_SUCCEEDED);
    cr_expect_eq(b.violations, 0, "the budget holds after a resume");
    for (size_t i = 0; i < nsplits; i++)
        cr_expect_eq(b.source_runs[i], committed[i] ? 0u : 1u, "split %zu ran %u times", i,
                     b.source_runs[i]);
    size_t nsink;
    const sb_storage_output *sink = sb_sched_sink_parts(b.s, &nsink);
    sb_sched_get_stats(b.s, &st);
    cr_expect_eq(st.sink_parts, nsink);
    cr_expect_eq(st.sink_bytes, total_bytes(nsplits), "resumed + new parts hold every byte once");
    uint64_t sum = 0;
    for (size_t i = 0; i < nsink; i++) {
        sum += sink[i].bytes;
        for (size_t k = 0; k < i; k++)
            cr_assert_str_neq(sink[i].id, sink[k].id);
        int resumed = 0;
        for (size_t k = 0; k < nparts && !resumed; k++)
            resumed = strcmp(parts[k].id, sink[i].id) == 0;
        if (resumed || b.nops == 1)
            continue;
        uint64_t index = strtoull(strstr(sink[i].id, "-t") + 2, NULL, 10);
        cr_expect_geq(index, SB_SCHED_EPOCH_STRIDE, "%s is numbered in epoch 1", sink[i].id);
    }
    cr_expect_eq(sum, total_bytes(nsplits));
    char *want = NULL;
    {
        uint8_t all[MAXSPLITS];
        memset(all, 1, sizeof all);
        want = sb_ranges_format(all, nsplits);
    }
    char *end_ranges;
    sb_storage_output *end_parts;
    size_t nend;
    cr_assert_eq(sb_sched_checkpoint(b.s, &end_ranges, &end_parts, &nend, &err), 0);
    cr_expect_str_eq(end_ranges, want);
    cr_expect_eq(nend, nsink);
    free(want);
    free(end_ranges);
    sb_sched_parts_free(end_parts, nend);
    sb_sched_free(b.s);
    sb_sched_free(a.s);
    free(ranges);
    sb_sched_parts_free(parts, nparts);
    spec_fixture_free(&h);
}

Test(sched_checkpoint, resume_fused_single_op)
{
    run_and_resume(ONE_OP, 12, 6, NULL, 0);
}

Test(sched_checkpoint, resume_from_a_checkpoint_cut_to_a_size_limit)
{
    run_and_resume(ONE_OP, 12, 6, NULL, 1);
}

Test(sched_checkpoint, a_size_limit_keeps_coalesced_components_whole)
{
    run_and_resume(CPU_GPU, 36, 40, NULL, 1);
}

Test(sched_checkpoint, resume_two_ops_with_coalescing)
{
    run_and_resume(CPU_GPU, 36, 40, NULL, 0);
}

static void kill_c2_then_return(sim *m, uint64_t ev)
{
    if (ev == 12) {
        m->w[1].alive = 0;
        m->w[1].nrun = 0;
        sb_sched_worker_lost(m->s, "c2", "test", m->now);
        memset(m->pending, 0, sizeof m->pending); /* unknown now: re-marked as re-made */
    } else if (ev == 20) {
        sim_add_worker(m, "c3", "cpu", 1);
    }
}

Test(sched_checkpoint, worker_loss_and_recovery_keep_it_correct)
{
    run_and_resume(CPU_GPU, 36, 45, kill_c2_then_return, 0);
}

Test(sched_checkpoint, bad_resume_fails_clearly)
{
    spec_holder h;
    load_spec(&h, CPU_GPU, "{}");
    const struct {
        sb_sched_resume r;
        const char *needle;
    } cases[] = {
        {{1, "0-3,2", NULL, 0, NULL}, "resume: split ranges: piece \"2\" is out of order"},
        {{1, "garbage", NULL, 0, NULL}, "bad piece \"garbage\""},
        {{1, "0-99", NULL, 0, NULL}, "\"0-99\" is out of range (6 splits)"},
        {{0, "0-1", NULL, 0, NULL}, "epoch 0"},
        {{1, "0", (sb_storage_output[]){{"bogus", 1, 1, 0, NULL}}, 1, NULL},
         "\"bogus\" is not s<op>-t<task>"},
        {{1, "0", (sb_storage_output[]){{NULL, 1, 1, 0, NULL}}, 1, NULL}, "(null)"},
        {{1, "0", (sb_storage_output[]){{"s7-t0-p0", 1, 1, 0, NULL}}, 1, NULL},
         "op 7 does not exist"},
        {{1, "0", (sb_storage_output[]){{"s0-t3-p0", 1, 1, 0, NULL}}, 1, NULL},
         "split 3 is not committed"},
        {{1, "0", (sb_storage_output[]){{"s1-t1000000000-p0", 1, 1, 0, NULL}}, 1, NULL},
         "would collide"},
    };
    sb_storage_split sp[6] = {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}, {"f", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_sched_config cfg = {.pipeline = &h.p, .pipeline_id = "ns/t", .resume = &cases[i].r};
        sb_err err = {0};
        sb_sched *s = sb_sched_new(&cfg, sp, 6, &err);
        cr_expect_null(s, "case %zu", i);
        sb_sched_free(s);
        cr_expect(strstr(err.msg, cases[i].needle) != NULL, "case %zu: \"%s\", want \"%s\"", i,
                  err.msg, cases[i].needle);
    }
    /* everything committed: the run is done at once, with the resumed parts */
    sb_sched_resume all = {2, "0-5",
                           (sb_storage_output[]){{"s1-t7-p0", 10, 1, 3, NULL},
                                                 {"s1-t1000000001-p0", 5, 1, 4, NULL},
                                                 {"s1-t7-p0", 10, 1, 3, NULL}},
                           3, NULL};
    sb_sched_config cfg = {.pipeline = &h.p, .pipeline_id = "ns/t", .resume = &all};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, sp, 6, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    size_t n;
    const sb_storage_output *parts = sb_sched_sink_parts(s, &n);
    cr_assert_eq(n, 2, "a part listed twice counts once");
    cr_expect_str_eq(parts[1].id, "s1-t1000000001-p0");
    cr_expect_eq(parts[1].crc32c, 4);
    expect_checkpoint(s, "0-5", 2);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* preserveOrder across a resume: parts carried over from a later split than the ones still to
 * run keep their place in input order. Their checkpoint keeps each part's order key (before,
 * a carried part of op > 0 had no lineage in the new scheduler and sorted first: found by the
 * chaos run, seed 1726-73). */
Test(sched_checkpoint, preserve_order_survives_a_resume)
{
    spec_holder h;
    load_spec(&h, CPU_GPU, "{memoryBudget: 4Gi, preserveOrder: true}");
    sb_storage_split sp[3] = {{"0", 8 * MiB}, {"1", 8 * MiB}, {"2", 8 * MiB}};
    sb_sched_config cfg = {.pipeline = &h.p, .pipeline_id = "ns/t"};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, sp, 3, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_sched_worker_add(s, "c1", "cpu", "a:1", 1, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "c2", "cpu", "a:3", 1, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "g1", "gpu", "a:2", 1, NULL, 0, 0, NULL), 0);
    taken t0 = take(s, "c1", 0); /* split 0: left unfinished */
    taken t1 = take(s, "c2", 0); /* split 1: done through the sink */
    cr_assert_str_eq(t1.id, "ns/t/s0-t1");
    finish(s, "c2", t1, (const char *[]){"s0-t1-p0"}, (uint64_t[]){8}, 1);
    taken g = take(s, "g1", 0);
    finish(s, "g1", g, (const char *[]){"s1-t0-p0", "s1-t0-p1"}, (uint64_t[]){4, 4}, 2);
    char *ranges;
    sb_storage_output *parts;
    size_t n;
    cr_assert_eq(sb_sched_checkpoint(s, &ranges, &parts, &n, &err), 0, "%s", err.msg);
    cr_assert_str_eq(ranges, "1");
    cr_assert_eq(n, 2);
    cr_expect_str_eq(parts[0].order, "1.0.0");
    cr_expect_str_eq(parts[1].order, "1.0.1");
    (void)t0;
    sb_sched_free(s);

    /* a new driver resumes: splits 0 and 2 run, split 1's parts are carried over */
    sb_sched_resume res = {.epoch = 1, .committed_splits = ranges, .parts = parts, .nparts = n};
    cfg.resume = &res;
    s = sb_sched_new(&cfg, sp, 3, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_sched_worker_add(s, "c1", "cpu", "a:1", 1, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "g1", "gpu", "a:2", 1, NULL, 0, 0, NULL), 0);
    taken a = take(s, "c1", 0);
    cr_assert_str_eq(a.id, "ns/t/s0-t0");
    finish(s, "c1", a, (const char *[]){"s0-t0-p0"}, (uint64_t[]){8}, 1);
    a = take(s, "c1", 0);
    cr_assert_str_eq(a.id, "ns/t/s0-t2");
    finish(s, "c1", a, (const char *[]){"s0-t2-p0"}, (uint64_t[]){8}, 1);
    char later[64], first[64];
    g = take(s, "g1", 0); /* split 2's partition or split 0's: whichever it is given */
    snprintf(first, sizeof first, "%s-p0", g.id + strlen("ns/t/"));
    finish(s, "g1", g, (const char *[]){first}, (uint64_t[]){8}, 1);
    g = take(s, "g1", 0);
    snprintf(later, sizeof later, "%s-p0", g.id + strlen("ns/t/"));
    finish(s, "g1", g, (const char *[]){later}, (uint64_t[]){8}, 1);
    cr_assert_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    size_t ns;
    const sb_storage_output *sink = sb_sched_sink_parts(s, &ns);
    cr_assert_eq(ns, 4);
    /* input order: split 0's part, split 1's two carried parts, split 2's part */
    cr_expect_str_eq(sink[1].id, "s1-t0-p0");
    cr_expect_str_eq(sink[2].id, "s1-t0-p1");
    cr_expect(strcmp(sink[0].id, "s1-t0-p0") != 0 && strcmp(sink[3].id, "s1-t0-p1") != 0);
    /* a checkpoint of the resumed run keeps the carried keys */
    char *r2;
    sb_storage_output *p2;
    size_t n2;
    cr_assert_eq(sb_sched_checkpoint(s, &r2, &p2, &n2, &err), 0, "%s", err.msg);
    cr_expect_eq(n2, 4);
    for (size_t i = 0; i < n2; i++)
        if (strcmp(p2[i].id, "s1-t0-p1") == 0)
            cr_expect_str_eq(p2[i].order, "1.0.1");
    free(r2);
    sb_sched_parts_free(p2, n2);
    sb_sched_free(s);
    /* a malformed key is refused at resume, naming the part */
    free((char *)parts[0].order);
    parts[0].order = strdup("1..0");
    s = sb_sched_new(&cfg, sp, 3, &err);
    cr_expect_null(s);
    cr_expect(strstr(err.msg, "s1-t0-p0") != NULL && strstr(err.msg, "order key") != NULL, "%s",
              err.msg);
    sb_sched_free(s);
    free(ranges);
    sb_sched_parts_free(parts, n);
    spec_fixture_free(&h);
}

/* ---- `streambatch run --resume` checking the parts it carries over (runckpt.h) ---- */

static char v_dir[128];

static int v_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void v_setup(void)
{
    sb_test_tmpl(v_dir, sizeof v_dir, "sb-test-ckverify");
    cr_assert_not_null(mkdtemp(v_dir));
}

static void v_teardown(void)
{
    nftw(v_dir, v_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes part `id` with one record into the sink and appends it to c (order may be NULL). */
static void v_part(const sb_sink_spec *s, sb_ckpt *c, const char *id, const char *order)
{
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &e);
    cr_assert_not_null(b);
    cr_assert_eq(sb_batch_builder_append_binary(b, 0, id, strlen(id), &e), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &e), 0);
    sb_batch_builder_free(b);
    sb_io_part_info info;
    cr_assert_eq(sb_io_sink_write_part(s, id, blob, len, &info, &e), 0, "%s", e.msg);
    sb_part_free(blob);
    c->parts = realloc(c->parts, (c->nparts + 1) * sizeof *c->parts);
    cr_assert_not_null(c->parts);
    c->parts[c->nparts++] = (sb_storage_output){.id = strdup(id),
                                                .bytes = info.bytes,
                                                .rows = info.rows,
                                                .crc32c = info.crc32c,
                                                .order = order ? strdup(order) : NULL};
}

static void v_ckpt(sb_ckpt *c, const char *committed, size_t n)
{
    memset(c, 0, sizeof *c);
    c->epoch = 1;
    c->committed_splits = strdup(committed);
    c->ncommitted = n;
}

static void v_damage(const char *id, const char *how)
{
    char p[512];
    snprintf(p, sizeof p, "%s/out/part-%s.txt", v_dir, id);
    if (strcmp(how, "delete") == 0) {
        cr_assert_eq(unlink(p), 0);
    } else if (strcmp(how, "truncate") == 0) {
        cr_assert_eq(truncate(p, 2), 0);
    } else { /* one byte flipped, same size */
        FILE *f = fopen(p, "r+b");
        cr_assert_not_null(f);
        cr_assert_eq(fputc('#', f), '#');
        fclose(f);
    }
}

static const char *v_ids(const sb_ckpt *c)
{
    static char buf[512];
    buf[0] = '\0';
    for (size_t i = 0; i < c->nparts; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? "," : "", c->parts[i].id);
    return buf;
}

TestSuite(runckpt_verify, .init = v_setup, .fini = v_teardown, .timeout = 30);

Test(runckpt_verify, bad_op0_parts_drop_their_whole_split_only)
{
    char uri[256];
    snprintf(uri, sizeof uri, "file://%s/out/", v_dir);
    sb_sink_spec s = {.uri = uri, .format = SB_FMT_TEXT};
    sb_ckpt c;
    v_ckpt(&c, "0-3", 4);
    v_part(&s, &c, "s0-t0-p0", NULL);
    v_part(&s, &c, "s0-t0-p1", NULL);
    v_part(&s, &c, "s0-t1-p0", NULL);
    v_part(&s, &c, "s0-t2-p0", NULL);
    v_part(&s, &c, "s0-t3-p0", NULL);
    size_t bad, splits;
    char first[512];
    sb_err e;
    /* all intact: nothing changes */
    cr_assert_eq(sb_runckpt_verify_parts(&c, &s, &bad, &splits, first, sizeof first, &e), 0, "%s",
                 e.msg);
    cr_assert_eq(bad, 0);
    cr_assert_str_eq(c.committed_splits, "0-3");
    cr_assert_eq(c.nparts, 5);
    /* a deleted part drops the other part of its split too; truncated and corrupted ones */
    v_damage("s0-t0-p1", "delete");
    v_damage("s0-t2-p0", "truncate");
    v_damage("s0-t3-p0", "corrupt");
    cr_assert_eq(sb_runckpt_verify_parts(&c, &s, &bad, &splits, first, sizeof first, &e), 0, "%s",
                 e.msg);
    cr_assert_eq(bad, 3);
    cr_assert_eq(splits, 3);
    cr_assert(strstr(first, "part-s0-t0-p1.txt is missing") != NULL, "%s", first);
    cr_assert_str_eq(c.committed_splits, "1");
    cr_assert_eq(c.ncommitted, 1);
    cr_assert_str_eq(v_ids(&c), "s0-t1-p0");
    sb_ckpt_free(&c);
}

Test(runckpt_verify, later_op_parts_map_by_order_key_else_drop_everything)
{
    char uri[256];
    snprintf(uri, sizeof uri, "file://%s/out/", v_dir);
    sb_sink_spec s = {.uri = uri, .format = SB_FMT_TEXT};
    sb_ckpt c;
    size_t bad, splits;
    char first[512];
    sb_err e;
    /* preserveOrder: the order key's first number is the split */
    v_ckpt(&c, "0-2", 3);
    v_part(&s, &c, "s1-t7-p0", "0.0.0");
    v_part(&s, &c, "s1-t8-p0", "1.0.0");
    v_part(&s, &c, "s1-t9-p0", "2.0.0");
    v_damage("s1-t8-p0", "corrupt");
    cr_assert_eq(sb_runckpt_verify_parts(&c, &s, &bad, &splits, first, sizeof first, &e), 0, "%s",
                 e.msg);
    cr_assert_eq(bad, 1);
    cr_assert_eq(splits, 1);
    cr_assert_str_eq(c.committed_splits, "0,2");
    cr_assert_str_eq(v_ids(&c), "s1-t7-p0,s1-t9-p0");
    sb_ckpt_free(&c);
    /* no order key: which splits a part of op 1 came from is unknown, nothing is kept */
    v_ckpt(&c, "0-2", 3);
    v_part(&s, &c, "s1-t10-p0", NULL);
    v_part(&s, &c, "s1-t11-p0", NULL);
    v_damage("s1-t11-p0", "truncate");
    cr_assert_eq(sb_runckpt_verify_parts(&c, &s, &bad, &splits, first, sizeof first, &e), 0, "%s",
                 e.msg);
    cr_assert_eq(bad, 1);
    cr_assert_eq(splits, 3);
    cr_assert_str_eq(c.committed_splits, "");
    cr_assert_eq(c.ncommitted, 0);
    cr_assert_eq(c.nparts, 0);
    sb_ckpt_free(&c);
}
