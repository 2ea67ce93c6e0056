/* s3.c — the s3:// backend of the storage interface (see store.h): S3 and S3-compatible
 * servers over libcurl, requests signed with libcurl's SigV4 (configuration and credentials:
 * aws.h). One CURLSH shares connections and DNS between all requests, so requests reuse
 * connections. Transient failures (5xx, SlowDown, 429, reset or refused connections, timeouts)
 * are retried with jittered backoff (retry.h); a read resumes with a ranged GET from where it
 * stopped.
 *
 * list   ListObjectsV2 (delimiter '/', continuation tokens); stat HEAD; read a streamed ranged
 * GET through the multi interface into a bounded buffer (the transfer pauses while it is full);
 * write one PUT below SB_S3_MULTIPART_THRESHOLD (default 8 MiB), a multipart upload above it
 * (one part in memory at a time), completed at commit and aborted on failure; del DELETE;
 * cleanup aborts the unfinished multipart uploads under a prefix.
 *
 * SB_S3_VERBOSE (any value) traces every request's header lines to stderr, redacted
 * (trace_cb: no Authorization, security token, query value or body).
 *
 * Memory: handles own their buffers and are freed by close/commit/abort.
 */

#include <curl/curl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/redact.h"
#include "core/pct.h"
#include "io/aws.h"
#include "io/retry.h"
#include "io/s3.h"
#include "io/schemes.h"

#define MIN_PART ((size_t)5 << 20)
#define RD_BUF ((size_t)4 << 20)
#define MAX_BODY ((size_t)64 << 20)

/* ---- shared curl state ---- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static CURLSH *share;
static pthread_mutex_t locks[CURL_LOCK_DATA_LAST];

static void lock_cb(CURL *h, curl_lock_data d, curl_lock_access a, void *u)
{
    (void)h, (void)a, (void)u;
    pthread_mutex_lock(&locks[d]);
}
static void unlock_cb(CURL *h, curl_lock_data d, void *u)
{
    (void)h, (void)u;
    pthread_mutex_unlock(&locks[d]);
}
static void init_once(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&locks[i], NULL);
    share = curl_share_init();
    if (share != NULL) {
        curl_share_setopt(share, CURLSHOPT_LOCKFUNC, lock_cb);
        curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, unlock_cb);
        curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
        curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    }
}

void sb_io_s3_reset_config(void)
{
    sb_aws_reset();
}

/* ---- URIs ---- */

typedef struct {
    char *bucket, *key; /* key may be "" */
} loc;

static void loc_free(loc *l)
{
    free(l->bucket);
    free(l->key);
}

static int loc_parse(const char *uri, loc *l, sb_err *err)
{
    memset(l, 0, sizeof *l);
    if (strncmp(uri, "s3://", 5) != 0)
        return sb_err_set(err, "\"%.200s\": not an s3:// URI", uri);
    const char *b = uri + 5, *s = strchr(b, '/');
    size_t bl = s ? (size_t)(s - b) : strlen(b);
    if (bl == 0)
        return sb_err_set(err, "\"%.200s\": no bucket in the s3:// URI", uri);
    l->bucket = strndup(b, bl);
    l->key = strdup(s ? s + 1 : "");
    if (l->bucket == NULL || l->key == NULL) {
        loc_free(l);
        return sb_err_set(err, "\"%.200s\": out of memory", uri);
    }
    /* the key as the URI writes it, percent-encoded (core/pct.h; listings encode '%') */
    if (sb_pct_decode(l->key, strlen(l->key), l->key, strlen(l->key) + 1) < 0) {
        loc_free(l);
        return sb_err_set(err,
                          "\"%.200s\": a '%%' not followed by two hex digits (write %%25 for "
                          "'%%') or %%00 in the key",
                          uri);
    }
    return 0;
}

static char *make_url(const char *bucket, const char *key, const char *query)
{
    const char *ep = sb_aws_s3_endpoint();
    char *k = sb_aws_uri_encode(key, 1), *u = NULL;
    if (k == NULL)
        return NULL;
    const char *qs = query && query[0] ? "?" : "";
    const char *q = query ? query : "";
    int rc;
    if (ep != NULL)
        rc = asprintf(&u, "%s/%s%s%s%s%s", ep, bucket, key[0] || qs[0] ? "/" : "", k, qs, q);
    else
        rc = asprintf(&u, "https://%s.s3.%s.amazonaws.com/%s%s%s", bucket, sb_aws_region(), k, qs,
                      q);
    free(k);
    return rc < 0 ? NULL : u;
}

/* ---- one request ---- */

typedef struct {
    long status;
    char *body;
    size_t len;
    char etag[256];
} resp;

