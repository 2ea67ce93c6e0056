/* imgread.h — the `image` source format: each JPEG or PNG object of the source is one record,
 * decoded (lib/image) into one partition with the columns
 *     path      utf8       the object's path or URI
 *     image     fixed-size list of uint8, height * width * channels values (HWC, row-major)
 *     height, width, channels   int32
 * One object is one partition, never cut by range (small objects share a split: split.h, each
 * read alone by sb_io_read_image); partitions of different images have different list widths,
 * which the operators accept (image.resize makes them equal).
 *
 * Format args (args_json, all optional): channels (1, 3 or 4; default 3: gray is expanded,
 * alpha composited onto black), maxPixels (width x height bound, default
 * SB_IMAGE_DEFAULT_MAX_PIXELS, at most SB_IO_IMAGE_MAX_PIXELS), maxRecordSize (largest object
 * read, bytes; default 4x the partition size, at least 1 MiB), draft ({width, height}: decode
 * each JPEG at the smallest DCT scale, 1/8 to 1, that keeps it at least that size, as Pillow's
 * Image.draft(); for a downscaling resize that follows; off by default). An object over
 * maxRecordSize, an unknown format, a decompression bomb, a truncated or corrupt file is a data
 * error naming the object: its partition is errored (execution.maxErroredPartitions), never a
 * crash.
 *
 * Memory: the object is read whole into one buffer (bounded by maxRecordSize), freed before
 * return; the emitted blob belongs to the callback (reader.h's contract).
 */
#ifndef SB_IO_IMGREAD_H
#define SB_IO_IMGREAD_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "io/reader.h"
#include "io/split.h"

#define SB_IO_IMAGE_MAX_PIXELS ((uint64_t)1 << 29)

/* Options of the image format parsed from args_json ("what" prefixes messages). */
typedef struct sb_io_image_opts {
    unsigned channels;
    uint64_t max_pixels;
    uint32_t draft_w, draft_h; /* args.draft: decode JPEGs reduced to at least this size; 0: off */
} sb_io_image_opts;
int sb_io_image_opts_parse(const char *args_json, const char *what, sb_io_image_opts *o,
                           sb_err *err);

/* Reads and decodes the whole object of `split` (which must cover it: start 0, end file_size). */
int sb_io_read_image(const sb_io_split *split, const char *args_json, size_t target_bytes,
                     sb_io_emit_fn emit, void *ud, sb_err *err);

#endif
