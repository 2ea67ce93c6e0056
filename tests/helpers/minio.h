/* minio.h — starts and stops a real MinIO server for the S3 tests: on 127.0.0.1 with a free
 * port and a temporary data directory, waits for /minio/health/live and /ready, and points the
 * standard AWS environment (AWS_ENDPOINT_URL_S3, keys) at it. The binary is $SB_MINIO_BIN, else
 * the one scripts/minio.sh caches (~/.cache/streambatch/minio-VERSION/minio); `make deps` builds
 * it. Also a signed GET for checks the storage interface does not expose (ListMultipartUploads).
 * Header-only (static inline). */
#ifndef SB_TEST_MINIO_H
#define SB_TEST_MINIO_H

#include <curl/curl.h>
#include <glob.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SB_MINIO_USER "sbtestadmin"
#define SB_MINIO_PASS "sbtestsecret123"

typedef struct sb_minio {
    pid_t pid;
    int port, cport;
    char dir[256];
    char bin[1024];
    char url[64];
} sb_minio;

static inline int sb_minio_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &l) != 0) {
        if (s >= 0)
            close(s);
        return -1;
    }
    close(s);
    return ntohs(a.sin_port);
}

static inline size_t sb_minio_sink_(char *p, size_t s, size_t n, void *u)
{
    (void)p, (void)u;
    return s * n;
}

/* 1 when MinIO's health endpoint `what` (live, ready) answers 200. */
static inline int sb_minio_health_(const sb_minio *m, const char *what)
{
    char u[160];
    snprintf(u, sizeof u, "%s/minio/health/%s", m->url, what);
    CURL *c = curl_easy_init();
    long st = 0;
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 2L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sb_minio_sink_);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_cleanup(c);
    return st == 200;
}

/* 1 when the server is up and serves S3 requests: "live" answers as soon as the process
 * listens, "ready" once its object layer is initialised (a bucket PUT between the two was seen
 * to fail). */
static inline int sb_minio_live(const sb_minio *m)
{
    return sb_minio_health_(m, "live") && sb_minio_health_(m, "ready");
}

/* Starts the server (again, on the same port and directory when m->pid was stopped).
 * 0, or -1 with a message in msg. */
static inline int sb_minio_start(sb_minio *m, char *msg, size_t cap)
{
    if (m->bin[0] == '\0') {
        const char *b = getenv("SB_MINIO_BIN");
        if (b != NULL) {
            snprintf(m->bin, sizeof m->bin, "%s", b);
        } else {
            glob_t g;
            char pat[1024];
            snprintf(pat, sizeof pat, "%s/.cache/streambatch/minio-*/minio",
                     getenv("HOME") ? getenv("HOME") : "/root");
            if (glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0)
                snprintf(m->bin, sizeof m->bin, "%s", g.gl_pathv[g.gl_pathc - 1]);
            globfree(&g);
        }
        if (m->bin[0] == '\0' || access(m->bin, X_OK) != 0) {
            snprintf(msg, cap,
                     "MinIO binary not found (%s): run `make deps` (scripts/minio.sh builds it) "
                     "or set SB_MINIO_BIN",
                     m->bin[0] ? m->bin : "~/.cache/streambatch/minio-*/minio");
            m->bin[0] = '\0';
            return -1;
        }
        snprintf(m->dir, sizeof m->dir, "/tmp/sb-minio-XXXXXX");
        if (mkdtemp(m->dir) == NULL) {
            snprintf(msg, cap, "mkdtemp failed");
            return -1;
        }
        m->port = sb_minio_free_port();
        m->cport = sb_minio_free_port();
        snprintf(m->url, sizeof m->url, "http://127.0.0.1:%d", m->port);
    }
    char addr[64], caddr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", m->port);
    snprintf(caddr, sizeof caddr, "127.0.0.1:%d", m->cport);
    pid_t p = fork();
    if (p < 0) {
        snprintf(msg, cap, "fork failed");
        return -1;
    }
    if (p == 0) {
        setenv("MINIO_ROOT_USER", SB_MINIO_USER, 1);
        setenv("MINIO_ROOT_PASSWORD", SB_MINIO_PASS, 1);
        setenv("MINIO_BROWSER", "off", 1);
        setenv("MINIO_UPDATE", "off", 1);
        char log[300];
        snprintf(log, sizeof log, "%s.log", m->dir);
        FILE *f = freopen(log, "a", stdout);
        (void)f;
        dup2(1, 2);
        execl(m->bin, "minio", "server", "--quiet", "--address", addr, "--console-address", caddr,
              m->dir, (char *)NULL);
        _exit(127);
    }
    m->pid = p;
    for (int i = 0; i < 1200; i++) {
        if (sb_minio_live(m))
            return 0;
        int st;
        if (waitpid(p, &st, WNOHANG) == p) {
            m->pid = 0;
            snprintf(msg, cap, "MinIO exited at start (log: %s.log)", m->dir);
            return -1;
        }
        usleep(50000);
    }
    kill(p, SIGKILL); /* not left running when the caller gives up */
    waitpid(p, NULL, 0);
    m->pid = 0;
    snprintf(msg, cap, "MinIO not live after 60 s (log: %s.log)", m->dir);
    return -1;
}

/* Stops the server (by pid), keeping its data directory. */
static inline void sb_minio_stop(sb_minio *m)
{
    if (m->pid > 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, NULL, 0);
        m->pid = 0;
    }
}

/* Stops the server and removes its data. */
static inline void sb_minio_destroy(sb_minio *m)
{
    sb_minio_stop(m);
    if (m->dir[0] != '\0') {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.log'", m->dir, m->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "minio: could not remove %s\n", m->dir);
    }
}

/* Points the AWS environment at the server. */
static inline void sb_minio_env(const sb_minio *m)
{
    setenv("AWS_ACCESS_KEY_ID", SB_MINIO_USER, 1);
    setenv("AWS_SECRET_ACCESS_KEY", SB_MINIO_PASS, 1);
    setenv("AWS_ENDPOINT_URL_S3", m->url, 1);
    setenv("AWS_REGION", "us-east-1", 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
}

static inline size_t sb_minio_collect_(char *p, size_t s, size_t n, void *u)
{
    char **b = u;
    size_t o = *b ? strlen(*b) : 0;
    char *nb = realloc(*b, o + s * n + 1);
    memcpy(nb + o, p, s * n);
    nb[o + s * n] = '\0';
    *b = nb;
    return s * n;
}

/* A SigV4-signed GET of m->url + path (with its query, sorted and encoded by the caller);
 * the body, malloc'd (NULL on a transport failure). */
static inline char *sb_minio_get(const sb_minio *m, const char *path)
{
    char u[2048];
    snprintf(u, sizeof u, "%s%s", m->url, path);
    CURL *c = curl_easy_init();
    char *body = NULL;
    struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
    curl_easy_setopt(c, CURLOPT_USERPWD, SB_MINIO_USER ":" SB_MINIO_PASS);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sb_minio_collect_);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) {
        free(body);
        return NULL;
    }
    return body ? body : strdup("");
}

#endif
