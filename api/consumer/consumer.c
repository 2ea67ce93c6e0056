/* consumer.c — the C consumer of a stream:// sink (streambatch_consumer.h): asks the controller
 * for slices (Control.StreamNext), fetches their partitions from the workers (worker/data's
 * resumable Data.Fetch client), keeps the dealt rows as references into the fetched blobs,
 * gathers them into batches (in order, or shuffled within a window), and tells the controller
 * which rows were consumed: a batch's once the next one is asked for (the restart point). While
 * the trainer works on a batch, a prefetch thread asks for and fetches the next batch's rows. */

#include "api/consumer/streambatch_consumer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "partition/partition.h"
#include "rpc/auth.h"
#include "rpc/proto.h"
#include "rpc/tlsdir.h"
#include "worker/data/fetch.h"

/* A fetched partition; freed once no row of it waits. */
typedef struct src {
    void *blob;
    sb_batch *b;
    size_t refs; /* rows of it in the pool */
} src;

typedef struct {
    src *s;
    uint32_t row;
    uint64_t seq; /* its position in the rank's sequence (the controller's log) */
} rowref;

typedef struct {
    char *addr;
    sb_rpc_channel *ch;
} chan;

typedef struct {
    char *name;
    int type, child;
    uint32_t list_size;
    size_t width; /* bytes per row (fixed width) */
    uint8_t *values;
    size_t values_len, values_cap;
    int64_t *offsets;
    uint8_t *valid;
    int has_null;
} outcol;

struct sbc_stream {
    sbc_options o;
    char token[SB_RPC_TOKEN_HEX + 1];
    sb_rpc_creds creds;
    sb_rpc_tlsdir tls;
    sb_rpc_opts rpc;
    sb_rpc_channel *ctl;
    chan *chans;
    size_t nchans;
    uint64_t session; /* random per open: the controller tells a restart by it */
    /* consumed rows: every seq before cbase, and cbase + i where bit i of cbits is set */
    uint64_t cbase;
    uint8_t *cbits;
    size_t ncbits, capcbits;
    int unsent;     /* rows consumed since the last StreamNext */
    uint64_t *bseq; /* the current batch's rows' seqs (consumed at the next sbc_next) */
    size_t nbseq, capbseq;
    int final_acked; /* the epoch's last acknowledgement was sent */
    int budget_full; /* the last reply: no more rows now whatever it waits (the budget is full
                        of rows held, or it is ahead of the other ranks) */
    Streambatch__V1__LostSlice lost[64]; /* slices it could not fetch, reported next time */
    Streambatch__V1__LostSlice *lostp[64];
    char lost_ids[64][256];
    size_t nlost;
    uint32_t lost_streak; /* fetches failed in a row: past a bound the stream fails */
    rowref *pool;         /* dealt rows not yet yielded; [head, len) in order */
    size_t head, len, cap;
    uint64_t floor_rows, end_rows, emitted;
    _Atomic uint64_t dealt, fetches, bytes; /* sbc_stats reads them while the prefetch runs */
    _Atomic uint64_t streams;               /* Data.Fetch streams opened (sbc_streams) */
    uint32_t retry_ms;                      /* the last WAIT's advice */
    int ended;                              /* the controller said END */
    uint64_t rng;
    outcol *cols;
    size_t ncols, rows;
    /* the fixed-width value buffers of the last batch's first columns, kept for the next: a
     * buffer new at every batch has each page zeroed by the kernel on first touch (perf: more
     * than the copy into it) */
    uint8_t *spare[8];
    size_t spare_cap[8];
    src *last; /* the partition fetched last (one reference): a partition dealt to this
                  rank in several slices is fetched once */
    char *last_id;
    /* LB-BSP: this rank's batch sizes for iterations [size_from, size_from + nsizes) */
    uint32_t sizes[1024]; /* (the controller lists up to 1024) */
    uint32_t size_from, nsizes;
    uint64_t batches;                   /* batches yielded */
    uint64_t step_rows, step_us, steps; /* timed since the last StreamNext */
    uint64_t yielded_us;                /* when the last batch was returned (0: none) */
    int reported;                       /* sbc_report_step was called: no own timing */
    src **batch_srcs;                   /* sources whose rows the current batch was gathered from */
    size_t nbatch_srcs, capbatch_srcs;
    char err[1024];
    /* The prefetch thread (one at a time): from a batch's return to the next sbc_next (or
     * sbc_report_step, sbc_close) it owns everything above but the batch's columns; the caller's
     * thread joins it before touching any of it. It only asks and fetches: it never acknowledges
     * the batch being worked on (its seqs wait in bseq), so a restart still gets those rows. */
    pthread_t pf;
    pthread_mutex_t step_mu; /* step_rows, step_us, steps: sbc_report_step adds while it asks */
    int pf_running, pf_rc;   /* pf_rc: -1 it failed (the reason in err) */
    atomic_int pf_stop;
    int ahead_asked; /* the prefetch made fill's ask-ahead for the coming batch */
};

static int fail(sbc_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int prefetch_join(sbc_stream *s);
static int fail(sbc_stream *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int read_token(const sbc_options *o, char out[SB_RPC_TOKEN_HEX + 1], char *err,
                      size_t errlen)
{
    char buf[256] = "";
    if (o->token != NULL) {
        snprintf(buf, sizeof buf, "%s", o->token);
    } else if (o->token_file != NULL) {
        FILE *f = fopen(o->token_file, "r");
        if (f == NULL) {
            snprintf(err, errlen, "token file %s: %s", o->token_file, strerror(errno));
            return -1;
        }
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        buf[strcspn(buf, " \r\n\t")] = '\0';
    } else {
        snprintf(err, errlen,
                 "no token: give the token or the tokenFile `streambatch run "
                 "--serve` printed");
        return -1;
    }
    sb_err e;
    if (sb_rpc_hex64_check(buf, "the token", &e) != 0) {
        snprintf(err, errlen, "%s", e.msg);
        return -1;
    }
    memcpy(out, buf, SB_RPC_TOKEN_HEX + 1);
    return 0;
}

/* A random nonzero id for this open: the controller tells a restarted rank by a new one. */
static uint64_t new_session(const sbc_stream *s)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v || v == 0) {
        uint64_t x = sb_clock_mono_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)s;
        v = splitmix(&x);
    }
    return v ? v : 1;
}

