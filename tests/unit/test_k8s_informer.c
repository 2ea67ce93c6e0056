/* The informer's watch-event parser and cache (lib/k8s/informer.h), fed by hand: events split
 * across chunks at every byte, ADDED/MODIFIED/DELETED/BOOKMARK, ERROR 410 -> relist, relist
 * diffs (add/update/delete callbacks). No cluster needed (see test_k8s_cluster.c for that). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/informer.h"

typedef struct rec {
    char log[4096];
} rec;

static void app(rec *r, const char *what, const cJSON *o)
{
    const cJSON *md = cJSON_GetObjectItem(o, "metadata");
    const cJSON *name = cJSON_GetObjectItem(md, "name");
    const cJSON *rv = cJSON_GetObjectItem(md, "resourceVersion");
    size_t n = strlen(r->log);
    snprintf(r->log + n, sizeof r->log - n, "%s %s@%s;", what,
             cJSON_IsString(name) ? name->valuestring : "?",
             cJSON_IsString(rv) ? rv->valuestring : "?");
}
static void on_add(const cJSON *o, void *a)
{
    app(a, "add", o);
}
static void on_update(const cJSON *old, const cJSON *now, void *a)
{
    app(a, "upd-from", old);
    app(a, "upd", now);
}
static void on_delete(const cJSON *o, void *a)
{
    app(a, "del", o);
}

static sb_k8s_informer *new_inf(rec *r)
{
    sb_k8s_informer_handlers h = {on_add, on_update, on_delete, r};
    sb_err err = {0};
    sb_k8s_informer *inf =
        sb_k8s_informer_new(NULL, "/api/v1/namespaces/d/configmaps", "a=b", &h, &err);
    cr_assert_not_null(inf, "%s", err.msg);
    return inf;
}

#define EV(type, name, rv)                                                                         \
    "{\"type\":\"" type "\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"" name     \
    "\",\"namespace\":\"d\",\"resourceVersion\":\"" rv "\"},\"data\":{\"k\":\"" rv "\"}}}\n"

static const char *STREAM = EV("ADDED", "a", "10") EV("ADDED", "b", "11") EV(
    "MODIFIED", "a", "12") "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":"
                           "{\"resourceVersion\":\"15\"}}}\n" EV("DELETED", "b", "16");

static const char *WANT = "add a@10;add b@11;upd-from a@10;upd a@12;del b@16;";

static void check_after_stream(sb_k8s_informer *inf, rec *r)
{
    cr_expect_str_eq(r->log, WANT);
    cr_expect_eq(sb_k8s_informer_count(inf), 1);
    cJSON *a = sb_k8s_informer_get(inf, "d/a");
    cr_assert_not_null(a);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "data"), "k")->valuestring, "12");
    cJSON_Delete(a);
    cr_expect_null(sb_k8s_informer_get(inf, "d/b"));
    char rv[64];
    sb_k8s_informer_resource_version(inf, rv, sizeof rv);
    cr_expect_str_eq(rv, "16");
}

Test(k8s_informer, events_in_one_chunk)
{
    rec r = {{0}};
    sb_k8s_informer *inf = new_inf(&r);
    cr_expect_eq(sb_k8s_informer_feed(inf, STREAM, strlen(STREAM)), 0);
    check_after_stream(inf, &r);
    sb_k8s_informer_stats st;
    sb_k8s_informer_stats_get(inf, &st);
    cr_expect_eq(st.events, 4);
    sb_k8s_informer_free(inf);
}

Test(k8s_informer, events_split_at_every_position)
{
    size_t len = strlen(STREAM);
    for (size_t cut = 1; cut < len; cut += 7) {
        rec r = {{0}};
        sb_k8s_informer *inf = new_inf(&r);
        /* Three chunks: [0,cut) [cut, cut+cut/2) rest; plus single bytes around the cut. */
        size_t mid = cut + (len - cut) / 2;
        cr_assert_eq(sb_k8s_informer_feed(inf, STREAM, cut), 0);
        for (size_t i = cut; i < mid && i < cut + 3; i++)
            cr_assert_eq(sb_k8s_informer_feed(inf, STREAM + i, 1), 0);
        size_t from = mid < cut + 3 ? mid : cut + 3;
        if (from > mid)
            from = mid;
        cr_assert_eq(sb_k8s_informer_feed(inf, STREAM + from, mid - from), 0);
        cr_assert_eq(sb_k8s_informer_feed(inf, STREAM + mid, len - mid), 0);
        check_after_stream(inf, &r);
        sb_k8s_informer_free(inf);
    }
}

