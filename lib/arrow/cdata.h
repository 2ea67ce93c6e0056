/* cdata.h — exporting an opened partition batch (partition.h) through the Apache Arrow C Data
 * Interface, so plugins and other Arrow-speaking code read the columns with zero copies.
 *
 * The batch is exported as a struct-typed array ("+s") whose children are the columns, in
 * order, with the column names as field names. Types map to Arrow formats: bool "b", int8..64
 * "c" "s" "i" "l", uint8..64 "C" "S" "I" "L", float32 "f", float64 "g", binary "z", utf8 "u",
 * fixed-size list "+w:N" with one child "item". The structs are the Arrow specification's,
 * defined once in api/plugin/streambatch_plugin.h (its ARROW_C_DATA_INTERFACE guard lets them
 * coexist with Arrow's own headers).
 *
 * Memory: sb_batch_export() fills two caller-provided structs. Each has its own release
 * callback, which the consumer calls when done (as the spec requires); until then the exported
 * array's buffers point into the blob, so the BLOB must stay alive and unchanged until the
 * array is released. The sb_batch itself may be closed right after exporting.
 */
#ifndef SB_ARROW_CDATA_H
#define SB_ARROW_CDATA_H

#include <stdint.h>

#include "core/err.h"
#include "partition/partition.h"

/* struct ArrowSchema / ArrowArray: defined once, in the public plugin ABI header. */
#include "api/plugin/streambatch_plugin.h"

/* The Arrow format string of a column type ("l", "u", ...; fixed lists: "+w:<n>" written into
 * buf, which must hold 16 bytes). NULL for an unknown type. */
const char *sb_arrow_format(sb_type t, uint32_t list_size, char buf[16]);

/* Exports batch b. Either output may be NULL to skip it. On failure nothing needs releasing. */
int sb_batch_export(const sb_batch *b, struct ArrowSchema *schema, struct ArrowArray *array,
                    sb_err *err);

/* ---- importing -------------------------------------------------------------------------- */

/* A struct array ("+s") from elsewhere (a plugin's output) seen as partition columns: `cols`
 * describe its children with pointers into the array's buffers (valid while the array is), ready
 * for copying into a partition (worker/ops: sb_op_out_append_columns); `fields` is the matching
 * schema. Accepts the formats listed above with their standard buffers, any offsets (bitmaps at
 * offsets that are not a multiple of 8 are copied, shifted, into memory of the view); refuses
 * dictionaries, other nested types, nulls at the struct level, negative lengths, and binary
 * offsets that decrease. Checked values are as trustworthy as the producer: a buffer shorter
 * than its length says cannot be detected through this interface. */
typedef struct sb_arrow_view {
    size_t ncols, rows;
    sb_field *fields; /* ncols; names point into the schema */
    sb_column *cols;  /* ncols */
    void **scratch;   /* owned copies of shifted bitmaps */
    size_t nscratch;
} sb_arrow_view;

int sb_arrow_view_open(const struct ArrowSchema *schema, const struct ArrowArray *array,
                       sb_arrow_view *v, sb_err *err);
void sb_arrow_view_close(sb_arrow_view *v);

#endif
