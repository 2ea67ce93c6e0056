/* leader.c — leader election on a coordination.k8s.io/v1 Lease (see leader.h): a thread that
 * acquires and renews the Lease, judging expiry by locally observed time, and calls on_started /
 * on_stopped as leadership comes and goes. Owns that thread and its own API client. */

#include "controller/operator/leader.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/log.h"
#include "k8s/client.h"

struct sb_leader {
    sb_leader_config cfg;
    char *ns, *name, *identity, *path, *collection;
    sb_k8s_client *client;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    atomic_int leading;
    int ended; /* lost leadership: no longer competes */
    /* last observed Lease (under mu) */
    char observed_rv[64];
    long observed_ms; /* monotonic time of the last observed change */
    char holder[256];
    uint32_t transitions;
    char acquire_time[40];    /* of our own tenure */
    long last_renew_ms;       /* monotonic time of our last successful acquire/renew */
    long other_expires_in_ms; /* another holder's lease: ms until it expires, as observed */
};

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* RFC 3339 with microseconds, as metav1.MicroTime serialises. */
static void micro_time(char *buf, size_t n)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%06ldZ", base, (long)tv.tv_usec);
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* Sleeps up to ms unless stopped; returns 1 when stopped. */
static int wait_ms(sb_leader *l, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&l->mu);
    while (!l->stop)
        if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) != 0)
            break;
    int s = l->stop;
    pthread_mutex_unlock(&l->mu);
    return s;
}

static void fill_spec(cJSON *spec, const char *holder, uint32_t transitions, const char *acquire,
                      const char *renew, long duration_s)
{
    const char *keys[] = {"holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime",
                          "leaseTransitions"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(spec, keys[i]);
    cJSON_AddStringToObject(spec, "holderIdentity", holder);
    cJSON_AddNumberToObject(spec, "leaseDurationSeconds", (double)duration_s);
    cJSON_AddStringToObject(spec, "acquireTime", acquire);
    cJSON_AddStringToObject(spec, "renewTime", renew);
    cJSON_AddNumberToObject(spec, "leaseTransitions", (double)transitions);
}

static long duration_s(const sb_leader *l)
{
    return (l->cfg.lease_ms + 999) / 1000;
}

/* Records what the server now stores (after our own write or a read). */
static void observe(sb_leader *l, const cJSON *lease, long now)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(lease, "metadata");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(lease, "spec");
    const char *rv = jstr(md, "resourceVersion");
    const char *holder = jstr(spec, "holderIdentity");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(spec, "leaseTransitions");
    pthread_mutex_lock(&l->mu);
    if (rv == NULL || strcmp(rv, l->observed_rv) != 0) {
        snprintf(l->observed_rv, sizeof l->observed_rv, "%s", rv ? rv : "");
        l->observed_ms = now;
    }
    snprintf(l->holder, sizeof l->holder, "%s", holder ? holder : "");
    l->transitions = cJSON_IsNumber(tr) ? (uint32_t)tr->valuedouble : 0;
    pthread_mutex_unlock(&l->mu);
}

/* One round of client-go's tryAcquireOrRenew. Returns 1 when we hold the lease now, 0 when
 * another holder has a valid lease, -1 on an error (API unreachable, conflict, ...). *other is
 * set to 1 when the lease is validly held by someone else. */
