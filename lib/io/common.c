/* common.c — helpers shared by the storage code (see common.h): file:// URIs, the formats the
 * reader and writer support, the binary format's recordSize and the record size limit from the
 * format args, and full reads and writes of file descriptors. Allocates only what it returns. */

#include "io/common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int sb_io_check_format(sb_format fmt, const char *what, int is_sink, sb_err *err)
{
    switch (fmt) {
    case SB_FMT_JSONL:
    case SB_FMT_TEXT:
    case SB_FMT_BINARY:
    case SB_FMT_CSV:
    case SB_FMT_PARQUET:
        return 0;
    case SB_FMT_IMAGE:
        if (!is_sink)
            return 0;
        return sb_err_set(err,
                          "%s: format image is a source format only (sinks write jsonl, csv, "
                          "text, binary or parquet)",
                          what);
    }
    return sb_err_set(err, "%s: unknown format %d", what, (int)fmt);
}

int sb_io_record_size(const char *args_json, int required, const char *what, uint64_t *out,
                      sb_err *err)
{
    *out = 0;
    cJSON *root = NULL;
    if (args_json != NULL && args_json[0] != '\0') {
        root = cJSON_Parse(args_json);
        if (root == NULL || !cJSON_IsObject(root)) {
            cJSON_Delete(root);
            return sb_err_set(err, "%s: format args are not a JSON object: %.80s", what, args_json);
        }
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "recordSize");
    int rc = 0;
    if (rs == NULL || cJSON_IsNull(rs)) {
        if (required)
            rc =
                sb_err_set(err, "%s: format binary needs args.recordSize (bytes per record)", what);
    } else if (!cJSON_IsNumber(rs) || !isfinite(rs->valuedouble) || rs->valuedouble < 1 ||
               rs->valuedouble > (double)SB_IO_MAX_RECORD_SIZE ||
               rs->valuedouble != floor(rs->valuedouble)) {
        rc = sb_err_set(err, "%s: args.recordSize must be an integer from 1 to %llu", what,
                        (unsigned long long)SB_IO_MAX_RECORD_SIZE);
    } else {
        *out = (uint64_t)rs->valuedouble;
    }
    cJSON_Delete(root);
    return rc;
}

int sb_io_max_record(const char *args_json, size_t target_bytes, const char *what, size_t *out,
                     sb_err *err)
{
    uint64_t lim = (uint64_t)target_bytes * 4;
    if (lim < ((uint64_t)1 << 20))
        lim = (uint64_t)1 << 20;
    cJSON *root = args_json != NULL && args_json[0] != '\0' ? cJSON_Parse(args_json) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "maxRecordSize");
    int rc = 0;
    if (v != NULL && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 1 ||
            v->valuedouble > (double)SB_IO_MAX_LINE || v->valuedouble != floor(v->valuedouble))
            rc = sb_err_set(err, "%s: args.maxRecordSize must be an integer from 1 to %zu", what,
                            SB_IO_MAX_LINE);
        else
            lim = (uint64_t)v->valuedouble;
    }
    cJSON_Delete(root);
    if (lim > SB_IO_MAX_LINE)
        lim = SB_IO_MAX_LINE;
    *out = (size_t)lim;
    return rc;
}

int sb_io_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

ssize_t sb_io_pread_full(int fd, void *p, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)p + got, n - got, (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}
