/* sinkmode.h — the sink's write modes (sink.mode; sink.h has the life cycle they change), for
 * sink.c and storage.c only:
 *
 *   overwrite      (the default) the run's parts replace the earlier run's: prepare removes the
 *                  earlier _SUCCESS and manifest, commit removes every part file the engine
 *                  wrote that the new manifest does not list.
 *   append         the run's parts are named "part-<tag>-<id>" (sb_sink_spec.part_tag, the
 *                  driver's, the same for a run and its resumes), so they never collide with an
 *                  earlier run's; prepare and abort leave the earlier _SUCCESS and manifest in
 *                  place (readers keep the earlier output until the commit), and commit lists
 *                  the earlier manifest's parts and errored partitions beside the run's own.
 *   errorIfExists  prepare refuses a sink that holds any file but an unfinished run's own
 *                  (engine part files, temporary files): that is how a resumed run finds its
 *                  parts without refusing itself.
 *   ignore         a sink holding _SUCCESS is left alone: the plan is empty (no task runs),
 *                  prepare and abort touch nothing, and commit of that empty run writes nothing.
 *
 * Memory: sb_io_prev_manifest_read() fills a caller struct whose arrays and strings it owns
 * until sb_io_prev_manifest_free().
 */
#ifndef SB_IO_SINKMODE_H
#define SB_IO_SINKMODE_H

#include <stddef.h>

#include "core/err.h"
#include "io/schemes.h"
#include "io/sink.h"
#include "spec/pipeline.h"

/* An earlier run's manifest, as append mode carries it over. */
typedef struct sb_io_prev_manifest {
    sb_io_part_info *parts;
    size_t nparts;
    sb_io_errored *errored; /* strings owned */
    size_t nerrored;
} sb_io_prev_manifest;

/* Reads dir's _manifest.json (none: 0 with *out empty). The manifest is the engine's own, but
 * a user may have edited it: a manifest that is not what the engine writes is refused, naming
 * the file and the field. 0, or -1 + err. */
int sb_io_prev_manifest_read(const char *dir, const char *ext, sb_io_prev_manifest *out,
                             sb_err *err);
void sb_io_prev_manifest_free(sb_io_prev_manifest *m);

/* errorIfExists: 0 when dir holds nothing but an unfinished run's own files (objs is one
 * listing of it, with SB_IO_LIST_ALL), else -1 + err naming the sink and the first file. */
int sb_io_sink_check_empty(const char *dir, const char *ext, const sb_io_obj *objs, size_t nobjs,
                           sb_err *err);

/* Is `name` ("part-<id>.<ext>" or "part-<tag>-<id>.<ext>", id a partition id of lib/partition)
 * a part file this engine writes? Only those may be removed as strays. */
int sb_io_sink_our_part_name(const char *name, const char *ext);
/* Is `name` an attempt's staged part (".sbatt-<attempt>-part-...", sink.h)? */
int sb_io_sink_is_staged(const char *name);

/* Does dir hold _SUCCESS? 0 with *yes set, or -1 + err. */
int sb_io_sink_dir_committed(const char *dir, int *yes, sb_err *err);

#endif
