/* store.c — the partition store (see store.h for the contract and the budget guarantee).
 *
 * Concurrency: one mutex (s->mu) guards every field of the store and of its entries, one condvar
 * (s->cv) is broadcast on every change that can make room or settle an entry. An entry in a
 * transient state (PENDING: its put is deciding; SPILLING; LOADING) belongs to the one thread
 * doing its I/O, which works on it without the lock; everyone else waits for it to settle.
 * Data of settled entries is immutable, so memory reads need no lock at all, and reads from a
 * spill file use a shared fd that stays open while any spilled ref holds it.
 */
#include "worker/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "partition/crc32c.h"

#define SPILL_MAGIC "SBSPILL1"
#define SPILL_VERSION 1u
#define SPILL_FIXED_HDR 40u /* magic, version, id_len, data_len, chunk_size, nchunks */

typedef enum { ST_PENDING, ST_MEM, ST_SPILLING, ST_DISK, ST_LOADING } ent_state;

typedef struct entry {
    char *id;
    size_t len;
    uint64_t next_needed;
    ent_state state;
    void *buf;           /* the data in memory (MEM, SPILLING, PENDING) */
    int buf_ours;        /* buf came from the store's malloc (a load), not from a put */
    size_t charged;      /* bytes of this entry counted in s->resident */
    size_t unbudgeted;   /* PENDING: bytes of the put not admitted */
    char *path;          /* spill file (DISK, LOADING) */
    uint32_t *crcs;      /* one per chunk; set by the first spill, immutable afterwards */
    int fd;              /* read fd on the spill file shared by spilled refs, or -1 */
    unsigned fd_refs;    /* spilled refs using fd */
    unsigned pins;       /* refs, plus temporary holds by waiting threads */
    int released;        /* no longer in the table; freed when idle */
    struct entry *hnext; /* hash chain */
    struct entry *prev, *next;
} entry;

struct sb_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t budget;
    size_t outside; /* the process's memory beyond its allowance, at most budget / 2
                       (sb_store_set_outside): admission keeps mem_bytes within budget - outside */
    size_t chunk;
    void (*free_fn)(void *, void *);
    void *free_ctx;
    char *dir;

    entry **buckets;
    size_t nbuckets;
    size_t nhashed;
    entry *head; /* every entry, including deferred releases and pending puts */

    size_t resident, reserved, unbudgeted, peak, disk_bytes, spilling;
    size_t mem_parts, disk_parts, pinned_parts, deferred;
    unsigned nresv;
    uint64_t seq;
    uint64_t spill_count, spilled_bytes, direct_spills, load_count;
    size_t untrimmed; /* bytes of spilled blobs freed since the last trim (SPILL_TRIM_BYTES) */
    uint64_t outside_loads, outside_bytes; /* sb_store_load_whole copies outside the budget */
    _Atomic uint64_t readback;
};

struct sb_store_resv {
    sb_store *s;
    size_t left;
};

struct sb_store_ref {
    sb_store *s;
    entry *e;
    int in_memory;
    const void *data;
    size_t len;
    char *path; /* spilled refs: the file, for messages (the entry may move on) */
};

typedef struct {
    int mode; /* 0: do not wait, 1: wait forever, 2: until ts */
    struct timespec ts;
} wait_spec;

/* ---- small helpers ------------------------------------------------------------------------ */

static size_t nchunks_of(size_t len, size_t chunk)
{
    return len / chunk + (len % chunk != 0);
}

static size_t header_size(size_t id_len, size_t nchunks)
{
    size_t n = SPILL_FIXED_HDR + id_len + 4 * nchunks;
    return (n + 7) & ~(size_t)7;
}

static int is_disk_class(ent_state st)
{
    return st == ST_DISK || st == ST_LOADING;
}

static int is_mem_class(ent_state st)
{
    return st == ST_MEM || st == ST_SPILLING;
}

static int is_transient(ent_state st)
{
    return st == ST_PENDING || st == ST_SPILLING || st == ST_LOADING;
}

static size_t mem_bytes(const sb_store *s)
{
    return s->resident + s->reserved;
}

static void note_peak(sb_store *s)
{
    if (mem_bytes(s) > s->peak)
        s->peak = mem_bytes(s);
}

/* Moves an entry between states, keeping the partition counters right. */
static void set_state(sb_store *s, entry *e, ent_state st)
{
    if (is_mem_class(e->state))
        s->mem_parts--;
    else if (is_disk_class(e->state))
        s->disk_parts--;
    e->state = st;
    if (is_mem_class(st))
        s->mem_parts++;
    else if (is_disk_class(st))
        s->disk_parts++;
}

static void wait_init(wait_spec *w, int timeout_ms)
{
    w->mode = timeout_ms == 0 ? 0 : timeout_ms < 0 ? 1 : 2;
    if (w->mode == 2) {
        clock_gettime(CLOCK_MONOTONIC, &w->ts);
        w->ts.tv_sec += timeout_ms / 1000;
        w->ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (w->ts.tv_nsec >= 1000000000L) {
            w->ts.tv_sec++;
            w->ts.tv_nsec -= 1000000000L;
        }
    }
}

/* Waits on the condvar per w. Returns 0 when woken, -1 when the time is up (or no waiting). */
static int wait_cv(sb_store *s, const wait_spec *w)
{
    if (w->mode == 0)
        return -1;
    if (w->mode == 1) {
        pthread_cond_wait(&s->cv, &s->mu);
        return 0;
    }
    return pthread_cond_timedwait(&s->cv, &s->mu, &w->ts) == ETIMEDOUT ? -1 : 0;
}

