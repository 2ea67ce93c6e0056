/* informer.c — list + watch of one Kubernetes collection (see informer.h): a thread that lists,
 * watches from the list's resourceVersion, parses the chunked watch body incrementally, lists
 * again on 410 Gone, and calls add/update/delete callbacks. Owns the local cache (objects by
 * key), the thread and its client. */

#include "k8s/informer.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "doc/doc.h"
#include "k8s/client.h"

#define MAX_LINE (16u * 1024 * 1024)
#define BACKOFF_MIN_MS 800L
#define BACKOFF_MAX_MS 30000L

struct sb_k8s_informer {
    sb_k8s_config *cfg;
    char *path, *selector;
    sb_k8s_informer_handlers h;
    int watch_timeout_s;

    pthread_mutex_t mu; /* cache, rv, synced, stats */
    pthread_cond_t cv;
    cJSON *cache; /* object: key -> object */
    char rv[128];
    int synced;
    sb_k8s_informer_stats st;

    /* Watch-thread state. */
    char *line;
    size_t line_n, line_cap;
    int line_overflow;
    int relist;
    int event_seen;

    pthread_t thread;
    int running;
    atomic_int stop;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

sb_k8s_informer *sb_k8s_informer_new(sb_k8s_config *cfg, const char *path,
                                     const char *label_selector, const sb_k8s_informer_handlers *h,
                                     sb_err *err)
{
    sb_k8s_informer *inf = calloc(1, sizeof *inf);
    if (inf == NULL)
        goto oom;
    inf->cfg = cfg;
    inf->path = strdup(path);
    inf->selector = label_selector != NULL && label_selector[0] ? strdup(label_selector) : NULL;
    inf->cache = cJSON_CreateObject();
    if (inf->path == NULL || inf->cache == NULL ||
        (label_selector && label_selector[0] && !inf->selector)) {
        free(inf->path);
        free(inf->selector);
        cJSON_Delete(inf->cache);
        free(inf);
        goto oom;
    }
    if (h != NULL)
        inf->h = *h;
    inf->watch_timeout_s = 300;
    inf->relist = 1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&inf->mu, NULL);
    pthread_cond_init(&inf->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&inf->stop, 0);
    return inf;
oom:
    sb_err_set(err, "k8s informer: out of memory");
    return NULL;
}

void sb_k8s_informer_set_watch_timeout(sb_k8s_informer *inf, int seconds)
{
    inf->watch_timeout_s = seconds > 0 ? seconds : 300;
}

/* "ns/name" or "name"; NULL when the object has no name. */
static int key_of(const cJSON *obj, char *out, size_t n)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(md, "name");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(md, "namespace");
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0')
        return -1;
    if (cJSON_IsString(ns) && ns->valuestring[0] != '\0')
        snprintf(out, n, "%s/%s", ns->valuestring, name->valuestring);
    else
        snprintf(out, n, "%s", name->valuestring);
    return 0;
}

static const char *rv_of(const cJSON *obj)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
    return cJSON_IsString(rv) ? rv->valuestring : NULL;
}

static void set_rv_locked(sb_k8s_informer *inf, const char *rv)
{
    if (rv != NULL && rv[0] != '\0')
        snprintf(inf->rv, sizeof inf->rv, "%s", rv);
}

/* Applies one watch event; callbacks run after the lock is released. Returns 0, 1 to end the
 * watch. */
