/* bench_data — benchmarks of worker/data and lib/rpc between real processes over loopback.
 * scripts/bench.sh runs it and turns its RESULT lines into docs/benchmarks.md.
 *
 *   bench_data transfer [--size BYTES] [--rounds N] [--no-tune]
 *       A partition of --size bytes (default 64 MiB) fetched with Data.Fetch from a server
 *       process (tests/helpers/sb_data_serve) from memory and from its spill file, and the same
 *       number of bytes sent by a plain TCP sender process (one large write) into a preallocated
 *       buffer, in the same run: rounds interleave the three (order rotating); each round times
 *       one transfer of each over a fresh connection warmed by one untimed transfer, and the
 *       median over the rounds is reported; the ratio to TCP is the median of the per-round
 *       ratios (a round's transfers run back to back, under the same load). With --tls-dir DIR
 *       (tls.crt, tls.key, ca.crt) a second server with mutual TLS joins the rounds
 *       (fetch_memory_tls), and "connect" compares setting up a connection (channel, handshake,
 *       READY) with and without TLS: the worker opens one per fetch from a peer. CPU time of both
 * ends (user+sys, getrusage) is summed over the timed transfers and divided by the bytes moved.
 * Both processes call sb_rpc_tune_malloc(0) unless --no-tune is given (rows then end in
 * _default_malloc). bench_data many [--n N] [--size BYTES] [--rounds N] N (default 1000) concurrent
 * fetches of distinct small partitions (default 4 KiB), one thread each over 4 shared channels,
 * started together; wall time until all are done. bench_data unary [--threads N] [--seconds S]
 * [--rounds N] Control.Heartbeat-shaped unary calls (protobuf request with metrics, checked reply)
 *       from N threads (default 4) over one channel against a trivial handler in the server
 *       process, for S seconds (default 2).
 *
 * Output: "RESULT <name> key=value ..." lines on stdout (progress on stderr). Exit status 1 on
 * any failure. The server is tests/helpers/sb_data_serve from $SB_BUILD_DIR/tests/helpers
 * (default: next to this binary, ../tests/helpers).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "partition/partition.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"
#include "rpc/tlsdir.h"
#include "worker/data/fetch.h"

#define MIB ((size_t)1 << 20)
#define GIB ((double)(1u << 30))

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_data: %s: %s\n", what, msg);
    exit(1);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_self(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ------------------------------------------------------------------------------ server */

typedef struct server {
    pid_t pid;
    FILE *out;
    char addr[64];
} server;

static void server_start(server *s, const char *const *args)
{
    char path[4096];
    const char *dir = getenv("SB_BUILD_DIR");
    if (dir) {
        snprintf(path, sizeof path, "%s/tests/helpers/sb_data_serve", dir);
    } else {
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
            die("readlink", strerror(errno));
        exe[n] = '\0';
        snprintf(path, sizeof path, "%s/../tests/helpers/sb_data_serve", dirname(exe));
    }
    if (access(path, X_OK) != 0)
        die(path, "missing (make bench builds it)");
    const char *argv[32];
    int n = 0;
    argv[n++] = path;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe", strerror(errno));
    s->pid = fork();
    if (s->pid < 0)
        die("fork", strerror(errno));
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        setenv("SB_LOG_LEVEL", "error", 1);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    s->out = fdopen(fds[0], "r");
    char line[512];
    while (fgets(line, sizeof line, s->out)) {
        if (!strncmp(line, "listening ", 10)) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(s->addr, sizeof s->addr, "%s", line + 10);
            return;
        }
    }
    die("server", "did not start");
}

/* The server's CPU seconds so far (its "stats" line after SIGUSR1). */
static double server_cpu(server *s)
{
    kill(s->pid, SIGUSR1);
    char line[1024];
    while (fgets(line, sizeof line, s->out)) {
        const char *c = strstr(line, " cpu=");
        if (!strncmp(line, "stats ", 6) && c)
            return atof(c + 5);
    }
    die("server", "no stats line");
    return 0;
}

static void server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    int st;
    waitpid(s->pid, &st, 0);
    fclose(s->out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("server", "did not exit cleanly");
}

/* ------------------------------------------------------------------------------ plain TCP */

/* The sender process: for each 'S' it writes the whole buffer, for 'C' its CPU seconds (a
 * double), for 'Q' it exits. */
