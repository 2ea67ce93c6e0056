/* fetch.c — the Data.Fetch client: a receiver that checks and assembles Chunk messages, the
 * retry/resume loop around lib/rpc's stream reader, and the same for many small partitions in
 * one stream (sb_data_fetch_many; see fetch.h). */
#include "worker/data/fetch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "partition/chunk.h"
#include "partition/crc32c.h"
#include "partition/partition.h"
#include "rpc/chunkmsg.h"
#include "rpc/proto.h"

#define ID_MAX 256
#define MAX_BACKOFF_MS 1000

const char *sb_data_status_name(int status)
{
    switch (status) {
    case SB_DATA_OK:
        return "OK";
    case SB_DATA_EFAIL:
        return "EFAIL";
    case SB_DATA_ENOTFOUND:
        return "ENOTFOUND";
    case SB_DATA_EDEADLINE:
        return "EDEADLINE";
    case SB_DATA_ECORRUPT:
        return "ECORRUPT";
    case SB_DATA_ETOOBIG:
        return "ETOOBIG";
    case SB_DATA_EUNAVAILABLE:
        return "EUNAVAILABLE";
    case SB_DATA_EREFUSED:
        return "EREFUSED";
    case SB_DATA_ECANCELLED:
        return "ECANCELLED";
    }
    return "?";
}

