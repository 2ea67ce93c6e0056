/* service.c — Data.Fetch over the partition store (see service.h for the design).
 *
 * Locks: fx->mu guards one fetch's state; ds->mu guards the job queue, the buffer pool, the
 * waiters, the free list and the counters. Order: fx->mu before ds->mu. gRPC is called with
 * fx->mu held (writes, finish) but never with ds->mu held, and lib/rpc never holds its own call
 * lock while running our callbacks, so callbacks may take fx->mu.
 *
 * References on a fetch context (fx->refs): the call (until we end it), each in-memory chunk
 * in flight (until gRPC releases its payload), a queued or running I/O job, a place in the
 * buffer waiters. The last one unpins the store ref and puts the context on the free list.
 */
#include "worker/data/service.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "partition/chunk.h"
#include "partition/crc32c.h"
#include "partition/partition.h"
#include "rpc/chunkmsg.h"
#include "rpc/proto.h"

#define COPY_MAX ((size_t)64 * 1024) /* spilled chunks up to this size are sent as a copy */
#define HEADROOM 32                  /* room before a pooled chunk for the Chunk header */
#define TAILROOM 32                  /* ... and after it for the trailer */
#define FREE_WAIT_MS 30000
#define READ_AHEAD 2  /* spilled chunks read and waiting to be sent, at most */
#define MANY_MAX 4096 /* partitions in one stream (FetchRequest.next_partition_ids), at most */

enum job_kind { JOB_NONE = 0, JOB_PIN, JOB_READ };

typedef struct pbuf {
    struct pbuf *next;
    sb_data_server *ds;
    uint8_t *mem; /* HEADROOM + chunk + TAILROOM bytes */
} pbuf;

typedef struct fx {
    sb_data_server *ds;
    pthread_mutex_t mu;
    atomic_int refs;
    /* --- under mu */
    sb_rpc_call *call; /* NULL once ended */
    char id[SB_STORE_ID_MAX + 1];
    uint64_t req_off;
    size_t chunk;
    sb_store_ref *ref;
    const uint8_t *data; /* in-memory partitions */
    int in_memory;
    size_t len;
    size_t pos;  /* memory: next byte to send; spill: next byte to read */
    int pinned;  /* the pin job ran and succeeded */
    int stalled; /* the ready callback found nothing to send: no write is in flight */
    int pending; /* a job (pin or read) is waiting for a buffer, queued or running */
    struct {
        pbuf *b;
        size_t off, len;
        uint32_t crc;
    } ready[READ_AHEAD]; /* spill: chunks read and not sent yet, in order */
    int nready;
    /* Many partitions in one stream (next_partition_ids): the ids still to send after `id`
     * (malloc'd copies), and the pins of the partitions already sent, kept until the context's
     * last reference goes, as their in-memory chunks may still be in gRPC's hands. */
    char **more;
    size_t nmore, next_more;
    sb_store_ref **done;
    size_t ndone;
    int many; /* the request named more than one partition */
    /* --- under ds->mu */
    int job;
    pbuf *job_buf;
    int in_waiters;
    struct fx *next; /* job queue, waiters or free list */
} fx;

struct sb_data_server {
    sb_store *store;
    size_t chunk;
    int nthreads;
    pthread_t *threads;
    int started_threads;
    int max_bufs;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* jobs for the I/O threads */
    pthread_cond_t idle_cv; /* contexts and buffers coming back */
    int stop;
    int draining;
    int64_t last_end_ms; /* when a fetch last ended (monotonic) */
    fx *jobs_head, *jobs_tail;
    fx *waiters_head, *waiters_tail;
    fx *free_fx;
    fx **all_fx; /* every context ever made (freed with the server) */
    size_t nall, capall;
    pbuf *free_bufs;
    pbuf **all_bufs;
    size_t nbufs, bufs_in_use;
    size_t active, pinned;
    sb_data_server_stats st; /* the uint64 counters */
};

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* ------------------------------------------------------------------------------ buffers */

