/* sort's 8-byte key prefix (worker/ops/exchange/sort.c, xchg.h): on random mixed keys (nulls,
 * booleans, negative and huge numbers, -0.0, infinities, ints beyond 2^53 and 2^63, strings with
 * long equal beginnings, NULs and unicode, arrays, objects; one and two key fields) a lower prefix
 * always means a lower key under xsort_key_cmp, in every direction and null placement, equal keys
 * have equal prefixes (-0.0 and 0 too), and a NaN (which the compare ties with every number)
 * gives no prefix. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/exchange/xchg.h"

static const char *const pool[] = {
    "null",
    "true",
    "false",
    "0",
    "-0.0",
    "0.0",
    "1",
    "1.0",
    "-1",
    "-1.5",
    "-0.5",
    "0.5",
    "2.5e-300",
    "-2.5e-300",
    "1e300",
    "-1e300",
    "1e400",
    "-1e400",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616",
    "-9223372036854775809",
    "9007199254740993",
    "9007199254740992",
    "9007199254740992.5",
    "255",
    "256",
    "-255",
    "-256",
    "\"\"",
    "\"a\"",
    "\"a\\u0000\"",
    "\"a\\u0000\\u0000\"",
    "\"ab\"",
    "\"abcdefg\"",
    "\"abcdefgh\"",
    "\"abcdefghij1\"",
    "\"abcdefghij2\"",
    "\"abcdefghij\"",
    "\"\\u00e9\"",
    "\"\\u00e9t\\u00e9\"",
    "\"\xc3\xa9t\xc3\xa9\"",
    "\"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\"",
    "\"\xf0\x9f\x98\x80\"",
    "\"\\uffff\"",
    "\"\\u007f\"",
    "\"1\"",
    "[]",
    "[1]",
    "[1,2]",
    "[\"a\"]",
    "{}",
    "{\"a\":1}",
    "{\"b\":0}",
};
#define NPOOL (sizeof pool / sizeof *pool)

/* A random value: from the pool, or a random number or string (long shared beginnings). */
static void random_value(char *buf, size_t cap, unsigned *seed)
{
    int kind = rand_r(seed) % 4;
    if (kind == 0) {
        snprintf(buf, cap, "%lld", (long long)(rand_r(seed) % 2001) - 1000);
    } else if (kind == 1) {
        snprintf(buf, cap, "%.17g", ((double)rand_r(seed) / RAND_MAX - 0.5) * 1e6);
    } else if (kind == 2) {
        /* a string of 'a's of random length, then one random letter: equal prefixes galore */
        int n = rand_r(seed) % 12;
        size_t k = 0;
        buf[k++] = '"';
        for (int i = 0; i < n; i++)
            buf[k++] = 'a';
        buf[k++] = (char)('a' + rand_r(seed) % 3);
        buf[k++] = '"';
        buf[k] = '\0';
    } else {
        snprintf(buf, cap, "%s", pool[rand_r(seed) % NPOOL]);
    }
}

static cJSON *args_json; /* the args of the sorter alive (one at a time) */

static xsort *sorter(int nkeys, int desc0, int desc1, int nulls_first)
{
    char args[256];
    snprintf(args, sizeof args,
             "{\"keys\":[{\"field\":\"a\",\"descending\":%s}%s%s%s],\"nulls\":\"%s\"}",
             desc0 ? "true" : "false", nkeys > 1 ? ",{\"field\":\"b\",\"descending\":" : "",
             nkeys > 1 ? (desc1 ? "true" : "false") : "", nkeys > 1 ? "}" : "",
             nulls_first ? "first" : "last");
    cJSON *j = cJSON_Parse(args);
    cr_assert_not_null(j);
    sb_err e;
    xsort *so = xsort_new(j, 2, 1, 0, &e);
    cr_assert_not_null(so, "%s", e.msg);
    args_json = j; /* the xsort keeps pointers into its field names */
    return so;
}

static void sorter_free(xsort *so)
{
    xsort_free(so);
    cJSON_Delete(args_json);
    args_json = NULL;
}

/* n keys of nkeys fields each: every key's encoding (xkey_encode of each field, in order). */
static xbuf *random_keys(size_t n, int nkeys, unsigned seed)
{
    xbuf *k = calloc(n, sizeof *k);
    cr_assert_not_null(k);
    for (size_t i = 0; i < n; i++) {
        for (int f = 0; f < nkeys; f++) {
            char v[64];
            random_value(v, sizeof v, &seed);
            cr_assert_eq(xkey_encode(v, strlen(v), &k[i]), 0, "%s", v);
        }
    }
    return k;
}

/* Every pair of keys: the prefixes never contradict the full compare, and equal keys have equal
 * prefixes. Returns how many pairs the prefixes alone told apart. */
static size_t check_pairs(const xsort *so, const xbuf *k, size_t n, const char *what)
{
    uint64_t *p = malloc(n * sizeof *p);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(xsort_key_prefix(so, k[i].p, &p[i]), 0, "%s: key %zu has no prefix", what, i);
    size_t told = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            int c = xsort_key_cmp(so, k[i].p, k[j].p);
            if (p[i] < p[j]) {
                told++;
                cr_assert_lt(c, 0, "%s: keys %zu and %zu: prefix %016llx < %016llx, compare %d",
                             what, i, j, (unsigned long long)p[i], (unsigned long long)p[j], c);
            }
            if (c == 0)
                cr_assert_eq(p[i], p[j], "%s: equal keys %zu and %zu, prefixes differ", what, i, j);
        }
    }
    free(p);
    return told;
}

