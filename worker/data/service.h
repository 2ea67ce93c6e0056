/* service.h — the worker's Data service: answers Data.Fetch(FetchRequest{partition_id, offset})
 * with a stream of Chunks read from the worker's partition store (worker/store).
 *
 * What a fetch sends. The partition blob from `offset` to its end, cut on the chunk grid of
 * lib/partition/chunk.h (chunk i covers [i*c, (i+1)*c) with c = min(request.max_chunk_bytes,
 * config.chunk_bytes), the first chunk of a resumed stream runs from the offset to the next
 * boundary), each Chunk carrying its offset, its crc32c and the blob's total length. Errors:
 * a request that does not decode or names no well-formed partition id -> INVALID_ARGUMENT
 * (lib/rpc/proto.h); an id the store does not hold -> NOT_FOUND naming the id; an offset past
 * the end -> OUT_OF_RANGE; a spill file that fails its checks -> DATA_LOSS with the store's
 * message; an offset equal to the length gives an empty stream that ends OK.
 *
 * Many partitions in one stream (FetchRequest.next_partition_ids, at most 4,096; the fetcher's
 * sb_data_fetch_many()): after partition_id, each listed partition is pinned in turn (an I/O
 * job, as the first) and sent whole, on its own chunk grid, as if it had its own stream; the
 * stream ends OK after the last. Each partition's pin is kept until the stream's last chunk is
 * released (its in-memory chunks may still be in flight), so one stream holds at most the pins
 * of what it was asked for. An id the store does not hold ends the stream with NOT_FOUND naming
 * it; an empty partition ends it with DATA_LOSS (its end could not be told from the next one's
 * start); a bad id in the list is INVALID_ARGUMENT before anything is sent.
 *
 * How it sends (no payload copies). A fetch pins its partition in the store once. In-memory
 * partitions are sent straight from the store's buffer with lib/rpc's zero-copy write: each
 * chunk in flight holds a reference on the fetch, and the store ref is unpinned when the last
 * reference goes (the stream ended and gRPC released the last chunk). Spilled partitions are
 * read chunk by chunk with sb_store_read() into buffers of a small shared pool (allocated on
 * first use, reused, never freed before the server), up to two chunks ahead of the one being
 * sent; a buffer goes back to the pool when gRPC releases it (chunks of at most 64 KiB are sent
 * as a copy, so their buffer goes back at once). When every buffer is in use, fetches queue for the
 * next one released, in order.
 *
 * Threading, and why ready callbacks plus a small I/O pool. Sends are driven by lib/rpc's
 * ready callbacks on the gRPC server threads: a callback runs exactly when the previous chunk
 * has been accepted by flow control, so 1,000 concurrent fetches cost 1,000 small contexts and
 * no thread each, a slow reader slows only its own stream, and nothing ever blocks in a write.
 * What may block — sb_store_pin() (it waits while its partition is being spilled or loaded)
 * and spill reads (disk I/O) — runs on `io_threads` threads of our own, never on a gRPC thread.
 * A callback that finds nothing to send (the pin or the next read is not done yet) marks the
 * fetch stalled; the I/O thread that completes the work then sends that chunk itself (the call
 * is idle, so the write does not block) and the callbacks carry on from there. A sender-thread
 * pool was rejected: a blocked write (slow reader) would hold a whole thread per stream.
 * Fetch contexts are recycled through a free list and only freed with the server, so a callback
 * that races with the end of its call can always check, under the context's lock, that the
 * context still belongs to that call.
 *
 * Cancellation and shutdown. A call cancelled by the client, its deadline or
 * sb_rpc_server_shutdown() ends at once on our side: queued reads are dropped, pooled buffers go
 * back, and the store pin is released as soon as gRPC lets go of the chunks still in flight.
 * A reader that stops reading (no flow-control window) is cancelled by lib/rpc after its
 * stream_stall_ms (default 30 s: rpc.h), which makes gRPC let go of those chunks too.
 * To stop cleanly, call sb_data_server_drain() before sb_rpc_server_shutdown(): it refuses new
 * fetches (UNAVAILABLE, so fetchers retry elsewhere or give up), waits for the running ones to
 * end and lingers so that their readers can take the last chunks (a stream ends on the server
 * once its last chunk was accepted by flow control, possibly megabytes before the client read
 * it; lib/rpc's graceful shutdown drains and lingers the same way, with the connections still
 * up, before it closes them — tests/unit/test_data_rpc.c).
 *
 * Memory ownership. The store is borrowed and must outlive the data server. The data server
 * owns its fetch contexts, its I/O threads and the pooled buffers. sb_data_server_free() must
 * come after sb_rpc_server_shutdown() of every server it was registered on (no new calls may
 * arrive); it waits (bounded) until every fetch has released its pin and every pooled buffer
 * has come back, then frees everything. Errors follow lib/core/err.h.
 */
