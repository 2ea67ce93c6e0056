/* encoding.c — Parquet's level and value encodings and the page codecs (see encoding.h). Bit
 * unpacking reads LSB-first; every run's header is checked against the bytes left before a
 * value of it is read. */
#include "parquet/encoding.h"

#include <brotli/decode.h>
#include <inttypes.h>
#include <lz4.h>
#include <snappy-c.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "parquet/meta.h"

int sb_pq_bit_width(uint64_t max)
{
    int w = 0;
    while (max != 0) {
        w++;
        max >>= 1;
    }
    return w;
}

/* `w` bits (w <= 64) at bit offset `bit` of p, LSB-first; the caller checked the bytes. */
static uint64_t getbits(const uint8_t *p, uint64_t bit, int w)
{
    uint64_t v = 0;
    int got = 0;
    while (got < w) {
        size_t byte = (size_t)(bit >> 3);
        int sh = (int)(bit & 7);
        int take = 8 - sh < w - got ? 8 - sh : w - got;
        v |= (uint64_t)((p[byte] >> sh) & ((1u << take) - 1)) << got;
        got += take;
        bit += (uint64_t)take;
    }
    return v;
}

/* `w` bits (w <= 56) of value i of a bit-packed run p[0..nbytes): one unaligned 64-bit load
 * where 8 bytes are left, else the bytewise path. */
static inline uint64_t unpack1(const uint8_t *p, size_t nbytes, uint64_t i, int w)
{
    uint64_t bit = i * (uint64_t)w;
    size_t byte = (size_t)(bit >> 3);
    if (byte + 8 <= nbytes) {
        uint64_t x;
        memcpy(&x, p + byte, 8); /* little-endian targets only, as the format's values */
        return (x >> (bit & 7)) & (((uint64_t)1 << w) - 1);
    }
    return getbits(p, bit, w);
}

/* `groups` whole groups of 8 values of width bw (1..8) from p into out: a group is bw bytes, so
 * one 64-bit load holds it; shifts with a constant trip count instead of a load per value (list
 * levels, 64 a row of an embedding column, are most of the values decoded). p[0..avail) may be
 * read (the run and what follows it: bits past the run are masked off). */
static void unpack_groups8(const uint8_t *p, size_t avail, int bw, uint32_t *out, size_t groups)
{
    uint64_t mask = ((uint64_t)1 << bw) - 1;
    for (size_t g = 0; g < groups; g++) {
        size_t at = g * (size_t)bw;
        uint64_t x = 0;
        if (at + 8 <= avail)       /* a constant size: one load */
            memcpy(&x, p + at, 8); /* little-endian, as unpack1 */
        else
            for (int b = 0; b < bw; b++)
                x |= (uint64_t)p[at + (size_t)b] << (8 * b);
        uint32_t *o = out + g * 8;
        o[0] = (uint32_t)(x & mask);
        o[1] = (uint32_t)((x >> bw) & mask);
        o[2] = (uint32_t)((x >> 2 * bw) & mask);
        o[3] = (uint32_t)((x >> 3 * bw) & mask);
        o[4] = (uint32_t)((x >> 4 * bw) & mask);
        o[5] = (uint32_t)((x >> 5 * bw) & mask);
        o[6] = (uint32_t)((x >> 6 * bw) & mask);
        o[7] = (uint32_t)((x >> 7 * bw) & mask);
    }
}

/* out[0..n) = v: zeros by memset, others in blocks of 16 (constant-size copies). */
static void fill32(uint32_t *out, size_t n, uint32_t v)
{
    if (v == 0) {
        memset(out, 0, n * sizeof *out);
        return;
    }
    uint32_t blk[16];
    for (int k = 0; k < 16; k++)
        blk[k] = v;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        memcpy(out + i, blk, sizeof blk);
    for (; i < n; i++)
        out[i] = v;
}

