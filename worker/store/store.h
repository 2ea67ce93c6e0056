/* store.h — the worker's partition store: holds the partitions a worker produced (or fetched)
 * until the controller releases them, within a memory budget, spilling to local files.
 *
 * A partition is an opaque, immutable blob (one contiguous buffer: the serialized partition; see
 * lib/partition) named by a string id such as "s1-t42-p0". The store is thread-safe: any number
 * of threads may put, pin, read, load and release at once. One mutex guards the metadata; file
 * I/O of partition data (spill writes, reads, loads) runs outside it, so memory reads of other
 * partitions never wait for a spill.
 *
 * Memory ownership
 *  - sb_store_put() takes ownership of `blob` whether it succeeds or fails; the store frees it
 *    with cfg->free_fn(blob, cfg->free_ctx), or free() when free_fn is NULL. Buffers the store
 *    allocates itself (sb_store_load) are malloc()ed and free()d by the store.
 *  - The store copies ids and the spill directory path; the caller keeps its own strings.
 *  - An sb_store_ref (from sb_store_pin / sb_store_load) is owned by the caller until
 *    sb_store_unpin(). While it is held, an in-memory view (sb_store_ref_data) stays valid and is
 *    never spilled, moved or freed, even if the partition is released meanwhile (the free is
 *    deferred to the last unpin). A spilled ref keeps its file readable the same way.
 *  - An sb_store_resv (reservation) is owned by the caller until sb_store_unreserve().
 *  - An sb_store_whole (sb_store_load_whole) is the caller's until sb_store_whole_done(): its
 *    ref, or its own copy, which the store does not count (it is outside the budget).
 *  - sb_store_list() returns one malloc()ed block (items and their ids): free() it.
 *  - All refs and reservations must be given back before sb_store_close(); close deletes every
 *    spill file and the store's private spill directory.
 *
 * Accounting and the budget guarantee
 *  The store counts mem_bytes = resident_bytes + reserved_bytes, where resident_bytes are the
 *  partition buffers it holds in memory — from the moment a put admits them until they are freed
 *  (a partition being written to its spill file still counts; so does the buffer of a load in
 *  progress, and a released partition still pinned) — and reserved_bytes are reservations not
 *  yet consumed by a put nor given back.
 *
 *  Guarantee: mem_bytes <= budget + chunk_size at every instant. Below, "budget" in the
 *  admission rules (not in the bounds a request is refused by at once) is the limit: the budget
 *  less the memory the process holds outside the store beyond its allowance, which the worker
 *  reports (sb_store_set_outside; 0 unless it does). Precisely:
 *   1. sb_store_reserve() and sb_store_load() admit n bytes only if mem_bytes + n <= budget after
 *      spilling; they never use the slack. When room cannot be made (everything else is pinned,
 *      reserved or itself loading) they wait up to their timeout, then fail with
 *      SB_STORE_ENOSPACE; a request larger than the whole budget fails at once.
 *   2. sb_store_put() counts a blob at once: bytes covered by the caller's reservation move from
 *      reserved to resident (mem_bytes unchanged; an unused rest of the reservation stays
 *      reserved). The excess e = len - covered is admitted
 *        a. if mem_bytes + e <= budget: kept in memory;
 *        b. else if e <= chunk_size and mem_bytes + e <= budget + chunk_size: kept in memory
 *           (this is the only use of the slack), then the put spills partitions, least soon
 *           needed first and possibly the new one, until mem_bytes <= budget again before it
 *           returns (unless all the rest is pinned, reserved or being spilled by others);
 *        c. otherwise the excess is not admitted: it is reported as unbudgeted_bytes while the
 *           put spills partitions that are needed later than the new one until it fits under
 *           the budget (then case a), or writes the new partition straight to its spill file
 *           (never counted in mem_bytes) when the others cannot make room or are needed sooner.
 *  So a producer that reserves before building a partition (sb_store_reserve, growable with
 *  sb_store_reserve_more) keeps its output inside the budget, and its put never goes straight
 *  to disk for lack of room. Puts never wait for pins or reservations to go away; they only do
 *  spill I/O and wait for spill writes already in flight. unbudgeted_bytes is memory a producer
 *  allocated outside any reservation, which the store holds only for the duration of a put.
 *  The slack is visible only while a put runs, or after one whose new partition another thread
 *  pinned (or whose spill failed) before it could spill back: otherwise, between operations,
 *  mem_bytes <= budget (the randomized test asserts this after every operation).
 *
 * Spilling
 *  Victims are unpinned in-memory partitions, least soon needed first (largest
 *  hints.next_needed; ties: the larger partition). Spill files live in a private directory
 *  created under cfg->spill_dir (sb_store_spill_path), are written to a temporary name and
 *  renamed, not fsynced, and hold a header (magic, id, length, chunk size, a CRC-32C per chunk)
 *  followed by the raw bytes. Reading back verifies the header, the file size and every chunk's
 *  CRC; a mismatch is SB_STORE_ECORRUPT with a message naming the partition and the file.
 *
 * Errors follow lib/core/err.h: 0 on success, a negative sb_store_status on failure with a
 * message in *err (err may be NULL). Every failure code is negative, so `rc < 0` and `rc != 0`
 * both test for failure; the codes beyond -1 exist so that callers can tell cases apart (the
 * data server maps SB_STORE_ENOTFOUND to NOT_FOUND).
 */
