/* The rate-limited work queue (lib/k8s/queue.h): dedup, processing/dirty, delays, per-key
 * backoff, token bucket, blocking get and shutdown. Timing checks use generous bounds. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "k8s/queue.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sb_k8s_queue *new_queue(double qps, double burst)
{
    sb_k8s_queue_opts o = {.qps = qps, .burst = burst};
    sb_err err = {0};
    sb_k8s_queue *q = sb_k8s_queue_new(&o, &err);
    cr_assert_not_null(q, "%s", err.msg);
    return q;
}

static void expect_get(sb_k8s_queue *q, const char *want, long timeout_ms)
{
    char *k = sb_k8s_queue_get(q, timeout_ms);
    cr_assert_not_null(k, "expected key %s, got none", want);
    cr_expect_str_eq(k, want);
    free(k);
}

Test(k8s_queue, fifo_order_and_dedup)
{
    sb_k8s_queue *q = new_queue(-1, 0);
    cr_assert_eq(sb_k8s_queue_add(q, "ns/a"), 0);
    cr_assert_eq(sb_k8s_queue_add(q, "ns/b"), 0);
    cr_assert_eq(sb_k8s_queue_add(q, "ns/a"), 0);
    cr_assert_eq(sb_k8s_queue_add(q, "ns/c"), 0);
    cr_expect_eq(sb_k8s_queue_len(q), 3, "duplicates must be merged, len %zu", sb_k8s_queue_len(q));
    expect_get(q, "ns/a", 0);
    expect_get(q, "ns/b", 0);
    expect_get(q, "ns/c", 0);
    cr_expect_null(sb_k8s_queue_get(q, 0), "queue should be empty");
    sb_k8s_queue_free(q);
}

Test(k8s_queue, processing_key_not_handed_out_twice)
{
    sb_k8s_queue *q = new_queue(-1, 0);
    sb_k8s_queue_add(q, "k");
    char *k = sb_k8s_queue_get(q, 0);
    cr_assert_not_null(k);
    /* Re-added while processing: marked dirty, not queued. */
    sb_k8s_queue_add(q, "k");
    sb_k8s_queue_add(q, "k");
    cr_expect_eq(sb_k8s_queue_len(q), 0);
    cr_expect_null(sb_k8s_queue_get(q, 50), "a processing key must not be handed out again");
    sb_k8s_queue_done(q, k);
    free(k);
    cr_expect_eq(sb_k8s_queue_len(q), 1, "dirty key must be re-queued after done");
    expect_get(q, "k", 0);
    sb_k8s_queue_done(q, "k");
    cr_expect_eq(sb_k8s_queue_len(q), 0, "done without re-add must not re-queue");
    cr_expect_null(sb_k8s_queue_get(q, 0));
    sb_k8s_queue_free(q);
}

Test(k8s_queue, add_after_delays_and_earliest_wins)
{
    sb_k8s_queue *q = new_queue(-1, 0);
    double t0 = now_s();
    sb_k8s_queue_add_after(q, "late", 5000);
    sb_k8s_queue_add_after(q, "late", 150); /* earlier time wins */
    sb_k8s_queue_add_after(q, "later", 400);
    cr_expect_eq(sb_k8s_queue_delayed(q), 2);
    cr_expect_null(sb_k8s_queue_get(q, 50), "nothing is due yet");
    expect_get(q, "late", 2000);
    double t1 = now_s() - t0;
    cr_expect(t1 >= 0.14 && t1 < 1.5, "delayed key came after %.3f s, want ~0.15", t1);
    expect_get(q, "later", 2000);
    double t2 = now_s() - t0;
    cr_expect(t2 >= 0.39 && t2 < 2.0, "second delayed key after %.3f s, want ~0.4", t2);
    sb_k8s_queue_free(q);
}

