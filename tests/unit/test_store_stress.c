/* Stress tests of worker/store: a randomized single-threaded workload checked against a model
 * after every operation (the budget guarantee, every counter, the spill directory, the data),
 * and 8 threads putting/pinning/reading/loading/releasing at once while a checker thread
 * asserts the accounting invariants continuously. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/store/store.h"
#include "testutil.h"

#define KiB ((size_t)1024)

static char g_dir[64];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void)
{
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-test-store-stress");
    cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void)
{
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(store_stress, .init = setup, .fini = teardown, .timeout = 600);

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

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static size_t rnd(uint64_t *s, size_t n)
{
    return n ? (size_t)(rng_next(s) % n) : 0;
}

static uint32_t seed_of(const char *id)
{
    uint32_t h = 2166136261u;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h;
}

static unsigned char pat(uint32_t seed, size_t i)
{
    uint32_t x = seed * 2654435761u ^ (uint32_t)(i >> 8) * 40503u;
    return (unsigned char)(x ^ (x >> 13) ^ i);
}

static void *make_blob(const char *id, size_t len)
{
    unsigned char *b = malloc(len ? len : 1);
    if (b == NULL)
        return NULL;
    uint32_t seed = seed_of(id);
    for (size_t i = 0; i < len; i++)
        b[i] = pat(seed, i);
    return b;
}

/* Index of the first byte that differs from the pattern, or -1. */
static long first_bad(const void *data, const char *id, size_t off, size_t len)
{
    const unsigned char *p = data;
    uint32_t seed = seed_of(id);
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat(seed, off + i))
            return (long)(off + i);
    return -1;
}

/* ---- randomized workload against a model ------------------------------------------------- */

#define NSLOT 48
#define NPIN 4

typedef struct {
    char id[32];
    size_t len;
    int held;     /* in the store (not released) */
    int deferred; /* released while pinned */
} slot;

typedef struct {
    sb_store_ref *ref;
    int slot;
    const void *data; /* in-memory refs: must never move */
} held_pin;

typedef struct {
    sb_store *s;
    size_t budget, chunk;
    slot slots[NSLOT];
    held_pin pins[NPIN];
    sb_store_resv *open_resv; /* a reservation kept across operations */
    size_t open_resv_left;
    uint64_t rng;
    unsigned gen;
    int op;
} model;

static int pins_on(const model *m, int sl)
{
    int n = 0;
    for (int i = 0; i < NPIN; i++)
        n += m->pins[i].ref != NULL && m->pins[i].slot == sl;
    return n;
}

static size_t pick_len(model *m)
{
    switch (rnd(&m->rng, 20)) {
    case 0:
        return 0;
    case 1:
        return m->budget + rnd(&m->rng, m->budget); /* larger than the whole budget */
    case 2:
    case 3:
        return rnd(&m->rng, m->budget / 2);
    default:
        return 1 + rnd(&m->rng, 6 * m->chunk);
    }
}

