/* partition.h — the partition format: columnar record batches with the Apache Arrow memory
 * layout, serialized as ONE contiguous blob (a small header followed by the raw column buffers,
 * each 64-byte aligned). The same bytes are the partition in memory, on the wire (cut into
 * chunks, see chunk.h) and in spill files; a reader opens a blob without copying anything.
 *
 * Writing: sb_batch_builder_new() with a schema, append values column by column (one value or a
 * run of values at a time; appending one value to every column is how rows are built),
 * sb_batch_builder_bytes() to decide when a partition is big enough, then
 * sb_batch_builder_finish() to get the blob. Reading: sb_batch_open() validates the whole blob
 * (checksums, every size and offset, UTF-8) and returns a view whose column pointers point into
 * the blob.
 *
 * Memory ownership:
 *   - sb_batch_builder: owned by the caller, freed with sb_batch_builder_free(). It copies the
 *     field names and every appended value; the caller's buffers are never retained.
 *   - blob from sb_batch_builder_finish(): owned by the caller, 64-byte aligned, freed with
 *     sb_part_free(). sb_batch_builder_finish_into() writes into a caller-owned buffer instead.
 *   - sb_batch from sb_batch_open(): owned by the caller, freed with sb_batch_close(). It does
 *     NOT own the blob: the blob must stay alive and unchanged while the sb_batch (and every
 *     pointer obtained from it) is in use. sb_batch_close() never frees the blob.
 *   - sb_column views returned by sb_batch_column() belong to the sb_batch.
 * Threads: a builder is used by one thread at a time; an opened sb_batch is read-only and may
 * be shared by any number of threads.
 *
 * Blob layout (version 1; every integer little-endian; offsets are from the blob's start):
 *
 *   fixed header, 64 bytes
 *     0  u8[4] magic "SBPT"            4  u16 version (1)          6  u16 fixed header size (64)
 *     8  u64 total length of the blob (a multiple of 64)
 *    16  u64 row count                24  u32 column count        28  u32 buffer count
 *    32  u32 data offset: where the buffers start (a multiple of 64; the header ends there)
 *    36  u32 flags (0)                40  u64 reserved (0)
 *    48  u32 header crc32c: of bytes [0,48) followed by [64, data offset)
 *    52  u32 data crc32c: of bytes [data offset, total length)
 *    56  u64 reserved (0)
 *   column table, 32 bytes per column, at 64
 *     0  u8 type (sb_type)   1 u8 child type (fixed-size list)   2 u8 flags (bit 0: nullable)
 *     3  u8 logical type (sb_logical: 0 none, 1 date (days since the epoch, int32 only),
 *        2/3/4 timestamp millis/micros/nanos since the epoch (int64 only); any other value or
 *        physical type is refused)     4 u32 fixed-size-list width (0 for other types)
 *     8  u64 null count     16 u32 name offset   20 u32 name length (bytes, no NUL)
 *    24  u64 reserved (0)
 *   buffer table, 16 bytes per buffer: u64 offset (multiple of 64), u64 length in bytes.
 *     Buffers appear in column order, in non-decreasing offset order without overlap:
 *       bool, numeric, fixed-size list: validity, values (list: rows*width child values)
 *       binary, utf8:                   validity, offsets (rows+1 int32), data
 *     A validity buffer is empty when the column has no nulls, else exactly ceil(rows/8) bytes
 *     (LSB-first bitmap, 1 = valid, like Arrow).
 *     binary/utf8 offsets start at 0, never decrease and end at the data length; utf8 data
 *     is valid UTF-8 and no offset splits a character. A null row still has a value slot (the
 *     builder writes zeros or an empty slice); readers must ignore its contents.
 *   names: each column name (UTF-8, no NUL), NUL-terminated, after the tables and before the
 *     data offset, then zero padding to the data offset
 *   buffers, each starting at a multiple of 64, zero padding between them and to the end, so
 *     a reader may read (not use) up to the next 64-byte boundary past any buffer.
 *
 * Checksums protect spill files and blobs handed around in memory; the transfer chunks carry
 * their own (chunk.h), so a receiver that verified every chunk may open with
 * SB_BATCH_OPEN_SKIP_CHECKSUM. Structure is validated in every case.
 */
