/* decomp.c — the streaming decoders behind compressed text inputs (decomp.h): zlib's inflate
 * for gzip (auto-detecting a zlib wrapper too, concatenated members) and zstd's streaming
 * decoder (concatenated and skippable frames, a bounded window). The reader drives them with
 * its own buffers, so nothing here allocates per call. */
#include "io/decomp.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>
#include <zstd.h>

struct sb_io_dec {
    sb_io_codec codec;
    char what[320];
    uint64_t in_total;
    bool in_member; /* inside a gzip member / zstd frame (a stream ending here is truncated) */
    z_stream z;
    ZSTD_DStream *zs;
};

static const char *const codec_names[] = {"none", "gzip", "zstd"};

const char *sb_io_codec_name(sb_io_codec c)
{
    return (unsigned)c < 3 ? codec_names[c] : "?";
}

int sb_io_compression_arg(const char *args_json, int *out, sb_err *err)
{
    *out = -1;
    if (args_json == NULL || args_json[0] == '\0')
        return 0;
    cJSON *root = cJSON_Parse(args_json);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "compression");
    int rc = 0;
    if (c == NULL || cJSON_IsNull(c) || (cJSON_IsString(c) && strcmp(c->valuestring, "auto") == 0))
        ;
    else if (cJSON_IsString(c) && strcmp(c->valuestring, "none") == 0)
        *out = SB_IO_CODEC_NONE;
    else if (cJSON_IsString(c) && strcmp(c->valuestring, "gzip") == 0)
        *out = SB_IO_CODEC_GZIP;
    else if (cJSON_IsString(c) && strcmp(c->valuestring, "zstd") == 0)
        *out = SB_IO_CODEC_ZSTD;
    else
        rc = sb_err_set(err, "source: args.compression must be auto, none, gzip or zstd");
    cJSON_Delete(root);
    return rc;
}

/* Does name[0..n) end in suffix (ASCII case-insensitive)? */
static bool ends_with(const char *name, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && strncasecmp(name + n - k, suffix, k) == 0;
}

sb_io_codec sb_io_codec_for(int arg, const char *path)
{
    if (arg >= 0)
        return (sb_io_codec)arg;
    if (path == NULL)
        return SB_IO_CODEC_NONE;
    size_t n = strlen(path);
    /* an http(s) URL's query ("...x.jsonl.gz?X-Amz-Signature=...") is not part of the name */
    if (strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0) {
        const char *q = strpbrk(path, "?#");
        if (q != NULL)
            n = (size_t)(q - path);
    }
    if (ends_with(path, n, ".gz") || ends_with(path, n, ".gzip"))
        return SB_IO_CODEC_GZIP;
    if (ends_with(path, n, ".zst") || ends_with(path, n, ".zstd"))
        return SB_IO_CODEC_ZSTD;
    return SB_IO_CODEC_NONE;
}

sb_io_dec *sb_io_dec_new(sb_io_codec c, const char *what, sb_err *err)
{
    sb_io_dec *d = calloc(1, sizeof *d);
    if (d == NULL) {
        sb_err_set(err, "%.300s: out of memory for a %s decoder", what, sb_io_codec_name(c));
        return NULL;
    }
    d->codec = c;
    snprintf(d->what, sizeof d->what, "%s", what);
    int ok = 0;
    if (c == SB_IO_CODEC_GZIP) {
        /* 15 + 32: the largest window, and a gzip or zlib header detected from the data */
        ok = inflateInit2(&d->z, 15 + 32) == Z_OK;
    } else if (c == SB_IO_CODEC_ZSTD) {
        d->zs = ZSTD_createDStream();
        ok = d->zs != NULL && !ZSTD_isError(ZSTD_DCtx_setParameter(d->zs, ZSTD_d_windowLogMax,
                                                                   SB_IO_ZSTD_MAX_WINDOW_LOG));
    }
    if (!ok) {
        sb_err_set(err, "%.300s: cannot start a %s decoder (out of memory?)", what,
                   sb_io_codec_name(c));
        sb_io_dec_free(d);
        return NULL;
    }
    return d;
}

