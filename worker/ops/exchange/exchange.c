/* exchange.c — the two halves of an all-to-all stage (xchg.h; the plan: controller/sched/
 * exchange.h): "exchange.map" writes each task's rows into its buckets, one output partition per
 * bucket in bucket order (partition p<b> is bucket b); "exchange.reduce" turns bucket b of every
 * map output into the stage's result: rows as they come (repartition), in a seeded random order
 * (random_shuffle), once per key (distinct), one record per key (groupby), the bucket's left rows
 * joined with its right rows (the exchanged join: its map tasks also read their share of the right
 * side). */
#include <cjson/cJSON.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/quantity.h"
#include "partition/rowjson.h"
#include "worker/ops/exchange/xchg.h"
#include "worker/ops/impls.h"

typedef enum { X_REPARTITION, X_SHUFFLE, X_GROUPBY, X_DISTINCT, X_LIMIT, X_SORT, X_JOIN } xkind;

/* A groupby map task judges whether combining pays by the share of new keys among its rows,
 * one window of COMBINE_WINDOW rows after another, from its second window on (the first is
 * mostly keys seen for the first time, however often they repeat later). */
#define COMBINE_WINDOW 16384
static const char *const xkind_names[] = {"repartition", "random_shuffle", "groupby", "distinct",
                                          "limit",       "sort",           "join"};
#define XKINDS (sizeof xkind_names / sizeof *xkind_names)

/* A bucket's (or a shuffle's) rows, gathered whole (xchg.h). */
#define WHOLE_TARGET XWHOLE_TARGET
typedef xwhole whole;

typedef struct {
    xkind kind;
    int map;
    uint32_t buckets;
    uint64_t memory; /* the most bytes a task's table or buffered rows may take (0: no limit) */
    uint64_t seed;
    uint64_t limit; /* limit's rows */
    cJSON *root;
    xkeys keys;          /* groupby's keys, distinct's fields (none: the whole record) */
    xgroupby *gb;        /* groupby's reduce side */
    xsort *so;           /* sort: every round (sort.c) */
    whole *bk;           /* map: per bucket */
    whole all;           /* random_shuffle's reduce side: the task's rows */
    xshuffle_runs *runs; /* random_shuffle's reduce side: rows spilled, sorted (shuffle.c) */
    uint64_t rr;         /* repartition: the next row's bucket */
    uint64_t rows;       /* groupby's map half, limit: rows of this task so far */
    int uncombined; /* groupby's map half: its keys barely repeat, rows now go on as they are */
    uint64_t win_rows, win_groups; /* groupby's map half: where the window being judged began */
    int rr_set;
    xset seen; /* distinct: keys met in this task (since its last spill) */
    /* distinct's reduce side past its memory: the keys emitted so far as a run of markers, then
     * runs of first rows not yet emitted (dpend: u32 key length, key, u32 length, record) */
    xruns *druns;
    xbuf dpend;
    size_t ndpend;
    xbuf kb;
    uint32_t *row_bucket; /* map scratch: per row of a call, its bucket (UINT32_MAX: dropped) */
    size_t *order, *runs_first, *runs_n;
    size_t cap_rows;
    /* the exchanged join (join_* below): the table of the bucket's right rows, filled by the
     * reduce side (jr, jreduce.c); the map side's share of the right side: pieces i % maps ==
     * task index */
    xjoin *jn;
    xjreduce *jr;
    char *jargs;
    uint64_t jmaps, jbytes, jtask;
    xbuf jrec; /* a tagged row */
} xstate;

int xwhole_emit(void *blob, size_t len, uint64_t rows, void *ud)
{
    whole *w = ud;
    sb_part_free(w->blob);
    w->blob = blob;
    w->len = len;
    w->rows = rows;
    return 0;
}

void xwhole_free(whole *w)
{
    sb_op_out_free(w->out);
    sb_part_free(w->blob);
    memset(w, 0, sizeof *w);
}

int xwhole_put_all(xwhole *bk, uint32_t n, sb_op_out *out, sb_err *err)
{
    for (uint32_t b = 0; b < n; b++) {
        xwhole *w = &bk[b];
        if (sb_op_out_cut(w->out, err) != 0)
            return -1;
        void *blob = w->blob;
        w->blob = NULL;
        if (blob != NULL && sb_op_out_put_blob(out, blob, w->len, w->rows, err) != 0)
            return -1;
    }
    return 0;
}

/* The sum of args.memory's share: a quarter of the budget per task (two slots' tables, their
 * outputs and the partitions in flight share it). */