static void check_model(model *m)
{
    sb_err err = {0};
    cr_assert_eq(sb_store_check(m->s, &err), 0, "op %d: %s", m->op, err.msg);
    sb_store_stats st;
    sb_store_get_stats(m->s, &st);
    cr_assert_leq(st.mem_bytes, m->budget, "op %d: memory %zu above budget %zu (no put running)",
                  m->op, st.mem_bytes, m->budget);
    cr_assert_leq(st.peak_mem_bytes, m->budget + m->chunk, "op %d: peak %zu", m->op,
                  st.peak_mem_bytes);
    cr_assert_eq(st.mem_bytes, st.resident_bytes + st.reserved_bytes);
    cr_assert_eq(st.unbudgeted_bytes, 0);
    cr_assert_eq(st.reserved_bytes, m->open_resv ? m->open_resv_left : 0, "op %d", m->op);

    size_t nparts = 0, bytes = 0, held = 0, deferred = 0;
    for (int i = 0; i < NSLOT; i++) {
        const slot *sl = &m->slots[i];
        if (sl->held || sl->deferred) {
            nparts++;
            bytes += sl->len;
        }
        held += sl->held != 0;
        deferred += sl->deferred != 0;
    }
    cr_assert_eq(st.mem_partitions + st.disk_partitions, nparts, "op %d", m->op);
    cr_assert_eq(st.resident_bytes + st.disk_bytes, bytes,
                 "op %d: every byte is in exactly one place", m->op);
    cr_assert_eq(st.deferred_releases, deferred, "op %d", m->op);
    cr_assert_eq(count_files(sb_store_spill_path(m->s)), (int)st.disk_partitions,
                 "op %d: one spill file per spilled partition", m->op);

    sb_store_item *items = NULL;
    size_t n = 0;
    cr_assert_eq(sb_store_list(m->s, &items, &n, &err), 0);
    cr_assert_eq(n, held, "op %d", m->op);
    size_t in_mem = 0;
    for (size_t k = 0; k < n; k++) {
        int found = 0;
        for (int i = 0; i < NSLOT && !found; i++)
            if (m->slots[i].held && strcmp(m->slots[i].id, items[k].id) == 0) {
                cr_assert_eq(items[k].len, m->slots[i].len, "op %d: %s", m->op, items[k].id);
                found = 1;
            }
        cr_assert(found, "op %d: store lists %s, the model does not hold it", m->op, items[k].id);
        in_mem += items[k].in_memory ? items[k].len : 0;
    }
    free(items);
    cr_assert_leq(in_mem, st.resident_bytes);

    for (int i = 0; i < NPIN; i++) {
        const held_pin *p = &m->pins[i];
        if (p->ref == NULL)
            continue;
        const slot *sl = &m->slots[p->slot];
        cr_assert_eq(sb_store_ref_in_memory(p->ref), p->data != NULL || sl->len == 0 ? 1 : 0,
                     "op %d", m->op);
        if (p->data) {
            cr_assert_eq(sb_store_ref_data(p->ref), p->data, "op %d: a pinned view moved", m->op);
            size_t k = sl->len > 64 ? 64 : sl->len;
            cr_assert_eq(first_bad((const char *)p->data + sl->len - k, sl->id, sl->len - k, k), -1,
                         "op %d", m->op);
        }
    }
}

static void verify_ref(model *m, sb_store_ref *r, const slot *sl)
{
    sb_err err = {0};
    cr_assert_eq(sb_store_ref_len(r), sl->len);
    size_t off = rnd(&m->rng, sl->len + 1);
    size_t len = rnd(&m->rng, 3 * m->chunk);
    unsigned char *buf = malloc(len ? len : 1);
    cr_assert_not_null(buf);
    ssize_t got = sb_store_read(r, off, buf, len, &err);
    size_t want = sl->len - off < len ? sl->len - off : len;
    cr_assert_eq(got, (ssize_t)want, "op %d: read %s [%zu,+%zu): %zd %s", m->op, sl->id, off, len,
                 got, err.msg);
    cr_assert_eq(first_bad(buf, sl->id, off, want), -1, "op %d: %s", m->op, sl->id);
    free(buf);
}

static int free_pin_slot(model *m)
{
    for (int i = 0; i < NPIN; i++)
        if (m->pins[i].ref == NULL)
            return i;
    return -1;
}

static void drop_pin(model *m, int i)
{
    int sl = m->pins[i].slot;
    sb_store_unpin(m->pins[i].ref);
    m->pins[i].ref = NULL;
    if (m->slots[sl].deferred && pins_on(m, sl) == 0)
        m->slots[sl].deferred = 0;
}

static void do_put(model *m, int i, sb_store_resv *resv)
{
    slot *sl = &m->slots[i];
    size_t len = sl->len;
    sb_store_hints h = {.next_needed = rnd(&m->rng, 100), .resv = resv};
    sb_err err = {0};
    int rc = sb_store_put(m->s, sl->id, make_blob(sl->id, len), len, &h, &err);
    cr_assert_eq(rc, 0, "op %d: put %s (%zu): %s", m->op, sl->id, len, err.msg);
    sl->held = 1;
}

