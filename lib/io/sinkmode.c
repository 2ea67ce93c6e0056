/* sinkmode.c — what the write modes need beyond sink.c's life cycle (sinkmode.h): reading an
 * earlier run's manifest for append, the errorIfExists check, which part names are the
 * engine's, and whether a sink is committed. */
#include "io/sinkmode.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>

#include "partition/id.h"

/* A manifest larger than this is not one the engine wrote (a million parts take ~100 MB). */
#define MANIFEST_MAX ((uint64_t)512 << 20)

int sb_io_sink_our_part_name(const char *name, const char *ext)
{
    size_t n = strnlen(name, SB_IO_PART_NAME_MAX), el = strlen(ext), pl = strlen("part-");
    if (n == SB_IO_PART_NAME_MAX || n < pl + 2 + el || strncmp(name, "part-", pl) != 0 ||
        name[n - el - 1] != '.' || strcmp(name + n - el, ext) != 0 || strchr(name, '/') != NULL)
        return 0;
    char id[SB_IO_PART_NAME_MAX];
    size_t k = n - pl - el - 1;
    memcpy(id, name + pl, k);
    id[k] = '\0';
    const char *p = id;
    /* append mode's "<tag>-": 1 to 16 lowercase hex digits (a partition id starts with 's') */
    size_t h = strspn(p, "0123456789abcdef");
    if (h >= 1 && h < SB_SINK_PART_TAG_MAX && p[h] == '-')
        p += h + 1;
    uint32_t stage, seq;
    uint64_t task;
    sb_err e;
    return sb_part_id_parse(p, &stage, &task, &seq, &e) == 0;
}

int sb_io_sink_dir_committed(const char *dir, int *yes, sb_err *err)
{
    *yes = 0;
    char *uri = sb_io_uri_join(dir, SB_IO_SUCCESS_NAME);
    if (uri == NULL)
        return sb_err_set(err, "sink: out of memory");
    uint64_t size;
    int rc = sb_io_stat(uri, &size, yes, err);
    if (rc != 0)
        sb_err_wrap(err, "sink");
    free(uri);
    return rc;
}

int sb_io_sink_check_empty(const char *dir, const char *ext, const sb_io_obj *objs, size_t nobjs,
                           sb_err *err)
{
    size_t other = 0;
    const char *first = NULL;
    for (size_t i = 0; i < nobjs; i++) {
        const char *nm = sb_io_uri_base(objs[i].uri);
        if (sb_io_sink_our_part_name(nm, ext) || strncmp(nm, ".sbtmp-", 7) == 0 ||
            sb_io_sink_is_staged(nm))
            continue; /* an unfinished run's: this run's own when it resumes */
        if (other++ == 0)
            first = nm;
    }
    if (other == 0)
        return 0;
    return sb_err_permanent(err,
                            "sink %.300s: mode errorIfExists, and it already holds %zu file%s "
                            "(%.200s%s)",
                            dir, other, other == 1 ? "" : "s", first, other > 1 ? ", ..." : "");
}

static int read_small(const char *uri, uint64_t size, char **out, sb_err *err)
{
    *out = malloc(size + 1);
    if (*out == NULL)
        return sb_err_set(err, "sink: out of memory for %.300s", uri);
    sb_io_rd *r = NULL;
    int rc = sb_io_read_open(uri, 0, size, &r, err);
    if (rc == 0 && size > 0 && sb_io_read_full(r, *out, (size_t)size, err) != (ssize_t)size)
        rc = sb_err_set(err, "sink: %.300s changed while it was read", uri);
    sb_io_read_close(r);
    if (rc != 0) {
        free(*out);
        *out = NULL;
        return -1;
    }
    (*out)[size] = '\0';
    return 0;
}

static int num_field(const cJSON *o, const char *key, uint64_t max, uint64_t *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble > (double)max ||
        x->valuedouble != floor(x->valuedouble))
        return -1;
    *v = (uint64_t)x->valuedouble;
    return 0;
}

