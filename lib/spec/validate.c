/* validate.c — `streambatch validate` (validate.h): reads a manifest file within the size limit,
 * decodes every YAML document as a Pipeline, adds the rule that needs the working directory
 * (the sink must not be where the source listing would read it back) and prints each problem
 * as FILE:LINE:COL: FIELD.PATH: message, in file order. It owns only its buffers.
 */
#include "spec/validate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/pct.h"
#include "doc/doc.h"
#include "spec/pipeline.h"

int sb_spec_read_file_limited(const char *path, size_t max, char **buf, size_t *len, char *msg,
                              size_t msglen)
{
    int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, msglen, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(msg, msglen, "is a directory, not a file");
            goto fail;
        }
        if (S_ISREG(st.st_mode) && (size_t)st.st_size > max) {
            snprintf(msg, msglen, "file is %lld bytes; manifests are limited to %zu bytes",
                     (long long)st.st_size, max);
            goto fail;
        }
    }
    size_t cap = 64 * 1024, n = 0;
    char *b = malloc(cap + 1);
    if (b == NULL) {
        snprintf(msg, msglen, "out of memory");
        goto fail;
    }
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(b);
                snprintf(msg, msglen, "input is larger than the limit of %zu bytes", max);
                goto fail;
            }
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (nb == NULL) {
                free(b);
                snprintf(msg, msglen, "out of memory");
                goto fail;
            }
            b = nb;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(b);
            snprintf(msg, msglen, "read error: %s", strerror(errno));
            goto fail;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > max) {
        free(b);
        snprintf(msg, msglen, "input is larger than the limit of %zu bytes", max);
        goto fail;
    }
    b[n] = '\0';
    if (fd != STDIN_FILENO)
        close(fd);
    *buf = b;
    *len = n;
    return 0;
fail:
    if (fd != STDIN_FILENO)
        close(fd);
    return -1;
}

/* Normalizes a URI into out: "scheme://" then the path with "//" and "." segments removed, ".."
 * applied (file only), no trailing '/'. *glob_dir receives the length of out up to (not
 * including) the last '/' when the last segment is a glob, else 0. Returns -1 when out is too
 * small or the URI has no scheme. */
static int norm_uri(const char *uri, const char *cwd, char *out, size_t cap, size_t *glob_dir)
{
    const char *sep = strstr(uri, "://");
    if (sep == NULL || sep == uri)
        return -1;
    size_t sl = (size_t)(sep - uri);
    const char *rest = sep + 3;
    if (rest[0] == '\0')
        return -1;  /* no path: reported by the URI checks */
    char dec[8192]; /* file:// and s3:// paths are percent-encoded (core/pct.h) */
    if (sb_pct_decodes(uri)) {
        if (sb_pct_decode(rest, strlen(rest), dec, sizeof dec) < 0)
            return -1; /* bad encoding: the storage layer names it when it opens the URI */
        rest = dec;
    }
    int is_file = sl == 4 && strncasecmp(uri, "file", 4) == 0;
    char joined[8192];
    if (is_file && rest[0] != '/' && cwd != NULL) {
        if ((size_t)snprintf(joined, sizeof joined, "%s/%s", cwd, rest) >= sizeof joined)
            return -1;
        rest = joined;
    }
    if (sl + 3 >= cap)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < sl; i++)
        out[n++] = (char)(uri[i] >= 'A' && uri[i] <= 'Z' ? uri[i] - 'A' + 'a' : uri[i]);
    memcpy(out + n, "://", 3);
    n += 3;
    size_t base = n;
    if (is_file && rest[0] == '/')
        out[n++] = '/', base = n;
    size_t last_seg = n;
    const char *s = rest;
    while (*s != '\0') {
        while (*s == '/')
            s++;
        const char *e = s;
        while (*e != '\0' && *e != '/')
            e++;
        size_t len = (size_t)(e - s);
        if (len == 0)
            break;
        if (len == 1 && s[0] == '.') {
            /* drop "." */
        } else if (is_file && len == 2 && s[0] == '.' && s[1] == '.' && n > base &&
                   !(n - base >= 2 && out[n - 1] == '.' && out[n - 2] == '.' &&
                     (n - base == 2 || out[n - 3] == '/'))) {
            while (n > base && out[n - 1] != '/')
                n--;
            if (n > base)
                n--; /* the '/' before the dropped segment */
        } else {
            if (n > base && out[n - 1] != '/') {
                if (n + 1 >= cap)
                    return -1;
                out[n++] = '/';
            }
            if (n + len >= cap)
                return -1;
            last_seg = n;
            memcpy(out + n, s, len);
            n += len;
        }
        s = e;
    }
    out[n] = '\0';
    *glob_dir = 0;
    if (last_seg < n && strpbrk(out + last_seg, "*?[") != NULL)
        *glob_dir = last_seg > base ? last_seg - 1 : last_seg;
    return 0;
}

