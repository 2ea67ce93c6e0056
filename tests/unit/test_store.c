/* Unit tests of worker/store: put/pin/read/load/release, spilling and its order, reservations
 * and the budget cases, pins, bad spill files, odd sizes. Each test works in its own mkdtemp()
 * directory and removes it. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "worker/heap.h"
#include "worker/store/store.h"
#include "testutil.h"

#define KiB ((size_t)1024)

static char g_dir[64];
static atomic_size_t g_freed_blobs, g_freed_bytes;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void)
{
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-test-store");
    cr_assert_not_null(mkdtemp(g_dir));
    atomic_store(&g_freed_blobs, 0);
    atomic_store(&g_freed_bytes, 0);
}

static void teardown(void)
{
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

/* Number of directory entries (other than . and ..) in dir; -1 if it does not exist. */
static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* The path of the only spill file in the store's directory (asserts there is exactly one). */
static void only_spill_file(sb_store *s, char *out, size_t cap)
{
    DIR *d = opendir(sb_store_spill_path(s));
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || strcmp(de->d_name, "..") == 0))
            continue;
        snprintf(out, cap, "%s/%s", sb_store_spill_path(s), de->d_name);
        n++;
    }
    closedir(d);
    cr_assert_eq(n, 1, "expected one spill file, found %d", n);
}

static unsigned char pat(unsigned seed, size_t i)
{
    uint32_t x = seed * 2654435761u ^ (uint32_t)(i >> 8) * 40503u;
    return (unsigned char)(x ^ (x >> 13) ^ i);
}

static void *make_blob(unsigned seed, size_t len)
{
    unsigned char *b = malloc(len ? len : 1);
    cr_assert_not_null(b);
    for (size_t i = 0; i < len; i++)
        b[i] = pat(seed, i);
    return b;
}

static void assert_pattern(const void *data, unsigned seed, size_t off, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat(seed, off + i))
            cr_assert_fail("byte %zu differs: %u, expected %u", off + i, p[i], pat(seed, off + i));
}

static void counting_free(void *blob, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_freed_blobs, 1);
    free(blob);
}

static sb_store *open_store(size_t budget, size_t chunk)
{
    sb_store_config cfg = {
        .memory_budget = budget, .spill_dir = g_dir, .chunk_size = chunk, .free_fn = counting_free};
    sb_store *s = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_open(&cfg, &s, &err), 0, "open: %s", err.msg);
    cr_assert_not_null(s);
    return s;
}

static void put_ok(sb_store *s, const char *id, unsigned seed, size_t len, uint64_t next)
{
    sb_store_hints h = {.next_needed = next};
    sb_err err = {0};
    int rc = sb_store_put(s, id, make_blob(seed, len), len, &h, &err);
    cr_assert_eq(rc, 0, "put %s: %s", id, err.msg);
}

static void check_ok(sb_store *s)
{
    sb_err err = {0};
    cr_assert_eq(sb_store_check(s, &err), 0, "%s", err.msg);
}

static int in_memory(sb_store *s, const char *id)
{
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, id, &r, &err), 0, "pin %s: %s", id, err.msg);
    int m = sb_store_ref_in_memory(r);
    sb_store_unpin(r);
    return m;
}

/* Reads the whole partition through sb_store_read in pieces of `step` bytes and checks it. */
static void read_all_check(sb_store_ref *r, unsigned seed, size_t step)
{
    size_t len = sb_store_ref_len(r);
    unsigned char *buf = malloc(step);
    cr_assert_not_null(buf);
    size_t off = 0;
    sb_err err = {0};
    while (off < len) {
        ssize_t n = sb_store_read(r, off, buf, step, &err);
        cr_assert_gt(n, 0, "read at %zu: %zd %s", off, n, err.msg);
        cr_assert_eq((size_t)n, len - off < step ? len - off : step);
        assert_pattern(buf, seed, off, (size_t)n);
        off += (size_t)n;
    }
    cr_assert_eq(sb_store_read(r, len, buf, step, &err), 0);
    free(buf);
}

Test(store, open_close_removes_its_directory)
{
    sb_store *s = open_store(1 * KiB, 0);
    char path[256];
    snprintf(path, sizeof path, "%s", sb_store_spill_path(s));
    cr_assert_eq(strncmp(path, g_dir, strlen(g_dir)), 0);
    cr_assert_eq(count_files(path), 0);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.chunk_size, SB_STORE_DEFAULT_CHUNK);
    cr_assert_eq(st.budget, 1 * KiB);
    cr_assert_eq(st.mem_bytes, 0);
    cr_assert_eq(st.mem_partitions + st.disk_partitions, 0);
    sb_store_close(s);
    cr_assert_eq(count_files(path), -1);
    cr_assert_eq(count_files(g_dir), 0);
}

Test(store, open_rejects_bad_config)
{
    sb_store *s = (sb_store *)1;
    sb_err err = {0};
    sb_store_config cfg = {.memory_budget = 1, .spill_dir = NULL};
    cr_assert_eq(sb_store_open(&cfg, &s, &err), -1);
    cr_assert_null(s);
    cr_assert(strstr(err.msg, "spill directory") != NULL, "%s", err.msg);
    cfg.spill_dir = g_dir;
    cfg.chunk_size = SB_STORE_MAX_CHUNK + 1;
    cr_assert_eq(sb_store_open(&cfg, &s, &err), -1);
    cr_assert(strstr(err.msg, "chunk size") != NULL, "%s", err.msg);
    cfg.chunk_size = 0;
    cfg.spill_dir = "/proc/no/such/dir";
    cr_assert_eq(sb_store_open(&cfg, &s, &err), -1);
    cr_assert(strstr(err.msg, "/proc/no/such/dir") != NULL, "%s", err.msg);
}

Test(store, open_creates_missing_spill_dir)
{
    char sub[128];
    snprintf(sub, sizeof sub, "%s/spill", g_dir);
    sb_store_config cfg = {.memory_budget = 1, .spill_dir = sub};
    sb_store *s = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_open(&cfg, &s, &err), 0, "%s", err.msg);
    cr_assert_eq(count_files(sub), 1);
    sb_store_close(s);
    cr_assert_eq(count_files(sub), 0);
}

