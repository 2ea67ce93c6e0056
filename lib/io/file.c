/* file.c — the file:// backend of the storage interface (see store.h): POSIX files; a write is
 * a temporary ".sbtmp-*" file in the target directory, locked (flock) by its writer until it is
 * renamed into place (not synced: a reader never sees half a file, but a machine crash may lose
 * it); cleanup removes only the temporary files no live writer holds; sync makes a directory
 * durable with one syncfs(2). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/common.h"
#include "io/schemes.h"

#define TMP_PREFIX ".sbtmp-"
#define EARLY_WRITEBACK_BYTES (256u << 10) /* files at least this big start write-back at close */

static atomic_ulong tmp_seq;
static atomic_uint_fast64_t sync_calls; /* fsync(2) and syncfs(2) calls made (sb_io_file_syncs) */

uint64_t sb_io_file_syncs(void)
{
    return (uint64_t)atomic_load(&sync_calls);
}

/* The path of a file URI ("/abs" or file://...), malloc'd. */
static char *path_of(const char *uri, sb_err *err)
{
    return sb_io_uri_norm(uri, err);
}

/* ---- listing ---- */

static int objs_add(sb_io_objlist *f, const char *path, uint64_t size, sb_err *err)
{
    return sb_io_objlist_add(f, strdup(path), size, 0, err);
}

static int skipped_name(const char *base)
{
    return base[0] == '.' || base[0] == '_';
}

static int list_dir(const char *uri, const char *dir, int flags, sb_io_objlist *f, sb_err *err)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT && (flags & SB_IO_LIST_ALL))
            return 0; /* a sink directory that does not exist yet holds nothing */
        return sb_err_set(err, "\"%.200s\": cannot open directory %.200s: %s", uri, dir,
                          strerror(errno));
    }
    size_t dlen = strlen(dir);
    while (dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    int rc = 0;
    struct dirent *de;
    char path[PATH_MAX];
    /* errno is cleared before every readdir: only then does NULL with errno set mean a read
     * error and not the end (a stat below that found a file gone leaves ENOENT in it) */
    while ((errno = 0, de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (!(flags & SB_IO_LIST_ALL) && skipped_name(de->d_name))
            continue;
        if ((size_t)snprintf(path, sizeof path, "%.*s/%s", (int)dlen, dir, de->d_name) >=
            sizeof path) {
            rc = sb_err_set(err, "\"%.200s\": path too long in %.200s", uri, dir);
            break;
        }
        struct stat st;
        if (stat(path, &st) != 0) {
            if (errno == ENOENT) /* a dangling link, or removed meanwhile */
                continue;
            rc = sb_err_set(err, "\"%.200s\": cannot stat %.200s: %s", uri, path, strerror(errno));
            break;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        if ((rc = objs_add(f, path, (uint64_t)st.st_size, err)) != 0)
            break;
    }
    if (rc == 0 && errno != 0)
        rc = sb_err_set(err, "\"%.200s\": reading directory %.200s: %s", uri, dir, strerror(errno));
    closedir(d);
    if (rc == 0 && f->n == 0 && !(flags & SB_IO_LIST_ALL))
        rc = sb_err_set(err,
                        "\"%.200s\": directory %.200s has no input files (names starting with "
                        "'.' or '_' are skipped)",
                        uri, dir);
    return rc;
}

static int glob_errfn(const char *epath, int eerrno)
{
    (void)epath;
    (void)eerrno;
    return 0; /* unreadable directories are skipped, like a shell does */
}

static int list_glob(const char *uri, const char *pattern, sb_io_objlist *f, sb_err *err)
{
    glob_t g;
    memset(&g, 0, sizeof g);
    int grc = glob(pattern, GLOB_NOSORT, glob_errfn, &g);
    if (grc == GLOB_NOMATCH) {
        globfree(&g);
        return sb_err_set(err, "\"%.200s\": no files match %.200s", uri, pattern);
    }
    if (grc != 0) {
        globfree(&g);
        return sb_err_set(err, "\"%.200s\": glob failed (%s)", uri,
                          grc == GLOB_NOSPACE ? "out of memory" : "read error");
    }
    char pfirst = sb_io_uri_base(pattern)[0];
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
        const char *p = g.gl_pathv[i];
        const char *b = sb_io_uri_base(p);
        if (skipped_name(b) && b[0] != pfirst)
            continue;
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        rc = objs_add(f, p, (uint64_t)st.st_size, err);
    }
    globfree(&g);
    if (rc == 0 && f->n == 0)
        rc = sb_err_set(err, "\"%.200s\": no regular files match %.200s", uri, pattern);
    return rc;
}

static int f_list(const char *uri, int flags, sb_io_obj **out, size_t *n, sb_err *err)
{
    char *path = path_of(uri, err);
    if (path == NULL)
        return -1;
    sb_io_objlist f = {0};
    struct stat st;
    int rc = 0;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            rc = list_dir(uri, path, flags, &f, err);
        else if (S_ISREG(st.st_mode) && !(flags & SB_IO_LIST_DIR))
            rc = objs_add(&f, path, (uint64_t)st.st_size, err);
        else
            rc = sb_err_set(err, "\"%.200s\": %.200s is not a %s", uri, path,
                            (flags & SB_IO_LIST_DIR) ? "directory" : "regular file or a directory");
    } else if (errno == ENOENT && (flags & SB_IO_LIST_DIR)) {
        rc = 0; /* a directory that does not exist yet holds nothing */
    } else if (errno == ENOENT && strpbrk(path, "*?[") != NULL) {
        rc = list_glob(uri, path, &f, err);
    } else {
        rc = sb_err_set(err, "\"%.200s\": %.200s: %s", uri, path, strerror(errno));
    }
    free(path);
    return sb_io_objlist_finish(&f, rc, out, n);
}

