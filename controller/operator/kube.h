/* kube.h — the Kubernetes backend: worker pods per pool, behind controller/ctl/backend.h.
 *
 * Each pool ("cpu", "gpu") gets pods "<pipeline>-<pool>-<5 random [a-z0-9]>" (the pipeline
 * part is shortened so a name stays <= 63 characters), labelled streambatch.dev/pipeline,
 * streambatch.dev/pool, app.kubernetes.io/name=streambatch-worker and
 * app.kubernetes.io/managed-by=streambatch-controller, owned by the Pipeline (controller and
 * blockOwnerDeletion, so deleting the Pipeline garbage-collects them), restartPolicy Never, one
 * container "worker" with port 7070 "data", requests = limits (cpu, memory, nvidia.com/gpu) and
 * the env the worker reads: SB_CONTROLLER, SB_WORKER_ID (= the pod name, downward API),
 * SB_POD_IP (status.podIP), SB_WORKER_PORT, SB_POOL, SB_SLOTS, SB_ACCELERATORS,
 * SB_STORE_BUDGET, SB_PIPELINE ("ns/name"), SB_EPOCH, SB_SPILL_DIR and TMPDIR (both
 * SB_WORKER_SPILL_MOUNT), SB_AUTH_TOKEN (secretKeyRef) and SB_AUTH_CONTROLLER_SHA256. The pod runs
 * as uid/gid 65532 (runAsNonRoot, fsGroup 65532, seccomp RuntimeDefault); the container has a
 * read-only root filesystem, no privilege escalation and no capabilities; its one writable place is
 * the emptyDir SB_WORKER_SPILL_VOLUME mounted at SB_WORKER_SPILL_MOUNT (spec/pipeline.h), of at
 * most spill_limit bytes (the kubelet evicts a pod that writes more: its partitions are then
 * re-run). With a credentials Secret, every standard AWS variable (sb_credentials_keys) comes from
 * the Secret's key of the same name (secretKeyRef; the access key and secret key required, the
 * others optional): the controller never reads the Secret. The image: a pool with GPUs runs
 * gpu_image (the CUDA build of the worker, the worker-gpu image), the others image.
 * spec.workerTemplate adds: image (every pool's), imagePullPolicy, serviceAccountName,
 * priorityClassName, nodeSelector, labels and annotations (merged; the backend's own labels
 * win), env (appended after ours: it may refer to ours as $(SB_POOL); the validator refuses
 * names we set), envFrom, volumes (beside ours), volumeMounts (after ours) and tolerations.
 *
 * State comes from pod events: the operator's pod informer calls sb_kube_on_pod() for every
 * pod it sees (pods of other pipelines are ignored). Rules:
 *   - Pending pods are never capacity: pool_size() counts Running pods only;
 *   - at most max_pending pods of a pool are Pending at once, so a pool that cannot be
 *     scheduled (e.g. no GPU in the cluster) never piles up pods; sb_kube_pool_status() then
 *     gives the scheduler's PodScheduled=False message ("0/2 nodes are available: ...");
 *   - a pod whose container waits in a failing state (podstate.h: a missing Secret, an image
 *     that cannot be pulled, a crash loop) -> Event Warning WorkerPodFailing "pod P: Reason:
 *     message", once per pod and class of reason; sb_kube_pool_failing() reports them; pods
 *     that keep ending at start -> one such event per streak (sb_kube_pool_churn);
 *   - a pod that fails, or is deleted by someone else, while the backend runs ->
 *     on_exit(pod name, why) + Event Warning WorkerPodFailed; a pod the backend deleted itself
 *     (scale down) that had run -> on_exit only; a pod that Succeeded (its worker was told to
 *     shut down) is normal; ended pods are deleted by the next sync;
 *   - scale down deletes Pending pods first (newest first), then Running pods that
 *     can_remove() allows (NULL: any);
 *   - created pods -> Event Normal WorkerPodsCreated; a failed create -> Warning
 *     WorkerPodCreateFailed (and sync returns -1).
 * After sb_kube_delete_all() (or stop) no callback runs any more.
 *
 * Adoption: sb_kube_start() lists the pipeline's existing pods (after a controller failover)
 * and keeps them (each pool's desired size starts at the pods it found); sb_kube_rebind() then
 * points every Running adopted pod at this controller (Worker.Rebind) and deletes those that
 * refuse or cannot be reached (Event Warning WorkerRebindFailed; no on_exit: they never worked
 * for this leader; desired sizes are left to the caller's next set_pool_size). Pods owned by
 * another incarnation of the pipeline (another owner uid) are ignored.
 *
 * Threads: on_pod runs on the informer's thread, the rest on the operator's; one mutex guards
 * the pod table and is never held during an HTTP or gRPC call or a callback; syncs run one at
 * a time. Callbacks run on the calling thread of on_pod/sync/rebind and must not call back
 * into the backend.
 *
 * Ownership: the backend copies the config's strings and the worker template; the client is
 * borrowed (shared, thread-safe) and must outlive the backend. sb_kube_free() (or the
 * backend's stop) frees everything; the pods stay unless deleted first.
 */