static int parse_wrapper(xstate *st, const char *args_json, sb_err *err)
{
    st->root = args_json != NULL ? cJSON_Parse(args_json) : NULL;
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(st->root, "op");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(st->root, "buckets");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(st->root, "memory");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(st->root, "args");
    size_t k = 0;
    while (cJSON_IsString(op) && k < XKINDS && strcmp(op->valuestring, xkind_names[k]) != 0)
        k++;
    if (!cJSON_IsString(op) || k == XKINDS || !cJSON_IsNumber(b) || b->valuedouble < 1 ||
        !cJSON_IsObject(args))
        return sb_err_permanent(err, "exchange: bad args (the scheduler writes them: {op, "
                                     "buckets, memory, args})");
    st->kind = (xkind)k;
    st->buckets = (uint32_t)b->valuedouble;
    st->memory = cJSON_IsNumber(m) && m->valuedouble > 0 ? (uint64_t)m->valuedouble / 4 : 0;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(args, "seed");
    st->seed = cJSON_IsNumber(seed) ? (uint64_t)(int64_t)seed->valuedouble : 0;
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(args, "rows");
    st->limit = cJSON_IsNumber(rows) && rows->valuedouble > 0 ? (uint64_t)rows->valuedouble : 0;
    if (st->kind == X_SORT) { /* round: 0 the map half, 1 the middle op, 2 the reduce */
        const cJSON *round = cJSON_GetObjectItemCaseSensitive(st->root, "round");
        int r = st->map ? 0 : cJSON_IsNumber(round) && round->valueint == 1 ? 1 : 2;
        return (st->so = xsort_new(args, r, st->buckets, st->memory, err)) != NULL ? 0 : -1;
    }
    if (st->kind == X_JOIN) {
        const cJSON *maps = cJSON_GetObjectItemCaseSensitive(st->root, "maps");
        const cJSON *rb = cJSON_GetObjectItemCaseSensitive(st->root, "rightBytes");
        st->jmaps =
            cJSON_IsNumber(maps) && maps->valuedouble >= 1 ? (uint64_t)maps->valuedouble : 0;
        st->jbytes = cJSON_IsNumber(rb) && rb->valuedouble >= 0 ? (uint64_t)rb->valuedouble : 0;
        if (st->map && st->jmaps == 0)
            return sb_err_permanent(err, "exchange: join's map half has no \"maps\" (the "
                                         "scheduler writes it)");
        st->jargs = cJSON_PrintUnformatted(args);
        if (st->jargs == NULL)
            return sb_err_set(err, "out of memory");
        if ((st->jn = xjoin_new(st->jargs, err)) == NULL)
            return -1;
        if (!st->map && (st->jr = xjreduce_new(st->jn, st->memory)) == NULL)
            return sb_err_set(err, "out of memory");
        return 0;
    }
    if (st->kind == X_GROUPBY) {
        char *text = cJSON_PrintUnformatted(args);
        st->gb = text != NULL ? xgroupby_new(text, st->memory, err) : NULL;
        free(text);
        if (st->gb == NULL)
            return -1;
        const xkeys *gk = xgroupby_keys(st->gb);
        st->keys.n = gk->n; /* a view: xgroupby owns the names */
        st->keys.k = gk->k;
        st->keys.missing_null = gk->missing_null;
    } else if (st->kind == X_DISTINCT &&
               xkeys_parse(cJSON_GetObjectItemCaseSensitive(args, "fields"),
                           cJSON_GetObjectItemCaseSensitive(args, "missingKey"), "distinct",
                           &st->keys, err) != 0) {
        return -1;
    }
    return 0;
}

static void xstate_clear(xstate *st)
{
    for (size_t b = 0; st->bk != NULL && b < st->buckets; b++)
        xwhole_free(&st->bk[b]);
    free(st->bk);
    st->bk = NULL;
    xwhole_free(&st->all);
    xshuffle_runs_free(st->runs);
    st->runs = NULL;
    xset_free(&st->seen); /* sized by the task's keys: not kept idle (ops.h) */
    xruns_clear(st->druns);
    xbuf_free(&st->dpend);
    st->ndpend = 0;
    if (st->gb != NULL)
        xgroupby_reset(st->gb);
    if (st->so != NULL)
        xsort_reset(st->so);
    if (st->jn != NULL)
        xjoin_clear(st->jn);
    xjreduce_clear(st->jr);
    st->rr_set = 0;
    st->rows = 0;
    st->uncombined = 0;
    st->win_rows = st->win_groups = 0;
}

/* Combining pays when keys repeat within a task. A window of rows in which more than half
 * brought a new key says they barely do: the rest of the task's rows go on uncombined (the
 * reduce side takes partials and rows alike). Judged from the second window on: with 10,000
 * keys drawn evenly, the first 16,384 rows hold ~8,000 of them, the next 16,384 ~1,600 new ones,
 * and a task of 290,000 rows (32 MiB of such jsonl) combines to 10,000 partial records. The
 * old rule (more than half distinct within the first 4,096 rows) sent every row of that task on
 * as it was: a 256 MiB groupby took 2.1-2.3 s instead of 1.1-1.4. A table sent on early when
 * full (fewer groups than at the window's start) starts a new window. */