static void resp_free(resp *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

static size_t body_cb(char *p, size_t sz, size_t nm, void *ud)
{
    resp *r = ud;
    size_t n = sz * nm;
    if (r->len + n > MAX_BODY)
        return 0;
    char *b = realloc(r->body, r->len + n + 1);
    if (b == NULL)
        return 0;
    memcpy(b + r->len, p, n);
    r->len += n;
    b[r->len] = '\0';
    r->body = b;
    return n;
}

static size_t hdr_cb(char *p, size_t sz, size_t nm, void *ud)
{
    resp *r = ud;
    size_t n = sz * nm;
    if (n > 5 && strncasecmp(p, "etag:", 5) == 0) {
        size_t a = 5, e = n;
        while (a < e && (p[a] == ' ' || p[a] == '\t'))
            a++;
        while (e > a && (p[e - 1] == '\r' || p[e - 1] == '\n' || p[e - 1] == ' '))
            e--;
        if (e - a < sizeof r->etag) {
            memcpy(r->etag, p + a, e - a);
            r->etag[e - a] = '\0';
        }
    }
    return n;
}

/* SB_S3_VERBOSE: libcurl's trace of each request, for debugging an endpoint, written to stderr
 * through the redaction of core/redact.h. Header lines come out with Authorization,
 * x-amz-security-token and every query value replaced, curl's own notes without the user
 * (the access key id) it signs as, and bodies and TLS records not at all (only their size). */
static void trace_line(const char *tag, const char *p, size_t n)
{
    char line[2048];
    size_t t = strlen(tag);
    memcpy(line, tag, t);
    size_t m = sb_redact_header(p, n, line + t, sizeof line - t - 1);
    char *user = strstr(line, " with user '");
    if (user != NULL) { /* "Server auth using AWS_SIGV4 with user 'AKIA...'" */
        size_t at = (size_t)(user - line), room = sizeof line - 1 - at;
        size_t k = (size_t)snprintf(user, room, " with user %s", SB_REDACTED);
        m = at - t + (k < room ? k : room - 1);
    }
    line[t + m] = '\n';
    ssize_t w = write(STDERR_FILENO, line, t + m + 1);
    (void)w;
}

static int trace_cb(CURL *h, curl_infotype type, char *data, size_t n, void *ud)
{
    (void)h;
    (void)ud;
    const char *tag = type == CURLINFO_TEXT         ? "s3 trace * "
                      : type == CURLINFO_HEADER_IN  ? "s3 trace < "
                      : type == CURLINFO_HEADER_OUT ? "s3 trace > "
                                                    : NULL;
    if (type == CURLINFO_DATA_IN || type == CURLINFO_DATA_OUT) {
        char note[64];
        int k = snprintf(note, sizeof note, "[%zu bytes of body]", n);
        trace_line(type == CURLINFO_DATA_IN ? "s3 trace < " : "s3 trace > ", note, (size_t)k);
    }
    if (tag == NULL)
        return 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && data[j] != '\n')
            j++;
        size_t e = j;
        while (e > i && (data[e - 1] == '\r' || data[e - 1] == '\n'))
            e--;
        if (e > i)
            trace_line(tag, data + i, e - i);
        i = j + 1;
    }
    return 0;
}

/* An easy handle with the common options, signing and headers (*hl: caller frees). */
static CURL *easy_new(const sb_aws_creds *c, struct curl_slist **hl, const char *extra_hdr,
                      char *errbuf)
{
    pthread_once(&once, init_once);
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    *hl = NULL;
    if (share)
        curl_easy_setopt(e, CURLOPT_SHARE, share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (getenv("SB_S3_VERBOSE") != NULL) { /* redacted: trace_cb */
        curl_easy_setopt(e, CURLOPT_DEBUGFUNCTION, trace_cb);
        curl_easy_setopt(e, CURLOPT_VERBOSE, 1L);
    }
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    errbuf[0] = '\0';
    /* libcurl 7.88's SigV4 signs every custom header, an empty one (removing a header) too:
     * only real headers here, and a content-type always (it is signed even when absent). */
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    if (c->key != NULL) {
        char sig[128], *up = NULL;
        snprintf(sig, sizeof sig, "aws:amz:%s:s3", sb_aws_region());
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sig);
        if (asprintf(&up, "%s:%s", c->key, c->secret) >= 0) {
            curl_easy_setopt(e, CURLOPT_USERPWD, up);
            free(up);
        }
        h = curl_slist_append(h, "x-amz-content-sha256:UNSIGNED-PAYLOAD");
        if (c->token != NULL) {
            char *t = NULL;
            if (asprintf(&t, "x-amz-security-token:%s", c->token) >= 0) {
                h = curl_slist_append(h, t);
                free(t);
            }
        }
    }
    if (extra_hdr != NULL)
        h = curl_slist_append(h, extra_hdr);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    *hl = h;
    return e;
}

/* The error of a finished request: S3's Code and Message when the body has them. */
static int s3_fail(const char *uri, const char *what, const resp *r, sb_err *err)
{
    char *code = sb_aws_xml_get(r->body, "Code"), *msg = sb_aws_xml_get(r->body, "Message");
    const char *hint = r->status == 403   ? "access denied (check the credentials)"
                       : r->status == 404 ? "not found"
                       : r->status == 301 ? "moved (wrong region?)"
                                          : "failed";
    if (code != NULL)
        sb_err_set(err, "\"%.200s\": %s: HTTP %ld %.60s: %.200s", uri, what, r->status, code,
                   msg ? msg : "");
    else
        sb_err_set(err, "\"%.200s\": %s: HTTP %ld %s", uri, what, r->status, hint);
    free(code);
    free(msg);
    return -1;
}

/* Runs one request with retries, with one more header when hdr is not NULL. 0 with r->status
 * (any HTTP status; the caller judges it), or -1 + err when no HTTP answer came (after retries)
 * or on a local failure. */
