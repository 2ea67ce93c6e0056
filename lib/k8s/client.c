/* client.c — a thin Kubernetes API client on libcurl and cJSON (see client.h): one easy handle
 * behind a mutex, verified TLS, a bearer token re-read per request, timeouts, retries of 429,
 * 5xx and transport errors with backoff, and JSON requests and answers. Owns the handle. */

#include "k8s/client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "doc/doc.h"

#define MAX_BODY (64u * 1024 * 1024)
#define MAX_BACKOFF_MS 5000L
#define MAX_RETRY_AFTER_MS 30000L

struct sb_k8s_client {
    sb_k8s_config *cfg;
    pthread_mutex_t mu;
    CURL *curl;
    int max_attempts;
    long base_backoff_ms;
    long timeout_ms;
};

typedef struct buf {
    char *p;
    size_t n, cap;
    int overflow;
} buf;

static int buf_add(buf *b, const char *d, size_t n)
{
    if (b->n + n + 1 > MAX_BODY) {
        b->overflow = 1;
        return -1;
    }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (np == NULL)
            return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static size_t on_write(char *d, size_t size, size_t nmemb, void *arg)
{
    return buf_add(arg, d, size * nmemb) == 0 ? size * nmemb : 0;
}

/* Sets up a handle from the config: TLS material. Called once per handle. */
static int setup_handle(CURL *h, const sb_k8s_config *cfg, sb_err *err)
{
    size_t n;
    const char *pem;
    CURLcode rc = CURLE_OK;
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if ((pem = sb_k8s_config_ca_pem(cfg, &n)) != NULL) {
        struct curl_blob b = {(void *)pem, n, CURL_BLOB_COPY};
        rc = curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    }
    if (rc == CURLE_OK && (pem = sb_k8s_config_client_cert_pem(cfg, &n)) != NULL) {
        struct curl_blob b = {(void *)pem, n, CURL_BLOB_COPY};
        rc = curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (rc == CURLE_OK && (pem = sb_k8s_config_client_key_pem(cfg, &n)) != NULL) {
        struct curl_blob b = {(void *)pem, n, CURL_BLOB_COPY};
        rc = curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (rc != CURLE_OK)
        return sb_err_set(err, "k8s client: TLS setup: %s", curl_easy_strerror(rc));
    return 0;
}

sb_k8s_client *sb_k8s_client_new(sb_k8s_config *cfg, sb_err *err)
{
    sb_k8s_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        sb_err_set(err, "k8s client: out of memory");
        return NULL;
    }
    c->cfg = cfg;
    c->max_attempts = 5;
    c->base_backoff_ms = 200;
    c->timeout_ms = 30000;
    c->curl = curl_easy_init();
    if (c->curl == NULL) {
        free(c);
        sb_err_set(err, "k8s client: curl_easy_init failed");
        return NULL;
    }
    if (setup_handle(c->curl, cfg, err) < 0) {
        curl_easy_cleanup(c->curl);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void sb_k8s_client_free(sb_k8s_client *c)
{
    if (c == NULL)
        return;
    curl_easy_cleanup(c->curl);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

sb_k8s_config *sb_k8s_client_config(const sb_k8s_client *c)
{
    return c->cfg;
}

void sb_k8s_client_set_retry(sb_k8s_client *c, int max_attempts, long base_backoff_ms)
{
    c->max_attempts = max_attempts < 1 ? 1 : max_attempts;
    c->base_backoff_ms = base_backoff_ms < 1 ? 1 : base_backoff_ms;
}

void sb_k8s_client_set_timeout(sb_k8s_client *c, long default_timeout_ms)
{
    c->timeout_ms = default_timeout_ms > 0 ? default_timeout_ms : 30000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Builds the header list: Accept, Content-Type, Authorization. */
static struct curl_slist *headers_for(sb_k8s_client *c, const char *accept, const char *ctype,
                                      sb_err *err)
{
    struct curl_slist *h = NULL, *t;
    char line[256];
    snprintf(line, sizeof line, "Accept: %s", accept);
    if ((t = curl_slist_append(h, line)) == NULL)
        goto oom;
    h = t;
    if (ctype != NULL) {
        snprintf(line, sizeof line, "Content-Type: %s", ctype);
        if ((t = curl_slist_append(h, line)) == NULL)
            goto oom;
        h = t;
    }
    sb_err e = {0};
    char *tok = sb_k8s_config_token(c->cfg, &e);
    if (tok == NULL && e.msg[0] != '\0') {
        curl_slist_free_all(h);
        sb_err_set(err, "k8s client: token: %s", e.msg);
        return NULL;
    }
    if (tok != NULL) {
        size_t n = strlen(tok) + 32;
        char *auth = malloc(n);
        if (auth != NULL) {
            snprintf(auth, n, "Authorization: Bearer %s", tok);
            t = curl_slist_append(h, auth);
            memset(auth, 0, n);
            free(auth);
        }
        memset(tok, 0, strlen(tok));
        free(tok);
        if (auth == NULL || t == NULL)
            goto oom;
        h = t;
    }
    return h;
oom:
    curl_slist_free_all(h);
    sb_err_set(err, "k8s client: out of memory");
    return NULL;
}

static char *url_for(const sb_k8s_client *c, const char *path)
{
    const char *server = sb_k8s_config_server(c->cfg);
    size_t n = strlen(server) + strlen(path) + 2;
    char *u = malloc(n);
    if (u != NULL)
        snprintf(u, n, "%s%s", server, path);
    return u;
}

/* One attempt. Caller holds mu. Returns 0 with *status, -1 on transport error. */
static int do_once(sb_k8s_client *c, const char *method, const char *path, const char *body,
                   const char *ctype, long timeout_ms, long *status, buf *out, long *retry_after_s,
                   sb_err *err)
{
    CURL *h = c->curl;
    struct curl_slist *hdr = headers_for(c, "application/json", body != NULL ? ctype : NULL, err);
    char *url = url_for(c, path);
    if (hdr == NULL || url == NULL) {
        curl_slist_free_all(hdr);
        free(url);
        if (url == NULL)
            sb_err_set(err, "k8s client: out of memory");
        return -1;
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 1L);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (body != NULL) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
        } else {
            curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        }
    }
    CURLcode rc = curl_easy_perform(h);
    /* Leave no pointers into our stack/heap in the handle. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
    curl_slist_free_all(hdr);
    free(url);
    *status = 0;
    *retry_after_s = -1;
    if (rc != CURLE_OK) {
        if (out->overflow)
            return sb_err_set(err, "%s %s: answer larger than %u bytes", method, path, MAX_BODY);
        return sb_err_set(err, "%s %s: %s", method, path, curl_easy_strerror(rc));
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_off_t ra = -1;
    if (curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra >= 0)
        *retry_after_s = (long)ra;
    return 0;
}

int sb_k8s_request(sb_k8s_client *c, const char *method, const char *path, const char *body,
                   const char *content_type, long timeout_ms, long *status, char **response,
                   sb_err *err)
{
    if (timeout_ms <= 0)
        timeout_ms = c->timeout_ms;
    if (content_type == NULL)
        content_type = "application/json";
    int retry_5xx = strcmp(method, "POST") != 0;
    long backoff = c->base_backoff_ms;
    long st = 0;
    if (response != NULL)
        *response = NULL;
    for (int attempt = 1;; attempt++) {
        buf out = {0};
        long retry_after = -1;
        pthread_mutex_lock(&c->mu);
        int rc =
            do_once(c, method, path, body, content_type, timeout_ms, &st, &out, &retry_after, err);
        pthread_mutex_unlock(&c->mu);
        int last = attempt >= c->max_attempts;
        long wait = -1;
        if (rc < 0 && retry_5xx && !last)
            wait = backoff;
        else if (rc == 0 && st == 429 && !last)
            wait = retry_after >= 0 ? retry_after * 1000 : backoff;
        else if (rc == 0 && st >= 500 && retry_5xx && !last)
            wait = retry_after >= 0 ? retry_after * 1000 : backoff;
        if (wait < 0) {
            if (status != NULL)
                *status = rc == 0 ? st : 0;
            if (rc < 0) {
                free(out.p);
                return -1;
            }
            if (out.p == NULL)
                out.p = strdup("");
            if (response != NULL)
                *response = out.p;
            else
                free(out.p);
            return 0;
        }
        free(out.p);
        if (wait > MAX_RETRY_AFTER_MS)
            wait = MAX_RETRY_AFTER_MS;
        char sts[16], att[16], ms[24];
        snprintf(sts, sizeof sts, "%ld", rc == 0 ? st : 0L);
        snprintf(att, sizeof att, "%d", attempt);
        snprintf(ms, sizeof ms, "%ld", wait);
        sb_log(SB_LOG_DEBUG, "k8s request retried", "method", method, "path", path, "status", sts,
               "attempt", att, "wait_ms", ms, NULL);
        sleep_ms(wait);
        backoff = backoff * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : backoff * 2;
    }
}

/* ---- streaming ---- */

typedef struct stream_ctx {
    CURL *h;
    sb_k8s_stream_fn fn;
    void *arg;
    atomic_int *stop;
    int checked, ok, stopped_by_fn;
    buf err;
} stream_ctx;

static size_t on_stream(char *d, size_t size, size_t nmemb, void *arg)
{
    stream_ctx *s = arg;
    size_t n = size * nmemb;
    if (!s->checked) {
        long st = 0;
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &st);
        s->ok = st == 200;
        s->checked = 1;
    }
    if (!s->ok)
        return buf_add(&s->err, d, n) == 0 || s->err.overflow ? n : 0;
    if (s->fn(d, n, s->arg) != 0) {
        s->stopped_by_fn = 1;
        return 0;
    }
    return n;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c_, curl_off_t d)
{
    (void)a, (void)b, (void)c_, (void)d;
    stream_ctx *s = arg;
    return s->stop != NULL && atomic_load(s->stop) ? 1 : 0;
}

int sb_k8s_stream(sb_k8s_client *c, const char *path, long timeout_ms, sb_k8s_stream_fn fn,
                  void *arg, atomic_int *stop, long *status, char **error_body, sb_err *err)
{
    *status = 0;
    if (error_body != NULL)
        *error_body = NULL;
    pthread_mutex_lock(&c->mu);
    CURL *h = c->curl;
    struct curl_slist *hdr = headers_for(c, "application/json", NULL, err);
    char *url = url_for(c, path);
    if (hdr == NULL || url == NULL) {
        pthread_mutex_unlock(&c->mu);
        curl_slist_free_all(hdr);
        free(url);
        if (url == NULL)
            sb_err_set(err, "k8s client: out of memory");
        return -1;
    }
    stream_ctx s = {.h = h, .fn = fn, .arg = arg, .stop = stop};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 1L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, NULL);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, NULL);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
    pthread_mutex_unlock(&c->mu);
    curl_slist_free_all(hdr);
    free(url);
    int stopped = s.stopped_by_fn || (stop != NULL && atomic_load(stop));
    /* A watch that the server ends at its timeout, or that we time out, is a normal end. */
    if (rc != CURLE_OK && !stopped && !(rc == CURLE_OPERATION_TIMEDOUT && *status == 200)) {
        free(s.err.p);
        sb_err_set(err, "watch %s: %s", path, curl_easy_strerror(rc));
        return *status != 0 ? 0 : -1;
    }
    if (error_body != NULL)
        *error_body = s.err.p;
    else
        free(s.err.p);
    return 0;
}

/* ---- JSON helpers ---- */

void sb_k8s_describe_status(long status, const char *body, char *out, size_t n)
{
    cJSON *j = body != NULL ? cJSON_Parse(body) : NULL;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(j, "reason");
    if (cJSON_IsString(kind) && strcmp(kind->valuestring, "Status") == 0 && cJSON_IsString(msg)) {
        snprintf(out, n, "%ld %s: %s", status, cJSON_IsString(reason) ? reason->valuestring : "",
                 msg->valuestring);
    } else {
        char snip[201];
        snprintf(snip, sizeof snip, "%s", body != NULL ? body : "");
        for (char *p = snip; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        snprintf(out, n, "HTTP %ld%s%s", status, snip[0] ? ": " : "", snip);
    }
    cJSON_Delete(j);
}

cJSON *sb_k8s_json(sb_k8s_client *c, const char *method, const char *path, const char *body,
                   const char *content_type, long *status, sb_err *err)
{
    long st = 0;
    char *resp = NULL;
    if (status != NULL)
        *status = 0;
    if (sb_k8s_request(c, method, path, body, content_type, 0, &st, &resp, err) < 0)
        return NULL;
    if (status != NULL)
        *status = st;
    if (st < 200 || st > 299) {
        char d[SB_ERR_MAX];
        sb_k8s_describe_status(st, resp, d, sizeof d);
        sb_err_set(err, "%s %s: %s", method, path, d);
        free(resp);
        return NULL;
    }
    cJSON *j = cJSON_Parse(resp);
    if (j != NULL && sb_doc_cjson_keep_ints(j, resp) != 0) { /* exact past 2^53 */
        cJSON_Delete(j);
        j = NULL;
        sb_err_set(err, "%s %s: out of memory", method, path);
    } else if (j == NULL)
        sb_err_set(err, "%s %s: answer %ld is not JSON", method, path, st);
    free(resp);
    return j;
}

cJSON *sb_k8s_get(sb_k8s_client *c, const char *path, long *status, sb_err *err)
{
    return sb_k8s_json(c, "GET", path, NULL, NULL, status, err);
}

cJSON *sb_k8s_list(sb_k8s_client *c, const char *path, const char *label_selector, long *status,
                   sb_err *err)
{
    if (label_selector == NULL || label_selector[0] == '\0')
        return sb_k8s_get(c, path, status, err);
    char *sel = curl_easy_escape(NULL, label_selector, 0);
    size_t n = strlen(path) + (sel != NULL ? strlen(sel) : 0) + 32;
    char *p = malloc(n);
    if (sel == NULL || p == NULL) {
        curl_free(sel);
        free(p);
        if (status != NULL)
            *status = 0;
        sb_err_set(err, "k8s list: out of memory");
        return NULL;
    }
    snprintf(p, n, "%s%slabelSelector=%s", path, strchr(path, '?') ? "&" : "?", sel);
    curl_free(sel);
    cJSON *j = sb_k8s_get(c, p, status, err);
    free(p);
    return j;
}

static cJSON *send_obj(sb_k8s_client *c, const char *method, const char *path, const cJSON *obj,
                       long *status, sb_err *err)
{
    char *body = cJSON_PrintUnformatted(obj);
    if (body == NULL) {
        if (status != NULL)
            *status = 0;
        sb_err_set(err, "%s %s: cannot serialize the object", method, path);
        return NULL;
    }
    cJSON *j = sb_k8s_json(c, method, path, body, "application/json", status, err);
    free(body);
    return j;
}

cJSON *sb_k8s_create(sb_k8s_client *c, const char *path, const cJSON *obj, long *status,
                     sb_err *err)
{
    return send_obj(c, "POST", path, obj, status, err);
}

cJSON *sb_k8s_update(sb_k8s_client *c, const char *path, const cJSON *obj, long *status,
                     sb_err *err)
{
    return send_obj(c, "PUT", path, obj, status, err);
}

cJSON *sb_k8s_patch(sb_k8s_client *c, const char *path, const char *merge_patch, long *status,
                    sb_err *err)
{
    return sb_k8s_json(c, "PATCH", path, merge_patch, "application/merge-patch+json", status, err);
}

int sb_k8s_delete(sb_k8s_client *c, const char *path, long *status, sb_err *err)
{
    cJSON *j = sb_k8s_json(c, "DELETE", path, NULL, NULL, status, err);
    if (j == NULL)
        return -1;
    cJSON_Delete(j);
    return 0;
}

cJSON *sb_k8s_update_retry(sb_k8s_client *c, const char *path, const char *subresource,
                           const cJSON *obj, sb_k8s_reapply_fn reapply, void *arg, int max_attempts,
                           long *status, sb_err *err)
{
    if (max_attempts <= 0)
        max_attempts = 5;
    size_t n = strlen(path) + (subresource != NULL ? strlen(subresource) : 0) + 2;
    char *target = malloc(n);
    if (target == NULL) {
        sb_err_set(err, "k8s update: out of memory");
        return NULL;
    }
    snprintf(target, n, "%s%s%s", path, subresource != NULL ? "/" : "",
             subresource != NULL ? subresource : "");
    long st = 0;
    cJSON *latest = NULL, *out = NULL;
    const cJSON *cur = obj;
    int attempt;
    for (attempt = 1; attempt <= max_attempts; attempt++) {
        out = sb_k8s_update(c, target, cur, &st, err);
        if (out != NULL || st != 409 || reapply == NULL || attempt == max_attempts)
            break;
        cJSON_Delete(latest);
        latest = sb_k8s_get(c, path, &st, err);
        if (latest == NULL) {
            sb_err_wrap(err, "re-reading after a conflict");
            break;
        }
        if (reapply(latest, arg, err) < 0) {
            sb_err_wrap(err, "re-applying after a conflict on %s", target);
            break;
        }
        cur = latest;
    }
    if (out == NULL && st == 409 && reapply != NULL)
        sb_err_wrap(err, "still conflicting after %d attempts",
                    attempt > max_attempts ? max_attempts : attempt);
    cJSON_Delete(latest);
    free(target);
    if (status != NULL)
        *status = st;
    return out;
}

cJSON *sb_k8s_update_status(sb_k8s_client *c, const char *path, const cJSON *obj,
                            sb_k8s_reapply_fn reapply, void *arg, long *status, sb_err *err)
{
    return sb_k8s_update_retry(c, path, "status", obj, reapply, arg, 0, status, err);
}
