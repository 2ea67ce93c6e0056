/* deal.c — the stream's dealer (deal.h): slices of the stream's partitions to the ranks that ask,
 * no rank more than one batch ahead of the one with the fewest rows, and the partitions released
 * once every slice of them is acknowledged. */

#include "controller/sched/deal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A partition with slices dealt and not all acknowledged. */
typedef struct {
    char *id;
    uint32_t open; /* slices not acknowledged yet */
    int fully;     /* every row of it has been dealt */
} held;

/* Rows of a taken partition to deal again (their rank could not read them). */
typedef struct {
    char *id;
    uint64_t lo, hi;
} redeal;

typedef struct {
    uint32_t world, batch; /* fixed by the epoch's first request (0: none yet) */
    redeal *re;            /* slices to deal again, first */
    size_t nre, capre;
    uint64_t *dealt; /* rows per rank */
    uint8_t *ended;  /* ranks told the epoch is over */
    uint32_t nended;
    /* the partition being dealt (the stream's oldest not fully dealt) */
    char *id, *address;
    uint64_t bytes, rows, next_row;
    int has_head;
} epoch_deal;

struct sb_deal {
    uint32_t nepochs;
    epoch_deal *ep;
    held *h;
    size_t nh, caph;
};

sb_deal *sb_deal_new(const sb_sched *s)
{
    sb_deal *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    d->nepochs = sb_sched_stream_epochs(s);
    d->ep = calloc(d->nepochs ? d->nepochs : 1, sizeof *d->ep);
    if (d->ep == NULL) {
        free(d);
        return NULL;
    }
    return d;
}

void sb_deal_free(sb_deal *d)
{
    if (d == NULL)
        return;
    for (uint32_t e = 0; e < d->nepochs; e++) {
        free(d->ep[e].dealt);
        free(d->ep[e].ended);
        free(d->ep[e].id);
        free(d->ep[e].address);
        for (size_t i = 0; i < d->ep[e].nre; i++)
            free(d->ep[e].re[i].id);
        free(d->ep[e].re);
    }
    for (size_t i = 0; i < d->nh; i++)
        free(d->h[i].id);
    free(d->h);
    free(d->ep);
    free(d);
}

/* Room for one more element in *arr (n used of *cap, doubling). 0, or -1 out of memory. */
static int room(void *arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *na = realloc(*(void **)arr, ncap * elem);
    if (na == NULL)
        return -1;
    *(void **)arr = na;
    *cap = ncap;
    return 0;
}

static held *held_find(sb_deal *d, const char *id)
{
    for (size_t i = 0; i < d->nh; i++)
        if (strcmp(d->h[i].id, id) == 0)
            return &d->h[i];
    return NULL;
}

/* Frees the partition in the scheduler once all of it was dealt and acknowledged. */
static void held_settle(sb_deal *d, sb_sched *s, held *h, uint64_t now_ms)
{
    if (h->open > 0 || !h->fully)
        return;
    sb_sched_stream_release(s, h->id, now_ms);
    free(h->id);
    *h = d->h[--d->nh];
}

static void ack_all(sb_deal *d, sb_sched *s, const sb_deal_request *req, uint64_t now_ms)
{
    for (size_t i = 0; i < req->nacks; i++) {
        held *h = held_find(d, req->acks[i]);
        if (h == NULL || h->open == 0)
            continue; /* unknown, or acknowledged already: nothing to free twice */
        h->open--;
        held_settle(d, s, h, now_ms);
    }
}

static uint64_t min_dealt(const epoch_deal *e)
{
    uint64_t m = UINT64_MAX;
    for (uint32_t r = 0; r < e->world; r++)
        if (e->dealt[r] < m)
            m = e->dealt[r];
    return m;
}

/* The rank's lost slices: out of its count, their partitions re-made, their rows queued to be
 * dealt again (the partition stays held, not fully dealt, until they are). -1 out of memory. */
