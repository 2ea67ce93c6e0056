/* The places where a message leaves the program, redacted (core/redact.h): sb_log lines (both
 * formats), a split's label (lib/io/split.c), a Pipeline's status before it is written and an
 * Event's message (controller/operator). Each is fed a presigned URL with userinfo and must keep
 * host and path while losing every secret. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/operator/operator_events.h"
#include "controller/operator/operator_status.h"
#include "core/log.h"
#include "core/redact.h"
#include "io/split.h"

#define PRESIGNED                                                                                  \
    "http://SECRETUSER:SECRETPASS@h.example:81/obj.jsonl?X-Amz-Credential=SECRETCRED"              \
    "&X-Amz-Signature=SECRETSIG&X-Amz-Security-Token=SECRETTOK"

static void expect_clean(const char *text, const char *where)
{
    cr_expect_null(strstr(text, "SECRET"), "%s: %s", where, text);
}

/* What sb_log writes to stderr while fn runs (fd 2 sent to a file for the while). */
static char *capture_log(void (*fn)(void))
{
    char path[] = "/tmp/sb-redact-log-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    int saved = dup(2);
    dup2(fd, 2);
    fn();
    dup2(saved, 2);
    close(saved);
    static char buf[8192];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void log_some(void)
{
    sb_log(SB_LOG_ERROR, "GET " PRESIGNED ": 403", "uri", PRESIGNED, "hdr",
           "Authorization: AWS4-HMAC-SHA256 Credential=SECRETKEY/x, Signature=SECRETS", NULL);
}

Test(redact_outputs, log_lines_in_both_formats)
{
    sb_log_set_level(SB_LOG_INFO);
    setenv("SB_LOG_FORMAT", "logfmt", 1);
    const char *text = capture_log(log_some);
    expect_clean(text, "logfmt");
    cr_expect(strstr(text, "uri=\"http://***@h.example:81/obj.jsonl?X-Amz-Credential=REDACTED&"
                           "X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED") != NULL,
              "%s", text);
    cr_expect(strstr(text, "hdr=\"Authorization: REDACTED\"") != NULL, "%s", text);
    cr_expect(strstr(text, "msg=\"GET http://***@h.example:81/obj.jsonl?") != NULL, "%s", text);
}

Test(redact_outputs, log_lines_as_json)
{
    setenv("SB_LOG_FORMAT", "json", 1);
    const char *text = capture_log(log_some);
    expect_clean(text, "json");
    cr_expect(strstr(text, "\"uri\":\"http://***@h.example:81/obj.jsonl?") != NULL, "%s", text);
}

Test(redact_outputs, split_labels_name_host_and_path_only)
{
    char buf[200];
    sb_io_split_describe("0\t100\t100\t" PRESIGNED, buf, sizeof buf);
    cr_assert_str_eq(buf, "http://***@h.example:81/obj.jsonl?...");
    sb_io_split_describe("0\t50\t100\t" PRESIGNED, buf, sizeof buf);
    cr_assert_str_eq(buf, "http://***@h.example:81/obj.jsonl?... bytes 0-50");
    sb_io_split_describe("not a split " PRESIGNED, buf, sizeof buf);
    expect_clean(buf, "not a split");
    cr_expect(strstr(buf, "not a split http://***@h.example:81/obj.jsonl?") == buf, "%s", buf);
}

/* The status the operator writes: status.message, conditions and erroredPartitions, at any
 * depth; what has no secret stays as it was. */
Test(redact_outputs, status_tree)
{
    sb_storage_errored e[1] = {
        {"read", "ns/p/s0-t0", "split 0 (" PRESIGNED ")", "read split: \"" PRESIGNED "\": 403"}};
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "phase", "Failed");
    cJSON_AddStringToObject(st, "message", "stage read failed: " PRESIGNED);
    cr_assert_geq(sb_operator_condition_set(st, "Failed", 1, "TaskFailed", "GET " PRESIGNED, 3,
                                            "2026-01-01T00:00:00Z"),
                  0);
    cr_assert_eq(sb_operator_status_errored(st, e, 1), 0);
    char *before = cJSON_PrintUnformatted(st);
    cr_assert(strstr(before, "SECRETSIG") != NULL, "the test feeds secrets in");
    int changed = sb_operator_status_redact(st);
    char *after = cJSON_PrintUnformatted(st);
    expect_clean(after, "status");
    cr_expect_geq(changed, 4, "message, condition message, failingCondition, split, error");
    cr_expect(strstr(after, "\"phase\":\"Failed\"") != NULL, "%s", after);
    cr_expect(strstr(after, "\"lastTransitionTime\":\"2026-01-01T00:00:00Z\"") != NULL, "%s",
              after);
    cr_expect(strstr(after, "h.example:81/obj.jsonl") != NULL, "%s", after);
    cr_expect_eq(sb_operator_status_redact(st), 0, "a redacted status stays as it is");
    free(before);
    free(after);
    cJSON_Delete(st);
}

Test(redact_outputs, event_message)
{
    sb_operator_event_ref ref = {"ns1", "p", "uid-1", "42"};
    char msg[1024];
    sb_operator_event_errored_message("read", "split 0 (" PRESIGNED ")",
                                      "read split: \"" PRESIGNED "\": HTTP 403", msg, sizeof msg);
    cJSON *ev = sb_operator_event_build(&ref, "Warning", "PartitionErrored", msg, "ctl-0",
                                        1714564800123456789ULL);
    cr_assert_not_null(ev);
    char *t = cJSON_PrintUnformatted(ev);
    expect_clean(t, "event");
    cr_expect(strstr(t, "http://***@h.example:81/obj.jsonl?X-Amz-Credential=REDACTED") != NULL,
              "%s", t);
    cr_expect(strstr(t, "HTTP 403") != NULL, "%s", t);
    free(t);
    cJSON_Delete(ev);
}