Test(k8s_informer, byte_by_byte)
{
    rec r = {{0}};
    sb_k8s_informer *inf = new_inf(&r);
    for (const char *p = STREAM; *p; p++)
        cr_assert_eq(sb_k8s_informer_feed(inf, p, 1), 0);
    check_after_stream(inf, &r);
    sb_k8s_informer_free(inf);
}

Test(k8s_informer, error_event_410_requests_relist)
{
    rec r = {{0}};
    sb_k8s_informer *inf = new_inf(&r);
    sb_err err = {0};
    cJSON *empty = cJSON_Parse("{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[]}");
    cr_assert_eq(sb_k8s_informer_replace(inf, empty, &err), 0, "%s", err.msg);
    cJSON_Delete(empty);
    cr_expect_eq(sb_k8s_informer_needs_relist(inf), 0);
    const char *gone =
        EV("ADDED", "a", "6") "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                              "\"apiVersion\":\"v1\",\"status\":\"Failure\","
                              "\"message\":\"too old resource version: 1 (5)\","
                              "\"reason\":\"Expired\",\"code\":410}}\n" EV("ADDED", "never", "7");
    cr_expect_eq(sb_k8s_informer_feed(inf, gone, strlen(gone)), 1, "an ERROR ends the watch");
    cr_expect_eq(sb_k8s_informer_needs_relist(inf), 1, "410 must request a relist");
    cr_expect_null(sb_k8s_informer_get(inf, "d/never"), "events after ERROR are not applied");
    sb_k8s_informer_stats st;
    sb_k8s_informer_stats_get(inf, &st);
    cr_expect_eq(st.gone, 1);
    sb_k8s_informer_free(inf);
}

Test(k8s_informer, other_error_event_ends_watch_without_relist)
{
    rec r = {{0}};
    sb_k8s_informer *inf = new_inf(&r);
    cJSON *empty = cJSON_Parse("{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[]}");
    cr_assert_eq(sb_k8s_informer_replace(inf, empty, NULL), 0);
    cJSON_Delete(empty);
    const char *e = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":500,"
                    "\"message\":\"internal\"}}\n";
    cr_expect_eq(sb_k8s_informer_feed(inf, e, strlen(e)), 1);
    cr_expect_eq(sb_k8s_informer_needs_relist(inf), 0);
    const char *junk = "this is not json\n";
    cr_expect_eq(sb_k8s_informer_feed(inf, junk, strlen(junk)), 1, "garbage ends the watch");
    const char *blank = "\n\r\n";
    cr_expect_eq(sb_k8s_informer_feed(inf, blank, strlen(blank)), 0, "blank lines are skipped");
    sb_k8s_informer_free(inf);
}

