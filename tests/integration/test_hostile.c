/* Hostile peers (issue 17): while a real `streambatch run` goes (the controller's Control service
 * in the run process, each worker's Data + Worker services in its worker process), the test
 * talks garbage to those servers over TCP:
 *   - raw garbage bytes, broken HTTP/2 (bad preface, frames on stream 0, an oversized frame, a
 *     broken HPACK block, DATA on a stream never opened);
 *   - well-formed HTTP/2 + gRPC for an unknown method, and messages of 100 MB: through a gRPC
 *     client allowed to send them, through raw HTTP/2 honouring flow control, and blasted raw
 *     ignoring it;
 *   - 2,000 idle connections per server (500 under ASan; half never send the preface, half
 *     stop after it);
 *   - slowloris readers of Data.Fetch streams (an HTTP/2 window of 1 byte that never grows, a
 *     gRPC reader that never asks for a message, a socket that is never read): served, then
 *     cancelled by the worker once they made no flow-control progress for SLOW_STALL_MS.
 * After each attack an honest gRPC client must still get its answer, the processes must be
 * alive, and their RSS (VmRSS, sampled every 5 ms) must stay within the bounds below (not
 * checked under ASan); at the end the run must succeed, with no worker lost and the input as
 * its output. The measured figures are printed. The raw HTTP/2 is written by hand (RFC 9113
 * framing, HPACK literals without Huffman coding). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"
#include "streambatch.pb-c.h"

/* RSS a server may gain over its level before an attack (MiB). Oversized messages: gRPC
 * buffers a message before it checks the receive limit, so what bounds them is the server's
 * memory quota (lib/rpc: max message 16 MiB + 16 MiB = 32 MiB), which gRPC enforces late (it
 * reclaims asynchronously, while a loopback sender goes on at GB/s): measured +20..+96 MiB
 * with the quota, +256..+370 MiB for 4 x 100 MB at once without it. Idle connections:
 * measured 11-16 KiB each. Slow readers pin partitions already in memory: close to nothing.
 * Four at once overlap for as long as the reclaimer lags, so their bound is looser: measured
 * +73 and +197 MiB with the quota (2026-12-02, the second in a cold `make test`, which failed
 * the old bound of 160); 240 still fails a server without the quota. */
#define BIG_MSG_BOUND_MIB 160
#define BIG_MSGS_AT_ONCE_BOUND_MIB 240
#define IDLE_BOUND_MIB 64
#define SLOW_BOUND_MIB 64
#ifndef __SANITIZE_ADDRESS__
#define IDLE_CONNS 2000
#else
/* under ASan a burst of 4,000 handshakes keeps the 2-core machine's controller from answering
 * heartbeats for longer than local mode's 3 s heartbeat timeout */
#define IDLE_CONNS 500
#endif
#define BIG (100u * 1000u * 1000u)
#define SLOW_STALL_MS 8000 /* SB_RPC_STREAM_STALL_MS of the run */

static pid_t run_pid;

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void teardown(void)
{
    if (run_pid > 0) {
        kill(run_pid, SIGTERM);
        for (int i = 0; i < 100 && kill(run_pid, 0) == 0; i++)
            usleep(100000);
        if (kill(run_pid, 0) == 0)
            kill(run_pid, SIGKILL);
        waitpid(run_pid, NULL, 0);
    }
    char *o = sb_test_sh_out("rm -rf %s", dir);
    free(o);
}

static void setup(void)
{
    itest_mkdtemp("sb-hostile");
    setenv("TMPDIR", dir, 1);
    run_pid = 0;
    signal(SIGPIPE, SIG_IGN);
    /* 2 x IDLE_CONNS sockets at once, plus gRPC's own */
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 3 * IDLE_CONNS) {
        rl.rlim_cur = rl.rlim_max < 3 * IDLE_CONNS ? rl.rlim_max : 3 * IDLE_CONNS;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char *out = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json, os\nos.makedirs('in')\n"
        "for f in range(4):\n  with open('in/f%%d.jsonl' %% f, 'w') as o:\n"
        "    for i in range(1500):\n"
        "      o.write(json.dumps({'id': f*100000+i, 'pad': 'x'*(i%%97)}) + '\\\\n')\n\" "
        "&& echo ok",
        dir);
    cr_assert_str_eq(out, "ok", "input: %s", out);
    free(out);
}

TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 300);

/* ------------------------------------------------------------------------- processes */

static long rss_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':')
            v = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    return v;
}

static int alive(pid_t pid)
{
    char path[64], st = '?';
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fscanf(f, "%*d (%*[^)]) %c", &st) != 1)
        st = '?';
    fclose(f);
    return st != 'Z' && st != 'X' && st != '?';
}

/* Samples VmRSS of the watched processes every 5 ms while an attack runs. */
typedef struct watch {
    pid_t pid[2];
    atomic_long peak[2];
    atomic_int stop;
    pthread_t tid;
} watch;

static void *watch_main(void *arg)
{
    watch *w = arg;
    while (!atomic_load(&w->stop)) {
        for (int i = 0; i < 2; i++) {
            long r = rss_kib(w->pid[i], "VmRSS");
            if (r > atomic_load(&w->peak[i]))
                atomic_store(&w->peak[i], r);
        }
        usleep(5000);
    }
    return NULL;
}

static watch W;
static long base[2];

static void watch_start(void)
{
    for (int i = 0; i < 2; i++) {
        base[i] = rss_kib(W.pid[i], "VmRSS");
        atomic_store(&W.peak[i], base[i]);
    }
    atomic_store(&W.stop, 0);
    cr_assert_eq(pthread_create(&W.tid, NULL, watch_main, &W), 0);
}