int sb_validate_sink_vs_source(const char *source_uri, const char *sink_uri, const char *cwd,
                               char *msg, size_t msglen)
{
    if (source_uri == NULL || sink_uri == NULL)
        return 0;
    char src[8192], snk[8192];
    size_t src_glob, snk_glob;
    if (norm_uri(source_uri, cwd, src, sizeof src, &src_glob) != 0 ||
        norm_uri(sink_uri, cwd, snk, sizeof snk, &snk_glob) != 0)
        return 0; /* no scheme: reported by the URI checks */
    const char *why = NULL;
    if (strcmp(src, snk) == 0)
        why = "the sink is the source directory";
    else if (src_glob > 0 && strlen(snk) == src_glob && strncmp(src, snk, src_glob) == 0)
        why = "the sink is the directory the source glob lists";
    if (why == NULL)
        return 0;
    snprintf(msg, msglen,
             "%s (spec.sink.uri \"%.200s\", spec.source.uri \"%.200s\"): every run would "
             "read the previous run's output back in; write the sink to another directory or "
             "prefix (a subdirectory of the source is fine, the source listing is not recursive)",
             why, sink_uri, source_uri);
    return 1;
}

static void print_problem(FILE *out, const char *name, int line, int col, const char *path,
                          const char *msg)
{
    if (path != NULL && path[0] != '\0')
        fprintf(out, "%s:%d:%d: %s: %s\n", name, line, col, path, msg);
    else
        fprintf(out, "%s:%d:%d: %s\n", name, line, col, msg);
}

/* The plain words YAML 1.1 reads as booleans that the YAML 1.2 core schema (this parser) reads
 * as strings: kubectl, and the Kubernetes tools built on go-yaml, send them as true or false. */