Test(k8s_queue, per_key_exponential_backoff_and_forget)
{
    sb_k8s_queue_opts o = {.base_delay_s = 0.02, .max_delay_s = 0.2, .qps = -1};
    sb_k8s_queue *q = sb_k8s_queue_new(&o, NULL);
    cr_assert_not_null(q);
    double expect[] = {0.02, 0.04, 0.08, 0.16, 0.2, 0.2};
    for (int i = 0; i < 6; i++) {
        double t0 = now_s();
        cr_assert_eq(sb_k8s_queue_add_rate_limited(q, "x"), 0);
        cr_expect_eq(sb_k8s_queue_num_requeues(q, "x"), i + 1);
        char *k = sb_k8s_queue_get(q, 3000);
        double dt = now_s() - t0;
        cr_assert_not_null(k, "attempt %d: no key", i);
        cr_expect(dt >= expect[i] - 0.005 && dt < expect[i] + 0.5,
                  "attempt %d: delay %.3f s, want ~%.3f", i, dt, expect[i]);
        sb_k8s_queue_done(q, k);
        free(k);
    }
    /* Another key has its own backoff. */
    cr_expect_eq(sb_k8s_queue_num_requeues(q, "y"), 0);
    sb_k8s_queue_forget(q, "x");
    cr_expect_eq(sb_k8s_queue_num_requeues(q, "x"), 0);
    double t0 = now_s();
    sb_k8s_queue_add_rate_limited(q, "x");
    expect_get(q, "x", 3000);
    double dt = now_s() - t0;
    cr_expect(dt < 0.15, "after forget the delay is back to base, took %.3f s", dt);
    sb_k8s_queue_free(q);
}

Test(k8s_queue, default_backoff_starts_at_5ms)
{
    sb_k8s_queue *q = sb_k8s_queue_new(NULL, NULL);
    cr_assert_not_null(q);
    double t0 = now_s();
    sb_k8s_queue_add_rate_limited(q, "k");
    cr_expect_null(sb_k8s_queue_get(q, 0), "rate-limited add must not be ready at once");
    expect_get(q, "k", 2000);
    double dt = now_s() - t0;
    cr_expect(dt >= 0.004 && dt < 0.5, "first backoff %.4f s, want ~0.005", dt);
    sb_k8s_queue_free(q);
}

Test(k8s_queue, token_bucket_limits_overall_rate)
{
    /* qps 20, burst 5: 5 distinct keys at once, the next 10 spaced 50 ms apart. */
    sb_k8s_queue_opts o = {.base_delay_s = 0.001, .max_delay_s = 0.001, .qps = 20, .burst = 5};
    sb_k8s_queue *q = sb_k8s_queue_new(&o, NULL);
    cr_assert_not_null(q);
    double t0 = now_s();
    char key[32];
    for (int i = 0; i < 15; i++) {
        snprintf(key, sizeof key, "k%d", i);
        sb_k8s_queue_add_rate_limited(q, key);
    }
    int got = 0;
    double first5 = 0;
    while (got < 15) {
        char *k = sb_k8s_queue_get(q, 5000);
        cr_assert_not_null(k, "only %d of 15 keys came", got);
        sb_k8s_queue_done(q, k);
        free(k);
        if (++got == 5)
            first5 = now_s() - t0;
    }
    double total = now_s() - t0;
    cr_expect(first5 < 0.2, "the burst should pass at once, took %.3f s", first5);
    cr_expect(total >= 0.45 && total < 3.0, "15 keys at 20 qps burst 5: %.3f s, want ~0.5", total);
    sb_k8s_queue_free(q);
}

Test(k8s_queue, max_delay_caps_large_failure_counts)
{
    sb_k8s_queue_opts o = {.base_delay_s = 0.001, .max_delay_s = 0.05, .qps = -1};
    sb_k8s_queue *q = sb_k8s_queue_new(&o, NULL);
    for (int i = 0; i < 2000; i++)
        sb_k8s_queue_add_rate_limited(q, "k");
    cr_expect_eq(sb_k8s_queue_num_requeues(q, "k"), 2000);
    cr_expect_eq(sb_k8s_queue_delayed(q), 1, "one pending entry per key");
    double t0 = now_s();
    expect_get(q, "k", 2000);
    cr_expect(now_s() - t0 < 1.0, "the cap must hold even after 2000 failures");
    sb_k8s_queue_free(q);
}