/* Stops sampling, prints the figures and checks the bound (MiB over the level before). */
static void watch_end(const char *attack, long bound_mib)
{
    atomic_store(&W.stop, 1);
    pthread_join(W.tid, NULL);
    static const char *who[2] = {"controller", "worker"};
    for (int i = 0; i < 2; i++) {
        long peak = atomic_load(&W.peak[i]), now = rss_kib(W.pid[i], "VmRSS");
        printf("hostile: %-34s %-10s RSS before %6.1f MiB, peak %6.1f MiB (+%.1f), after %6.1f "
               "MiB\n",
               attack, who[i], base[i] / 1024.0, peak / 1024.0, (peak - base[i]) / 1024.0,
               now / 1024.0);
        fflush(stdout);
        cr_expect(alive(W.pid[i]), "%s: the %s (pid %d) died", attack, who[i], (int)W.pid[i]);
#ifndef __SANITIZE_ADDRESS__
        cr_expect_lt(peak - base[i], bound_mib * 1024, "%s: %s RSS grew %.1f MiB (bound %ld MiB)",
                     attack, who[i], (peak - base[i]) / 1024.0, bound_mib);
#else
        (void)bound_mib; /* ASan's shadow memory and quarantine: RSS says nothing here */
#endif
    }
}

/* ------------------------------------------------------------------------- honest client */

/* An honest client still gets answers: UNIMPLEMENTED for a method nobody serves, and
 * UNAUTHENTICATED for a real method (it does not hold the run's token: the refusal comes before
 * the request is decoded). */
static void expect_honest(const char *addr, const char *real_method, const char *after)
{
    sb_err err = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, NULL, &err);
    cr_assert_not_null(ch, "%s", err.msg);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    sb_rpc_code code =
        sb_rpc_unary(ch, "/streambatch.v1.Test/NoSuchMethod", "", 0, 10000, 0, &resp, &rlen, &err);
    free(resp);
    cr_expect_eq(code, SB_RPC_UNIMPLEMENTED, "after %s, %s: unknown method: %s %s", after, addr,
                 sb_rpc_code_name(code), err.msg);
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    code = sb_rpc_unary(ch, real_method, junk, sizeof junk, 10000, 0, &resp, &rlen, &err);
    free(resp);
    cr_expect_eq(code, SB_RPC_UNAUTHENTICATED, "after %s, %s %s: %s %s", after, addr, real_method,
                 sb_rpc_code_name(code), err.msg);
    sb_rpc_channel_free(ch);
}

/* ------------------------------------------------------------------------- raw HTTP/2 */

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"; /* 24 bytes */
enum { F_DATA = 0, F_HEADERS = 1, F_RST = 3, F_SETTINGS = 4, F_PING = 6, F_GOAWAY = 7, F_WU = 8 };
enum { END_STREAM = 1, ACK = 1, END_HEADERS = 4 };