static int fail(sb_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(sb_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ------------------------------------------------------------------------------ receiver */

struct sb_data_recv {
    sb_part_asm *a;
    char id[ID_MAX];
    size_t expected, limit, grid;
    uint64_t wire_total; /* total_length the server announced (0 = not yet) */
    uint8_t head[16];    /* the blob's first bytes, verified, while its size is unknown */
    size_t head_have;
    sb_part_piece *pp;
    size_t cap;
    uint64_t chunks, bytes;
};

sb_data_recv *sb_data_recv_new(sb_err *err)
{
    sb_data_recv *r = calloc(1, sizeof *r);
    if (!r) {
        sb_err_set(err, "fetch: out of memory");
        return NULL;
    }
    /* The limit is enforced here (it changes per blob; the assembler's is fixed). */
    r->a = sb_part_asm_new(SIZE_MAX / 2, err);
    if (!r->a) {
        free(r);
        return NULL;
    }
    sb_data_recv_reset(r, NULL, 0, 0, 0);
    return r;
}

void sb_data_recv_free(sb_data_recv *r)
{
    if (!r)
        return;
    sb_part_asm_free(r->a);
    free(r->pp);
    free(r);
}

void sb_data_recv_reset(sb_data_recv *r, const char *id, size_t expected_len, size_t max_len,
                        size_t chunk_grid)
{
    sb_part_asm_reset(r->a);
    snprintf(r->id, sizeof r->id, "%s", id ? id : "?");
    r->expected = expected_len;
    r->limit = max_len ? max_len : expected_len ? expected_len : SIZE_MAX / 2;
    r->grid = chunk_grid ? chunk_grid : SB_PART_CHUNK_MAX;
    r->wire_total = 0;
    r->head_have = 0;
    r->chunks = 0;
    r->bytes = 0;
}

uint64_t sb_data_recv_next_offset(const sb_data_recv *r)
{
    return sb_part_asm_next_offset(r->a);
}

uint64_t sb_data_recv_total(const sb_data_recv *r)
{
    return sb_part_asm_total(r->a);
}

bool sb_data_recv_done(const sb_data_recv *r)
{
    return sb_part_asm_done(r->a);
}

const void *sb_data_recv_view(const sb_data_recv *r, size_t *len)
{
    return sb_part_asm_view(r->a, len, NULL);
}

void *sb_data_recv_take(sb_data_recv *r, size_t *len)
{
    return sb_part_asm_take(r->a, len, NULL);
}

/* Checks a blob size announced by the server or by the header against the limits. */
static int check_total(sb_data_recv *r, uint64_t total, const char *who, sb_err *err)
{
    if (r->expected && total != r->expected)
        return fail(err, SB_DATA_ECORRUPT,
                    "partition %s: %s says it is %" PRIu64 " bytes, but %zu were expected", r->id,
                    who, total, r->expected);
    if (total > r->limit)
        return fail(err, SB_DATA_ETOOBIG,
                    "partition %s: %s says it is %" PRIu64 " bytes, more than the limit of %zu",
                    r->id, who, total, r->limit);
    return 0;
}

int sb_data_recv_feed(sb_data_recv *r, const sb_rpc_piece *pieces, size_t n, sb_err *err)
{
    sb_rpc_chunk c;
    sb_err perr;
    if (sb_rpc_chunk_parse(pieces, n, &c, &perr) != 0)
        return fail(err, SB_DATA_ECORRUPT,
                    "partition %s: malformed Chunk message after byte %" PRIu64 ": %s", r->id,
                    sb_part_asm_next_offset(r->a), perr.msg);
    uint64_t index = c.offset / r->grid;
    if (c.data_len == 0 || c.data_len > SB_PART_CHUNK_MAX)
        return fail(err, SB_DATA_ECORRUPT,
                    "partition %s: chunk %" PRIu64 " at offset %" PRIu64
                    " has %zu bytes (must be 1..%zu)",
                    r->id, index, c.offset, c.data_len, SB_PART_CHUNK_MAX);
    if (c.total_length) {
        if (r->wire_total && c.total_length != r->wire_total)
            return fail(err, SB_DATA_ECORRUPT,
                        "partition %s: chunk %" PRIu64 " at offset %" PRIu64
                        " says the partition is %" PRIu64 " bytes, earlier chunks said %" PRIu64,
                        r->id, index, c.offset, c.total_length, r->wire_total);
        int rc = check_total(r, c.total_length, "the server", err);
        if (rc != 0)
            return rc;
        r->wire_total = c.total_length;
    }
    /* The data as pieces for the assembler (still pointing into gRPC's slices). */
    size_t k = 0;
    sb_rpc_chunk_iter it;
    sb_rpc_piece p;
    sb_rpc_chunk_data_begin(&c, &it);
    while (sb_rpc_chunk_data_next(pieces, n, &it, &p)) {
        if (k == r->cap) {
            size_t nc = r->cap ? r->cap * 2 : 32;
            sb_part_piece *np = realloc(r->pp, nc * sizeof *np);
            if (!np)
                return fail(err, SB_DATA_EFAIL, "partition %s: out of memory", r->id);
            r->pp = np;
            r->cap = nc;
        }
        r->pp[k].p = p.ptr;
        r->pp[k].len = p.len;
        k++;
    }
    sb_part_chunk pc = {.index = index, .offset = c.offset, .len = c.data_len, .crc = c.crc32c};
    /* While the size is unknown: collect the header's first 16 bytes (from as many chunks as it
     * takes) and check what they claim before the assembler allocates that much, but only once
     * the crc says these are the bytes the server sent (else the assembler reports the crc). */
    uint8_t head[sizeof r->head];
    size_t head_have = r->head_have;
    if (sb_part_asm_total(r->a) == 0 && c.offset <= r->head_have && c.offset < sizeof head) {
        uint32_t crc = 0;
        for (size_t i = 0; i < k; i++)
            crc = sb_crc32c(crc, r->pp[i].p, r->pp[i].len);
        if (crc == c.crc32c) {
            memcpy(head, r->head, sizeof head);
            size_t at = (size_t)c.offset;
            for (size_t i = 0; i < k && at < sizeof head; i++) {
                size_t take = r->pp[i].len < sizeof head - at ? r->pp[i].len : sizeof head - at;
                memcpy(head + at, r->pp[i].p, take);
                at += take;
            }
            if (at > head_have)
                head_have = at;
            uint64_t total;
            if (head_have == sizeof head) {
                if (sb_part_peek(head, sizeof head, &total, NULL, &perr) != 0)
                    return fail(err, SB_DATA_ECORRUPT, "partition %s: chunk %" PRIu64 ": %s", r->id,
                                index, perr.msg);
                if (r->wire_total && total != r->wire_total)
                    return fail(err, SB_DATA_ECORRUPT,
                                "partition %s: its header says it is %" PRIu64
                                " bytes but the server says %" PRIu64,
                                r->id, total, r->wire_total);
                int rc = check_total(r, total, "its header", err);
                if (rc != 0)
                    return rc;
            }
        }
    }
    if (sb_part_asm_add(r->a, &pc, r->pp, k, &perr) != 0)
        return fail(err, SB_DATA_ECORRUPT, "partition %s: %s", r->id, perr.msg);
    if (head_have > r->head_have) {
        memcpy(r->head, head, sizeof head);
        r->head_have = head_have;
    }
    uint64_t total = sb_part_asm_total(r->a);
    if (total && r->wire_total && total != r->wire_total)
        return fail(err, SB_DATA_ECORRUPT,
                    "partition %s: its header says it is %" PRIu64
                    " bytes but the server says %" PRIu64,
                    r->id, total, r->wire_total);
    if (total) {
        int rc = check_total(r, total, "its header", err);
        if (rc != 0)
            return rc;
    }
    r->chunks++;
    r->bytes += c.data_len;
    return 0;
}

/* ------------------------------------------------------------------------------ fetcher */

struct sb_data_fetcher {
    sb_data_fetch_opts o;
    sb_data_recv *r;
    char requester[128];
    const char *addr; /* for messages (sb_data_fetch_addr) */
    int have;         /* the last run succeeded and the blob was not taken */
    sb_data_fetch_info info;
};

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

#define CANCEL_POLL_MS 50 /* the slices of a wait, between looks at the cancel flag */

static int cancelled(const sb_data_fetcher *f)
{
    return f->o.cancel != NULL && __atomic_load_n(f->o.cancel, __ATOMIC_RELAXED) != 0;
}

/* The next slice of a wait of ms: all of it without a cancel flag to look at. */
static int64_t wait_slice(const sb_data_fetcher *f, int64_t ms)
{
    return ms < CANCEL_POLL_MS || f->o.cancel == NULL ? ms : CANCEL_POLL_MS;
}

/* Sleeps ms, or less once the fetch is cancelled. */
static void nap(const sb_data_fetcher *f, int64_t ms)
{
    while (ms > 0 && !cancelled(f)) {
        int64_t step = wait_slice(f, ms);
        sleep_ms(step);
        ms -= step;
    }
}

/* sb_rpc_channel_wait_ready for up to ms, in slices that look at the cancel flag: 0 ready, -1
 * not (werr set; "cancelled" once the fetch is). */
static int wait_ready(const sb_data_fetcher *f, sb_rpc_channel *ch, int64_t ms, sb_err *werr)
{
    for (;;) {
        if (cancelled(f))
            return sb_err_set(werr, "cancelled while waiting for the connection");
        int64_t step = wait_slice(f, ms);
        if (sb_rpc_channel_wait_ready(ch, (int)step, werr) == 0)
            return 0;
        ms -= step;
        if (ms <= 0)
            return -1;
    }
}

sb_data_fetcher *sb_data_fetcher_new(const sb_data_fetch_opts *opts, sb_err *err)
{
    sb_data_fetcher *f = calloc(1, sizeof *f);
    if (!f) {
        sb_err_set(err, "fetch: out of memory");
        return NULL;
    }
    if (opts)
        f->o = *opts;
    if (f->o.max_retries == 0)
        f->o.max_retries = 5;
    else if (f->o.max_retries < 0)
        f->o.max_retries = 0;
    if (f->o.backoff_ms <= 0)
        f->o.backoff_ms = 50;
    if (f->o.reconnect_wait_ms <= 0)
        f->o.reconnect_wait_ms = 2000;
    snprintf(f->requester, sizeof f->requester, "%s", f->o.requester_id ? f->o.requester_id : "");
    f->o.requester_id = f->requester;
    f->o.rpc = NULL; /* only used by the *_addr variants, during the call */
    f->r = sb_data_recv_new(err);
    if (!f->r) {
        free(f);
        return NULL;
    }
    return f;
}

void sb_data_fetcher_free(sb_data_fetcher *f)
{
    if (!f)
        return;
    sb_data_recv_free(f->r);
    free(f);
}

const void *sb_data_fetcher_view(const sb_data_fetcher *f, size_t *len)
{
    if (!f->have)
        return NULL;
    return sb_data_recv_view(f->r, len);
}

void *sb_data_fetcher_take(sb_data_fetcher *f, size_t *len)
{
    if (!f->have)
        return NULL;
    f->have = 0;
    return sb_data_recv_take(f->r, len);
}

const sb_data_fetch_info *sb_data_fetcher_info(const sb_data_fetcher *f)
{
    return &f->info;
}

/* Maps a failed stream's status to a result; 1 for "retry". */
static int classify(sb_rpc_code code)
{
    switch (code) {
    case SB_RPC_NOT_FOUND:
        return SB_DATA_ENOTFOUND;
    case SB_RPC_DEADLINE_EXCEEDED:
        return SB_DATA_EDEADLINE;
    case SB_RPC_DATA_LOSS:
        return SB_DATA_ECORRUPT;
    case SB_RPC_INVALID_ARGUMENT:
    case SB_RPC_OUT_OF_RANGE:
    case SB_RPC_UNIMPLEMENTED:
    case SB_RPC_PERMISSION_DENIED:
    case SB_RPC_UNAUTHENTICATED:
    case SB_RPC_FAILED_PRECONDITION:
    case SB_RPC_ALREADY_EXISTS:
        return SB_DATA_EREFUSED;
    default: /* UNAVAILABLE, CANCELLED, UNKNOWN, INTERNAL, ABORTED, RESOURCE_EXHAUSTED */
        return 1;
    }
}

/* Feeds the chunks of one opened stream rd to f's receiver. 0 once the partition is complete
 * (rd closed), a negative SB_DATA_E* code to return (rd closed), or 1: the stream ended (*rrc
 * 0) or broke (*rrc < 0, serr says why) first, rd still open for its status. */
static int feed_stream(sb_data_fetcher *f, sb_rpc_reader *rd, int *rrc, sb_err *serr, sb_err *err)
{
    sb_data_fetch_info *in = &f->info;
    const sb_rpc_piece *pc;
    size_t np, len;
    while ((*rrc = sb_rpc_reader_next(rd, &pc, &np, &len, serr)) == 1) {
        int frc = sb_data_recv_feed(f->r, pc, np, err);
        if (frc != 0) {
            sb_rpc_reader_close(rd);
            return frc;
        }
        in->chunks = f->r->chunks;
        in->bytes = f->r->bytes;
        in->total = sb_data_recv_total(f->r);
        if (f->o.on_chunk) {
            uint64_t end = sb_data_recv_next_offset(f->r);
            if (f->o.on_chunk(f->o.on_chunk_ud, end - len, len, in->total) != 0) {
                sb_rpc_reader_close(rd);
                return fail(err, SB_DATA_ECANCELLED, "cancelled by the caller at byte %" PRIu64,
                            end);
            }
        }
        if (sb_data_recv_done(f->r)) {
            /* Collect the end of the stream; the data is complete whatever it says. */
            (void)sb_rpc_reader_next(rd, &pc, &np, &len, serr);
            sb_rpc_reader_close(rd);
            return 0;
        }
    }
    return 1;
}

/* The run proper; fills err without the "fetch ID: " prefix. */
static int run(sb_data_fetcher *f, sb_rpc_channel *ch, const char *id, int timeout_ms, sb_err *err)
{
    sb_data_fetch_info *in = &f->info;
    int64_t deadline = now_ms() + timeout_ms;
    int failures = 0;
    int64_t backoff = f->o.backoff_ms;
    char last[SB_ERR_MAX] = "", stream_err[SB_ERR_MAX] = "";
    for (;;) {
        int64_t left = deadline - now_ms();
        uint64_t have = sb_data_recv_next_offset(f->r);
        if (cancelled(f))
            return fail(err, SB_DATA_ECANCELLED, "cancelled by the caller after %d attempts",
                        in->attempts);
        if (left <= 0)
            return fail(err, SB_DATA_EDEADLINE,
                        "deadline of %d ms passed after %" PRIu64 " of %" PRIu64
                        " bytes (%d attempts)%s%s",
                        timeout_ms, have, sb_data_recv_total(f->r), in->attempts,
                        last[0] ? "; last error: " : "", last);
        if (in->attempts > 0 && !sb_rpc_channel_is_ready(ch)) {
            int64_t w = left < f->o.reconnect_wait_ms ? left : f->o.reconnect_wait_ms;
            sb_err werr;
            if (wait_ready(f, ch, w, &werr) != 0) {
                in->attempts++; /* a try, although no stream could be opened */
                snprintf(last, sizeof last, "%s", werr.msg);
                if (++failures > f->o.max_retries)
                    return fail(err, SB_DATA_EUNAVAILABLE,
                                "gave up after %d attempts at byte %" PRIu64
                                ": %s (the stream had failed with: %s)",
                                in->attempts, have, last, stream_err);
                continue;
            }
        }
        Streambatch__V1__FetchRequest req = STREAMBATCH__V1__FETCH_REQUEST__INIT;
        req.partition_id = (char *)id;
        req.offset = have;
        req.max_chunk_bytes = f->o.max_chunk_bytes;
        req.requester_id = f->requester;
        uint8_t buf[512];
        size_t n = streambatch__v1__fetch_request__get_packed_size(&req);
        if (n > sizeof buf)
            return fail(err, SB_DATA_EFAIL, "request too large (%zu bytes)", n);
        streambatch__v1__fetch_request__pack(&req, buf);
        sb_err serr;
        in->attempts++;
        if (have > 0)
            in->resumed_at = have;
        sb_rpc_reader *rd = sb_rpc_stream_open(ch, SB_RPC_DATA_FETCH, buf, n, (int)left, 0, &serr);
        if (!rd)
            return fail(err, SB_DATA_EFAIL, "%s", serr.msg);
        int rc;
        int frc = feed_stream(f, rd, &rc, &serr, err);
        if (frc <= 0) /* the partition is complete (0), or an error to return */
            return frc;
        sb_rpc_code code = sb_rpc_reader_code(rd);
        sb_rpc_reader_close(rd);
        if (rc == 0) {
            if (sb_data_recv_done(f->r))
                return 0;
            return fail(err, SB_DATA_ECORRUPT,
                        "the server ended the stream after %" PRIu64 " of %" PRIu64 " bytes",
                        sb_data_recv_next_offset(f->r),
                        f->r->wire_total ? f->r->wire_total : sb_data_recv_total(f->r));
        }
        in->last_code = code;
        int cls = classify(code);
        if (cls == SB_DATA_EDEADLINE)
            return fail(err, SB_DATA_EDEADLINE,
                        "deadline of %d ms passed after %" PRIu64 " of %" PRIu64
                        " bytes (%d attempts): %s",
                        timeout_ms, sb_data_recv_next_offset(f->r), sb_data_recv_total(f->r),
                        in->attempts, serr.msg);
        if (cls != 1)
            return fail(err, cls, "%s", serr.msg);
        snprintf(last, sizeof last, "%s", serr.msg);
        snprintf(stream_err, sizeof stream_err, "%s", serr.msg);
        if (sb_data_recv_next_offset(f->r) > have) { /* progress: a fresh retry budget */
            failures = 0;
            backoff = f->o.backoff_ms;
        }
        if (++failures > f->o.max_retries)
            return fail(err, SB_DATA_EUNAVAILABLE,
                        "gave up after %d attempts at byte %" PRIu64 ": %s", in->attempts,
                        sb_data_recv_next_offset(f->r), last);
        left = deadline - now_ms();
        nap(f, backoff < left ? backoff : left);
        backoff = backoff * 2 < MAX_BACKOFF_MS ? backoff * 2 : MAX_BACKOFF_MS;
    }
}

int sb_data_fetcher_run(sb_data_fetcher *f, sb_rpc_channel *ch, const char *partition_id,
                        size_t expected_len, size_t max_len, int timeout_ms, sb_err *err)
{
    double t0 = now_s();
    memset(&f->info, 0, sizeof f->info);
    f->have = 0;
    if (!ch || !partition_id || !*partition_id || strlen(partition_id) >= ID_MAX || timeout_ms <= 0)
        return fail(err, SB_DATA_EFAIL,
                    "fetch: need a channel, a partition id (< %d bytes) and a timeout > 0", ID_MAX);
    sb_data_recv_reset(f->r, partition_id, expected_len, max_len, f->o.max_chunk_bytes);
    sb_err e;
    int rc = run(f, ch, partition_id, timeout_ms, &e);
    if (rc == 0) {
        size_t len;
        const void *blob = sb_data_recv_view(f->r, &len);
        if (!(f->o.flags & SB_DATA_FETCH_NO_VERIFY)) {
            unsigned fl = f->o.flags & SB_DATA_FETCH_FULL_VERIFY
                              ? 0
                              : SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8;
            sb_batch *b = NULL;
            sb_err oerr;
            if (sb_batch_open_ex(blob, len, fl, &b, &oerr) != 0)
                rc =
                    fail(&e, SB_DATA_ECORRUPT, "the fetched partition does not open: %s", oerr.msg);
            sb_batch_close(b);
        }
    }
    f->info.total = sb_data_recv_total(f->r);
    f->info.chunks = f->r->chunks;
    f->info.bytes = f->r->bytes;
    f->info.seconds = now_s() - t0;
    if (rc != 0) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "fetch %s%s%s: %s", partition_id,
                     f->addr ? " from " : "", f->addr ? f->addr : "", e.msg);
        return rc;
    }
    f->have = 1;
    return 0;
}