static int s3_do_hdr(const char *method, const char *bucket, const char *key, const char *query,
                     const char *hdr, const void *body, size_t blen, resp *r, const char *uri,
                     const char *what, sb_err *err)
{
    int attempts = sb_io_retry_attempts();
    memset(r, 0, sizeof *r);
    for (int a = 0;; a++) {
        if (a > 0)
            sb_io_retry_sleep(a);
        resp_free(r);
        sb_aws_creds c;
        if (sb_aws_credentials(&c, err) != 0)
            return sb_err_wrap(err, "\"%.200s\"", uri);
        char *url = make_url(bucket, key, query);
        char errbuf[CURL_ERROR_SIZE];
        struct curl_slist *hl = NULL;
        CURL *e = url ? easy_new(&c, &hl, hdr, errbuf) : NULL;
        sb_aws_creds_free(&c);
        if (e == NULL) {
            free(url);
            return sb_err_set(err, "\"%.200s\": %s: out of memory", uri, what);
        }
        curl_easy_setopt(e, CURLOPT_URL, url);
        if (strcmp(method, "HEAD") == 0) {
            curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        } else if (strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0) {
            /* bodies are in memory: as POSTFIELDS, libcurl's SigV4 signs their SHA-256 */
            curl_easy_setopt(e, CURLOPT_POST, 1L);
            if (method[1] == 'U')
                curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
        } else if (strcmp(method, "GET") != 0) {
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
        }
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, hdr_cb);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
        CURLcode cc = curl_easy_perform(e);
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
        curl_easy_cleanup(e);
        curl_slist_free_all(hl);
        free(url);
        if (cc != CURLE_OK) {
            if (sb_io_retry_curl((int)cc) && a + 1 < attempts)
                continue;
            resp_free(r);
            return sb_err_set(err, "\"%.200s\": %s: %s%s%s", uri, what, curl_easy_strerror(cc),
                              errbuf[0] ? ": " : "", errbuf);
        }
        if (sb_io_retry_status(r->status) && a + 1 < attempts)
            continue;
        return 0;
    }
}

static int s3_do(const char *method, const char *bucket, const char *key, const char *query,
                 const void *body, size_t blen, resp *r, const char *uri, const char *what,
                 sb_err *err)
{
    return s3_do_hdr(method, bucket, key, query, NULL, body, blen, r, uri, what, err);
}

/* ---- list ---- */

static int objs_add(sb_io_objlist *f, const char *bucket, const char *key, uint64_t size,
                    sb_err *err)
{
    /* a '%' in a key is written %25, so that loc_parse() decodes the URI back to the key */
    size_t n = strlen(key), pct = 0;
    for (size_t i = 0; i < n; i++)
        pct += key[i] == '%';
    char *u = malloc(strlen(bucket) + n + 2 * pct + 7);
    if (u != NULL) {
        char *o = u + sprintf(u, "s3://%s/", bucket);
        for (size_t i = 0; i < n; i++) {
            if (key[i] == '%') {
                memcpy(o, "%25", 3);
                o += 3;
            } else {
                *o++ = key[i];
            }
        }
        *o = '\0';
    }
    return sb_io_objlist_add(f, u, size, 0 /* ranged GETs always work on S3 */, err);
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *e;
    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    *v = strtoull(s, &e, 10);
    return *e == '\0' ? 0 : -1;
}

/* The objects directly under prefix (whose last component matches pattern when not NULL). */
static int list_prefix(const char *uri, const loc *l, const char *prefix, const char *pattern,
                       int flags, sb_io_objlist *f, sb_err *err)
{
    char *token = NULL;
    int rc = 0, more = 1;
    while (rc == 0 && more) {
        const char *kv[] = {"list-type", "2",    "delimiter",          "/",
                            "prefix",    prefix, "continuation-token", token};
        char *q = sb_aws_query(kv, 4);
        resp r;
        if (q == NULL) {
            rc = sb_err_set(err, "\"%.200s\": out of memory", uri);
            break;
        }
        rc = s3_do("GET", l->bucket, "", q, NULL, 0, &r, uri, "ListObjectsV2", err);
        free(q);
        free(token);
        token = NULL;
        if (rc != 0)
            break;
        if (r.status != 200) {
            rc = s3_fail(uri, "ListObjectsV2", &r, err);
            resp_free(&r);
            break;
        }
        const char *pos = r.body ? r.body : "";
        char *c = NULL;
        while (rc == 0 && sb_aws_xml_next(r.body ? r.body : "", "Contents", &pos, &c) == 1) {
            char *key = sb_aws_xml_get(c, "Key"), *sz = sb_aws_xml_get(c, "Size");
            uint64_t size = 0;
            if (key == NULL || parse_u64(sz, &size) != 0) {
                rc = sb_err_set(err, "\"%.200s\": ListObjectsV2: malformed <Contents>", uri);
            } else {
                const char *s = strrchr(key, '/'), *base = s ? s + 1 : key;
                int skip = base[0] == '\0';
                if (!skip && pattern != NULL && fnmatch(pattern, base, 0) != 0)
                    skip = 1;
                if (!skip && (base[0] == '.' || base[0] == '_') && !(flags & SB_IO_LIST_ALL) &&
                    !(pattern != NULL && pattern[0] == base[0]))
                    skip = 1;
                if (!skip)
                    rc = objs_add(f, l->bucket, key, size, err);
            }
            free(key);
            free(sz);
            free(c);
            c = NULL;
        }
        char *tr = sb_aws_xml_get(r.body, "IsTruncated");
        more = tr != NULL && strcmp(tr, "true") == 0;
        free(tr);
        if (more) {
            token = sb_aws_xml_get(r.body, "NextContinuationToken");
            if (token == NULL || token[0] == '\0')
                more = 0;
        }
        resp_free(&r);
    }
    free(token);
    return rc;
}

/* HEAD needs the size: a separate request reading Content-Length. */
static size_t len_cb(char *p, size_t sz, size_t nm, void *ud)
{
    size_t n = sz * nm;
    if (n > 15 && strncasecmp(p, "content-length:", 15) == 0)
        *(uint64_t *)ud = strtoull(p + 15, NULL, 10);
    return n;
}

