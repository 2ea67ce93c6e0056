/* rpc.h — gRPC servers and clients for streambatch, over gRPC core's C API (Debian's 1.51).
 *
 * lib/rpc is the only code that includes grpc headers; callers see the plain C types below and
 * exchange messages as bytes (protobuf-encoded by lib/rpc/proto.h helpers or by protobuf-c).
 * gRPC is initialised on the first server/channel created and shut down with the last one freed;
 * its own log lines go through lib/core/log.h (component=grpc).
 *
 * SERVER. sb_rpc_server_new() + sb_rpc_server_add_unary()/add_stream() (handlers by full method
 * path, e.g. "/streambatch.v1.Control/RegisterWorker") + sb_rpc_server_listen() + start(). N
 * threads, each with its own completion queue, run every handler and callback. Unknown methods are
 * answered UNIMPLEMENTED at once. A handler gets a call handle and the request bytes (valid only
 * during the handler; copy what you keep). It must end the call exactly once, from any thread, now
 * or later:
 *   - unary:  sb_rpc_call_reply(call, bytes) or sb_rpc_call_finish(call, code, message);
 *   - stream: any number of sb_rpc_stream_write*(), then sb_rpc_call_finish(call, SB_RPC_OK, ...).
 * Ending the call releases the handle (it must not be used afterwards, by any thread: end it
 * only once no other thread can still be using it). Until then the handle stays valid even if
 * the peer went away: writes then fail and sb_rpc_call_is_cancelled() says so.
 * Handlers and callbacks run on server threads and must not block (no blocking write there:
 * it fails instead of deadlocking); long work goes to the caller's own threads or to the
 * ready-callback style below. Deadlines set by clients are enforced: the call is cancelled when
 * its deadline passes (the cancel callback fires; writes fail; a late reply is dropped).
 *
 * STREAM FLOW CONTROL. At most one message is in flight per call: sb_rpc_stream_write*() waits
 * (on non-server threads) until the previous message has been accepted by HTTP/2 flow control,
 * starts sending the new one and returns. Two styles: a producer thread that calls the blocking
 * writes, or sb_rpc_stream_set_ready_cb(): the callback runs on the server thread once after the
 * handler returns and again each time the previous message has been sent, and writes the next one
 * (which then never blocks).
 *
 * ZERO-COPY. sb_rpc_stream_write_zc() sends header bytes (copied), a payload that is NOT copied
 * (pointer + length, owned by the caller and pinned until `unpin(unpin_ud)` is called — exactly
 * once, possibly on a gRPC-internal thread, possibly before the write returns when it fails), and
 * trailer bytes (copied); the concatenation is one message on the wire. chunk.h builds the
 * header/trailer for Data.Fetch `Chunk`s; sb_rpc_stream_write_chunk() does both.
 *
 * CLIENT. sb_rpc_channel_new(target) (thread-safe, one HTTP/2 connection, reconnects by itself);
 * sb_rpc_unary() (blocking, under a deadline, response malloc'ed for the caller);
 * sb_rpc_stream_open() + sb_rpc_reader_next() + sb_rpc_reader_close() for server streams: the
 * reader asks gRPC for the next message only inside next(), so the producer is paced by the
 * consumer. Each message is returned as a list of pieces pointing into gRPC's receive buffers
 * (valid until the next next()/close), never flattened; chunk.h parses a `Chunk` from them.
 * SB_RPC_WAIT_FOR_READY makes a call wait (within its deadline) for a server that is not up yet
 * instead of failing UNAVAILABLE; sb_rpc_channel_wait_ready() waits for the connection itself.
 *
 * SERVER LIMITS (against hostile peers; tests/integration/test_hostile.c measures them). gRPC
 * checks the receive limit only once a whole message has arrived and opens its flow-control
 * window for all of it, so each server has a gRPC memory quota of its own (its connections
 * only; clients are not limited) of max_message_bytes + 16 MiB: once its connections hold
 * that much, gRPC resets the streams holding the buffers (RESOURCE_EXHAUSTED), however many
 * peers send oversized messages. gRPC reclaims asynchronously, so a fast sender overshoots it
 * (measured: peaks of +20..+96 MiB on loopback, against +256..+370 MiB for 4 x 100 MB without
 * the quota). Idle connections are closed by gRPC itself: one that never sends the HTTP/2
 * preface after 30 s (measured with Debian's 1.51), one that answers no keepalive pings after
 * keepalive_ms + keepalive_timeout_ms.
 *
 * BOTH ENDS use the same sb_rpc_opts: max message size (send and receive), keepalive (the server
 * accepts client pings at the configured rate, also without calls), optional TLS/mTLS from PEM
 * files. Functions returning int give 0 (or a port) on success and -1 with `err` set on failure;
 * client calls return an sb_rpc_code (SB_RPC_OK == 0), `err` holding the status message.
 */
