/* ranklog.c — one rank's log of dealt slices and the rows of them it consumed (ranklog.h): acks
 * drop what is consumed in full, a restart rebuilds the log from the rows not consumed. */

#include "controller/sched/stream/ranklog.h"

#include <stdlib.h>
#include <string.h>

static void ent_free(sb_ranklog_ent *x)
{
    free(x->id);
    free(x->address);
}

void sb_ranklog_free(sb_ranklog *l)
{
    for (size_t i = l->first; i < l->n; i++)
        ent_free(&l->e[i]);
    free(l->e);
    free(l->retired);
    free(l->bits);
    memset(l, 0, sizeof *l);
}

/* Moves the live entries to the front once most of the array is dropped ones. */
static void compact(sb_ranklog *l)
{
    if (l->first < 64 || l->first * 2 < l->n)
        return;
    memmove(l->e, l->e + l->first, (l->n - l->first) * sizeof *l->e);
    l->n -= l->first;
    l->resend = l->resend > l->first ? l->resend - l->first : 0;
    l->resend_end = l->resend_end > l->first ? l->resend_end - l->first : 0;
    l->first = 0;
}

static int push(sb_ranklog_ent **arr, size_t *n, size_t *cap, const sb_ranklog_ent *x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        sb_ranklog_ent *na = realloc(*arr, c * sizeof *na);
        if (na == NULL)
            return -1;
        *arr = na;
        *cap = c;
    }
    sb_ranklog_ent e = *x;
    e.id = strdup(x->id);
    e.address = strdup(x->address ? x->address : "");
    if (e.id == NULL || e.address == NULL) {
        ent_free(&e);
        return -1;
    }
    (*arr)[(*n)++] = e;
    return 0;
}

int sb_ranklog_add(sb_ranklog *l, const char *id, const char *address, uint64_t bytes,
                   uint64_t rows, uint64_t lo, uint64_t hi, uint64_t *seq)
{
    compact(l);
    sb_ranklog_ent x = {.id = (char *)id,
                        .address = (char *)address,
                        .bytes = bytes,
                        .rows = rows,
                        .lo = lo,
                        .hi = hi,
                        .seq = l->next_seq};
    if (push(&l->e, &l->n, &l->cap, &x) != 0)
        return -1;
    *seq = l->next_seq;
    l->next_seq += hi - lo;
    return 0;
}

int sb_ranklog_lost(sb_ranklog *l, const char *id, uint64_t lo, uint64_t hi)
{
    for (size_t i = l->first; i < l->n; i++) {
        sb_ranklog_ent *x = &l->e[i];
        if (!x->lost && x->lo == lo && x->hi == hi && strcmp(x->id, id) == 0) {
            x->lost = 1;
            return 1;
        }
    }
    return 0;
}

static int consumed(const sb_ranklog *l, uint64_t seq)
{
    if (seq < l->base)
        return 1;
    uint64_t i = seq - l->base;
    return i / 8 < l->nbits && (l->bits[i / 8] >> (i % 8) & 1);
}

int sb_ranklog_ack(sb_ranklog *l, uint64_t base, const uint8_t *bits, size_t nbits,
                   uint64_t batches, sb_ranklog_hold_fn hold, void *ctx)
{
    if (base < l->base || base > l->next_seq || nbits > (l->next_seq - base + 7) / 8)
        return -1; /* stale, or rows never dealt: a confused consumer; nothing changes */
    for (uint64_t i = l->next_seq - base; i < (uint64_t)nbits * 8; i++)
        if (bits[i / 8] >> (i % 8) & 1)
            return -1;
    if (nbits > 0) {
        uint8_t *nb = realloc(l->bits, nbits);
        if (nb == NULL)
            return -1;
        memcpy(nb, bits, nbits);
        l->bits = nb;
    }
    l->nbits = nbits;
    l->base = base;
    l->batches = batches;
    while (l->first < l->n) {
        sb_ranklog_ent *x = &l->e[l->first];
        uint64_t s = x->seq;
        while (s < x->seq + (x->hi - x->lo) && consumed(l, s))
            s++;
        if (s < x->seq + (x->hi - x->lo))
            break; /* the oldest slice not consumed in full: later ones wait for it */
        if (!x->lost) {
            l->done_rows += x->hi - x->lo;
            hold(ctx, x->id, -1);
        }
        ent_free(x);
        l->first++;
    }
    if (l->resend < l->first)
        l->resend = l->first;
    return 0;
}

int sb_ranklog_session(const sb_ranklog *l, uint64_t session)
{
    if (session == 0 || l->session == 0 || session == l->session)
        return 0;
    for (size_t i = 0; i < l->nretired; i++)
        if (l->retired[i] == session)
            return -1;
    return 1;
}

/* The rows of the live entries not consumed, as new entries at seqs from 0; *done: the rows of
 * them that were consumed. -1 out of memory. */
static int rebuild(const sb_ranklog *l, sb_ranklog_ent **out, size_t *nout, uint64_t *done)
{
    size_t cap = 0;
    uint64_t seq = 0;
    *out = NULL;
    *nout = 0;
    *done = 0;
    for (size_t i = l->first; i < l->n; i++) {
        const sb_ranklog_ent *x = &l->e[i];
        if (x->lost)
            continue; /* dealt elsewhere */
        uint64_t run = x->lo;
        for (uint64_t r = x->lo; r <= x->hi; r++) {
            int used = r < x->hi && consumed(l, x->seq + (r - x->lo));
            *done += (uint64_t)used;
            if (r < x->hi && !used)
                continue;
            if (r > run) { /* rows [run, r) were not consumed */
                sb_ranklog_ent y = *x;
                y.lo = run;
                y.hi = r;
                y.seq = seq;
                seq += r - run;
                if (push(out, nout, &cap, &y) != 0)
                    return -1;
            }
            run = r + 1;
        }
    }
    return 0;
}

int sb_ranklog_restart(sb_ranklog *l, uint64_t session, sb_ranklog_hold_fn hold, void *ctx,
                       uint64_t *rows, uint64_t *batches)
{
    sb_ranklog_ent *ne = NULL;
    size_t nn = 0;
    uint64_t done = 0;
    uint64_t *ret = realloc(l->retired, (l->nretired + 1) * sizeof *ret);
    if (ret != NULL)
        l->retired = ret;
    if (ret == NULL || rebuild(l, &ne, &nn, &done) != 0) {
        for (size_t i = 0; i < nn; i++)
            ent_free(&ne[i]);
        free(ne);
        return -1;
    }
    for (size_t i = 0; i < nn; i++) /* held by the new slices before the old ones let go */
        hold(ctx, ne[i].id, +1);
    for (size_t i = l->first; i < l->n; i++) {
        if (!l->e[i].lost)
            hold(ctx, l->e[i].id, -1);
        ent_free(&l->e[i]);
    }
    free(l->e);
    if (l->session != 0)
        l->retired[l->nretired++] = l->session;
    l->session = session;
    l->e = ne;
    l->n = l->cap = nn;
    l->first = l->resend = 0;
    l->resend_end = nn;
    l->next_seq = 0;
    for (size_t i = 0; i < nn; i++)
        l->next_seq += ne[i].hi - ne[i].lo;
    l->done_rows += done;
    l->base = 0;
    l->nbits = 0;
    *rows = l->done_rows;
    *batches = l->batches;
    return 0;
}

const sb_ranklog_ent *sb_ranklog_resend(sb_ranklog *l)
{
    return l->resend < l->resend_end ? &l->e[l->resend++] : NULL;
}
