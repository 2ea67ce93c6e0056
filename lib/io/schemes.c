/* schemes.c — the storage interface's front (see schemes.h): URI helpers (scheme, join, base
 * name) and the dispatch of each operation to the file://, http(s):// or s3:// backend its URI
 * names. Owns no state; backends keep their own. */

#include "io/schemes.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/pct.h"

static int has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

const sb_io_backend *sb_io_backend_of(const char *uri, int write, sb_err *err)
{
    if (uri == NULL || uri[0] == '\0') {
        sb_err_set(err, "no uri given");
        return NULL;
    }
    if (uri[0] == '/' || has_prefix(uri, "file://"))
        return &sb_io_backend_file;
    if (has_prefix(uri, "s3://"))
        return &sb_io_backend_s3;
    if (has_prefix(uri, "http://") || has_prefix(uri, "https://")) {
        if (write) {
            sb_err_set(err, "\"%.200s\": http(s):// is read only (a sink needs file:// or s3://)",
                       uri);
            return NULL;
        }
        return &sb_io_backend_http;
    }
    const char *sep = strstr(uri, "://");
    if (sep == NULL)
        sb_err_set(err, "\"%.200s\": no scheme (expected file://, s3:// or http(s)://)", uri);
    else
        sb_err_set(err,
                   "\"%.200s\": unsupported scheme \"%.*s\" (file://, s3:// and http(s):// are)",
                   uri, (int)(sep - uri) > 32 ? 32 : (int)(sep - uri), uri);
    return NULL;
}

/* An s3:// URI in the storage layer's form: the key percent-decoded, then only '%' encoded
 * again (as listings write keys, s3.c), so that a URI given by the user and one built from a
 * listing name the same key the same way. */
static char *s3_canon(const char *uri, sb_err *err)
{
    size_t n = strlen(uri);
    char *dec = malloc(n + 1), *out = malloc(3 * n + 1);
    long k = dec != NULL ? sb_pct_decode(uri, n, dec, n + 1) : -1;
    if (dec == NULL || out == NULL || k < 0) {
        if (dec != NULL && out != NULL)
            sb_err_set(err,
                       "\"%.200s\": a '%%' not followed by two hex digits (write %%25 for '%%') "
                       "or %%00",
                       uri);
        else
            sb_err_set(err, "\"%.200s\": out of memory", uri);
        free(dec);
        free(out);
        return NULL;
    }
    size_t o = 0;
    for (long i = 0; i < k; i++) {
        if (dec[i] == '%') {
            memcpy(out + o, "%25", 3);
            o += 3;
        } else {
            out[o++] = dec[i];
        }
    }
    out[o] = '\0';
    free(dec);
    return out;
}

char *sb_io_uri_norm(const char *uri, sb_err *err)
{
    if (uri == NULL || uri[0] == '\0') {
        sb_err_set(err, "no uri given");
        return NULL;
    }
    char *out = NULL;
    if (has_prefix(uri, "s3://"))
        return s3_canon(uri, err);
    if (has_prefix(uri, "file://")) {
        /* the path as a URI writes it: percent-encoded (core/pct.h) */
        char dec[PATH_MAX];
        if (sb_pct_decode(uri + 7, strlen(uri + 7), dec, sizeof dec) < 0) {
            sb_err_set(err,
                       "\"%.200s\": a '%%' not followed by two hex digits (write %%25 for '%%'), "
                       "%%00, or a path too long",
                       uri);
            return NULL;
        }
        const char *path = dec;
        if (path[0] == '\0') {
            sb_err_set(err, "\"%.200s\": empty path", uri);
            return NULL;
        }
        if (path[0] == '/') {
            out = strdup(path);
        } else {
            char cwd[PATH_MAX];
            if (getcwd(cwd, sizeof cwd) == NULL) {
                sb_err_set(err,
                           "\"%.200s\": relative path, and the current directory is unknown: %s",
                           uri, strerror(errno));
                return NULL;
            }
            size_t clen = strlen(cwd);
            if (asprintf(&out, "%s%s%s", cwd, clen > 0 && cwd[clen - 1] == '/' ? "" : "/", path) <
                0)
                out = NULL;
        }
        if (out != NULL && strlen(out) >= PATH_MAX) {
            free(out);
            sb_err_set(err, "\"%.200s\": path is too long", uri);
            return NULL;
        }
    } else {
        out = strdup(uri);
    }
    if (out == NULL)
        sb_err_set(err, "\"%.200s\": out of memory", uri);
    return out;
}

