/* lib/metrics: the registry's text exposition (exact text, escaping, histogram buckets, stable
 * order), bad registrations, collect callbacks, process metrics, and the HTTP endpoint; every
 * rendered text is checked by `promtool check metrics` (Debian's prometheus package). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "metrics/serve.h"
#include "testutil.h"

/* promtool's verdict on text: "" when it finds nothing, else its complaints. */
static char *promtool(const char *text)
{
    char path[] = "/tmp/sb-metrics-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    size_t n = strlen(text);
    if (n > 0 && text[n - 1] != '\n') /* sb_test_sh_out drops the last newline */
        cr_assert_eq(write(fd, "\n", 1), 1);
    close(fd);
    char *out = sb_test_sh_out("promtool check metrics < %s 2>&1; echo rc=$?", path);
    unlink(path);
    return out;
}

Test(metrics, render_exact_text_and_promtool_finds_nothing)
{
    sb_metrics *m = sb_metrics_new();
    sb_err e = {0};
    const char *const lab[] = {"pipeline", "stage", NULL};
    sb_metric *c = sb_metrics_add(m, SB_METRIC_COUNTER, "streambatch_test_rows_total",
                                  "Rows seen.\nSecond line \\ here.", lab, NULL, 0, &e);
    cr_assert_not_null(c, "%s", e.msg);
    sb_metric *g =
        sb_metrics_add(m, SB_METRIC_GAUGE, "streambatch_test_queue", "Queued.", NULL, NULL, 0, &e);
    cr_assert_not_null(g, "%s", e.msg);
    const double b[] = {0.1, 1};
    const char *const hl[] = {"stage", NULL};
    sb_metric *h = sb_metrics_add(m, SB_METRIC_HISTOGRAM, "streambatch_test_duration_seconds",
                                  "Durations.", hl, b, 2, &e);
    cr_assert_not_null(h, "%s", e.msg);
    sb_metric_inc(c, (const char *const[]){"p", "zeta"}, 2);
    sb_metric_inc(c, (const char *const[]){"p", "alpha \"q\"\n"}, 1.5);
    sb_metric_inc(c, (const char *const[]){"p", "zeta"}, 3);
    sb_metric_set(g, NULL, 7);
    sb_metric_observe(h, (const char *const[]){"s"}, 0.05);
    sb_metric_observe(h, (const char *const[]){"s"}, 0.5);
    sb_metric_observe(h, (const char *const[]){"s"}, 5);
    char *txt = sb_metrics_render(m);
    cr_assert_not_null(txt);
    const char *want =
        "# HELP streambatch_test_rows_total Rows seen.\\nSecond line \\\\ here.\n"
        "# TYPE streambatch_test_rows_total counter\n"
        "streambatch_test_rows_total{pipeline=\"p\",stage=\"alpha \\\"q\\\"\\n\"} 1.5\n"
        "streambatch_test_rows_total{pipeline=\"p\",stage=\"zeta\"} 5\n"
        "# HELP streambatch_test_queue Queued.\n"
        "# TYPE streambatch_test_queue gauge\n"
        "streambatch_test_queue 7\n"
        "# HELP streambatch_test_duration_seconds Durations.\n"
        "# TYPE streambatch_test_duration_seconds histogram\n"
        "streambatch_test_duration_seconds_bucket{stage=\"s\",le=\"0.1\"} 1\n"
        "streambatch_test_duration_seconds_bucket{stage=\"s\",le=\"1\"} 2\n"
        "streambatch_test_duration_seconds_bucket{stage=\"s\",le=\"+Inf\"} 3\n"
        "streambatch_test_duration_seconds_sum{stage=\"s\"} 5.55\n"
        "streambatch_test_duration_seconds_count{stage=\"s\"} 3\n";
    cr_assert_str_eq(txt, want);
    cr_assert_eq(sb_metric_value(c, (const char *const[]){"p", "zeta"}), 5);
    cr_assert_eq(sb_metric_value(h, (const char *const[]){"s"}), 3);
    char *v = promtool(txt);
    cr_assert_str_eq(v, "rc=0", "promtool: %s", v);
    free(v);
    free(txt);
    sb_metric_clear(c);
    txt = sb_metrics_render(m);
    cr_assert_null(strstr(txt, "zeta"), "clear drops the series");
    cr_assert_not_null(strstr(txt, "# TYPE streambatch_test_rows_total counter"));
    free(txt);
    sb_metrics_free(m);
}