Test(store, put_pin_read_in_memory)
{
    sb_store *s = open_store(64 * KiB, 4 * KiB);
    put_ok(s, "s1-t42-p0", 7, 10000, 0);
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "s1-t42-p0", &r, &err), 0, "%s", err.msg);
    cr_assert(sb_store_ref_in_memory(r));
    cr_assert_eq(sb_store_ref_len(r), 10000);
    cr_assert_str_eq(sb_store_ref_id(r), "s1-t42-p0");
    cr_assert_not_null(sb_store_ref_data(r));
    assert_pattern(sb_store_ref_data(r), 7, 0, 10000);
    unsigned char buf[300];
    cr_assert_eq(sb_store_read(r, 9900, buf, sizeof buf, &err), 100);
    assert_pattern(buf, 7, 9900, 100);
    cr_assert_eq(sb_store_read(r, 123, buf, sizeof buf, &err), 300);
    assert_pattern(buf, 7, 123, 300);
    cr_assert_eq(sb_store_read(r, 20000, buf, sizeof buf, &err), 0);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 10000);
    cr_assert_eq(st.resident_bytes, 10000);
    cr_assert_eq(st.mem_partitions, 1);
    cr_assert_eq(st.pinned_partitions, 1);
    cr_assert_eq(st.spill_count, 0);
    cr_assert_eq(st.readback_bytes, 0, "memory reads are not read-back from disk");
    sb_store_unpin(r);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.pinned_partitions, 0);
    check_ok(s);
    sb_store_close(s);
    cr_assert_eq(atomic_load(&g_freed_blobs), 1, "close frees the blob with free_fn");
}

Test(store, duplicate_id_is_eexist_and_blob_is_freed)
{
    sb_store *s = open_store(64 * KiB, 0);
    put_ok(s, "a", 1, 100, 0);
    sb_err err = {0};
    cr_assert_eq(sb_store_put(s, "a", make_blob(2, 50), 50, NULL, &err), SB_STORE_EEXIST);
    cr_assert(strstr(err.msg, "a") != NULL);
    cr_assert_eq(atomic_load(&g_freed_blobs), 1, "the rejected blob is freed by the store");
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 100);
    /* invalid arguments also free the blob */
    cr_assert_eq(sb_store_put(s, "", make_blob(3, 10), 10, NULL, &err), SB_STORE_EFAIL);
    cr_assert_eq(atomic_load(&g_freed_blobs), 2);
    char longid[SB_STORE_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    cr_assert_eq(sb_store_put(s, longid, make_blob(3, 10), 10, NULL, &err), SB_STORE_EFAIL);
    cr_assert(strstr(err.msg, "longer") != NULL, "%s", err.msg);
    cr_assert_eq(sb_store_put(s, "b", NULL, 10, NULL, &err), SB_STORE_EFAIL);
    check_ok(s);
    sb_store_close(s);
    cr_assert_eq(atomic_load(&g_freed_blobs), 4);
}

Test(store, unknown_id_is_enotfound)
{
    sb_store *s = open_store(64 * KiB, 0);
    sb_store_ref *r = (sb_store_ref *)1;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "s9-t9-p9", &r, &err), SB_STORE_ENOTFOUND);
    cr_assert_null(r);
    cr_assert(strstr(err.msg, "s9-t9-p9") != NULL, "%s", err.msg);
    cr_assert_eq(sb_store_load(s, "s9-t9-p9", 0, &r, &err), SB_STORE_ENOTFOUND);
    cr_assert_eq(sb_store_release(s, "s9-t9-p9", &err), SB_STORE_ENOTFOUND);
    put_ok(s, "x", 1, 10, 0);
    cr_assert_eq(sb_store_release(s, "x", &err), 0);
    cr_assert_eq(sb_store_release(s, "x", &err), SB_STORE_ENOTFOUND, "released twice");
    cr_assert_eq(sb_store_pin(s, "x", &r, NULL), SB_STORE_ENOTFOUND, "err may be NULL");
    sb_store_close(s);
}