char *sb_io_uri_join(const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    int slash = dl > 0 && dir[dl - 1] == '/';
    char *out;
    if (asprintf(&out, "%s%s%s", dir, slash ? "" : "/", name) < 0)
        return NULL;
    return out;
}

const char *sb_io_uri_base(const char *uri)
{
    const char *s = strrchr(uri, '/');
    return s != NULL ? s + 1 : uri;
}

int sb_io_list(const char *uri, int flags, sb_io_obj **out, size_t *n, sb_err *err)
{
    *out = NULL;
    *n = 0;
    const sb_io_backend *be = sb_io_backend_of(uri, 0, err);
    return be == NULL ? -1 : be->list(uri, flags, out, n, err);
}

void sb_io_objs_free(sb_io_obj *o, size_t n)
{
    if (o == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(o[i].uri);
    free(o);
}

int sb_io_objlist_add(sb_io_objlist *l, char *uri, uint64_t size, int whole, sb_err *err)
{
    if (uri == NULL)
        return sb_err_set(err, "out of memory listing objects");
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        sb_io_obj *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) {
            free(uri);
            return sb_err_set(err, "out of memory listing objects");
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (sb_io_obj){.uri = uri, .size = size, .whole = whole};
    return 0;
}

static int obj_cmp(const void *a, const void *b)
{
    return strcmp(((const sb_io_obj *)a)->uri, ((const sb_io_obj *)b)->uri);
}

int sb_io_objlist_finish(sb_io_objlist *l, int rc, sb_io_obj **out, size_t *n)
{
    if (rc != 0) {
        sb_io_objs_free(l->v, l->n);
    } else {
        if (l->n > 1)
            qsort(l->v, l->n, sizeof *l->v, obj_cmp);
        *out = l->v;
        *n = l->n;
    }
    memset(l, 0, sizeof *l);
    return rc;
}

int sb_io_stat(const char *uri, uint64_t *size, int *exists, sb_err *err)
{
    *size = 0;
    *exists = 0;
    const sb_io_backend *be = sb_io_backend_of(uri, 0, err);
    return be == NULL ? -1 : be->stat(uri, size, exists, err);
}

int sb_io_read_open(const char *uri, uint64_t off, uint64_t end, sb_io_rd **out, sb_err *err)
{
    *out = NULL;
    if (off > end)
        return sb_err_set(err, "\"%.200s\": read range starts after its end", uri);
    const sb_io_backend *be = sb_io_backend_of(uri, 0, err);
    return be == NULL ? -1 : be->read_open(uri, off, end, out, err);
}

ssize_t sb_io_read(sb_io_rd *r, void *buf, size_t n, sb_err *err)
{
    return r->be->read(r, buf, n, err);
}

ssize_t sb_io_read_full(sb_io_rd *r, void *buf, size_t n, sb_err *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = r->be->read(r, (char *)buf + got, n - got, err);
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

int sb_io_read_can_push(const sb_io_rd *r)
{
    return r != NULL && r->be->read_push != NULL;
}

int sb_io_read_push(sb_io_rd *r, sb_io_push_fn fn, void *ud, sb_err *err)
{
    if (!sb_io_read_can_push(r))
        return sb_err_set(err, "read: this storage backend cannot push its bytes");
    return r->be->read_push(r, fn, ud, err);
}

void sb_io_read_close(sb_io_rd *r)
{
    if (r != NULL)
        r->be->read_close(r);
}

int sb_io_write_open(const char *uri, sb_io_wr **out, sb_err *err)
{
    *out = NULL;
    const sb_io_backend *be = sb_io_backend_of(uri, 1, err);
    return be == NULL ? -1 : be->write_open(uri, out, err);
}

int sb_io_write(sb_io_wr *w, const void *buf, size_t n, sb_err *err)
{
    return n == 0 ? 0 : w->be->write(w, buf, n, err);
}

int sb_io_write_commit(sb_io_wr *w, sb_err *err)
{
    return w->be->write_commit(w, err);
}

void sb_io_write_abort(sb_io_wr *w)
{
    if (w != NULL)
        w->be->write_abort(w);
}

int sb_io_put(const char *uri, const void *buf, size_t n, sb_err *err)
{
    sb_io_wr *w;
    if (sb_io_write_open(uri, &w, err) != 0)
        return -1;
    if (sb_io_write(w, buf, n, err) != 0) {
        sb_io_write_abort(w);
        return -1;
    }
    return sb_io_write_commit(w, err);
}

int sb_io_del(const char *uri, sb_err *err)
{
    const sb_io_backend *be = sb_io_backend_of(uri, 1, err);
    return be == NULL ? -1 : be->del(uri, err);
}

#define SB_IO_MOVE_BUF ((size_t)1 << 20)

/* The generic move: a streamed copy through one buffer, published at commit, then the source
 * deleted (a failure before the commit leaves `to` as it was). */
static int copy_move(const char *from, const char *to, int *absent, sb_err *err)
{
    uint64_t size = 0;
    int exists = 0;
    if (sb_io_stat(from, &size, &exists, err) != 0)
        return -1;
    if (!exists) {
        if (absent != NULL)
            *absent = 1;
        return sb_err_set(err, "cannot move %.300s: No such file or directory", from);
    }
    sb_io_rd *r = NULL;
    sb_io_wr *w = NULL;
    char *buf = malloc(SB_IO_MOVE_BUF);
    int rc = buf == NULL ? sb_err_set(err, "out of memory moving %.300s", from) : 0;
    if (rc == 0 && sb_io_read_open(from, 0, size, &r, err) != 0)
        rc = -1;
    if (rc == 0 && sb_io_write_open(to, &w, err) != 0)
        rc = -1;
    ssize_t got = 0;
    while (rc == 0 && (got = sb_io_read(r, buf, SB_IO_MOVE_BUF, err)) > 0)
        if (sb_io_write(w, buf, (size_t)got, err) != 0)
            rc = -1;
    if (rc == 0 && got < 0)
        rc = -1;
    if (r != NULL)
        sb_io_read_close(r);
    free(buf);
    if (rc != 0) {
        sb_io_write_abort(w);
        return -1;
    }
    if (sb_io_write_commit(w, err) != 0)
        return -1;
    return sb_io_del(from, err);
}

int sb_io_move(const char *from, const char *to, int *absent, sb_err *err)
{
    if (absent != NULL)
        *absent = 0;
    const sb_io_backend *be = sb_io_backend_of(from, 1, err);
    if (be == NULL)
        return -1;
    if (sb_io_backend_of(to, 1, err) != be)
        return sb_err_set(err, "cannot move %.300s to another backend", from);
    return be->move != NULL ? be->move(from, to, absent, err) : copy_move(from, to, absent, err);
}

int sb_io_cleanup(const char *dir_uri, sb_err *err)
{
    const sb_io_backend *be = sb_io_backend_of(dir_uri, 1, err);
    return be == NULL ? -1 : be->cleanup(dir_uri, err);
}

int sb_io_sync(const char *dir_uri, sb_err *err)
{
    const sb_io_backend *be = sb_io_backend_of(dir_uri, 1, err);
    if (be == NULL)
        return -1;
    return be->sync != NULL ? be->sync(dir_uri, err) : 0;
}
