/* runckpt.c — the checkpoint file of `streambatch run` (runckpt.h). Owns its path, its atomic
 * rewrite and load, the check of the sink parts a --resume carries over, and the run record
 * beside it that refuses a second live run and cleans up after a killed one. */
#include "controller/local/runckpt.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/ctl/ckptlog.h"
#include "controller/sched/ranges.h"
#include "io/sink.h"
#include "rpc/proto.h"
#include "spec/validate.h"

#define MAX_CKPT_BYTES ((size_t)256 << 20)

static uint64_t fnv(uint64_t h, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (h ^ '\n') * 1099511628211ULL;
}

int sb_runckpt_default_path(const sb_pipeline *p, char *out, size_t len, sb_err *err)
{
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL)
        return sb_err_set(err, "checkpoint: the working directory: %s", strerror(errno));
    const char *sink = p->spec.sink.uri ? p->spec.sink.uri : "";
    uint64_t h = fnv(fnv(14695981039346656037ULL, cwd), sink);
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    int n;
    if (state != NULL && state[0] == '/')
        n = snprintf(out, len, "%s/streambatch/checkpoints/%s-%016llx.json", state,
                     p->metadata.name, (unsigned long long)h);
    else if (home != NULL && home[0] == '/')
        n = snprintf(out, len, "%s/.local/state/streambatch/checkpoints/%s-%016llx.json", home,
                     p->metadata.name, (unsigned long long)h);
    else
        return sb_err_set(err, "checkpoint: neither $XDG_STATE_HOME nor $HOME is an absolute "
                               "path (give --checkpoint FILE)");
    if (n < 0 || (size_t)n >= len)
        return sb_err_set(err, "checkpoint: the path is too long (give --checkpoint FILE)");
    return 0;
}

int sb_runckpt_log_dir(const sb_pipeline *p, const char *path, char *out, size_t len, sb_err *err)
{
    const char *uri = p->spec.sink.uri ? p->spec.sink.uri : "";
    int n;
    if (strncmp(uri, "file:///", 8) == 0) {
        size_t k = strlen(uri + 7);
        while (k > 1 && uri[7 + k - 1] == '/')
            k--;
        n = snprintf(out, len, "%.*s/" SB_CKPTLOG_DIR, (int)k, uri + 7);
    } else {
        size_t k = strlen(path);
        if (k > 5 && strcmp(path + k - 5, ".json") == 0)
            k -= 5;
        char cwd[PATH_MAX] = "";
        if (path[0] != '/' && getcwd(cwd, sizeof cwd) == NULL)
            return sb_err_set(err, "checkpoint: the working directory: %s", strerror(errno));
        n = snprintf(out, len, "%s%s%.*s.log", cwd, cwd[0] ? "/" : "", (int)k, path);
    }
    if (n < 0 || (size_t)n >= len)
        return sb_err_set(err, "checkpoint: the log's path is too long");
    return 0;
}

int sb_runckpt_load(const char *path, sb_ckpt *out, sb_ckptlog_summary *sum, int *exists,
                    sb_err *err)
{
    memset(out, 0, sizeof *out);
    if (sum != NULL)
        memset(sum, 0, sizeof *sum);
    *exists = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return sb_err_set(err, "checkpoint %.300s: %s", path, strerror(errno));
    }
    char *buf = NULL, msg[512];
    size_t n = 0;
    if (sb_spec_read_file_limited(path, MAX_CKPT_BYTES, &buf, &n, msg, sizeof msg) != 0)
        return sb_err_set(err, "checkpoint %.300s: %s", path, msg);
    cJSON *j = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (j == NULL)
        return sb_err_set(err,
                          "checkpoint %.300s: not JSON (a file cut short? remove it to start "
                          "over)",
                          path);
    char what[400];
    snprintf(what, sizeof what, "checkpoint %.300s", path);
    int rc;
    if (sb_ckptlog_is_summary(j)) {
        sb_ckptlog_summary s;
        rc = sb_ckptlog_summary_parse(j, what, &s, err);
        if (rc == 0 && sum != NULL)
            *sum = s;
        if (rc == 0 && sb_ckptlog_load(&s, out, sum, err) != 0)
            rc = -2;
    } else {
        /* the older format, every part inline; the split count is known only after planning:
         * a generous bound here, the scheduler checks the ranges against the plan */
        rc = sb_ckpt_parse(j, (size_t)1 << 24, what, out, err);
    }
    cJSON_Delete(j);
    if (rc != 0)
        return rc;
    *exists = 1;
    return 0;
}