static void tcp_sender(int port, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        _exit(2);
    uint8_t *buf = malloc(len);
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 131);
    for (;;) {
        char cmd;
        if (read(fd, &cmd, 1) != 1 || cmd == 'Q')
            _exit(0);
        if (cmd == 'C') {
            double c = cpu_self();
            if (write(fd, &c, sizeof c) != sizeof c)
                _exit(3);
            continue;
        }
        for (size_t off = 0; off < len;) {
            ssize_t w = write(fd, buf + off, len - off);
            if (w <= 0)
                _exit(4);
            off += (size_t)w;
        }
    }
}

typedef struct tcp {
    pid_t pid;
    int fd;
} tcp;

static void tcp_start(tcp *t, size_t len)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0)
        die("tcp listen", strerror(errno));
    t->pid = fork();
    if (t->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(l);
        tcp_sender(ntohs(a.sin_port), len);
    }
    t->fd = accept(l, NULL, NULL);
    close(l);
    if (t->fd < 0)
        die("tcp accept", strerror(errno));
}

static void tcp_recv(tcp *t, uint8_t *dst, size_t len)
{
    if (write(t->fd, "S", 1) != 1)
        die("tcp", "request");
    for (size_t off = 0; off < len;) {
        ssize_t r = read(t->fd, dst + off, len - off);
        if (r <= 0)
            die("tcp", "short read");
        off += (size_t)r;
    }
}

static double tcp_cpu(tcp *t)
{
    double c;
    if (write(t->fd, "C", 1) != 1 || read(t->fd, &c, sizeof c) != sizeof c)
        die("tcp", "cpu");
    return c;
}

static void tcp_stop(tcp *t)
{
    if (write(t->fd, "Q", 1) != 1)
        die("tcp", "quit");
    close(t->fd);
    waitpid(t->pid, NULL, 0);
}

/* ------------------------------------------------------------------------------ transfer */

enum { M_TCP, M_MEM, M_SPILL, M_MEM_TLS, NMODES };
static const char *const mode_name[NMODES] = {"tcp", "fetch_memory", "fetch_spill",
                                              "fetch_memory_tls"};
static const char *g_tls_dir; /* --tls-dir: the fetch_memory_tls mode and the connect figures */
static sb_rpc_tlsdir g_tls;
static sb_rpc_opts g_tls_opts;

/* One timed transfer of `mode` over a fresh connection warmed by one untimed transfer (a new
 * gRPC connection starts with small HTTP/2 windows, a new TCP connection with small buffers, and
 * the state a connection settles in differs from one to the next: a fresh one per round samples
 * that). Adds the CPU seconds of both ends to the totals. */
static double transfer_once(int mode, server *s, size_t len, uint8_t *dst, sb_data_fetcher *f,
                            double *cpu_client, double *cpu_server)
{
    sb_err err;
    double dt, cc0, sc0;
    if (mode == M_TCP) {
        tcp t;
        tcp_start(&t, len);
        tcp_recv(&t, dst, len);
        sc0 = tcp_cpu(&t);
        cc0 = cpu_self();
        double t0 = now_s();
        tcp_recv(&t, dst, len);
        dt = now_s() - t0;
        *cpu_client += cpu_self() - cc0;
        *cpu_server += tcp_cpu(&t) - sc0;
        tcp_stop(&t);
        return dt;
    }
    const char *id = mode == M_SPILL ? "s1-t1-p0" : "s1-t0-p0";
    sb_rpc_channel *ch = sb_rpc_channel_new(s->addr, mode == M_MEM_TLS ? &g_tls_opts : NULL, &err);
    if (!ch || sb_data_fetcher_run(f, ch, id, len, 0, 60000, &err) != 0)
        die("fetch", err.msg);
    sc0 = server_cpu(s);
    cc0 = cpu_self();
    double t0 = now_s();
    if (sb_data_fetcher_run(f, ch, id, len, 0, 60000, &err) != 0)
        die("fetch", err.msg);
    dt = now_s() - t0;
    *cpu_client += cpu_self() - cc0;
    *cpu_server += server_cpu(s) - sc0;
    sb_rpc_channel_free(ch);
    return dt;
}

static int g_tune = 1;