static int try_acquire_or_renew(sb_leader *l, int *other, char *why, size_t whylen)
{
    *other = 0;
    sb_err err = {0};
    long st = 0;
    char now_s[40];
    micro_time(now_s, sizeof now_s);
    cJSON *lease = sb_k8s_get(l->client, l->path, &st, &err);
    long now = mono_ms();
    if (lease == NULL && st == 404) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "apiVersion", "coordination.k8s.io/v1");
        cJSON_AddStringToObject(o, "kind", "Lease");
        cJSON *md = cJSON_AddObjectToObject(o, "metadata");
        cJSON_AddStringToObject(md, "name", l->name);
        cJSON_AddStringToObject(md, "namespace", l->ns);
        cJSON *spec = cJSON_AddObjectToObject(o, "spec");
        fill_spec(spec, l->identity, 0, now_s, now_s, duration_s(l));
        cJSON *made = sb_k8s_create(l->client, l->collection, o, &st, &err);
        cJSON_Delete(o);
        if (made == NULL) {
            snprintf(why, whylen, "%s", err.msg);
            return -1;
        }
        observe(l, made, mono_ms());
        cJSON_Delete(made);
        snprintf(l->acquire_time, sizeof l->acquire_time, "%s", now_s);
        return 1;
    }
    if (lease == NULL) {
        snprintf(why, whylen, "%s", err.msg);
        return -1;
    }
    observe(l, lease, now);
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(lease, "spec");
    if (spec == NULL)
        spec = cJSON_AddObjectToObject(lease, "spec");
    const char *holder = jstr(spec, "holderIdentity");
    const char *acq = jstr(spec, "acquireTime");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(spec, "leaseTransitions");
    uint32_t transitions = cJSON_IsNumber(tr) ? (uint32_t)tr->valuedouble : 0;
    int mine = holder != NULL && strcmp(holder, l->identity) == 0;
    pthread_mutex_lock(&l->mu);
    long observed = l->observed_ms;
    pthread_mutex_unlock(&l->mu);
    if (!mine && holder != NULL && holder[0] != '\0' && observed + l->cfg.lease_ms > now) {
        snprintf(why, whylen, "held by %s", holder);
        cJSON_Delete(lease);
        *other = 1;
        l->other_expires_in_ms = observed + l->cfg.lease_ms - now;
        return 0;
    }
    int leading = atomic_load(&l->leading);
    if (mine && leading && acq != NULL) {
        /* renew: keep acquireTime and transitions */
        snprintf(l->acquire_time, sizeof l->acquire_time, "%s", acq);
    } else {
        /* a new tenure (another holder before, none, or ours from an earlier run of this
         * identity): client-go counts it as a transition */
        transitions++;
        snprintf(l->acquire_time, sizeof l->acquire_time, "%s", now_s);
    }
    fill_spec(spec, l->identity, transitions, l->acquire_time, now_s, duration_s(l));
    cJSON *stored = sb_k8s_update(l->client, l->path, lease, &st, &err);
    cJSON_Delete(lease);
    if (stored == NULL) {
        snprintf(why, whylen, "%s", err.msg);
        return -1;
    }
    observe(l, stored, mono_ms());
    cJSON_Delete(stored);
    return 1;
}

static void lose(sb_leader *l, const char *why)
{
    atomic_store(&l->leading, 0);
    l->ended = 1;
    sb_log(SB_LOG_WARN, "leader election: lost the lease", "lease", l->name, "identity",
           l->identity, "reason", why, NULL);
    if (l->cfg.on_stopped != NULL)
        l->cfg.on_stopped(l->cfg.ud);
}

static void *run(void *arg)
{
    sb_leader *l = arg;
    char why[SB_ERR_MAX + 64];
    char last_why[sizeof why] = "";
    while (!l->ended) {
        int other = 0;
        why[0] = '\0';
        long sent = mono_ms();
        /* While leading, no request may outlive the renew deadline (client-go bounds the whole
         * renew attempt by it); otherwise half the deadline, at least 1 s. */
        long timeout = l->cfg.renew_ms / 2 > 1000 ? l->cfg.renew_ms / 2 : 1000;
        if (atomic_load(&l->leading)) {
            long left = l->last_renew_ms + l->cfg.renew_ms - sent;
            if (left < timeout)
                timeout = left > 50 ? left : 50;
        }
        sb_k8s_client_set_timeout(l->client, timeout);
        int r = try_acquire_or_renew(l, &other, why, sizeof why);
        long now = mono_ms();
        if (r == 1) {
            /* the deadline counts from when the renew was sent: the server stored it later */
            l->last_renew_ms = sent;
            if (!atomic_load(&l->leading)) {
                atomic_store(&l->leading, 1);
                sb_log(SB_LOG_INFO, "leader election: acquired the lease", "lease", l->name,
                       "identity", l->identity, NULL);
                if (l->cfg.on_started != NULL)
                    l->cfg.on_started(l->cfg.ud);
            }
        } else if (atomic_load(&l->leading)) {
            if (other) {
                lose(l, why);
                break;
            }
            if (now - l->last_renew_ms >= l->cfg.renew_ms) {
                char msg[sizeof why + 64];
                snprintf(msg, sizeof msg, "no renew within %ld ms (last error: %s)",
                         l->cfg.renew_ms, why);
                lose(l, msg);
                break;
            }
        } else if (r < 0 && strcmp(why, last_why) != 0 && strstr(why, ": 409 ") == NULL) {
            /* (a 409 is another candidate's write winning the race: normal) */
            sb_log(SB_LOG_WARN, "leader election: cannot acquire", "lease", l->name, "error", why,
                   NULL);
        }
        if (r < 0)
            snprintf(last_why, sizeof last_why, "%s", why);
        long wait = l->cfg.retry_ms;
        if (!atomic_load(&l->leading) && other && l->other_expires_in_ms + 20 < wait)
            /* a standby tries again right when the holder's lease expires (by our own
             * observation), not up to a retry period later: a faster takeover, no less safe */
            wait = l->other_expires_in_ms + 20;
        if (atomic_load(&l->leading)) {
            /* never sleep past the renew deadline */
            long left = l->last_renew_ms + l->cfg.renew_ms - mono_ms();
            if (left < wait)
                wait = left > 0 ? left : 0;
        }
        if (wait_ms(l, wait))
            break;
    }
    return NULL;
}

