/* podstate.h — what a worker pod's status says is wrong with it, for the operator's conditions,
 * events and failure rule (docs/operator.md, "Conditions" and "Troubleshooting"):
 *   - unschedulable: the scheduler cannot place it (condition PodScheduled=False, reason
 *     Unschedulable), the WorkersPending condition;
 *   - failing: a container waits in a state the kubelet does not leave without help
 *     (CreateContainerConfigError: a Secret or ConfigMap missing; ErrImagePull / ImagePullBackOff
 *     / InvalidImageName: the image; CrashLoopBackOff; CreateContainerError / RunContainerError),
 *     the WorkersFailing condition and a Warning WorkerPodFailing event, with the kubelet's
 *     reason and message ("pod sb-x-cpu-0: CreateContainerConfigError: secret "s3-creds" not
 *     found");
 *   - the rule: when every live pod of a pool has been failing like that for
 *     spec.execution.stallTimeout, the Pipeline fails (reason WorkersFailing).
 *
 * Pure functions over cJSON pod objects and plain values: no I/O, no allocation; unit tested
 * (tests/unit/test_podstate.c). kube.c reads pods with them, operator_run.c applies the rule and
 * writes the condition.
 *
 * Memory: every output goes into the caller's fixed buffers; the pod is only read.
 */
#ifndef SB_CTL_PODSTATE_H
#define SB_CTL_PODSTATE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* Classes of waiting reasons that mean a pod will not become a worker by itself. A pod is warned
 * about (one event) once per class: the kubelet alternates ErrImagePull and ImagePullBackOff,
 * which must not post an event at every turn. */
#define SB_PODSTATE_CONFIG 1u /* CreateContainerConfigError */
#define SB_PODSTATE_IMAGE 2u  /* ErrImagePull, ImagePullBackOff, InvalidImageName, ... */
#define SB_PODSTATE_CRASH 4u  /* CrashLoopBackOff */
#define SB_PODSTATE_CREATE 8u /* CreateContainerError, RunContainerError, hook errors */

typedef struct sb_podstate {
    /* the PodScheduled=False message ("0/2 nodes are available: ...", or the reason when there
     * is no message) when the scheduler reports the pod Unschedulable; "" otherwise */
    char unschedulable[512];
    /* the first container (init containers first) waiting in a failing state: the kubelet's
     * reason and message ("" when none), the container's name, and the reason's class (0: no
     * container is failing) */
    char reason[64];
    char message[512];
    char container[64];
    unsigned cls;
} sb_podstate;

/* The class of a container's waiting reason (SB_PODSTATE_*), 0 for the normal ones
 * (ContainerCreating, PodInitializing) and any unknown reason. */
unsigned sb_podstate_class(const char *reason);

/* Reads what is wrong with pod (a core/v1 Pod as JSON; NULL or malformed parts read as
 * nothing wrong) into out. */
void sb_podstate_read(const cJSON *pod, sb_podstate *out);

/* "pod <name>: <reason>: <message>" (": <message>" left out when empty) into buf, truncated;
 * "" when s is not failing. */
void sb_podstate_describe(const char *pod, const sb_podstate *s, char *buf, size_t len);

/* Event de-duplication: *warned holds the classes already posted for this pod. Returns 1 (and
 * adds the class) when s is failing in a class not posted yet: post one Warning now; else 0. */
int sb_podstate_warn(unsigned *warned, const sb_podstate *s);

/* The failure rule for one pool, at every tick. alive: the pool's pods that are, or will be,
 * workers; failing: those of them failing (cls != 0). *since_ms: when every pod started failing
 * (0: not so; the function keeps it). Returns 0 when the pool is fine (not every pod failing, or
 * no pod), 1 when every pod is failing for less than timeout_ms, 2 when for timeout_ms or more
 * (timeout_ms 0: the rule is off, never 2). */
int sb_podstate_pool_rule(uint64_t *since_ms, uint32_t alive, uint32_t failing, uint64_t now_ms,
                          uint64_t timeout_ms);

/* The message of the failure: "pool <pool>: every worker pod has been failing for <t>
 * (spec.execution.stallTimeout): <first>" into buf, truncated. */
void sb_podstate_failure_message(const char *pool, uint64_t timeout_ms, const char *first,
                                 char *buf, size_t len);

/* Pods that end at start. Worker pods never restart (restartPolicy Never), so a worker that
 * crashes as it starts (a missing library: exit code 127; a bad argument) is not a
 * CrashLoopBackOff but a stream of new pods, each ending Failed. A pod of the pool that ends
 * Failed (not deleted by the controller) before it ran, or within SB_PODSTATE_EARLY_MS of
 * running, adds to the pool's streak; a pod that has run for SB_PODSTATE_EARLY_MS ends it. From
 * SB_PODSTATE_CHURN_MIN pods in a row the pool counts as failing (reason
 * SB_PODSTATE_CHURN_REASON, the WorkersFailing condition), and the failure rule applies from the
 * streak's first exit. */
#define SB_PODSTATE_EARLY_MS 10000
#define SB_PODSTATE_CHURN_MIN 3
#define SB_PODSTATE_CHURN_REASON "ExitedAtStart"

typedef struct sb_podstate_churn {
    uint32_t streak;   /* pods in a row that ended at start */
    uint64_t since_ms; /* the streak's first exit (0: no streak) */
    char last[640];    /* the latest: "pod P: exited at start: <why>" */
} sb_podstate_churn;

/* A pod of the pool ended Failed, not by the controller: why (e.g. "pod failed: container
 * exited with code 127 (Error)"), ran_ms how long it had been Running (0: never seen Running).
 * Counts it when it ended at start (ran_ms < SB_PODSTATE_EARLY_MS); else ends the streak. */
void sb_podstate_churn_exit(sb_podstate_churn *c, const char *pod, const char *why, uint64_t ran_ms,
                            uint64_t now_ms);
/* A pod of the pool has run for SB_PODSTATE_EARLY_MS: the streak ends. */
void sb_podstate_churn_healthy(sb_podstate_churn *c);
/* 1 when the pool's pods keep ending at start (streak >= SB_PODSTATE_CHURN_MIN): desc (may be
 * NULL) gets "<last> (N pods in a row)". */
int sb_podstate_churning(const sb_podstate_churn *c, char *desc, size_t len);

/* How long to wait before the pool's next pod while its pods keep ending at start, as the
 * kubelet backs off a crashing container: 0 below SB_PODSTATE_CHURN_MIN in a row, then 10 s
 * doubling per pod up to 5 min. */
uint64_t sb_podstate_churn_backoff_ms(uint32_t streak);

/* The WorkersFailing condition in status (operator_status.h conditions): True with reason (the
 * first failing pod's kubelet reason) and message (every failing pod described, "; "-joined)
 * when reason is not empty; else False "NoPodFailing", written only when the condition exists
 * already (a run whose pods never failed does not carry it). Returns as
 * sb_operator_condition_set (1 changed, 0 not, -1 out of memory). */
int sb_podstate_condition(cJSON *status, const char *reason, const char *message,
                          int64_t generation, const char *now);

#endif