static void random_op(model *m)
{
    sb_err err = {0};
    int i = (int)rnd(&m->rng, NSLOT);
    slot *sl = &m->slots[i];
    size_t what = rnd(&m->rng, 100);
    if (what < 25) { /* unreserved put (or a duplicate) */
        if (sl->held) {
            cr_assert_eq(sb_store_put(m->s, sl->id, make_blob(sl->id, 10), 10, NULL, &err),
                         SB_STORE_EEXIST);
            return;
        }
        if (sl->deferred)
            return; /* keep the model simple: one incarnation per slot */
        snprintf(sl->id, sizeof sl->id, "s1-t%d-p%u", i, m->gen++);
        sl->len = pick_len(m);
        do_put(m, i, NULL);
    } else if (what < 40) { /* reserve, then put (a little above the reservation sometimes) */
        if (sl->held || sl->deferred)
            return;
        snprintf(sl->id, sizeof sl->id, "s2-t%d-p%u", i, m->gen++);
        sl->len = 1 + rnd(&m->rng, 8 * m->chunk);
        size_t want = sl->len;
        if (rnd(&m->rng, 3) == 0)
            want = sl->len > m->chunk ? sl->len - rnd(&m->rng, m->chunk) : 0;
        sb_store_resv *resv = NULL;
        int rc = sb_store_reserve(m->s, want, 0, &resv, &err);
        if (rc == SB_STORE_ENOSPACE) { /* everything pinned/reserved: produce nothing */
            sl->len = 0;
            sl->id[0] = '\0';
            return;
        }
        cr_assert_eq(rc, 0, "op %d: %s", m->op, err.msg);
        do_put(m, i, resv);
        sb_store_unreserve(resv);
    } else if (what < 45) { /* a producer growing its reservation chunk by chunk */
        if (m->open_resv == NULL) {
            if (sb_store_reserve(m->s, m->chunk, 0, &m->open_resv, &err) == 0)
                m->open_resv_left = m->chunk;
        } else if (rnd(&m->rng, 3) > 0) {
            if (sb_store_reserve_more(m->open_resv, m->chunk, 0, &err) == 0)
                m->open_resv_left += m->chunk;
        } else if (!sl->held && !sl->deferred) {
            snprintf(sl->id, sizeof sl->id, "s3-t%d-p%u", i, m->gen++);
            sl->len = m->open_resv_left - rnd(&m->rng, m->chunk / 2 + 1);
            if (sl->len > m->open_resv_left)
                sl->len = 0;
            do_put(m, i, m->open_resv);
            m->open_resv_left -= sl->len;
            cr_assert_eq(sb_store_resv_left(m->open_resv), m->open_resv_left);
            sb_store_unreserve(m->open_resv);
            m->open_resv = NULL;
            m->open_resv_left = 0;
        }
    } else if (what < 60) { /* pin and keep it */
        int p = free_pin_slot(m);
        if (p < 0) {
            drop_pin(m, (int)rnd(&m->rng, NPIN));
            return;
        }
        sb_store_ref *r = NULL;
        int rc = sb_store_pin(m->s, sl->id[0] ? sl->id : "none", &r, &err);
        if (!sl->held) {
            cr_assert_eq(rc, SB_STORE_ENOTFOUND, "op %d", m->op);
            return;
        }
        cr_assert_eq(rc, 0, "op %d: %s", m->op, err.msg);
        verify_ref(m, r, sl);
        m->pins[p] = (held_pin){.ref = r, .slot = i, .data = sb_store_ref_data(r)};
    } else if (what < 70) { /* unpin */
        int p = (int)rnd(&m->rng, NPIN);
        if (m->pins[p].ref)
            drop_pin(m, p);
    } else if (what < 80) { /* pin, read, unpin */
        if (!sl->held)
            return;
        sb_store_ref *r = NULL;
        cr_assert_eq(sb_store_pin(m->s, sl->id, &r, &err), 0, "op %d: %s", m->op, err.msg);
        verify_ref(m, r, sl);
        verify_ref(m, r, sl);
        sb_store_unpin(r);
    } else if (what < 88) { /* load the whole partition */
        if (!sl->held)
            return;
        sb_store_ref *r = NULL;
        int rc = sb_store_load(m->s, sl->id, 0, &r, &err);
        if (rc == SB_STORE_ENOSPACE) {
            cr_assert(sl->len > 0, "op %d", m->op);
            return;
        }
        cr_assert_eq(rc, 0, "op %d: load %s: %s", m->op, sl->id, err.msg);
        cr_assert(sb_store_ref_in_memory(r));
        if (sl->len)
            cr_assert_eq(first_bad(sb_store_ref_data(r), sl->id, 0, sl->len), -1);
        check_model(m);
        sb_store_unpin(r);
    } else { /* release */
        if (!sl->held) {
            cr_assert_eq(sb_store_release(m->s, sl->id[0] ? sl->id : "none", &err),
                         SB_STORE_ENOTFOUND);
            return;
        }
        cr_assert_eq(sb_store_release(m->s, sl->id, &err), 0, "op %d: %s", m->op, err.msg);
        sl->held = 0;
        sl->deferred = pins_on(m, i) > 0;
    }
}