static int varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= n)
            return -1;
        uint8_t b = p[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

int sb_pq_rle_decode(const uint8_t *p, size_t n, int bw, uint32_t *out, size_t count, size_t *used,
                     sb_err *err)
{
    if (bw < 0 || bw > 32)
        return sb_err_data(err, "RLE bit width %d (0 to 32)", bw);
    size_t pos = 0, got = 0;
    size_t vbytes = (size_t)(bw + 7) / 8;
    while (got < count) {
        uint64_t h;
        if (varint(p, n, &pos, &h) != 0)
            return sb_err_data(err, "RLE run header truncated at byte %zu (%zu of %zu values)", pos,
                               got, count);
        if (h & 1) { /* bit-packed: (h>>1) groups of 8 values */
            uint64_t groups = h >> 1;
            if (groups == 0 || (bw > 0 && groups > (n - pos) / (size_t)bw))
                return sb_err_data(err, "bit-packed run of %" PRIu64 " groups past the data",
                                   groups);
            size_t bytes = (size_t)groups * (size_t)bw;
            size_t vals = groups > SIZE_MAX / 8 ? SIZE_MAX : (size_t)groups * 8;
            size_t take = vals < count - got ? vals : count - got, i = 0;
            if (bw >= 1 && bw <= 8) {
                unpack_groups8(p + pos, n - pos, bw, out + got, take / 8);
                i = take / 8 * 8;
            }
            for (; i < take; i++)
                out[got + i] = (uint32_t)unpack1(p + pos, bytes, i, bw);
            got += take;
            pos += bytes;
        } else {
            uint64_t run = h >> 1;
            if (run == 0)
                return sb_err_data(err, "RLE run of length 0 at byte %zu", pos);
            if (vbytes > n - pos)
                return sb_err_data(err, "RLE run value truncated at byte %zu", pos);
            uint64_t v = 0;
            for (size_t i = 0; i < vbytes; i++)
                v |= (uint64_t)p[pos + i] << (8 * i);
            pos += vbytes;
            if (bw < 32 && (v >> bw) != 0)
                return sb_err_data(err, "RLE value %" PRIu64 " wider than %d bits", v, bw);
            size_t take = run < count - got ? (size_t)run : count - got;
            fill32(out + got, take, (uint32_t)v);
            got += take;
        }
    }
    if (used != NULL)
        *used = pos;
    return 0;
}

typedef struct {
    uint64_t block, mbs, total, per_mb;
    int64_t first;
    size_t pos;
} dhead;

static int delta_head(const uint8_t *p, size_t n, dhead *d, sb_err *err)
{
    uint64_t first;
    d->pos = 0;
    if (varint(p, n, &d->pos, &d->block) != 0 || varint(p, n, &d->pos, &d->mbs) != 0 ||
        varint(p, n, &d->pos, &d->total) != 0 || varint(p, n, &d->pos, &first) != 0)
        return sb_err_data(err, "DELTA_BINARY_PACKED header truncated");
    d->first = (int64_t)(first >> 1) ^ -(int64_t)(first & 1);
    if (d->block == 0 || d->block % 128 != 0 || d->block > (1u << 20) || d->mbs == 0 ||
        d->block % d->mbs != 0 || (d->block / d->mbs) % 32 != 0)
        return sb_err_data(err,
                           "DELTA_BINARY_PACKED block size %" PRIu64 " with %" PRIu64
                           " miniblocks is invalid",
                           d->block, d->mbs);
    d->per_mb = d->block / d->mbs;
    return 0;
}

int64_t sb_pq_delta_count(const uint8_t *p, size_t n, sb_err *err)
{
    dhead d;
    if (delta_head(p, n, &d, err) != 0)
        return -1;
    if (d.total > INT32_MAX)
        return sb_err_data(err, "DELTA_BINARY_PACKED count %" PRIu64 " too large", d.total);
    return (int64_t)d.total;
}

int sb_pq_delta_decode(const uint8_t *p, size_t n, uint64_t *out, size_t count, size_t *used,
                       sb_err *err)
{
    dhead d;
    if (delta_head(p, n, &d, err) != 0)
        return -1;
    if (d.total != count)
        return sb_err_data(err, "DELTA_BINARY_PACKED holds %" PRIu64 " values, expected %zu",
                           d.total, count);
    size_t pos = d.pos, got = 0;
    uint64_t prev = (uint64_t)d.first;
    if (count > 0)
        out[got++] = prev;
    while (got < count) {
        uint64_t md;
        if (varint(p, n, &pos, &md) != 0)
            return sb_err_data(err, "DELTA_BINARY_PACKED block header truncated");
        uint64_t min_delta = (md >> 1) ^ -(md & 1);
        if (d.mbs > n - pos)
            return sb_err_data(err, "DELTA_BINARY_PACKED bit widths truncated");
        const uint8_t *widths = p + pos;
        pos += (size_t)d.mbs;
        for (uint64_t m = 0; m < d.mbs && got < count; m++) {
            int bw = widths[m];
            if (bw > 64)
                return sb_err_data(err, "DELTA_BINARY_PACKED bit width %d", bw);
            size_t bytes = (size_t)(d.per_mb * (uint64_t)bw / 8);
            if (bytes > n - pos)
                return sb_err_data(err, "DELTA_BINARY_PACKED miniblock past the data");
            size_t take = d.per_mb < count - got ? (size_t)d.per_mb : count - got;
            for (size_t i = 0; i < take; i++) {
                uint64_t v = bw <= 56 ? unpack1(p + pos, bytes, i, bw)
                                      : getbits(p + pos, (uint64_t)i * (uint64_t)bw, bw);
                prev = prev + min_delta + v; /* wraps, as the format specifies */
                out[got++] = prev;
            }
            pos += bytes;
        }
    }
    if (used != NULL)
        *used = pos;
    return 0;
}

int sb_pq_bss_decode(const uint8_t *p, size_t n, size_t width, uint8_t *out, size_t count,
                     sb_err *err)
{
    if (width == 0 || count > SIZE_MAX / width || n != count * width)
        return sb_err_data(err, "BYTE_STREAM_SPLIT data of %zu bytes for %zu values of %zu bytes",
                           n, count, width);
    for (size_t k = 0; k < width; k++)
        for (size_t i = 0; i < count; i++)
            out[i * width + k] = p[k * count + i];
    return 0;
}

static int gunzip(const uint8_t *src, size_t n, uint8_t *dst, size_t dst_len, sb_err *err)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK) /* gzip or zlib header */
        return sb_err_set(err, "GZIP: inflateInit failed");
    size_t out = 0;
    int rc = Z_OK;
    z.next_in = (Bytef *)src;
    z.avail_in = (uInt)n;
    while (rc != Z_STREAM_END) {
        z.next_out = dst + out;
        z.avail_out = (uInt)(dst_len - out);
        rc = inflate(&z, Z_NO_FLUSH);
        out = dst_len - z.avail_out;
        if (rc == Z_STREAM_END && z.avail_in > 0) { /* concatenated members */
            if (inflateReset(&z) != Z_OK)
                break;
            rc = Z_OK;
            continue;
        }
        if (rc != Z_OK && rc != Z_STREAM_END)
            break;
        if (rc == Z_OK && z.avail_out == 0) {
            unsigned char probe;
            z.next_out = &probe;
            z.avail_out = 1;
            rc = inflate(&z, Z_NO_FLUSH);
            if (z.avail_out == 0) {
                inflateEnd(&z);
                return sb_err_data(err, "GZIP data inflates past the declared %zu bytes", dst_len);
            }
            if (rc == Z_STREAM_END)
                break;
            if (rc != Z_OK)
                break;
        }
        if (rc == Z_OK && z.avail_in == 0 && z.avail_out > 0)
            break;
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END)
        return sb_err_data(err, "GZIP data is corrupt or truncated (%s)", z.msg ? z.msg : "no end");
    if (out != dst_len)
        return sb_err_data(err, "GZIP data inflates to %zu bytes, declared %zu", out, dst_len);
    return 0;
}