static int apply_event(sb_k8s_informer *inf, const char *text)
{
    cJSON *ev = cJSON_Parse(text);
    /* integers past 2^53 (a Pipeline's filter value) keep their text, or the operator would
     * hand workers a rounded double (chaos-cluster: rows lost and kept against the filter) */
    if (ev != NULL && sb_doc_cjson_keep_ints(ev, text) != 0) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
    cJSON *obj = cJSON_GetObjectItemCaseSensitive(ev, "object");
    if (!cJSON_IsString(type) || !cJSON_IsObject(obj)) {
        sb_log(SB_LOG_WARN, "k8s watch: malformed event, restarting the watch", "path", inf->path,
               NULL);
        cJSON_Delete(ev);
        return 1;
    }
    const char *t = type->valuestring;
    char key[512];
    if (strcmp(t, "ERROR") == 0) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(obj, "message");
        int gone = cJSON_IsNumber(code) && code->valueint == 410;
        sb_log(gone ? SB_LOG_INFO : SB_LOG_WARN, "k8s watch: error event", "path", inf->path,
               "message", cJSON_IsString(msg) ? msg->valuestring : "", NULL);
        pthread_mutex_lock(&inf->mu);
        if (gone) {
            inf->relist = 1;
            inf->st.gone++;
        }
        pthread_mutex_unlock(&inf->mu);
        cJSON_Delete(ev);
        return 1;
    }
    if (strcmp(t, "BOOKMARK") == 0) {
        pthread_mutex_lock(&inf->mu);
        set_rv_locked(inf, rv_of(obj));
        pthread_mutex_unlock(&inf->mu);
        cJSON_Delete(ev);
        return 0;
    }
    int is_add = strcmp(t, "ADDED") == 0, is_mod = strcmp(t, "MODIFIED") == 0;
    int is_del = strcmp(t, "DELETED") == 0;
    if ((!is_add && !is_mod && !is_del) || key_of(obj, key, sizeof key) < 0) {
        sb_log(SB_LOG_WARN, "k8s watch: unknown event type or object without a name", "path",
               inf->path, "type", t, NULL);
        cJSON_Delete(ev);
        return 0;
    }
    inf->event_seen = 1;
    pthread_mutex_lock(&inf->mu);
    set_rv_locked(inf, rv_of(obj));
    inf->st.events++;
    cJSON *old = cJSON_DetachItemFromObjectCaseSensitive(inf->cache, key);
    const cJSON *now = NULL;
    if (!is_del) {
        cJSON_DetachItemViaPointer(ev, obj);
        cJSON_AddItemToObject(inf->cache, key, obj);
        now = obj;
    }
    pthread_mutex_unlock(&inf->mu);
    /* The cache is only changed on this thread, so `now` stays valid during the callbacks. */
    if (is_del) {
        if (inf->h.on_delete != NULL)
            inf->h.on_delete(obj, inf->h.arg); /* the object's final state */
    } else if (old != NULL) {
        if (inf->h.on_update != NULL)
            inf->h.on_update(old, now, inf->h.arg);
    } else if (inf->h.on_add != NULL) {
        inf->h.on_add(now, inf->h.arg);
    }
    cJSON_Delete(old);
    cJSON_Delete(ev);
    return 0;
}

int sb_k8s_informer_feed(sb_k8s_informer *inf, const char *data, size_t len)
{
    int rc = 0;
    while (len > 0 && rc == 0) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl != NULL ? (size_t)(nl - data) : len;
        if (!inf->line_overflow) {
            if (inf->line_n + take + 1 > MAX_LINE) {
                inf->line_overflow = 1;
            } else {
                if (inf->line_n + take + 1 > inf->line_cap) {
                    size_t nc = inf->line_cap ? inf->line_cap : 4096;
                    while (nc < inf->line_n + take + 1)
                        nc *= 2;
                    char *np = realloc(inf->line, nc);
                    if (np == NULL) {
                        inf->line_overflow = 1;
                    } else {
                        inf->line = np;
                        inf->line_cap = nc;
                    }
                }
                if (!inf->line_overflow) {
                    memcpy(inf->line + inf->line_n, data, take);
                    inf->line_n += take;
                    inf->line[inf->line_n] = '\0';
                }
            }
        }
        if (nl == NULL)
            break;
        data += take + 1;
        len -= take + 1;
        if (inf->line_overflow) {
            sb_log(SB_LOG_WARN, "k8s watch: event too large, relisting", "path", inf->path, NULL);
            pthread_mutex_lock(&inf->mu);
            inf->relist = 1;
            pthread_mutex_unlock(&inf->mu);
            rc = 1;
        } else {
            size_t i = 0;
            while (i < inf->line_n && (inf->line[i] == ' ' || inf->line[i] == '\r'))
                i++;
            if (i < inf->line_n)
                rc = apply_event(inf, inf->line);
        }
        inf->line_n = 0;
        inf->line_overflow = 0;
    }
    return rc;
}

