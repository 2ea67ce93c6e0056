/* sb_rpc_probe — one call of the streambatch protocol, as a hostile or honest peer would make it,
 * for tests that reach servers this test process did not start (tests/k8s/operator-test.sh
 * against worker pods and Control services on the test cluster).
 *
 *   sb_rpc_probe ADDR METHOD [--token T] [--pipeline NS/NAME] [--to ADDR2] [--worker ID]
 *
 * METHOD: register | poll | complete | heartbeat | fetch | rebind. The request is well formed
 * (register: worker ID, pool cpu, a fresh session; fetch: partition s0-t0-p0; rebind: controller
 * ADDR2, epoch 2^64-1, pipeline NS/NAME), sent with "authorization: Bearer T" when --token is
 * given. Prints the status code's name (OK, UNAUTHENTICATED, ...) and, for rebind, "accepted" or
 * "refused: <why>"; exit 0 once an answer came, 2 on bad usage. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/auth.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"

static int usage(void)
{
    fprintf(stderr, "usage: sb_rpc_probe ADDR register|poll|complete|heartbeat|fetch|rebind "
                    "[--token T] [--pipeline NS/NAME] [--to ADDR] [--worker ID]\n");
    return 2;
}

static sb_rpc_code unary(sb_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                         ProtobufCMessage **resp, sb_err *err)
{
    return sb_rpc_call_msg(ch, method, req, 10000, SB_RPC_WAIT_FOR_READY, resp, err);
}

static sb_rpc_code fetch(sb_rpc_channel *ch, sb_err *err)
{
    Streambatch__V1__FetchRequest req = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    req.partition_id = "s0-t0-p0";
    uint8_t buf[256];
    size_t n = protobuf_c_message_pack(&req.base, buf);
    sb_rpc_reader *r =
        sb_rpc_stream_open(ch, SB_RPC_DATA_FETCH, buf, n, 10000, SB_RPC_WAIT_FOR_READY, err);
    if (r == NULL)
        return SB_RPC_INTERNAL;
    const sb_rpc_piece *p;
    size_t np, len;
    while (sb_rpc_reader_next(r, &p, &np, &len, err) > 0)
        ;
    sb_rpc_code c = sb_rpc_reader_code(r);
    sb_rpc_reader_close(r);
    return c;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"token", required_argument, 0, 't'},
                                         {"pipeline", required_argument, 0, 'p'},
                                         {"to", required_argument, 0, 'a'},
                                         {"worker", required_argument, 0, 'w'},
                                         {0, 0, 0, 0}};
    const char *token = NULL, *pipeline = "", *to = "127.0.0.1:9", *worker = "probe";
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 't')
            token = optarg;
        else if (c == 'p')
            pipeline = optarg;
        else if (c == 'a')
            to = optarg;
        else if (c == 'w')
            worker = optarg;
        else
            return usage();
    }
    if (argc - optind != 2)
        return usage();
    const char *addr = argv[optind], *what = argv[optind + 1];
    static sb_rpc_creds creds;
    sb_rpc_opts o = {.max_receive_bytes = SB_RPC_CONTROL_MAX_REPLY};
    if (token != NULL) {
        snprintf(creds.token, sizeof creds.token, "%s", token);
        o.auth = &creds;
    }
    sb_err err = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, &o, &err);
    if (ch == NULL) {
        fprintf(stderr, "sb_rpc_probe: %s\n", err.msg);
        return 1;
    }
    char session[SB_RPC_TOKEN_HEX + 1];
    if (sb_rpc_token_new(session, &err) != 0) {
        fprintf(stderr, "sb_rpc_probe: %s\n", err.msg);
        return 1;
    }
    ProtobufCMessage *resp = NULL;
    sb_rpc_code code;
    if (strcmp(what, "register") == 0) {
        Streambatch__V1__RegisterRequest m = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
        m.worker_id = (char *)worker;
        m.pool = "cpu";
        m.address = "127.0.0.1:9";
        m.slots = 1;
        m.session = session;
        code = unary(ch, SB_RPC_CONTROL_REGISTER, &m.base, &resp, &err);
    } else if (strcmp(what, "poll") == 0) {
        Streambatch__V1__PollTasksRequest m = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
        m.worker_id = (char *)worker;
        m.free_slots = 1;
        m.session = session;
        code = unary(ch, SB_RPC_CONTROL_POLL_TASKS, &m.base, &resp, &err);
    } else if (strcmp(what, "complete") == 0) {
        Streambatch__V1__CompleteTaskRequest m = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
        m.worker_id = (char *)worker;
        m.task_id = "probe/s0-t0";
        m.session = session;
        code = unary(ch, SB_RPC_CONTROL_COMPLETE_TASK, &m.base, &resp, &err);
    } else if (strcmp(what, "heartbeat") == 0) {
        Streambatch__V1__HeartbeatRequest m = STREAMBATCH__V1__HEARTBEAT_REQUEST__INIT;
        m.worker_id = (char *)worker;
        m.session = session;
        code = unary(ch, SB_RPC_CONTROL_HEARTBEAT, &m.base, &resp, &err);
    } else if (strcmp(what, "fetch") == 0) {
        code = fetch(ch, &err);
    } else if (strcmp(what, "rebind") == 0) {
        Streambatch__V1__RebindRequest m = STREAMBATCH__V1__REBIND_REQUEST__INIT;
        m.controller_address = (char *)to;
        m.epoch = UINT64_MAX;
        m.pipeline = (char *)pipeline;
        code = unary(ch, SB_RPC_WORKER_REBIND, &m.base, &resp, &err);
    } else {
        sb_rpc_channel_free(ch);
        return usage();
    }
    printf("%s", sb_rpc_code_name(code));
    if (code == SB_RPC_OK && strcmp(what, "rebind") == 0) {
        Streambatch__V1__RebindReply *r = (Streambatch__V1__RebindReply *)resp;
        printf(r->accepted ? " accepted" : " refused: %s", r->message ? r->message : "");
    }
    printf("\n");
    if (resp != NULL)
        sb_rpc_msg_free(resp);
    sb_rpc_channel_free(ch);
    return 0;
}
