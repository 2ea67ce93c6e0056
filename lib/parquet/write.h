/* write.h — the Parquet writer: one partition of typed columns (partition.h) becomes one Parquet
 * file, streamed through a caller's write callback (the sink's storage writes).
 *
 * What is written: row groups of about `row_group_bytes` of partition data (so usually one per
 * file), each column chunk as data pages v1 of about 1 MiB, PLAIN values (byte arrays: a
 * dictionary page and RLE_DICTIONARY indices when the chunk's distinct values fit in 1 MiB and
 * are at most half its values), definition (and for lists repetition) levels in the RLE /
 * bit-packed hybrid, every page compressed with `codec`
 * (UNCOMPRESSED, SNAPPY, GZIP or ZSTD), and statistics (min_value, max_value, null_count) for
 * every column chunk. Types: bool -> BOOLEAN; int8/16/32 -> INT32 with INT(8|16|32, signed);
 * uint8/16/32 -> INT32 with INT(n, unsigned); int64 -> INT64; uint64 -> INT64 with INT(64,
 * unsigned); float32 -> FLOAT; float64 -> DOUBLE; utf8 -> BYTE_ARRAY STRING; binary ->
 * BYTE_ARRAY; a fixed-size list of numbers -> a three-level LIST with a required element (every
 * row holding list_size values), so tensor columns round-trip. Nullable columns are OPTIONAL.
 *
 * Memory: nothing is retained; the batch is the caller's and must stay open during the call.
 * The encoder pieces (sb_pq_buf, sb_pq_rle_encode, sb_pq_compress) are exposed for unit tests.
 */
#ifndef SB_PARQUET_WRITE_H
#define SB_PARQUET_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "partition/partition.h"

#define SB_PQ_DEFAULT_ROW_GROUP ((size_t)64 << 20) /* bytes of partition data per row group */
#define SB_PQ_PAGE_BYTES ((size_t)1 << 20)         /* values bytes per data page (about) */

/* A growable byte buffer; `oom` latches an allocation failure. Free with sb_pq_buf_free(). */
typedef struct sb_pq_buf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} sb_pq_buf;

void sb_pq_buf_put(sb_pq_buf *b, const void *p, size_t n);
void sb_pq_buf_free(sb_pq_buf *b);

/* Appends `n` values of bit_width (0..32) as RLE / bit-packed hybrid runs (no length prefix):
 * runs of 8 or more equal values as RLE runs, the rest bit-packed in groups of 8. */
void sb_pq_rle_encode(const uint32_t *v, size_t n, int bit_width, sb_pq_buf *out);

/* Compresses src[0..n) with codec (SB_PQ_UNCOMPRESSED, SNAPPY, GZIP, ZSTD) into out (replacing
 * its contents). -1 + err for another codec or a codec failure. */
int sb_pq_compress(int codec, const void *src, size_t n, sb_pq_buf *out, sb_err *err);

/* "zstd", "snappy", "gzip", "none" -> the codec, -1 for another name. */
int sb_pq_codec_parse(const char *name);

/* Receives the next n bytes of the file; nonzero + err stops the write. */
typedef int (*sb_pq_write_fn)(void *ud, const void *p, size_t n, sb_err *err);

typedef struct sb_pq_write_opts {
    int codec;              /* SB_PQ_ZSTD, ... */
    size_t row_group_bytes; /* 0: SB_PQ_DEFAULT_ROW_GROUP */
} sb_pq_write_opts;

/* Writes the batch's columns as one Parquet file through out. -1 + err naming the column. */
int sb_pq_write_batch(const sb_batch *b, const sb_pq_write_opts *o, sb_pq_write_fn out, void *ud,
                      sb_err *err);

#endif