#ifndef SB_WORKER_DATA_SERVER_H
#define SB_WORKER_DATA_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "rpc/rpc.h"
#include "worker/store/store.h"

typedef struct sb_data_server sb_data_server;

typedef struct sb_data_server_config {
    sb_store *store;    /* required; borrowed */
    size_t chunk_bytes; /* largest chunk sent: 0 = SB_PART_CHUNK_MAX (1 MiB), at most that */
    int io_threads;     /* threads for pins and spill reads: 0 = 2 */
    int spill_buffers;  /* pooled chunk buffers for spilled partitions: 0 = 8 */
} sb_data_server_config;

typedef struct sb_data_server_stats {
    uint64_t fetches;      /* Data.Fetch calls accepted (decoded) */
    uint64_t ok;           /* streams that ended OK */
    uint64_t not_found;    /* NOT_FOUND answers */
    uint64_t refused;      /* OUT_OF_RANGE answers */
    uint64_t cancelled;    /* streams cancelled (client, deadline, shutdown) */
    uint64_t errors;       /* DATA_LOSS / INTERNAL answers */
    uint64_t chunks;       /* chunks handed to gRPC */
    uint64_t bytes;        /* payload bytes handed to gRPC */
    uint64_t spill_chunks; /* ... of which read from spill files */
    uint64_t buffer_waits; /* times a fetch queued for a pooled buffer */
    size_t active;         /* fetch contexts alive (streams, or their last chunks in flight) */
    size_t pinned;         /* store refs held */
    size_t buffers;        /* pooled buffers allocated */
    size_t buffers_in_use; /* ... not in the pool right now */
} sb_data_server_stats;

/* Creates the data server and starts its I/O threads. */
int sb_data_server_new(const sb_data_server_config *cfg, sb_data_server **out, sb_err *err);

/* Registers Data.Fetch on `rpc` (before sb_rpc_server_start()). */
int sb_data_server_register(sb_data_server *ds, sb_rpc_server *rpc, sb_err *err);

/* A snapshot of the counters. */
void sb_data_server_get_stats(sb_data_server *ds, sb_data_server_stats *out);

/* Waits up to timeout_ms until no fetch is alive and every pooled buffer is back. 0 when idle,
 * -1 with a message saying what is still held otherwise. */
int sb_data_server_wait_idle(sb_data_server *ds, int timeout_ms, sb_err *err);

/* Refuses new fetches from now on (UNAVAILABLE), waits up to grace_ms for running fetches to
 * end, then, if any fetch ended within the last linger_ms, waits linger_ms more (see above).
 * Returns the number of fetches still running (0 = drained). Call before
 * sb_rpc_server_shutdown(), which then cancels whatever is left. */
int sb_data_server_drain(sb_data_server *ds, int grace_ms, int linger_ms);

/* Frees the data server (see the ownership rules above). NULL is a no-op. If fetches are still
 * alive after 30 s (a bug: the rpc server was not shut down), it logs an error and leaks the
 * server rather than free memory gRPC may still use. */
void sb_data_server_free(sb_data_server *ds);

#endif
