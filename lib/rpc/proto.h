/* proto.h — the streambatch.v1 protocol (api/proto/streambatch.proto) on top of rpc.h: method
 * paths, partition-id strings, and checked decoding of every message.
 *
 * Messages are the protobuf-c structs generated into build/gen/streambatch.pb-c.h. Decoding is
 * unpack + validation (required ids present, partition ids well formed, enums known), so a
 * handler only ever sees a message it can trust; a server handler that uses
 * sb_rpc_call_decode() answers malformed/truncated requests with INVALID_ARGUMENT by itself.
 *
 * Ownership: a decoded message is owned by the caller and freed with sb_rpc_msg_free();
 * sb_rpc_msg_encode() returns a malloc'ed buffer the caller frees with free(). Messages passed
 * in are only read.
 */
#ifndef SB_RPC_PROTO_H
#define SB_RPC_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "partition/id.h"
#include "rpc/rpc.h"
#include "streambatch.pb-c.h"

#define SB_RPC_CONTROL_REGISTER "/streambatch.v1.Control/RegisterWorker"
#define SB_RPC_CONTROL_POLL_TASKS "/streambatch.v1.Control/PollTasks"
#define SB_RPC_CONTROL_COMPLETE_TASK "/streambatch.v1.Control/CompleteTask"
#define SB_RPC_CONTROL_HEARTBEAT "/streambatch.v1.Control/Heartbeat"
#define SB_RPC_CONTROL_STREAM_NEXT "/streambatch.v1.Control/StreamNext"
#define SB_RPC_DATA_FETCH "/streambatch.v1.Data/Fetch"
#define SB_RPC_WORKER_REBIND "/streambatch.v1.Worker/Rebind"

/* PollTasksRequest.completions: at most this many reports in one poll (decoding refuses more). */
#define SB_RPC_MAX_COMPLETIONS 1024

/* One row per RPC of the protocol. */
typedef struct sb_rpc_method_info {
    const char *path;
    int server_streaming;
    const ProtobufCMessageDescriptor *request;
    const ProtobufCMessageDescriptor *response;
} sb_rpc_method_info;

/* The table of all methods (*n set to its length). */
const sb_rpc_method_info *sb_rpc_methods(size_t *n);
/* The row for a method path, NULL if unknown. */
const sb_rpc_method_info *sb_rpc_method_find(const char *path);

/* Checks a message of any descriptor in streambatch.v1 (recursively). 0 or -1 with a message
 * naming the offending field. */
int sb_rpc_msg_validate(const ProtobufCMessage *m, sb_err *err);
/* Unpacks `len` bytes as message type `d` and validates it. NULL with a message on failure. */
ProtobufCMessage *sb_rpc_msg_decode(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
                                    size_t len, sb_err *err);
void sb_rpc_msg_free(ProtobufCMessage *m);
/* Packs a message into a malloc'ed buffer (*len set; an empty message gives a 1-byte buffer with
 * *len 0). NULL on allocation failure. */
uint8_t *sb_rpc_msg_encode(const ProtobufCMessage *m, size_t *len, sb_err *err);

/* Server side: decodes the request of `call` as message type `d`. On failure the call is ended
 * with INVALID_ARGUMENT (the handle is gone) and NULL is returned. */
ProtobufCMessage *sb_rpc_call_decode(sb_rpc_call *call, const ProtobufCMessageDescriptor *d,
                                     const uint8_t *req, size_t len);
/* Server side: packs and sends `m` as the unary reply (ends the call, like sb_rpc_call_reply). */
int sb_rpc_call_reply_msg(sb_rpc_call *call, const ProtobufCMessage *m, sb_err *err);

/* Client side: a unary call of the protocol with messages: encodes `req`, calls `method`, and
 * decodes + validates the reply as the method's response type into *resp (caller frees with
 * sb_rpc_msg_free). A reply that does not decode gives SB_RPC_INTERNAL. */
sb_rpc_code sb_rpc_call_msg(sb_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                            int timeout_ms, unsigned flags, ProtobufCMessage **resp, sb_err *err);

#endif
