/* thrift.h — the Thrift compact protocol, as much of it as Parquet's footer and page headers
 * use: a bounds-checked reader over a byte range (field headers, zigzag varints, binaries,
 * lists, skipping unknown fields with a nesting limit) and a small writer (for the Parquet
 * writer and for tests that build metadata by hand).
 *
 * Reading never reads outside [p, end): every primitive checks the bytes left first, and a
 * failure latches `bad` with a message, so a caller may decode a whole struct and check once.
 * Memory: the reader borrows the caller's bytes (binaries point into them); the writer appends
 * to a malloc'd buffer the caller frees with sb_tc_wbuf_free(). No global state.
 */
#ifndef SB_PARQUET_THRIFT_H
#define SB_PARQUET_THRIFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Compact protocol type ids (the low nibble of a field header). */
enum {
    SB_TC_STOP = 0,
    SB_TC_TRUE = 1,
    SB_TC_FALSE = 2,
    SB_TC_BYTE = 3,
    SB_TC_I16 = 4,
    SB_TC_I32 = 5,
    SB_TC_I64 = 6,
    SB_TC_DOUBLE = 7,
    SB_TC_BINARY = 8,
    SB_TC_LIST = 9,
    SB_TC_SET = 10,
    SB_TC_MAP = 11,
    SB_TC_STRUCT = 12,
};

#define SB_TC_MAX_DEPTH 32 /* nested structs/containers accepted (skip and decode) */

typedef struct sb_tc_reader {
    const uint8_t *p, *end;
    const uint8_t *start;
    bool bad;
    char msg[160]; /* the first problem, with its byte offset from `start` */
} sb_tc_reader;

void sb_tc_init(sb_tc_reader *r, const void *p, size_t n);

/* Offset of the read position from the start. */
size_t sb_tc_pos(const sb_tc_reader *r);

/* Latches an error (the first one is kept); returns false. */
bool sb_tc_fail(sb_tc_reader *r, const char *what);

/* Reads a field header inside a struct: *id and *type; *type == SB_TC_STOP at the struct's end.
 * *last is the previous field id of this struct (0 at its start), updated. false on error. */
bool sb_tc_field(sb_tc_reader *r, int16_t *last, int16_t *id, uint8_t *type);

uint64_t sb_tc_varint(sb_tc_reader *r);
int64_t sb_tc_i64(sb_tc_reader *r); /* zigzag varint */
int32_t sb_tc_i32(sb_tc_reader *r); /* zigzag varint, range-checked */
int8_t sb_tc_byte(sb_tc_reader *r);
double sb_tc_double(sb_tc_reader *r);
/* A binary/string: *n bytes at the returned pointer (inside the input); NULL on error. */
const uint8_t *sb_tc_binary(sb_tc_reader *r, size_t *n);
/* A list/set header: element type and count; the count is checked against the bytes left
 * (each element takes at least one byte, except bools in lists). */
bool sb_tc_list(sb_tc_reader *r, uint8_t *elem_type, size_t *count);

/* Skips a value of this type (a field's value, or a container element); depth-limited. */
bool sb_tc_skip(sb_tc_reader *r, uint8_t type);
/* Skips the rest of a struct whose fields are all unknown. */
bool sb_tc_skip_struct(sb_tc_reader *r);

/* Reads a field value of type `type` as an integer (bools, bytes, i16, i32, i64); false when
 * the type is not an integer type. */
bool sb_tc_int_field(sb_tc_reader *r, uint8_t type, int64_t *out);

/* ---- writer ---------------------------------------------------------------------------- */

typedef struct sb_tc_wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
    int16_t last[SB_TC_MAX_DEPTH]; /* previous field id per struct level */
    int depth;
} sb_tc_wbuf;

void sb_tc_wbuf_free(sb_tc_wbuf *w);
void sb_tc_w_field(sb_tc_wbuf *w, int16_t id, uint8_t type);
void sb_tc_w_varint(sb_tc_wbuf *w, uint64_t v);
void sb_tc_w_zigzag(sb_tc_wbuf *w, int64_t v);
void sb_tc_w_binary(sb_tc_wbuf *w, const void *p, size_t n);
void sb_tc_w_list(sb_tc_wbuf *w, uint8_t elem_type, size_t n);
void sb_tc_w_struct_begin(sb_tc_wbuf *w); /* after a field header or list header */
void sb_tc_w_struct_end(sb_tc_wbuf *w);   /* writes STOP */
/* Convenience: a whole i32/i64/binary/bool field. */
void sb_tc_w_i32(sb_tc_wbuf *w, int16_t id, int32_t v);
void sb_tc_w_i64(sb_tc_wbuf *w, int16_t id, int64_t v);
void sb_tc_w_str(sb_tc_wbuf *w, int16_t id, const void *p, size_t n);
void sb_tc_w_bool(sb_tc_wbuf *w, int16_t id, bool v);

#endif
