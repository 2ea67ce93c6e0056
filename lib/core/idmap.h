/* idmap.h — a hash index from string ids to array indexes that does not store the ids: the
 * caller's array already holds each id, and a callback reads it back when a probe must compare.
 * For the scheduler's lineage tables (task, partition and sink part ids), where a copy of every
 * key in the map cost more than the entry itself.
 *
 * A slot is 8 bytes (the key's 32-bit hash and the index + 1), open addressing with linear
 * probing, load at most 3/4; growing rehashes from the stored hashes without reading a key.
 * No removal: the lineage tables only grow. Indexes up to UINT32_MAX - 1.
 *
 * Memory: the map owns its slot array (sb_idmap_free releases it) and borrows nothing between
 * calls; key_of's strings must stay valid, and unchanged, while their index is in the map.
 * Not thread-safe.
 */
#ifndef SB_CORE_IDMAP_H
#define SB_CORE_IDMAP_H

#include <stddef.h>
#include <stdint.h>

/* The id stored at index i of the caller's array (ctx). */
typedef const char *(*sb_idmap_key_fn)(const void *ctx, size_t i);

typedef struct sb_idmap {
    uint64_t *slots; /* hash << 32 | (index + 1); 0 = empty */
    size_t cap, used;
    sb_idmap_key_fn key_of;
    const void *ctx;
} sb_idmap;

/* An empty map reading keys with key_of(ctx, i). ctx must outlive the map; point it at what owns
 * the array (not at the array, which moves when it grows). */
void sb_idmap_init(sb_idmap *m, sb_idmap_key_fn key_of, const void *ctx);
/* Maps key (equal to key_of(ctx, val) from now on) to val, replacing an earlier index of an
 * equal key. 0, or -1 when out of memory or val is too large. */
int sb_idmap_put(sb_idmap *m, const char *key, size_t val);
/* 1 and *val (when val is not NULL) if key is present, else 0. */
int sb_idmap_get(const sb_idmap *m, const char *key, size_t *val);
/* The slot array's size in bytes (for memory reports). */
size_t sb_idmap_bytes(const sb_idmap *m);
void sb_idmap_free(sb_idmap *m);

#endif