static void combine_judge(xstate *st)
{
    size_t g = xgroupby_groups(st->gb);
    if (g < st->win_groups) {
        st->win_rows = st->rows;
        st->win_groups = g;
        return;
    }
    if (st->rows < st->win_rows + COMBINE_WINDOW)
        return;
    if (st->win_rows > 0) /* the first window only warms up */
        st->uncombined = (g - st->win_groups) * 2 > st->rows - st->win_rows;
    st->win_rows = st->rows;
    st->win_groups = g;
}

static void x_free(void *state)
{
    xstate *st = state;
    if (st == NULL)
        return;
    xstate_clear(st);
    xset_free(&st->seen);
    xruns_free(st->druns);
    xbuf_free(&st->dpend);
    xbuf_free(&st->kb);
    if (st->kind == X_DISTINCT)
        xkeys_free(&st->keys);
    xgroupby_free(st->gb);
    xsort_free(st->so);
    xjoin_free(st->jn);
    free(st->jargs);
    xjreduce_free(st->jr);
    xbuf_free(&st->jrec);
    cJSON_Delete(st->root);
    free(st->row_bucket);
    free(st->order);
    free(st->runs_first);
    free(st->runs_n);
    free(st);
}

static int put_partial(void *ud, uint32_t bucket, const char *rec, size_t len, sb_err *err);

/* groupby's map side, its table full: the partials go to their buckets now, and the reduce
 * side merges them with the later ones of the same keys. */
static int map_table_full(void *ud, sb_err *err)
{
    xstate *st = ud;
    return xgroupby_emit_partials(st->gb, st->buckets, put_partial, st, err);
}

static int x_init(const char *args_json, void **state, int map, sb_err *err)
{
    xstate *st = calloc(1, sizeof *st);
    if (st == NULL)
        return sb_err_set(err, "out of memory");
    st->map = map;
    if (parse_wrapper(st, args_json, err) != 0) {
        x_free(st);
        return -1;
    }
    if (map && st->gb != NULL)
        xgroupby_on_full(st->gb, map_table_full, st);
    *state = st;
    return 0;
}

static int map_init(const char *args_json, void **state, sb_err *err)
{
    return x_init(args_json, state, 1, err);
}

static int reduce_init(const char *args_json, void **state, sb_err *err)
{
    return x_init(args_json, state, 0, err);
}

static int x_reset(void *state, sb_err *err)
{
    (void)err;
    xstate_clear(state);
    /* A task here holds up to its share of the budget (a bucket's rows, a table, runs' chunks)
     * in blocks that malloc keeps once freed (the worker keeps up to 64 MiB of free heap per
     * arena: sb_rpc_tune_malloc), so the next tasks' memory came on top of it: in
     * test_run_spill's sort, a worker's anonymous memory peaked 18-24 MiB above an identity
     * run's, 7-10 with this trim. A trim costs little next to a task that moved such rows. */
    malloc_trim(0);
    return 0;
}

/* sb_op_impl.hold: the task's share of the budget, no more than the room its worker can count
 * (the budget over four is the whole run's: on a worker with a fraction of it, that share alone
 * could outgrow the worker's store). Spilling starts earlier then; the output is the same. */
static uint64_t x_hold(void *state, uint64_t room)
{
    xstate *st = state;
    if (st->memory == 0)
        return 0; /* no budget: nothing spills, nothing to count */
    if (room > 0 && room < st->memory) {
        st->memory = room;
        if (st->jr != NULL)
            xjreduce_set_memory(st->jr, room);
        if (st->gb != NULL)
            xgroupby_set_memory(st->gb, room);
        if (st->so != NULL)
            xsort_set_memory(st->so, room);
    }
    return st->memory;
}

/* The records column, for the ops that read keys (groupby, distinct). */
static int keyed_column(const xstate *st, const sb_batch *in, sb_err *err)
{
    int col = sb_batch_find(in, SB_OP_RECORD_COLUMN);
    if (col < 0 && sb_batch_ncols(in) == 1 &&
        (sb_batch_column(in, 0)->type == SB_TYPE_UTF8 ||
         sb_batch_column(in, 0)->type == SB_TYPE_BINARY))
        col = 0;
    if (col < 0)
        return sb_err_permanent(err,
                                "%s works on records (jsonl, csv) in this build, not on typed "
                                "columns",
                                xkind_names[st->kind]);
    return col;
}

