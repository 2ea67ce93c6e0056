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
    char *recs[64];
    size_t n;
} coll;

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    coll *c = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    for (size_t r = 0; r < rows; r++) {
        size_t n;
        const char *p = sb_column_binary(sb_batch_column(b, 0), r, &n);
        cr_assert_lt(c->n, 64);
        c->recs[c->n++] = strndup(p, n);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

static inline void coll_free(coll *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->recs[i]);
    c->n = 0;
}

#endif