static uint8_t *pbuf_data(pbuf *b)
{
    return b->mem + HEADROOM;
}

/* A free buffer, or a new one while fewer than max_bufs exist; NULL otherwise. ds->mu held. */
static pbuf *pbuf_get_locked(sb_data_server *ds)
{
    pbuf *b = ds->free_bufs;
    if (b) {
        ds->free_bufs = b->next;
    } else if (ds->nbufs < (size_t)ds->max_bufs) {
        b = calloc(1, sizeof *b);
        if (b && !(b->mem = sb_part_alloc(HEADROOM + ds->chunk + TAILROOM))) {
            free(b);
            b = NULL;
        }
        if (!b)
            return NULL;
        b->ds = ds;
        ds->all_bufs[ds->nbufs++] = b;
    } else {
        return NULL;
    }
    b->next = NULL;
    ds->bufs_in_use++;
    return b;
}

static void push_job_locked(sb_data_server *ds, fx *f, int kind, pbuf *b)
{
    f->job = kind;
    f->job_buf = b;
    f->next = NULL;
    if (ds->jobs_tail)
        ds->jobs_tail->next = f;
    else
        ds->jobs_head = f;
    ds->jobs_tail = f;
    pthread_cond_signal(&ds->cv);
}

/* Gives a buffer back: to the first fetch waiting for one (as its read job), else the pool. */
static void pbuf_put(pbuf *b)
{
    sb_data_server *ds = b->ds;
    pthread_mutex_lock(&ds->mu);
    fx *w = ds->waiters_head;
    if (w) {
        ds->waiters_head = w->next;
        if (!ds->waiters_head)
            ds->waiters_tail = NULL;
        w->in_waiters = 0;
        push_job_locked(ds, w, JOB_READ, b); /* the waiter's reference moves to the job */
    } else {
        b->next = ds->free_bufs;
        ds->free_bufs = b;
        ds->bufs_in_use--;
        pthread_cond_broadcast(&ds->idle_cv);
    }
    pthread_mutex_unlock(&ds->mu);
}

static void pbuf_unpin(void *ud)
{
    pbuf_put(ud);
}

/* ------------------------------------------------------------------------------ contexts */

static fx *fx_get(sb_data_server *ds)
{
    pthread_mutex_lock(&ds->mu);
    fx *f = ds->free_fx;
    if (f) {
        ds->free_fx = f->next;
    } else {
        if (ds->nall == ds->capall) {
            size_t nc = ds->capall ? ds->capall * 2 : 64;
            fx **na = realloc(ds->all_fx, nc * sizeof *na);
            if (!na) {
                pthread_mutex_unlock(&ds->mu);
                return NULL;
            }
            ds->all_fx = na;
            ds->capall = nc;
        }
        f = calloc(1, sizeof *f);
        if (!f) {
            pthread_mutex_unlock(&ds->mu);
            return NULL;
        }
        pthread_mutex_init(&f->mu, NULL);
        f->ds = ds;
        ds->all_fx[ds->nall++] = f;
    }
    ds->active++;
    pthread_mutex_unlock(&ds->mu);
    /* Late callbacks of the context's previous call may still look at it (and find that it is
     * not theirs any more), so the reset happens under its lock. */
    pthread_mutex_lock(&f->mu);
    f->call = NULL;
    f->id[0] = '\0';
    f->req_off = 0;
    f->chunk = ds->chunk;
    f->ref = NULL;
    f->data = NULL;
    f->in_memory = 0;
    f->len = 0;
    f->pos = 0;
    f->pinned = 0;
    f->stalled = 0;
    f->pending = 0;
    f->nready = 0;
    f->job = JOB_NONE;
    f->job_buf = NULL;
    f->in_waiters = 0;
    f->next = NULL;
    f->more = NULL;
    f->nmore = f->next_more = 0;
    f->done = NULL;
    f->ndone = 0;
    f->many = 0;
    pthread_mutex_unlock(&f->mu);
    atomic_store(&f->refs, 1);
    return f;
}

