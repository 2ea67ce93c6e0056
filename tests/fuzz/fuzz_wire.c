/* fuzz_wire.c — libFuzzer target for a streambatch gRPC server over the wire (issue 17, hostile
 * peers). Once per process it starts, in-process on loopback, a worker's real Data service
 * (worker/data/service.c over a partition store holding "s0-t0-p0") plus a unary method that
 * decodes its request like every service does (Worker.Rebind's message), on lib/rpc's server
 * with its production limits. Per input it opens a TCP connection and writes the bytes; the
 * first input byte picks what goes before them, so the fuzzer gets past the handshake:
 *   0: nothing (the bytes must be an HTTP/2 preface to get anywhere);
 *   1: the preface and an empty SETTINGS frame (the bytes are HTTP/2 frames);
 *   2: ... plus a well-formed HEADERS frame for Data.Fetch on stream 1 (the bytes are DATA
 *      frames, a gRPC message, more frames);
 *   3: ... the same for Worker.Rebind.
 * It then half-closes, reads what the server answers (until it closes, is quiet for 10 ms, or
 * 50 ms passed) and closes. The server
 * must not crash (ASan/UBSan are on), and every 64 inputs an honest client on its own
 * connection must still get UNIMPLEMENTED for an unknown method and NOT_FOUND for a Fetch of a
 * partition nobody holds. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "partition/partition.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"
#include "streambatch.pb-c.h"
#include "worker/data/service.h"
#include "worker/store/store.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_wire: check failed: %s (line %d)\n", #c, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static sb_store *store;
static sb_data_server *ds;
static sb_rpc_server *srv;
static sb_rpc_channel *honest;
static struct sockaddr_in addr;
static char spill[256];
static unsigned long runs;

/* Worker.Rebind's request decoded as the real services decode theirs; answered with an empty
 * reply (no state changes). */
static void on_unary(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    ProtobufCMessage *m =
        sb_rpc_call_decode(call, &streambatch__v1__rebind_request__descriptor, req, len);
    if (!m)
        return; /* answered INVALID_ARGUMENT */
    sb_rpc_msg_free(m);
    sb_rpc_call_reply(call, "", 0, NULL);
}

static void stop(void)
{
    sb_rpc_channel_free(honest);
    sb_rpc_server_shutdown(srv, 0);
    sb_data_server_free(ds);
    sb_rpc_server_free(srv);
    sb_store_close(store);
    rmdir(spill);
}

/* libFuzzer's per-input leak check runs LeakSanitizer whenever an input ends with more mallocs
 * than frees, which with gRPC's own threads allocating in the background is nearly every input
 * (and 15x slower). Turned off here unless asked for on the command line; ASan still checks
 * every access, and LeakSanitizer still runs at exit. */
static void no_per_input_leak_check(int *argc, char ***argv)
{
    for (int i = 1; i < *argc; i++)
        if (!strncmp((*argv)[i], "-detect_leaks=", 14))
            return;
    static char flag[] = "-detect_leaks=0";
    char **nv = calloc((size_t)*argc + 2, sizeof *nv);
    if (!nv)
        return;
    nv[0] = (*argv)[0];
    nv[1] = flag;
    for (int i = 1; i < *argc; i++)
        nv[i + 1] = (*argv)[i];
    (*argc)++;
    *argv = nv;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    no_per_input_leak_check(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    sb_log_set_level(SB_LOG_ERROR);
    const char *t = getenv("TMPDIR");
    snprintf(spill, sizeof spill, "%s/fuzz_wire-XXXXXX", t && *t ? t : "/tmp");
    CHECK(mkdtemp(spill) != NULL);
    sb_err err = {0};
    sb_store_config sc = {.memory_budget = 4u << 20, .spill_dir = spill};
    CHECK(sb_store_open(&sc, &store, &err) == 0);
    /* one small in-memory partition, 3 chunks of the 1 KiB a fuzzed request may ask for */
    sb_field f = {.name = "v", .type = SB_TYPE_INT64};
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &err);
    CHECK(b != NULL);
    int64_t v[300] = {0};
    CHECK(sb_batch_builder_append_values(b, 0, v, 300, NULL, &err) == 0);
    void *blob;
    size_t len;
    CHECK(sb_batch_builder_finish(b, &blob, &len, &err) == 0);
    sb_batch_builder_free(b);
    CHECK(sb_store_put(store, "s0-t0-p0", blob, len, NULL, &err) == 0);
    sb_data_server_config dc = {.store = store};
    CHECK(sb_data_server_new(&dc, &ds, &err) == 0);
    srv = sb_rpc_server_new(NULL, &err);
    CHECK(srv != NULL);
    CHECK(sb_data_server_register(ds, srv, &err) == 0);
    CHECK(sb_rpc_server_add_unary(srv, SB_RPC_WORKER_REBIND, on_unary, NULL, &err) == 0);
    int port = sb_rpc_server_listen(srv, "127.0.0.1:0", &err);
    CHECK(port > 0);
    CHECK(sb_rpc_server_start(srv, &err) == 0);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    honest = sb_rpc_channel_new(target, NULL, &err);
    CHECK(honest != NULL);
    atexit(stop);
    return 0;
}

