/* ckpt.c — the checkpoint: the committed splits as ranges and the sink parts they made, cut to
 * fit a byte limit (sb_sched_checkpoint, sb_sched_checkpoint_within). */

#include "controller/sched/core/core.h"

static size_t uf_find(size_t *parent, size_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static void uf_union(size_t *parent, size_t a, size_t b)
{
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a != b)
        parent[a < b ? b : a] = a < b ? a : b;
}

int sb_sched_checkpoint(const sb_sched *s, char **ranges, sb_storage_output **parts, size_t *nparts,
                        sb_err *err)
{
    return sb_sched_checkpoint_within(s, 0, NULL, NULL, ranges, parts, nparts, NULL, err);
}

static uint64_t digits(uint64_t v)
{
    uint64_t d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Within max_bytes (see sched.h): which committed splits the checkpoint keeps. The splits an
 * earlier leader committed (with every part carried over) come first, as one block; then whole
 * components in order of their first split, up to the first that does not fit. A split costs
 * its index and a separator in the ranges, a part what part_bytes says. Clears committed[] of
 * the others; returns whether the carried block is kept, and counts the splits left out. */
static int ckpt_fit(const sb_sched *s, uint64_t max_bytes, sb_sched_part_bytes_fn part_bytes,
                    void *ctx, const size_t *rep, size_t *parent, uint8_t *committed,
                    size_t *omitted)
{
    size_t ns = s->nsplits;
    uint64_t *cost = calloc(ns ? ns : 1, sizeof *cost); /* per component root */
    uint8_t *keep = calloc(ns ? ns : 1, 1);             /* per root: 0 undecided, 1 keep, 2 drop */
    if (cost == NULL || keep == NULL) {
        free(cost);
        free(keep);
        return -1;
    }
    uint64_t carried = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!committed[i])
            continue;
        if (s->resumed != NULL && s->resumed[i])
            carried += digits(i) + 1;
        else
            cost[uf_find(parent, i)] += digits(i) + 1;
    }
    for (size_t k = 0; k < s->nsink; k++) {
        uint64_t b = part_bytes != NULL ? part_bytes(&s->sink[k], ctx) : 0;
        if (s->sink_task[k] == NO_TASK) {
            carried += b;
            continue;
        }
        size_t ti = s->sink_task[k];
        if (rep[ti] != NONE && committed[uf_find(parent, rep[ti])])
            cost[uf_find(parent, rep[ti])] += b;
    }
    int carry = carried <= max_bytes;
    uint64_t used = carry ? carried : 0;
    int full = !carry; /* once one does not fit, none after it is kept */
    *omitted = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!committed[i])
            continue;
        if (s->resumed != NULL && s->resumed[i]) {
            committed[i] = (uint8_t)carry;
        } else {
            size_t r = uf_find(parent, i);
            if (keep[r] == 0) {
                keep[r] = !full && used + cost[r] <= max_bytes ? 1 : 2;
                if (keep[r] == 1)
                    used += cost[r];
                else
                    full = 1;
            }
            committed[i] = keep[r] == 1;
        }
        *omitted += !committed[i];
    }
    free(cost);
    free(keep);
    return carry;
}

int sb_sched_checkpoint_within(const sb_sched *s, uint64_t max_bytes,
                               sb_sched_part_bytes_fn part_bytes, void *ctx, char **ranges,
                               sb_storage_output **parts, size_t *nparts, size_t *omitted,
                               sb_err *err)
{
    *ranges = NULL;
    *parts = NULL;
    *nparts = 0;
    size_t left_out = 0;
    if (omitted != NULL)
        *omitted = 0;
    size_t ns = s->nsplits;
    size_t *parent = malloc((ns ? ns : 1) * sizeof *parent);
    size_t *rep = malloc((s->ntasks ? s->ntasks : 1) * sizeof *rep); /* a split of each task */
    uint8_t *bad = calloc(ns ? ns : 1, 1);
    uint8_t *committed = calloc(ns ? ns : 1, 1);
    sb_storage_output *out = calloc(s->nsink + 1, sizeof *out);
    size_t n = 0;
    if (parent == NULL || rep == NULL || bad == NULL || committed == NULL || out == NULL)
        goto oom;
    for (size_t i = 0; i < ns; i++)
        parent[i] = i;
    /* 1. components: a task's inputs were made by tasks created before it, so one pass in
     * creation order joins every split a task descends from */
    for (size_t ti = 0; ti < s->ntasks; ti++) {
        const task *t = &s->tasks[ti];
        rep[ti] = t->op == 0 ? (size_t)t->index : NONE;
        for (size_t k = 0; k < t->ninputs; k++) {
            size_t r = rep[s->parts[sc_task_inputs(t)[k]].producer];
            if (r == NONE)
                continue;
            if (rep[ti] == NONE)
                rep[ti] = r;
            else
                uf_union(parent, rep[ti], r);
        }
    }
    /* 2. a component with unfinished work anywhere in it is not committed */
    for (size_t ti = 0; ti < s->ntasks; ti++) {
        const task *t = &s->tasks[ti];
        if (t->state != T_DONE && t->state != T_SKIPPED && rep[ti] != NONE)
            bad[uf_find(parent, rep[ti])] = 1;
    }
    for (size_t pi = 0; pi < s->nparts; pi++) { /* partitions waiting for a consumer */
        const part *p = &s->parts[pi];
        if (p->consumer == NONE && p->state != P_RELEASED && rep[p->producer] != NONE)
            bad[uf_find(parent, rep[p->producer])] = 1;
    }
    for (size_t i = 0; i < ns; i++)
        committed[i] = !bad[uf_find(parent, i)];
    int carry = 1; /* the parts an earlier leader committed */
    if (max_bytes > 0 &&
        (carry = ckpt_fit(s, max_bytes, part_bytes, ctx, rep, parent, committed, &left_out)) < 0)
        goto oom;
    /* 3. the sink parts of committed components (and every resumed part) */
    for (size_t k = 0; k < s->nsink; k++) {
        size_t ti = s->sink_task[k] == NO_TASK ? NONE : s->sink_task[k];
        if (ti == NONE ? !carry : rep[ti] == NONE || !committed[uf_find(parent, rep[ti])])
            continue;
        out[n] = s->sink[k];
        out[n].id = strdup(s->sink[k].id);
        out[n].order = s->preserve_order ? sc_order_key_format(s, k) : NULL;
        if (out[n].id == NULL || (s->preserve_order && out[n].order == NULL))
            goto oom;
        n++;
    }
    *ranges = sb_ranges_format(committed, ns);
    if (*ranges == NULL)
        goto oom;
    *parts = out;
    *nparts = n;
    if (omitted != NULL)
        *omitted = left_out;
    free(parent);
    free(rep);
    free(bad);
    free(committed);
    return 0;
oom:
    sb_sched_parts_free(out, n);
    free(parent);
    free(rep);
    free(bad);
    free(committed);
    return sb_err_set(err, "scheduler: checkpoint: out of memory");
}

void sb_sched_parts_free(sb_storage_output *parts, size_t n)
{
    for (size_t i = 0; parts != NULL && i < n; i++) {
        free((char *)parts[i].id);
        free((char *)parts[i].order);
    }
    free(parts);
}
