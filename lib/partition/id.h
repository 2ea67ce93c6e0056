/* id.h — partition ids: "s<stage>-t<task>-p<seq>", decimal without leading zeros. A worker's
 * store holds each output partition under its id; Data.Fetch names it; the sink names its part
 * files after it (part-<id>.<ext>); checkpoints list it. The id says which stage's task made
 * the partition and its place among that task's outputs, which lineage recovery reads back.
 *
 * Pure functions, no allocation.
 */
#ifndef SB_PARTITION_ID_H
#define SB_PARTITION_ID_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define SB_PART_ID_MAX 64
/* Writes the id into buf (cap >= SB_PART_ID_MAX suffices). Returns its length or -1. */
int sb_part_id_format(char *buf, size_t cap, uint32_t stage, uint64_t task, uint32_t seq);
/* Parses an id; any of the outputs may be NULL. -1 with a message if it is malformed. */
int sb_part_id_parse(const char *id, uint32_t *stage, uint64_t *task, uint32_t *seq, sb_err *err);

#endif
