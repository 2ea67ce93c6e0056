/* runtime.h — the worker process: registers with the controller, serves its partitions to
 * peers (Data service over its store), runs tasks in `slots` threads, and heartbeats.
 *
 * A task: read the inputs (a source split, or partitions fetched from peers — or pinned from
 * the own store when local), run the fused ops back to back, and put the outputs into the
 * store as partitions "s<op>-t<task>-p<seq>" (or, for the last op, write them to the sink as
 * part files), then report the completion: with the slot's next PollTasks when the controller
 * takes batched completions (RegisterReply.batched_completions), else by CompleteTask at once.
 * Releases in the controller's replies free store partitions. A worker the controller declared lost
 * is told to shut down.
 *
 * The worker also serves Worker.Rebind beside Data: a new controller leader (after a failover)
 * tells it where the Control service now is. A Rebind is accepted when its pipeline matches the
 * worker's (when both are set) and its epoch is >= the last accepted one; the worker then
 * switches its Control channel (the old one is freed once no thread uses it), registers again
 * with every partition it holds, and goes on polling. Completion reports of tasks handed out by
 * an earlier controller are dropped then (their store outputs released): the new leader re-runs
 * what it needs.
 *
 * Controller unreachable (poll, completion, heartbeat, re-registration fail): the worker keeps
 * its store and retries with backoff (200 ms doubling to 2 s). Once nothing reached the
 * controller for controller_lost_timeout_ms (a Rebind resets that clock) it gives up:
 * sb_worker_run() returns -1 ("controller unreachable ...").
 *
 * Cancel. The controller cancels attempts it no longer needs (PollTasksReply.cancel,
 * HeartbeatReply.cancel: the loser of a speculative copy's race, a task handed out again): the
 * attempt's flag is set, its ops see it (ops.h "Cancel"; the runtime also checks it before every
 * input partition), and the attempt ends without a report, its staged sink parts and unpublished
 * store outputs removed, its slot free for the next poll. A worker that stops (told to exit, a
 * signal, the controller lost) cancels every running attempt the same way instead of running
 * them out.
 *
 * sb_worker_run() blocks until the controller says shutdown, sb_worker_request_stop() is called
 * (e.g. from a SIGTERM handler), or a fatal error; it cleans up everything it started, after
 * waiting up to a second for the slots' cancelled attempts to end (else see
 * sb_worker_abandoned()).
 */
#ifndef SB_WORKER_RUNTIME_H
#define SB_WORKER_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "rpc/rpc.h"

typedef struct sb_worker_config {
    const char *controller;  /* "host:port" of the Control service */
    const char *id;          /* unique worker id */
    const char *pool;        /* "cpu" or "gpu" */
    uint32_t slots;          /* tasks at once (threads); default 1 */
    const char *listen;      /* Data service address, default "127.0.0.1:0" */
    const char *advertise;   /* host peers use to reach it; default the listen host */
    size_t store_budget;     /* bytes of partitions in memory; default 1 GiB */
    const char *spill_dir;   /* default $TMPDIR, else /tmp */
    int register_timeout_ms; /* waiting for the controller; default 60000 */
    uint32_t accelerators;   /* 0: every slot runs ops at once. N: at most N tasks run their ops
                                at a time (slots share N accelerators), while the other slots
                                fetch inputs and write outputs: I/O overlaps the device */
    const char *pipeline;    /* "namespace/name" this worker runs for; a Rebind must name it.
                                NULL/"": the worker takes no Rebind */
    uint64_t epoch;          /* initial accepted epoch: Rebinds with a lower one are refused */
    int controller_lost_timeout_ms; /* give up after the controller was unreachable this long;
                                       default 120000 */
    const char *metrics_addr;       /* "HOST:PORT" to serve Prometheus /metrics (worker/wmetrics.h);
                                       NULL/"": not served */
    const sb_rpc_opts *rpc;         /* the Data/Worker server, the Control channel and fetches
                                       from peers (mutual TLS: rpc/tlsdir.h); its auth (the
                                       pipeline's credentials, rpc/auth.h) is required */
} sb_worker_config;

typedef struct sb_worker sb_worker;

/* Runs the worker (see above). 0 on an orderly shutdown, -1 + err otherwise. */
int sb_worker_run(const sb_worker_config *cfg, sb_err *err);

/* Asks a running worker to stop (async-signal-safe: it only sets a flag). */
void sb_worker_request_stop(void);
/* The same, from a parent that knows no partition here is needed any more (a local run that
 * ended: SIGUSR1 from `streambatch run`): the worker leaves as a worker told to exit does, without
 * lingering for late fetch readers. Async-signal-safe. */
void sb_worker_request_calm_stop(void);

/* 1 after sb_worker_run() returned leaving slot threads running (their attempts cancelled, but an
 * op did not stop within a second): nothing they use was freed, and the caller must end the
 * process at once with _exit() (no atexit handlers, no other cleanup racing those threads). */
int sb_worker_abandoned(void);

#endif