Test(store, zero_length_partition)
{
    sb_store *s = open_store(0, 0); /* a zero budget still holds empty partitions */
    sb_err err = {0};
    cr_assert_eq(sb_store_put(s, "empty", NULL, 0, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_store_put(s, "empty2", malloc(1), 0, NULL, &err), 0, "%s", err.msg);
    sb_store_ref *r = NULL;
    cr_assert_eq(sb_store_pin(s, "empty", &r, &err), 0, "%s", err.msg);
    cr_assert(sb_store_ref_in_memory(r));
    cr_assert_eq(sb_store_ref_len(r), 0);
    char b[4];
    cr_assert_eq(sb_store_read(r, 0, b, sizeof b, &err), 0);
    sb_store_unpin(r);
    cr_assert_eq(sb_store_load(s, "empty2", 0, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_store_ref_len(r), 0);
    sb_store_unpin(r);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 0);
    cr_assert_eq(st.mem_partitions, 2);
    cr_assert_eq(st.spill_count, 0);
    sb_store_item *items = NULL;
    size_t n = 0;
    cr_assert_eq(sb_store_list(s, &items, &n, &err), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(items[0].len + items[1].len, 0);
    free(items);
    cr_assert_eq(sb_store_release(s, "empty2", &err), 0);
    cr_assert_eq(atomic_load(&g_freed_blobs), 1, "the non-NULL empty blob is freed");
    check_ok(s);
    sb_store_close(s);
}

Test(store, spill_and_read_back_byte_identical)
{
    const size_t chunk = 16 * KiB, len = 100 * KiB + 123;
    sb_store *s = open_store(256 * KiB, chunk);
    put_ok(s, "p0", 10, len, 1);
    put_ok(s, "p1", 11, len, 2);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.spill_count, 0);
    put_ok(s, "p2", 12, len, 3); /* 300 KiB > 256 KiB: the least soon needed (p2) goes */
    check_ok(s);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.spill_count, 1);
    cr_assert_eq(st.spilled_bytes, len);
    cr_assert_eq(st.mem_bytes, 2 * len);
    cr_assert_eq(st.disk_bytes, len);
    cr_assert_eq(st.mem_partitions, 2);
    cr_assert_eq(st.disk_partitions, 1);
    cr_assert_leq(st.peak_mem_bytes, st.budget + st.chunk_size);
    cr_assert_eq(count_files(sb_store_spill_path(s)), 1);
    cr_assert(!in_memory(s, "p2"));

    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "p2", &r, &err), 0, "%s", err.msg);
    cr_assert(!sb_store_ref_in_memory(r));
    cr_assert_null(sb_store_ref_data(r));
    cr_assert_eq(sb_store_ref_len(r), len);
    read_all_check(r, 12, chunk);         /* chunk-aligned */
    read_all_check(r, 12, 1000);          /* unaligned, crossing chunks */
    read_all_check(r, 12, 3 * chunk + 7); /* several chunks at once */
    read_all_check(r, 12, len + 50);      /* all at once */
    unsigned char one;
    cr_assert_eq(sb_store_read(r, len - 1, &one, 1, &err), 1);
    assert_pattern(&one, 12, len - 1, 1);
    sb_store_unpin(r);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 2 * len, "reading from spill costs no budget");
    cr_assert_eq(st.readback_bytes, 4 * len + 1);

    /* load it back: someone else (p1, next needed later than p0) makes room */
    cr_assert_eq(sb_store_load(s, "p2", 0, &r, &err), 0, "%s", err.msg);
    cr_assert(sb_store_ref_in_memory(r));
    assert_pattern(sb_store_ref_data(r), 12, 0, len);
    read_all_check(r, 12, 999);
    sb_store_unpin(r);
    check_ok(s);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.load_count, 1);
    cr_assert_eq(st.mem_bytes, 2 * len);
    cr_assert_eq(st.disk_partitions, 1);
    cr_assert_eq(count_files(sb_store_spill_path(s)), 1, "the loaded file is gone, p1's is new");
    cr_assert(in_memory(s, "p2"));
    cr_assert(!in_memory(s, "p1"));
    cr_assert(in_memory(s, "p0"));
    sb_store_close(s);
    cr_assert_eq(count_files(g_dir), 0, "close deletes every spill file");
}

Test(store, spills_least_soon_needed_first)
{
    sb_store *s = open_store(300 * KiB, 4 * KiB);
    put_ok(s, "a", 1, 100 * KiB, 10);
    put_ok(s, "b", 2, 100 * KiB, 50);
    put_ok(s, "c", 3, 100 * KiB, 30);
    put_ok(s, "d", 4, 100 * KiB, 0); /* needed first: b (50) must go */
    cr_assert(in_memory(s, "a"));
    cr_assert(!in_memory(s, "b"));
    cr_assert(in_memory(s, "c"));
    cr_assert(in_memory(s, "d"));
    put_ok(s, "e", 5, 100 * KiB, 20); /* next: c (30) */
    cr_assert(!in_memory(s, "c"));
    cr_assert(in_memory(s, "e"));
    put_ok(s, "f", 6, 200 * KiB, 40); /* needed later than all in memory: itself to disk */
    cr_assert(!in_memory(s, "f"));
    cr_assert(in_memory(s, "a") && in_memory(s, "d") && in_memory(s, "e"));
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.direct_spill_count, 1);
    cr_assert_eq(st.spill_count, 3);
    cr_assert_eq(st.mem_bytes, 300 * KiB);
    cr_assert_eq(st.unbudgeted_bytes, 0);
    check_ok(s);
    sb_store_close(s);
}

/* A spill gives the memory it frees back to the system at once (issue 41): malloc tuned as the
 * worker tunes it keeps freed heap (up to 64 MiB), so the memory a reservation made room for came
 * on top of the spilled blobs until the worker's heap check trimmed, up to 250 ms later. Here a
 * reservation that spills 12 partitions of 4 MiB leaves the process at least 32 MiB smaller
 * (before: within a few KiB of where it was). */
Test(store, a_spill_gives_its_memory_back_at_once)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("ASan's allocator keeps freed memory in its own quarantine");
#endif
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    const size_t M = (size_t)1 << 20;
    sb_store *s = open_store(64 * M, M);
    char id[32];
    for (int i = 0; i < 12; i++) {
        snprintf(id, sizeof id, "s1-t%d-p0", i);
        put_ok(s, id, (unsigned)i, 4 * M, (uint64_t)i);
    }
    size_t before = sb_heap_anon();
    sb_store_resv *resv = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_reserve(s, 64 * M, 0, &resv, &err), 0, "%s", err.msg);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.spill_count, 12, "every partition spilled to make room");
    size_t after = sb_heap_anon();
    cr_expect_geq(before, after + 32 * M, "anonymous memory %zu MiB -> %zu MiB after the spills",
                  before / M, after / M);
    sb_store_unreserve(resv);
    check_ok(s);
    sb_store_close(s);
}

Test(store, release_frees_memory_and_files)
{
    sb_store *s = open_store(200 * KiB, 8 * KiB);
    char id[32];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "s1-t%d-p0", i);
        put_ok(s, id, (unsigned)i, 90 * KiB, (uint64_t)i);
    }
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_partitions, 2);
    cr_assert_eq(st.disk_partitions, 4);
    cr_assert_eq(count_files(sb_store_spill_path(s)), 4);
    sb_err err = {0};
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "s1-t%d-p0", i);
        cr_assert_eq(sb_store_release(s, id, &err), 0, "%s", err.msg);
        check_ok(s);
        sb_store_get_stats(s, &st);
        cr_assert_eq(st.mem_partitions + st.disk_partitions, (size_t)(5 - i));
        cr_assert_eq(count_files(sb_store_spill_path(s)), (int)st.disk_partitions);
    }
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 0);
    cr_assert_eq(st.disk_bytes, 0);
    cr_assert_eq(atomic_load(&g_freed_blobs), 6, "every blob freed exactly once");
    sb_store_close(s);
}

