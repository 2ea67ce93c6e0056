/* sink.c — local part files, manifest and _SUCCESS (see sink.h). */
#include "io/sink.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partition/crc32c.h"
#include "partition/partition.h"
#include "partition/utf8.h"
#include "io/common.h"
#include "io/reader.h"

#define TMP_PREFIX ".sbtmp-"
#define PART_PREFIX "part-"

static atomic_ulong tmp_seq;

static const char *ext_of(sb_format f)
{
    switch (f) {
    case SB_FMT_JSONL:
        return "jsonl";
    case SB_FMT_TEXT:
        return "txt";
    default:
        return "bin";
    }
}

/* The sink directory's path, after checking the scheme and format. */
static int sink_dir(const sb_sink_spec *sink, char *dir, size_t cap, sb_err *err)
{
    if (sink == NULL)
        return sb_err_set(err, "sink: no sink spec");
    if (sb_io_uri_path(sink->uri, "sink", 1, dir, cap, err) != 0 ||
        sb_io_check_format(sink->format, "sink", 1, err) != 0)
        return -1;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        dir[--n] = '\0';
    return 0;
}

static int mkdir_p(const char *dir, sb_err *err)
{
    char p[PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof p)
        return sb_err_set(err, "sink: directory path too long");
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return sb_err_set(err, "sink: cannot create directory %.300s: %s", p, strerror(errno));
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return sb_err_set(err, "sink: %.300s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sb_err_set(err, "sink: %.300s exists and is not a directory", dir);
    return 0;
}

static int fsync_dir(const char *dir, sb_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sb_err_set(err, "sink: cannot open directory %.300s: %s", dir, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = sb_err_set(err, "sink: fsync of directory %.300s: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

/* Opens a new temporary file in dir for `final` (a name); its path goes to tmp. */
static int open_tmp(const char *dir, const char *final, char *tmp, size_t cap, sb_err *err)
{
    unsigned long seq = atomic_fetch_add(&tmp_seq, 1);
    if ((size_t)snprintf(tmp, cap, "%s/" TMP_PREFIX "%ld-%lu-%s", dir, (long)getpid(), seq,
                         final) >= cap)
        return sb_err_set(err, "sink: path too long in %.300s", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return sb_err_set(err, "sink: cannot create %.300s: %s", tmp, strerror(errno));
    return fd;
}

/* fsync + close fd, rename tmp to dir/final, fsync dir. On failure tmp is removed. */
static int publish(int fd, const char *tmp, const char *dir, const char *final, sb_err *err)
{
    char path[PATH_MAX];
    int rc = 0;
    if (fsync(fd) != 0)
        rc = sb_err_set(err, "sink: fsync of %.300s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = sb_err_set(err, "sink: closing %.300s: %s", tmp, strerror(errno));
    if (rc == 0 && (size_t)snprintf(path, sizeof path, "%s/%s", dir, final) >= sizeof path)
        rc = sb_err_set(err, "sink: path too long in %.300s", dir);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = sb_err_set(err, "sink: renaming %.300s to %.300s: %s", tmp, final, strerror(errno));
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    return fsync_dir(dir, err);
}

static int valid_id(const char *id)
{
    size_t n = 0;
    if (id == NULL || id[0] == '.' || id[0] == '\0')
        return 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
        if (n >= SB_IO_PART_ID_MAX)
            return 0;
    }
    return 1;
}

/* The column holding the records: "record", else the only binary/utf8 column. */
static const sb_column *record_column(const sb_batch *b, sb_err *err)
{
    int i = sb_batch_find(b, SB_IO_RECORD_COLUMN);
    if (i < 0) {
        int found = -1;
        for (size_t c = 0; c < sb_batch_ncols(b); c++) {
            sb_type t = sb_batch_column(b, c)->type;
            if (t == SB_TYPE_BINARY || t == SB_TYPE_UTF8) {
                if (found >= 0) {
                    sb_err_set(err, "no \"record\" column and several binary/utf8 columns");
                    return NULL;
                }
                found = (int)c;
            }
        }
        i = found;
    }
    if (i < 0) {
        sb_err_set(err, "no \"record\" column");
        return NULL;
    }
    const sb_column *c = sb_batch_column(b, (size_t)i);
    if (c->type != SB_TYPE_BINARY && c->type != SB_TYPE_UTF8) {
        sb_err_set(err, "column \"%.64s\" is %s, not binary or utf8", c->name,
                   sb_type_name(c->type));
        return NULL;
    }
    return c;
}

/* The record (row) holding byte `at` of the values buffer. */
static size_t row_of_byte(const sb_column *c, size_t at)
{
    size_t lo = 0, hi = c->length; /* offsets[lo] <= at < offsets[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((size_t)c->offsets[mid] <= at)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

typedef struct {
    int fd;
    char *buf;
    size_t cap, len;
    uint32_t crc;
    uint64_t bytes;
} wbuf;

static int wb_flush(wbuf *w)
{
    if (w->len == 0)
        return 0;
    w->crc = sb_crc32c(w->crc, w->buf, w->len);
    w->bytes += w->len;
    int rc = sb_io_write_all(w->fd, w->buf, w->len);
    w->len = 0;
    return rc;
}

static int wb_put(wbuf *w, const void *p, size_t n)
{
    if (n > w->cap - w->len && wb_flush(w) != 0)
        return -1;
    if (n > w->cap) { /* larger than the buffer: write it through */
        w->crc = sb_crc32c(w->crc, p, n);
        w->bytes += n;
        return sb_io_write_all(w->fd, p, n);
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return 0;
}

/* Checks the records of c against the format; 0 or -1 + err. */
static int check_records(const sb_sink_spec *sink, const sb_column *c, uint64_t rs, sb_err *err)
{
    if (c->null_count > 0) {
        for (size_t r = 0; r < c->length; r++)
            if (!sb_column_valid(c, r))
                return sb_err_set(err, "record %zu is null", r);
    }
    if (sink->format == SB_FMT_BINARY) {
        if (rs == 0)
            return 0;
        for (size_t r = 0; r < c->length; r++) {
            size_t n = (size_t)(c->offsets[r + 1] - c->offsets[r]);
            if (n != rs)
                return sb_err_set(
                    err, "record %zu has %zu bytes, the sink's recordSize is %" PRIu64, r, n, rs);
        }
        return 0;
    }
    size_t total = (size_t)c->offsets[c->length];
    size_t bad;
    if (c->type == SB_TYPE_BINARY && !sb_utf8_valid(c->values, total, &bad))
        return sb_err_set(err, "record %zu is not valid UTF-8 (byte %zu of the record)",
                          row_of_byte(c, bad), bad - (size_t)c->offsets[row_of_byte(c, bad)]);
    const char *nl = total > 0 ? memchr(c->values, '\n', total) : NULL;
    if (nl != NULL) {
        size_t at = (size_t)(nl - (const char *)c->values);
        return sb_err_set(err, "record %zu contains a newline; it cannot be written as one line",
                          row_of_byte(c, at));
    }
    return 0;
}

static int write_records(const sb_sink_spec *sink, const sb_column *c, wbuf *w)
{
    if (sink->format == SB_FMT_BINARY)
        return wb_put(w, c->values, (size_t)c->offsets[c->length]);
    for (size_t r = 0; r < c->length; r++) {
        size_t n;
        const void *p = sb_column_binary(c, r, &n);
        if (n + 1 <= w->cap - w->len) { /* the common case: room for the line */
            memcpy(w->buf + w->len, p, n);
            w->buf[w->len + n] = '\n';
            w->len += n + 1;
            continue;
        }
        if (wb_put(w, p, n) != 0 || wb_put(w, "\n", 1) != 0)
            return -1;
    }
    return 0;
}

int sb_io_sink_write_part(const sb_sink_spec *sink, const char *partition_id, const void *blob,
                          size_t len, sb_io_part_info *info, sb_err *err)
{
    char dir[PATH_MAX], final[SB_IO_PART_NAME_MAX], tmp[PATH_MAX];
    if (sink_dir(sink, dir, sizeof dir, err) != 0)
        return -1;
    if (!valid_id(partition_id))
        return sb_err_set(err,
                          "sink: partition id \"%.64s\" is not 1..%d characters of "
                          "[A-Za-z0-9._-] (not starting with '.')",
                          partition_id ? partition_id : "(null)", SB_IO_PART_ID_MAX);
    uint64_t rs = 0;
    if (sink->format == SB_FMT_BINARY &&
        sb_io_record_size(sink->args_json, 0, "sink", &rs, err) != 0)
        return -1;
    snprintf(final, sizeof final, PART_PREFIX "%s.%s", partition_id, ext_of(sink->format));

    sb_batch *b = NULL;
    if (sb_batch_open(blob, len, &b, err) != 0)
        return sb_err_wrap(err, "sink: partition %s", partition_id);
    const sb_column *c = record_column(b, err);
    if (c == NULL || check_records(sink, c, rs, err) != 0) {
        sb_batch_close(b);
        return sb_err_wrap(err, "sink: partition %s", partition_id);
    }
    if (mkdir_p(dir, err) != 0) {
        sb_batch_close(b);
        return -1;
    }
    int fd = open_tmp(dir, final, tmp, sizeof tmp, err);
    if (fd < 0) {
        sb_batch_close(b);
        return -1;
    }
    size_t data = (size_t)c->offsets[c->length] + c->length;
    wbuf w = {.fd = fd, .cap = data < SB_IO_BUF_SIZE ? (data > 0 ? data : 1) : SB_IO_BUF_SIZE};
    if (sink->format == SB_FMT_BINARY)
        w.cap = 1; /* binary writes the values buffer straight through */
    w.buf = malloc(w.cap);
    int rc = 0;
    if (w.buf == NULL)
        rc = sb_err_set(err, "sink: out of memory for the write buffer");
    else if (write_records(sink, c, &w) != 0 || wb_flush(&w) != 0)
        rc = sb_err_set(err, "sink: writing %.300s: %s", tmp, strerror(errno));
    free(w.buf);
    uint64_t rows = c->length;
    sb_batch_close(b);
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (publish(fd, tmp, dir, final, err) != 0)
        return -1;
    if (info != NULL) {
        memset(info, 0, sizeof *info);
        snprintf(info->name, sizeof info->name, "%s", final);
        info->rows = rows;
        info->bytes = w.bytes;
        info->crc32c = w.crc;
    }
    return 0;
}

/* Removes _SUCCESS, the manifest and temporary files from dir (missing dir: nothing to do). */
static int cleanup(const char *dir, sb_err *err)
{
    char path[PATH_MAX];
    const char *names[] = {SB_IO_SUCCESS_NAME, SB_IO_MANIFEST_NAME};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            return sb_err_set(err, "sink: cannot remove %.300s: %s", path, strerror(errno));
    }
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT)
            return 0;
        return sb_err_set(err, "sink: cannot open directory %.300s: %s", dir, strerror(errno));
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0)
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= sizeof path)
            continue;
        if (unlink(path) != 0 && errno != ENOENT && rc == 0)
            rc = sb_err_set(err, "sink: cannot remove %.300s: %s", path, strerror(errno));
    }
    closedir(d);
    return rc;
}

