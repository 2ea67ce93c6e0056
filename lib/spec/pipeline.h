/* pipeline.h — the Pipeline resource (streambatch.dev/v1alpha1) as one C struct, filled from
 * YAML (local files, with line:column for every problem) or JSON (objects from the Kubernetes
 * API), with the same defaults and the same validation for both.
 *
 * Validation collects every problem with its field path ("spec.stages[1].resources.gpu: must
 * be a non-negative integer"). A pipeline is usable only when the diagnostics list is empty.
 *
 * Memory: sb_pipeline_decode() fills a caller-provided struct whose strings and arrays it
 * allocates; sb_pipeline_free() releases them (the struct itself is the caller's).
 */
#ifndef SB_SPEC_PIPELINE_H
#define SB_SPEC_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "doc/doc.h"
#include "spec/diag.h"
#include "spec/schema.h"

#define SB_API_VERSION "streambatch.dev/v1alpha1"
#define SB_KIND "Pipeline"

typedef enum {
    SB_FMT_JSONL,
    SB_FMT_CSV,
    SB_FMT_TEXT,
    SB_FMT_BINARY,
    SB_FMT_IMAGE,
    SB_FMT_PARQUET /* lib/parquet: parquet.h reads, write.h writes */
} sb_format;
typedef enum { SB_MODE_STREAMING, SB_MODE_STAGED, SB_MODE_STATIC } sb_exec_mode;

/* sink.mode: what a run does with a sink that already holds output (lib/io/sink.h) */
typedef enum {
    SB_SINK_OVERWRITE,       /* the default: the run's parts replace earlier runs' */
    SB_SINK_APPEND,          /* the run's parts are added, under names of their own */
    SB_SINK_ERROR_IF_EXISTS, /* refused when the sink holds a file */
    SB_SINK_IGNORE           /* nothing done when the sink holds _SUCCESS */
} sb_sink_mode;

extern const char *const sb_sink_mode_names[]; /* indexed by sb_sink_mode */
extern const char *const sb_format_names[];    /* indexed by sb_format, NULL-terminated */
extern const char *const sb_exec_mode_names[]; /* indexed by sb_exec_mode */

typedef struct sb_source_spec {
    char *uri;    /* exactly one of uri and uris is set (validation checks it) */
    char **uris;  /* a list of objects (e.g. http(s) URLs), each read as one object */
    size_t nuris; /* entries of uris */
    sb_format format;
    int64_t partition_size; /* bytes; default 64Mi */
    char *credentials_secret;
    char *args_json; /* format options as a JSON object, or NULL */
} sb_source_spec;

/* SB_SINK_PART_TAG_MAX: the run tag of append mode, lowercase hex, NUL included */
#define SB_SINK_PART_TAG_MAX 17

typedef struct sb_sink_spec {
    char *uri;
    sb_format format;
    char *credentials_secret;
    char *args_json;
    sb_sink_mode mode;
    /* Not from the manifest: the run's tag in append mode (part files "part-<tag>-<id>"), set
     * by the driver (the same for a run and its resumes) and handed to the workers at
     * registration; "" in the other modes. */
    char part_tag[SB_SINK_PART_TAG_MAX];
    /* Not from the manifest either: per task, on the worker's copy of the spec (a parquet sink
     * of records, lib/parquet/records.h). schema_json: the run's records schema the controller
     * sent (a JSON list; "[]": the partitions were typed, nothing to enforce), used when
     * args.schema is absent; infer_out: when set and no schema is known, the write infers one
     * from its partition, uses it and hands it over (malloc'd) in *infer_out. */
    const char *schema_json;
    char **infer_out;
} sb_sink_spec;

/* A stream:// sink with sink.args.cacheEpochs: true (epoch 0's output kept and dealt again in
 * the later epochs instead of reading the source again; docs/training.md). */
bool sb_sink_stream_cache(const sb_sink_spec *sink);
/* sink.args.epochs of a stream:// sink (1..100000), 0 when not given: the epochs the stream
 * serves (`run --epochs` overrides it). */
