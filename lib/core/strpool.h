/* strpool.h — an append-only arena of strings that live as long as the pool: copies packed
 * end to end in large blocks, without malloc's per-string header and rounding (a 13-byte id
 * costs 14 bytes instead of 32). For the scheduler's ids and splits, made once per task or
 * partition and kept to the end of the pipeline.
 *
 * Memory: the pool owns every copy; sb_strpool_free releases them all at once (there is no
 * freeing one string). Not thread-safe.
 */
#ifndef SB_CORE_STRPOOL_H
#define SB_CORE_STRPOOL_H

#include <stddef.h>

typedef struct sb_strpool_block sb_strpool_block;

typedef struct sb_strpool {
    sb_strpool_block *head; /* the block being filled; earlier ones follow it */
    size_t bytes;           /* all blocks, headers included (for memory reports) */
} sb_strpool;

/* A copy of s valid until sb_strpool_free, or NULL when out of memory. */
char *sb_strpool_dup(sb_strpool *p, const char *s);
void sb_strpool_free(sb_strpool *p);

#endif
