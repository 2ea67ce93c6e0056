/* Unit tests of the http(s) storage backend (lib/io/http.c) against a real nginx that each test
 * starts on 127.0.0.1 (free ports, its own temp prefix, config, pid and logs; stopped by pid):
 * one server that honours Range, one that ignores it (max_ranges 0) and one over TLS with a
 * self-signed certificate. Covers listing one URL, ranged reads compared byte for byte, a server
 * without ranges, a redirect, 404, a refused connection after retries, short bodies, read-only
 * errors, that reads stream (RSS), certificate checks and SSL_CERT_FILE; a small scripted server
 * (a thread) cuts a transfer mid-body (resume) and answers 503 once (retry). */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/schemes.h"
#include "lines_check.h"

#define MiB ((uint64_t)1 << 20)
#define F20 (20 * MiB)
#define F200 (200 * MiB)

static char g_dir[64];
static pid_t g_pid;
static int g_port, g_port_nr; /* ranges / no ranges */
static int g_port_fake;       /* the scripted server below */
static int g_port_tls;        /* https with a self-signed certificate (cert.pem) */
static unsigned char *g_data; /* the 20 MiB file's bytes */

static const char *nginx_bin(void)
{
    static const char *c[] = {"/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (access(c[i], X_OK) == 0)
            return c[i];
    return NULL;
}

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t l = sizeof a;
    cr_assert(getsockname(s, (struct sockaddr *)&a, &l) == 0);
    close(s);
    return ntohs(a.sin_port);
}

