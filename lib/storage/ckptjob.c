/* ckptjob.c — the checkpoint log's storage jobs (see ckptjob.h): put, load and remove whole
 * files of <sink>/_streambatch/checkpoint through the storage interface (io/schemes.h), on a
 * worker. */
#include "storage/ckptjob.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/schemes.h"

char *sb_storage_ckpt_dir(const sb_pipeline *p, sb_err *err)
{
    char *sink = sb_io_uri_norm(p->spec.sink.uri, err);
    if (sink == NULL)
        return NULL;
    char *dir = sb_io_uri_join(sink, SB_STORAGE_CKPT_SUBDIR);
    free(sink);
    if (dir == NULL)
        sb_err_set(err, "out of memory");
    return dir;
}

int sb_storage_ckpt_name_ok(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > 128 || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int sb_storage_files_add(sb_storage_files *fs, const char *name, const char *data, size_t len,
                         sb_err *err)
{
    if (fs->n == fs->cap) {
        size_t cap = fs->cap ? fs->cap * 2 : 16;
        sb_storage_file *v = realloc(fs->v, cap * sizeof *v);
        if (v == NULL)
            return sb_err_set(err, "out of memory");
        fs->v = v;
        fs->cap = cap;
    }
    sb_storage_file *f = &fs->v[fs->n];
    f->name = strdup(name);
    f->data = malloc(len + 1);
    if (f->name == NULL || f->data == NULL) {
        free(f->name);
        free(f->data);
        return sb_err_set(err, "out of memory");
    }
    if (len > 0)
        memcpy(f->data, data, len);
    f->data[len] = '\0';
    f->len = len;
    fs->n++;
    return 0;
}

void sb_storage_files_free(sb_storage_files *fs)
{
    for (size_t i = 0; i < fs->n; i++) {
        free(fs->v[i].name);
        free(fs->v[i].data);
    }
    free(fs->v);
    memset(fs, 0, sizeof *fs);
}

/* The directory's objects (every name, '.' and '_' ones too). 0, or -1 + err. */
static int list_log(const char *dir, sb_io_obj **objs, size_t *n, sb_err *err)
{
    if (sb_io_list(dir, SB_IO_LIST_ALL | SB_IO_LIST_DIR, objs, n, err) != 0)
        return sb_err_wrap(err, "checkpoint log %.300s", dir);
    return 0;
}

/* 1 when base is one of files[0..n). */
/* 1 when base is one of files, or a piece of one: "<stem>-<anything>.<ext>" beside
 * "<stem>.<ext>" (a chunked file's pieces, written by earlier jobs, stay with it). */
static int among(const char *base, const sb_storage_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *name = files[i].name, *dot = strrchr(name, '.');
        size_t stem = dot != NULL ? (size_t)(dot - name) : strlen(name);
        size_t bl = strlen(base), el = strlen(name) - stem;
        if (strcmp(base, name) == 0 ||
            (bl > stem + 1 + el && strncmp(base, name, stem) == 0 && base[stem] == '-' &&
             strcmp(base + bl - el, name + stem) == 0))
            return 1;
    }
    return 0;
}

int sb_storage_ckpt_put(const sb_pipeline *p, const sb_storage_file *files, size_t n, int prune,
                        sb_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (!sb_storage_ckpt_name_ok(files[i].name))
            return sb_err_set(err, "checkpoint log: \"%.140s\" is not a valid file name",
                              files[i].name ? files[i].name : "");
    char *dir = sb_storage_ckpt_dir(p, err);
    if (dir == NULL)
        return -1;
    int rc = sb_io_cleanup(dir, err) != 0 ? sb_err_wrap(err, "checkpoint log %.300s", dir) : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *uri = sb_io_uri_join(dir, files[i].name);
        rc = uri == NULL ? sb_err_set(err, "out of memory")
                         : sb_io_put(uri, files[i].data, files[i].len, err);
        free(uri);
    }
    if (rc == 0 && sb_io_sync(dir, err) != 0)
        rc = sb_err_wrap(err, "checkpoint log %.300s", dir);
    sb_io_obj *objs = NULL;
    size_t no = 0;
    if (rc == 0 && prune && list_log(dir, &objs, &no, err) == 0) {
        for (size_t i = 0; rc == 0 && i < no; i++)
            if (!among(sb_io_uri_base(objs[i].uri), files, n))
                rc = sb_io_del(objs[i].uri, err);
    } else if (rc == 0 && prune) {
        rc = -1;
    }
    sb_io_objs_free(objs, no);
    free(dir);
    return rc;
}

/* Reads obj whole into fs under its base name. 0, or -1 + err. */
static int read_obj(const sb_io_obj *o, sb_storage_files *fs, sb_err *err)
{
    char *buf = malloc(o->size + 1);
    if (buf == NULL)
        return sb_err_set(err, "checkpoint log %.300s: out of memory", o->uri);
    sb_io_rd *rd = NULL;
    int rc = sb_io_read_open(o->uri, 0, o->size, &rd, err);
    if (rc == 0) {
        ssize_t got = sb_io_read_full(rd, buf, o->size, err);
        sb_io_read_close(rd);
        if (got < 0)
            rc = -1;
        else if ((uint64_t)got != o->size)
            rc = sb_err_set(err, "%.300s: shorter than listed", o->uri);
    }
    if (rc == 0)
        rc = sb_storage_files_add(fs, sb_io_uri_base(o->uri), buf, o->size, err);
    free(buf);
    return rc;
}

int sb_storage_ckpt_load(const sb_pipeline *p, sb_storage_files *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    char *dir = sb_storage_ckpt_dir(p, err);
    if (dir == NULL)
        return -1;
    sb_io_obj *objs = NULL;
    size_t no = 0, total = 0;
    int rc = list_log(dir, &objs, &no, err);
    for (size_t i = 0; rc == 0 && i < no; i++) {
        const char *base = sb_io_uri_base(objs[i].uri);
        if (!sb_storage_ckpt_name_ok(base))
            continue; /* a temporary of the file backend, or nothing of the log's */
        if (objs[i].size > SB_STORAGE_CKPT_MAX_BYTES - total)
            rc = sb_err_set(err, "checkpoint log %.300s: more than %zu bytes", dir,
                            SB_STORAGE_CKPT_MAX_BYTES);
        else {
            total += objs[i].size;
            rc = read_obj(&objs[i], out, err);
        }
    }
    sb_io_objs_free(objs, no);
    free(dir);
    if (rc != 0)
        sb_storage_files_free(out);
    return rc;
}

int sb_storage_ckpt_remove(const sb_pipeline *p, sb_err *err)
{
    char *dir = sb_storage_ckpt_dir(p, err);
    if (dir == NULL)
        return -1;
    sb_io_obj *objs = NULL;
    size_t no = 0;
    int rc = list_log(dir, &objs, &no, err);
    for (size_t i = 0; rc == 0 && i < no; i++)
        rc = sb_io_del(objs[i].uri, err);
    sb_io_objs_free(objs, no);
    if (rc == 0 && dir[0] == '/') { /* a file sink: the emptied directories too */
        (void)rmdir(dir);
        char *slash = strrchr(dir, '/');
        if (slash != NULL && slash != dir) {
            *slash = '\0';
            (void)rmdir(dir); /* "_streambatch", only when empty */
        }
    }
    free(dir);
    return rc;
}