/* Row r's key (groupby, distinct) into st->kb. */
static int row_key(xstate *st, const sb_column *c, size_t r, sb_err *err)
{
    size_t len;
    const char *p = sb_column_binary(c, r, &len);
    st->kb.n = 0;
    return xkeys_encode(&st->keys, xkind_names[st->kind], p, len, r, NULL, &st->kb, err);
}

/* 1 when the key in st->kb was met before in this task (distinct), else 0 (now it has); -1. */
static int seen_before(xstate *st, sb_err *err)
{
    int added;
    if (xset_find_add(&st->seen, st->kb.p, st->kb.n, xhash(st->kb.p, st->kb.n, 0), &added) < 0)
        return sb_err_set(err, "out of memory");
    if (st->memory > 0 && xset_bytes(&st->seen) > st->memory && st->map) {
        /* the map side only drops duplicates early: past its memory it forgets the keys met
         * so far (this row is still sent), and the reduce side drops what comes again */
        xset_free(&st->seen);
        return 0;
    }
    return !added; /* the reduce side spills past its memory (distinct_row) */
}

static int grow_rows(xstate *st, size_t n, sb_err *err)
{
    if (n <= st->cap_rows)
        return 0;
    free(st->row_bucket);
    free(st->order);
    free(st->runs_first);
    free(st->runs_n);
    st->row_bucket = malloc(n * sizeof *st->row_bucket);
    st->order = malloc(n * sizeof *st->order);
    st->runs_first = malloc(n * sizeof *st->runs_first);
    st->runs_n = malloc(n * sizeof *st->runs_n);
    st->cap_rows = n;
    if (!st->row_bucket || !st->order || !st->runs_first || !st->runs_n) {
        st->cap_rows = 0;
        return sb_err_set(err, "out of memory");
    }
    return 0;
}

/* Each row's bucket (UINT32_MAX: dropped, a key distinct's map side met in this task). */
static int map_buckets(xstate *st, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    const sb_column *c = NULL;
    if (st->kind == X_GROUPBY || st->kind == X_DISTINCT) {
        int col = keyed_column(st, in, err);
        if (col < 0)
            return -1;
        c = sb_batch_column(in, (size_t)col);
    }
    for (size_t i = 0; i < n; i++) {
        size_t r = first + i;
        uint64_t h;
        if (st->kind == X_REPARTITION) {
            if (!st->rr_set) { /* a start that depends on the rows: tiny tasks spread too */
                st->rr = xrow_hash(in, r, 0);
                st->rr_set = 1;
            }
            h = st->rr++;
        } else if (st->kind == X_SHUFFLE) {
            h = xrow_hash(in, r, st->seed);
        } else {
            if (row_key(st, c, r, err) != 0)
                return -1;
            int dup = st->kind == X_DISTINCT ? seen_before(st, err) : 0;
            if (dup < 0)
                return -1;
            if (dup) {
                st->row_bucket[i] = UINT32_MAX;
                continue;
            }
            h = xhash(st->kb.p, st->kb.n, 0);
        }
        st->row_bucket[i] = (uint32_t)(h % st->buckets);
    }
    return 0;
}

static int map_schema(xstate *st, const sb_batch *in, sb_err *err)
{
    /* groupby's buckets hold partial records (map-side combine), the others the input's rows */
    sb_field rec = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    if (st->bk == NULL && (st->bk = calloc(st->buckets, sizeof *st->bk)) == NULL)
        return sb_err_set(err, "out of memory");
    for (uint32_t b = 0; b < st->buckets; b++) {
        whole *w = &st->bk[b];
        if (w->out == NULL && (w->out = sb_op_out_new(WHOLE_TARGET, xwhole_emit, w, err)) == NULL)
            return -1;
        if (sb_op_out_has_schema(w->out))
            continue;
        if ((st->kind == X_GROUPBY || st->kind == X_JOIN
                 ? sb_op_out_set_schema(w->out, &rec, 1, err)
                 : sb_op_out_set_schema_like(w->out, in, err)) != 0)
            return -1;
    }
    return 0;
}

static int join_map_rows(xstate *st, const sb_batch *in, size_t first, size_t n, sb_err *err);

