/* rpc_common.c — gRPC lifetime, logging, channel args, credentials and small helpers shared by
 * the server and the client side of lib/rpc. */
#include "rpc/rpc_internal.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "core/log.h"

static const char *const code_names[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

const char *sb_rpc_code_name(int code)
{
    if (code < 0 || code >= (int)(sizeof code_names / sizeof code_names[0]))
        return "UNKNOWN_CODE";
    return code_names[code];
}

/* gRPC's own log lines, as structured lines with component=grpc. Its INFO level is chatty
 * (every reconnect attempt), so it maps to debug; its errors to warn (most are transient). */
static void grpc_log_sink(gpr_log_func_args *a)
{
    sb_log_level lvl = a->severity == GPR_LOG_SEVERITY_ERROR ? SB_LOG_WARN : SB_LOG_DEBUG;
    if (!sb_log_enabled(lvl))
        return;
    char where[256];
    snprintf(where, sizeof where, "%s:%d", a->file ? a->file : "?", a->line);
    sb_log(lvl, a->message ? a->message : "", "component", "grpc", "at", where, (char *)NULL);
}

static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_setup(void)
{
    gpr_set_log_function(grpc_log_sink);
    gpr_set_log_verbosity(sb_log_enabled(SB_LOG_DEBUG) ? GPR_LOG_SEVERITY_DEBUG
                                                       : GPR_LOG_SEVERITY_ERROR);
}

void sb_rpc__acquire(void)
{
    pthread_once(&log_once, log_setup);
    grpc_init();
}

void sb_rpc__release(void)
{
    grpc_shutdown();
}

static void add_int(sb_rpc_args *a, const char *key, int v)
{
    size_t i = a->args.num_args++;
    a->arg[i].type = GRPC_ARG_INTEGER;
    a->arg[i].key = (char *)key;
    a->arg[i].value.integer = v;
}

static void add_str(sb_rpc_args *a, const char *key, const char *v)
{
    size_t i = a->args.num_args++;
    a->arg[i].type = GRPC_ARG_STRING;
    a->arg[i].key = (char *)key;
    a->arg[i].value.string = (char *)v;
}

static void common_args(sb_rpc_args *a, const sb_rpc_opts *o, int server, int *ka, int *ka_to)
{
    memset(a, 0, sizeof *a);
    a->args.args = a->arg;
    size_t max = o && o->max_message_bytes ? o->max_message_bytes : SB_RPC_DEFAULT_MAX_MESSAGE;
    if (max > INT_MAX)
        max = INT_MAX;
    a->max_message = max;
    size_t send = o && o->max_send_bytes > max ? o->max_send_bytes : max;
    /* a server's receive limit is never raised: it is what hostile peers can send */
    size_t recv = !server && o && o->max_receive_bytes > max ? o->max_receive_bytes : max;
    add_int(a, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, recv > INT_MAX ? INT_MAX : (int)recv);
    add_int(a, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, send > INT_MAX ? INT_MAX : (int)send);
    /* Bigger HTTP/2 frames: fewer frame headers and iovecs per 1 MiB chunk. */
    add_int(a, GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1024 * 1024);
    *ka = o && o->keepalive_ms ? o->keepalive_ms : SB_RPC_DEFAULT_KEEPALIVE_MS;
    *ka_to = o && o->keepalive_timeout_ms ? o->keepalive_timeout_ms
                                          : SB_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS;
}

void sb_rpc__server_args(sb_rpc_args *a, const sb_rpc_opts *o)
{
    int ka, ka_to;
    common_args(a, o, 1, &ka, &ka_to);
    /* No SO_REUSEPORT: a second server on a taken port must fail to listen instead of silently
     * sharing (and load-balancing) the port with the first one. */
    add_int(a, GRPC_ARG_ALLOW_REUSEPORT, 0);
    if (ka > 0) {
        /* The server pings idle clients too (to notice dead peers), and accepts client pings
         * every ka/2 ms even without calls: a client using the same opts never gets a GOAWAY
         * "too_many_pings". */
        add_int(a, GRPC_ARG_KEEPALIVE_TIME_MS, ka);
        add_int(a, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ka_to);
        add_int(a, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
        add_int(a, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, ka / 2 > 0 ? ka / 2 : 1);
        add_int(a, GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    }
}

size_t sb_rpc__server_quota(size_t max_message)
{
    /* one request of the largest size, plus room for the connections themselves */
    return max_message + (size_t)16 * 1024 * 1024;
}

void sb_rpc__client_args(sb_rpc_args *a, const sb_rpc_opts *o)
{
    int ka, ka_to;
    common_args(a, o, 0, &ka, &ka_to);
    if (ka > 0) {
        add_int(a, GRPC_ARG_KEEPALIVE_TIME_MS, ka);
        add_int(a, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ka_to);
        add_int(a, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
        add_int(a, GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    }
    int backoff = o && o->max_reconnect_backoff_ms > 0 ? o->max_reconnect_backoff_ms : 2000;
    /* Retry connecting quickly (workers often start before the controller). Not
     * GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC uses it as the connection-attempt timeout (20 s by
     * default), and a short one fails TLS handshakes on a loaded machine. */
    add_int(a, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, backoff < 100 ? backoff : 100);
    add_int(a, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff);
    /* No transparent retries: they buffer sent messages and hide failures from the caller. */
    add_int(a, GRPC_ARG_ENABLE_RETRIES, 0);
    /* One connection per sb_rpc_channel (not shared through the global subchannel pool), so
     * freeing a channel really closes its connection. */
    add_int(a, GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (o && o->tls_server_name)
        add_str(a, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, o->tls_server_name);
}

/* Reads a whole PEM file as a NUL-terminated string (caller frees). */
static char *read_pem(const char *path, const char *what, sb_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        sb_err_set(err, "rpc tls: cannot open %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 8192;
            if (cap > (1u << 24)) {
                sb_err_set(err, "rpc tls: %s %s is too large", what, path);
                goto fail;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                sb_err_set(err, "rpc tls: out of memory reading %s", path);
                goto fail;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        sb_err_set(err, "rpc tls: cannot read %s %s", what, path);
        goto fail;
    }
    fclose(f);
    buf[len] = '\0';
    if (!strstr(buf, "-----BEGIN ")) {
        sb_err_set(err, "rpc tls: %s %s is not PEM", what, path);
        free(buf);
        return NULL;
    }
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

grpc_server_credentials *sb_rpc__server_creds(const sb_rpc_opts *o, sb_err *err)
{
    if (!o || (!o->tls_cert_file && !o->tls_key_file && !o->tls_ca_file))
        return grpc_insecure_server_credentials_create();
    grpc_server_credentials *creds = NULL;
    char *ca = NULL, *cert = NULL, *key = NULL;
    if (!o->tls_cert_file || !o->tls_key_file) {
        sb_err_set(err, "rpc tls: a server needs both tls_cert_file and tls_key_file");
        return NULL;
    }
    if (o->tls_require_client_cert && !o->tls_ca_file) {
        sb_err_set(err, "rpc tls: tls_require_client_cert needs tls_ca_file (client CA)");
        return NULL;
    }
    if (!(cert = read_pem(o->tls_cert_file, "certificate", err)) ||
        !(key = read_pem(o->tls_key_file, "key", err)))
        goto out;
    if (o->tls_ca_file && !(ca = read_pem(o->tls_ca_file, "CA", err)))
        goto out;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    grpc_ssl_client_certificate_request_type req =
        o->tls_require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
        : ca                       ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    creds = grpc_ssl_server_credentials_create_ex(ca, &pair, 1, req, NULL);
    if (!creds)
        sb_err_set(err, "rpc tls: gRPC rejected the server certificate/key");
out:
    free(ca);
    free(cert);
    free(key);
    return creds;
}

grpc_channel_credentials *sb_rpc__client_creds(const sb_rpc_opts *o, sb_err *err)
{
    if (!o || (!o->tls_cert_file && !o->tls_key_file && !o->tls_ca_file))
        return grpc_insecure_credentials_create();
    grpc_channel_credentials *creds = NULL;
    char *ca = NULL, *cert = NULL, *key = NULL;
    if (!o->tls_ca_file) {
        sb_err_set(err, "rpc tls: a client needs tls_ca_file to verify the server");
        return NULL;
    }
    if (!o->tls_cert_file != !o->tls_key_file) {
        sb_err_set(err, "rpc tls: set both tls_cert_file and tls_key_file, or neither");
        return NULL;
    }
    if (!(ca = read_pem(o->tls_ca_file, "CA", err)))
        goto out;
    if (o->tls_cert_file && (!(cert = read_pem(o->tls_cert_file, "certificate", err)) ||
                             !(key = read_pem(o->tls_key_file, "key", err))))
        goto out;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    creds = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
    if (!creds)
        sb_err_set(err, "rpc tls: gRPC rejected the client credentials");
out:
    free(ca);
    free(cert);
    free(key);
    return creds;
}

gpr_timespec sb_rpc__deadline(int timeout_ms)
{
    if (timeout_ms <= 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

int64_t sb_rpc__ms_until(gpr_timespec t)
{
    if (gpr_time_cmp(t, gpr_inf_future(t.clock_type)) == 0)
        return INT64_MAX;
    gpr_timespec now = gpr_now(t.clock_type);
    gpr_timespec d = gpr_time_sub(t, now);
    return d.tv_sec * 1000 + d.tv_nsec / 1000000;
}

int sb_rpc__bb_flatten(grpc_byte_buffer *bb, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (!bb)
        return 0;
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb))
        return -1;
    size_t total = grpc_byte_buffer_length(bb);
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf) {
        grpc_byte_buffer_reader_destroy(&rd);
        return -1;
    }
    size_t at = 0;
    grpc_slice *s;
    while (grpc_byte_buffer_reader_peek(&rd, &s)) {
        size_t n = GRPC_SLICE_LENGTH(*s);
        if (n > total - at)
            n = total - at;
        memcpy(buf + at, GRPC_SLICE_START_PTR(*s), n);
        at += n;
    }
    grpc_byte_buffer_reader_destroy(&rd);
    *out = buf;
    *len = at;
    return 0;
}

void sb_rpc__slice_str(grpc_slice s, char *buf, size_t cap)
{
    size_t n = GRPC_SLICE_LENGTH(s);
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, GRPC_SLICE_START_PTR(s), n);
    buf[n] = '\0';
}

int sb_rpc_tune_malloc(size_t keep_bytes)
{
    if (keep_bytes == 0)
        keep_bytes = 64u * 1024u * 1024u;
    if (keep_bytes > INT_MAX)
        keep_bytes = INT_MAX;
    /* gRPC allocates and frees its receive buffers for every read; with glibc's defaults (trim
     * at 128 KiB of free top memory) each buffer goes back to the kernel and the next read
     * faults fresh zeroed pages in: ~1 page fault per 4 KiB received. Keeping freed memory and
     * serving MiB-sized requests from the heap cuts that by ~5x (see test_rpc_bench.c). */
    int ok = mallopt(M_TRIM_THRESHOLD, (int)keep_bytes);
    ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) && ok;
    return ok ? 0 : -1;
}

size_t sb_rpc_pieces_copy(const sb_rpc_piece *pieces, size_t n, void *dst)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (pieces[i].len)
            memcpy((uint8_t *)dst + at, pieces[i].ptr, pieces[i].len);
        at += pieces[i].len;
    }
    return at;
}
