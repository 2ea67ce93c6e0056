/* jobs.c — storage jobs (see jobs.h): the job kinds, cutting a PLAN result into pieces and
 * joining them in order, and running a job on the worker that took it. */
#include "storage/jobs.h"

#include <stdlib.h>
#include <string.h>

#include "io/split.h"

const char *sb_storage_kind_what(sb_storage_kind k)
{
    switch (k) {
    case SB_STORAGE_PLAN:
        return "planning the source";
    case SB_STORAGE_PREPARE:
        return "preparing the sink";
    case SB_STORAGE_COMMIT:
        return "committing the sink";
    case SB_STORAGE_ABORT:
        return "aborting the sink";
    case SB_STORAGE_CKPT_PUT:
        return "writing the checkpoint log";
    case SB_STORAGE_CKPT_LOAD:
        return "reading the checkpoint log";
    case SB_STORAGE_CKPT_REMOVE:
        return "removing the checkpoint log";
    default:
        return "a storage job";
    }
}

size_t sb_storage_piece(const char *const *enc, size_t n, size_t from, size_t max_bytes)
{
    size_t k = 0, used = 0;
    for (size_t i = from; i < n; i++) {
        size_t b = strlen(enc[i]) + 16;
        if (k > 0 && used + b > max_bytes)
            break;
        used += b;
        k++;
    }
    return k;
}

int sb_storage_pieces_add(sb_storage_pieces *p, uint64_t offset, const char *const *enc,
                          const uint64_t *bytes, size_t k, sb_err *err)
{
    if (offset + k <= p->n && offset <= p->n) {
        for (size_t i = 0; i < k; i++)
            if (strcmp(p->enc[offset + i], enc[i]) != 0 || p->bytes[offset + i] != bytes[i])
                return sb_err_set(err, "plan piece at split %llu differs from the one received",
                                  (unsigned long long)offset);
        return 0;
    }
    if (offset != p->n)
        return sb_err_set(err, "plan piece starts at split %llu, expected %zu",
                          (unsigned long long)offset, p->n);
    if (k > SB_IO_MAX_SPLITS - p->n)
        return sb_err_set(err, "the plan has more than %zu splits", SB_IO_MAX_SPLITS);
    for (size_t i = 0; i < k; i++)
        if (enc[i] == NULL || enc[i][0] == '\0')
            return sb_err_set(err, "split %llu is empty", (unsigned long long)(offset + i));
    if (p->n + k > p->cap) {
        size_t cap = p->cap ? p->cap : 64;
        while (cap < p->n + k)
            cap *= 2;
        char **e = realloc(p->enc, cap * sizeof *e);
        if (e == NULL)
            return sb_err_set(err, "out of memory");
        p->enc = e;
        uint64_t *b = realloc(p->bytes, cap * sizeof *b);
        if (b == NULL)
            return sb_err_set(err, "out of memory");
        p->bytes = b;
        p->cap = cap;
    }
    for (size_t i = 0; i < k; i++) {
        p->enc[p->n + i] = strdup(enc[i]);
        if (p->enc[p->n + i] == NULL) {
            for (size_t j = 0; j < i; j++)
                free(p->enc[p->n + j]);
            return sb_err_set(err, "out of memory");
        }
        p->bytes[p->n + i] = bytes[i];
    }
    p->n += k;
    return 1;
}

int sb_storage_pieces_joins(sb_storage_pieces *p, const uint64_t *join_right, size_t n, sb_err *err)
{
    free(p->join_right);
    p->join_right = NULL;
    p->njoin_right = 0;
    if (n == 0)
        return 0;
    if ((p->join_right = malloc(n * sizeof *p->join_right)) == NULL)
        return sb_err_set(err, "out of memory");
    memcpy(p->join_right, join_right, n * sizeof *p->join_right);
    p->njoin_right = n;
    return 0;
}

void sb_storage_pieces_free(sb_storage_pieces *p)
{
    free(p->join_right);
    for (size_t i = 0; i < p->n; i++)
        free(p->enc[i]);
    free(p->enc);
    free(p->bytes);
    memset(p, 0, sizeof *p);
}

int sb_storage_run(const sb_pipeline *p, sb_storage_kind k, const sb_storage_output *parts,
                   size_t nparts, const sb_storage_errored *errored, size_t nerrored,
                   sb_storage_splits *plan, sb_err *err)
{
    /* a stream:// sink has no storage: its partitions stay in the workers for consumers */
    int stream = p->spec.sink.uri != NULL && strcmp(p->spec.sink.uri, "stream://") == 0;
    if (stream && k != SB_STORAGE_PLAN)
        return 0;
    switch (k) {
    case SB_STORAGE_PLAN:
        return sb_storage_splits_make(p, plan, err);
    case SB_STORAGE_PREPARE:
        return sb_storage_prepare(p, err) != 0 ? sb_err_wrap(err, "spec.sink") : 0;
    case SB_STORAGE_COMMIT:
        return sb_storage_commit(p, parts, nparts, errored, nerrored, err);
    case SB_STORAGE_ABORT:
        return sb_storage_abort(p, err);
    default:
        return sb_err_set(err, "unknown storage job kind %d", (int)k);
    }
}