sbc_stream *sbc_open(const sbc_options *o, char *err, size_t errlen)
{
    if (o == NULL || o->address == NULL || *o->address == '\0') {
        snprintf(err, errlen, "no address: give the address `streambatch run --serve` printed");
        return NULL;
    }
    if (o->world_size == 0 || o->rank >= o->world_size || o->batch_size == 0) {
        snprintf(err, errlen,
                 "rank %u of world_size %u, batch_size %u: need rank < world_size "
                 "and batch_size >= 1",
                 o->rank, o->world_size, o->batch_size);
        return NULL;
    }
    if (o->balance != SBC_BALANCE_EQUAL && o->balance != SBC_BALANCE_LBBSP) {
        snprintf(err, errlen, "balance %d: SBC_BALANCE_EQUAL (0) or SBC_BALANCE_LBBSP (1)",
                 o->balance);
        return NULL;
    }
    sbc_stream *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = *o;
    s->o.token = s->o.token_file = s->o.tls_dir = NULL; /* not kept: the caller's strings */
    s->o.address = NULL;
    pthread_mutex_init(&s->step_mu, NULL);
    if (s->o.timeout_ms <= 0)
        s->o.timeout_ms = 600000;
    sb_err e;
    if (read_token(o, s->token, err, errlen) != 0)
        goto fail;
    memcpy(s->creds.token, s->token, sizeof s->token);
    s->rpc.auth = &s->creds;
    s->rpc.max_message_bytes = 64u << 20;
    if (o->tls_dir != NULL && *o->tls_dir) {
        if (sb_rpc_tlsdir_load(&s->tls, o->tls_dir, NULL, &e) != 0) {
            snprintf(err, errlen, "%s", e.msg);
            goto fail;
        }
        sb_rpc_tlsdir_apply(&s->tls, &s->rpc);
    }
    s->ctl = sb_rpc_channel_new(o->address, &s->rpc, &e);
    if (s->ctl == NULL) {
        snprintf(err, errlen, "%s: %s", o->address, e.msg);
        goto fail;
    }
    s->session = new_session(s);
    /* the shuffle's order: a function of (seed, epoch, rank) only */
    s->rng = (o->seeded ? o->seed : 0x5eedULL) ^ ((uint64_t)o->epoch * 0xd1b54a32d192ed03ULL) ^
             ((uint64_t)o->rank * 0x8cb92ba72f3d8dd7ULL);
    return s;
fail:
    sbc_close(s);
    return NULL;
}

static void src_unref(src *x)
{
    if (x != NULL && --x->refs == 0) {
        sb_batch_close(x->b);
        sb_part_free(x->blob);
        free(x);
    }
}

static void batch_release(sbc_stream *s)
{
    for (size_t i = 0; i < s->nbatch_srcs; i++)
        src_unref(s->batch_srcs[i]);
    s->nbatch_srcs = 0;
    for (size_t c = 0; c < s->ncols; c++) {
        free(s->cols[c].name);
        if (s->cols[c].offsets == NULL && c < sizeof s->spare / sizeof *s->spare &&
            s->cols[c].values_cap >= s->spare_cap[c]) {
            free(s->spare[c]);
            s->spare[c] = s->cols[c].values;
            s->spare_cap[c] = s->cols[c].values_cap;
        } else {
            free(s->cols[c].values);
        }
        free(s->cols[c].offsets);
        free(s->cols[c].valid);
    }
    free(s->cols);
    s->cols = NULL;
    s->ncols = s->rows = 0;
}

void sbc_close(sbc_stream *s)
{
    if (s == NULL)
        return;
    prefetch_join(s);
    batch_release(s);
    for (size_t c = 0; c < sizeof s->spare / sizeof *s->spare; c++)
        free(s->spare[c]);
    src_unref(s->last);
    free(s->last_id);
    for (size_t i = s->head; i < s->len; i++)
        src_unref(s->pool[i].s);
    free(s->pool);
    free(s->batch_srcs);
    free(s->cbits);
    free(s->bseq);
    for (size_t i = 0; i < s->nchans; i++) {
        sb_rpc_channel_free(s->chans[i].ch);
        free(s->chans[i].addr);
    }
    free(s->chans);
    if (s->ctl != NULL)
        sb_rpc_channel_free(s->ctl);
    pthread_mutex_destroy(&s->step_mu);
    free(s);
}

const char *sbc_error(const sbc_stream *s)
{
    return s->err;
}

static sb_rpc_channel *chan_for(sbc_stream *s, const char *addr)
{
    for (size_t i = 0; i < s->nchans; i++)
        if (strcmp(s->chans[i].addr, addr) == 0)
            return s->chans[i].ch;
    chan *nc = realloc(s->chans, (s->nchans + 1) * sizeof *nc);
    if (nc == NULL)
        return NULL;
    s->chans = nc;
    sb_err e;
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, &s->rpc, &e);
    char *a = strdup(addr);
    if (ch == NULL || a == NULL) {
        if (ch != NULL)
            sb_rpc_channel_free(ch);
        free(a);
        return NULL;
    }
    s->chans[s->nchans++] = (chan){.addr = a, .ch = ch};
    return ch;
}