uint32_t sb_sink_stream_epochs(const sb_sink_spec *sink);
/* sink.args.seed of a stream:// sink: true and *seed when given (`run --seed` overrides it). */
bool sb_sink_stream_seed(const sb_sink_spec *sink, uint64_t *seed);

typedef struct sb_resources_spec {
    int64_t cpu_milli;    /* default 1 (1000m) */
    int64_t memory_bytes; /* 0 = not set */
    int64_t gpu;          /* whole devices, default 0 */
} sb_resources_spec;

typedef struct sb_workers_spec {
    int64_t min, max; /* default 1, 16 */
    bool min_set, max_set;
} sb_workers_spec;

/* Resource shapes a stage may run on (placement), as bits. */
#define SB_SHAPE_BIT_CPU 1u
#define SB_SHAPE_BIT_GPU 2u

typedef struct sb_stage_spec {
    char *name;
    char *op;
    char *args_json;    /* JSON object text, or NULL */
    int64_t batch_size; /* records per op call; 0 = whole partition */
    sb_resources_spec resources;
    sb_workers_spec workers;
    /* placement: the shapes ("cpu", "gpu") the stage may run on, in preference order; none
     * given = the one its resources say (gpu when resources.gpu > 0). The decoder makes
     * resources.gpu describe the *first* shape (0 when it is cpu) and keeps the GPUs of a gpu
     * worker in gpu_shape_gpus (resources.gpu as written, at least 1), so code that reads
     * resources.gpu or sb_stage_pool() runs the stage on its first listed shape. */
    char **placement;
    size_t nplacement;
    int64_t gpu_shape_gpus;
    char *shape_args_json; /* shapeArgs: {"gpu": {...}} args per shape, JSON text, or NULL */
    /* When shapeArgs has an entry for the first shape, args_json is the merged args of that
     * shape (what the op runs with) and args_base_json the args as written (owned, freed by
     * sb_pipeline_free); else NULL. */
    char *args_base_json;
} sb_stage_spec;

/* execution.target: what `streambatch plan` must meet (lib/plan/plan.h). */
typedef struct sb_target_spec {
    double rows_per_second; /* rows/s out of the pipeline; 0 = none */
    int64_t deadline_ns;    /* finish the whole input within; 0 = none */
    double max_cost_per_hour;
    bool rows_per_second_set, deadline_set, max_cost_per_hour_set;
} sb_target_spec;

/* execution.pricing: overrides of the controller's prices (per hour). */
typedef struct sb_pricing_spec {
    double cpu_core_hour, memory_gib_hour, gpu_hour;
    bool cpu_core_hour_set, memory_gib_hour_set, gpu_hour_set;
    char *gpu_type; /* the price-table entry of the GPUs, or NULL */
} sb_pricing_spec;

typedef struct sb_execution_spec {
    int64_t memory_budget; /* bytes of partitions in flight; default 2Gi */
    int64_t max_task_retries;
    int64_t max_errored_partitions;
    bool preserve_order;
    sb_exec_mode mode;
    int64_t stall_timeout_ns;     /* no-progress watchdog; default 5m */
    int64_t cpu_slots_per_worker; /* task slots of a CPU worker, 1..64; default 1 */
    sb_target_spec target;
    sb_pricing_spec pricing;
} sb_execution_spec;

typedef struct sb_metadata_spec {
    char *name;
    char *namespace_;
    char *uid;
} sb_metadata_spec;

typedef struct sb_pipeline_spec {
    sb_source_spec source;
    sb_stage_spec *stages;
    size_t nstages;
    sb_sink_spec sink;
    sb_execution_spec execution;
    char *worker_template_json; /* validated WorkerTemplate as JSON text, or NULL */
    bool suspend;
    int64_t ttl_seconds_after_finished;
    bool ttl_set;
} sb_pipeline_spec;

