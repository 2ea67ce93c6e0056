/* impls.h — the built-in operator tables, defined one family per file (bench.c: identity,
 * bench.spin, bench.sleep; record.c: filter, project;
 * exec/exec.c: exec; plugin/plugin.c: plugin; tensor/mlp.c: tensor.mlp; image/transform.c:
 * image.resize, image.normalize; exchange/exchange.c: exchange.map, exchange.reduce, the halves of
 * an all-to-all stage; exchange/join.c: join) and listed by ops.c.
 * Internal to worker/ops.
 *
 * Memory: static, immutable tables.
 */
#ifndef SB_WORKER_OPS_IMPLS_H
#define SB_WORKER_OPS_IMPLS_H

#include "worker/ops/ops.h"

extern const sb_op_impl sb_op_identity_impl;
extern const sb_op_impl sb_op_spin_impl;
extern const sb_op_impl sb_op_sleep_impl;
extern const sb_op_impl sb_op_filter_impl;
extern const sb_op_impl sb_op_project_impl;
extern const sb_op_impl sb_op_exec_impl;
extern const sb_op_impl sb_op_plugin_impl;
extern const sb_op_impl sb_op_mlp_impl;
extern const sb_op_impl sb_op_image_resize_impl;
extern const sb_op_impl sb_op_image_normalize_impl;
extern const sb_op_impl sb_op_exchange_map_impl;
extern const sb_op_impl sb_op_exchange_reduce_impl;
extern const sb_op_impl sb_op_join_impl;

/* project's work for an op that absorbed it (sb_op_impl.absorb_next with project's state):
 * its output and its errors, as if project had read the op's output. Typed columns: the listed
 * ones of cols[0..ncols), in the listed order (rows [firsts[i], firsts[i]+n) of column i, as in
 * sb_op_out_append_columns_at). A record: p[0..len), the op's output record for input row
 * `row` (named in errors), written projected. */
int sb_op_project_columns_at(const void *project_state, const sb_column *cols, const size_t *firsts,
                             size_t ncols, size_t n, sb_op_out *out, sb_err *err);
int sb_op_project_record(void *project_state, size_t row, const char *p, size_t len, sb_op_out *out,
                         sb_err *err);

#endif
