/* ops.h — the worker's built-in operators: a registry of implementations behind one vtable,
 * and sb_op_out, the output side every operator appends its records to.
 *
 * Running a stage over the partitions of a task (what the task runtime does):
 *
 *     const sb_op_impl *op = sb_op_find(stage->op);     // NULL: not in this build
 *     void *st;  op->init(stage->args_json, &st, &err);
 *     sb_op_out *out = sb_op_out_new(target_bytes, emit, ud, &err);
 *     stage->batch_size > 0:   sb_op_feed *f = sb_op_feed_new(op, st, batch_size, out, &err);
 *     for each input partition:  sb_batch_open(...);
 *                                sb_op_feed_push(f, batch, &err);          // with a batchSize
 *                                sb_op_run(op, st, batch, op->default_batch, out, &err); // without
 *     sb_op_feed_flush(f, &err);  sb_op_feed_free(f);   // the short last batch
 *     op->finish(st, out, &err);  sb_op_out_flush(out, &err);
 *     op->free(st);  sb_op_out_free(out);
 *
 * The batch rule. A stage with a batchSize B gives its op exactly B rows per process() call,
 * gathered across the task's input partitions (Ray Data's map_batches): a partition's whole
 * batches are processed in place, its remaining rows are carried (copied) into the next
 * partition's first batch, and only the task's last call (sb_op_feed_flush, before finish) may
 * be shorter. A partition whose columns differ from the carried rows' flushes them first, as
 * a short batch. An empty partition is handed over (0 rows) only when nothing is carried.
 * When the op's last call on a partition ends before its last row (the rest is carried), the
 * op's input_end hook (if any) is called with that partition before it goes.
 * Without a batchSize, an op's default_batch cuts each partition on its own (0: one call per
 * partition), so calls follow the partitions as they come: this is for ops that care about
 * a call's size only as a bound (exec's framing, tensor.mlp's copies), not as a promise.
 *
 * Operators never build partitions themselves: they append rows to the sb_op_out, which
 * flushes a partition to the runtime's emit callback whenever its blob reaches target_bytes
 * (dynamic partitioning across the inputs of a task), and the rest on sb_op_out_flush().
 *
 * Operators of this build: identity, bench.spin, bench.sleep (any schema); filter, project
 * (jsonl records: the "record" utf8/binary column); exec (user code in a child process,
 * framing lines or arrow: worker/ops/exec, docs/exec.md); plugin (native code over the Arrow
 * C Data Interface: worker/ops/plugin); tensor.mlp (an MLP over a tensor column or a jsonl
 * field, CPU: worker/ops/tensor); image.resize, image.normalize (the image source's pixel
 * columns: worker/ops/image). An op not in this build: sb_op_find() returns NULL and the caller
 * reports "op X is not available in this worker build" (validate rejects it first).
 *
 * Memory and threads:
 *  - sb_op_impl tables are static and immutable; sb_op_find() never allocates.
 *  - init() allocates the op state; the caller owns it and frees it with impl->free() (NULL is
 *    fine). One state belongs to one thread at a time; different states are independent.
 *  - Lifetime of an op state (worker/ops/statecache.h). An op with a reset hook has its state
 *    made once per worker and stage+args, not once per task: init when no idle state of that
 *    op, stage name and exact args JSON is kept; reset after each task that finished
 *    successfully, and the state waits, idle, for the worker's next task of that stage (one
 *    task holds it at a time); free when it is evicted (at most 2 x slots idle states per
 *    worker, the least recently used goes), when its task failed (it may be half-way through
 *    anything), when reset fails, and at the worker's exit or sb_op_shutdown(). So init does
 *    what every task of the stage shares (args, models, streams, pinned and device buffers),
 *    and reset clears what one task leaves behind (counters, pending rows, flags set per task
 *    such as input_valid_json, which the runtime sets again for every task) and frees the
 *    memory sized by the task's rows (an idle state is outside the budget while the worker
 *    runs other stages' tasks: sort's middle op kept its routed chunk, up to half a share,
 *    until it freed it at reset). An op without
 *    reset (plugin: its ABI promises init, process, finish, free per task; exec: its own
 *    pool keeps the process per worker already, exec.c) keeps init and free per task. A
 *    filter that absorbed the next op (absorb_next) is freed at the task's end, with the state
 *    it absorbed: a chain is not kept. An op that borrows the state it absorbed
 *    (absorb_borrows: tensor.mlp) is kept, and so is the state it borrowed, each on its own.
 *  - process() reads `in` (owned by the caller, not retained past the call) and appends to
 *    `out` (owned by the caller).
 *  - sb_op_out: created and freed by the caller; it copies every value appended. Each blob it
 *    emits is owned by the emit callback from then on (also when the callback fails), freed
 *    with sb_part_free(). sb_op_out_free() discards rows not yet flushed.
 */