static int tcp_connect(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    cr_assert_not_null(colon, "address %s", addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    char host[64];
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    cr_assert_eq(inet_pton(AF_INET, host, &sa.sin_addr), 1, "host %s", host);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Writes everything (blocking); -1 once the peer is gone. */
static int put(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static size_t frame_hdr(uint8_t *o, size_t len, int type, int flags, uint32_t sid)
{
    o[0] = (uint8_t)(len >> 16);
    o[1] = (uint8_t)(len >> 8);
    o[2] = (uint8_t)len;
    o[3] = (uint8_t)type;
    o[4] = (uint8_t)flags;
    o[5] = (uint8_t)(sid >> 24 & 0x7f);
    o[6] = (uint8_t)(sid >> 16);
    o[7] = (uint8_t)(sid >> 8);
    o[8] = (uint8_t)sid;
    return 9;
}

static int put_frame(int fd, int type, int flags, uint32_t sid, const void *p, size_t len)
{
    uint8_t h[9];
    frame_hdr(h, len, type, flags, sid);
    if (put(fd, h, 9) < 0)
        return -1;
    return len ? put(fd, p, len) : 0;
}

/* Preface + a SETTINGS frame (initial stream window `win`, or the default when 0). */
static int h2_open(int fd, uint32_t win)
{
    uint8_t s[6] = {0,           4, (uint8_t)(win >> 24), (uint8_t)(win >> 16), (uint8_t)(win >> 8),
                    (uint8_t)win};
    if (put(fd, PREFACE, 24) < 0)
        return -1;
    return put_frame(fd, F_SETTINGS, 0, 0, s, win ? 6 : 0);
}

/* HPACK literal (without indexing, no Huffman) of a name given by static-table index, or of a
 * new name when idx is 0. Strings under 127 bytes. */
static size_t hpack_lit(uint8_t *o, int idx, const char *name, const char *value)
{
    size_t n = 0;
    if (idx > 0 && idx < 15) {
        o[n++] = (uint8_t)idx;
    } else if (idx >= 15) {
        o[n++] = 0x0f;
        o[n++] = (uint8_t)(idx - 15);
    } else {
        o[n++] = 0;
        o[n++] = (uint8_t)strlen(name);
        memcpy(o + n, name, strlen(name));
        n += strlen(name);
    }
    o[n++] = (uint8_t)strlen(value);
    memcpy(o + n, value, strlen(value));
    return n + strlen(value);
}

/* The run's worker token, once the test read it (see the test): the slow readers and the
 * partition probe act as a worker of the run gone bad, which the token does not stop; every
 * other attack comes from a stranger without one. */
static sb_rpc_creds g_creds;
static int g_have_token;

/* o with the run's token when the test has it. */
static const sb_rpc_opts *with_token(sb_rpc_opts *o)
{
    if (g_have_token)
        o->auth = &g_creds;
    return o;
}

/* The header block of a gRPC request for `path`. */
static size_t grpc_headers(uint8_t *o, const char *path)
{
    size_t n = 0;
    o[n++] = 0x83; /* :method POST */
    o[n++] = 0x86; /* :scheme http */
    n += hpack_lit(o + n, 4, NULL, path);
    n += hpack_lit(o + n, 1, NULL, "localhost");
    n += hpack_lit(o + n, 31, NULL, "application/grpc");
    n += hpack_lit(o + n, 0, "te", "trailers");
    return n;
}

/* grpc_headers with the run's token (an insider's request). */
static size_t grpc_headers_token(uint8_t *o, const char *path)
{
    size_t n = grpc_headers(o, path);
    if (g_have_token) {
        char v[16 + SB_RPC_TOKEN_HEX];
        snprintf(v, sizeof v, "Bearer %s", g_creds.token);
        n += hpack_lit(o + n, 0, "authorization", v);
    }
    return n;
}

/* What the server did with stream `sid` so far. */
typedef struct h2peer {
    int fd;
    int ended;    /* HEADERS with END_STREAM or RST_STREAM on sid */
    int rst;      /* ... the RST_STREAM error code + 1 */
    int goaway;   /* GOAWAY error code + 1 */
    int closed;   /* EOF or connection reset */
    int pong;     /* a PING ACK came */
    long data_in; /* DATA bytes received on sid */
    int64_t conn_win, stream_win, init_win;
    uint32_t sid;
    uint8_t buf[1 << 16];
    size_t have;
} h2peer;

/* Handles the frames in the buffer (acks SETTINGS and PING, counts windows). */
static void h2_parse(h2peer *p)
{
    size_t off = 0;
    while (p->have - off >= 9) {
        uint8_t *f = p->buf + off;
        size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        int type = f[3], flags = f[4];
        uint32_t sid =
            ((uint32_t)f[5] & 0x7f) << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8];
        if (len > sizeof p->buf - 9) { /* not from our settings: treat as broken */
            p->closed = 1;
            p->have = 0;
            return;
        }
        if (p->have - off < 9 + len)
            break;
        uint8_t *pl = f + 9;
        if (type == F_SETTINGS && !(flags & ACK)) {
            for (size_t i = 0; i + 6 <= len; i += 6)
                if (pl[i] == 0 && pl[i + 1] == 4) {
                    int64_t w =
                        (int64_t)pl[i + 2] << 24 | pl[i + 3] << 16 | pl[i + 4] << 8 | pl[i + 5];
                    p->stream_win += w - p->init_win;
                    p->init_win = w;
                }
            put_frame(p->fd, F_SETTINGS, ACK, 0, NULL, 0);
        } else if (type == F_PING && !(flags & ACK) && len == 8) {
            put_frame(p->fd, F_PING, ACK, 0, pl, 8);
        } else if (type == F_PING && (flags & ACK)) {
            p->pong = 1;
        } else if (type == F_WU && len == 4) {
            int64_t inc = ((int64_t)pl[0] & 0x7f) << 24 | pl[1] << 16 | pl[2] << 8 | pl[3];
            if (sid == 0)
                p->conn_win += inc;
            else if (sid == p->sid)
                p->stream_win += inc;
        } else if (type == F_GOAWAY && len >= 8) {
            p->goaway = 1 + (pl[4] << 24 | pl[5] << 16 | pl[6] << 8 | pl[7]);
        } else if (type == F_RST && sid == p->sid && len == 4) {
            p->rst = 1 + (pl[0] << 24 | pl[1] << 16 | pl[2] << 8 | pl[3]);
            p->ended = 1;
        } else if (type == F_HEADERS && sid == p->sid && (flags & END_STREAM)) {
            p->ended = 1;
        } else if (type == F_DATA && sid == p->sid) {
            p->data_in += (long)len;
        }
        off += 9 + len;
    }
    memmove(p->buf, p->buf + off, p->have - off);
    p->have -= off;
}

/* Reads what is there (waiting up to timeout_ms for something) and handles it. */
static void h2_pump(h2peer *p, int timeout_ms)
{
    struct pollfd pf = {.fd = p->fd, .events = POLLIN};
    while (!p->closed && poll(&pf, 1, timeout_ms) > 0) {
        ssize_t r = recv(p->fd, p->buf + p->have, sizeof p->buf - p->have, MSG_DONTWAIT);
        if (r <= 0) {
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                break;
            p->closed = 1;
            break;
        }
        p->have += (size_t)r;
        h2_parse(p);
        timeout_ms = 0;
    }
}

static void h2_init(h2peer *p, int fd, uint32_t sid)
{
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->sid = sid;
    p->conn_win = p->stream_win = p->init_win = 65535;
}

/* Waits until the stream ended or the connection went (or timeout_ms passed). */
static void h2_wait(h2peer *p, int timeout_ms)
{
    for (int t = 0; t < timeout_ms && !p->ended && !p->closed && !p->goaway; t += 50)
        h2_pump(p, 50);
}

/* ------------------------------------------------------------------------- attacks */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint8_t rnd8(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)rng;
}

/* Garbage and broken HTTP/2; each connection must end without hurting the server. */
static void attack_garbage(const char *addr)
{
    static uint8_t junk[64 * 1024];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = rnd8();
    uint8_t hb[512];
    for (int kind = 0; kind < 8; kind++) {
        for (int rep = 0; rep < 5; rep++) {
            int fd = tcp_connect(addr);
            cr_assert_geq(fd, 0, "connect %s: %s", addr, strerror(errno));
            h2peer *p = malloc(sizeof *p);
            h2_init(p, fd, 1);
            switch (kind) {
            case 0: /* no preface at all */
                put(fd, junk, sizeof junk);
                break;
            case 1: /* a preface with one byte wrong */
                put(fd, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\r", 24);
                put(fd, junk, 1000);
                break;
            case 2: /* preface, then random frames */
                h2_open(fd, 0);
                put(fd, junk + rep * 4096, 4096);
                break;
            case 3: { /* a frame claiming 16 MiB - 1 (over SETTINGS_MAX_FRAME_SIZE) */
                h2_open(fd, 0);
                uint8_t h[9];
                frame_hdr(h, 0xffffff, F_DATA, 0, 1);
                put(fd, h, 9);
                put(fd, junk, sizeof junk);
                break;
            }
            case 4: { /* HEADERS with a broken HPACK block (indexes far past the tables) */
                h2_open(fd, 0);
                size_t n = grpc_headers(hb, "/streambatch.v1.Control/Heartbeat");
                hb[n++] = 0xff;
                hb[n++] = 0xff;
                hb[n++] = 0xff;
                hb[n++] = 0x7f;
                put_frame(fd, F_HEADERS, END_HEADERS, 1, hb, n);
                break;
            }
            case 5: /* DATA on stream 0 and on a stream never opened */
                h2_open(fd, 0);
                put_frame(fd, F_DATA, 0, 0, junk, 100);
                put_frame(fd, F_DATA, END_STREAM, 7, junk, 100);
                break;
            case 6: { /* HEADERS without END_HEADERS, then something else (no CONTINUATION) */
                h2_open(fd, 0);
                size_t n = grpc_headers(hb, "/streambatch.v1.Data/Fetch");
                put_frame(fd, F_HEADERS, 0, 1, hb, n / 2);
                put_frame(fd, F_PING, 0, 0, junk, 8);
                break;
            }
            case 7: { /* a gRPC message with a bad compressed flag and a lying length */
                h2_open(fd, 0);
                size_t n = grpc_headers(hb, "/streambatch.v1.Worker/Rebind");
                put_frame(fd, F_HEADERS, END_HEADERS, 1, hb, n);
                uint8_t m[32] = {7, 0, 0, 0, 200};
                put_frame(fd, F_DATA, END_STREAM, 1, m, sizeof m);
                break;
            }
            }
            h2_wait(p, 2000);
            if (!p->closed && !p->goaway && !p->ended) {
                /* the server ignored it (gRPC drops frames for streams it does not know):
                 * then the connection must still work */
                put_frame(fd, F_PING, 0, 0, "hostile!", 8);
                for (int t = 0; t < 40 && !p->pong && !p->closed; t++)
                    h2_pump(p, 50);
            }
            cr_expect(p->closed || p->goaway || p->ended || p->pong,
                      "garbage kind %d to %s: no reaction and no PING answer", kind, addr);
            close(fd);
            free(p);
        }
    }
}

/* A well-formed request for a method nobody serves: the stream ends, the connection stays. */
static void attack_unknown_method(const char *addr)
{
    int fd = tcp_connect(addr);
    cr_assert_geq(fd, 0);
    h2peer *p = malloc(sizeof *p);
    h2_init(p, fd, 1);
    uint8_t hb[256];
    size_t n = grpc_headers(hb, "/streambatch.v1.Control/DropAllTables");
    h2_open(fd, 0);
    put_frame(fd, F_HEADERS, END_HEADERS, 1, hb, n);
    uint8_t m[5] = {0};
    put_frame(fd, F_DATA, END_STREAM, 1, m, 5);
    h2_wait(p, 5000);
    cr_expect(p->ended && !p->closed, "unknown method on %s: ended %d closed %d", addr, p->ended,
              p->closed);
    close(fd);
    free(p);
}

/* 100 MB in one gRPC message to `method`, raw: honouring flow control (`blast` = 0) or not.
 * Returns the bytes the server took before it ended the stream or the connection. */
static long attack_big_raw(const char *addr, const char *method, int blast)
{
    int fd = tcp_connect(addr);
    cr_assert_geq(fd, 0);
    h2peer *p = malloc(sizeof *p);
    h2_init(p, fd, 1);
    uint8_t hb[256];
    size_t n = grpc_headers(hb, method);
    h2_open(fd, 0);
    put_frame(fd, F_HEADERS, END_HEADERS, 1, hb, n);
    static uint8_t chunk[16384 + 5]; /* the first frame starts with the 5-byte prefix */
    chunk[0] = 0;
    chunk[1] = (uint8_t)(BIG >> 24);
    chunk[2] = (uint8_t)(BIG >> 16);
    chunk[3] = (uint8_t)(BIG >> 8);
    chunk[4] = (uint8_t)BIG;
    memset(chunk + 5, 0x0a, sizeof chunk - 5); /* field 1, length 10, ... */
    long sent = 0, total = BIG + 5;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (sent < total && !p->ended && !p->closed && !p->goaway) {
        long room = 16384;
        if (!blast) {
            h2_pump(p, 0);
            int64_t w = p->conn_win < p->stream_win ? p->conn_win : p->stream_win;
            if (w <= 0) {
                h2_pump(p, 50);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                if (t1.tv_sec - t0.tv_sec > 20)
                    break; /* the server stopped granting window: that bounds it too */
                continue;
            }
            if (room > w)
                room = (long)w;
        } else if ((sent & ((1 << 22) - 1)) == 0) {
            h2_pump(p, 0);
        }
        if (room > total - sent)
            room = total - sent;
        if (put_frame(fd, F_DATA, sent + room == total ? END_STREAM : 0, 1,
                      sent == 0 ? chunk : chunk + 5, (size_t)room) < 0) {
            p->closed = 1;
            break;
        }
        sent += room;
        p->conn_win -= room;
        p->stream_win -= room;
    }
    h2_wait(p, 5000);
    printf("hostile: 100 MB %s to %s %s: %.1f MiB written, then %s\n",
           blast ? "blasted" : "with flow control", addr, method, sent / 1048576.0,
           p->ended    ? (p->rst ? "RST_STREAM" : "ended the stream")
           : p->goaway ? "GOAWAY"
           : p->closed ? "closed the connection"
                       : "nothing (window closed)");
    fflush(stdout);
    cr_expect(sent < total || p->ended || p->goaway || p->closed,
              "%s: the server took the whole 100 MB without a word", method);
    close(fd);
    free(p);
    return sent;
}

/* 100 MB through a gRPC client allowed to send that much: refused with RESOURCE_EXHAUSTED. */
static void attack_big_grpc(const char *addr, const char *method)
{
    sb_rpc_opts o = {.max_message_bytes = 128u << 20};
    sb_err err = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, &o, &err);
    cr_assert_not_null(ch, "%s", err.msg);
    uint8_t *big = malloc(BIG);
    cr_assert_not_null(big);
    memset(big, 0, BIG);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    sb_rpc_code code = sb_rpc_unary(ch, method, big, BIG, 30000, 0, &resp, &rlen, &err);
    free(resp);
    free(big);
    printf("hostile: 100 MB gRPC message to %s %s: %s\n", addr, method, sb_rpc_code_name(code));
    fflush(stdout);
    cr_expect_eq(code, SB_RPC_RESOURCE_EXHAUSTED, "%s: %s %s", method, sb_rpc_code_name(code),
                 err.msg);
    sb_rpc_channel_free(ch);
}

typedef struct big_arg {
    const char *addr, *method;
    const uint8_t *msg;
    sb_rpc_code code;
} big_arg;

static void *big_main(void *arg)
{
    big_arg *b = arg;
    sb_rpc_opts o = {.max_message_bytes = 128u << 20};
    sb_err err = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(b->addr, &o, &err);
    b->code = SB_RPC_INTERNAL;
    if (ch) {
        uint8_t *resp = NULL;
        size_t rlen = 0;
        b->code = sb_rpc_unary(ch, b->method, b->msg, BIG, 60000, 0, &resp, &rlen, &err);
        free(resp);
        sb_rpc_channel_free(ch);
    }
    return NULL;
}

/* PAR clients, each on its own connection, send 100 MB to `method` at the same time: what
 * the server buffers for them together must stay bounded (it is not without a memory quota). */
#define PAR 4
static void attack_big_parallel(const char *addr, const char *method)
{
    uint8_t *big = calloc(1, BIG);
    cr_assert_not_null(big);
    big_arg a[PAR];
    pthread_t t[PAR];
    for (int i = 0; i < PAR; i++) {
        a[i] = (big_arg){.addr = addr, .method = method, .msg = big};
        cr_assert_eq(pthread_create(&t[i], NULL, big_main, &a[i]), 0);
    }
    for (int i = 0; i < PAR; i++) {
        pthread_join(t[i], NULL);
        cr_expect(a[i].code == SB_RPC_RESOURCE_EXHAUSTED || a[i].code == SB_RPC_UNAVAILABLE,
                  "%d x 100 MB to %s %s: %s", PAR, addr, method, sb_rpc_code_name(a[i].code));
    }
    printf("hostile: %d x 100 MB gRPC messages at once to %s %s: %s\n", PAR, addr, method,
           sb_rpc_code_name(a[0].code));
    free(big);
}

/* A request just under the receive limit still reaches the handler (the memory quota must not
 * refuse honest large messages): zeros do not decode, so INVALID_ARGUMENT, not
 * RESOURCE_EXHAUSTED. */
static void expect_max_size_ok(const char *addr, const char *method)
{
    size_t n = SB_RPC_DEFAULT_MAX_MESSAGE - 4096;
    uint8_t *m = calloc(1, n), *resp = NULL;
    cr_assert_not_null(m);
    size_t rlen = 0;
    sb_err err = {0};
    sb_rpc_opts o = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, with_token(&o), &err); /* past the token check */
    cr_assert_not_null(ch);
    sb_rpc_code code = sb_rpc_unary(ch, method, m, n, 30000, 0, &resp, &rlen, &err);
    cr_expect_eq(code, SB_RPC_INVALID_ARGUMENT, "%zu bytes to %s %s: %s %s", n, addr, method,
                 sb_rpc_code_name(code), err.msg);
    free(resp);
    free(m);
    sb_rpc_channel_free(ch);
}