static int map_records(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                       sb_err *err)
{
    (void)out; /* the buckets go out at finish, one partition each */
    xstate *st = state;
    if (st->so != NULL)
        return xsort_process(st->so, in, first, n, err);
    if (map_schema(st, in, err) != 0)
        return -1;
    if (st->kind == X_LIMIT) /* the task's first rows, all in bucket 0 */
        return xlimit_take(st->bk[0].out, in, first, n, st->limit, &st->rows, err);
    if (st->kind == X_JOIN)
        return join_map_rows(st, in, first, n, err);
    if (n == 0)
        return 0;
    if (st->kind == X_GROUPBY && !st->uncombined) { /* combined per key, bucketed at finish */
        int col = keyed_column(st, in, err);
        if (col < 0 || xgroupby_add(st->gb, in, col, first, n, err) != 0)
            return -1;
        st->rows += n;
        combine_judge(st);
        return 0;
    }
    if (grow_rows(st, n, err) != 0 || map_buckets(st, in, first, n, err) != 0)
        return -1;
    /* rows by bucket (a counting sort keeps their order), then runs of rows per bucket */
    size_t *cnt = calloc((size_t)st->buckets + 1, sizeof *cnt);
    if (cnt == NULL)
        return sb_err_set(err, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (st->row_bucket[i] != UINT32_MAX)
            cnt[st->row_bucket[i] + 1]++;
    for (uint32_t b = 0; b < st->buckets; b++)
        cnt[b + 1] += cnt[b];
    size_t kept = cnt[st->buckets];
    for (size_t i = 0; i < n; i++)
        if (st->row_bucket[i] != UINT32_MAX)
            st->order[cnt[st->row_bucket[i]]++] = i;
    free(cnt);
    int rc = 0;
    for (size_t k = 0; k < kept && rc == 0;) {
        uint32_t b = st->row_bucket[st->order[k]];
        size_t nruns = 0;
        for (; k < kept && st->row_bucket[st->order[k]] == b; k++) {
            size_t r = first + st->order[k];
            if (nruns > 0 && st->runs_first[nruns - 1] + st->runs_n[nruns - 1] == r) {
                st->runs_n[nruns - 1]++;
            } else {
                st->runs_first[nruns] = r;
                st->runs_n[nruns++] = 1;
            }
        }
        rc = sb_op_out_append_runs(st->bk[b].out, in, st->runs_first, st->runs_n, nruns, err);
    }
    return rc;
}

/* ---- the exchanged join -----------------------------------------------------------------------
 * Its map tasks write every row tagged with its side ('L' then the left record, 'R' then the right
 * record) into the bucket of its key's hash, as groupby's map does: the left rows of the task's
 * input, then (at finish) the right records of its share of the right side's pieces. Reduce task
 * b hands bucket b's rows to the reduce side (jreduce.c), which builds the table of its right rows
 * once every map output is in and probes it with the left rows, spilling both when they outgrow
 * the task's share. */

/* Appends tag and rec[0..len) to bucket b. */
static int join_put(xstate *st, uint32_t b, char tag, const char *rec, size_t len, sb_err *err)
{
    st->jrec.n = 0;
    if (xbuf_put(&st->jrec, &tag, 1) != 0 || xbuf_put(&st->jrec, rec, len) != 0)
        return sb_err_set(err, "out of memory");
    return sb_op_out_append_binary(st->bk[b].out, st->jrec.p, st->jrec.n, err);
}

/* Hands each of rows [first, first+n) of a join's input records column to fn; typed columns are
 * refused. */
typedef int (*join_row_fn)(xstate *st, const char *p, size_t len, size_t r, sb_err *err);
static int join_each(xstate *st, const sb_batch *in, size_t first, size_t n, join_row_fn fn,
                     sb_err *err)
{
    int col = n > 0 ? keyed_column(st, in, err) : 0;
    if (col < 0)
        return -1;
    for (size_t r = first; r < first + n; r++) {
        size_t len;
        const char *p = sb_column_binary(sb_batch_column(in, (size_t)col), r, &len);
        if (fn(st, p, len, r, err) != 0)
            return -1;
    }
    return 0;
}

/* A left row into its key's bucket. */
static int join_map_row(xstate *st, const char *p, size_t len, size_t r, sb_err *err)
{
    uint64_t h;
    if (xjoin_left_key(st->jn, p, len, r, &h, err) != 0)
        return -1;
    return join_put(st, (uint32_t)(h % st->buckets), 'L', p, len, err);
}

static int join_map_rows(xstate *st, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    return join_each(st, in, first, n, join_map_row, err);
}

static int join_put_right(void *ud, const char *r, size_t len, uint64_t hash, sb_err *err)
{
    xstate *st = ud;
    return join_put(st, (uint32_t)(hash % st->buckets), 'R', r, len, err);
}

/* The map task's share of the right side, into its buckets. */
static int join_map_finish(xstate *st, sb_err *err)
{
    if (map_schema(st, NULL, err) != 0)
        return -1;
    return xjoin_read_right(st->jn, st->jargs, st->jtask, st->jmaps, st->jbytes, join_put_right, st,
                            err);
}

/* A bucket's row to the reduce side (jreduce.c). */
static int join_reduce_row(xstate *st, const char *p, size_t len, size_t r, sb_err *err)
{
    (void)r;
    return xjreduce_row(st->jr, p, len, err);
}

static int join_reduce_rows(xstate *st, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    return join_each(st, in, first, n, join_reduce_row, err);
}

/* True when b has no records column (neither "record" nor a lone binary/utf8 column). */
static bool typed_columns(const sb_batch *b)
{
    if (sb_batch_find(b, SB_OP_RECORD_COLUMN) >= 0)
        return false;
    return sb_batch_ncols(b) != 1 || (sb_batch_column(b, 0)->type != SB_TYPE_UTF8 &&
                                      sb_batch_column(b, 0)->type != SB_TYPE_BINARY);
}

/* Typed columns (a parquet source, exec with framing arrow) reach groupby and distinct as
 * records: rows [first, first+n) of `in` become one JSON object each (lib/partition/rowjson.h,
 * as a jsonl sink writes them), then go through the map half as any records do. */
static int map_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                       sb_err *err)
{
    xstate *st = state;
    if ((st->kind != X_GROUPBY && st->kind != X_DISTINCT && st->kind != X_SORT) ||
        !typed_columns(in))
        return map_records(state, in, first, n, out, err);
    whole rows = {0};
    sb_batch *slice = NULL, *jb = NULL;
    void *jblob = NULL;
    size_t jlen = 0;
    rows.out = sb_op_out_new(WHOLE_TARGET, xwhole_emit, &rows, err);
    int rc = rows.out == NULL ? -1 : 0;
    if (rc == 0)
        rc = n > 0 ? sb_op_out_append_rows(rows.out, in, first, n, err)
                   : sb_op_out_set_schema_like(rows.out, in, err);
    if (rc == 0 && (rc = sb_op_out_cut(rows.out, err)) == 0)
        rc = sb_batch_open_ex(rows.blob, rows.len,
                              SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, &slice, err);
    if (rc == 0 && (rc = sb_batch_rows_json(slice, &jblob, &jlen, err)) == 0)
        rc = sb_batch_open_ex(jblob, jlen, SB_BATCH_OPEN_SKIP_CHECKSUM, &jb, err);
    if (rc == 0)
        rc = map_records(state, jb, 0, n, out, err);
    sb_batch_close(jb);
    sb_part_free(jblob);
    sb_batch_close(slice);
    xwhole_free(&rows);
    return rc;
}