typedef struct sb_pipeline {
    char *api_version;
    char *kind;
    sb_metadata_spec metadata;
    sb_pipeline_spec spec;
    char *status_json; /* accepted on input (objects from the API server) and not interpreted */
} sb_pipeline;

/* The schema of the whole object (for the CRD consistency test and docs). */
const sb_object_schema *sb_pipeline_schema(void);

/* Decodes and validates one document. The struct is always filled as far as possible (with
 * defaults) and must be freed with sb_pipeline_free() even when problems were found. Returns -1
 * only when out of memory. A root that is not an object, or whose kind is not Pipeline, gets
 * one clear problem ("document is a Deployment, not a Pipeline"). */
int sb_pipeline_decode(const sb_node *root, sb_pipeline *out, sb_diags *d);

void sb_pipeline_free(sb_pipeline *p);

/* The ops this build runs (NULL-terminated; the CRD's op rule lists the same), and whether a
 * name is an op the API knows (also the planned image.decode, which the validator refuses). */
extern const char *const sb_op_names[];
int sb_spec_op_known(const char *name);

/* What a stream:// sink cannot serve over `epochs` epochs, with a seed or not (validate checks
 * sink.args; `run --serve` its flags): an exchange over several epochs without cacheEpochs (it
 * is planned once for the whole run), a limit with a seed (the shuffled split order is not the
 * source's). NULL, or why (in buf); *arg (when not NULL) is then the sink argument at fault,
 * "epochs" or "seed". */
const char *sb_spec_stream_plan_check(const sb_pipeline_spec *sp, uint32_t epochs, int seed_set,
                                      const char **arg, char *buf, size_t len);

/* The pool a stage runs in: "cpu" or "gpu" (its first placement shape; without placement, gpu
 * for stages with resources.gpu > 0). */
const char *sb_stage_pool(const sb_stage_spec *st);

/* The shapes (SB_SHAPE_BIT_*) an op can run on, 0 for an unknown op; and those a stage allows
 * (its placement, or its one pool). */
unsigned sb_spec_op_shapes(const char *op);
unsigned sb_stage_shapes(const sb_stage_spec *st);

/* The stage's args for one shape ("cpu", "gpu"): args with shapeArgs.<shape> merged over them
 * (a key of the overlay replaces the same key; for ops that take exactly one of two arguments,
 * such as bench.spin's msPerRecord and msPerMB, giving one drops the other). Returns malloc'd
 * JSON text (the caller frees), "{}" when there are none, or NULL when out of memory. */
char *sb_stage_args_for_shape(const sb_stage_spec *st, const char *shape);

/* What every worker pod gets from the controller (controller/operator/kube.c), shared here so
 * that validation refuses a workerTemplate that would clash with it:
 *   - an emptyDir volume SB_WORKER_SPILL_VOLUME mounted at SB_WORKER_SPILL_MOUNT (the only
 *     writable place: the root filesystem is read-only), where SB_SPILL_DIR and TMPDIR point;
 *   - the env variables sb_worker_env_names (NULL-terminated);
 *   - with a credentialsSecret, one env variable per sb_credentials_keys entry (NULL-terminated)
 *     from the Secret's key of the same name; the first sb_credentials_required of them are
 *     required, the others optional. */
#define SB_WORKER_SPILL_VOLUME "streambatch-spill"
#define SB_WORKER_SPILL_MOUNT "/tmp"
/* The TLS Secret (tls.crt, tls.key, ca.crt) in worker pods, when the operator runs with TLS. */
#define SB_WORKER_TLS_VOLUME "streambatch-tls"
#define SB_WORKER_TLS_MOUNT "/etc/streambatch/tls"
extern const char *const sb_worker_env_names[];
extern const char *const sb_credentials_keys[];
extern const size_t sb_credentials_required;

/* The Secret that gives the workers their S3 credentials: the source's, else the sink's (the
 * validator makes sure that they agree when both are set), or NULL. */
const char *sb_pipeline_credentials_secret(const sb_pipeline *p);

#endif
