/* A stream:// sink served by the operator (issue 40) on the private test cluster (as
 * test_operator.c): the Pipeline's status says where its consumers connect and which Secret
 * holds their token; two trainer ranks read two epochs of it with the Python kit (reading the
 * token from that Secret, as a trainer pod mounts it); every record reaches exactly one rank per
 * epoch, the seeded epochs come in different orders; the Pipeline stays Running while the ranks
 * read and succeeds once both ended both epochs. Its Service and EndpointSlice point at the
 * leader's address. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "../helpers/kube_cluster.h"
#include "itest.h"

#define NFILES 8
#define PER_FILE 600

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    sb_kc_up("op-stream", NULL);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    sb_kc_down();
}

static pid_t ctl_pid;
static char host_ip[64]; /* where the Control services listen; "": 127.0.0.1 */

static void setup(void)
{
    const char *e = getenv("SB_KC_ERROR");
    if (e != NULL)
        cr_assert_fail("no test cluster: %s", e);
    itest_mkdtemp("sb-opstream");
    free(sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json, os\nos.makedirs('in')\nfor f in range(%d):\n"
        "  with open('in/f%%02d.jsonl' %% f, 'w') as o:\n    for i in range(%d):\n"
        "      o.write(json.dumps({'id': f*%d+i, 'pad': 'x'*60}) + '\\\\n')\n\"",
        dir, NFILES, PER_FILE, PER_FILE));
    itest_crd_apply();
    /* an EndpointSlice refuses a loopback address: the Control services listen on this host's
     * first other IPv4 address when it has one (the ranks and worker pods reach it as well) */
    char *ip = sb_test_sh_out("hostname -I 2>/dev/null | tr ' ' '\\n' | "
                              "grep -E '^[0-9]+[.][0-9.]+$' | grep -v '^127[.]' | head -1");
    snprintf(host_ip, sizeof host_ip, "%s", ip);
    free(ip);
    char flag[300];
    snprintf(flag, sizeof flag, "--grpc-listen=%s:0", host_ip);
    /* the operator's key, as the chart gives every replica: a successor derives the same tokens
     * (the ranks' Secret stays valid across a takeover) */
    setenv("SB_AUTH_KEY", "operator-stream-test-key-0123456789abcdef", 1);
    ctl_pid = itest_controller_start(host_ip[0] != '\0' ? flag : NULL);
}

static void teardown(void)
{
    /* a test that failed midway leaves its Pipeline: gone before the next test's starts (the
     * controller, still running, removes its pods) */
    free(kubectl("delete pipeline --all --timeout=30s"));
    itest_controller_stop(&ctl_pid);
    free(sb_test_sh_out("rm -rf %s", dir));
}

TestSuite(operator_stream, .init = setup, .fini = teardown, .timeout = 300);

/* The build folder by its absolute path (SB_BUILD_DIR, or build/ in the repository when a test
 * is run by hand): the ranks run in dir. */
static const char *build_dir(void)
{
    static char build[4096];
    const char *b = getenv("SB_BUILD_DIR");
    if (b != NULL && b[0] == '/')
        snprintf(build, sizeof build, "%s", b);
    else
        snprintf(build, sizeof build, "%s/%s", sb_test_root(), b != NULL ? b : "build");
    return build;
}

/* jsonpath of the Pipeline (output trimmed of quotes by kubectl's -o jsonpath). */
static char *jpn(const char *name, const char *path)
{
    return kubectl("get pipeline %s -o jsonpath='%s'", name, path);
}

static char *jp(const char *path)
{
    return jpn("train", path);
}

/* Every id of 0..NFILES*PER_FILE once across the two ranks' epoch e (the e-th they read, from
 * PREFIX-0.json and PREFIX-1.json), both ranks dealt rows; and the files in the order rank 0
 * first got a row of each (a Python list) into order: the order the epoch read its splits in
 * (plan order, f00 to f07, without a seed). */
