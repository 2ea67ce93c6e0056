/* heap.c — the worker's check for resident freed heap (heap.h): the anonymous resident memory
 * from /proc/self/statm against malloc's figures (mallinfo2), and a trim past the margin; and
 * the window over which the memory outside the store is counted at its peak. */
#include "worker/heap.h"

#include <malloc.h>
#include <stdio.h>
#include <unistd.h>

size_t sb_heap_keep(size_t store_budget)
{
    size_t keep = store_budget / 16, lo = (size_t)4 << 20, hi = (size_t)32 << 20;
    return keep < lo ? lo : keep > hi ? hi : keep;
}

size_t sb_heap_anon(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    unsigned long size, resident, shared;
    int n = fscanf(f, "%lu %lu %lu", &size, &resident, &shared);
    fclose(f);
    if (n != 3 || resident < shared)
        return 0;
    /* statm's shared is the file-backed and shmem pages: the rest is anonymous */
    return (size_t)(resident - shared) * (size_t)sysconf(_SC_PAGESIZE);
}

size_t sb_heap_outside(size_t anon, size_t store_mem, size_t allowance)
{
    return anon > store_mem && anon - store_mem > allowance ? anon - store_mem - allowance : 0;
}

int sb_heap_check(size_t anon, size_t outside, size_t keep)
{
    if (anon == 0)
        return -1;
    struct mallinfo2 mi = mallinfo2();
    /* freed heap is surely resident: more is resident than malloc handed out */
    int holes = anon > mi.uordblks + mi.hblkhd + keep;
    /* it may be: the process is past what its store accounts for, and the arenas hold free
     * blocks (their pages may already be given back: then the trim only walks them) */
    int over = outside > keep && mi.fordblks > keep;
    if (!holes && !over)
        return 0;
    malloc_trim(0);
    return 1;
}

size_t sb_heap_peak_add(sb_heap_peak *p, uint64_t now_ms, size_t bytes)
{
    uint64_t k = now_ms / SB_HEAP_PEAK_SLOT_MS;
    if (k != p->at) {
        /* the slots passed since the newest reading are empty (all of them after a long gap,
         * or a clock that went back) */
        uint64_t gap = k > p->at ? k - p->at : SB_HEAP_PEAK_SLOTS;
        for (uint64_t i = 1; i <= gap && i <= SB_HEAP_PEAK_SLOTS; i++)
            p->slot[(p->at + i) % SB_HEAP_PEAK_SLOTS] = 0;
        p->at = k;
    }
    size_t *cur = &p->slot[k % SB_HEAP_PEAK_SLOTS];
    if (bytes > *cur)
        *cur = bytes;
    size_t most = 0;
    for (size_t i = 0; i < SB_HEAP_PEAK_SLOTS; i++)
        most = p->slot[i] > most ? p->slot[i] : most;
    return most;
}