static int pool_reserve(sbc_stream *s, size_t more)
{
    if (s->head > 0 && s->len + more > s->cap) { /* compact first */
        memmove(s->pool, s->pool + s->head, (s->len - s->head) * sizeof *s->pool);
        s->len -= s->head;
        s->head = 0;
    }
    if (s->len + more <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 1024;
    while (cap < s->len + more)
        cap *= 2;
    rowref *np = realloc(s->pool, cap * sizeof *np);
    if (np == NULL)
        return -1;
    s->pool = np;
    s->cap = cap;
    return 0;
}

/* One slice of a StreamNext reply: its first (the reply's own fields) or one of `more`. */
typedef struct {
    const char *partition_id, *address;
    uint64_t bytes, rows, row_lo, row_hi, seq;
} slice;

/* Fetches the slice's partition and adds its rows [lo, hi) to the pool. */
static int add_rows(sbc_stream *s, src *x, const slice *r)
{
    size_t n = (size_t)(r->row_hi - r->row_lo);
    if (pool_reserve(s, n) != 0)
        return fail(s, "out of memory");
    for (size_t i = 0; i < n; i++)
        s->pool[s->len++] = (rowref){x, (uint32_t)(r->row_lo + i), r->seq + i};
    x->refs += n;
    return 0;
}

/* The fetch of one slice's partition. Several run at once on a reply's threads (fetch_all):
 * each only reads its job and writes its result. */
typedef struct {
    const slice *r;
    sb_rpc_channel *ch; /* NULL: none (the slice before it in the reply has its partition) */
    int rc;
    void *blob;
    size_t len;
    sb_err e;
} fetch_job;

static void fetch_run(fetch_job *j, int timeout_ms)
{
    /* a lost worker is given up on after a few tries (~3 s): its rows are dealt again */
    sb_data_fetch_opts fo = {.requester_id = "consumer",
                             .flags = SB_DATA_FETCH_NO_VERIFY,
                             .max_retries = 2,
                             .reconnect_wait_ms = 1000};
    j->rc = sb_data_fetch(j->ch, j->r->partition_id, (size_t)j->r->bytes, 0, timeout_ms, &fo,
                          &j->blob, &j->len, NULL, &j->e);
}

/* Takes the fetched partition of slice r (job j: its result) as the stream's last and adds the
 * rows: 0, 1 its worker was lost (reported next time), -1 failed. The blob is taken. */
static int adopt(sbc_stream *s, const slice *r, fetch_job *j)
{
    void *blob = j->blob;
    j->blob = NULL;
    int rc = j->rc;
    if (rc == SB_DATA_ENOTFOUND || rc == SB_DATA_EUNAVAILABLE || rc == SB_DATA_EDEADLINE) {
        sb_part_free(blob);
        /* its worker is gone: the controller has it re-made and deals the rows again */
        if (++s->lost_streak > 20 || s->nlost == 64 || strlen(r->partition_id) >= 256)
            return fail(s, "fetching partition %s from %s: %s (%u fetches failed in a row)",
                        r->partition_id, r->address, j->e.msg, s->lost_streak);
        Streambatch__V1__LostSlice *l = &s->lost[s->nlost];
        *l = (Streambatch__V1__LostSlice)STREAMBATCH__V1__LOST_SLICE__INIT;
        snprintf(s->lost_ids[s->nlost], sizeof s->lost_ids[s->nlost], "%s", r->partition_id);
        l->partition_id = s->lost_ids[s->nlost];
        l->row_lo = r->row_lo;
        l->row_hi = r->row_hi;
        s->lostp[s->nlost++] = l;
        return 1;
    }
    if (rc != 0) {
        sb_part_free(blob);
        return fail(s, "fetching partition %s from %s: %s", r->partition_id, r->address, j->e.msg);
    }
    s->lost_streak = 0;
    src *x = calloc(1, sizeof *x);
    if (x == NULL) {
        sb_part_free(blob);
        return fail(s, "out of memory");
    }
    x->blob = blob;
    sb_err e;
    /* every chunk's crc32c was checked on the way: the structure is checked here */
    if (sb_batch_open_ex(blob, j->len, SB_BATCH_OPEN_SKIP_CHECKSUM, &x->b, &e) != 0) {
        sb_part_free(blob);
        free(x);
        return fail(s, "partition %s: %s", r->partition_id, e.msg);
    }
    if (sb_batch_rows(x->b) != r->rows || r->row_hi > r->rows) {
        size_t got = sb_batch_rows(x->b);
        src_unref((x->refs = 1, x));
        return fail(s, "partition %s has %zu rows, the controller said %llu", r->partition_id, got,
                    (unsigned long long)r->rows);
    }
    char *id = strdup(r->partition_id);
    if (id == NULL) {
        src_unref((x->refs = 1, x));
        return fail(s, "out of memory");
    }
    x->refs = 1; /* the cache's */
    src_unref(s->last);
    free(s->last_id);
    s->last = x;
    s->last_id = id;
    s->fetches++;
    s->bytes += j->len;
    return add_rows(s, x, r);
}

/* The slice's rows into the pool, its partition fetched unless it is the last one fetched (a
 * partition dealt in several slices is fetched once): 0, 1 lost, -1 failed. */
static int take_slice(sbc_stream *s, const slice *r)
{
    if (s->last != NULL && strcmp(s->last_id, r->partition_id) == 0 &&
        sb_batch_rows(s->last->b) == r->rows)
        return add_rows(s, s->last, r);
    fetch_job j = {.r = r, .ch = chan_for(s, r->address)};
    if (j.ch == NULL)
        return fail(s, "out of memory (a channel to %s)", r->address);
    fetch_run(&j, s->o.timeout_ms);
    s->streams++;
    return adopt(s, r, &j);
}

/* Row `seq` of the rank's sequence was consumed (or dropped, or lost: not the rank's to
 * read). 0, or -1 out of memory. */
static int consume(sbc_stream *s, uint64_t seq)
{
    if (seq < s->cbase)
        return 0;
    uint64_t i = seq - s->cbase;
    size_t byte = (size_t)(i / 8);
    if (byte >= s->capcbits) {
        size_t cap = s->capcbits ? s->capcbits * 2 : 256;
        while (cap <= byte)
            cap *= 2;
        uint8_t *nb = realloc(s->cbits, cap);
        if (nb == NULL)
            return -1;
        memset(nb + s->capcbits, 0, cap - s->capcbits);
        s->cbits = nb;
        s->capcbits = cap;
    }
    if (byte >= s->ncbits)
        s->ncbits = byte + 1;
    s->cbits[byte] |= (uint8_t)(1u << (i % 8));
    s->unsent = 1;
    size_t k = 0; /* whole bytes consumed move the base on */
    while (k < s->ncbits && s->cbits[k] == 0xFF)
        k++;
    if (k > 0) {
        memmove(s->cbits, s->cbits + k, s->ncbits - k);
        memset(s->cbits + s->ncbits - k, 0, k);
        s->ncbits -= k;
        s->cbase += 8 * (uint64_t)k;
    }
    return 0;
}

static int consume_range(sbc_stream *s, uint64_t seq, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (consume(s, seq + i) != 0)
            return -1;
    return 0;
}

/* A restarted rank (the controller said so in its first reply): it goes on from what it had
 * consumed, so its counts (drop_last's, LB-BSP's iterations) stay the rank's. */
static void resume(sbc_stream *s, const Streambatch__V1__StreamNextReply *r)
{
    s->emitted = r->resume_rows;
    s->batches = r->resume_batches;
}

/* Fetches run at once for one reply's slices: the workers serve each Data.Fetch on their own
 * threads, and a batch of one-row partitions is hundreds of fetches whose round trips would
 * otherwise add up one after another. Partitions of a few KiB from one peer come in one stream
 * (sb_data_fetch_many), as a task's inputs do (worker/runtime.c): a stream per one-image
 * partition cost the trainer more CPU than the rows' copy (issue 40). A unit is one stream:
 * a peer's small partitions, up to SB_DATA_FETCH_MANY_BYTES together (held until all have
 * come), or one partition alone. */
#define FETCH_THREADS 4

typedef struct {
    size_t *idx; /* the jobs it fetches, in the reply's order (into fetch_set.idx) */
    size_t n;
    uint64_t bytes;
    sb_rpc_channel *ch;
} fetch_unit;

typedef struct {
    fetch_job *jobs;
    fetch_unit *units;
    size_t nunits;
    atomic_size_t next;
    int timeout_ms;
} fetch_set;

/* The unit's partitions in one stream. A partition the peer does not hold is marked so and the
 * rest asked again without it; any other failure (the peer lost, the deadline) is every job's,
 * so each slice is reported lost as when fetched alone. */
static void fetch_unit_many(fetch_set *f, const fetch_unit *u)
{
    const char **ids = malloc(u->n * sizeof *ids);
    size_t *exp = malloc(u->n * sizeof *exp), *lens = malloc(u->n * sizeof *lens);
    size_t *at = malloc(u->n * sizeof *at);
    void **blobs = malloc(u->n * sizeof *blobs);
    if (!ids || !exp || !lens || !at || !blobs) { /* each alone, then */
        for (size_t k = 0; k < u->n; k++)
            fetch_run(&f->jobs[u->idx[k]], f->timeout_ms);
        goto out;
    }
    size_t m = u->n;
    for (size_t k = 0; k < m; k++)
        at[k] = u->idx[k];
    sb_data_fetch_opts fo = {.requester_id = "consumer",
                             .flags = SB_DATA_FETCH_NO_VERIFY,
                             .max_retries = 2,
                             .reconnect_wait_ms = 1000};
    while (m > 0) {
        for (size_t k = 0; k < m; k++) {
            ids[k] = f->jobs[at[k]].r->partition_id;
            exp[k] = (size_t)f->jobs[at[k]].r->bytes;
        }
        size_t failed = 0;
        sb_err e;
        int rc = sb_data_fetch_many(u->ch, ids, exp, m, 0, f->timeout_ms, &fo, blobs, lens, &failed,
                                    NULL, &e);
        if (rc == 0) {
            for (size_t k = 0; k < m; k++) {
                f->jobs[at[k]].rc = 0;
                f->jobs[at[k]].blob = blobs[k];
                f->jobs[at[k]].len = lens[k];
            }
            break;
        }
        if (rc != SB_DATA_ENOTFOUND || failed >= m) {
            for (size_t k = 0; k < m; k++) {
                f->jobs[at[k]].rc = rc;
                f->jobs[at[k]].e = e;
            }
            break;
        }
        f->jobs[at[failed]].rc = rc;
        f->jobs[at[failed]].e = e;
        memmove(at + failed, at + failed + 1, (m - failed - 1) * sizeof *at);
        m--;
    }
out:
    free(ids);
    free(exp);
    free(lens);
    free(at);
    free(blobs);
}

static void *fetch_main(void *arg)
{
    fetch_set *f = arg;
    for (size_t i; (i = atomic_fetch_add(&f->next, 1)) < f->nunits;) {
        const fetch_unit *u = &f->units[i];
        if (u->n == 1)
            fetch_run(&f->jobs[u->idx[0]], f->timeout_ms);
        else
            fetch_unit_many(f, u);
    }
    return NULL;
}

/* Groups the jobs to fetch into units (at most n, their indices in idx): a peer's small
 * partitions together, in the reply's order within each, the units in the order of their
 * first job. */
static size_t fetch_units(fetch_job *jobs, size_t n, fetch_unit *units, size_t *idx)
{
    size_t nunits = 0, used = 0;
    /* first the units' sizes, then their slots in idx: two passes over the same grouping */
    size_t *unit_of = idx + n; /* scratch: the unit of job i */
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].ch == NULL)
            continue;
        uint64_t b = jobs[i].r->bytes;
        size_t u = nunits;
        if (b > 0 && b <= SB_DATA_FETCH_MANY_PART)
            for (size_t k = nunits; k-- > 0;)
                if (units[k].ch == jobs[i].ch && units[k].bytes > 0 &&
                    units[k].bytes + b <= SB_DATA_FETCH_MANY_BYTES &&
                    units[k].n < SB_DATA_FETCH_MANY_MAX) {
                    u = k;
                    break;
                }
        if (u == nunits)
            units[nunits++] = (fetch_unit){.ch = jobs[i].ch, .bytes = 0};
        if (b > 0 && b <= SB_DATA_FETCH_MANY_PART)
            units[u].bytes += b;
        else
            units[u].bytes = 0; /* a large or unknown one: alone, nothing joins it */
        units[u].n++;
        unit_of[i] = u;
    }
    for (size_t k = 0; k < nunits; k++) {
        units[k].idx = idx + used;
        used += units[k].n;
        units[k].n = 0;
    }
    for (size_t i = 0; i < n; i++)
        if (jobs[i].ch != NULL) {
            fetch_unit *u = &units[unit_of[i]];
            u->idx[u->n++] = i;
        }
    return nunits;
}

