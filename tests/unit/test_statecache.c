/* worker/ops/statecache: op states kept between tasks. A counting fake op shows reuse of one
 * state per stage and args, no reuse across args, stages or ops, LRU eviction at the limit, a
 * state that is not returned (a failed task's) or whose reset fails never coming back, ops
 * without reset keeping init/free per task, and slot threads sharing the cache. The real ops'
 * reset hooks (filter's input_valid_json, bench's debt) are run through the cache too. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/impls.h"
#include "worker/ops/ops.h"
#include "worker/ops/statecache.h"

static atomic_int inits, resets, frees, fail_reset;

typedef struct {
    int id;
    int tasks; /* per-task counter: reset clears it */
} fake_st;

static int fake_init(const char *args, void **state, sb_err *err)
{
    if (args != NULL && strcmp(args, "{\"bad\":1}") == 0)
        return sb_err_set(err, "fake: bad args");
    fake_st *s = calloc(1, sizeof *s);
    s->id = atomic_fetch_add(&inits, 1) + 1;
    *state = s;
    return 0;
}

static int fake_reset(void *state, sb_err *err)
{
    atomic_fetch_add(&resets, 1);
    if (atomic_load(&fail_reset))
        return sb_err_set(err, "fake: cannot reset");
    ((fake_st *)state)->tasks = 0;
    return 0;
}

static void fake_free(void *state)
{
    atomic_fetch_add(&frees, 1);
    free(state);
}

static const sb_op_impl fake = {
    .name = "fake", .init = fake_init, .free = fake_free, .reset = fake_reset};
static const sb_op_impl fake2 = {
    .name = "fake2", .init = fake_init, .free = fake_free, .reset = fake_reset};
static const sb_op_impl noreset = {.name = "noreset", .init = fake_init, .free = fake_free};

static void zero(void)
{
    inits = resets = frees = fail_reset = 0;
}

TestSuite(statecache, .init = zero);

static fake_st *get(sb_op_cache *c, const sb_op_impl *op, const char *stage, const char *args)
{
    void *s = NULL;
    sb_err err;
    sb_err_clear(&err);
    cr_assert_eq(sb_op_cache_get(c, op, stage, args, &s, &err), 0, "%s", err.msg);
    return s;
}

Test(statecache, one_state_per_stage_and_args_reused_across_tasks)
{
    sb_op_cache *c = sb_op_cache_new(4);
    for (int task = 0; task < 10; task++) {
        fake_st *s = get(c, &fake, "score", "{\"k\":1}");
        cr_expect_eq(s->id, 1, "task %d: the first state, again", task);
        cr_expect_eq(s->tasks, 0, "reset cleared the last task's counter");
        s->tasks = 7;
        sb_op_cache_put(c, &fake, "score", "{\"k\":1}", s);
    }
    sb_op_cache_stats st;
    sb_op_cache_stats_get(c, &st);
    cr_expect_eq(inits, 1);
    cr_expect_eq(resets, 10);
    cr_expect_eq(st.created, 1);
    cr_expect_eq(st.reused, 9);
    cr_expect_eq(st.idle, 1);
    cr_expect_eq(frees, 0);
    sb_op_cache_free(c);
    cr_expect_eq(frees, 1, "freeing the cache frees the idle state");
}

Test(statecache, no_reuse_across_args_stages_or_ops)
{
    sb_op_cache *c = sb_op_cache_new(8);
    fake_st *a = get(c, &fake, "s1", "{\"k\":1}");
    sb_op_cache_put(c, &fake, "s1", "{\"k\":1}", a);
    fake_st *b = get(c, &fake, "s1", "{\"k\":2}");  /* other args */
    fake_st *d = get(c, &fake, "s2", "{\"k\":1}");  /* other stage */
    fake_st *e = get(c, &fake2, "s1", "{\"k\":1}"); /* other op */
    fake_st *f = get(c, &fake, "s1", "{\"k\": 1}"); /* args are compared exactly */
    cr_expect(b != a && d != a && e != a && f != a);
    cr_expect_eq(inits, 5);
    fake_st *g = get(c, &fake, "s1", NULL); /* NULL args: a key of its own */
    cr_expect(g != a);
    fake_st *h = get(c, &fake, "s1", "{\"k\":1}");
    cr_expect_eq(h, a, "the matching state is still there");
    fake_st *i = get(c, &fake, "s1", "{\"k\":1}");
    cr_expect(i != a, "one state belongs to one task: a second task gets its own");
    cr_expect_eq(inits, 7);
    fake_st *all[] = {b, d, e, f, g, h, i};
    const sb_op_impl *ops[] = {&fake, &fake, &fake2, &fake, &fake, &fake, &fake};
    for (size_t k = 0; k < 7; k++)
        ops[k]->free(all[k]);
    sb_op_cache_free(c);
}

