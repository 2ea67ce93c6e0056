/* fetch.h — fetching a partition from a peer worker's Data service (server.h), and the
 * receiving half on its own (sb_data_recv) for callers and tests that drive a stream by hand.
 *
 * sb_data_fetch() asks Data.Fetch for the partition from offset 0, reads the Chunk stream with
 * lib/rpc's piecewise reader, parses each Chunk without flattening it (lib/rpc/chunkmsg.h), and
 * lets lib/partition's assembler verify each chunk's crc32c and copy its bytes straight from
 * gRPC's receive slices into the destination blob (allocated once, when the blob's header says
 * how large it is). When the stream breaks (peer restarted, connection reset, server shut
 * down), it waits for the connection to come back and asks again from the assembler's next
 * offset, keeping everything already received; consecutive failures without progress are
 * bounded (opts.max_retries). Everything — connecting, every stream, every pause between
 * attempts — runs under one deadline, so a fetch never takes much longer than timeout_ms,
 * whatever the peer does (dies, stops reading, stops sending, lies).
 *
 * Checks: each chunk's crc32c; the Chunk's total_length against expected_len (the size the
 * controller announced, 0 = unknown), max_len and the size the blob's own header gives; chunks
 * in order, on the grid, within the blob; the stream may not end before the blob is complete;
 * finally the blob is opened with sb_batch_open (structure; flags choose more or less). A
 * failure names what happened: the partition id, the chunk index and offset, the sizes.
 *
 * Results: 0, or a negative sb_data_status with a message in err:
 *   SB_DATA_ENOTFOUND     the peer does not hold the partition (NOT_FOUND)
 *   SB_DATA_EDEADLINE     the deadline passed first
 *   SB_DATA_ECORRUPT      bad crc, sizes that contradict each other, a malformed Chunk, a
 *                         stream that ends early, a blob that does not open, DATA_LOSS
 *   SB_DATA_ETOOBIG       the partition is larger than max_len
 *   SB_DATA_EUNAVAILABLE  the peer could not be reached, or the stream kept breaking
 *   SB_DATA_EREFUSED      the peer refused the request (INVALID_ARGUMENT, OUT_OF_RANGE, ...)
 *   SB_DATA_ECANCELLED    opts.on_chunk asked to stop
 *   SB_DATA_EFAIL         bad arguments, out of memory
 * Errors that retrying cannot fix (all but a broken stream) are returned at once.
 *
 * Memory ownership: sb_data_fetch() hands the blob to the caller (64-byte aligned; free it
 * with sb_part_free()). An sb_data_fetcher is owned by the caller (sb_data_fetcher_free()); it
 * keeps its destination buffer between fetches when the caller only looks at it
 * (sb_data_fetcher_view(): valid until the next fetch or free), so repeated fetches allocate
 * nothing; sb_data_fetcher_take() hands the blob over instead. Channels are borrowed (the
 * *_addr variants make and free their own). Options and ids are only read during the call.
 * Thread safety: one fetch at a time per fetcher; any number of fetchers may share a channel.
 *
 * Process setup: call sb_rpc_tune_malloc(0) (lib/rpc/rpc.h) once at the start of a process that
 * moves partitions (worker, tools, benchmarks). With glibc's default (dynamic) thresholds, gRPC's
 * 64 KiB receive slices come and go at the top of the heap, which is trimmed and grown again:
 * thousands of page faults and zeroed pages per 64 MiB fetch, nearly doubling the receiver's
 * CPU time (docs/benchmarks.md has the numbers).
 */
#ifndef SB_WORKER_DATA_FETCH_H
#define SB_WORKER_DATA_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "rpc/rpc.h"

typedef enum sb_data_status {
    SB_DATA_OK = 0,
    SB_DATA_EFAIL = -1,
    SB_DATA_ENOTFOUND = -2,
    SB_DATA_EDEADLINE = -3,
    SB_DATA_ECORRUPT = -4,
    SB_DATA_ETOOBIG = -5,
    SB_DATA_EUNAVAILABLE = -6,
    SB_DATA_EREFUSED = -7,
    SB_DATA_ECANCELLED = -8,
} sb_data_status;

