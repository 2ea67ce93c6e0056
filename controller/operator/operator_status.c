/* operator_status.c — the pure parts of a Pipeline's status (see operator_status.h): conditions,
 * progress, partitions and stages from a controller snapshot, RFC 3339 times, which spec
 * changes a running Pipeline cannot take, and the redaction of secrets before a status is
 * written. Works on cJSON trees the caller owns; no I/O. */

#include "controller/operator/operator_status.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/sched/ranges.h"
#include "core/num.h"
#include "core/redact.h"

/* ---- times ---- */

void sb_operator_time_format(time_t t, char *buf, size_t len)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int sb_operator_time_parse(const char *s, time_t *out)
{
    if (s == NULL)
        return -1;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == NULL)
        return -1;
    if (*end == '.') {
        end++;
        if (!isdigit((unsigned char)*end))
            return -1;
        while (isdigit((unsigned char)*end))
            end++;
    }
    if (strcmp(end, "Z") != 0)
        return -1;
    *out = timegm(&tm);
    return 0;
}

/* ---- conditions ---- */

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

const cJSON *sb_operator_condition_get(const cJSON *status, const char *type)
{
    const cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    const cJSON *c;
    cJSON_ArrayForEach(c, conds)
    {
        const char *t = str_of(c, "type");
        if (t != NULL && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

int sb_operator_condition_true(const cJSON *status, const char *type)
{
    const char *s = str_of(sb_operator_condition_get(status, type), "status");
    return s != NULL && strcmp(s, "True") == 0;
}

static int set_str(cJSON *o, const char *k, const char *v)
{
    const char *cur = str_of(o, k);
    if (cur != NULL && strcmp(cur, v) == 0)
        return 0;
    cJSON *n = cJSON_CreateString(v);
    if (n == NULL)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(o, k) != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, n);
    else
        cJSON_AddItemToObject(o, k, n);
    return 1;
}

static int set_num(cJSON *o, const char *k, double v)
{
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsNumber(cur) && cur->valuedouble == v)
        return 0;
    cJSON *n = cJSON_CreateNumber(v);
    if (n == NULL)
        return -1;
    if (cur != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, n);
    else
        cJSON_AddItemToObject(o, k, n);
    return 1;
}

/* Condition types whose status True means something is wrong (metav1 "abnormal-true"). */
static const char *const failing_types[] = {
    "InvalidSpec", "Failed", "WorkersPending", "WorkersFailing", "SpecChangeRefused", NULL};

static int is_failing_type(const char *type)
{
    for (size_t i = 0; type != NULL && failing_types[i] != NULL; i++)
        if (strcmp(type, failing_types[i]) == 0)
            return 1;
    return 0;
}

/* status.failingCondition, status.reason and, when Running is False, status.workers "0/0", from
 * the conditions. 1 when any changed, 0 when not, -1 when out of memory. */
static int sync_condition_fields(cJSON *status)
{
    const cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    const cJSON *c, *first = NULL;
    cJSON_ArrayForEach(c, conds)
    {
        const char *st = str_of(c, "status");
        if (is_failing_type(str_of(c, "type")) && st != NULL && strcmp(st, "True") == 0) {
            first = c;
            break;
        }
    }
    int changed = 0;
    if (first == NULL) {
        changed = cJSON_GetObjectItemCaseSensitive(status, "failingCondition") != NULL ||
                  cJSON_GetObjectItemCaseSensitive(status, "reason") != NULL;
        cJSON_DeleteItemFromObjectCaseSensitive(status, "failingCondition");
        cJSON_DeleteItemFromObjectCaseSensitive(status, "reason");
    } else {
        const char *reason = str_of(first, "reason"), *msg = str_of(first, "message");
        char text[SB_OPERATOR_FAILING_MAX + 1];
        int n = snprintf(text, sizeof text, "%s%s%s", reason != NULL ? reason : "",
                         msg != NULL && *msg != '\0' ? ": " : "", msg != NULL ? msg : "");
        if (n >= (int)sizeof text) {
            size_t end = SB_OPERATOR_FAILING_MAX - 3; /* room for "..." */
            while (end > 0 && ((unsigned char)text[end] & 0xC0) == 0x80)
                end--; /* not inside a UTF-8 sequence */
            memcpy(text + end, "...", 4);
        }
        int r = set_str(status, "failingCondition", text);
        /* the default column: the reason alone, short enough for a terminal */
        int r2 = r < 0 ? -1 : set_str(status, "reason", reason != NULL ? reason : "");
        if (r2 < 0)
            return -1;
        changed = r | r2;
    }
    const char *running = str_of(sb_operator_condition_get(status, "Running"), "status");
    if (running != NULL && strcmp(running, "False") == 0) {
        int r = set_str(status, "workers", "0/0");
        if (r < 0)
            return -1;
        changed |= r;
    }
    return changed;
}

int sb_operator_condition_set(cJSON *status, const char *type, int truth, const char *reason,
                              const char *message, int64_t generation, const char *now)
{
    cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    if (!cJSON_IsArray(conds)) {
        cJSON_DeleteItemFromObjectCaseSensitive(status, "conditions");
        conds = cJSON_AddArrayToObject(status, "conditions");
        if (conds == NULL)
            return -1;
    }
    cJSON *c = (cJSON *)sb_operator_condition_get(status, type);
    int changed = 0;
    const char *st = truth ? "True" : "False";
    if (c == NULL) {
        c = cJSON_CreateObject();
        if (c == NULL)
            return -1;
        cJSON_AddItemToArray(conds, c);
        cJSON_AddStringToObject(c, "type", type);
        changed = 1;
    }
    const char *old = str_of(c, "status");
    if (old == NULL || strcmp(old, st) != 0 || str_of(c, "lastTransitionTime") == NULL) {
        if (set_str(c, "status", st) < 0 || set_str(c, "lastTransitionTime", now) < 0)
            return -1;
        changed = 1;
    }
    int r1 = set_str(c, "reason", reason);
    int r2 = set_str(c, "message", message != NULL ? message : "");
    int r3 = set_num(c, "observedGeneration", (double)generation);
    int r4 = r1 < 0 || r2 < 0 || r3 < 0 ? -1 : sync_condition_fields(status);
    if (r4 < 0)
        return -1;
    return changed || r1 || r2 || r3 || r4;
}

/* ---- progress ---- */

void sb_operator_rate_format(double rows_per_s, char *buf, size_t len)
{
    static const char *const units[] = {"", "k", "M", "G", "T", "P", "E"};
    /* NaN compares false: 0; below 0.001 "0", since %.3g would switch to an exponent */
    double v = rows_per_s >= 0.001 ? rows_per_s : 0;
    size_t u = 0;
    /* %.3g of a value below 999.5 has no exponent and rounds to at most 999 */
    while (v >= 999.5 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1000;
        u++;
    }
    snprintf(buf, len, "%.3g%s rows/s", v, units[u]);
}

static cJSON *obj_at(cJSON *o, const char *k)
{
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsObject(x))
        return x;
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    return cJSON_AddObjectToObject(o, k);
}