static void fx_unref(fx *f)
{
    if (atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    sb_data_server *ds = f->ds;
    sb_store_ref *ref = f->ref;
    f->ref = NULL;
    if (ref)
        sb_store_unpin(ref);
    /* nothing else refers to the context now: its lists need no lock */
    size_t unpinned = ref ? 1 : 0;
    for (size_t i = 0; i < f->ndone; i++, unpinned++)
        sb_store_unpin(f->done[i]);
    for (size_t i = 0; i < f->nmore; i++)
        free(f->more[i]);
    free(f->more);
    free(f->done);
    f->more = NULL;
    f->done = NULL;
    f->nmore = f->next_more = f->ndone = 0;
    pthread_mutex_lock(&ds->mu);
    ds->pinned -= unpinned;
    f->next = ds->free_fx;
    ds->free_fx = f;
    ds->active--;
    pthread_cond_broadcast(&ds->idle_cv);
    pthread_mutex_unlock(&ds->mu);
}

static void payload_unpin(void *ud)
{
    fx_unref(ud);
}

/* Ends the call (once) with a status; returns the number of references the caller must drop
 * with fx_unref() after unlocking f->mu. f->mu held. */
static int fx_end_locked(fx *f, sb_rpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fx_end_locked(fx *f, sb_rpc_code code, const char *fmt, ...)
{
    if (!f->call)
        return 0;
    char msg[SB_ERR_MAX] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    sb_rpc_call *call = f->call;
    f->call = NULL;
    sb_rpc_call_finish(call, code, msg[0] ? "%s" : NULL, msg);
    int drop = 1; /* the call's reference */
    sb_data_server *ds = f->ds;
    pthread_mutex_lock(&ds->mu);
    if (f->in_waiters) {
        fx **pp = &ds->waiters_head;
        fx *prev = NULL;
        while (*pp && *pp != f) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp) {
            *pp = f->next;
            if (ds->waiters_tail == f)
                ds->waiters_tail = prev;
        }
        f->in_waiters = 0;
        f->pending = 0;
        drop++;
    }
    ds->last_end_ms = mono_ms();
    switch (code) {
    case SB_RPC_OK:
        ds->st.ok++;
        break;
    case SB_RPC_NOT_FOUND:
        ds->st.not_found++;
        break;
    case SB_RPC_OUT_OF_RANGE:
        ds->st.refused++;
        break;
    case SB_RPC_CANCELLED:
        ds->st.cancelled++;
        break;
    default:
        ds->st.errors++;
    }
    pthread_mutex_unlock(&ds->mu);
    for (int i = 0; i < f->nready; i++)
        pbuf_put(f->ready[i].b);
    f->nready = 0;
    if (code != SB_RPC_OK && code != SB_RPC_CANCELLED && code != SB_RPC_NOT_FOUND)
        sb_log(code == SB_RPC_OUT_OF_RANGE ? SB_LOG_INFO : SB_LOG_ERROR, "data: fetch failed",
               "partition", f->id, "code", sb_rpc_code_name(code), "error", msg, (char *)NULL);
    return drop;
}

static void fx_drop(fx *f, int n)
{
    while (n-- > 0)
        fx_unref(f);
}

/* Asks for the next spill read: a job with a free buffer, or a place among the waiters. f->mu
 * held, f->pending == 0. */
static void request_read_locked(fx *f)
{
    sb_data_server *ds = f->ds;
    f->pending = 1;
    atomic_fetch_add(&f->refs, 1);
    pthread_mutex_lock(&ds->mu);
    pbuf *b = pbuf_get_locked(ds);
    if (b) {
        push_job_locked(ds, f, JOB_READ, b);
    } else {
        ds->st.buffer_waits++;
        f->in_waiters = 1;
        f->next = NULL;
        if (ds->waiters_tail)
            ds->waiters_tail->next = f;
        else
            ds->waiters_head = f;
        ds->waiters_tail = f;
    }
    pthread_mutex_unlock(&ds->mu);
}

/* The current partition was sent whole: ends the stream (OK) when it was the last one asked
 * for; otherwise keeps its pin (see fx.done), makes the next id current and queues its pin job,
 * the fetch stalled until the job has run. f->mu held, no write in flight, nothing pending.
 * Returns references to drop. */
static int next_or_end_locked(fx *f)
{
    if (f->next_more >= f->nmore)
        return fx_end_locked(f, SB_RPC_OK, NULL);
    sb_data_server *ds = f->ds;
    if (f->ref != NULL) {
        f->done[f->ndone++] = f->ref; /* sized for every partition of the request */
        f->ref = NULL;
    }
    snprintf(f->id, sizeof f->id, "%s", f->more[f->next_more++]);
    f->req_off = 0;
    f->data = NULL;
    f->in_memory = 0;
    f->len = 0;
    f->pos = 0;
    f->pinned = 0;
    f->stalled = 1; /* do_pin pumps once the partition is pinned */
    f->pending = 1;
    atomic_fetch_add(&f->refs, 1); /* the job's */
    pthread_mutex_lock(&ds->mu);
    push_job_locked(ds, f, JOB_PIN, NULL);
    pthread_mutex_unlock(&ds->mu);
    return 0;
}

/* Sends the next chunk if there is one, ends the stream when everything was sent, or marks the
 * fetch stalled. Called only when no write of this call is in flight (from the ready callback,
 * or by whoever clears `stalled`). f->mu held, f->call set. Returns references to drop. */
static int pump_locked(fx *f)
{
    sb_data_server *ds = f->ds;
    sb_err err;
    f->stalled = 0;
    if (!f->pinned) {
        f->stalled = 1;
        return 0;
    }
    if (f->in_memory) {
        if (f->pos >= f->len)
            return next_or_end_locked(f);
        sb_part_chunk_iter it;
        sb_part_chunk c;
        if (sb_part_chunks_begin(&it, f->data, f->len, f->chunk, f->pos, &err) != 0 ||
            !sb_part_chunks_next(&it, &c))
            return fx_end_locked(f, SB_RPC_INTERNAL, "partition %s: %s", f->id, err.msg);
        atomic_fetch_add(&f->refs, 1); /* released by payload_unpin */
        if (sb_rpc_stream_write_chunk(f->call, c.offset, c.data, c.len, c.crc, f->len,
                                      payload_unpin, f, &err) != 0)
            /* lib/rpc fails a write only when the stream is cancelled or broken */
            return fx_end_locked(f, SB_RPC_CANCELLED, "%s", err.msg);
        f->pos += c.len;
        pthread_mutex_lock(&ds->mu);
        ds->st.chunks++;
        ds->st.bytes += c.len;
        pthread_mutex_unlock(&ds->mu);
        return 0;
    }
    /* Spilled. */
    if (f->nready > 0) {
        pbuf *b = f->ready[0].b;
        size_t off = f->ready[0].off, n = f->ready[0].len;
        uint32_t crc = f->ready[0].crc;
        for (int i = 1; i < f->nready; i++)
            f->ready[i - 1] = f->ready[i];
        f->nready--;
        int rc;
        if (n <= COPY_MAX) {
            /* Frame it in place and let gRPC copy it: the buffer is free again at once. */
            sb_rpc_chunk_frame fr;
            sb_rpc_chunk_frame_encode(&fr, off, n, crc, f->len);
            uint8_t *start = pbuf_data(b) - fr.head_len;
            memcpy(start, fr.head, fr.head_len);
            memcpy(pbuf_data(b) + n, fr.tail, fr.tail_len);
            rc = sb_rpc_stream_write(f->call, start, fr.head_len + n + fr.tail_len, &err);
            pbuf_put(b);
        } else {
            rc = sb_rpc_stream_write_chunk(f->call, off, pbuf_data(b), n, crc, f->len, pbuf_unpin,
                                           b, &err);
        }
        if (rc != 0) /* lib/rpc fails a write only when the stream is cancelled or broken */
            return fx_end_locked(f, SB_RPC_CANCELLED, "%s", err.msg);
        pthread_mutex_lock(&ds->mu);
        ds->st.chunks++;
        ds->st.spill_chunks++;
        ds->st.bytes += n;
        pthread_mutex_unlock(&ds->mu);
    } else if (f->pos >= f->len && !f->pending) {
        return next_or_end_locked(f);
    } else {
        f->stalled = 1;
    }
    if (!f->pending && f->pos < f->len && f->nready < READ_AHEAD)
        request_read_locked(f);
    return 0;
}

/* ------------------------------------------------------------------------------ callbacks */

static void on_ready(sb_rpc_call *call, void *ud)
{
    fx *f = ud;
    pthread_mutex_lock(&f->mu);
    if (f->call != call) { /* a late callback of a call we already ended */
        pthread_mutex_unlock(&f->mu);
        return;
    }
    int drop;
    if (sb_rpc_call_is_cancelled(call))
        drop = fx_end_locked(f, SB_RPC_CANCELLED, "cancelled");
    else
        drop = pump_locked(f);
    pthread_mutex_unlock(&f->mu);
    fx_drop(f, drop);
}

static void on_cancel(sb_rpc_call *call, void *ud)
{
    fx *f = ud;
    pthread_mutex_lock(&f->mu);
    int drop = f->call == call ? fx_end_locked(f, SB_RPC_CANCELLED, "cancelled") : 0;
    pthread_mutex_unlock(&f->mu);
    fx_drop(f, drop);
}

/* Copies the request's next_partition_ids into f (checked by the caller). f->mu held. */
static int take_more(fx *f, const Streambatch__V1__FetchRequest *r)
{
    size_t n = r->n_next_partition_ids;
    if (n == 0)
        return 0;
    f->more = calloc(n, sizeof *f->more);
    f->done = calloc(n, sizeof *f->done);
    if (!f->more || !f->done)
        return -1; /* freed by fx_unref */
    for (size_t i = 0; i < n; i++) {
        if ((f->more[i] = strdup(r->next_partition_ids[i])) == NULL)
            return -1;
        f->nmore = i + 1;
    }
    f->many = 1;
    return 0;
}

static void on_fetch(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_data_server *ds = ud;
    Streambatch__V1__FetchRequest *r =
        (void *)sb_rpc_call_decode(call, &streambatch__v1__fetch_request__descriptor, req, len);
    if (!r)
        return; /* answered INVALID_ARGUMENT */
    if (strlen(r->partition_id) > SB_STORE_ID_MAX) {
        sb_rpc_call_finish(call, SB_RPC_INVALID_ARGUMENT, "partition id is longer than %d bytes",
                           SB_STORE_ID_MAX);
        sb_rpc_msg_free(&r->base);
        return;
    }
    if (r->n_next_partition_ids > MANY_MAX) {
        sb_rpc_call_finish(call, SB_RPC_INVALID_ARGUMENT,
                           "%zu next_partition_ids: at most %d partitions in one stream",
                           r->n_next_partition_ids, MANY_MAX);
        sb_rpc_msg_free(&r->base);
        return;
    }
    for (size_t i = 0; i < r->n_next_partition_ids; i++) {
        size_t l = strlen(r->next_partition_ids[i]);
        if (l == 0 || l > SB_STORE_ID_MAX) {
            sb_rpc_call_finish(call, SB_RPC_INVALID_ARGUMENT,
                               "next_partition_ids[%zu] is %s (ids are 1 to %d bytes)", i,
                               l ? "too long" : "empty", SB_STORE_ID_MAX);
            sb_rpc_msg_free(&r->base);
            return;
        }
    }
    pthread_mutex_lock(&ds->mu);
    int draining = ds->draining;
    pthread_mutex_unlock(&ds->mu);
    if (draining) {
        sb_rpc_call_finish(call, SB_RPC_UNAVAILABLE, "the data server of this worker is stopping");
        sb_rpc_msg_free(&r->base);
        return;
    }
    fx *f = fx_get(ds);
    if (!f) {
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "data server: out of memory");
        sb_rpc_msg_free(&r->base);
        return;
    }
    pthread_mutex_lock(&f->mu);
    if (take_more(f, r) != 0) {
        pthread_mutex_unlock(&f->mu);
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "data server: out of memory");
        sb_rpc_msg_free(&r->base);
        fx_unref(f);
        return;
    }
    f->call = call;
    snprintf(f->id, sizeof f->id, "%s", r->partition_id);
    f->req_off = r->offset;
    if (r->max_chunk_bytes > 0 && r->max_chunk_bytes < f->chunk)
        f->chunk = r->max_chunk_bytes;
    f->pending = 1; /* the pin job */
    pthread_mutex_unlock(&f->mu);
    sb_rpc_msg_free(&r->base);
    sb_rpc_call_set_cancel_cb(call, on_cancel, f);
    sb_rpc_stream_set_ready_cb(call, on_ready, f);
    pthread_mutex_lock(&ds->mu);
    ds->st.fetches++;
    atomic_fetch_add(&f->refs, 1);
    push_job_locked(ds, f, JOB_PIN, NULL);
    pthread_mutex_unlock(&ds->mu);
}

