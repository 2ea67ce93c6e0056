/* chunk.h — moving a partition blob (partition.h) between workers as chunks of at most
 * SB_PART_CHUNK_MAX bytes, each carrying a crc32c of its bytes.
 *
 * Sender: sb_part_chunks_begin() + sb_part_chunks_next() walk a blob and yield, for chunk i,
 * its offset, length, crc and a pointer to its bytes (inside the blob: nothing is copied).
 * Chunk i always covers bytes [i*chunk_size, (i+1)*chunk_size) of the blob, also when a stream
 * resumes mid-partition (the first chunk then runs from the resume offset to the boundary), so
 * an index means the same bytes in every stream.
 *
 * Receiver: an sb_part_asm assembles one blob from chunks that arrive in order. It verifies
 * each chunk's crc, learns the blob's size from the header in the first bytes (refusing sizes
 * above a caller-given limit), allocates the destination once and copies each chunk's bytes
 * straight into place. A chunk's bytes may come as several pieces (e.g. the slices of a gRPC
 * byte buffer), so nothing has to be flattened first. After a broken stream, ask
 * sb_part_asm_next_offset() where to resume and feed the new stream's chunks.
 *
 * Memory: the iterator is a caller-owned value that borrows the blob. The assembler is owned by
 * the caller (sb_part_asm_free()); it owns the destination blob until sb_part_asm_take() hands
 * it over (then free it with sb_part_free()). Chunk bytes are only read during the call.
 * An assembler or iterator is used by one thread at a time.
 */
#ifndef SB_PARTITION_CHUNK_H
#define SB_PARTITION_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define SB_PART_CHUNK_MAX ((size_t)1 << 20) /* 1 MiB: largest chunk on the wire */

typedef struct sb_part_chunk {
    uint64_t index;   /* offset / chunk size */
    uint64_t offset;  /* first byte's position in the blob */
    size_t len;       /* bytes in the chunk (1..SB_PART_CHUNK_MAX) */
    uint32_t crc;     /* sb_crc32c(0, bytes, len) */
    const void *data; /* iterator: the bytes (inside the blob); the assembler ignores it */
} sb_part_chunk;

/* Chunk iterator state: a value the caller owns; its fields are private. */
typedef struct sb_part_chunk_iter {
    const uint8_t *blob;
    size_t len, chunk_size, pos;
} sb_part_chunk_iter;

/* Number of chunks of `chunk_size` bytes that cover `len` bytes. */
size_t sb_part_chunk_count(size_t len, size_t chunk_size);

/* Starts iterating blob[start..len) in chunks of chunk_size (1..SB_PART_CHUNK_MAX; 0 means
 * SB_PART_CHUNK_MAX). -1 + err when chunk_size is out of range or start > len. */
int sb_part_chunks_begin(sb_part_chunk_iter *it, const void *blob, size_t len, size_t chunk_size,
                         size_t start, sb_err *err);

/* Fills *out with the next chunk (computing its crc) and returns true; false at the end. */
bool sb_part_chunks_next(sb_part_chunk_iter *it, sb_part_chunk *out);

/* One piece of a chunk's bytes. */
typedef struct sb_part_piece {
    const void *p;
    size_t len;
} sb_part_piece;

typedef struct sb_part_asm sb_part_asm;

/* An assembler that accepts blobs of at most max_len bytes. */
sb_part_asm *sb_part_asm_new(size_t max_len, sb_err *err);

void sb_part_asm_free(sb_part_asm *a);

/* Adds one chunk: c->index, c->offset, c->len and c->crc as received (c->data is ignored) and
 * its bytes as `npieces` pieces whose lengths add up to c->len. Chunks must arrive in order:
 * c->offset may not exceed sb_part_asm_next_offset() (a gap), but may be lower (a re-sent chunk:
 * it is verified and rewritten). Errors name the chunk index and offset: crc mismatch (nothing
 * moves forward; the chunk can be fetched again), a gap, a chunk past the blob's end, a bad
 * header, a size above the limit. */
int sb_part_asm_add(sb_part_asm *a, const sb_part_chunk *c, const sb_part_piece *pieces,
                    size_t npieces, sb_err *err);

/* Convenience: one contiguous piece. */
int sb_part_asm_add_bytes(sb_part_asm *a, const sb_part_chunk *c, const void *bytes, sb_err *err);

/* Where the next chunk must start (the resume offset after a broken stream). */
uint64_t sb_part_asm_next_offset(const sb_part_asm *a);

/* The blob's total size, 0 while still unknown. */
uint64_t sb_part_asm_total(const sb_part_asm *a);

/* True when every byte has arrived. */
bool sb_part_asm_done(const sb_part_asm *a);

/* The completed blob, still owned by the assembler (valid until the next reset/add/free);
 * NULL + err when incomplete. */
const void *sb_part_asm_view(const sb_part_asm *a, size_t *len_out, sb_err *err);

/* Hands the completed blob (64-byte aligned) to the caller, who frees it with sb_part_free(),
 * and resets the assembler. NULL + err when incomplete. */
void *sb_part_asm_take(sb_part_asm *a, size_t *len_out, sb_err *err);

/* Forgets the current blob to start on another one; keeps the buffer for reuse when it was not
 * taken (so a worker assembling many partitions allocates rarely). */
void sb_part_asm_reset(sb_part_asm *a);

#endif