Test(store, pinned_partition_is_never_spilled)
{
    sb_store *s = open_store(200 * KiB, 8 * KiB);
    put_ok(s, "keep", 1, 100 * KiB, 1000); /* the least soon needed of all */
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "keep", &r, &err), 0);
    const void *p = sb_store_ref_data(r);
    char id[32];
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "o%d", i);
        put_ok(s, id, (unsigned)i + 2, 60 * KiB, (uint64_t)i);
        sb_store_stats st;
        sb_store_get_stats(s, &st);
        cr_assert_leq(st.mem_bytes, st.budget);
    }
    cr_assert_eq(sb_store_ref_data(r), p);
    cr_assert(in_memory(s, "keep"));
    assert_pattern(p, 1, 0, 100 * KiB);

    /* a reservation cannot be had by spilling a pinned partition */
    sb_store_resv *resv = NULL;
    cr_assert_eq(sb_store_reserve(s, 150 * KiB, 0, &resv, &err), SB_STORE_ENOSPACE);
    cr_assert_null(resv);
    cr_assert(strstr(err.msg, "no room") != NULL, "%s", err.msg);

    /* releasing a pinned partition defers the free */
    cr_assert_eq(sb_store_release(s, "keep", &err), 0);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.deferred_releases, 1);
    cr_assert_geq(st.resident_bytes, 100 * KiB, "still counted while pinned");
    assert_pattern(sb_store_ref_data(r), 1, 0, 100 * KiB);
    sb_store_ref *r2 = NULL;
    cr_assert_eq(sb_store_pin(s, "keep", &r2, &err), SB_STORE_ENOTFOUND, "gone for new pins");
    size_t before = st.resident_bytes;
    size_t freed = atomic_load(&g_freed_blobs);
    sb_store_unpin(r);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.deferred_releases, 0);
    cr_assert_eq(st.resident_bytes, before - 100 * KiB);
    cr_assert_eq(atomic_load(&g_freed_blobs), freed + 1);
    check_ok(s);
    sb_store_close(s);
}

Test(store, release_of_pinned_spilled_partition_keeps_file_until_unpin)
{
    sb_store *s = open_store(64 * KiB, 8 * KiB);
    put_ok(s, "big", 3, 100 * KiB, 0); /* larger than the budget: straight to disk */
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "big", &r, &err), 0, "%s", err.msg);
    cr_assert(!sb_store_ref_in_memory(r));
    cr_assert_eq(sb_store_release(s, "big", &err), 0);
    cr_assert_eq(count_files(sb_store_spill_path(s)), 1);
    read_all_check(r, 3, 8 * KiB);
    /* the id can be reused at once */
    put_ok(s, "big", 4, 10, 0);
    sb_store_unpin(r);
    cr_assert_eq(count_files(sb_store_spill_path(s)), 0);
    cr_assert_eq(sb_store_pin(s, "big", &r, &err), 0);
    cr_assert_eq(sb_store_ref_len(r), 10);
    assert_pattern(sb_store_ref_data(r), 4, 0, 10);
    sb_store_unpin(r);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.disk_bytes, 0);
    cr_assert_eq(st.mem_bytes, 10);
    check_ok(s);
    sb_store_close(s);
}

Test(store, larger_than_budget_goes_straight_to_disk)
{
    const size_t chunk = 32 * KiB, len = 1024 * KiB + 5;
    sb_store *s = open_store(256 * KiB, chunk);
    put_ok(s, "small", 1, 100 * KiB, 0);
    put_ok(s, "huge", 2, len, 0);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.direct_spill_count, 1);
    cr_assert_eq(st.spill_count, 1, "nothing else was spilled for a hopeless case");
    cr_assert_eq(st.mem_bytes, 100 * KiB);
    cr_assert_eq(st.peak_mem_bytes, 100 * KiB, "the huge blob never counted in memory");
    cr_assert_eq(st.disk_bytes, len);
    cr_assert(in_memory(s, "small"));
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "huge", &r, &err), 0, "%s", err.msg);
    read_all_check(r, 2, chunk);
    read_all_check(r, 2, 50000);
    sb_store_unpin(r);
    cr_assert_eq(sb_store_load(s, "huge", -1, &r, &err), SB_STORE_ENOSPACE);
    cr_assert_null(r);
    cr_assert(strstr(err.msg, "huge") != NULL && strstr(err.msg, "chunks") != NULL, "%s", err.msg);
    sb_store_resv *resv = NULL;
    cr_assert_eq(sb_store_reserve(s, len, -1, &resv, &err), SB_STORE_ENOSPACE);
    check_ok(s);
    sb_store_close(s);
    cr_assert_eq(count_files(g_dir), 0);
}

/* A partition larger than the whole budget is read outside it (issue 41): sb_store_load cannot
 * (ENOSPACE), and a worker that reported it lost made its producer make it again just as large,
 * for ever. The copy is the caller's, not counted against the budget, and the partition stays. */