static int read_parts(const cJSON *arr, const char *uri, const char *ext, sb_io_prev_manifest *m,
                      sb_err *err)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);
    m->parts = calloc(n + 1, sizeof *m->parts);
    if (m->parts == NULL)
        return sb_err_set(err, "sink: out of memory reading %.300s", uri);
    const cJSON *p;
    cJSON_ArrayForEach(p, arr)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(p, "name");
        sb_io_part_info *pi = &m->parts[m->nparts];
        uint64_t crc;
        if (!cJSON_IsString(nm) || !sb_io_sink_our_part_name(nm->valuestring, ext) ||
            num_field(p, "rows", UINT64_MAX >> 11, &pi->rows) != 0 ||
            num_field(p, "bytes", UINT64_MAX >> 11, &pi->bytes) != 0 ||
            num_field(p, "crc32c", UINT32_MAX, &crc) != 0)
            return sb_err_set(err,
                              "sink: %.300s: parts[%zu] is not a part of this engine's (name, "
                              "rows, bytes, crc32c) for format %s; append cannot carry it over",
                              uri, m->nparts, ext);
        snprintf(pi->name, sizeof pi->name, "%s", nm->valuestring);
        pi->crc32c = (uint32_t)crc;
        m->nparts++;
    }
    return 0;
}

static int read_errored(const cJSON *arr, const char *uri, sb_io_prev_manifest *m, sb_err *err)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);
    m->errored = calloc(n + 1, sizeof *m->errored);
    if (m->errored == NULL)
        return sb_err_set(err, "sink: out of memory reading %.300s", uri);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const char *keys[3] = {"stage", "split", "error"};
        char *v[3] = {NULL, NULL, NULL};
        for (int k = 0; k < 3; k++) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(e, keys[k]);
            v[k] = strdup(cJSON_IsString(s) ? s->valuestring : "");
        }
        m->errored[m->nerrored++] = (sb_io_errored){v[0], v[1], v[2]};
        if (v[0] == NULL || v[1] == NULL || v[2] == NULL)
            return sb_err_set(err, "sink: out of memory reading %.300s", uri);
    }
    return 0;
}

int sb_io_prev_manifest_read(const char *dir, const char *ext, sb_io_prev_manifest *out,
                             sb_err *err)
{
    memset(out, 0, sizeof *out);
    char *uri = sb_io_uri_join(dir, SB_IO_MANIFEST_NAME);
    if (uri == NULL)
        return sb_err_set(err, "sink: out of memory");
    uint64_t size = 0;
    int exists = 0, rc = 0;
    char *text = NULL;
    cJSON *root = NULL;
    if (sb_io_stat(uri, &size, &exists, err) != 0)
        rc = sb_err_wrap(err, "sink");
    else if (!exists)
        goto out;
    else if (size > MANIFEST_MAX)
        rc = sb_err_set(err, "sink: %.300s has %" PRIu64 " bytes: not a manifest of this engine",
                        uri, size);
    else if (read_small(uri, size, &text, err) != 0)
        rc = -1;
    else if ((root = cJSON_Parse(text)) == NULL || !cJSON_IsObject(root))
        rc = sb_err_set(err, "sink: %.300s is not a JSON object", uri);
    if (rc != 0)
        goto out;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(root, "parts");
    const cJSON *errored = cJSON_GetObjectItemCaseSensitive(root, "errored");
    if (!cJSON_IsArray(parts) || (errored != NULL && !cJSON_IsArray(errored)))
        rc = sb_err_set(err, "sink: %.300s: \"parts\" (and \"errored\") must be arrays", uri);
    else if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, ext) != 0 &&
             !(strcmp(ext, "txt") == 0 && strcmp(fmt->valuestring, "text") == 0) &&
             !(strcmp(ext, "bin") == 0 && strcmp(fmt->valuestring, "binary") == 0))
        rc = sb_err_set(err, "sink: %.300s holds format %.20s output; append needs the same format",
                        uri, fmt->valuestring);
    else if (read_parts(parts, uri, ext, out, err) != 0 ||
             (errored != NULL && read_errored(errored, uri, out, err) != 0))
        rc = -1;
out:
    cJSON_Delete(root);
    free(text);
    free(uri);
    if (rc != 0)
        sb_io_prev_manifest_free(out);
    return rc;
}

void sb_io_prev_manifest_free(sb_io_prev_manifest *m)
{
    for (size_t i = 0; i < m->nerrored; i++) {
        free((char *)m->errored[i].stage);
        free((char *)m->errored[i].split);
        free((char *)m->errored[i].error);
    }
    free(m->errored);
    free(m->parts);
    memset(m, 0, sizeof *m);
}