#ifndef SB_PARTITION_PARTITION_H
#define SB_PARTITION_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct sb_batch sb_batch;
typedef struct sb_batch_builder sb_batch_builder;

#define SB_PART_MAGIC "SBPT"
#define SB_PART_VERSION 1
#define SB_PART_HEADER_SIZE 64 /* fixed part of the header */
#define SB_PART_ALIGN 64       /* alignment of every buffer and of blobs we allocate */
#define SB_PART_MAX_COLUMNS 4096
#define SB_PART_MAX_NAME 1024 /* bytes of one column name */

/* Column types. Values are stored in the blob: never renumber. */
typedef enum sb_type {
    SB_TYPE_BOOL = 1,
    SB_TYPE_INT8 = 2,
    SB_TYPE_INT16 = 3,
    SB_TYPE_INT32 = 4,
    SB_TYPE_INT64 = 5,
    SB_TYPE_UINT8 = 6,
    SB_TYPE_UINT16 = 7,
    SB_TYPE_UINT32 = 8,
    SB_TYPE_UINT64 = 9,
    SB_TYPE_FLOAT32 = 10,
    SB_TYPE_FLOAT64 = 11,
    SB_TYPE_BINARY = 12,     /* int32 offsets + bytes (Arrow "z") */
    SB_TYPE_UTF8 = 13,       /* like binary, every value valid UTF-8 (Arrow "u") */
    SB_TYPE_FIXED_LIST = 14, /* `list_size` values of a numeric child type per row (tensors) */
} sb_type;

/* A logical type on top of a physical one: what the integers mean (kept so that a source's
 * DATE/TIMESTAMP columns come out of a sink as the same type). Stored in the blob: never
 * renumber. Zero (none) is what every field built with a designated initializer gets. */
typedef enum sb_logical {
    SB_LOGICAL_NONE = 0,
    SB_LOGICAL_DATE = 1,      /* int32 days since 1970-01-01 */
    SB_LOGICAL_TS_MILLIS = 2, /* int64 milliseconds since the epoch */
    SB_LOGICAL_TS_MICROS = 3, /* int64 microseconds since the epoch */
    SB_LOGICAL_TS_NANOS = 4,  /* int64 nanoseconds since the epoch */
} sb_logical;

/* A column's description, given to the builder. `child_type` (a numeric type: INT8..FLOAT64)
 * and `list_size` (>= 1) are used only by SB_TYPE_FIXED_LIST and must be 0 otherwise. */
typedef struct sb_field {
    const char *name; /* UTF-8, at most SB_PART_MAX_NAME bytes; copied by the builder */
    sb_type type;
    sb_type child_type;
    uint32_t list_size;
    bool nullable;
    sb_logical logical; /* 0, or DATE on INT32 / TS_* on INT64 (else the builder refuses it) */
} sb_field;

/* A read-only view of one column of an opened batch; every pointer points into the blob. */
typedef struct sb_column {
    const char *name; /* NUL-terminated, inside the blob */
    size_t name_len;
    sb_type type;
    sb_type child_type; /* fixed-size list only */
    uint32_t list_size; /* fixed-size list only */
    bool nullable;
    sb_logical logical;      /* what the values mean (DATE/TIMESTAMP) or SB_LOGICAL_NONE */
    size_t length;           /* rows */
    size_t null_count;       /* 0 when validity is NULL */
    const uint8_t *validity; /* LSB-first bitmap, 1 = valid; NULL when there are no nulls */
    const int32_t *offsets;  /* binary/utf8: length+1 offsets, offsets[0] == 0 */
    const void *values;      /* fixed width: the values; bool: bitmap; binary/utf8: the bytes;
                                fixed-size list: length*list_size child values */
    size_t values_len;       /* bytes at `values` */
} sb_column;

/* ---- types ---------------------------------------------------------------------------- */

/* "int64", "utf8", "fixed_list", ...; "?" for an unknown value. */
const char *sb_type_name(sb_type t);

/* Bytes per value of a fixed-width numeric type, 0 for bool/binary/utf8/fixed list/unknown. */
size_t sb_type_width(sb_type t);

/* Parses a type name from sb_type_name(); 0 when unknown. */
sb_type sb_type_parse(const char *name);

/* "date", "timestamp[ms]", "timestamp[us]", "timestamp[ns]"; "" for none, "?" when unknown. */
const char *sb_logical_name(sb_logical l);