static int s3_head_size(const char *uri, const loc *l, uint64_t *size, int *exists, sb_err *err)
{
    int attempts = sb_io_retry_attempts();
    for (int a = 0;; a++) {
        if (a > 0)
            sb_io_retry_sleep(a);
        sb_aws_creds c;
        if (sb_aws_credentials(&c, err) != 0)
            return sb_err_wrap(err, "\"%.200s\"", uri);
        char *url = make_url(l->bucket, l->key, NULL);
        char errbuf[CURL_ERROR_SIZE];
        struct curl_slist *hl = NULL;
        CURL *e = url ? easy_new(&c, &hl, NULL, errbuf) : NULL;
        sb_aws_creds_free(&c);
        if (e == NULL) {
            free(url);
            return sb_err_set(err, "\"%.200s\": out of memory", uri);
        }
        uint64_t len = 0;
        long st = 0;
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, len_cb);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, &len);
        CURLcode cc = curl_easy_perform(e);
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
        curl_easy_cleanup(e);
        curl_slist_free_all(hl);
        free(url);
        if (cc != CURLE_OK) {
            if (sb_io_retry_curl((int)cc) && a + 1 < attempts)
                continue;
            return sb_err_set(err, "\"%.200s\": HEAD: %s%s%s", uri, curl_easy_strerror(cc),
                              errbuf[0] ? ": " : "", errbuf);
        }
        if (sb_io_retry_status(st) && a + 1 < attempts)
            continue;
        if (st == 200) {
            *exists = 1;
            *size = len;
            return 0;
        }
        if (st == 404) {
            *exists = 0;
            return 0;
        }
        resp r = {.status = st};
        return s3_fail(uri, "HEAD", &r, err);
    }
}

static int s3_list(const char *uri, int flags, sb_io_obj **out, size_t *n, sb_err *err)
{
    loc l;
    if (loc_parse(uri, &l, err) != 0)
        return -1;
    sb_io_objlist f = {0};
    int rc = 0;
    size_t kl = strlen(l.key);
    const char *last = strrchr(l.key, '/');
    last = last ? last + 1 : l.key;
    if ((flags & SB_IO_LIST_DIR) || kl == 0 || l.key[kl - 1] == '/') {
        char *prefix = NULL;
        if (asprintf(&prefix, "%s%s", l.key, kl > 0 && l.key[kl - 1] != '/' ? "/" : "") < 0)
            rc = sb_err_set(err, "\"%.200s\": out of memory", uri);
        else
            rc = list_prefix(uri, &l, prefix, NULL, flags, &f, err);
        free(prefix);
        if (rc == 0 && f.n == 0 && !(flags & (SB_IO_LIST_ALL | SB_IO_LIST_DIR)))
            rc = sb_err_set(err,
                            "\"%.200s\": no input objects under this prefix (names starting "
                            "with '.' or '_' are skipped)",
                            uri);
    } else if (strpbrk(last, "*?[") != NULL) {
        char *prefix = strndup(l.key, (size_t)(last - l.key));
        if (prefix == NULL)
            rc = sb_err_set(err, "\"%.200s\": out of memory", uri);
        else
            rc = list_prefix(uri, &l, prefix, last, flags, &f, err);
        free(prefix);
        if (rc == 0 && f.n == 0)
            rc = sb_err_set(err, "\"%.200s\": no objects match %.200s", uri, last);
    } else {
        uint64_t size = 0;
        int exists = 0;
        rc = s3_head_size(uri, &l, &size, &exists, err);
        if (rc == 0 && exists) {
            rc = objs_add(&f, l.bucket, l.key, size, err);
        } else if (rc == 0) {
            char *prefix = NULL;
            if (asprintf(&prefix, "%s/", l.key) < 0)
                rc = sb_err_set(err, "\"%.200s\": out of memory", uri);
            else
                rc = list_prefix(uri, &l, prefix, NULL, flags, &f, err);
            free(prefix);
            if (rc == 0 && f.n == 0 && !(flags & SB_IO_LIST_ALL))
                rc = sb_err_set(err, "\"%.200s\": no such object, and no input objects under it",
                                uri);
        }
    }
    loc_free(&l);
    return sb_io_objlist_finish(&f, rc, out, n);
}

static int s3_stat(const char *uri, uint64_t *size, int *exists, sb_err *err)
{
    loc l;
    if (loc_parse(uri, &l, err) != 0)
        return -1;
    int rc = l.key[0] == '\0' ? sb_err_set(err, "\"%.200s\": no object key", uri)
                              : s3_head_size(uri, &l, size, exists, err);
    loc_free(&l);
    return rc;
}

/* ---- read: a streamed ranged GET ---- */

typedef struct {
    sb_io_rd base;
    char *uri;
    loc l;
    uint64_t pos, end; /* pos: bytes handed to the caller */
    CURLM *m;
    CURL *e;
    struct curl_slist *hl;
    char *buf;
    size_t cap, head, tail;
    char *dst; /* the caller's buffer while s3_read waits with an empty ring: bytes go there */
    size_t dst_cap, dst_len;
    sb_io_push_fn push; /* while s3_read_push runs a transfer: bytes go there, uncopied */
    void *push_ud;
    int push_stopped; /* push returned nonzero: the transfer was ended on purpose */
    int paused, done, attempt;
    CURLcode result;
    long status;
    resp ebody; /* the body of an error answer */
    char errbuf[CURL_ERROR_SIZE];
} rd;

