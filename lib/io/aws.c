/* aws.c — the AWS side of the s3 backend (see aws.h): configuration and credentials from the
 * standard environment, web identity through STS AssumeRoleWithWebIdentity, SigV4 query
 * encoding, and a small XML element extractor for S3 and STS answers. */

#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/aws.h"

typedef struct {
    int loaded;
    char region[64];
    char *endpoint, *sts_endpoint;
    sb_aws_creds creds;
    char *wi_file, *role_arn, *session;
} cfg_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static cfg_t cfg;

static char *env_dup(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? strdup(v) : NULL;
}

static char *trim_slash(char *s)
{
    size_t n = s ? strlen(s) : 0;
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
    return s;
}

/* Loads under mu. */
static void load(void)
{
    if (cfg.loaded)
        return;
    const char *r = getenv("AWS_REGION");
    if (r == NULL || r[0] == '\0')
        r = getenv("AWS_DEFAULT_REGION");
    snprintf(cfg.region, sizeof cfg.region, "%s", r && r[0] ? r : "us-east-1");
    cfg.endpoint = env_dup("AWS_ENDPOINT_URL_S3");
    if (cfg.endpoint == NULL)
        cfg.endpoint = env_dup("AWS_ENDPOINT_URL");
    trim_slash(cfg.endpoint);
    cfg.sts_endpoint = env_dup("AWS_ENDPOINT_URL_STS");
    trim_slash(cfg.sts_endpoint);
    cfg.creds.key = env_dup("AWS_ACCESS_KEY_ID");
    cfg.creds.secret = env_dup("AWS_SECRET_ACCESS_KEY");
    cfg.creds.token = env_dup("AWS_SESSION_TOKEN");
    if (cfg.creds.key == NULL || cfg.creds.secret == NULL) {
        sb_aws_creds_free(&cfg.creds);
        cfg.wi_file = env_dup("AWS_WEB_IDENTITY_TOKEN_FILE");
        cfg.role_arn = env_dup("AWS_ROLE_ARN");
        cfg.session = env_dup("AWS_ROLE_SESSION_NAME");
    }
    cfg.loaded = 1;
}

const char *sb_aws_region(void)
{
    pthread_mutex_lock(&mu);
    load();
    pthread_mutex_unlock(&mu);
    return cfg.region;
}

const char *sb_aws_s3_endpoint(void)
{
    pthread_mutex_lock(&mu);
    load();
    pthread_mutex_unlock(&mu);
    return cfg.endpoint;
}

void sb_aws_creds_free(sb_aws_creds *c)
{
    free(c->key);
    free(c->secret);
    free(c->token);
    memset(c, 0, sizeof *c);
}

void sb_aws_reset(void)
{
    pthread_mutex_lock(&mu);
    free(cfg.endpoint);
    free(cfg.sts_endpoint);
    free(cfg.wi_file);
    free(cfg.role_arn);
    free(cfg.session);
    sb_aws_creds_free(&cfg.creds);
    memset(&cfg, 0, sizeof cfg);
    pthread_mutex_unlock(&mu);
}

char *sb_aws_uri_encode(const char *s, int keep_slash)
{
    size_t n = strlen(s);
    char *o = malloc(3 * n + 1), *p = o;
    if (o == NULL)
        return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
            *p++ = (char)c;
        else
            p += sprintf(p, "%%%02X", c);
    }
    *p = '\0';
    return o;
}

typedef struct {
    char *k, *v;
} kvp;

static int kvp_cmp(const void *a, const void *b)
{
    return strcmp(((const kvp *)a)->k, ((const kvp *)b)->k);
}

char *sb_aws_query(const char *const *kv, size_t n)
{
    kvp *v = calloc(n ? n : 1, sizeof *v);
    size_t m = 0, len = 1;
    char *out = NULL;
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (kv[2 * i + 1] == NULL)
            continue;
        v[m].k = sb_aws_uri_encode(kv[2 * i], 0);
        v[m].v = sb_aws_uri_encode(kv[2 * i + 1], 0);
        m++;
        if (v[m - 1].k == NULL || v[m - 1].v == NULL)
            goto done;
        len += strlen(v[m - 1].k) + strlen(v[m - 1].v) + 2;
    }
    qsort(v, m, sizeof *v, kvp_cmp);
    out = malloc(len);
    if (out == NULL)
        goto done;
    out[0] = '\0';
    for (size_t i = 0; i < m; i++) {
        if (i > 0)
            strcat(out, "&");
        strcat(out, v[i].k);
        strcat(out, "=");
        strcat(out, v[i].v);
    }
done:
    for (size_t i = 0; i < m; i++) {
        free(v[i].k);
        free(v[i].v);
    }
    free(v);
    return out;
}

