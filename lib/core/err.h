/* err.h — the error convention of every streambatch module.
 *
 * Functions that can fail return an int (0 on success, -1 on failure; some return a pointer,
 * NULL on failure) and take a `sb_err *err` as their last argument, which may be NULL when the
 * caller does not want the message. On failure the callee writes a one-line, human-readable
 * message that names what is wrong and where. The struct is caller-owned and holds no heap
 * memory, so it never needs freeing. No library function calls exit().
 */
#ifndef SB_CORE_ERR_H
#define SB_CORE_ERR_H

#include <stddef.h>

#define SB_ERR_MAX 512

typedef struct sb_err {
    char msg[SB_ERR_MAX];
    /* Nonzero when the input data itself is bad (invalid UTF-8 or JSON, a record too long, a
     * malformed csv row): the same input fails the same way every time, so a task that fails
     * with it is not retried (the controller errors its partitions at once). Set by
     * sb_err_data(), cleared by sb_err_set() and sb_err_clear(), kept by sb_err_wrap(). */
    int data;
    /* Nonzero when the failure does not depend on the input at all and can only recur: a bad
     * argument found when an op starts, a plugin built for another ABI, an op this build
     * lacks. Not retried either, and the pipeline fails at once (erroring every partition one
     * by one would only repeat it). Set by sb_err_permanent(), cleared by sb_err_set(),
     * sb_err_data() and sb_err_clear(), kept by sb_err_wrap(). */
    int permanent;
} sb_err;

/* Sets err->msg from a printf format (truncated to SB_ERR_MAX-1 bytes). No-op if err is NULL.
 * Always returns -1, so `return sb_err_set(err, ...)` reads naturally. */
int sb_err_set(sb_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like sb_err_set(), for an error caused by the input data (see sb_err.data). Returns -1. */
int sb_err_data(sb_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like sb_err_set(), for an error that can only recur (see sb_err.permanent). Returns -1. */
int sb_err_permanent(sb_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to an existing message (for adding context on the way up). */
int sb_err_wrap(sb_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the message and the data and permanent flags. */
void sb_err_clear(sb_err *err);

#endif
