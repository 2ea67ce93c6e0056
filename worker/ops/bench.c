/* bench.c — identity, bench.spin and bench.sleep: operators that pass their input through
 * unchanged; spin burns a configured amount of thread CPU time, sleep waits a configured wall
 * time, per record or per MiB of input record bytes; both stop early, failing the call, when
 * their attempt is cancelled (ops.h "Cancel").
 *
 * Accuracy: the cost of each process() call is the configured amount for its rows. Overshoot
 * of one call (the spin loop checks the clock every few microseconds; a sleep wakes up late
 * by the timer slack) is carried over and taken off the next call, so the total over a task
 * converges to the configured amount rather than drifting up with the number of calls.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/ops/impls.h"

/* ---- identity ------------------------------------------------------------------------ */

static int identity_init(const char *args_json, void **state, sb_err *err)
{
    (void)args_json;
    (void)err;
    *state = NULL;
    return 0;
}

static int identity_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                            sb_err *err)
{
    (void)state;
    if (n == 0)
        return sb_op_out_set_schema_like(out, in, err);
    return sb_op_out_append_rows(out, in, first, n, err);
}

static int no_finish(void *state, sb_op_out *out, sb_err *err)
{
    (void)state;
    (void)out;
    (void)err;
    return 0;
}

static void no_free(void *state)
{
    (void)state;
}

/* identity keeps nothing per task; the hook makes its (empty) state reusable like the others */
static int no_reset(void *state, sb_err *err)
{
    (void)state;
    (void)err;
    return 0;
}

const sb_op_impl sb_op_identity_impl = {
    .name = "identity",
    .init = identity_init,
    .process = identity_process,
    .finish = no_finish,
    .free = no_free,
    .reset = no_reset,
};

/* ---- bench.spin / bench.sleep ---------------------------------------------------------- */

#define MAX_MS 86400000.0 /* one day per record or per MiB: anything more is a mistake */

typedef struct {
    const char *op;
    bool per_record; /* else per MiB */
    double ms;       /* per record or per MiB */
    uint32_t expand; /* each record is emitted this many times (args.expand, default 1) */
    int64_t debt_ns; /* overshoot of earlier calls, taken off the next */
    uint64_t spent_ns;
} cost_st;

static int cost_init(const char *op, const char *args_json, void **state, sb_err *err)
{
    cJSON *root = args_json != NULL ? cJSON_Parse(args_json) : NULL;
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sb_err_set(err, "op %s: args must be an object with msPerRecord or msPerMB", op);
    }
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "msPerRecord");
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(root, "msPerMB");
    int rc = 0;
    cost_st *st = NULL;
    if ((pr == NULL) == (pm == NULL)) {
        rc = sb_err_set(err, "op %s: give exactly one of args.msPerRecord and args.msPerMB", op);
    } else {
        const cJSON *v = pr != NULL ? pr : pm;
        const char *name = pr != NULL ? "msPerRecord" : "msPerMB";
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble > MAX_MS) {
            rc =
                sb_err_set(err, "op %s: args.%s must be a number from 0 to %.0f", op, name, MAX_MS);
        } else if ((st = calloc(1, sizeof *st)) == NULL) {
            rc = sb_err_set(err, "op %s: out of memory", op);
        } else {
            st->op = op;
            st->per_record = pr != NULL;
            st->ms = v->valuedouble;
            st->expand = 1;
            const cJSON *ex = cJSON_GetObjectItemCaseSensitive(root, "expand");
            if (ex != NULL &&
                (!cJSON_IsNumber(ex) || ex->valuedouble < 1 || ex->valuedouble > 1000 ||
                 ex->valuedouble != floor(ex->valuedouble))) {
                rc = sb_err_set(err, "op %s: args.expand must be an integer from 1 to 1000", op);
                free(st);
                st = NULL;
            } else if (ex != NULL) {
                st->expand = (uint32_t)ex->valuedouble;
            }
        }
    }
    cJSON_Delete(root);
    *state = st;
    return rc;
}

/* Data bytes of rows [first, first+n) over all columns (the records' bytes for record
 * formats). */
static uint64_t rows_bytes(const sb_batch *in, size_t first, size_t n)
{
    uint64_t b = 0;
    for (size_t i = 0; i < sb_batch_ncols(in); i++) {
        const sb_column *c = sb_batch_column(in, i);
        switch (c->type) {
        case SB_TYPE_BINARY:
        case SB_TYPE_UTF8:
            b += (uint64_t)(c->offsets[first + n] - c->offsets[first]);
            break;
        case SB_TYPE_BOOL:
            b += (n + 7) / 8;
            break;
        case SB_TYPE_FIXED_LIST:
            b += (uint64_t)n * c->list_size * sb_type_width(c->child_type);
            break;
        default:
            b += (uint64_t)n * sb_type_width(c->type);
            break;
        }
    }
    return b;
}