static size_t rd_cb(char *p, size_t sz, size_t nm, void *ud)
{
    rd *r = ud;
    size_t n = sz * nm;
    if (r->status == 0)
        curl_easy_getinfo(r->e, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status != 206 && !(r->status == 200 && r->pos == 0))
        return body_cb(p, sz, nm, &r->ebody);
    if (r->pos + r->dst_len + (r->tail - r->head) + n > r->end)
        return 0; /* more than asked: fails the transfer */
    if (r->push != NULL) {
        /* the consumer takes the bytes from curl's buffer: no copy here */
        r->pos += n;
        if (r->push(r->push_ud, p, n) != 0) {
            r->push_stopped = 1;
            return 0; /* ends the transfer (the handle is spent) */
        }
        return n;
    }
    size_t total = n;
    if (r->dst != NULL && r->dst_len < r->dst_cap) {
        /* the ring is empty and the caller waits: one copy instead of two */
        size_t k = r->dst_cap - r->dst_len < n ? r->dst_cap - r->dst_len : n;
        memcpy(r->dst + r->dst_len, p, k);
        r->dst_len += k;
        p += k;
        n -= k;
        if (n == 0)
            return total;
    }
    if (r->cap - r->tail < n && r->head > 0) {
        memmove(r->buf, r->buf + r->head, r->tail - r->head);
        r->tail -= r->head;
        r->head = 0;
    }
    if (r->cap - r->tail < n) {
        /* pause only a chunk not started: curl hands a paused chunk over again whole */
        if (r->tail > 0 && n == total) {
            r->paused = 1;
            return CURL_WRITEFUNC_PAUSE;
        }
        char *b = realloc(r->buf, r->tail + n);
        if (b == NULL)
            return 0;
        r->buf = b;
        r->cap = r->tail + n;
    }
    memcpy(r->buf + r->tail, p, n);
    r->tail += n;
    return total;
}

static void rd_stop(rd *r)
{
    if (r->e != NULL) {
        curl_multi_remove_handle(r->m, r->e);
        curl_easy_cleanup(r->e);
        r->e = NULL;
    }
    curl_slist_free_all(r->hl);
    r->hl = NULL;
}

static int rd_start(rd *r, sb_err *err)
{
    sb_aws_creds c;
    if (sb_aws_credentials(&c, err) != 0)
        return sb_err_wrap(err, "\"%.200s\"", r->uri);
    char range[96];
    snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-%" PRIu64, r->pos, r->end - 1);
    char *url = make_url(r->l.bucket, r->l.key, NULL);
    r->e = url ? easy_new(&c, &r->hl, range, r->errbuf) : NULL;
    sb_aws_creds_free(&c);
    if (r->e == NULL) {
        free(url);
        return sb_err_set(err, "\"%.200s\": out of memory", r->uri);
    }
    curl_easy_setopt(r->e, CURLOPT_URL, url);
    free(url);
    curl_easy_setopt(r->e, CURLOPT_WRITEFUNCTION, rd_cb);
    curl_easy_setopt(r->e, CURLOPT_WRITEDATA, r);
    /* large receive chunks: one callback (and one recv) per 512 KiB instead of per 16 KiB;
     * SB_S3_RECV_BUFFER (bytes, 1024..) sets it otherwise, which tests use to cut the bytes into
     * many small pieces */
    long rb = 512L * 1024;
    const char *rbs = getenv("SB_S3_RECV_BUFFER");
    if (rbs != NULL && atol(rbs) >= 1024)
        rb = atol(rbs);
    curl_easy_setopt(r->e, CURLOPT_BUFFERSIZE, rb);
    r->status = 0;
    r->done = 0;
    r->paused = 0;
    r->result = CURLE_OK;
    resp_free(&r->ebody);
    curl_multi_add_handle(r->m, r->e);
    return 0;
}

/* The transfer finished short of the range's end (the ring drained): a transient failure is
 * retried (the next rd_start resumes at pos) and 0 returned; anything else is -1 + err. */
static int rd_ended(rd *r, sb_err *err)
{
    long st = r->status;
    CURLcode cc = r->result;
    int transient = cc != CURLE_OK ? sb_io_retry_curl((int)cc) : sb_io_retry_status(st);
    if (cc == CURLE_OK && (st == 206 || st == 200)) {
        rd_stop(r);
        return sb_err_set(err,
                          "\"%.200s\": object changed since planning: the body ended at "
                          "byte %" PRIu64 ", expected %" PRIu64,
                          r->uri, r->pos, r->end);
    }
    if (transient && r->attempt + 1 < sb_io_retry_attempts()) {
        r->attempt++;
        rd_stop(r);
        sb_io_retry_sleep(r->attempt);
        return 0;
    }
    if (cc != CURLE_OK) {
        sb_err_set(err, "\"%.200s\": GET at byte %" PRIu64 ": %s%s%s", r->uri, r->pos,
                   curl_easy_strerror(cc), r->errbuf[0] ? ": " : "", r->errbuf);
    } else if (st == 416) {
        sb_err_set(
            err, "\"%.200s\": object changed since planning: it is shorter than %" PRIu64 " bytes",
            r->uri, r->end);
    } else {
        r->ebody.status = st;
        s3_fail(r->uri, "GET", &r->ebody, err);
    }
    rd_stop(r);
    return -1;
}

/* Runs the transfer until it has handed something over, finished, or waited a while. */
static void rd_step(rd *r)
{
    int running = 0;
    curl_multi_perform(r->m, &running);
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(r->m, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == r->e) {
            r->done = 1;
            r->result = msg->data.result;
            curl_easy_getinfo(r->e, CURLINFO_RESPONSE_CODE, &r->status);
        }
    }
}

static ssize_t s3_read(sb_io_rd *base, void *buf, size_t n, sb_err *err)
{
    rd *r = (rd *)base;
    for (;;) {
        if (r->head < r->tail) {
            size_t k = r->tail - r->head < n ? r->tail - r->head : n;
            memcpy(buf, r->buf + r->head, k);
            r->head += k;
            r->pos += k;
            return (ssize_t)k;
        }
        if (r->pos == r->end) {
            rd_stop(r);
            return 0;
        }
        if (r->e == NULL) {
            if (rd_start(r, err) != 0)
                return -1;
        }
        if (r->done) {
            if (rd_ended(r, err) != 0)
                return -1;
            continue; /* retried */
        }
        /* the ring is empty: the transfer writes straight into the caller's buffer */
        r->dst = buf;
        r->dst_cap = n;
        r->dst_len = 0;
        size_t before = r->tail;
        if (r->paused) {
            r->paused = 0;
            curl_easy_pause(r->e, CURLPAUSE_CONT); /* may deliver data at once */
        } else {
            rd_step(r);
        }
        size_t got = r->dst_len;
        r->dst = NULL;
        r->dst_len = 0;
        if (got > 0 || r->tail > before)
            r->attempt = 0; /* progress: the retry budget starts again */
        if (got > 0) {
            r->pos += got;
            return (ssize_t)got;
        }
        if (!r->done && r->tail == r->head && !r->paused)
            curl_multi_poll(r->m, NULL, 0, 1000, NULL);
    }
}

