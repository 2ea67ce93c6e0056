/* recs_coll.h — for the op tests: an emit callback (sb_op_out) that collects the records of a
 * one-column utf8/binary output, each as a NUL-terminated copy, in the order they came. Functions
 * are static: include in one test file each. Memory: recs[i] are malloc'd (coll_free frees). */
#ifndef SB_TEST_RECS_COLL_H
#define SB_TEST_RECS_COLL_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "partition/partition.h"

typedef struct {
    char **recs;
    size_t n, cap;
} coll;

/* Appends a NUL-terminated copy of p[0..n). */
static inline void coll_add(coll *c, const char *p, size_t n)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->recs = realloc(c->recs, c->cap * sizeof *c->recs);
        cr_assert_not_null(c->recs);
    }
    c->recs[c->n++] = strndup(p, n);
}

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    for (size_t r = 0; r < rows; r++) {
        size_t n;
        const char *p = sb_column_binary(sb_batch_column(b, 0), r, &n);
        coll_add(ud, p, n);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

static inline void coll_free(coll *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->recs[i]);
    free(c->recs);
    c->recs = NULL;
    c->n = c->cap = 0;
}

#endif
