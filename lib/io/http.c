/* http.c — the http(s):// backend of the storage interface (see store.h): read only.
 *
 * One URL is one object. list/stat send a HEAD (or, when the server refuses HEAD, a GET of
 * "Range: bytes=0-0") and take the size from Content-Length or the total of Content-Range; a
 * server that announces "Accept-Ranges: bytes" or answers 206 can be read from any offset, the
 * others are listed with `whole` set (the planner gives them one split). A server that sends
 * no length is an error naming the URL.
 *
 * read streams a GET through the curl multi interface into a bounded buffer (the write
 * callback pauses the transfer when the buffer is full, as in curl's fopen.c example), so
 * memory stays at SB_HTTP_BUF whatever the object's size. A ranged request answered with 200
 * (the server ignored Range) is an error unless it starts at offset 0; a body shorter than
 * planned is an error ("changed since planning"); a transfer that breaks mid-way is resumed
 * with a ranged GET from the current position, with bounded retries (retry.h).
 *
 * TLS: curl's defaults (peer and host verified); SSL_CERT_FILE or CURL_CA_BUNDLE name the CA
 * bundle when set. Redirects are followed (at most 5, http and https only). Connections and
 * DNS answers are shared between handles (one CURLSH, locked per data kind).
 *
 * Errors name the URL with its userinfo and query values redacted (herr, core/redact.h).
 *
 * Memory: readers own their curl handles and buffer; everything is freed by read_close.
 */
#include "core/redact.h"
#include "io/retry.h"
#include "io/schemes.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SB_HTTP_BUF (1u << 20) /* bytes buffered per reader at most */

/* sb_err_set with the message redacted (core/redact.h): the errors quote the URI, and a
 * presigned URL's query holds its signature and credential, which must reach no log, status or
 * Event. The host and path stay, so the message still says what failed. */
static int herr(sb_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int herr(sb_err *err, const char *fmt, ...)
{
    if (err == NULL)
        return -1;
    char raw[SB_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    char red[SB_ERR_MAX];
    sb_redact_text(raw, red, sizeof red);
    return sb_err_set(err, "%s", red);
}

/* ---- shared curl state ---- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLSH *g_share;
static pthread_mutex_t g_locks[CURL_LOCK_DATA_LAST];
static int g_init_ok;

static void lock_cb(CURL *h, curl_lock_data d, curl_lock_access a, void *ud)
{
    (void)h, (void)a, (void)ud;
    pthread_mutex_lock(&g_locks[d]);
}
static void unlock_cb(CURL *h, curl_lock_data d, void *ud)
{
    (void)h, (void)ud;
    pthread_mutex_unlock(&g_locks[d]);
}

static void init_once(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&g_locks[i], NULL);
    g_share = curl_share_init();
    if (g_share != NULL) {
        curl_share_setopt(g_share, CURLSHOPT_LOCKFUNC, lock_cb);
        curl_share_setopt(g_share, CURLSHOPT_UNLOCKFUNC, unlock_cb);
        curl_share_setopt(g_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
        curl_share_setopt(g_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    }
    g_init_ok = 1;
}

/* Response headers of the last response (reset at each status line, so after redirects they
 * are the final response's). */
typedef struct {
    int has_len, accept_ranges, has_crange;
    uint64_t len;
    uint64_t cr_start, cr_total; /* Content-Range: bytes START-END/TOTAL (TOTAL may be '*') */
    int cr_total_known;
} hdrs;

static int hdr_is(const char *line, size_t n, const char *name, const char **val, size_t *vlen)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return 0;
    const char *v = line + k + 1, *e = line + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *val = v;
    *vlen = (size_t)(e - v);
    return 1;
}

static int parse_u64(const char *s, size_t n, uint64_t *out, const char **stop)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0)
        return -1;
    *out = v;
    if (stop != NULL)
        *stop = s + i;
    return 0;
}