#ifndef SB_WORKER_OPS_OPS_H
#define SB_WORKER_OPS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"
#include "partition/partition.h"

struct sb_pq_pred;

/* Name of the single column of record-format partitions (jsonl, text, binary). */
#define SB_OP_RECORD_COLUMN "record"

typedef struct sb_op_out sb_op_out;

/* Receives one output partition (blob[0..len), `rows` rows) and owns it from now on. Nonzero
 * fails the append or flush that emitted it. A callback that sets its reason in the sb_err the
 * op was given (the task runtime does: the next op of a fused chain fails into it) has that
 * message kept and wrapped; otherwise the flush says the consumer refused. */
typedef int (*sb_op_emit_fn)(void *blob, size_t len, uint64_t rows, void *ud);

/* ---- the output side ------------------------------------------------------------------- */

/* An output that flushes a partition whenever the blob reaches target_bytes (> 0). The schema
 * is set by the first sb_op_out_set_schema*() or sb_op_out_append_rows(). NULL + err. */
sb_op_out *sb_op_out_new(size_t target_bytes, sb_op_emit_fn emit, void *ud, sb_err *err);

/* Discards unflushed rows and frees everything. NULL is fine. */
void sb_op_out_free(sb_op_out *o);

/* From now on the emitted blobs are unsealed (sb_batch_builder_finish_unsealed: checksums 0), for
 * an emit callback that opens them in this process with SB_BATCH_OPEN_SKIP_CHECKSUM (the next
 * op of a task's chain). */
void sb_op_out_set_unsealed(sb_op_out *o);

/* A buffer an output finishes its partitions into instead of a new one each time, unsealed (the
 * emit callback opens them with SB_BATCH_OPEN_SKIP_CHECKSUM: a checksum is a pass over the whole
 * batch), lent to the emit callback, which gives it back (lent = false) when it is done with the
 * partition, or frees the blob when it is not p. Only partitions of at most
 * SB_OP_SPARE_MAX bytes: the owner (a thread, sb_op_feed's carry) keeps p until it ends, so it is
 * memory outside the store's budget. Why: a batch of 1,024 images is a 48 MiB blob, and a fresh
 * one per batch cost the GPU worker the kernel's zeroing of its pages (perf, issue 36). */
typedef struct {
    void *p; /* sb_part_alloc'd, cap bytes; NULL: none yet */
    size_t cap;
    bool lent; /* p is a partition the emit callback has not given back */
} sb_op_spare;

#define SB_OP_SPARE_MAX ((size_t)64 << 20)

/* From now on flushes finish into *s (NULL: no spare). */
void sb_op_out_set_spare(sb_op_out *o, sb_op_spare *s);

/* For rows an op holds and cuts itself (sb_op_out_cut) at about `bytes` to sort or spill them
 * in this process (the exchange ops' held rows; bytes > 0): unsealed as above, and a records
 * schema (one binary/utf8 column) is built in place with its values reserved for `bytes` at
 * once (address space; pages are touched as rows arrive), so that a cut copies only the
 * offsets, not the rows: the rows are in memory once, not twice, while they are sorted or
 * written out. More rows than that still work (the buffer grows; the cut then copies). Call
 * before the schema is set. */
void sb_op_out_set_held(sb_op_out *o, size_t bytes);

/* A held output's blob (the last its cut made), done with: back to o as the buffer of its next
 * rows (sb_batch_builder_recycle), so that cutting and freeing held rows over and over does not
 * make the heap grow. Any other blob is freed. Takes blob. */
void sb_op_out_recycle(sb_op_out *o, void *blob);

/* Sets the output schema (copied). If a schema is already set it must be identical (names,
 * types, nullability), else -1 + err; except that fixed-size-list widths may change (images of
 * different sizes): the pending rows are then flushed as a partition and the new schema
 * starts the next one. */
int sb_op_out_set_schema(sb_op_out *o, const sb_field *fields, size_t n, sb_err *err);

/* Sets the output schema to that of `b` (same rule). */
int sb_op_out_set_schema_like(sb_op_out *o, const sb_batch *b, sb_err *err);

bool sb_op_out_has_schema(const sb_op_out *o);

/* Appends one value as a new row; the schema must have exactly one column, of type binary or
 * utf8 (utf8: the value must be valid UTF-8). Flushes when full. */
