/* runckpt.c — the checkpoint file of `streambatch run` (see runckpt.h). */
#include "controller/engine/runckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int sb_runckpt_load(const char *path, sb_ckpt *out, int *exists, sb_err *err)
{
    memset(out, 0, sizeof *out);
    *exists = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return sb_err_set(err, "checkpoint %.300s: %s", path, strerror(errno));
    }
    char *buf = NULL, msg[512];
    size_t n = 0;
    if (sb_read_file_limited(path, MAX_CKPT_BYTES, &buf, &n, msg, sizeof msg) != 0)
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
    /* the split count is known only after planning: a generous bound here, the scheduler
     * checks the ranges against the plan */
    int rc = sb_ckpt_parse(j, (size_t)1 << 24, what, out, err);
    cJSON_Delete(j);
    if (rc != 0)
        return -1;
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
    if (make_parent(path, err) != 0)
        return -1;
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sb_err_set(err, "checkpoint: cannot write %.300s: %s", tmp, strerror(errno));
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return sb_err_set(err, "checkpoint: writing %.300s: %s", tmp, strerror(e));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return sb_err_set(err, "checkpoint: syncing %.300s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return sb_err_set(err, "checkpoint: renaming %.300s: %s", tmp, strerror(e));
    }
    return 0;
}

int sb_runckpt_remove(const char *path, sb_err *err)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return sb_err_set(err, "checkpoint: cannot remove %.300s: %s", path, strerror(errno));
    return 0;
}
