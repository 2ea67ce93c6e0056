/* statecache.c — the op states a worker keeps between its tasks (see statecache.h): a small
 * array of idle states under one mutex, each with its key (op, stage, args) and the tick of its
 * return, the least recent one evicted first. The array stays short (2 x slots), so a linear
 * scan beats any index. */
#include "worker/ops/statecache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const sb_op_impl *impl;
    char *stage, *args;
    void *state;
    uint64_t tick; /* when it was returned: the smallest is evicted first */
} idle_state;

struct sb_op_cache {
    pthread_mutex_t mu;
    idle_state *e;
    size_t n, cap, max_idle;
    uint64_t tick;
    sb_op_cache_stats st;
};

static sb_op_cache g_worker = {.mu = PTHREAD_MUTEX_INITIALIZER, .max_idle = 2};

sb_op_cache *sb_op_cache_worker(void)
{
    return &g_worker;
}

sb_op_cache *sb_op_cache_new(size_t max_idle)
{
    sb_op_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->max_idle = max_idle;
    return c;
}

static void idle_free(idle_state *e)
{
    if (e->impl->free != NULL)
        e->impl->free(e->state);
    free(e->stage);
    free(e->args);
}

/* Frees the least recently returned idle states beyond `keep`, one at a time and outside the
 * lock (a free may wait: tensor.mlp's CUDA streams). The array is short: a scan per state. */
static void trim(sb_op_cache *c, size_t keep, bool evict)
{
    for (;;) {
        pthread_mutex_lock(&c->mu);
        if (c->n <= keep) {
            pthread_mutex_unlock(&c->mu);
            return;
        }
        size_t old = 0;
        for (size_t i = 1; i < c->n; i++)
            if (c->e[i].tick < c->e[old].tick)
                old = i;
        idle_state e = c->e[old];
        c->e[old] = c->e[--c->n];
        if (evict)
            c->st.evicted++;
        pthread_mutex_unlock(&c->mu);
        idle_free(&e);
    }
}

void sb_op_cache_clear(sb_op_cache *c)
{
    trim(c, 0, false);
}

void sb_op_cache_free(sb_op_cache *c)
{
    if (c == NULL)
        return;
    sb_op_cache_clear(c);
    if (c == &g_worker)
        return;
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void sb_op_cache_set_limit(sb_op_cache *c, size_t max_idle)
{
    pthread_mutex_lock(&c->mu);
    c->max_idle = max_idle;
    pthread_mutex_unlock(&c->mu);
    trim(c, max_idle, true);
}

static bool same_key(const idle_state *e, const sb_op_impl *impl, const char *stage,
                     const char *args)
{
    return e->impl == impl && strcmp(e->stage, stage) == 0 && strcmp(e->args, args) == 0;
}

int sb_op_cache_get(sb_op_cache *c, const sb_op_impl *impl, const char *stage, const char *args,
                    void **state, sb_err *err)
{
    stage = stage != NULL ? stage : "";
    args = args != NULL ? args : "";
    pthread_mutex_lock(&c->mu);
    size_t best = c->n;
    for (size_t i = 0; i < c->n; i++)
        if (same_key(&c->e[i], impl, stage, args) &&
            (best == c->n || c->e[i].tick > c->e[best].tick))
            best = i;
    if (best < c->n) {
        idle_state e = c->e[best];
        c->e[best] = c->e[--c->n];
        c->st.reused++;
        pthread_mutex_unlock(&c->mu);
        free(e.stage);
        free(e.args);
        *state = e.state;
        return 0;
    }
    pthread_mutex_unlock(&c->mu);
    int rc = impl->init(*args != '\0' ? args : NULL, state, err);
    if (rc == 0) {
        pthread_mutex_lock(&c->mu);
        c->st.created++;
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

/* Adds e (mu held); false when out of memory. */
static bool add_idle(sb_op_cache *c, const idle_state *e)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        idle_state *ne = realloc(c->e, cap * sizeof *ne);
        if (ne == NULL)
            return false;
        c->e = ne;
        c->cap = cap;
    }
    c->e[c->n++] = *e;
    return true;
}

void sb_op_cache_put(sb_op_cache *c, const sb_op_impl *impl, const char *stage, const char *args,
                     void *state)
{
    sb_err err;
    sb_err_clear(&err);
    idle_state e = {.impl = impl, .state = state};
    pthread_mutex_lock(&c->mu);
    size_t max_idle = c->max_idle;
    pthread_mutex_unlock(&c->mu);
    if (max_idle == 0 || impl->reset == NULL || impl->reset(state, &err) != 0 ||
        (e.stage = strdup(stage != NULL ? stage : "")) == NULL ||
        (e.args = strdup(args != NULL ? args : "")) == NULL) {
        idle_free(&e);
        return;
    }
    pthread_mutex_lock(&c->mu);
    e.tick = ++c->tick;
    bool added = add_idle(c, &e);
    max_idle = c->max_idle;
    pthread_mutex_unlock(&c->mu);
    if (!added) {
        idle_free(&e);
        return;
    }
    trim(c, max_idle, true);
}

void sb_op_cache_stats_get(sb_op_cache *c, sb_op_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->idle = c->n;
    pthread_mutex_unlock(&c->mu);
}