/* NULL when `logical` may sit on physical type `type` (none on anything, DATE on INT32,
 * TS_* on INT64), else why not. */
const char *sb_logical_problem(unsigned logical, unsigned type);

/* ---- builder -------------------------------------------------------------------------- */

/* A builder for batches with these columns (nfields may be 0 only for a row-count-only batch,
 * which is rarely useful). NULL + err when a field is invalid (bad type, list width, name). */
sb_batch_builder *sb_batch_builder_new(const sb_field *fields, size_t nfields, sb_err *err);

/* The field that describes column `c` (name, types, width, nullability, logical type), for a
 * builder that copies or rebuilds the column: every place that passes columns on uses it, so
 * that nothing about a column is dropped on the way. The name still points into c's batch. */
sb_field sb_field_of(const sb_column *c);

/* A builder for batches with the same schema as an opened batch. */
sb_batch_builder *sb_batch_builder_new_like(const sb_batch *b, sb_err *err);

void sb_batch_builder_free(sb_batch_builder *b);

size_t sb_batch_builder_ncols(const sb_batch_builder *b);

/* Index of the first column with this name, or -1. */
int sb_batch_builder_find(const sb_batch_builder *b, const char *name);

/* Rows that every column has (the finished batch's row count once all columns agree). */
size_t sb_batch_builder_rows(const sb_batch_builder *b);

/* Values appended so far to one column. */
size_t sb_batch_builder_col_length(const sb_batch_builder *b, size_t col);

/* Exact size in bytes of the blob sb_batch_builder_finish() would produce now. O(columns). */
size_t sb_batch_builder_bytes(const sb_batch_builder *b);

/* Pre-sizes a column for `values` more values and (binary/utf8) `data_bytes` more bytes. */
int sb_batch_builder_reserve(sb_batch_builder *b, size_t col, size_t values, size_t data_bytes,
                             sb_err *err);

/* Appends one value to column `col`. Every call checks that the column exists and has a type
 * the value converts to exactly (no implicit conversion):
 *   int: INT8..UINT64 (the value must be in the type's range)   double: FLOAT32/FLOAT64
 *   bool: BOOL   binary: BINARY or UTF8 (UTF-8 is validated)   list: FIXED_LIST, `n` child
 *   values of the child type (n must equal the list width). */
int sb_batch_builder_append_null(sb_batch_builder *b, size_t col, sb_err *err);
int sb_batch_builder_append_int(sb_batch_builder *b, size_t col, int64_t v, sb_err *err);
int sb_batch_builder_append_uint(sb_batch_builder *b, size_t col, uint64_t v, sb_err *err);
int sb_batch_builder_append_double(sb_batch_builder *b, size_t col, double v, sb_err *err);
int sb_batch_builder_append_bool(sb_batch_builder *b, size_t col, bool v, sb_err *err);
int sb_batch_builder_append_binary(sb_batch_builder *b, size_t col, const void *p, size_t n,
                                   sb_err *err);
int sb_batch_builder_append_list(sb_batch_builder *b, size_t col, const void *values, size_t n,
                                 sb_err *err);

/* Appends rows [first, first+n) of `src`, a binary or utf8 column whose offsets are valid (as
 * sb_batch_open() checks them), to the binary/utf8 column `col`: the bytes in one copy, the
 * offsets rebased, nulls kept. UTF-8 is validated when `col` is utf8 and either `verify` is set
 * or src is binary; with verify false a utf8 src is trusted (a column of a batch that
 * sb_batch_open() validated, or that a builder made). All-or-nothing when one check covers the
 * range (no nulls); the error names the row. */
int sb_batch_builder_append_range(sb_batch_builder *b, size_t col, const sb_column *src,
                                  size_t first, size_t n, bool verify, sb_err *err);

/* Appends `n` values to a fixed-width column in its native representation: numeric types and
 * fixed-size lists take n*width bytes (a list row is list_size child values); BOOL takes one
 * byte per value (nonzero = true). `validity` is NULL (all valid) or an LSB-first bitmap of n
 * bits (1 = valid); a null's value bytes are stored as given. */
int sb_batch_builder_append_values(sb_batch_builder *b, size_t col, const void *values, size_t n,
                                   const uint8_t *validity, sb_err *err);
