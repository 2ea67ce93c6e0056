/* sb_data_serve — a worker's Data service in a process of its own, for tests and benchmarks.
 *
 * It opens a partition store, puts generated partitions in it (real blobs from the batch
 * builder: an int64 column, a fixed-size float32 list column and a utf8 column), some of them
 * spilled through a small budget, serves them with worker/data's server, prints where it listens
 * and runs until SIGTERM/SIGINT. Generation is deterministic (seed, id, size), so a restarted
 * server serves the same bytes.
 *
 *   sb_data_serve [options]
 *     --listen ADDR          host:port (default 127.0.0.1:0)
 *     --part ID:BYTES[:spill] a partition of about BYTES bytes (repeatable)
 *     --parts N:BYTES[:spill] N partitions s<k>-t<i>-p0, i = 0..N-1, for the k-th --parts
 *     --seed N               generator seed (default 1)
 *     --dump DIR             also write each blob as it is served to DIR/<ID>.bin
 *     --lie MODE:ID          damage a partition's header before storing it: "bigger"/"smaller"
 *                            (total length +-4096, not resealed) or "rows" (row count +1000,
 *                            resealed: only the structure check can tell)
 *     --evil MODE:K          serve with a faulty Data.Fetch instead of worker/data: "crc" (chunk K
 *                            has a wrong crc), "payload" (chunk K has a flipped byte, right crc)
 *                            or "short" (the stream ends OK after chunk K)
 *     --heartbeat            also answer Control.Heartbeat (unary benchmarks)
 *     --threads N            gRPC server threads (default 2)
 *     --io-threads N, --spill-buffers N, --chunk BYTES   data server settings
 *     --grace-ms N           shutdown grace on SIGTERM (default 2000)
 *     --spill-dir DIR        where the store spills (default a fresh directory in $TMPDIR or /tmp)
 *     --no-tune-malloc       keep glibc's default malloc thresholds (see sb_rpc_tune_malloc)
 *
 * Environment: SB_TLS_DIR=DIR serves with mutual TLS from DIR/tls.crt, tls.key, ca.crt
 * (rpc/tlsdir.h).
 *
 * Output (stdout, line by line): "part ID LEN mem|spill" per partition, then "listening ADDR".
 * SIGUSR1 prints "stats ..." (data server counters, and cpu=SECONDS: user+sys of the process). On
 * SIGTERM: drains the data server (grace, then 500 ms for readers to take their last chunks), shuts
 * down, prints "exit cancelled=N ..." and exits with status 0. Errors go to stderr with exit
 * status 1.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "partition/chunk.h"
#include "partition/partition.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"
#include "rpc/tlsdir.h"
#include "worker/data/fetch.h"
#include "worker/data/service.h"
#include "worker/store/store.h"

#define MAX_PARTS 4096

typedef struct part {
    char id[64];
    size_t want;
    bool spill;
    void *blob;
    size_t len;
} part;

static part g_parts[MAX_PARTS];
static int g_nparts;

static void die(const char *fmt, const char *a)
{
    fprintf(stderr, "sb_data_serve: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    exit(1);
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A blob of about `want` bytes, the same for the same (seed, id, want). */
static void generate(part *p, uint64_t seed)
{
    uint64_t s = seed;
    for (const char *c = p->id; *c; c++)
        s = s * 131 + (uint8_t)*c;
    s ^= p->want;
    enum { W = 16 };
    sb_field f[3] = {
        {.name = "id", .type = SB_TYPE_INT64},
        {.name = "vec", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = W},
        {.name = "name", .type = SB_TYPE_UTF8}};
    sb_err err;
    sb_batch_builder *b = sb_batch_builder_new(f, 3, &err);
    if (!b)
        die("%s", err.msg);
    size_t rows = p->want / 88; /* 8 + 64 + 12 + 4 bytes a row */
    if (rows == 0)
        rows = 1;
    int64_t *ids = malloc(rows * sizeof *ids);
    float *vec = malloc(rows * W * sizeof *vec);
    char *text = malloc(rows * 24 + 1);
    if (!ids || !vec || !text)
        die("%s", "out of memory");
    size_t tl = 0;
    for (size_t r = 0; r < rows; r++) {
        ids[r] = (int64_t)(mix(&s) >> 1);
        for (int k = 0; k < W; k++)
            vec[r * W + k] = (float)(mix(&s) % 100000) / 1000.0f;
        tl += (size_t)sprintf(text + tl, "row-%08" PRIx64 "\n", mix(&s) & 0xffffffffu);
    }
    size_t used;
    if (sb_batch_builder_append_values(b, 0, ids, rows, NULL, &err) != 0 ||
        sb_batch_builder_append_values(b, 1, vec, rows, NULL, &err) != 0 ||
        sb_batch_builder_append_lines(b, 2, text, tl, false, true, &used, &err) != 0 ||
        sb_batch_builder_finish(b, &p->blob, &p->len, &err) != 0)
        die("%s", err.msg);
    free(ids);
    free(vec);
    free(text);
    sb_batch_builder_free(b);
}