/* mkdir -p of path's parent directory. */
static int make_parent(const char *path, sb_err *err)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (slash == NULL || slash == d)
        return 0;
    *slash = '\0';
    for (char *p = d + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(d, 0755) != 0 && errno != EEXIST)
            return sb_err_set(err, "checkpoint: cannot create %.300s: %s", d, strerror(errno));
        *p = '/';
    }
    if (mkdir(d, 0755) != 0 && errno != EEXIST)
        return sb_err_set(err, "checkpoint: cannot create %.300s: %s", d, strerror(errno));
    return 0;
}

int sb_runckpt_save(const char *path, const char *text, sb_err *err)
{
    char dir[PATH_MAX] = ".";
    const char *slash = strrchr(path, '/'), *name = slash != NULL ? slash + 1 : path;
    if (slash != NULL) {
        size_t k = slash == path ? 1 : (size_t)(slash - path); /* "/x": the root */
        if (k >= sizeof dir)
            return sb_err_set(err, "checkpoint: \"%.300s\": path too long", path);
        memcpy(dir, path, k);
        dir[k] = '\0';
    }
    if (*name == '\0')
        return sb_err_set(err, "checkpoint: \"%.300s\" names a directory, not a file", path);
    return sb_ckptlog_write_file(dir, name, text, strlen(text), err);
}

int sb_runckpt_remove(const char *path, sb_err *err)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return sb_err_set(err, "checkpoint: cannot remove %.300s: %s", path, strerror(errno));
    return 0;
}

/* ---- the run record ------------------------------------------------------------------------ */

int sb_runckpt_proc_start(long pid, unsigned long long *start)
{
    char p[64], buf[1024];
    if (pid <= 0)
        return -1;
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *q = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (q == NULL || q[1] != ' ')
        return -1;
    q += 2;
    if (*q == 'Z' || *q == 'X') /* a zombie is gone: its locks and files are released */
        return -1;
    /* fields 3 (state) .. 22 (starttime): 19 to skip */
    for (int i = 0; i < 19; i++) {
        q = strchr(q, ' ');
        if (q == NULL)
            return -1;
        q++;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(q, &end, 10);
    if (errno != 0 || end == q)
        return -1;
    *start = v;
    return 0;
}

/* Is prev's process alive (the same pid with the same start time)? */
static int owner_alive(const sb_runckpt_owner *prev)
{
    unsigned long long st;
    return prev->pid > 0 && sb_runckpt_proc_start(prev->pid, &st) == 0 && st == prev->start;
}

/* Parses the record in fd into *o: 1 when it names an owner, 0 when empty or unreadable. */
static int owner_read(int fd, sb_runckpt_owner *o)
{
    char buf[4096 + 128];
    memset(o, 0, sizeof *o);
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    int own = 0, used = 0;
    if (sscanf(buf, "pid %ld\nstart %llu\nown %d\nrundir %n", &o->pid, &o->start, &own, &used) !=
            3 ||
        used == 0)
        return 0;
    const char *rd = buf + used;
    size_t len = strcspn(rd, "\n");
    if (len == 0 || len >= sizeof o->run_dir || rd[len] != '\n')
        return 0;
    memcpy(o->run_dir, rd, len);
    o->run_dir[len] = '\0';
    o->own_dir = own != 0;
    return 1;
}

int sb_runckpt_claim_take(const char *ckpt_path, sb_runckpt_claim *c, sb_runckpt_owner *prev,
                          int *had_prev, sb_err *err)
{
    c->fd = -1;
    *had_prev = 0;
    memset(prev, 0, sizeof *prev);
    int n = snprintf(c->path, sizeof c->path, "%s.run", ckpt_path);
    if (n < 0 || (size_t)n >= sizeof c->path)
        return sb_err_set(err, "run record: the path is too long");
    if (make_parent(c->path, err) != 0)
        return -1;
    /* the owner may remove the file between our open and our lock: then the lock is on a file
     * nobody else will find, and we try again */
    for (int tries = 0; tries < 8; tries++) {
        int fd = open(c->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return sb_err_set(err, "run record %.300s: %s", c->path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK) {
                owner_read(fd, prev);
                close(fd);
                return 1;
            }
            close(fd);
            return sb_err_set(err, "run record %.300s: lock: %s", c->path, strerror(e));
        }
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(c->path, &b) != 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino) {
            close(fd);
            continue;
        }
        if (owner_read(fd, prev)) {
            if (owner_alive(prev)) { /* no lock but alive: leave it be */
                close(fd);
                return 1;
            }
            *had_prev = 1;
        }
        c->fd = fd;
        return 0;
    }
    return sb_err_set(err, "run record %.300s: removed again and again while being claimed",
                      c->path);
}

