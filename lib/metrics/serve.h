/* serve.h — an HTTP endpoint for a metrics registry (libmicrohttpd, one internal thread):
 *   GET /metrics   the registry's text exposition (metrics.h)
 *   GET /healthz   200 "ok" while the process serves (also /livez)
 *   GET /readyz    200 when the ready callback says so (or there is none), else 503
 * Anything else is 404; methods other than GET/HEAD are 405.
 *
 * At most max_connections connections are open at once (SB_METRICS_MAX_CONNECTIONS when 0): a
 * connection past the cap is closed as soon as it is accepted, so idle or slow clients can hold
 * at most that many sockets and never block the serving thread; an idle connection is closed
 * after 10 s.
 *
 * Memory: the server borrows the registry, which must outlive it; stop it with
 * sb_metrics_serve_stop().
 */
#ifndef SB_METRICS_SERVE_H
#define SB_METRICS_SERVE_H

#include "core/err.h"
#include "metrics/metrics.h"

typedef struct sb_metrics_server sb_metrics_server;

/* Open connections at most, by default (docs/metrics.md). */
#define SB_METRICS_MAX_CONNECTIONS 64

typedef struct sb_metrics_serve_config {
    const char *addr; /* "HOST:PORT", ":PORT" (all addresses) or "PORT"; port 0: any free port */
    sb_metrics *metrics;
    int (*ready)(void *ud); /* NULL: always ready */
    const char *not_ready;  /* /readyz body when not ready (default "not ready") */
    void *ud;
    unsigned max_connections; /* open at once at most; 0: SB_METRICS_MAX_CONNECTIONS */
} sb_metrics_serve_config;

/* Starts serving. NULL + err for an address that does not parse or cannot be bound. */
sb_metrics_server *sb_metrics_serve(const sb_metrics_serve_config *cfg, sb_err *err);
/* The bound port (the chosen one when the config said 0). */
int sb_metrics_serve_port(const sb_metrics_server *s);
void sb_metrics_serve_stop(sb_metrics_server *s);

#endif