/* Like append_values, but to an empty fixed-width (not bool) column the values are lent, not
 * copied: the builder reads them when it finishes (the one copy, into the blob), so they must
 * stay unchanged until then (or until the builder is reset, truncated to 0 or freed). Anything
 * else that touches the column first copies them in. Another column or a non-empty one: copied
 * as by append_values. */
int sb_batch_builder_lend_values(sb_batch_builder *b, size_t col, const void *values, size_t n,
                                 const uint8_t *validity, sb_err *err);

/* Fast path for line-oriented sources (text, jsonl): splits buf[0..len) at '\n' and appends
 * each complete line (without the '\n', and without a preceding '\r' when strip_cr) as one value
 * of a BINARY/UTF8 column. A trailing line without '\n' is appended only when `final`;
 * otherwise it is left for the next call. *consumed receives the bytes used. All-or-nothing: on
 * error (invalid UTF-8, names the line) nothing is appended. */
int sb_batch_builder_append_lines(sb_batch_builder *b, size_t col, const void *buf, size_t len,
                                  bool strip_cr, bool final, size_t *consumed, sb_err *err);

/* The same with strip_cr, skipping blank lines: empty, or only spaces, tabs and '\r' (jsonl
 * records); the check costs one byte compare per line that starts with anything else. */
int sb_batch_builder_append_nonblank_lines(sb_batch_builder *b, size_t col, const void *buf,
                                           size_t len, bool final, size_t *consumed, sb_err *err);

/* Drops every value past `rows` in every column (e.g. to undo a half-appended row). Columns
 * shorter than `rows` are left alone. */
void sb_batch_builder_truncate(sb_batch_builder *b, size_t rows);

/* Forgets every value (capacity is kept for the next batch). */
void sb_batch_builder_reset(sb_batch_builder *b);

/* Serializes the batch into a new blob (64-byte aligned, *len_out bytes, caller frees it with
 * sb_part_free()) and resets the builder for the next batch, keeping its capacity. Fails when
 * the columns have different lengths or a binary column holds more than 2 GiB (int32 offsets);
 * the builder is then unchanged. */
int sb_batch_builder_finish(sb_batch_builder *b, void **blob_out, size_t *len_out, sb_err *err);

/* For a builder of exactly one binary/utf8 column: from now on its values are written where the
 * blob will hold them, after room for the header and up to max_rows offsets, so that finishing
 * a batch of at most max_rows rows without nulls copies only the offsets (the values' memory
 * becomes the blob, 64-byte aligned, freed with sb_part_free(); the builder allocates anew for
 * the next batch). Larger batches, or ones with a null, are finished by copying as usual.
 * sb_batch_builder_bytes() stays exact. Discards what the builder holds. -1 + err when the
 * builder has another schema. */
int sb_batch_builder_build_in_place(sb_batch_builder *b, size_t max_rows, sb_err *err);

/* Hands back a blob this builder finished in place, no longer needed, as the values buffer of
 * its next batch (no rows appended since), instead of allocating one: an op that cuts and
 * frees its held rows over and over (sort's runs) then allocates once, where a new buffer per
 * cut left holes that smaller blocks split, and the heap grew with every cut. Any other blob
 * (a copy, an older one, NULL) is freed. The builder owns blob from now on. */
void sb_batch_builder_recycle(sb_batch_builder *b, void *blob);

/* Like finish, but both checksums are left 0 (computing them is a pass over the whole blob): for
 * a blob that stays in this process and is opened with SB_BATCH_OPEN_SKIP_CHECKSUM, e.g. handed
 * from one operator to the next inside a task. sb_part_seal() makes it a normal blob. */
int sb_batch_builder_finish_unsealed(sb_batch_builder *b, void **blob_out, size_t *len_out,
                                     sb_err *err);

/* Like finish, into a caller buffer of `cap` bytes (>= sb_batch_builder_bytes(); should be
 * 64-byte aligned so that the opened columns are). */
int sb_batch_builder_finish_into(sb_batch_builder *b, void *dst, size_t cap, size_t *len_out,
                                 sb_err *err);

/* Both: into a caller buffer, checksums left 0. */
int sb_batch_builder_finish_into_unsealed(sb_batch_builder *b, void *dst, size_t cap,
                                          size_t *len_out, sb_err *err);

