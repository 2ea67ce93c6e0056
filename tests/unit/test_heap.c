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