static int s3_read_push(sb_io_rd *base, sb_io_push_fn fn, void *ud, sb_err *err)
{
    rd *r = (rd *)base;
    if (r->head < r->tail) { /* bytes a pull read left in the ring go first */
        size_t k = r->tail - r->head;
        const char *p = r->buf + r->head;
        r->head = r->tail = 0;
        r->pos += k;
        if (fn(ud, p, k) != 0) {
            rd_stop(r);
            return 1;
        }
    }
    for (;;) {
        if (r->pos == r->end) {
            rd_stop(r);
            return 0;
        }
        if (r->e == NULL && rd_start(r, err) != 0)
            return -1;
        if (r->done) {
            if (rd_ended(r, err) != 0)
                return -1;
            continue; /* retried */
        }
        uint64_t before = r->pos;
        r->push = fn;
        r->push_ud = ud;
        if (r->paused) { /* paused by an earlier pull read: its chunk comes again, to fn */
            r->paused = 0;
            curl_easy_pause(r->e, CURLPAUSE_CONT);
        } else {
            rd_step(r);
        }
        r->push = NULL;
        if (r->push_stopped) {
            rd_stop(r);
            return 1;
        }
        if (r->pos > before)
            r->attempt = 0; /* progress: the retry budget starts again */
        else if (!r->done)
            curl_multi_poll(r->m, NULL, 0, 1000, NULL);
    }
}

static void s3_read_close(sb_io_rd *base)
{
    rd *r = (rd *)base;
    rd_stop(r);
    if (r->m)
        curl_multi_cleanup(r->m);
    resp_free(&r->ebody);
    free(r->buf);
    free(r->uri);
    loc_free(&r->l);
    free(r);
}

static int s3_read_open(const char *uri, uint64_t off, uint64_t end, sb_io_rd **out, sb_err *err)
{
    pthread_once(&once, init_once);
    if (end < off)
        return sb_err_set(err, "\"%.200s\": bad range [%" PRIu64 ", %" PRIu64 ")", uri, off, end);
    rd *r = calloc(1, sizeof *r);
    if (r == NULL)
        return sb_err_set(err, "\"%.200s\": out of memory", uri);
    r->base.be = &sb_io_backend_s3;
    r->pos = off;
    r->end = end;
    r->uri = strdup(uri);
    r->cap = RD_BUF;
    r->buf = malloc(RD_BUF);
    r->m = curl_multi_init();
    if (r->uri == NULL || r->buf == NULL || r->m == NULL) {
        s3_read_close(&r->base);
        return sb_err_set(err, "\"%.200s\": out of memory", uri);
    }
    if (loc_parse(uri, &r->l, err) != 0) {
        s3_read_close(&r->base);
        return -1;
    }
    *out = &r->base;
    return 0;
}

/* ---- write ---- */

typedef struct {
    sb_io_wr base;
    char *uri;
    loc l;
    char *buf;
    size_t len, cap, part;
    char *upload; /* multipart UploadId, NULL before the first part */
    char **etags; /* of parts 1..nparts */
    int nparts;
} wr;

static size_t part_size(void)
{
    const char *s = getenv("SB_S3_MULTIPART_THRESHOLD");
    size_t v = (size_t)8 << 20;
    if (s != NULL && s[0] >= '0' && s[0] <= '9')
        v = (size_t)strtoull(s, NULL, 10);
    return v < MIN_PART ? MIN_PART : v;
}

static void abort_upload(wr *w)
{
    if (w->upload == NULL)
        return;
    const char *kv[] = {"uploadId", w->upload};
    char *q = sb_aws_query(kv, 1);
    resp r;
    sb_err e;
    if (q != NULL && s3_do("DELETE", w->l.bucket, w->l.key, q, NULL, 0, &r, w->uri,
                           "AbortMultipartUpload", &e) == 0)
        resp_free(&r);
    free(q);
    free(w->upload);
    w->upload = NULL;
}

static void wr_free(wr *w)
{
    for (int i = 0; i < w->nparts; i++)
        free(w->etags[i]);
    free(w->etags);
    free(w->upload);
    free(w->buf);
    free(w->uri);
    loc_free(&w->l);
    free(w);
}

