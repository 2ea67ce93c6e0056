/* testparts.h — partitions the op tests build: a three-column batch of JSON records (with
 * nulls), int64 ids (with nulls) and bools. Header-only (static inline), like testutil.h.
 *
 * Memory: the blob is the caller's, freed with sb_part_free(). */
#ifndef SB_TESTPARTS_H
#define SB_TESTPARTS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "partition/partition.h"

/* rows rows of columns json_col (utf8, nullable: {"i":i*mul%100}, null where
 * i % null_every == 3), "id" (int64 i*1000, null where i % 5 == 1) and "ok" (bool, i % 3 == 0). */
static inline void *sb_test_mixed_part(const char *json_col, int rows, int mul, int null_every,
                                       size_t *len)
{
    sb_field f[3] = {{.name = json_col, .type = SB_TYPE_UTF8, .nullable = true},
                     {.name = "id", .type = SB_TYPE_INT64, .nullable = true},
                     {.name = "ok", .type = SB_TYPE_BOOL}};
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(f, 3, &e);
    cr_assert_not_null(bb, "%s", e.msg);
    for (int i = 0; i < rows; i++) {
        char r[32];
        snprintf(r, sizeof r, "{\"i\":%d}", i * mul % 100);
        if (i % null_every == 3)
            cr_assert_eq(sb_batch_builder_append_null(bb, 0, &e), 0);
        else
            cr_assert_eq(sb_batch_builder_append_binary(bb, 0, r, strlen(r), &e), 0);
        if (i % 5 == 1)
            cr_assert_eq(sb_batch_builder_append_null(bb, 1, &e), 0);
        else
            cr_assert_eq(sb_batch_builder_append_int(bb, 1, i * 1000, &e), 0);
        cr_assert_eq(sb_batch_builder_append_bool(bb, 2, i % 3 == 0, &e), 0);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    return blob;
}

#endif