Test(metrics, bad_registrations_are_errors)
{
    sb_metrics *m = sb_metrics_new();
    sb_err e = {0};
    cr_assert_null(sb_metrics_add(m, SB_METRIC_GAUGE, "9lives", "", NULL, NULL, 0, &e));
    cr_assert(strstr(e.msg, "\"9lives\" is not valid") != NULL, "%s", e.msg);
    cr_assert_null(sb_metrics_add(m, SB_METRIC_GAUGE, "x", "", (const char *const[]){"a-b", NULL},
                                  NULL, 0, &e));
    cr_assert(strstr(e.msg, "label name \"a-b\"") != NULL, "%s", e.msg);
    cr_assert_null(sb_metrics_add(m, SB_METRIC_HISTOGRAM, "h", "",
                                  (const char *const[]){"le", NULL}, (const double[]){1}, 1, &e));
    cr_assert_null(sb_metrics_add(m, SB_METRIC_HISTOGRAM, "h", "", NULL, NULL, 0, &e));
    cr_assert(strstr(e.msg, "no buckets") != NULL, "%s", e.msg);
    cr_assert_null(
        sb_metrics_add(m, SB_METRIC_HISTOGRAM, "h", "", NULL, (const double[]){2, 1}, 2, &e));
    cr_assert(strstr(e.msg, "not ascending") != NULL, "%s", e.msg);
    cr_assert_not_null(sb_metrics_add(m, SB_METRIC_GAUGE, "x", "", NULL, NULL, 0, &e));
    cr_assert_null(sb_metrics_add(m, SB_METRIC_COUNTER, "x", "", NULL, NULL, 0, &e));
    cr_assert(strstr(e.msg, "registered twice") != NULL, "%s", e.msg);
    sb_metrics_free(m);
}

static void collect(void *ud, sb_metrics *m)
{
    (void)m;
    sb_metric *g = ud;
    sb_metric_set(g, NULL, sb_metric_value(g, NULL) + 1);
}

Test(metrics, collect_callbacks_and_process_metrics_over_http)
{
    sb_metrics *m = sb_metrics_new();
    sb_err e = {0};
    sb_metric *g = sb_metrics_add(m, SB_METRIC_GAUGE, "streambatch_test_scrapes", "Renders.", NULL,
                                  NULL, 0, &e);
    cr_assert_eq(sb_metrics_on_collect(m, collect, g, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_metrics_add_process(m, &e), 0, "%s", e.msg);
    sb_metrics_server *s =
        sb_metrics_serve(&(sb_metrics_serve_config){.addr = "127.0.0.1:0", .metrics = m}, &e);
    cr_assert_not_null(s, "%s", e.msg);
    int port = sb_metrics_serve_port(s);
    char *a = sb_test_sh_out("curl -fsS http://127.0.0.1:%d/metrics", port);
    char *b = sb_test_sh_out("curl -fsS http://127.0.0.1:%d/metrics", port);
    cr_assert_not_null(strstr(a, "streambatch_test_scrapes 1\n"), "%s", a);
    cr_assert_not_null(strstr(b, "streambatch_test_scrapes 2\n"), "%s", b);
    cr_assert_not_null(strstr(a, "\nprocess_resident_memory_bytes "), "%s", a);
    cr_assert_not_null(strstr(a, "\nprocess_start_time_seconds 1"), "%s", a);
    char *v = promtool(a);
    cr_assert_str_eq(v, "rc=0", "promtool: %s", v);
    char *h = sb_test_sh_out("curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/healthz; "
                             "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/nope",
                             port, port);
    cr_assert_str_eq(h, "200404");
    free(h);
    free(v);
    free(a);
    free(b);
    sb_metrics_serve_stop(s);
    cr_assert_null(
        sb_metrics_serve(&(sb_metrics_serve_config){.addr = "1.2.3:x", .metrics = m}, &e));
    cr_assert(strstr(e.msg, "not a number") != NULL, "%s", e.msg);
    sb_metrics_free(m);
}

/* A TCP connection to 127.0.0.1:port (sends nothing). */
static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Whether the server closed fd (EOF or reset) within ms. */
static int closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1)
        return 0;
    char c;
    return read(fd, &c, 1) <= 0;
}