#ifndef SB_WORKER_STORE_H
#define SB_WORKER_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"

#define SB_STORE_DEFAULT_CHUNK ((size_t)1 << 20) /* 1 MiB */
#define SB_STORE_MAX_CHUNK ((size_t)1 << 30)
#define SB_STORE_ID_MAX 255 /* longest partition id, in bytes */

typedef enum sb_store_status {
    SB_STORE_OK = 0,
    SB_STORE_EFAIL = -1,     /* invalid argument, allocation or I/O failure */
    SB_STORE_ENOTFOUND = -2, /* no partition with that id */
    SB_STORE_EEXIST = -3,    /* put of an id the store already holds */
    SB_STORE_ENOSPACE = -4,  /* reserve/load: no room within the budget (in time) */
    SB_STORE_ECORRUPT = -5,  /* a spill file is short or its contents do not match */
} sb_store_status;

typedef struct sb_store sb_store;
typedef struct sb_store_ref sb_store_ref;
typedef struct sb_store_resv sb_store_resv;

typedef struct sb_store_config {
    size_t memory_budget;  /* bytes of partitions (and reservations) kept in memory */
    const char *spill_dir; /* created (one level) if missing; the store works in a private
                              sub-directory of it, removed by sb_store_close() */
    size_t chunk_size;     /* 0: SB_STORE_DEFAULT_CHUNK. Unit of spill checksums, of the
                              put slack above the budget, and of reads from spill. */
    void (*free_fn)(void *blob, void *ctx); /* frees put blobs; NULL: free(). Called from any
                                               thread, never with the store's lock held (it
                                               may call the store, except during close). */
    void *free_ctx;
} sb_store_config;

typedef struct sb_store_hints {
    uint64_t next_needed; /* when the partition is needed next: larger = later = spilled first
                             (e.g. the consumer task's sequence number). Default 0. */
    sb_store_resv *resv;  /* reservation this put draws from (NULL: none) */
} sb_store_hints;