Test(store, load_whole_reads_a_partition_larger_than_the_budget_outside_it)
{
    const size_t chunk = 32 * KiB, len = 1024 * KiB + 5;
    sb_store *s = open_store(256 * KiB, chunk);
    put_ok(s, "small", 1, 100 * KiB, 0);
    put_ok(s, "huge", 2, len, 0);
    sb_store_whole w;
    sb_err err = {0};
    cr_assert_eq(sb_store_load_whole(s, "huge", 0, -1, &w, &err), 0, "%s", err.msg);
    cr_assert_null(w.ref);
    cr_assert_not_null(w.own);
    cr_assert_eq(w.len, len);
    assert_pattern(w.data, 2, 0, len);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_expect_eq(st.mem_bytes, 100 * KiB, "the copy is outside the budget");
    cr_expect_eq(st.peak_mem_bytes, 100 * KiB);
    cr_expect_eq(st.outside_loads, 1);
    cr_expect_eq(st.outside_bytes, len);
    cr_expect_eq(st.disk_bytes, len, "the partition stays in the store");
    sb_store_whole_done(&w);
    cr_assert_null(w.own);
    /* one in memory is the store's own copy, pinned */
    cr_assert_eq(sb_store_load_whole(s, "small", 0, -1, &w, &err), 0, "%s", err.msg);
    cr_assert_not_null(w.ref);
    cr_assert_null(w.own);
    cr_assert_eq(w.len, 100 * KiB);
    assert_pattern(w.data, 1, 0, w.len);
    sb_store_whole_done(&w);
    cr_assert_eq(sb_store_load_whole(s, "gone", 0, -1, &w, &err), SB_STORE_ENOTFOUND);
    sb_store_get_stats(s, &st);
    cr_expect_eq(st.outside_loads, 1);
    cr_expect_eq(st.pinned_partitions, 0);
    check_ok(s);
    sb_store_close(s);
    cr_assert_eq(count_files(g_dir), 0);
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* A spilled partition that fits the budget is loaded into it, unless the room is held by the
 * caller's own reservation (no wait would free it: read outside at once) or by others' pins
 * that are not given back in time (read outside after the wait). */
Test(store, load_whole_reads_outside_when_no_room_can_be_made)
{
    sb_store *s = open_store(256 * KiB, 16 * KiB);
    put_ok(s, "p", 3, 100 * KiB, 10);
    put_ok(s, "a", 4, 200 * KiB, 1); /* p is needed later: spilled */
    cr_assert_not(in_memory(s, "p"));
    sb_store_ref *pin = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "a", &pin, &err), 0, "%s", err.msg);
    /* the room is pinned: the load waits 300 ms, then p is read outside */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sb_store_whole w;
    cr_assert_eq(sb_store_load_whole(s, "p", 0, 300, &w, &err), 0, "%s", err.msg);
    long waited = ms_since(&t0);
    cr_expect_geq(waited, 250, "waited %ld ms", waited);
    cr_assert_not_null(w.own);
    assert_pattern(w.data, 3, 0, 100 * KiB);
    sb_store_whole_done(&w);
    sb_store_unpin(pin);
    cr_assert_eq(sb_store_release(s, "a", &err), 0, "%s", err.msg);
    /* the caller's own reservation leaves too little: read outside at once, not after 20 s */
    sb_store_resv *resv = NULL;
    cr_assert_eq(sb_store_reserve(s, 200 * KiB, 0, &resv, &err), 0, "%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(sb_store_load_whole(s, "p", 200 * KiB, 20000, &w, &err), 0, "%s", err.msg);
    waited = ms_since(&t0);
    cr_expect_lt(waited, 5000, "waited %ld ms for its own reservation", waited);
    cr_assert_not_null(w.own);
    sb_store_whole_done(&w);
    sb_store_unreserve(resv);
    /* with room, it is loaded into the budget (the store's copy, no longer spilled) */
    cr_assert_eq(sb_store_load_whole(s, "p", 0, 1000, &w, &err), 0, "%s", err.msg);
    cr_assert_not_null(w.ref);
    cr_assert_null(w.own);
    assert_pattern(w.data, 3, 0, 100 * KiB);
    sb_store_whole_done(&w);
    cr_assert(in_memory(s, "p"));
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_expect_eq(st.outside_loads, 2);
    cr_expect_eq(st.outside_bytes, 200 * KiB);
    cr_expect_eq(st.load_count, 1);
    check_ok(s);
    sb_store_close(s);
}

Test(store, reservation_covers_put)
{
    sb_store *s = open_store(1000 * KiB, 10 * KiB);
    sb_store_resv *resv = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_reserve(s, 600 * KiB, 0, &resv, &err), 0, "%s", err.msg);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.reserved_bytes, 600 * KiB);
    cr_assert_eq(st.mem_bytes, 600 * KiB);
    cr_assert_eq(sb_store_reserve_more(resv, 100 * KiB, 0, &err), 0);
    cr_assert_eq(sb_store_resv_left(resv), 700 * KiB);
    sb_store_hints h = {.resv = resv};
    cr_assert_eq(sb_store_put(s, "a", make_blob(1, 500 * KiB), 500 * KiB, &h, &err), 0);
    cr_assert_eq(sb_store_resv_left(resv), 200 * KiB);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 700 * KiB, "a reserved put does not grow memory");
    cr_assert_eq(st.reserved_bytes, 200 * KiB);
    cr_assert_eq(st.resident_bytes, 500 * KiB);
    /* a put beyond its reservation: the covered part from it, the excess counted at once */
    cr_assert_eq(sb_store_put(s, "b", make_blob(2, 250 * KiB), 250 * KiB, &h, &err), 0);
    cr_assert_eq(sb_store_resv_left(resv), 0);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.reserved_bytes, 0);
    cr_assert_eq(st.resident_bytes, 750 * KiB);
    sb_store_unreserve(resv);
    check_ok(s);

    /* a reservation that needs room spills unpinned partitions */
    cr_assert_eq(sb_store_reserve(s, 500 * KiB, 0, &resv, &err), 0, "%s", err.msg);
    sb_store_get_stats(s, &st);
    cr_assert_leq(st.mem_bytes, st.budget);
    cr_assert_geq(st.spill_count, 1);
    cr_assert_eq(st.reserved_bytes, 500 * KiB);
    sb_store_unreserve(resv);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.reserved_bytes, 0);
    check_ok(s);
    sb_store_close(s);
}

/* The process's memory outside the store (sb_store_set_outside, from the worker's heap check)
 * shrinks what the store admits: it spills down to budget - outside at once, puts and
 * reservations stay within it, it is clamped to half the budget, and 0 gives the whole budget
 * back. Pinned partitions are not spilled for it. */
