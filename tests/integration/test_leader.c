/* Lease leader election (controller/operator/leader.h) against a real API server: the test starts
 * its own cluster (tests/helpers/kube_cluster.h) and always stops it. Short timings (lease 3000 ms,
 * renew deadline 2000 ms, retry 500 ms) keep it quick; each test uses its own Lease.
 *
 * Covered: of two electors exactly one leads, and the Lease names it; stopping the leader
 * without release hands over only after the lease expired (by locally observed time), with
 * leaseTransitions counted; with release at the standby's next try; a third party overwriting
 * the Lease makes the leader stop leading (on_stopped) and it does not come back; bad timings
 * are refused. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "../helpers/kube_cluster.h"
#include "controller/operator/leader.h"
#include "k8s/client.h"
#include "k8s/config.h"

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    sb_kc_up("leader-test", NULL);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    sb_kc_down();
}

static sb_k8s_config *g_cfg;

static void setup(void)
{
    char kc[512];
    SB_KC_REQUIRE(kc);
    sb_err err = {0};
    g_cfg = sb_k8s_config_load_kubeconfig(kc, NULL, &err);
    cr_assert_not_null(g_cfg, "%s", err.msg);
}

static void teardown(void)
{
    sb_k8s_config_free(g_cfg);
    g_cfg = NULL;
}

TestSuite(leader, .init = setup, .fini = teardown, .timeout = 90);

typedef struct cand {
    atomic_int started, stopped;
} cand;

static void on_started(void *ud)
{
    atomic_fetch_add(&((cand *)ud)->started, 1);
}

static void on_stopped(void *ud)
{
    atomic_fetch_add(&((cand *)ud)->stopped, 1);
}

static sb_leader *start(const char *lease, const char *id, cand *c)
{
    sb_leader_config lc = {.k8s = g_cfg,
                           .namespace = "default",
                           .name = lease,
                           .identity = id,
                           .lease_ms = 3000,
                           .renew_ms = 2000,
                           .retry_ms = 500,
                           .on_started = on_started,
                           .on_stopped = on_stopped,
                           .ud = c};
    sb_err err = {0};
    sb_leader *l = sb_leader_start(&lc, &err);
    cr_assert_not_null(l, "%s", err.msg);
    return l;
}

/* Waits until pred-ish: returns ms waited, or -1 after limit_ms. */
static long wait_leader(sb_leader *l, long limit_ms)
{
    long t0 = sb_kc_now_ms();
    while (sb_kc_now_ms() - t0 < limit_ms) {
        if (sb_leader_is_leader(l))
            return sb_kc_now_ms() - t0;
        usleep(20 * 1000);
    }
    return -1;
}

static long wait_one(sb_leader *a, sb_leader *b, long limit_ms)
{
    long t0 = sb_kc_now_ms();
    while (sb_kc_now_ms() - t0 < limit_ms) {
        if (sb_leader_is_leader(a) || sb_leader_is_leader(b))
            return sb_kc_now_ms() - t0;
        usleep(20 * 1000);
    }
    return -1;
}

/* The Lease as the API server has it. */
static cJSON *get_lease(const char *name)
{
    sb_err err = {0};
    sb_k8s_client *c = sb_k8s_client_new(g_cfg, &err);
    cr_assert_not_null(c, "%s", err.msg);
    char path[256];
    snprintf(path, sizeof path, "/apis/coordination.k8s.io/v1/namespaces/default/leases/%s", name);
    long st = 0;
    cJSON *l = sb_k8s_get(c, path, &st, &err);
    sb_k8s_client_free(c);
    cr_assert_not_null(l, "%s", err.msg);
    return l;
}

static const char *holder_of(const cJSON *lease)
{
    const cJSON *h = cJSON_GetObjectItem(cJSON_GetObjectItem(lease, "spec"), "holderIdentity");
    return cJSON_IsString(h) ? h->valuestring : "";
}

static int transitions_of(const cJSON *lease)
{
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(lease, "spec"), "leaseTransitions");
    return cJSON_IsNumber(t) ? t->valueint : -1;
}