int sb_k8s_informer_needs_relist(sb_k8s_informer *inf)
{
    pthread_mutex_lock(&inf->mu);
    int r = inf->relist;
    pthread_mutex_unlock(&inf->mu);
    return r;
}

typedef struct change {
    cJSON *old;       /* owned */
    const cJSON *now; /* in the new cache */
} change;

int sb_k8s_informer_replace(sb_k8s_informer *inf, const cJSON *list, sb_err *err)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
    if (!cJSON_IsArray(items) && !cJSON_IsNull(items))
        return sb_err_set(err, "k8s informer %s: list answer has no items array", inf->path);
    cJSON *fresh = cJSON_CreateObject();
    int n = cJSON_GetArraySize(items);
    change *ch = calloc((size_t)n + 1, sizeof *ch);
    if (fresh == NULL || ch == NULL) {
        cJSON_Delete(fresh);
        free(ch);
        return sb_err_set(err, "k8s informer: out of memory");
    }
    int nch = 0;
    char key[512];
    pthread_mutex_lock(&inf->mu);
    const cJSON *it;
    cJSON_ArrayForEach(it, items)
    {
        if (key_of(it, key, sizeof key) < 0)
            continue;
        cJSON *copy = cJSON_Duplicate(it, 1);
        if (copy == NULL)
            continue;
        cJSON *old = cJSON_DetachItemFromObjectCaseSensitive(inf->cache, key);
        cJSON_DeleteItemFromObjectCaseSensitive(fresh, key); /* duplicates: last wins */
        cJSON_AddItemToObject(fresh, key, copy);
        const char *orv = rv_of(old), *nrv = rv_of(copy);
        if (old != NULL && orv != NULL && nrv != NULL && strcmp(orv, nrv) == 0) {
            cJSON_Delete(old); /* unchanged */
            continue;
        }
        ch[nch].old = old;
        ch[nch].now = copy;
        nch++;
    }
    cJSON *gone = inf->cache; /* what is left was deleted */
    inf->cache = fresh;
    set_rv_locked(inf, rv_of(list));
    inf->synced = 1;
    inf->relist = 0;
    inf->st.lists++;
    pthread_cond_broadcast(&inf->cv);
    pthread_mutex_unlock(&inf->mu);
    for (int i = 0; i < nch; i++) {
        if (ch[i].old != NULL) {
            if (inf->h.on_update != NULL)
                inf->h.on_update(ch[i].old, ch[i].now, inf->h.arg);
        } else if (inf->h.on_add != NULL) {
            inf->h.on_add(ch[i].now, inf->h.arg);
        }
        cJSON_Delete(ch[i].old);
    }
    cJSON *g;
    cJSON_ArrayForEach(g, gone)
    {
        if (inf->h.on_delete != NULL)
            inf->h.on_delete(g, inf->h.arg);
    }
    cJSON_Delete(gone);
    free(ch);
    return 0;
}

/* ---- the loop ---- */

/* Sleeps up to ms, returning early when stopped. Returns 1 when stopped. */
static int pause_ms(sb_k8s_informer *inf, long ms)
{
    double until = now_s() + (double)ms / 1000.0;
    pthread_mutex_lock(&inf->mu);
    while (!atomic_load(&inf->stop) && now_s() < until) {
        struct timespec ts;
        ts.tv_sec = (time_t)until;
        ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&inf->cv, &inf->mu, &ts);
    }
    pthread_mutex_unlock(&inf->mu);
    return atomic_load(&inf->stop) ? 1 : 0;
}