static int upload_part(wr *w, sb_err *err)
{
    resp r;
    if (w->upload == NULL) {
        if (s3_do("POST", w->l.bucket, w->l.key, "uploads=", NULL, 0, &r, w->uri,
                  "CreateMultipartUpload", err) != 0)
            return -1;
        if (r.status != 200) {
            s3_fail(w->uri, "CreateMultipartUpload", &r, err);
            resp_free(&r);
            return -1;
        }
        w->upload = sb_aws_xml_get(r.body, "UploadId");
        resp_free(&r);
        if (w->upload == NULL)
            return sb_err_set(err, "\"%.200s\": CreateMultipartUpload: no UploadId", w->uri);
    }
    char num[16];
    snprintf(num, sizeof num, "%d", w->nparts + 1);
    const char *kv[] = {"partNumber", num, "uploadId", w->upload};
    char *q = sb_aws_query(kv, 2);
    char **et = realloc(w->etags, (size_t)(w->nparts + 1) * sizeof *et);
    if (q == NULL || et == NULL) {
        free(q);
        if (et)
            w->etags = et;
        return sb_err_set(err, "\"%.200s\": out of memory", w->uri);
    }
    w->etags = et;
    int rc = s3_do("PUT", w->l.bucket, w->l.key, q, w->buf, w->len, &r, w->uri, "UploadPart", err);
    free(q);
    if (rc != 0)
        return -1;
    if (r.status != 200 || r.etag[0] == '\0') {
        s3_fail(w->uri, "UploadPart", &r, err);
        resp_free(&r);
        return -1;
    }
    w->etags[w->nparts++] = strdup(r.etag);
    resp_free(&r);
    if (w->etags[w->nparts - 1] == NULL)
        return sb_err_set(err, "\"%.200s\": out of memory", w->uri);
    w->len = 0;
    /* fault injection for tests (s3.h): this process stops with an upload open */
    const char *stop = getenv("SB_S3_TEST_STOP_FILE");
    if (stop != NULL && stop[0] != '\0' && unlink(stop) == 0)
        raise(SIGSTOP);
    return 0;
}

static int s3_write(sb_io_wr *base, const void *p, size_t n, sb_err *err)
{
    wr *w = (wr *)base;
    const char *s = p;
    while (n > 0) {
        if (w->len == w->part && upload_part(w, err) != 0)
            return -1;
        size_t k = w->part - w->len < n ? w->part - w->len : n;
        if (w->len + k > w->cap) {
            size_t cap = w->cap ? w->cap : 65536;
            while (cap < w->len + k)
                cap *= 2;
            if (cap > w->part)
                cap = w->part;
            char *b = realloc(w->buf, cap);
            if (b == NULL)
                return sb_err_set(err, "\"%.200s\": out of memory", w->uri);
            w->buf = b;
            w->cap = cap;
        }
        memcpy(w->buf + w->len, s, k);
        w->len += k;
        s += k;
        n -= k;
    }
    return 0;
}

static int commit(wr *w, sb_err *err)
{
    resp r;
    if (w->upload == NULL) {
        if (s3_do("PUT", w->l.bucket, w->l.key, NULL, w->buf, w->len, &r, w->uri, "PUT", err) != 0)
            return -1;
        int rc = r.status == 200 ? 0 : s3_fail(w->uri, "PUT", &r, err);
        resp_free(&r);
        return rc;
    }
    if (w->len > 0 && upload_part(w, err) != 0)
        return -1;
    size_t cap = 128 + (size_t)w->nparts * 400;
    char *x = malloc(cap), *p = x;
    if (x == NULL)
        return sb_err_set(err, "\"%.200s\": out of memory", w->uri);
    p += sprintf(p, "<CompleteMultipartUpload>");
    for (int i = 0; i < w->nparts; i++)
        p += snprintf(p, cap - (size_t)(p - x),
                      "<Part><PartNumber>%d</PartNumber><ETag>%.300s</ETag></Part>", i + 1,
                      w->etags[i]);
    p += snprintf(p, cap - (size_t)(p - x), "</CompleteMultipartUpload>");
    const char *kv[] = {"uploadId", w->upload};
    char *q = sb_aws_query(kv, 1);
    int rc = q ? s3_do("POST", w->l.bucket, w->l.key, q, x, (size_t)(p - x), &r, w->uri,
                       "CompleteMultipartUpload", err)
               : sb_err_set(err, "\"%.200s\": out of memory", w->uri);
    free(q);
    free(x);
    if (rc != 0)
        return -1;
    if (r.status != 200 || (r.body && strstr(r.body, "<Error>") != NULL))
        rc = s3_fail(w->uri, "CompleteMultipartUpload", &r, err);
    resp_free(&r);
    if (rc == 0) {
        free(w->upload);
        w->upload = NULL;
    }
    return rc;
}

static int s3_write_commit(sb_io_wr *base, sb_err *err)
{
    wr *w = (wr *)base;
    int rc = commit(w, err);
    if (rc != 0)
        abort_upload(w);
    wr_free(w);
    return rc;
}

static void s3_write_abort(sb_io_wr *base)
{
    wr *w = (wr *)base;
    abort_upload(w);
    wr_free(w);
}

static int s3_write_open(const char *uri, sb_io_wr **out, sb_err *err)
{
    wr *w = calloc(1, sizeof *w);
    if (w == NULL)
        return sb_err_set(err, "\"%.200s\": out of memory", uri);
    w->base.be = &sb_io_backend_s3;
    w->part = part_size();
    w->uri = strdup(uri);
    if (w->uri == NULL) {
        wr_free(w);
        return sb_err_set(err, "\"%.200s\": out of memory", uri);
    }
    if (loc_parse(uri, &w->l, err) != 0) {
        wr_free(w);
        return -1;
    }
    if (w->l.key[0] == '\0' || w->l.key[strlen(w->l.key) - 1] == '/') {
        wr_free(w);
        return sb_err_set(err, "\"%.200s\": no object key to write", uri);
    }
    *out = &w->base;
    return 0;
}

/* ---- del, cleanup, buckets ---- */

static int s3_del(const char *uri, sb_err *err)
{
    loc l;
    if (loc_parse(uri, &l, err) != 0)
        return -1;
    resp r;
    int rc = s3_do("DELETE", l.bucket, l.key, NULL, NULL, 0, &r, uri, "DELETE", err);
    if (rc == 0 && r.status != 204 && r.status != 200 && r.status != 404)
        rc = s3_fail(uri, "DELETE", &r, err);
    if (rc == 0 || r.status)
        resp_free(&r);
    loc_free(&l);
    return rc;
}

