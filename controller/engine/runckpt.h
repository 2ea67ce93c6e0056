/* runckpt.h — the checkpoint file of `streambatch run` (docs/pipeline-api.md, "Resuming a
 * local run"): what the operator keeps in a Pipeline's status.checkpoint (checkpoint.h), kept
 * by the local driver in a file, so that a run whose `streambatch run` process died (SIGKILL,
 * a closed terminal, a reboot) continues with `streambatch run FILE --resume` without redoing
 * committed work.
 *
 * Where: --checkpoint FILE, else $XDG_STATE_HOME/streambatch/checkpoints (default
 * ~/.local/state/...) /<pipeline name>-<16 hex>.json, the hex a hash of the working directory
 * and the sink URI: the same pipeline into the same sink finds its checkpoint again, another
 * sink does not. The driver rewrites it (a temporary file renamed over it) whenever the
 * committed set grows, removes it when the run succeeds, and keeps it otherwise.
 *
 * Memory: sb_runckpt_load() fills a caller sb_ckpt (free with sb_ckpt_free()); nothing else
 * is retained.
 */
#ifndef SB_CTL_RUNCKPT_H
#define SB_CTL_RUNCKPT_H

#include <stddef.h>

#include "controller/engine/checkpoint.h"
#include "core/err.h"
#include "spec/pipeline.h"

/* The default checkpoint path of p (see above) into out. 0, or -1 + err (no $HOME, the working
 * directory unreadable, the path too long). */
int sb_runckpt_default_path(const sb_pipeline *p, char *out, size_t len, sb_err *err);

/* Reads the checkpoint at path: 0 with *exists = 0 when there is none, 0 with *exists = 1 and
 * *out filled, or -1 + err naming the file and the field (unreadable, not JSON, invalid). */
int sb_runckpt_load(const char *path, sb_ckpt *out, int *exists, sb_err *err);

/* Writes text (the checkpoint's JSON) to path atomically (parent directories made as needed,
 * the data synced before the rename). 0, or -1 + err. */
int sb_runckpt_save(const char *path, const char *text, sb_err *err);

/* Removes the file (missing is fine). 0, or -1 + err. */
int sb_runckpt_remove(const char *path, sb_err *err);

#endif
