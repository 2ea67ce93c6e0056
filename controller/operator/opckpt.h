/* opckpt.h — a Pipeline's checkpoint on Kubernetes: the checkpoint log (ctl/ckptlog.h) beside
 * the sink, <sink>/_streambatch/checkpoint, written and read by worker pods as storage jobs
 * (storage/ckptjob.h), since the controller holds no storage credentials. status.checkpoint
 * keeps only the log's summary (sb_ckptlog_summary_json plus "lastWrite"), a few hundred bytes
 * at any number of sink parts.
 *
 * Writing. Every sb_opckpt_tick (at most once a batch interval, and never while the last write
 * is in flight) encodes what was committed since the last write (the writer appends a segment,
 * or compacts into a new base) and queues it as CKPT_PUT jobs: one job, and one file, carries
 * every part committed in the interval; a base past SB_CKPTLOG_CHUNK_BYTES is a chunked base
 * (ckptlog.h), its chunks sent as jobs of at most max_job_bytes one after the other, its
 * manifest in the last, which also prunes the log's other files (a file's chunks, "<stem>-*",
 * stay with it: ckptjob.h). So no base is too large for a job at any number of parts. A new
 * leader's first write is a compaction rather than an append: its dead predecessor's last job
 * may still land on a worker, and would then race an append to the same generation. The summary the
 * status shows (`durable`) moves only when a job succeeded; a failed job makes the next write a
 * compaction (the writer forgets what it wrote), so the log never has a gap.
 *
 * Counting. A split is committed, for the status and its users, only once the log holds it
 * (sb_opckpt_committed): a split the scheduler finished after the last durable write is not
 * counted, since a new leader would run it again; so the status never claims more committed
 * splits than a failover keeps.
 *
 * Reading. A new leader or a resume runs a CKPT_LOAD job before planning (sb_ctl_config
 * .ckpt_load) and sb_opckpt_resume checks the files against the summary (sb_ckptlog_load_io:
 * foreign, stale, torn or unparsable logs are refused, naming the file and line).
 *
 * Memory: an sb_opckpt owns its writer and the files of a write in flight until
 * sb_opckpt_free(); sb_opckpt_resume fills a caller sb_ckpt (free with sb_ckpt_free).
 */
#ifndef SB_OPERATOR_OPCKPT_H
#define SB_OPERATOR_OPCKPT_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "controller/ctl/ckptlog.h"
#include "controller/ctl/ctl.h"
#include "storage/ckptjob.h"

#define SB_OPCKPT_INTERVAL_MS 1000 /* a write at most this often: parts are batched meanwhile */
/* A CKPT_PUT job goes to the worker in one PollTasks reply, under the gRPC message limit
 * (SB_RPC_DEFAULT_MAX_MESSAGE, 16 MiB + 64 KiB): a write's files are sent as jobs of at most
 * this many bytes; a single file past it (a segment of over ~300,000 parts committed within
 * one interval; a base is chunked) is not sent: see sb_opckpt_refused. */
#define SB_OPCKPT_MAX_JOB_BYTES ((size_t)15 << 20)

typedef struct sb_opckpt {
    sb_ckptlog w;
    sb_ckptlog_io io;
    sb_storage_files collected; /* what the writer put during one update */
    sb_storage_files queue;     /* one write's files, sent as jobs of at most max_job_bytes */
    size_t qpos;                /* the files before it were sent */
    int qprune;                 /* the write is a base: its last job prunes */
    int inflight;               /* a CKPT_PUT job in flight */
    uint64_t started_ms;        /* when it was queued */
    sb_ckptlog_summary sent;    /* w.sum when it was queued */
    sb_ckptlog_summary durable; /* what the log surely holds (generation 0: nothing yet) */
    char last_write[32];        /* wall time of the last durable write (RFC 3339) */
    uint64_t last_ms;           /* when the last write was queued */
    /* the cost, for the status and benchmarks: durable jobs, their bytes and parts, and the
     * seconds from queueing each to its end (worker round trip included) */
    uint64_t jobs, bytes, parts, failed;
    double seconds;
    uint64_t pend_bytes, pend_parts;       /* of the job in flight */
    size_t max_job_bytes;                  /* SB_OPCKPT_MAX_JOB_BYTES (tests set less) */
    uint64_t refused_bytes, refused_parts; /* a write refused for its size: no more writes */
} sb_opckpt;

/* A writer of the log in dir (a URI) for epoch, continuing log `id` (NULL: a new id) from
 * generation `generation` (the loaded or announced one; 0: none), so its first write, a
 * compaction, takes a newer generation and prunes the rest. 0, or -1 + err. */
int sb_opckpt_init(sb_opckpt *k, const char *dir, const char *id, uint32_t epoch,
                   const char *spec_hash, uint32_t generation, sb_err *err);
void sb_opckpt_free(sb_opckpt *k);

/* Advances the writing: ends the job in flight (sb_ctl_storage_poll), or, when none is and
 * the batch interval passed (force > 0: at once; force < 0: never), queues the next write of
 * what ctl committed. Returns 1 while a write is in flight, 0 when none is. */
int sb_opckpt_tick(sb_opckpt *k, sb_ctl *ctl, uint64_t now_ms, int force);

/* 1 with msg filled when a write was refused for its size (it would not fit in the message
 * that carries it to a worker): from then on nothing more is written, the status keeps the
 * last durable summary and count, and a failover re-runs what was committed since. The log is
 * never left half-written. 0 otherwise. */
int sb_opckpt_refused(const sb_opckpt *k, char *msg, size_t len);

/* Logs the write cost so far ("checkpoint log written": writes, parts, bytes, seconds,
 * failed writes); pipeline (may be NULL) names the run. Also every 10th write by itself. */
void sb_opckpt_log_cost(const sb_opckpt *k, const char *pipeline);

/* The status's checkpoint: the durable summary and "lastWrite" (NULL before the first durable
 * write, or when out of memory). */
cJSON *sb_opckpt_status_json(const sb_opckpt *k);

/* The splits ctl's scheduler counts committed (finished, durable or not) into *out. 0, or -1
 * + err (out of memory). */
int sb_opckpt_finished(sb_ctl *ctl, size_t *out, sb_err *err);

/* The committed splits the status may claim (k may be NULL: no log, then `finished`): what the
 * log surely holds, the last durable write's count, or before this writer's first durable
 * write the `carried` splits read from the log at start; never more than `finished`
 * (sb_opckpt_finished: a split the scheduler took back is not committed). */
size_t sb_opckpt_committed(const sb_opckpt *k, size_t carried, size_t finished);

/* The files a CKPT_LOAD job brought back, read as the log `expect` describes (see ckptlog.h).
 * 0 with *out filled and *found (may be NULL) the summary read, or -1 + err ("checkpoint
 * <location>/base-...: line 3: ..."). */
int sb_opckpt_resume(const sb_ckptlog_summary *expect, const sb_storage_files *files, sb_ckpt *out,
                     sb_ckptlog_summary *found, sb_err *err);

#endif