/* Nanoseconds this call should cost (after paying off earlier overshoot); <= 0: nothing. */
static int64_t cost_due(cost_st *st, const sb_batch *in, size_t first, size_t n)
{
    double units = st->per_record ? (double)n : (double)rows_bytes(in, first, n) / 1048576.0;
    double ns = units * st->ms * 1e6;
    if (ns > 9e18)
        ns = 9e18;
    int64_t due = (int64_t)llround(ns) - st->debt_ns;
    if (due <= 0) {
        st->debt_ns = -due;
        return 0;
    }
    st->debt_ns = 0;
    return due;
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static _Thread_local volatile uint64_t spin_sink; /* keeps the spin loop's result alive */

/* Burns `ns` of this thread's CPU time, or less when the attempt is cancelled (sb_op_cancelled,
 * checked every few microseconds: a loser of a copy's race stops at once); returns the CPU time
 * actually used. */
static uint64_t spin_cpu(int64_t ns)
{
    uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), now = t0;
    uint64_t x = t0 | 1;
    while ((int64_t)(now - t0) < ns && !sb_op_cancelled()) {
        for (int i = 0; i < 2048; i++) { /* a few microseconds of xorshift */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        spin_sink = x;
        now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    }
    return now - t0;
}

/* Sleeps `ns` of wall time (monotonic clock) in steps of at most SLEEP_STEP_NS, ending early when
 * the attempt is cancelled; returns the time actually slept. */
#define SLEEP_STEP_NS 10000000u
static uint64_t sleep_wall(int64_t ns)
{
    uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
    uint64_t end = t0 + (uint64_t)ns;
    for (uint64_t now = t0; now < end && !sb_op_cancelled(); now = clock_ns(CLOCK_MONOTONIC)) {
        uint64_t to = end - now > SLEEP_STEP_NS ? now + SLEEP_STEP_NS : end;
        struct timespec dl = {.tv_sec = (time_t)(to / 1000000000u),
                              .tv_nsec = (long)(to % 1000000000u)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &dl, NULL) == EINTR)
            ;
    }
    return clock_ns(CLOCK_MONOTONIC) - t0;
}

static int spin_init(const char *args_json, void **state, sb_err *err)
{
    return cost_init("bench.spin", args_json, state, err);
}

static int sleep_init(const char *args_json, void **state, sb_err *err)
{
    return cost_init("bench.sleep", args_json, state, err);
}

static int cost_process(cost_st *st, bool spin, const sb_batch *in, size_t first, size_t n,
                        sb_op_out *out, sb_err *err)
{
    int64_t due = cost_due(st, in, first, n);
    if (due > 0) {
        uint64_t used = spin ? spin_cpu(due) : sleep_wall(due);
        st->spent_ns += used;
        st->debt_ns = (int64_t)used - due;
        if (sb_op_cancelled())
            return sb_op_cancel_err(err, st->op);
    }
    if (n == 0)
        return sb_op_out_set_schema_like(out, in, err);
    for (uint32_t e = 0; e < st->expand; e++)
        if (sb_op_out_append_rows(out, in, first, n, err) != 0)
            return -1;
    return 0;
}

static int spin_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                        sb_err *err)
{
    return cost_process(state, true, in, first, n, out, err);
}

static int sleep_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                         sb_err *err)
{
    return cost_process(state, false, in, first, n, out, err);
}

static void cost_free(void *state)
{
    free(state);
}

/* A new task pays its own cost: no overshoot carried over from the last one. */
static int cost_reset(void *state, sb_err *err)
{
    (void)err;
    cost_st *st = state;
    st->debt_ns = 0;
    st->spent_ns = 0;
    return 0;
}

const sb_op_impl sb_op_spin_impl = {
    .name = "bench.spin",
    .init = spin_init,
    .process = spin_process,
    .finish = no_finish,
    .free = cost_free,
    .reset = cost_reset,
};

const sb_op_impl sb_op_sleep_impl = {
    .name = "bench.sleep",
    .init = sleep_init,
    .process = sleep_process,
    .finish = no_finish,
    .free = cost_free,
    .reset = cost_reset,
};
