/* runckpt.h — the checkpoint file of `streambatch run` (docs/pipeline-api.md, "Resuming a
 * local run"): what the operator keeps in a Pipeline's status.checkpoint (checkpoint.h), kept
 * by the local driver in a file, so that a run whose `streambatch run` process died (SIGKILL,
 * a closed terminal, a reboot) continues with `streambatch run FILE --resume` without redoing
 * committed work.
 *
 * Where: --checkpoint FILE, else $XDG_STATE_HOME/streambatch/checkpoints (default
 * ~/.local/state/...) /<pipeline name>-<16 hex>.json, the hex a hash of the working directory
 * and the sink URI: the same pipeline into the same sink finds its checkpoint again, another
 * sink does not. The file is small: the summary of the checkpoint log (ckptlog.h) that holds
 * the committed splits and parts, beside the sink (<sink>/_streambatch/checkpoint/) for file
 * sinks, else beside the file (<file without .json>.log/). The driver appends a segment to the
 * log and rewrites the file (a temporary file renamed over it) whenever the committed set
 * grows, removes both when the run succeeds, and keeps them otherwise. A file in the older
 * format (every part inline, checkpoint.h) is still read.
 *
 * The run record, <checkpoint>.run beside it: the driver that runs the pipeline holds an
 * exclusive flock on it for the whole run and writes its pid, its start time (/proc/<pid>/stat)
 * and its run directory (the workers' spill dirs and logs) there. A driver that is SIGKILLed
 * leaves the file and the run directory behind; the next run of the same pipeline (same
 * checkpoint file, --resume or not) claims the record, and when its owner is really gone (the
 * lock is free and no process has that pid with that start time) removes what it left: the
 * whole directory when the driver made it ($TMPDIR/streambatch-run-*), only the workers' spill
 * dirs (<run dir>/<worker id>/, the logs stay) when it was given with --run-dir. A run whose
 * owner is alive is refused, and its files are never touched.
 *
 * Memory: sb_runckpt_load() fills a caller sb_ckpt (free with sb_ckpt_free()); nothing else
 * is retained. A claim holds one file descriptor until sb_runckpt_release().
 */
#ifndef SB_CTL_RUNCKPT_H
#define SB_CTL_RUNCKPT_H

#include <stddef.h>

#include "controller/ctl/checkpoint.h"
#include "controller/ctl/ckptlog.h"
#include "core/err.h"
#include "spec/pipeline.h"

/* The default checkpoint path of p (see above) into out. 0, or -1 + err (no $HOME, the working
 * directory unreadable, the path too long). */
int sb_runckpt_default_path(const sb_pipeline *p, char *out, size_t len, sb_err *err);

/* Where the checkpoint log of p goes, for the checkpoint file at path (see above), into out.
 * 0, or -1 + err (a path too long). */
int sb_runckpt_log_dir(const sb_pipeline *p, const char *path, char *out, size_t len, sb_err *err);

/* Reads the checkpoint at path: 0 with *exists = 0 when there is none, 0 with *exists = 1 and
 * *out filled (from the log the file summarises, *sum the summary, or from the file itself in
 * the older format, sum->generation 0 then), -1 + err naming the file and the field
 * (unreadable, not JSON, invalid), or -2 + err when the file is a summary whose log is refused
 * (missing, foreign, stale or damaged: sb_ckptlog_load's message; *sum is the summary). sum
 * may be NULL. */
int sb_runckpt_load(const char *path, sb_ckpt *out, sb_ckptlog_summary *sum, int *exists,
                    sb_err *err);

/* Writes text (the checkpoint's JSON) to path atomically (parent directories made as needed,
 * the data synced before the rename). 0, or -1 + err. */
int sb_runckpt_save(const char *path, const char *text, sb_err *err);

/* Checks every sink part checkpoint c carries over (sb_io_sink_verify_part: size and CRC-32C
 * of the file; file sinks only, whose parts are not synced until the commit, so a machine crash
 * may have lost or cut one the checkpoint recorded) and drops what cannot be trusted: each part
 * that is missing or differs, with every other part of the split it came from, and that split
 * from the committed set, so the resumed run makes them again from the source (a part of op 0
 * maps to its split by its task index, a preserveOrder part by its order key; a bad part whose
 * split cannot be told drops all committed work). *bad receives the number of bad parts (0: c
 * is unchanged), *splits the committed splits dropped, `first` (len bytes) what was wrong with
 * the first bad part. Reads every carried part once. 0, or -1 + err (c unchanged). */
int sb_runckpt_verify_parts(sb_ckpt *c, const sb_sink_spec *sink, size_t *bad, size_t *splits,
                            char *first, size_t len, sb_err *err);

/* Removes the file (missing is fine). 0, or -1 + err. */
int sb_runckpt_remove(const char *path, sb_err *err);

/* The owner of a run record: pid, start time in clock ticks since boot, and its run dir. */
typedef struct {
    long pid;
    unsigned long long start;
    int own_dir; /* 1: the driver made run_dir (removed whole); 0: --run-dir */
    char run_dir[4096];
} sb_runckpt_owner;

/* A claimed run record (see above). */
typedef struct {
    int fd; /* -1: none */
    char path[4096];
} sb_runckpt_claim;

/* The start time of process pid (field 22 of /proc/<pid>/stat) into *start. 0, or -1 when
 * there is no such process or /proc cannot say. */
int sb_runckpt_proc_start(long pid, unsigned long long *start);

/* Claims the run record of the checkpoint at ckpt_path for this process. Returns 0 when
 * claimed (*had_prev = 1 with *prev filled when a dead earlier run left its record), 1 when a
 * live run holds it (*prev names that run; nothing is changed), -1 + err when the file cannot
 * be made or locked. */
int sb_runckpt_claim_take(const char *ckpt_path, sb_runckpt_claim *c, sb_runckpt_owner *prev,
                          int *had_prev, sb_err *err);

/* Writes this process (pid, start time) and run_dir into the claimed record. 0, or -1 + err. */
int sb_runckpt_claim_record(sb_runckpt_claim *c, const char *run_dir, int own_dir, sb_err *err);

/* Removes the record and gives up the claim (nothing to do when c->fd < 0). */
void sb_runckpt_claim_release(sb_runckpt_claim *c);

/* Removes what the dead run prev left (see above): nothing outside prev->run_dir, and only
 * when prev's process is gone. Sets *removed to the number of files and directories removed.
 * 0, or -1 + err (what could not be removed; the rest is removed). */
int sb_runckpt_clean_dead(const sb_runckpt_owner *prev, long *removed, sb_err *err);

#endif