static int lost_all(sb_deal *d, epoch_deal *e, sb_sched *s, const sb_deal_request *req)
{
    for (size_t i = 0; i < req->nlost; i++) {
        const sb_deal_lost *l = &req->lost[i];
        held *h = held_find(d, l->id);
        if (h == NULL || h->open == 0 || l->hi - l->lo > e->dealt[req->rank])
            continue; /* not a slice out there: nothing to deal again */
        if (room(&e->re, &e->capre, e->nre, sizeof *e->re) != 0)
            return -1;
        char *id = strdup(l->id);
        if (id == NULL)
            return -1;
        e->re[e->nre++] = (redeal){.id = id, .lo = l->lo, .hi = l->hi};
        e->dealt[req->rank] -= l->hi - l->lo;
        h->open--;
        h->fully = 0;
        sb_sched_stream_lost(s, l->id);
    }
    return 0;
}

/* Rows to deal again whose partition is there (re-made): 1 with *r set, 0 none now. */
static int redeal_ready(epoch_deal *e, sb_sched *s, sb_sched_stream_part *p, redeal **r)
{
    for (size_t i = 0; i < e->nre; i++)
        if (sb_sched_stream_get(s, e->re[i].id, p)) {
            *r = &e->re[i];
            return 1;
        }
    return 0;
}

/* Deals rows of a re-made partition to the rank (at most n of them). */
static void deal_again(sb_deal *d, epoch_deal *e, sb_sched *s, redeal *r,
                       const sb_sched_stream_part *p, uint32_t rank, uint64_t n, uint64_t now_ms,
                       sb_deal_reply *rep)
{
    if (n > r->hi - r->lo)
        n = r->hi - r->lo;
    static char id[256], addr[256]; /* the reply's strings (one call at a time: under the lock) */
    snprintf(id, sizeof id, "%s", p->id);
    snprintf(addr, sizeof addr, "%s", p->address ? p->address : "");
    *rep = (sb_deal_reply){.kind = SB_DEAL_SLICE,
                           .part_id = id,
                           .address = addr,
                           .bytes = p->bytes,
                           .rows = p->rows,
                           .row_lo = r->lo,
                           .row_hi = r->lo + n};
    r->lo += n;
    e->dealt[rank] += n;
    held *h = held_find(d, id);
    if (h != NULL)
        h->open++;
    if (r->lo == r->hi) {
        free(r->id);
        *r = e->re[--e->nre];
        int more = 0;
        for (size_t i = 0; i < e->nre; i++)
            more |= strcmp(e->re[i].id, id) == 0;
        if (h != NULL && !more) {
            h->fully = 1;
            held_settle(d, s, h, now_ms);
        }
    }
    rep->dealt_rows = e->dealt[rank];
    rep->floor_rows = min_dealt(e);
}

static int epoch_bind(epoch_deal *e, const sb_deal_request *req, sb_deal_reply *rep)
{
    if (e->world == 0) {
        e->dealt = calloc(req->world, sizeof *e->dealt);
        e->ended = calloc(req->world, 1);
        if (e->dealt == NULL || e->ended == NULL) {
            free(e->dealt);
            free(e->ended);
            e->dealt = NULL;
            e->ended = NULL;
            snprintf(rep->message, sizeof rep->message, "the controller is out of memory");
            return -1;
        }
        e->world = req->world;
        e->batch = req->batch;
    }
    if (req->world != e->world || req->batch != e->batch) {
        snprintf(rep->message, sizeof rep->message,
                 "epoch %u is dealt to world_size %u with batch_size %u; this rank asked for "
                 "world_size %u, batch_size %u (every rank must ask the same)",
                 req->epoch, e->world, e->batch, req->world, req->batch);
        return -1;
    }
    return 0;
}

/* The next partition of the epoch from the scheduler: 1, 0 none now, -1 out of memory. */
static int take_head(sb_deal *d, epoch_deal *e, sb_sched *s, uint32_t epoch)
{
    sb_sched_stream_part p;
    while (sb_sched_stream_take(s, epoch, &p)) {
        if (room(&d->h, &d->caph, d->nh, sizeof *d->h) != 0)
            return -1;
        char *id = strdup(p.id), *addr = strdup(p.address ? p.address : ""), *hid = strdup(p.id);
        if (id == NULL || addr == NULL || hid == NULL) {
            free(id);
            free(addr);
            free(hid);
            return -1;
        }
        d->h[d->nh++] = (held){.id = hid, .open = 0, .fully = p.rows == 0};
        if (p.rows == 0) { /* nothing to deal: free it now */
            free(id);
            free(addr);
            held_settle(d, s, &d->h[d->nh - 1], 0);
            continue;
        }
        free(e->id);
        free(e->address);
        e->id = id;
        e->address = addr;
        e->bytes = p.bytes;
        e->rows = p.rows;
        e->next_row = 0;
        e->has_head = 1;
        return 1;
    }
    return 0;
}