int sb_data_fetch(sb_rpc_channel *ch, const char *partition_id, size_t expected_len, size_t max_len,
                  int timeout_ms, const sb_data_fetch_opts *opts, void **blob, size_t *len,
                  sb_data_fetch_info *info, sb_err *err)
{
    *blob = NULL;
    *len = 0;
    sb_data_fetcher *f = sb_data_fetcher_new(opts, err);
    if (!f)
        return SB_DATA_EFAIL;
    int rc = sb_data_fetcher_run(f, ch, partition_id, expected_len, max_len, timeout_ms, err);
    if (rc == 0)
        *blob = sb_data_fetcher_take(f, len);
    if (info)
        *info = f->info;
    sb_data_fetcher_free(f);
    return rc;
}

int sb_data_fetch_addr(const char *address, const char *partition_id, size_t expected_len,
                       size_t max_len, int timeout_ms, const sb_data_fetch_opts *opts, void **blob,
                       size_t *len, sb_data_fetch_info *info, sb_err *err)
{
    *blob = NULL;
    *len = 0;
    sb_rpc_channel *ch = sb_rpc_channel_new(address, opts ? opts->rpc : NULL, err);
    if (!ch)
        return SB_DATA_EFAIL;
    sb_data_fetcher *f = sb_data_fetcher_new(opts, err);
    int rc = SB_DATA_EFAIL;
    if (f) {
        f->addr = address;
        rc = sb_data_fetcher_run(f, ch, partition_id, expected_len, max_len, timeout_ms, err);
        if (rc == 0)
            *blob = sb_data_fetcher_take(f, len);
        if (info)
            *info = f->info;
        f->addr = NULL;
        sb_data_fetcher_free(f);
    }
    sb_rpc_channel_free(ch);
    return rc;
}