/* ------------------------------------------------------------------------------ I/O jobs */

static void do_pin(fx *f)
{
    sb_data_server *ds = f->ds;
    sb_err err;
    sb_store_ref *ref = NULL;
    int rc = SB_STORE_EFAIL;
    /* id is fixed once the handler returned; the pin may wait, so no lock is held. */
    pthread_mutex_lock(&f->mu);
    int live = f->call != NULL && !sb_rpc_call_is_cancelled(f->call);
    pthread_mutex_unlock(&f->mu);
    if (live)
        rc = sb_store_pin(ds->store, f->id, &ref, &err);
    pthread_mutex_lock(&f->mu);
    f->pending = 0;
    int drop = 0;
    if (!f->call) {
        /* ended meanwhile */
    } else if (!live) {
        drop = fx_end_locked(f, SB_RPC_CANCELLED, "cancelled");
    } else if (rc == SB_STORE_ENOTFOUND) {
        drop = fx_end_locked(f, SB_RPC_NOT_FOUND, "partition %s not found on this worker", f->id);
    } else if (rc != 0) {
        drop = fx_end_locked(f, rc == SB_STORE_ECORRUPT ? SB_RPC_DATA_LOSS : SB_RPC_INTERNAL,
                             "partition %s: %s", f->id, err.msg);
    } else if (f->many && sb_store_ref_len(ref) == 0) {
        /* its chunks would be none, and the next partition's taken for its own */
        drop = fx_end_locked(f, SB_RPC_DATA_LOSS,
                             "partition %s is empty: it cannot be sent among others", f->id);
    } else if (f->req_off > sb_store_ref_len(ref)) {
        drop = fx_end_locked(f, SB_RPC_OUT_OF_RANGE,
                             "offset %" PRIu64 " is past the end of partition %s (%zu bytes)",
                             f->req_off, f->id, sb_store_ref_len(ref));
    } else {
        f->ref = ref;
        ref = NULL;
        pthread_mutex_lock(&ds->mu);
        ds->pinned++;
        pthread_mutex_unlock(&ds->mu);
        f->len = sb_store_ref_len(f->ref);
        f->in_memory = sb_store_ref_in_memory(f->ref) || f->len == 0;
        f->data = sb_store_ref_data(f->ref);
        f->pos = (size_t)f->req_off;
        f->pinned = 1;
        if (f->stalled)
            drop = pump_locked(f);
        else if (!f->in_memory && f->pos < f->len)
            request_read_locked(f); /* read ahead of the first ready callback */
    }
    pthread_mutex_unlock(&f->mu);
    if (ref)
        sb_store_unpin(ref);
    fx_drop(f, drop);
}