/* IDLE_CONNS connections: half never send anything, half stop after the preface + SETTINGS. */
static int *idle_open(const char *addr)
{
    int *fds = calloc(IDLE_CONNS, sizeof *fds);
    cr_assert_not_null(fds);
    for (int i = 0; i < IDLE_CONNS; i++) {
        fds[i] = tcp_connect(addr);
        cr_assert_geq(fds[i], 0, "idle connection %d to %s: %s", i, addr, strerror(errno));
        if (i % 2)
            h2_open(fds[i], 0);
    }
    return fds;
}

/* 1 once the server closed fd (what it sent before is read and dropped). */
static int closed_by_peer(int fd)
{
    static uint8_t sink[65536];
    for (;;) {
        ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return 1;
        if (r < 0)
            return 0;
    }
}

/* Waits (until `limit_s` after `t0`) for the server to close the idle connections; returns
 * the seconds it took for each half (even: never spoke; odd: stopped after the preface), or
 * -1 for a half still open at the limit. */
static void idle_wait_closed(int *fds, const struct timespec *t0, int limit_s, double took[2])
{
    took[0] = took[1] = -1;
    for (;;) {
        int open[2] = {0, 0};
        for (int i = 0; i < IDLE_CONNS; i++)
            if (fds[i] >= 0 && !closed_by_peer(fds[i]))
                open[i % 2]++;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - t0->tv_sec) + (now.tv_nsec - t0->tv_nsec) / 1e9;
        for (int h = 0; h < 2; h++)
            if (!open[h] && took[h] < 0)
                took[h] = el;
        if ((!open[0] && !open[1]) || el > limit_s)
            return;
        usleep(250000);
    }
}

