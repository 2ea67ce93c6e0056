/* test_io_s3.c — the s3:// backend (lib/io/s3.c, aws.c) against a real MinIO server started by
 * each test (tests/helpers/minio.h): listing with continuation tokens, streamed ranged reads,
 * PUT and multipart writes, abort and cleanup of multipart uploads, a server restart in the
 * middle of a read and of a write, and the error messages. Offline: the query encoding, the STS
 * response parsing, and web identity against a fake STS (libmicrohttpd) — not end to end with S3,
 * which needs an OpenID provider MinIO cannot have here. The reader's push path (s3 hands
 * libcurl's buffers to the line reader) is checked against the pull path of the same bytes in a
 * local file. A missing MinIO binary fails the tests
 * (`make deps` builds it). */
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../helpers/minio.h"
#include "io/aws.h"
#include "io/s3.h"
#include "io/schemes.h"
#include "lines_check.h"

static sb_minio mn;

static void up(void)
{
    char msg[512];
    memset(&mn, 0, sizeof mn);
    if (sb_minio_start(&mn, msg, sizeof msg) != 0)
        cr_assert_fail("%s", msg);
    sb_minio_env(&mn);
    setenv("SB_IO_RETRIES", "12", 1);
    sb_io_s3_reset_config();
    sb_err err = {0};
    if (sb_io_s3_make_bucket("bkt", &err) != 0)
        cr_assert_fail("make bucket: %s", err.msg);
}

static void down(void)
{
    sb_minio_destroy(&mn);
}

TestSuite(s3, .init = up, .fini = down, .timeout = 300);
TestSuite(s3offline);

/* Deterministic bytes of an object: byte i of object `seed`. */
static unsigned char pat(uint64_t i, unsigned seed)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    return (unsigned char)(x >> 29);
}

static void write_obj(const char *uri, uint64_t size, unsigned seed)
{
    sb_err err = {0};
    sb_io_wr *w = NULL;
    cr_assert_eq(sb_io_write_open(uri, &w, &err), 0, "%s", err.msg);
    unsigned char *buf = malloc(1 << 20);
    for (uint64_t off = 0; off < size;) {
        size_t k = size - off < (1u << 20) ? (size_t)(size - off) : (1u << 20);
        for (size_t i = 0; i < k; i++)
            buf[i] = pat(off + i, seed);
        cr_assert_eq(sb_io_write(w, buf, k, &err), 0, "%s", err.msg);
        off += k;
    }
    free(buf);
    cr_assert_eq(sb_io_write_commit(w, &err), 0, "%s", err.msg);
}

static void check_range(const char *uri, uint64_t off, uint64_t end, unsigned seed)
{
    sb_err err = {0};
    sb_io_rd *r = NULL;
    cr_assert_eq(sb_io_read_open(uri, off, end, &r, &err), 0, "%s", err.msg);
    unsigned char buf[70000];
    uint64_t pos = off;
    for (;;) {
        ssize_t k = sb_io_read(r, buf, sizeof buf, &err);
        cr_assert(k >= 0, "%s", err.msg);
        if (k == 0)
            break;
        for (ssize_t i = 0; i < k; i++)
            if (buf[i] != pat(pos + (uint64_t)i, seed))
                cr_assert_fail("byte %llu differs", (unsigned long long)(pos + (uint64_t)i));
        pos += (uint64_t)k;
    }
    cr_assert_eq(pos, end);
    sb_io_read_close(r);
}

static int uploads_left(const char *prefix)
{
    /* the whole bucket: MinIO lists uploads under a prefix only when it is a whole key */
    char *b = sb_minio_get(&mn, "/bkt/?uploads=");
    cr_assert_not_null(b);
    cr_assert(strstr(b, "ListMultipartUploadsResult") != NULL, "%s", b);
    char key[300];
    snprintf(key, sizeof key, "<Key>%s/", prefix);
    int n = 0;
    for (const char *p = b; (p = strstr(p, key)) != NULL; p++)
        n++;
    free(b);
    return n;
}