static int put_partial(void *ud, uint32_t bucket, const char *rec, size_t len, sb_err *err)
{
    xstate *st = ud;
    return sb_op_out_append_binary(st->bk[bucket].out, rec, len, err);
}

/* Every bucket as one partition, in bucket order (an empty one too: its place is its number). */
static int map_finish(void *state, sb_op_out *out, sb_err *err)
{
    xstate *st = state;
    if (st->so != NULL)
        return xsort_finish(st->so, out, err);
    if (st->kind == X_JOIN && join_map_finish(st, err) != 0)
        return -1;
    if (st->kind == X_GROUPBY && st->bk != NULL &&
        xgroupby_emit_partials(st->gb, st->buckets, put_partial, st, err) != 0)
        return -1;
    return st->bk != NULL ? xwhole_put_all(st->bk, st->buckets, out, err) : 0;
}

static int distinct_row(xstate *st, const sb_batch *in, const sb_column *c, size_t r,
                        sb_op_out *out, sb_err *err);

static int reduce_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                          sb_err *err)
{
    xstate *st = state;
    switch (st->kind) {
    case X_SORT:
        return xsort_process(st->so, in, first, n, err);
    case X_REPARTITION:
        return n == 0 ? sb_op_out_set_schema_like(out, in, err)
                      : sb_op_out_append_rows(out, in, first, n, err);
    case X_SHUFFLE: {
        whole *w = &st->all;
        if (w->out == NULL) {
            if ((w->out = sb_op_out_new(WHOLE_TARGET, xwhole_emit, w, err)) == NULL)
                return -1;
            /* cut in place at the spill's half (a cut copies no rows: sb_op_out_set_held) */
            sb_op_out_set_held(w->out, st->memory > 0 ? st->memory / 2 : (size_t)16 << 20);
        }
        if (n == 0)
            return sb_op_out_has_schema(w->out) ? 0 : sb_op_out_set_schema_like(w->out, in, err);
        if (sb_op_out_append_rows(w->out, in, first, n, err) != 0)
            return -1;
        /* half the task's memory: a spill sorts a copy beside the rows it writes */
        uint64_t held = sb_batch_builder_bytes(sb_op_out_builder(w->out));
        if (st->memory == 0 || held <= st->memory / 2)
            return 0;
        int rc = sb_op_out_cut(w->out, err) != 0
                     ? -1
                     : xshuffle_spill(&st->runs, w->blob, w->len, st->seed, err);
        sb_part_free(w->blob);
        w->blob = NULL;
        return rc;
    }
    case X_GROUPBY: {
        if (n == 0)
            return 0;
        int col = keyed_column(st, in, err);
        return col < 0 ? -1 : xgroupby_add_partials(st->gb, in, col, first, n, err);
    }
    case X_JOIN:
        return join_reduce_rows(st, in, first, n, err);
    case X_LIMIT: /* map outputs come in split order: the first rows of them */
        return xlimit_take(out, in, first, n, st->limit, &st->rows, err);
    case X_DISTINCT: {
        if (n == 0)
            return sb_op_out_has_schema(out) ? 0 : sb_op_out_set_schema_like(out, in, err);
        int col = keyed_column(st, in, err);
        if (col < 0)
            return -1;
        const sb_column *c = sb_batch_column(in, (size_t)col);
        if (!sb_op_out_has_schema(out) && sb_op_out_set_schema_like(out, in, err) != 0)
            return -1;
        for (size_t r = first; r < first + n; r++)
            if (row_key(st, c, r, err) != 0 || distinct_row(st, in, c, r, out, err) != 0)
                return -1;
        return 0;
    }
    }
    return 0;
}