Test(leader, exactly_one_of_two_leads)
{
    cand ca = {0}, cb = {0};
    sb_leader *a = start("one-of-two", "ctl-a_1", &ca);
    sb_leader *b = start("one-of-two", "ctl-b_2", &cb);
    cr_assert_geq(wait_one(a, b, 10000), 0, "nobody acquired the lease in 10 s");
    /* For 3 s (several renew periods), exactly one leads, and it stays the same one. */
    int first = sb_leader_is_leader(a) ? 0 : 1;
    for (int i = 0; i < 60; i++) {
        int la = sb_leader_is_leader(a), lb = sb_leader_is_leader(b);
        cr_assert_eq(la + lb, 1, "leaders: a=%d b=%d at %d ms", la, lb, i * 50);
        cr_assert_eq(la ? 0 : 1, first, "leadership moved without a reason");
        usleep(50 * 1000);
    }
    cJSON *lease = get_lease("one-of-two");
    cr_expect_str_eq(holder_of(lease), first == 0 ? "ctl-a_1" : "ctl-b_2");
    cr_expect_eq(transitions_of(lease), 0, "a fresh lease has no transitions");
    cJSON_Delete(lease);
    char holder[128];
    uint32_t tr = 99;
    sb_leader_current(first == 0 ? b : a, holder, sizeof holder, &tr);
    cr_expect_str_eq(holder, first == 0 ? "ctl-a_1" : "ctl-b_2", "the standby sees the holder");
    cr_expect_eq(tr, 0);
    cr_expect_eq(atomic_load(first == 0 ? &ca.started : &cb.started), 1);
    cr_expect_eq(atomic_load(first == 0 ? &cb.started : &ca.started), 0);
    cr_expect_eq(atomic_load(&ca.stopped) + atomic_load(&cb.stopped), 0);
    sb_leader_stop(a, 1);
    sb_leader_stop(b, 1);
}

Test(leader, stop_without_release_hands_over_after_expiry)
{
    cand ca = {0}, cb = {0};
    sb_leader *a = start("expiry", "ctl-a_1", &ca);
    cr_assert_geq(wait_leader(a, 10000), 0, "a did not acquire a free lease");
    sb_leader *b = start("expiry", "ctl-b_2", &cb);
    usleep(1500 * 1000);
    cr_assert(!sb_leader_is_leader(b), "b took a lease a keeps renewing");
    /* a "crashes": it stops renewing and leaves the lease as it is. */
    long t0 = sb_kc_now_ms();
    sb_leader_stop(a, 0);
    long waited = wait_leader(b, 12000);
    cr_assert_geq(waited, 0, "b did not take over within 12 s");
    waited = sb_kc_now_ms() - t0;
    /* Not before the lease could have expired (3 s after the last renew, which was at most one
     * retry period before the stop), and not much after. */
    fprintf(stderr, "leader: takeover after a stop without release: %ld ms\n", waited);
    cr_expect_geq(waited, 2400, "b took over after %ld ms, before the lease expired", waited);
    cr_expect_leq(waited, 5000, "b took over only after %ld ms", waited);
    cr_expect_eq(atomic_load(&cb.started), 1);
    cJSON *lease = get_lease("expiry");
    cr_expect_str_eq(holder_of(lease), "ctl-b_2");
    cr_expect_eq(transitions_of(lease), 1, "one change of holder");
    cJSON_Delete(lease);
    char holder[128];
    uint32_t tr = 0;
    sb_leader_current(b, holder, sizeof holder, &tr);
    cr_expect_str_eq(holder, "ctl-b_2");
    cr_expect_eq(tr, 1);
    cr_expect_eq(atomic_load(&ca.stopped), 0, "on_stopped is not called by sb_leader_stop");
    sb_leader_stop(b, 1);
}

Test(leader, release_hands_over_at_once)
{
    cand ca = {0}, cb = {0};
    sb_leader *a = start("release", "ctl-a_1", &ca);
    cr_assert_geq(wait_leader(a, 10000), 0);
    sb_leader *b = start("release", "ctl-b_2", &cb);
    usleep(1000 * 1000);
    cr_assert(!sb_leader_is_leader(b));
    long t0 = sb_kc_now_ms();
    sb_leader_stop(a, 1);
    cr_assert_geq(wait_leader(b, 10000), 0, "b did not take over a released lease");
    long waited = sb_kc_now_ms() - t0;
    fprintf(stderr, "leader: takeover after a release: %ld ms\n", waited);
    cr_expect_leq(waited, 1500, "a released lease is taken at the next try (500 ms), took %ld ms",
                  waited);
    cJSON *lease = get_lease("release");
    cr_expect_str_eq(holder_of(lease), "ctl-b_2");
    cr_expect_eq(transitions_of(lease), 1);
    cJSON_Delete(lease);
    /* b releases too: the lease is left without a holder, transitions kept. */
    sb_leader_stop(b, 1);
    lease = get_lease("release");
    cr_expect_str_eq(holder_of(lease), "");
    cr_expect_eq(transitions_of(lease), 1);
    cJSON_Delete(lease);
    /* A new candidate takes the free lease at once and counts a transition. */
    cand cc = {0};
    sb_leader *c = start("release", "ctl-c_3", &cc);
    cr_assert_geq(wait_leader(c, 3000), 0);
    lease = get_lease("release");
    cr_expect_eq(transitions_of(lease), 2);
    cJSON_Delete(lease);
    sb_leader_stop(c, 1);
}

