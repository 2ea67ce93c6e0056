/* worker/heap.c: a worker's freed heap that stays resident between blocks still in use is
 * handed back once it passes the margin, and only then (before, nothing did this within a task:
 * the holes stayed resident until the task's end, outside the budget). */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/heap.h"

/* Under ASan malloc is ASan's (its own quarantine, no mallinfo2 figures): nothing to measure. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static long anon_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    unsigned long size, resident, shared;
    cr_assert_eq(fscanf(f, "%lu %lu %lu", &size, &resident, &shared), 3);
    fclose(f);
    return (long)(resident - shared) * sysconf(_SC_PAGESIZE);
}

Test(heap, keep_is_a_sixteenth_of_the_store_between_4_and_32_mib)
{
    cr_expect_eq(sb_heap_keep(0), 4u << 20);
    cr_expect_eq(sb_heap_keep(32u << 20), 4u << 20);
    cr_expect_eq(sb_heap_keep(256u << 20), 16u << 20);
    cr_expect_eq(sb_heap_keep((size_t)4 << 30), 32u << 20);
}

/* What the store makes room for: the anonymous memory beyond the store's bytes and the
 * allowance, never negative; and the process's anonymous memory is read (it grows by what this
 * test touches). */
Test(heap, outside_is_what_passes_the_store_and_the_allowance)
{
    const size_t M = (size_t)1 << 20;
    cr_expect_eq(sb_heap_outside(300 * M, 256 * M, 32 * M), 12 * M);
    cr_expect_eq(sb_heap_outside(280 * M, 256 * M, 32 * M), 0);
    cr_expect_eq(sb_heap_outside(100 * M, 256 * M, 32 * M), 0, "a store larger than the process");
    cr_expect_eq(sb_heap_outside(64 * M, 0, SB_HEAP_ALLOWANCE), 32 * M);
    size_t before = sb_heap_anon();
    cr_assert_gt(before, 0);
    char *p = malloc(64 * M);
    cr_assert_not_null(p);
    memset(p, 1, 64 * M);
    size_t after = sb_heap_anon();
    cr_expect_geq(after, before + 60 * M, "anon %zu -> %zu after touching 64 MiB", before, after);
    free(p);
}

Test(heap, resident_holes_past_the_margin_are_trimmed_and_only_then)
{
#ifdef UNDER_ASAN
    cr_skip_test("ASan's allocator");
#endif
    /* as the worker sets malloc (sb_rpc_tune_malloc): freed heap is kept, up to 64 MiB */
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    enum { N = 64, SZ = 1 << 20 };
    char *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = malloc(SZ);
        cr_assert_not_null(b[i]);
        memset(b[i], i + 1, SZ);
    }
    malloc_trim(0);
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 4u << 20), 0, "all in use: nothing to trim");
    for (int i = 0; i < N; i += 2) { /* 32 holes of 1 MiB between blocks in use */
        free(b[i]);
        b[i] = NULL;
    }
    long before = anon_bytes();
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 64u << 20), 0,
                 "32 MiB free is within a 64 MiB margin");
    cr_expect_geq(anon_bytes(), before - (4l << 20), "no trim: the holes stay resident");
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 4u << 20), 1, "32 MiB free and resident: trimmed");
    long after = anon_bytes();
    cr_expect_leq(after, before - (24l << 20), "the trim gave back %ld bytes of ~32 MiB",
                  before - after);
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 4u << 20), 0,
                 "once trimmed, the free heap is no longer resident");
    for (int i = 1; i < N; i += 2) {
        cr_assert_eq(b[i][0], i + 1);
        cr_assert_eq(b[i][SZ - 1], i + 1, "a block in use kept its bytes");
        free(b[i]);
    }
}