/* Allocates `n` bytes aligned to SB_PART_ALIGN (n is rounded up to a multiple of it); NULL on
 * allocation failure. Free with sb_part_free(). */
void *sb_part_alloc(size_t n);

/* Frees a blob from sb_batch_builder_finish(), sb_part_alloc() or the chunk assembler. */
void sb_part_free(void *blob);

/* ---- reader --------------------------------------------------------------------------- */

/* Open flags. */
#define SB_BATCH_OPEN_SKIP_CHECKSUM                                                                \
    1u                             /* trust the bytes (e.g. every transfer chunk's crc was         \
                                      verified); structure is still fully validated */
#define SB_BATCH_OPEN_SKIP_UTF8 2u /* do not validate utf8 columns' contents */

/* Validates blob[0..len) completely (see the layout above; checksums, every buffer within the
 * blob, sizes consistent with the row count, utf8/binary offsets, null counts, UTF-8) and
 * returns a view into it. `blob` must be 8-byte aligned (blobs from this module are 64-byte
 * aligned). Never reads outside blob[0..len). -1 + err naming the problem otherwise. */
int sb_batch_open(const void *blob, size_t len, sb_batch **out, sb_err *err);
int sb_batch_open_ex(const void *blob, size_t len, unsigned flags, sb_batch **out, sb_err *err);

/* Frees the view (not the blob). NULL is fine. */
void sb_batch_close(sb_batch *b);

size_t sb_batch_rows(const sb_batch *b);
size_t sb_batch_ncols(const sb_batch *b);
const void *sb_batch_blob(const sb_batch *b);
size_t sb_batch_blob_len(const sb_batch *b);

/* Column `col` (< sb_batch_ncols()), or NULL when out of range. */
const sb_column *sb_batch_column(const sb_batch *b, size_t col);

/* Index of the first column with this name, or -1. */
int sb_batch_find(const sb_batch *b, const char *name);

/* Reads just the fixed header's sizes (magic, version, total length, row count) from the first
 * `n` bytes of a blob (n >= 16 suffices for the total length; rows needs 24). -1 + err on a bad
 * magic/version or a total length that cannot be a blob. rows_out may be NULL. */
int sb_part_peek(const void *p, size_t n, uint64_t *total_out, uint64_t *rows_out, sb_err *err);

/* Recomputes both checksums of a writable blob in place, e.g. after an operator modified
 * fixed-width values where they lie. The header must be structurally sound (sizes in range). */
int sb_part_seal(void *blob, size_t len, sb_err *err);

/* ---- value access (no bounds checks: row < length, col of the right type) ----------------- */

static inline bool sb_column_valid(const sb_column *c, size_t row)
{
    return c->validity == NULL || ((c->validity[row >> 3] >> (row & 7)) & 1) != 0;
}

static inline const void *sb_column_binary(const sb_column *c, size_t row, size_t *len)
{
    int32_t s = c->offsets[row];
    *len = (size_t)(c->offsets[row + 1] - s);
    /* a column whose values are all empty or null may have no bytes at all (values NULL), and
     * even NULL + 0 is undefined in C */
    return c->values == NULL ? NULL : (const uint8_t *)c->values + s;
}

static inline bool sb_column_bool(const sb_column *c, size_t row)
{
    return ((((const uint8_t *)c->values)[row >> 3] >> (row & 7)) & 1) != 0;
}

static inline int64_t sb_column_int64(const sb_column *c, size_t row)
{
    return ((const int64_t *)c->values)[row];
}

static inline double sb_column_float64(const sb_column *c, size_t row)
{
    return ((const double *)c->values)[row];
}

static inline float sb_column_float32(const sb_column *c, size_t row)
{
    return ((const float *)c->values)[row];
}

/* Any integer column's value at `row`, converted (UINT64 above INT64_MAX wraps). */
int64_t sb_column_int(const sb_column *c, size_t row);

/* Any numeric column's value at `row` as a double. */
double sb_column_double(const sb_column *c, size_t row);

/* Row `row` of a fixed-size list: list_size child values. */
static inline const void *sb_column_list(const sb_column *c, size_t row)
{
    return (const uint8_t *)c->values + row * c->list_size * sb_type_width(c->child_type);
}

#endif