/* Fetches the partitions of slices x[0..n) at once, each unless the slice before it (or, for the
 * first, the stream's last fetch) has it: into jobs[i]. 0, or -1 out of memory. */
static int fetch_all(sbc_stream *s, const slice *x, size_t n, fetch_job *jobs)
{
    for (size_t i = 0; i < n; i++) {
        const char *prev = i > 0 ? x[i - 1].partition_id : s->last_id;
        uint64_t prev_rows = i > 0 ? x[i - 1].rows : s->last ? sb_batch_rows(s->last->b) : 0;
        jobs[i] = (fetch_job){.r = &x[i]};
        if (prev != NULL && strcmp(prev, x[i].partition_id) == 0 && prev_rows == x[i].rows)
            continue;
        if ((jobs[i].ch = chan_for(s, x[i].address)) == NULL)
            return fail(s, "out of memory (a channel to %s)", x[i].address);
    }
    fetch_unit *units = malloc(n * sizeof *units);
    size_t *idx = malloc(2 * n * sizeof *idx);
    if (units == NULL || idx == NULL) {
        free(units);
        free(idx);
        return fail(s, "out of memory");
    }
    fetch_set f = {.jobs = jobs, .units = units, .timeout_ms = s->o.timeout_ms};
    f.nunits = fetch_units(jobs, n, units, idx);
    atomic_init(&f.next, 0);
    pthread_t th[FETCH_THREADS - 1];
    size_t nth = 0;
    while (nth + 1 < FETCH_THREADS && nth + 1 < f.nunits &&
           pthread_create(&th[nth], NULL, fetch_main, &f) == 0)
        nth++;
    fetch_main(&f); /* (no thread: this one fetches them all) */
    for (size_t i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    s->streams += f.nunits;
    free(units);
    free(idx);
    return 0;
}

/* Takes the reply's slices in order (its first, then `more`): 0, or -1 failed. Their partitions
 * are fetched at once first; a slice whose worker was lost is reported in the next request and
 * its rows count as consumed here. */
static int take_slices(sbc_stream *s, const Streambatch__V1__StreamNextReply *r)
{
    size_t n = r->n_more + 1;
    slice *x = calloc(n, sizeof *x);
    fetch_job *jobs = calloc(n, sizeof *jobs);
    int rc = x == NULL || jobs == NULL ? fail(s, "out of memory") : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const Streambatch__V1__StreamSlice *m = i > 0 ? r->more[i - 1] : NULL;
        x[i] = m ? (slice){m->partition_id, m->address, m->bytes, m->rows,
                           m->row_lo,       m->row_hi,  m->seq}
                 : (slice){r->partition_id, r->address, r->bytes, r->rows,
                           r->row_lo,       r->row_hi,  r->seq};
        if (x[i].row_hi < x[i].row_lo)
            rc = fail(s, "the controller dealt rows %llu..%llu of partition %s",
                      (unsigned long long)x[i].row_lo, (unsigned long long)x[i].row_hi,
                      x[i].partition_id);
    }
    if (rc == 0 && n > 1)
        rc = fetch_all(s, x, n, jobs);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        /* a slice whose partition the one before it had: that one's, unless it was lost (then
         * fetched again here, as one at a time would) */
        int got = n > 1 && jobs[i].ch != NULL ? adopt(s, &x[i], &jobs[i]) : take_slice(s, &x[i]);
        if (got == 1 && consume_range(s, x[i].seq, x[i].row_hi - x[i].row_lo) != 0)
            got = fail(s, "out of memory"); /* a lost slice is not this rank's to consume */
        rc = got < 0 ? -1 : 0;
    }
    for (size_t i = 0; jobs != NULL && i < n; i++)
        sb_part_free(jobs[i].blob); /* (fetched, not taken: a slice before it failed) */
    free(jobs);
    free(x);
    return rc;
}