static void reply_end(epoch_deal *e, uint32_t rank, sb_deal_reply *rep)
{
    rep->kind = SB_DEAL_END;
    rep->floor_rows = min_dealt(e);
    rep->dealt_rows = e->dealt[rank];
    rep->end_rows = rep->floor_rows / e->batch * e->batch;
    if (!e->ended[rank]) {
        e->ended[rank] = 1;
        e->nended++;
    }
}

void sb_deal_next(sb_deal *d, sb_sched *s, const sb_deal_request *req, uint64_t now_ms,
                  sb_deal_reply *rep)
{
    memset(rep, 0, sizeof *rep);
    ack_all(d, s, req, now_ms);
    rep->kind = SB_DEAL_ERROR;
    if (req->epoch >= d->nepochs) {
        snprintf(rep->message, sizeof rep->message,
                 "epoch %u is not served: this stream runs %u epoch%s (streambatch run --epochs)",
                 req->epoch, d->nepochs, d->nepochs == 1 ? "" : "s");
        return;
    }
    if (req->world == 0 || req->rank >= req->world || req->batch == 0) {
        snprintf(rep->message, sizeof rep->message,
                 "rank %u of world_size %u with batch_size %u: need rank < world_size and "
                 "batch_size >= 1",
                 req->rank, req->world, req->batch);
        return;
    }
    epoch_deal *e = &d->ep[req->epoch];
    if (epoch_bind(e, req, rep) != 0)
        return;
    /* one rank alone needs no balance: it takes whole partitions */
    if (lost_all(d, e, s, req) != 0) {
        snprintf(rep->message, sizeof rep->message, "the controller is out of memory");
        return;
    }
    uint64_t floor = min_dealt(e), cap = e->world == 1 ? UINT64_MAX : floor + e->batch;
    rep->floor_rows = floor;
    rep->dealt_rows = e->dealt[req->rank];
    if (e->ended[req->rank]) {
        reply_end(e, req->rank, rep);
        return;
    }
    rep->kind = SB_DEAL_WAIT;
    sb_sched_stream_part again;
    redeal *r = NULL;
    if (e->dealt[req->rank] < cap && redeal_ready(e, s, &again, &r)) {
        deal_again(d, e, s, r, &again, req->rank, cap - e->dealt[req->rank], now_ms, rep);
        return;
    }
    if (!e->has_head) {
        int got = take_head(d, e, s, req->epoch);
        if (got < 0) {
            rep->kind = SB_DEAL_ERROR;
            snprintf(rep->message, sizeof rep->message, "the controller is out of memory");
            return;
        }
        if (got == 0) {
            if (e->nre == 0 && sb_sched_stream_done(s, req->epoch) == 1)
                reply_end(e, req->rank, rep);
            return;
        }
    }
    if (e->dealt[req->rank] >= cap)
        return; /* a batch ahead of the rank with the fewest rows: wait for it */
    uint64_t n = e->rows - e->next_row;
    if (n > cap - e->dealt[req->rank])
        n = cap - e->dealt[req->rank];
    held *h = held_find(d, e->id);
    if (h == NULL) { /* cannot be: every head is held */
        rep->kind = SB_DEAL_ERROR;
        snprintf(rep->message, sizeof rep->message, "partition %s is not held", e->id);
        return;
    }
    rep->kind = SB_DEAL_SLICE;
    rep->part_id = e->id;
    rep->address = e->address;
    rep->bytes = e->bytes;
    rep->rows = e->rows;
    rep->row_lo = e->next_row;
    rep->row_hi = e->next_row + n;
    e->next_row += n;
    e->dealt[req->rank] += n;
    rep->dealt_rows = e->dealt[req->rank];
    rep->floor_rows = min_dealt(e);
    h->open++;
    if (e->next_row == e->rows) {
        h->fully = 1;
        e->has_head = 0; /* the reply's strings stay valid: freed at the next head */
    }
}

int sb_deal_all_ended(const sb_deal *d)
{
    for (uint32_t e = 0; e < d->nepochs; e++)
        if (d->ep[e].world == 0 || d->ep[e].nended < d->ep[e].world)
            return 0;
    return 1;
}