Test(store, memory_outside_the_store_shrinks_what_it_admits)
{
    sb_store *s = open_store(800 * KiB, 10 * KiB);
    char id[8];
    for (unsigned i = 0; i < 7; i++) {
        snprintf(id, sizeof id, "p%u", i);
        put_ok(s, id, i, 100 * KiB, i);
    }
    sb_store_ref *pinned = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "p0", &pinned, &err), 0, "%s", err.msg);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.resident_bytes, 700 * KiB);
    cr_assert_eq(st.spill_count, 0);
    sb_store_set_outside(s, 300 * KiB);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.outside_counted, 300 * KiB);
    cr_assert_leq(st.mem_bytes, 500 * KiB, "spilled down to budget - outside: %zu", st.mem_bytes);
    cr_assert_eq(st.spill_count, 2);
    cr_assert(in_memory(s, "p0"), "the pinned partition stays");
    /* a new put fits the limit by spilling another, not the budget */
    put_ok(s, "q", 9, 100 * KiB, 0);
    sb_store_get_stats(s, &st);
    cr_assert_leq(st.mem_bytes, 500 * KiB);
    /* a reservation too */
    sb_store_resv *resv = NULL;
    cr_assert_eq(sb_store_reserve(s, 300 * KiB, 0, &resv, &err), 0, "%s", err.msg);
    sb_store_get_stats(s, &st);
    cr_assert_leq(st.mem_bytes, 500 * KiB);
    sb_store_unreserve(resv);
    check_ok(s);
    /* clamped to half the budget */
    sb_store_set_outside(s, 100000 * KiB);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.outside_counted, 400 * KiB);
    cr_assert_leq(st.mem_bytes, 400 * KiB);
    /* 0: the whole budget again (a load of everything spilled fits) */
    sb_store_set_outside(s, 0);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.outside_counted, 0);
    sb_store_ref *r = NULL;
    for (unsigned i = 1; i < 7; i++) {
        snprintf(id, sizeof id, "p%u", i);
        cr_assert_eq(sb_store_load(s, id, 0, &r, &err), 0, "%s", err.msg);
        sb_store_unpin(r);
    }
    sb_store_get_stats(s, &st);
    cr_assert_gt(st.mem_bytes, 500 * KiB, "loads use the whole budget again: %zu", st.mem_bytes);
    cr_assert_leq(st.mem_bytes, 800 * KiB);
    sb_store_unpin(pinned);
    check_ok(s);
    sb_store_close(s);
}

Test(store, reserve_times_out_when_everything_is_pinned)
{
    sb_store *s = open_store(100 * KiB, 4 * KiB);
    put_ok(s, "a", 1, 90 * KiB, 0);
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "a", &r, &err), 0);
    sb_store_resv *resv = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(sb_store_reserve(s, 20 * KiB, 150, &resv, &err), SB_STORE_ENOSPACE);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    cr_assert_geq(ms, 140.0, "waited %.1f ms", ms);
    cr_assert_eq(sb_store_reserve(s, 10 * KiB, 0, &resv, &err), 0, "what fits is granted");
    sb_store_unreserve(resv);
    sb_store_unpin(r);
    check_ok(s);
    sb_store_close(s);
}

typedef struct {
    sb_store *s;
    int rc;
    sb_store_resv *resv;
} reserve_arg;

static void *reserve_thread(void *p)
{
    reserve_arg *a = p;
    sb_err err = {0};
    a->rc = sb_store_reserve(a->s, 50 * KiB, -1, &a->resv, &err);
    return NULL;
}

Test(store, reserve_waits_for_an_unpin)
{
    sb_store *s = open_store(100 * KiB, 4 * KiB);
    put_ok(s, "a", 1, 90 * KiB, 0);
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "a", &r, &err), 0);
    reserve_arg a = {.s = s, .rc = 99};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, reserve_thread, &a), 0);
    struct timespec d = {0, 100 * 1000 * 1000};
    nanosleep(&d, NULL);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.reserved_bytes, 0, "still waiting");
    sb_store_unpin(r);
    pthread_join(t, NULL);
    cr_assert_eq(a.rc, 0);
    cr_assert(!in_memory(s, "a"), "the unpinned partition made room");
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.reserved_bytes, 50 * KiB);
    sb_store_unreserve(a.resv);
    check_ok(s);
    sb_store_close(s);
}

Test(store, put_slack_of_one_chunk_then_back_under_budget)
{
    /* everything else pinned; a small unreserved put fits in the one-chunk slack, then spills
     * itself to get back under the budget */
    sb_store *s = open_store(100 * KiB, 10 * KiB);
    put_ok(s, "a", 1, 95 * KiB, 0);
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "a", &r, &err), 0);
    put_ok(s, "b", 2, 8 * KiB, 0);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.peak_mem_bytes, 103 * KiB, "counted at once, in the slack");
    cr_assert_eq(st.mem_bytes, 95 * KiB);
    cr_assert_eq(st.direct_spill_count, 0);
    cr_assert_eq(st.spill_count, 1);
    cr_assert(!in_memory(s, "b"));
    /* beyond the slack: straight to disk, never counted */
    put_ok(s, "c", 3, 20 * KiB, 0);
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.peak_mem_bytes, 103 * KiB);
    cr_assert_eq(st.direct_spill_count, 1);
    cr_assert(!in_memory(s, "c"));
    sb_store_unpin(r);
    check_ok(s);
    sb_store_close(s);
}

Test(store, unreserved_put_spills_later_needed_partitions)
{
    sb_store *s = open_store(1000 * KiB, 10 * KiB);
    put_ok(s, "later", 1, 400 * KiB, 10);
    put_ok(s, "sooner", 2, 400 * KiB, 1);
    put_ok(s, "mid", 3, 500 * KiB, 5); /* evicts "later", stays in memory */
    cr_assert(!in_memory(s, "later"));
    cr_assert(in_memory(s, "sooner"));
    cr_assert(in_memory(s, "mid"));
    put_ok(s, "last", 4, 500 * KiB, 20); /* nobody is needed later: itself to disk */
    cr_assert(!in_memory(s, "last"));
    cr_assert(in_memory(s, "sooner") && in_memory(s, "mid"));
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 900 * KiB);
    cr_assert_leq(st.peak_mem_bytes, st.budget);
    cr_assert_eq(st.direct_spill_count, 1);
    check_ok(s);
    sb_store_close(s);
}