Test(s3offline, query_sorted_and_encoded)
{
    const char *kv[] = {"prefix", "a b/ü*",    "list-type", "2",      "continuation-token",
                        "x+y=/",  "delimiter", "/",         "absent", NULL};
    char *q = sb_aws_query(kv, 5);
    cr_assert_str_eq(q, "continuation-token=x%2By%3D%2F&delimiter=%2F&list-type=2&prefix=a%20b%2F"
                        "%C3%BC%2A");
    free(q);
    char *k = sb_aws_uri_encode("dir/a b~._-(1).csv", 1);
    cr_assert_str_eq(k, "dir/a%20b~._-%281%29.csv");
    free(k);
}

Test(s3offline, sts_request_and_response)
{
    char *q = sb_aws_sts_query("arn:aws:iam::1:role/r", NULL, "tok.en");
    cr_assert_str_eq(q, "Action=AssumeRoleWithWebIdentity&DurationSeconds=3600&RoleArn=arn%3Aaws"
                        "%3Aiam%3A%3A1%3Arole%2Fr&RoleSessionName=streambatch&Version=2011-06-15"
                        "&WebIdentityToken=tok.en");
    free(q);
    const char *ok =
        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
        "<AccessKeyId>ASIAX</AccessKeyId><SecretAccessKey>s/e&amp;c</SecretAccessKey>"
        "<SessionToken>TOK</SessionToken><Expiration>2026-01-02T03:04:05Z</Expiration>"
        "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
    sb_aws_creds c;
    sb_err err = {0};
    cr_assert_eq(sb_aws_sts_parse(ok, &c, &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.key, "ASIAX");
    cr_assert_str_eq(c.secret, "s/e&c");
    cr_assert_str_eq(c.token, "TOK");
    cr_assert_eq(c.expires, 1767323045);
    sb_aws_creds_free(&c);
    const char *bad = "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>expired"
                      "</Message></Error></ErrorResponse>";
    cr_assert_eq(sb_aws_sts_parse(bad, &c, &err), -1);
    cr_assert(strstr(err.msg, "InvalidIdentityToken: expired") != NULL, "%s", err.msg);
    cr_assert_eq(
        sb_aws_sts_parse("<Credentials><AccessKeyId>A</AccessKeyId></Credentials>", &c, &err), -1);
    cr_assert(strstr(err.msg, "incomplete") != NULL, "%s", err.msg);
}

/* A fake STS (libmicrohttpd): records the query of each AssumeRoleWithWebIdentity and answers
 * credentials that expire `sts_ttl` seconds from now. */
static int sts_calls;
static char sts_token_seen[256], sts_role_seen[256];
static long sts_ttl;

static enum MHD_Result sts_handler(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *data,
                                   size_t *size, void **ctx)
{
    (void)cls, (void)url, (void)method, (void)version, (void)data, (void)size, (void)ctx;
    const char *tok = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "WebIdentityToken");
    const char *role = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "RoleArn");
    const char *act = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "Action");
    snprintf(sts_token_seen, sizeof sts_token_seen, "%s", tok ? tok : "");
    snprintf(sts_role_seen, sizeof sts_role_seen, "%s", role ? role : "");
    sts_calls++;
    char body[1024], exp[64];
    time_t t = time(NULL) + sts_ttl;
    strftime(exp, sizeof exp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    snprintf(body, sizeof body,
             "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
             "<AccessKeyId>AK%d</AccessKeyId><SecretAccessKey>SK</SecretAccessKey>"
             "<SessionToken>ST</SessionToken><Expiration>%s</Expiration></Credentials>"
             "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
             sts_calls, exp);
    int ok = act != NULL && strcmp(act, "AssumeRoleWithWebIdentity") == 0;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result res = MHD_queue_response(c, ok ? 200 : 400, r);
    MHD_destroy_response(r);
    return res;
}

