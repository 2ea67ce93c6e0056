/* The API client's HTTP behaviour against a scripted local server (libmicrohttpd, plain http,
 * no cluster): 429 + Retry-After and 5xx retries with a bound on attempts, no 5xx retry for
 * POST, the per-request timeout, headers (bearer token, merge-patch content type, encoded label
 * selector), Status-message errors, the update callback giving up, and a blocked stream ended
 * by the stop flag. The real API server is exercised in test_k8s_cluster.c. */
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "k8s/client.h"

typedef struct reply {
    int status;
    const char *retry_after;
    const char *body;
    int delay_ms;
} reply;

static struct {
    pthread_mutex_t mu;
    reply script[16];
    int nscript, next;
    int requests;
    char method[16], url[1024], auth[256], ctype[128], body[4096];
    size_t body_n;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct MHD_Daemon *g_d;
static sb_k8s_config *g_cfg;
static sb_k8s_client *g_c;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static ssize_t slow_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls, (void)pos;
    usleep(100 * 1000);
    if (max < 1)
        return 0;
    buf[0] = '\n'; /* a keep-alive blank line */
    return 1;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **state)
{
    (void)cls, (void)version;
    if (*state == NULL) { /* first call: headers only */
        *state = conn;
        pthread_mutex_lock(&g.mu);
        g.body_n = 0;
        pthread_mutex_unlock(&g.mu);
        return MHD_YES;
    }
    if (*upload_size > 0) {
        pthread_mutex_lock(&g.mu);
        size_t n = *upload_size;
        if (g.body_n + n >= sizeof g.body)
            n = sizeof g.body - 1 - g.body_n;
        memcpy(g.body + g.body_n, upload, n);
        g.body_n += n;
        g.body[g.body_n] = '\0';
        pthread_mutex_unlock(&g.mu);
        *upload_size = 0;
        return MHD_YES;
    }
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    const char *sel = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "labelSelector");
    pthread_mutex_lock(&g.mu);
    g.requests++;
    snprintf(g.method, sizeof g.method, "%s", method);
    snprintf(g.url, sizeof g.url, "%s%s%s", url, sel ? " sel=" : "", sel ? sel : "");
    snprintf(g.auth, sizeof g.auth, "%s", auth ? auth : "");
    snprintf(g.ctype, sizeof g.ctype, "%s", ct ? ct : "");
    reply r = {200, NULL, "{}", 0};
    if (g.next < g.nscript)
        r = g.script[g.next++];
    else if (g.nscript > 0)
        r = g.script[g.nscript - 1];
    pthread_mutex_unlock(&g.mu);
    if (r.delay_ms > 0)
        usleep((useconds_t)r.delay_ms * 1000);
    struct MHD_Response *resp;
    if (r.body != NULL && strcmp(r.body, "@stream") == 0)
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64, slow_stream, NULL, NULL);
    else
        resp =
            MHD_create_response_from_buffer(strlen(r.body), (void *)r.body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (r.retry_after != NULL)
        MHD_add_response_header(resp, "Retry-After", r.retry_after);
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)r.status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static void script(int n, const reply *r)
{
    pthread_mutex_lock(&g.mu);
    memcpy(g.script, r, (size_t)n * sizeof *r);
    g.nscript = n;
    g.next = 0;
    g.requests = 0;
    pthread_mutex_unlock(&g.mu);
}

static void setup(void)
{
    g_d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL,
                           NULL, handler, NULL, MHD_OPTION_END);
    cr_assert_not_null(g_d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(g_d, MHD_DAEMON_INFO_BIND_PORT);
    char kc[1024];
    snprintf(kc, sizeof kc,
             "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:%u'}}]\n"
             "users: [{name: u, user: {token: tok-123}}]\n"
             "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
             "current-context: x\n",
             (unsigned)info->port);
    sb_err err = {0};
    g_cfg = sb_k8s_config_parse_kubeconfig(kc, strlen(kc), "mock", NULL, NULL, &err);
    cr_assert_not_null(g_cfg, "%s", err.msg);
    g_c = sb_k8s_client_new(g_cfg, &err);
    cr_assert_not_null(g_c, "%s", err.msg);
    sb_k8s_client_set_retry(g_c, 5, 20);
}