static const char *yaml11_bool(const sb_node *n)
{
    static const char *const yes[] = {"y", "Y", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const no[] = {"n", "N", "no", "No", "NO", "off", "Off", "OFF", NULL};
    if (n->kind != SB_NODE_STRING || !n->plain)
        return NULL;
    for (size_t i = 0; yes[i] != NULL; i++)
        if (strcmp(n->text, yes[i]) == 0)
            return "true";
    for (size_t i = 0; no[i] != NULL; i++)
        if (strcmp(n->text, no[i]) == 0)
            return "false";
    return NULL;
}

/* Warns of each unquoted key or value under n that a YAML 1.1 reader would turn into a
 * boolean: applied with kubectl, join's `on:` arrives as the key "true" and `field: n` as
 * false, so the file means one thing to `streambatch run` and another to the cluster. A
 * warning, not a problem: the file is valid as written. Where a problem d names the node
 * already (a boolean field given "yes"), it says what the field takes instead. Returns the
 * number written. */
static size_t warn_yaml11(FILE *out, const char *name, const sb_node *n, const sb_diags *d)
{
    size_t w = 0;
    const char *b = n != NULL ? yaml11_bool(n) : NULL;
    for (size_t i = 0; b != NULL && i < d->n; i++)
        if (d->items[i].line == n->line && d->items[i].col == n->col)
            b = NULL; /* a problem there already says what the field takes (a boolean?) */
    if (b != NULL) {
        fprintf(out,
                "%s:%d:%d: warning: unquoted %s is the string \"%s\" here, but kubectl and other "
                "YAML 1.1 readers take it as %s: quote it (\"%s\") to keep the word\n",
                name, n->line, n->col, n->text, n->text, b, n->text);
        return 1;
    }
    if (n == NULL || (n->kind != SB_NODE_MAP && n->kind != SB_NODE_SEQ))
        return 0;
    for (size_t i = 0; i < n->n; i++) {
        if (n->kind == SB_NODE_MAP)
            w += warn_yaml11(out, name, n->keys[i], d);
        w += warn_yaml11(out, name, n->items[i], d);
    }
    return w;
}

int sb_validate_buffer(const char *name, const char *buf, size_t len, FILE *out, size_t *ndocs)
{
    size_t checked = 0;
    int problems = 0;
    size_t blank = 0; /* buf need not be NUL-terminated */
    while (blank < len &&
           (buf[blank] == ' ' || buf[blank] == '\t' || buf[blank] == '\r' || buf[blank] == '\n'))
        blank++;
    if (blank == len) {
        print_problem(out, name, 1, 1, NULL, "file is empty: expected a Pipeline manifest");
        if (ndocs)
            *ndocs = 0;
        return 1;
    }
    sb_doc *doc = sb_doc_parse_yaml(buf, len, NULL);
    if (doc == NULL)
        return -1;
    for (size_t i = 0; i < sb_doc_count(doc); i++) {
        const sb_node *root = sb_doc_root(doc, i);
        if (root == NULL || (root->kind == SB_NODE_NULL && root->text_len == 0))
            continue; /* an empty document, e.g. after a trailing "---" */
        checked++;
        sb_pipeline p;
        sb_diags d = {0};
        int rc = sb_pipeline_decode(root, &p, &d);
        char overlap[1200], cwd[4096];
        if (rc == 0 &&
            sb_validate_sink_vs_source(p.spec.source.uri, p.spec.sink.uri, getcwd(cwd, sizeof cwd),
                                       overlap, sizeof overlap)) {
            const sb_node *u = sb_node_get(sb_node_get(sb_node_get(root, "spec"), "sink"), "uri");
            sb_diags_add(&d, "spec.sink.uri", u ? u->line : 0, u ? u->col : 0, "%s", overlap);
        }
        sb_diags_sort(&d);
        for (size_t k = 0; k < d.n; k++) {
            int line = d.items[k].line, col = d.items[k].col;
            if (line == 0) {
                line = sb_doc_start_line(doc, i);
                col = 1;
            }
            print_problem(out, name, line, col, d.items[k].path, d.items[k].msg);
        }
        problems += (int)d.n;
        warn_yaml11(out, name, root, &d);
        int oom = d.oom || rc != 0;
        sb_diags_free(&d);
        sb_pipeline_free(&p);
        if (oom) {
            sb_doc_free(doc);
            return -1;
        }
    }
    int line, col;
    const char *err = sb_doc_error(doc, &line, &col);
    if (err != NULL) {
        char msg[600];
        snprintf(msg, sizeof msg, "not valid YAML: %s", err);
        print_problem(out, name, line ? line : 1, line ? col : 1, NULL, msg);
        problems++;
    } else if (checked == 0) {
        print_problem(out, name, 1, 1, NULL,
                      "no documents: expected a Pipeline manifest (only empty documents found)");
        problems++;
    }
    sb_doc_free(doc);
    if (ndocs)
        *ndocs = checked;
    return problems;
}

int sb_validate_file(const char *path, FILE *out, size_t *ndocs)
{
    char *buf;
    size_t len;
    char msg[300];
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    if (sb_spec_read_file_limited(path, SB_MANIFEST_MAX_BYTES, &buf, &len, msg, sizeof msg) != 0) {
        fprintf(out, "%s: %s\n", name, msg);
        if (ndocs)
            *ndocs = 0;
        return 1;
    }
    int rc = sb_validate_buffer(name, buf, len, out, ndocs);
    free(buf);
    return rc;
}