/* Like sb_err_set, but returns `code` (a negative sb_store_status). */
static int fail(sb_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(sb_err *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* What admission keeps mem_bytes within: the budget, less the memory the process holds beyond
 * its allowance outside the store (sb_store_set_outside). */
static size_t limit_of(const sb_store *s)
{
    return s->budget - s->outside;
}

/* budget + chunk without overflow. */
static size_t slack_limit(const sb_store *s)
{
    return s->budget > SIZE_MAX - s->chunk ? SIZE_MAX : s->budget + s->chunk;
}

static int check_id(const char *id, sb_err *err)
{
    if (id == NULL || id[0] == '\0')
        return sb_err_set(err, "partition store: empty partition id");
    size_t n = strnlen(id, SB_STORE_ID_MAX + 1);
    if (n > SB_STORE_ID_MAX)
        return sb_err_set(err, "partition store: partition id longer than %d bytes",
                          SB_STORE_ID_MAX);
    return 0;
}

/* ---- the id table ------------------------------------------------------------------------- */

static size_t hash_id(const char *id)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (size_t)h;
}

static entry *lookup(sb_store *s, const char *id)
{
    for (entry *e = s->buckets[hash_id(id) & (s->nbuckets - 1)]; e; e = e->hnext)
        if (strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

static void grow_table(sb_store *s)
{
    size_t n = s->nbuckets * 2;
    entry **b = calloc(n, sizeof *b);
    if (b == NULL)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry *e = s->buckets[i];
        while (e) {
            entry *next = e->hnext;
            size_t h = hash_id(e->id) & (n - 1);
            e->hnext = b[h];
            b[h] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

static void insert(sb_store *s, entry *e)
{
    if (s->nhashed >= s->nbuckets)
        grow_table(s);
    size_t h = hash_id(e->id) & (s->nbuckets - 1);
    e->hnext = s->buckets[h];
    s->buckets[h] = e;
    s->nhashed++;
    e->prev = NULL;
    e->next = s->head;
    if (s->head)
        s->head->prev = e;
    s->head = e;
}

static void unhash(sb_store *s, entry *e)
{
    entry **pp = &s->buckets[hash_id(e->id) & (s->nbuckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = e->hnext;
        s->nhashed--;
    }
    e->hnext = NULL;
}

/* Takes an entry out of the store and its accounting (lock held). entry_free() finishes the
 * job without the lock. */
static void entry_detach(sb_store *s, entry *e)
{
    if (!e->released)
        unhash(s, e);
    else
        s->deferred--;
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    s->resident -= e->charged;
    s->unbudgeted -= e->unbudgeted;
    if (is_disk_class(e->state))
        s->disk_bytes -= e->len;
    if (e->pins > 0)
        s->pinned_parts--;
    set_state(s, e, ST_PENDING); /* out of both partition counts */
}

static void free_blob(sb_store *s, void *blob, int ours)
{
    if (blob == NULL)
        return;
    if (ours || s->free_fn == NULL)
        free(blob);
    else
        s->free_fn(blob, s->free_ctx);
}

static void entry_free(sb_store *s, entry *e)
{
    free_blob(s, e->buf, e->buf_ours);
    if (e->path) {
        if (unlink(e->path) != 0 && errno != ENOENT)
            sb_log(SB_LOG_WARN, "cannot delete spill file", "partition", e->id, "file", e->path,
                   "error", strerror(errno), (char *)NULL);
        free(e->path);
    }
    if (e->fd >= 0)
        close(e->fd);
    free(e->crcs);
    free(e->id);
    free(e);
}

/* Drops one pin (lock held). Returns the entry if it must now be freed (after unlocking). */
static entry *unpin_locked(sb_store *s, entry *e)
{
    if (--e->pins == 0) {
        s->pinned_parts--;
        if (e->released && !is_transient(e->state)) {
            entry_detach(s, e);
            return e;
        }
    }
    return NULL;
}

static void pin_locked(sb_store *s, entry *e)
{
    if (e->pins++ == 0)
        s->pinned_parts++;
}

/* ---- spill files -------------------------------------------------------------------------- */

static char *spill_name(sb_store *s, const char *id)
{
    char safe[SB_STORE_ID_MAX + 1];
    size_t n = 0;
    for (const char *p = id; *p && n < SB_STORE_ID_MAX; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '_' || c == '.';
        safe[n++] = ok ? c : '_';
    }
    safe[n] = '\0';
    char *path = NULL;
    if (asprintf(&path, "%s/%s.%" PRIu64 ".spill", s->dir, safe, ++s->seq) < 0)
        return NULL;
    return path;
}

/* The header a spill file of e must start with (malloc()ed, *size bytes). */
static unsigned char *build_header(const sb_store *s, const entry *e, size_t *size)
{
    size_t idl = strlen(e->id);
    size_t nch = nchunks_of(e->len, s->chunk);
    size_t hs = header_size(idl, nch);
    unsigned char *h = calloc(1, hs);
    if (h == NULL)
        return NULL;
    uint32_t ver = SPILL_VERSION, idl32 = (uint32_t)idl;
    uint64_t len64 = e->len, chunk64 = s->chunk, nch64 = nch;
    memcpy(h, SPILL_MAGIC, 8);
    memcpy(h + 8, &ver, 4);
    memcpy(h + 12, &idl32, 4);
    memcpy(h + 16, &len64, 8);
    memcpy(h + 24, &chunk64, 8);
    memcpy(h + 32, &nch64, 8);
    memcpy(h + SPILL_FIXED_HDR, e->id, idl);
    if (nch)
        memcpy(h + SPILL_FIXED_HDR + idl, e->crcs, 4 * nch);
    *size = hs;
    return h;
}

static int write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        size_t n = len > ((size_t)1 << 30) ? (size_t)1 << 30 : len;
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Reads exactly len bytes at off; returns the count read (short only at end of file) or -1. */
static ssize_t pread_full(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Writes e's data to path (temporary name, then rename). Runs without the lock; the caller
 * owns e (SPILLING or PENDING). Computes the chunk checksums on the first spill. */
static int write_spill(sb_store *s, entry *e, const char *path, sb_err *err)
{
    size_t nch = nchunks_of(e->len, s->chunk);
    if (e->crcs == NULL && nch > 0) {
        uint32_t *crcs = malloc(nch * sizeof *crcs);
        if (crcs == NULL)
            return sb_err_set(err, "partition %s: out of memory for spill checksums", e->id);
        for (size_t c = 0; c < nch; c++) {
            size_t off = c * s->chunk;
            size_t n = e->len - off < s->chunk ? e->len - off : s->chunk;
            crcs[c] = sb_crc32c(0, (const char *)e->buf + off, n);
        }
        e->crcs = crcs;
    }
    size_t hs = 0;
    unsigned char *hdr = build_header(s, e, &hs);
    char *tmp = NULL;
    if (hdr == NULL || asprintf(&tmp, "%s.tmp", path) < 0) {
        free(hdr);
        return sb_err_set(err, "partition %s: out of memory for spill file header", e->id);
    }
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        sb_err_set(err, "partition %s: spill file %s: cannot create: %s", e->id, tmp,
                   strerror(errno));
        goto done;
    }
    if (write_full(fd, hdr, hs) != 0 || write_full(fd, e->buf, e->len) != 0) {
        sb_err_set(err, "partition %s: spill file %s: write failed: %s", e->id, tmp,
                   strerror(errno));
        close(fd);
        unlink(tmp);
        goto done;
    }
    if (close(fd) != 0) {
        sb_err_set(err, "partition %s: spill file %s: close failed: %s", e->id, tmp,
                   strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        sb_err_set(err, "partition %s: spill file %s: rename to %s failed: %s", e->id, tmp, path,
                   strerror(errno));
        unlink(tmp);
        goto done;
    }
    rc = 0;
done:
    free(hdr);
    free(tmp);
    return rc;
}

/* Checks that fd holds e's spill file: size and header. SB_STORE_ECORRUPT otherwise. */
static int verify_file(const sb_store *s, const entry *e, int fd, const char *path, sb_err *err)
{
    size_t hs = 0;
    unsigned char *want = build_header(s, e, &hs);
    unsigned char *got = malloc(hs);
    int rc = SB_STORE_ECORRUPT;
    struct stat st;
    if (want == NULL || got == NULL) {
        sb_err_set(err, "partition %s: out of memory", e->id);
        rc = SB_STORE_EFAIL;
    } else if (fstat(fd, &st) != 0) {
        sb_err_set(err, "partition %s: spill file %s: %s", e->id, path, strerror(errno));
        rc = SB_STORE_EFAIL;
    } else if ((uint64_t)st.st_size != (uint64_t)hs + e->len) {
        sb_err_set(err, "partition %s: spill file %s is %s: %jd bytes, expected %zu", e->id, path,
                   (uint64_t)st.st_size < (uint64_t)hs + e->len ? "short" : "too long",
                   (intmax_t)st.st_size, hs + e->len);
    } else if (pread_full(fd, got, hs, 0) != (ssize_t)hs || memcmp(got, want, hs) != 0) {
        sb_err_set(err, "partition %s: spill file %s: corrupted header", e->id, path);
    } else {
        rc = 0;
    }
    free(want);
    free(got);
    return rc;
}

/* Reads chunk c of e's data from fd into dst and checks its CRC. */
static int read_chunk(const sb_store *s, const entry *e, int fd, const char *path, size_t c,
                      void *dst, sb_err *err)
{
    size_t off = c * s->chunk;
    size_t n = e->len - off < s->chunk ? e->len - off : s->chunk;
    off_t pos = (off_t)(header_size(strlen(e->id), nchunks_of(e->len, s->chunk)) + off);
    ssize_t r = pread_full(fd, dst, n, pos);
    if (r < 0)
        return sb_err_set(err, "partition %s: spill file %s: read failed: %s", e->id, path,
                          strerror(errno));
    if ((size_t)r != n) {
        sb_err_set(err, "partition %s: spill file %s is short: chunk %zu has %zd of %zu bytes",
                   e->id, path, c, r, n);
        return SB_STORE_ECORRUPT;
    }
    if (sb_crc32c(0, dst, n) != e->crcs[c]) {
        sb_err_set(err, "partition %s: spill file %s is corrupted: checksum mismatch in chunk %zu",
                   e->id, path, c);
        return SB_STORE_ECORRUPT;
    }
    return 0;
}

/* ---- making room -------------------------------------------------------------------------- */

/* The next partition to spill: unpinned, in memory, not empty, least soon needed (largest
 * next_needed, then largest). With `self`, only those needed later than self. *spillable gets
 * the bytes all such candidates hold. */
static entry *pick_victim(sb_store *s, const entry *self, size_t *spillable)
{
    entry *best = NULL;
    size_t total = 0;
    for (entry *e = s->head; e; e = e->next) {
        if (e->state != ST_MEM || e->pins > 0 || e->len == 0 || e->released)
            continue;
        if (self && e->next_needed <= self->next_needed)
            continue;
        total += e->len;
        if (best == NULL || e->next_needed > best->next_needed ||
            (e->next_needed == best->next_needed && e->len > best->len))
            best = e;
    }
    *spillable = total;
    return best;
}

/* A spill makes room for memory that is about to be used: the reservation or the put that
 * asked for it. Its blob goes back to malloc, whose arena keeps the pages (the worker tunes
 * malloc to keep freed blocks: sb_rpc_tune_malloc), so the new memory came on top of the old
 * until the worker's heap check trimmed, up to 250 ms later: at the barrier of a 2 GiB sort
 * both workers rose by ~150 MiB for ~0.3 s while their stores spilled ~10 partitions each
 * (issue 41). So every SPILL_TRIM_BYTES spilled, the spilling thread trims at once. */
#define SPILL_TRIM_BYTES ((size_t)16 << 20)

/* Spills victim v (lock held on entry and on return; released during the write). */
static int spill_victim(sb_store *s, entry *v, sb_err *err)
{
    char *path = spill_name(s, v->id);
    if (path == NULL)
        return sb_err_set(err, "partition %s: out of memory", v->id);
    set_state(s, v, ST_SPILLING);
    s->spilling += v->len;
    pthread_mutex_unlock(&s->mu);

    int rc = write_spill(s, v, path, err);
    void *old = v->buf;
    if (rc == 0) {
        free_blob(s, old, v->buf_ours); /* nobody else touches a SPILLING entry */
        sb_log(SB_LOG_DEBUG, "partition spilled", "partition", v->id, "file", path, (char *)NULL);
    }

    pthread_mutex_lock(&s->mu);
    s->spilling -= v->len;
    entry *dead = NULL;
    if (rc == 0) {
        v->buf = NULL;
        v->buf_ours = 0;
        s->resident -= v->charged;
        v->charged = 0;
        v->path = path;
        s->disk_bytes += v->len;
        s->spill_count++;
        s->spilled_bytes += v->len;
        s->untrimmed += v->len;
        set_state(s, v, ST_DISK);
        if (v->released && v->pins == 0) {
            entry_detach(s, v);
            dead = v;
        }
    } else {
        free(path);
        set_state(s, v, ST_MEM);
        if (v->released && v->pins == 0) {
            entry_detach(s, v);
            dead = v;
        }
    }
    pthread_cond_broadcast(&s->cv);
    int trim = s->untrimmed >= SPILL_TRIM_BYTES;
    if (trim)
        s->untrimmed = 0;
    if (dead || trim) {
        pthread_mutex_unlock(&s->mu);
        if (dead)
            entry_free(s, dead);
        if (trim)
            malloc_trim(0);
        pthread_mutex_lock(&s->mu);
    }
    return rc;
}

#define ROOM_SELF 1

/* Makes mem_bytes + need <= limit by spilling (lock held; released during I/O and waits).
 * Returns 0 when there is room now, SB_STORE_ENOSPACE when there is not (per w), a spill
 * failure, or — with `self`, a put deciding where its unadmitted partition goes — ROOM_SELF
 * when self should be written to disk rather than spill partitions needed sooner. */
static int room_loop(sb_store *s, size_t need, size_t limit, const wait_spec *w, const entry *self,
                     sb_err *err)
{
    int expired = 0;
    for (;;) {
        size_t mem = mem_bytes(s);
        if (need <= limit && mem <= limit - need)
            return 0;
        if (need > limit)
            return self ? ROOM_SELF : fail(err, SB_STORE_ENOSPACE, "no room");
        size_t over = mem + need - limit;
        if (s->spilling >= over) { /* spills in flight will do; they always broadcast */
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        size_t spillable = 0;
        entry *v = pick_victim(s, self, &spillable);
        if (v == NULL || spillable + s->spilling < over) {
            if (self)
                return ROOM_SELF;
            if (expired || wait_cv(s, w) != 0) {
                if (expired)
                    return SB_STORE_ENOSPACE;
                expired = 1; /* look once more, then give up */
            }
            continue;
        }
        int rc = spill_victim(s, v, err);
        if (rc != 0)
            return rc;
    }
}

/* ---- open / close ------------------------------------------------------------------------- */

int sb_store_open(const sb_store_config *cfg, sb_store **out, sb_err *err)
{
    if (out == NULL || cfg == NULL)
        return sb_err_set(err, "partition store: no config");
    *out = NULL;
    if (cfg->spill_dir == NULL || cfg->spill_dir[0] == '\0')
        return sb_err_set(err, "partition store: no spill directory");
    size_t chunk = cfg->chunk_size ? cfg->chunk_size : SB_STORE_DEFAULT_CHUNK;
    if (chunk > SB_STORE_MAX_CHUNK)
        return sb_err_set(err, "partition store: chunk size %zu above the maximum %zu", chunk,
                          SB_STORE_MAX_CHUNK);
    if (mkdir(cfg->spill_dir, 0700) != 0 && errno != EEXIST)
        return sb_err_set(err, "partition store: spill directory %s: %s", cfg->spill_dir,
                          strerror(errno));

    sb_store *s = calloc(1, sizeof *s);
    if (s == NULL)
        return sb_err_set(err, "partition store: out of memory");
    s->budget = cfg->memory_budget;
    s->chunk = chunk;
    s->free_fn = cfg->free_fn;
    s->free_ctx = cfg->free_ctx;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (s->buckets == NULL || asprintf(&s->dir, "%s/sbstore-XXXXXX", cfg->spill_dir) < 0) {
        free(s->buckets);
        free(s);
        return sb_err_set(err, "partition store: out of memory");
    }
    if (mkdtemp(s->dir) == NULL) {
        sb_err_set(err, "partition store: cannot create a directory in %s: %s", cfg->spill_dir,
                   strerror(errno));
        free(s->dir);
        free(s->buckets);
        free(s);
        return -1;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->readback, 0);
    char budget[32], chunkbuf[32];
    snprintf(budget, sizeof budget, "%zu", s->budget);
    snprintf(chunkbuf, sizeof chunkbuf, "%zu", s->chunk);
    sb_log(SB_LOG_DEBUG, "partition store opened", "budget", budget, "chunk", chunkbuf, "spill_dir",
           s->dir, (char *)NULL);
    *out = s;
    return 0;
}

void sb_store_close(sb_store *s)
{
    if (s == NULL)
        return;
    if (s->pinned_parts > 0 || s->nresv > 0) {
        char pins[32], resv[32];
        snprintf(pins, sizeof pins, "%zu", s->pinned_parts);
        snprintf(resv, sizeof resv, "%u", s->nresv);
        sb_log(SB_LOG_ERROR, "partition store closed with refs or reservations outstanding",
               "pinned", pins, "reservations", resv, (char *)NULL);
    }
    entry *e = s->head;
    while (e) {
        entry *next = e->next;
        entry_free(s, e);
        e = next;
    }
    if (rmdir(s->dir) != 0)
        sb_log(SB_LOG_WARN, "cannot remove spill directory", "dir", s->dir, "error",
               strerror(errno), (char *)NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->buckets);
    free(s->dir);
    free(s);
}

const char *sb_store_spill_path(const sb_store *s)
{
    return s->dir;
}

/* ---- the process's memory outside the store ------------------------------------------------ */

void sb_store_set_outside(sb_store *s, size_t bytes)
{
    pthread_mutex_lock(&s->mu);
    size_t was = s->outside;
    s->outside = bytes < s->budget / 2 ? bytes : s->budget / 2;
    if (s->outside > was && mem_bytes(s) > limit_of(s)) {
        /* spill down to the new limit now, as far as unpinned partitions allow: a put or a
         * reservation would only start from there */
        wait_spec w;
        wait_init(&w, 0);
        sb_err tmp;
        if (room_loop(s, 0, limit_of(s), &w, NULL, &tmp) == SB_STORE_EFAIL)
            sb_log(SB_LOG_WARN, "cannot spill down to the limit", "error", tmp.msg, (char *)NULL);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- reservations ------------------------------------------------------------------------- */

static int reserve_locked(sb_store *s, size_t bytes, int timeout_ms, sb_err *err)
{
    if (bytes > s->budget)
        return fail(err, SB_STORE_ENOSPACE,
                    "partition store: cannot reserve %zu bytes: budget is %zu", bytes, s->budget);
    if (bytes == 0)
        return 0;
    wait_spec w;
    wait_init(&w, timeout_ms);
    int rc = room_loop(s, bytes, limit_of(s), &w, NULL, err);
    if (rc == SB_STORE_ENOSPACE)
        sb_err_set(err,
                   "partition store: no room for %zu bytes (memory %zu of %zu: %zu reserved, "
                   "%zu pinned partitions)",
                   bytes, mem_bytes(s), limit_of(s), s->reserved, s->pinned_parts);
    if (rc != 0)
        return rc;
    s->reserved += bytes;
    note_peak(s);
    return 0;
}

int sb_store_reserve(sb_store *s, size_t bytes, int timeout_ms, sb_store_resv **out, sb_err *err)
{
    if (s == NULL || out == NULL)
        return sb_err_set(err, "partition store: bad arguments to reserve");
    *out = NULL;
    sb_store_resv *r = calloc(1, sizeof *r);
    if (r == NULL)
        return sb_err_set(err, "partition store: out of memory");
    pthread_mutex_lock(&s->mu);
    int rc = reserve_locked(s, bytes, timeout_ms, err);
    if (rc == 0)
        s->nresv++;
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        free(r);
        return rc;
    }
    r->s = s;
    r->left = bytes;
    *out = r;
    return 0;
}

int sb_store_reserve_more(sb_store_resv *r, size_t bytes, int timeout_ms, sb_err *err)
{
    if (r == NULL)
        return sb_err_set(err, "partition store: no reservation");
    sb_store *s = r->s;
    pthread_mutex_lock(&s->mu);
    int rc = reserve_locked(s, bytes, timeout_ms, err);
    if (rc == 0)
        r->left += bytes;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

size_t sb_store_resv_left(const sb_store_resv *r)
{
    if (r == NULL)
        return 0;
    pthread_mutex_lock(&r->s->mu);
    size_t left = r->left;
    pthread_mutex_unlock(&r->s->mu);
    return left;
}

void sb_store_unreserve(sb_store_resv *r)
{
    if (r == NULL)
        return;
    sb_store *s = r->s;
    pthread_mutex_lock(&s->mu);
    s->reserved -= r->left;
    s->nresv--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free(r);
}

/* ---- put ---------------------------------------------------------------------------------- */

static void admit(sb_store *s, entry *e)
{
    s->unbudgeted -= e->unbudgeted;
    s->resident += e->unbudgeted;
    e->charged += e->unbudgeted;
    e->unbudgeted = 0;
    set_state(s, e, ST_MEM);
    note_peak(s);
}

/* Case 2c: writes the pending entry e to its spill file (lock held; released during I/O). */
static int put_direct(sb_store *s, entry *e, sb_err *err)
{
    char *path = spill_name(s, e->id);
    if (path == NULL)
        return sb_err_set(err, "partition %s: out of memory", e->id);
    pthread_mutex_unlock(&s->mu);
    int rc = write_spill(s, e, path, err);
    if (rc == 0) {
        free_blob(s, e->buf, 0);
        sb_log(SB_LOG_DEBUG, "partition written straight to disk", "partition", e->id, "file", path,
               (char *)NULL);
    } else {
        free(path);
    }
    pthread_mutex_lock(&s->mu);
    if (rc != 0)
        return rc;
    e->buf = NULL;
    s->resident -= e->charged;
    s->unbudgeted -= e->unbudgeted;
    e->charged = 0;
    e->unbudgeted = 0;
    e->path = path;
    s->disk_bytes += e->len;
    s->spill_count++;
    s->direct_spills++;
    s->spilled_bytes += e->len;
    set_state(s, e, ST_DISK);
    return 0;
}

int sb_store_put(sb_store *s, const char *id, void *blob, size_t len, const sb_store_hints *hints,
                 sb_err *err)
{
    entry *e = NULL;
    int rc = check_id(id, err);
    if (rc == 0 && s == NULL)
        rc = sb_err_set(err, "partition store: no store");
    if (rc == 0 && blob == NULL && len > 0)
        rc = sb_err_set(err, "partition %s: no data for %zu bytes", id, len);
    if (rc == 0 && hints && hints->resv && hints->resv->s != s)
        rc = sb_err_set(err, "partition %s: reservation from another store", id);
    if (rc == 0 && ((e = calloc(1, sizeof *e)) == NULL || (e->id = strdup(id)) == NULL))
        rc = sb_err_set(err, "partition %s: out of memory", id);
    if (rc != 0) {
        if (s != NULL)
            free_blob(s, blob, 0);
        else
            free(blob);
        if (e)
            free(e);
        return rc;
    }
    e->len = len;
    e->next_needed = hints ? hints->next_needed : 0;
    e->buf = blob;
    e->fd = -1;
    e->state = ST_PENDING;

    pthread_mutex_lock(&s->mu);
    if (lookup(s, id) != NULL) {
        pthread_mutex_unlock(&s->mu);
        free_blob(s, blob, 0);
        free(e->id);
        free(e);
        return fail(err, SB_STORE_EEXIST, "partition %s: already in the store", id);
    }
    size_t covered = 0;
    if (hints && hints->resv) {
        covered = hints->resv->left < len ? hints->resv->left : len;
        hints->resv->left -= covered;
        s->reserved -= covered;
        s->resident += covered;
    }
    size_t excess = len - covered;
    e->charged = covered;
    e->unbudgeted = excess;
    s->unbudgeted += excess;
    insert(s, e);

    /* From admit() on, e is settled and public: another thread may pin, spill or release (and
     * free) it as soon as the lock is dropped, so cases a and b do not touch it afterwards.
     * Case c keeps e PENDING while it unlocks, which defers any release to here. */
    size_t mem = mem_bytes(s);
    entry *dead = NULL;
    if (mem + excess <= limit_of(s)) { /* a */
        admit(s, e);
    } else if (excess <= s->chunk && mem + excess <= slack_limit(s)) { /* b */
        admit(s, e);
        wait_spec w;
        wait_init(&w, 0);
        sb_err tmp;
        if (room_loop(s, 0, limit_of(s), &w, NULL, &tmp) == SB_STORE_EFAIL)
            sb_log(SB_LOG_WARN, "cannot spill back under the memory budget", "partition", id,
                   "error", tmp.msg, (char *)NULL);
    } else { /* c */
        wait_spec w;
        wait_init(&w, 0);
        sb_err tmp;
        if (room_loop(s, excess, limit_of(s), &w, e, &tmp) == 0) {
            admit(s, e);
        } else if ((rc = put_direct(s, e, err)) != 0) {
            entry_detach(s, e);
            dead = e; /* frees the blob */
        }
        if (rc == 0 && e->released && e->pins == 0) { /* released while it was pending */
            entry_detach(s, e);
            dead = e;
        }
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (dead)
        entry_free(s, dead);
    return rc;
}

/* ---- pin / read / load -------------------------------------------------------------------- */

static sb_store_ref *make_ref(sb_store *s, entry *e)
{
    sb_store_ref *ref = calloc(1, sizeof *ref);
    if (ref == NULL)
        return NULL;
    ref->s = s;
    ref->e = e;
    ref->len = e->len;
    ref->in_memory = e->state == ST_MEM;
    ref->data = ref->in_memory ? e->buf : NULL;
    if (!ref->in_memory && (ref->path = strdup(e->path)) == NULL) {
        free(ref);
        return NULL;
    }
    return ref;
}

/* Looks id up and holds it (a pin) until it is settled. Lock held. */
static int hold_settled(sb_store *s, const char *id, entry **out, sb_err *err)
{
    entry *e = lookup(s, id);
    if (e == NULL)
        return fail(err, SB_STORE_ENOTFOUND, "partition %s: not in the store", id);
    pin_locked(s, e);
    while (is_transient(e->state))
        pthread_cond_wait(&s->cv, &s->mu);
    if (e->released) {
        entry *dead = unpin_locked(s, e);
        if (dead) {
            pthread_mutex_unlock(&s->mu);
            entry_free(s, dead);
            pthread_mutex_lock(&s->mu);
        }
        return fail(err, SB_STORE_ENOTFOUND, "partition %s: not in the store", id);
    }
    *out = e;
    return 0;
}

/* Drops a hold and unlocks. */
static void drop_and_unlock(sb_store *s, entry *e)
{
    entry *dead = unpin_locked(s, e);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (dead)
        entry_free(s, dead);
}

int sb_store_pin(sb_store *s, const char *id, sb_store_ref **out, sb_err *err)
{
    sb_err local;
    if (err == NULL)
        err = &local;
    if (out == NULL)
        return sb_err_set(err, "partition store: no ref pointer");
    *out = NULL;
    int rc = check_id(id, err);
    if (rc != 0)
        return rc;
    entry *e = NULL;
    pthread_mutex_lock(&s->mu);
    rc = hold_settled(s, id, &e, err);
    if (rc != 0) {
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    if (e->state == ST_DISK && e->fd_refs == 0) {
        int fd = open(e->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = sb_err_set(err, "partition %s: spill file %s: cannot open: %s", e->id, e->path,
                            strerror(errno));
            if (errno == ENOENT)
                rc = SB_STORE_ECORRUPT;
        } else if ((rc = verify_file(s, e, fd, e->path, err)) != 0) {
            close(fd);
        } else {
            e->fd = fd;
        }
    }
    sb_store_ref *ref = NULL;
    if (rc == 0 && (ref = make_ref(s, e)) == NULL)
        rc = sb_err_set(err, "partition %s: out of memory", id);
    if (rc != 0) {
        if (rc == SB_STORE_ECORRUPT)
            sb_log(SB_LOG_ERROR, "bad spill file", "error", err->msg, (char *)NULL);
        drop_and_unlock(s, e);
        return rc;
    }
    if (!ref->in_memory)
        e->fd_refs++;
    pthread_mutex_unlock(&s->mu);
    *out = ref;
    return 0;
}

void sb_store_unpin(sb_store_ref *ref)
{
    if (ref == NULL)
        return;
    sb_store *s = ref->s;
    entry *e = ref->e;
    pthread_mutex_lock(&s->mu);
    if (!ref->in_memory && --e->fd_refs == 0) {
        close(e->fd);
        e->fd = -1;
    }
    drop_and_unlock(s, e);
    free(ref->path);
    free(ref);
}

const char *sb_store_ref_id(const sb_store_ref *ref)
{
    return ref->e->id;
}

size_t sb_store_ref_len(const sb_store_ref *ref)
{
    return ref->len;
}

int sb_store_ref_in_memory(const sb_store_ref *ref)
{
    return ref->in_memory;
}

const void *sb_store_ref_data(const sb_store_ref *ref)
{
    return ref->data;
}

ssize_t sb_store_read(sb_store_ref *ref, size_t offset, void *dst, size_t len, sb_err *err)
{
    sb_err local;
    if (err == NULL)
        err = &local;
    if (ref == NULL || (dst == NULL && len > 0))
        return sb_err_set(err, "partition store: bad arguments to read");
    if (offset >= ref->len || len == 0)
        return 0;
    size_t n = ref->len - offset < len ? ref->len - offset : len;
    if (ref->in_memory) {
        memcpy(dst, (const char *)ref->data + offset, n);
        return (ssize_t)n;
    }
    /* Spilled: the fd, crcs, len and id of a spilled ref's entry do not change while it is
     * held, so no lock is needed. */
    sb_store *s = ref->s;
    const entry *e = ref->e;
    size_t chunk = s->chunk;
    unsigned char *tmp = NULL;
    int rc = 0;
    size_t end = offset + n;
    for (size_t c = offset / chunk; c * chunk < end && rc == 0; c++) {
        size_t cstart = c * chunk;
        size_t clen = e->len - cstart < chunk ? e->len - cstart : chunk;
        size_t from = offset > cstart ? offset : cstart;
        size_t to = end < cstart + clen ? end : cstart + clen;
        if (from == cstart && to == cstart + clen) {
            rc = read_chunk(s, e, e->fd, ref->path, c, (char *)dst + (cstart - offset), err);
            continue;
        }
        if (tmp == NULL && (tmp = malloc(chunk)) == NULL) {
            rc = sb_err_set(err, "partition %s: out of memory", e->id);
            break;
        }
        rc = read_chunk(s, e, e->fd, ref->path, c, tmp, err);
        if (rc == 0)
            memcpy((char *)dst + (from - offset), tmp + (from - cstart), to - from);
    }
    free(tmp);
    if (rc != 0) {
        if (rc == SB_STORE_ECORRUPT)
            sb_log(SB_LOG_ERROR, "bad spill file", "error", err->msg, (char *)NULL);
        return rc;
    }
    atomic_fetch_add(&s->readback, (uint64_t)n);
    return (ssize_t)n;
}

/* Reads and verifies the whole spill file of e into buf (no lock; e is LOADING). */
static int load_file(sb_store *s, entry *e, const char *path, void *buf, sb_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = errno == ENOENT ? SB_STORE_ECORRUPT : SB_STORE_EFAIL;
        sb_err_set(err, "partition %s: spill file %s: cannot open: %s", e->id, path,
                   strerror(errno));
        return rc;
    }
    int rc = verify_file(s, e, fd, path, err);
    size_t nch = nchunks_of(e->len, s->chunk);
    for (size_t c = 0; c < nch && rc == 0; c++)
        rc = read_chunk(s, e, fd, path, c, (char *)buf + c * s->chunk, err);
    close(fd);
    return rc;
}

int sb_store_load(sb_store *s, const char *id, int timeout_ms, sb_store_ref **out, sb_err *err)
{
    sb_err local;
    if (err == NULL)
        err = &local;
    if (out == NULL)
        return sb_err_set(err, "partition store: no ref pointer");
    *out = NULL;
    int rc = check_id(id, err);
    if (rc != 0)
        return rc;
    wait_spec w;
    wait_init(&w, timeout_ms);
    entry *e = NULL;
    pthread_mutex_lock(&s->mu);
    rc = hold_settled(s, id, &e, err);
    if (rc != 0) {
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    for (;;) {
        while (is_transient(e->state))
            pthread_cond_wait(&s->cv, &s->mu);
        if (e->released) {
            drop_and_unlock(s, e);
            return fail(err, SB_STORE_ENOTFOUND, "partition %s: not in the store", id);
        }
        if (e->state == ST_MEM)
            break;
        if (e->len > s->budget) {
            sb_err_set(err,
                       "partition %s: %zu bytes cannot be loaded within a budget of %zu bytes; "
                       "read it in chunks",
                       id, e->len, s->budget);
            drop_and_unlock(s, e);
            return SB_STORE_ENOSPACE;
        }
        rc = room_loop(s, e->len, limit_of(s), &w, NULL, err);
        if (rc != 0) {
            if (rc == SB_STORE_ENOSPACE)
                sb_err_set(err,
                           "partition %s: no room to load %zu bytes (memory %zu of %zu: %zu "
                           "reserved, %zu pinned partitions)",
                           id, e->len, mem_bytes(s), limit_of(s), s->reserved, s->pinned_parts);
            drop_and_unlock(s, e);
            return rc;
        }
        if (e->state != ST_DISK || e->released)
            continue; /* it moved on while we made room */

        set_state(s, e, ST_LOADING);
        e->charged = e->len;
        s->resident += e->len;
        note_peak(s);
        char *path = e->path;
        pthread_mutex_unlock(&s->mu);

        void *buf = malloc(e->len ? e->len : 1);
        if (buf == NULL)
            rc = sb_err_set(err, "partition %s: out of memory for %zu bytes", id, e->len);
        else
            rc = load_file(s, e, path, buf, err);
        if (rc == 0)
            unlink(path);
        else
            free(buf);
        if (rc == SB_STORE_ECORRUPT)
            sb_log(SB_LOG_ERROR, "bad spill file", "error", err->msg, (char *)NULL);

        pthread_mutex_lock(&s->mu);
        if (rc != 0) {
            s->resident -= e->charged;
            e->charged = 0;
            set_state(s, e, ST_DISK);
            drop_and_unlock(s, e);
            return rc;
        }
        e->buf = buf;
        e->buf_ours = 1;
        e->path = NULL;
        s->disk_bytes -= e->len;
        s->load_count++;
        atomic_fetch_add(&s->readback, (uint64_t)e->len);
        set_state(s, e, ST_MEM);
        pthread_cond_broadcast(&s->cv);
        free(path);
        break;
    }
    sb_store_ref *ref = make_ref(s, e);
    if (ref == NULL) {
        drop_and_unlock(s, e);
        return sb_err_set(err, "partition %s: out of memory", id);
    }
    pthread_mutex_unlock(&s->mu);
    *out = ref;
    return 0;
}

/* Copies the partition of a pinned ref into a buffer of the caller's, outside the budget. */
static int copy_outside(sb_store *s, sb_store_ref *ref, sb_store_whole *out, sb_err *err)
{
    size_t len = ref->len;
    void *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return sb_err_set(err,
                          "partition %s: out of memory for %zu bytes, read outside the store's "
                          "budget of %zu bytes",
                          ref->e->id, len, s->budget);
    ssize_t n = sb_store_read(ref, 0, buf, len, err);
    if (n < 0 || (size_t)n != len) {
        free(buf);
        return n < 0 ? (int)n
                     : fail(err, SB_STORE_ECORRUPT, "partition %s: short read (%zd of %zu bytes)",
                            ref->e->id, n, len);
    }
    pthread_mutex_lock(&s->mu);
    s->outside_loads++;
    s->outside_bytes += len;
    pthread_mutex_unlock(&s->mu);
    out->own = buf;
    out->data = buf;
    out->len = len;
    return 0;
}

int sb_store_load_whole(sb_store *s, const char *id, size_t held, int timeout_ms,
                        sb_store_whole *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    sb_store_ref *ref = NULL;
    int rc = sb_store_pin(s, id, &ref, err);
    if (rc != 0)
        return rc;
    /* a load's room may come from others' pins and reservations going away, never from ours */
    size_t lim = limit_of(s); /* (read unlocked: a hint; the load decides under the lock) */
    if (!ref->in_memory && held <= lim && ref->len <= lim - held) {
        sb_store_unpin(ref);
        ref = NULL;
        rc = sb_store_load(s, id, timeout_ms, &ref, err);
        if (rc != SB_STORE_ENOSPACE) {
            if (rc == 0)
                *out = (sb_store_whole){.ref = ref, .data = ref->data, .len = ref->len};
            return rc;
        }
        if ((rc = sb_store_pin(s, id, &ref, err)) != 0) /* no room in time: read it outside */
            return rc;
    }
    if (ref->in_memory) {
        *out = (sb_store_whole){.ref = ref, .data = ref->data, .len = ref->len};
        return 0;
    }
    rc = copy_outside(s, ref, out, err);
    sb_store_unpin(ref);
    return rc;
}

void sb_store_whole_done(sb_store_whole *w)
{
    if (w == NULL)
        return;
    sb_store_unpin(w->ref);
    free(w->own);
    memset(w, 0, sizeof *w);
}

/* ---- release, stats, list, check ---------------------------------------------------------- */

int sb_store_release(sb_store *s, const char *id, sb_err *err)
{
    int rc = check_id(id, err);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->mu);
    entry *e = lookup(s, id);
    if (e == NULL) {
        pthread_mutex_unlock(&s->mu);
        return fail(err, SB_STORE_ENOTFOUND, "partition %s: not in the store", id);
    }
    entry *dead = NULL;
    if (e->pins == 0 && !is_transient(e->state)) {
        entry_detach(s, e);
        dead = e;
    } else {
        unhash(s, e);
        e->released = 1;
        s->deferred++;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (dead)
        entry_free(s, dead);
    return 0;
}

void sb_store_get_stats(sb_store *s, sb_store_stats *o)
{
    pthread_mutex_lock(&s->mu);
    memset(o, 0, sizeof *o);
    o->budget = s->budget;
    o->outside_counted = s->outside;
    o->chunk_size = s->chunk;
    o->mem_bytes = mem_bytes(s);
    o->resident_bytes = s->resident;
    o->reserved_bytes = s->reserved;
    o->unbudgeted_bytes = s->unbudgeted;
    o->peak_mem_bytes = s->peak;
    o->disk_bytes = s->disk_bytes;
    o->mem_partitions = s->mem_parts;
    o->disk_partitions = s->disk_parts;
    o->pinned_partitions = s->pinned_parts;
    o->deferred_releases = s->deferred;
    o->spill_count = s->spill_count;
    o->spilled_bytes = s->spilled_bytes;
    o->direct_spill_count = s->direct_spills;
    o->load_count = s->load_count;
    o->readback_bytes = atomic_load(&s->readback);
    o->outside_loads = s->outside_loads;
    o->outside_bytes = s->outside_bytes;
    pthread_mutex_unlock(&s->mu);
}

int sb_store_list(sb_store *s, sb_store_item **items, size_t *count, sb_err *err)
{
    if (items == NULL || count == NULL)
        return sb_err_set(err, "partition store: bad arguments to list");
    *items = NULL;
    *count = 0;
    pthread_mutex_lock(&s->mu);
    size_t n = 0, idbytes = 0;
    for (entry *e = s->head; e; e = e->next)
        if (!e->released) {
            n++;
            idbytes += strlen(e->id) + 1;
        }
    sb_store_item *block = malloc(n * sizeof *block + idbytes + 1);
    if (block == NULL) {
        pthread_mutex_unlock(&s->mu);
        return sb_err_set(err, "partition store: out of memory for a list of %zu", n);
    }
    char *names = (char *)(block + n);
    size_t i = 0;
    for (entry *e = s->head; e; e = e->next) {
        if (e->released)
            continue;
        size_t l = strlen(e->id) + 1;
        memcpy(names, e->id, l);
        block[i].id = names;
        block[i].len = e->len;
        block[i].in_memory = e->state == ST_MEM || e->state == ST_SPILLING;
        names += l;
        i++;
    }
    pthread_mutex_unlock(&s->mu);
    *items = block;
    *count = n;
    return 0;
}

int sb_store_check(sb_store *s, sb_err *err)
{
    pthread_mutex_lock(&s->mu);
    size_t resident = 0, unbudgeted = 0, disk = 0, memp = 0, diskp = 0, pinned = 0, deferred = 0,
           hashed = 0, spilling = 0;
    const char *bad = NULL;
    const entry *be = NULL;
    for (const entry *e = s->head; e && !bad; e = e->next) {
        resident += e->charged;
        unbudgeted += e->unbudgeted;
        memp += is_mem_class(e->state);
        diskp += is_disk_class(e->state);
        pinned += e->pins > 0;
        deferred += e->released != 0;
        hashed += !e->released;
        be = e;
        if (is_disk_class(e->state))
            disk += e->len;
        if (e->state == ST_SPILLING)
            spilling += e->len;
        if (!e->released && lookup(s, e->id) != e)
            bad = "an entry is missing from the table";
        else if (is_mem_class(e->state) && (e->charged != e->len || (e->len && !e->buf)))
            bad = "an in-memory partition is not charged in full";
        else if (e->state == ST_DISK && (e->charged != 0 || e->buf || !e->path))
            bad = "a spilled partition still holds memory or has no file";
        else if (e->state == ST_PENDING && e->charged + e->unbudgeted != e->len)
            bad = "a pending put is accounted wrongly";
        else if (e->state != ST_PENDING && e->unbudgeted != 0)
            bad = "a settled partition has unbudgeted bytes";
        else if (e->fd_refs > e->pins || (e->fd_refs > 0) != (e->fd >= 0))
            bad = "spilled refs and the shared fd disagree";
    }
    char msg[256] = "";
    if (bad)
        snprintf(msg, sizeof msg, "partition %s: %s", be->id, bad);
    else if (resident != s->resident)
        snprintf(msg, sizeof msg, "resident bytes %zu, counter says %zu", resident, s->resident);
    else if (unbudgeted != s->unbudgeted)
        snprintf(msg, sizeof msg, "unbudgeted bytes %zu, counter says %zu", unbudgeted,
                 s->unbudgeted);
    else if (disk != s->disk_bytes)
        snprintf(msg, sizeof msg, "disk bytes %zu, counter says %zu", disk, s->disk_bytes);
    else if (spilling != s->spilling)
        snprintf(msg, sizeof msg, "spilling bytes %zu, counter says %zu", spilling, s->spilling);
    else if (memp != s->mem_parts || diskp != s->disk_parts)
        snprintf(msg, sizeof msg, "partitions %zu in memory / %zu on disk, counters say %zu / %zu",
                 memp, diskp, s->mem_parts, s->disk_parts);
    else if (pinned != s->pinned_parts || deferred != s->deferred)
        snprintf(msg, sizeof msg, "pinned %zu / deferred %zu, counters say %zu / %zu", pinned,
                 deferred, s->pinned_parts, s->deferred);
    else if (hashed != s->nhashed)
        snprintf(msg, sizeof msg, "%zu partitions held, table says %zu", hashed, s->nhashed);
    else if (mem_bytes(s) > slack_limit(s))
        snprintf(msg, sizeof msg, "memory %zu above budget %zu + chunk %zu", mem_bytes(s),
                 s->budget, s->chunk);
    else if (s->peak > slack_limit(s) || s->peak < mem_bytes(s))
        snprintf(msg, sizeof msg, "peak memory %zu out of range (now %zu, budget %zu + %zu)",
                 s->peak, mem_bytes(s), s->budget, s->chunk);
    pthread_mutex_unlock(&s->mu);
    if (msg[0])
        return sb_err_set(err, "partition store check: %s", msg);
    return 0;
}