typedef struct sb_store_stats {
    size_t budget;
    size_t chunk_size;
    size_t mem_bytes;        /* resident_bytes + reserved_bytes: what the budget bounds */
    size_t resident_bytes;   /* partition buffers held in memory (see the header comment) */
    size_t reserved_bytes;   /* reservations not yet consumed or given back */
    size_t unbudgeted_bytes; /* put bytes in flight not admitted (case 2c) */
    size_t peak_mem_bytes;   /* highest mem_bytes seen since open */
    size_t disk_bytes;       /* partition bytes in spill files (payload, without headers) */
    size_t mem_partitions;   /* partitions whose data is in memory */
    size_t disk_partitions;  /* partitions whose data is in a spill file only */
    size_t pinned_partitions;
    size_t deferred_releases; /* released, waiting for their last unpin (still counted) */
    uint64_t spill_count;     /* spill files written (including direct writes) */
    uint64_t spilled_bytes;
    uint64_t direct_spill_count; /* puts written straight to disk (case 2c) */
    uint64_t load_count;         /* sb_store_load calls that read a spill file */
    uint64_t readback_bytes;     /* bytes read from spill files (loads and sb_store_read) */
    uint64_t outside_loads;      /* sb_store_load_whole copies made outside the budget */
    uint64_t outside_bytes;      /* ... and their bytes */
    size_t outside_counted;      /* the process's memory beyond its allowance the store makes
                                    room for now (sb_store_set_outside) */
} sb_store_stats;

typedef struct sb_store_item {
    const char *id; /* points into the same block */
    size_t len;
    int in_memory;
} sb_store_item;

/* The process's memory outside the store beyond what its owner allows it (heap the tasks and
 * the data plane hold, fragments): the store admits partitions and reservations only within
 * budget - bytes, spilling down to it now where unpinned partitions allow, so the process stays
 * near budget + its allowance (worker/heap.h). Clamped to half the budget, so the store keeps
 * room to work; 0 restores the whole budget. What it holds already above the limit stays (pinned
 * or reserved) until given back. */
void sb_store_set_outside(sb_store *store, size_t bytes);

/* Opens a store. Fails on a bad config or an unusable spill directory. */
int sb_store_open(const sb_store_config *cfg, sb_store **out, sb_err *err);

/* Deletes every spill file and the private spill directory, frees every partition. All refs
 * and reservations must have been given back (logged as an error otherwise). NULL is a no-op. */
void sb_store_close(sb_store *store);

/* The private directory holding this store's spill files (owned by the store). */
const char *sb_store_spill_path(const sb_store *store);

/* Reserves `bytes` of the budget for a partition about to be built (see the guarantee).
 * timeout_ms: 0 fails at once when room cannot be made, < 0 waits without limit, > 0 waits up
 * to that many milliseconds. Spills as needed. SB_STORE_ENOSPACE when it cannot, SB_STORE_EFAIL
 * when a spill fails. Waiting ends only when other threads unpin, release or unreserve: do not
 * wait without limit while holding the pins or reservations that keep the store full. */
int sb_store_reserve(sb_store *store, size_t bytes, int timeout_ms, sb_store_resv **out,
                     sb_err *err);

/* Grows a reservation by `bytes` (e.g. chunk by chunk as an output buffer grows). */
int sb_store_reserve_more(sb_store_resv *resv, size_t bytes, int timeout_ms, sb_err *err);

/* Bytes of the reservation not yet consumed by puts. */
size_t sb_store_resv_left(const sb_store_resv *resv);

/* Gives back what is left of the reservation and frees the handle. NULL is a no-op. */
void sb_store_unreserve(sb_store_resv *resv);

/* Stores a partition (see the guarantee for where it goes). Takes ownership of `blob` (len
 * bytes; NULL allowed when len is 0) in every case. hints may be NULL. A put draws
 * min(len, left) from hints->resv. SB_STORE_EEXIST if the id is held already. */
int sb_store_put(sb_store *store, const char *id, void *blob, size_t len,
                 const sb_store_hints *hints, sb_err *err);

/* Pins a partition for reading: an in-memory view if its data is in memory (then it will not
 * be spilled until unpinned), else a handle on its spill file (whose header and size are
 * checked here: SB_STORE_ECORRUPT). Waits while the partition is being spilled or loaded. */
int sb_store_pin(sb_store *store, const char *id, sb_store_ref **out, sb_err *err);