#ifndef SB_RPC_RPC_H
#define SB_RPC_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "rpc/auth.h"

/* gRPC status codes (same numbers as on the wire). */
typedef enum sb_rpc_code {
    SB_RPC_OK = 0,
    SB_RPC_CANCELLED = 1,
    SB_RPC_UNKNOWN = 2,
    SB_RPC_INVALID_ARGUMENT = 3,
    SB_RPC_DEADLINE_EXCEEDED = 4,
    SB_RPC_NOT_FOUND = 5,
    SB_RPC_ALREADY_EXISTS = 6,
    SB_RPC_PERMISSION_DENIED = 7,
    SB_RPC_RESOURCE_EXHAUSTED = 8,
    SB_RPC_FAILED_PRECONDITION = 9,
    SB_RPC_ABORTED = 10,
    SB_RPC_OUT_OF_RANGE = 11,
    SB_RPC_UNIMPLEMENTED = 12,
    SB_RPC_INTERNAL = 13,
    SB_RPC_UNAVAILABLE = 14,
    SB_RPC_DATA_LOSS = 15,
    SB_RPC_UNAUTHENTICATED = 16
} sb_rpc_code;

/* "OK", "INVALID_ARGUMENT", ... (static string; "UNKNOWN_CODE" for out-of-range values). */
const char *sb_rpc_code_name(int code);

/* A read-only view of part of a message. */
typedef struct sb_rpc_piece {
    const uint8_t *ptr;
    size_t len;
} sb_rpc_piece;

#define SB_RPC_DEFAULT_MAX_MESSAGE (16u * 1024u * 1024u + 64u * 1024u)
/* The Control service's replies (max_send_bytes on the controller, max_receive_bytes on the
 * workers' control channel): a COMMIT lists every sink part, ~22 bytes each, so 16 MiB held
 * ~770,000 parts and a larger pipeline's COMMIT was never delivered; 1 GiB holds ~48 million. */
#define SB_RPC_CONTROL_MAX_REPLY (1024u * 1024u * 1024u)
#define SB_RPC_DEFAULT_KEEPALIVE_MS 20000
#define SB_RPC_DEFAULT_STREAM_STALL_MS 30000
#define SB_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS 10000

/* Options shared by servers and channels; a zeroed struct (or NULL) means the defaults and no
 * TLS. Strings are only read during the *_new() call. */
typedef struct sb_rpc_opts {
    size_t max_message_bytes;     /* send and receive limit; 0 = SB_RPC_DEFAULT_MAX_MESSAGE */
    size_t max_send_bytes;        /* a larger send limit (0: max_message_bytes): a server whose
                                     replies grow with the job, e.g. the controller's COMMIT */
    size_t max_receive_bytes;     /* a larger receive limit (0: max_message_bytes), for a client
                                     of such a server only: a server's own receive limit (and its
                                     memory quota) stays max_message_bytes */
    int keepalive_ms;             /* ping period (server: min accepted client period is half of
                                     it; gRPC 1.51 clients ping at most once a second anyway);
                                     0 = SB_RPC_DEFAULT_KEEPALIVE_MS, < 0 = no keepalive pings */
    int keepalive_timeout_ms;     /* 0 = SB_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS */
    int threads;                  /* server: completion-queue threads (0 = 2) */
    int stream_stall_ms;          /* server: a call whose answer makes no flow-control progress
                                     for this long (a SEND or its status pending: the peer
                                     reads nothing) is cancelled and its payloads released;
                                     0 = $SB_RPC_STREAM_STALL_MS if set, else
                                     SB_RPC_DEFAULT_STREAM_STALL_MS; < 0 = never */
    int max_reconnect_backoff_ms; /* client: 0 = 2000 (initial backoff 100 ms) */
    /* TLS: set tls_cert_file + tls_key_file on a server (plus tls_ca_file and
     * tls_require_client_cert for mutual TLS); tls_ca_file on a client (plus cert + key for
     * mutual TLS). tls_server_name overrides the name the client checks the server cert for. */
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
    int tls_require_client_cert;
    const char *tls_server_name;
    /* Authentication (rpc/auth.h): a client sends auth->token on every call; a server answers
     * UNAUTHENTICATED, before any handler runs, every call whose token matches none of
     * auth->keys. NULL: neither (only this module's own tests: every streambatch process sets
     * it). Copied during the *_new() call. */
    const sb_rpc_creds *auth;
} sb_rpc_opts;

/* ---------------------------------------------------------------------------------- server */