static char *xml_decode(const char *s, size_t n)
{
    char *o = malloc(n + 1), *p = o;
    if (o == NULL)
        return NULL;
    for (size_t i = 0; i < n;) {
        static const struct {
            const char *e;
            char c;
        } ents[] = {
            {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
        int done = 0;
        if (s[i] == '&') {
            for (size_t k = 0; k < sizeof ents / sizeof ents[0]; k++) {
                size_t el = strlen(ents[k].e);
                if (i + el <= n && strncmp(s + i, ents[k].e, el) == 0) {
                    *p++ = ents[k].c;
                    i += el;
                    done = 1;
                    break;
                }
            }
            if (!done && i + 2 < n && s[i + 1] == '#') {
                char *end;
                int hex = s[i + 2] == 'x';
                long c = strtol(s + i + 2 + hex, &end, hex ? 16 : 10);
                if ((size_t)(end - s) < n && *end == ';' && c > 0 && c < 128) {
                    *p++ = (char)c;
                    i = (size_t)(end - s) + 1;
                    done = 1;
                }
            }
        }
        if (!done)
            *p++ = s[i++];
    }
    *p = '\0';
    return o;
}

int sb_aws_xml_next(const char *xml, const char *tag, const char **pos, char **out)
{
    char open[96], close[96];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *from = pos && *pos ? *pos : xml;
    const char *a = strstr(from, open);
    if (a == NULL) {
        /* <Tag/> is an empty element */
        char empty[96];
        snprintf(empty, sizeof empty, "<%s/>", tag);
        const char *e = strstr(from, empty);
        if (e == NULL)
            return 0;
        if (pos)
            *pos = e + strlen(empty);
        *out = strdup("");
        return *out ? 1 : -1;
    }
    a += strlen(open);
    const char *b = strstr(a, close);
    if (b == NULL)
        return 0;
    if (pos)
        *pos = b + strlen(close);
    *out = xml_decode(a, (size_t)(b - a));
    return *out ? 1 : -1;
}

char *sb_aws_xml_get(const char *xml, const char *tag)
{
    char *o = NULL;
    return xml != NULL && sb_aws_xml_next(xml, tag, NULL, &o) == 1 ? o : NULL;
}

char *sb_aws_sts_query(const char *role_arn, const char *session, const char *token)
{
    const char *kv[] = {"Action",           "AssumeRoleWithWebIdentity",
                        "Version",          "2011-06-15",
                        "RoleArn",          role_arn,
                        "RoleSessionName",  session ? session : "streambatch",
                        "WebIdentityToken", token,
                        "DurationSeconds",  "3600"};
    return sb_aws_query(kv, 6);
}

int sb_aws_sts_parse(const char *xml, sb_aws_creds *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    char *code = sb_aws_xml_get(xml, "Code");
    if (code != NULL || strstr(xml, "<Credentials>") == NULL) {
        char *msg = sb_aws_xml_get(xml, "Message");
        sb_err_set(err, "STS AssumeRoleWithWebIdentity failed: %.100s: %.200s",
                   code ? code : "no <Credentials> in the response", msg ? msg : "");
        free(code);
        free(msg);
        return -1;
    }
    const char *cr = strstr(xml, "<Credentials>");
    out->key = sb_aws_xml_get(cr, "AccessKeyId");
    out->secret = sb_aws_xml_get(cr, "SecretAccessKey");
    out->token = sb_aws_xml_get(cr, "SessionToken");
    char *exp = sb_aws_xml_get(cr, "Expiration");
    if (out->key == NULL || out->secret == NULL || out->token == NULL || exp == NULL) {
        free(exp);
        sb_aws_creds_free(out);
        return sb_err_set(err, "STS AssumeRoleWithWebIdentity: incomplete <Credentials>");
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *e = strptime(exp, "%Y-%m-%dT%H:%M:%S", &tm);
    if (e == NULL) {
        sb_err_set(err, "STS AssumeRoleWithWebIdentity: bad Expiration \"%.60s\"", exp);
        free(exp);
        sb_aws_creds_free(out);
        return -1;
    }
    out->expires = timegm(&tm);
    free(exp);
    return 0;
}

static size_t collect(char *p, size_t sz, size_t nm, void *ud)
{
    char **b = ud;
    size_t old = *b ? strlen(*b) : 0, n = sz * nm;
    if (old + n > (1u << 20))
        return 0;
    char *nb = realloc(*b, old + n + 1);
    if (nb == NULL)
        return 0;
    memcpy(nb + old, p, n);
    nb[old + n] = '\0';
    *b = nb;
    return n;
}

/* Under mu: fetches web identity credentials. */
static int sts_refresh(sb_err *err)
{
    FILE *f = fopen(cfg.wi_file, "r");
    if (f == NULL)
        return sb_err_set(err, "AWS_WEB_IDENTITY_TOKEN_FILE %.200s: cannot open", cfg.wi_file);
    char tok[16384];
    size_t n = fread(tok, 1, sizeof tok - 1, f);
    fclose(f);
    tok[n] = '\0';
    while (n > 0 && isspace((unsigned char)tok[n - 1]))
        tok[--n] = '\0';
    char *q = sb_aws_sts_query(cfg.role_arn, cfg.session, tok);
    char url[1024 + 32768];
    char host[300];
    if (cfg.sts_endpoint)
        snprintf(host, sizeof host, "%s", cfg.sts_endpoint);
    else
        snprintf(host, sizeof host, "https://sts.%s.amazonaws.com", cfg.region);
    snprintf(url, sizeof url, "%s/?%s", host, q ? q : "");
    free(q);
    CURL *c = curl_easy_init();
    if (c == NULL)
        return sb_err_set(err, "STS: out of memory");
    char *body = NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        free(body);
        return sb_err_set(err, "STS %.200s: %s", host, curl_easy_strerror(rc));
    }
    sb_aws_creds nc;
    int r = sb_aws_sts_parse(body ? body : "", &nc, err);
    free(body);
    if (r != 0)
        return sb_err_wrap(err, "%.200s", host);
    sb_aws_creds_free(&cfg.creds);
    cfg.creds = nc;
    return 0;
}

static char *dup0(const char *s)
{
    return s ? strdup(s) : NULL;
}

int sb_aws_credentials(sb_aws_creds *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&mu);
    load();
    int rc = 0;
    if (cfg.wi_file != NULL && cfg.role_arn != NULL &&
        (cfg.creds.key == NULL || cfg.creds.expires - 300 < time(NULL)))
        rc = sts_refresh(err);
    if (rc == 0) {
        out->key = dup0(cfg.creds.key);
        out->secret = dup0(cfg.creds.secret);
        out->token = dup0(cfg.creds.token);
        out->expires = cfg.creds.expires;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