int sb_op_out_append_binary(sb_op_out *o, const void *p, size_t n, sb_err *err);

/* Appends rows [first, first+n) of `in` unchanged (the schema becomes in's if none is set,
 * and must match it otherwise). Flushes partitions of about target_bytes as it goes. */
int sb_op_out_append_rows(sb_op_out *o, const sb_batch *in, size_t first, size_t n, sb_err *err);

/* Appends runs of rows of `in` unchanged, in order: run i is rows [first[i], first[i]+n[i]).
 * The same as one sb_op_out_append_rows() per run, cheaper for many short runs (a filter keeping
 * scattered rows hands them over here in batches): the schema is checked once per call. */
int sb_op_out_append_runs(sb_op_out *o, const sb_batch *in, const size_t *first, const size_t *n,
                          size_t nruns, sb_err *err);

/* Like sb_op_out_append_rows() for columns described elsewhere (an Arrow array a plugin
 * returned, arrow/cdata.h's view): rows [first, first+n) of every column, fields[] their
 * schema. row_bytes is not used (partitions are cut where the rows reach the target, the same
 * whichever way the rows are split across calls). */
int sb_op_out_append_columns(sb_op_out *o, const sb_field *fields, const sb_column *cols,
                             size_t ncols, size_t first, size_t n, size_t row_bytes, sb_err *err);

/* Like sb_op_out_append_columns() where some columns may be from's own (an op or plugin that
 * passes an input column through, whole or in part: the same values buffer, offsets inside the
 * column's): their UTF-8 was checked when from was made and is not checked again. Every other
 * column is checked as sb_op_out_append_columns() checks it. from is only read, during the call. */
int sb_op_out_append_columns_of(sb_op_out *o, const sb_batch *from, const sb_field *fields,
                                const sb_column *cols, size_t ncols, size_t first, size_t n,
                                sb_err *err);

/* Like sb_op_out_append_columns() where the columns' rows start at different places: rows
 * [firsts[ci], firsts[ci]+n) of column ci (an op's new column of n rows beside the input's
 * columns at rows [first, first+n): firsts[ci] = 0 for the one, first for the others). */
int sb_op_out_append_columns_at(sb_op_out *o, const sb_field *fields, const sb_column *cols,
                                const size_t *firsts, size_t ncols, size_t n, size_t row_bytes,
                                sb_err *err);

/* For operators that build rows column by column: the builder (NULL before a schema is set).
 * After appending complete rows through it, call sb_op_out_rows_done() to let the output
 * flush when full. */
sb_batch_builder *sb_op_out_builder(sb_op_out *o);
int sb_op_out_rows_done(sb_op_out *o, sb_err *err);

/* Emits the pending rows as a partition (nothing when there are none). */
int sb_op_out_flush(sb_op_out *o, sb_err *err);

/* Emits the pending rows as a partition, also when there are none (a partition of 0 rows with
 * the schema; nothing when no schema is set): an exchange's map half makes one partition per
 * bucket (worker/ops/exchange). */
int sb_op_out_cut(sb_op_out *o, sb_err *err);

/* Emits the pending rows, then blob (a whole partition of `rows` rows that another output made,
 * sealed as this output's would be) as the next partition. The blob is the emit callback's from
 * now on, also on failure. */
int sb_op_out_put_blob(sb_op_out *o, void *blob, size_t len, uint64_t rows, sb_err *err);

/* Totals so far: rows and partitions emitted, and the bytes of the emitted blobs. */
uint64_t sb_op_out_rows_emitted(const sb_op_out *o);
uint64_t sb_op_out_parts_emitted(const sb_op_out *o);
uint64_t sb_op_out_bytes_emitted(const sb_op_out *o);

/* ---- operators ------------------------------------------------------------------------- */

