/* plan.c — planning: the pipeline's stages grouped into ops (fused per pool, exchange halves, a
 * project pushed across pools), op 0's tasks seeded from the splits and a resume, a limit's
 * cut, and the scheduler's birth and death (sb_sched_new, sb_sched_free, sb_sched_stage_move). */

#include "controller/sched/core/core.h"

static const char *pool_of(const sb_stage_spec *st)
{
    return sb_stage_pool(st);
}

/* Parses "s<op>-t<task>-p<seq>" (decimal fields); 0 or -1. */
int sc_parse_part_id(const char *id, uint64_t *opi, uint64_t *tix)
{
    const char *p = id;
    uint64_t v[3];
    const char tag[3] = {'s', 't', 'p'};
    for (int k = 0; k < 3; k++) {
        if (*p++ != tag[k] || *p < '0' || *p > '9')
            return -1;
        uint64_t x = 0;
        while (*p >= '0' && *p <= '9') {
            uint64_t d = (uint64_t)(*p++ - '0');
            if (x > (UINT64_MAX - d) / 10)
                return -1;
            x = x * 10 + d;
        }
        v[k] = x;
        if (k < 2 && *p++ != '-')
            return -1;
    }
    if (*p != '\0')
        return -1;
    *opi = v[0];
    *tix = v[1];
    return 0;
}

/* Reads a resume: the committed splits into committed[], the sink parts into s->sink. */