/* One StreamNext: 1 rows were added or the state moved, 0 wait (slept when `nap`), -1 error.
 * ack_only: only the acknowledgement (nothing dealt). max_rows: the rows wanted now (the
 * controller deals slices until they reach it; 0: one slice). */
static int ask_ex(sbc_stream *s, int nap, int ack_only, uint64_t max_rows)
{
    Streambatch__V1__StreamNextRequest req = STREAMBATCH__V1__STREAM_NEXT_REQUEST__INIT;
    req.rank = s->o.rank;
    req.world_size = s->o.world_size;
    req.epoch = s->o.epoch;
    req.batch_size = s->o.batch_size;
    req.session = s->session;
    req.consumed_base = s->cbase;
    req.consumed_bits.data = s->cbits;
    req.consumed_bits.len = s->ncbits;
    while (req.consumed_bits.len > 0 && s->cbits[req.consumed_bits.len - 1] == 0)
        req.consumed_bits.len--;
    /* the batch being worked on (its seqs in bseq) is not consumed yet: the prefetch asks
     * while it is */
    req.consumed_batches = s->batches - (s->nbseq > 0 ? 1 : 0);
    req.ack_only = ack_only != 0;
    req.max_rows = max_rows;
    uint32_t asked = (uint32_t)s->batches;
    req.lost = s->lostp;
    req.n_lost = s->nlost;
    req.balance = (uint32_t)s->o.balance;
    req.iteration = (uint32_t)s->batches;
    pthread_mutex_lock(&s->step_mu);
    req.step_rows = s->step_rows;
    req.step_us = s->step_us;
    req.steps = s->steps;
    s->step_rows = s->step_us = s->steps = 0;
    pthread_mutex_unlock(&s->step_mu);
    ProtobufCMessage *resp = NULL;
    sb_err e;
    sb_rpc_code code =
        sb_rpc_call_msg(s->ctl, SB_RPC_CONTROL_STREAM_NEXT, &req.base, 30000, 0, &resp, &e);
    if (code != SB_RPC_OK) { /* not delivered: the steps go with the next call */
        pthread_mutex_lock(&s->step_mu);
        s->step_rows += req.step_rows;
        s->step_us += req.step_us;
        s->steps += req.steps;
        pthread_mutex_unlock(&s->step_mu);
    }
    if (code == SB_RPC_UNAVAILABLE) { /* not up yet, or restarting: ask again */
        sb_clock_sleep_ms(50);
        return 0;
    }
    if (code != SB_RPC_OK)
        return fail(s, "StreamNext: %s", e.msg);
    s->unsent = 0; /* delivered: the controller has them */
    s->nlost = 0;
    Streambatch__V1__StreamNextReply *r = (Streambatch__V1__StreamNextReply *)resp;
    s->budget_full = r->budget_full || r->at_cap;
    if (r->restarted)
        resume(s, r);
    if (r->n_batch_sizes > 0) { /* decided sizes never change: the latest list is all we need */
        s->size_from = asked;
        s->nsizes = r->n_batch_sizes < 1024 ? (uint32_t)r->n_batch_sizes : 1024;
        for (uint32_t i = 0; i < s->nsizes; i++)
            s->sizes[i] = r->batch_sizes[i];
    }
    int rc = 1;
    if (r->floor_rows > s->floor_rows)
        s->floor_rows = r->floor_rows;
    switch (r->kind) {
    case STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__SLICE:
        rc = take_slices(s, r) == 0 ? 1 : -1;
        s->dealt = r->dealt_rows;
        break;
    case STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__END:
        s->ended = 1;
        s->end_rows = s->o.drop_last ? r->end_rows : r->dealt_rows;
        s->dealt = r->dealt_rows;
        break;
    case STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__WAIT:
        s->retry_ms = r->retry_ms ? r->retry_ms : 5;
        if (nap)
            sb_clock_sleep_ms(r->retry_ms ? r->retry_ms : 5);
        rc = 0;
        break;
    default:
        rc = fail(s, "%s", r->message && *r->message ? r->message : "the controller refused");
    }
    sb_rpc_msg_free(resp);
    return rc;
}