/* Median milliseconds of setting up a connection (new channel until READY) over n tries. */
static double connect_ms(const char *addr, const sb_rpc_opts *o, int n)
{
    double *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) {
        sb_err err;
        double t0 = now_s();
        sb_rpc_channel *ch = sb_rpc_channel_new(addr, o, &err);
        if (!ch || sb_rpc_channel_wait_ready(ch, 10000, &err) != 0)
            die("connect", err.msg);
        t[i] = (now_s() - t0) * 1e3;
        sb_rpc_channel_free(ch);
    }
    double m = median(t, n);
    free(t);
    return m;
}

static int bench_transfer(size_t size, int rounds)
{
    char spec_mem[64], spec_spill[64];
    snprintf(spec_mem, sizeof spec_mem, "s1-t0-p0:%zu", size);
    snprintf(spec_spill, sizeof spec_spill, "s1-t1-p0:%zu:spill", size);
    const char *args[] = {
        "--part", spec_mem, "--part", spec_spill, g_tune ? NULL : "--no-tune-malloc", NULL};
    server s, stls = {0};
    server_start(&s, args);
    sb_err err;
    int nmodes = g_tls_dir ? NMODES : M_MEM_TLS;
    if (g_tls_dir) {
        if (sb_rpc_tlsdir_load(&g_tls, g_tls_dir, NULL, &err) != 0)
            die("--tls-dir", err.msg);
        sb_rpc_tlsdir_apply(&g_tls, &g_tls_opts);
        const char *targs[] = {"--part", spec_mem, g_tune ? NULL : "--no-tune-malloc", NULL};
        setenv("SB_TLS_DIR", g_tls_dir, 1); /* sb_data_serve's TLS */
        server_start(&stls, targs);
        unsetenv("SB_TLS_DIR");
    }
    sb_rpc_channel *ch = sb_rpc_channel_new(s.addr, NULL, &err);
    sb_data_fetcher *f = sb_data_fetcher_new(NULL, &err);
    if (!ch || !f)
        die("client", err.msg);
    /* The blob's real length (the generator gets close to --size, not exact). */
    if (sb_data_fetcher_run(f, ch, "s1-t0-p0", 0, 0, 60000, &err) != 0)
        die("fetch", err.msg);
    size_t len;
    sb_data_fetcher_view(f, &len);
    sb_rpc_channel_free(ch);
    uint8_t *dst = sb_part_alloc(len);
    memset(dst, 0, len); /* preallocated and touched, like the fetcher's reused buffer */
    double *secs[NMODES], cpu_client[NMODES] = {0}, cpu_server[NMODES] = {0};
    for (int m = 0; m < NMODES; m++)
        secs[m] = calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < nmodes; k++) {
            int m = (k + r) % nmodes; /* rotate the order */
            secs[m][r] = transfer_once(m, m == M_MEM_TLS ? &stls : &s, len, dst, f, &cpu_client[m],
                                       &cpu_server[m]);
        }
        fprintf(stderr, "round %d: tcp %.1f ms, memory %.1f ms, spill %.1f ms", r,
                secs[M_TCP][r] * 1e3, secs[M_MEM][r] * 1e3, secs[M_SPILL][r] * 1e3);
        if (g_tls_dir)
            fprintf(stderr, ", memory with TLS %.1f ms", secs[M_MEM_TLS][r] * 1e3);
        fprintf(stderr, "\n");
    }
    double gib = (double)len / GIB, med[NMODES], ratio[NMODES];
    double *pair = calloc((size_t)rounds, sizeof *pair);
    /* The ratio is the median of the per-round ratios (a round's transfers ran back to back,
     * under the same load); computed before median() sorts the times. */
    for (int m = 0; m < nmodes; m++) {
        for (int r = 0; r < rounds; r++)
            pair[r] = secs[M_TCP][r] / secs[m][r];
        ratio[m] = median(pair, rounds);
    }
    double tls_rel = 0; /* fetch with TLS vs without, per round (back to back), median */
    if (g_tls_dir) {
        for (int r = 0; r < rounds; r++)
            pair[r] = secs[M_MEM][r] / secs[M_MEM_TLS][r];
        tls_rel = median(pair, rounds);
    }
    for (int m = 0; m < nmodes; m++) {
        double best = secs[m][0];
        for (int r = 1; r < rounds; r++)
            best = secs[m][r] < best ? secs[m][r] : best;
        med[m] = median(secs[m], rounds);
        printf("RESULT %s%s bytes=%zu rounds=%d median_s=%.6f gibps=%.3f best_gibps=%.3f "
               "ratio=%.3f server_cpu_s_per_gib=%.3f client_cpu_s_per_gib=%.3f\n",
               mode_name[m], g_tune ? "" : "_default_malloc", len, rounds, med[m], gib / med[m],
               gib / best, ratio[m], cpu_server[m] / (gib * rounds),
               cpu_client[m] / (gib * rounds));
    }
    for (int m = 0; m < NMODES; m++)
        free(secs[m]);
    free(pair);
    if (g_tls_dir) {
        printf("RESULT tls_vs_plain rounds=%d ratio=%.3f\n", rounds, tls_rel);
        int nc = 5 * rounds;
        double plain = connect_ms(s.addr, NULL, nc), tls = connect_ms(stls.addr, &g_tls_opts, nc);
        printf("RESULT connect tries=%d plain_ms=%.3f tls_ms=%.3f\n", nc, plain, tls);
        server_stop(&stls);
    }
    sb_part_free(dst);
    sb_data_fetcher_free(f);
    server_stop(&s);
    return 0;
}