static void do_read(fx *f, pbuf *b)
{
    sb_err err;
    pthread_mutex_lock(&f->mu);
    if (!f->call) {
        f->pending = 0;
        pthread_mutex_unlock(&f->mu);
        pbuf_put(b);
        return;
    }
    size_t off = f->pos;
    size_t end = (off / f->chunk + 1) * f->chunk;
    if (end > f->len)
        end = f->len;
    size_t want = end - off;
    sb_store_ref *ref = f->ref;
    pthread_mutex_unlock(&f->mu);
    /* f->pos, f->ref and f->len do not change while our job is pending. */
    ssize_t n = sb_store_read(ref, off, pbuf_data(b), want, &err);
    uint32_t crc = n > 0 ? sb_crc32c(0, pbuf_data(b), (size_t)n) : 0;
    pthread_mutex_lock(&f->mu);
    f->pending = 0;
    int drop = 0;
    if (!f->call) {
        pbuf_put(b);
    } else if (n != (ssize_t)want) {
        pbuf_put(b);
        if (n >= 0)
            sb_err_set(&err, "read %zd of %zu bytes", n, want);
        drop = fx_end_locked(f, n == SB_STORE_ECORRUPT ? SB_RPC_DATA_LOSS : SB_RPC_INTERNAL,
                             "partition %s at offset %zu: %s", f->id, off, err.msg);
    } else {
        f->ready[f->nready].b = b;
        f->ready[f->nready].off = off;
        f->ready[f->nready].len = want;
        f->ready[f->nready].crc = crc;
        f->nready++;
        f->pos = end;
        if (f->stalled)
            drop = pump_locked(f);
        else if (f->pos < f->len && f->nready < READ_AHEAD)
            request_read_locked(f); /* keep reading ahead */
    }
    pthread_mutex_unlock(&f->mu);
    fx_drop(f, drop);
}