static void hdr_line(hdrs *h, const char *line, size_t n)
{
    const char *v;
    size_t vl;
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        memset(h, 0, sizeof *h);
    } else if (hdr_is(line, n, "content-length", &v, &vl)) {
        h->has_len = parse_u64(v, vl, &h->len, NULL) == 0;
    } else if (hdr_is(line, n, "accept-ranges", &v, &vl)) {
        h->accept_ranges = vl >= 5 && strncasecmp(v, "bytes", 5) == 0;
    } else if (hdr_is(line, n, "content-range", &v, &vl)) {
        /* bytes 0-0/1234, or bytes (star)/1234 in a 416 */
        const char *e = v + vl, *p;
        if (vl < 6 || strncasecmp(v, "bytes ", 6) != 0)
            return;
        p = v + 6;
        if (p < e && *p == '*') {
            p++;
        } else {
            uint64_t last;
            if (parse_u64(p, (size_t)(e - p), &h->cr_start, &p) != 0 || p >= e || *p != '-')
                return;
            p++;
            if (parse_u64(p, (size_t)(e - p), &last, &p) != 0)
                return;
            h->has_crange = 1;
        }
        if (p < e && *p == '/') {
            p++;
            if (p < e && *p != '*' && parse_u64(p, (size_t)(e - p), &h->cr_total, NULL) == 0)
                h->cr_total_known = 1;
        }
    }
}

static size_t hdr_cb(char *p, size_t sz, size_t nm, void *ud)
{
    hdr_line(ud, p, sz * nm);
    return sz * nm;
}

/* The options every request shares. */
static CURL *easy_new(const char *uri, char *errbuf, sb_err *err)
{
    pthread_once(&g_once, init_once);
    if (!g_init_ok) {
        herr(err, "\"%.200s\": libcurl failed to initialize", uri);
        return NULL;
    }
    CURL *e = curl_easy_init();
    if (e == NULL) {
        herr(err, "\"%.200s\": out of memory (curl handle)", uri);
        return NULL;
    }
    errbuf[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, uri);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* < 1 KiB/s for 60 s: a timeout */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "streambatch");
    const char *ca = getenv("SSL_CERT_FILE");
    if (ca == NULL || ca[0] == '\0')
        ca = getenv("CURL_CA_BUNDLE");
    if (ca != NULL && ca[0] != '\0')
        curl_easy_setopt(e, CURLOPT_CAINFO, ca);
    if (g_share != NULL)
        curl_easy_setopt(e, CURLOPT_SHARE, g_share);
    return e;
}

static const char *curl_msg(CURLcode rc, const char *errbuf)
{
    return errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
}

/* ---- size and range support ---- */

typedef struct {
    int got_body; /* the probe GET saw body bytes: it was cut short on purpose */
} probe;

static size_t probe_body(char *p, size_t sz, size_t nm, void *ud)
{
    (void)p, (void)sz, (void)nm;
    ((probe *)ud)->got_body = 1;
    return 0; /* one byte (or a whole ignored-Range body) is not wanted: stop here */
}

/* One request of the probe: HEAD (get=0) or GET of bytes 0-0. status 0 = transport failure
 * (message in err, *retry set when transient). */
static int probe_once(const char *uri, int get, long *status, hdrs *h, int *retry, sb_err *err)
{
    char errbuf[CURL_ERROR_SIZE];
    *status = 0;
    *retry = 0;
    memset(h, 0, sizeof *h);
    CURL *e = easy_new(uri, errbuf, err);
    if (e == NULL)
        return -1;
    probe pr = {0};
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, hdr_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, h);
    if (get) {
        curl_easy_setopt(e, CURLOPT_RANGE, "0-0");
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, probe_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &pr);
    } else {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    }
    CURLcode rc = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    int ret = 0;
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && pr.got_body)) {
        *retry = sb_io_retry_curl((int)rc);
        herr(err, "\"%.200s\": %s", uri, curl_msg(rc, errbuf));
        *status = 0;
        ret = -1;
    }
    curl_easy_cleanup(e);
    return ret;
}

