/* queue.c — see queue.h. Same structure as client-go's workqueue: `dirty` holds every key that
 * needs processing, `processing` the keys handed out, `fifo` the dirty keys not processing (in
 * order); delayed keys wait in `waiting` until get() finds them due. */
#include "k8s/queue.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct strset {
    char **v;
    size_t n, cap;
} strset;

typedef struct waiting_item {
    char *key;
    double at; /* monotonic seconds */
} waiting_item;

typedef struct failure {
    char *key;
    int n;
} failure;

struct sb_k8s_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sb_k8s_queue_opts o;
    strset fifo, dirty, processing;
    waiting_item *waiting;
    size_t nwaiting, capwaiting;
    failure *fail;
    size_t nfail, capfail;
    double tokens, last_refill;
    int shutdown;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static ssize_t set_find(const strset *s, const char *k)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], k) == 0)
            return (ssize_t)i;
    return -1;
}

static int set_push(strset *s, const char *k)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        char **nv = realloc(s->v, nc * sizeof *nv);
        if (nv == NULL)
            return -1;
        s->v = nv;
        s->cap = nc;
    }
    char *c = strdup(k);
    if (c == NULL)
        return -1;
    s->v[s->n++] = c;
    return 0;
}

/* Removes index i keeping order (the fifo relies on it). */
static void set_remove_at(strset *s, size_t i)
{
    free(s->v[i]);
    memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof *s->v);
    s->n--;
}

static void set_remove(strset *s, const char *k)
{
    ssize_t i = set_find(s, k);
    if (i >= 0)
        set_remove_at(s, (size_t)i);
}