int sb_operator_status_mode(cJSON *status, sb_exec_mode mode)
{
    return set_str(status, "mode", sb_exec_mode_names[mode]) < 0 ? -1 : 0;
}

int sb_operator_status_progress(cJSON *status, const sb_ctl_snapshot *s, size_t total_splits,
                                size_t committed_splits, const sb_operator_pool_view *pools,
                                size_t npools, double elapsed_s)
{
    char prog[48];
    /* before (or without) a plan the split count is not known: "-", not a misleading 0/0 */
    int unknown = s->planning || (total_splits == 0 && s->storage_failed);
    snprintf(prog, sizeof prog, "%zu/%zu", committed_splits, total_splits);
    if (set_str(status, "progress", unknown ? SB_OPERATOR_CELL_UNKNOWN : prog) < 0)
        return -1;
    uint64_t pods_ready = 0, pods_desired = 0;
    for (size_t k = 0; k < npools; k++) {
        pods_ready += pools[k].ready;
        pods_desired += pools[k].desired;
    }
    char workers[48], rate[48];
    snprintf(workers, sizeof workers, "%" PRIu64 "/%" PRIu64, pods_ready, pods_desired);
    uint64_t sink_rows = s->nops > 0 ? s->ops[s->nops - 1].rows_out : 0;
    sb_operator_rate_format(elapsed_s > 0 ? (double)sink_rows / elapsed_s : 0.0, rate, sizeof rate);
    if (unknown && sink_rows == 0)
        snprintf(rate, sizeof rate, "%s", SB_OPERATOR_CELL_UNKNOWN);
    if (set_str(status, "workers", workers) < 0 || set_str(status, "throughput", rate) < 0)
        return -1;
    cJSON *pt = obj_at(status, "partitions");
    if (pt == NULL)
        return -1;
    uint64_t running = 0, errored = 0;
    for (size_t i = 0; i < s->nops; i++) {
        running += s->ops[i].tasks_running;
        errored += s->ops[i].errored;
    }
    set_num(pt, "total", (double)total_splits);
    set_num(pt, "committed", (double)committed_splits);
    set_num(pt, "inFlight", (double)running);
    set_num(pt, "recovered", (double)s->stats.partitions_recovered);
    set_num(pt, "errored", (double)errored);
    cJSON *st = cJSON_CreateArray();
    if (st == NULL)
        return -1;
    for (size_t i = 0; i < s->nops; i++) {
        const sb_sched_group_stats *o = &s->ops[i];
        cJSON *x = cJSON_CreateObject();
        if (x == NULL) {
            cJSON_Delete(st);
            return -1;
        }
        cJSON_AddItemToArray(st, x);
        cJSON_AddStringToObject(x, "name", o->name ? o->name : "");
        cJSON_AddStringToObject(x, "pool", o->pool ? o->pool : "");
        uint32_t desired = 0, ready = 0;
        for (size_t k = 0; k < npools; k++)
            if (o->pool != NULL && strcmp(pools[k].pool, o->pool) == 0) {
                desired = pools[k].desired;
                ready = pools[k].ready;
            }
        cJSON_AddNumberToObject(x, "workersDesired", desired);
        cJSON_AddNumberToObject(x, "workersReady", ready);
        cJSON_AddNumberToObject(x, "tasksRunning", (double)o->tasks_running);
        cJSON_AddNumberToObject(x, "rowsOut", (double)o->rows_out);
        cJSON_AddNumberToObject(x, "bytesOut", (double)o->bytes_out);
        double rps = elapsed_s > 0 ? (double)o->rows_out / elapsed_s : 0.0;
        cJSON_AddNumberToObject(x, "rowsPerSecond", (double)(int64_t)(rps * 10) / 10);
    }
    if (cJSON_GetObjectItemCaseSensitive(status, "stages") != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(status, "stages", st);
    else
        cJSON_AddItemToObject(status, "stages", st);
    return 0;
}

int sb_operator_status_cells(cJSON *status)
{
    static const struct {
        const char *field, *value;
    } cells[] = {{"progress", SB_OPERATOR_CELL_UNKNOWN},
                 {"workers", "0/0"},
                 {"throughput", SB_OPERATOR_CELL_UNKNOWN}};
    int changed = 0;
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        if (str_of(status, cells[i].field) != NULL)
            continue;
        if (set_str(status, cells[i].field, cells[i].value) < 0)
            return -1;
        changed = 1;
    }
    return changed;
}