/* Size and range support of a URL; *exists = 0 for 404/410 (then returns 0). */
static int probe_url(const char *uri, uint64_t *size, int *ranges, int *exists, sb_err *err)
{
    int attempts = sb_io_retry_attempts();
    int get = 0;
    for (int a = 0;; a++) {
        long st;
        hdrs h;
        int retry;
        int rc = probe_once(uri, get, &st, &h, &retry, err);
        if (rc == 0 && !get && (st == 405 || st == 501 || st == 403)) {
            get = 1; /* HEAD refused: ask for the first byte instead */
            a--;
            continue;
        }
        if (rc == 0 && sb_io_retry_status(st)) {
            retry = 1;
            herr(err, "\"%.200s\": HTTP %ld", uri, st);
            rc = -1;
        }
        if (rc != 0) {
            if (retry && a + 1 < attempts) {
                sb_io_retry_sleep(a + 1);
                continue;
            }
            if (retry)
                sb_err_wrap(err, "after %d attempts", a + 1);
            return -1;
        }
        *exists = 1;
        if (st == 404 || st == 410) {
            *exists = 0;
            herr(err, "\"%.200s\": not found (HTTP %ld)", uri, st);
            return 0;
        }
        if (get && st == 416 && h.cr_total_known && h.cr_total == 0) {
            *size = 0; /* an empty object has no byte 0 */
            *ranges = 1;
            return 0;
        }
        if (st == 206 && h.cr_total_known) {
            *size = h.cr_total;
            *ranges = 1;
            return 0;
        }
        if (st >= 200 && st < 300 && st != 206) {
            if (!h.has_len)
                return herr(err,
                            "\"%.200s\": the server sends no Content-Length (HTTP %ld): "
                            "the size of an http(s) source must be known",
                            uri, st);
            *size = h.len;
            *ranges = h.accept_ranges;
            return 0;
        }
        if (st == 206)
            return herr(err, "\"%.200s\": HTTP 206 without the total size in Content-Range", uri);
        return herr(err, "\"%.200s\": HTTP %ld", uri, st);
    }
}

static int h_list(const char *uri, int flags, sb_io_obj **out, size_t *n, sb_err *err)
{
    (void)flags; /* one URL is one object: no prefixes, globs or hidden names */
    uint64_t size = 0;
    int ranges = 0, exists = 0;
    if (probe_url(uri, &size, &ranges, &exists, err) != 0 || !exists)
        return -1;
    sb_io_obj *o = calloc(1, sizeof *o);
    if (o == NULL || (o->uri = strdup(uri)) == NULL) {
        free(o);
        return herr(err, "\"%.200s\": out of memory", uri);
    }
    o->size = size;
    o->whole = !ranges;
    *out = o;
    *n = 1;
    return 0;
}

static int h_stat(const char *uri, uint64_t *size, int *exists, sb_err *err)
{
    int ranges = 0;
    return probe_url(uri, size, &ranges, exists, err);
}

/* ---- reading ---- */

typedef struct {
    sb_io_rd base;
    char *uri;
    uint64_t pos; /* next byte handed to the caller */
    uint64_t net; /* next byte from the network (= pos + buffered) */
    uint64_t off, end;
    CURLM *m;
    CURL *e;
    char errbuf[CURL_ERROR_SIZE];
    hdrs h;
    char *buf;
    size_t rd, used; /* buf[rd, used) is undelivered */
    int active;      /* a transfer is in the multi handle */
    int done;        /* the transfer finished; result below */
    CURLcode result;
    int checked; /* the status of the current response was checked */
    int enough;  /* stopped on purpose at `end` */
    int paused;
    int ranges_ok; /* a 206 was seen: resuming mid-object works */
    int failed;    /* our own error (in fail), not retryable */
    int retry_st;  /* a retryable status (5xx, 429) before any byte */
    sb_err fail;
    int attempt;
    sb_io_push_fn push; /* while h_read_push runs: the body goes there, uncopied */
    void *push_ud;
    int push_stopped; /* push returned nonzero: the transfer was ended on purpose */
} hrd;