/* ------------------------------------------------------------------------------ many */

/* One sb_data_fetch_many(): the partitions asked for, and what has come so far. */
typedef struct many {
    const char *const *ids;
    const size_t *expected; /* may be NULL */
    size_t n, max_len;
    size_t k; /* the partition being received (== n when all came) */
    void **blobs;
    size_t *lens;
    uint64_t chunks, bytes, total; /* of the partitions completed */
} many;

/* The request for what is still missing: ids[k] from the receiver's next offset, the ones after
 * it as next_partition_ids. malloc'd (*len bytes), NULL when out of memory. */
static uint8_t *many_request(sb_data_fetcher *f, const many *m, size_t *len)
{
    Streambatch__V1__FetchRequest req = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    req.partition_id = (char *)m->ids[m->k];
    req.offset = sb_data_recv_next_offset(f->r);
    req.max_chunk_bytes = f->o.max_chunk_bytes;
    req.requester_id = f->requester;
    req.n_next_partition_ids = m->n - m->k - 1;
    req.next_partition_ids = (char **)(m->ids + m->k + 1);
    *len = streambatch__v1__fetch_request__get_packed_size(&req);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (buf)
        streambatch__v1__fetch_request__pack(&req, buf);
    return buf;
}

/* The current partition is complete: checks that it opens (as sb_data_fetcher_run does), hands
 * it to m and starts on the next one. */
