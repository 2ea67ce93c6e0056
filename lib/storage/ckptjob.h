/* ckptjob.h — the checkpoint log's storage jobs (CKPT_PUT, CKPT_LOAD, CKPT_REMOVE in jobs.h): the
 * file I/O of the operator's checkpoint log (controller/ctl/ckptlog.h), run ON A WORKER, since
 * the controller holds no storage credentials. The log lives beside the sink, in
 * sb_storage_ckpt_dir(): "<sink>/_streambatch/checkpoint" (a directory on file sinks, a prefix
 * on S3). The worker knows nothing of the log's format: it writes, lists, reads and removes
 * whole files by name; the controller encodes, decodes and checks them.
 *
 *   PUT     writes each file whole (sb_io_put: a reader sees the old object or the new one),
 *           makes them durable (sb_io_sync), then with `prune` removes every other file of
 *           the directory (a compaction's older generations, a foreign log's files) but the
 *           pieces of the job's files ("<stem>-*.<ext>" beside "<stem>.<ext>": the chunks of a
 *           large base, which earlier jobs wrote).
 *   LOAD    reads every file of the directory whose name does not start with '.' (the file
 *           backend's temporaries), sorted by name; a missing directory holds none.
 *   REMOVE  removes every file of the directory (and, on a file sink, the emptied directory
 *           and its "_streambatch" parent).
 *
 * File names are checked on the worker ([A-Za-z0-9_-][A-Za-z0-9._-]*, at most 128 bytes), so a
 * job can never name anything outside the directory.
 *
 * Memory: sb_storage_ckpt_load() fills an sb_storage_files the caller frees with
 * sb_storage_files_free(); the rest is borrowed for the call.
 */
#ifndef SB_STORAGE_CKPTJOB_H
#define SB_STORAGE_CKPTJOB_H

#include <stddef.h>

#include "core/err.h"
#include "spec/pipeline.h"

#define SB_STORAGE_CKPT_SUBDIR "_streambatch/checkpoint"
#define SB_STORAGE_CKPT_MAX_BYTES ((size_t)1 << 30) /* a LOAD reads at most this much */

/* One file of the log: name and data (data[len] is a NUL where the module made it). */
typedef struct sb_storage_file {
    char *name;
    char *data;
    size_t len;
} sb_storage_file;

typedef struct sb_storage_files {
    sb_storage_file *v;
    size_t n, cap;
} sb_storage_files;

/* The log's directory for p's sink (malloc'd), or NULL + err. */
char *sb_storage_ckpt_dir(const sb_pipeline *p, sb_err *err);
/* 1 when name is a valid file name of the log (see above), else 0. */
int sb_storage_ckpt_name_ok(const char *name);

/* Appends a copy of (name, data[0..len)) to fs, NUL-terminated. 0, or -1 + err. */
int sb_storage_files_add(sb_storage_files *fs, const char *name, const char *data, size_t len,
                         sb_err *err);
void sb_storage_files_free(sb_storage_files *fs);

/* PUT: files[0..n) into dir, then (prune) removes the directory's other files. 0, or -1 + err
 * naming the file. */
int sb_storage_ckpt_put(const sb_pipeline *p, const sb_storage_file *files, size_t n, int prune,
                        sb_err *err);
/* LOAD: every file of the log into *out (zeroed first). 0, or -1 + err. */
int sb_storage_ckpt_load(const sb_pipeline *p, sb_storage_files *out, sb_err *err);
/* REMOVE: 0, or -1 + err. */
int sb_storage_ckpt_remove(const sb_pipeline *p, sb_err *err);

#endif