/* Rows the rank may still yield now: with drop_last only whole batches every rank will have. */
static uint64_t allowed(const sbc_stream *s)
{
    uint64_t lim = s->ended ? s->end_rows : s->o.drop_last ? s->floor_rows : UINT64_MAX;
    return lim > s->emitted ? lim - s->emitted : 0;
}

/* The rows of the next batch: batch_size, or with LB-BSP the size the controller gave this
 * iteration (0: not known yet, ask). */
static size_t batch_now(const sbc_stream *s)
{
    if (s->o.balance != SBC_BALANCE_LBBSP)
        return s->o.batch_size;
    if (s->batches < s->size_from || s->batches - s->size_from >= s->nsizes)
        return 0;
    return s->sizes[s->batches - s->size_from];
}

/* The epoch is over for this rank: the rows left (drop_last's) count as consumed, and the last
 * acknowledgement goes out, so that their partitions are freed and the run can end. Best effort:
 * the run may be gone already once every rank was told. */
static void finish_epoch(sbc_stream *s)
{
    for (size_t i = s->head; i < s->len; i++)
        if (consume(s, s->pool[i].seq) != 0)
            return;
    if (!s->final_acked && s->unsent) {
        s->final_acked = 1;
        char keep[sizeof s->err];
        memcpy(keep, s->err, sizeof keep);
        ask_ex(s, 0, 1, 0);
        memcpy(s->err, keep, sizeof keep);
    }
}

/* The rows of the next batch are ready (or the epoch is over): 1 ready, 0 over, -1 error. */
static int fill(sbc_stream *s)
{
    size_t window = s->o.local_shuffle_buffer;
    uint64_t deadline = sb_clock_mono_ms() + (uint64_t)s->o.timeout_ms;
    for (;;) {
        size_t have = s->len - s->head, b = batch_now(s), want = window > b ? window : b;
        uint64_t ok = allowed(s);
        if (s->ended) {
            if (ok == 0 || have == 0) {
                finish_epoch(s);
                return 0;
            }
            return 1; /* the rest, up to what is allowed (a short last batch without drop_last) */
        }
        /* the window's rows hold their partitions until consumed: when they fill the budget
         * the pipeline waits for this rank, so the window makes do with what it has; likewise
         * when this rank is as far ahead of the others as the balance lets it (they may be
         * waiting for it, in an all-reduce, and not asking) */
        if (b > 0 && have >= b && ok >= b && (have >= want || s->budget_full)) {
            /* Ask ahead once for the next batch's rows, not waiting: a rank dealt its next
             * batch while it works on this one lifts the floor the other ranks wait on (with
             * drop_last a rank yields a batch only once every rank has been dealt it). Else
             * acknowledge the batch consumed, so a restart does not see it again. */
            int ahead = have < b + want && !s->ahead_asked; /* (the prefetch may have) */
            if (ahead ? ask_ex(s, 0, 0, 0) < 0 : s->unsent && ask_ex(s, 0, 1, 0) < 0)
                return -1;
            return 1;
        }
        int rc = ask_ex(s, 1, 0, want > have ? want - have : 0);
        if (rc < 0)
            return -1;
        if (rc == 0 && sb_clock_mono_ms() > deadline)
            return fail(s,
                        "no rows for %d ms (rank %u of %u, epoch %u: the other ranks may not "
                        "be reading, or the pipeline is stuck)",
                        s->o.timeout_ms, s->o.rank, s->o.world_size, s->o.epoch);
        if (rc > 0)
            deadline = sb_clock_mono_ms() + (uint64_t)s->o.timeout_ms;
    }
}