Test(statecache, least_recently_used_evicted_at_the_limit)
{
    sb_op_cache *c = sb_op_cache_new(2);
    fake_st *s1 = get(c, &fake, "a", NULL), *s2 = get(c, &fake, "b", NULL);
    fake_st *s3 = get(c, &fake, "c", NULL);
    sb_op_cache_put(c, &fake, "a", NULL, s1);
    sb_op_cache_put(c, &fake, "b", NULL, s2);
    cr_expect_eq(frees, 0);
    /* "a" is used again: "b" becomes the least recently used */
    cr_expect_eq(get(c, &fake, "a", NULL), s1);
    sb_op_cache_put(c, &fake, "a", NULL, s1);
    sb_op_cache_put(c, &fake, "c", NULL, s3);
    cr_expect_eq(frees, 1, "one over the limit: one freed");
    sb_op_cache_stats st;
    sb_op_cache_stats_get(c, &st);
    cr_expect_eq(st.idle, 2);
    cr_expect_eq(st.evicted, 1);
    cr_expect_eq(get(c, &fake, "a", NULL), s1);
    cr_expect_eq(get(c, &fake, "c", NULL), s3);
    fake_st *b = get(c, &fake, "b", NULL);
    cr_expect_eq(b->id, 4, "b was evicted: a new state");
    sb_op_cache_put(c, &fake, "a", NULL, s1);
    sb_op_cache_put(c, &fake, "b", NULL, b);
    sb_op_cache_put(c, &fake, "c", NULL, s3);
    sb_op_cache_set_limit(c, 1);
    sb_op_cache_stats_get(c, &st);
    cr_expect_eq(st.idle, 1, "a lower limit evicts at once");
    cr_expect_eq(get(c, &fake, "c", NULL), s3, "the most recent one stays");
    sb_op_cache_put(c, &fake, "c", NULL, s3);
    sb_op_cache_clear(c);
    cr_expect_eq(frees, inits, "everything freed");
    sb_op_cache_free(c);
}

Test(statecache, failed_or_unresettable_states_are_not_reused)
{
    sb_op_cache *c = sb_op_cache_new(4);
    /* a failed task frees its state (the runtime calls impl->free, never put) */
    fake_st *s = get(c, &fake, "x", NULL);
    fake.free(s);
    cr_expect_eq(get(c, &fake, "x", NULL)->id, 2, "a new state");
    /* a reset that fails frees the state */
    s = get(c, &fake, "y", NULL);
    fail_reset = 1;
    sb_op_cache_put(c, &fake, "y", NULL, s);
    fail_reset = 0;
    cr_expect_eq(frees, 2);
    cr_expect_eq(get(c, &fake, "y", NULL)->id, 4);
    /* an op without reset: init and free per task */
    s = get(c, &noreset, "z", NULL);
    sb_op_cache_put(c, &noreset, "z", NULL, s);
    cr_expect_eq(frees, 3);
    cr_expect_eq(get(c, &noreset, "z", NULL)->id, 6);
    /* a failed init is not counted as a state */
    void *st = NULL;
    sb_err err;
    cr_expect_neq(sb_op_cache_get(c, &fake, "x", "{\"bad\":1}", &st, &err), 0);
    sb_op_cache_stats stats;
    sb_op_cache_stats_get(c, &stats);
    cr_expect_eq(stats.created, 6);
    /* a limit of 0 keeps nothing */
    sb_op_cache *none = sb_op_cache_new(0);
    s = get(none, &fake, "x", NULL);
    sb_op_cache_put(none, &fake, "x", NULL, s);
    cr_expect_eq(frees, 4);
    sb_op_cache_free(none);
    sb_op_cache_free(c); /* (the states taken above leak: test only) */
}

typedef struct {
    sb_op_cache *c;
    int stage;
} worker_arg;

