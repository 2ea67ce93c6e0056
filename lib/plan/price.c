/* price.c — the prices a plan is costed with (see price.h): the built-in table and the merge of
 * controller defaults and a Pipeline's spec.execution.pricing over it, field by field. */

#include "plan/price.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double sb_price_cpu_core_hour = 0.04;
const double sb_price_memory_gib_hour = 0.005;

const sb_price_gpu sb_price_gpus[] = {
    {"default", 2.50},     {"nvidia-t4", 0.35},   {"nvidia-l4", 0.80},   {"nvidia-a10g", 1.00},
    {"nvidia-a100", 3.00}, {"nvidia-h100", 4.00}, {"nvidia-h200", 5.00}, {NULL, 0},
};

int sb_price_defaults_add_gpu(sb_price_defaults *d, const char *text, sb_err *err)
{
    const char *eq = strchr(text, '=');
    if (eq == NULL || eq == text)
        return sb_err_set(err, "\"%.80s\": expected TYPE=PRICE, e.g. nvidia-h100=4.0", text);
    char *end = NULL;
    double v = strtod(eq + 1, &end);
    if (eq[1] == '\0' || end == NULL || *end != '\0' || !(v >= 0) || !isfinite(v))
        return sb_err_set(err, "\"%.80s\": the price after = must be a number >= 0", text);
    size_t tl = (size_t)(eq - text);
    for (size_t i = 0; i < d->ngpus; i++)
        if (strlen(d->gpus[i].type) == tl && strncmp(d->gpus[i].type, text, tl) == 0) {
            d->gpus[i].gpu_hour = v;
            return 0;
        }
    if (d->ngpus == SB_PRICE_MAX_GPU_TYPES)
        return sb_err_set(err, "\"%.80s\": at most %d GPU types", text, SB_PRICE_MAX_GPU_TYPES);
    /* the type is the text before '=': kept as a copy in the table's own storage */
    if (tl >= sizeof d->types[0])
        return sb_err_set(err, "\"%.80s\": the GPU type is longer than %zu characters", text,
                          sizeof d->types[0] - 1);
    memcpy(d->types[d->ngpus], text, tl);
    d->types[d->ngpus][tl] = '\0';
    d->gpus[d->ngpus].type = d->types[d->ngpus];
    d->gpus[d->ngpus].gpu_hour = v;
    d->ngpus++;
    return 0;
}

static int lookup(const sb_price_gpu *t, size_t n, const char *type, double *price,
                  const char **name)
{
    for (size_t i = 0; i < n && t[i].type != NULL; i++)
        if (strcmp(t[i].type, type) == 0) {
            *price = t[i].gpu_hour;
            *name = t[i].type;
            return 1;
        }
    return 0;
}

int sb_price_resolve_with(const sb_price_defaults *d, const sb_pricing_spec *over,
                          sb_plan_prices *out, const char **gpu_type, sb_err *err)
{
    const char *type = over != NULL && over->gpu_type != NULL ? over->gpu_type
                       : d != NULL && d->gpu_type != NULL     ? d->gpu_type
                                                              : "default";
    out->cpu_core_hour =
        d != NULL && d->cpu_core_hour_set ? d->cpu_core_hour : sb_price_cpu_core_hour;
    out->mem_gib_hour =
        d != NULL && d->memory_gib_hour_set ? d->memory_gib_hour : sb_price_memory_gib_hour;
    out->gpu_hour = -1;
    if (!(d != NULL && lookup(d->gpus, d->ngpus, type, &out->gpu_hour, &type)))
        lookup(sb_price_gpus, SIZE_MAX, type, &out->gpu_hour, &type);
    if (over != NULL) {
        if (over->cpu_core_hour_set)
            out->cpu_core_hour = over->cpu_core_hour;
        if (over->memory_gib_hour_set)
            out->mem_gib_hour = over->memory_gib_hour;
        if (over->gpu_hour_set)
            out->gpu_hour = over->gpu_hour;
    }
    if (out->gpu_hour < 0) {
        char known[512];
        size_t o = 0;
        for (size_t i = 0; d != NULL && i < d->ngpus && o < sizeof known; i++)
            o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", o ? ", " : "",
                                  d->gpus[i].type);
        for (size_t i = 0; sb_price_gpus[i].type != NULL && o < sizeof known; i++)
            o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", o ? ", " : "",
                                  sb_price_gpus[i].type);
        return sb_err_set(err,
                          "spec.execution.pricing.gpuType: no price for GPU type \"%.60s\" (the "
                          "controller's prices and the table have %s); give "
                          "spec.execution.pricing.gpuHour",
                          type, known);
    }
    if (gpu_type != NULL)
        *gpu_type = type;
    return 0;
}

int sb_price_resolve(const sb_pricing_spec *over, sb_plan_prices *out, const char **gpu_type,
                     sb_err *err)
{
    return sb_price_resolve_with(NULL, over, out, gpu_type, err);
}
