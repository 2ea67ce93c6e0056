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
    cr_expect_eq(sb_heap_outside(64 * M, 0, SB_HEAP_ALLOWANCE), 40 * M);
    size_t before = sb_heap_anon();
    cr_assert_gt(before, 0);
    char *p = malloc(64 * M);
    cr_assert_not_null(p);
    memset(p, 1, 64 * M);
    size_t after = sb_heap_anon();
    cr_expect_geq(after, before + 60 * M, "anon %zu -> %zu after touching 64 MiB", before, after);
    free(p);
}

enum { NBLOCKS = 64, BLOCK = 1 << 20 };

/* Malloc set as the worker sets it (sb_rpc_tune_malloc: freed heap is kept, up to 64 MiB), then
 * NBLOCKS touched blocks of BLOCK bytes, block i filled with i + 1. */
static void blocks_fill(char **b)
{
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    for (int i = 0; i < NBLOCKS; i++) {
        b[i] = malloc(BLOCK);
        cr_assert_not_null(b[i]);
        memset(b[i], i + 1, BLOCK);
    }
}

/* Frees every other block: 32 holes of 1 MiB between blocks in use, resident. */
static void blocks_hole(char **b)
{
    for (int i = 0; i < NBLOCKS; i += 2) {
        free(b[i]);
        b[i] = NULL;
    }
}

/* The blocks left kept their bytes; frees them. */
static void blocks_check_free(char **b)
{
    for (int i = 1; i < NBLOCKS; i += 2) {
        cr_assert_eq(b[i][0], i + 1);
        cr_assert_eq(b[i][BLOCK - 1], i + 1, "a block in use kept its bytes");
        free(b[i]);
    }
}

Test(heap, resident_holes_past_the_margin_are_trimmed_and_only_then)
{
#ifdef UNDER_ASAN
    cr_skip_test("ASan's allocator");
#endif
    char *b[NBLOCKS];
    blocks_fill(b);
    malloc_trim(0);
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 0, 4u << 20), 0, "all in use: nothing to trim");
    blocks_hole(b);
    long before = anon_bytes();
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 0, 64u << 20), 0,
                 "32 MiB free is within a 64 MiB margin");
    cr_expect_geq(anon_bytes(), before - (4l << 20), "no trim: the holes stay resident");
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 0, 4u << 20), 1,
                 "32 MiB free and resident: trimmed");
    long after = anon_bytes();
    cr_expect_leq(after, before - (24l << 20), "the trim gave back %ld bytes of ~32 MiB",
                  before - after);
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 0, 4u << 20), 0,
                 "once trimmed, the free heap is no longer resident");
    blocks_check_free(b);
}

/* A block reserved ahead (mapped by malloc at its whole size, touched as it fills) hid the
 * freed heap beside it from the first rule: a sort's reduce reserved 264 MiB, touched ~100, and
 * left ~130 MiB of freed inputs resident while its store spilled partitions to make room for
 * them. Once the process is past what its store accounts for, the free heap is given back. */
Test(heap, freed_heap_beside_a_block_reserved_ahead_is_trimmed_when_past_the_store)
{
#ifdef UNDER_ASAN
    cr_skip_test("ASan's allocator");
#endif
    char *b[NBLOCKS];
    blocks_fill(b);
    char *ahead = malloc((size_t)256 << 20); /* mapped; only its first 8 MiB touched */
    cr_assert_not_null(ahead);
    memset(ahead, 7, (size_t)8 << 20);
    blocks_hole(b);
    long before = anon_bytes();
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 0, 4u << 20), 0,
                 "within the store's accounting: the reserved block hides the holes");
    cr_expect_geq(anon_bytes(), before - (4l << 20), "no trim: the holes stay resident");
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 2u << 20, 4u << 20), 0,
                 "past it by less than the margin: still no trim");
    cr_expect_eq(sb_heap_check(sb_heap_anon(), 64u << 20, 4u << 20), 1,
                 "past the store's accounting by 64 MiB: trimmed");
    long after = anon_bytes();
    cr_expect_leq(after, before - (24l << 20), "the trim gave back %ld bytes of ~32 MiB",
                  before - after);
    cr_assert_eq(ahead[0], 7);
    cr_assert_eq(ahead[(8 << 20) - 1], 7, "the reserved block kept its bytes");
    blocks_check_free(b);
    free(ahead);
}

/* The store makes room for the most the process held outside it over the last two seconds, not
 * for the last reading: a sort's reduce tasks swing the process by ~170 MiB within half a
 * second, and readings between the swings let the store refill just before the next one. */
Test(heap, the_peak_outside_holds_for_the_window_then_expires)
{
    const size_t M = (size_t)1 << 20;
    sb_heap_peak p = {0};
    uint64_t t = 1000000; /* any monotonic clock */
    cr_expect_eq(sb_heap_peak_add(&p, t, 10 * M), 10 * M);
    cr_expect_eq(sb_heap_peak_add(&p, t + 20, 90 * M), 90 * M, "a swing");
    cr_expect_eq(sb_heap_peak_add(&p, t + 40, 0), 90 * M, "the swing ended: still counted");
    uint64_t window = (uint64_t)SB_HEAP_PEAK_SLOTS * SB_HEAP_PEAK_SLOT_MS;
    cr_expect_eq(window, 2000, "two seconds, as heap.h says");
    cr_expect_eq(sb_heap_peak_add(&p, t + window - SB_HEAP_PEAK_SLOT_MS, 5 * M), 90 * M,
                 "within the window");
    cr_expect_eq(sb_heap_peak_add(&p, t + window + SB_HEAP_PEAK_SLOT_MS, 5 * M), 5 * M,
                 "past the window the swing no longer counts");
    cr_expect_eq(sb_heap_peak_add(&p, t + 10 * window, 0), 0, "after a long gap: empty");
    /* a swing every half second keeps the peak counted */
    size_t least = SIZE_MAX;
    for (uint64_t ms = 0; ms < 10 * window; ms += 20) {
        size_t got = sb_heap_peak_add(&p, t + 20 * window + ms, ms % 500 < 100 ? 70 * M : M);
        if (ms >= 500 && got < least)
            least = got;
    }
    cr_expect_eq(least, 70 * M, "swings every 0.5 s: counted at their peak throughout");
    cr_expect_eq(sb_heap_peak_add(&p, 5, 3 * M), 3 * M, "a clock that went back starts afresh");
}
