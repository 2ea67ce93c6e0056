/* podstate.c — reading what is wrong with a worker pod from its status (see podstate.h): the
 * scheduler's Unschedulable verdict, containers waiting in a state the kubelet does not leave by
 * itself, the once-per-class event rule, the pool failure rule and the WorkersFailing condition.
 * Pure: works on the caller's cJSON and buffers. */

#include "controller/operator/podstate.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "controller/operator/operator_status.h"

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static const cJSON *jobj(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

unsigned sb_podstate_class(const char *reason)
{
    static const struct {
        const char *reason;
        unsigned cls;
    } known[] = {
        {"CreateContainerConfigError", SB_PODSTATE_CONFIG},
        {"ErrImagePull", SB_PODSTATE_IMAGE},
        {"ImagePullBackOff", SB_PODSTATE_IMAGE},
        {"InvalidImageName", SB_PODSTATE_IMAGE},
        {"ErrImageNeverPull", SB_PODSTATE_IMAGE},
        {"ImageInspectError", SB_PODSTATE_IMAGE},
        {"RegistryUnavailable", SB_PODSTATE_IMAGE},
        {"CrashLoopBackOff", SB_PODSTATE_CRASH},
        {"CreateContainerError", SB_PODSTATE_CREATE},
        {"RunContainerError", SB_PODSTATE_CREATE},
        {"PreStartHookError", SB_PODSTATE_CREATE},
        {"PostStartHookError", SB_PODSTATE_CREATE},
    };
    for (size_t i = 0; reason != NULL && i < sizeof known / sizeof known[0]; i++)
        if (strcmp(reason, known[i].reason) == 0)
            return known[i].cls;
    return 0;
}

/* The first container of list waiting in a failing state, into out; 1 when found. */
static int read_waiting(const cJSON *list, sb_podstate *out)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, list)
    {
        const cJSON *w = jobj(jobj(c, "state"), "waiting");
        const char *reason = jstr(w, "reason");
        unsigned cls = sb_podstate_class(reason);
        if (cls == 0)
            continue;
        const char *msg = jstr(w, "message"), *name = jstr(c, "name");
        snprintf(out->reason, sizeof out->reason, "%s", reason);
        snprintf(out->message, sizeof out->message, "%s", msg != NULL ? msg : "");
        snprintf(out->container, sizeof out->container, "%s", name != NULL ? name : "");
        out->cls = cls;
        return 1;
    }
    return 0;
}

void sb_podstate_read(const cJSON *pod, sb_podstate *out)
{
    memset(out, 0, sizeof *out);
    const cJSON *st = jobj(pod, "status");
    const cJSON *c;
    cJSON_ArrayForEach(c, jobj(st, "conditions"))
    {
        const char *type = jstr(c, "type"), *status = jstr(c, "status");
        if (type == NULL || strcmp(type, "PodScheduled") != 0 || status == NULL ||
            strcmp(status, "False") != 0)
            continue;
        /* only the scheduler's verdict: a gated pod (SchedulingGated) is not "cannot fit" */
        const char *r = jstr(c, "reason"), *m = jstr(c, "message");
        if (r != NULL && strcmp(r, "Unschedulable") != 0)
            continue;
        snprintf(out->unschedulable, sizeof out->unschedulable, "%s",
                 m != NULL && *m != '\0' ? m : "Unschedulable");
    }
    if (!read_waiting(jobj(st, "initContainerStatuses"), out))
        read_waiting(jobj(st, "containerStatuses"), out);
}

void sb_podstate_describe(const char *pod, const sb_podstate *s, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (s == NULL || s->cls == 0)
        return;
    snprintf(buf, len, "pod %s: %s%s%s", pod != NULL ? pod : "?", s->reason,
             s->message[0] != '\0' ? ": " : "", s->message);
}

int sb_podstate_warn(unsigned *warned, const sb_podstate *s)
{
    if (s == NULL || s->cls == 0 || (*warned & s->cls) != 0)
        return 0;
    *warned |= s->cls;
    return 1;
}

int sb_podstate_pool_rule(uint64_t *since_ms, uint32_t alive, uint32_t failing, uint64_t now_ms,
                          uint64_t timeout_ms)
{
    if (alive == 0 || failing < alive) {
        *since_ms = 0;
        return 0;
    }
    if (*since_ms == 0)
        *since_ms = now_ms > 0 ? now_ms : 1; /* 0 means "not failing" */
    if (timeout_ms > 0 && now_ms >= *since_ms && now_ms - *since_ms >= timeout_ms)
        return 2;
    return 1;
}

/* A duration as the spec writes one: "90s", "5m", "1m30s", "1500ms". */
static void fmt_duration(uint64_t ms, char *buf, size_t len)
{
    if (ms % 1000 != 0) {
        snprintf(buf, len, "%" PRIu64 "ms", ms);
        return;
    }
    uint64_t s = ms / 1000, m = s / 60;
    if (m == 0)
        snprintf(buf, len, "%" PRIu64 "s", s);
    else if (s % 60 == 0)
        snprintf(buf, len, "%" PRIu64 "m", m);
    else
        snprintf(buf, len, "%" PRIu64 "m%" PRIu64 "s", m, s % 60);
}

void sb_podstate_failure_message(const char *pool, uint64_t timeout_ms, const char *first,
                                 char *buf, size_t len)
{
    char d[32];
    fmt_duration(timeout_ms, d, sizeof d);
    snprintf(buf, len,
             "pool %s: every worker pod has been failing for %s (spec.execution.stallTimeout): %s",
             pool != NULL ? pool : "?", d, first != NULL && *first != '\0' ? first : "no reason");
}

void sb_podstate_churn_exit(sb_podstate_churn *c, const char *pod, const char *why, uint64_t ran_ms,
                            uint64_t now_ms)
{
    if (ran_ms >= SB_PODSTATE_EARLY_MS) { /* it worked a while: not a crash at start */
        sb_podstate_churn_healthy(c);
        return;
    }
    if (c->streak == 0)
        c->since_ms = now_ms > 0 ? now_ms : 1;
    c->streak++;
    snprintf(c->last, sizeof c->last, "pod %s: exited at start: %s", pod != NULL ? pod : "?",
             why != NULL && *why != '\0' ? why : "no reason given");
}

void sb_podstate_churn_healthy(sb_podstate_churn *c)
{
    c->streak = 0;
    c->since_ms = 0;
    c->last[0] = '\0';
}

int sb_podstate_churning(const sb_podstate_churn *c, char *desc, size_t len)
{
    if (c->streak < SB_PODSTATE_CHURN_MIN)
        return 0;
    if (desc != NULL && len > 0)
        snprintf(desc, len, "%s (%u pods in a row)", c->last, c->streak);
    return 1;
}

uint64_t sb_podstate_churn_backoff_ms(uint32_t streak)
{
    if (streak < SB_PODSTATE_CHURN_MIN)
        return 0;
    uint32_t doublings = streak - SB_PODSTATE_CHURN_MIN;
    uint64_t ms = 10000;
    while (doublings-- > 0 && ms < 300000)
        ms *= 2;
    return ms < 300000 ? ms : 300000;
}

int sb_podstate_condition(cJSON *status, const char *reason, const char *message,
                          int64_t generation, const char *now)
{
    if (reason != NULL && *reason != '\0')
        return sb_operator_condition_set(status, "WorkersFailing", 1, reason, message, generation,
                                         now);
    if (sb_operator_condition_get(status, "WorkersFailing") == NULL)
        return 0;
    return sb_operator_condition_set(status, "WorkersFailing", 0, "NoPodFailing", "", generation,
                                     now);
}
