/* strmap.c — the scheduler's string-keyed hash map to size_t values (see strmap.h): open
 * addressing with linear probing, growing as it fills. Owns the copies of its keys. */

#include "controller/sched/strmap.h"

#include <stdlib.h>
#include <string.h>

static char tomb_marker;
#define TOMB (&tomb_marker)

static size_t hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int grow(sb_strmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    if (m->used * 4 < m->cap) /* mostly tombstones: rehash at the same size */
        ncap = m->cap;
    char **nk = calloc(ncap, sizeof *nk);
    size_t *nv = calloc(ncap, sizeof *nv);
    if (nk == NULL || nv == NULL) {
        free(nk);
        free(nv);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == NULL || m->keys[i] == TOMB)
            continue;
        size_t j = hash(m->keys[i]) & (ncap - 1);
        while (nk[j] != NULL)
            j = (j + 1) & (ncap - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    m->tombs = 0;
    return 0;
}

int sb_strmap_put(sb_strmap *m, const char *key, size_t val)
{
    if ((m->used + m->tombs + 1) * 4 >= m->cap * 3 && grow(m) != 0)
        return -1;
    size_t j = hash(key) & (m->cap - 1), tomb = (size_t)-1;
    while (m->keys[j] != NULL) {
        if (m->keys[j] == TOMB) {
            if (tomb == (size_t)-1)
                tomb = j;
        } else if (strcmp(m->keys[j], key) == 0) {
            m->vals[j] = val;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    char *k = strdup(key);
    if (k == NULL)
        return -1;
    if (tomb != (size_t)-1) {
        j = tomb;
        m->tombs--;
    }
    m->keys[j] = k;
    m->vals[j] = val;
    m->used++;
    return 0;
}

static size_t find(const sb_strmap *m, const char *key)
{
    if (m->cap == 0)
        return (size_t)-1;
    size_t j = hash(key) & (m->cap - 1);
    while (m->keys[j] != NULL) {
        if (m->keys[j] != TOMB && strcmp(m->keys[j], key) == 0)
            return j;
        j = (j + 1) & (m->cap - 1);
    }
    return (size_t)-1;
}

int sb_strmap_get(const sb_strmap *m, const char *key, size_t *val)
{
    size_t j = find(m, key);
    if (j == (size_t)-1)
        return 0;
    if (val != NULL)
        *val = m->vals[j];
    return 1;
}

void sb_strmap_del(sb_strmap *m, const char *key)
{
    size_t j = find(m, key);
    if (j == (size_t)-1)
        return;
    free(m->keys[j]);
    m->keys[j] = TOMB;
    m->used--;
    m->tombs++;
}

void sb_strmap_free(sb_strmap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != NULL && m->keys[i] != TOMB)
            free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