typedef struct sb_rpc_server sb_rpc_server;
typedef struct sb_rpc_call sb_rpc_call;

/* Runs on a server thread. `req` (`len` bytes) is valid until the handler returns. */
typedef void (*sb_rpc_handler_fn)(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud);
/* Runs on a server thread (see STREAM FLOW CONTROL). */
typedef void (*sb_rpc_call_cb)(sb_rpc_call *call, void *ud);
/* Releases a zero-copy payload; called exactly once per write, on any thread. */
typedef void (*sb_rpc_unpin_fn)(void *ud);

sb_rpc_server *sb_rpc_server_new(const sb_rpc_opts *opts, sb_err *err);
/* Register before sb_rpc_server_start(). `method` is copied; `ud` is passed to the handler. */
int sb_rpc_server_add_unary(sb_rpc_server *srv, const char *method, sb_rpc_handler_fn fn, void *ud,
                            sb_err *err);
int sb_rpc_server_add_stream(sb_rpc_server *srv, const char *method, sb_rpc_handler_fn fn, void *ud,
                             sb_err *err);
/* Calls of `method` (registered) need a credential with one of `roles` (SB_RPC_ROLE_*); other
 * authenticated calls get PERMISSION_DENIED before the handler. Default: any key's role. */
int sb_rpc_server_require_role(sb_rpc_server *srv, const char *method, unsigned roles, sb_err *err);
/* Binds "host:port" (port 0 = pick a free one). Returns the bound port, or -1. */
int sb_rpc_server_listen(sb_rpc_server *srv, const char *addr, sb_err *err);
int sb_rpc_server_start(sb_rpc_server *srv, sb_err *err);
/* Port bound by the last sb_rpc_server_listen() (0 if none). */
int sb_rpc_server_port(const sb_rpc_server *srv);
/* Stops taking calls (from now on new ones are answered UNAVAILABLE), lets calls in flight
 * finish for up to grace_ms, then cancels the rest (their writes fail, cancel callbacks fire),
 * waits for gRPC to let go of every call and joins the threads. Returns the number of calls
 * that had to be cancelled (0 = all finished in time). Idempotent. Handles the application still
 * holds stay valid until it ends them. Never call it from a handler or callback (it joins the
 * server threads). */
int sb_rpc_server_shutdown(sb_rpc_server *srv, int grace_ms);
/* Like sb_rpc_server_shutdown(), and when every call finished within the grace, keeps the
 * connections up for linger_ms after the last stream ended before closing them (a stream ends
 * on the server once its last message is in the transport, possibly long before a slow reader
 * read it; closing the connection then could reset it and lose that tail).
 * sb_rpc_server_shutdown() lingers min(grace_ms, 2 s). linger_ms 0: the caller knows every
 * reader has read all it needs. */
int sb_rpc_server_shutdown_linger(sb_rpc_server *srv, int grace_ms, int linger_ms);
/* Shuts down (grace 0) if needed and frees the server. NULL is a no-op. */
void sb_rpc_server_free(sb_rpc_server *srv);

/* Unary: sends `len` bytes (copied) as the response with status OK and ends the call. */
int sb_rpc_call_reply(sb_rpc_call *call, const void *msg, size_t len, sb_err *err);
/* Ends the call with `code` and a printf-style status message (may be NULL). For streams,
 * SB_RPC_OK ends the stream normally; the status follows any message still being sent. */