int sb_io_sink_prepare(const sb_sink_spec *sink, sb_err *err)
{
    char dir[PATH_MAX];
    if (sink_dir(sink, dir, sizeof dir, err) != 0 || mkdir_p(dir, err) != 0)
        return -1;
    if (cleanup(dir, err) != 0)
        return -1;
    return fsync_dir(dir, err);
}

int sb_io_sink_abort(const sb_sink_spec *sink, sb_err *err)
{
    char dir[PATH_MAX];
    if (sink_dir(sink, dir, sizeof dir, err) != 0)
        return -1;
    if (cleanup(dir, err) != 0)
        return -1;
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    return fsync_dir(dir, err);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int valid_part_name(const char *name, const char *ext)
{
    size_t n = strnlen(name, SB_IO_PART_NAME_MAX);
    size_t el = strlen(ext);
    if (n == SB_IO_PART_NAME_MAX || n < strlen(PART_PREFIX) + 2 + el)
        return 0;
    if (strncmp(name, PART_PREFIX, strlen(PART_PREFIX)) != 0 || name[n - el - 1] != '.' ||
        strcmp(name + n - el, ext) != 0)
        return 0;
    return strchr(name, '/') == NULL;
}

/* Writes dir/name atomically with the given content. */
static int write_file(const char *dir, const char *name, const char *content, sb_err *err)
{
    char tmp[PATH_MAX];
    int fd = open_tmp(dir, name, tmp, sizeof tmp, err);
    if (fd < 0)
        return -1;
    if (sb_io_write_all(fd, content, strlen(content)) != 0) {
        sb_err_set(err, "sink: writing %.300s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    return publish(fd, tmp, dir, name, err);
}

static char *manifest_json(const sb_sink_spec *sink, const sb_io_part_info *parts,
                           const unsigned char *skip, size_t n, const sb_io_errored *errored,
                           size_t nerrored)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    cJSON *tot = cJSON_CreateObject();
    uint64_t rows = 0, bytes = 0, count = 0;
    char *text = NULL;
    if (root == NULL || arr == NULL || tot == NULL)
        goto done;
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "format", sb_format_names[sink->format]);
    for (size_t i = 0; i < n; i++) {
        if (skip[i])
            continue;
        cJSON *p = cJSON_CreateObject();
        if (p == NULL)
            goto done;
        cJSON_AddItemToArray(arr, p);
        cJSON_AddStringToObject(p, "name", parts[i].name);
        cJSON_AddNumberToObject(p, "rows", (double)parts[i].rows);
        cJSON_AddNumberToObject(p, "bytes", (double)parts[i].bytes);
        cJSON_AddNumberToObject(p, "crc32c", (double)parts[i].crc32c);
        rows += parts[i].rows;
        bytes += parts[i].bytes;
        count++;
    }
    cJSON_AddNumberToObject(tot, "parts", (double)count);
    cJSON_AddNumberToObject(tot, "rows", (double)rows);
    cJSON_AddNumberToObject(tot, "bytes", (double)bytes);
    cJSON_AddItemToObject(root, "parts", arr);
    arr = NULL;
    cJSON_AddItemToObject(root, "totals", tot);
    tot = NULL;
    cJSON *err_arr = cJSON_AddArrayToObject(root, "errored"); /* partitions not in the output */
    if (err_arr == NULL)
        goto done;
    for (size_t i = 0; i < nerrored; i++) {
        cJSON *e = cJSON_CreateObject();
        if (e == NULL)
            goto done;
        cJSON_AddItemToArray(err_arr, e);
        cJSON_AddStringToObject(e, "stage", errored[i].stage ? errored[i].stage : "");
        cJSON_AddStringToObject(e, "split", errored[i].split ? errored[i].split : "");
        cJSON_AddStringToObject(e, "error", errored[i].error ? errored[i].error : "");
    }
    text = cJSON_Print(root);
done:
    cJSON_Delete(arr);
    cJSON_Delete(tot);
    cJSON_Delete(root);
    return text;
}

int sb_io_sink_commit(const sb_sink_spec *sink, const sb_io_part_info *parts, size_t n,
                      const sb_io_errored *errored, size_t nerrored, sb_err *err)
{
    char dir[PATH_MAX], path[PATH_MAX];
    if (sink_dir(sink, dir, sizeof dir, err) != 0)
        return -1;
    if (n > 0 && parts == NULL)
        return sb_err_set(err, "sink: commit: NULL parts");
    const char *ext = ext_of(sink->format);
    const char **sorted = malloc((n ? n : 1) * sizeof *sorted);
    unsigned char *skip = calloc(n ? n : 1, 1);
    int rc = 0;
    char *text = NULL;
    DIR *d = NULL;
    if (sorted == NULL || skip == NULL) {
        rc = sb_err_set(err, "sink: commit: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!valid_part_name(parts[i].name, ext)) {
            rc = sb_err_set(err, "sink: commit: part %zu has an invalid name \"%.64s\"", i,
                            parts[i].name);
            goto out;
        }
        /* The same name twice: allowed only with identical info (e.g. a report repeated). */
        for (size_t j = 0; j < i && !skip[i]; j++) {
            if (skip[j] || strcmp(parts[j].name, parts[i].name) != 0)
                continue;
            if (parts[j].rows != parts[i].rows || parts[j].bytes != parts[i].bytes ||
                parts[j].crc32c != parts[i].crc32c) {
                rc = sb_err_set(err,
                                "sink: commit: part %.64s is listed twice with different "
                                "contents (%" PRIu64 " and %" PRIu64 " bytes)",
                                parts[i].name, parts[j].bytes, parts[i].bytes);
                goto out;
            }
            skip[i] = 1;
        }
        snprintf(path, sizeof path, "%s/%s", dir, parts[i].name);
        struct stat st;
        if (stat(path, &st) != 0) {
            rc = sb_err_set(err, "sink: commit: part file %.300s: %s", path, strerror(errno));
            goto out;
        }
        if ((uint64_t)st.st_size != parts[i].bytes) {
            rc = sb_err_set(
                err, "sink: commit: part file %.300s has %" PRIu64 " bytes, reported %" PRIu64,
                path, (uint64_t)st.st_size, parts[i].bytes);
            goto out;
        }
        sorted[i] = parts[i].name;
    }
    if (n > 0)
        qsort(sorted, n, sizeof *sorted, name_cmp);
    /* Part files of this format that the committed list does not name are output of attempts
     * that no longer count: remove them so readers of the directory see no duplicates. */
    d = opendir(dir);
    if (d == NULL) {
        rc =
            sb_err_set(err, "sink: commit: cannot open directory %.300s: %s", dir, strerror(errno));
        goto out;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (!valid_part_name(nm, ext))
            continue;
        if (n > 0 && bsearch(&nm, sorted, n, sizeof *sorted, name_cmp) != NULL)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        if (unlink(path) != 0 && errno != ENOENT) {
            rc = sb_err_set(err, "sink: commit: cannot remove stray part %.300s: %s", path,
                            strerror(errno));
            goto out;
        }
    }
    text = manifest_json(sink, parts, skip, n, errored, nerrored);
    if (text == NULL) {
        rc = sb_err_set(err, "sink: commit: out of memory for the manifest");
        goto out;
    }
    if (write_file(dir, SB_IO_MANIFEST_NAME, text, err) != 0 ||
        write_file(dir, SB_IO_SUCCESS_NAME, "", err) != 0)
        rc = -1;
out:
    if (d != NULL)
        closedir(d);
    free(text);
    free(sorted);
    free(skip);
    return rc;
}
