/* price.h — the prices a plan is costed with: a built-in table (per CPU core-hour, GiB-hour and
 * GPU-hour by GPU type), overridden by a Pipeline's spec.execution.pricing.
 *
 * The built-in figures are round, illustrative on-demand prices, not any provider's: set your own
 * in spec.execution.pricing. Static data only; nothing is allocated.
 */
#ifndef SB_PLAN_PRICE_H
#define SB_PLAN_PRICE_H

#include "core/err.h"
#include "plan/plan.h"
#include "spec/pipeline.h"

typedef struct sb_price_gpu {
    const char *type;
    double gpu_hour;
} sb_price_gpu;

/* The table: NULL-terminated (type NULL); the first entry is "default". */
extern const sb_price_gpu sb_price_gpus[];
extern const double sb_price_cpu_core_hour, sb_price_memory_gib_hour;

/* The prices of a pipeline: the table's, with what `over` (may be NULL) sets. *gpu_type (may be
 * NULL) receives the GPU type priced (static text, or over->gpu_type, which it must not outlive).
 * -1 + err naming the field when gpuType is not in the table and gpuHour is not given. */
int sb_price_resolve(const sb_pricing_spec *over, sb_plan_prices *out, const char **gpu_type,
                     sb_err *err);

#endif
