/* price.h — the prices a plan is costed with: a built-in table (per CPU core-hour, GiB-hour and
 * GPU-hour by GPU type), under the controller's configuration (Helm `pricing`, the
 * streambatch-controller --price-* flags: sb_price_defaults), under a Pipeline's
 * spec.execution.pricing. Each field is taken from the first of the three that sets it.
 *
 * The built-in figures are round, illustrative on-demand prices, not any provider's: set your own
 * in spec.execution.pricing. Static data only; nothing is allocated.
 */
#ifndef SB_PLAN_PRICE_H
#define SB_PLAN_PRICE_H

#include <stdbool.h>
#include <stddef.h>

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

/* The controller's prices (what Helm `pricing` sets). A field not set falls back to the built-in
 * table. gpu_type: the GPU type a Pipeline without spec.execution.pricing.gpuType is priced with
 * (NULL: "default"); gpus: per GPU type prices, looked up before the built-in table. Strings are
 * borrowed (gpu_type: the caller keeps it for as long as the struct is used). */
#define SB_PRICE_MAX_GPU_TYPES 16
typedef struct sb_price_defaults {
    double cpu_core_hour, memory_gib_hour;
    bool cpu_core_hour_set, memory_gib_hour_set;
    const char *gpu_type;
    sb_price_gpu gpus[SB_PRICE_MAX_GPU_TYPES]; /* types point into `types` */
    size_t ngpus;
    char types[SB_PRICE_MAX_GPU_TYPES][64];
} sb_price_defaults;

/* Adds "TYPE=PRICE" (a --price-gpu-hour value) to d->gpus; a type given twice takes the later
 * price. -1 + err when the text is not TYPE=PRICE with a price >= 0, the type is 64 characters
 * or longer, or the table is full. The type is copied into d. */
int sb_price_defaults_add_gpu(sb_price_defaults *d, const char *text, sb_err *err);

/* The prices of a pipeline: field by field, `over` (the Pipeline's; may be NULL), else `defaults`
 * (the controller's; may be NULL), else the built-in table. The GPU type is over->gpu_type, else
 * defaults->gpu_type, else "default"; its gpuHour is over->gpu_hour, else the type's price in
 * defaults->gpus, else in the table. *gpu_type (may be NULL) receives the type priced (static
 * text or a string of over/defaults, which it must not outlive). -1 + err naming the field when
 * the type has no price anywhere and gpuHour is not given. */
int sb_price_resolve_with(const sb_price_defaults *defaults, const sb_pricing_spec *over,
                          sb_plan_prices *out, const char **gpu_type, sb_err *err);

/* sb_price_resolve_with(NULL, over, ...): the table's, with what `over` (may be NULL) sets.
 * *gpu_type (may be NULL) receives the GPU type priced (static text, or over->gpu_type, which it
 * must not outlive). -1 + err naming the field when gpuType is not in the table and gpuHour is not
 * given. */
int sb_price_resolve(const sb_pricing_spec *over, sb_plan_prices *out, const char **gpu_type,
                     sb_err *err);

#endif
