/* ipc.h — the Apache Arrow IPC streaming format (the columnar format specification, "Serialization
 * and Interprocess Communication"), written from and read into partition columns, so that any
 * Arrow library (pyarrow.ipc.open_stream, arrow-rs, ...) can exchange batches with the worker
 * over a pipe (the exec operator's framing "arrow").
 *
 * A stream is a Schema message, then RecordBatch messages, then an end-of-stream marker. Each
 * message is framed as 0xFFFFFFFF, an int32 metadata length (a multiple of 8), the FlatBuffers
 * `Message` (flatbuf.h), then the body: the batch's buffers, each at an 8-aligned offset.
 * Readers also accept the pre-1.0 framing without the 0xFFFFFFFF marker.
 *
 * Types (both ways): bool, int8..64, uint8..64, float32/64, utf8, binary, fixed-size list of a
 * numeric type (tensors), any of them nullable. Reading also takes large_utf8 and large_binary
 * (64-bit offsets, as Polars writes them), converted to utf8/binary when they fit. Anything else
 * (dictionaries, compression, nested lists, timestamps, ...) is an error naming the field and the
 * type, never a crash; a reader checks every size, offset and alignment before using it.
 *
 * Memory: writers append to a caller-owned sb_ipc_buf (free with sb_ipc_buf_free). A reader
 * owns its schema (fields, names) until sb_ipc_reader_free(); the columns of the last batch it
 * read point into the message bytes the caller passed (or into the reader's own copies where
 * it had to convert or realign), so they are valid until the next sb_ipc_read() call and while
 * those bytes are unchanged. Single-threaded objects.
 */
#ifndef SB_ARROW_IPC_H
#define SB_ARROW_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "partition/partition.h"

#define SB_IPC_MAX_METADATA (16u << 20) /* bytes of one message's FlatBuffers metadata */

typedef struct sb_ipc_buf {
    uint8_t *p;
    size_t len, cap;
} sb_ipc_buf;

void sb_ipc_buf_free(sb_ipc_buf *b);

/* ---- writing ---------------------------------------------------------------------------- */

/* Appends a Schema message describing these columns. */
int sb_ipc_write_schema(sb_ipc_buf *out, const sb_field *fields, size_t n, sb_err *err);

/* Appends a RecordBatch message holding rows [first, first+n) of cols (the columns of the schema
 * written before, in order; offsets are rebased and bitmaps shifted to start at row 0). */
int sb_ipc_write_batch(sb_ipc_buf *out, const sb_column *cols, size_t ncols, size_t first, size_t n,
                       sb_err *err);

/* Appends the end-of-stream marker. */
int sb_ipc_write_eos(sb_ipc_buf *out, sb_err *err);

/* ---- reading ---------------------------------------------------------------------------- */

/* How long the message starting at p is, from its first len bytes: 0 + *total when complete
 * (*total bytes, end-of-stream included), 1 when more bytes are needed to tell or to hold it,
 * -1 + err when the framing is invalid or the message is longer than max bytes. */
int sb_ipc_frame(const uint8_t *p, size_t len, size_t max, size_t *total, sb_err *err);

typedef enum { SB_IPC_SCHEMA = 1, SB_IPC_BATCH, SB_IPC_EOS } sb_ipc_kind;

typedef struct sb_ipc_reader {
    bool have_schema;
    size_t ncols;
    sb_field *fields; /* the stream's schema (names owned) */
    bool *wide;       /* per column: 64-bit offsets on the wire (large_utf8, large_binary) */
    sb_column *cols;  /* the last batch's columns */
    size_t rows;      /* the last batch's rows */
    uint64_t batches; /* batches read so far */
    void **scratch;   /* owned buffers behind the last batch */
    size_t nscratch, capscratch;
} sb_ipc_reader;

void sb_ipc_reader_init(sb_ipc_reader *r);
void sb_ipc_reader_free(sb_ipc_reader *r);

/* Decodes one whole message (exactly the bytes sb_ipc_frame() measured). Sets *kind; for a
 * batch, r->cols and r->rows describe it. A second schema, a batch before the schema, or a
 * message of another kind (dictionary batch, tensor) is an error. */
int sb_ipc_read(sb_ipc_reader *r, const uint8_t *msg, size_t len, sb_ipc_kind *kind, sb_err *err);

#endif
