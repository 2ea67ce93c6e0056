/* leader.h — leader election with a coordination.k8s.io/v1 Lease, as client-go does it.
 *
 * Several controller replicas run; only the one holding the Lease reconciles. A candidate
 * acquires the Lease when it does not exist, is held by this identity, has no holder (released),
 * or has expired. Expiry is judged by *locally observed* time, never by comparing clocks: the
 * candidate notes when it last saw the Lease change (its resourceVersion) and considers it
 * expired lease_ms after that moment without a further change. The leader renews every
 * retry_ms (PUT with the resourceVersion it read, so concurrent writers conflict instead of
 * both winning). leaseTransitions is incremented whenever the holder changes.
 *
 * Losing leadership. If no renew succeeded for renew_ms, or the leader sees the Lease held by
 * another identity (someone overwrote it), it stops leading at once: is_leader() turns 0 and
 * on_stopped runs (the controller must then stop acting as leader; the operator exits so it can
 * never be a second leader). An elector that lost leadership does not compete again: start a new
 * one (a new process) for that. on_stopped is not called by sb_leader_stop().
 *
 * Requirements: lease_ms > renew_ms > retry_ms > 0 (defaults 15000 / 10000 / 2000).
 *
 * Threads: sb_leader_start() runs the election on its own thread with its own API client (its
 * own connection); on_started/on_stopped run on that thread and must not call sb_leader_stop().
 * is_leader()/current() are safe from any thread.
 *
 * Ownership: the elector borrows cfg->k8s (it must outlive the elector) and copies the strings.
 * sb_leader_stop() joins the thread, optionally releases the Lease, and frees the elector.
 */
#ifndef SB_CTL_LEADER_H
#define SB_CTL_LEADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "k8s/config.h"

typedef struct sb_leader sb_leader;

typedef struct sb_leader_config {
    sb_k8s_config *k8s;
    const char *namespace, *name;      /* the Lease */
    const char *identity;              /* unique per process: "<pod>_<random>" */
    long lease_ms, renew_ms, retry_ms; /* 0: 15000 / 10000 / 2000 */
    void (*on_started)(void *ud);
    void (*on_stopped)(void *ud);
    void *ud;
} sb_leader_config;

/* Starts competing (own thread + own client). NULL with err set on bad config. */
sb_leader *sb_leader_start(const sb_leader_config *cfg, sb_err *err);
/* 1 while this elector holds the Lease (renewed within renew_ms). */
int sb_leader_is_leader(sb_leader *l);
/* The holder and leaseTransitions last seen on the Lease ("" / 0 before the first read). */
void sb_leader_current(sb_leader *l, char *holder, size_t n, uint32_t *transitions);
/* Stops competing and frees the elector (NULL is a no-op). release=1 and leading: the Lease is
 * written with no holder so a standby takes over at its next try instead of after expiry. */
void sb_leader_stop(sb_leader *l, int release);

#endif
