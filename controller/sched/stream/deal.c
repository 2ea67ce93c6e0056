/* deal.c — the stream's dealer (deal.h): slices of the stream's partitions to the ranks that ask,
 * no rank more than one batch (LB-BSP: one iteration) ahead of the one with the fewest rows, rows
 * dealt ahead to the ranks behind within their shares of the budget, the LB-BSP iterations' batch
 * sizes from the ranks' measured speeds, and the partitions released once every slice of them is
 * acknowledged. */

#include "controller/sched/stream/deal.h"

#include "controller/sched/stream/ranklog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A partition with slices dealt and not all acknowledged, in one epoch (with
 * sink.args.cacheEpochs the same partition is dealt again in each epoch: one entry per epoch). */
typedef struct {
    char *id;
    uint32_t epoch;
    uint32_t open;  /* slices not acknowledged yet */
    int fully;      /* every row of it has been dealt */
    uint64_t bytes; /* the partition's: a rank's share counts it in full (it is freed whole) */
    uint32_t *per;  /* open slices per rank of the epoch */
} held;

/* A slice dealt ahead to a rank that did not ask (it gets it first when it asks). */
typedef struct {
    char *id, *address;
    uint64_t bytes, rows, lo, hi;
} ahead_slice;

/* A rank's slices dealt ahead, in order: [first, n). */
typedef struct {
    ahead_slice *q;
    size_t first, n, cap;
    uint64_t rows; /* their rows (counted in dealt already) */
} ahead_q;

/* Rows of a taken partition to deal again (their rank could not read them). */
typedef struct {
    char *id;
    uint64_t lo, hi;
} redeal;

typedef struct {
    uint32_t world, batch; /* fixed by the epoch's first request (0: none yet) */
    redeal *re;            /* slices to deal again, first */
    size_t nre, capre;
    uint64_t *dealt;  /* rows per rank */
    uint8_t *ended;   /* ranks told the epoch is over */
    sb_ranklog *logs; /* per rank: its slices and what it consumed */
    uint64_t *charge; /* per rank: bytes of the held partitions it has an open slice of */
    ahead_q *aq;      /* per rank: slices dealt ahead of its asking */
    uint32_t nended;
    /* the partition being dealt (the stream's oldest not fully dealt) */
    char *id, *address;
    uint64_t bytes, rows, next_row;
    int has_head;
    uint32_t balance; /* SB_DEAL_EQUAL / SB_DEAL_LBBSP, fixed by the first request */
    /* LBBSP: cum[k * world + r] = rows of rank r before iteration k, for k = 0..ndec */
    uint64_t *cum;
    size_t capcum;
    uint32_t ndec; /* iterations decided */
    uint32_t *it;  /* per rank: iterations dealt to it in full */
    double *share; /* scratch: each rank's exact share of an iteration */
} epoch_deal;

/* What the dealer knows of a rank across epochs (LB-BSP's speeds, the metrics). */
typedef struct {
    double us_per_row; /* measured (averaged); 0: nothing reported yet */
    double step_s;     /* the latest reported step */
    uint64_t batch;    /* its size in the latest iteration decided */
} rank_speed;

struct sb_deal {
    uint32_t nepochs;
    uint32_t first; /* epochs before it are over: ended under an earlier leader
                       (sb_sched_stream_first), or passed over by every rank (pass_over) */
    uint32_t drain; /* epochs [drain, first) may still have partitions to release unread */
    uint32_t *lo;   /* per rank: the lowest epoch it asked for here (UINT32_MAX: none yet) */
    uint32_t nlo;   /* ranks in lo (the largest world_size asked with) */
    epoch_deal *ep;
    rank_speed *rk;
    uint32_t nrk;
    uint32_t last_epoch; /* the epoch asked about last (sb_deal_ranks) */
    held *h;
    size_t nh, caph;
};

