/* run.h — `streambatch run`: one pipeline on this machine with the embedded controller and
 * local worker processes. Validates the manifest (with --set overrides), plans the source
 * splits, starts the Control service and the workers, shows progress (a live display on a
 * terminal, a plain line every few seconds otherwise), commits the sink on success and prints a
 * summary per stage. Ctrl-C / SIGTERM stop the workers (no orphans, no _SUCCESS). The committed
 * work is kept in a checkpoint file while the run goes (runckpt.h): a run that did not finish,
 * even one whose process was SIGKILLed, continues with --resume without redoing it. What a
 * SIGKILLed run left (its run dir, its workers' spill files) is removed by the next run of the
 * same pipeline once that process is gone; a second run beside a live one is refused (exit 2;
 * runckpt.h, the run record).
 *
 * Exit codes: 0 succeeded, 1 the pipeline failed or was interrupted, 2 usage or invalid spec.
 */
#ifndef SB_CTL_RUN_H
#define SB_CTL_RUN_H

#include <stddef.h>
#include <stdint.h>

/* Most "path=value" overrides a run takes (64 --set, a placement per stage from --plan, and
 * --cpu-slots); more is refused, never dropped. */
#define SB_RUN_MAX_SETS 160

typedef struct sb_run_opts {
    const char *file;
    int cpus;                  /* CPU workers; 0 = number of online CPUs */
    int gpus;                  /* GPU workers (accelerator slots); 0 = none */
    const char *memory_budget; /* overrides spec.execution.memoryBudget */
    const char **sets;         /* "path=value" overrides, at most SB_RUN_MAX_SETS */
    size_t nsets;
    const char *worker_bin;      /* default: streambatch-worker next to this binary (and for the
                                  * gpu pool streambatch-worker-gpu, when it is there); set: every
                                  * pool runs it */
    const char *run_dir;         /* default: a new directory under $TMPDIR */
    int progress_interval_ms;    /* non-terminal progress lines; default 5000 */
    int heartbeat_timeout_ms;    /* default 3000 */
    const char *summary_json;    /* write the summary as JSON to this file (tests, benchmarks) */
    const char *metrics_addr;    /* serve Prometheus /metrics here for the run (docs/metrics.md) */
    int resume;                  /* continue from the checkpoint of an earlier run (runckpt.h) */
    const char *checkpoint;      /* the checkpoint file; default runckpt.h's path */
    const char *tls_dir;         /* mutual TLS between the controller and the workers (tls.crt,
                                    tls.key, ca.crt: rpc/tlsdir.h); NULL/"": plaintext */
    const char *tls_server_name; /* checked in the certificates; NULL: "streambatch" */
    const char *serve;           /* a stream:// sink: the Control service listens here and serves
                                    consumers (Control.StreamNext); NULL: not serving */
    int epochs;                  /* with serve: epochs of the stream (0: 1) */
    uint64_t seed;               /* with serve and seed_set: each epoch's splits shuffled */
    int seed_set;
} sb_run_opts;

int sb_run(const sb_run_opts *o);

#endif
