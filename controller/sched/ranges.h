/* ranges.h — a set of split indices as compact text ranges, "0-41,45,50-51", the form the
 * controller checkpoints into the Pipeline status (committed splits) and reads back when a new
 * leader resumes a run.
 *
 * The text is canonical when formatted (ascending, maximal runs, no spaces, no leading zeros)
 * and parsed strictly, because it comes back from the API server where anybody may have edited
 * it: pieces must be ascending and non-overlapping (adjacent pieces such as "0-3,4" are
 * accepted), every index must be below the number of splits, and any other text is an error
 * whose message names the offending piece.
 *
 * Memory: the caller owns `set` (n bytes); sb_ranges_format() returns a malloc'd string the
 * caller frees.
 */
#ifndef SB_SCHED_RANGES_H
#define SB_SCHED_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* set[i] != 0 means i is in the set. Returns a malloc'd "0-41,45" ("" for the empty set), or
 * NULL when out of memory. */
char *sb_ranges_format(const uint8_t *set, size_t n);

/* Parses s into set[0..n) (cleared first; NULL or "" is the empty set). 0, or -1 + err naming
 * the bad piece (garbage, an empty piece, a number with leading zeros or too large, a
 * descending range, pieces out of order or overlapping, an index >= n); set is all zero then. */
int sb_ranges_parse(const char *s, uint8_t *set, size_t n, sb_err *err);

#endif