typedef struct sb_op_impl {
    const char *name;
    /* Parses and checks args_json (a JSON object or NULL) and creates the state. */
    int (*init)(const char *args_json, void **state, sb_err *err);
    /* Processes rows [first, first+n) of `in` (n may be 0). Errors name the record (its row
     * index in `in`). */
    int (*process)(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                   sb_err *err);
    /* Emits what the state still buffers (after the task's last input). */
    int (*finish)(void *state, sb_op_out *out, sb_err *err);
    void (*free)(void *state);
    /* Makes the state of a task that finished successfully ready for another task of the same
     * stage and args (see "Lifetime of an op state"): clears per-task counters, pending rows
     * and per-task flags, frees what the task's rows sized, keeps what init made for all
     * tasks. Nonzero + err: the state is
     * freed instead. NULL: the op's state is made and freed per task. */
    int (*reset)(void *state, sb_err *err);
    /* Releases what the op keeps across tasks (exec's pooled processes, tensor.mlp's loaded
     * models), called by sb_op_shutdown() once no task runs; NULL when it keeps nothing. */
    void (*shutdown)(void);
    /* CPU seconds the op's own child processes used for this state since init or reset (exec's
     * program), counted in the task's CPU time; NULL when an op has none. */
    double (*child_cpu)(void *state);
    /* init may fail for a reason a later attempt may not meet (tensor.mlp fetches its weights);
     * false: an init failure is a bad argument or a missing library or symbol, so the runtime
     * reports it as permanent (sb_err.permanent: not retried, the pipeline fails). */
    bool init_may_recover;
    /* Rows per process() call when the stage sets no batchSize (0: a whole partition): a cut
     * of each partition on its own, the last call of a partition shorter (see the batch rule;
     * a stage's batchSize is exact across partitions instead). */
    size_t default_batch;
    /* Every record this op emits in the records column is one JSON text that the strict scan
     * (json.h) accepted, valid UTF-8 (filter: it passes on only records it scanned). */
    bool emits_valid_json;
    /* Called (when set) by the runtime after init when the op before this one in the same task
     * emits_valid_json: this op's input records are then known valid and it may find their
     * members without checking them again (sb_op_json_find). NULL: not used. */
    void (*input_valid_json)(void *state);
    /* Called (when set) by the runtime after every op of a task is initialized, with the op
     * that follows this one in the same task: true when this op takes over that op's work — it
     * emits from then on what `next` would have emitted from this op's output, and owns
     * next_state (its free() frees it, unless absorb_borrows) — and the runtime drops `next`
     * from the chain. false (next_state untouched): the two run one after the other as usual.
     * filter absorbs project (one scan of each record finds the compared field and the kept
     * fields, and kept records are not copied into a partition only to be rewritten). */
    bool (*absorb_next)(void *state, const struct sb_op_impl *next, void *next_state);
    /* With absorb_next: the op only borrows next_state for the task. The runtime keeps it and
     * frees it or puts it back in the worker's cache on its own, and this op's reset() and
     * free() forget it (never free it). So the chain is kept: tensor.mlp absorbs the project
     * after it, and its model, CUDA streams and pinned buffers live per worker, not per task. */
    bool absorb_borrows;
    /* Called (when set) by sb_op_feed after its last process() call on `in` when that call did
     * not reach in's last row (the rest was carried into the next batch), before `in` goes:
     * an op that keeps a batch of `in` in flight across calls (tensor.mlp on CUDA overlaps a
     * batch's copy with the previous one's run, and appends that output from `in` rows at the
     * next call, or at once after a partition's last row) completes it now. */
    int (*input_end)(void *state, const sb_batch *in, sb_op_out *out, sb_err *err);
    /* Called (when set) by the runtime for the first op of a task that reads a Parquet source:
     * true with *pred set (pointing into state) when the op keeps only rows satisfying pred, so
     * the reader may skip row groups whose statistics exclude it (lib/parquet/prune.h); the op
     * still runs on every row read. filter gives its comparison. */
    bool (*pushdown)(void *state, struct sb_pq_pred *pred);
    /* Bytes this task's state wrote to spill files (sb_op_spill_file), read by the runtime
     * after finish, before the state is reset (when set). */
    uint64_t (*spilled)(void *state);
    /* Called (when set) by the runtime before a task's first input, with the task's index in
     * its op: sort with stable: true orders ties by (task index, row) (source order when its op
     * reads the source). NULL: not used. */
    void (*task_begin)(void *state, uint64_t task_index);
    /* Called (when set) by the runtime before a task's first input with `room`, the bytes of
     * its worker's store budget one task's ops may hold (the store budget over twice the
     * slots): the op keeps the rows it holds (tables, runs' chunks, rows gathered whole) within
     * the smaller of its own share and room from then on, and returns that bound. The runtime
     * reserves the bounds of a task's ops in the store until the task ends, so the store
     * spills its partitions to make room and the op's memory is counted in the budget, not on
     * top of it (issue 41). NULL: the op holds no more than a partition at a time. */
    uint64_t (*hold)(void *state, uint64_t room);
} sb_op_impl;

/* The implementation of a built-in op, or NULL when this build does not have it. */
const sb_op_impl *sb_op_find(const char *name);