static void run_random(uint64_t seed, int ops)
{
    model *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->budget = 512 * KiB;
    m->chunk = 16 * KiB;
    m->rng = seed;
    sb_store_config cfg = {.memory_budget = m->budget, .spill_dir = g_dir, .chunk_size = m->chunk};
    sb_err err = {0};
    cr_assert_eq(sb_store_open(&cfg, &m->s, &err), 0, "%s", err.msg);
    for (m->op = 0; m->op < ops; m->op++) {
        random_op(m);
        check_model(m);
    }
    sb_store_stats st;
    sb_store_get_stats(m->s, &st);
    cr_assert_gt(st.spill_count, 10, "the workload spilled (%" PRIu64 ")", st.spill_count);
    cr_assert_gt(st.direct_spill_count, 0);
    cr_assert_gt(st.load_count, 0);
    cr_assert_gt(st.readback_bytes, 0);
    cr_log_info("seed %" PRIu64 ": %" PRIu64 " spills (%" PRIu64 " direct), %" PRIu64
                " loads, peak %zu of %zu + %zu",
                seed, st.spill_count, st.direct_spill_count, st.load_count, st.peak_mem_bytes,
                m->budget, m->chunk);

    for (int p = 0; p < NPIN; p++)
        if (m->pins[p].ref)
            drop_pin(m, p);
    if (m->open_resv)
        sb_store_unreserve(m->open_resv);
    m->open_resv = NULL;
    m->open_resv_left = 0;
    for (int i = 0; i < NSLOT; i++)
        if (m->slots[i].held) {
            cr_assert_eq(sb_store_release(m->s, m->slots[i].id, &err), 0, "%s", err.msg);
            m->slots[i].held = 0;
        }
    check_model(m);
    sb_store_get_stats(m->s, &st);
    cr_assert_eq(st.mem_bytes + st.disk_bytes + st.mem_partitions + st.disk_partitions, 0);
    cr_assert_eq(count_files(sb_store_spill_path(m->s)), 0);
    sb_store_close(m->s);
    cr_assert_eq(count_files(g_dir), 0);
    free(m);
}

Test(store_stress, randomized_budget_seed_1)
{
    run_random(0x9e3779b97f4a7c15ull, 2500);
}

Test(store_stress, randomized_budget_seed_2)
{
    run_random(12345, 2500);
}

Test(store_stress, randomized_budget_seed_3)
{
    run_random(0xdeadbeefcafef00dull, 2500);
}

/* ---- concurrency -------------------------------------------------------------------------- */

#define NTHREADS 8
#define NSHARED 32

typedef struct {
    sb_store *s;
    size_t budget, chunk;
    int ops;
    atomic_int stop;
    atomic_int failures;
    atomic_long checks;
    char first_failure[SB_ERR_MAX + 128];
    pthread_mutex_t fail_mu;
} shared;

typedef struct {
    shared *sh;
    int tid;
    uint64_t rng;
    long ok_ops;
} worker;