static int gzip_step(sb_io_dec *d, const void *in, size_t in_len, size_t *in_used, void *out,
                     size_t out_cap, size_t *out_len, sb_err *err)
{
    z_stream *z = &d->z;
    z->next_in = (Bytef *)(uintptr_t)in;
    z->avail_in = in_len > UINT_MAX ? UINT_MAX : (uInt)in_len;
    z->next_out = out;
    z->avail_out = out_cap > UINT_MAX ? UINT_MAX : (uInt)out_cap;
    int rc = Z_OK;
    while (z->avail_out > 0 && (z->avail_in > 0 || d->in_member)) {
        if (!d->in_member) {
            /* the next member: only whole members may follow one another */
            if (inflateReset(z) != Z_OK)
                return sb_err_set(err, "%.300s: gzip decoder reset failed", d->what);
            d->in_member = true;
        }
        uInt before = z->avail_out, before_in = z->avail_in;
        rc = inflate(z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) {
            d->in_member = false;
            continue;
        }
        if (rc == Z_BUF_ERROR || (rc == Z_OK && before == z->avail_out && before_in == z->avail_in))
            break; /* needs more input (or more room) */
        if (rc != Z_OK)
            break;
    }
    size_t used = in_len - z->avail_in;
    d->in_total += used;
    *in_used = used;
    *out_len = out_cap - z->avail_out;
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR || rc == Z_MEM_ERROR)
        return sb_err_data(err,
                           "%.300s: corrupt gzip data at compressed byte offset %" PRIu64 ": %s",
                           d->what, d->in_total, z->msg != NULL ? z->msg : "inflate failed");
    return 0;
}

static int zstd_step(sb_io_dec *d, const void *in, size_t in_len, size_t *in_used, void *out,
                     size_t out_cap, size_t *out_len, sb_err *err)
{
    ZSTD_inBuffer ib = {in, in_len, 0};
    ZSTD_outBuffer ob = {out, out_cap, 0};
    while (ob.pos < ob.size && (ib.pos < ib.size || d->in_member)) {
        size_t before_out = ob.pos, before_in = ib.pos;
        size_t r = ZSTD_decompressStream(d->zs, &ob, &ib);
        if (ZSTD_isError(r)) {
            d->in_total += ib.pos;
            *in_used = ib.pos;
            *out_len = ob.pos;
            return sb_err_data(
                err, "%.300s: corrupt zstd data at compressed byte offset %" PRIu64 ": %s", d->what,
                d->in_total, ZSTD_getErrorName(r));
        }
        /* r == 0: a frame ended and is fully flushed */
        d->in_member = r != 0;
        if (ob.pos == before_out && ib.pos == before_in)
            break;
    }
    d->in_total += ib.pos;
    *in_used = ib.pos;
    *out_len = ob.pos;
    return 0;
}

int sb_io_dec_step(sb_io_dec *d, const void *in, size_t in_len, size_t *in_used, void *out,
                   size_t out_cap, size_t *out_len, sb_err *err)
{
    *in_used = 0;
    *out_len = 0;
    if (d->codec == SB_IO_CODEC_GZIP)
        return gzip_step(d, in, in_len, in_used, out, out_cap, out_len, err);
    return zstd_step(d, in, in_len, in_used, out, out_cap, out_len, err);
}

int sb_io_dec_finish(sb_io_dec *d, sb_err *err)
{
    if (d->in_member)
        return sb_err_data(err,
                           "%.300s: the %s data ends in the middle of a %s at compressed byte "
                           "offset %" PRIu64 " (a truncated file)",
                           d->what, sb_io_codec_name(d->codec),
                           d->codec == SB_IO_CODEC_GZIP ? "member" : "frame", d->in_total);
    return 0;
}

uint64_t sb_io_dec_in_total(const sb_io_dec *d)
{
    return d->in_total;
}

void sb_io_dec_free(sb_io_dec *d)
{
    if (d == NULL)
        return;
    if (d->codec == SB_IO_CODEC_GZIP)
        inflateEnd(&d->z);
    ZSTD_freeDStream(d->zs);
    free(d);
}