Test(metrics, connections_past_the_cap_are_closed_and_scrapes_go_on)
{
    sb_metrics *m = sb_metrics_new();
    sb_err e = {0};
    cr_assert_eq(sb_metrics_add_process(m, &e), 0, "%s", e.msg);
    enum { CAP = 4 };
    sb_metrics_server *s = sb_metrics_serve(
        &(sb_metrics_serve_config){.addr = "127.0.0.1:0", .metrics = m, .max_connections = CAP},
        &e);
    cr_assert_not_null(s, "%s", e.msg);
    int port = sb_metrics_serve_port(s);
    int held[CAP];
    for (int i = 0; i < CAP; i++)
        held[i] = dial(port);
    /* the held ones are accepted and stay open (idle: the server waits 10 s for a request) */
    usleep(300 * 1000);
    for (int i = 0; i < CAP; i++)
        cr_assert_not(closed_within(held[i], 0), "held connection %d was closed", i);
    /* past the cap: closed at once, not left waiting in the backlog */
    for (int i = 0; i < 3; i++) {
        int extra = dial(port);
        cr_assert(closed_within(extra, 2000), "connection %d past the cap of %d is still open",
                  CAP + i + 1, CAP);
        close(extra);
    }
    char *refused = sb_test_sh_out(
        "curl -s -o /dev/null -w '%%{http_code}' --max-time 3 http://127.0.0.1:%d/metrics", port);
    cr_assert_str_eq(refused, "000", "a scrape past the cap got HTTP %s", refused);
    free(refused);
    /* one slot freed: a scrape works while the other CAP-1 connections are still held */
    close(held[0]);
    usleep(200 * 1000);
    char *a = sb_test_sh_out("curl -fsS --max-time 3 http://127.0.0.1:%d/metrics", port);
    cr_assert_not_null(strstr(a, "process_resident_memory_bytes "), "%s", a);
    free(a);
    for (int i = 1; i < CAP; i++)
        cr_assert_not(closed_within(held[i], 0), "held connection %d was closed", i);
    for (int i = 1; i < CAP; i++)
        close(held[i]);
    /* all released: the cap counts open connections, so scrapes in a row all work */
    usleep(200 * 1000);
    for (int i = 0; i < 2 * CAP; i++) {
        char *h = sb_test_sh_out(
            "curl -s -o /dev/null -w '%%{http_code}' --max-time 3 http://127.0.0.1:%d/healthz",
            port);
        cr_assert_str_eq(h, "200", "scrape %d after release: %s", i, h);
        free(h);
    }
    sb_metrics_serve_stop(s);
    sb_metrics_free(m);
}

Test(metrics, default_connection_cap_is_64)
{
    sb_metrics *m = sb_metrics_new();
    sb_err e = {0};
    sb_metrics_server *s =
        sb_metrics_serve(&(sb_metrics_serve_config){.addr = "127.0.0.1:0", .metrics = m}, &e);
    cr_assert_not_null(s, "%s", e.msg);
    int port = sb_metrics_serve_port(s);
    int held[SB_METRICS_MAX_CONNECTIONS];
    for (int i = 0; i < SB_METRICS_MAX_CONNECTIONS; i++)
        held[i] = dial(port);
    usleep(300 * 1000);
    for (int i = 0; i < SB_METRICS_MAX_CONNECTIONS; i++)
        cr_assert_not(closed_within(held[i], 0), "connection %d of %d was closed", i + 1,
                      SB_METRICS_MAX_CONNECTIONS);
    int extra = dial(port);
    cr_assert(closed_within(extra, 2000), "connection %d is still open",
              SB_METRICS_MAX_CONNECTIONS + 1);
    close(extra);
    for (int i = 0; i < SB_METRICS_MAX_CONNECTIONS; i++)
        close(held[i]);
    sb_metrics_serve_stop(s);
    sb_metrics_free(m);
}