static void leader_free(sb_leader *l)
{
    if (l == NULL)
        return;
    sb_k8s_client_free(l->client);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l->path);
    free(l->collection);
    free(l);
}

sb_leader *sb_leader_start(const sb_leader_config *cfg, sb_err *err)
{
    if (cfg == NULL || cfg->k8s == NULL || cfg->name == NULL || cfg->name[0] == '\0' ||
        cfg->identity == NULL || cfg->identity[0] == '\0') {
        sb_err_set(err, "leader election: k8s config, lease name and identity are required");
        return NULL;
    }
    sb_leader *l = calloc(1, sizeof *l);
    if (l == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    l->cfg = *cfg;
    if (l->cfg.lease_ms <= 0)
        l->cfg.lease_ms = 15000;
    if (l->cfg.renew_ms <= 0)
        l->cfg.renew_ms = 10000;
    if (l->cfg.retry_ms <= 0)
        l->cfg.retry_ms = 2000;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!(l->cfg.lease_ms > l->cfg.renew_ms && l->cfg.renew_ms > l->cfg.retry_ms)) {
        sb_err_set(err,
                   "leader election: need lease duration > renew deadline > retry period, got "
                   "%ld / %ld / %ld ms",
                   l->cfg.lease_ms, l->cfg.renew_ms, l->cfg.retry_ms);
        leader_free(l);
        return NULL;
    }
    const char *ns = cfg->namespace != NULL && cfg->namespace[0] != '\0'
                         ? cfg->namespace
                         : sb_k8s_config_namespace(cfg->k8s);
    l->ns = strdup(ns != NULL ? ns : "default");
    l->name = strdup(cfg->name);
    l->identity = strdup(cfg->identity);
    size_t plen = strlen(l->ns ? l->ns : "") + strlen(cfg->name) + 80;
    l->collection = malloc(plen);
    l->path = malloc(plen);
    if (l->ns == NULL || l->name == NULL || l->identity == NULL || l->collection == NULL ||
        l->path == NULL) {
        sb_err_set(err, "out of memory");
        leader_free(l);
        return NULL;
    }
    snprintf(l->collection, plen, "/apis/coordination.k8s.io/v1/namespaces/%s/leases", l->ns);
    snprintf(l->path, plen, "%s/%s", l->collection, l->name);
    l->client = sb_k8s_client_new(cfg->k8s, err);
    if (l->client == NULL) {
        leader_free(l);
        return NULL;
    }
    /* We retry ourselves every retry_ms; a request must not outlive the renew deadline. */
    sb_k8s_client_set_retry(l->client, 1, 100);
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        sb_err_set(err, "leader election: cannot start its thread");
        leader_free(l);
        return NULL;
    }
    return l;
}

int sb_leader_is_leader(sb_leader *l)
{
    return l != NULL && atomic_load(&l->leading);
}

void sb_leader_current(sb_leader *l, char *holder, size_t n, uint32_t *transitions)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    if (holder != NULL && n > 0)
        snprintf(holder, n, "%s", l->holder);
    if (transitions != NULL)
        *transitions = l->transitions;
    pthread_mutex_unlock(&l->mu);
}

/* client-go's release: the record with no holder (transitions kept), written only if we are
 * still the holder (the PUT carries the resourceVersion we read). */
static void release(sb_leader *l)
{
    sb_err err = {0};
    long st = 0;
    cJSON *lease = sb_k8s_get(l->client, l->path, &st, &err);
    if (lease == NULL)
        return;
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(lease, "spec");
    const char *holder = jstr(spec, "holderIdentity");
    if (spec != NULL && holder != NULL && strcmp(holder, l->identity) == 0) {
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(spec, "leaseTransitions");
        uint32_t transitions = cJSON_IsNumber(tr) ? (uint32_t)tr->valuedouble : 0;
        char now_s[40];
        micro_time(now_s, sizeof now_s);
        fill_spec(spec, "", transitions, now_s, now_s, 1);
        cJSON *stored = sb_k8s_update(l->client, l->path, lease, &st, &err);
        if (stored == NULL)
            sb_log(SB_LOG_WARN, "leader election: release failed", "lease", l->name, "error",
                   err.msg, NULL);
        else
            sb_log(SB_LOG_INFO, "leader election: released the lease", "lease", l->name, "identity",
                   l->identity, NULL);
        cJSON_Delete(stored);
    }
    cJSON_Delete(lease);
}

void sb_leader_stop(sb_leader *l, int release_lease)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    if (release_lease && atomic_load(&l->leading))
        release(l);
    atomic_store(&l->leading, 0);
    leader_free(l);
}
