/* common.h — helpers shared by the storage code (split.c, reader.c, sink.c, file.c): which
 * formats the reader and writer handle, the binary format's recordSize and the record size
 * limit from the format args, and full reads and writes of file descriptors.
 *
 * Memory: nothing here allocates memory that outlives a call.
 */
#ifndef SB_IO_COMMON_H
#define SB_IO_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"
#include "spec/pipeline.h"

/* Size of the buffers of large reads and writes. */
#define SB_IO_BUF_SIZE ((size_t)4 << 20)

/* Largest binary record: values of a partition column have int32 offsets. */
#define SB_IO_MAX_RECORD_SIZE ((uint64_t)1 << 30)

/* 0 when fmt is jsonl, csv, text or binary; -1 + err (naming `what`) otherwise. */
int sb_io_check_format(sb_format fmt, const char *what, int is_sink, sb_err *err);

/* The binary format's recordSize from args_json (a JSON object or NULL). When `required` and
 * it is absent: error; when not required and absent: *out = 0. It must be an integer in
 * [1, SB_IO_MAX_RECORD_SIZE]. `what` prefixes messages. */
int sb_io_record_size(const char *args_json, int required, const char *what, uint64_t *out,
                      sb_err *err);

/* The longest record the line reader accepts for a source (args.maxRecordSize when set, else
 * 4x the target partition size but at least 1 MiB), at most SB_IO_MAX_LINE. A record
 * larger than the budget can see must fail clearly, not grow the worker's memory unseen. */
#define SB_IO_MAX_LINE ((size_t)1 << 30)
int sb_io_max_record(const char *args_json, size_t target_bytes, const char *what, size_t *out,
                     sb_err *err);

/* Writes all n bytes (retrying short writes and EINTR). 0, or -1 with errno set. */
int sb_io_write_all(int fd, const void *p, size_t n);

/* Reads up to n bytes at offset `off` (retrying short reads and EINTR until n bytes or end of
 * file). The number of bytes read, or -1 with errno set. */
ssize_t sb_io_pread_full(int fd, void *p, size_t n, uint64_t off);

#endif