static int f_stat(const char *uri, uint64_t *size, int *exists, sb_err *err)
{
    char *path = path_of(uri, err);
    if (path == NULL)
        return -1;
    struct stat st;
    int rc = 0;
    if (stat(path, &st) == 0) {
        if (S_ISREG(st.st_mode)) {
            *exists = 1;
            *size = (uint64_t)st.st_size;
        } else {
            rc = sb_err_set(err, "%.300s is %s", path,
                            S_ISDIR(st.st_mode) ? "a directory, not a file" : "not a regular file");
        }
    } else if (errno != ENOENT) {
        rc = sb_err_set(err, "cannot open %.300s: %s", path, strerror(errno));
    }
    free(path);
    return rc;
}

/* ---- reading ---- */

typedef struct {
    sb_io_rd base;
    int fd;
    uint64_t pos, end;
    char *path;
} frd;

static int f_read_open(const char *uri, uint64_t off, uint64_t end, sb_io_rd **out, sb_err *err)
{
    char *path = path_of(uri, err);
    if (path == NULL)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sb_err_set(err, "cannot open %.300s: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sb_err_set(err, "%.300s is not a regular file", path);
        close(fd);
        free(path);
        return -1;
    }
    frd *r = calloc(1, sizeof *r);
    if (r == NULL) {
        close(fd);
        free(path);
        return sb_err_set(err, "out of memory");
    }
    r->base.be = &sb_io_backend_file;
    r->fd = fd;
    r->pos = off;
    r->end = end;
    r->path = path;
    *out = &r->base;
    return 0;
}

static ssize_t f_read(sb_io_rd *rr, void *buf, size_t n, sb_err *err)
{
    frd *r = (frd *)rr;
    if (r->pos >= r->end || n == 0)
        return 0;
    if (n > r->end - r->pos)
        n = (size_t)(r->end - r->pos);
    ssize_t got = sb_io_pread_full(r->fd, buf, n, r->pos);
    if (got < 0)
        return sb_err_set(err, "reading %.300s at byte offset %llu: %s", r->path,
                          (unsigned long long)r->pos, strerror(errno));
    if ((size_t)got < n)
        return sb_err_set(err,
                          "reading %.300s: file ends at byte offset %llu, planned size %llu (it "
                          "changed since planning)",
                          r->path, (unsigned long long)(r->pos + (uint64_t)got),
                          (unsigned long long)r->end);
    r->pos += (uint64_t)got;
    return got;
}

static void f_read_close(sb_io_rd *rr)
{
    frd *r = (frd *)rr;
    close(r->fd);
    free(r->path);
    free(r);
}

/* ---- writing ---- */