static int many_next(sb_data_fetcher *f, many *m, sb_err *err)
{
    size_t len;
    const void *blob = sb_data_recv_view(f->r, &len);
    if (!(f->o.flags & SB_DATA_FETCH_NO_VERIFY)) {
        unsigned fl = f->o.flags & SB_DATA_FETCH_FULL_VERIFY
                          ? 0
                          : SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8;
        sb_batch *b = NULL;
        sb_err oerr;
        int rc = sb_batch_open_ex(blob, len, fl, &b, &oerr);
        sb_batch_close(b);
        if (rc != 0)
            return fail(err, SB_DATA_ECORRUPT, "partition %s does not open: %s", m->ids[m->k],
                        oerr.msg);
    }
    m->chunks += f->r->chunks;
    m->bytes += f->r->bytes;
    m->total += len;
    m->blobs[m->k] = sb_data_recv_take(f->r, &m->lens[m->k]);
    if (++m->k < m->n)
        sb_data_recv_reset(f->r, m->ids[m->k], m->expected ? m->expected[m->k] : 0, m->max_len,
                           f->o.max_chunk_bytes);
    return 0;
}

/* Reads one stream of the partitions from m->k on: 1 when all came, 0 when the stream ended
 * before (its status in *code, the reader's message in serr), or a negative sb_data_status. */
