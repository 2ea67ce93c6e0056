/* proc.h — a child process the worker talks to over pipes: started with a command line, an
 * environment and a working directory, fed bytes on stdin while its stdout is read line by line
 * (both at once, so neither side can block the other on a full pipe), its stderr kept as a tail
 * for error messages, killed (its whole process group) at a deadline.
 *
 *     sb_proc *p;  sb_proc_start(argv, env, cwd, &p, &err);
 *     sb_proc_pump(p, &io, deadline, &err);     // as often as needed
 *     sb_proc_close_stdin(p);  sb_proc_pump(...) until io.eof;  sb_proc_wait(p, deadline, &err);
 *     sb_proc_free(p);                          // kills it if still running
 *
 * The child gets its own process group (a shell pipeline or a Python multiprocessing pool dies
 * with it), SIGKILL when the worker thread that started it ends (PR_SET_PDEATHSIG: a worker that
 * dies leaves no orphans), default signal dispositions (SIGPIPE included) and no inherited file
 * descriptors beyond 0-2. A command that cannot be started (not found, not executable) is an
 * error of sb_proc_start(), never a child that exits 127.
 *
 * Memory and threads: an sb_proc belongs to one thread at a time. sb_proc_start() copies argv,
 * env and cwd. Lines passed to the line callback point into the proc's buffer and are valid only
 * during the call. Every live proc is also in a process-wide list (under a mutex) that
 * sb_proc_rss_total() reads.
 */
#ifndef SB_WORKER_OPS_EXEC_PROC_H
#define SB_WORKER_OPS_EXEC_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/err.h"

typedef struct sb_proc sb_proc;

/* Starts argv (argv[0] looked up in env's PATH when it has no '/') with env (NULL-terminated
 * "K=V" strings: the whole environment) in cwd (NULL: the worker's). -1 + err naming the
 * command when it cannot be started. */
int sb_proc_start(const char *const *argv, const char *const *env, const char *cwd, sb_proc **out,
                  sb_err *err);

/* What one sb_proc_pump() call writes and how it reports lines.
 *  - fill(): puts up to `max` iovecs of the next bytes to write into iov and returns how many;
 *    0 when there is nothing more to write in this call. Called again only after all the bytes
 *    it gave were written.
 *  - line(): one stdout line without its '\n'. Returns 0 to go on, 1 to end the pump (e.g. a
 *    batch delimiter), -1 + err to fail it.
 * Results set by the pump: eof (stdout closed), epipe (the child closed its stdin before taking
 * everything: the rest of fill's bytes were not written). */
typedef struct {
    size_t (*fill)(void *ud, struct iovec *iov, size_t max);
    int (*line)(void *ud, const char *p, size_t n, sb_err *err);
    /* instead of line (framings that are not lines): all stdout bytes not yet consumed, each time
     * more arrive; sets *used to the bytes it consumed (a whole message, or 0 to wait for more)
     * and returns like line(). Bytes left unconsumed at end of file are an error. */
    int (*bytes)(void *ud, const uint8_t *p, size_t n, size_t *used, sb_err *err);
    void *ud;
    bool eof, epipe;
} sb_proc_io;

/* Writes everything fill() gives while reading stdout lines (and stderr into the tail). Ends
 * when line() returns 1 (0 is returned; it is -1 + err when fill() still had bytes left: the
 * answer came before the question), or when everything is written and `until` is
 * SB_PROC_UNTIL_WRITTEN, or at stdout's end of file (io->eof). An unfinished last line at end
 * of file is passed to line() too. -1 + err at deadline_ms (CLOCK_MONOTONIC milliseconds; the
 * child is killed), on an I/O error, or a line (or, with bytes(), unconsumed output) longer than
 * max_line bytes. */
typedef enum { SB_PROC_UNTIL_WRITTEN, SB_PROC_UNTIL_LINE_OR_EOF } sb_proc_until;
int sb_proc_pump(sb_proc *p, sb_proc_io *io, sb_proc_until until, int64_t deadline_ms,
                 size_t max_line, sb_err *err);

/* True when stdout holds bytes not yet passed to a line callback (buffered, or readable now). */
bool sb_proc_has_output(sb_proc *p);

/* Closes the child's stdin (end of input). Idempotent. */
void sb_proc_close_stdin(sb_proc *p);

/* Waits for the child to exit (after its stdout ended), killing it at deadline_ms. 0 when it
 * exited with status 0; -1 + err ("exited with status 3", "was killed by signal 9") and the
 * stderr tail otherwise. */
int sb_proc_wait(sb_proc *p, int64_t deadline_ms, sb_err *err);

/* True while the child has not exited (reaps it if it has). */
bool sb_proc_alive(sb_proc *p);

/* Describes how the child ended, or "is running", into buf; returns buf. Reaps it if it has
 * exited. */
const char *sb_proc_describe(sb_proc *p, char *buf, size_t cap);

/* The last bytes the child wrote to stderr (up to ~200: the last whole lines that fit, control
 * characters as spaces), "" when none. Points into p. */
const char *sb_proc_stderr_tail(sb_proc *p);

/* SIGKILL to the child's process group, then reaps it. */
void sb_proc_kill(sb_proc *p);

/* Kills the child if it still runs, closes the pipes and frees p. NULL is fine. */
void sb_proc_free(sb_proc *p);

/* SIGKILL to the process group of every live child sb_proc_start() made in this process, without
 * reaping: for a worker that exits leaving threads that own them (PR_SET_PDEATHSIG kills a child,
 * not what the child started, such as `sh -c`'s programs). */
void sb_proc_kill_groups(void);

/* CPU seconds (user + system) the child has used so far, or in all once it exited. */
double sb_proc_cpu_seconds(sb_proc *p);

/* Resident memory of all live children started by sb_proc_start() in this process (bytes, from
 * /proc/PID/statm; 0 for a child that cannot be read). */
uint64_t sb_proc_rss_total(void);

/* CLOCK_MONOTONIC in milliseconds, for deadlines. */
int64_t sb_proc_now_ms(void);

#endif