/* Like sb_store_pin, but always returns an in-memory view: a spilled partition is read back
 * (verified) into a new buffer first, spilling others to make room, waiting per timeout_ms as
 * sb_store_reserve does. A partition larger than the budget is SB_STORE_ENOSPACE at once (read
 * it with sb_store_read). The spill file is deleted once the partition is back in memory. */
int sb_store_load(sb_store *store, const char *id, int timeout_ms, sb_store_ref **out, sb_err *err);

/* A whole partition in memory, for a reader that needs it in one piece (sb_store_load_whole). */
typedef struct sb_store_whole {
    sb_store_ref *ref; /* the store's in-memory copy, pinned; NULL when own holds the bytes */
    void *own;         /* a copy read outside the budget (malloc()ed), or NULL */
    const void *data;  /* the partition's bytes (ref's or own) */
    size_t len;
} sb_store_whole;

/* Gives a reader partition id whole: the store's in-memory copy when it has one or can load it
 * (as sb_store_load, waiting per timeout_ms), else a copy of the caller's read from its spill
 * file outside the budget, as a fetch from a peer is held. That is the case for a partition
 * larger than the budget less `held` (what the caller itself keeps reserved, which no wait would
 * free: its own reservation would make it wait for itself), and for one that no room was made
 * for in time. Without it such a partition could not be read at all (issue 41: a skewed bucket
 * bigger than the whole budget). The copy is counted in outside_loads / outside_bytes; the
 * partition stays in the store. SB_STORE_ENOTFOUND / SB_STORE_ECORRUPT when it is gone or its
 * file is bad, SB_STORE_EFAIL when the copy cannot be allocated. Give it back with
 * sb_store_whole_done. */
int sb_store_load_whole(sb_store *store, const char *id, size_t held, int timeout_ms,
                        sb_store_whole *out, sb_err *err);

/* Unpins or frees what sb_store_load_whole gave, and zeroes *w. NULL is a no-op. */
void sb_store_whole_done(sb_store_whole *w);

/* Gives a ref back; performs a deferred release on the last unpin. NULL is a no-op. */
void sb_store_unpin(sb_store_ref *ref);

const char *sb_store_ref_id(const sb_store_ref *ref);
size_t sb_store_ref_len(const sb_store_ref *ref);
int sb_store_ref_in_memory(const sb_store_ref *ref);
/* The bytes of an in-memory ref (NULL for a spilled ref, and possibly for a 0-length one). */
const void *sb_store_ref_data(const sb_store_ref *ref);

/* Copies up to len bytes from offset into dst, from memory or straight from the spill file
 * (pread, no copy of the partition in memory; every chunk touched is checksummed, which costs
 * one temporary chunk-sized buffer when the range does not cover a chunk whole). Returns the
 * number of bytes copied (less than len only at the end; 0 at or past the end), or a negative
 * sb_store_status (SB_STORE_ECORRUPT on a bad file). Thread-safe on the same ref. */
ssize_t sb_store_read(sb_store_ref *ref, size_t offset, void *dst, size_t len, sb_err *err);

/* Forgets a partition: frees its memory and deletes its spill file, at once or, while it is
 * pinned or being spilled/loaded, at the last unpin. Its id may be put again immediately.
 * SB_STORE_ENOTFOUND for an unknown id. */
int sb_store_release(sb_store *store, const char *id, sb_err *err);

/* A snapshot of the accounting. */
void sb_store_get_stats(sb_store *store, sb_store_stats *out);

/* Every partition held (not released), with sizes, as one malloc()ed block; free() it. */
int sb_store_list(sb_store *store, sb_store_item **items, size_t *count, sb_err *err);

/* Recomputes the accounting from the partitions themselves and checks it against the counters
 * and the budget guarantee (for tests and debugging). SB_STORE_EFAIL with the first mismatch. */
int sb_store_check(sb_store *store, sb_err *err);

#endif
