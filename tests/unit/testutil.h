/* testutil.h — helpers shared by the Criterion tests: where the repository and the binaries
 * are, and running a shell command while capturing its output. Header-only (static inline), so
 * each test binary stays self-contained. */
#ifndef SB_TESTUTIL_H
#define SB_TESTUTIL_H

#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The repository root: $SB_ROOT, else the current directory (make runs tests from the root). */
static inline const char *sb_test_root(void)
{
    const char *r = getenv("SB_ROOT");
    static char cwd[1024];
    if (r != NULL)
        return r;
    if (cwd[0] == '\0' && getcwd(cwd, sizeof cwd) == NULL)
        strcpy(cwd, ".");
    return cwd;
}

/* Absolute path of a built binary: $SB_BIN_DIR/name, else <root>/bin/name. */
static inline const char *sb_test_bin(const char *name)
{
    static char buf[4][1024];
    static int slot;
    char *b = buf[slot++ % 4];
    const char *dir = getenv("SB_BIN_DIR");
    if (dir != NULL)
        snprintf(b, 1024, "%s/%s", dir, name);
    else
        snprintf(b, 1024, "%s/bin/%s", sb_test_root(), name);
    return b;
}

/* The shared object of a plugin built by the Makefile (examples/plugins, tests/plugins). */
static inline const char *sb_test_plugin(const char *name)
{
    static char buf[4][1024];
    static int slot;
    char *b = buf[slot++ % 4];
    const char *dir = getenv("SB_BUILD_DIR");
    if (dir != NULL)
        snprintf(b, 1024, "%s/plugins/lib%s.so", dir, name);
    else
        snprintf(b, 1024, "%s/build/plugins/lib%s.so", sb_test_root(), name);
    return b;
}

/* Runs cmd with /bin/sh, captures stdout (malloc'd, NUL-terminated, caller frees) and returns
 * the exit status (128+signal if killed, -1 if it could not run). */
/* A mkdtemp template "$TMPDIR/<name>-XXXXXX" (TMPDIR defaults to /tmp). scripts/run-tests.sh
 * gives every suite its own TMPDIR and removes it afterwards, so what a killed helper or a
 * failed assertion leaves behind does not pile up in /tmp. */
static inline void sb_test_tmpl(char *buf, size_t len, const char *name)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, len, "%s/%s-XXXXXX", t != NULL && *t ? t : "/tmp", name);
}

static inline int sb_test_run(const char *cmd, char **out)
{
    FILE *p = popen(cmd, "r");
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (p == NULL || b == NULL) {
        free(b);
        *out = strdup("");
        if (p != NULL)
            pclose(p);
        return -1;
    }
    size_t r;
    while ((r = fread(b + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(b, cap * 2);
            if (nb == NULL)
                break;
            b = nb;
            cap *= 2;
        }
    }
    b[n] = '\0';
    *out = b;
    int st = pclose(p);
    if (st == -1)
        return -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

/* Runs a printf-formatted shell command; returns its output (stdout and whatever the command
 * redirects) without trailing newlines, malloc'd (caller frees). The exit status is ignored. */
static inline char *sb_test_sh_out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline char *sb_test_sh_out(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out = NULL;
    sb_test_run(cmd, &out);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = '\0';
    return out;
}

static inline int sb_test_has_line(const char *out, const char *line)
{
    size_t ll = strlen(line);
    for (const char *p = out; (p = strstr(p, line)) != NULL; p++)
        if ((p == out || p[-1] == '\n') && (p[ll] == '\n' || p[ll] == '\0'))
            return 1;
    return 0;
}

static inline size_t sb_test_count_lines(const char *out)
{
    size_t n = 0;
    for (const char *p = out; *p; p++)
        n += *p == '\n';
    if (*out && out[strlen(out) - 1] != '\n')
        n++;
    return n;
}

#endif