static void check_epoch(const char *prefix, int e, char *order, size_t olen)
{
    char *v = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json\nr = [json.load(open('%s-%%d.json' %% k)) for k in "
        "(0, 1)]\nids = [i for x in r for i in x['epochs'][%d]['ids']]\n"
        "print(len(ids), len(set(ids)), sorted(ids) == list(range(%d)), "
        "min(len(x['epochs'][%d]['ids']) for x in r))\nf = []\n"
        "[f.append(i // %d) for i in r[0]['epochs'][%d]['ids'] if i // %d not in f]\nprint(f)\"",
        dir, prefix, e, NFILES * PER_FILE, e, PER_FILE, e, PER_FILE);
    char want[64];
    snprintf(want, sizeof want, "%d %d True ", NFILES * PER_FILE, NFILES * PER_FILE);
    cr_expect(strncmp(v, want, strlen(want)) == 0,
              "epoch %d: want every id once across the ranks (\"%s\" then the fewest rows a rank "
              "got), got: %s",
              e, want, v);
    char *nl = strchr(v, '\n');
    cr_assert_not_null(nl, "%s", v);
    *nl = '\0';
    const char *sp = strrchr(v, ' ');
    cr_expect(sp != NULL && atol(sp + 1) > 0, "epoch %d: a rank got no rows: %s", e, v);
    snprintf(order, olen, "%s", nl + 1);
    free(v);
}

/* The stream's Service (streamsvc.h): status.stream.service names it; it has no selector, and its
 * EndpointSlice holds the leader's address ADDR (what status.stream.address says) under port name
 * "control", both owned by the Pipeline. (The private cluster has no kube-proxy or DNS: the ranks
 * below connect to ADDR; the Service is checked as objects.) On a host with loopback alone
 * there is no Service (an EndpointSlice refuses 127.0.0.1) and the controller says so. */
static void check_service(const char *addr)
{
    char *svc = jp("{.status.stream.service}");
    if (host_ip[0] == '\0') { /* loopback only: no Service, said in the log, the stream serves */
        cr_expect_str_eq(svc, "", "a Service for a loopback address");
        char *n = sb_test_sh_out(
            "grep -c 'stream Service not made.*loopback' %s/controller.log || true", dir);
        cr_expect_gt(atoi(n), 0, "the controller logs why there is no Service");
        free(n);
        free(svc);
        return;
    }
    cr_expect_str_eq(svc, "sb-stream-train.default.svc:7070", "controller log:\n%s",
                     sb_test_sh_out("grep -i stream %s/controller.log | tail -5", dir));
    free(svc);
    char *got = kubectl("get service sb-stream-train -o jsonpath='{.spec.ports[0].name} "
                        "{.spec.ports[0].port} {.spec.selector} "
                        "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}'");
    cr_expect_str_eq(got, "control 7070  Pipeline/train");
    free(got);
    got = kubectl("get endpointslice sb-stream-train -o jsonpath='{.endpoints[0].addresses[0]}:"
                  "{.ports[0].port} {.ports[0].name} {.metadata.labels.kubernetes\\.io/"
                  "service-name} {.metadata.ownerReferences[0].kind}'");
    char want[400];
    snprintf(want, sizeof want, "%s control sb-stream-train Pipeline", addr);
    cr_expect_str_eq(got, want);
    free(got);
}

