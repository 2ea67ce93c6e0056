/* ckptlog.h — a run's checkpoint as a log of files in a directory beside the sink
 * (<sink>/_streambatch/checkpoint/ for file sinks; docs/pipeline-api.md, "Resuming"): one base
 * that holds everything committed when it was written, then segments that each hold only the
 * splits and sink parts committed since the file before. Writing a checkpoint costs what was
 * committed since the last write, not every part again; the owner's small record (the local
 * driver's file, or a Pipeline's status) keeps only a summary (sb_ckptlog_summary: epoch,
 * counts, location, the log's id and hash), so it stays a few hundred bytes at any size.
 *
 * Files, each written whole to a temporary name, synced and renamed (a reader never sees a
 * half file; the directory is synced after the rename):
 *   base-GGGGGGGG.sbck           generation G (hex): everything committed at that time
 *   seg-GGGGGGGG-SSSSSSSS.sbck   segment S (1, 2, ...) of generation G
 *   base-GGGGGGGG-KKKKKKKK.sbck  chunk K of a base past chunk_bytes (8 MiB): the base's text
 *                                cut in pieces, written first; base-G.sbck is then a list,
 *                                "streambatch-checkpoint-chunks 1", "id", "generation",
 *                                "chunks <n>", n lines "chunk <k> <bytes> <fnv 16 hex>", "end
 *                                <fnv of the lines before>", written last. The reader checks
 *                                each chunk's size and hash (a missing, cut, damaged or
 *                                foreign chunk is refused, naming it), joins them, and reads
 *                                the base as any other (its own end hash covers every piece).
 * Text, one item a line:
 *   streambatch-checkpoint 1
 *   id <16 hex>          the log's identity, drawn when a run starts from nothing, kept by
 *                        every later epoch, generation and segment (another id: foreign)
 *   kind base|segment
 *   generation <G> / sequence <S> (0 for a base) / epoch <E>
 *   specHash <16 hex> / planHash <16 hex>   (sb_ckpt_spec_hash, sb_ctl_plan_hash)
 *   prev <16 hex>        the chain hash of the log before this file (0...0 for a base)
 *   splits <ranges>      splits committed in this file (ranges.h; a base: all)
 *   parts <n>            then n lines "<id>:<rows>:<bytes>:<crc32c>[:<order>]"
 *   end <16 hex>         the chain hash after this file: FNV-1a 64 of prev's hex and every
 *                        byte before "end", so a torn, cut or edited file is refused
 *
 * Compaction writes a new base (generation + 1) from the whole checkpoint and then deletes the
 * older files: at the first write of a writer that did not continue the log it read
 * (sb_ckptlog_continue), when the committed set is not a superset of what was written (the
 * scheduler took a split back), when the plan hash changed, and when segments pile up: they
 * hold SB_CKPTLOG_SEG_RATIO times the base's parts (and past min_compact bytes), or
 * SB_CKPTLOG_MAX_SEGMENTS of them. Segments hold no line twice, so a rewrite saves no bytes; the
 * ratio makes each base 8 times the last, so rewrites add up to at most 8/7 of the log.
 * A reader takes the highest generation that has a base and that base's segments 1, 2, ... in
 * order: a writer killed mid-compaction leaves either the old generation whole (the new base
 * was not renamed yet, or only some of its chunks were written) or the new base whole (old
 * files are leftovers the next compaction removes); one killed mid-segment leaves only a
 * temporary file, which readers skip. So no
 * committed part that a summary counted is ever missing.
 *
 * A summary says which log it describes: the reader refuses a log whose id or spec hash differs
 * (foreign), one behind the summary (an older generation, fewer segments, or a chain hash
 * that does not match at the summary's segment: stale), and any file that does not parse,
 * naming the file and the line. A log ahead of its summary (a writer died between writing a
 * file and its summary) is accepted: every file in it is whole and chained.
 *
 * Memory: an sb_ckptlog owns its copies of written ids until sb_ckptlog_free(); sb_ckptlog_load
 * fills a caller sb_ckpt (free with sb_ckpt_free()); sb_ckptlog_encode returns malloc'd text.
 */
#ifndef SB_CTL_CKPTLOG_H
#define SB_CTL_CKPTLOG_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "controller/ctl/checkpoint.h"
#include "core/err.h"
#include "core/idmap.h"

/* Segments after a base before a compaction (the files a reader lists). */
#define SB_CKPTLOG_MAX_SEGMENTS 1024
/* Segments holding more parts than the base this many times (and past SB_CKPTLOG_MIN_COMPACT
 * bytes) compact. */