static int mkdir_p(const char *dir, sb_err *err)
{
    char p[PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof p)
        return sb_err_set(err, "directory path too long");
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return sb_err_set(err, "cannot create directory %.300s: %s", p, strerror(errno));
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return sb_err_set(err, "%.300s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sb_err_set(err, "%.300s exists and is not a directory", dir);
    return 0;
}

static int fsync_dir(const char *dir, sb_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sb_err_set(err, "cannot open directory %.300s: %s", dir, strerror(errno));
    int rc = 0;
    atomic_fetch_add(&sync_calls, 1);
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = sb_err_set(err, "fsync of directory %.300s: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

typedef struct {
    sb_io_wr base;
    int fd;
    int lock_fd;      /* a dup of fd: its flock stays held until the file has its final name */
    uint64_t written; /* bytes written so far */
    char *dir, *final, *tmp;
} fwr;

static void fwr_free(fwr *w)
{
    if (w->lock_fd >= 0)
        close(w->lock_fd);
    free(w->dir);
    free(w->final);
    free(w->tmp);
    free(w);
}

/* Takes the writer's lock on a new temporary file (held by its open file description: every
 * thread or process that opens the file has another one, and the lock goes when the writer's
 * descriptors close or its process dies). 1 locked; 0 when a cleanup holds the file or removed
 * it before the lock (the writer takes another name); -1 when the filesystem has no locks. */
static int tmp_lock(int fd)
{
    if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? 0 : -1;
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_nlink == 0 ? 0 : 1;
}

static void f_write_abort(sb_io_wr *ww);

static int f_write_open(const char *uri, sb_io_wr **out, sb_err *err)
{
    char *path = path_of(uri, err);
    if (path == NULL)
        return -1;
    fwr *w = calloc(1, sizeof *w);
    char *slash = strrchr(path, '/');
    if (w == NULL || slash == NULL || slash[1] == '\0') {
        free(w);
        int rc =
            sb_err_set(err, "%.300s: %s", path, w == NULL ? "out of memory" : "not a file path");
        free(path);
        return rc;
    }
    w->base.be = &sb_io_backend_file;
    w->fd = w->lock_fd = -1;
    w->final = path;
    w->dir = slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
    if (w->dir == NULL) {
        fwr_free(w);
        return sb_err_set(err, "out of memory");
    }
    if (mkdir_p(w->dir, err) != 0) {
        fwr_free(w);
        return -1;
    }
    /* A cleanup of the directory that got the new file before its writer locked it removed it
     * (nlink 0) or holds it: a new name then. */
    for (int tries = 0; w->fd < 0; tries++) {
        free(w->tmp);
        unsigned long seq = atomic_fetch_add(&tmp_seq, 1);
        if (asprintf(&w->tmp, "%s/" TMP_PREFIX "%ld-%lu-%s", w->dir, (long)getpid(), seq,
                     slash + 1) < 0) {
            w->tmp = NULL;
            fwr_free(w);
            return sb_err_set(err, "out of memory");
        }
        int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            sb_err_set(err, "cannot create %.300s: %s", w->tmp, strerror(errno));
            fwr_free(w);
            return -1;
        }
        int locked = tmp_lock(fd);
        if (locked == 0 && tries < 8) { /* a cleanup has it: it is being removed */
            close(fd);
            continue;
        }
        w->fd = fd;
        /* no locks here: unprotected, as before */
        w->lock_fd = locked > 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
        if (locked > 0 && w->lock_fd < 0) {
            sb_err_set(err, "cannot create %.300s: F_DUPFD: %s", w->tmp, strerror(errno));
            f_write_abort(&w->base);
            return -1;
        }
    }
    *out = &w->base;
    return 0;
}

static int f_write(sb_io_wr *ww, const void *buf, size_t n, sb_err *err)
{
    fwr *w = (fwr *)ww;
    if (sb_io_write_all(w->fd, buf, n) != 0)
        return sb_err_set(err, "writing %.300s: %s", w->tmp, strerror(errno));
    w->written += n;
    return 0;
}

static void f_write_abort(sb_io_wr *ww)
{
    fwr *w = (fwr *)ww;
    unlink(w->tmp);
    if (w->fd >= 0)
        close(w->fd);
    fwr_free(w);
}

/* Publishes the file under its final name without syncing it: a process crash keeps it (the
 * page cache survives), a machine crash may lose it or leave it short. Durability is f_sync's,
 * once for many files (the sink's commit). */
static int f_write_commit(sb_io_wr *ww, sb_err *err)
{
    fwr *w = (fwr *)ww;
    int rc = 0;
    /* Start the write-back of a big file now, without waiting for it: the sink's one syncfs at
     * the commit then finds little left to write instead of every part's pages at once (the
     * commit is on the pipeline's critical path; this runs beside other tasks). Small files
     * stay for the syncfs: a call each would cost more than it saves. Not a durability step
     * (f_sync is); a failure here changes nothing. */
    if (w->written >= EARLY_WRITEBACK_BYTES)
        (void)sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    if (close(w->fd) != 0)
        rc = sb_err_set(err, "closing %.300s: %s", w->tmp, strerror(errno));
    w->fd = -1; /* lock_fd keeps the lock through the rename (fwr_free closes it) */
    if (rc == 0 && rename(w->tmp, w->final) != 0)
        rc = sb_err_set(err, "renaming %.300s to %.300s: %s", w->tmp, w->final, strerror(errno));
    if (rc != 0) {
        f_write_abort(ww);
        return -1;
    }
    fwr_free(w);
    return 0;
}

/* One syncfs(2) of the directory's filesystem: every file written and renamed there (and every
 * other dirty page of that filesystem) is on disk when it returns, with the directory entries.
 * Cheaper than an fsync per file plus one of the directory once there are more than a few
 * files (docs/pipeline-api.md, spec.sink). It reports a write-back error of the filesystem
 * since the last syncfs (Linux >= 5.8; earlier kernels report none). */
static int f_sync(const char *dir_uri, sb_err *err)
{
    char *dir = path_of(dir_uri, err);
    if (dir == NULL)
        return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0) {
        rc = sb_err_set(err, "cannot open directory %.300s: %s", dir, strerror(errno));
    } else {
        atomic_fetch_add(&sync_calls, 1);
        if (syncfs(fd) != 0)
            rc = sb_err_set(err, "syncfs of %.300s: %s", dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return rc;
}

static int f_del(const char *uri, sb_err *err)
{
    char *path = path_of(uri, err);
    if (path == NULL)
        return -1;
    int rc = 0;
    if (unlink(path) != 0 && errno != ENOENT)
        rc = sb_err_set(err, "cannot remove %.300s: %s", path, strerror(errno));
    free(path);
    return rc;
}

static int f_move(const char *from, const char *to, int *absent, sb_err *err)
{
    char *a = path_of(from, err), *b = a ? path_of(to, err) : NULL;
    int rc = 0;
    if (b != NULL && rename(a, b) != 0) {
        if (errno == ENOENT && absent != NULL)
            *absent = 1;
        rc = sb_err_set(err, "cannot rename %.300s to %.300s: %s", a, b, strerror(errno));
    }
    if (b == NULL)
        rc = -1;
    free(a);
    free(b);
    return rc;
}

/* Whether a live writer holds the temporary file at path (its flock, f_write_open): 1 held, -1
 * gone, 0 to remove, with *lock_fd holding the lock until it is removed (a writer that got the
 * file before its lock sees it removed, and takes another name), or -1 (unreadable, or no locks
 * on this filesystem: removed as before). */
static int tmp_held(const char *path, int *lock_fd)
{
    *lock_fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? -1 : 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int busy = errno == EWOULDBLOCK;
        close(fd);
        return busy ? 1 : 0;
    }
    *lock_fd = fd;
    return 0;
}

/* Removes the temporary files of writers that are gone (killed mid-write, or never committed):
 * those of live writers, which may be tasks still running beside a prepare, an abort or a
 * commit (a speculative copy's loser, an attempt whose cancel has not reached its worker yet),
 * are theirs to publish or remove. */
static int f_cleanup(const char *dir_uri, sb_err *err)
{
    char *dir = path_of(dir_uri, err);
    if (dir == NULL)
        return -1;
    if (mkdir_p(dir, err) != 0) {
        free(dir);
        return -1;
    }
    DIR *d = opendir(dir);
    if (d == NULL) {
        int rc = sb_err_set(err, "cannot open directory %.300s: %s", dir, strerror(errno));
        free(dir);
        return rc;
    }
    int rc = 0;
    struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0)
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= sizeof path)
            continue;
        int lock_fd;
        if (tmp_held(path, &lock_fd) != 0)
            continue; /* gone meanwhile, or its writer is alive (a task still writing) */
        if (unlink(path) != 0 && errno != ENOENT && rc == 0)
            rc = sb_err_set(err, "cannot remove %.300s: %s", path, strerror(errno));
        if (lock_fd >= 0)
            close(lock_fd);
    }
    closedir(d);
    if (rc == 0)
        rc = fsync_dir(dir, err);
    free(dir);
    return rc;
}

const sb_io_backend sb_io_backend_file = {
    .name = "file",
    .list = f_list,
    .stat = f_stat,
    .read_open = f_read_open,
    .read = f_read,
    .read_close = f_read_close,
    .write_open = f_write_open,
    .write = f_write,
    .write_commit = f_write_commit,
    .write_abort = f_write_abort,
    .del = f_del,
    .cleanup = f_cleanup,
    .move = f_move,
    .sync = f_sync,
};