static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void lie(part *p, const char *mode)
{
    uint8_t *h = p->blob;
    if (!strcmp(mode, "bigger")) {
        wr64(h + 8, p->len + 4096);
    } else if (!strcmp(mode, "smaller")) {
        if (p->len <= 4096 + 64)
            die("%s", "--lie smaller needs a partition above 4160 bytes");
        wr64(h + 8, p->len - 4096);
    } else if (!strcmp(mode, "rows")) {
        wr64(h + 16, rd64(h + 16) + 1000);
        sb_err err;
        if (sb_part_seal(p->blob, p->len, &err) != 0)
            die("%s", err.msg);
    } else {
        die("unknown --lie mode %s", mode);
    }
}

/* ------------------------------------------------------------------------------ evil server */

static int g_evil_mode; /* 1 crc, 2 payload, 3 short */
static uint64_t g_evil_k;

typedef struct evil {
    const part *p;
    sb_part_chunk_iter it;
} evil;

static void free_ud(void *ud)
{
    free(ud);
}

static void evil_ready(sb_rpc_call *call, void *ud)
{
    evil *e = ud;
    sb_part_chunk c;
    sb_err err;
    if (!sb_part_chunks_next(&e->it, &c)) {
        sb_rpc_call_finish(call, SB_RPC_OK, NULL);
        free(e);
        return;
    }
    if (g_evil_mode == 3 && c.index > g_evil_k) {
        sb_rpc_call_finish(call, SB_RPC_OK, NULL);
        free(e);
        return;
    }
    const void *data = c.data;
    sb_rpc_unpin_fn unpin = NULL;
    void *copy = NULL;
    if (c.index == g_evil_k && g_evil_mode == 1)
        c.crc ^= 0x1u;
    if (c.index == g_evil_k && g_evil_mode == 2) {
        copy = malloc(c.len);
        memcpy(copy, c.data, c.len);
        ((uint8_t *)copy)[c.len / 2] ^= 0x40;
        data = copy;
        unpin = free_ud;
    }
    if (sb_rpc_stream_write_chunk(call, c.offset, data, c.len, c.crc, e->p->len, unpin, copy,
                                  &err) != 0) {
        sb_rpc_call_finish(call, SB_RPC_CANCELLED, "%s", err.msg);
        free(e);
    }
}