static int on_chunk(const char *data, size_t len, void *arg)
{
    sb_k8s_informer *inf = arg;
    return sb_k8s_informer_feed(inf, data, len);
}

static int do_list(sb_k8s_informer *inf, sb_k8s_client *c)
{
    sb_err err = {0};
    long st = 0;
    cJSON *list = sb_k8s_list(c, inf->path, inf->selector, &st, &err);
    if (list == NULL) {
        sb_log(SB_LOG_WARN, "k8s informer: list failed", "path", inf->path, "error", err.msg, NULL);
        return -1;
    }
    int rc = sb_k8s_informer_replace(inf, list, &err);
    cJSON_Delete(list);
    if (rc < 0)
        sb_log(SB_LOG_WARN, "k8s informer: bad list", "error", err.msg, NULL);
    return rc;
}

/* Returns 0 when the watch ended normally, 1 on 410 (relist), -1 on failure (back off). */
static int do_watch(sb_k8s_informer *inf, sb_k8s_client *c)
{
    char rv[128];
    sb_k8s_informer_resource_version(inf, rv, sizeof rv);
    char *sel = inf->selector != NULL ? curl_easy_escape(NULL, inf->selector, 0) : NULL;
    char *erv = curl_easy_escape(NULL, rv, 0);
    size_t n = strlen(inf->path) + (sel ? strlen(sel) : 0) + (erv ? strlen(erv) : 0) + 160;
    char *p = malloc(n);
    if (p == NULL || erv == NULL || (inf->selector != NULL && sel == NULL)) {
        free(p);
        curl_free(sel);
        curl_free(erv);
        return -1;
    }
    snprintf(p, n, "%s%swatch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%d%s%s",
             inf->path, strchr(inf->path, '?') ? "&" : "?", erv, inf->watch_timeout_s,
             sel ? "&labelSelector=" : "", sel ? sel : "");
    curl_free(sel);
    curl_free(erv);
    inf->line_n = 0;
    inf->line_overflow = 0;
    inf->event_seen = 0;
    pthread_mutex_lock(&inf->mu);
    inf->st.watches++;
    pthread_mutex_unlock(&inf->mu);
    long st = 0;
    char *ebody = NULL;
    sb_err err = {0};
    double t0 = now_s();
    int rc = sb_k8s_stream(c, p, (inf->watch_timeout_s + 30) * 1000L, on_chunk, inf, &inf->stop,
                           &st, &ebody, &err);
    free(p);
    if (atomic_load(&inf->stop)) {
        free(ebody);
        return 0;
    }
    if (st == 410) {
        pthread_mutex_lock(&inf->mu);
        inf->relist = 1;
        inf->st.gone++;
        pthread_mutex_unlock(&inf->mu);
    }
    if (sb_k8s_informer_needs_relist(inf)) {
        free(ebody);
        return 1;
    }
    if (rc < 0 || st != 200) {
        char d[SB_ERR_MAX];
        if (rc < 0)
            snprintf(d, sizeof d, "%s", err.msg);
        else
            sb_k8s_describe_status(st, ebody, d, sizeof d);
        sb_log(SB_LOG_WARN, "k8s informer: watch failed", "path", inf->path, "error", d, NULL);
        free(ebody);
        return -1;
    }
    free(ebody);
    /* A watch that ended at once without events (or an ERROR event) counts as a failure, so a
     * misbehaving server does not make us spin. */
    if (err.msg[0] != '\0' || (!inf->event_seen && now_s() - t0 < 1.0))
        return -1;
    return 0;
}