/* ---- distinct's reduce side past its memory (runs.c) -----------------------------------------
 * Until the keys met outgrow the task's memory, a row goes out when its key is new. Then the
 * keys met so far become a run of markers ("E": emitted), and from there on a row whose key is
 * new to the current table waits in dpend ("R" and the record); each time the table and dpend
 * outgrow the memory they become a run sorted by key. At the end the runs merge: of each key's
 * pairs, oldest first, the first decides: a marker drops them all, else its row goes out. So
 * every key goes out once, with the first row that had it; the rows after the first spill come
 * in the order of their keys' encodings. */

typedef struct {
    const char *k, *r;
    uint32_t kn, rn;
} dpair;

static int dpair_cmp(const void *a, const void *b)
{
    const dpair *x = a, *y = b;
    return xruns_bytes_cmp(NULL, x->k, x->kn, y->k, y->kn);
}

/* The table's keys as markers (first), or dpend's rows, as a run sorted by key; both cleared. */
static int distinct_spill(xstate *st, sb_err *err)
{
    int first = xruns_spilled(st->druns) == 0;
    size_t n = first ? st->seen.n : st->ndpend;
    dpair *pr = calloc(n + 1, sizeof *pr);
    if (pr == NULL || (st->druns == NULL && (st->druns = xruns_new("distinct")) == NULL)) {
        free(pr);
        return sb_err_set(err, "out of memory");
    }
    const char *p = st->dpend.p;
    for (size_t i = 0; i < n; i++) {
        size_t kn;
        if (first) {
            pr[i].k = xset_key(&st->seen, i, &kn);
            pr[i].kn = (uint32_t)kn;
            pr[i].r = "E";
            pr[i].rn = 1;
            continue;
        }
        memcpy(&pr[i].kn, p, 4);
        pr[i].k = p + 4;
        memcpy(&pr[i].rn, p + 4 + pr[i].kn, 4);
        pr[i].r = p + 8 + pr[i].kn;
        p = pr[i].r + pr[i].rn;
    }
    qsort(pr, n, sizeof *pr, dpair_cmp); /* one pair per key: the table dropped repeats */
    int rc = xruns_begin(st->druns, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = xruns_put(st->druns, pr[i].k, pr[i].kn, pr[i].r, pr[i].rn, err);
    if (rc == 0)
        rc = xruns_end(st->druns, err);
    free(pr);
    xset_free(&st->seen); /* both give their memory back: the next ones grow again */
    xbuf_free(&st->dpend);
    st->ndpend = 0;
    return rc;
}

/* Row r (its key in st->kb) of distinct's reduce side. */
static int distinct_row(xstate *st, const sb_batch *in, const sb_column *c, size_t r,
                        sb_op_out *out, sb_err *err)
{
    int dup = seen_before(st, err);
    if (dup != 0)
        return dup < 0 ? -1 : 0;
    if (xruns_spilled(st->druns) == 0) { /* no spill yet: the row goes out now */
        if (sb_op_out_append_rows(out, in, r, 1, err) != 0)
            return -1;
    } else {
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        uint32_t kn = (uint32_t)st->kb.n, rn = (uint32_t)len + 1;
        if (xbuf_put(&st->dpend, &kn, 4) || xbuf_put(&st->dpend, st->kb.p, kn) ||
            xbuf_put(&st->dpend, &rn, 4) || xbuf_put(&st->dpend, "R", 1) ||
            xbuf_put(&st->dpend, p, len))
            return sb_err_set(err, "out of memory");
        st->ndpend++;
    }
    if (st->memory == 0 || xset_bytes(&st->seen) + st->dpend.cap <= st->memory)
        return 0;
    if (sb_batch_ncols(in) != 1) {
        char b[32];
        return sb_err_permanent(err,
                                "distinct: the keys of one task take more than %s, its share of "
                                "execution.memoryBudget, and its rows have more columns than "
                                "their records, which it cannot spill: give the stage more "
                                "partitions or a larger memoryBudget",
                                sb_quantity_format_bytes((int64_t)st->memory, b, sizeof b));
    }
    return distinct_spill(st, err);
}

typedef struct {
    sb_op_out *out;
    xbuf cur;
    int have;
} dmerge;

static int distinct_pair(void *ctx, const xruns_item *it, sb_err *err)
{
    dmerge *m = ctx;
    if (m->have && m->cur.n == it->kn && memcmp(m->cur.p, it->key, it->kn) == 0)
        return 0; /* a later pair of the key that went (or was dropped) first */
    m->cur.n = 0;
    m->have = 1;
    if (xbuf_put(&m->cur, it->key, it->kn) != 0)
        return sb_err_set(err, "out of memory");
    return it->rn > 0 && it->rec[0] == 'R'
               ? sb_op_out_append_binary(m->out, it->rec + 1, it->rn - 1, err)
               : 0;
}

static int distinct_finish(xstate *st, sb_op_out *out, sb_err *err)
{
    if (xruns_spilled(st->druns) == 0)
        return 0;
    if (st->ndpend > 0 && distinct_spill(st, err) != 0)
        return -1;
    dmerge m = {out, {0}, 0};
    int rc = xruns_merge(st->druns, NULL, NULL, distinct_pair, &m, err);
    xbuf_free(&m.cur);
    return rc;
}

/* random_shuffle's order: rows sorted by a seeded hash of their content (the rows are a
 * uniformly random permutation for a random seed, and the same for the same seed and rows
 * whatever order they came in: equal rows are interchangeable). Rows spilled as sorted runs
 * (shuffle.c) are merged into the same order. */
static int shuffle_finish(xstate *st, sb_op_out *out, sb_err *err)
{
    whole *w = &st->all;
    if (w->out == NULL || sb_op_out_cut(w->out, err) != 0 || w->blob == NULL)
        return w->out == NULL || w->blob == NULL ? 0 : -1;
    int rc = 0;
    if (st->runs != NULL) { /* the rest joins the runs, and the runs merge */
        if (w->rows > 0)
            rc = xshuffle_spill(&st->runs, w->blob, w->len, st->seed, err);
        xwhole_free(w);
        return rc != 0 ? -1 : xshuffle_merge(st->runs, st->seed, out, err);
    }
    sb_batch *b = NULL;
    if (sb_batch_open_ex(w->blob, w->len, SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, &b,
                         err) != 0)
        return -1;
    rc = xshuffle_emit_sorted(b, st->seed, out, err);
    sb_batch_close(b);
    xwhole_free(w);
    return rc;
}

static int reduce_finish(void *state, sb_op_out *out, sb_err *err)
{
    xstate *st = state;
    if (st->kind == X_SORT)
        return xsort_finish(st->so, out, err);
    if (st->kind == X_SHUFFLE)
        return shuffle_finish(st, out, err);
    if (st->kind == X_DISTINCT)
        return distinct_finish(st, out, err);
    if (st->kind == X_JOIN)
        return xjreduce_finish(st->jr, out, err);
    if (st->kind != X_GROUPBY)
        return 0;
    sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    if (!sb_op_out_has_schema(out) && sb_op_out_set_schema(out, &f, 1, err) != 0)
        return -1;
    return xgroupby_emit(st->gb, out, err);
}

static void map_task_begin(void *state, uint64_t task_index)
{
    xstate *st = state;
    if (st->so != NULL)
        xsort_task(st->so, task_index);
    st->jtask = task_index;
}

const sb_op_impl sb_op_exchange_map_impl = {
    .name = "exchange.map",
    .hold = x_hold,
    .init = map_init,
    .process = map_process,
    .finish = map_finish,
    .free = x_free,
    .reset = x_reset,
    .task_begin = map_task_begin,
};

/* groupby's, random_shuffle's, sort's and distinct's runs of this task (kept until the reset
 * after it) */
static uint64_t reduce_spilled(void *state)
{
    const xstate *st = state;
    return (st->gb != NULL ? xgroupby_spilled(st->gb) : 0) + xshuffle_spilled(st->runs) +
           (st->so != NULL ? xsort_spilled(st->so) : 0) + xruns_spilled(st->druns) +
           xjreduce_spilled(st->jr);
}

const sb_op_impl sb_op_exchange_reduce_impl = {
    .name = "exchange.reduce",
    .hold = x_hold,
    .init = reduce_init,
    .process = reduce_process,
    .finish = reduce_finish,
    .free = x_free,
    .reset = x_reset,
    .spilled = reduce_spilled,
};
