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

#endif