static int resume_load(sb_sched *s, const sb_sched_resume *r, uint8_t *committed, sb_err *err)
{
    if (sb_ranges_parse(r->committed_splits, committed, s->nsplits, err) != 0)
        return sb_err_wrap(err, "scheduler: resume");
    s->epoch = r->epoch;
    int any = 0;
    for (size_t i = 0; i < s->nsplits && !any; i++)
        any = committed[i];
    if (r->epoch == 0 && (any || r->nparts > 0))
        return sb_err_set(err, "scheduler: resume: epoch 0 with committed work (a leader that "
                               "resumes a run takes the next epoch, >= 1)");
    if (r->nparts > 0 && r->parts == NULL)
        return sb_err_set(err, "scheduler: resume: %zu parts but no array", r->nparts);
    uint64_t first_new = (uint64_t)r->epoch * SB_SCHED_EPOCH_STRIDE;
    for (size_t i = 0; i < r->nparts; i++) {
        const sb_storage_output *o = &r->parts[i];
        uint64_t opi, tix;
        if (o->id == NULL || sc_parse_part_id(o->id, &opi, &tix) != 0)
            return sb_err_set(err,
                              "scheduler: resume: part %zu: id \"%.64s\" is not "
                              "s<op>-t<task>-p<seq>",
                              i, o->id ? o->id : "(null)");
        if (opi >= s->nops)
            return sb_err_set(err,
                              "scheduler: resume: part %s: op %" PRIu64 " does not exist "
                              "(%zu ops)",
                              o->id, opi, s->nops);
        if (opi == 0 && (tix >= s->nsplits || !committed[tix]))
            return sb_err_set(err,
                              "scheduler: resume: part %s: split %" PRIu64 " is not "
                              "committed",
                              o->id, tix);
        if (opi > 0 && tix >= first_new)
            return sb_err_set(err,
                              "scheduler: resume: part %s: task index not below epoch %u's "
                              "first (%" PRIu64 "); it would collide with this run's parts",
                              o->id, r->epoch, first_new);
        if (sb_idmap_get(&s->sink_ids, o->id, NULL))
            continue; /* listed twice */
        if (GROW(s, s->sink, s->capsink, s->nsink + 1) != 0 ||
            GROW(s, s->sink_task, s->capsink_task, s->nsink + 1) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        if (o->order != NULL && s->preserve_order && !sc_order_key_valid(o->order, s->nops))
            return sb_err_set(err,
                              "scheduler: resume: part %s: order key \"%.80s\" is not %zu "
                              "decimal numbers joined by '.'",
                              o->id, o->order, s->nops + 1);
        s->sink[s->nsink] = *o;
        s->sink[s->nsink].id = sb_strpool_dup(&s->ids, o->id);
        s->sink[s->nsink].order = o->order != NULL && s->preserve_order ? strdup(o->order) : NULL;
        if (s->sink[s->nsink].id == NULL ||
            (o->order != NULL && s->preserve_order && s->sink[s->nsink].order == NULL) ||
            sb_idmap_put(&s->sink_ids, o->id, s->nsink) != 0) {
            free((char *)s->sink[s->nsink].order);
            return sb_err_set(err, "scheduler: out of memory");
        }
        s->sink_task[s->nsink] = NO_TASK;
        s->nsink++;
        s->sink_rows += o->rows;
        s->sink_bytes += o->bytes;
    }
    return 0;
}

/* The ids the maps index (sb_idmap reads them back instead of keeping copies). */
static const char *part_key(const void *ctx, size_t i)
{
    return ((const sb_sched *)ctx)->parts[i].id;
}

static const char *sink_key(const void *ctx, size_t i)
{
    return ((const sb_sched *)ctx)->sink[i].id;
}

/* Sets each op's pool_later: whether a later op runs in its pool (at the start and after a
 * stage moved). */
static void ops_pool_later(sb_sched *s)
{
    for (size_t i = 0; i < s->nops; i++) {
        s->ops[i].pool_later = 0;
        for (size_t k = i + 1; k < s->nops && !s->ops[i].pool_later; k++)
            s->ops[i].pool_later = strcmp(s->ops[k].pool, s->ops[i].pool) == 0;
    }
}

/* Copies the pipeline's stages into the scheduler (it outlives the spec) with each stage's
 * shapes, and its per-shape args when it may run on either pool. -1: out of memory. */
static int sched_copy_stages(sb_sched *s, const sb_pipeline *p)
{
    s->nstages = p->spec.nstages;
    s->stages = calloc(s->nstages, sizeof *s->stages);
    s->stage_ptrs = calloc(s->nstages, sizeof *s->stage_ptrs);
    s->stage_shapes = calloc(s->nstages ? s->nstages : 1, sizeof *s->stage_shapes);
    s->shape_args = calloc(s->nstages ? s->nstages : 1, sizeof *s->shape_args);
    if (s->stages == NULL || s->stage_ptrs == NULL || s->stage_shapes == NULL ||
        s->shape_args == NULL)
        return -1;
    for (size_t i = 0; i < s->nstages; i++) {
        const sb_stage_spec *src = &p->spec.stages[i];
        sb_stage_spec *d = &s->stages[i];
        *d = *src;
        d->name = strdup(src->name ? src->name : "");
        d->op = strdup(src->op ? src->op : "");
        d->args_json = src->args_json ? strdup(src->args_json) : NULL;
        if (d->name == NULL || d->op == NULL || (src->args_json && d->args_json == NULL))
            return -1;
        s->stage_ptrs[i] = d;
        s->stage_shapes[i] = sb_stage_shapes(src);
        if (s->stage_shapes[i] == (SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU)) {
            s->shape_args[i][0] = sb_stage_args_for_shape(src, "cpu");
            s->shape_args[i][1] = sb_stage_args_for_shape(src, "gpu");
            if (s->shape_args[i][0] == NULL || s->shape_args[i][1] == NULL)
                return -1;
        }
    }
    return 0;
}

static op *plan_op_new(sb_sched *s, size_t stage, const char *pool)
{
    op *o = &s->ops[s->nops++];
    o->first_stage = stage;
    o->nstages = 1;
    o->pool = pool;
    o->target = s->target;
    int known = 0;
    for (size_t k = 0; k < s->npools; k++)
        known |= strcmp(s->pools[k], pool) == 0;
    if (!known)
        s->pools[s->npools++] = pool;
    return o;
}

/* Stage i's right side bytes when it is a join the plan exchanges by key (exchange.h), else 0. */
static uint64_t join_exchanged(const sb_sched *s, const sb_sched_config *cfg, size_t i)
{
    if (cfg->join_right == NULL || i >= cfg->njoin_right || strcmp(s->stage_ptrs[i]->op, "join"))
        return 0;
    return cfg->join_right[i];
}

/* Groups the stages into ops: in streaming mode adjacent stages of one pool fuse into one op, so
 * their tasks run back to back with no transfer; each op is named "a+b+...". -1: out of memory. */
static int sched_plan_ops(sb_sched *s, const sb_sched_config *cfg)
{
    int fuse = s->mode == SB_MODE_STREAMING && !cfg->no_fusion;
    s->ops = calloc(3 * s->nstages, sizeof *s->ops); /* an exchange stage makes two, sort 3 */
    if (s->ops == NULL)
        return -1;
    int prev_alone = 0;
    for (size_t i = 0; i < s->nstages; i++) {
        const char *pool = pool_of(s->stage_ptrs[i]);
        /* a stage that may move to another shape while running is an op of its own, except
         * after a sort: there it must run in the sort's reduce tasks, or it would take the
         * ranges in no order (validate accepts it because its pool is the sort's) */
        int alone = cfg->no_fuse_choices && s->shape_args[i][0] != NULL && !s->sort_sink;
        int join = fuse && !alone && !prev_alone && s->nops > 0;
        prev_alone = alone;
        if (join && strcmp(s->ops[s->nops - 1].pool, pool) == 0) {
            s->ops[s->nops - 1].nstages++;
        } else {
            plan_op_new(s, i, pool);
        }
        if (sb_spec_allop(s->stage_ptrs[i]->op) || join_exchanged(s, cfg, i) > 0) {
            /* map half ends this op, reduce starts one */
            s->ops[s->nops - 1].xmap = 1;
            plan_op_new(s, i, pool)->xreduce = 1;
            if (sb_exchange_rounds(s->stage_ptrs[i]->op) == 2) { /* sort: a middle op, "x.range" */
                s->ops[s->nops - 1].xmap = 1;
                s->ops[s->nops - 1].xmiddle = 1;
                plan_op_new(s, i, pool)->xreduce = 1;
                s->sort_sink = 1;
            } else if (s->sort_sink) {
                s->sort_sink = 0; /* an exchange after the sort: its order is not kept */
            }
        } else if (s->sort_sink && (!join || strcmp(s->ops[s->nops - 1].pool, pool) != 0)) {
            s->sort_sink = 0; /* a stage not fused with the sort's reduce: validate refuses it */
        }
    }
    ops_pool_later(s);
    for (size_t i = 0; i < s->nops; i++) {
        op *o = &s->ops[i];
        size_t len = 1;
        for (size_t k = 0; k < o->nstages; k++)
            len += strlen(s->stages[o->first_stage + k].name) + 1;
        o->name = malloc(len + 6);
        if (o->name == NULL)
            return -1;
        o->name[0] = '\0';
        for (size_t k = 0; k < o->nstages; k++) {
            int64_t b = s->stages[o->first_stage + k].batch_size;
            if (b > 0 && (uint64_t)b > o->batch_rows)
                o->batch_rows = (uint64_t)b; /* rows mostly pass 1:1 through a fused chain */
            if (k)
                strcat(o->name, "+");
            strcat(o->name, s->stages[o->first_stage + k].name);
        }
        if (o->xmap) /* the stage's map half: its reduce half's op has the stage's name */
            strcat(o->name, o->xmiddle ? ".range" : ".map");
    }
    return 0;
}

/* Does op i's task also run a copy of the project that starts op i + 1? Ops of two pools meet at
 * a transfer, and a project right after it keeps only some columns: run there first, the
 * partitions that cross and wait in the store are those columns only. The headline job's GPU
 * stage kept each row's 48 KiB input image beside its logits for a CPU project to drop (issue
 * 36). Its own op still runs it (a project of projected columns changes nothing), so its
 * metrics and lineage stay its own; an error of the copy (a missing column) fails the task
 * before it, naming op project. Only where stages fuse (streaming mode, fusion on); not after a
 * map half (its outputs are buckets), nor for a stage whose args depend on its shape. */
static int project_pushed(const sb_sched *s, const sb_sched_config *cfg, size_t i)
{
    if (s->mode != SB_MODE_STREAMING || cfg->no_fusion || i + 1 >= s->nops || s->ops[i].xmap ||
        s->ops[i + 1].xreduce)
        return 0;
    size_t k = s->ops[i + 1].first_stage;
    return strcmp(s->stage_ptrs[k]->op, "project") == 0 && s->shape_args[k][0] == NULL;
}

/* Every op's stage list (op.sp), where an exchange stage's place holds the spec of its half:
 * op SB_EXCHANGE_MAP_OP or SB_EXCHANGE_REDUCE_OP with the wrapped args (exchange.h), both
 * halves with the stage's buckets (from the splits). -1: out of memory. */
static int sched_exchange_setup(sb_sched *s, const sb_sched_config *cfg,
                                const sb_storage_split *splits, size_t nsplits)
{
    s->xhalves = calloc(2 * s->nops, sizeof *s->xhalves);
    if (s->xhalves == NULL)
        return -1;
    for (size_t i = 0; i < s->nops; i++) {
        op *o = &s->ops[i];
        if ((o->sp = malloc((o->nstages + 1) * sizeof *o->sp)) == NULL)
            return -1;
        memcpy(o->sp, s->stage_ptrs + o->first_stage, o->nstages * sizeof *o->sp);
        if ((o->pushed = project_pushed(s, cfg, i)) != 0)
            o->sp[o->nstages] = s->stage_ptrs[s->ops[i + 1].first_stage];
        if (o->xmiddle) { /* sort's middle op: one stage, the exchange's round 1 */
            const sb_stage_spec *st = s->stage_ptrs[o->first_stage];
            s->ops[i + 1].xbuckets = o->xbuckets;
            sb_stage_spec *h = &s->xhalves[2 * i];
            *h = *st;
            h->op = strdup(SB_EXCHANGE_REDUCE_OP);
            h->args_json = sb_exchange_args_round(st, o->xbuckets, s->budget, 1);
            if (h->op == NULL || h->args_json == NULL)
                return -1;
            o->sp[0] = h;
            continue;
        }
        for (int half = 0; half < 2; half++) {
            if (!(half ? o->xreduce : o->xmap))
                continue;
            size_t k = half ? 0 : o->nstages - 1, rop = half ? i : i + 1;
            const sb_stage_spec *st = s->stage_ptrs[o->first_stage + k];
            uint64_t right = join_exchanged(s, cfg, o->first_stage + k);
            if (s->ops[rop].xbuckets == 0)
                s->ops[rop].xbuckets = sb_exchange_buckets(st, splits, nsplits);
            if (right > 0 && !half) /* once: the map half comes first */
                s->ops[rop].xbuckets =
                    sb_exchange_join_buckets(s->ops[rop].xbuckets, right, s->budget);
            sb_stage_spec *h = &s->xhalves[2 * i + half];
            *h = *st;
            h->op = strdup(half ? SB_EXCHANGE_REDUCE_OP : SB_EXCHANGE_MAP_OP);
            h->args_json = right > 0 ? sb_exchange_join_args(st, s->ops[rop].xbuckets, s->budget,
                                                             nsplits, right)
                                     : sb_exchange_args(st, s->ops[rop].xbuckets, s->budget);
            if (h->op == NULL || h->args_json == NULL)
                return -1;
            o->sp[k] = h;
            if (half && right == 0 && !cfg->no_early_reduce && s->mode == SB_MODE_STREAMING &&
                sb_exchange_early(st))
                o->xopen = 1;
        }
    }
    return 0;
}

/* Creates op 0's tasks, one per split, and queues those an earlier leader did not commit (from
 * cfg->resume); later ops number their tasks from this epoch's first index, so they cannot
 * collide with a resumed run's parts. -1 with err set. */
static int sched_seed_tasks(sb_sched *s, const sb_sched_config *cfg, const sb_storage_split *splits,
                            size_t nsplits, sb_err *err)
{
    s->nsplits = nsplits;
    s->splits = calloc(nsplits ? nsplits : 1, sizeof *s->splits);
    /* op 0's tasks, one per split, in an array of their exact size (later tasks grow it) */
    s->tasks = malloc((nsplits ? nsplits : 1) * sizeof *s->tasks);
    if (s->splits == NULL || s->tasks == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    s->captasks = nsplits ? nsplits : 1;
    uint8_t *committed = calloc(nsplits ? nsplits : 1, 1);
    if (committed == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    if (cfg->resume != NULL && resume_load(s, cfg->resume, committed, err) != 0)
        goto fail;
    for (size_t i = 0; i < nsplits; i++) {
        s->splits[i] = sb_strpool_dup(&s->ids, splits[i].split);
        if (s->splits[i] == NULL)
            goto oom;
        size_t t = sc_task_new(s, 0, i);
        if (t == NONE)
            goto oom;
        s->tasks[t].in_bytes = splits[i].bytes;
        if (committed[i]) { /* an earlier leader committed it: not run again */
            s->tasks[t].state = T_SKIPPED;
            s->ops[0].done++;
            s->ops[0].resumed++;
            continue;
        }
        if (sc_queue_push(s, &s->ops[0], t) != 0)
            goto oom;
    }
    if (s->ops[0].resumed > 0) /* kept for sb_sched_checkpoint_within */
        s->resumed = committed;
    else
        free(committed);
    s->ops[0].next_index = nsplits;
    for (size_t i = 1; i < s->nops; i++)
        s->ops[i].next_index = s->ops[i].first_index = (uint64_t)s->epoch * SB_SCHED_EPOCH_STRIDE;
    return 0;
oom:
    sb_err_set(err, "scheduler: out of memory");
fail:
    free(committed);
    return -1;
}

static size_t sched_op0_last(const sb_sched *s);

/* An exchanged join's map tasks read the right side in shares by task index (exchange.h), so
 * they must be op 0's, one per split, each run to its end: refused otherwise, before any task
 * runs, as a right side that cannot be exchanged here. */
static int sched_join_check(const sb_sched *s, const sb_sched_config *cfg, sb_err *err)
{
    for (size_t i = 0; i < s->nstages; i++) {
        if (join_exchanged(s, cfg, i) == 0)
            continue;
        const char *why = NULL;
        uint64_t right = join_exchanged(s, cfg, i), maps = s->nsplits;
        if (sched_op0_last(s) != i)
            why = "its map tasks must read the source: no all-to-all stage before it, and every "
                  "stage before it on cpu in streaming mode";
        else if (cfg->stream)
            why = "it cannot feed a stream:// sink";
        else if (s->max_errored > 0)
            why = "execution.maxErroredPartitions must be 0 (a map task dropped for its left rows "
                  "would drop its share of the right side too)";
        else if (s->preserve_order)
            why = "execution.preserveOrder cannot hold across an exchange";
        else if (s->ops[0].resumed > 0)
            why = "it cannot resume a run whose source splits were committed";
        else if (maps > 0 && s->budget > 0 && (right + maps - 1) / maps > s->budget / 4)
            why = "each map task would hold its share of it (the right side over the source's "
                  "splits) past a quarter of execution.memoryBudget: give the source more splits "
                  "(a smaller partitionSize) or a larger memoryBudget";
        if (why != NULL)
            return sb_err_set(err,
                              "stage %s (join): the right side is %llu bytes, at or above "
                              "broadcastBelow, so it is exchanged by key, but %s; or raise "
                              "broadcastBelow (at most a quarter of execution.memoryBudget)",
                              s->stages[i].name, (unsigned long long)right, why);
    }
    return 0;
}

/* The stage op 0's map half runs when op 0 ends in an exchange stage's map half, else NONE
 * (sb_exchange_limit_setup: a limit's map half must be op 0's). */
static size_t sched_op0_last(const sb_sched *s)
{
    return s->nops > 0 && s->ops[0].xmap ? s->ops[0].first_stage + s->ops[0].nstages - 1 : NONE;
}

/* limit (exchange.h): once the source tasks of splits 0..k are finished and their map outputs
 * hold at least xlimit rows, no later split can contribute, so its queued tasks are dropped
 * (skipped, never run). Running ones finish; the reduce side takes only the first rows. */
void sc_limit_cut(sb_sched *s)
{
    op *o = &s->ops[0];
    uint64_t rows = 0;
    size_t k = 0;
    for (; k < s->nsplits && rows < o->xlimit; k++) {
        const task *t = &s->tasks[k];
        if (t->state != T_DONE && t->state != T_SKIPPED) /* errored or dropped: no rows */
            return;
        for (uint32_t pi = t->nout > 0 ? t->out_first : NO_PART; pi != NO_PART;
             pi = s->parts[pi].next_out)
            rows += s->parts[pi].rows;
    }
    if (rows < o->xlimit)
        return;
    size_t kept = 0;
    for (size_t q = 0; q < o->qlen; q++) {
        size_t ti = o->queue[o->qhead + q];
        if (ti >= k && ti < s->nsplits) {
            s->tasks[ti].queued = 0;
            s->tasks[ti].state = T_SKIPPED;
            o->done++;
        } else {
            o->queue[o->qhead + kept++] = ti;
        }
    }
    o->qlen = kept;
}

sb_sched *sb_sched_new(const sb_sched_config *cfg, const sb_storage_split *splits, size_t nsplits,
                       sb_err *err)
{
    const sb_pipeline *p = cfg->pipeline;
    if (p == NULL || p->spec.nstages == 0) {
        sb_err_set(err, "scheduler: the pipeline has no stages");
        return NULL;
    }
    sb_sched *s = calloc(1, sizeof *s);
    if (s == NULL)
        goto oom;
    sb_idmap_init(&s->part_ids, part_key, s);
    sb_idmap_init(&s->sink_ids, sink_key, s);
    if (cfg->pipeline_id != NULL && strlen(cfg->pipeline_id) > 512) {
        sb_err_set(err, "scheduler: the pipeline id is longer than 512 bytes");
        goto fail;
    }
    s->pipeline_id = strdup(cfg->pipeline_id ? cfg->pipeline_id : "pipeline");
    if (s->pipeline_id == NULL || sched_copy_stages(s, p) != 0)
        goto oom;
    s->mode = p->spec.execution.mode;
    s->budget = (uint64_t)p->spec.execution.memory_budget;
    s->target = (uint64_t)p->spec.source.partition_size;
    s->max_retries = (uint64_t)p->spec.execution.max_task_retries;
    s->max_errored = (uint64_t)p->spec.execution.max_errored_partitions;
    s->preserve_order = p->spec.execution.preserve_order;
    s->tail_sizing_off = cfg->no_tail_sizing;
    s->spec_off = cfg->no_speculation;
    s->drain_off = cfg->no_drain;
    s->eft_off = cfg->no_eft;
    s->early_off = cfg->no_early;
    s->infer_schema = !cfg->stream && sb_io_sink_infers_schema(p);
    s->infer_ti = NONE;
    if (cfg->resume != NULL && cfg->resume->sink_schema != NULL && cfg->resume->sink_schema[0] &&
        (s->sink_schema = strdup(cfg->resume->sink_schema)) == NULL)
        goto oom;
    if (sched_plan_ops(s, cfg) != 0)
        goto oom;
    sb_storage_split *expanded = NULL;
    if (cfg->stream) {
        if (sc_stream_setup(s, cfg, splits, nsplits, &expanded, err) != 0)
            goto fail;
        splits = expanded;
        nsplits *= sc_stream_reads(s); /* cached: the source is read once */
    }
    int seeded = sched_seed_tasks(s, cfg, splits, nsplits, err);
    free(expanded);
    if (seeded != 0)
        goto fail;
    if (sched_exchange_setup(s, cfg, splits, nsplits) != 0)
        goto oom;
    if (sched_join_check(s, cfg, err) != 0)
        goto fail;
    if (sb_exchange_limit_setup(s->stage_ptrs, s->nstages, sched_op0_last(s), &s->ops[0].xlimit,
                                err) != 0)
        goto fail;
    s->state = s->ops[0].qlen == 0 ? SB_SCHED_SUCCEEDED : SB_SCHED_RUNNING;
    s->last_progress_ms = cfg->start_ms;
    return s;
oom:
    sb_err_set(err, "scheduler: out of memory");
fail:
    sb_sched_free(s);
    return NULL;
}

void sb_sched_free(sb_sched *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nstages && s->stages; i++) {
        free(s->stages[i].name);
        free(s->stages[i].op);
        free(s->stages[i].args_json);
        if (s->shape_args != NULL) {
            free(s->shape_args[i][0]);
            free(s->shape_args[i][1]);
        }
    }
    free(s->stages);
    free(s->stage_shapes);
    free(s->shape_args);
    free(s->stage_ptrs);
    for (size_t i = 0; i < s->nops; i++) {
        free(s->ops[i].name);
        free(s->ops[i].queue);
        free(s->ops[i].fifo);
        free(s->ops[i].tis);
        free(s->ops[i].xopens);
        free(s->ops[i].xbucket);
        free(s->ops[i].sp);
    }
    for (size_t i = 0; s->xhalves != NULL && i < 2 * s->nops; i++) {
        free(s->xhalves[i].op);
        free(s->xhalves[i].args_json);
    }
    free(s->xhalves);
    free(s->ops);
    free(s->splits);
    free(s->resumed);
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i].ninputs > 1)
            free(s->tasks[i].in.many);
        free(s->tasks[i].first_error);
    }
    free(s->tasks);
    free(s->copies);
    free(s->names);
    free(s->sink_ordered);
    for (size_t i = 0; i < s->nerrored; i++) {
        free((char *)s->errored[i].task_id);
        free((char *)s->errored[i].input);
        free((char *)s->errored[i].error);
    }
    free(s->errored);
    for (uint32_t e = 0; s->sq != NULL && e < s->stream_epochs; e++)
        free(s->sq[e].q);
    free(s->sq);
    free(s->cached);
    free(s->parts);
    for (size_t i = 0; i < s->nworkers; i++) {
        worker *w = &s->workers[i];
        free(w->id);
        free(w->address);
        free(w->pool);
        free(w->op_slots);
        free(w->op_running);
        free(w->op_speed);
        free(w->op_svc);
        free(w->run);
        for (size_t k = 0; k < w->nrel; k++)
            free(w->releases[k]);
        free(w->releases);
        for (size_t k = 0; k < w->ncancel; k++)
            free(w->cancels[k].task_id);
        free(w->cancels);
    }
    free(s->workers);
    free(s->drain_notes);
    for (size_t i = 0; i < s->nsink; i++)
        free((char *)s->sink[i].order);
    free(s->sink);
    free(s->sink_task);
    sb_idmap_free(&s->part_ids);
    sb_strmap_free(&s->worker_ids);
    sb_idmap_free(&s->sink_ids);
    sb_strpool_free(&s->ids);
    free(s->failure);
    free(s->sink_schema);
    free(s->in_scratch);
    free(s->more_scratch);
    free(s->pick_scratch);
    free(s->pipeline_id);
    free(s);
}