static void evil_fetch(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    Streambatch__V1__FetchRequest *r =
        (void *)sb_rpc_call_decode(call, &streambatch__v1__fetch_request__descriptor, req, len);
    if (!r)
        return;
    const part *p = NULL;
    for (int i = 0; i < g_nparts; i++)
        if (!strcmp(g_parts[i].id, r->partition_id))
            p = &g_parts[i];
    sb_err err;
    evil *e = calloc(1, sizeof *e);
    if (!p) {
        sb_rpc_call_finish(call, SB_RPC_NOT_FOUND, "partition %s not found", r->partition_id);
        free(e);
    } else if (e->p = p, sb_part_chunks_begin(&e->it, p->blob, p->len, r->max_chunk_bytes,
                                              r->offset, &err) != 0) {
        sb_rpc_call_finish(call, SB_RPC_OUT_OF_RANGE, "%s", err.msg);
        free(e);
    } else {
        sb_rpc_stream_set_ready_cb(call, evil_ready, e);
    }
    sb_rpc_msg_free(&r->base);
}

/* ------------------------------------------------------------------------------ heartbeat */

static void on_heartbeat(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    ProtobufCMessage *m =
        sb_rpc_call_decode(call, &streambatch__v1__heartbeat_request__descriptor, req, len);
    if (!m)
        return;
    Streambatch__V1__HeartbeatReply rep = STREAMBATCH__V1__HEARTBEAT_REPLY__INIT;
    sb_err err;
    sb_rpc_call_reply_msg(call, &rep.base, &err);
    sb_rpc_msg_free(m);
}

/* ------------------------------------------------------------------------------ main */

static void add_part(const char *id, size_t want, bool spill)
{
    if (g_nparts == MAX_PARTS)
        die("%s", "too many partitions");
    part *p = &g_parts[g_nparts++];
    snprintf(p->id, sizeof p->id, "%s", id);
    p->want = want;
    p->spill = spill;
}