int sb_runckpt_claim_record(sb_runckpt_claim *c, const char *run_dir, int own_dir, sb_err *err)
{
    unsigned long long start = 0;
    if (sb_runckpt_proc_start((long)getpid(), &start) != 0)
        return sb_err_set(err, "run record: cannot read this process's start time from /proc");
    if (strchr(run_dir, '\n') != NULL)
        return sb_err_set(err, "run record: the run directory's name holds a newline");
    char cwd[PATH_MAX] = "";
    if (run_dir[0] != '/' && getcwd(cwd, sizeof cwd) == NULL) /* recorded absolute */
        return sb_err_set(err, "run record: the working directory: %s", strerror(errno));
    char text[4096 + 128];
    int n = snprintf(text, sizeof text, "pid %ld\nstart %llu\nown %d\nrundir %s%s%s\n",
                     (long)getpid(), start, own_dir ? 1 : 0, cwd, cwd[0] ? "/" : "", run_dir);
    if (n < 0 || (size_t)n >= sizeof text)
        return sb_err_set(err, "run record: the run directory's name is too long");
    if (ftruncate(c->fd, 0) != 0 || pwrite(c->fd, text, (size_t)n, 0) != n || fdatasync(c->fd) != 0)
        return sb_err_set(err, "run record %.300s: writing: %s", c->path, strerror(errno));
    return 0;
}

void sb_runckpt_claim_release(sb_runckpt_claim *c)
{
    if (c->fd < 0)
        return;
    unlink(c->path); /* under the lock: a claimant that opened it before sees another inode */
    close(c->fd);
    c->fd = -1;
}

/* rm -r of name in the directory dfd (no symlink followed); counts what it removed. */
static int rm_tree(int dfd, const char *name, long *removed)
{
    if (unlinkat(dfd, name, 0) == 0) {
        (*removed)++;
        return 0;
    }
    if (errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (rm_tree(dirfd(d), e->d_name, removed) != 0)
            rc = -1;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0)
        (*removed)++;
    else if (errno != ENOENT)
        rc = -1;
    return rc;
}

/* A worker's id (workers.c): <pool>-<index>[-r<generation>] */
static int is_worker_id(const char *s)
{
    const char *p = s;
    while (islower((unsigned char)*p))
        p++;
    if (p == s || *p++ != '-' || !isdigit((unsigned char)*p))
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == '\0')
        return 1;
    if (p[0] != '-' || p[1] != 'r' || !isdigit((unsigned char)p[2]))
        return 0;
    for (p += 2; isdigit((unsigned char)*p); p++)
        ;
    return *p == '\0';
}