size_t sb_sched_group_count(const sb_sched *s)
{
    return s->nops;
}

const char *const *sb_sched_pools(const sb_sched *s, size_t *n)
{
    *n = s->npools;
    return s->pools;
}

const char *sb_sched_group_pool(const sb_sched *s, uint32_t opi)
{
    return opi < s->nops ? s->ops[opi].pool : NULL;
}

int sb_sched_stage_move(sb_sched *s, size_t stage, const char *pool, sb_err *err)
{
    if (stage >= s->nstages)
        return sb_err_set(err, "scheduler: no stage %zu to move", stage);
    sb_stage_spec *st = &s->stages[stage];
    unsigned bit = pool == NULL               ? 0
                   : strcmp(pool, "cpu") == 0 ? SB_SHAPE_BIT_CPU
                   : strcmp(pool, "gpu") == 0 ? SB_SHAPE_BIT_GPU
                                              : 0;
    if (bit == 0)
        return sb_err_set(err, "scheduler: stage %s cannot move to pool '%s': not cpu or gpu",
                          st->name, pool ? pool : "(null)");
    if ((s->stage_shapes[stage] & bit) == 0)
        return sb_err_set(err, "scheduler: stage %s does not allow shape %s (its placement)",
                          st->name, pool);
    size_t i = 0;
    while (i + 1 < s->nops && s->ops[i + 1].first_stage <= stage)
        i++;
    op *o = &s->ops[i];
    if (o->nstages != 1)
        return sb_err_set(err,
                          "scheduler: stage %s runs fused with other stages as op %s: it "
                          "cannot move alone",
                          st->name, o->name);
    const char *to = bit == SB_SHAPE_BIT_GPU ? "gpu" : "cpu"; /* static: outlives the spec */
    if (strcmp(o->pool, to) == 0)
        return 0;
    /* its tasks run with the new shape's args (shapeArgs) */
    char *args = s->shape_args[stage][0] != NULL
                     ? strdup(s->shape_args[stage][bit == SB_SHAPE_BIT_GPU ? 1 : 0])
                     : NULL;
    if (s->shape_args[stage][0] != NULL && args == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    if (args != NULL) {
        free(st->args_json);
        st->args_json = args;
    }
    const char *from = o->pool;
    o->pool = to;
    ops_pool_later(s);
    int known = 0;
    for (size_t k = 0; k < s->npools; k++)
        known |= strcmp(s->pools[k], to) == 0;
    if (!known && s->npools < sizeof s->pools / sizeof s->pools[0])
        s->pools[s->npools++] = to;
    if (s->mode == SB_MODE_STATIC) { /* both pools' slots cover their ops again */
        sc_static_bind(s, from);
        sc_static_bind(s, to);
    }
    return 1;
}
