/* fromspec.c — the planner's input from a decoded Pipeline (see fromspec.h): each stage's allowed
 * shapes, worker bounds and per-worker resources, and the rates its bench stages declare. Fills
 * the caller's sb_plan_input; allocates nothing. */

#include "plan/fromspec.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_plan_stages_from_spec(const sb_pipeline *p, sb_plan_stage_in *st)
{
    for (size_t i = 0; i < p->spec.nstages && i < SB_PLAN_MAX_STAGES; i++) {
        const sb_stage_spec *s = &p->spec.stages[i];
        sb_plan_stage_in *in = &st[i];
        memset(in, 0, sizeof *in);
        unsigned bits = sb_stage_shapes(s);
        in->name = s->name;
        in->min_workers = s->workers.min;
        in->max_workers = s->workers.max;
        for (int k = 0; k < SB_SHAPE_COUNT; k++) {
            sb_plan_shape_in *sh = &in->shapes[k];
            sh->allowed = (bits & (k == SB_SHAPE_CPU ? SB_SHAPE_BIT_CPU : SB_SHAPE_BIT_GPU)) != 0;
            sh->cpu_cores = (double)s->resources.cpu_milli / 1000.0;
            sh->mem_gib = (double)s->resources.memory_bytes / (double)(1ll << 30);
            sh->gpus = k == SB_SHAPE_GPU ? (double)s->gpu_shape_gpus : 0;
        }
    }
}

static double json_num(const cJSON *o, const char *k, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* Output rows per input row of a stage on a shape: bench's expand, 1 for ops that keep the row
 * count, -1 when it depends on the data. */
static double stage_ratio(const sb_stage_spec *st, const char *shape)
{
    static const char *const one[] = {"identity",        "project",    "image.resize",
                                      "image.normalize", "tensor.mlp", NULL};
    for (size_t i = 0; one[i] != NULL; i++)
        if (strcmp(st->op, one[i]) == 0)
            return 1;
    if (strncmp(st->op, "bench.", 6) != 0)
        return -1;
    char *a = sb_stage_args_for_shape(st, shape);
    cJSON *j = a ? cJSON_Parse(a) : NULL;
    double e = json_num(j, "expand", 1);
    cJSON_Delete(j);
    free(a);
    return e;
}

int sb_plan_declared_rates(const sb_pipeline *p, sb_plan_stage_in *st,
                           char (*why)[SB_SHAPE_COUNT][SB_PLAN_WHY_MAX])
{
    size_t n = p->spec.nstages, missing = 0;
    for (size_t i = 0; i < n && i < SB_PLAN_MAX_STAGES; i++) {
        const sb_stage_spec *s = &p->spec.stages[i];
        int stage_missing = 0;
        for (int k = 0; k < SB_SHAPE_COUNT; k++) {
            sb_plan_shape_in *sh = &st[i].shapes[k];
            char scratch[SB_PLAN_WHY_MAX];
            char *w = why != NULL ? why[i][k] : scratch;
            if (!sh->allowed)
                continue;
            double ms = -1;
            if (strncmp(s->op, "bench.", 6) != 0) {
                snprintf(w, SB_PLAN_WHY_MAX, "op %s has no declared cost", s->op);
            } else {
                char *a = sb_stage_args_for_shape(s, sb_shape_names[k]);
                cJSON *j = a ? cJSON_Parse(a) : NULL;
                ms = json_num(j, "msPerRecord", -1);
                cJSON_Delete(j);
                free(a);
                if (ms < 0)
                    snprintf(w, SB_PLAN_WHY_MAX, "msPerMB: its rows/s depend on the record size");
            }
            /* rows out of the pipeline per row into this stage */
            double mult = 1;
            for (size_t j = i; j < n && ms >= 0; j++) {
                const sb_stage_spec *sj = &p->spec.stages[j];
                double r = stage_ratio(sj, j == i ? sb_shape_names[k] : sb_stage_pool(sj));
                if (r < 0) {
                    snprintf(w, SB_PLAN_WHY_MAX,
                             "the rows of later stage %s (op %s) depend on the data", sj->name,
                             sj->op);
                    ms = -1;
                    break;
                }
                mult *= r;
            }
            if (ms >= 0)
                sh->rate = (ms > 0 ? 1000.0 / ms : 1e12) * mult;
            stage_missing |= sh->rate <= 0;
        }
        missing += stage_missing;
    }
    return (int)missing;
}

static long stage_named(const sb_pipeline *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->spec.nstages; i++)
        if (strlen(p->spec.stages[i].name) == len &&
            strncmp(p->spec.stages[i].name, name, len) == 0)
            return (long)i;
    return -1;
}

long sb_plan_op_stage(const sb_pipeline *p, const char *part, size_t len, int *half)
{
    *half = 0;
    long i = stage_named(p, part, len);
    if (i < 0 && len > 4 && strncmp(part + len - 4, ".map", 4) == 0)
        *half = (i = stage_named(p, part, len - 4)) >= 0;
    if (i < 0 && len > 6 && strncmp(part + len - 6, ".range", 6) == 0)
        *half = (i = stage_named(p, part, len - 6)) >= 0;
    return i;
}