static void idle_close(int *fds)
{
    for (int i = 0; i < IDLE_CONNS; i++)
        close(fds[i]);
    free(fds);
}

static void fetch_req(uint8_t *buf, size_t *n, const char *pid, uint32_t max_chunk)
{
    Streambatch__V1__FetchRequest r = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    r.partition_id = (char *)pid;
    r.max_chunk_bytes = max_chunk;
    r.requester_id = "hostile";
    *n = streambatch__v1__fetch_request__pack(&r, buf);
}

/* A partition the worker at `addr` holds now (its Fetch stream gives a first chunk). */
static int find_partition(const char *addr, char *pid, size_t cap)
{
    sb_err err = {0};
    sb_rpc_opts o = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, with_token(&o), &err);
    cr_assert_not_null(ch);
    int found = 0;
    for (int round = 0; round < 100 && !found; round++) {
        for (int s = 0; s < 3 && !found; s++)
            for (int t = 0; t < 40 && !found; t++) {
                snprintf(pid, cap, "s%d-t%d-p0", s, t);
                uint8_t req[256];
                size_t n;
                fetch_req(req, &n, pid, 1024);
                sb_rpc_reader *r = sb_rpc_stream_open(ch, SB_RPC_DATA_FETCH, req, n, 5000, 0, &err);
                if (!r)
                    continue;
                const sb_rpc_piece *pc;
                size_t np, len;
                found = sb_rpc_reader_next(r, &pc, &np, &len, &err) == 1;
                sb_rpc_reader_close(r);
            }
        if (!found)
            usleep(100000);
    }
    sb_rpc_channel_free(ch);
    return found;
}