static int many_stream(sb_data_fetcher *f, many *m, sb_rpc_reader *rd, sb_rpc_code *code,
                       sb_err *serr, sb_err *err)
{
    const sb_rpc_piece *pc;
    size_t np, len;
    int rc;
    while ((rc = sb_rpc_reader_next(rd, &pc, &np, &len, serr)) == 1) {
        int frc = sb_data_recv_feed(f->r, pc, np, err);
        if (frc != 0)
            return frc;
        if (f->o.on_chunk) {
            uint64_t end = sb_data_recv_next_offset(f->r);
            if (f->o.on_chunk(f->o.on_chunk_ud, end - len, len, sb_data_recv_total(f->r)) != 0)
                return fail(err, SB_DATA_ECANCELLED,
                            "cancelled by the caller at byte %" PRIu64 " of partition %s", end,
                            m->ids[m->k]);
        }
        if (sb_data_recv_done(f->r) && (frc = many_next(f, m, err)) != 0)
            return frc;
        if (m->k == m->n) {
            (void)sb_rpc_reader_next(rd, &pc, &np, &len, serr); /* the end of the stream */
            return 1;
        }
    }
    *code = sb_rpc_reader_code(rd);
    if (rc == 0) /* ended OK, but not everything came */
        return fail(err, SB_DATA_ECORRUPT,
                    "the server ended the stream in partition %zu of %zu (%s) after %" PRIu64
                    " bytes",
                    m->k + 1, m->n, m->ids[m->k], sb_data_recv_next_offset(f->r));
    return 0;
}

