#include "controller/operator/operator_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sb_opr_phase_names[SB_OPR_NPHASES] = {"Pending", "Running",   "Succeeded",
                                                        "Failed",  "Suspended", ""};

static const double k_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define NBUCKETS (sizeof k_buckets / sizeof *k_buckets)

static const char *const k_results[] = {"success", "error", "requeue"};
#define NRESULTS 3

struct sb_opr_metrics {
    pthread_mutex_t mu;
    uint64_t adds;
    uint64_t results[NRESULTS];
    uint64_t buckets[NBUCKETS]; /* not cumulative here; summed when rendered */
    uint64_t count;
    double sum;
};

sb_opr_metrics *sb_opr_metrics_new(void)
{
    sb_opr_metrics *m = calloc(1, sizeof *m);
    if (m != NULL)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void sb_opr_metrics_free(sb_opr_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void sb_opr_metrics_queue_add(sb_opr_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->adds++;
    pthread_mutex_unlock(&m->mu);
}

void sb_opr_metrics_reconcile(sb_opr_metrics *m, const char *result, double seconds)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < NRESULTS; i++)
        if (strcmp(result, k_results[i]) == 0)
            m->results[i]++;
    size_t b = 0;
    while (b < NBUCKETS && seconds > k_buckets[b])
        b++;
    if (b < NBUCKETS)
        m->buckets[b]++;
    m->count++;
    m->sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} strbuf;

__attribute__((format(printf, 2, 3))) static void sbf(strbuf *s, const char *fmt, ...)
{
    if (s->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            s->oom = 1;
            return;
        }
        if ((size_t)n < s->cap - s->len) {
            s->len += (size_t)n;
            return;
        }
        size_t nc = s->cap * 2 + (size_t)n;
        char *nb = realloc(s->buf, nc);
        if (nb == NULL) {
            s->oom = 1;
            return;
        }
        s->buf = nb;
        s->cap = nc;
    }
}

char *sb_opr_metrics_render(sb_opr_metrics *m, const sb_opr_gauges *g)
{
    strbuf s = {.cap = 4096};
    s.buf = malloc(s.cap);
    if (s.buf == NULL)
        return NULL;
    s.buf[0] = '\0';
    pthread_mutex_lock(&m->mu);
    sbf(&s,
        "# HELP workqueue_depth Current depth of the workqueue.\n"
        "# TYPE workqueue_depth gauge\n"
        "workqueue_depth{name=\"pipeline\"} %zu\n",
        g->queue_depth);
    sbf(&s,
        "# HELP workqueue_adds_total Total number of adds handled by the workqueue.\n"
        "# TYPE workqueue_adds_total counter\n"
        "workqueue_adds_total{name=\"pipeline\"} %llu\n",
        (unsigned long long)m->adds);
    sbf(&s, "# HELP controller_runtime_reconcile_total Total number of reconciliations per "
            "controller.\n"
            "# TYPE controller_runtime_reconcile_total counter\n");
    for (size_t i = 0; i < NRESULTS; i++)
        sbf(&s, "controller_runtime_reconcile_total{controller=\"pipeline\",result=\"%s\"} %llu\n",
            k_results[i], (unsigned long long)m->results[i]);
    sbf(&s, "# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation "
            "per controller.\n"
            "# TYPE controller_runtime_reconcile_time_seconds histogram\n");
    uint64_t cum = 0;
    for (size_t b = 0; b < NBUCKETS; b++) {
        cum += m->buckets[b];
        sbf(&s,
            "controller_runtime_reconcile_time_seconds_bucket{controller=\"pipeline\",le=\"%g\"} "
            "%llu\n",
            k_buckets[b], (unsigned long long)cum);
    }
    sbf(&s,
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"pipeline\",le=\"+Inf\"} "
        "%llu\n"
        "controller_runtime_reconcile_time_seconds_sum{controller=\"pipeline\"} %.6f\n"
        "controller_runtime_reconcile_time_seconds_count{controller=\"pipeline\"} %llu\n",
        (unsigned long long)m->count, m->sum, (unsigned long long)m->count);
    pthread_mutex_unlock(&m->mu);
    sbf(&s, "# HELP streambatch_pipelines Pipelines by status.phase (\"\" before the first "
            "status).\n"
            "# TYPE streambatch_pipelines gauge\n");
    for (size_t i = 0; i < SB_OPR_NPHASES; i++)
        sbf(&s, "streambatch_pipelines{phase=\"%s\"} %zu\n", sb_opr_phase_names[i],
            g->pipelines[i]);
    sbf(&s,
        "# HELP streambatch_leader 1 when this controller holds the leader lease.\n"
        "# TYPE streambatch_leader gauge\n"
        "streambatch_leader %d\n",
        g->leader ? 1 : 0);
    if (s.oom) {
        free(s.buf);
        return NULL;
    }
    return s.buf;
}

/* ---- HTTP ---- */

struct sb_opr_http {
    struct MHD_Daemon *d;
    sb_opr_http_config cfg;
    int port;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, char *body, int own,
                             const char *ctype)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, own ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (own)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    sb_opr_http *h = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, 405, "method not allowed\n", 0, "text/plain");
    sb_opr_gauges g;
    memset(&g, 0, sizeof g);
    if (h->cfg.gauges != NULL)
        h->cfg.gauges(h->cfg.ud, &g);
    if (strcmp(url, "/healthz") == 0 || strcmp(url, "/livez") == 0)
        return reply(conn, 200, "ok\n", 0, "text/plain");
    if (strcmp(url, "/readyz") == 0)
        return g.ready ? reply(conn, 200, "ok\n", 0, "text/plain")
                       : reply(conn, 503, "informers not synced\n", 0, "text/plain");
    if (strcmp(url, "/metrics") == 0) {
        char *body = sb_opr_metrics_render(h->cfg.metrics, &g);
        if (body == NULL)
            return reply(conn, 500, "out of memory\n", 0, "text/plain");
        return reply(conn, 200, body, 1, "text/plain; version=0.0.4");
    }
    return reply(conn, 404, "not found (try /metrics, /healthz, /readyz)\n", 0, "text/plain");
}

sb_opr_http *sb_opr_http_start(const sb_opr_http_config *cfg, sb_err *err)
{
    sb_opr_http *h = calloc(1, sizeof *h);
    if (h == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    h->cfg = *cfg;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(cfg->port);
    const char *host = cfg->host != NULL && *cfg->host ? cfg->host : "0.0.0.0";
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        sb_err_set(err, "metrics listen address %s: not an IPv4 address", host);
        free(h);
        return NULL;
    }
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            handle, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (h->d == NULL) {
        sb_err_set(err, "cannot listen on %s:%u for metrics (address in use?)", host,
                   (unsigned)cfg->port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di != NULL ? (int)di->port : (int)cfg->port;
    return h;
}

int sb_opr_http_port(const sb_opr_http *h)
{
    return h->port;
}

void sb_opr_http_stop(sb_opr_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