static void *loop(void *arg)
{
    sb_k8s_informer *inf = arg;
    sb_err err = {0};
    sb_k8s_client *c = sb_k8s_client_new(inf->cfg, &err);
    if (c == NULL) {
        sb_log(SB_LOG_ERROR, "k8s informer: no client", "error", err.msg, NULL);
        return NULL;
    }
    /* The loop has its own backoff; a single attempt per list keeps stop() prompt (a list in
     * flight still runs to its end, at most the client's 30 s request timeout). */
    sb_k8s_client_set_retry(c, 1, BACKOFF_MIN_MS);
    long backoff = BACKOFF_MIN_MS;
    while (!atomic_load(&inf->stop)) {
        int rc;
        if (sb_k8s_informer_needs_relist(inf))
            rc = do_list(inf, c);
        else
            rc = do_watch(inf, c);
        if (atomic_load(&inf->stop))
            break;
        if (rc < 0) {
            if (pause_ms(inf, backoff))
                break;
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        } else {
            backoff = BACKOFF_MIN_MS;
        }
    }
    sb_k8s_client_free(c);
    return NULL;
}

int sb_k8s_informer_start(sb_k8s_informer *inf, sb_err *err)
{
    if (inf->cfg == NULL)
        return sb_err_set(err, "k8s informer %s: no config", inf->path);
    if (inf->running)
        return 0;
    atomic_store(&inf->stop, 0);
    if (pthread_create(&inf->thread, NULL, loop, inf) != 0)
        return sb_err_set(err, "k8s informer %s: cannot start a thread", inf->path);
    inf->running = 1;
    return 0;
}

int sb_k8s_informer_wait_synced(sb_k8s_informer *inf, long timeout_ms)
{
    double until = now_s() + (double)timeout_ms / 1000.0;
    pthread_mutex_lock(&inf->mu);
    while (!inf->synced && now_s() < until) {
        struct timespec ts;
        ts.tv_sec = (time_t)until;
        ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&inf->cv, &inf->mu, &ts);
    }
    int s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s;
}

void sb_k8s_informer_stop(sb_k8s_informer *inf)
{
    if (!inf->running)
        return;
    atomic_store(&inf->stop, 1);
    pthread_mutex_lock(&inf->mu);
    pthread_cond_broadcast(&inf->cv);
    pthread_mutex_unlock(&inf->mu);
    pthread_join(inf->thread, NULL);
    inf->running = 0;
}

void sb_k8s_informer_free(sb_k8s_informer *inf)
{
    if (inf == NULL)
        return;
    sb_k8s_informer_stop(inf);
    cJSON_Delete(inf->cache);
    free(inf->line);
    free(inf->path);
    free(inf->selector);
    pthread_mutex_destroy(&inf->mu);
    pthread_cond_destroy(&inf->cv);
    free(inf);
}

cJSON *sb_k8s_informer_get(sb_k8s_informer *inf, const char *key)
{
    pthread_mutex_lock(&inf->mu);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(inf->cache, key);
    cJSON *copy = o != NULL ? cJSON_Duplicate(o, 1) : NULL;
    pthread_mutex_unlock(&inf->mu);
    return copy;
}

cJSON *sb_k8s_informer_list(sb_k8s_informer *inf)
{
    cJSON *arr = cJSON_CreateArray();
    if (arr == NULL)
        return NULL;
    pthread_mutex_lock(&inf->mu);
    const cJSON *o;
    cJSON_ArrayForEach(o, inf->cache)
    {
        cJSON *copy = cJSON_Duplicate(o, 1);
        if (copy != NULL)
            cJSON_AddItemToArray(arr, copy);
    }
    pthread_mutex_unlock(&inf->mu);
    return arr;
}

size_t sb_k8s_informer_count(sb_k8s_informer *inf)
{
    pthread_mutex_lock(&inf->mu);
    size_t n = (size_t)cJSON_GetArraySize(inf->cache);
    pthread_mutex_unlock(&inf->mu);
    return n;
}

void sb_k8s_informer_resource_version(sb_k8s_informer *inf, char *out, size_t n)
{
    pthread_mutex_lock(&inf->mu);
    snprintf(out, n, "%s", inf->rv);
    pthread_mutex_unlock(&inf->mu);
}

void sb_k8s_informer_stats_get(sb_k8s_informer *inf, sb_k8s_informer_stats *out)
{
    pthread_mutex_lock(&inf->mu);
    *out = inf->st;
    pthread_mutex_unlock(&inf->mu);
}