/* The retry loop of run() for many partitions: a broken stream is asked again from the
 * partition and byte it broke at; progress (a partition completed or bytes received) renews the
 * retry budget. Fills err without a prefix. */
static int run_many(sb_data_fetcher *f, sb_rpc_channel *ch, many *m, int timeout_ms, sb_err *err)
{
    sb_data_fetch_info *in = &f->info;
    int64_t deadline = now_ms() + timeout_ms;
    int failures = 0;
    int64_t backoff = f->o.backoff_ms;
    char last[SB_ERR_MAX] = "";
    for (;;) {
        int64_t left = deadline - now_ms();
        size_t k0 = m->k;
        uint64_t have = sb_data_recv_next_offset(f->r);
        if (cancelled(f))
            return fail(err, SB_DATA_ECANCELLED,
                        "cancelled by the caller in partition %zu of %zu (%s) after %d attempts",
                        m->k + 1, m->n, m->ids[m->k], in->attempts);
        if (left <= 0)
            return fail(err, SB_DATA_EDEADLINE,
                        "deadline of %d ms passed in partition %zu of %zu (%s) at byte %" PRIu64
                        " (%d attempts)%s%s",
                        timeout_ms, m->k + 1, m->n, m->ids[m->k], have, in->attempts,
                        last[0] ? "; last error: " : "", last);
        sb_err serr = {0};
        if (in->attempts > 0 && !sb_rpc_channel_is_ready(ch) &&
            wait_ready(f, ch, left < f->o.reconnect_wait_ms ? left : f->o.reconnect_wait_ms,
                       &serr) != 0) {
            in->attempts++;
            snprintf(last, sizeof last, "%s", serr.msg);
        } else {
            size_t n;
            uint8_t *buf = many_request(f, m, &n);
            if (!buf)
                return fail(err, SB_DATA_EFAIL, "out of memory for the request");
            in->attempts++;
            if (have > 0 || m->k > 0)
                in->resumed_at = have;
            sb_rpc_reader *rd =
                sb_rpc_stream_open(ch, SB_RPC_DATA_FETCH, buf, n, (int)left, 0, &serr);
            free(buf);
            if (!rd)
                return fail(err, SB_DATA_EFAIL, "%s", serr.msg);
            sb_rpc_code code = SB_RPC_OK;
            int rc = many_stream(f, m, rd, &code, &serr, err);
            sb_rpc_reader_close(rd);
            if (rc != 0)
                return rc > 0 ? 0 : rc;
            in->last_code = code;
            int cls = classify(code);
            if (cls == SB_DATA_EDEADLINE)
                return fail(err, SB_DATA_EDEADLINE,
                            "deadline of %d ms passed in partition %zu of %zu (%s): %s", timeout_ms,
                            m->k + 1, m->n, m->ids[m->k], serr.msg);
            if (cls != 1)
                return fail(err, cls, "%s", serr.msg);
            snprintf(last, sizeof last, "%s", serr.msg);
            if (m->k > k0 || sb_data_recv_next_offset(f->r) > have) {
                failures = 0; /* progress: a fresh retry budget */
                backoff = f->o.backoff_ms;
            }
        }
        if (++failures > f->o.max_retries)
            return fail(
                err, SB_DATA_EUNAVAILABLE,
                "gave up after %d attempts in partition %zu of %zu (%s) at byte %" PRIu64 ": %s",
                in->attempts, m->k + 1, m->n, m->ids[m->k], sb_data_recv_next_offset(f->r), last);
        left = deadline - now_ms();
        nap(f, backoff < left ? backoff : left);
        backoff = backoff * 2 < MAX_BACKOFF_MS ? backoff * 2 : MAX_BACKOFF_MS;
    }
}