static void failf(shared *sh, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(shared *sh, const char *fmt, ...)
{
    pthread_mutex_lock(&sh->fail_mu);
    if (atomic_fetch_add(&sh->failures, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(sh->first_failure, sizeof sh->first_failure, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&sh->fail_mu);
}

static void check_ref_data(worker *w, sb_store_ref *r, const char *id)
{
    size_t len = sb_store_ref_len(r);
    if (sb_store_ref_in_memory(r)) {
        long bad = len ? first_bad(sb_store_ref_data(r), id, 0, len) : -1;
        if (bad >= 0)
            failf(w->sh, "%s: memory byte %ld differs", id, bad);
        return;
    }
    size_t off = rnd(&w->rng, len + 1), n = rnd(&w->rng, 2 * w->sh->chunk) + 1;
    unsigned char *buf = malloc(n);
    if (buf == NULL)
        return;
    sb_err err = {0};
    ssize_t got = sb_store_read(r, off, buf, n, &err);
    size_t want = len - off < n ? len - off : n;
    if (got != (ssize_t)want)
        failf(w->sh, "%s: read [%zu,+%zu) gave %zd: %s", id, off, n, got, err.msg);
    else if (first_bad(buf, id, off, want) >= 0)
        failf(w->sh, "%s: spilled data differs", id);
    free(buf);
}

static void *worker_main(void *p)
{
    worker *w = p;
    shared *sh = w->sh;
    sb_store_ref *kept = NULL;
    char kept_id[32] = "";
    int own = 0;
    for (int op = 0; op < sh->ops && atomic_load(&sh->failures) == 0; op++) {
        char id[32];
        if (rnd(&w->rng, 3) == 0)
            snprintf(id, sizeof id, "t%d-p%d", w->tid, (int)rnd(&w->rng, own + 1));
        else
            snprintf(id, sizeof id, "c%d", (int)rnd(&w->rng, NSHARED));
        sb_err err = {0};
        sb_store_ref *r = NULL;
        int rc = 0;
        size_t what = rnd(&w->rng, 100);
        if (what < 30) { /* put, sometimes reserved */
            size_t len = rnd(&w->rng, 10) == 0 ? sh->budget / 2 + rnd(&w->rng, sh->budget)
                                               : rnd(&w->rng, 5 * sh->chunk);
            if (id[0] == 't')
                snprintf(id, sizeof id, "t%d-p%d", w->tid, own++);
            sb_store_resv *resv = NULL;
            if (rnd(&w->rng, 2) && len <= sh->budget / 4) {
                rc = sb_store_reserve(sh->s, len, 20, &resv, &err);
                if (rc != 0 && rc != SB_STORE_ENOSPACE)
                    failf(sh, "reserve %zu: %d %s", len, rc, err.msg);
            }
            sb_store_hints h = {.next_needed = rnd(&w->rng, 50), .resv = resv};
            rc = sb_store_put(sh->s, id, make_blob(id, len), len, &h, &err);
            sb_store_unreserve(resv);
            if (rc != 0 && rc != SB_STORE_EEXIST)
                failf(sh, "put %s: %d %s", id, rc, err.msg);
        } else if (what < 60) { /* pin, check, unpin */
            rc = sb_store_pin(sh->s, id, &r, &err);
            if (rc == 0) {
                check_ref_data(w, r, id);
                sb_store_unpin(r);
            } else if (rc != SB_STORE_ENOTFOUND) {
                failf(sh, "pin %s: %d %s", id, rc, err.msg);
            }
        } else if (what < 70) { /* keep one pin across operations */
            if (kept) {
                check_ref_data(w, kept, kept_id);
                sb_store_unpin(kept);
                kept = NULL;
            } else if (sb_store_pin(sh->s, id, &kept, &err) == 0) {
                snprintf(kept_id, sizeof kept_id, "%s", id);
            }
        } else if (what < 80) { /* load */
            rc = sb_store_load(sh->s, id, (int)rnd(&w->rng, 20), &r, &err);
            if (rc == 0) {
                if (!sb_store_ref_in_memory(r))
                    failf(sh, "load %s gave a spilled ref", id);
                check_ref_data(w, r, id);
                sb_store_unpin(r);
            } else if (rc != SB_STORE_ENOTFOUND && rc != SB_STORE_ENOSPACE) {
                failf(sh, "load %s: %d %s", id, rc, err.msg);
            }
        } else { /* release */
            rc = sb_store_release(sh->s, id, &err);
            if (rc != 0 && rc != SB_STORE_ENOTFOUND)
                failf(sh, "release %s: %d %s", id, rc, err.msg);
        }
        w->ok_ops++;
    }
    if (kept)
        sb_store_unpin(kept);
    return NULL;
}

static void *checker_main(void *p)
{
    shared *sh = p;
    while (!atomic_load(&sh->stop)) {
        sb_err err = {0};
        if (sb_store_check(sh->s, &err) != 0)
            failf(sh, "check: %s", err.msg);
        sb_store_stats st;
        sb_store_get_stats(sh->s, &st);
        if (st.mem_bytes > sh->budget + sh->chunk)
            failf(sh, "memory %zu above budget + chunk", st.mem_bytes);
        atomic_fetch_add(&sh->checks, 1);
        sched_yield();
    }
    return NULL;
}

static void run_concurrent(size_t budget, size_t chunk, int ops)
{
    shared *sh = calloc(1, sizeof *sh);
    cr_assert_not_null(sh);
    sh->budget = budget;
    sh->chunk = chunk;
    sh->ops = ops;
    pthread_mutex_init(&sh->fail_mu, NULL);
    sb_store_config cfg = {.memory_budget = budget, .spill_dir = g_dir, .chunk_size = chunk};
    sb_err err = {0};
    cr_assert_eq(sb_store_open(&cfg, &sh->s, &err), 0, "%s", err.msg);

    pthread_t checker, th[NTHREADS];
    worker ws[NTHREADS];
    cr_assert_eq(pthread_create(&checker, NULL, checker_main, sh), 0);
    for (int i = 0; i < NTHREADS; i++) {
        ws[i] = (worker){.sh = sh, .tid = i, .rng = 0x1234567ull * (uint64_t)(i + 1)};
        cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &ws[i]), 0);
    }
    long total = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        total += ws[i].ok_ops;
    }
    atomic_store(&sh->stop, 1);
    pthread_join(checker, NULL);
    cr_assert_eq(atomic_load(&sh->failures), 0, "%d failures, first: %s",
                 atomic_load(&sh->failures), sh->first_failure);
    cr_assert_eq(total, (long)NTHREADS * ops);
    cr_assert_gt(atomic_load(&sh->checks), 0);

    cr_assert_eq(sb_store_check(sh->s, &err), 0, "%s", err.msg);
    sb_store_stats st;
    sb_store_get_stats(sh->s, &st);
    cr_log_info("%ld ops, %ld checks: %" PRIu64 " spills (%" PRIu64 " direct), %" PRIu64
                " loads, peak %zu of %zu + %zu",
                total, atomic_load(&sh->checks), st.spill_count, st.direct_spill_count,
                st.load_count, st.peak_mem_bytes, budget, chunk);
    cr_assert_leq(st.peak_mem_bytes, budget + chunk);
    cr_assert_gt(st.spill_count, 0);
    cr_assert_eq(st.pinned_partitions, 0);
    cr_assert_eq(st.reserved_bytes, 0);
    cr_assert_eq(st.unbudgeted_bytes, 0);
    cr_assert_eq(st.deferred_releases, 0);

    /* everything left is intact and can be released */
    sb_store_item *items = NULL;
    size_t n = 0;
    cr_assert_eq(sb_store_list(sh->s, &items, &n, &err), 0);
    cr_assert_eq(n, st.mem_partitions + st.disk_partitions);
    for (size_t k = 0; k < n; k++) {
        sb_store_ref *r = NULL;
        cr_assert_eq(sb_store_pin(sh->s, items[k].id, &r, &err), 0, "%s", err.msg);
        cr_assert_eq(sb_store_ref_len(r), items[k].len);
        unsigned char *buf = malloc(items[k].len + 1);
        cr_assert_eq(sb_store_read(r, 0, buf, items[k].len, &err), (ssize_t)items[k].len, "%s",
                     err.msg);
        cr_assert_eq(first_bad(buf, items[k].id, 0, items[k].len), -1, "%s", items[k].id);
        free(buf);
        sb_store_unpin(r);
        cr_assert_eq(sb_store_release(sh->s, items[k].id, &err), 0, "%s", err.msg);
    }
    free(items);
    sb_store_get_stats(sh->s, &st);
    cr_assert_eq(st.mem_bytes + st.disk_bytes + st.mem_partitions + st.disk_partitions, 0);
    cr_assert_eq(count_files(sb_store_spill_path(sh->s)), 0);
    sb_store_close(sh->s);
    cr_assert_eq(count_files(g_dir), 0);
    pthread_mutex_destroy(&sh->fail_mu);
    free(sh);
}

Test(store_stress, eight_threads_at_once)
{
    run_concurrent(1024 * KiB, 16 * KiB, 600);
}

Test(store_stress, eight_threads_tight_budget)
{
    /* a budget of a few partitions: nearly every put spills, pins and loads contend */
    run_concurrent(160 * KiB, 8 * KiB, 400);
}