static void *io_main(void *arg)
{
    sb_data_server *ds = arg;
    pthread_mutex_lock(&ds->mu);
    for (;;) {
        while (!ds->jobs_head && !ds->stop)
            pthread_cond_wait(&ds->cv, &ds->mu);
        fx *f = ds->jobs_head;
        if (!f)
            break; /* stopping and nothing queued */
        ds->jobs_head = f->next;
        if (!ds->jobs_head)
            ds->jobs_tail = NULL;
        int kind = f->job;
        pbuf *b = f->job_buf;
        f->job = JOB_NONE;
        f->job_buf = NULL;
        f->next = NULL;
        pthread_mutex_unlock(&ds->mu);
        if (kind == JOB_PIN)
            do_pin(f);
        else
            do_read(f, b);
        fx_unref(f); /* the job's reference */
        pthread_mutex_lock(&ds->mu);
    }
    pthread_mutex_unlock(&ds->mu);
    return NULL;
}

/* ------------------------------------------------------------------------------ API */

int sb_data_server_new(const sb_data_server_config *cfg, sb_data_server **out, sb_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->store)
        return sb_err_set(err, "data server: no store");
    if (cfg->chunk_bytes > SB_PART_CHUNK_MAX)
        return sb_err_set(err, "data server: chunk size %zu exceeds the maximum %zu",
                          cfg->chunk_bytes, SB_PART_CHUNK_MAX);
    if (cfg->io_threads < 0 || cfg->io_threads > 64 || cfg->spill_buffers < 0 ||
        cfg->spill_buffers > 4096)
        return sb_err_set(err, "data server: io_threads must be 0..64 and spill_buffers 0..4096");
    sb_data_server *ds = calloc(1, sizeof *ds);
    if (!ds)
        return sb_err_set(err, "data server: out of memory");
    ds->store = cfg->store;
    ds->chunk = cfg->chunk_bytes ? cfg->chunk_bytes : SB_PART_CHUNK_MAX;
    ds->nthreads = cfg->io_threads ? cfg->io_threads : 2;
    ds->max_bufs = cfg->spill_buffers ? cfg->spill_buffers : 8;
    pthread_mutex_init(&ds->mu, NULL);
    pthread_cond_init(&ds->cv, NULL);
    cond_init_mono(&ds->idle_cv);
    ds->threads = calloc((size_t)ds->nthreads, sizeof *ds->threads);
    ds->all_bufs = calloc((size_t)ds->max_bufs, sizeof *ds->all_bufs);
    if (!ds->threads || !ds->all_bufs) {
        sb_data_server_free(ds);
        return sb_err_set(err, "data server: out of memory");
    }
    for (int i = 0; i < ds->nthreads; i++) {
        int e = pthread_create(&ds->threads[i], NULL, io_main, ds);
        if (e != 0) {
            sb_data_server_free(ds);
            return sb_err_set(err, "data server: cannot start an I/O thread: %s", strerror(e));
        }
        ds->started_threads++;
    }
    *out = ds;
    return 0;
}