/* ------------------------------------------------------------------------------ many */

typedef struct many_arg {
    sb_rpc_channel *ch;
    char id[64];
    pthread_barrier_t *go;
    int rc;
    char msg[SB_ERR_MAX];
} many_arg;

static void *many_main(void *p)
{
    many_arg *a = p;
    pthread_barrier_wait(a->go);
    void *blob;
    size_t len;
    sb_err err = {0};
    a->rc = sb_data_fetch(a->ch, a->id, 0, 0, 60000, NULL, &blob, &len, NULL, &err);
    snprintf(a->msg, sizeof a->msg, "%s", err.msg);
    sb_part_free(blob);
    return NULL;
}

static int bench_many(int n, size_t size, int rounds)
{
    char spec[64];
    snprintf(spec, sizeof spec, "%d:%zu", n, size);
    const char *args[] = {"--parts", spec, NULL};
    server s;
    server_start(&s, args);
    enum { NCH = 4 };
    sb_rpc_channel *ch[NCH];
    sb_err err;
    for (int i = 0; i < NCH; i++)
        if (!(ch[i] = sb_rpc_channel_new(s.addr, NULL, &err)) ||
            sb_rpc_channel_wait_ready(ch[i], 10000, &err) != 0)
            die("channel", err.msg);
    many_arg *a = calloc((size_t)n, sizeof *a);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    double *secs = calloc((size_t)rounds, sizeof *secs);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    double cpu_c = 0, cpu_s = 0;
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, (unsigned)n + 1);
        for (int i = 0; i < n; i++) {
            a[i] = (many_arg){.ch = ch[i % NCH], .go = &go};
            snprintf(a[i].id, sizeof a[i].id, "s1-t%d-p0", i);
            if (pthread_create(&th[i], &at, many_main, &a[i]) != 0)
                die("pthread_create", strerror(errno));
        }
        double sc0 = server_cpu(&s), cc0 = cpu_self(), t0 = now_s();
        pthread_barrier_wait(&go);
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
        secs[r] = now_s() - t0;
        cpu_c += cpu_self() - cc0;
        cpu_s += server_cpu(&s) - sc0;
        pthread_barrier_destroy(&go);
        for (int i = 0; i < n; i++)
            if (a[i].rc != 0)
                die("fetch", a[i].msg);
        fprintf(stderr, "round %d: %d fetches in %.1f ms\n", r, n, secs[r] * 1e3);
    }
    double med = median(secs, rounds);
    printf("RESULT many n=%d bytes=%zu rounds=%d median_s=%.6f fetches_per_s=%.0f "
           "server_cpu_ms_per_1000=%.1f client_cpu_ms_per_1000=%.1f\n",
           n, size, rounds, med, n / med, cpu_s * 1e3 * 1000 / ((double)n * rounds),
           cpu_c * 1e3 * 1000 / ((double)n * rounds));
    pthread_attr_destroy(&at);
    free(a);
    free(th);
    free(secs);
    for (int i = 0; i < NCH; i++)
        sb_rpc_channel_free(ch[i]);
    server_stop(&s);
    return 0;
}

/* ------------------------------------------------------------------------------ unary */

typedef struct unary_arg {
    sb_rpc_channel *ch;
    double until;
    long calls;
    int failed;
    char msg[SB_ERR_MAX];
} unary_arg;

