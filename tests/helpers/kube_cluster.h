/* kube_cluster.h — a private test cluster (tests/k8s/cluster.sh) for a Criterion test binary.
 * Header-only (static inline), like tests/unit/testutil.h, which it needs included first.
 *
 * Use: call sb_kc_up("name") from a ReportHook(PRE_ALL) and sb_kc_down() from
 * ReportHook(POST_ALL) (it is also registered with atexit, so the cluster is always stopped).
 * The state dir is /tmp/sb-<name>.<pid>; it travels to the test processes (Criterion forks
 * them) in $SB_KC_STATE, a start failure in $SB_KC_ERROR (every test then fails with it, e.g.
 * "run `make k8s-build` first"). The start is bounded by SB_K8S_TEST_UP_TIMEOUT (default 150 s)
 * and retried once after a clean stop. `nodes` (may be NULL) becomes SB_K8S_NODES. */
#ifndef SB_TEST_KUBE_CLUSTER_H
#define SB_TEST_KUBE_CLUSTER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char sb_kc_state[256];
static int sb_kc_is_up;

static inline void sb_kc_down(void)
{
    if (!sb_kc_is_up)
        return;
    sb_kc_is_up = 0;
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "STREAMBATCH_CLUSTER_DIR=%s timeout -k 5 60 %s/tests/k8s/cluster.sh down 2>&1",
             sb_kc_state, sb_test_root());
    int rc = sb_test_run(cmd, &out);
    if (rc != 0)
        fprintf(stderr, "cluster.sh down failed (%d):\n%s\n", rc, out);
    free(out);
}

static inline void sb_kc_up(const char *name, const char *nodes)
{
    snprintf(sb_kc_state, sizeof sb_kc_state, "/tmp/sb-%s.%d", name, (int)getpid());
    setenv("SB_KC_STATE", sb_kc_state, 1);
    char cmd[2048], *out = NULL;
    /* These tests watch worker processes from the host and run without `make images`: our
     * images as host processes of $SB_BIN_DIR, the test-only table (cluster.sh's default runs
     * them as containers) */
    if (getenv("SB_K8S_IMAGES") == NULL) {
        snprintf(cmd, sizeof cmd, "%s/tests/k8s/images-host.conf", sb_test_root());
        setenv("SB_K8S_IMAGES", cmd, 1);
    }
    snprintf(cmd, sizeof cmd,
             "d=$(%s/tests/k8s/build.sh --print-bin-dir) && test -x \"$d/kube-apiserver\" && test "
             "-x \"$d/etcd\" && test -x \"$d/kubectl\" && test -x \"$d/sb-node-agent\"",
             sb_test_root());
    if (sb_test_run(cmd, &out) != 0) {
        setenv("SB_KC_ERROR",
               "Kubernetes test binaries are not built: run `make k8s-build` first (see "
               "docs/testing.md)",
               1);
        free(out);
        return;
    }
    free(out);
    const char *lim = getenv("SB_K8S_TEST_UP_TIMEOUT");
    char nodes_env[1024] = "";
    if (nodes != NULL)
        snprintf(nodes_env, sizeof nodes_env, "SB_K8S_NODES='%s' ", nodes);
    time_t t0 = time(NULL);
    sb_kc_is_up = 1; /* from here on, always try to stop it */
    atexit(sb_kc_down);
    snprintf(cmd, sizeof cmd,
             "%sSTREAMBATCH_CLUSTER_DIR=%s timeout -k 5 %s %s/tests/k8s/cluster.sh up 2>&1",
             nodes_env, sb_kc_state, lim != NULL ? lim : "150", sb_test_root());
    int rc = sb_test_run(cmd, &out);
    if (rc != 0) {
        fprintf(stderr, "cluster.sh up failed (exit %d), retrying once:\n%s\n", rc, out);
        free(out);
        char down[1024], *dout = NULL;
        snprintf(down, sizeof down,
                 "STREAMBATCH_CLUSTER_DIR=%s timeout -k 5 60 %s/tests/k8s/cluster.sh down 2>&1",
                 sb_kc_state, sb_test_root());
        sb_test_run(down, &dout);
        free(dout);
        rc = sb_test_run(cmd, &out);
    }
    if (rc != 0) {
        static char msg[4096];
        size_t n = strlen(out);
        snprintf(msg, sizeof msg, "cluster.sh up failed (exit %d); last output:\n%s", rc,
                 out + (n > 3000 ? n - 3000 : 0));
        setenv("SB_KC_ERROR", msg, 1);
    } else {
        fprintf(stderr, "%s: cluster up in %lds (%s)\n", name, (long)(time(NULL) - t0),
                sb_kc_state);
    }
    free(out);
}

/* In a test: the kubeconfig path, or a failed assertion saying why there is no cluster. */
#define SB_KC_REQUIRE(kubeconfig_buf)                                                              \
    do {                                                                                           \
        const char *e_ = getenv("SB_KC_ERROR");                                                    \
        if (e_ != NULL)                                                                            \
            cr_assert_fail("no test cluster: %s", e_);                                             \
        const char *st_ = getenv("SB_KC_STATE");                                                   \
        cr_assert_not_null(st_, "the PRE_ALL hook did not run");                                   \
        snprintf(kubeconfig_buf, sizeof kubeconfig_buf, "%s/kubeconfig", st_);                     \
    } while (0)

/* Runs kubectl against the test cluster; returns its exit status and output (caller frees). */
static inline int sb_kc_kubectl(const char *args, char **out)
{
    char cmd[4096];
    const char *st = getenv("SB_KC_STATE");
    snprintf(cmd, sizeof cmd, "KUBECONFIG=%s/kubeconfig timeout 60 %s/bin/kubectl %s 2>&1", st, st,
             args);
    return sb_test_run(cmd, out);
}

static inline long sb_kc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