int sb_data_server_register(sb_data_server *ds, sb_rpc_server *rpc, sb_err *err)
{
    if (sb_rpc_server_add_stream(rpc, SB_RPC_DATA_FETCH, on_fetch, ds, err) != 0)
        return sb_err_wrap(err, "data server");
    return 0;
}

void sb_data_server_get_stats(sb_data_server *ds, sb_data_server_stats *out)
{
    pthread_mutex_lock(&ds->mu);
    *out = ds->st;
    out->active = ds->active;
    out->pinned = ds->pinned;
    out->buffers = ds->nbufs;
    out->buffers_in_use = ds->bufs_in_use;
    pthread_mutex_unlock(&ds->mu);
}

int sb_data_server_wait_idle(sb_data_server *ds, int timeout_ms, sb_err *err)
{
    struct timespec dl;
    deadline_in(&dl, timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&ds->mu);
    while (ds->active > 0 || ds->bufs_in_use > 0)
        if (pthread_cond_timedwait(&ds->idle_cv, &ds->mu, &dl) == ETIMEDOUT)
            break;
    size_t active = ds->active, bufs = ds->bufs_in_use, pinned = ds->pinned;
    pthread_mutex_unlock(&ds->mu);
    if (active || bufs)
        return sb_err_set(err,
                          "data server: %zu fetches still alive (%zu pins), %zu buffers out after "
                          "%d ms",
                          active, pinned, bufs, timeout_ms);
    return 0;
}