static void corrupt_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    unsigned char c;
    cr_assert_eq(pread(fd, &c, 1, at), 1);
    c ^= 0x5a;
    cr_assert_eq(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

/* Puts `id` (40 KiB) and gets it spilled by a sooner-needed put; returns its file. */
static sb_store *spilled_store(const char *id, char *path, size_t cap)
{
    sb_store *s = open_store(64 * KiB, 4 * KiB);
    put_ok(s, id, 9, 40 * KiB, 10);
    put_ok(s, "x", 1, 40 * KiB, 0);
    cr_assert(!in_memory(s, id));
    only_spill_file(s, path, cap);
    return s;
}

Test(store, corrupted_spill_file_is_detected)
{
    const size_t chunk = 4 * KiB, len = 40 * KiB;
    char path[512];
    sb_store *s = spilled_store("s2-t7-p1", path, sizeof path);
    struct stat st0;
    cr_assert_eq(stat(path, &st0), 0);
    corrupt_byte(path, st0.st_size - (off_t)len + 5 * (off_t)chunk + 17); /* in chunk 5 */

    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "s2-t7-p1", &r, &err), 0, "header and size are fine");
    unsigned char buf[4 * KiB];
    cr_assert_eq(sb_store_read(r, 0, buf, sizeof buf, &err), (ssize_t)sizeof buf);
    cr_assert_eq(sb_store_read(r, 5 * chunk + 100, buf, 10, &err), SB_STORE_ECORRUPT);
    cr_assert(strstr(err.msg, "s2-t7-p1") != NULL && strstr(err.msg, path) != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "chunk 5") != NULL, "%s", err.msg);
    cr_assert_eq(sb_store_read(r, 5 * chunk, buf, sizeof buf, &err), SB_STORE_ECORRUPT,
                 "a whole corrupted chunk read straight into dst is caught too");
    cr_assert_eq(sb_store_read(r, 6 * chunk, buf, sizeof buf, &err), (ssize_t)sizeof buf);
    assert_pattern(buf, 9, 6 * chunk, sizeof buf);
    sb_store_unpin(r);

    cr_assert_eq(sb_store_load(s, "s2-t7-p1", 0, &r, &err), SB_STORE_ECORRUPT);
    cr_assert_null(r);
    cr_assert(strstr(err.msg, "s2-t7-p1") != NULL && strstr(err.msg, path) != NULL, "%s", err.msg);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.load_count, 0);
    cr_assert_eq(st.resident_bytes, 0, "the failed load's buffer is no longer counted");
    cr_assert(!in_memory(s, "s2-t7-p1"), "still held, on disk");
    cr_assert_eq(sb_store_release(s, "s2-t7-p1", &err), 0);
    check_ok(s);
    sb_store_close(s);
    cr_assert_eq(count_files(g_dir), 0);
}

Test(store, short_spill_file_is_detected)
{
    char path[512];
    sb_store *s = spilled_store("s3-t1-p0", path, sizeof path);
    struct stat st0;
    cr_assert_eq(stat(path, &st0), 0);
    cr_assert_eq(truncate(path, st0.st_size - 100), 0);
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "s3-t1-p0", &r, &err), SB_STORE_ECORRUPT);
    cr_assert_null(r);
    cr_assert(strstr(err.msg, "s3-t1-p0") != NULL && strstr(err.msg, path) != NULL &&
                  strstr(err.msg, "short") != NULL,
              "%s", err.msg);
    cr_assert_eq(sb_store_load(s, "s3-t1-p0", 0, &r, &err), SB_STORE_ECORRUPT);
    cr_assert(strstr(err.msg, "short") != NULL, "%s", err.msg);
    check_ok(s);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.pinned_partitions, 0);
    sb_store_close(s);
}

Test(store, bad_spill_header_or_missing_file_is_detected)
{
    char path[512];
    sb_store *s = spilled_store("s4-t1-p0", path, sizeof path);
    corrupt_byte(path, 42); /* inside the id */
    sb_store_ref *r = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_pin(s, "s4-t1-p0", &r, &err), SB_STORE_ECORRUPT);
    cr_assert(strstr(err.msg, "header") != NULL && strstr(err.msg, path) != NULL, "%s", err.msg);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(sb_store_pin(s, "s4-t1-p0", &r, &err), SB_STORE_ECORRUPT);
    cr_assert(strstr(err.msg, "s4-t1-p0") != NULL && strstr(err.msg, path) != NULL, "%s", err.msg);
    cr_assert_eq(sb_store_release(s, "s4-t1-p0", &err), 0);
    check_ok(s);
    sb_store_close(s);
}

Test(store, list_reports_ids_and_sizes)
{
    sb_store *s = open_store(100 * KiB, 4 * KiB);
    put_ok(s, "a", 1, 10 * KiB, 0);
    put_ok(s, "bb", 2, 200 * KiB, 0);
    put_ok(s, "ccc", 3, 0, 0);
    sb_store_item *items = NULL;
    size_t n = 0;
    sb_err err = {0};
    cr_assert_eq(sb_store_list(s, &items, &n, &err), 0);
    cr_assert_eq(n, 3);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(items[i].id, "a") == 0) {
            cr_assert_eq(items[i].len, 10 * KiB);
            cr_assert(items[i].in_memory);
            seen |= 1;
        } else if (strcmp(items[i].id, "bb") == 0) {
            cr_assert_eq(items[i].len, 200 * KiB);
            cr_assert(!items[i].in_memory);
            seen |= 2;
        } else if (strcmp(items[i].id, "ccc") == 0) {
            cr_assert_eq(items[i].len, 0);
            seen |= 4;
        }
    }
    cr_assert_eq(seen, 7);
    free(items);
    cr_assert_eq(sb_store_release(s, "bb", &err), 0);
    cr_assert_eq(sb_store_list(s, &items, &n, &err), 0);
    cr_assert_eq(n, 2);
    free(items);
    sb_store_close(s);
}