int sb_data_fetch_many(sb_rpc_channel *ch, const char *const *ids, const size_t *expected_lens,
                       size_t n, size_t max_len, int timeout_ms, const sb_data_fetch_opts *opts,
                       void **blobs, size_t *lens, size_t *failed, sb_data_fetch_info *info,
                       sb_err *err)
{
    *failed = 0;
    if (info)
        memset(info, 0, sizeof *info);
    if (!ch || !ids || n == 0 || n > SB_DATA_FETCH_MANY_MAX || !blobs || !lens || timeout_ms <= 0)
        return fail(err, SB_DATA_EFAIL,
                    "fetch: need a channel, 1 to %d partition ids and a timeout > 0",
                    SB_DATA_FETCH_MANY_MAX);
    for (size_t i = 0; i < n; i++) {
        blobs[i] = NULL;
        lens[i] = 0;
        if (!ids[i] || !*ids[i] || strlen(ids[i]) >= ID_MAX) {
            *failed = i;
            return fail(err, SB_DATA_EFAIL, "fetch: partition id %zu is empty or too long", i);
        }
    }
    sb_data_fetcher *f = sb_data_fetcher_new(opts, err);
    if (!f)
        return SB_DATA_EFAIL;
    double t0 = now_s();
    many m = {.ids = ids,
              .expected = expected_lens,
              .n = n,
              .max_len = max_len,
              .blobs = blobs,
              .lens = lens};
    sb_data_recv_reset(f->r, ids[0], expected_lens ? expected_lens[0] : 0, max_len,
                       f->o.max_chunk_bytes);
    sb_err e;
    int rc = run_many(f, ch, &m, timeout_ms, &e);
    f->info.chunks = m.chunks + (m.k < n ? f->r->chunks : 0);
    f->info.bytes = m.bytes + (m.k < n ? f->r->bytes : 0);
    f->info.total = m.total;
    f->info.seconds = now_s() - t0;
    if (info)
        *info = f->info;
    if (rc != 0) {
        *failed = m.k < n ? m.k : n - 1;
        for (size_t i = 0; i < n; i++) {
            sb_part_free(blobs[i]);
            blobs[i] = NULL;
            lens[i] = 0;
        }
        if (err)
            snprintf(err->msg, sizeof err->msg, "fetch %s (partition %zu of %zu in one stream): %s",
                     ids[*failed], *failed + 1, n, e.msg);
    }
    sb_data_fetcher_free(f);
    return rc;
}

int sb_data_fetch_many_addr(const char *address, const char *const *ids,
                            const size_t *expected_lens, size_t n, size_t max_len, int timeout_ms,
                            const sb_data_fetch_opts *opts, void **blobs, size_t *lens,
                            size_t *failed, sb_data_fetch_info *info, sb_err *err)
{
    *failed = 0;
    sb_rpc_channel *ch = sb_rpc_channel_new(address, opts ? opts->rpc : NULL, err);
    if (!ch) {
        for (size_t i = 0; i < n && blobs; i++)
            blobs[i] = NULL;
        if (info)
            memset(info, 0, sizeof *info);
        return SB_DATA_EFAIL;
    }
    int rc = sb_data_fetch_many(ch, ids, expected_lens, n, max_len, timeout_ms, opts, blobs, lens,
                                failed, info, err);
    if (rc != 0 && err) {
        char tmp[SB_ERR_MAX];
        snprintf(tmp, sizeof tmp, "%s", err->msg);
        snprintf(err->msg, sizeof err->msg, "%s (from %s)", tmp, address);
    }
    sb_rpc_channel_free(ch);
    return rc;
}