Test(s3offline, web_identity_refresh_with_fake_sts)
{
    int port = sb_minio_free_port();
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL,
                                            NULL, sts_handler, NULL, MHD_OPTION_END);
    cr_assert_not_null(d);
    char tokf[] = "/tmp/sb-wi-XXXXXX";
    int fd = mkstemp(tokf);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "jwt.tok+en\n", 11), 11);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokf, 1);
    setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/r", 1);
    setenv("AWS_ENDPOINT_URL_STS", url, 1);
    sb_io_s3_reset_config();
    sts_ttl = 3600;
    sb_aws_creds c;
    sb_err err = {0};
    cr_assert_eq(sb_aws_credentials(&c, &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.key, "AK1");
    cr_assert_str_eq(c.token, "ST");
    cr_assert_str_eq(sts_token_seen, "jwt.tok+en");
    cr_assert_str_eq(sts_role_seen, "arn:aws:iam::1:role/r");
    sb_aws_creds_free(&c);
    /* still valid for an hour: no new call */
    cr_assert_eq(sb_aws_credentials(&c, &err), 0, "%s", err.msg);
    cr_assert_eq(sts_calls, 1);
    sb_aws_creds_free(&c);
    /* credentials that expire within the 5-minute margin are refreshed at the next use */
    sb_io_s3_reset_config();
    sts_ttl = 120;
    cr_assert_eq(sb_aws_credentials(&c, &err), 0, "%s", err.msg);
    sb_aws_creds_free(&c);
    cr_assert_eq(sb_aws_credentials(&c, &err), 0, "%s", err.msg);
    cr_assert_eq(sts_calls, 3);
    cr_assert_str_eq(c.key, "AK3");
    sb_aws_creds_free(&c);
    MHD_stop_daemon(d);
    /* an STS that is not there: a clear error */
    sb_io_s3_reset_config();
    cr_assert_eq(sb_aws_credentials(&c, &err), -1);
    cr_assert(strstr(err.msg, "STS") != NULL, "%s", err.msg);
    unlink(tokf);
}

