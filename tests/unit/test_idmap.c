/* The lineage tables' containers: sb_idmap (an id -> index map that reads the ids back from the
 * caller's array instead of copying them) and sb_strpool (strings packed in blocks). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/idmap.h"
#include "core/strpool.h"

typedef struct {
    char **ids;
} table;

static const char *key_of(const void *ctx, size_t i)
{
    return ((const table *)ctx)->ids[i];
}

Test(idmap, maps_many_ids_and_finds_each_after_growing)
{
    enum { N = 100000 };
    table t = {.ids = calloc(N, sizeof(char *))};
    sb_strpool pool = {0};
    sb_idmap m;
    sb_idmap_init(&m, key_of, &t);
    size_t v = 0;
    cr_assert_eq(sb_idmap_get(&m, "s0-t0-p0", &v), 0, "an empty map finds nothing");
    char buf[64];
    for (size_t i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "s%zu-t%zu-p%zu", i % 3, i, i % 7);
        t.ids[i] = sb_strpool_dup(&pool, buf);
        cr_assert_not_null(t.ids[i]);
        cr_assert_eq(sb_idmap_put(&m, buf, i), 0);
    }
    cr_assert_eq(m.used, N);
    cr_assert(m.used * 4 <= m.cap * 3, "load %zu of %zu", m.used, m.cap);
    cr_assert_eq(sb_idmap_bytes(&m), m.cap * 8);
    for (size_t i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "s%zu-t%zu-p%zu", i % 3, i, i % 7);
        cr_assert_eq(sb_idmap_get(&m, buf, &v), 1, "%s", buf);
        cr_assert_eq(v, i, "%s -> %zu", buf, v);
        cr_assert_str_eq(t.ids[i], buf, "the pool kept %s", buf);
    }
    cr_expect_eq(sb_idmap_get(&m, "s0-t0-p1", NULL), 0, "an id never put");
    cr_expect_eq(sb_idmap_get(&m, "", NULL), 0);
    sb_idmap_free(&m);
    sb_strpool_free(&pool);
    free(t.ids);
}

Test(idmap, put_of_an_equal_id_replaces_its_index)
{
    char *ids[3] = {"a", "b", "a"};
    table t = {.ids = ids};
    sb_idmap m;
    sb_idmap_init(&m, key_of, &t);
    cr_assert_eq(sb_idmap_put(&m, "a", 0), 0);
    cr_assert_eq(sb_idmap_put(&m, "b", 1), 0);
    cr_assert_eq(sb_idmap_put(&m, "a", 2), 0);
    size_t v = 9;
    cr_assert_eq(sb_idmap_get(&m, "a", &v), 1);
    cr_expect_eq(v, 2);
    cr_expect_eq(m.used, 2, "replacing adds no entry");
    cr_expect_eq(sb_idmap_put(&m, "c", (size_t)UINT32_MAX), -1, "an index too large is refused");
    cr_expect_eq(m.used, 2);
    sb_idmap_free(&m);
}

Test(strpool, packs_short_strings_and_keeps_long_ones_whole)
{
    sb_strpool p = {0};
    char *a = sb_strpool_dup(&p, "s0-t1-p0");
    char *b = sb_strpool_dup(&p, "");
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_expect_eq(b, a + 9, "packed end to end");
    size_t n = 200000;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    char *c = sb_strpool_dup(&p, big);
    cr_assert_not_null(c);
    char *d = sb_strpool_dup(&p, "after");
    cr_expect_eq(d, b + 1, "a string longer than a block does not end the block being filled");
    cr_expect_str_eq(c, big);
    cr_expect_str_eq(a, "s0-t1-p0");
    cr_expect_str_eq(d, "after");
    cr_expect_geq(p.bytes, n + 1 + 65536);
    free(big);
    sb_strpool_free(&p);
    cr_expect_eq(p.bytes, 0);
    cr_expect_null(p.head);
}