int sb_pq_decompress(int codec, const uint8_t *src, size_t n, uint8_t *dst, size_t dst_len,
                     sb_err *err)
{
    switch (codec) {
    case SB_PQ_UNCOMPRESSED:
        if (n != dst_len)
            return sb_err_data(err, "uncompressed page of %zu bytes, declared %zu", n, dst_len);
        memcpy(dst, src, n);
        return 0;
    case SB_PQ_SNAPPY: {
        size_t len = 0;
        if (snappy_uncompressed_length((const char *)src, n, &len) != SNAPPY_OK)
            return sb_err_data(err, "SNAPPY data is corrupt");
        if (len != dst_len)
            return sb_err_data(err, "SNAPPY data inflates to %zu bytes, declared %zu", len,
                               dst_len);
        if (snappy_uncompress((const char *)src, n, (char *)dst, &len) != SNAPPY_OK ||
            len != dst_len)
            return sb_err_data(err, "SNAPPY data is corrupt");
        return 0;
    }
    case SB_PQ_GZIP:
        return gunzip(src, n, dst, dst_len, err);
    case SB_PQ_ZSTD: {
        size_t r = ZSTD_decompress(dst, dst_len, src, n);
        if (ZSTD_isError(r))
            return sb_err_data(err, "ZSTD data is corrupt or larger than declared (%s)",
                               ZSTD_getErrorName(r));
        if (r != dst_len)
            return sb_err_data(err, "ZSTD data inflates to %zu bytes, declared %zu", r, dst_len);
        return 0;
    }
    case SB_PQ_LZ4_RAW: {
        if (n > INT32_MAX || dst_len > INT32_MAX)
            return sb_err_data(err, "LZ4_RAW page too large");
        int r = LZ4_decompress_safe((const char *)src, (char *)dst, (int)n, (int)dst_len);
        if (r < 0 || (size_t)r != dst_len)
            return sb_err_data(err, "LZ4_RAW data is corrupt or not %zu bytes", dst_len);
        return 0;
    }
    case SB_PQ_BROTLI: {
        size_t len = dst_len;
        if (BrotliDecoderDecompress(n, src, &len, dst) != BROTLI_DECODER_RESULT_SUCCESS ||
            len != dst_len)
            return sb_err_data(err, "BROTLI data is corrupt or not %zu bytes", dst_len);
        return 0;
    }
    default:
        return sb_err_data(err,
                           "compression codec %s is not supported (UNCOMPRESSED, SNAPPY, "
                           "GZIP, ZSTD, LZ4_RAW and BROTLI are)",
                           sb_pq_codec_name(codec));
    }
}
