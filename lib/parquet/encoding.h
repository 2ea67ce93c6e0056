/* encoding.h — Parquet's value and level encodings, decoded from a page's bytes with every
 * length, bit width and count checked: the RLE / bit-packed hybrid (levels, dictionary indices,
 * booleans), DELTA_BINARY_PACKED, the byte-array deltas, BYTE_STREAM_SPLIT and PLAIN booleans;
 * and the page codecs (UNCOMPRESSED, SNAPPY, GZIP, ZSTD, LZ4_RAW, BROTLI) with the output size
 * fixed in advance, so a page can never inflate past what its header declared.
 *
 * Memory: the decoders write into caller buffers sized for the count asked; nothing is
 * allocated except where a function says so. Errors carry no file context (the column reader
 * wraps them with file, row group, column and page).
 */
#ifndef SB_PARQUET_ENCODING_H
#define SB_PARQUET_ENCODING_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Decodes exactly `count` values of bit_width (0..32) from the hybrid runs in p[0..n) into
 * out. *used: bytes consumed (NULL: ignored). Runs past `count` are ignored (writers pad the
 * last bit-packed group); too few values is an error. */
int sb_pq_rle_decode(const uint8_t *p, size_t n, int bit_width, uint32_t *out, size_t count,
                     size_t *used, sb_err *err);

/* DELTA_BINARY_PACKED: the header's total value count must equal `count`; the values go to out
 * as 64-bit two's complement (an INT32 column keeps the low 32 bits). *used: bytes consumed. */
int sb_pq_delta_decode(const uint8_t *p, size_t n, uint64_t *out, size_t count, size_t *used,
                       sb_err *err);

/* The header's total value count of a DELTA_BINARY_PACKED run at p (to size a buffer), -1 + err
 * when the header is invalid. */
int64_t sb_pq_delta_count(const uint8_t *p, size_t n, sb_err *err);

/* BYTE_STREAM_SPLIT of `count` values of `width` bytes: p holds exactly count*width bytes. */
int sb_pq_bss_decode(const uint8_t *p, size_t n, size_t width, uint8_t *out, size_t count,
                     sb_err *err);

/* Bit width needed for values up to max (0 for 0). */
int sb_pq_bit_width(uint64_t max);

/* Decompresses src[0..n) with codec into dst[0..dst_len): the output must be exactly dst_len
 * bytes. -1 + err for an unsupported codec, corrupt data or a size mismatch. */
int sb_pq_decompress(int codec, const uint8_t *src, size_t n, uint8_t *dst, size_t dst_len,
                     sb_err *err);

#endif