static void *slot(void *arg)
{
    worker_arg *a = arg;
    const char *stages[] = {"p", "q"};
    for (int task = 0; task < 500; task++) {
        const char *st = stages[(task + a->stage) % 2];
        fake_st *s = get(a->c, &fake, st, NULL);
        cr_assert_eq(s->tasks, 0, "no two tasks hold one state");
        s->tasks = 1;
        s->tasks = 0;
        sb_op_cache_put(a->c, &fake, st, NULL, s);
    }
    return NULL;
}

Test(statecache, slots_share_the_cache)
{
    sb_op_cache *c = sb_op_cache_new(8);
    pthread_t th[4];
    worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (worker_arg){.c = c, .stage = i};
        pthread_create(&th[i], NULL, slot, &args[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    sb_op_cache_stats st;
    sb_op_cache_stats_get(c, &st);
    cr_expect_leq(inits, 8, "at most one state per slot and stage: %d", (int)inits);
    cr_expect_eq(st.created + st.reused, 2000);
    sb_op_cache_free(c);
    cr_expect_eq(frees, inits);
}

Test(statecache, the_worker_cache_is_cleared_by_op_shutdown)
{
    sb_op_cache *w = sb_op_cache_worker();
    sb_op_cache_set_limit(w, 4);
    fake_st *s = get(w, &fake, "w", NULL);
    sb_op_cache_put(w, &fake, "w", NULL, s);
    sb_op_shutdown();
    cr_expect_eq(frees, 1);
    sb_op_cache_stats st;
    sb_op_cache_stats_get(w, &st);
    cr_expect_eq(st.idle, 0);
}

static int drop_blob(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)len;
    (void)rows;
    (void)ud;
    sb_part_free(blob);
    return 0;
}

/* The built-in ops' reset hooks: a reused filter state checks its input again unless the new
 * task says it is valid (input_valid_json is per task); bench ops reset, exec and plugin have
 * none (exec keeps its processes in its own pool; the plugin ABI has no reset). */
Test(statecache, builtin_reset_hooks)
{
    cr_expect_not_null(sb_op_filter_impl.reset);
    cr_expect_not_null(sb_op_project_impl.reset);
    cr_expect_not_null(sb_op_identity_impl.reset);
    cr_expect_not_null(sb_op_spin_impl.reset);
    cr_expect_not_null(sb_op_sleep_impl.reset);
    cr_expect_not_null(sb_op_mlp_impl.reset);
    cr_expect_not_null(sb_op_image_resize_impl.reset);
    cr_expect_not_null(sb_op_image_normalize_impl.reset);
    cr_expect_null(sb_op_exec_impl.reset);
    cr_expect_null(sb_op_plugin_impl.reset);
    sb_op_cache *c = sb_op_cache_new(2);
    const char *args = "{\"field\":\"n\",\"op\":\"lt\",\"value\":5}";
    void *f = NULL;
    sb_err err;
    cr_assert_eq(sb_op_cache_get(c, &sb_op_filter_impl, "keep", args, &f, &err), 0, "%s", err.msg);
    sb_op_filter_impl.input_valid_json(f);
    sb_op_cache_put(c, &sb_op_filter_impl, "keep", args, f);
    void *f2 = NULL;
    cr_assert_eq(sb_op_cache_get(c, &sb_op_filter_impl, "keep", args, &f2, &err), 0);
    cr_expect_eq(f2, f, "reused");
    /* an invalid record is caught again: the reused state does not trust its input */
    sb_field fld = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    sb_batch_builder *bb = sb_batch_builder_new(&fld, 1, &err);
    cr_assert_not_null(bb, "%s", err.msg);
    const char *bad = "{\"n\":1";
    cr_assert_eq(sb_batch_builder_append_binary(bb, 0, bad, strlen(bad), &err), 0, "%s", err.msg);
    void *blob = NULL;
    size_t len = 0;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(bb);
    sb_batch *b = NULL;
    cr_assert_eq(sb_batch_open(blob, len, &b, &err), 0, "%s", err.msg);
    sb_op_out *out = sb_op_out_new(1 << 20, drop_blob, NULL, &err);
    cr_assert_not_null(out);
    cr_expect_neq(sb_op_filter_impl.process(f2, b, 0, 1, out, &err), 0, "the record is checked");
    cr_expect(err.data, "a data error: %s", err.msg);
    sb_op_out_free(out);
    sb_batch_close(b);
    sb_part_free(blob);
    sb_op_filter_impl.free(f2);
    sb_op_cache_free(c);
}
