/* storage.c — planning a source into splits and the sink's prepare, commit and abort (see
 * storage.h): the only code that opens user storage for the controller's sake, run on workers. */
#include "storage/storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/sink.h"
#include "io/split.h"
#include "storage/joinplan.h"

int sb_storage_splits_make(const sb_pipeline *p, sb_storage_splits *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    sb_io_split *io = NULL;
    size_t n = 0, *first = NULL, ng = 0;
    if (p->spec.sink.mode == SB_SINK_IGNORE) { /* a committed sink: nothing to do */
        int done = 0;
        if (sb_io_sink_committed(&p->spec.sink, &done, err) != 0)
            return sb_err_wrap(err, "spec.sink");
        if (done) {
            sb_log(SB_LOG_INFO, "the sink holds _SUCCESS and its mode is ignore: nothing to do",
                   "sink", p->spec.sink.uri, NULL);
            return 0;
        }
    }
    if (sb_storage_join_plan(p, &out->join_right, err) != 0) /* exchanged or broadcast */
        return -1;
    if (sb_io_plan_splits(&p->spec.source, &io, &n, err) != 0) {
        sb_storage_splits_free(out);
        return sb_err_wrap(err, "spec.source");
    }
    out->io = io;
    out->npieces = n;
    if (sb_io_plan_group(&p->spec.source, io, n, &first, &ng, err) != 0) {
        sb_storage_splits_free(out);
        return -1;
    }
    out->nsplits = ng;
    out->splits = calloc(ng + 1, sizeof *out->splits);
    out->enc = calloc(ng + 1, sizeof *out->enc);
    if (out->splits == NULL || out->enc == NULL) {
        free(first);
        sb_storage_splits_free(out);
        return sb_err_set(err, "planning the source: out of memory");
    }
    for (size_t g = 0; g < ng; g++) {
        size_t a = first[g], b = g + 1 < ng ? first[g + 1] : n;
        out->enc[g] = sb_io_splits_encode(&io[a], b - a, err);
        if (out->enc[g] == NULL) {
            free(first);
            sb_storage_splits_free(out);
            return -1;
        }
        out->splits[g].split = out->enc[g];
        for (size_t i = a; i < b; i++)
            out->splits[g].bytes += io[i].end - io[i].start;
    }
    free(first);
    return 0;
}

void sb_storage_splits_free(sb_storage_splits *pl)
{
    if (pl == NULL)
        return;
    for (size_t i = 0; pl->enc != NULL && i < pl->nsplits; i++)
        free(pl->enc[i]);
    free(pl->enc);
    free(pl->splits);
    free(pl->join_right);
    sb_io_splits_free(pl->io, pl->npieces);
    memset(pl, 0, sizeof *pl);
}

int sb_storage_prepare(const sb_pipeline *p, sb_err *err)
{
    if (sb_io_sink_check_not_source(&p->spec.sink, &p->spec.source, err) != 0)
        return -1;
    return sb_io_sink_prepare(&p->spec.sink, err);
}

int sb_storage_commit(const sb_pipeline *p, const sb_storage_output *parts, size_t n,
                      const sb_storage_errored *errored, size_t nerrored, sb_err *err)
{
    sb_io_part_info *infos = calloc(n + 1, sizeof *infos);
    if (infos == NULL)
        return sb_err_set(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (sb_io_sink_part_name(&p->spec.sink, parts[i].id, infos[i].name, err) != 0) {
            free(infos);
            return -1;
        }
        infos[i].rows = parts[i].rows;
        infos[i].bytes = parts[i].bytes;
        infos[i].crc32c = parts[i].crc32c;
    }
    sb_io_errored *errs = calloc(nerrored + 1, sizeof *errs);
    if (errs == NULL) {
        free(infos);
        return sb_err_set(err, "out of memory");
    }
    for (size_t i = 0; i < nerrored; i++)
        errs[i] = (sb_io_errored){errored[i].stage, errored[i].input, errored[i].error};
    int rc = sb_io_sink_commit(&p->spec.sink, infos, n, errs, nerrored, err);
    free(errs);
    free(infos);
    return rc;
}

int sb_storage_abort(const sb_pipeline *p, sb_err *err)
{
    return sb_io_sink_abort(&p->spec.sink, err);
}