Test(allops_sortkeys, prefix_order_never_contradicts_the_compare)
{
    for (int cfg = 0; cfg < 16; cfg++) {
        int nkeys = 1 + (cfg & 1), desc0 = (cfg >> 1) & 1, desc1 = (cfg >> 2) & 1;
        int nulls_first = (cfg >> 3) & 1;
        if (nkeys == 1 && desc1)
            continue;
        char what[96];
        snprintf(what, sizeof what, "keys %d, descending %d/%d, nulls %s", nkeys, desc0, desc1,
                 nulls_first ? "first" : "last");
        xsort *so = sorter(nkeys, desc0, desc1, nulls_first);
        size_t n = 400;
        xbuf *k = random_keys(n, nkeys, 17u + (unsigned)cfg);
        size_t told = check_pairs(so, k, n, what);
        /* the prefix does its job: most ordered pairs of random mixed keys differ in it */
        cr_expect_gt(told, n * n / 4, "%s: prefixes told apart only %zu pairs", what, told);
        for (size_t i = 0; i < n; i++)
            xbuf_free(&k[i]);
        free(k);
        sorter_free(so);
    }
}

Test(allops_sortkeys, pool_values_against_each_other)
{
    for (int cfg = 0; cfg < 4; cfg++) {
        xsort *so = sorter(1, cfg & 1, 0, cfg >> 1);
        xbuf k[NPOOL] = {{0}};
        for (size_t i = 0; i < NPOOL; i++)
            cr_assert_eq(xkey_encode(pool[i], strlen(pool[i]), &k[i]), 0, "%s", pool[i]);
        check_pairs(so, k, NPOOL, pool[0]);
        for (size_t i = 0; i < NPOOL; i++)
            xbuf_free(&k[i]);
        sorter_free(so);
    }
}

static uint64_t prefix_of(const xsort *so, const char *v)
{
    xbuf b = {0};
    cr_assert_eq(xkey_encode(v, strlen(v), &b), 0);
    uint64_t p;
    cr_assert_eq(xsort_key_prefix(so, b.p, &p), 0, "%s", v);
    xbuf_free(&b);
    return p;
}

Test(allops_sortkeys, prefix_tells_apart_what_it_can)
{
    xsort *so = sorter(1, 0, 0, 0);
    /* each strictly below the next by its prefix alone (numbers by value across int and double,
     * -0.0 as 0, strings by their first 7 bytes, types by rank, nulls last) */
    const char *asc[] = {"false",  "true",        "-1e400", "-1e300", "-9223372036854775808",
                         "-1",     "-0.5",        "-0.0",   "0.5",    "1",
                         "256",    "1e300",       "1e400",  "\"\"",   "\"a\"",
                         "\"ab\"", "\"\\u00e9\"", "[]",     "{}",     "null"};
    for (size_t i = 0; i + 1 < sizeof asc / sizeof *asc; i++)
        cr_expect_lt(prefix_of(so, asc[i]), prefix_of(so, asc[i + 1]), "%s < %s", asc[i],
                     asc[i + 1]);
    cr_expect_eq(prefix_of(so, "-0.0"), prefix_of(so, "0"));
    cr_expect_eq(prefix_of(so, "1.0"), prefix_of(so, "1"));
    /* past 7 bytes a string's prefix says nothing: the full compare decides */
    cr_expect_eq(prefix_of(so, "\"abcdefgX\""), prefix_of(so, "\"abcdefgY\""));
    sorter_free(so);

    so = sorter(1, 1, 0, 1); /* descending, nulls first: null still below everything */
    cr_expect_lt(prefix_of(so, "null"), prefix_of(so, "{}"));
    cr_expect_lt(prefix_of(so, "2"), prefix_of(so, "1"));
    cr_expect_lt(prefix_of(so, "\"b\""), prefix_of(so, "\"a\""));
    sorter_free(so);
}

/* Encodings xkey_encode never makes (it turns -0.0 into the integer 0) but the compare takes. */
static void put_double(char enc[9], double d)
{
    enc[0] = 'd';
    memcpy(enc + 1, &d, 8);
}

Test(allops_sortkeys, hand_made_doubles_nan_and_minus_zero)
{
    xsort *so = sorter(1, 0, 0, 0);
    char nan[9], mz[9], zero[9] = {'i'};
    put_double(nan, NAN);
    uint64_t p, q;
    cr_expect_eq(xsort_key_prefix(so, nan, &p), -1, "a NaN has no prefix");
    put_double(mz, -0.0);
    cr_assert_eq(xsort_key_cmp(so, mz, zero), 0);
    cr_assert_eq(xsort_key_prefix(so, mz, &p), 0);
    cr_assert_eq(xsort_key_prefix(so, zero, &q), 0);
    cr_expect_eq(p, q, "-0.0 and 0 compare equal: their prefixes too");
    sorter_free(so);
}