/* A server-side copy (CopyObject: no byte passes through here), then the source deleted. S3
 * may answer 200 with an error in the body: that is a failure too. */
static int s3_move(const char *from, const char *to, int *absent, sb_err *err)
{
    loc a, b;
    if (loc_parse(from, &a, err) != 0)
        return -1;
    if (loc_parse(to, &b, err) != 0) {
        loc_free(&a);
        return -1;
    }
    char *src = sb_aws_uri_encode(a.key, 1), *hdr = NULL;
    int rc = 0;
    resp r;
    memset(&r, 0, sizeof r);
    if (src == NULL || asprintf(&hdr, "x-amz-copy-source: /%s/%s", a.bucket, src) < 0) {
        hdr = NULL;
        rc = sb_err_set(err, "\"%.200s\": out of memory", from);
    } else {
        rc = s3_do_hdr("PUT", b.bucket, b.key, NULL, hdr, NULL, 0, &r, to, "CopyObject", err);
    }
    if (rc == 0 && (r.status != 200 || (r.body != NULL && strstr(r.body, "<Error>") != NULL))) {
        if (r.status == 404 && absent != NULL)
            *absent = 1;
        rc = s3_fail(from, "CopyObject", &r, err);
    }
    resp_free(&r);
    free(hdr);
    free(src);
    loc_free(&a);
    loc_free(&b);
    return rc == 0 ? s3_del(from, err) : rc;
}

static int s3_cleanup(const char *dir_uri, sb_err *err)
{
    loc l;
    if (loc_parse(dir_uri, &l, err) != 0)
        return -1;
    size_t kl = strlen(l.key);
    char *prefix = NULL, *km = NULL, *um = NULL;
    if (asprintf(&prefix, "%s%s", l.key, kl > 0 && l.key[kl - 1] != '/' ? "/" : "") < 0) {
        loc_free(&l);
        return sb_err_set(err, "\"%.200s\": out of memory", dir_uri);
    }
    int rc = 0, more = 1;
    while (rc == 0 && more) {
        /* the whole bucket's uploads, filtered here: MinIO lists uploads under a prefix only
         * when the prefix is a whole object key */
        const char *kv[] = {"uploads", "", "key-marker", km, "upload-id-marker", um};
        char *q = sb_aws_query(kv, 3);
        resp r;
        free(km);
        free(um);
        km = um = NULL;
        rc = q ? s3_do("GET", l.bucket, "", q, NULL, 0, &r, dir_uri, "ListMultipartUploads", err)
               : sb_err_set(err, "\"%.200s\": out of memory", dir_uri);
        free(q);
        if (rc != 0)
            break;
        if (r.status != 200) {
            rc = s3_fail(dir_uri, "ListMultipartUploads", &r, err);
            resp_free(&r);
            break;
        }
        const char *pos = r.body ? r.body : "";
        char *u = NULL;
        while (rc == 0 && sb_aws_xml_next(r.body ? r.body : "", "Upload", &pos, &u) == 1) {
            char *key = sb_aws_xml_get(u, "Key"), *id = sb_aws_xml_get(u, "UploadId");
            if (key != NULL && id != NULL && strncmp(key, prefix, strlen(prefix)) == 0) {
                const char *akv[] = {"uploadId", id};
                char *aq = sb_aws_query(akv, 1);
                resp ar;
                char *ouri = NULL;
                if (aq != NULL && asprintf(&ouri, "s3://%s/%s", l.bucket, key) >= 0) {
                    rc = s3_do("DELETE", l.bucket, key, aq, NULL, 0, &ar, ouri,
                               "AbortMultipartUpload", err);
                    if (rc == 0 && ar.status != 204 && ar.status != 200 && ar.status != 404)
                        rc = s3_fail(ouri, "AbortMultipartUpload", &ar, err);
                    if (rc == 0 || ar.status)
                        resp_free(&ar);
                } else {
                    rc = sb_err_set(err, "\"%.200s\": out of memory", dir_uri);
                }
                free(ouri);
                free(aq);
            }
            free(key);
            free(id);
            free(u);
            u = NULL;
        }
        char *tr = sb_aws_xml_get(r.body, "IsTruncated");
        more = tr != NULL && strcmp(tr, "true") == 0;
        free(tr);
        if (more) {
            km = sb_aws_xml_get(r.body, "NextKeyMarker");
            um = sb_aws_xml_get(r.body, "NextUploadIdMarker");
            if (km == NULL)
                more = 0;
        }
        resp_free(&r);
    }
    free(km);
    free(um);
    free(prefix);
    loc_free(&l);
    return rc;
}

int sb_io_s3_make_bucket(const char *bucket, sb_err *err)
{
    char uri[300];
    snprintf(uri, sizeof uri, "s3://%.250s", bucket);
    resp r;
    if (s3_do("PUT", bucket, "", NULL, NULL, 0, &r, uri, "CreateBucket", err) != 0)
        return -1;
    char *code = sb_aws_xml_get(r.body, "Code");
    int rc = 0;
    if (r.status != 200 && !(code && strcmp(code, "BucketAlreadyOwnedByYou") == 0))
        rc = s3_fail(uri, "CreateBucket", &r, err);
    free(code);
    resp_free(&r);
    return rc;
}

const sb_io_backend sb_io_backend_s3 = {
    .name = "s3",
    .list = s3_list,
    .stat = s3_stat,
    .read_open = s3_read_open,
    .read = s3_read,
    .read_close = s3_read_close,
    .read_push = s3_read_push,
    .write_open = s3_write_open,
    .write = s3_write,
    .write_commit = s3_write_commit,
    .write_abort = s3_write_abort,
    .del = s3_del,
    .cleanup = s3_cleanup,
    .move = s3_move,
};