#define SB_CKPTLOG_SEG_RATIO 7
#define SB_CKPTLOG_MIN_COMPACT ((uint64_t)1 << 20)
#define SB_CKPTLOG_CHUNK_BYTES ((size_t)8 << 20) /* a base past this is written in chunks */
#define SB_CKPTLOG_DIR "_streambatch/checkpoint" /* under a file sink's directory */

/* What the owner keeps (status.checkpoint, the local driver's file). */
typedef struct sb_ckptlog_summary {
    char id[17];             /* the log's id ("" before anything was written) */
    uint32_t epoch;          /* of the writer that wrote the last file */
    uint32_t generation;     /* of the base (0: nothing written) */
    uint32_t segments;       /* after the base */
    uint64_t parts;          /* sink parts in the log */
    uint64_t splits;         /* committed splits in the log */
    char hash[17];           /* chain hash after the last file */
    char spec_hash[17];      /* of the spec the log was written for */
    char plan_hash[17];      /* of the plan it counts splits of */
    char location[PATH_MAX]; /* the directory */
    /* filled by a load, not in the JSON: the base's bytes and the segments' (a writer that
     * continues the log weighs a compaction with them), the base's parts */
    uint64_t base_bytes, seg_bytes, base_parts;
} sb_ckptlog_summary;

/* {"format": "log", "epoch", "specHash", "planHash", "location", "id", "generation",
 * "segments", "parts", "splits", "hash"} (NULL when out of memory). */
cJSON *sb_ckptlog_summary_json(const sb_ckptlog_summary *s);
/* 1 when j is a summary (it has "format": "log"), 0 when it is something else (the older
 * checkpoint with every part inline, checkpoint.h). */
int sb_ckptlog_is_summary(const cJSON *j);
/* Strict parse of a summary; what names it in errors ("status.checkpoint"). 0, or -1 + err
 * ("<what>.generation: ..."). */
int sb_ckptlog_summary_parse(const cJSON *j, const char *what, sb_ckptlog_summary *out,
                             sb_err *err);

/* One file of the log, as encoded and decoded (pure: no I/O). */
typedef struct sb_ckptlog_file {
    char id[17];
    int base; /* 1: a base, 0: a segment */
    uint32_t generation, sequence, epoch;
    char spec_hash[17], plan_hash[17];
    uint64_t prev, chain; /* chain hashes before and after this file */
} sb_ckptlog_file;

/* The text of a file: f's header (f->chain is set from the text), the ranges (may be "" or
 * NULL) and the parts. NULL when out of memory; *len its length. */
char *sb_ckptlog_encode(sb_ckptlog_file *f, const char *ranges, const sb_storage_output *parts,
                        size_t nparts, size_t *len);
/* Parses text[0..len) (modified in place: lines are cut) into *f, the ranges (malloc'd) and
 * the parts (malloc'd array and ids, free with sb_sched_parts_free). what names the file in
 * errors: "<what>: line 7: ...". A file without its end line, with a wrong hash, or with
 * fewer or more parts than announced is refused. 0, or -1 + err (nothing to free). */
int sb_ckptlog_decode(char *text, size_t len, const char *what, sb_ckptlog_file *f, char **ranges,
                      sb_storage_output **parts, size_t *nparts, sb_err *err);

/* Where the log's files go when not to local files: the operator's log beside the sink, whose
 * I/O runs on a worker (storage/ckptjob.h), so its put only collects the file for a CKPT_PUT
 * job, and a load reads the files a CKPT_LOAD job brought back. A NULL member does nothing
 * (list: no names; read: missing). */
typedef struct sb_ckptlog_io {
    void *ud;
    int (*put)(void *ud, const char *dir, const char *name, const char *data, size_t n,
               sb_err *err);
    /* the names in dir (a malloc'd array of malloc'd strings); 0, or -1 + err */
    int (*list)(void *ud, const char *dir, char ***names, size_t *n, sb_err *err);
    /* dir/name whole (malloc'd, NUL after): 1, 0 missing, -1 + err */
    int (*read)(void *ud, const char *dir, const char *name, char **data, size_t *n, sb_err *err);
    int (*del)(void *ud, const char *dir, const char *name, sb_err *err);
} sb_ckptlog_io;

