/* decomp.h — compressed text inputs: jsonl, csv and text files read through a streaming
 * decompressor (issue 39, "Compressed inputs").
 *
 * Which files: a source's args.compression ("auto", the default; "none", "gzip" or "zstd")
 * names the codec of every file; under "auto" a file whose name ends in .gz/.gzip is gzip and
 * .zst/.zstd is zstd (for an http(s) URI, the name before its '?' query counts). A compressed
 * file cannot be cut at a byte offset, so the planner makes it one split (split.c) and the reader
 * decompresses it from its first byte as one stream (reader.c); nothing is ever held whole.
 *
 * Streams: gzip members may be concatenated (as `cat a.gz b.gz` makes, and as pigz/bgzip write),
 * zlib-wrapped data is accepted too; zstd frames may be concatenated, skippable frames skipped.
 * Corrupt or truncated data, or bytes after the last member that are not another member, is a
 * data error naming the compressed byte offset where decoding stopped.
 *
 * Memory: sb_io_dec_new() returns a decoder the caller frees with sb_io_dec_free(); it owns the
 * codec's state (zlib: ~300 KiB for the window and tables; zstd: up to the frame's window, which
 * is bounded by SB_IO_ZSTD_MAX_WINDOW_LOG so a hostile header cannot ask for gigabytes).
 */
#ifndef SB_IO_DECOMP_H
#define SB_IO_DECOMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum { SB_IO_CODEC_NONE = 0, SB_IO_CODEC_GZIP, SB_IO_CODEC_ZSTD } sb_io_codec;

/* A zstd frame asking for a window past 2^27 bytes (128 MiB, zstd's own default limit) is
 * refused rather than allocated. */
#define SB_IO_ZSTD_MAX_WINDOW_LOG 27

/* Reads args.compression from a source's args (JSON object text, NULL for none): *out is -1 for
 * absent or "auto" (by file name), else the codec. -1 + err for another value or type. */
int sb_io_compression_arg(const char *args_json, int *out, sb_err *err);

/* The codec of the file at path under the compression argument arg (sb_io_compression_arg). */
sb_io_codec sb_io_codec_for(int arg, const char *path);

/* "gzip", "zstd" or "none". */
const char *sb_io_codec_name(sb_io_codec c);

typedef struct sb_io_dec sb_io_dec;

/* A decoder for codec c (not NONE), or NULL + err (out of memory). `what` names the file in
 * errors (copied). */
sb_io_dec *sb_io_dec_new(sb_io_codec c, const char *what, sb_err *err);

/* Decodes from in[0..in_len) into out[0..out_cap): *in_used bytes taken, *out_len bytes made.
 * Call again with the rest of the input (and more) until it makes nothing; a call may make
 * output without taking input (pending output). 0, or -1 + err (a data error naming the file
 * and the compressed byte offset). */
int sb_io_dec_step(sb_io_dec *d, const void *in, size_t in_len, size_t *in_used, void *out,
                   size_t out_cap, size_t *out_len, sb_err *err);

/* After the whole input went through sb_io_dec_step and the last call made nothing: 0 when
 * the input ended at the end of a member/frame, -1 + err (truncated) otherwise. */
int sb_io_dec_finish(sb_io_dec *d, sb_err *err);

/* Compressed bytes taken so far. */
uint64_t sb_io_dec_in_total(const sb_io_dec *d);

void sb_io_dec_free(sb_io_dec *d);

#endif