/* "ENOTFOUND", ... ("OK" for 0). */
const char *sb_data_status_name(int status);

#define SB_DATA_FETCH_NO_VERIFY 0x1u   /* do not open the blob at the end */
#define SB_DATA_FETCH_FULL_VERIFY 0x2u /* also check the blob's checksums and UTF-8 */

typedef struct sb_data_fetch_opts {
    int max_retries;          /* consecutive broken streams without progress: 0 = 5, < 0 = 0 */
    int backoff_ms;           /* first pause before asking again, doubling to 1 s: 0 = 50 */
    int reconnect_wait_ms;    /* how long one attempt waits for the connection: 0 = 2000 */
    uint32_t max_chunk_bytes; /* asked of the server: 0 = its default (1 MiB) */
    const char *requester_id; /* sent for the peer's logs (may be NULL) */
    unsigned flags;           /* SB_DATA_FETCH_* */
    /* Called after each verified chunk (offset and length within the blob, total size); a
     * nonzero return cancels the fetch (SB_DATA_ECANCELLED). May be NULL. */
    int (*on_chunk)(void *ud, uint64_t offset, size_t len, uint64_t total);
    void *on_chunk_ud;
    const sb_rpc_opts *rpc; /* channel options for the *_addr variants (NULL = defaults) */
    /* A flag another thread sets (read atomically), or NULL: once nonzero the fetch ends at its
     * next attempt or within ~50 ms of a wait (for a connection, or between attempts) with
     * SB_DATA_ECANCELLED. A task that is no longer needed stops so, instead of retrying a dead
     * peer for up to max_retries x reconnect_wait_ms while it holds its slot. */
    const int *cancel;
} sb_data_fetch_opts;

/* What a fetch did (also filled in on failure). */
typedef struct sb_data_fetch_info {
    int attempts;          /* tries: streams opened, plus waits for a lost connection that
                              did not come back in time */
    uint64_t resumed_at;   /* offset the last resumed stream started at (0: never resumed) */
    uint64_t chunks;       /* chunks received and verified */
    uint64_t bytes;        /* payload bytes received and verified */
    uint64_t total;        /* the blob's size, once known */
    sb_rpc_code last_code; /* status of the last stream that failed (SB_RPC_OK: none) */
    double seconds;
} sb_data_fetch_info;

/* ---------------------------------------------------------------------------- one-shot */

/* Fetches partition_id over `ch` into a new blob (*blob, *len). expected_len: 0 or the size the
 * blob must have; max_len: the largest size accepted (0 = no limit beyond expected_len);
 * timeout_ms: the deadline of the whole fetch (> 0). opts and info may be NULL. */
int sb_data_fetch(sb_rpc_channel *ch, const char *partition_id, size_t expected_len, size_t max_len,
                  int timeout_ms, const sb_data_fetch_opts *opts, void **blob, size_t *len,
                  sb_data_fetch_info *info, sb_err *err);

/* The same from a "host:port" address (a channel made for this fetch, with opts->rpc). */
int sb_data_fetch_addr(const char *address, const char *partition_id, size_t expected_len,
                       size_t max_len, int timeout_ms, const sb_data_fetch_opts *opts, void **blob,
                       size_t *len, sb_data_fetch_info *info, sb_err *err);

/* ---------------------------------------------------------------------------- many */

/* Many small partitions of one peer in one stream (Data.Fetch with next_partition_ids;
 * api/proto/streambatch.proto): one stream instead of one each, which is what a partition of a
 * few KiB costs (a task fed 500 one-record partitions spent most of its CPU opening streams).
 * Each partition gets the checks of sb_data_fetch (crc32c of every chunk, its size against
 * expected_lens[i] when not 0 and max_len, the blob opens); a broken stream is asked again from
 * the partition and byte it broke at, with the ones after it; one deadline (timeout_ms) covers
 * everything. The blobs are held until all have come: the caller bounds their number (at most
 * SB_DATA_FETCH_MANY_MAX) and total size. For large partitions use sb_data_fetch (one at a
 * time, nothing held).
 * Results: 0 with blobs[i], lens[i] for every i (the caller's: sb_part_free), or a negative
 * sb_data_status as above, with *failed = the index of the partition it concerns (ENOTFOUND:
 * the one the peer does not hold) and err naming it; on failure nothing is handed over. */