static int can_connect(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

static void write_file(const char *name, const void *buf, uint64_t n, uint64_t sparse)
{
    char p[128];
    snprintf(p, sizeof p, "%s/www/%s", g_dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0, "%s: %s", p, strerror(errno));
    for (uint64_t done = 0; done < n;) {
        ssize_t k = write(fd, (const char *)buf + done, n - done);
        cr_assert(k > 0);
        done += (uint64_t)k;
    }
    if (sparse > 0)
        cr_assert(ftruncate(fd, (off_t)sparse) == 0);
    close(fd);
}

static void setup(void)
{
    const char *bin = nginx_bin();
    cr_assert(bin != NULL, "nginx is not installed (Debian package nginx; run make deps)");
    snprintf(g_dir, sizeof g_dir, "/tmp/sb-http-XXXXXX");
    cr_assert(mkdtemp(g_dir) != NULL);
    char p[160];
    snprintf(p, sizeof p, "%s/www", g_dir);
    cr_assert(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/tmp", g_dir);
    cr_assert(mkdir(p, 0755) == 0);

    g_data = malloc(F20);
    cr_assert(g_data != NULL);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint64_t i = 0; i < F20; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        g_data[i] = (unsigned char)(x >> 24);
    }
    write_file("f20", g_data, F20, 0);
    write_file("f200", "x", 1, F200); /* sparse: costs no disk */
    write_file("small", "hello\n", 6, 0);

    g_port = free_port();
    g_port_nr = free_port();
    g_port_tls = free_port();
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
             "-keyout %s/key.pem -out %s/cert.pem -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 >%s/openssl.log 2>&1",
             g_dir, g_dir, g_dir);
    cr_assert(system(cmd) == 0, "openssl could not make a test certificate (%s/openssl.log)",
              g_dir);
    snprintf(p, sizeof p, "%s/nginx.conf", g_dir);
    FILE *f = fopen(p, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "%s"
            "worker_processes 1;\n"
            "pid %s/nginx.pid;\n"
            "error_log %s/error.log;\n"
            "events { worker_connections 64; }\n"
            "http {\n"
            "  access_log %s/access.log;\n"
            "  client_body_temp_path %s/tmp/b; proxy_temp_path %s/tmp/p;\n"
            "  fastcgi_temp_path %s/tmp/f; uwsgi_temp_path %s/tmp/u; scgi_temp_path %s/tmp/s;\n"
            "  default_type application/octet-stream;\n"
            "  server { listen 127.0.0.1:%d; root %s/www;\n"
            "           location = /redir { return 302 /f20; } }\n"
            "  server { listen 127.0.0.1:%d; root %s/www; max_ranges 0; }\n"
            "  server { listen 127.0.0.1:%d ssl; root %s/www;\n"
            "           ssl_certificate %s/cert.pem; ssl_certificate_key %s/key.pem; }\n"
            "}\n",
            getuid() == 0 ? "user root;\n" : "", g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir,
            g_dir, g_port, g_dir, g_port_nr, g_dir, g_port_tls, g_dir, g_dir, g_dir);
    fclose(f);

    g_pid = fork();
    cr_assert(g_pid >= 0);
    if (g_pid == 0) {
        char conf[160], err[160];
        snprintf(conf, sizeof conf, "%s/nginx.conf", g_dir);
        snprintf(err, sizeof err, "%s/error.log", g_dir);
        execl(bin, "nginx", "-p", g_dir, "-e", err, "-c", conf, "-g", "daemon off;", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        if (can_connect(g_port) && can_connect(g_port_nr) && can_connect(g_port_tls))
            return;
        int st;
        if (waitpid(g_pid, &st, WNOHANG) == g_pid) {
            g_pid = 0;
            cr_assert_fail("nginx exited at start (see %s/error.log)", g_dir);
        }
        usleep(10000);
    }
    cr_assert_fail("nginx did not listen on ports %d and %d within 5 s", g_port, g_port_nr);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void teardown(void)
{
    if (g_pid > 0) {
        kill(g_pid, SIGTERM);
        int st;
        for (int i = 0; i < 300 && waitpid(g_pid, &st, WNOHANG) == 0; i++)
            usleep(10000);
        if (waitpid(g_pid, &st, WNOHANG) == 0) {
            kill(g_pid, SIGKILL);
            waitpid(g_pid, &st, 0);
        }
    }
    if (g_dir[0] != '\0')
        nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(g_data);
}

TestSuite(io_http, .init = setup, .fini = teardown, .timeout = 60);

static void url(char *buf, size_t n, int port, const char *path)
{
    snprintf(buf, n, "http://127.0.0.1:%d/%s", port, path);
}

/* Reads [off, end) through sb_io_read in odd-sized pieces into a malloc'd buffer. */
static unsigned char *read_range(const char *u, uint64_t off, uint64_t end)
{
    sb_err err = {0};
    sb_io_rd *r;
    cr_assert(sb_io_read_open(u, off, end, &r, &err) == 0, "%s", err.msg);
    unsigned char *out = malloc(end - off + 1);
    uint64_t got = 0;
    for (;;) {
        size_t want = 7777;
        if (want > end - off - got + 1)
            want = (size_t)(end - off - got + 1);
        ssize_t k = sb_io_read(r, out + got, want, &err);
        cr_assert(k >= 0, "%s", err.msg);
        if (k == 0)
            break;
        got += (uint64_t)k;
    }
    cr_assert_eq(got, end - off, "read %llu bytes of [%llu, %llu)", (unsigned long long)got,
                 (unsigned long long)off, (unsigned long long)end);
    sb_io_read_close(r);
    return out;
}

/* The same through sb_io_read_push (the line reader's way): the bytes arrive in curl's buffer. */
typedef struct {
    unsigned char *out;
    uint64_t got, cap;
    unsigned calls;
} pushed;

static int take_pushed(void *ud, const char *p, size_t n)
{
    pushed *c = ud;
    cr_assert(c->got + n <= c->cap, "pushed past the range");
    memcpy(c->out + c->got, p, n);
    c->got += n;
    c->calls++;
    return 0;
}

static unsigned char *read_range_pushed(const char *u, uint64_t off, uint64_t end)
{
    sb_err err = {0};
    sb_io_rd *r;
    cr_assert(sb_io_read_open(u, off, end, &r, &err) == 0, "%s", err.msg);
    cr_assert(sb_io_read_can_push(r));
    pushed c = {.out = malloc(end - off + 1), .cap = end - off};
    cr_assert_eq(sb_io_read_push(r, take_pushed, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.got, end - off, "pushed %llu bytes of [%llu, %llu)", (unsigned long long)c.got,
                 (unsigned long long)off, (unsigned long long)end);
    sb_io_read_close(r);
    return c.out;
}

static int stop_after_one(void *ud, const char *p, size_t n)
{
    (void)p;
    (void)n;
    (*(int *)ud)++;
    return 1;
}

Test(io_http, list_one_url_size_and_ranges)
{
    char u[128];
    sb_err err = {0};
    sb_io_obj *o;
    size_t n;
    url(u, sizeof u, g_port, "f20");
    cr_assert(sb_io_list(u, 0, &o, &n, &err) == 0, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(o[0].uri, u);
    cr_assert_eq(o[0].size, F20);
    cr_assert_eq(o[0].whole, 0);
    sb_io_objs_free(o, n);

    url(u, sizeof u, g_port_nr, "f20");
    cr_assert(sb_io_list(u, 0, &o, &n, &err) == 0, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_assert_eq(o[0].size, F20);
    cr_assert_eq(o[0].whole, 1, "a server that ignores Range: the object is read whole");
    sb_io_objs_free(o, n);

    uint64_t size;
    int exists;
    url(u, sizeof u, g_port, "small");
    cr_assert(sb_io_stat(u, &size, &exists, &err) == 0, "%s", err.msg);
    cr_assert(exists);
    cr_assert_eq(size, 6);
    url(u, sizeof u, g_port, "nope");
    cr_assert(sb_io_stat(u, &size, &exists, &err) == 0, "%s", err.msg);
    cr_assert_eq(exists, 0);
}

Test(io_http, ranged_slices_match_byte_for_byte)
{
    char u[128];
    url(u, sizeof u, g_port, "f20");
    const uint64_t sl[][2] = {{0, 1},          {1, 1000}, {5 * MiB + 3, 13 * MiB + 7},
                              {F20 - 10, F20}, {0, F20},  {777, 777}};
    for (size_t i = 0; i < sizeof sl / sizeof sl[0]; i++) {
        unsigned char *b = read_range(u, sl[i][0], sl[i][1]);
        cr_assert(memcmp(b, g_data + sl[i][0], sl[i][1] - sl[i][0]) == 0,
                  "slice [%llu, %llu) differs", (unsigned long long)sl[i][0],
                  (unsigned long long)sl[i][1]);
        free(b);
        b = read_range_pushed(u, sl[i][0], sl[i][1]);
        cr_assert(memcmp(b, g_data + sl[i][0], sl[i][1] - sl[i][0]) == 0,
                  "pushed slice [%llu, %llu) differs", (unsigned long long)sl[i][0],
                  (unsigned long long)sl[i][1]);
        free(b);
    }
    /* a consumer that stops: the read ends at once, the handle only closes */
    sb_err err = {0};
    sb_io_rd *r;
    cr_assert(sb_io_read_open(u, 0, F20, &r, &err) == 0, "%s", err.msg);
    int calls = 0;
    cr_assert_eq(sb_io_read_push(r, stop_after_one, &calls, &err), 1, "%s", err.msg);
    cr_assert_eq(calls, 1);
    sb_io_read_close(r);
}

Test(io_http, no_range_server_whole_read_works_ranged_read_refused)
{
    char u[128];
    url(u, sizeof u, g_port_nr, "f20");
    unsigned char *b = read_range(u, 0, F20);
    cr_assert(memcmp(b, g_data, F20) == 0);
    free(b);
    b = read_range_pushed(u, 0, F20);
    cr_assert(memcmp(b, g_data, F20) == 0);
    free(b);

    sb_err err = {0};
    sb_io_rd *r = NULL;
    int rc = sb_io_read_open(u, 4096, F20, &r, &err);
    if (rc == 0) { /* the error may come with the first read */
        char buf[100];
        cr_assert(sb_io_read(r, buf, sizeof buf, &err) < 0, "a ranged read returned bytes");
        sb_io_read_close(r);
    }
    cr_assert(strstr(err.msg, "ignores Range") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, u) != NULL, "%s", err.msg);
}

Test(io_http, redirect_followed)
{
    char u[128];
    url(u, sizeof u, g_port, "redir");
    sb_err err = {0};
    sb_io_obj *o;
    size_t n;
    cr_assert(sb_io_list(u, 0, &o, &n, &err) == 0, "%s", err.msg);
    cr_assert_eq(o[0].size, F20);
    sb_io_objs_free(o, n);
    unsigned char *b = read_range(u, MiB, 2 * MiB);
    cr_assert(memcmp(b, g_data + MiB, MiB) == 0);
    free(b);
}

Test(io_http, not_found_names_url_and_status)
{
    char u[128];
    url(u, sizeof u, g_port, "missing.csv");
    sb_err err = {0};
    sb_io_obj *o;
    size_t n;
    cr_assert(sb_io_list(u, 0, &o, &n, &err) != 0);
    cr_assert(strstr(err.msg, u) != NULL && strstr(err.msg, "404") != NULL, "%s", err.msg);
    sb_io_rd *r;
    err.msg[0] = '\0';
    cr_assert(sb_io_read_open(u, 0, 10, &r, &err) != 0);
    cr_assert(strstr(err.msg, u) != NULL && strstr(err.msg, "404") != NULL, "%s", err.msg);
}

Test(io_http, refused_connection_fails_after_retries)
{
    setenv("SB_IO_RETRIES", "2", 1);
    char u[128];
    url(u, sizeof u, free_port(), "f20"); /* nothing listens there */
    sb_err err = {0};
    sb_io_obj *o;
    size_t n;
    cr_assert(sb_io_list(u, 0, &o, &n, &err) != 0);
    cr_assert(strstr(err.msg, u) != NULL && strstr(err.msg, "after 2 attempts") != NULL, "%s",
              err.msg);
    sb_io_rd *r;
    err.msg[0] = '\0';
    cr_assert(sb_io_read_open(u, 0, 10, &r, &err) != 0);
    cr_assert(strstr(err.msg, u) != NULL && strstr(err.msg, "after 2 attempts") != NULL, "%s",
              err.msg);
}

Test(io_http, shorter_object_is_an_error)
{
    for (int i = 0; i < 2; i++) {
        char u[128];
        url(u, sizeof u, i == 0 ? g_port : g_port_nr, "small");
        sb_err err = {0};
        sb_io_rd *r = NULL;
        char buf[64];
        ssize_t k = 0, total = 0;
        if (sb_io_read_open(u, 0, 10, &r, &err) == 0) {
            while ((k = sb_io_read(r, buf + total, sizeof buf - (size_t)total, &err)) > 0)
                total += k;
            sb_io_read_close(r);
        } else {
            k = -1;
        }
        cr_assert(k < 0, "a 6-byte object planned as 10 bytes read without error");
        cr_assert(strstr(err.msg, "changed since planning") != NULL, "%s", err.msg);
    }
}

Test(io_http, read_only)
{
    char u[128];
    url(u, sizeof u, g_port, "small");
    sb_err err = {0};
    sb_io_wr *w;
    cr_assert(sb_io_write_open(u, &w, &err) != 0);
    cr_assert(strstr(err.msg, "read only") != NULL, "%s", err.msg);
    cr_assert(sb_io_backend_http.write_open(u, &w, &err) != 0);
    cr_assert(strstr(err.msg, "http(s):// is read only") != NULL, "%s", err.msg);
    cr_assert(sb_io_backend_http.del(u, &err) != 0);
    cr_assert(strstr(err.msg, "http(s):// is read only") != NULL, "%s", err.msg);
    cr_assert(sb_io_backend_http.cleanup(u, &err) != 0);
    cr_assert(strstr(err.msg, "http(s):// is read only") != NULL, "%s", err.msg);
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return v;
}

Test(io_http, reads_stream_instead_of_buffering)
{
    char u[128];
    url(u, sizeof u, g_port, "f200");
    long before = rss_kib();
    sb_err err = {0};
    sb_io_rd *r;
    cr_assert(sb_io_read_open(u, 0, F200, &r, &err) == 0, "%s", err.msg);
    char *buf = malloc(MiB);
    cr_assert_eq(sb_io_read_full(r, buf, MiB, &err), (ssize_t)MiB, "%s", err.msg);
    usleep(300000); /* time for a buffering reader to pull much more */
    cr_assert_eq(sb_io_read_full(r, buf, 1000, &err), 1000, "%s", err.msg);
    long after = rss_kib();
    sb_io_read_close(r);
    free(buf);
    cr_assert(after - before < 32 * 1024, "RSS grew by %ld KiB reading 1 MiB of 200 MiB",
              after - before);
}

/* ---- a tiny scripted server for failures nginx cannot produce on demand ---- */

typedef struct {
    int lfd;
    int mode;      /* 0: the first answer breaks mid-body; 1: the first answer is a 503 */
    int conns;     /* connections served */
    uint64_t size; /* object size (bytes of g_data) */
} fake_srv;

static void send_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        p = (const char *)p + k;
        n -= (size_t)k;
    }
}

static void *fake_main(void *arg)
{
    fake_srv *s = arg;
    for (;;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        char req[4096];
        size_t got = 0;
        req[0] = '\0';
        while (got < sizeof req - 1 && strstr(req, "\r\n\r\n") == NULL) {
            ssize_t k = recv(fd, req + got, sizeof req - 1 - got, 0);
            if (k <= 0)
                break;
            got += (size_t)k;
            req[got] = '\0';
        }
        req[got] = '\0';
        int c = s->conns++;
        int head = strncmp(req, "HEAD ", 5) == 0;
        unsigned long long a = 0, b = s->size - 1;
        const char *r = strcasestr(req, "\r\nRange: bytes=");
        if (r != NULL)
            sscanf(r + 15, "%llu-%llu", &a, &b);
        if (b >= s->size)
            b = s->size - 1;
        char h[512];
        int hl;
        if (s->mode == 1 && c == 0) {
            hl = snprintf(h, sizeof h,
                          "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                          "Connection: close\r\n\r\n");
            send_all(fd, h, (size_t)hl);
            close(fd);
            continue;
        }
        if (r != NULL)
            hl = snprintf(h, sizeof h,
                          "HTTP/1.1 206 Partial Content\r\nAccept-Ranges: bytes\r\n"
                          "Content-Range: bytes %llu-%llu/%llu\r\nContent-Length: %llu\r\n"
                          "Connection: close\r\n\r\n",
                          a, b, (unsigned long long)s->size, b - a + 1);
        else
            hl = snprintf(h, sizeof h,
                          "HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nContent-Length: %llu\r\n"
                          "Connection: close\r\n\r\n",
                          (unsigned long long)s->size);
        send_all(fd, h, (size_t)hl);
        if (!head) {
            uint64_t n = b - a + 1;
            if (s->mode == 0 && c == 0 && !head)
                n /= 2; /* then the connection drops */
            send_all(fd, g_data + a, n);
        }
        close(fd);
    }
}

static void fake_start(fake_srv *s, pthread_t *t, int mode, uint64_t size)
{
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(bind(s->lfd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(listen(s->lfd, 8) == 0);
    socklen_t l = sizeof a;
    cr_assert(getsockname(s->lfd, (struct sockaddr *)&a, &l) == 0);
    s->mode = mode;
    s->conns = 0;
    s->size = size;
    cr_assert(pthread_create(t, NULL, fake_main, s) == 0);
    g_port_fake = ntohs(a.sin_port);
}

Test(io_http, broken_transfer_resumes_from_its_position)
{
    fake_srv s;
    pthread_t t;
    fake_start(&s, &t, 0, 4 * MiB);
    char u[128];
    url(u, sizeof u, g_port_fake, "obj");
    unsigned char *b = read_range(u, 100, 4 * MiB);
    cr_assert(memcmp(b, g_data + 100, 4 * MiB - 100) == 0, "resumed bytes differ");
    free(b);
    cr_assert_geq(s.conns, 2, "the first transfer was not cut (conns %d)", s.conns);
    s.conns = 0; /* the next first answer breaks again */
    b = read_range_pushed(u, 100, 4 * MiB);
    cr_assert(memcmp(b, g_data + 100, 4 * MiB - 100) == 0, "resumed pushed bytes differ");
    free(b);
    cr_assert_geq(s.conns, 2, "the pushed transfer was not cut (conns %d)", s.conns);
}

Test(io_http, service_unavailable_is_retried)
{
    fake_srv s;
    pthread_t t;
    fake_start(&s, &t, 1, MiB);
    char u[128];
    url(u, sizeof u, g_port_fake, "obj");
    sb_err err = {0};
    sb_io_obj *o;
    size_t n;
    cr_assert(sb_io_list(u, 0, &o, &n, &err) == 0, "%s", err.msg);
    cr_assert_eq(o[0].size, MiB);
    cr_assert_eq(o[0].whole, 0);
    sb_io_objs_free(o, n);
    s.conns = 0; /* the next first answer is a 503 again */
    unsigned char *b = read_range(u, 0, MiB);
    cr_assert(memcmp(b, g_data, MiB) == 0);
    free(b);
    cr_assert_geq(s.conns, 2);
}

Test(io_http, https_verifies_the_certificate_and_honours_ssl_cert_file)
{
    char u[128], ca[128];
    snprintf(u, sizeof u, "https://127.0.0.1:%d/f20", g_port_tls);
    unsetenv("SSL_CERT_FILE");
    unsetenv("CURL_CA_BUNDLE");
    setenv("SB_IO_RETRIES", "1", 1);
    sb_err err = {0};
    sb_io_obj *o;
    size_t n;
    cr_assert(sb_io_list(u, 0, &o, &n, &err) != 0, "a self-signed certificate was accepted");
    cr_assert(strstr(err.msg, u) != NULL && strstr(err.msg, "certificate") != NULL, "%s", err.msg);

    snprintf(ca, sizeof ca, "%s/cert.pem", g_dir);
    setenv("SSL_CERT_FILE", ca, 1);
    cr_assert(sb_io_list(u, 0, &o, &n, &err) == 0, "%s", err.msg);
    cr_assert_eq(o[0].size, F20);
    cr_assert_eq(o[0].whole, 0);
    sb_io_objs_free(o, n);
    unsigned char *b = read_range(u, 3 * MiB + 1, 4 * MiB);
    cr_assert(memcmp(b, g_data + 3 * MiB + 1, MiB - 1) == 0);
    free(b);
}

/* The line reader over http (pushed buffers) gives the records the same bytes give from the
 * file nginx serves: jsonl, text and csv cut at random points; whole on the server that ignores
 * Range. */
Test(io_http, line_reads_equal_file_reads)
{
    const sb_format fmts[] = {SB_FMT_JSONL, SB_FMT_TEXT, SB_FMT_CSV};
    const char *args[] = {NULL, NULL, "{\"header\": true}"};
    for (size_t i = 0; i < 3; i++) {
        size_t len;
        char *t = lines_text(fmts[i], 5 + i, 2 << 20, i != 1, false, &len);
        char name[64], path[256], u[128];
        snprintf(name, sizeof name, "lines.%s", sb_format_names[fmts[i]]);
        snprintf(path, sizeof path, "%s/www/%s", g_dir, name);
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(t, 1, len, f), len);
        fclose(f);
        url(u, sizeof u, g_port, name);
        lines_check_same(fmts[i], args[i], t, len, path, u, name, 10);
        url(u, sizeof u, g_port_nr, name);
        lines_check_same(fmts[i], args[i], t, len, path, u, name, 1);
        free(t);
    }
}