#ifndef SB_CTL_KUBE_H
#define SB_CTL_KUBE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "controller/ctl/backend.h"
#include "core/err.h"
#include "k8s/client.h"
#include "rpc/rpc.h"
#include "spec/pipeline.h"

/* The worker container's metrics port (named "metrics"; docs/metrics.md). */
#define SB_KUBE_METRICS_PORT 9102

typedef struct sb_kube sb_kube;

typedef struct sb_kube_pool {
    const char *pool;         /* "cpu" | "gpu" */
    uint32_t min, max;        /* pool bounds: [max of the stages' min, max of the stages' max] */
    const char *cpu, *memory; /* quantities for requests and limits, e.g. "500m", "1Gi" (NULL:
                                 none) */
    uint32_t gpus;            /* nvidia.com/gpu per pod (requests = limits) */
    uint32_t slots, accelerators;
    char cpu_buf[32], memory_buf[32]; /* storage used by sb_kube_pools_from_spec */
    int64_t cpu_milli, memory_bytes;  /* the same quantities as numbers (0: none), per pod */
} sb_kube_pool;

/* Fills pools from the spec (one per pool the scheduler uses, in stage order; the pool of a
 * stage is sb_stage_pool()): bounds as above, resources = max over the pool's stages; CPU pools
 * slots execution.cpuSlotsPerWorker (default 1), accelerators 0; GPU pools slots 2, accelerators
 * 1 (as `streambatch run`). The
 * quantities are kept in the pool's own cpu_buf/memory_buf (cpu/memory point there, NULL when
 * not set); sb_kube_start() reads a set buffer in preference to the pointer, so the struct may
 * be copied (e.g. into sb_kube_config.pools). Returns the number of pools (at most cap). */
size_t sb_kube_pools_from_spec(const sb_pipeline *p, sb_kube_pool *out, size_t cap);

/* As sb_kube_pools_from_spec, with stage i in pool placed[i] ("cpu" / "gpu"; placed NULL or
 * placed[i] NULL: sb_stage_pool()), and with also_allowed a pool for every other shape a stage
 * allows (placement), so that a re-plan can move the stage there while the run goes on: its
 * min counts only the stages placed in it (an empty one starts with no pod), its max and
 * resources every stage that runs or may run there (a gpu pod takes the stage's GPUs,
 * gpu_shape_gpus, also when it was declared for cpu first). Pools run in come first. */
size_t sb_kube_pools_placed(const sb_pipeline *p, const char *const *placed, int also_allowed,
                            sb_kube_pool *out, size_t cap);

typedef struct sb_kube_config {
    sb_k8s_client *client; /* borrowed; shared */
    const char *namespace, *pipeline, *pipeline_uid;
    const char *controller_address; /* "ip:port" of this pipeline's Control service ->
                                       SB_CONTROLLER */
    uint64_t epoch;                 /* -> SB_EPOCH; Rebind uses it */
    const char *image;              /* default worker image; workerTemplate.image wins */
    const char *gpu_image;          /* default image of pools with gpus > 0 (NULL:
                                       streambatch/worker-gpu:latest); workerTemplate.image wins */
    const cJSON *worker_template;   /* spec.workerTemplate (may be NULL); borrowed during start */
    const char *credentials_secret; /* sb_pipeline_credentials_secret() (may be NULL) */
    sb_kube_pool pools[4];
    size_t npools;
    uint64_t store_budget; /* per worker -> SB_STORE_BUDGET */
    uint32_t max_pending;  /* Pending pods per pool at most; default 2 */
    uint16_t worker_port;  /* default 7070 */
    /* Mutual TLS (rpc/tlsdir.h), all three borrowed (must outlive the backend); NULL: plaintext.
     * tls_secret: the Secret mounted at SB_WORKER_TLS_MOUNT in every pod (SB_TLS_DIR);
     * tls_server_name -> SB_TLS_SERVER_NAME; rpc: options of the Rebind channel to workers. */
    const char *tls_secret;
    const char *tls_server_name;
    const sb_rpc_opts *rpc;
    /* The pipeline's credentials (rpc/auth.h), borrowed: sb_kube_start() creates the Secret
     * auth_secret (key "token" = auth_worker_token, owned by the Pipeline; one that exists is
     * an earlier leader's, whose name carries the same token) and every pod gets
     * SB_AUTH_TOKEN from it and SB_AUTH_CONTROLLER_SHA256 = auth_controller_sha256. NULL
     * auth_secret: the pods get neither (tests of the pod JSON only: a worker refuses to run). */
    const char *auth_secret, *auth_worker_token, *auth_controller_sha256;
    uint64_t spill_limit; /* sizeLimit of the spill emptyDir, bytes (0: none) */
    void (*on_exit)(void *ud, const char *worker_id, const char *why); /* pod failed/vanished */
    void (*on_event)(void *ud, const char *type, const char *reason, const char *message);
    int (*can_remove)(void *ud, const char *worker_id); /* scale-down victim check */
    void *ud;
} sb_kube_config;

