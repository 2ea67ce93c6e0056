/* Storage jobs' pure parts (storage/jobs.h): cutting a PLAN result into pieces
 * under the message bound, and receiving pieces in plan order exactly once. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/jobs.h"
#include "io/split.h"

Test(storage, pieces_cover_every_split_once_within_the_bound)
{
    enum { N = 5000 };
    static char *enc[N];
    size_t total = 0;
    for (size_t i = 0; i < N; i++) {
        size_t len = 100 + (i * 37) % 4000; /* 100 .. 4099 bytes */
        enc[i] = malloc(len + 1);
        memset(enc[i], 'a' + (int)(i % 26), len);
        enc[i][len] = '\0';
        total += len + 16;
    }
    size_t max = 64 * 1024, from = 0, pieces = 0;
    while (from < N) {
        size_t k = sb_storage_piece((const char *const *)enc, N, from, max);
        cr_assert_gt(k, 0);
        size_t used = 0;
        for (size_t i = from; i < from + k; i++)
            used += strlen(enc[i]) + 16;
        cr_assert_leq(used, max, "piece at %zu: %zu bytes", from, used);
        if (from + k < N) /* greedy: the next split would not have fit */
            cr_assert_gt(used + strlen(enc[from + k]) + 16, max);
        from += k;
        pieces++;
    }
    cr_expect_eq(from, N);
    cr_expect_geq(pieces, total / max);
    cr_expect_eq(sb_storage_piece((const char *const *)enc, N, N, max), 0);
    /* one split larger than the bound still goes alone (it is bounded by the decoder) */
    cr_expect_eq(sb_storage_piece((const char *const *)enc, N, 0, 10), 1);
    for (size_t i = 0; i < N; i++)
        free(enc[i]);
}

Test(storage, the_real_bound_holds_a_maximal_split_far_below_the_grpc_limit)
{
    cr_expect_gt(SB_STORAGE_PIECE_BYTES, SB_IO_SPLIT_ENCODED_MAX + 16);
    cr_expect_lt(SB_STORAGE_PIECE_BYTES, (size_t)16 << 20);
}

Test(storage, plan_pieces_append_in_order_and_duplicates_are_ignored)
{
    sb_storage_pieces p = {0};
    sb_err err;
    const char *a[] = {"s0", "s1", "s2"};
    uint64_t ab[] = {10, 11, 12};
    const char *b[] = {"s3", "s4"};
    uint64_t bb[] = {13, 14};
    cr_assert_eq(sb_storage_pieces_add(&p, 0, a, ab, 3, &err), 1);
    cr_assert_eq(sb_storage_pieces_add(&p, 0, a, ab, 3, &err), 0, "a re-sent piece is a duplicate");
    cr_assert_eq(sb_storage_pieces_add(&p, 1, a + 1, ab + 1, 2, &err), 0);
    cr_assert_eq(sb_storage_pieces_add(&p, 4, b, bb, 2, &err), -1, "a gap is refused");
    cr_expect(strstr(err.msg, "starts at split 4, expected 3") != NULL, "%s", err.msg);
    cr_assert_eq(sb_storage_pieces_add(&p, 2, b, bb, 2, &err), -1, "an overlap that differs");
    cr_assert_eq(sb_storage_pieces_add(&p, 3, b, bb, 2, &err), 1);
    cr_assert_eq(p.n, 5);
    for (size_t i = 0; i < 5; i++) {
        char want[8];
        snprintf(want, sizeof want, "s%zu", i);
        cr_expect_str_eq(p.enc[i], want);
        cr_expect_eq(p.bytes[i], 10 + i);
    }
    /* an empty final piece (more = false) */
    cr_assert_eq(sb_storage_pieces_add(&p, 5, NULL, NULL, 0, &err), 0);
    const char *empty[] = {""};
    cr_assert_eq(sb_storage_pieces_add(&p, 5, empty, bb, 1, &err), -1);
    cr_expect_eq(p.n, 5, "nothing appended on error");
    sb_storage_pieces_free(&p);
    cr_expect_eq(p.n, 0);
    cr_expect_null(p.enc);
}

Test(storage, plan_is_bounded_by_the_split_limit)
{
    sb_storage_pieces p = {0};
    sb_err err;
    p.n = SB_IO_MAX_SPLITS; /* pretend it is full (no strings to free) */
    const char *a[] = {"x"};
    uint64_t ab[] = {1};
    cr_expect_eq(sb_storage_pieces_add(&p, SB_IO_MAX_SPLITS, a, ab, 1, &err), -1);
    cr_expect(strstr(err.msg, "more than") != NULL, "%s", err.msg);
    p.n = 0;
    sb_storage_pieces_free(&p);
}

Test(storage, kinds_say_what_they_do)
{
    cr_expect_str_eq(sb_storage_kind_what(SB_STORAGE_PLAN), "planning the source");
    cr_expect_str_eq(sb_storage_kind_what(SB_STORAGE_COMMIT), "committing the sink");
    cr_expect_str_eq(sb_storage_kind_what((sb_storage_kind)99), "a storage job");
}