/* ---- spec changes ---- */

static void add_field(char *buf, size_t len, size_t *used, const char *name)
{
    if (*used >= len)
        return;
    int n = snprintf(buf + *used, len - *used, "%s%s", *used ? ", " : "", name);
    if (n < 0 || (size_t)n >= len - *used) {
        if (len >= 4)
            memcpy(buf + len - 4, "...", 4);
        *used = len;
        return;
    }
    *used += (size_t)n;
}

/* Keys of a and b (union), each once, in a's order then b's. Calls fn for each. */
static int diff_objects(const cJSON *a, const cJSON *b, const char *prefix,
                        const char *const *ignore, char *buf, size_t len, size_t *used,
                        int (*nested)(const char *key, const cJSON *x, const cJSON *y, char *buf,
                                      size_t len, size_t *used))
{
    int n = 0;
    const cJSON *pass[2] = {a, b};
    for (int side = 0; side < 2; side++) {
        const cJSON *k;
        cJSON_ArrayForEach(k, pass[side])
        {
            if (k->string == NULL)
                continue;
            if (side == 1 && cJSON_GetObjectItemCaseSensitive(a, k->string) != NULL)
                continue; /* seen from a */
            int skip = 0;
            for (size_t i = 0; ignore != NULL && ignore[i] != NULL && !skip; i++)
                skip = strcmp(ignore[i], k->string) == 0;
            if (skip)
                continue;
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, k->string);
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, k->string);
            if (nested != NULL) {
                int r = nested(k->string, x, y, buf, len, used);
                if (r >= 0) {
                    n += r;
                    continue;
                }
            }
            if (x != NULL && y != NULL && cJSON_Compare(x, y, 1))
                continue;
            char name[300];
            snprintf(name, sizeof name, "%s.%s", prefix, k->string);
            add_field(buf, len, used, name);
            n++;
        }
    }
    return n;
}