/* Takes the rows of the batch out of the pool, in order or at random within the window. */
static size_t pick_rows(sbc_stream *s, rowref *out, size_t n)
{
    size_t window = s->o.local_shuffle_buffer;
    for (size_t i = 0; i < n; i++) {
        size_t have = s->len - s->head;
        if (window > 1) {
            size_t w = have < window ? have : window;
            size_t j = s->head + (size_t)(splitmix(&s->rng) % w);
            rowref t = s->pool[j];
            s->pool[j] = s->pool[s->head];
            s->pool[s->head] = t;
        }
        out[i] = s->pool[s->head++];
    }
    return n;
}

static int col_init(sbc_stream *s, size_t ci, const sb_column *c, size_t rows)
{
    outcol *oc = &s->cols[ci];
    oc->name = strndup(c->name, c->name_len);
    oc->type = (int)c->type;
    oc->child = (int)c->child_type;
    oc->list_size = c->list_size;
    if (c->type == SB_TYPE_BINARY || c->type == SB_TYPE_UTF8) {
        oc->offsets = malloc((rows + 1) * sizeof *oc->offsets);
        oc->offsets[0] = 0;
    } else {
        oc->width = c->type == SB_TYPE_BOOL         ? 1
                    : c->type == SB_TYPE_FIXED_LIST ? c->list_size * sb_type_width(c->child_type)
                                                    : sb_type_width(c->type);
        oc->values_cap = rows * oc->width;
        if (ci < sizeof s->spare / sizeof *s->spare && s->spare[ci] != NULL &&
            s->spare_cap[ci] >= oc->values_cap && s->spare_cap[ci] / 2 <= oc->values_cap + 4096) {
            oc->values = s->spare[ci]; /* the last batch's (the trainer copied it out) */
            oc->values_cap = s->spare_cap[ci];
            s->spare[ci] = NULL;
            s->spare_cap[ci] = 0;
        } else {
            oc->values = malloc(oc->values_cap ? oc->values_cap : 1);
        }
    }
    oc->valid = malloc(rows ? rows : 1);
    if (oc->name == NULL || oc->valid == NULL || (oc->offsets == NULL && oc->values == NULL))
        return fail(s, "out of memory");
    return 0;
}

static int put_value(sbc_stream *s, outcol *oc, const sb_column *c, size_t i, size_t row)
{
    int valid = sb_column_valid(c, row);
    oc->valid[i] = (uint8_t)valid;
    oc->has_null |= !valid;
    if (oc->offsets != NULL) {
        size_t n = 0;
        const void *p = sb_column_binary(c, row, &n);
        if (oc->values_len + n > oc->values_cap) {
            size_t cap = oc->values_cap ? oc->values_cap * 2 : 4096;
            while (cap < oc->values_len + n)
                cap *= 2;
            uint8_t *nv = realloc(oc->values, cap);
            if (nv == NULL)
                return fail(s, "out of memory");
            oc->values = nv;
            oc->values_cap = cap;
        }
        memcpy(oc->values + oc->values_len, p, n);
        oc->values_len += n;
        oc->offsets[i + 1] = (int64_t)oc->values_len;
    } else if (c->type == SB_TYPE_BOOL) {
        oc->values[i] = (uint8_t)sb_column_bool(c, row);
        oc->values_len = i + 1;
    } else {
        memcpy(oc->values + i * oc->width, (const uint8_t *)c->values + row * oc->width, oc->width);
        oc->values_len = (i + 1) * oc->width;
    }
    return 0;
}

/* The columns of the batch from the picked rows; every partition must have the first's
 * columns. */
static int gather(sbc_stream *s, const rowref *rows, size_t n)
{
    const sb_batch *first = rows[0].s->b;
    s->ncols = sb_batch_ncols(first);
    s->cols = calloc(s->ncols ? s->ncols : 1, sizeof *s->cols);
    if (s->cols == NULL)
        return fail(s, "out of memory");
    for (size_t c = 0; c < s->ncols; c++)
        if (col_init(s, c, sb_batch_column(first, c), n) != 0)
            return -1;
    for (size_t i = 0; i < n; i++) {
        const sb_batch *b = rows[i].s->b;
        if (sb_batch_ncols(b) != s->ncols)
            return fail(s, "partitions of the stream have different columns");
        for (size_t c = 0; c < s->ncols; c++) {
            const sb_column *col = sb_batch_column(b, c);
            if ((int)col->type != s->cols[c].type || col->list_size != s->cols[c].list_size ||
                strncmp(col->name, s->cols[c].name, col->name_len + 1) != 0)
                return fail(s, "partitions of the stream have different columns (%s)",
                            s->cols[c].name);
            if (put_value(s, &s->cols[c], col, i, rows[i].row) != 0)
                return -1;
        }
    }
    for (size_t c = 0; c < s->ncols; c++)
        if (!s->cols[c].has_null) {
            free(s->cols[c].valid);
            s->cols[c].valid = NULL;
        }
    s->rows = n;
    return 0;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The prefetch thread: the next batch's rows (or the shuffle window's) dealt and fetched while
 * the trainer works on this one: one batch ahead, and fill's one slice past it. It stops at
 * pf_stop; a WAIT naps in short steps so that the trainer's next sbc_next does not wait out a long
 * nap. The epoch's end is left to sbc_next (finish_epoch acknowledges, which must follow the
 * batch's consumption). */