Test(operator_stream, two_ranks_read_two_epochs_from_the_address_in_the_status)
{
    FILE *f = itest_create("train.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: train}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 16Ki}\n"
            "  stages:\n  - {name: keep, op: identity, workers: {min: 1, max: 2}}\n"
            "  sink: {uri: 'stream://', format: jsonl, args: {epochs: 2, seed: 9}}\n"
            "  execution: {memoryBudget: 1Mi}\n",
            dir);
    fclose(f);
    char *out = kubectl("apply -f %s/train.yaml", dir);
    cr_assert(strstr(out, "created") != NULL, "the CRD admits a stream:// sink: %s", out);
    free(out);
    char *addr = NULL;
    for (int i = 0; i < 120; i++) {
        free(addr);
        addr = jp("{.status.stream.address}");
        if (strchr(addr, ':') != NULL && strstr(addr, "rror") == NULL)
            break;
        usleep(500 * 1000);
    }
    char *ph = jp("{.status.phase}");
    cr_assert(strchr(addr, ':') != NULL, "no status.stream.address (phase %s, message %s): %s", ph,
              jp("{.status.message}"), addr);
    cr_expect_str_eq(ph, "Running");
    free(ph);
    char *secret = jp("{.status.stream.tokenSecret}");
    char *label = jp("{.status.stream.consumerLabel}");
    char *epochs = jp("{.status.stream.epochs}");
    cr_expect(strncmp(secret, "sb-auth-", 8) == 0, "tokenSecret: %s", secret);
    cr_expect_str_eq(label, "streambatch.dev/stream-consumer=train");
    cr_expect_str_eq(epochs, "2");
    check_service(addr);
    /* the token as a trainer pod gets it: key "token" of that Secret */
    free(kubectl("get secret %s -o jsonpath='{.data.token}' | base64 -d > %s/token", secret, dir));
    /* a memory budget of 1Mi against 280 KiB of input a rank reads over time: the ranks start
     * once the Pipeline runs, and read while it makes partitions */
    char *rc = sb_test_sh_out(
        "cd %s && export PYTHONPATH=%s/sdk/python STREAMBATCH_CONSUMER_LIB=%s/lib/"
        "libstreambatch_consumer.so; for r in 0 1; do timeout 200 python3 "
        "%s/tests/stream/consume.py %s token $r 2 2 64 0 0 - rows rank-$r.json > rank-$r.log "
        "2>&1 & p=\"$p $!\"; done; c=; for x in $p; do wait $x; c=\"$c$?\"; done; echo $c",
        dir, sb_test_root(), build_dir(), sb_test_root(), addr);
    cr_assert_str_eq(rc, "00", "ranks' exit codes: %s; rank 0: %s; rank 1: %s", rc,
                     sb_test_sh_out("tail -5 %s/rank-0.log", dir),
                     sb_test_sh_out("tail -5 %s/rank-1.log", dir));
    free(rc);
    /* seed 9 (sink.args): each epoch reads the files in an order of its own (without it both
     * read f00 to f07 in turn: measured) */
    char o0[256], o1[256];
    check_epoch("rank", 0, o0, sizeof o0);
    check_epoch("rank", 1, o1, sizeof o1);
    cr_expect_str_neq(o0, "[0, 1, 2, 3, 4, 5, 6, 7]", "epoch 0 read the files in plan order");
    cr_expect_str_neq(o0, o1, "seed 9: epoch 1 reads the files in the order of epoch 0: %s", o0);
    /* every rank ended every epoch: the run ends, Succeeded, and its pods go */
    ph = NULL;
    for (int i = 0; i < 120; i++) {
        free(ph);
        ph = jp("{.status.phase}");
        if (strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0)
            break;
        usleep(500 * 1000);
    }
    cr_assert_str_eq(ph, "Succeeded", "phase %s (%s); controller log:\n%s", ph,
                     jp("{.status.message}"), sb_test_sh_out("tail -30 %s/controller.log", dir));
    free(ph);
    /* the progress cell of a served stream: every split (it showed 0/N, a stream committing
     * nothing to a sink) */
    char *prog = jp("{.status.progress}");
    char *parts = jp("{.status.partitions.committed}/{.status.partitions.total}");
    const char *slash = strchr(parts, '/');
    cr_expect(slash != NULL && atol(slash + 1) > 0 && atol(parts) == atol(slash + 1),
              "a Succeeded stream's partitions committed/total: %s", parts);
    cr_expect_str_eq(prog, parts, "the progress cell");
    free(prog);
    free(parts);
    /* how far the consumers came: both epochs ended by both ranks, none after them */
    char *far = jp("{.status.stream.epochsEnded} {.status.stream.rowsSent}");
    cr_expect_str_eq(far, "2 0", "status.stream's epochsEnded and rowsSent");
    free(far);
    free(addr);
    free(secret);
    free(label);
    free(epochs);
    free(kubectl("delete pipeline train --timeout=30s"));
}