Test(store, odd_ids_make_safe_file_names)
{
    sb_store *s = open_store(1 * KiB, 0);
    const char *ids[] = {"../../etc/passwd", "a b/c", "..", "\xc3\xa9t\xc3\xa9"};
    for (unsigned i = 0; i < 4; i++)
        put_ok(s, ids[i], i, 2 * KiB, 0);
    cr_assert_eq(count_files(sb_store_spill_path(s)), 4);
    cr_assert_eq(count_files(g_dir), 1, "nothing escaped the store's directory");
    DIR *d = opendir(sb_store_spill_path(s));
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' || strlen(de->d_name) > 2)
            cr_assert_eq(de->d_type, DT_REG, "%s", de->d_name);
    closedir(d);
    for (unsigned i = 0; i < 4; i++) {
        sb_store_ref *r = NULL;
        sb_err err = {0};
        cr_assert_eq(sb_store_pin(s, ids[i], &r, &err), 0, "%s", err.msg);
        read_all_check(r, i, 700);
        sb_store_unpin(r);
    }
    sb_store_close(s);
    cr_assert_eq(count_files(g_dir), 0);
}

Test(store, default_free_is_free)
{
    /* no free_fn: blobs are free()d (valgrind/ASan see a leak or a bad free otherwise) */
    sb_store_config cfg = {.memory_budget = 8 * KiB, .spill_dir = g_dir};
    sb_store *s = NULL;
    sb_err err = {0};
    cr_assert_eq(sb_store_open(&cfg, &s, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_store_put(s, "m", make_blob(1, 4 * KiB), 4 * KiB, NULL, &err), 0);
    cr_assert_eq(sb_store_put(s, "d", make_blob(2, 16 * KiB), 16 * KiB, NULL, &err), 0);
    cr_assert_eq(sb_store_put(s, "r", make_blob(3, 1 * KiB), 1 * KiB, NULL, &err), 0);
    cr_assert_eq(sb_store_release(s, "r", &err), 0);
    sb_store_ref *r = NULL;
    cr_assert_eq(sb_store_load(s, "d", 0, &r, &err), SB_STORE_ENOSPACE);
    sb_store_close(s);
    cr_assert_eq(atomic_load(&g_freed_blobs), 0);
}

typedef struct {
    sb_store *s;
    const char *release_id;
    int rc;
} releasing_ctx;

/* Frees a blob and, the first time, releases another partition: free_fn runs while a spill has
 * the store's lock dropped, which is exactly when other threads can act. */
static void releasing_free(void *blob, void *ctx)
{
    releasing_ctx *c = ctx;
    free(blob);
    if (c->release_id) {
        c->rc = sb_store_release(c->s, c->release_id, NULL);
        c->release_id = NULL;
    }
}

Test(store, put_survives_release_of_its_partition_during_its_spill)
{
    /* regression: a put in the slack (case b) spilled a victim with the lock dropped; another
     * thread released and freed the new partition meanwhile, and the put then read it */
    releasing_ctx c = {0};
    sb_store_config cfg = {.memory_budget = 100 * KiB,
                           .spill_dir = g_dir,
                           .chunk_size = 10 * KiB,
                           .free_fn = releasing_free,
                           .free_ctx = &c};
    sb_err err = {0};
    cr_assert_eq(sb_store_open(&cfg, &c.s, &err), 0, "%s", err.msg);
    put_ok(c.s, "victim", 1, 95 * KiB, 100);
    c.release_id = "new";
    c.rc = 99;
    put_ok(c.s, "new", 2, 8 * KiB, 0); /* 103 KiB: admitted in the slack, spills "victim" */
    cr_assert_eq(c.rc, 0, "the partition was released during the put");
    sb_store_ref *r = NULL;
    cr_assert_eq(sb_store_pin(c.s, "new", &r, &err), SB_STORE_ENOTFOUND);
    cr_assert(!in_memory(c.s, "victim"));
    sb_store_stats st;
    sb_store_get_stats(c.s, &st);
    cr_assert_eq(st.mem_bytes, 0);
    cr_assert_eq(st.disk_partitions, 1);
    check_ok(c.s);
    sb_store_close(c.s);
}

Test(store, failing_spills_are_errors_and_leave_the_store_consistent)
{
    sb_store *s = open_store(100 * KiB, 16 * KiB);
    put_ok(s, "a", 1, 90 * KiB, 50);
    char dir[256];
    snprintf(dir, sizeof dir, "%s", sb_store_spill_path(s));
    cr_assert_eq(rmdir(dir), 0, "the spill directory vanishes (disk trouble)");

    sb_err err = {0};
    size_t freed = atomic_load(&g_freed_blobs);
    cr_assert_eq(sb_store_put(s, "b", make_blob(2, 50 * KiB), 50 * KiB, NULL, &err), SB_STORE_EFAIL,
                 "neither a victim nor the new partition can be written");
    cr_assert(strstr(err.msg, "partition b") != NULL && strstr(err.msg, dir) != NULL, "%s",
              err.msg);
    cr_assert_eq(atomic_load(&g_freed_blobs), freed + 1, "the failed put freed its blob");
    sb_store_resv *resv = NULL;
    cr_assert_eq(sb_store_reserve(s, 50 * KiB, 0, &resv, &err), SB_STORE_EFAIL);
    cr_assert(strstr(err.msg, "spill file") != NULL, "%s", err.msg);
    cr_assert_null(resv);
    /* admitted in the slack; cannot spill back under the budget, but it is stored */
    put_ok(s, "small", 3, 12 * KiB, 0);
    check_ok(s);
    sb_store_stats st;
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 102 * KiB);
    cr_assert_eq(st.spill_count, 0);
    cr_assert(in_memory(s, "a") && in_memory(s, "small"));
    /* a zero reservation needs no room, so it must not try to spill */
    cr_assert_eq(sb_store_reserve(s, 0, 0, &resv, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_store_resv_left(resv), 0);
    sb_store_unreserve(resv);

    cr_assert_eq(mkdir(dir, 0700), 0, "the disk is back");
    cr_assert_eq(sb_store_reserve(s, 50 * KiB, 0, &resv, &err), 0, "%s", err.msg);
    cr_assert(!in_memory(s, "a"));
    sb_store_get_stats(s, &st);
    cr_assert_eq(st.mem_bytes, 62 * KiB);
    sb_store_unreserve(resv);
    check_ok(s);
    sb_store_close(s);
    cr_assert_eq(count_files(g_dir), 0);
}