/* Calls op->process over all rows of `in`, batch_size rows per call (0: all in one call). */
int sb_op_run(const sb_op_impl *op, void *state, const sb_batch *in, size_t batch_size,
              sb_op_out *out, sb_err *err);

/* Exactly batch_size rows per process() call across partitions (the batch rule above). The
 * feed reads `in` only during a push, and copies the rows it carries. */
typedef struct sb_op_feed sb_op_feed;

/* A feed of op (its state, its output) in batches of batch_size (> 0) rows. NULL + err. */
sb_op_feed *sb_op_feed_new(const sb_op_impl *op, void *state, size_t batch_size, sb_op_out *out,
                           sb_err *err);

/* Processes in's rows in order: the carried rows completed to a batch first, then whole
 * batches of in where they lie, and keeps the remainder. */
int sb_op_feed_push(sb_op_feed *f, const sb_batch *in, sb_err *err);

/* Processes the carried rows, if any, as one short batch (the task's last; before finish). */
int sb_op_feed_flush(sb_op_feed *f, sb_err *err);

/* Rows carried now (< batch_size). */
size_t sb_op_feed_carried(const sb_op_feed *f);

/* Discards carried rows. NULL is fine. */
void sb_op_feed_free(sb_op_feed *f);

/* Gives a task error of op `name` (init, process or finish) the prefix "op NAME: " exactly
 * once: ops' own messages begin with their name ("filter: record 3 ...", "exec: ...", "plugin
 * libx: ..."), some already with "op NAME:" (args checks), others with neither ("out of
 * memory"), and the runtime wrapping each again printed it twice ("op filter: op filter:").
 * A message naming another op (filter running an absorbed project: "project: record 3") keeps
 * that name after the prefix. The data flag is kept. Returns -1. */
int sb_op_err_context(sb_err *err, const char *name);

/* The index of the records column of `in`: "record", else its only binary/utf8 column. -1 +
 * err (prefixed with `op`) otherwise. */
int sb_op_record_column(const sb_batch *in, const char *op, sb_err *err);

/* A printable excerpt of a record for messages: at most cap-4 bytes of p[0..n) (cap >= 8),
 * control characters as '?', "..." when cut, never cutting a UTF-8 sequence. Returns buf. */
const char *sb_op_excerpt(const char *p, size_t n, char *buf, size_t cap);

/* What operators keep across tasks: exec's long-lived processes (worker/ops/exec),
 * tensor.mlp's loaded weights, the worker's idle op states (statecache.h). The processes'
 * resident memory (counted in the worker's), and releasing all of it at worker shutdown: the
 * idle states first (a tensor.mlp state points at a model), then every op's shutdown hook. */
uint64_t sb_op_children_rss(void);
void sb_op_shutdown(void);
/* At a worker's exit that leaves ops running (runtime.h sb_worker_abandoned): SIGKILL to every
 * process group the ops started (exec's), nothing freed, nothing waited for. */
void sb_op_kill_children(void);

/* Where ops spill what outgrows their share of the memory budget (groupby's sorted runs): the
 * worker's spill directory, set once at worker start (copied); "/tmp" until then. Spill files
 * are made with sb_op_spill_file(): unnamed (O_TMPFILE, else created and unlinked at once), so
 * they vanish with the last descriptor, even when the worker is killed. NULL + err. */
void sb_op_set_spill_dir(const char *dir);
FILE *sb_op_spill_file(sb_err *err);

/* Cancel. The task runtime binds a running attempt's cancel flag to the slot thread that runs
 * it (sb_op_cancel_bind; the flag is the runtime's, set from another thread when the controller
 * says the attempt lost to a copy, or when the worker exits). An op whose one call may run long
 * checks sb_op_cancelled() as it goes (bench.spin and bench.sleep do, every few ms) and then
 * fails with sb_op_cancel_err(): the runtime discards what the attempt made and reports nothing.
 * Ops that never check are cut short between calls (the runtime checks before every input
 * partition) or, at the worker's exit, abandoned. Thread-local: another thread's ops see their
 * own flag. */
void sb_op_cancel_bind(int *flag); /* NULL: nothing bound (sb_op_cancelled() is false) */
bool sb_op_cancelled(void);
int sb_op_cancel_err(sb_err *err, const char *op); /* sets "op OP: cancelled", returns -1 */

/* Data errors. An op that fails because of the records themselves (invalid JSON or UTF-8, a
 * record of the wrong kind, no records column) sets err with sb_err_data() (core/err.h): such a
 * failure would repeat on every retry, so the runtime reports it as deterministic and the
 * controller errors the partition at once. */

#endif