sb_deal *sb_deal_new(const sb_sched *s)
{
    sb_deal *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    d->nepochs = sb_sched_stream_epochs(s);
    d->first = d->drain = sb_sched_stream_first(s);
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
    free(d->lo);
    for (uint32_t e = 0; e < d->nepochs; e++) {
        free(d->ep[e].dealt);
        free(d->ep[e].ended);
        free(d->ep[e].id);
        free(d->ep[e].address);
        for (size_t i = 0; i < d->ep[e].nre; i++)
            free(d->ep[e].re[i].id);
        free(d->ep[e].re);
        free(d->ep[e].cum);
        free(d->ep[e].it);
        free(d->ep[e].share);
        for (uint32_t r = 0; d->ep[e].logs != NULL && r < d->ep[e].world; r++)
            sb_ranklog_free(&d->ep[e].logs[r]);
        free(d->ep[e].logs);
        for (uint32_t r = 0; d->ep[e].aq != NULL && r < d->ep[e].world; r++) {
            ahead_q *q = &d->ep[e].aq[r];
            for (size_t i = q->first; i < q->n; i++) {
                free(q->q[i].id);
                free(q->q[i].address);
            }
            free(q->q);
        }
        free(d->ep[e].aq);
        free(d->ep[e].charge);
    }
    free(d->rk);
    for (size_t i = 0; i < d->nh; i++) {
        free(d->h[i].id);
        free(d->h[i].per);
    }
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

static held *held_find(sb_deal *d, uint32_t epoch, const char *id)
{
    for (size_t i = 0; i < d->nh; i++)
        if (d->h[i].epoch == epoch && strcmp(d->h[i].id, id) == 0)
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
    free(h->per);
    *h = d->h[--d->nh];
}

typedef struct {
    sb_deal *d;
    sb_sched *s;
    uint64_t now_ms;
    uint32_t epoch, rank;
} hold_ctx;

/* One slice of h more (+1) or fewer (-1) open with the rank: its share's charge follows (a
 * partition counts in full for every rank with a slice of it open). */
static void open_slice(epoch_deal *e, held *h, uint32_t rank, int delta)
{
    if (delta > 0) {
        h->open++;
        if (h->per != NULL && h->per[rank]++ == 0)
            e->charge[rank] += h->bytes;
        return;
    }
    h->open--;
    if (h->per != NULL && h->per[rank] > 0 && --h->per[rank] == 0)
        e->charge[rank] -= h->bytes;
}

/* One slice of the partition more (+1) or fewer (-1) out with a rank (ranklog.h's hold). */
static void hold(void *ctx, const char *id, int delta)
{
    hold_ctx *c = ctx;
    held *h = held_find(c->d, c->epoch, id);
    if (h == NULL)
        return;
    if (delta < 0 && h->open == 0)
        return; /* nothing to free twice */
    open_slice(&c->d->ep[c->epoch], h, c->rank, delta);
    if (delta < 0)
        held_settle(c->d, c->s, h, c->now_ms);
}

/* Rows sent to the rank (those dealt ahead and not sent yet are not). */
static uint64_t sent_rows(const epoch_deal *e, uint32_t rank)
{
    return e->dealt[rank] - e->aq[rank].rows;
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
        held *h = held_find(d, req->epoch, l->id);
        if (h == NULL || h->open == 0 || l->hi - l->lo > e->dealt[req->rank] ||
            !sb_ranklog_lost(&e->logs[req->rank], l->id, l->lo, l->hi))
            continue; /* not a slice of this rank's out there: nothing to deal again */
        if (room(&e->re, &e->capre, e->nre, sizeof *e->re) != 0)
            return -1;
        char *id = strdup(l->id);
        if (id == NULL)
            return -1;
        e->re[e->nre++] = (redeal){.id = id, .lo = l->lo, .hi = l->hi};
        e->dealt[req->rank] -= l->hi - l->lo;
        open_slice(e, h, req->rank, -1);
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

/* Rows of partition id wait to be dealt again. */
static int redeal_pending(const epoch_deal *e, const char *id)
{
    for (size_t i = 0; i < e->nre; i++)
        if (strcmp(e->re[i].id, id) == 0)
            return 1;
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
    rep->kind = SB_DEAL_SLICE; /* (the rest of the reply, a restart's figures, stays) */
    rep->part_id = id;
    rep->address = addr;
    rep->bytes = p->bytes;
    rep->rows = p->rows;
    rep->row_lo = r->lo;
    rep->row_hi = r->lo + n;
    r->lo += n;
    e->dealt[rank] += n;
    held *h = held_find(d, (uint32_t)(e - d->ep), id);
    if (h != NULL)
        open_slice(e, h, rank, +1);
    if (r->lo == r->hi) {
        free(r->id);
        *r = e->re[--e->nre];
        /* all of it dealt only when no other rows of it wait to be dealt again and it is not
         * the head still being dealt (its rows past next_row are not out yet) */
        if (h != NULL && !redeal_pending(e, id) && !(e->has_head && strcmp(e->id, id) == 0)) {
            h->fully = 1;
            held_settle(d, s, h, now_ms);
        }
    }
    rep->dealt_rows = sent_rows(e, rank);
}

static int epoch_alloc(epoch_deal *e, const sb_deal_request *req)
{
    e->dealt = calloc(req->world, sizeof *e->dealt);
    e->ended = calloc(req->world, 1);
    e->logs = calloc(req->world, sizeof *e->logs);
    e->charge = calloc(req->world, sizeof *e->charge);
    e->aq = calloc(req->world, sizeof *e->aq);
    if (req->balance == SB_DEAL_LBBSP) {
        e->capcum = (size_t)req->world * 16;
        e->cum = calloc(e->capcum, sizeof *e->cum); /* iteration 0 starts at 0 rows */
        e->it = calloc(req->world, sizeof *e->it);
        e->share = calloc(req->world, sizeof *e->share);
    }
    if (e->dealt == NULL || e->ended == NULL || e->logs == NULL || e->charge == NULL ||
        e->aq == NULL ||
        (req->balance == SB_DEAL_LBBSP && (e->cum == NULL || e->it == NULL || e->share == NULL))) {
        free(e->dealt);
        free(e->ended);
        free(e->logs);
        free(e->charge);
        free(e->aq);
        free(e->cum);
        free(e->it);
        free(e->share);
        *e = (epoch_deal){0};
        return -1;
    }
    e->world = req->world;
    e->batch = req->batch;
    e->balance = req->balance;
    return 0;
}

static int epoch_bind(epoch_deal *e, const sb_deal_request *req, sb_deal_reply *rep)
{
    if (req->balance > SB_DEAL_LBBSP) {
        snprintf(rep->message, sizeof rep->message, "balance %u: 0 (equal) or 1 (lbbsp)",
                 req->balance);
        return -1;
    }
    if (e->world == 0 && epoch_alloc(e, req) != 0) {
        snprintf(rep->message, sizeof rep->message, "the controller is out of memory");
        return -1;
    }
    if (req->world != e->world || req->batch != e->batch || req->balance != e->balance) {
        static const char *const names[] = {"equal", "lbbsp"};
        snprintf(rep->message, sizeof rep->message,
                 "epoch %u is dealt to world_size %u with batch_size %u, balance %s; this rank "
                 "asked for world_size %u, batch_size %u, balance %s (every rank must ask the "
                 "same)",
                 req->epoch, e->world, e->batch, names[e->balance], req->world, req->batch,
                 names[req->balance]);
        return -1;
    }
    return 0;
}

/* ---- LB-BSP: iterations whose batch sizes follow the ranks' speeds ---- */

/* A rank's timed steps: its speed (microseconds per row) averaged with the previous figure. */
static int speed_report(sb_deal *d, const sb_deal_request *req)
{
    if (req->world > d->nrk) {
        rank_speed *n = realloc(d->rk, req->world * sizeof *n);
        if (n == NULL)
            return -1;
        memset(n + d->nrk, 0, (req->world - d->nrk) * sizeof *n);
        d->rk = n;
        d->nrk = req->world;
    }
    if (req->step_rows == 0 || req->step_us == 0)
        return 0;
    rank_speed *r = &d->rk[req->rank];
    double x = (double)req->step_us / (double)req->step_rows;
    r->us_per_row = r->us_per_row > 0 ? (r->us_per_row + x) / 2 : x;
    r->step_s = (double)req->step_us / 1e6 / (double)(req->steps ? req->steps : 1);
    return 0;
}

/* The next iteration's sizes into out[]: world * batch rows shared in proportion to the ranks'
 * speeds (a rank not measured yet counts at the measured ranks' mean; all equal while none is),
 * at least one row each, rounded by largest remainder so that they sum to the global batch. */
static void lb_sizes(const sb_deal *d, epoch_deal *e, uint64_t *out)
{
    uint32_t w = e->world;
    uint64_t global = (uint64_t)w * e->batch, total = 0;
    double known = 0, sum = 0;
    for (uint32_t r = 0; r < w; r++)
        if (r < d->nrk && d->rk[r].us_per_row > 0) {
            known++;
            sum += 1.0 / d->rk[r].us_per_row;
        }
    double mean = known > 0 ? sum / known : 1.0, speeds = 0;
    for (uint32_t r = 0; r < w; r++) {
        int has = r < d->nrk && d->rk[r].us_per_row > 0;
        e->share[r] = has ? 1.0 / d->rk[r].us_per_row : mean;
        speeds += e->share[r];
    }
    for (uint32_t r = 0; r < w; r++) {
        e->share[r] = (double)global * e->share[r] / speeds;
        out[r] = (uint64_t)e->share[r];
        if (out[r] < 1)
            out[r] = 1;
        total += out[r];
    }
    while (total != global) { /* fewer than w steps: the floors are within one row each */
        uint32_t pick = 0;
        double best = -1e300;
        for (uint32_t r = 0; r < w; r++) {
            double gap = total < global ? e->share[r] - (double)out[r]
                                        : (out[r] > 1 ? (double)out[r] - e->share[r] : -1e300);
            if (gap > best) {
                best = gap;
                pick = r;
            }
        }
        if (total < global) {
            out[pick]++;
            total++;
        } else {
            out[pick]--;
            total--;
        }
    }
}

/* Decides iterations until k are (ndec >= k). -1 out of memory. */
static int lb_decide(sb_deal *d, epoch_deal *e, uint32_t k)
{
    uint32_t w = e->world;
    while (e->ndec < k) {
        size_t need = ((size_t)e->ndec + 2) * w;
        if (need > e->capcum) {
            size_t cap = need * 2;
            uint64_t *n = realloc(e->cum, cap * sizeof *n);
            if (n == NULL)
                return -1;
            e->cum = n;
            e->capcum = cap;
        }
        uint64_t *prev = e->cum + (size_t)e->ndec * w, *next = prev + w;
        lb_sizes(d, e, next);
        for (uint32_t r = 0; r < w; r++) {
            if (r < d->nrk)
                d->rk[r].batch = next[r];
            next[r] += prev[r];
        }
        e->ndec++;
    }
    return 0;
}

static uint64_t lb_cum(const epoch_deal *e, uint32_t k, uint32_t rank)
{
    return e->cum[(size_t)k * e->world + rank];
}

/* m: the iterations every rank has been dealt in full (a lost slice may move a rank back). */
static int lb_common(sb_deal *d, epoch_deal *e, uint32_t *m)
{
    *m = UINT32_MAX;
    for (uint32_t r = 0; r < e->world; r++) {
        while (e->it[r] > 0 && lb_cum(e, e->it[r], r) > e->dealt[r])
            e->it[r]--;
        for (;;) {
            if (lb_decide(d, e, e->it[r] + 1) != 0)
                return -1;
            if (lb_cum(e, e->it[r] + 1, r) > e->dealt[r])
                break;
            e->it[r]++;
        }
        if (e->it[r] < *m)
            *m = e->it[r];
    }
    return 0;
}

/* The rank's floor (rows it may yield now with drop_last) and cap (rows it may be dealt). */
static int limits(sb_deal *d, epoch_deal *e, uint32_t rank, uint64_t *floor, uint64_t *cap)
{
    if (e->balance != SB_DEAL_LBBSP) {
        *floor = min_dealt(e);
        *cap = e->world == 1 ? UINT64_MAX : *floor + e->batch;
        return 0;
    }
    uint32_t m;
    if (lb_common(d, e, &m) != 0)
        return -1;
    *floor = lb_cum(e, m, rank); /* iteration m + 1 is decided: lb_common looked at it */
    *cap = e->world == 1 ? UINT64_MAX : lb_cum(e, m + 1, rank);
    return 0;
}

/* The rank's sizes from `from` on, as far as decided. */
static void lb_list(const epoch_deal *e, uint32_t rank, uint32_t from, sb_deal_reply *rep)
{
    rep->nsizes = 0;
    for (uint32_t k = from; k < e->ndec && rep->nsizes < SB_DEAL_SIZES; k++)
        rep->sizes[rep->nsizes++] = (uint32_t)(lb_cum(e, k + 1, rank) - lb_cum(e, k, rank));
}

/* The next partition of the epoch from the scheduler: 1, 0 none now, -1 out of memory. */
static int take_head(sb_deal *d, epoch_deal *e, sb_sched *s, uint32_t epoch)
{
    sb_sched_stream_part p;
    while (sb_sched_stream_take(s, epoch, &p)) {
        if (room(&d->h, &d->caph, d->nh, sizeof *d->h) != 0)
            return -1;
        char *id = strdup(p.id), *addr = strdup(p.address ? p.address : ""), *hid = strdup(p.id);
        uint32_t *per = calloc(e->world, sizeof *per);
        if (id == NULL || addr == NULL || hid == NULL || per == NULL) {
            free(id);
            free(addr);
            free(hid);
            free(per);
            return -1;
        }
        d->h[d->nh++] =
            (held){.id = hid, .epoch = epoch, .fully = p.rows == 0, .bytes = p.bytes, .per = per};
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

static void reply_end(epoch_deal *e, uint32_t rank, uint64_t floor, sb_deal_reply *rep)
{
    rep->kind = SB_DEAL_END;
    rep->floor_rows = floor;
    rep->dealt_rows = sent_rows(e, rank);
    /* LB-BSP's floor is whole iterations already */
    rep->end_rows = e->balance == SB_DEAL_LBBSP ? floor : floor / e->batch * e->batch;
    if (!e->ended[rank]) {
        e->ended[rank] = 1;
        e->nended++;
    }
}

/* A restarted rank's slice not consumed, dealt to it again (its rows are counted already): 1, or
 * 0 none left. */
static int resend(epoch_deal *e, sb_sched *s, uint32_t rank, sb_deal_reply *rep)
{
    const sb_ranklog_ent *x = sb_ranklog_resend(&e->logs[rank]);
    if (x == NULL)
        return 0;
    static char id[256], addr[256]; /* the reply's strings (one call at a time: under the lock) */
    sb_sched_stream_part p;
    /* where it is now (re-made elsewhere since?); else where it was: a failed fetch reports it */
    int now = sb_sched_stream_get(s, x->id, &p);
    snprintf(id, sizeof id, "%s", x->id);
    snprintf(addr, sizeof addr, "%s", now && p.address ? p.address : x->address);
    rep->kind = SB_DEAL_SLICE;
    rep->part_id = id;
    rep->address = addr;
    rep->bytes = now ? p.bytes : x->bytes;
    rep->rows = x->rows;
    rep->row_lo = x->lo;
    rep->row_hi = x->hi;
    rep->seq = x->seq;
    return 1;
}

/* ---- Per-rank shares: rows dealt ahead to the ranks that hold the others back ----
 * A rank as far ahead as the balance lets it would wait for the slowest rank to ask. Instead
 * the slowest ranks are dealt their next rows ahead, kept in their queues (and in the budget)
 * until they ask: the floor moves and the asker goes on. Each rank may hold at most its share of
 * the budget (budget / world_size) in partitions it has a slice open of, counted in full (a
 * partition is freed whole); past that nothing more is dealt ahead to it, so a rank that stops
 * reading stalls the others only once its own share is full. */

/* The bytes each rank's open slices may hold when dealt ahead (0: no budget, no limit). */
static uint64_t rank_share(const epoch_deal *e, const sb_sched *s)
{
    sb_sched_stats st;
    sb_sched_get_stats(s, &st);
    return st.budget / e->world;
}

/* Rank r's next rows of the head, dealt ahead up to its cap if its share has room (a rank
 * holding nothing always gets one slice): 1 dealt, 0 not, -1 out of memory. */
static int ahead_one(sb_deal *d, epoch_deal *e, sb_sched *s, uint32_t r, uint32_t epoch,
                     uint64_t share)
{
    uint64_t floor, cap;
    if (e->ended[r] || limits(d, e, r, &floor, &cap) != 0 || e->dealt[r] >= cap)
        return e->ended[r] || e->dealt[r] >= cap ? 0 : -1;
    if (!e->has_head) {
        int got = take_head(d, e, s, epoch);
        if (got <= 0)
            return got;
    }
    held *h = held_find(d, epoch, e->id);
    if (h == NULL ||
        (share > 0 && e->charge[r] > 0 && h->per[r] == 0 && e->charge[r] + h->bytes > share))
        return 0;
    ahead_q *q = &e->aq[r];
    if (room(&q->q, &q->cap, q->n, sizeof *q->q) != 0)
        return -1;
    uint64_t n = e->rows - e->next_row;
    if (n > cap - e->dealt[r])
        n = cap - e->dealt[r];
    char *id = strdup(e->id), *addr = strdup(e->address);
    if (id == NULL || addr == NULL) {
        free(id);
        free(addr);
        return -1;
    }
    ahead_slice *x = &q->q[q->n++];
    *x =
        (ahead_slice){.bytes = e->bytes, .rows = e->rows, .lo = e->next_row, .hi = e->next_row + n};
    x->id = id;
    x->address = addr;
    q->rows += n;
    e->next_row += n;
    e->dealt[r] += n;
    open_slice(e, h, r, +1);
    if (e->next_row == e->rows) {
        h->fully = !redeal_pending(e, e->id);
        e->has_head = 0;
    }
    return 1;
}

/* The asker is at its cap: the ranks behind it are dealt ahead, each as far as its cap and
 * share let it. -1 out of memory, else 0. */
static int ahead_all(sb_deal *d, epoch_deal *e, sb_sched *s, uint32_t asker, uint32_t epoch)
{
    uint64_t share = rank_share(e, s);
    for (uint32_t r = 0; r < e->world; r++) {
        if (r == asker || e->dealt[r] >= e->dealt[asker])
            continue; /* not holding the asker back */
        int rc;
        while ((rc = ahead_one(d, e, s, r, epoch, share)) == 1)
            ;
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The rank's oldest slice dealt ahead, sent now: 1, or 0 none. */
static int ahead_send(epoch_deal *e, uint32_t rank, sb_deal_reply *rep)
{
    ahead_q *q = &e->aq[rank];
    if (q->first == q->n)
        return 0;
    static char id[256], addr[256]; /* the reply's strings (one call at a time: under the lock) */
    ahead_slice *x = &q->q[q->first++];
    snprintf(id, sizeof id, "%s", x->id);
    snprintf(addr, sizeof addr, "%s", x->address);
    rep->kind = SB_DEAL_SLICE;
    rep->part_id = id;
    rep->address = addr;
    rep->bytes = x->bytes;
    rep->rows = x->rows;
    rep->row_lo = x->lo;
    rep->row_hi = x->hi;
    q->rows -= x->hi - x->lo;
    rep->dealt_rows = sent_rows(e, rank);
    free(x->id);
    free(x->address);
    if (q->first == q->n)
        q->first = q->n = 0;
    return 1;
}

/* Deals the rank its next slice, a wait or the end (rep->kind set): 0, 1 a slice dealt again
 * (logged already), -1 out of memory, -2 a broken invariant (rep->message says which). Without
 * may_end, an epoch over for the rank that it was not told yet is a wait. */
static int deal_one(sb_deal *d, epoch_deal *e, sb_sched *s, const sb_deal_request *req,
                    uint64_t floor, uint64_t cap, uint64_t now_ms, int may_end, sb_deal_reply *rep)
{
    if (resend(e, s, req->rank, rep))
        return 1;
    if (ahead_send(e, req->rank, rep))
        return 0;
    if (e->ended[req->rank]) {
        reply_end(e, req->rank, floor, rep);
        return 0;
    }
    rep->kind = SB_DEAL_WAIT;
    sb_sched_stream_part again;
    redeal *r = NULL;
    if (e->dealt[req->rank] < cap && redeal_ready(e, s, &again, &r)) {
        deal_again(d, e, s, r, &again, req->rank, cap - e->dealt[req->rank], now_ms, rep);
        return 0;
    }
    if (!e->has_head) {
        int got = take_head(d, e, s, req->epoch);
        if (got < 0)
            return -1;
        if (got == 0) {
            /* (not after other slices of one reply: the rank must fetch those before the
             * stream may end, which it may once every rank got its end) */
            if (may_end && e->nre == 0 && sb_sched_stream_done(s, req->epoch) == 1)
                reply_end(e, req->rank, floor, rep);
            return 0;
        }
    }
    if (e->dealt[req->rank] >= cap) {
        if (ahead_all(d, e, s, req->rank, req->epoch) != 0 ||
            limits(d, e, req->rank, &floor, &cap) != 0)
            return -1;
        if (!e->has_head && take_head(d, e, s, req->epoch) < 0)
            return -1;
    }
    if (e->dealt[req->rank] >= cap || !e->has_head) {
        rep->at_cap = e->dealt[req->rank] >= cap;
        return 0; /* a batch (an iteration) ahead of the slowest rank, whose share is full */
    }
    uint64_t n = e->rows - e->next_row;
    if (n > cap - e->dealt[req->rank])
        n = cap - e->dealt[req->rank];
    held *h = held_find(d, req->epoch, e->id);
    if (h == NULL) { /* cannot be: every head is held */
        snprintf(rep->message, sizeof rep->message, "partition %s is not held", e->id);
        return -2;
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
    rep->dealt_rows = sent_rows(e, req->rank);
    open_slice(e, h, req->rank, +1);
    if (e->next_row == e->rows) {
        h->fully = !redeal_pending(e, e->id); /* (else once those rows are dealt again) */
        e->has_head = 0; /* the reply's strings stay valid: freed at the next head */
    }
    return 0;
}

static void oom(sb_deal_reply *rep)
{
    rep->kind = SB_DEAL_ERROR;
    snprintf(rep->message, sizeof rep->message, "the controller is out of memory");
}

/* The rank's session: a restart rebuilds its log (its rows not consumed dealt to it again) and
 * lets it hear the end again. 0, or -1 (rep says why). */
static int session_check(sb_deal *d, epoch_deal *e, sb_sched *s, const sb_deal_request *req,
                         uint64_t now_ms, sb_deal_reply *rep)
{
    sb_ranklog *l = &e->logs[req->rank];
    hold_ctx hc = {d, s, now_ms, req->epoch, req->rank};
    if (l->next_seq == 0 && l->session == 0 &&
        (req->consumed_base > 0 || req->consumed_batches > 0)) {
        /* a consumer's first request here says it consumed rows: it read this epoch from a
         * controller before this one, whose deal this one does not know */
        snprintf(rep->message, sizeof rep->message,
                 "rank %u was reading epoch %u from a controller that was replaced: this one "
                 "serves the epoch again from its start; read it again (a new iter_batches or "
                 "sbc_open for epoch %u)",
                 req->rank, req->epoch, req->epoch);
        return -1;
    }
    int sess = sb_ranklog_session(l, req->session);
    if (sess < 0) {
        snprintf(rep->message, sizeof rep->message,
                 "rank %u of epoch %u was restarted since: this consumer was replaced", req->rank,
                 req->epoch);
        return -1;
    }
    if (sess > 0) {
        if (sb_ranklog_restart(l, req->session, hold, &hc, &rep->resume_rows,
                               &rep->resume_batches) != 0) {
            oom(rep);
            return -1;
        }
        rep->restarted = 1;
        if (e->ended[req->rank]) { /* it hears the end again after its rows */
            e->ended[req->rank] = 0;
            e->nended--;
        }
    } else if (l->session == 0) {
        l->session = req->session;
    }
    return 0;
}

/* The rank's acknowledgement (after its lost slices: their rows count as consumed in it). A
 * report that cannot be changes nothing (sb_ranklog_ack): the rows stay held. */
static void ack(sb_deal *d, epoch_deal *e, sb_sched *s, const sb_deal_request *req, uint64_t now_ms)
{
    hold_ctx hc = {d, s, now_ms, req->epoch, req->rank};
    sb_ranklog_ack(&e->logs[req->rank], req->consumed_base, req->consumed_bits, req->nconsumed_bits,
                   req->consumed_batches, hold, &hc);
}

/* Rows sent to the rank that it has not reported consumed, as of its latest report. */
static uint64_t rows_in_hand(const sb_ranklog *l)
{
    uint64_t done = l->base;
    for (size_t i = 0; i < l->nbits; i++)
        done += (uint64_t)__builtin_popcount(l->bits[i]);
    return l->next_seq > done ? l->next_seq - done : 0;
}

/* The asker waits with nothing that could come to it: no head, no rows to deal again or dealt
 * ahead, not at its cap, fewer than a batch of rows in hand, and every held partition of the
 * epoch dealt in full, so the budget is
 * full of partitions the consumers pin with rows they hold (a shuffle window's leftovers) and
 * cannot yield without more rows. Seen in stream-test's restart case: 17 partitions held, all
 * dealt, rank 1 with open slices in every one of them. */
static int starved(const sb_deal *d, const epoch_deal *e, sb_sched *s, const sb_deal_request *req)
{
    const ahead_q *q = &e->aq[req->rank];
    if (e->has_head || e->nre > 0 || q->first != q->n || e->ended[req->rank] ||
        rows_in_hand(&e->logs[req->rank]) >= req->batch || sb_sched_stream_done(s, req->epoch) != 0)
        return 0; /* (a rank with a batch's rows in hand can yield them: it is not stuck) */
    for (uint32_t k = d->first; k < req->epoch; k++)
        if (sb_sched_stream_done(s, k) != 1)
            return 0; /* an earlier epoch's partitions fill the budget: its readers free them
                         (a task past it would only make more of them) */
    for (size_t i = 0; i < d->nh; i++)
        if (d->h[i].epoch == req->epoch && !d->h[i].fully)
            return 0;
    return 1;
}

/* The deal proper, once the request's prologue ran (sb_deal_next): the limits, then a slice,
 * a wait or the end into rep. `first`: the request's first deal; only its wait reports a full
 * budget (and may tell the scheduler the rank starves). */
static void deal_step(sb_deal *d, epoch_deal *e, sb_sched *s, const sb_deal_request *req,
                      uint64_t now_ms, int first, sb_deal_reply *rep)
{
    uint64_t floor, cap;
    if (limits(d, e, req->rank, &floor, &cap) != 0) {
        oom(rep);
        return;
    }
    rep->floor_rows = floor;
    rep->dealt_rows = sent_rows(e, req->rank);
    int rc = req->ack_only ? (rep->kind = SB_DEAL_WAIT, 0)
                           : deal_one(d, e, s, req, floor, cap, now_ms, first, rep);
    if (rc == 0 && rep->kind == SB_DEAL_SLICE &&
        sb_ranklog_add(&e->logs[req->rank], rep->part_id, rep->address, rep->bytes, rep->rows,
                       rep->row_lo, rep->row_hi, &rep->seq) != 0)
        rc = -1;
    if (rc == -1) {
        oom(rep);
        return;
    }
    if (rc == -2) {
        rep->kind = SB_DEAL_ERROR;
        return;
    }
    if (rep->kind == SB_DEAL_SLICE) { /* the floor may have moved with the rows dealt */
        if (limits(d, e, req->rank, &floor, &cap) != 0) {
            oom(rep);
            return;
        }
        rep->floor_rows = floor;
    }
    if (e->balance == SB_DEAL_LBBSP)
        lb_list(e, req->rank, req->iteration, rep);
    if (rep->kind == SB_DEAL_WAIT && first) {
        sb_sched_stats st;
        sb_sched_get_stats(s, &st);
        /* no room for another partition of the size the plan makes */
        rep->budget_full = st.budget > 0 && st.in_flight_bytes + st.budget / 16 >= st.budget;
        if (rep->budget_full && !rep->at_cap && !req->ack_only && starved(d, e, s, req))
            sb_sched_stream_starved(s);
    }
}

/* Epochs passed over, after a takeover. A new leader serves the epoch in progress again from its
 * start; its status may lag (written every few seconds), so the ranks may all have ended that
 * epoch already and ask for the next. A rank reads epochs in order, so a rank whose first request
 * here is for a later epoch has ended the ones before: an epoch that every rank passed over so
 * is skipped (its partitions released unread as they come), and one that other ranks read again
 * is refused to a rank that passed it over (it must read it again too, or the others would wait
 * for its share). 0, or -1 with rep an error. */
static int pass_over(sb_deal *d, sb_sched *s, const sb_deal_request *req, uint64_t now_ms,
                     sb_deal_reply *rep)
{
    if (req->world > d->nlo) {
        uint32_t *lo = realloc(d->lo, req->world * sizeof *lo);
        if (lo == NULL) {
            snprintf(rep->message, sizeof rep->message, "the controller is out of memory");
            return -1;
        }
        for (uint32_t r = d->nlo; r < req->world; r++)
            lo[r] = UINT32_MAX;
        d->lo = lo;
        d->nlo = req->world;
    }
    if (req->epoch < d->lo[req->rank])
        d->lo[req->rank] = req->epoch;
    for (;;) { /* skip the first epoch while every rank's first request was past it */
        uint32_t r = 0;
        while (r < req->world && d->lo[r] != UINT32_MAX && d->lo[r] > d->first)
            r++;
        if (r < req->world || d->first >= d->nepochs || d->ep[d->first].world > 0)
            break;
        d->first++;
    }
    for (uint32_t e = d->drain; e < d->first; e++) { /* release what the skipped ones made */
        sb_sched_stream_part p;
        while (sb_sched_stream_take(s, e, &p) == 1) {
            char *id = strdup(p.id);
            if (id != NULL)
                sb_sched_stream_release(s, id, now_ms);
            free(id);
        }
        if (e == d->drain && sb_sched_stream_done(s, e) == 1)
            d->drain = e + 1;
    }
    for (uint32_t e = d->first; e < req->epoch; e++)
        if (d->ep[e].world > 0 && d->lo[req->rank] > e) {
            snprintf(rep->message, sizeof rep->message,
                     "epoch %u is served again from its start after a controller takeover, and "
                     "other ranks read it: rank %u must read it again too (epoch=%u) before "
                     "epoch %u",
                     e, req->rank, e, req->epoch);
            return -1;
        }
    return 0;
}

void sb_deal_next(sb_deal *d, sb_sched *s, const sb_deal_request *req, uint64_t now_ms,
                  sb_deal_reply *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->kind = SB_DEAL_ERROR;
    if (req->epoch >= d->nepochs) {
        snprintf(rep->message, sizeof rep->message,
                 "epoch %u is not served: this stream runs %u epoch%s (sink.args.epochs, or "
                 "streambatch run --epochs)",
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
    if (req->epoch >= d->first && pass_over(d, s, req, now_ms, rep) != 0)
        return;
    if (req->epoch < d->first) {
        snprintf(rep->message, sizeof rep->message,
                 "epoch %u ended before this controller took the stream over (every rank was "
                 "told it ended, or asked for a later epoch); epochs %u to %u are served",
                 req->epoch, d->first, d->nepochs - 1);
        return;
    }
    epoch_deal *e = &d->ep[req->epoch];
    if (epoch_bind(e, req, rep) != 0 || session_check(d, e, s, req, now_ms, rep) != 0)
        return;
    d->last_epoch = req->epoch;
    /* one rank alone needs no balance: it takes whole partitions */
    if (speed_report(d, req) != 0 || lost_all(d, e, s, req) != 0) {
        oom(rep);
        return;
    }
    ack(d, e, s, req, now_ms);
    deal_step(d, e, s, req, now_ms, 1, rep);
}

void sb_deal_more(sb_deal *d, sb_sched *s, const sb_deal_request *req, uint64_t now_ms,
                  sb_deal_reply *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->kind = SB_DEAL_WAIT;
    if (req->ack_only || req->epoch >= d->nepochs)
        return;
    epoch_deal *e = &d->ep[req->epoch];
    if (e->world == 0 || req->rank >= e->world)
        return; /* (sb_deal_next refused the request: no more) */
    deal_step(d, e, s, req, now_ms, 0, rep);
}

size_t sb_deal_ranks(const sb_deal *d, sb_deal_rank *out, size_t max)
{
    const epoch_deal *e = d->nepochs ? &d->ep[d->last_epoch] : NULL;
    size_t n = 0;
    for (uint32_t r = 0; e != NULL && r < e->world && n < max; r++) {
        const rank_speed *k = r < d->nrk ? &d->rk[r] : NULL;
        out[n++] = (sb_deal_rank){
            .rank = r,
            .batch_rows =
                e->balance == SB_DEAL_LBBSP && k != NULL && k->batch ? k->batch : e->batch,
            .step_seconds = k != NULL ? k->step_s : 0,
            .rows_per_s = k != NULL && k->us_per_row > 0 ? 1e6 / k->us_per_row : 0,
            .held_bytes = e->charge[r],
            .ahead_rows = e->aq[r].rows};
    }
    return n;
}

void sb_deal_progress(const sb_deal *d, uint32_t *ended, uint64_t *rows)
{
    uint32_t e = d->first;
    while (e < d->nepochs && d->ep[e].world > 0 && d->ep[e].nended == d->ep[e].world)
        e++;
    *ended = e;
    *rows = 0;
    for (uint32_t r = 0; e < d->nepochs && r < d->ep[e].world; r++)
        *rows += sent_rows(&d->ep[e], r);
}

int sb_deal_all_ended(const sb_deal *d)
{
    for (uint32_t e = d->first; e < d->nepochs; e++)
        if (d->ep[e].world == 0 || d->ep[e].nended < d->ep[e].world)
            return 0;
    return 1;
}