static void *shutdown_later(void *arg)
{
    usleep(100 * 1000);
    sb_k8s_queue_shutdown(arg);
    return NULL;
}

Test(k8s_queue, shutdown_wakes_blocked_get)
{
    sb_k8s_queue *q = new_queue(-1, 0);
    pthread_t t;
    pthread_create(&t, NULL, shutdown_later, q);
    double t0 = now_s();
    char *k = sb_k8s_queue_get(q, -1);
    double dt = now_s() - t0;
    pthread_join(t, NULL);
    cr_expect_null(k);
    cr_expect(sb_k8s_queue_is_shutdown(q));
    cr_expect(dt >= 0.09 && dt < 2.0, "get returned after %.3f s", dt);
    cr_expect_eq(sb_k8s_queue_add(q, "x"), -1, "adds after shutdown are refused");
    cr_expect_null(sb_k8s_queue_get(q, -1));
    sb_k8s_queue_free(q);
}

Test(k8s_queue, get_timeout_returns_null)
{
    sb_k8s_queue *q = new_queue(-1, 0);
    double t0 = now_s();
    cr_expect_null(sb_k8s_queue_get(q, 100));
    double dt = now_s() - t0;
    cr_expect(dt >= 0.09 && dt < 2.0, "timeout after %.3f s", dt);
    cr_expect(!sb_k8s_queue_is_shutdown(q));
    sb_k8s_queue_free(q);
}

/* Several workers, keys re-added while processing: no key is ever processed by two workers at
 * once, and every add is followed by at least one processing of that key. */
typedef struct stress {
    sb_k8s_queue *q;
    pthread_mutex_t mu;
    int active[16];
    int processed[16];
    int overlap;
} stress;

static void *worker(void *arg)
{
    stress *s = arg;
    for (;;) {
        char *k = sb_k8s_queue_get(s->q, -1);
        if (k == NULL)
            return NULL;
        int i = atoi(k + 1);
        pthread_mutex_lock(&s->mu);
        if (s->active[i]++)
            s->overlap++;
        pthread_mutex_unlock(&s->mu);
        usleep(200);
        pthread_mutex_lock(&s->mu);
        s->active[i]--;
        s->processed[i]++;
        pthread_mutex_unlock(&s->mu);
        sb_k8s_queue_done(s->q, k);
        free(k);
    }
}

Test(k8s_queue, concurrent_workers_never_share_a_key)
{
    stress s = {.q = new_queue(-1, 0)};
    pthread_mutex_init(&s.mu, NULL);
    pthread_t w[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&w[i], NULL, worker, &s);
    char key[16];
    for (int round = 0; round < 300; round++) {
        snprintf(key, sizeof key, "k%d", round % 16);
        sb_k8s_queue_add(s.q, key);
        if (round % 7 == 0)
            usleep(100);
    }
    /* Drain: wait until nothing is queued and every worker is idle. */
    for (int i = 0; i < 400; i++) {
        usleep(10 * 1000);
        pthread_mutex_lock(&s.mu);
        int busy = 0;
        for (int j = 0; j < 16; j++)
            busy += s.active[j];
        pthread_mutex_unlock(&s.mu);
        if (busy == 0 && sb_k8s_queue_len(s.q) == 0)
            break;
    }
    sb_k8s_queue_shutdown(s.q);
    for (int i = 0; i < 4; i++)
        pthread_join(w[i], NULL);
    cr_expect_eq(s.overlap, 0, "a key was processed by two workers at once %d times", s.overlap);
    for (int j = 0; j < 16; j++)
        cr_expect(s.processed[j] >= 1, "key k%d never processed", j);
    sb_k8s_queue_free(s.q);
    pthread_mutex_destroy(&s.mu);
}