static void *unary_main(void *p)
{
    unary_arg *a = p;
    Streambatch__V1__WorkerMetrics m = STREAMBATCH__V1__WORKER_METRICS__INIT;
    m.store_memory_bytes = 123456789;
    m.tasks_running = 3;
    m.cpu_seconds = 12.5;
    Streambatch__V1__HeartbeatRequest req = STREAMBATCH__V1__HEARTBEAT_REQUEST__INIT;
    req.worker_id = "worker-0";
    req.metrics = &m;
    char *running[] = {"pipe/s1-t4", "pipe/s2-t9"};
    req.n_running_task_ids = 2;
    req.running_task_ids = running;
    while (now_s() < a->until) {
        ProtobufCMessage *resp = NULL;
        sb_err err;
        sb_rpc_code c =
            sb_rpc_call_msg(a->ch, SB_RPC_CONTROL_HEARTBEAT, &req.base, 5000, 0, &resp, &err);
        if (c != SB_RPC_OK) {
            a->failed = 1;
            snprintf(a->msg, sizeof a->msg, "%s", err.msg);
            return NULL;
        }
        sb_rpc_msg_free(resp);
        a->calls++;
    }
    return NULL;
}

static int bench_unary(int threads, double seconds, int rounds)
{
    const char *args[] = {"--heartbeat", NULL};
    server s;
    server_start(&s, args);
    sb_err err;
    sb_rpc_channel *ch = sb_rpc_channel_new(s.addr, NULL, &err);
    if (!ch || sb_rpc_channel_wait_ready(ch, 10000, &err) != 0)
        die("channel", err.msg);
    double *rate = calloc((size_t)rounds, sizeof *rate);
    unary_arg *a = calloc((size_t)threads, sizeof *a);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    double cpu_c = 0, cpu_s = 0;
    long total = 0;
    for (int r = 0; r < rounds; r++) {
        double sc0 = server_cpu(&s), cc0 = cpu_self(), t0 = now_s();
        for (int i = 0; i < threads; i++) {
            a[i] = (unary_arg){.ch = ch, .until = t0 + seconds};
            pthread_create(&th[i], NULL, unary_main, &a[i]);
        }
        long calls = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            if (a[i].failed)
                die("unary", a[i].msg);
            calls += a[i].calls;
        }
        double dt = now_s() - t0;
        cpu_c += cpu_self() - cc0;
        cpu_s += server_cpu(&s) - sc0;
        rate[r] = (double)calls / dt;
        total += calls;
        fprintf(stderr, "round %d: %ld calls in %.2f s\n", r, calls, dt);
    }
    double med = median(rate, rounds);
    printf("RESULT unary threads=%d seconds=%.1f rounds=%d calls_per_s=%.0f mean_latency_us=%.0f "
           "server_cpu_us_per_call=%.1f client_cpu_us_per_call=%.1f\n",
           threads, seconds, rounds, med, threads * 1e6 / med, cpu_s * 1e6 / (double)total,
           cpu_c * 1e6 / (double)total);
    free(rate);
    free(a);
    free(th);
    sb_rpc_channel_free(ch);
    server_stop(&s);
    return 0;
}

/* ------------------------------------------------------------------------------ main */

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return def;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--no-tune"))
            g_tune = 0;
    g_tls_dir = opt(argc, argv, "--tls-dir", NULL);
    if (g_tune)
        sb_rpc_tune_malloc(0);
    if (argc < 2)
        die("usage", "bench_data transfer|many|unary [options]");
    if (!strcmp(argv[1], "transfer"))
        return bench_transfer(strtoull(opt(argc, argv, "--size", "67108864"), NULL, 10),
                              atoi(opt(argc, argv, "--rounds", "15")));
    if (!strcmp(argv[1], "many"))
        return bench_many(atoi(opt(argc, argv, "--n", "1000")),
                          strtoull(opt(argc, argv, "--size", "4096"), NULL, 10),
                          atoi(opt(argc, argv, "--rounds", "3")));
    if (!strcmp(argv[1], "unary"))
        return bench_unary(atoi(opt(argc, argv, "--threads", "4")),
                           atof(opt(argc, argv, "--seconds", "2")),
                           atoi(opt(argc, argv, "--rounds", "3")));
    die("usage", "bench_data transfer|many|unary [options]");
    return 1;
}
