/* rpc_internal.h — what server.c and client.c share inside lib/rpc (not for other modules).
 *
 * Channel arguments and credentials are built from sb_rpc_opts here so that both ends apply the
 * same message limits and compatible keepalive settings. Everything returned is owned by the
 * caller as noted on each function.
 */
#ifndef SB_RPC_INTERNAL_H
#define SB_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "rpc/rpc.h"

#define SB_RPC_MAX_ARGS 16

/* Channel args resolved from options; the array lives inside the struct (no heap). */
typedef struct sb_rpc_args {
    grpc_arg arg[SB_RPC_MAX_ARGS];
    grpc_channel_args args;
    size_t max_message;
} sb_rpc_args;

/* grpc_init() plus the one-time log hookup; pair with sb_rpc__release(). */
void sb_rpc__acquire(void);
void sb_rpc__release(void);

void sb_rpc__server_args(sb_rpc_args *a, const sb_rpc_opts *o);
/* Bytes of gRPC buffers one server's connections may hold, for a receive limit of max_message. */
size_t sb_rpc__server_quota(size_t max_message);
void sb_rpc__client_args(sb_rpc_args *a, const sb_rpc_opts *o);

/* Credentials from the TLS fields of o (insecure when none is set); caller releases. */
grpc_server_credentials *sb_rpc__server_creds(const sb_rpc_opts *o, sb_err *err);
grpc_channel_credentials *sb_rpc__client_creds(const sb_rpc_opts *o, sb_err *err);

/* Absolute deadline timeout_ms from now (infinite when timeout_ms <= 0). */
gpr_timespec sb_rpc__deadline(int timeout_ms);
/* Milliseconds until t (INT64_MAX for an infinite deadline). */
int64_t sb_rpc__ms_until(gpr_timespec t);

/* Copies a byte buffer into one malloc'ed block (NULL + *len 0 when empty). -1 on failure. */
int sb_rpc__bb_flatten(grpc_byte_buffer *bb, uint8_t **out, size_t *len);

/* Copies a slice into buf as a C string (truncated). */
void sb_rpc__slice_str(grpc_slice s, char *buf, size_t cap);

#endif