Test(k8s_informer, replace_diffs_the_cache)
{
    rec r = {{0}};
    sb_k8s_informer *inf = new_inf(&r);
    cr_expect_eq(sb_k8s_informer_needs_relist(inf), 1, "a new informer must list first");
    cJSON *l1 = cJSON_Parse("{\"metadata\":{\"resourceVersion\":\"20\"},\"items\":["
                            "{\"metadata\":{\"name\":\"a\",\"namespace\":\"d\","
                            "\"resourceVersion\":\"1\"}},"
                            "{\"metadata\":{\"name\":\"b\",\"namespace\":\"d\","
                            "\"resourceVersion\":\"2\"}},"
                            "{\"metadata\":{\"name\":\"c\",\"namespace\":\"d\","
                            "\"resourceVersion\":\"3\"}}]}");
    cr_assert_eq(sb_k8s_informer_replace(inf, l1, NULL), 0);
    cr_expect_str_eq(r.log, "add a@1;add b@2;add c@3;");
    cr_expect_eq(sb_k8s_informer_needs_relist(inf), 0);
    r.log[0] = '\0';
    /* a unchanged, b modified, c gone, d new. */
    cJSON *l2 = cJSON_Parse("{\"metadata\":{\"resourceVersion\":\"30\"},\"items\":["
                            "{\"metadata\":{\"name\":\"a\",\"namespace\":\"d\","
                            "\"resourceVersion\":\"1\"}},"
                            "{\"metadata\":{\"name\":\"b\",\"namespace\":\"d\","
                            "\"resourceVersion\":\"25\"}},"
                            "{\"metadata\":{\"name\":\"d\",\"namespace\":\"d\","
                            "\"resourceVersion\":\"26\"}}]}");
    cr_assert_eq(sb_k8s_informer_replace(inf, l2, NULL), 0);
    cr_expect_str_eq(r.log, "upd-from b@2;upd b@25;add d@26;del c@3;");
    cr_expect_eq(sb_k8s_informer_count(inf), 3);
    char rv[32];
    sb_k8s_informer_resource_version(inf, rv, sizeof rv);
    cr_expect_str_eq(rv, "30");
    cJSON *all = sb_k8s_informer_list(inf);
    cr_expect_eq(cJSON_GetArraySize(all), 3);
    cJSON_Delete(all);
    sb_err err = {0};
    cJSON *notlist = cJSON_Parse("{\"items\":7}");
    cr_expect_eq(sb_k8s_informer_replace(inf, notlist, &err), -1);
    cr_expect(strstr(err.msg, "items") != NULL, "%s", err.msg);
    cJSON_Delete(l1);
    cJSON_Delete(l2);
    cJSON_Delete(notlist);
    sb_k8s_informer_free(inf);
}

Test(k8s_informer, start_without_config_fails)
{
    rec r = {{0}};
    sb_k8s_informer *inf = new_inf(&r);
    sb_err err = {0};
    cr_expect_eq(sb_k8s_informer_start(inf, &err), -1);
    cr_expect(strstr(err.msg, "no config") != NULL, "%s", err.msg);
    sb_k8s_informer_free(inf);
}

/* An integer past 2^53 in an object (a Pipeline's filter value) comes out of the cache with its
 * text: printed exactly, not as the nearest double. The operator prints the spec it got from the
 * informer for its workers; with doubles, `filter big gt 9007199254740993` kept rows with
 * big = 9007199254740993 (the cluster chaos run: rows kept and lost against the filter). */
Test(k8s_informer, integers_past_2_53_keep_their_text)
{
    rec r = {{0}};
    sb_k8s_informer *inf = new_inf(&r);
    const char *ev = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{"
                     "\"name\":\"a\",\"namespace\":\"d\",\"resourceVersion\":\"10\"},\"spec\":"
                     "{\"v\":9007199254740993,\"w\":[-4611686018427387905,1.5,7]}}}\n";
    cr_assert_eq(sb_k8s_informer_feed(inf, ev, strlen(ev)), 0);
    cJSON *a = sb_k8s_informer_get(inf, "d/a");
    cr_assert_not_null(a);
    char *txt = cJSON_PrintUnformatted(cJSON_GetObjectItem(a, "spec"));
    cr_expect_str_eq(txt, "{\"v\":9007199254740993,\"w\":[-4611686018427387905,1.5,7]}");
    free(txt);
    cJSON_Delete(a);
    sb_k8s_informer_free(inf);
}
