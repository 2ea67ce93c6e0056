/* exec.h — internal to the exec operator (worker/ops/exec): its parsed args, the child process
 * it talks to (with the per-process state of framing "arrow": the output stream's reader), the
 * pool of long-lived children, and the framing "arrow" half (arrow.c) that exec.c calls.
 *
 * Memory: an sb_exec_state owns its cfg and, while a task holds it, its sb_exec_child; a child goes
 * back to the pool (which then owns it) or is freed with sb_exec_child_free().
 */
#ifndef SB_WORKER_OPS_EXEC_EXEC_H
#define SB_WORKER_OPS_EXEC_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "arrow/ipc.h"
#include "worker/ops/exec/proc.h"
#include "worker/ops/ops.h"

#define SB_EXEC_MAX_OUTPUT (256u << 20) /* the longest output line or Arrow message */

typedef enum { SB_EXEC_FILTER, SB_EXEC_BATCHES } sb_exec_mode;

typedef struct {
    char **argv;
    char **env; /* the whole environment of the child */
    char *cwd;
    sb_exec_mode mode;
    bool arrow; /* framing "arrow" (else "lines") */
    bool jsonl; /* lines: output lines must be JSON */
    size_t batch;
    int64_t timeout_ms;
    char *key; /* the args, for the pool */
} sb_exec_cfg;

/* A child process and what the worker knows of its streams. */
typedef struct {
    sb_proc *p;
    char *key;        /* its pool key (args; arrow: plus the input schema) */
    bool schema_sent; /* arrow: the input stream's schema was written */
    sb_ipc_reader rd; /* arrow: its output stream */
} sb_exec_child;

typedef struct {
    sb_exec_cfg cfg;
    sb_exec_child *c;
    double cpu0; /* the process's CPU seconds when this task took it */
    bool clean;  /* batches: between batches, nothing outstanding */
    bool cut;    /* filter: the process closed its stdin before taking all input */
    /* lines: the batch being written */
    const sb_column *col;
    size_t row, end;
    bool nl_pending, delim_pending;
    /* arrow: the message being written, from msg_at */
    sb_ipc_buf msg;
    size_t msg_at;
    /* the answer being read */
    sb_op_out *out;
    size_t line_no;
    bool delim_seen; /* batches: the answer to the current batch is complete */
} sb_exec_state;

/* Starts cfg's command as a new child (with this pool key). */
int sb_exec_child_start(const sb_exec_cfg *cfg, const char *key, sb_exec_child **out, sb_err *err);
/* A pooled child for key that is alive and silent, or NULL. */
sb_exec_child *sb_exec_pool_take(const char *key);
void sb_exec_child_free(sb_exec_child *c);

/* Framing "arrow" (arrow.c): exec's process and finish. */
int sb_exec_arrow_process(sb_exec_state *s, const sb_batch *in, size_t first, size_t n,
                          sb_op_out *out, sb_err *err);
int sb_exec_arrow_finish(sb_exec_state *s, sb_op_out *out, sb_err *err);

#endif