static void teardown(void)
{
    sb_k8s_client_free(g_c);
    sb_k8s_config_free(g_cfg);
    MHD_stop_daemon(g_d);
}

TestSuite(k8s_client, .init = setup, .fini = teardown, .timeout = 30);

Test(k8s_client, retry_after_on_429)
{
    reply r[] = {{429, "1", "{\"kind\":\"Status\",\"code\":429}", 0}, {200, NULL, "{\"a\":1}", 0}};
    script(2, r);
    double t0 = now_s();
    long st = 0;
    sb_err err = {0};
    cJSON *j = sb_k8s_get(g_c, "/api/v1/x", &st, &err);
    double dt = now_s() - t0;
    cr_assert_not_null(j, "%s", err.msg);
    cr_expect_eq(st, 200);
    cr_expect_eq(g.requests, 2);
    cr_expect(dt >= 0.95 && dt < 5, "Retry-After: 1 must be honoured, took %.2f s", dt);
    cJSON_Delete(j);
}

Test(k8s_client, retries_5xx_with_backoff_then_succeeds)
{
    reply r[] = {{503, NULL, "busy", 0}, {500, NULL, "oops", 0}, {200, NULL, "{}", 0}};
    script(3, r);
    long st = 0;
    sb_err err = {0};
    cJSON *j = sb_k8s_get(g_c, "/api/v1/x", &st, &err);
    cr_assert_not_null(j, "%s", err.msg);
    cr_expect_eq(g.requests, 3);
    cJSON_Delete(j);
}

Test(k8s_client, attempts_are_bounded)
{
    reply r[] = {{503, NULL,
                  "{\"kind\":\"Status\",\"reason\":\"ServiceUnavailable\","
                  "\"message\":\"etcd is down\",\"code\":503}",
                  0}};
    script(1, r);
    sb_k8s_client_set_retry(g_c, 3, 10);
    long st = 0;
    sb_err err = {0};
    cr_expect_null(sb_k8s_get(g_c, "/api/v1/x", &st, &err));
    cr_expect_eq(g.requests, 3, "3 attempts, got %d", g.requests);
    cr_expect_eq(st, 503);
    cr_expect_str_eq(err.msg, "GET /api/v1/x: 503 ServiceUnavailable: etcd is down");
}

Test(k8s_client, post_is_not_retried_on_5xx_but_on_429)
{
    reply r[] = {{500, NULL, "<html>bad gateway</html>", 0}};
    script(1, r);
    long st = 0;
    sb_err err = {0};
    cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"x\"}}");
    cr_expect_null(sb_k8s_create(g_c, "/api/v1/namespaces/d/configmaps", o, &st, &err));
    cr_expect_eq(g.requests, 1, "a POST that may have been applied must not be repeated");
    cr_expect_eq(st, 500);
    cr_expect(strstr(err.msg, "HTTP 500: <html>bad gateway</html>") != NULL, "%s", err.msg);
    reply r2[] = {{429, "0", "{}", 0}, {201, NULL, "{\"ok\":true}", 0}};
    script(2, r2);
    cJSON *j = sb_k8s_create(g_c, "/api/v1/namespaces/d/configmaps", o, &st, &err);
    cr_expect_not_null(j, "%s", err.msg);
    cr_expect_eq(g.requests, 2, "429 means not applied: retried");
    cr_expect_str_eq(g.body, "{\"metadata\":{\"name\":\"x\"}}");
    cJSON_Delete(j);
    cJSON_Delete(o);
}