int sb_runckpt_clean_dead(const sb_runckpt_owner *prev, long *removed, sb_err *err)
{
    *removed = 0;
    if (owner_alive(prev))
        return sb_err_set(err, "run record: pid %ld is still running", prev->pid);
    struct stat st;
    if (prev->run_dir[0] != '/' || lstat(prev->run_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0; /* gone already, or not a directory we made */
    if (prev->own_dir) {
        const char *base = strrchr(prev->run_dir, '/') + 1;
        if (strncmp(base, "streambatch-run-", 16) != 0)
            return 0;
        if (rm_tree(AT_FDCWD, prev->run_dir, removed) != 0)
            return sb_err_set(err, "cannot remove %.300s: %s", prev->run_dir, strerror(errno));
        return 0;
    }
    DIR *d = opendir(prev->run_dir);
    if (d == NULL)
        return sb_err_set(err, "cannot read %.300s: %s", prev->run_dir, strerror(errno));
    int rc = 0, e = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat s;
        if (!is_worker_id(de->d_name) ||
            fstatat(dirfd(d), de->d_name, &s, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(s.st_mode))
            continue;
        if (rm_tree(dirfd(d), de->d_name, removed) != 0) {
            rc = -1;
            e = errno;
        }
    }
    closedir(d);
    if (rc != 0)
        return sb_err_set(err, "cannot remove the spill dirs in %.300s: %s", prev->run_dir,
                          strerror(e));
    return 0;
}

#define SPLIT_UNKNOWN UINT64_MAX

/* The split a carried-over sink part came from: its task index for an op-0 part (a source
 * task reads one split), the first number of its order key (preserveOrder: every task of op
 * > 0 has one input, so a part descends from one split), else unknown. */
static uint64_t split_of(const sb_storage_output *p)
{
    uint32_t stage, seq;
    uint64_t task;
    sb_err e;
    if (sb_part_id_parse(p->id, &stage, &task, &seq, &e) == 0 && stage == 0)
        return task;
    if (p->order != NULL && p->order[0] >= '0' && p->order[0] <= '9')
        return strtoull(p->order, NULL, 10);
    return SPLIT_UNKNOWN;
}

int sb_runckpt_verify_parts(sb_ckpt *c, const sb_sink_spec *sink, size_t *bad, size_t *splits,
                            char *first, size_t len, sb_err *err)
{
    *bad = 0;
    *splits = 0;
    if (len > 0)
        first[0] = '\0';
    if (c->nparts == 0)
        return 0;
    size_t n = (size_t)1 << 24; /* as sb_runckpt_load() reads it */
    uint8_t *set = calloc(n, 1);
    uint8_t *drop = calloc(c->nparts, 1);
    int rc = 0, all = 0;
    if (set == NULL || drop == NULL) {
        rc = sb_err_set(err, "checkpoint: out of memory");
        goto out;
    }
    if (sb_ranges_parse(c->committed_splits, set, n, err) != 0) {
        rc = sb_err_wrap(err, "checkpoint: committedSplits");
        goto out;
    }
    /* 1. which parts are not what the checkpoint recorded: their splits run again */
    char why[1024];
    for (size_t i = 0; i < c->nparts; i++) {
        const sb_storage_output *p = &c->parts[i];
        int ok = sb_io_sink_verify_part(sink, p->id, p->bytes, p->crc32c, why, sizeof why, err);
        if (ok < 0) {
            rc = sb_err_wrap(err, "checkpoint: parts[%zu]", i);
            goto out;
        }
        if (ok)
            continue;
        if (*bad == 0)
            snprintf(first, len, "%s", why);
        (*bad)++;
        uint64_t sp = split_of(p);
        if (sp == SPLIT_UNKNOWN || sp >= n)
            all = 1;
        else if (set[sp]) {
            set[sp] = 0;
            (*splits)++;
        }
    }
    if (*bad == 0)
        goto out;
    /* 2. every part of a split that runs again goes (the run makes them anew); where a part's
     * split is unknown, no part can be kept with certainty: the whole checkpoint's work goes */
    for (size_t i = 0; i < c->nparts && !all; i++) {
        uint64_t sp = split_of(&c->parts[i]);
        if (sp == SPLIT_UNKNOWN || sp >= n)
            all = 1;
        else
            drop[i] = !set[sp];
    }
    if (all) {
        *splits = c->ncommitted;
        memset(set, 0, n);
        memset(drop, 1, c->nparts);
    }
    char *ranges = sb_ranges_format(set, n);
    if (ranges == NULL) {
        rc = sb_err_set(err, "checkpoint: out of memory");
        goto out;
    }
    free(c->committed_splits);
    c->committed_splits = ranges;
    c->ncommitted = 0;
    for (size_t i = 0; i < n; i++)
        c->ncommitted += set[i] != 0;
    size_t k = 0;
    for (size_t i = 0; i < c->nparts; i++) {
        if (drop[i]) {
            free((char *)c->parts[i].id);
            free((char *)c->parts[i].order);
            continue;
        }
        c->parts[k++] = c->parts[i];
    }
    c->nparts = k;
out:
    free(set);
    free(drop);
    return rc;
}