Test(s3, put_stat_list_del)
{
    sb_err err = {0};
    cr_assert_eq(sb_io_put("s3://bkt/d/a.txt", "hello", 5, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_put("s3://bkt/d/b c+.txt", "hi", 2, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_put("s3://bkt/d/_SUCCESS", "", 0, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_put("s3://bkt/d/sub/x.txt", "x", 1, &err), 0, "%s", err.msg);
    uint64_t size = 0;
    int ex = 0;
    cr_assert_eq(sb_io_stat("s3://bkt/d/a.txt", &size, &ex, &err), 0, "%s", err.msg);
    cr_assert(ex == 1 && size == 5);
    cr_assert_eq(sb_io_stat("s3://bkt/d/none", &size, &ex, &err), 0, "%s", err.msg);
    cr_assert_eq(ex, 0);
    sb_io_obj *o;
    size_t n;
    cr_assert_eq(sb_io_list("s3://bkt/d/", 0, &o, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(o[0].uri, "s3://bkt/d/a.txt");
    cr_assert_str_eq(o[1].uri, "s3://bkt/d/b c+.txt");
    cr_assert_eq(o[1].size, 2);
    sb_io_objs_free(o, n);
    cr_assert_eq(sb_io_list("s3://bkt/d", SB_IO_LIST_ALL, &o, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 3);
    sb_io_objs_free(o, n);
    cr_assert_eq(sb_io_list("s3://bkt/d/a.txt", 0, &o, &n, &err), 0, "%s", err.msg);
    cr_assert(n == 1 && o[0].size == 5);
    sb_io_objs_free(o, n);
    cr_assert_eq(sb_io_list("s3://bkt/d/b*", 0, &o, &n, &err), 0, "%s", err.msg);
    cr_assert(n == 1 && strcmp(o[0].uri, "s3://bkt/d/b c+.txt") == 0);
    sb_io_objs_free(o, n);
    cr_assert_eq(sb_io_list("s3://bkt/d/z*", 0, &o, &n, &err), -1);
    cr_assert(strstr(err.msg, "s3://bkt/d/z*") && strstr(err.msg, "no objects match"), "%s",
              err.msg);
    cr_assert_eq(sb_io_list("s3://bkt/empty/", 0, &o, &n, &err), -1);
    cr_assert(strstr(err.msg, "\"s3://bkt/empty/\"") != NULL, "%s", err.msg);
    cr_assert_eq(sb_io_list("s3://bkt/empty/", SB_IO_LIST_DIR, &o, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 0);
    free(o);
    cr_assert_eq(sb_io_del("s3://bkt/d/a.txt", &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_del("s3://bkt/d/a.txt", &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_stat("s3://bkt/d/a.txt", &size, &ex, &err), 0, "%s", err.msg);
    cr_assert_eq(ex, 0);
}

typedef struct {
    int from, to;
} span;

static void *put_many(void *a)
{
    span *s = a;
    for (int i = s->from; i < s->to; i++) {
        char u[64], b[16];
        sb_err err = {0};
        snprintf(u, sizeof u, "s3://bkt/many/o%05d", i);
        int n = snprintf(b, sizeof b, "%d", i);
        if (sb_io_put(u, b, (size_t)n, &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            return (void *)1;
        }
    }
    return NULL;
}

Test(s3, list_continuation)
{
    enum { N = 2100, T = 6 };
    pthread_t t[T];
    span s[T];
    for (int i = 0; i < T; i++) {
        s[i] = (span){i * N / T, (i + 1) * N / T};
        pthread_create(&t[i], NULL, put_many, &s[i]);
    }
    for (int i = 0; i < T; i++) {
        void *r;
        pthread_join(t[i], &r);
        cr_assert_null(r);
    }
    sb_io_obj *o;
    size_t n;
    sb_err err = {0};
    cr_assert_eq(sb_io_list("s3://bkt/many/", 0, &o, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, N);
    for (size_t i = 0; i < n; i++) {
        char u[64];
        snprintf(u, sizeof u, "s3://bkt/many/o%05zu", i);
        cr_assert_str_eq(o[i].uri, u);
    }
    sb_io_objs_free(o, n);
    cr_assert_eq(sb_io_list("s3://bkt/many/o01*", 0, &o, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 1000);
    sb_io_objs_free(o, n);
}

Test(s3, ranged_streamed_read)
{
    const uint64_t sz = 64ull << 20;
    write_obj("s3://bkt/big", sz, 7);
    check_range("s3://bkt/big", 0, sz, 7);
    check_range("s3://bkt/big", 12345, 12346, 7);
    check_range("s3://bkt/big", 5000000, 21000000, 7);
    check_range("s3://bkt/big", sz - 3, sz, 7);
    check_range("s3://bkt/big", 100, 100, 7);
    /* planned longer than it is: an error, not a short read */
    sb_err err = {0};
    sb_io_rd *r;
    char buf[4096];
    cr_assert_eq(sb_io_read_open("s3://bkt/big", sz - 10, sz + 10, &r, &err), 0);
    ssize_t k, got = 0;
    while ((k = sb_io_read(r, buf, sizeof buf, &err)) > 0)
        got += k;
    cr_assert_eq(k, -1);
    cr_assert(strstr(err.msg, "changed since planning") != NULL, "%s", err.msg);
    sb_io_read_close(r);
    cr_assert_eq(sb_io_read_open("s3://bkt/big", sz + 5, sz + 10, &r, &err), 0);
    cr_assert_eq(sb_io_read(r, buf, sizeof buf, &err), -1);
    cr_assert(strstr(err.msg, "changed since planning") != NULL, "%s", err.msg);
    sb_io_read_close(r);
}

Test(s3, multipart_abort_cleanup)
{
    setenv("SB_S3_MULTIPART_THRESHOLD", "5242880", 1);
    const uint64_t sz = 23ull << 20;
    write_obj("s3://bkt/mp/obj", sz, 3);
    uint64_t size = 0;
    int ex = 0;
    sb_err err = {0};
    cr_assert_eq(sb_io_stat("s3://bkt/mp/obj", &size, &ex, &err), 0, "%s", err.msg);
    cr_assert(ex == 1 && size == sz);
    check_range("s3://bkt/mp/obj", 0, sz, 3);
    cr_assert_eq(uploads_left("mp"), 0);

    /* abort after two parts: no object, no upload */
    sb_io_wr *w;
    char *chunk = calloc(1, 11 << 20);
    cr_assert_eq(sb_io_write_open("s3://bkt/mp/ab", &w, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_write(w, chunk, 11 << 20, &err), 0, "%s", err.msg);
    cr_assert_eq(uploads_left("mp"), 1);
    sb_io_write_abort(w);
    cr_assert_eq(uploads_left("mp"), 0);
    cr_assert_eq(sb_io_stat("s3://bkt/mp/ab", &size, &ex, &err), 0, "%s", err.msg);
    cr_assert_eq(ex, 0);

    /* a killed worker's upload (never committed nor aborted): cleanup aborts it */
    cr_assert_eq(sb_io_write_open("s3://bkt/mp/leak", &w, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_write(w, chunk, 6 << 20, &err), 0, "%s", err.msg);
    sb_io_wr *other;
    cr_assert_eq(sb_io_write_open("s3://bkt/other/up", &other, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_write(other, chunk, 6 << 20, &err), 0, "%s", err.msg);
    cr_assert_eq(uploads_left("mp"), 1);
    cr_assert_eq(sb_io_cleanup("s3://bkt/mp", &err), 0, "%s", err.msg);
    cr_assert_eq(uploads_left("mp"), 0);
    cr_assert_eq(uploads_left("other"), 1, "cleanup of mp/ aborted an upload outside it");
    sb_io_write_abort(other);
    cr_assert_eq(uploads_left("other"), 0);
    sb_io_write_abort(w); /* frees the "killed" writer; its upload is gone already */
    cr_assert_eq(sb_io_stat("s3://bkt/mp/leak", &size, &ex, &err), 0, "%s", err.msg);
    cr_assert_eq(ex, 0);
    free(chunk);
}

static void *restart_later(void *a)
{
    (void)a;
    usleep(1500000);
    char msg[512];
    if (sb_minio_start(&mn, msg, sizeof msg) != 0)
        return strdup(msg);
    return NULL;
}

Test(s3, server_restart_mid_read_and_write)
{
    const uint64_t sz = 48ull << 20;
    write_obj("s3://bkt/r", sz, 9);
    sb_err err = {0};
    sb_io_rd *r;
    cr_assert_eq(sb_io_read_open("s3://bkt/r", 0, sz, &r, &err), 0, "%s", err.msg);
    unsigned char *buf = malloc(1 << 20);
    uint64_t pos = 0;
    int restarted = 0;
    pthread_t t;
    for (;;) {
        ssize_t k = sb_io_read(r, buf, 1 << 20, &err);
        cr_assert(k >= 0, "%s", err.msg);
        if (k == 0)
            break;
        for (ssize_t i = 0; i < k; i++)
            if (buf[i] != pat(pos + (uint64_t)i, 9))
                cr_assert_fail("byte %llu differs", (unsigned long long)(pos + (uint64_t)i));
        pos += (uint64_t)k;
        if (!restarted && pos > (4u << 20)) {
            sb_minio_stop(&mn);
            pthread_create(&t, NULL, restart_later, NULL);
            restarted = 1;
        }
    }
    cr_assert_eq(pos, sz);
    sb_io_read_close(r);
    void *res;
    pthread_join(t, &res);
    cr_assert_null(res, "%s", (char *)res);

    /* mid-write: a multipart upload whose next part meets a stopped server */
    setenv("SB_S3_MULTIPART_THRESHOLD", "5242880", 1);
    sb_io_wr *w;
    cr_assert_eq(sb_io_write_open("s3://bkt/w", &w, &err), 0, "%s", err.msg);
    for (uint64_t off = 0; off < (12u << 20); off += 1 << 20) {
        for (size_t i = 0; i < (1u << 20); i++)
            buf[i] = pat(off + i, 5);
        if (off == (6u << 20)) {
            sb_minio_stop(&mn);
            pthread_create(&t, NULL, restart_later, NULL);
        }
        cr_assert_eq(sb_io_write(w, buf, 1 << 20, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sb_io_write_commit(w, &err), 0, "%s", err.msg);
    pthread_join(t, &res);
    cr_assert_null(res, "%s", (char *)res);
    check_range("s3://bkt/w", 0, 12u << 20, 5);
    free(buf);
}

Test(s3, clear_errors)
{
    sb_err err = {0};
    sb_io_obj *o;
    size_t n;
    cr_assert_eq(sb_io_list("s3://nobucket/x/", 0, &o, &n, &err), -1);
    cr_assert(strstr(err.msg, "\"s3://nobucket/x/\"") && strstr(err.msg, "NoSuchBucket"), "%s",
              err.msg);

    setenv("AWS_SECRET_ACCESS_KEY", "wrongwrongwrong", 1);
    sb_io_s3_reset_config();
    cr_assert_eq(sb_io_list("s3://bkt/", 0, &o, &n, &err), -1);
    cr_assert(strstr(err.msg, "\"s3://bkt/\"") && strstr(err.msg, "SignatureDoesNotMatch"), "%s",
              err.msg);
    setenv("AWS_ACCESS_KEY_ID", "nosuchkey", 1);
    sb_io_s3_reset_config();
    cr_assert_eq(sb_io_put("s3://bkt/x", "x", 1, &err), -1);
    cr_assert(strstr(err.msg, "\"s3://bkt/x\"") && strstr(err.msg, "InvalidAccessKeyId"), "%s",
              err.msg);
    uint64_t size;
    int ex;
    cr_assert_eq(sb_io_stat("s3://bkt/x", &size, &ex, &err), -1);
    cr_assert(strstr(err.msg, "HTTP 403") != NULL, "%s", err.msg);

    /* anonymous: no credentials, a private bucket */
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    sb_io_s3_reset_config();
    cr_assert_eq(sb_io_list("s3://bkt/", 0, &o, &n, &err), -1);
    cr_assert(strstr(err.msg, "AccessDenied") != NULL, "%s", err.msg);

    setenv("SB_IO_RETRIES", "2", 1);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", sb_minio_free_port());
    setenv("AWS_ENDPOINT_URL_S3", url, 1);
    sb_io_s3_reset_config();
    cr_assert_eq(sb_io_stat("s3://bkt/x", &size, &ex, &err), -1);
    cr_assert(strstr(err.msg, "\"s3://bkt/x\"") && strstr(err.msg, "onnect"), "%s", err.msg);
}

/* ---- the line reader on s3 (pushed buffers) against the same bytes in a file (pulled) ---- */

static char *to_remove[32];
static size_t n_remove;
static void remove_files(void)
{
    for (size_t i = 0; i < n_remove; i++) {
        unlink(to_remove[i]);
        free(to_remove[i]);
    }
    n_remove = 0;
}
static void remove_at_exit(const char *path)
{
    if (n_remove == 0)
        atexit(remove_files);
    if (n_remove < sizeof to_remove / sizeof *to_remove)
        to_remove[n_remove++] = strdup(path);
}

/* A path for a local copy, outside MinIO's directory (removed by the caller's TMPDIR). */
static void local_path(char *path, size_t n, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, n, "%s/sb-test-io-s3-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), name);
}

static void same_records(sb_format fmt, const char *args, const char *text, size_t len,
                         const char *name, unsigned rounds)
{
    char path[512], uri[256];
    local_path(path, sizeof path, name);
    snprintf(uri, sizeof uri, "s3://bkt/lines/%s", name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    fclose(f);
    remove_at_exit(path);
    sb_err err = {0};
    sb_io_wr *w = NULL;
    cr_assert_eq(sb_io_write_open(uri, &w, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_write(w, text, len, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_write_commit(w, &err), 0, "%s", err.msg);
    lines_check_same(fmt, args, text, len, path, uri, name, rounds);
}

static void pushed_equals_pulled(const char *recv_buffer)
{
    if (recv_buffer != NULL)
        setenv("SB_S3_RECV_BUFFER", recv_buffer, 1);
    /* a multiline csv file is never cut (split.h): only its whole read is compared */
    const sb_format fmts[] = {SB_FMT_JSONL, SB_FMT_TEXT, SB_FMT_CSV, SB_FMT_CSV};
    const char *args[] = {NULL, NULL, "{\"header\": true}",
                          "{\"header\": true, \"multiline\": true}"};
    for (size_t i = 0; i < 4; i++)
        for (int nl = 0; nl < 2; nl++) {
            size_t len;
            char *t = lines_text(fmts[i], 11 + i * 2 + (size_t)nl, 3 << 20, nl, i == 3, &len);
            char name[64];
            snprintf(name, sizeof name, "%s%s-%d-%s", sb_format_names[fmts[i]], i == 3 ? "-ml" : "",
                     nl, recv_buffer ? recv_buffer : "default");
            same_records(fmts[i], args[i], t, len, name, i == 3 ? 1 : 12);
            free(t);
        }
    unsetenv("SB_S3_RECV_BUFFER");
}

Test(s3, pushed_line_reads_equal_file_reads)
{
    pushed_equals_pulled(NULL);
}

/* libcurl's buffer at its smallest (1 KiB): most lines cross buffers and are gathered */
Test(s3, pushed_line_reads_equal_file_reads_in_small_pieces)
{
    pushed_equals_pulled("1024");
}

/* A line longer than the record limit fails alike, naming the same offset. */
Test(s3, pushed_line_over_the_limit_fails_like_the_file)
{
    setenv("SB_S3_RECV_BUFFER", "1024", 1);
    size_t len = (2 << 20) + 100;
    char *t = malloc(len);
    memset(t, 'a', len);
    memcpy(t, "short\n", 6);
    t[len - 1] = '\n';
    char path[512];
    local_path(path, sizeof path, "long.txt");
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(t, 1, len, f), len);
    fclose(f);
    remove_at_exit(path);
    sb_err err = {0};
    sb_io_wr *w = NULL;
    cr_assert_eq(sb_io_write_open("s3://bkt/lines/long.txt", &w, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_write(w, t, len, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_io_write_commit(w, &err), 0, "%s", err.msg);
    const char *args = "{\"maxRecordSize\": 1048576}";
    recs a = {0}, b = {0};
    char ea[1024] = "", eb[1024] = "";
    cr_assert_eq(read_cut(path, len, NULL, 0, SB_FMT_TEXT, args, &a, ea, sizeof ea), -1);
    cr_assert_eq(
        read_cut("s3://bkt/lines/long.txt", len, NULL, 0, SB_FMT_TEXT, args, &b, eb, sizeof eb),
        -1);
    cr_assert(strstr(ea, "byte offset 6: a record longer than 1048576 bytes") != NULL, "%s", ea);
    cr_assert(strstr(eb, "byte offset 6: a record longer than 1048576 bytes") != NULL, "%s", eb);
    cr_assert_eq(a.rows, b.rows);
    free(a.buf);
    free(b.buf);
    free(t);
    unsetenv("SB_S3_RECV_BUFFER");
}

/* A pushed read across a server restart: the transfer is retried from the first byte not handed
 * over, so every byte comes exactly once and in order. */
typedef struct {
    uint64_t pos;
    int restarted;
    pthread_t t;
} push_check;

static int check_pushed(void *ud, const char *p, size_t n)
{
    push_check *c = ud;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] != pat(c->pos + i, 4))
            cr_assert_fail("byte %llu differs", (unsigned long long)(c->pos + i));
    c->pos += n;
    if (!c->restarted && c->pos > (4u << 20)) {
        sb_minio_stop(&mn);
        pthread_create(&c->t, NULL, restart_later, NULL);
        c->restarted = 1;
    }
    return 0;
}

Test(s3, pushed_read_across_a_server_restart)
{
    const uint64_t sz = 24ull << 20;
    write_obj("s3://bkt/p", sz, 4);
    sb_err err = {0};
    sb_io_rd *r;
    cr_assert_eq(sb_io_read_open("s3://bkt/p", 0, sz, &r, &err), 0, "%s", err.msg);
    cr_assert(sb_io_read_can_push(r));
    push_check c = {0};
    cr_assert_eq(sb_io_read_push(r, check_pushed, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.pos, sz);
    cr_assert(c.restarted);
    sb_io_read_close(r);
    void *res;
    pthread_join(c.t, &res);
    cr_assert_null(res, "%s", (char *)res);
}
