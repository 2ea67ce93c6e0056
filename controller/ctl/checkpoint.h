/* checkpoint.h — a run's committed work, as the operator keeps it in a Pipeline's
 * status.checkpoint and `streambatch run` in a local file (docs/pipeline-api.md, "Resuming"):
 *
 *   {"epoch": N, "specHash": "<16 hex>", "planHash": "<16 hex>", "committedSplits": "0-41,45",
 *    "parts": ["<id>:<rows>:<bytes>:<crc32c>[:<order key>]", ...]}
 *
 * epoch counts the controllers (or local drivers) that ran the pipeline; committedSplits are the
 * splits whose whole lineage is done (sb_sched_checkpoint), parts the sink parts they produced.
 * specHash fingerprints the spec (a changed spec starts over), planHash the source plan (a
 * changed source, where split indices would name other data, starts over too).
 *
 * A checkpoint is read back from places others can edit (the API server, a file), so the
 * parser is strict and names the field: "<what>.parts[3]: ...".
 *
 * Memory: sb_ckpt_parse() fills a caller struct whose strings and parts it mallocs, freed with
 * sb_ckpt_free(); sb_ckpt_json() returns a cJSON tree the caller deletes; sb_ckpt_part_format()
 * a malloc'd string.
 */
#ifndef SB_CTL_CHECKPOINT_H
#define SB_CTL_CHECKPOINT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "controller/sched/sched.h"
#include "core/err.h"

typedef struct sb_ckpt {
    uint32_t epoch;
    char *committed_splits;   /* "0-41,45" (malloc'd, never NULL after a parse) */
    size_t ncommitted;        /* how many splits that is */
    sb_storage_output *parts; /* ids malloc'd */
    size_t nparts;
    char spec_hash[17]; /* sb_ckpt_spec_hash of the spec that made it; "" when absent */
    char plan_hash[17]; /* sb_ctl_plan_hash of the plan it counts splits of; "" when absent */
} sb_ckpt;

/* "<id>:<rows>:<bytes>:<crc32c>" (decimal numbers), with ":<order>" when p->order is set
 * (preserveOrder: the part's input-order key, so a resume sorts it among new parts), malloc'd. */
char *sb_ckpt_part_format(const sb_storage_output *p);
/* The bytes p's entry takes in the JSON parts array (quotes and separator included); ctx is
 * unused (an sb_sched_part_bytes_fn, for sb_sched_checkpoint_within). */
uint64_t sb_ckpt_part_json_bytes(const sb_storage_output *p, void *ctx);
/* Strict: id of [A-Za-z0-9._-]+, then three decimal numbers without sign or leading zeros
 * (crc < 2^32), then optionally an order key (decimal numbers joined by '.'). out->id (and
 * out->order) are malloc'd. 0, or -1 with err naming the problem. */
int sb_ckpt_part_parse(const char *s, sb_storage_output *out, sb_err *err);
/* The JSON object of a checkpoint (hashes omitted when NULL or ""), or NULL when out of
 * memory. */
cJSON *sb_ckpt_json(uint32_t epoch, const char *spec_hash, const char *plan_hash,
                    const char *committed_splits, const sb_storage_output *parts, size_t nparts);
/* Reads a checkpoint against a plan of nsplits splits: epoch an integer in [0, 2^32),
 * specHash and planHash (optional) 16 lowercase hex digits, committedSplits valid ranges below
 * nsplits, parts each valid and unique. 0, or -1 with err ("<what>.parts[3]: ..."); out is
 * zeroed on failure. */
int sb_ckpt_parse(const cJSON *cp, size_t nsplits, const char *what, sb_ckpt *out, sb_err *err);
void sb_ckpt_free(sb_ckpt *c);

/* A fingerprint of what a checkpoint depends on: the spec without what applies live
 * (suspend, ttlSecondsAfterFinished, stages[].workers), independent of key order. Two specs
 * with the same hash make the same splits, lineage and sink, so committed parts of one are
 * valid for the other. Writes 16 lowercase hex digits and a NUL into out. */
void sb_ckpt_spec_hash(const cJSON *spec, char out[17]);

#endif
