/* strmap.h — a string-keyed hash map to size_t values (open addressing, linear probing), for the
 * scheduler's lookup tables (partition ids, task ids, worker ids).
 *
 * Memory: the map copies keys and owns the copies; sb_strmap_free() releases them. Values are
 * plain numbers (indexes into the caller's arrays). Not thread-safe.
 */
#ifndef SB_SCHED_STRMAP_H
#define SB_SCHED_STRMAP_H

#include <stddef.h>

typedef struct sb_strmap {
    char **keys;
    size_t *vals;
    size_t cap, used, tombs;
} sb_strmap;

/* Inserts or replaces. Returns 0, or -1 when out of memory. */
int sb_strmap_put(sb_strmap *m, const char *key, size_t val);
/* 1 and *val when present, else 0. */
int sb_strmap_get(const sb_strmap *m, const char *key, size_t *val);
/* Removes the key if present. */
void sb_strmap_del(sb_strmap *m, const char *key);
void sb_strmap_free(sb_strmap *m);

#endif