#define SB_DATA_FETCH_MANY_MAX 4096
/* What its callers (a task's inputs, worker/runtime.c; the trainer's consumer, api/consumer)
 * put in one such stream: partitions of at most SB_DATA_FETCH_MANY_PART bytes each, at most
 * SB_DATA_FETCH_MANY_BYTES together (all held until the last has come); larger ones come
 * alone through sb_data_fetch. */
#define SB_DATA_FETCH_MANY_PART ((uint64_t)1 << 20)
#define SB_DATA_FETCH_MANY_BYTES ((uint64_t)16 << 20)

int sb_data_fetch_many(sb_rpc_channel *ch, const char *const *ids, const size_t *expected_lens,
                       size_t n, size_t max_len, int timeout_ms, const sb_data_fetch_opts *opts,
                       void **blobs, size_t *lens, size_t *failed, sb_data_fetch_info *info,
                       sb_err *err);

/* The same from a "host:port" address (a channel made for this call, with opts->rpc). */
int sb_data_fetch_many_addr(const char *address, const char *const *ids,
                            const size_t *expected_lens, size_t n, size_t max_len, int timeout_ms,
                            const sb_data_fetch_opts *opts, void **blobs, size_t *lens,
                            size_t *failed, sb_data_fetch_info *info, sb_err *err);

/* ---------------------------------------------------------------------------- reusable */

typedef struct sb_data_fetcher sb_data_fetcher;

sb_data_fetcher *sb_data_fetcher_new(const sb_data_fetch_opts *opts, sb_err *err);
void sb_data_fetcher_free(sb_data_fetcher *f);

/* Like sb_data_fetch(); the blob stays in the fetcher (view it or take it). */
int sb_data_fetcher_run(sb_data_fetcher *f, sb_rpc_channel *ch, const char *partition_id,
                        size_t expected_len, size_t max_len, int timeout_ms, sb_err *err);
/* The blob of the last successful run (NULL otherwise); valid until the next run or free. */
const void *sb_data_fetcher_view(const sb_data_fetcher *f, size_t *len);
/* Hands the blob of the last successful run to the caller (sb_part_free); NULL if none. */
void *sb_data_fetcher_take(sb_data_fetcher *f, size_t *len);
/* What the last run did. */
const sb_data_fetch_info *sb_data_fetcher_info(const sb_data_fetcher *f);

/* ---------------------------------------------------------------------------- receiving */

/* The receiving half of a fetch: feed it Data.Fetch Chunk messages (as lib/rpc pieces) in
 * stream order; it checks and assembles them (see "Checks" above, but not sb_batch_open). */
typedef struct sb_data_recv sb_data_recv;

sb_data_recv *sb_data_recv_new(sb_err *err);
void sb_data_recv_free(sb_data_recv *r);
/* Starts on a new blob (keeps the destination buffer if it was not taken). id names the
 * partition in messages (copied, may be NULL); chunk_grid is the chunk size asked for (0 = 1
 * MiB), used to number chunks in messages. */
void sb_data_recv_reset(sb_data_recv *r, const char *id, size_t expected_len, size_t max_len,
                        size_t chunk_grid);
/* Adds one Chunk message. 0, or SB_DATA_ECORRUPT / SB_DATA_ETOOBIG with a message; after an
 * error the bytes received so far stay valid (resume from sb_data_recv_next_offset()). */
int sb_data_recv_feed(sb_data_recv *r, const sb_rpc_piece *pieces, size_t n, sb_err *err);
uint64_t sb_data_recv_next_offset(const sb_data_recv *r);
uint64_t sb_data_recv_total(const sb_data_recv *r); /* 0 while unknown */
bool sb_data_recv_done(const sb_data_recv *r);
/* The completed blob (owned by the receiver until the next reset/free), NULL if incomplete. */
const void *sb_data_recv_view(const sb_data_recv *r, size_t *len);
/* Hands the completed blob over (sb_part_free), NULL if incomplete. */
void *sb_data_recv_take(sb_data_recv *r, size_t *len);

#endif