Test(k8s_client, headers_token_content_type_and_selector)
{
    reply r[] = {{200, NULL, "{}", 0}};
    script(1, r);
    long st = 0;
    sb_err err = {0};
    cJSON_Delete(
        sb_k8s_patch(g_c, "/api/v1/namespaces/d/configmaps/a", "{\"data\":{}}", &st, &err));
    cr_expect_eq(st, 200, "%s", err.msg);
    cr_expect_str_eq(g.method, "PATCH");
    cr_expect_str_eq(g.auth, "Bearer tok-123");
    cr_expect_str_eq(g.ctype, "application/merge-patch+json");
    cr_expect_str_eq(g.body, "{\"data\":{}}");
    cJSON_Delete(sb_k8s_list(g_c, "/api/v1/pods", "app in (a,b),tier!=x", &st, &err));
    cr_expect_str_eq(g.method, "GET");
    cr_expect_str_eq(g.url, "/api/v1/pods sel=app in (a,b),tier!=x");
    cr_expect_eq(sb_k8s_delete(g_c, "/api/v1/pods/p", &st, &err), 0, "%s", err.msg);
    cr_expect_str_eq(g.method, "DELETE");
    cJSON *o = cJSON_Parse("{\"k\":1}");
    cJSON_Delete(sb_k8s_update(g_c, "/api/v1/pods/p", o, &st, &err));
    cr_expect_str_eq(g.method, "PUT");
    cr_expect_str_eq(g.ctype, "application/json");
    cr_expect_str_eq(g.body, "{\"k\":1}");
    cJSON_Delete(o);
    /* A non-JSON 200 answer is an error, not a crash. */
    reply r2[] = {{200, NULL, "not json", 0}};
    script(1, r2);
    cr_expect_null(sb_k8s_get(g_c, "/x", &st, &err));
    cr_expect(strstr(err.msg, "not JSON") != NULL, "%s", err.msg);
}

Test(k8s_client, every_request_has_a_timeout)
{
    reply r[] = {{200, NULL, "{}", 3000}};
    script(1, r);
    sb_k8s_client_set_retry(g_c, 1, 10);
    long st = 7;
    char *body = NULL;
    sb_err err = {0};
    double t0 = now_s();
    int rc = sb_k8s_request(g_c, "GET", "/slow", NULL, NULL, 300, &st, &body, &err);
    double dt = now_s() - t0;
    cr_expect_eq(rc, -1);
    cr_expect_eq(st, 0);
    cr_expect_null(body);
    cr_expect(dt < 2.0, "timeout 300 ms took %.2f s", dt);
    cr_expect(strstr(err.msg, "GET /slow") && strstr(err.msg, "imeout"), "%s", err.msg);
}

static int give_up(cJSON *latest, void *arg, sb_err *err)
{
    (void)latest;
    ++*(int *)arg;
    return sb_err_set(err, "the change no longer applies");
}

Test(k8s_client, update_conflict_callback_can_give_up)
{
    reply r[] = {
        {409, NULL, "{\"kind\":\"Status\",\"reason\":\"Conflict\",\"message\":\"stale\"}", 0},
        {200, NULL, "{\"metadata\":{\"name\":\"p\"}}", 0}};
    script(2, r);
    int calls = 0;
    long st = 0;
    sb_err err = {0};
    cJSON *o = cJSON_Parse("{}");
    cr_expect_null(sb_k8s_update_status(g_c, "/apis/g/v1/namespaces/d/things/p", o, give_up, &calls,
                                        &st, &err));
    cr_expect_eq(calls, 1);
    cr_expect_eq(g.requests, 2, "PUT /status, then GET of the object");
    cr_expect(strstr(err.msg, "re-applying after a conflict on /apis/g/v1/namespaces/d/things/p/"
                              "status: the change no longer applies") != NULL,
              "%s", err.msg);
    cJSON_Delete(o);
}

static int count_chunks(const char *d, size_t n, void *arg)
{
    (void)d;
    *(size_t *)arg += n;
    return 0;
}