/* The address in status.stream of Pipeline name once it has one other than `not` (NULL: any). */
static char *wait_address(const char *name, const char * not )
{
    char *addr = NULL;
    for (int i = 0; i < 160; i++) {
        free(addr);
        addr = jpn(name, "{.status.stream.address}");
        if (strchr(addr, ':') != NULL && strstr(addr, "rror") == NULL &&
            (not == NULL || strcmp(addr, not ) != 0))
            return addr;
        usleep(500 * 1000);
    }
    cr_assert_fail("no new status.stream.address for %s (phase %s, message %s): %s", name,
                   jpn(name, "{.status.phase}"), jpn(name, "{.status.message}"), addr);
    return NULL;
}

/* Two ranks read epochs [first, epochs) of the stream at addr (consume.py, 2 ranks, batches of
 * 64, rows), each into OUT-r.json; their exit codes ("00": both read them all). */
static char *read_epochs(const char *addr, int first, int epochs, const char *out)
{
    return sb_test_sh_out(
        "cd %s && export FIRST_EPOCH=%d PYTHONPATH=%s/sdk/python STREAMBATCH_CONSUMER_LIB=%s/lib/"
        "libstreambatch_consumer.so; for r in 0 1; do timeout 100 python3 "
        "%s/tests/stream/consume.py %s token $r 2 %d 64 0 0 9 rows %s-$r.json > %s-$r.log "
        "2>&1 & p=\"$p $!\"; done; c=; for x in $p; do wait $x; c=\"$c$?\"; done; echo $c",
        dir, first, sb_test_root(), build_dir(), sb_test_root(), addr, epochs, out, out);
}

/* The leader dies (SIGKILL) after both ranks ended epoch 0 of 2; a new controller takes the
 * stream over from the status and both ranks read every record of epoch 1 once from it, then the
 * Pipeline succeeds. With lag, the first controller writes its status once a minute, so the status
 * still says no epoch ended when it dies: the new leader serves epoch 0 again, and skips it once
 * both ranks asked for epoch 1. Without, it serves epoch 1 alone, refusing epoch 0 by name.
 * (Before, a new leader served the stream again from epoch 0, and ranks going on with epoch 1
 * waited for rows it never made.) */