/* The status of the response, checked when its first body byte (or its end) arrives.
 * 0 ok, -1 failed (r->failed or r->retry_st set). */
static int check_status(hrd *r)
{
    long st = 0;
    curl_easy_getinfo(r->e, CURLINFO_RESPONSE_CODE, &st);
    r->checked = 1;
    if (st == 206) {
        if (!r->h.has_crange || r->h.cr_start != r->net) {
            r->failed = 1;
            herr(&r->fail,
                 "\"%.200s\": asked for bytes from %llu, the server sent a different range", r->uri,
                 (unsigned long long)r->net);
            return -1;
        }
        r->ranges_ok = 1;
        return 0;
    }
    if (st == 200) {
        if (r->net != 0) {
            r->failed = 1;
            herr(&r->fail,
                 "\"%.200s\": the server ignores Range (answered 200 to a request from byte "
                 "%llu): it can only be read whole",
                 r->uri, (unsigned long long)r->net);
            return -1;
        }
        return 0;
    }
    if (sb_io_retry_status(st)) {
        r->retry_st = (int)st;
        return -1;
    }
    r->failed = 1;
    if (st == 416)
        herr(&r->fail,
             "\"%.200s\": HTTP 416: bytes from %llu are not there (the object changed since "
             "planning)",
             r->uri, (unsigned long long)r->net);
    else if (st == 404 || st == 410)
        herr(&r->fail, "\"%.200s\": not found (HTTP %ld)", r->uri, st);
    else
        herr(&r->fail, "\"%.200s\": HTTP %ld", r->uri, st);
    return -1;
}

static size_t body_cb(char *p, size_t sz, size_t nm, void *ud)
{
    hrd *r = ud;
    size_t len = sz * nm;
    if (!r->checked && check_status(r) != 0)
        return 0;
    if (r->net >= r->end) {
        r->enough = 1;
        return 0;
    }
    uint64_t left = r->end - r->net;
    size_t take = len < left ? len : (size_t)left;
    if (r->push != NULL) {
        r->net += take;
        r->pos += take;
        if (r->push(r->push_ud, p, take) != 0) {
            r->push_stopped = 1;
            return 0;
        }
        if (take < len) {
            r->enough = 1;
            return 0;
        }
        return len;
    }
    if (SB_HTTP_BUF - r->used < take) {
        if (r->rd > 0) { /* compact */
            memmove(r->buf, r->buf + r->rd, r->used - r->rd);
            r->used -= r->rd;
            r->rd = 0;
        }
        if (SB_HTTP_BUF - r->used < take) {
            r->paused = 1;
            return CURL_WRITEFUNC_PAUSE; /* curl hands the same bytes again after unpausing */
        }
    }
    memcpy(r->buf + r->used, p, take);
    r->used += take;
    r->net += take;
    if (take < len) {
        r->enough = 1;
        return 0;
    }
    return len;
}

static void transfer_stop(hrd *r)
{
    if (r->e != NULL) {
        if (r->active)
            curl_multi_remove_handle(r->m, r->e);
        curl_easy_cleanup(r->e);
        r->e = NULL;
    }
    r->active = 0;
}