static int stages_diff(const char *key, const cJSON *x, const cJSON *y, char *buf, size_t len,
                       size_t *used)
{
    if (strcmp(key, "stages") != 0 || !cJSON_IsArray(x) || !cJSON_IsArray(y) ||
        cJSON_GetArraySize(x) != cJSON_GetArraySize(y))
        return -1; /* compared whole */
    static const char *const ign[] = {"workers", NULL};
    int n = 0;
    for (int i = 0; i < cJSON_GetArraySize(x); i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "spec.stages[%d]", i);
        const cJSON *sx = cJSON_GetArrayItem(x, i), *sy = cJSON_GetArrayItem(y, i);
        if (!cJSON_IsObject(sx) || !cJSON_IsObject(sy)) {
            if (!cJSON_Compare(sx, sy, 1)) {
                add_field(buf, len, used, prefix);
                n++;
            }
            continue;
        }
        n += diff_objects(sx, sy, prefix, ign, buf, len, used, NULL);
    }
    return n;
}

int sb_operator_spec_diff(const cJSON *old_spec, const cJSON *new_spec, char *buf, size_t len)
{
    static const char *const ign[] = {"suspend", "ttlSecondsAfterFinished", NULL};
    size_t used = 0;
    if (len > 0)
        buf[0] = '\0';
    if (!cJSON_IsObject(old_spec) || !cJSON_IsObject(new_spec)) {
        if (old_spec != NULL && new_spec != NULL && cJSON_Compare(old_spec, new_spec, 1))
            return 0;
        add_field(buf, len, &used, "spec");
        return 1;
    }
    return diff_objects(old_spec, new_spec, "spec", ign, buf, len, &used, stages_diff);
}

const char *sb_operator_str_at(const cJSON *obj, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, a);
    if (b != NULL)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

uint64_t sb_operator_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int sb_operator_finished_seen(const char *done_uid, const char *uid, const char *phase)
{
    if (uid == NULL || done_uid == NULL || strcmp(uid, done_uid) != 0)
        return 1;
    return phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

int sb_operator_status_errored(cJSON *status, const sb_storage_errored *errored, size_t n)
{
    cJSON_DeleteItemFromObjectCaseSensitive(status, "erroredPartitions");
    if (n == 0)
        return 0;
    cJSON *arr = cJSON_AddArrayToObject(status, "erroredPartitions");
    if (arr == NULL)
        return -1;
    for (size_t i = 0; i < n && i < SB_SCHED_ERRORED_KEEP; i++) {
        cJSON *x = cJSON_CreateObject();
        if (x == NULL)
            return -1;
        cJSON_AddItemToArray(arr, x);
        if (cJSON_AddStringToObject(x, "stage", errored[i].stage) == NULL ||
            cJSON_AddStringToObject(x, "split", errored[i].input) == NULL ||
            cJSON_AddStringToObject(x, "error", errored[i].error) == NULL)
            return -1;
    }
    return 0;
}

/* ---- redaction ---- */

/* One string, redacted in place: 1 when it changed, 0 when not, -1 when out of memory. */
static int redact_string(cJSON *c)
{
    /* a secret of n >= 1 bytes becomes at most 9 (" REDACTED") */
    size_t n = strlen(c->valuestring), cap = n * 9 + 16;
    char *red = malloc(cap);
    if (red == NULL)
        return -1;
    sb_redact_text(c->valuestring, red, cap);
    int diff = strcmp(red, c->valuestring) != 0;
    if (diff && cJSON_SetValuestring(c, red) == NULL)
        diff = -1;
    free(red);
    return diff;
}

int sb_operator_status_redact(cJSON *node)
{
    if (node == NULL)
        return 0;
    if (cJSON_IsString(node))
        return node->valuestring != NULL ? redact_string(node) : 0;
    int changed = 0;
    if (cJSON_IsArray(node) || cJSON_IsObject(node))
        for (cJSON *k = node->child; k != NULL; k = k->next) {
            int r = sb_operator_status_redact(k);
            if (r < 0)
                return -1;
            changed += r;
        }
    return changed;
}