/* The Pod object (a new cJSON tree, the caller's) the backend creates for a worker of pool
 * named `name`: a pure function of cfg (namespace, pipeline, pipeline_uid, controller_address,
 * epoch, image, gpu_image, worker_template, credentials_secret, store_budget, worker_port: 0 =
 * 7070) and
 * the pool. NULL when out of memory. */
cJSON *sb_kube_pod_json(const sb_kube_config *cfg, const sb_kube_pool *pool, const char *name);

/* Lists existing pods of the pipeline (adopts them). NULL with err set when the list fails. */
sb_kube *sb_kube_start(const sb_kube_config *cfg, sb_err *err);
/* Fed by the operator's pod informer (deleted = 1 for a DELETED event). */
void sb_kube_on_pod(sb_kube *k, const cJSON *pod, int deleted);
/* Worker.Rebind on every Running adopted pod; deletes pods that refuse or cannot be reached.
 * Returns the number rebound, or -1 (err set) when no pod could be asked at all. */
int sb_kube_rebind(sb_kube *k, sb_err *err);
/* Deletes every adopted pod instead (Event Normal WorkerPodReplaced, saying why): a new leader of
 * a stream, whose run starts over at an epoch, has no use for what they hold. Desired sizes are
 * left to the caller's next set_pool_size. The number deleted, or -1 out of memory. */
int sb_kube_replace_adopted(sb_kube *k, const char *why);
/* Creates/deletes pods toward the desired sizes (bounded pending). 0, or -1 with err set when
 * an API call failed (the rest is still done). */
int sb_kube_sync(sb_kube *k, sb_err *err);
/* desired, ready (Running), pending, and why: the PodScheduled=False/Unschedulable message of a
 * Pending pod, "" when none (a pod failing to start is not unschedulable: see
 * sb_kube_pool_failing). Any output may be NULL. */
void sb_kube_pool_status(sb_kube *k, const char *pool, uint32_t *desired, uint32_t *ready,
                         uint32_t *pending, char *why, size_t whylen);
/* The pool's live pods (alive), how many of them have a container failing to start
 * (podstate.h: CreateContainerConfigError, ErrImagePull, CrashLoopBackOff, ...), and the oldest
 * such pod's kubelet reason and description ("pod P: Reason: message"), "" when none. Any
 * output may be NULL. */
void sb_kube_pool_failing(sb_kube *k, const char *pool, uint32_t *alive, uint32_t *failing,
                          char *reason, size_t rlen, char *first, size_t flen);
/* 1 when the pool's pods keep ending at start (podstate.h, sb_podstate_churn: a worker that
 * crashes as it starts makes new pods, not a CrashLoopBackOff): *since_ms (may be NULL) the
 * streak's first exit (sb_operator_mono_ms), desc "pod P: exited at start: ... (N pods in a
 * row)". A pod of the pool that has run SB_PODSTATE_EARLY_MS ends the streak. */
int sb_kube_pool_churn(sb_kube *k, const char *pool, uint64_t *since_ms, char *desc, size_t len);
/* Deletes every pod of the pipeline (listed from the API, not only the known ones) and stops
 * all callbacks. Returns how many of its pods still exist (terminating ones included): 0 when
 * none is left; -1 with err set when the API failed. Call again to poll. */
int sb_kube_delete_all(sb_kube *k, sb_err *err);
/* set_pool_size records desired + sync; pool_size = Running pods; rss = 0 (unknown);
 * stop(grace_ms) = delete all with that grace period, wait (grace + 10 s at most) for the pods
 * to be gone, and free. */
sb_backend sb_kube_backend(sb_kube *k);
void sb_kube_free(sb_kube *k);

#endif
