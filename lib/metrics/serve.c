/* serve.c — the HTTP endpoint of a metrics registry (see serve.h): /metrics, /healthz (and
 * /livez) and /readyz on libmicrohttpd's internal thread. Owns the daemon; the registry and the
 * readiness callback are the caller's. The connection cap is an accept policy over a count kept
 * by the connection notifications (both on the daemon's one thread), not MHD's own limit, which
 * stops accepting at the cap and leaves the excess waiting in the listen backlog. */

#include "metrics/serve.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sb_metrics_server {
    struct MHD_Daemon *d;
    sb_metrics_serve_config cfg;
    int port;
    atomic_uint open; /* connections accepted and not yet closed */
};

/* Refuses (closes) a connection while max_connections are open. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t len)
{
    (void)addr;
    (void)len;
    sb_metrics_server *s = cls;
    return atomic_load(&s->open) < s->cfg.max_connections ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)conn;
    (void)socket_ctx;
    sb_metrics_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&s->open, 1);
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED)
        atomic_fetch_sub(&s->open, 1);
}

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
    sb_metrics_server *s = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, 405, "method not allowed\n", 0, "text/plain");
    if (strcmp(url, "/healthz") == 0 || strcmp(url, "/livez") == 0)
        return reply(conn, 200, "ok\n", 0, "text/plain");
    if (strcmp(url, "/readyz") == 0) {
        if (s->cfg.ready == NULL || s->cfg.ready(s->cfg.ud))
            return reply(conn, 200, "ok\n", 0, "text/plain");
        return reply(conn, 503, (char *)(s->cfg.not_ready ? s->cfg.not_ready : "not ready\n"), 0,
                     "text/plain");
    }
    if (strcmp(url, "/metrics") == 0) {
        char *body = sb_metrics_render(s->cfg.metrics);
        if (body == NULL)
            return reply(conn, 500, "out of memory\n", 0, "text/plain");
        return reply(conn, 200, body, 1, "text/plain; version=0.0.4; charset=utf-8");
    }
    return reply(conn, 404, "not found (try /metrics, /healthz, /readyz)\n", 0, "text/plain");
}

/* "HOST:PORT", ":PORT" or "PORT" into sa. */
static int parse_addr(const char *addr, struct sockaddr_in *sa, sb_err *err)
{
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    if (addr == NULL || *addr == '\0')
        return sb_err_set(err, "metrics address: empty (want HOST:PORT)");
    const char *colon = strrchr(addr, ':');
    const char *port = colon ? colon + 1 : addr;
    char host[64] = "0.0.0.0";
    if (colon != NULL && colon != addr) {
        size_t n = (size_t)(colon - addr);
        if (n >= sizeof host)
            return sb_err_set(err, "metrics address \"%.100s\": host too long", addr);
        memcpy(host, addr, n);
        host[n] = '\0';
        if (strcmp(host, "localhost") == 0)
            strcpy(host, "127.0.0.1");
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (*port == '\0' || *end != '\0' || p < 0 || p > 65535)
        return sb_err_set(err, "metrics address \"%.100s\": the port is not a number 0-65535",
                          addr);
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return sb_err_set(err, "metrics address \"%.100s\": \"%s\" is not an IPv4 address", addr,
                          host);
    sa->sin_port = htons((uint16_t)p);
    return 0;
}

sb_metrics_server *sb_metrics_serve(const sb_metrics_serve_config *cfg, sb_err *err)
{
    struct sockaddr_in sa;
    if (parse_addr(cfg->addr, &sa, err) != 0)
        return NULL;
    sb_metrics_server *s = calloc(1, sizeof *s);
    if (s == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    if (s->cfg.max_connections == 0)
        s->cfg.max_connections = SB_METRICS_MAX_CONNECTIONS;
    atomic_init(&s->open, 0);
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, accept_policy,
                            s, handle, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
    if (s->d == NULL) {
        sb_err_set(err, "cannot listen on %s for metrics (address in use?)", cfg->addr);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di != NULL ? (int)di->port : (int)ntohs(sa.sin_port);
    return s;
}

int sb_metrics_serve_port(const sb_metrics_server *s)
{
    return s->port;
}

void sb_metrics_serve_stop(sb_metrics_server *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->d);
    free(s);
}
