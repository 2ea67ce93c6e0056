/* strpool.c — an append-only arena of strings (see strpool.h): copies packed end to end in large
 * blocks, freed all at once with the pool. Owns the blocks. */

#include "core/strpool.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK 65536 /* bytes of strings per block; a longer string gets a block of its own */

struct sb_strpool_block {
    sb_strpool_block *next;
    size_t used, cap;
    char data[];
};

char *sb_strpool_dup(sb_strpool *p, const char *s)
{
    size_t n = strlen(s) + 1;
    sb_strpool_block *b = p->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > BLOCK ? n : BLOCK;
        b = malloc(sizeof *b + cap);
        if (b == NULL)
            return NULL;
        b->used = 0;
        b->cap = cap;
        if (n > BLOCK && p->head != NULL) { /* keep filling the current block */
            b->next = p->head->next;
            p->head->next = b;
        } else {
            b->next = p->head;
            p->head = b;
        }
        p->bytes += sizeof *b + cap;
    }
    char *c = b->data + b->used;
    memcpy(c, s, n);
    b->used += n;
    return c;
}

void sb_strpool_free(sb_strpool *p)
{
    for (sb_strpool_block *b = p->head; b != NULL;) {
        sb_strpool_block *next = b->next;
        free(b);
        b = next;
    }
    p->head = NULL;
    p->bytes = 0;
}