/* "X:BYTES[:spill]" -> X, bytes, spill. */
static void parse_spec(const char *arg, char *x, size_t xcap, size_t *bytes, bool *spill)
{
    const char *c1 = strchr(arg, ':');
    if (!c1 || (size_t)(c1 - arg) >= xcap)
        die("bad partition spec %s (want X:BYTES[:spill])", arg);
    memcpy(x, arg, (size_t)(c1 - arg));
    x[c1 - arg] = '\0';
    char *end;
    *bytes = strtoull(c1 + 1, &end, 10);
    *spill = false;
    if (*end == ':' && !strcmp(end + 1, "spill"))
        *spill = true;
    else if (*end != '\0')
        die("bad partition spec %s (want X:BYTES[:spill])", arg);
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:0", *dump = NULL, *lie_arg = NULL, *spill_dir = NULL;
    const char *tls_dir = getenv("SB_TLS_DIR");
    uint64_t seed = 1;
    int threads = 2, io_threads = 0, spill_buffers = 0, grace_ms = 2000, heartbeat = 0;
    size_t chunk = 0;
    int stage = 0, tune = 1;
    static const struct option opts[] = {{"listen", 1, 0, 'l'},         {"part", 1, 0, 'p'},
                                         {"parts", 1, 0, 'P'},          {"seed", 1, 0, 's'},
                                         {"dump", 1, 0, 'd'},           {"lie", 1, 0, 'L'},
                                         {"evil", 1, 0, 'e'},           {"heartbeat", 0, 0, 'H'},
                                         {"threads", 1, 0, 't'},        {"io-threads", 1, 0, 'i'},
                                         {"spill-buffers", 1, 0, 'b'},  {"chunk", 1, 0, 'c'},
                                         {"grace-ms", 1, 0, 'g'},       {"spill-dir", 1, 0, 'D'},
                                         {"no-tune-malloc", 0, 0, 'M'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char x[64];
        size_t bytes;
        bool spill;
        switch (c) {
        case 'l':
            listen = optarg;
            break;
        case 'p':
            parse_spec(optarg, x, sizeof x, &bytes, &spill);
            add_part(x, bytes, spill);
            break;
        case 'P': {
            parse_spec(optarg, x, sizeof x, &bytes, &spill);
            int n = atoi(x);
            stage++;
            for (int i = 0; i < n; i++) {
                char id[64];
                snprintf(id, sizeof id, "s%d-t%d-p0", stage, i);
                add_part(id, bytes, spill);
            }
            break;
        }
        case 's':
            seed = strtoull(optarg, NULL, 10);
            break;
        case 'd':
            dump = optarg;
            break;
        case 'L':
            lie_arg = optarg;
            break;
        case 'e':
            if (!strncmp(optarg, "crc:", 4))
                g_evil_mode = 1;
            else if (!strncmp(optarg, "payload:", 8))
                g_evil_mode = 2;
            else if (!strncmp(optarg, "short:", 6))
                g_evil_mode = 3;
            else
                die("unknown --evil mode %s", optarg);
            g_evil_k = strtoull(strchr(optarg, ':') + 1, NULL, 10);
            break;
        case 'H':
            heartbeat = 1;
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'i':
            io_threads = atoi(optarg);
            break;
        case 'b':
            spill_buffers = atoi(optarg);
            break;
        case 'c':
            chunk = strtoull(optarg, NULL, 10);
            break;
        case 'g':
            grace_ms = atoi(optarg);
            break;
        case 'D':
            spill_dir = optarg;
            break;
        case 'M':
            tune = 0;
            break;
        default:
            die("%s", "bad option (see the comment at the top of sb_data_serve.c)");
        }
    }

    if (tune)
        sb_rpc_tune_malloc(0);
    /* Signals are taken synchronously by the main thread; every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    char own_dir[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(own_dir, sizeof own_dir, "%s/sb_data_serve-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!spill_dir) {
        if (!mkdtemp(own_dir))
            die("cannot create a spill directory: %s", strerror(errno));
        spill_dir = own_dir;
    }

    size_t mem_total = 0;
    for (int i = 0; i < g_nparts; i++) {
        generate(&g_parts[i], seed);
        if (!g_parts[i].spill)
            mem_total += g_parts[i].len;
    }
    if (lie_arg) {
        const char *colon = strchr(lie_arg, ':');
        if (!colon)
            die("bad --lie %s (want MODE:ID)", lie_arg);
        char mode[32];
        snprintf(mode, sizeof mode, "%.*s", (int)(colon - lie_arg), lie_arg);
        int found = 0;
        for (int i = 0; i < g_nparts; i++)
            if (!strcmp(g_parts[i].id, colon + 1)) {
                lie(&g_parts[i], mode);
                found = 1;
            }
        if (!found)
            die("--lie: no partition %s", colon + 1);
    }
    if (dump) {
        for (int i = 0; i < g_nparts; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.bin", dump, g_parts[i].id);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(g_parts[i].blob, 1, g_parts[i].len, f) != g_parts[i].len ||
                fclose(f) != 0)
                die("cannot write %s", path);
        }
    }

    sb_err err;
    /* A budget that holds exactly the in-memory partitions: every put of a partition meant to
     * spill (needed last) pushes itself out. */
    sb_store_config scfg = {.memory_budget = mem_total ? mem_total : 64, .spill_dir = spill_dir};
    sb_store *store;
    if (sb_store_open(&scfg, &store, &err) != 0)
        die("%s", err.msg);
    sb_rpc_server *rpc = NULL;
    sb_data_server *ds = NULL;
    if (!g_evil_mode) {
        for (int i = 0; i < g_nparts; i++) {
            part *p = &g_parts[i];
            sb_store_hints h = {.next_needed = p->spill ? 1000000u + (uint64_t)i : 0};
            if (sb_store_put(store, p->id, p->blob, p->len, &h, &err) != 0)
                die("%s", err.msg);
            p->blob = NULL; /* the store owns it */
        }
    }
    sb_store_item *items = NULL;
    size_t nitems = 0;
    if (sb_store_list(store, &items, &nitems, &err) != 0)
        die("%s", err.msg);
    for (int i = 0; i < g_nparts; i++) {
        int mem = 1;
        for (size_t k = 0; k < nitems; k++)
            if (!strcmp(items[k].id, g_parts[i].id))
                mem = items[k].in_memory;
        printf("part %s %zu %s\n", g_parts[i].id, g_parts[i].len, mem ? "mem" : "spill");
    }
    free(items);

    sb_rpc_opts ro = {.threads = threads};
    static sb_rpc_tlsdir tls;
    if (tls_dir != NULL && *tls_dir) {
        if (sb_rpc_tlsdir_load(&tls, tls_dir, NULL, &err) != 0)
            die("%s", err.msg);
        sb_rpc_tlsdir_apply(&tls, &ro);
    }
    rpc = sb_rpc_server_new(&ro, &err);
    if (!rpc)
        die("%s", err.msg);
    if (g_evil_mode) {
        if (sb_rpc_server_add_stream(rpc, SB_RPC_DATA_FETCH, evil_fetch, NULL, &err) != 0)
            die("%s", err.msg);
    } else {
        sb_data_server_config dcfg = {.store = store,
                                      .chunk_bytes = chunk,
                                      .io_threads = io_threads,
                                      .spill_buffers = spill_buffers};
        if (sb_data_server_new(&dcfg, &ds, &err) != 0 ||
            sb_data_server_register(ds, rpc, &err) != 0)
            die("%s", err.msg);
    }
    if (heartbeat &&
        sb_rpc_server_add_unary(rpc, SB_RPC_CONTROL_HEARTBEAT, on_heartbeat, NULL, &err) != 0)
        die("%s", err.msg);
    int port = sb_rpc_server_listen(rpc, listen, &err);
    if (port < 0 || sb_rpc_server_start(rpc, &err) != 0)
        die("%s", err.msg);
    char host[256];
    snprintf(host, sizeof host, "%s", listen);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = '\0';
    printf("listening %s:%d\n", host, port);
    fflush(stdout);

    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGUSR1) {
            sb_data_server_stats st = {0};
            if (ds)
                sb_data_server_get_stats(ds, &st);
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
            printf("stats fetches=%" PRIu64 " ok=%" PRIu64 " not_found=%" PRIu64
                   " cancelled=%" PRIu64 " errors=%" PRIu64 " chunks=%" PRIu64 " bytes=%" PRIu64
                   " spill_chunks=%" PRIu64 " active=%zu pinned=%zu buffers=%zu cpu=%.6f\n",
                   st.fetches, st.ok, st.not_found, st.cancelled, st.errors, st.chunks, st.bytes,
                   st.spill_chunks, st.active, st.pinned, st.buffers, cpu);
            fflush(stdout);
            continue;
        }
        break;
    }
    if (ds)
        sb_data_server_drain(ds, grace_ms, 500);
    int cancelled = sb_rpc_server_shutdown(rpc, ds ? 100 : grace_ms);
    sb_data_server_stats st = {0};
    if (ds) {
        if (sb_data_server_wait_idle(ds, 10000, &err) != 0)
            sb_log(SB_LOG_ERROR, "data server not idle", "error", err.msg, (char *)NULL);
        sb_data_server_get_stats(ds, &st);
    }
    sb_data_server_free(ds);
    sb_rpc_server_free(rpc);
    sb_store_stats ss;
    sb_store_get_stats(store, &ss);
    sb_store_close(store);
    for (int i = 0; i < g_nparts; i++)
        sb_part_free(g_parts[i].blob);
    if (spill_dir == own_dir)
        rmdir(own_dir);
    printf("exit cancelled=%d ok=%" PRIu64 " ds_cancelled=%" PRIu64
           " active=%zu pinned=%zu store_pinned=%zu\n",
           cancelled, st.ok, st.cancelled, st.active, st.pinned, ss.pinned_partitions);
    fflush(stdout);
    return 0;
}
