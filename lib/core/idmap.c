/* idmap.c — a hash index from string ids to array indexes that stores no ids (see idmap.h): the
 * caller's array holds them and a callback reads one back when a probe compares. Owns only its
 * slot table. */

#include "core/idmap.h"

#include <stdlib.h>
#include <string.h>

static uint32_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a, folded to 32 bits */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

void sb_idmap_init(sb_idmap *m, sb_idmap_key_fn key_of, const void *ctx)
{
    memset(m, 0, sizeof *m);
    m->key_of = key_of;
    m->ctx = ctx;
}

static int grow(sb_idmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    uint64_t *ns = calloc(ncap, sizeof *ns);
    if (ns == NULL)
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t v = m->slots[i];
        if (v == 0)
            continue;
        size_t j = (size_t)(v >> 32) & (ncap - 1);
        while (ns[j] != 0)
            j = (j + 1) & (ncap - 1);
        ns[j] = v;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

/* The slot holding key, or the empty slot where it would go. */
static size_t find(const sb_idmap *m, const char *key, uint32_t h)
{
    size_t j = h & (m->cap - 1);
    for (;;) {
        uint64_t v = m->slots[j];
        if (v == 0)
            return j;
        if ((uint32_t)(v >> 32) == h &&
            strcmp(m->key_of(m->ctx, (size_t)(uint32_t)v - 1), key) == 0)
            return j;
        j = (j + 1) & (m->cap - 1);
    }
}

int sb_idmap_put(sb_idmap *m, const char *key, size_t val)
{
    if (val >= UINT32_MAX)
        return -1;
    if ((m->used + 1) * 4 > m->cap * 3 && grow(m) != 0)
        return -1;
    uint32_t h = hash(key);
    size_t j = find(m, key, h);
    if (m->slots[j] == 0)
        m->used++;
    m->slots[j] = (uint64_t)h << 32 | (uint64_t)(val + 1);
    return 0;
}

int sb_idmap_get(const sb_idmap *m, const char *key, size_t *val)
{
    if (m->cap == 0)
        return 0;
    uint64_t v = m->slots[find(m, key, hash(key))];
    if (v == 0)
        return 0;
    if (val != NULL)
        *val = (size_t)(uint32_t)v - 1;
    return 1;
}

size_t sb_idmap_bytes(const sb_idmap *m)
{
    return m->cap * sizeof *m->slots;
}

void sb_idmap_free(sb_idmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->used = 0;
}