static void *prefetch_main(void *arg)
{
    sbc_stream *s = arg;
    while (!atomic_load(&s->pf_stop) && !s->ended) {
        size_t have = s->len - s->head, b = batch_now(s), w = s->o.local_shuffle_buffer;
        size_t want = w > b ? w : b;
        if (b > 0 && have >= want) {
            /* fill's ask-ahead, made here: the same asks in the same order as without the
             * prefetch, so the pool (the shuffle's window) holds the same rows at each pick */
            if (have < b + want && ask_ex(s, 0, 0, 0) < 0)
                s->pf_rc = -1;
            s->ahead_asked = 1;
            break;
        }
        int rc = ask_ex(s, 0, 0, want > have ? want - have : 0);
        if (rc < 0) {
            s->pf_rc = -1;
            break;
        }
        for (uint32_t t = 0; rc == 0 && t < s->retry_ms && !atomic_load(&s->pf_stop); t += 5)
            sb_clock_sleep_ms(5);
    }
    return NULL;
}

static void prefetch_start(sbc_stream *s)
{
    if (s->o.no_prefetch || s->ended || s->pf_running)
        return;
    atomic_store(&s->pf_stop, 0);
    s->pf_rc = s->ahead_asked = 0;
    /* no thread (out of resources): sbc_next fetches in the caller's thread as before */
    s->pf_running = pthread_create(&s->pf, NULL, prefetch_main, s) == 0;
}

/* Stops the prefetch (an ask or fetch in flight completes) and takes the stream back: -1 it
 * had failed (the reason in err). */
static int prefetch_join(sbc_stream *s)
{
    if (!s->pf_running)
        return 0;
    atomic_store(&s->pf_stop, 1);
    pthread_join(s->pf, NULL);
    s->pf_running = 0;
    return s->pf_rc;
}

void sbc_report_step(sbc_stream *s, double seconds)
{
    s->reported = 1;
    if (s->rows == 0 || !(seconds > 0) || seconds > 1e6)
        return; /* no batch out, or a time that means nothing: nothing to learn from */
    pthread_mutex_lock(&s->step_mu); /* the prefetch's ask may be sending them */
    s->step_rows += s->rows;
    s->step_us += (uint64_t)(seconds * 1e6);
    s->steps++;
    pthread_mutex_unlock(&s->step_mu);
}

int sbc_next(sbc_stream *s)
{
    uint64_t t = now_us();
    if (prefetch_join(s) != 0)
        return -1;
    /* the caller's step on the last batch: from its return until now (unless it reports) */
    if (s->yielded_us != 0 && !s->reported && s->rows > 0) {
        s->step_rows += s->rows;
        s->step_us += t - s->yielded_us;
        s->steps++;
    }
    s->yielded_us = 0;
    for (size_t i = 0; i < s->nbseq; i++) /* the last batch is consumed: the next is asked */
        if (consume(s, s->bseq[i]) != 0)
            return fail(s, "out of memory");
    s->nbseq = 0;
    batch_release(s);
    int rc = fill(s);
    s->ahead_asked = 0;
    if (rc <= 0)
        return rc;
    size_t n = batch_now(s), have = s->len - s->head;
    if (n == 0) /* ended past the sizes listed (over 1024 batches in the pool): batch_size */
        n = s->o.batch_size;
    uint64_t ok = allowed(s);
    if (n > have)
        n = have;
    if (n > ok)
        n = (size_t)ok;
    if (n == 0)
        return 0;
    rowref *rows = malloc(n * sizeof *rows);
    if (rows == NULL)
        return fail(s, "out of memory");
    pick_rows(s, rows, n);
    if (n > s->capbseq) {
        uint64_t *nb = realloc(s->bseq, n * sizeof *nb);
        if (nb == NULL) {
            free(rows);
            return fail(s, "out of memory");
        }
        s->bseq = nb;
        s->capbseq = n;
    }
    for (size_t i = 0; i < n; i++)
        s->bseq[i] = rows[i].seq;
    s->nbseq = n;
    rc = gather(s, rows, n);
    /* the batch keeps its sources until the next call (its values are copies, but a caller
     * may still look at the names) */
    for (size_t i = 0; i < n; i++) {
        int seen = 0;
        for (size_t k = s->nbatch_srcs; k-- > 0 && !seen;)
            seen = s->batch_srcs[k] == rows[i].s;
        if (seen) {
            src_unref(rows[i].s);
            continue;
        }
        if (s->nbatch_srcs == s->capbatch_srcs) {
            size_t cap = s->capbatch_srcs ? s->capbatch_srcs * 2 : 16;
            src **nb = realloc(s->batch_srcs, cap * sizeof *nb);
            if (nb == NULL) {
                src_unref(rows[i].s);
                continue;
            }
            s->batch_srcs = nb;
            s->capbatch_srcs = cap;
        }
        s->batch_srcs[s->nbatch_srcs++] = rows[i].s;
    }
    free(rows);
    if (rc != 0)
        return -1;
    s->emitted += n;
    s->batches++;
    s->yielded_us = now_us();
    prefetch_start(s);
    return 1;
}

size_t sbc_rows(const sbc_stream *s)
{
    return s->rows;
}
size_t sbc_ncols(const sbc_stream *s)
{
    return s->ncols;
}
const char *sbc_col_name(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].name : NULL;
}
int sbc_col_type(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].type : 0;
}
int sbc_col_child_type(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].child : 0;
}
uint32_t sbc_col_list_size(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].list_size : 0;
}
const void *sbc_col_values(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].values : NULL;
}
size_t sbc_col_values_len(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].values_len : 0;
}
const int64_t *sbc_col_offsets(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].offsets : NULL;
}
const uint8_t *sbc_col_valid(const sbc_stream *s, size_t c)
{
    return c < s->ncols ? s->cols[c].valid : NULL;
}

void sbc_stats(const sbc_stream *s, uint64_t *rows, uint64_t *dealt, uint64_t *fetches,
               uint64_t *bytes)
{
    *rows = s->emitted;
    *dealt = s->dealt;
    *fetches = s->fetches;
    *bytes = s->bytes;
}

uint64_t sbc_streams(const sbc_stream *s)
{
    return s->streams;
}
