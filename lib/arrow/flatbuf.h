/* flatbuf.h — the FlatBuffers wire format, just enough of it for Arrow IPC metadata (ipc.c):
 * a writer that lays tables, vectors and strings out front to back, and a reader that checks
 * every offset, size and alignment before it reads, so hostile bytes give an error, never an
 * out-of-bounds read. No schema compiler: callers name fields by their id in the .fbs file.
 *
 * Format (flatbuffers.dev, "Internals"): little-endian; a buffer starts with a u32 offset to its
 * root table; a table starts with an i32 that, subtracted from the table's position, gives its
 * vtable: u16 vtable size, u16 table size, then one u16 per field id (the field's offset inside
 * the table, 0 = absent, the reader uses the default). Offsets to tables, vectors and strings
 * are u32, relative to where they are stored, and point forward. A vector is a u32 count
 * followed by its elements (u32 offsets for tables and strings, inline for structs); a string
 * is a u32 byte count, the bytes, then a NUL.
 *
 * Writer: sb_fbw_table() writes a table's vtable and fields at once; a field that refers to
 * another object gets a slot (its position) that sb_fbw_ref() later points at the object written
 * next. Alignment is relative to the buffer's start, which must itself be 8-aligned wherever the
 * buffer ends up. Memory: the sb_fbw owns its bytes (p) until sb_fbw_free(); an allocation
 * failure sets `oom` and turns later calls into no-ops, checked once at the end.
 *
 * Reader: an sb_fbr over caller-owned bytes (not copied, must outlive it). Accessors return the
 * default for an absent field and set `bad` (a static message) on the first violation; later
 * calls return defaults, so callers check `bad` once after a group of reads.
 */
#ifndef SB_ARROW_FLATBUF_H
#define SB_ARROW_FLATBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- writing ---------------------------------------------------------------------------- */

typedef struct sb_fbw {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} sb_fbw;

/* One field of a table being written: its size in bytes (1, 2, 4 or 8; 0 = absent) and value.
 * A reference field (to a table, vector or string written later) has size 4 and ref true. */
typedef struct sb_fb_field {
    uint8_t size;
    bool ref;
    uint64_t value;
} sb_fb_field;

/* Starts a buffer: the root offset slot. Returns that slot (for sb_fbw_ref). */
size_t sb_fbw_begin(sb_fbw *w);
/* Writes a table whose field i is f[i]; slot[i] (when slot is not NULL) receives the position
 * of each reference field. Returns the table's position. */
size_t sb_fbw_table(sb_fbw *w, const sb_fb_field *f, size_t n, size_t *slot);
/* Stores in `slot` the offset to `target`, an object written after it (every writer below
 * aligns itself and returns the position to pass here). */
void sb_fbw_ref_to(sb_fbw *w, size_t slot, size_t target);
/* A vector of n references, to be set with sb_fbw_ref_to(); returns its position (the slot of
 * element i is at position + 4 + 4*i). */
size_t sb_fbw_ref_vector(sb_fbw *w, size_t n);
/* A vector of n structs of `size` bytes each, aligned to 8. Returns its position. */
size_t sb_fbw_struct_vector(sb_fbw *w, const void *items, size_t n, size_t size);
/* A string; returns its position. */
size_t sb_fbw_string(sb_fbw *w, const char *s, size_t n);
/* Pads with zeros to a multiple of align. */
void sb_fbw_pad(sb_fbw *w, size_t align);
void sb_fbw_free(sb_fbw *w);

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct sb_fbr {
    const uint8_t *b;
    size_t n;
    const char *bad; /* first violation, NULL while all is well */
} sb_fbr;

/* A table located and checked; pos == 0 means absent (0 is never a table's position). */
typedef struct sb_fbt {
    size_t pos, vt;
    uint16_t vsize, tsize;
} sb_fbt;

/* The root table (absent + bad when the buffer cannot hold one). */
sb_fbt sb_fbr_root(sb_fbr *r);
uint8_t sb_fbr_u8(sb_fbr *r, sb_fbt t, unsigned id, uint8_t def);
int16_t sb_fbr_i16(sb_fbr *r, sb_fbt t, unsigned id, int16_t def);
int32_t sb_fbr_i32(sb_fbr *r, sb_fbt t, unsigned id, int32_t def);
int64_t sb_fbr_i64(sb_fbr *r, sb_fbt t, unsigned id, int64_t def);
/* The table a reference field points to (absent when the field is). */
sb_fbt sb_fbr_table(sb_fbr *r, sb_fbt t, unsigned id);
/* The vector a reference field points to: its element count in *count and the position of its
 * first element (0 when absent). elem is the element size (4 for references). */
size_t sb_fbr_vector(sb_fbr *r, sb_fbt t, unsigned id, size_t elem, size_t *count);
/* Element i of a vector of references (at `at`, from sb_fbr_vector) as a table. */
sb_fbt sb_fbr_table_at(sb_fbr *r, size_t at, size_t i);
/* A string field: its bytes (not NUL-terminated for the caller's purposes) and length. NULL when
 * absent. */
const char *sb_fbr_string(sb_fbr *r, sb_fbt t, unsigned id, size_t *len);
/* Little-endian loads from the buffer (the caller checked bounds). */
int64_t sb_fbr_load_i64(const sb_fbr *r, size_t at);

#endif