Test(leader, overwritten_lease_stops_the_leader)
{
    cand ca = {0};
    sb_leader *a = start("overwrite", "ctl-a_1", &ca);
    cr_assert_geq(wait_leader(a, 10000), 0);
    /* A third party takes the lease by force (as after a split brain, or a human). */
    cJSON *lease = get_lease("overwrite");
    cJSON *spec = cJSON_GetObjectItem(lease, "spec");
    cJSON_ReplaceItemInObject(spec, "holderIdentity", cJSON_CreateString("intruder"));
    cJSON_DeleteItemFromObject(lease, "metadata");
    char *patch = cJSON_PrintUnformatted(lease);
    cJSON_Delete(lease);
    sb_err err = {0};
    sb_k8s_client *c = sb_k8s_client_new(g_cfg, &err);
    cr_assert_not_null(c, "%s", err.msg);
    long st = 0;
    long t0 = sb_kc_now_ms();
    cJSON *p = sb_k8s_patch(c, "/apis/coordination.k8s.io/v1/namespaces/default/leases/overwrite",
                            patch, &st, &err);
    free(patch);
    cr_assert_not_null(p, "%s", err.msg);
    cJSON_Delete(p);
    sb_k8s_client_free(c);
    while (sb_leader_is_leader(a) && sb_kc_now_ms() - t0 < 5000)
        usleep(20 * 1000);
    long waited = sb_kc_now_ms() - t0;
    cr_assert(!sb_leader_is_leader(a), "a still leads 5 s after losing its lease");
    fprintf(stderr, "leader: overwritten lease noticed after %ld ms\n", waited);
    cr_expect_leq(waited, 1500, "a noticed only after %ld ms (retry is 500 ms)", waited);
    cr_expect_eq(atomic_load(&ca.stopped), 1, "on_stopped was called");
    /* It does not compete again, even after the intruder's lease expired. */
    usleep(4000 * 1000);
    cr_expect(!sb_leader_is_leader(a));
    cr_expect_eq(atomic_load(&ca.started), 1);
    lease = get_lease("overwrite");
    cr_expect_str_eq(holder_of(lease), "intruder");
    cJSON_Delete(lease);
    sb_leader_stop(a, 1);
}

Test(leader, bad_timings_are_refused)
{
    sb_leader_config lc = {.k8s = g_cfg,
                           .name = "bad",
                           .identity = "x",
                           .lease_ms = 2000,
                           .renew_ms = 2000,
                           .retry_ms = 500};
    sb_err err = {0};
    cr_expect_null(sb_leader_start(&lc, &err));
    cr_expect(strstr(err.msg, "lease duration > renew deadline > retry period") != NULL, "%s",
              err.msg);
    lc.renew_ms = 1000;
    lc.identity = "";
    cr_expect_null(sb_leader_start(&lc, &err));
    cr_expect(strstr(err.msg, "identity") != NULL, "%s", err.msg);
}

/* The API server stops answering (its process is SIGSTOPped): the leader gives up leading once
 * the renew deadline (2000 ms) passed without a successful renew, before its lease (3000 ms)
 * could have expired for a standby. */
Test(leader, renew_deadline_without_api_server_stops_leading)
{
    cand ca = {0};
    sb_leader *a = start("deadline", "ctl-a_1", &ca);
    cr_assert_geq(wait_leader(a, 10000), 0);
    char pidfile[512], *out = NULL;
    snprintf(pidfile, sizeof pidfile, "%s/pids/kube-apiserver.pid", getenv("SB_KC_STATE"));
    FILE *f = fopen(pidfile, "r");
    cr_assert_not_null(f, "%s", pidfile);
    int pid = 0;
    cr_assert_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    usleep(300 * 1000); /* just after a renew */
    long t0 = sb_kc_now_ms();
    cr_assert_eq(kill(pid, SIGSTOP), 0);
    while (sb_leader_is_leader(a) && sb_kc_now_ms() - t0 < 6000)
        usleep(20 * 1000);
    long waited = sb_kc_now_ms() - t0;
    kill(pid, SIGCONT);
    fprintf(stderr, "leader: stopped leading %ld ms after the API server stopped\n", waited);
    cr_assert(!sb_leader_is_leader(a), "still leading 6 s without the API server");
    cr_expect_leq(waited, 2600, "stopped leading only after %ld ms (deadline 2000)", waited);
    cr_expect_geq(waited, 1200, "stopped leading after %ld ms, before the deadline", waited);
    cr_expect_eq(atomic_load(&ca.stopped), 1);
    /* the API server answers again */
    int ok = 0;
    for (int i = 0; i < 50 && !ok; i++) {
        ok = sb_kc_kubectl("get --raw /readyz", &out) == 0;
        free(out);
        if (!ok)
            usleep(200 * 1000);
    }
    cr_expect(ok, "the API server did not come back");
    sb_leader_stop(a, 0);
}