void sb_rpc_call_finish(sb_rpc_call *call, sb_rpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Full method path of the call (valid while the handle is). */
const char *sb_rpc_call_method(const sb_rpc_call *call);
/* The roles of the call's credential (SB_RPC_ROLE_*; 0 on a server without keys). */
unsigned sb_rpc_call_roles(const sb_rpc_call *call);
/* Milliseconds left until the client's deadline (INT64_MAX when it set none; <= 0 when past). */
int64_t sb_rpc_call_deadline_left_ms(const sb_rpc_call *call);
/* 1 once the call was cancelled (client cancel, deadline, lost connection, server shutdown). */
int sb_rpc_call_is_cancelled(sb_rpc_call *call);
/* `fn(call, ud)` runs once, on a server thread, if the call is cancelled before the application
 * ended it (if it already was, fn runs at once, before this returns). The application must
 * still end the call (it may do so inside the callback). */
void sb_rpc_call_set_cancel_cb(sb_rpc_call *call, sb_rpc_call_cb fn, void *ud);
/* Streams: `fn(call, ud)` runs on a server thread whenever a write would not block (first right
 * after the handler returns, then after each message was sent or failed) until the call ends. */
void sb_rpc_stream_set_ready_cb(sb_rpc_call *call, sb_rpc_call_cb fn, void *ud);

/* Streams: sends `len` bytes (copied). Blocks while the previous message is in flight (fails
 * with an error instead when called on a server thread). -1 if the call is cancelled/ended. */
int sb_rpc_stream_write(sb_rpc_call *call, const void *msg, size_t len, sb_err *err);

typedef struct sb_rpc_zc_msg {
    const void *head; /* copied */
    size_t head_len;
    const void *payload; /* not copied: pinned until unpin(unpin_ud) */
    size_t payload_len;
    const void *tail; /* copied */
    size_t tail_len;
    sb_rpc_unpin_fn unpin; /* may be NULL when the payload outlives the call */
    void *unpin_ud;
} sb_rpc_zc_msg;

/* Streams: zero-copy write (see ZERO-COPY). Same blocking rules as sb_rpc_stream_write(). */
int sb_rpc_stream_write_zc(sb_rpc_call *call, const sb_rpc_zc_msg *msg, sb_err *err);

/* Streams: one Data.Fetch `Chunk{offset, data, crc32c, total_length}` with `data` zero-copy. */
int sb_rpc_stream_write_chunk(sb_rpc_call *call, uint64_t offset, const void *data, size_t len,
                              uint32_t crc32c, uint64_t total_length, sb_rpc_unpin_fn unpin,
                              void *unpin_ud, sb_err *err);

/* ---------------------------------------------------------------------------------- client */

typedef struct sb_rpc_channel sb_rpc_channel;
typedef struct sb_rpc_reader sb_rpc_reader;

#define SB_RPC_WAIT_FOR_READY 0x1u /* wait for the server (within the deadline) */

/* `target` is "host:port" (or any gRPC target URI). Connects lazily. */
sb_rpc_channel *sb_rpc_channel_new(const char *target, const sb_rpc_opts *opts, sb_err *err);
/* Frees the channel; calls and readers made on it must be finished first. NULL is a no-op. */
void sb_rpc_channel_free(sb_rpc_channel *ch);
/* Connects and waits until the channel is READY or timeout_ms passes (-1 then). */
int sb_rpc_channel_wait_ready(sb_rpc_channel *ch, int timeout_ms, sb_err *err);

/* 1 if the channel's connection is up right now (no connection attempt is made). */
int sb_rpc_channel_is_ready(sb_rpc_channel *ch);

/* Blocking unary call with a deadline of timeout_ms (<= 0: none). On SB_RPC_OK, *resp is a
 * malloc'ed copy of the response (caller frees; NULL when it is empty) and *resp_len its size.
 * Otherwise returns the status code, err holds "METHOD: CODE: message" and *resp is NULL. */
sb_rpc_code sb_rpc_unary(sb_rpc_channel *ch, const char *method, const void *req, size_t req_len,
                         int timeout_ms, unsigned flags, uint8_t **resp, size_t *resp_len,
                         sb_err *err);

/* Starts a server-streaming call (the request is sent; no message is asked for yet). The
 * deadline (timeout_ms, <= 0: none) covers the whole stream. NULL on failure. */
sb_rpc_reader *sb_rpc_stream_open(sb_rpc_channel *ch, const char *method, const void *req,
                                  size_t req_len, int timeout_ms, unsigned flags, sb_err *err);
/* Asks for the next message and waits for it. Returns 1 with *pieces and *npieces (total length in
 * *len) describing it — valid until the next call on the reader; 0 at the end of a stream that
 * finished OK; -1 when the stream failed (sb_rpc_reader_code() says why, err has the message). */
int sb_rpc_reader_next(sb_rpc_reader *r, const sb_rpc_piece **pieces, size_t *npieces, size_t *len,
                       sb_err *err);
/* Status of the stream once next() returned 0 or -1 (SB_RPC_OK before that). */
sb_rpc_code sb_rpc_reader_code(const sb_rpc_reader *r);
/* Cancels the stream if it is still running and frees everything. NULL is a no-op. */
void sb_rpc_reader_close(sb_rpc_reader *r);

/* Process-wide malloc tuning for data-heavy processes (workers): keeps up to keep_bytes (0 =
 * 64 MiB) of freed heap memory instead of returning it to the kernel after every gRPC read,
 * and serves requests below 32 MiB from the heap. Without it nearly every received page is a
 * fresh page fault (glibc defaults), which costs ~40% of the CPU of a loopback transfer. Call
 * once at startup, before threads start. 0, or -1 if the allocator refused a setting (ASan's
 * does). */
int sb_rpc_tune_malloc(size_t keep_bytes);

/* Copies `n` pieces into dst (which holds at least their total length). Returns bytes copied. */
size_t sb_rpc_pieces_copy(const sb_rpc_piece *pieces, size_t n, void *dst);

#endif