static void take_over(const char *name, int lag)
{
    FILE *f = itest_create("relay.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 16Ki}\n"
            "  stages:\n  - {name: keep, op: identity, workers: {min: 1, max: 2}}\n"
            "  sink: {uri: 'stream://', format: jsonl, args: {epochs: 2, seed: 9}}\n"
            "  execution: {memoryBudget: 1Mi}\n",
            name, dir);
    fclose(f);
    char flag[300];
    snprintf(flag, sizeof flag, "--grpc-listen=%s:0", host_ip);
    if (lag) { /* the suite's controller, again with a status written once a minute */
        itest_controller_stop(&ctl_pid);
        ctl_pid =
            itest_controller_start2(host_ip[0] != '\0' ? flag : NULL, "--status-interval=60s");
    }
    free(kubectl("apply -f %s/relay.yaml", dir));
    char *a1 = wait_address(name, NULL);
    char *secret = jpn(name, "{.status.stream.tokenSecret}");
    free(kubectl("get secret %s -o jsonpath='{.data.token}' | base64 -d > %s/token", secret, dir));
    char *rc = read_epochs(a1, 0, 1, "first");
    cr_assert_str_eq(rc, "00", "epoch 0: ranks' exit codes %s; rank 0: %s", rc,
                     sb_test_sh_out("tail -5 %s/first-0.log", dir));
    free(rc);
    char o0[256], o1[256];
    check_epoch("first", 0, o0, sizeof o0);
    const char *want = lag ? "0" : "1";
    char *ended = NULL;
    for (int i = 0; i < 40 && (ended == NULL || strcmp(ended, want) != 0); i++) {
        free(ended);
        usleep(250 * 1000);
        ended = jpn(name, "{.status.stream.epochsEnded}");
    }
    if (lag) /* (absent or 0: the one write was at the start) */
        cr_assert(strcmp(ended, "0") == 0 || strcmp(ended, "") == 0, "a lagging status: %s", ended);
    else
        cr_assert_str_eq(ended, "1", "status.stream.epochsEnded after epoch 0");
    free(ended);
    /* the leader dies; a new one takes over (no leader election here: it starts at once) */
    kill(ctl_pid, SIGKILL);
    waitpid(ctl_pid, NULL, 0);
    free(sb_test_sh_out("mv %s/controller.log %s/controller-1.log", dir, dir));
    ctl_pid = itest_controller_start(host_ip[0] != '\0' ? flag : NULL);
    char *a2 = wait_address(name, a1);
    ended = jpn(name, "{.status.stream.epochsEnded}");
    cr_expect_str_eq(ended, lag ? "0" : "1", "the new leader's status.stream.epochsEnded");
    free(ended);
    char *ev = kubectl("get events --field-selector involvedObject.name=%s,reason=TookOver "
                       "-o jsonpath='{.items[*].message}'",
                       name);
    cr_expect(strstr(ev, lag ? "a stream: no epoch had ended; serving from epoch 0"
                             : "epochs 0 to 0 ended under the leader before; serving from epoch 1"),
              "the TookOver event: %s", ev);
    free(ev);
    if (!lag) { /* epoch 0 again: refused, by name */
        char *log = sb_test_sh_out("grep -c 'stream taken over' %s/controller.log || true", dir);
        cr_expect_gt(atoi(log), 0, "the new leader logs the takeover");
        free(log);
        rc = sb_test_sh_out("cd %s && FIRST_EPOCH=0 PYTHONPATH=%s/sdk/python "
                            "STREAMBATCH_CONSUMER_LIB=%s/lib/libstreambatch_consumer.so timeout 60 "
                            "python3 %s/tests/stream/consume.py %s token 0 2 1 64 0 0 9 rows "
                            "again.json > again.log 2>&1; echo $?; grep -c 'epoch 0 ended before "
                            "this controller took the stream over' again.log",
                            dir, sb_test_root(), build_dir(), sb_test_root(), a2);
        cr_expect(strncmp(rc, "0\n", 2) != 0 && strstr(rc, "\n1") != NULL,
                  "epoch 0 from the new leader: want a failure naming it, got %s: %s", rc,
                  sb_test_sh_out("tail -3 %s/again.log", dir));
        free(rc);
    }
    /* both ranks go on with epoch 1 (with lag: each asks for it, passing epoch 0 over) */
    rc = read_epochs(a2, 1, 2, "second");
    cr_assert_str_eq(rc, "00", "epoch 1: ranks' exit codes %s; rank 0: %s; controller: %s", rc,
                     sb_test_sh_out("tail -5 %s/second-0.log", dir),
                     sb_test_sh_out("tail -20 %s/controller.log", dir));
    free(rc);
    check_epoch("second", 0, o1, sizeof o1);
    cr_expect_str_neq(o0, o1, "seed 9: epoch 1 reads the files in the order of epoch 0: %s", o0);
    char *ph = NULL;
    for (int i = 0; i < 120; i++) {
        free(ph);
        ph = jpn(name, "{.status.phase}");
        if (strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0)
            break;
        usleep(500 * 1000);
    }
    cr_assert_str_eq(ph, "Succeeded", "phase %s (%s); controller log:\n%s", ph,
                     jpn(name, "{.status.message}"),
                     sb_test_sh_out("tail -30 %s/controller.log", dir));
    free(ph);
    ended = jpn(name, "{.status.stream.epochsEnded}");
    cr_expect_str_eq(ended, "2");
    free(ended);
    free(a1);
    free(a2);
    free(secret);
    free(kubectl("delete pipeline %s --timeout=30s", name));
}

Test(operator_stream, a_new_leader_serves_the_epochs_not_ended)
{
    take_over("relay", 0);
}

Test(operator_stream, a_new_leader_skips_the_epoch_a_lagging_status_missed)
{
    take_over("lagged", 1);
}