/* ------------------------------------------------------------------------- the test */

static pid_t child_with(const char *id)
{
    char *s = sb_test_sh_out("for p in $(cat /proc/[0-9]*/stat 2>/dev/null | "
                             "awk '$4 == %d {print $1}'); do "
                             "tr '\\0' '\\n' </proc/$p/cmdline | grep -qx -- %s && echo $p; "
                             "done | head -1",
                             (int)run_pid, id);
    pid_t p = (pid_t)strtol(s, NULL, 10);
    free(s);
    return p;
}

Test(hostile, servers_survive_hostile_peers_and_the_run_completes)
{
    /* identity on the CPU pool, then a slow GPU stage that fetches every partition over Data:
     * ~5 s per 32 KiB partition keeps the run up while the attacks go on. One CPU worker: with
     * two, the other could run every source task before cpu-0 was ready, and cpu-0 (the one
     * attacked) then held no partition to read slowly (seen once: "no partition found") */
    FILE *f = itest_create("p.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: p}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 32Ki}\n"
            "  stages:\n  - {name: a, op: identity}\n"
            "  - {name: g, op: bench.sleep, args: {msPerMB: 150000}, resources: {gpu: 1}}\n"
            "  sink: {uri: 'file://%s/out/', format: jsonl}\n"
            "  execution: {memoryBudget: 1Mi}\n",
            dir, dir);
    fclose(f);
    /* the servers cancel a stream whose peer reads nothing for SLOW_STALL_MS (default 30 s) */
    char *s = sb_test_sh_out("(cd %s && SB_RPC_STREAM_STALL_MS=%d %s run p.yaml --cpus 1 --gpus 1 "
                             "--run-dir %s/rd "
                             ">run.log 2>&1; echo $? > run.rc) >/dev/null 2>&1 </dev/null & "
                             "echo $!",
                             dir, SLOW_STALL_MS, sb_test_bin("streambatch"), dir);
    pid_t sh_pid = (pid_t)strtol(s, NULL, 10);
    free(s);
    cr_assert_gt(sh_pid, 0);
    for (int i = 0; i < 100 && run_pid <= 0; i++) {
        s = sb_test_sh_out("pgrep -P %d -f 'run p.yaml' | head -1", (int)sh_pid);
        run_pid = (pid_t)strtol(s, NULL, 10);
        free(s);
        if (run_pid <= 0)
            usleep(50000);
    }
    cr_assert_gt(run_pid, 0, "no streambatch run");
    char *waddr = NULL;
    for (int i = 0; i < 300; i++) {
        waddr = sb_test_sh_out("sed -n 's/.*msg=\"worker ready\".* address=\\([^ ]*\\).*/\\1/p' "
                               "%s/rd/cpu-0.log 2>/dev/null | head -1",
                               dir);
        if (waddr[0] != '\0')
            break;
        free(waddr);
        waddr = NULL;
        usleep(100000);
    }
    cr_assert_not_null(waddr, "no worker ready: %s",
                       sb_test_sh_out("cat %s/run.log %s/rd/*.log", dir, dir));
    char *caddr = sb_test_sh_out("tr '\\0' '\\n' </proc/%d/cmdline | grep -A1 -x -- --controller "
                                 "| tail -1",
                                 (int)child_with("cpu-0"));
    cr_assert(caddr[0] != '\0', "controller address not found");
    W.pid[0] = run_pid;
    W.pid[1] = child_with("cpu-0");
    cr_assert_gt(W.pid[1], 0);
    printf("hostile: controller %s (pid %d), worker cpu-0 %s (pid %d)\n", caddr, (int)run_pid,
           waddr, (int)W.pid[1]);
    const char *ctl_method = "/streambatch.v1.Control/Heartbeat";
    const char *wk_methods[] = {"/streambatch.v1.Worker/Rebind", SB_RPC_DATA_FETCH};
    expect_honest(caddr, ctl_method, "nothing");
    expect_honest(waddr, wk_methods[0], "nothing");
    /* the run's worker token, from the worker's environment at exec (it removed the variable
     * from its own environment, not from the block /proc shows to its user): the slow readers
     * below are a worker of the run gone bad */
    char *tok = sb_test_sh_out("tr '\\0' '\\n' </proc/%d/environ | sed -n 's/^%s=//p'",
                               (int)W.pid[1], SB_AUTH_ENV_TOKEN);
    cr_assert_eq(strlen(tok), SB_RPC_TOKEN_HEX, "no token in the worker's environment: '%s'", tok);
    snprintf(g_creds.token, sizeof g_creds.token, "%s", tok);
    g_have_token = 1;
    free(tok);

    /* (d) slowloris readers of a partition (first, while the
     * partitions are there; they stay connected through the other attacks to the end): 1-byte
     * windows that never grow, sockets never read, and gRPC readers that never ask for a message */
    char part[64];
    cr_assert(find_partition(waddr, part, sizeof part), "no partition found on %s", waddr);
    watch_start();
    enum { SLOW = 20 };
    int slow_fd[SLOW];
    sb_err err = {0};
    sb_rpc_opts so = {0};
    sb_rpc_channel *sch = sb_rpc_channel_new(waddr, with_token(&so), &err);
    cr_assert_not_null(sch);
    sb_rpc_reader *slow_r[SLOW];
    for (int i = 0; i < SLOW; i++) {
        uint8_t req[256], hb[256];
        size_t n;
        fetch_req(req + 5, &n, part, i % 2 ? 1 : 0);
        req[0] = 0;
        req[1] = req[2] = 0;
        req[3] = (uint8_t)(n >> 8);
        req[4] = (uint8_t)n;
        slow_fd[i] = tcp_connect(waddr);
        cr_assert_geq(slow_fd[i], 0);
        int small = 4096;
        setsockopt(slow_fd[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        h2_open(slow_fd[i], i % 2 ? 1 : 0); /* odd: 1-byte stream window; even: never read */
        size_t hn = grpc_headers_token(hb, SB_RPC_DATA_FETCH);
        put_frame(slow_fd[i], F_HEADERS, END_HEADERS, 1, hb, hn);
        put_frame(slow_fd[i], F_DATA, END_STREAM, 1, req, n + 5);
        fetch_req(req, &n, part, 0);
        slow_r[i] = sb_rpc_stream_open(sch, SB_RPC_DATA_FETCH, req, n, 0, 0, &err);
        cr_assert_not_null(slow_r[i], "%s", err.msg);
    }
    /* one reader takes its bytes one at a time */
    uint8_t one;
    int got = 0;
    struct timespec slow_t0;
    clock_gettime(CLOCK_MONOTONIC, &slow_t0);
    for (int i = 0; i < 200; i++) {
        if (recv(slow_fd[1], &one, 1, MSG_DONTWAIT) == 1)
            got++;
        usleep(10000);
    }
    printf("hostile: slowloris reader of %s took %d bytes one at a time\n", part, got);
    expect_honest(caddr, ctl_method, "slowloris readers");
    expect_honest(waddr, wk_methods[1], "slowloris readers");
    watch_end("20+20 slowloris Fetch readers", SLOW_BOUND_MIB);
    /* the streams are real: the server has a chunk of the partition waiting for each */
    const sb_rpc_piece *pc;
    size_t np, plen;
    cr_expect_eq(sb_rpc_reader_next(slow_r[0], &pc, &np, &plen, &err), 1, "%s", err.msg);
    cr_expect_gt(got, 9 + 9 + 1, "the 1-byte-window reader got no DATA");

    /* (c) idle connections to both servers at once; held while the other attacks go on */
    watch_start();
    struct timespec idle_t0;
    clock_gettime(CLOCK_MONOTONIC, &idle_t0);
    int *ci = idle_open(caddr), *wi = idle_open(waddr);
    printf("hostile: %d idle connections to each server\n", IDLE_CONNS);
    usleep(500000);
    expect_honest(caddr, ctl_method, "idle connections");
    expect_honest(waddr, wk_methods[0], "idle connections");
    watch_end("idle connections", IDLE_BOUND_MIB);

    /* (a) garbage */
    watch_start();
    attack_garbage(caddr);
    attack_garbage(waddr);
    watch_end("garbage and broken HTTP/2", 32);
    expect_honest(caddr, ctl_method, "garbage");
    expect_honest(waddr, wk_methods[0], "garbage");

    /* (b) an unknown method, and 100 MB messages (each measured on its own) */
    watch_start();
    attack_unknown_method(caddr);
    attack_unknown_method(waddr);
    watch_end("unknown method", 8);
    watch_start();
    attack_big_grpc(caddr, ctl_method);
    attack_big_grpc(waddr, wk_methods[0]);
    watch_end("100 MB via gRPC", BIG_MSG_BOUND_MIB);
    watch_start();
    attack_big_parallel(caddr, ctl_method);
    watch_end("4 x 100 MB via gRPC at once", BIG_MSGS_AT_ONCE_BOUND_MIB);
    watch_start();
    attack_big_raw(caddr, ctl_method, 0);
    attack_big_raw(waddr, wk_methods[0], 0);
    watch_end("100 MB raw, flow control (1)", BIG_MSG_BOUND_MIB);
    watch_start();
    attack_big_raw(waddr, wk_methods[1], 0);
    watch_end("100 MB raw, flow control (2)", BIG_MSG_BOUND_MIB);
    watch_start();
    attack_big_raw(caddr, ctl_method, 1);
    attack_big_raw(waddr, wk_methods[1], 1);
    watch_end("100 MB raw, blasted", BIG_MSG_BOUND_MIB);
    expect_max_size_ok(caddr, ctl_method);
    expect_max_size_ok(waddr, wk_methods[1]); /* Rebind would want the controller token */
    expect_honest(caddr, ctl_method, "100 MB messages");
    expect_honest(waddr, wk_methods[1], "100 MB messages");

    /* (c) the idle connections: closed by the servers while the run goes on (gRPC's handshake
     * deadline for those that never spoke, keepalive for those that answer no pings; both
     * measured at 30 s) */
    double took[2][2];
    idle_wait_closed(ci, &idle_t0, 45, took[0]);
    idle_wait_closed(wi, &idle_t0, 45, took[1]);
    char *rc_now = sb_test_sh_out("cat %s/run.rc 2>/dev/null", dir);
    cr_expect(alive(W.pid[0]) && alive(W.pid[1]) && rc_now[0] == '\0',
              "the run ended before the idle connections could be checked (rc %s)", rc_now);
    free(rc_now);
    for (int k = 0; k < 2; k++) {
        printf("hostile: idle connections to the %s closed by it after %.1f s (no preface) and "
               "%.1f s (preface, no pings answered)\n",
               k ? "worker" : "controller", took[k][0], took[k][1]);
        cr_expect(took[k][0] >= 0, "%s: connections that never spoke still open after 45 s",
                  k ? "worker" : "controller");
        cr_expect(took[k][1] >= 0, "%s: connections that answer no pings still open after 45 s",
                  k ? "worker" : "controller");
    }
    idle_close(ci);
    idle_close(wi);

    /* the slowloris streams did not pin their partition to the end: the worker cancelled each
     * stream stuck behind a 1-byte window after SLOW_STALL_MS without flow-control
     * progress (before, they stayed stuck until keepalive closed their connections, since these
     * raw peers answer no PING; one that does held them to the end). The others need nothing:
     * a partition of this run fits their window (and the never-read sockets' buffers), so those
     * streams ended on the server as soon as everything was accepted. Reader 1 read bytes one at
     * a time (its frames are no longer aligned): readers 3, 5, ... are checked. A gRPC client
     * that never reads answers pings and is cut only by the stall timeout (test_data_rpc.c,
     * a 16 MiB partition). */
    while (ms_since(&slow_t0) < SLOW_STALL_MS + 3000)
        usleep(100000);
    for (int i = 3; i < SLOW; i += 2) {
        static h2peer p;
        memset(&p, 0, sizeof p);
        p.fd = slow_fd[i];
        p.sid = 1;
        for (int k = 0; k < 20 && !p.ended && !p.closed; k++)
            h2_pump(&p, 100);
        /* the cancel sends the status (HEADERS, END_STREAM: trailers are not flow controlled)
         * and RST_STREAM NO_ERROR; without the timeout the streams were still stuck here, and
         * ended only when keepalive closed the connection (RST_STREAM ENHANCE_YOUR_CALM) */
        cr_expect(p.ended && p.rst <= 1 + 0 /* none, or NO_ERROR */,
                  "slowloris reader %d (1-byte window): not cancelled by the stall timeout "
                  "(ended %d, RST_STREAM code %d, %ld DATA bytes)",
                  i, p.ended, p.rst - 1, p.data_in);
    }
    printf("hostile: slowloris Fetch streams cancelled by the worker after %d ms without "
           "progress\n",
           SLOW_STALL_MS);

    /* the run finishes with the slow readers still connected, and gives the input back */
    s = NULL;
    for (int i = 0; i < 1800; i++) {
        free(s);
        s = sb_test_sh_out("cat %s/run.rc 2>/dev/null", dir);
        if (s[0] != '\0')
            break;
        usleep(100000);
    }
    char *log = sb_test_sh_out("tail -20 %s/run.log", dir);
    cr_expect_str_eq(s, "0", "run exit: %s\n%s", s, log);
    cr_expect(strstr(log, "p: Succeeded") != NULL, "%s", log);
    cr_expect(strstr(log, "started, 0 lost; ") != NULL && strstr(log, ", 0 re-run") != NULL,
              "the attacks cost the run workers: %s", log);
    free(log);
    free(s);
    waitpid(sh_pid, NULL, 0);
    run_pid = 0;
    for (int i = 0; i < SLOW; i++) {
        close(slow_fd[i]);
        sb_rpc_reader_close(slow_r[i]);
    }
    sb_rpc_channel_free(sch);
    char *got_d = digest("out/part-*.jsonl"), *want = digest("in/*.jsonl");
    cr_expect_str_eq(got_d, want);
    free(got_d);
    free(want);
    free(caddr);
    free(waddr);
}