static void *set_stop(void *arg)
{
    usleep(300 * 1000);
    atomic_store((atomic_int *)arg, 1);
    return NULL;
}

Test(k8s_client, stop_flag_ends_a_blocked_stream)
{
    reply r[] = {{200, NULL, "@stream", 0}};
    script(1, r);
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_t t;
    pthread_create(&t, NULL, set_stop, &stop);
    size_t got = 0;
    long st = 0;
    char *eb = NULL;
    sb_err err = {0};
    double t0 = now_s();
    int rc = sb_k8s_stream(g_c, "/watch", 0, count_chunks, &got, &stop, &st, &eb, &err);
    double dt = now_s() - t0;
    pthread_join(t, NULL);
    cr_expect_eq(rc, 0, "%s", err.msg);
    cr_expect_eq(st, 200);
    cr_expect(dt >= 0.25 && dt < 2.5, "stop took effect after %.2f s", dt);
    cr_expect(got >= 1, "chunks must be passed on as they arrive");
    free(eb);
    /* A non-200 answer is collected, not streamed. */
    reply r2[] = {{410, NULL, "{\"kind\":\"Status\",\"code\":410}", 0}};
    script(1, r2);
    got = 0;
    atomic_store(&stop, 0);
    rc = sb_k8s_stream(g_c, "/watch", 5000, count_chunks, &got, &stop, &st, &eb, &err);
    cr_expect_eq(rc, 0);
    cr_expect_eq(st, 410);
    cr_expect_eq(got, 0);
    cr_expect_str_eq(eb, "{\"kind\":\"Status\",\"code\":410}");
    free(eb);
}

static int reapply_ok(cJSON *latest, void *arg, sb_err *err)
{
    (void)latest, (void)err;
    ++*(int *)arg;
    return 0;
}

Test(k8s_client, update_conflict_retries_are_bounded)
{
    /* Every PUT conflicts, every GET succeeds: PUT, (GET, PUT) x 2 with max 3 attempts. */
    reply r[] = {
        {409, NULL, "{\"kind\":\"Status\",\"reason\":\"Conflict\",\"message\":\"stale\"}", 0},
        {200, NULL, "{}", 0},
        {409, NULL, "{\"kind\":\"Status\",\"reason\":\"Conflict\",\"message\":\"stale\"}", 0},
        {200, NULL, "{}", 0},
        {409, NULL, "{\"kind\":\"Status\",\"reason\":\"Conflict\",\"message\":\"stale\"}", 0},
        {200, NULL, "{\"unexpected\":true}", 0}};
    script(6, r);
    int calls = 0;
    long st = 0;
    sb_err err = {0};
    cJSON *o = cJSON_Parse("{}");
    cr_expect_null(
        sb_k8s_update_retry(g_c, "/api/v1/x", NULL, o, reapply_ok, &calls, 3, &st, &err));
    cr_expect_eq(calls, 2);
    cr_expect_eq(g.requests, 5);
    cr_expect_eq(st, 409);
    cr_expect_str_eq(err.msg,
                     "still conflicting after 3 attempts: PUT /api/v1/x: 409 Conflict: stale");
    cJSON_Delete(o);
}

/* A list or get answer keeps integers past 2^53 exactly (the informer's relist goes this way). */
Test(k8s_client, integers_past_2_53_keep_their_text)
{
    reply r[] = {{200, NULL, "{\"items\":[{\"spec\":{\"v\":4611686018427387905}}]}", 0}};
    script(1, r);
    long st = 0;
    sb_err err = {0};
    cJSON *j = sb_k8s_get(g_c, "/api/v1/x", &st, &err);
    cr_assert_not_null(j, "%s", err.msg);
    char *txt = cJSON_PrintUnformatted(j);
    cr_expect_str_eq(txt, "{\"items\":[{\"spec\":{\"v\":4611686018427387905}}]}");
    free(txt);
    cJSON_Delete(j);
}