int sb_io_sink_tag_new(char out[SB_SINK_PART_TAG_MAX], sb_err *err)
{
    unsigned char r[6];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return sb_err_set(err, "sink: no random bytes for the run's tag");
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return 0;
}

int sb_io_sink_tag_from_uid(const char *uid, char out[SB_SINK_PART_TAG_MAX], sb_err *err)
{
    size_t k = 0;
    for (const char *p = uid; p != NULL && *p != '\0' && k < 12; p++)
        if (strchr("0123456789abcdef", *p) != NULL && *p != '\0')
            out[k++] = *p;
        else if (*p >= 'A' && *p <= 'F')
            out[k++] = (char)(*p - 'A' + 'a');
    out[k] = '\0';
    if (k < 12)
        return sb_err_set(err, "sink: uid \"%.64s\" has fewer than 12 hex digits for a run tag",
                          uid ? uid : "");
    return 0;
}

int sb_io_sink_tag_check(const char *tag, sb_sink_mode mode, sb_err *err)
{
    size_t n = tag != NULL ? strlen(tag) : 0;
    if (mode != SB_SINK_APPEND)
        return n == 0 ? 0 : sb_err_set(err, "a sink tag \"%.20s\" outside append mode", tag);
    if (n == 0 || n >= SB_SINK_PART_TAG_MAX || strspn(tag, "0123456789abcdef") != n)
        return sb_err_set(err, "sink tag \"%.20s\": 1 to %d lowercase hex digits", tag ? tag : "",
                          SB_SINK_PART_TAG_MAX - 1);
    return 0;
}

/* realpath() of path, or of its longest existing prefix with the rest appended (a sink
 * directory is made by its first write, so it may not exist yet). 0, or -1. */
static int real_or_prefix(const char *path, char out[PATH_MAX])
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return -1;
    size_t n = strlen(buf), end = n; /* buf[0..end) is the prefix tried */
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    end = n;
    for (;;) {
        char save = buf[end];
        buf[end] = '\0';
        const char *ok = realpath(buf, out);
        buf[end] = save;
        if (ok != NULL)
            break;
        while (end > 0 && buf[end - 1] != '/')
            end--; /* drop the last component */
        if (end <= 1)
            return -1;
        end--; /* and the '/' before it */
    }
    size_t k = strlen(out);
    if (end < n && snprintf(out + k, PATH_MAX - k, "%s", buf + end) >= (int)(PATH_MAX - k))
        return -1;
    return 0;
}

int sb_io_sink_check_not_source(const sb_sink_spec *sink, const sb_source_spec *src, sb_err *err)
{
    if (sink->uri == NULL || strncmp(sink->uri, "file://", 7) != 0)
        return 0;
    char *sdir = sb_io_uri_norm(sink->uri, err);
    if (sdir == NULL)
        return sb_err_wrap(err, "sink");
    char rsink[PATH_MAX];
    int rc = 0, have = real_or_prefix(sdir, rsink) == 0;
    for (size_t i = 0; have && rc == 0 && i < (src->uri != NULL ? 1 : src->nuris); i++) {
        const char *u = src->uri != NULL ? src->uri : src->uris[i];
        if (u == NULL || strncmp(u, "file://", 7) != 0)
            continue;
        char *p = sb_io_uri_norm(u, err);
        if (p == NULL) {
            rc = sb_err_wrap(err, "source");
            break;
        }
        /* the directory the source lists: itself, or a glob's directory */
        char *slash = strrchr(p, '/');
        struct stat st;
        if (slash != NULL && strpbrk(slash + 1, "*?[") != NULL)
            *slash = '\0';
        else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            p[0] = '\0'; /* a single file lists nothing else */
        char rsrc[PATH_MAX];
        if (p[0] != '\0' && realpath(p, rsrc) != NULL && strcmp(rsrc, rsink) == 0)
            rc = sb_err_permanent(err,
                                  "uri \"%.200s\" is the directory the source lists "
                                  "(\"%.200s\"), reached through a symbolic link (both are "
                                  "%.200s): every run would read the previous run's output back "
                                  "in; write the sink to another directory",
                                  sink->uri, u, rsrc);
        free(p);
    }
    free(sdir);
    return rc;
}