/* Starts a GET of [net, end). */
static int transfer_start(hrd *r, sb_err *err)
{
    transfer_stop(r);
    r->e = easy_new(r->uri, r->errbuf, err);
    if (r->e == NULL)
        return -1;
    memset(&r->h, 0, sizeof r->h);
    r->checked = r->done = r->enough = r->paused = r->retry_st = 0;
    r->result = CURLE_OK;
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)r->net,
             (unsigned long long)(r->end - 1));
    curl_easy_setopt(r->e, CURLOPT_RANGE, range);
    curl_easy_setopt(r->e, CURLOPT_HEADERFUNCTION, hdr_cb);
    curl_easy_setopt(r->e, CURLOPT_HEADERDATA, &r->h);
    curl_easy_setopt(r->e, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(r->e, CURLOPT_WRITEDATA, r);
    if (curl_multi_add_handle(r->m, r->e) != CURLM_OK)
        return herr(err, "\"%.200s\": cannot start the transfer", r->uri);
    r->active = 1;
    return 0;
}

/* The current transfer ended: 0 = all bytes up to end arrived, 1 = retry started, -1 = error. */
static int transfer_done(hrd *r, sb_err *err)
{
    if (r->failed) {
        if (err != NULL)
            *err = r->fail;
        return -1;
    }
    if (r->result == CURLE_OK && !r->checked && check_status(r) != 0 && r->failed) {
        if (err != NULL)
            *err = r->fail;
        return -1;
    }
    int ok = r->retry_st == 0 &&
             (r->result == CURLE_OK || (r->enough && r->result == CURLE_WRITE_ERROR));
    if (ok && r->net >= r->end)
        return 0;
    int retry;
    if (ok) {
        /* the body ended early; after a clean end that is a shorter object, not a glitch */
        herr(err,
             "\"%.200s\": the body ends at byte offset %llu, planned size %llu (it changed "
             "since planning)",
             r->uri, (unsigned long long)r->net, (unsigned long long)r->end);
        return -1;
    } else if (r->retry_st != 0) {
        retry = 1;
        herr(err, "\"%.200s\": HTTP %d", r->uri, r->retry_st);
    } else {
        retry = sb_io_retry_curl((int)r->result);
        herr(err, "\"%.200s\": %s at byte offset %llu", r->uri, curl_msg(r->result, r->errbuf),
             (unsigned long long)r->net);
    }
    if (!retry)
        return -1;
    if (r->net > r->off && !r->ranges_ok)
        return sb_err_wrap(err, "cannot resume (the server does not answer ranged requests)");
    r->attempt++;
    if (r->attempt >= sb_io_retry_attempts())
        return sb_err_wrap(err, "after %d attempts", r->attempt);
    sb_io_retry_sleep(r->attempt);
    return transfer_start(r, err) == 0 ? 1 : -1;
}

/* Runs the transfer until bytes are buffered (or, pushing, handed over) or it is over: 0, or
 * -1 + err; 1 when the push callback stopped it. */
static int pump(hrd *r, sb_err *err)
{
    while (r->rd == r->used && r->net < r->end) {
        if (!r->active) {
            if (transfer_start(r, err) != 0)
                return -1;
        }
        if (r->paused) {
            r->paused = 0;
            curl_easy_pause(r->e, CURLPAUSE_CONT); /* may call body_cb right away */
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(r->m, &running);
        if (mc != CURLM_OK)
            return herr(err, "\"%.200s\": %s", r->uri, curl_multi_strerror(mc));
        if (r->push_stopped)
            return 1;
        CURLMsg *msg;
        int q;
        while ((msg = curl_multi_info_read(r->m, &q)) != NULL) {
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == r->e) {
                r->done = 1;
                r->result = msg->data.result;
            }
        }
        if (r->done) {
            int d = transfer_done(r, err); /* reads the status: before the handle goes */
            if (d != 1)
                transfer_stop(r);
            if (d < 0)
                return -1;
            if (d == 0)
                break;
            continue;
        }
        if (r->rd == r->used && !r->paused) {
            mc = curl_multi_poll(r->m, NULL, 0, 1000, NULL);
            if (mc != CURLM_OK)
                return herr(err, "\"%.200s\": %s", r->uri, curl_multi_strerror(mc));
        }
    }
    return 0;
}