static void set_free(strset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

sb_k8s_queue *sb_k8s_queue_new(const sb_k8s_queue_opts *opts, sb_err *err)
{
    sb_k8s_queue *q = calloc(1, sizeof *q);
    if (q == NULL) {
        sb_err_set(err, "k8s queue: out of memory");
        return NULL;
    }
    if (opts != NULL)
        q->o = *opts;
    if (q->o.base_delay_s <= 0)
        q->o.base_delay_s = 0.005;
    if (q->o.max_delay_s <= 0)
        q->o.max_delay_s = 1000;
    if (opts == NULL || opts->qps == 0)
        q->o.qps = 10;
    if (q->o.burst <= 0)
        q->o.burst = 100;
    q->tokens = q->o.burst;
    q->last_refill = now_s();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    return q;
}

void sb_k8s_queue_free(sb_k8s_queue *q)
{
    if (q == NULL)
        return;
    set_free(&q->fifo);
    set_free(&q->dirty);
    set_free(&q->processing);
    for (size_t i = 0; i < q->nwaiting; i++)
        free(q->waiting[i].key);
    free(q->waiting);
    for (size_t i = 0; i < q->nfail; i++)
        free(q->fail[i].key);
    free(q->fail);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

/* Caller holds mu. */
static int add_locked(sb_k8s_queue *q, const char *key)
{
    if (set_find(&q->dirty, key) >= 0)
        return 0;
    if (set_push(&q->dirty, key) < 0)
        return -1;
    if (set_find(&q->processing, key) >= 0)
        return 0;
    if (set_push(&q->fifo, key) < 0) {
        set_remove(&q->dirty, key);
        return -1;
    }
    pthread_cond_signal(&q->cv);
    return 0;
}

int sb_k8s_queue_add(sb_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int rc = q->shutdown ? -1 : add_locked(q, key);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static int add_after_locked(sb_k8s_queue *q, const char *key, double delay_s)
{
    if (q->shutdown)
        return -1;
    if (delay_s <= 0)
        return add_locked(q, key);
    double at = now_s() + delay_s;
    for (size_t i = 0; i < q->nwaiting; i++) {
        if (strcmp(q->waiting[i].key, key) == 0) {
            if (at < q->waiting[i].at) {
                q->waiting[i].at = at;
                pthread_cond_broadcast(&q->cv);
            }
            return 0;
        }
    }
    if (q->nwaiting == q->capwaiting) {
        size_t nc = q->capwaiting ? q->capwaiting * 2 : 16;
        waiting_item *nw = realloc(q->waiting, nc * sizeof *nw);
        if (nw == NULL)
            return -1;
        q->waiting = nw;
        q->capwaiting = nc;
    }
    char *c = strdup(key);
    if (c == NULL)
        return -1;
    q->waiting[q->nwaiting++] = (waiting_item){c, at};
    /* A sleeping get() may need to wake earlier than it planned. */
    pthread_cond_broadcast(&q->cv);
    return 0;
}

int sb_k8s_queue_add_after(sb_k8s_queue *q, const char *key, long delay_ms)
{
    pthread_mutex_lock(&q->mu);
    int rc = add_after_locked(q, key, (double)delay_ms / 1000.0);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static failure *failure_get(sb_k8s_queue *q, const char *key, int create)
{
    for (size_t i = 0; i < q->nfail; i++)
        if (strcmp(q->fail[i].key, key) == 0)
            return &q->fail[i];
    if (!create)
        return NULL;
    if (q->nfail == q->capfail) {
        size_t nc = q->capfail ? q->capfail * 2 : 16;
        failure *nf = realloc(q->fail, nc * sizeof *nf);
        if (nf == NULL)
            return NULL;
        q->fail = nf;
        q->capfail = nc;
    }
    char *c = strdup(key);
    if (c == NULL)
        return NULL;
    q->fail[q->nfail] = (failure){c, 0};
    return &q->fail[q->nfail++];
}

/* Reserves one token; returns how long until it is available (0 when one is there now). */
static double bucket_reserve(sb_k8s_queue *q)
{
    if (q->o.qps <= 0)
        return 0;
    double t = now_s();
    q->tokens += (t - q->last_refill) * q->o.qps;
    if (q->tokens > q->o.burst)
        q->tokens = q->o.burst;
    q->last_refill = t;
    q->tokens -= 1;
    return q->tokens >= 0 ? 0 : -q->tokens / q->o.qps;
}

int sb_k8s_queue_add_rate_limited(sb_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int rc = -1;
    failure *f = q->shutdown ? NULL : failure_get(q, key, 1);
    if (f != NULL) {
        double d = q->o.base_delay_s * pow(2.0, f->n > 1000 ? 1000 : f->n);
        if (d > q->o.max_delay_s || !isfinite(d))
            d = q->o.max_delay_s;
        f->n++;
        double b = bucket_reserve(q);
        rc = add_after_locked(q, key, d > b ? d : b);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void sb_k8s_queue_forget(sb_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < q->nfail; i++) {
        if (strcmp(q->fail[i].key, key) == 0) {
            free(q->fail[i].key);
            q->fail[i] = q->fail[--q->nfail];
            break;
        }
    }
    pthread_mutex_unlock(&q->mu);
}

int sb_k8s_queue_num_requeues(sb_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    failure *f = failure_get(q, key, 0);
    int n = f != NULL ? f->n : 0;
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* Moves due delayed keys to the queue; returns the earliest pending time (0 if none). */
static double promote_due(sb_k8s_queue *q)
{
    double t = now_s(), next = 0;
    for (size_t i = 0; i < q->nwaiting;) {
        if (q->waiting[i].at <= t) {
            char *k = q->waiting[i].key;
            q->waiting[i] = q->waiting[--q->nwaiting];
            /* On out of memory the key stays delayed and is retried at the next get(). */
            if (add_locked(q, k) < 0) {
                q->waiting[q->nwaiting++] = (waiting_item){k, t + 0.01};
                return t + 0.01;
            }
            free(k);
            continue;
        }
        if (next == 0 || q->waiting[i].at < next)
            next = q->waiting[i].at;
        i++;
    }
    return next;
}

static struct timespec ts_of(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

char *sb_k8s_queue_get(sb_k8s_queue *q, long timeout_ms)
{
    double deadline = timeout_ms >= 0 ? now_s() + (double)timeout_ms / 1000.0 : 0;
    char *out = NULL;
    pthread_mutex_lock(&q->mu);
    while (!q->shutdown) {
        double next = promote_due(q);
        if (q->fifo.n > 0) {
            out = q->fifo.v[0];
            memmove(q->fifo.v, q->fifo.v + 1, (q->fifo.n - 1) * sizeof *q->fifo.v);
            q->fifo.n--;
            if (set_push(&q->processing, out) < 0) {
                /* Put it back at the head and report nothing this time. */
                memmove(q->fifo.v + 1, q->fifo.v, q->fifo.n * sizeof *q->fifo.v);
                q->fifo.v[0] = out;
                q->fifo.n++;
                out = NULL;
                break;
            }
            set_remove(&q->dirty, out);
            break;
        }
        double wake = next;
        if (deadline != 0 && (wake == 0 || deadline < wake))
            wake = deadline;
        if (deadline != 0 && now_s() >= deadline)
            break;
        if (wake == 0) {
            pthread_cond_wait(&q->cv, &q->mu);
        } else {
            struct timespec ts = ts_of(wake);
            pthread_cond_timedwait(&q->cv, &q->mu, &ts);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return out;
}

void sb_k8s_queue_done(sb_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    ssize_t i = set_find(&q->processing, key);
    if (i >= 0) {
        set_remove_at(&q->processing, (size_t)i);
        if (set_find(&q->dirty, key) >= 0 && set_push(&q->fifo, key) == 0)
            pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
}

size_t sb_k8s_queue_len(sb_k8s_queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->fifo.n;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t sb_k8s_queue_delayed(sb_k8s_queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->nwaiting;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void sb_k8s_queue_shutdown(sb_k8s_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->shutdown = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

int sb_k8s_queue_is_shutdown(sb_k8s_queue *q)
{
    pthread_mutex_lock(&q->mu);
    int s = q->shutdown;
    pthread_mutex_unlock(&q->mu);
    return s;
}
