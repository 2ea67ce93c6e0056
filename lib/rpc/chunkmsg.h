/* chunkmsg.h — the Data.Fetch `Chunk` message without copying its payload.
 *
 *   message Chunk { uint64 offset = 1; bytes data = 2; fixed32 crc32c = 3; uint64 total_length = 4;
 * }
 *
 * Sending: sb_rpc_chunk_frame_encode() writes the protobuf bytes that go before `data` (field 1,
 * then the tag and length of field 2) and after it (fields 3 and 4) into a small caller-owned
 * frame, so head + data + tail is exactly what protobuf-c would pack (zero fields omitted) while
 * `data` itself is never copied.
 *
 * Receiving: a message arrives as a list of pieces (rpc.h: sb_rpc_reader_next()). chunk parsing
 * decodes the small fields and records where `data` lies within the pieces; the data itself is
 * then walked piece by piece (sb_rpc_chunk_data_next) or copied once into the caller's buffer
 * (sb_rpc_chunk_copy_data). Nothing here allocates; the pieces stay owned by whoever gave them.
 * Malformed or truncated input returns -1 with a message (never reads out of bounds).
 * Verifying crc32c is the caller's business (lib/partition has the CRC-32C).
 */
#ifndef SB_RPC_CHUNK_H
#define SB_RPC_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "rpc/rpc.h"

#define SB_RPC_CHUNK_HEAD_MAX 22 /* tag + varint64, tag + varint64 length */
#define SB_RPC_CHUNK_TAIL_MAX 16 /* tag + fixed32, tag + varint64 */

typedef struct sb_rpc_chunk_frame {
    uint8_t head[SB_RPC_CHUNK_HEAD_MAX];
    size_t head_len;
    uint8_t tail[SB_RPC_CHUNK_TAIL_MAX];
    size_t tail_len;
} sb_rpc_chunk_frame;

void sb_rpc_chunk_frame_encode(sb_rpc_chunk_frame *f, uint64_t offset, size_t data_len,
                               uint32_t crc32c, uint64_t total_length);

/* A parsed chunk. data_* locate `data` inside the pieces it was parsed from. */
typedef struct sb_rpc_chunk {
    uint64_t offset;
    uint32_t crc32c;
    uint64_t total_length;
    size_t data_len;
    size_t data_piece; /* index of the piece holding data[0] */
    size_t data_off;   /* offset of data[0] within that piece */
} sb_rpc_chunk;

/* Parses a Chunk spread over `n` pieces (total length is their sum). Unknown fields are skipped;
 * a repeated field keeps its last value, as protobuf requires. */
int sb_rpc_chunk_parse(const sb_rpc_piece *pieces, size_t n, sb_rpc_chunk *out, sb_err *err);

typedef struct sb_rpc_chunk_iter {
    size_t piece;
    size_t off;
    size_t left;
} sb_rpc_chunk_iter;

void sb_rpc_chunk_data_begin(const sb_rpc_chunk *c, sb_rpc_chunk_iter *it);
/* Next contiguous run of data: 1 with *out set, 0 when all data_len bytes were returned. */
int sb_rpc_chunk_data_next(const sb_rpc_piece *pieces, size_t n, sb_rpc_chunk_iter *it,
                           sb_rpc_piece *out);
/* Copies the data into dst (capacity cap >= c->data_len, else -1). */
int sb_rpc_chunk_copy_data(const sb_rpc_piece *pieces, size_t n, const sb_rpc_chunk *c, void *dst,
                           size_t cap, sb_err *err);

#endif
