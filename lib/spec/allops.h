/* allops.h — validation of the all-to-all ops (repartition, random_shuffle, groupby, distinct,
 * limit, sort): the arguments the generic argspec check in pipeline.c cannot express
 * (groupby's aggregates, unique output names, missingKey, repartition's bytes, sort's keys), and
 * how they fit the rest of the pipeline (preserveOrder, a parquet source, limit's place, the
 * stages around a sort). Called by pipeline.c's stage and spec checks.
 *
 * Memory: nothing is kept; diagnostics go to the caller's sb_diags.
 */
#ifndef SB_SPEC_ALLOPS_H
#define SB_SPEC_ALLOPS_H

#include "doc/doc.h"
#include "spec/diag.h"
#include "spec/pipeline.h"

/* 1 when op is an all-to-all op. */
int sb_spec_allop(const char *op);

/* Checks the args (a map or NULL) of a stage running `op`; path names the stage. */
void sb_spec_allop_args_check(const char *op, const sb_node *args, const sb_node *stage,
                              const char *path, sb_diags *d);

/* Checks the pipeline around its all-to-all stages (node: the spec's map). */
void sb_spec_allop_pipeline_check(const sb_pipeline_spec *sp, const sb_node *node, const char *path,
                                  sb_diags *d);

#endif
