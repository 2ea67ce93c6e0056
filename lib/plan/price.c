#include "plan/price.h"

#include <stdio.h>
#include <string.h>

const double sb_price_cpu_core_hour = 0.04;
const double sb_price_memory_gib_hour = 0.005;

const sb_price_gpu sb_price_gpus[] = {
    {"default", 2.50},     {"nvidia-t4", 0.35},   {"nvidia-l4", 0.80},   {"nvidia-a10g", 1.00},
    {"nvidia-a100", 3.00}, {"nvidia-h100", 4.00}, {"nvidia-h200", 5.00}, {NULL, 0},
};

int sb_price_resolve(const sb_pricing_spec *over, sb_plan_prices *out, const char **gpu_type,
                     sb_err *err)
{
    const char *type = over != NULL && over->gpu_type != NULL ? over->gpu_type : "default";
    out->cpu_core_hour = sb_price_cpu_core_hour;
    out->mem_gib_hour = sb_price_memory_gib_hour;
    out->gpu_hour = -1;
    for (size_t i = 0; sb_price_gpus[i].type != NULL; i++)
        if (strcmp(sb_price_gpus[i].type, type) == 0) {
            out->gpu_hour = sb_price_gpus[i].gpu_hour;
            type = sb_price_gpus[i].type;
        }
    if (over != NULL) {
        if (over->cpu_core_hour_set)
            out->cpu_core_hour = over->cpu_core_hour;
        if (over->memory_gib_hour_set)
            out->mem_gib_hour = over->memory_gib_hour;
        if (over->gpu_hour_set)
            out->gpu_hour = over->gpu_hour;
    }
    if (out->gpu_hour < 0) {
        char known[256];
        size_t o = 0;
        for (size_t i = 0; sb_price_gpus[i].type != NULL && o < sizeof known; i++)
            o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
                                  sb_price_gpus[i].type);
        return sb_err_set(err,
                          "spec.execution.pricing.gpuType: no price for GPU type \"%.60s\" (the "
                          "table has %s); give spec.execution.pricing.gpuHour",
                          type, known);
    }
    if (gpu_type != NULL)
        *gpu_type = type;
    return 0;
}