int sb_data_server_drain(sb_data_server *ds, int grace_ms, int linger_ms)
{
    pthread_mutex_lock(&ds->mu);
    ds->draining = 1;
    pthread_mutex_unlock(&ds->mu);
    (void)sb_data_server_wait_idle(ds, grace_ms, NULL);
    pthread_mutex_lock(&ds->mu);
    int left = (int)ds->active;
    int64_t since = mono_ms() - ds->last_end_ms;
    int recent = ds->last_end_ms != 0 && since < linger_ms;
    pthread_mutex_unlock(&ds->mu);
    if (recent) {
        struct timespec t = {(time_t)(linger_ms / 1000), (long)(linger_ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
    }
    return left;
}

void sb_data_server_free(sb_data_server *ds)
{
    if (!ds)
        return;
    sb_err err;
    if (ds->started_threads && sb_data_server_wait_idle(ds, FREE_WAIT_MS, &err) != 0) {
        sb_log(SB_LOG_ERROR, "data server: not freed (was the rpc server shut down first?)",
               "error", err.msg, (char *)NULL);
        return;
    }
    pthread_mutex_lock(&ds->mu);
    ds->stop = 1;
    pthread_cond_broadcast(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
    for (int i = 0; i < ds->started_threads; i++)
        pthread_join(ds->threads[i], NULL);
    for (size_t i = 0; i < ds->nall; i++) {
        pthread_mutex_destroy(&ds->all_fx[i]->mu);
        free(ds->all_fx[i]);
    }
    for (size_t i = 0; i < ds->nbufs; i++) {
        sb_part_free(ds->all_bufs[i]->mem);
        free(ds->all_bufs[i]);
    }
    free(ds->all_fx);
    free(ds->all_bufs);
    free(ds->threads);
    pthread_mutex_destroy(&ds->mu);
    pthread_cond_destroy(&ds->cv);
    pthread_cond_destroy(&ds->idle_cv);
    free(ds);
}