/* A writer: keeps what it wrote, to append only what is new. */
typedef struct sb_ckptlog {
    sb_ckptlog_summary sum; /* what the log holds now (sum.generation 0: nothing written yet) */
    uint8_t *done;          /* splits written (nsplits bytes) */
    size_t nsplits;
    char **ids; /* part ids written (owned) */
    size_t nids, capids;
    sb_idmap idx;
    uint64_t base_bytes, seg_bytes; /* the base's size, the segments' since */
    uint64_t base_parts;            /* parts in the base */
    int wrote_any;                  /* this writer wrote a base (a new epoch compacts first) */
    /* the cost, for reports: files written, their bytes and parts, seconds spent writing */
    uint64_t writes, bytes, parts_written;
    double seconds;
    const sb_ckptlog_io *io; /* NULL: local files */
    size_t chunk_bytes;      /* SB_CKPTLOG_CHUNK_BYTES (tests set less) */
    uint64_t min_compact;    /* SB_CKPTLOG_MIN_COMPACT (tests set less) */
    char *seed_ranges;       /* sb_ckptlog_continue's splits, parsed at the first update */
} sb_ckptlog;

/* A writer of the log in dir for epoch, continuing the log `id` (the id of the summary a
 * resume read; NULL or "": a new id is drawn). Its first write compacts. 0, or -1 + err. */
int sb_ckptlog_init(sb_ckptlog *w, const char *dir, const char *id, uint32_t epoch,
                    const char *spec_hash, sb_err *err);
/* Writes what changed since the last call: the committed splits (ranges over nsplits) and their
 * sink parts, as sb_sched_checkpoint gives them. Appends a segment with only the new ones, or
 * compacts (see above); writes nothing when nothing is new (*wrote = 0). On success w->sum is
 * the new summary; on failure nothing the log held before is lost (w is unchanged and the next
 * call tries again). 0, or -1 + err naming the file. */
int sb_ckptlog_update(sb_ckptlog *w, const char *plan_hash, size_t nsplits, const char *ranges,
                      const sb_storage_output *parts, size_t nparts, int *wrote, sb_err *err);
void sb_ckptlog_free(sb_ckptlog *w);
/* Continues the log a load read (found, and what it held: loaded) instead of compacting at the
 * first write: the writer takes the log's generation, segments and chain, so its first write
 * appends a segment. Only when the log is whole and is w's: found names w's id, spec hash and
 * location. Safe when no write of an earlier writer can still land (a killed local run wrote
 * synchronously); the operator, whose dead leader may have a write in flight on a worker,
 * compacts instead. 0, or -1 + err (w unchanged: its first write compacts). */
int sb_ckptlog_continue(sb_ckptlog *w, const sb_ckptlog_summary *found, const sb_ckpt *loaded,
                        sb_err *err);
/* The same through io (borrowed for w's life; NULL: local files); dir may then be a URI. */
int sb_ckptlog_init_io(sb_ckptlog *w, const sb_ckptlog_io *io, const char *dir, const char *id,
                       uint32_t epoch, const char *spec_hash, sb_err *err);
/* Forgets what was written, so the next update compacts: after a write that the caller could
 * not make durable (a failed CKPT_PUT job). */
void sb_ckptlog_forget(sb_ckptlog *w);

/* Reads the log at expect->location as expect describes it (see above for what is refused)
 * into *out (committed splits as ranges, every part); *found (may be NULL) receives the
 * summary of what was read (ahead of expect when a writer died before its summary). 0, or
 * -1 + err ("checkpoint <dir>/seg-...: line 9: ...", "... is foreign: ..."). */
int sb_ckptlog_load(const sb_ckptlog_summary *expect, sb_ckpt *out, sb_ckptlog_summary *found,
                    sb_err *err);

/* sb_ckptlog_load through io (NULL: local files). */
int sb_ckptlog_load_io(const sb_ckptlog_summary *expect, const sb_ckptlog_io *io, sb_ckpt *out,
                       sb_ckptlog_summary *found, sb_err *err);

/* Writes data as dir/name whole (dir made when missing): a temporary ".tmp-<name>", synced,
 * renamed, the directory synced, so a reader sees the old file or the new one, never a part.
 * Also the local driver's checkpoint file (runckpt.c). 0, or -1 + err (no temporary left). */
int sb_ckptlog_write_file(const char *dir, const char *name, const char *data, size_t n,
                          sb_err *err);

/* Removes the log's files (base, segments, temporaries) and dir itself, and dir's parent when it
 * is a now empty "_streambatch". A missing dir is fine. 0, or -1 + err. */
int sb_ckptlog_remove(const char *dir, sb_err *err);

#endif
