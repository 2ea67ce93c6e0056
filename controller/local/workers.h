/* workers.h — the local backend: worker processes on this machine (fork/exec of
 * streambatch-worker, or of streambatch-worker-gpu for pools with accelerators when
 * worker_gpu_bin is set), one set per pool, respawned when they die.
 *
 * Each worker gets a unique id ("cpu-0", "cpu-0-r1" after a respawn: a respawned worker is a
 * new worker with an empty store), its own spill directory and log file under run_dir, its own
 * process group (so a terminal's Ctrl-C reaches the CLI, which stops workers in order), and
 * PR_SET_PDEATHSIG so no worker outlives a killed parent. A monitor thread reaps exits and
 * reports them through on_exit (the controller starts recovery at once).
 *
 * GPUs: a worker of a pool with accelerators gets CUDA_VISIBLE_DEVICES naming one device, its
 * index in the pool modulo the devices the run may use (CUDA_VISIBLE_DEVICES's entries when
 * the run has it, else the driver's /dev/nvidiaN): `--gpus 2` on two GPUs puts one worker on
 * each, and its exec processes see only that one; more workers than GPUs share them in turn.
 *
 * Memory: the backend copies the config; sb_local_stop() kills what is left and frees it.
 */
#ifndef SB_CTL_LOCAL_H
#define SB_CTL_LOCAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "controller/ctl/backend.h"
#include "core/err.h"

typedef struct sb_local sb_local;

typedef struct sb_local_pool {
    const char *pool; /* "cpu" or "gpu" */
    uint32_t workers;
    uint32_t slots;        /* per worker */
    uint32_t accelerators; /* per worker: slots that run ops at once (0 = all) */
} sb_local_pool;

typedef struct sb_local_config {
    const char *worker_bin; /* path of streambatch-worker */
    /* pools with accelerators run this one (streambatch-worker-gpu); NULL: worker_bin */
    const char *worker_gpu_bin;
    const char *controller; /* "127.0.0.1:port" */
    const char *run_dir;    /* logs and spill directories (created) */
    uint64_t store_budget;  /* per worker */
    sb_local_pool pools[4];
    size_t npools;
    int respawn;           /* replace workers that die */
    uint32_t max_respawns; /* per slot; default 10 */
    const char *tls_dir;   /* passed as --tls-dir (and --tls-server-name) to every worker;
                              NULL: plaintext */
    const char *tls_server_name;
    /* the run's credentials (rpc/auth.h), given to every worker in its environment (never on
     * its command line, which every local user can read) */
    const char *auth_token, *auth_controller_sha256;
    void (*on_exit)(void *ud, const char *worker_id, const char *why);
    void *ud;
} sb_local_config;

sb_local *sb_local_start(const sb_local_config *cfg, sb_err *err);
/* Number of worker slots (processes alive or not) and the pid/id of slot i (0 when dead). */
size_t sb_local_count(const sb_local *l);
pid_t sb_local_pid(sb_local *l, size_t i, char *id, size_t idlen);
/* Sends sig to worker i (fault injection in tests; SIGSTOP/SIGKILL). */
int sb_local_signal(sb_local *l, size_t i, int sig);
/* Processes started so far (first starts plus respawns). */
uint64_t sb_local_started(const sb_local *l);
/* Sum of the resident memory of the live workers and their child processes (exec's; from
 * /proc, children found at most once a second), bytes. */
uint64_t sb_local_rss(sb_local *l);
/* SIGTERM to every worker, SIGKILL after grace_ms, reaps them all, frees. NULL is a no-op. */
void sb_local_stop(sb_local *l, int grace_ms);
/* The local backend behind the generic interface (controller/ctl/backend.h). set_pool_size can
 * shrink a pool (its highest-numbered workers get SIGTERM and are not respawned) or grow it. */
sb_backend sb_local_backend(sb_local *l);

#endif