static void put(int fd, const void *p, size_t n)
{
    const uint8_t *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the server closed: fine */
        c += w;
        n -= (size_t)w;
    }
}

/* HPACK literal without indexing (no Huffman) for a static-table name index < 15 or >= 15. */
static size_t lit(uint8_t *o, int idx, const char *value)
{
    size_t n = 0, l = strlen(value);
    if (idx < 15) {
        o[n++] = (uint8_t)idx;
    } else {
        o[n++] = 0x0f;
        o[n++] = (uint8_t)(idx - 15);
    }
    o[n++] = (uint8_t)l;
    memcpy(o + n, value, l);
    return n + l;
}

static size_t headers_frame(uint8_t *o, const char *path)
{
    uint8_t *hb = o + 9;
    size_t n = 0;
    hb[n++] = 0x83; /* :method POST */
    hb[n++] = 0x86; /* :scheme http */
    n += lit(hb + n, 4, path);
    n += lit(hb + n, 1, "localhost");
    n += lit(hb + n, 31, "application/grpc");
    static const uint8_t te[] = {0, 2, 't', 'e', 8, 't', 'r', 'a', 'i', 'l', 'e', 'r', 's'};
    memcpy(hb + n, te, sizeof te);
    n += sizeof te;
    o[0] = 0;
    o[1] = (uint8_t)(n >> 8);
    o[2] = (uint8_t)n;
    o[3] = 1; /* HEADERS */
    o[4] = 4; /* END_HEADERS */
    o[5] = o[6] = o[7] = 0;
    o[8] = 1; /* stream 1 */
    return 9 + n;
}

static void honest_check(void)
{
    sb_err err = {0};
    uint8_t *resp = NULL;
    size_t rlen = 0;
    sb_rpc_code c = sb_rpc_unary(honest, "/streambatch.v1.Test/NoSuchMethod", "", 0, 10000,
                                 SB_RPC_WAIT_FOR_READY, &resp, &rlen, &err);
    free(resp);
    if (c != SB_RPC_UNIMPLEMENTED)
        fprintf(stderr, "fuzz_wire: honest call: %s %s\n", sb_rpc_code_name(c), err.msg);
    CHECK(c == SB_RPC_UNIMPLEMENTED);
    Streambatch__V1__FetchRequest r = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    r.partition_id = "s9-t9-p9";
    uint8_t req[64];
    size_t n = streambatch__v1__fetch_request__pack(&r, req);
    sb_rpc_reader *rd =
        sb_rpc_stream_open(honest, SB_RPC_DATA_FETCH, req, n, 10000, SB_RPC_WAIT_FOR_READY, &err);
    CHECK(rd != NULL);
    const sb_rpc_piece *pc;
    size_t np, len;
    CHECK(sb_rpc_reader_next(rd, &pc, &np, &len, &err) == -1);
    CHECK(sb_rpc_reader_code(rd) == SB_RPC_NOT_FOUND);
    sb_rpc_reader_close(rd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] & 3;
    data++;
    size--;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        /* a signal (libFuzzer's timers) may interrupt it: the connection goes on anyway */
        int e = errno, soe = 0;
        socklen_t sl = sizeof soe;
        struct pollfd cp = {.fd = fd, .events = POLLOUT};
        if (e == EINTR)
            while (poll(&cp, 1, 10000) < 0 && errno == EINTR)
                ;
        if (e != EINTR || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soe, &sl) != 0 || soe != 0) {
            fprintf(stderr, "fuzz_wire: connect: %s\n", strerror(e != EINTR ? e : soe));
            abort(); /* the server stopped accepting */
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint8_t pre[256];
    size_t n = 0;
    if (mode >= 1) {
        memcpy(pre, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
        static const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
        memcpy(pre + 24, settings, 9);
        n = 33;
    }
    if (mode == 2)
        n += headers_frame(pre + n, SB_RPC_DATA_FETCH);
    else if (mode == 3)
        n += headers_frame(pre + n, SB_RPC_WORKER_REBIND);
    put(fd, pre, n);
    put(fd, data, size);
    shutdown(fd, SHUT_WR);
    /* read the answer until the server closes, goes quiet for 10 ms, or 50 ms passed */
    uint8_t sink[16384];
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    for (int waited = 0; waited < 50; waited += 10)
        if (poll(&pf, 1, 10) <= 0 || recv(fd, sink, sizeof sink, 0) <= 0)
            break;
    close(fd);
    if (++runs % 64 == 0)
        honest_check();
    return 0;
}
