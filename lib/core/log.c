/* log.c — structured one-line logs to stderr (see log.h): the level and format (logfmt or JSON,
 * from SB_LOG_LEVEL and SB_LOG_FORMAT at first use, or sb_log_set_level), and sb_log, which
 * redacts every value (core/redact.h), quotes values as needed and writes each line with one
 * write(2), so lines of concurrent threads do not interleave. */

#include "core/log.h"

#include "core/redact.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_level = -1;
static int g_json = -1;

void sb_log_set_level(sb_log_level level)
{
    g_level = (int)level;
}

static void log_init(void)
{
    if (g_level < 0) {
        const char *s = getenv("SB_LOG_LEVEL");
        g_level = SB_LOG_INFO;
        if (s != NULL) {
            if (strcmp(s, "debug") == 0)
                g_level = SB_LOG_DEBUG;
            else if (strcmp(s, "warn") == 0)
                g_level = SB_LOG_WARN;
            else if (strcmp(s, "error") == 0)
                g_level = SB_LOG_ERROR;
        }
    }
    if (g_json < 0) {
        const char *f = getenv("SB_LOG_FORMAT");
        g_json = f != NULL && strcmp(f, "json") == 0;
    }
}

int sb_log_enabled(sb_log_level level)
{
    log_init();
    return (int)level >= g_level;
}

typedef struct {
    char buf[2048];
    size_t len;
} line_buf;

static void put(line_buf *b, const char *s, size_t n)
{
    if (b->len + n >= sizeof b->buf - 2)
        n = sizeof b->buf - 2 - b->len;
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

/* v with its secrets redacted (URIs' userinfo and query values, signing parameters,
 * Authorization headers), quoted as needed. */
static void put_value(line_buf *b, const char *raw, int json)
{
    char v[sizeof b->buf];
    sb_redact_text(raw, v, sizeof v);
    int quote = json || v[0] == '\0' || strpbrk(v, " \t\"=\n") != NULL;
    if (!quote) {
        put(b, v, strlen(v));
        return;
    }
    put(b, "\"", 1);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') {
            put(b, "\\", 1);
            put(b, p, 1);
        } else if (*p == '\n') {
            put(b, "\\n", 2);
        } else if ((unsigned char)*p < 0x20) {
            put(b, " ", 1);
        } else {
            put(b, p, 1);
        }
    }
    put(b, "\"", 1);
}

void sb_log(sb_log_level level, const char *msg, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (!sb_log_enabled(level))
        return;
    line_buf b = {.len = 0};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char tsbuf[96];
    snprintf(tsbuf, sizeof tsbuf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    const char *kv[3][2] = {{"ts", tsbuf}, {"level", names[level]}, {"msg", msg}};
    if (g_json)
        put(&b, "{", 1);
    int first = 1;
    va_list ap;
    va_start(ap, msg);
    for (int i = 0;; i++) {
        const char *k, *v;
        if (i < 3) {
            k = kv[i][0];
            v = kv[i][1];
        } else {
            k = va_arg(ap, const char *);
            if (k == NULL)
                break;
            v = va_arg(ap, const char *);
            if (v == NULL)
                v = "";
        }
        if (!first)
            put(&b, g_json ? "," : " ", 1);
        first = 0;
        if (g_json) {
            put_value(&b, k, 1);
            put(&b, ":", 1);
        } else {
            put(&b, k, strlen(k));
            put(&b, "=", 1);
        }
        put_value(&b, v, g_json);
    }
    va_end(ap);
    if (g_json)
        put(&b, "}", 1);
    b.buf[b.len++] = '\n';
    ssize_t w = write(STDERR_FILENO, b.buf, b.len);
    (void)w;
}
