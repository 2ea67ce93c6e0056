/* informer.h — list + watch of one collection, with a local cache and event callbacks.
 *
 * The informer lists `path` (e.g. /api/v1/namespaces/default/configmaps, optionally with a
 * label selector), then watches from the list's resourceVersion with allowWatchBookmarks=true.
 * The chunked watch body (one JSON event per line: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR)
 * is parsed incrementally as curl delivers it (lines may be split anywhere). A 410 Gone — as
 * the watch's HTTP status or as an ERROR event carrying a Status with code 410 — makes it list
 * again (the cache is then replaced, with add/update/delete callbacks for the differences).
 * Failed watches and lists are retried with backoff, 0.8 s doubling to 30 s; a watch the
 * server ends at its timeout is re-opened at once.
 *
 * Threads: sb_k8s_informer_start() runs the loop on a thread of its own with its own client
 * (its own curl handle); callbacks run on that thread, in event order, without the cache lock
 * held (so they may query the cache). Cache queries are safe from any thread.
 * sb_k8s_informer_stop() ends a blocked watch within about a second (curl's progress callback
 * checks a stop flag) and joins the thread; a list request in flight runs to its end first
 * (bounded by the 30 s request timeout).
 *
 * Keys are "namespace/name" ("name" for cluster-scoped objects).
 *
 * Ownership: the informer borrows the config (it must outlive the informer) and copies path,
 * selector and handlers. Objects passed to callbacks are owned by the informer and valid only
 * during the call; sb_k8s_informer_get()/_list() return deep copies the caller cJSON_Delete()s.
 */
#ifndef SB_K8S_INFORMER_H
#define SB_K8S_INFORMER_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "core/err.h"
#include "k8s/config.h"

typedef struct sb_k8s_informer_handlers {
    void (*on_add)(const cJSON *obj, void *arg);
    void (*on_update)(const cJSON *old_obj, const cJSON *new_obj, void *arg);
    void (*on_delete)(const cJSON *obj, void *arg);
    void *arg;
} sb_k8s_informer_handlers;

typedef struct sb_k8s_informer sb_k8s_informer;

/* cfg may be NULL for an informer that is only fed by hand (sb_k8s_informer_feed/_replace:
 * tests, fuzzing); start() then fails. h may be NULL. */
sb_k8s_informer *sb_k8s_informer_new(sb_k8s_config *cfg, const char *path,
                                     const char *label_selector, const sb_k8s_informer_handlers *h,
                                     sb_err *err);
/* Starts the list/watch thread. */
int sb_k8s_informer_start(sb_k8s_informer *inf, sb_err *err);
/* Waits until the first list has been applied: 1 when synced, 0 on timeout. */
int sb_k8s_informer_wait_synced(sb_k8s_informer *inf, long timeout_ms);
/* Stops and joins the thread (idempotent). */
void sb_k8s_informer_stop(sb_k8s_informer *inf);
/* Stops, then frees the cache. */
void sb_k8s_informer_free(sb_k8s_informer *inf);

/* Server-side watch timeout (timeoutSeconds), default 300 s. Set before start. */
void sb_k8s_informer_set_watch_timeout(sb_k8s_informer *inf, int seconds);

/* Cache queries (deep copies; NULL when absent). */
cJSON *sb_k8s_informer_get(sb_k8s_informer *inf, const char *key);
cJSON *sb_k8s_informer_list(sb_k8s_informer *inf);
size_t sb_k8s_informer_count(sb_k8s_informer *inf);
/* The resourceVersion the next watch starts from ("" before the first list). */
void sb_k8s_informer_resource_version(sb_k8s_informer *inf, char *out, size_t n);

typedef struct sb_k8s_informer_stats {
    long lists;   /* lists applied (the first one included) */
    long watches; /* watch requests made */
    long events;  /* ADDED/MODIFIED/DELETED events applied */
    long gone;    /* 410 Gone seen (status or ERROR event) */
} sb_k8s_informer_stats;
void sb_k8s_informer_stats_get(sb_k8s_informer *inf, sb_k8s_informer_stats *out);

/* Feeds raw watch-body bytes (what the watch thread does with each chunk). Returns 0 to go on,
 * 1 when the watch must end: an ERROR event (after a 410 one, sb_k8s_informer_needs_relist()
 * is 1) or an unparseable line. */
int sb_k8s_informer_feed(sb_k8s_informer *inf, const char *data, size_t len);
int sb_k8s_informer_needs_relist(sb_k8s_informer *inf);
/* Applies a list answer ({"metadata":{"resourceVersion":..},"items":[...]}) as a relist does.
 * Returns 0, or -1 (err set) when it is not a list. */
int sb_k8s_informer_replace(sb_k8s_informer *inf, const cJSON *list, sb_err *err);

#endif