static int h_read_open(const char *uri, uint64_t off, uint64_t end, sb_io_rd **out, sb_err *err)
{
    pthread_once(&g_once, init_once);
    if (!g_init_ok)
        return herr(err, "\"%.200s\": libcurl failed to initialize", uri);
    hrd *r = calloc(1, sizeof *r);
    if (r == NULL)
        return herr(err, "\"%.200s\": out of memory", uri);
    r->base.be = &sb_io_backend_http;
    r->off = r->pos = r->net = off;
    r->end = end;
    r->uri = strdup(uri);
    r->buf = malloc(SB_HTTP_BUF);
    r->m = curl_multi_init();
    if (r->uri == NULL || r->buf == NULL || r->m == NULL) {
        if (r->m != NULL)
            curl_multi_cleanup(r->m);
        free(r->uri);
        free(r->buf);
        free(r);
        return herr(err, "\"%.200s\": out of memory", uri);
    }
    /* The request starts here, so a missing object or a refused connection shows at open. */
    if (off < end && (transfer_start(r, err) != 0 || pump(r, err) != 0)) {
        sb_io_backend_http.read_close(&r->base);
        return -1;
    }
    *out = &r->base;
    return 0;
}

static ssize_t h_read(sb_io_rd *rr, void *buf, size_t n, sb_err *err)
{
    hrd *r = (hrd *)rr;
    if (n == 0 || r->pos >= r->end)
        return 0;
    if (r->rd == r->used && pump(r, err) != 0)
        return -1;
    size_t k = r->used - r->rd;
    if (k > n)
        k = n;
    if (k == 0) /* cannot happen: pump fills the buffer or reports an error */
        return herr(err, "\"%.200s\": no data at byte offset %llu", r->uri,
                    (unsigned long long)r->pos);
    memcpy(buf, r->buf + r->rd, k);
    r->rd += k;
    if (r->rd == r->used)
        r->rd = r->used = 0;
    r->pos += k;
    return (ssize_t)k;
}

static int h_read_push(sb_io_rd *rr, sb_io_push_fn fn, void *ud, sb_err *err)
{
    hrd *r = (hrd *)rr;
    if (r->rd < r->used) { /* bytes buffered by the open (or a pull read) go first */
        size_t k = r->used - r->rd;
        const char *p = r->buf + r->rd;
        r->rd = r->used = 0;
        r->pos += k;
        if (fn(ud, p, k) != 0) {
            transfer_stop(r);
            return 1;
        }
    }
    if (r->pos >= r->end)
        return 0;
    r->push = fn;
    r->push_ud = ud;
    int rc = pump(r, err);
    r->push = NULL;
    if (rc == 1 || r->push_stopped) {
        transfer_stop(r);
        return 1;
    }
    return rc;
}

static void h_read_close(sb_io_rd *rr)
{
    hrd *r = (hrd *)rr;
    if (r == NULL)
        return;
    transfer_stop(r);
    curl_multi_cleanup(r->m);
    free(r->buf);
    free(r->uri);
    free(r);
}

/* ---- no writes ---- */

static int ro_err(const char *uri, sb_err *err)
{
    return herr(err, "\"%.200s\": http(s):// is read only (a sink needs file:// or s3://)", uri);
}
static int h_write_open(const char *uri, sb_io_wr **out, sb_err *err)
{
    *out = NULL;
    return ro_err(uri, err);
}
static int h_del(const char *uri, sb_err *err)
{
    return ro_err(uri, err);
}

const sb_io_backend sb_io_backend_http = {
    .name = "http",
    .list = h_list,
    .stat = h_stat,
    .read_open = h_read_open,
    .read = h_read,
    .read_close = h_read_close,
    .read_push = h_read_push,
    .write_open = h_write_open,
    .del = h_del,
    .cleanup = h_del,
};
