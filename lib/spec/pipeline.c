/* pipeline.c — the Pipeline resource's rules: the schema tables of every object (metadata, spec,
 * source, stages, sink, execution, workerTemplate) that schema.c decodes, and the hooks for what
 * a table cannot say: per-op and per-format arguments, URIs, placement and shapeArgs, stage
 * names, the memory budget, the template's pod rules and the credentials Secret. It owns the op
 * table (names, arguments, shapes) that validate, the controller and the planner consult.
 */
#include "spec/pipeline.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pct.h"
#include "spec/allops.h"
#include "spec/join.h"
#include "spec/quantity.h"

/* Why a boolean may stand where the file has a word: Kubernetes reads manifests as YAML 1.1. */
#define YAML11_HINT                                                                                \
    "kubectl and other YAML 1.1 readers take an unquoted on, yes or y as true and off, no or n "   \
    "as false; quote it (\"on\", \"n\")"

const char *const sb_format_names[] = {"jsonl", "csv", "text", "binary", "image", "parquet", NULL};
const char *const sb_exec_mode_names[] = {"streaming", "staged", "static", NULL};
const char *const sb_sink_mode_names[] = {"overwrite", "append", "errorIfExists", "ignore", NULL};
static const char *const pull_policies[] = {"Always", "IfNotPresent", "Never", NULL};

/* ---- op and format arguments ------------------------------------------------------------- */

typedef enum {
    A_STR,
    A_INT,
    A_NUM,
    A_BOOL,
    A_STRLIST,
    A_NUMS,   /* a finite number, or a non-empty list of them (at most max items when max > 0) */
    A_SCALAR, /* a string, a finite number or a boolean */
    A_ENUM,
    A_DURATION, /* a Go duration string, more than 0 */
    A_STRMAP,   /* a map of string values */
    A_ENVNAMES, /* a boolean, or a non-empty list of variable names (NAME, or PREFIX* for all
                 * that start with PREFIX) */
    A_ANY
} akind;

typedef struct {
    const char *name;
    akind kind;
    int required;
    double min; /* for A_INT / A_NUM */
    const char *const *enums;
    double max; /* A_INT: the largest value; A_NUMS: the most items; 0: no bound */
} argspec;

/* The arguments an op runs with on one shape: shapeArgs.<shape> (over) merged over args. */
typedef struct {
    const sb_node *args, *over; /* maps, or NULL */
    const char *args_path, *over_path;
    int over_only; /* report only problems a value of over takes part in (args alone are
                    * checked on their own) */
} arg_layers;

typedef struct {
    const char *name;
    const argspec *args;
    const char *one_of; /* "a|b": exactly one of these must be given */
    int planned;        /* named by the API but not in this build: rejected */
    unsigned shapes;    /* SB_SHAPE_BIT_*: where the op has an implementation */
    /* rules across arguments, checked on the arguments of every shape the stage runs on */
    void (*rules)(const arg_layers *l, sb_diags *d);
} opspec;

static const char *const cmp_ops[] = {"eq", "ne", "lt", "le", "gt", "ge", NULL};
static const char *const activations[] = {"relu", "gelu", "none", NULL};

static const argspec args_none[] = {{NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_spin[] = {{"msPerRecord", A_NUM, 0, 0, NULL, 0},
                                    {"msPerMB", A_NUM, 0, 0, NULL, 0},
                                    {"expand", A_INT, 0, 1, NULL, 0},
                                    {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_filter[] = {{"field", A_STR, 1, 0, NULL, 0},
                                      {"op", A_ENUM, 1, 0, cmp_ops, 0},
                                      {"value", A_SCALAR, 1, 0, NULL, 0},
                                      {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_project[] = {{"fields", A_STRLIST, 1, 0, NULL, 0},
                                       {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_decode[] = {{"width", A_INT, 0, 1, NULL, 0},
                                      {"height", A_INT, 0, 1, NULL, 0},
                                      {NULL, A_ANY, 0, 0, NULL, 0}};
/* the worker's bound on a side (lib/image/image.h, SB_IMAGE_MAX_SIDE) */
static const argspec args_resize[] = {{"width", A_INT, 1, 1, NULL, 65535},
                                      {"height", A_INT, 1, 1, NULL, 65535},
                                      {"antialias", A_BOOL, 0, 0, NULL, 0},
                                      {"field", A_STR, 0, 0, NULL, 0},
                                      {NULL, A_ANY, 0, 0, NULL, 0}};
static const char *const layouts[] = {"hwc", "chw", NULL};
/* mean and std: one number or one per channel, at most the worker's 64 channels
 * (worker/ops/image/transform.c) */
static const argspec args_normalize[] = {
    {"mean", A_NUMS, 0, 0, NULL, 64}, {"std", A_NUMS, 0, 0, NULL, 64},
    {"scale", A_NUM, 0, 0, NULL, 0},  {"layout", A_ENUM, 0, 0, layouts, 0},
    {"field", A_STR, 0, 0, NULL, 0},  {NULL, A_ANY, 0, 0, NULL, 0}};
static const char *const mlp_devices[] = {"auto", "cpu", "cuda", NULL};
static const char *const mlp_precisions[] = {"fp32", "tf32", "bf16", NULL};
static const argspec args_mlp[] = {{"weights", A_STR, 1, 0, NULL, 0},
                                   {"field", A_STR, 1, 0, NULL, 0},
                                   {"activation", A_ENUM, 0, 0, activations, 0},
                                   {"outputField", A_STR, 0, 0, NULL, 0},
                                   {"topK", A_INT, 0, 1, NULL, 0},
                                   {"device", A_ENUM, 0, 0, mlp_devices, 0},
                                   {"precision", A_ENUM, 0, 0, mlp_precisions, 0},
                                   {NULL, A_ANY, 0, 0, NULL, 0}};
static const char *const exec_framings[] = {"lines", "arrow", NULL};
static const char *const exec_modes[] = {"filter", "batches", NULL};
static const char *const exec_outputs[] = {"jsonl", "text", NULL};
static const argspec args_exec[] = {
    {"command", A_STRLIST, 1, 0, NULL, 0},       {"env", A_STRMAP, 0, 0, NULL, 0},
    {"framing", A_ENUM, 0, 0, exec_framings, 0}, {"mode", A_ENUM, 0, 0, exec_modes, 0},
    {"batchSize", A_INT, 0, 1, NULL, 0},         {"timeout", A_DURATION, 0, 0, NULL, 0},
    {"workingDir", A_STR, 0, 0, NULL, 0},        {"output", A_ENUM, 0, 0, exec_outputs, 0},
    {"inheritEnv", A_ENVNAMES, 0, 0, NULL, 0},   {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_plugin[] = {{"path", A_STR, 1, 0, NULL, 0},
                                      {"symbol", A_STR, 0, 0, NULL, 0},
                                      {"config", A_ANY, 0, 0, NULL, 0},
                                      {NULL, A_ANY, 0, 0, NULL, 0}};

/* ---- rules across an op's arguments ------------------------------------------------------ */

/* Argument `name` as the op gets it on one shape: the overlay's, else that of args; its field
 * path goes to path and *from_over says which. NULL when absent or null. */
static const sb_node *layer_get(const arg_layers *l, const char *name, char *path, size_t len,
                                int *from_over)
{
    const sb_node *v = sb_node_get(l->over, name);
    *from_over = v != NULL;
    if (v == NULL)
        v = sb_node_get(l->args, name);
    sb_spec_path_field(path, len, *from_over ? l->over_path : l->args_path, name);
    return v != NULL && v->kind != SB_NODE_NULL ? v : NULL;
}

/* filter: a boolean value compares by eq and ne only (worker/ops/record.c refuses lt, le, gt
 * and ge with one when the task starts). */
static void filter_rules(const arg_layers *l, sb_diags *d)
{
    char op_path[512], v_path[512];
    int op_over, v_over;
    const sb_node *op = layer_get(l, "op", op_path, sizeof op_path, &op_over);
    const sb_node *v = layer_get(l, "value", v_path, sizeof v_path, &v_over);
    if (op == NULL || v == NULL || op->kind != SB_NODE_STRING || v->kind != SB_NODE_BOOL ||
        (l->over_only && !op_over && !v_over))
        return;
    static const char *const ordering[] = {"lt", "le", "gt", "ge", NULL};
    for (size_t i = 0; ordering[i] != NULL; i++)
        if (strcmp(op->text, ordering[i]) == 0)
            sb_diags_add(d, op_path, op->line, op->col,
                         "\"%s\" does not apply to a boolean value (%s is %s): booleans compare "
                         "with eq or ne only",
                         op->text, v_path, v->v.b ? "true" : "false");
}

/* std as the op keeps it (a float): 0 divides by zero. */
static int zero_std(const sb_node *n)
{
    return (n->kind == SB_NODE_INT && n->v.i == 0) ||
           (n->kind == SB_NODE_FLOAT && (float)n->v.f == 0.0f);
}

/* image.normalize: no 0 in std (worker/ops/image/transform.c refuses it when the task starts). */
static void normalize_rules(const arg_layers *l, sb_diags *d)
{
    char path[512], ip[512];
    int over;
    const sb_node *sd = layer_get(l, "std", path, sizeof path, &over);
    if (sd == NULL || (l->over_only && !over))
        return;
    if (zero_std(sd))
        sb_diags_add(d, path, sd->line, sd->col, "must not be 0 (the values are divided by it)");
    for (size_t i = 0; sd->kind == SB_NODE_SEQ && i < sd->n; i++)
        if (zero_std(sd->items[i]))
            sb_diags_add(d, sb_spec_path_index(ip, sizeof ip, path, i), sd->items[i]->line,
                         sd->items[i]->col, "must not be 0 (the values are divided by it)");
}

/* A tensor.mlp precision that only CUDA computes (tf32, bf16); NULL for fp32 or anything else. */
static const char *cuda_precision(const sb_node *p)
{
    return p != NULL && p->kind == SB_NODE_STRING &&
                   (strcmp(p->text, "tf32") == 0 || strcmp(p->text, "bf16") == 0)
               ? p->text
               : NULL;
}

/* tensor.mlp: precision tf32 or bf16 with device cpu (worker/ops/tensor/mlp.c refuses it when
 * the task starts: the CPU computes in fp32 only). */
static void mlp_rules(const arg_layers *l, sb_diags *d)
{
    char pp[512], dp[512];
    int p_over, d_over;
    const sb_node *p = layer_get(l, "precision", pp, sizeof pp, &p_over);
    const sb_node *dv = layer_get(l, "device", dp, sizeof dp, &d_over);
    if (cuda_precision(p) == NULL || dv == NULL || dv->kind != SB_NODE_STRING ||
        strcmp(dv->text, "cpu") != 0 || (l->over_only && !p_over && !d_over))
        return;
    sb_diags_add(d, pp, p->line, p->col,
                 "is %s, but %s is cpu: the CPU computes tensor.mlp in fp32 only (drop "
                 "precision, or set it in shapeArgs.gpu)",
                 p->text, dp);
}

/* tensor.mlp on a stage that runs on cpu only: precision tf32 or bf16 would never apply (cpu
 * pools run streambatch-worker, which computes in fp32). */
static void mlp_shape_check(const sb_stage_spec *st, const sb_node *args, const char *path,
                            sb_diags *d)
{
    const sb_node *p = sb_node_get(args, "precision");
    if (cuda_precision(p) == NULL || (sb_stage_shapes(st) & SB_SHAPE_BIT_GPU))
        return;
    char ab[512], buf[512];
    sb_spec_path_field(ab, sizeof ab, path, "args");
    sb_spec_path_field(buf, sizeof buf, ab, "precision");
    sb_diags_add(d, buf, p->line, p->col,
                 "is %s, but the stage runs on cpu only, where tensor.mlp computes in fp32 (give "
                 "it resources.gpu or a gpu placement, or drop precision)",
                 p->text);
}

/* all-to-all ops (lib/spec/allops.c checks the rest): partitions is the reduce side's tasks */
static const argspec args_repartition[] = {{"partitions", A_INT, 0, 1, NULL, 4096},
                                           {"bytes", A_ANY, 0, 0, NULL, 0},
                                           {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_shuffle[] = {{"seed", A_INT, 0, 0, NULL, 0},
                                       {"partitions", A_INT, 0, 1, NULL, 4096},
                                       {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_groupby[] = {{"keys", A_STRLIST, 1, 0, NULL, 0},
                                       {"aggregates", A_ANY, 0, 0, NULL, 0},
                                       {"missingKey", A_ANY, 0, 0, NULL, 0},
                                       {"partitions", A_INT, 0, 1, NULL, 4096},
                                       {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_limit[] = {{"rows", A_INT, 1, 1, NULL, 0}, {NULL, A_ANY, 0, 0, NULL, 0}};
static const char *const join_hows[] = {"inner", "left", NULL};
static const argspec args_join[] = {
    {"right", A_ANY, 1, 0, NULL, 0},      {"on", A_STRLIST, 1, 0, NULL, 0},
    {"how", A_ENUM, 0, 0, join_hows, 0},  {"broadcastBelow", A_ANY, 0, 0, NULL, 0},
    {"missingKey", A_ANY, 0, 0, NULL, 0}, {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec args_distinct[] = {{"fields", A_STRLIST, 0, 0, NULL, 0},
                                        {"missingKey", A_ANY, 0, 0, NULL, 0},
                                        {"partitions", A_INT, 0, 1, NULL, 4096},
                                        {NULL, A_ANY, 0, 0, NULL, 0}};

static const char *const sort_nulls[] = {"last", "first", NULL};
static const argspec args_sort[] = {
    {"keys", A_ANY, 1, 0, NULL, 0},          {"nulls", A_ENUM, 0, 0, sort_nulls, 0},
    {"stable", A_BOOL, 0, 0, NULL, 0},       {"missingKey", A_ANY, 0, 0, NULL, 0},
    {"partitions", A_INT, 0, 1, NULL, 4096}, {NULL, A_ANY, 0, 0, NULL, 0}};

static const opspec ops[] = {
    /* gpu: bench.* model a stage with a GPU implementation (shapeArgs give its cost there);
     * tensor.mlp has a CUDA one; exec and plugin run the user's code, which may use the GPU */
    {"identity", args_none, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"bench.spin", args_spin, "msPerRecord|msPerMB", 0, SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU, NULL},
    {"bench.sleep", args_spin, "msPerRecord|msPerMB", 0, SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU, NULL},
    {"filter", args_filter, NULL, 0, SB_SHAPE_BIT_CPU, filter_rules},
    {"project", args_project, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"image.decode", args_decode, NULL, 1, SB_SHAPE_BIT_CPU, NULL},
    {"image.resize", args_resize, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"image.normalize", args_normalize, NULL, 0, SB_SHAPE_BIT_CPU, normalize_rules},
    {"tensor.mlp", args_mlp, NULL, 0, SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU, mlp_rules},
    {"exec", args_exec, NULL, 0, SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU, NULL},
    {"plugin", args_plugin, NULL, 0, SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU, NULL},
    {"repartition", args_repartition, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"random_shuffle", args_shuffle, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"groupby", args_groupby, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"distinct", args_distinct, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"limit", args_limit, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"join", args_join, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
    {"sort", args_sort, NULL, 0, SB_SHAPE_BIT_CPU, NULL},
};
#define NOPS (sizeof ops / sizeof *ops)

/* The ops this build runs: the planned ones (image.decode) are left out, so suggestions never
 * name them and the CRD's op rule, which tests/unit/test_crd_ops.c compares with this list, does
 * not let them through to the controller. */
const char *const sb_op_names[] = {
    "identity",        "bench.spin", "bench.sleep", "filter", "project",     "image.resize",
    "image.normalize", "tensor.mlp", "exec",        "plugin", "repartition", "random_shuffle",
    "groupby",         "distinct",   "limit",       "join",   "sort",        NULL};

int sb_spec_op_known(const char *name)
{
    for (size_t i = 0; i < NOPS; i++)
        if (strcmp(ops[i].name, name) == 0)
            return 1;
    return 0;
}

/* jsonl, csv and text sources: the files' codec (lib/io/decomp.h; auto: by file name) */
static const char *const compressions[] = {"auto", "none", "gzip", "zstd", NULL};
static const argspec fmt_args_csv_in[] = {
    {"header", A_BOOL, 0, 0, NULL, 0},       {"compression", A_ENUM, 0, 0, compressions, 0},
    {"delimiter", A_STR, 0, 0, NULL, 0},     {"multiline", A_BOOL, 0, 0, NULL, 0},
    {"maxRecordSize", A_INT, 0, 1, NULL, 0}, {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec fmt_args_csv_out[] = {{"header", A_BOOL, 0, 0, NULL, 0},
                                           {"delimiter", A_STR, 0, 0, NULL, 0},
                                           {"columns", A_STRLIST, 0, 0, NULL, 0},
                                           {NULL, A_ANY, 0, 0, NULL, 0}};
/* jsonl and text sources: the longest record accepted (lib/io/reader.h). */
static const argspec fmt_args_lines_in[] = {{"maxRecordSize", A_INT, 0, 1, NULL, 0},
                                            {"compression", A_ENUM, 0, 0, compressions, 0},
                                            {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec fmt_args_binary_in[] = {{"recordSize", A_INT, 1, 1, NULL, 0},
                                             {NULL, A_ANY, 0, 0, NULL, 0}};
static const argspec fmt_args_binary_out[] = {{"recordSize", A_INT, 0, 1, NULL, 0},
                                              {NULL, A_ANY, 0, 0, NULL, 0}};
/* image sources (lib/io/imgread.h): channels 1, 3 or 4 (checked in check_io) */
static const argspec fmt_args_image_in[] = {{"channels", A_INT, 0, 1, NULL, 0},
                                            {"maxPixels", A_INT, 0, 1, NULL, 0},
                                            {"draft", A_ANY, 0, 0, NULL, 0},
                                            {"maxRecordSize", A_INT, 0, 1, NULL, 0},
                                            {NULL, A_ANY, 0, 0, NULL, 0}};

/* parquet sources (lib/parquet/source.h): the top-level columns to read */
static const argspec fmt_args_parquet_in[] = {{"columns", A_STRLIST, 0, 0, NULL, 0},
                                              {NULL, A_ANY, 0, 0, NULL, 0}};

/* parquet sinks (lib/parquet/records.h): codec, row group bytes, the records' schema or whether
 * one is inferred */
static const char *const pq_codecs[] = {"zstd", "snappy", "gzip", "none", NULL};
static const argspec fmt_args_parquet_out[] = {{"compression", A_ENUM, 0, 0, pq_codecs, 0},
                                               {"rowGroupSize", A_INT, 0, 1, NULL, 0},
                                               {"schema", A_ANY, 0, 0, NULL, 0},
                                               {"inferSchema", A_BOOL, 0, 0, NULL, 0},
                                               {NULL, A_ANY, 0, 0, NULL, 0}};
static const char *const pq_types[] = {"int64", "double", "string", "bool", "json", NULL};
static const argspec pq_field_args[] = {{"name", A_STR, 1, 0, NULL, 0},
                                        {"type", A_ENUM, 1, 0, pq_types, 0},
                                        {"nullable", A_BOOL, 0, 0, NULL, 0},
                                        {NULL, A_ANY, 0, 0, NULL, 0}};

static void check_args(const argspec *spec, const sb_node *args, const char *path,
                       const sb_node *owner, const char *what, int partial, sb_diags *d);

/* sink.args.schema of a parquet sink: a non-empty list of {name, type, nullable}, names unique. */
static void check_parquet_schema(const sb_node *s, const char *args_path, sb_diags *d)
{
    char buf[512], fb[512];
    if (s == NULL)
        return;
    sb_spec_path_field(buf, sizeof buf, args_path, "schema");
    if (s->kind != SB_NODE_SEQ || s->n == 0) {
        sb_diags_add(d, buf, s->line, s->col,
                     "must be a non-empty list of {name, type, nullable} (type: int64, double, "
                     "string, bool or json)");
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        const sb_node *f = s->items[i];
        snprintf(fb, sizeof fb, "%s[%zu]", buf, i);
        if (f->kind != SB_NODE_MAP) {
            sb_diags_add(d, fb, f->line, f->col, "must be a map {name, type, nullable}");
            continue;
        }
        check_args(pq_field_args, f, fb, f, "a parquet schema field", 0, d);
        const sb_node *nm = sb_node_get(f, "name");
        for (size_t k = 0; k < i && nm != NULL && nm->kind == SB_NODE_STRING; k++) {
            const sb_node *o = sb_node_get(s->items[k], "name");
            if (o != NULL && o->kind == SB_NODE_STRING && strcmp(o->text, nm->text) == 0)
                sb_diags_add(d, fb, nm->line, nm->col, "field \"%.80s\" is named twice", nm->text);
        }
    }
}

/* A stream:// sink's args (whatever its format: nothing is written). epochs and seed are what
 * `run --epochs/--seed` set locally; on Kubernetes they are the only way to give them. */
static const argspec stream_sink_args[] = {{"cacheEpochs", A_BOOL, 0, 0, NULL, 0},
                                           {"epochs", A_INT, 0, 1, NULL, 100000},
                                           {"seed", A_INT, 0, 0, NULL, 0},
                                           {NULL, A_ANY, 0, 0, NULL, 0}};

/* sink.args.<key> of a stream:// sink (parsed; the caller frees it), or NULL. */
static cJSON *stream_arg(const sb_sink_spec *sink, const char *key, cJSON **args)
{
    *args = NULL;
    if (sink->uri == NULL || strcmp(sink->uri, "stream://") != 0 || sink->args_json == NULL)
        return NULL;
    *args = cJSON_Parse(sink->args_json);
    return cJSON_GetObjectItemCaseSensitive(*args, key);
}

bool sb_sink_stream_cache(const sb_sink_spec *sink)
{
    cJSON *a;
    bool on = cJSON_IsTrue(stream_arg(sink, "cacheEpochs", &a));
    cJSON_Delete(a);
    return on;
}

uint32_t sb_sink_stream_epochs(const sb_sink_spec *sink)
{
    cJSON *a;
    const cJSON *v = stream_arg(sink, "epochs", &a);
    uint32_t n = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 100000
                     ? (uint32_t)v->valuedouble
                     : 0;
    cJSON_Delete(a);
    return n;
}

bool sb_sink_stream_seed(const sb_sink_spec *sink, uint64_t *seed)
{
    cJSON *a;
    const cJSON *v = stream_arg(sink, "seed", &a);
    bool set = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 18446744073709551616.0;
    if (set)
        *seed = (uint64_t)v->valuedouble;
    cJSON_Delete(a);
    return set;
}

const char *sb_spec_stream_plan_check(const sb_pipeline_spec *sp, uint32_t epochs, int seed_set,
                                      const char **arg, char *buf, size_t len)
{
    const char *which = NULL;
    for (size_t i = 0; i < sp->nstages && which == NULL; i++) {
        const sb_stage_spec *st = &sp->stages[i];
        if (!sb_spec_allop(st->op))
            continue;
        if (epochs > 1 && !sb_sink_stream_cache(&sp->sink)) {
            snprintf(buf, len,
                     "%u epochs: stage %s (%s) exchanges rows, and an exchange is planned once "
                     "for the whole run, not per epoch; set sink.args.cacheEpochs: true (the "
                     "pipeline runs once and every epoch deals its output) or run one epoch",
                     epochs, st->name, st->op);
            which = "epochs";
        } else if (seed_set && strcmp(st->op, "limit") == 0) {
            snprintf(buf, len,
                     "a seed shuffles the order the source's splits are read in, but stage %s "
                     "(limit) takes the source's first rows in order; drop the seed (iter_batches' "
                     "local_shuffle_buffer and seed shuffle the rows each rank gets)",
                     st->name);
            which = "seed";
        }
    }
    if (arg != NULL)
        *arg = which;
    return which != NULL ? buf : NULL;
}

static const argspec *format_args(sb_format f, int is_sink)
{
    switch (f) {
    case SB_FMT_CSV:
        return is_sink ? fmt_args_csv_out : fmt_args_csv_in;
    case SB_FMT_BINARY:
        return is_sink ? fmt_args_binary_out : fmt_args_binary_in;
    case SB_FMT_JSONL:
    case SB_FMT_TEXT:
        return is_sink ? args_none : fmt_args_lines_in;
    case SB_FMT_IMAGE:
        return is_sink ? args_none : fmt_args_image_in;
    case SB_FMT_PARQUET:
        return is_sink ? fmt_args_parquet_out : fmt_args_parquet_in;
    default:
        return args_none;
    }
}

static int finite_number(const sb_node *v)
{
    return v->kind == SB_NODE_INT || (v->kind == SB_NODE_FLOAT && isfinite(v->v.f));
}

static int all_finite_numbers(const sb_node *n)
{
    for (size_t i = 0; i < n->n; i++)
        if (!finite_number(n->items[i]))
            return 0;
    return 1;
}

static int all_strings(const sb_node *n)
{
    for (size_t i = 0; i < n->n; i++)
        if (n->items[i]->kind != SB_NODE_STRING)
            return 0;
    return 1;
}

/* Keys of args that spec does not name: one problem each, with "did you mean" when a name is
 * close. */
static void check_unknown_args(const argspec *spec, const sb_node *args, const char *path,
                               const char *what, sb_diags *d)
{
    char buf[512];
    const char *names[32];
    size_t nn = 0;
    for (size_t i = 0; spec[i].name != NULL && nn < 31; i++)
        names[nn++] = spec[i].name;
    names[nn] = NULL;
    for (size_t k = 0; args != NULL && k < args->n; k++) {
        const char *key = args->keys[k]->text;
        int known = 0;
        for (size_t i = 0; spec[i].name != NULL && !known; i++)
            known = strcmp(spec[i].name, key) == 0;
        if (known)
            continue;
        sb_spec_path_field(buf, sizeof buf, path, key);
        const char *s = sb_suggest(key, names);
        if (strcmp(key, "true") == 0 || strcmp(key, "false") == 0)
            /* kubectl (YAML 1.1) turns an unquoted on/yes/y key into "true" (join's `on`) */
            sb_diags_add(d, buf, args->keys[k]->line, args->keys[k]->col,
                         "unknown argument \"%s\" for %s: " YAML11_HINT, key, what);
        else if (nn == 0)
            sb_diags_add(d, buf, args->keys[k]->line, args->keys[k]->col,
                         "unknown argument \"%.80s\": %s takes no arguments", key, what);
        else if (s != NULL)
            sb_diags_add(d, buf, args->keys[k]->line, args->keys[k]->col,
                         "unknown argument \"%.80s\" for %s (did you mean \"%s\"?)", key, what, s);
        else
            sb_diags_add(d, buf, args->keys[k]->line, args->keys[k]->col,
                         "unknown argument \"%.80s\" for %s", key, what);
    }
}

/* An A_ENUM value that is none of the enums, reported here (the message lists them). */
static void check_enum_arg(const argspec *a, const sb_node *v, const char *path, sb_diags *d)
{
    int ok = 0;
    for (size_t e = 0; v->kind == SB_NODE_STRING && a->enums[e] != NULL && !ok; e++)
        ok = strcmp(a->enums[e], v->text) == 0;
    if (ok)
        return;
    char list[256];
    size_t o = 0;
    for (size_t e = 0; a->enums[e] != NULL && o < sizeof list; e++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", e ? ", " : "", a->enums[e]);
    sb_diags_add(d, path, v->line, v->col, "must be one of %s, got %s%.60s%s", list,
                 v->kind == SB_NODE_STRING ? "\"" : "", v->text,
                 v->kind == SB_NODE_STRING ? "\"" : "");
}

/* An A_STRMAP value: an object (else what it must be) whose values are strings (each one that
 * is not, reported here). */
static const char *check_strmap_arg(const sb_node *v, const char *path, sb_diags *d)
{
    if (v->kind != SB_NODE_MAP)
        return "a map of strings";
    for (size_t k = 0; k < v->n; k++) {
        if (v->items[k]->kind == SB_NODE_STRING)
            continue;
        char kb[512];
        sb_spec_path_field(kb, sizeof kb, path, v->keys[k]->text);
        sb_diags_add(d, kb, v->items[k]->line, v->items[k]->col,
                     "must be a string (quote numbers and booleans)");
    }
    return NULL;
}

/* An A_ENVNAMES list: strings of [A-Za-z_][A-Za-z0-9_]*, each may end in '*' (a prefix). */
static int env_names(const sb_node *v)
{
    if (v->kind != SB_NODE_SEQ || v->n == 0 || !all_strings(v))
        return 0;
    for (size_t i = 0; i < v->n; i++) {
        const char *t = v->items[i]->text;
        size_t n = strlen(t);
        if (n > 0 && t[n - 1] == '*')
            n--;
        if (n == 0 && t[0] != '*')
            return 0;
        for (size_t k = 0; k < n; k++)
            if (!(t[k] == '_' || (t[k] >= 'A' && t[k] <= 'Z') || (t[k] >= 'a' && t[k] <= 'z') ||
                  (k > 0 && t[k] >= '0' && t[k] <= '9')))
                return 0;
    }
    return 1;
}

/* What v must be when it is not a valid value of a (wbuf may hold the text); NULL when it is
 * valid or its problems were reported here. */
static const char *arg_want(const argspec *a, const sb_node *v, const char *path, char *wbuf,
                            size_t wlen, sb_diags *d)
{
    int64_t ns = 0;
    sb_err e = {0};
    switch (a->kind) {
    case A_STR:
        return v->kind != SB_NODE_STRING || v->text_len == 0 ? "a non-empty string" : NULL;
    case A_INT:
        if (a->max > 0 &&
            (v->kind != SB_NODE_INT || v->v.i < (long long)a->min || v->v.i > (long long)a->max)) {
            snprintf(wbuf, wlen, "an integer from %lld to %lld", (long long)a->min,
                     (long long)a->max);
            return wbuf;
        }
        if (v->kind != SB_NODE_INT || v->v.i < (long long)a->min)
            return a->min >= 1   ? "a positive integer"
                   : a->min == 0 ? "a non-negative integer"
                                 : "an integer";
        return NULL;
    case A_NUM:
        if (!finite_number(v) || (v->kind == SB_NODE_INT ? (double)v->v.i : v->v.f) < a->min)
            return "a non-negative number";
        return NULL;
    case A_BOOL:
        return v->kind != SB_NODE_BOOL ? "a boolean (true or false)" : NULL;
    case A_STRLIST:
        if (v->kind != SB_NODE_SEQ || v->n == 0 || !all_strings(v))
            return "a non-empty list of strings";
        return NULL;
    case A_NUMS:
        if (finite_number(v) || (v->kind == SB_NODE_SEQ && v->n > 0 &&
                                 (a->max <= 0 || v->n <= a->max) && all_finite_numbers(v)))
            return NULL;
        snprintf(wbuf, wlen, "a finite number, or a list of 1 to %lld finite numbers",
                 (long long)a->max);
        return a->max > 0 ? wbuf : "a finite number, or a non-empty list of finite numbers";
    case A_SCALAR:
        if (v->kind == SB_NODE_MAP || v->kind == SB_NODE_SEQ ||
            (v->kind == SB_NODE_FLOAT && !isfinite(v->v.f)))
            return "a string, a finite number or a boolean";
        return NULL;
    case A_ENUM:
        check_enum_arg(a, v, path, d);
        return NULL;
    case A_DURATION:
        if (v->kind != SB_NODE_STRING || sb_duration_parse(v->text, &ns, &e) != 0 || ns <= 0)
            return "a duration more than 0 (examples: 30s, 5m, 1h30m, 300ms)";
        return NULL;
    case A_STRMAP:
        return check_strmap_arg(v, path, d);
    case A_ENVNAMES:
        return v->kind == SB_NODE_BOOL || env_names(v)
                   ? NULL
                   : "true, false or a non-empty list of variable names (NAME or PREFIX*)";
    case A_ANY:
        return NULL;
    }
    return NULL;
}

/* Checks an args object against a spec. what = "op \"filter\"" or "format \"csv\"". partial:
 * required arguments may be missing (shapeArgs, merged over args). */
static void check_args(const argspec *spec, const sb_node *args, const char *path,
                       const sb_node *owner, const char *what, int partial, sb_diags *d)
{
    char buf[512], wbuf[96];
    check_unknown_args(spec, args, path, what, d);
    const sb_node *at = args != NULL ? args : owner;
    for (size_t i = 0; spec[i].name != NULL; i++) {
        const argspec *a = &spec[i];
        const sb_node *v = sb_node_get(args, a->name);
        sb_spec_path_field(buf, sizeof buf, path, a->name);
        if (v == NULL || v->kind == SB_NODE_NULL) {
            if (a->required && !partial)
                sb_diags_add(d, buf, at ? at->line : 0, at ? at->col : 0,
                             "required argument of %s is missing", what);
            continue;
        }
        const char *want = arg_want(a, v, buf, wbuf, sizeof wbuf, d);
        if (want != NULL)
            sb_diags_add(d, buf, v->line, v->col, "must be %s, got %s%.60s%s%s", want,
                         v->kind == SB_NODE_STRING ? "\"" : "",
                         v->kind == SB_NODE_MAP   ? "an object"
                         : v->kind == SB_NODE_SEQ ? "a list"
                                                  : v->text,
                         v->kind == SB_NODE_STRING ? "\"" : "",
                         v->kind == SB_NODE_BOOL && a->kind != A_BOOL ? " (" YAML11_HINT ")" : "");
    }
}

/* ---- URIs --------------------------------------------------------------------------------- */

static int valid_bucket(const char *b, size_t n)
{
    if (n < 3 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return 0;
    }
    return b[0] != '-' && b[0] != '.' && b[n - 1] != '-' && b[n - 1] != '.';
}

static void check_uri(const char *uri, const sb_node *node, const char *path, int is_sink,
                      sb_diags *d)
{
    if (uri == NULL || node == NULL)
        return;
    int line = node->line, col = node->col;
    const char *sep = strstr(uri, "://");
    const char *supported =
        is_sink ? "file://, s3:// and stream://" : "file://, http://, https:// and s3://";
    if (sep == NULL) {
        sb_diags_add(d, path, line, col,
                     "\"%.80s\" has no scheme; write a URI such as file:///data/in or "
                     "s3://bucket/prefix/ (%s supports %s)",
                     uri, is_sink ? "the sink" : "the source", supported);
        return;
    }
    size_t sl = (size_t)(sep - uri);
    const char *rest = sep + 3;
    char dec[4096];
    if (sb_pct_decodes(uri) && strlen(rest) < sizeof dec &&
        sb_pct_decode(rest, strlen(rest), dec, sizeof dec) < 0)
        sb_diags_add(d, path, line, col,
                     "\"%.80s\": a '%%' must start a percent-encoded byte such as %%20 (write "
                     "%%25 for '%%' itself; %%00 is not allowed)",
                     uri);
    if (sl == 4 && strncmp(uri, "file", 4) == 0) {
        if (*rest == '\0')
            sb_diags_add(d, path, line, col, "file URI \"%.80s\" has no path", uri);
    } else if (sl == 2 && strncmp(uri, "s3", 2) == 0) {
        const char *slash = strchr(rest, '/');
        size_t bl = slash ? (size_t)(slash - rest) : strlen(rest);
        if (!valid_bucket(rest, bl))
            sb_diags_add(d, path, line, col,
                         "\"%.80s\": S3 bucket name must be 3-63 lowercase letters, digits, '-' "
                         "or '.'",
                         uri);
    } else if (is_sink && sl == 6 && strncmp(uri, "stream", 6) == 0) {
        if (*rest != '\0')
            sb_diags_add(
                d, path, line, col,
                "\"%.80s\": a stream sink is \"stream://\" with nothing after it (its "
                "consumers connect to `streambatch run --serve HOST:PORT`, or on Kubernetes "
                "to status.stream.address)",
                uri);
    } else if (!is_sink && ((sl == 4 && strncmp(uri, "http", 4) == 0) ||
                            (sl == 5 && strncmp(uri, "https", 5) == 0))) {
        if (*rest == '\0' || *rest == '/')
            sb_diags_add(d, path, line, col, "\"%.80s\" has no host", uri);
    } else {
        sb_diags_add(d, path, line, col, "unsupported scheme \"%.*s\" in \"%.80s\"; %s supports %s",
                     (int)(sl > 20 ? 20 : sl), uri, uri, is_sink ? "the sink" : "the source",
                     supported);
    }
}

/* ---- hooks -------------------------------------------------------------------------------- */

/* source.args.draft of an image source: {width, height}, each an integer from 1 to 65535. */
static const argspec image_draft_args[] = {{"width", A_INT, 1, 1, NULL, 65535},
                                           {"height", A_INT, 1, 1, NULL, 65535},
                                           {NULL, A_ANY, 0, 0, NULL, 0}};

static void check_image_draft(const sb_node *dr, const char *args_path, sb_diags *d)
{
    char buf[512];
    if (dr == NULL)
        return;
    const char *path = sb_spec_path_field(buf, sizeof buf, args_path, "draft");
    if (dr->kind != SB_NODE_MAP)
        sb_diags_add(d, path, dr->line, dr->col,
                     "must be a map {width, height}: the smallest size a JPEG is decoded at");
    else
        check_args(image_draft_args, dr, path, dr, "args.draft", 0, d);
}

static void check_io(const sb_node *node, const char *path, const char *uri, sb_format fmt,
                     int is_sink, sb_diags *d)
{
    char buf[512];
    if (node == NULL)
        return;
    check_uri(uri, sb_node_get(node, "uri"), sb_spec_path_field(buf, sizeof buf, path, "uri"),
              is_sink, d);
    const sb_node *fnode = sb_node_get(node, "format");
    if (fmt == SB_FMT_IMAGE && is_sink && fnode != NULL && fnode->kind == SB_NODE_STRING)
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "format"), fnode->line,
                     fnode->col,
                     "format \"image\" is a source format only; sinks write jsonl, csv, text, "
                     "binary and parquet");
    const sb_node *args = sb_node_get(node, "args");
    if (fmt == SB_FMT_PARQUET && is_sink && args != NULL && args->kind == SB_NODE_MAP) {
        check_parquet_schema(sb_node_get(args, "schema"),
                             sb_spec_path_field(buf, sizeof buf, path, "args"), d);
        const sb_node *inf = sb_node_get(args, "inferSchema");
        if (inf != NULL && sb_node_get(args, "schema") != NULL) {
            char ab[512];
            sb_spec_path_field(ab, sizeof ab, path, "args");
            sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ab, "inferSchema"), inf->line,
                         inf->col, "give either schema or inferSchema, not both");
        }
    }
    if (fmt == SB_FMT_IMAGE && !is_sink && args != NULL && args->kind == SB_NODE_MAP) {
        char ab[512];
        sb_spec_path_field(ab, sizeof ab, path, "args");
        const sb_node *ch = sb_node_get(args, "channels");
        if (ch != NULL && ch->kind == SB_NODE_INT && ch->v.i != 1 && ch->v.i != 3 && ch->v.i != 4)
            sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ab, "channels"), ch->line, ch->col,
                         "must be 1 (gray), 3 (RGB) or 4 (RGBA), got %lld", ch->v.i);
        const sb_node *mp = sb_node_get(args, "maxPixels");
        if (mp != NULL && mp->kind == SB_NODE_INT && mp->v.i > (1ll << 29))
            sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ab, "maxPixels"), mp->line, mp->col,
                         "must be at most %lld (an image of 2^29 pixels), got %lld", 1ll << 29,
                         mp->v.i);
        check_image_draft(sb_node_get(args, "draft"), ab, d);
    }
    if (fnode != NULL && fnode->kind == SB_NODE_STRING &&
        (args == NULL || args->kind == SB_NODE_MAP)) {
        char what[64];
        int stream = is_sink && uri != NULL && strcmp(uri, "stream://") == 0;
        snprintf(what, sizeof what, stream ? "a stream:// sink" : "format \"%s\"",
                 sb_format_names[fmt]);
        check_args(stream ? stream_sink_args : format_args(fmt, is_sink), args,
                   sb_spec_path_field(buf, sizeof buf, path, "args"), node, what, 0, d);
    }
}

static void source_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const sb_source_spec *s = obj;
    check_io(node, path, s->uri, s->format, 0, d);
    if (node == NULL)
        return;
    char buf[512];
    const sb_node *un = sb_node_get(node, "uri"), *ln = sb_node_get(node, "uris");
    if (un != NULL && ln != NULL) {
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "uris"), ln->line, ln->col,
                     "give either uri or uris, not both");
    } else if (un == NULL && ln == NULL) {
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "uri"), node->line, node->col,
                     "required field is missing (or give uris, a list of URIs)");
    } else if (ln != NULL && ln->kind == SB_NODE_SEQ) {
        if (ln->n == 0)
            sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "uris"), ln->line, ln->col,
                         "must list at least one URI");
        char lp[512];
        sb_spec_path_field(lp, sizeof lp, path, "uris");
        for (size_t i = 0; i < s->nuris && i < ln->n; i++) {
            const sb_node *it = ln->items[i];
            sb_spec_path_index(buf, sizeof buf, lp, i);
            if (s->uris[i] == NULL)
                continue; /* a wrong type, reported by the decoder */
            if (s->uris[i][0] == '\0') {
                sb_diags_add(d, buf, it->line, it->col, "must be a non-empty URI");
                continue;
            }
            check_uri(s->uris[i], it, buf, 0, d);
        }
    }
}

static void sink_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const sb_sink_spec *s = obj;
    check_io(node, path, s->uri, s->format, 1, d);
}

static void workers_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const sb_workers_spec *w = obj;
    if (node != NULL && w->min > w->max)
        sb_diags_add(d, path, node->line, node->col, "min (%lld) must not exceed max (%lld%s)",
                     (long long)w->min, (long long)w->max, w->max_set ? "" : ", the default");
}

static const opspec *find_op(const char *name)
{
    for (size_t i = 0; name != NULL && i < NOPS; i++)
        if (strcmp(ops[i].name, name) == 0)
            return &ops[i];
    return NULL;
}

static const char *const shape_names[] = {"cpu", "gpu", NULL};

static unsigned shape_bit(const char *name)
{
    if (name == NULL)
        return 0;
    return strcmp(name, "cpu") == 0   ? SB_SHAPE_BIT_CPU
           : strcmp(name, "gpu") == 0 ? SB_SHAPE_BIT_GPU
                                      : 0;
}

/* "bench.spin, bench.sleep, tensor.mlp, exec and plugin": the ops that run on a shape. */
static const char *ops_on_shape(unsigned bit, char *buf, size_t len)
{
    size_t o = 0, n = 0, total = 0;
    for (size_t i = 0; i < NOPS; i++)
        total += !ops[i].planned && (ops[i].shapes & bit);
    for (size_t i = 0; i < NOPS && o < len; i++) {
        if (ops[i].planned || !(ops[i].shapes & bit))
            continue;
        n++;
        o += (size_t)snprintf(buf + o, len - o, "%s%s",
                              n == 1       ? ""
                              : n == total ? " and "
                                           : ", ",
                              ops[i].name);
    }
    return buf;
}

/* placement: known shapes, no duplicates, shapes the op has, agreeing with resources.gpu; then
 * resources.gpu is made to describe the first shape (pipeline.h). */
static void placement_check(sb_stage_spec *st, const sb_node *node, const char *path, sb_diags *d)
{
    char buf[512], lp[512], list[256];
    const sb_node *pl = sb_node_get(node, "placement");
    st->gpu_shape_gpus = st->resources.gpu > 0 ? st->resources.gpu : 1;
    if (pl == NULL || pl->kind != SB_NODE_SEQ)
        return;
    sb_spec_path_field(lp, sizeof lp, path, "placement");
    if (pl->n == 0) {
        sb_diags_add(d, lp, pl->line, pl->col, "must list at least one shape (cpu, gpu)");
        return;
    }
    const opspec *op = find_op(st->op);
    unsigned seen = 0;
    int ok = 1;
    for (size_t i = 0; i < st->nplacement && i < pl->n; i++) {
        const sb_node *it = pl->items[i];
        const char *name = st->placement[i];
        sb_spec_path_index(buf, sizeof buf, lp, i);
        if (name == NULL) {
            ok = 0;
            continue; /* a wrong type, reported by the decoder */
        }
        unsigned bit = shape_bit(name);
        if (bit == 0) {
            const char *sug = sb_suggest(name, shape_names);
            sb_diags_add(d, buf, it->line, it->col,
                         "unknown shape \"%.40s\"%s%s%s; the shapes are cpu and gpu", name,
                         sug ? " (did you mean \"" : "", sug ? sug : "", sug ? "\"?)" : "");
            ok = 0;
            continue;
        }
        if (seen & bit) {
            sb_diags_add(d, buf, it->line, it->col, "duplicate shape \"%s\"", name);
            ok = 0;
        }
        seen |= bit;
        if (op != NULL && !op->planned && !(op->shapes & bit)) {
            sb_diags_add(d, buf, it->line, it->col,
                         "op \"%s\" has no %s implementation: it runs on %s only (ops that "
                         "also run on gpu: %s)",
                         op->name, name, (op->shapes & SB_SHAPE_BIT_GPU) ? "gpu" : "cpu",
                         ops_on_shape(SB_SHAPE_BIT_GPU, list, sizeof list));
            ok = 0;
        }
    }
    if (!ok)
        return;
    if (st->resources.gpu > 0 && !(seen & SB_SHAPE_BIT_GPU)) {
        const sb_node *g = sb_node_get(sb_node_get(node, "resources"), "gpu");
        sb_diags_add(d, lp, pl->line, pl->col,
                     "resources.gpu is %lld (line %d) but placement does not list gpu; list gpu, "
                     "or drop resources.gpu",
                     (long long)st->resources.gpu, g ? g->line : 0);
        return;
    }
    st->resources.gpu = shape_bit(st->placement[0]) == SB_SHAPE_BIT_GPU ? st->gpu_shape_gpus : 0;
}

/* The op runs with the args of the stage's first shape: shapeArgs.<shape> merged over args. */
static void shape_args_apply(sb_stage_spec *st, const sb_node *node)
{
    const sb_node *sa = sb_node_get(node, "shapeArgs");
    const char *shape = sb_stage_pool(st);
    const sb_node *over = sb_node_get(sa, shape);
    if (over == NULL || over->kind != SB_NODE_MAP || st->args_base_json != NULL)
        return;
    char *merged = sb_stage_args_for_shape(st, shape);
    if (merged == NULL)
        return; /* out of memory: the op runs with args as written */
    st->args_base_json = st->args_json != NULL ? st->args_json : strdup("{}");
    st->args_json = merged;
}

/* shapeArgs: {shape: {args...}} for shapes the stage allows, each checked against the op's
 * arguments (none required: they are merged over args). */
static void shape_args_check(const sb_stage_spec *st, const sb_node *node, const char *path,
                             sb_diags *d)
{
    char buf[512], sp[512], what[96];
    const sb_node *sa = sb_node_get(node, "shapeArgs");
    const opspec *op = find_op(st->op);
    if (sa == NULL || sa->kind != SB_NODE_MAP || op == NULL || op->planned)
        return;
    sb_spec_path_field(sp, sizeof sp, path, "shapeArgs");
    unsigned allowed = sb_stage_shapes(st);
    for (size_t k = 0; k < sa->n; k++) {
        const char *shape = sa->keys[k]->text;
        const sb_node *v = sa->items[k];
        sb_spec_path_field(buf, sizeof buf, sp, shape);
        unsigned bit = shape_bit(shape);
        if (bit == 0) {
            sb_diags_add(d, buf, sa->keys[k]->line, sa->keys[k]->col,
                         "unknown shape \"%.40s\"; the shapes are cpu and gpu", shape);
            continue;
        }
        if (!(allowed & bit)) {
            sb_diags_add(d, buf, sa->keys[k]->line, sa->keys[k]->col,
                         st->nplacement > 0
                             ? "the stage does not run on %s (placement lists %s only)"
                             : "the stage does not run on %s (it runs on %s only: list both in "
                               "placement to allow %s)",
                         shape, allowed == SB_SHAPE_BIT_GPU ? "gpu" : "cpu", shape);
            continue;
        }
        if (v->kind != SB_NODE_MAP) {
            sb_diags_add(d, buf, v->line, v->col, "must be an object of %s's arguments", op->name);
            continue;
        }
        snprintf(what, sizeof what, "op \"%s\"", op->name);
        check_args(op->args, v, buf, sa->keys[k], what, 1, d);
        if (op->one_of != NULL) {
            char a[64], b[64];
            const char *bar = strchr(op->one_of, '|');
            snprintf(a, sizeof a, "%.*s", (int)(bar - op->one_of), op->one_of);
            snprintf(b, sizeof b, "%s", bar + 1);
            if (sb_node_get(v, a) != NULL && sb_node_get(v, b) != NULL)
                sb_diags_add(d, buf, v->line, v->col, "%s needs exactly one of \"%s\" or \"%s\"",
                             what, a, b);
        }
    }
}

/* The op's rules on the arguments of every shape the stage runs on: args alone when a shape has
 * no shapeArgs, and args with each shape's shapeArgs over them (sb_stage_args_for_shape). */
static void op_rules_check(const opspec *op, const sb_stage_spec *st, const sb_node *node,
                           const char *path, sb_diags *d)
{
    char ap[512], sp[512], op_path[512];
    const sb_node *args = sb_node_get(node, "args"), *sa = sb_node_get(node, "shapeArgs");
    arg_layers l = {args != NULL && args->kind == SB_NODE_MAP ? args : NULL, NULL,
                    sb_spec_path_field(ap, sizeof ap, path, "args"), NULL, 0};
    unsigned shapes = sb_stage_shapes(st) & op->shapes;
    const sb_node *over[2] = {NULL, NULL};
    int bare = shapes == 0;
    for (size_t k = 0; k < 2; k++) {
        if (!(shapes & shape_bit(shape_names[k])))
            continue;
        over[k] = sb_node_get(sa, shape_names[k]);
        if (over[k] != NULL && over[k]->kind != SB_NODE_MAP)
            over[k] = NULL; /* not an object: reported, and not merged */
        bare |= over[k] == NULL;
    }
    if (bare)
        op->rules(&l, d);
    l.over_only = bare;
    for (size_t k = 0; k < 2; k++) {
        if (over[k] == NULL)
            continue;
        l.over = over[k];
        l.over_path = sb_spec_path_field(op_path, sizeof op_path,
                                         sb_spec_path_field(sp, sizeof sp, path, "shapeArgs"),
                                         shape_names[k]);
        op->rules(&l, d);
        l.over_only = 1; /* what args alone give is reported once */
    }
}

/* exec: output is an option of framing "lines". */
static void exec_args_check(const sb_node *args, const char *path, sb_diags *d)
{
    const sb_node *fr = sb_node_get(args, "framing");
    const sb_node *outn = sb_node_get(args, "output");
    if (fr == NULL || fr->kind != SB_NODE_STRING || strcmp(fr->text, "arrow") != 0 || outn == NULL)
        return;
    char ab[512], buf[512];
    sb_spec_path_field(ab, sizeof ab, path, "args");
    sb_spec_path_field(buf, sizeof buf, ab, "output");
    sb_diags_add(d, buf, outn->line, outn->col,
                 "output applies to framing \"lines\" only (framing \"arrow\" carries "
                 "typed columns; docs/exec.md)");
}

/* An op named by the API that this build does not run. */
static void planned_op(const char *name, const sb_node *opn, const char *path, sb_diags *d)
{
    char buf[512];
    sb_spec_path_field(buf, sizeof buf, path, "op");
    if (strcmp(name, "image.decode") == 0)
        sb_diags_add(d, buf, opn->line, opn->col,
                     "op \"image.decode\" does not exist in this build: the image "
                     "source format decodes (source.format: image, args.channels); use "
                     "image.resize to give images one size");
    else
        sb_diags_add(d, buf, opn->line, opn->col,
                     "op \"%s\" is not in this build yet; the ops this build runs are "
                     "identity, bench.spin, bench.sleep, filter, project, image.resize, "
                     "image.normalize, tensor.mlp, exec, plugin, repartition, random_shuffle, "
                     "groupby, distinct, limit, join and sort",
                     name);
}

static void unknown_op(const char *name, const sb_node *opn, const char *path, sb_diags *d)
{
    char buf[512];
    const char *s = sb_suggest(name, sb_op_names);
    sb_spec_path_field(buf, sizeof buf, path, "op");
    if (s != NULL)
        sb_diags_add(d, buf, opn->line, opn->col, "unknown op \"%.80s\" (did you mean \"%s\"?)",
                     name, s);
    else
        sb_diags_add(d, buf, opn->line, opn->col,
                     "unknown op \"%.80s\"; built-in ops are identity, bench.spin, bench.sleep, "
                     "filter, project, image.resize, image.normalize, tensor.mlp, exec, plugin, "
                     "repartition, random_shuffle, groupby, distinct, limit, join and sort",
                     name);
}

static void stage_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    placement_check(obj, node, path, d);
    size_t before = d->n;
    shape_args_check(obj, node, path, d);
    if (d->n == before)
        shape_args_apply(obj, node);
    const sb_stage_spec *st = obj;
    char buf[512];
    if (node == NULL || st->op == NULL)
        return;
    const sb_node *opn = sb_node_get(node, "op");
    const opspec *op = find_op(st->op);
    if (op == NULL) {
        unknown_op(st->op, opn, path, d);
        return;
    }
    const sb_node *args = sb_node_get(node, "args");
    if (args != NULL && args->kind != SB_NODE_MAP && args->kind != SB_NODE_NULL)
        return; /* the type error was reported */
    if (args != NULL && args->kind == SB_NODE_NULL)
        args = NULL;
    if (op->planned) {
        planned_op(st->op, opn, path, d);
        return;
    }
    char what[64];
    snprintf(what, sizeof what, "op \"%s\"", st->op);
    sb_spec_path_field(buf, sizeof buf, path, "args");
    check_args(op->args, args, buf, node, what, 0, d);
    if (strcmp(st->op, "exec") == 0)
        exec_args_check(args, path, d);
    if (strcmp(st->op, "tensor.mlp") == 0)
        mlp_shape_check(st, args, path, d);
    if (sb_spec_allop(st->op))
        sb_spec_allop_args_check(st->op, args, node, path, d);
    if (strcmp(st->op, "join") == 0)
        sb_spec_join_args_check(args, node, path, d);
    if (op->rules != NULL)
        op_rules_check(op, st, node, path, d);
    if (op->one_of != NULL) {
        char a[64], b[64];
        const char *bar = strchr(op->one_of, '|');
        snprintf(a, sizeof a, "%.*s", (int)(bar - op->one_of), op->one_of);
        snprintf(b, sizeof b, "%s", bar + 1);
        int ha = sb_node_get(args, a) != NULL, hb = sb_node_get(args, b) != NULL;
        if (ha == hb)
            sb_diags_add(d, buf, args ? args->line : node->line, args ? args->col : node->col,
                         "%s needs exactly one of \"%s\" or \"%s\"", what, a, b);
    }
}

/* A stream:// sink keeps the output in the workers for consumers: what only makes sense for
 * files (write modes, credentials; its args are its own, check_io) and what the stream does not do
 * (order by lineage, the staged mode, which runs without a budget) is refused. */
static void stream_sink_check(const sb_pipeline_spec *sp, const sb_node *node, const char *path,
                              sb_diags *d)
{
    if (sp->sink.uri == NULL || strcmp(sp->sink.uri, "stream://") != 0)
        return;
    char buf[512];
    const sb_node *sink = sb_node_get(node, "sink"), *ex = sb_node_get(node, "execution");
    static const char *const file_only[] = {"mode", "credentialsSecret"};
    for (size_t i = 0; i < sizeof file_only / sizeof *file_only; i++) {
        const sb_node *n = sb_node_get(sink, file_only[i]);
        /* (the CRD defaults mode to overwrite on every sink: that one says nothing) */
        if (n == NULL || (i == 0 && n->kind == SB_NODE_STRING && strcmp(n->text, "overwrite") == 0))
            continue;
        snprintf(buf, sizeof buf, "%s.sink.%s", path, file_only[i]);
        sb_diags_add(d, buf, n->line, n->col,
                     "a stream:// sink writes no files: %s means nothing there; remove it",
                     file_only[i]);
    }
    const sb_node *po = sb_node_get(ex, "preserveOrder");
    if (sp->execution.preserve_order && po != NULL) {
        snprintf(buf, sizeof buf, "%s.execution.preserveOrder", path);
        sb_diags_add(d, buf, po->line, po->col,
                     "a stream:// sink deals partitions in the order they are made; "
                     "preserveOrder is not built for it");
    }
    uint64_t seed;
    char why[512];
    const char *arg = NULL;
    const char *bad =
        sb_spec_stream_plan_check(sp, sb_sink_stream_epochs(&sp->sink),
                                  sb_sink_stream_seed(&sp->sink, &seed), &arg, why, sizeof why);
    const sb_node *args = sb_node_get(sink, "args");
    if (bad != NULL) {
        const sb_node *at = sb_node_get(args, arg);
        at = at != NULL ? at : sink;
        snprintf(buf, sizeof buf, "%s.sink.args.%s", path, arg);
        sb_diags_add(d, buf, at->line, at->col, "%s", bad);
    }
    const sb_node *mode = sb_node_get(ex, "mode");
    if (sp->execution.mode == SB_MODE_STAGED && mode != NULL) {
        snprintf(buf, sizeof buf, "%s.execution.mode", path);
        sb_diags_add(d, buf, mode->line, mode->col,
                     "a stream:// sink needs the memory budget (a slow consumer holds the "
                     "pipeline back); mode staged runs without one");
    }
}

static void spec_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const sb_pipeline_spec *sp = obj;
    char buf[512];
    if (node == NULL)
        return;
    const sb_node *stages = sb_node_get(node, "stages");
    for (size_t i = 0; i < sp->nstages; i++) {
        if (sp->stages[i].name == NULL)
            continue;
        for (size_t j = 0; j < i; j++) {
            if (sp->stages[j].name == NULL || strcmp(sp->stages[i].name, sp->stages[j].name) != 0)
                continue;
            const sb_node *nn = sb_node_get(stages->items[i], "name");
            snprintf(buf, sizeof buf, "%s.stages[%zu].name", path, i);
            sb_diags_add(d, buf, nn->line, nn->col,
                         "duplicate stage name \"%s\" (also %s.stages[%zu].name)",
                         sp->stages[i].name, path, j);
            break;
        }
    }
    sb_spec_allop_pipeline_check(sp, node, path, d);
    const sb_node *ex = sb_node_get(node, "execution");
    stream_sink_check(sp, node, path, d);
    const sb_node *mb = sb_node_get(ex, "memoryBudget");
    if (sp->execution.memory_budget < sp->source.partition_size && sp->source.partition_size > 0) {
        char a[32], b[32];
        snprintf(buf, sizeof buf, "%s.execution.memoryBudget", path);
        sb_diags_add(d, buf, mb ? mb->line : node->line, mb ? mb->col : node->col,
                     "must hold at least one partition: %s is less than source.partitionSize %s",
                     sb_quantity_format_bytes(sp->execution.memory_budget, a, sizeof a),
                     sb_quantity_format_bytes(sp->source.partition_size, b, sizeof b));
    }
}

static void root_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    (void)path;
    const sb_pipeline *p = obj;
    const sb_node *av = sb_node_get(node, "apiVersion");
    if (p->api_version != NULL && strcmp(p->api_version, SB_API_VERSION) != 0)
        sb_diags_add(d, "apiVersion", av->line, av->col,
                     "unsupported apiVersion \"%.80s\"; this version reads \"" SB_API_VERSION "\"",
                     p->api_version);
}

/* ---- tables ------------------------------------------------------------------------------- */

#define NF(arr) (sizeof arr / sizeof *arr)

static const sb_schema_field metadata_fields[] = {
    {.name = "name",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_metadata_spec, name),
     .format = SB_SF_DNS_SUBDOMAIN},
    {.name = "namespace",
     .type = SB_FT_STRING,
     .offset = offsetof(sb_metadata_spec, namespace_),
     .format = SB_SF_DNS_LABEL},
    {.name = "uid", .type = SB_FT_STRING, .offset = offsetof(sb_metadata_spec, uid)},
};
static const sb_object_schema metadata_schema = {
    "ObjectMeta", metadata_fields, NF(metadata_fields), sizeof(sb_metadata_spec), 1, NULL};

static const sb_schema_field source_fields[] = {
    {.name = "uri",
     .type = SB_FT_STRING,
     .offset = offsetof(sb_source_spec, uri),
     .format = SB_SF_NONEMPTY},
    {.name = "uris",
     .type = SB_FT_STRLIST,
     .offset = offsetof(sb_source_spec, uris),
     .count_offset = offsetof(sb_source_spec, nuris)},
    {.name = "format",
     .type = SB_FT_ENUM,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_source_spec, format),
     .enums = sb_format_names},
    {.name = "partitionSize",
     .type = SB_FT_BYTES,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_source_spec, partition_size),
     /* a floor: below 1 KiB every record is its own split and task (a typo such as
      * "64" for "64Mi" would turn one file into millions of tasks) */
     .min = 1024,
     .def = "64Mi"},
    {.name = "credentialsSecret",
     .type = SB_FT_STRING,
     .offset = offsetof(sb_source_spec, credentials_secret),
     .format = SB_SF_DNS_SUBDOMAIN},
    {.name = "args", .type = SB_FT_FREEFORM, .offset = offsetof(sb_source_spec, args_json)},
};
static const sb_object_schema source_schema = {
    "Source", source_fields, NF(source_fields), sizeof(sb_source_spec), 0, source_check};

static const sb_schema_field sink_fields[] = {
    {.name = "uri",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_sink_spec, uri),
     .format = SB_SF_NONEMPTY},
    {.name = "format",
     .type = SB_FT_ENUM,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_sink_spec, format),
     .enums = sb_format_names},
    {.name = "credentialsSecret",
     .type = SB_FT_STRING,
     .offset = offsetof(sb_sink_spec, credentials_secret),
     .format = SB_SF_DNS_SUBDOMAIN},
    {.name = "args", .type = SB_FT_FREEFORM, .offset = offsetof(sb_sink_spec, args_json)},
    {.name = "mode",
     .type = SB_FT_ENUM,
     .offset = offsetof(sb_sink_spec, mode),
     .enums = sb_sink_mode_names,
     .def = "overwrite"},
};
static const sb_object_schema sink_schema = {
    "Sink", sink_fields, NF(sink_fields), sizeof(sb_sink_spec), 0, sink_check};

static const sb_schema_field resources_fields[] = {
    {.name = "cpu",
     .type = SB_FT_MILLI,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_resources_spec, cpu_milli),
     .min = 1,
     .def = "1"},
    {.name = "memory",
     .type = SB_FT_BYTES,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_resources_spec, memory_bytes),
     .min = 1},
    {.name = "gpu",
     .type = SB_FT_INT,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_resources_spec, gpu),
     .min = 0,
     .def = "0"},
};
static const sb_object_schema resources_schema = {
    "Resources", resources_fields, NF(resources_fields), sizeof(sb_resources_spec), 0, NULL};

static const sb_schema_field workers_fields[] = {
    {.name = "min",
     .type = SB_FT_INT,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_workers_spec, min),
     .present_offset = SB_PRESENT(sb_workers_spec, min_set),
     .min = 0,
     .def = "1"},
    {.name = "max",
     .type = SB_FT_INT,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_workers_spec, max),
     .present_offset = SB_PRESENT(sb_workers_spec, max_set),
     .min = 1,
     .def = "16"},
};
static const sb_object_schema workers_schema = {
    "Workers", workers_fields, NF(workers_fields), sizeof(sb_workers_spec), 0, workers_check};

static const sb_schema_field stage_fields[] = {
    {.name = "name",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_stage_spec, name),
     .format = SB_SF_DNS_LABEL},
    {.name = "op",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_stage_spec, op),
     .format = SB_SF_NONEMPTY},
    {.name = "args", .type = SB_FT_FREEFORM, .offset = offsetof(sb_stage_spec, args_json)},
    {.name = "batchSize",
     .type = SB_FT_INT,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_stage_spec, batch_size),
     .min = 1},
    {.name = "resources",
     .type = SB_FT_OBJECT,
     .offset = offsetof(sb_stage_spec, resources),
     .object = &resources_schema},
    {.name = "workers",
     .type = SB_FT_OBJECT,
     .offset = offsetof(sb_stage_spec, workers),
     .object = &workers_schema},
    {.name = "placement",
     .type = SB_FT_STRLIST,
     .offset = offsetof(sb_stage_spec, placement),
     .count_offset = offsetof(sb_stage_spec, nplacement)},
    {.name = "shapeArgs",
     .type = SB_FT_FREEFORM,
     .offset = offsetof(sb_stage_spec, shape_args_json)},
};
static const sb_object_schema stage_schema = {
    "Stage", stage_fields, NF(stage_fields), sizeof(sb_stage_spec), 0, stage_check};

/* A number field that must be more than 0 (or at least 0). */
static void positive_number(const sb_node *node, const char *name, double v, bool set, int zero_ok,
                            const char *path, sb_diags *d)
{
    const sb_node *n = sb_node_get(node, name);
    if (!set || n == NULL || ((zero_ok ? v >= 0 : v > 0) && isfinite(v)))
        return;
    char buf[512];
    sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, name), n->line, n->col,
                 "must be a number %s, got %.60s", zero_ok ? "of at least 0" : "more than 0",
                 n->text);
}

static void target_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const sb_target_spec *t = obj;
    if (node == NULL)
        return;
    positive_number(node, "rowsPerSecond", t->rows_per_second, t->rows_per_second_set, 0, path, d);
    positive_number(node, "maxCostPerHour", t->max_cost_per_hour, t->max_cost_per_hour_set, 0, path,
                    d);
    if (t->rows_per_second_set && t->deadline_set) {
        char buf[512];
        const sb_node *n = sb_node_get(node, "deadline");
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "deadline"), n->line, n->col,
                     "give rowsPerSecond or deadline, not both");
    }
}

static void pricing_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const sb_pricing_spec *p = obj;
    if (node == NULL)
        return;
    positive_number(node, "cpuCoreHour", p->cpu_core_hour, p->cpu_core_hour_set, 1, path, d);
    positive_number(node, "memoryGiBHour", p->memory_gib_hour, p->memory_gib_hour_set, 1, path, d);
    positive_number(node, "gpuHour", p->gpu_hour, p->gpu_hour_set, 1, path, d);
}

static const sb_schema_field target_fields[] = {
    {.name = "rowsPerSecond",
     .type = SB_FT_NUMBER,
     .offset = offsetof(sb_target_spec, rows_per_second),
     .present_offset = SB_PRESENT(sb_target_spec, rows_per_second_set)},
    {.name = "deadline",
     .type = SB_FT_DURATION,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_target_spec, deadline_ns),
     .present_offset = SB_PRESENT(sb_target_spec, deadline_set),
     .min = 1000000000},
    {.name = "maxCostPerHour",
     .type = SB_FT_NUMBER,
     .offset = offsetof(sb_target_spec, max_cost_per_hour),
     .present_offset = SB_PRESENT(sb_target_spec, max_cost_per_hour_set)},
};
static const sb_object_schema target_schema = {
    "Target", target_fields, NF(target_fields), sizeof(sb_target_spec), 0, target_check};

static const sb_schema_field pricing_fields[] = {
    {.name = "cpuCoreHour",
     .type = SB_FT_NUMBER,
     .offset = offsetof(sb_pricing_spec, cpu_core_hour),
     .present_offset = SB_PRESENT(sb_pricing_spec, cpu_core_hour_set)},
    {.name = "memoryGiBHour",
     .type = SB_FT_NUMBER,
     .offset = offsetof(sb_pricing_spec, memory_gib_hour),
     .present_offset = SB_PRESENT(sb_pricing_spec, memory_gib_hour_set)},
    {.name = "gpuHour",
     .type = SB_FT_NUMBER,
     .offset = offsetof(sb_pricing_spec, gpu_hour),
     .present_offset = SB_PRESENT(sb_pricing_spec, gpu_hour_set)},
    {.name = "gpuType",
     .type = SB_FT_STRING,
     .offset = offsetof(sb_pricing_spec, gpu_type),
     .format = SB_SF_NONEMPTY},
};
static const sb_object_schema pricing_schema = {
    "Pricing", pricing_fields, NF(pricing_fields), sizeof(sb_pricing_spec), 0, pricing_check};

static const sb_schema_field execution_fields[] = {
    {.name = "memoryBudget",
     .type = SB_FT_BYTES,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_execution_spec, memory_budget),
     .min = 1,
     .def = "2Gi"},
    {.name = "maxTaskRetries",
     .type = SB_FT_INT,
     .flags = SB_F_MIN | SB_F_MAX,
     .offset = offsetof(sb_execution_spec, max_task_retries),
     .min = 0,
     .max = 100,
     .def = "3"},
    {.name = "maxErroredPartitions",
     .type = SB_FT_INT,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_execution_spec, max_errored_partitions),
     .min = 0,
     .def = "0"},
    {.name = "preserveOrder",
     .type = SB_FT_BOOL,
     .offset = offsetof(sb_execution_spec, preserve_order),
     .def = "false"},
    {.name = "mode",
     .type = SB_FT_ENUM,
     .offset = offsetof(sb_execution_spec, mode),
     .enums = sb_exec_mode_names,
     .def = "streaming"},
    {.name = "stallTimeout",
     .type = SB_FT_DURATION,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_execution_spec, stall_timeout_ns),
     .min = 1000000000,
     .def = "5m"},
    {.name = "cpuSlotsPerWorker",
     .type = SB_FT_INT,
     .flags = SB_F_MIN | SB_F_MAX,
     .offset = offsetof(sb_execution_spec, cpu_slots_per_worker),
     .min = 1,
     .max = 64,
     .def = "1"},
    {.name = "target",
     .type = SB_FT_OBJECT,
     .offset = offsetof(sb_execution_spec, target),
     .object = &target_schema},
    {.name = "pricing",
     .type = SB_FT_OBJECT,
     .offset = offsetof(sb_execution_spec, pricing),
     .object = &pricing_schema},
};
static const sb_object_schema execution_schema = {
    "Execution", execution_fields, NF(execution_fields), sizeof(sb_execution_spec), 0, NULL};

/* WorkerTemplate: decoded only for validation; the spec keeps it as JSON text. The pod fields
 * mirror core/v1 (EnvVar, EnvFromSource, Volume, VolumeMount, Toleration) as far as a worker
 * needs them; volume sources other than persistentVolumeClaim are kept as objects and checked
 * for their name fields only (the API server checks the rest when the pod is created). */
struct key_ref {
    char *name, *key;
    bool optional;
};
struct field_ref {
    char *field_path, *api_version;
};
struct resource_ref {
    char *resource, *container_name;
    int64_t divisor;
};
struct env_source {
    struct key_ref secret, config_map;
    struct field_ref field;
    struct resource_ref resource;
};
struct env_var {
    char *name, *value;
    struct env_source from;
};
struct obj_ref {
    char *name;
    bool optional;
};
struct env_from {
    char *prefix;
    struct obj_ref secret, config_map;
};
struct pvc_source {
    char *claim_name;
    bool read_only;
};
struct volume {
    char *name;
    struct pvc_source pvc;
    char *empty_dir, *config_map, *secret, *projected, *csi, *ephemeral, *downward_api;
};
struct volume_mount {
    char *name, *mount_path, *sub_path;
    bool read_only;
};
struct toleration {
    char *key, *value;
    int op, effect;
    int64_t seconds;
};
typedef struct {
    char *image, *sa, *priority_class;
    int pull_policy;
    bool automount_token;
    char *node_selector, *labels, *annotations;
    struct env_var *env;
    size_t nenv;
    struct env_from *env_from;
    size_t nenv_from;
    struct volume *volumes;
    size_t nvolumes;
    struct volume_mount *mounts;
    size_t nmounts;
    struct toleration *tolerations;
    size_t ntolerations;
} worker_template;
static const char *const toleration_ops[] = {"Exists", "Equal", NULL};
static const char *const toleration_effects[] = {"NoSchedule", "PreferNoSchedule", "NoExecute",
                                                 NULL};

const char *const sb_worker_env_names[] = {"SB_CONTROLLER",
                                           "SB_WORKER_ID",
                                           "SB_POD_IP",
                                           "SB_WORKER_PORT",
                                           "SB_POOL",
                                           "SB_SLOTS",
                                           "SB_ACCELERATORS",
                                           "SB_STORE_BUDGET",
                                           "SB_PIPELINE",
                                           "SB_EPOCH",
                                           "SB_METRICS_ADDR",
                                           "SB_SPILL_DIR",
                                           "TMPDIR",
                                           "SB_TLS_DIR",
                                           "SB_TLS_SERVER_NAME",
                                           "SB_AUTH_TOKEN",
                                           "SB_AUTH_CONTROLLER_SHA256",
                                           NULL};
const char *const sb_credentials_keys[] = {"AWS_ACCESS_KEY_ID",
                                           "AWS_SECRET_ACCESS_KEY",
                                           "AWS_SESSION_TOKEN",
                                           "AWS_REGION",
                                           "AWS_ENDPOINT_URL",
                                           "AWS_ENDPOINT_URL_S3",
                                           NULL};
const size_t sb_credentials_required = 2;

const char *sb_pipeline_credentials_secret(const sb_pipeline *p)
{
    if (p == NULL)
        return NULL;
    if (p->spec.source.credentials_secret != NULL)
        return p->spec.source.credentials_secret;
    return p->spec.sink.credentials_secret;
}

/* An environment variable name that every shell and runtime accepts: [A-Za-z_][A-Za-z0-9_]*. */
static int is_c_ident(const char *s, int allow_empty)
{
    if (s == NULL || *s == '\0')
        return allow_empty;
    for (size_t i = 0; s[i] != '\0'; i++) {
        char c = s[i];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
                 (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

/* A key of a Secret or ConfigMap: [-._a-zA-Z0-9]+, at most 253, not "." or "..". */
static int is_config_key(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return 0;
    }
    return 1;
}

static void node_pos(const sb_node *n, const sb_node *fallback, int *line, int *col)
{
    const sb_node *x = n != NULL ? n : fallback;
    *line = x != NULL ? x->line : 0;
    *col = x != NULL ? x->col : 0;
}

/* Exactly one of the named fields of node is set; otherwise one problem at path. */
/* Whether node has a key that is neither in a nor in b (an unknown field, reported as such). */
static int has_unknown_key(const sb_node *node, const char *const *a, const char *const *b)
{
    for (size_t k = 0; node != NULL && node->kind == SB_NODE_MAP && k < node->n; k++) {
        int known = 0;
        for (size_t i = 0; a != NULL && a[i] != NULL && !known; i++)
            known = strcmp(a[i], node->keys[k]->text) == 0;
        for (size_t i = 0; b != NULL && b[i] != NULL && !known; i++)
            known = strcmp(b[i], node->keys[k]->text) == 0;
        if (!known)
            return 1;
    }
    return 0;
}

/* Exactly one of the named fields of node is set; otherwise one problem at path (none when
 * nothing known is set but an unknown field is: that one was reported, e.g. a misspelling).
 * others: the node's other fields. */
static void exactly_one(const sb_node *node, const char *path, const char *const *names,
                        const char *const *others, const char *what, sb_diags *d)
{
    size_t n = 0;
    for (size_t i = 0; names[i] != NULL; i++) {
        const sb_node *x = sb_node_get(node, names[i]);
        n += x != NULL && x->kind != SB_NODE_NULL;
    }
    if (n == 1 || node == NULL || (n == 0 && has_unknown_key(node, names, others)))
        return;
    char list[256];
    size_t o = 0;
    for (size_t i = 0; names[i] != NULL && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", names[i]);
    sb_diags_add(d, path, node->line, node->col, "%s exactly one of %s, got %s", what, list,
                 n == 0 ? "none" : "several");
}

static void key_ref_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const struct key_ref *r = obj;
    char buf[512];
    int line, col;
    if (node == NULL || r->key == NULL || is_config_key(r->key))
        return;
    node_pos(sb_node_get(node, "key"), node, &line, &col);
    sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "key"), line, col,
                 "\"%.80s\" is not a valid key: use letters, digits, '-', '_' and '.'", r->key);
}

static void env_var_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const struct env_var *e = obj;
    char buf[512];
    int line, col;
    if (node == NULL)
        return;
    if (e->name != NULL && !is_c_ident(e->name, 0)) {
        node_pos(sb_node_get(node, "name"), node, &line, &col);
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "name"), line, col,
                     "\"%.80s\" is not a valid variable name: use letters, digits and '_', not "
                     "starting with a digit",
                     e->name);
    }
    const sb_node *from = sb_node_get(node, "valueFrom");
    if (from != NULL && from->kind == SB_NODE_MAP) {
        if (sb_node_get(node, "value") != NULL)
            sb_diags_add(d, path, node->line, node->col,
                         "value and valueFrom exclude each other; give one");
        static const char *const srcs[] = {"secretKeyRef", "configMapKeyRef", "fieldRef",
                                           "resourceFieldRef", NULL};
        exactly_one(from, sb_spec_path_field(buf, sizeof buf, path, "valueFrom"), srcs, NULL,
                    "needs", d);
    }
}

static void env_from_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    const struct env_from *e = obj;
    char buf[512];
    int line, col;
    if (node == NULL)
        return;
    if (e->prefix != NULL && !is_c_ident(e->prefix, 1)) {
        node_pos(sb_node_get(node, "prefix"), node, &line, &col);
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "prefix"), line, col,
                     "\"%.80s\" is not a valid variable name prefix: use letters, digits and "
                     "'_', not starting with a digit",
                     e->prefix);
    }
    static const char *const srcs[] = {"secretRef", "configMapRef", NULL};
    static const char *const others[] = {"prefix", NULL};
    exactly_one(node, path, srcs, others, "needs", d);
}

static const char *const volume_sources[] = {
    "emptyDir",  "persistentVolumeClaim", "configMap", "secret", "projected", "csi",
    "ephemeral", "downwardAPI",           NULL};

static void volume_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    (void)ctx;
    (void)obj;
    char buf[512];
    if (node == NULL)
        return;
    size_t n = 0;
    for (size_t i = 0; volume_sources[i] != NULL; i++)
        n += sb_node_get(node, volume_sources[i]) != NULL;
    static const char *const others[] = {"name", NULL};
    if (n == 0 && has_unknown_key(node, volume_sources, others))
        return; /* hostPath, nfs, a typo: reported as an unknown field */
    if (n != 1) {
        sb_diags_add(d, path, node->line, node->col,
                     "needs exactly one source (emptyDir, persistentVolumeClaim, configMap, "
                     "secret, projected, csi, ephemeral or downwardAPI), got %s%s",
                     n == 0 ? "none" : "several",
                     n == 0 ? " (other types such as hostPath or nfs are refused: reach such "
                              "storage through a PersistentVolumeClaim)"
                            : "");
        return;
    }
    /* the name of the object a configMap or secret volume projects */
    static const struct {
        const char *source, *field;
    } named[] = {{"configMap", "name"}, {"secret", "secretName"}};
    for (size_t i = 0; i < 2; i++) {
        const sb_node *src = sb_node_get(node, named[i].source);
        if (src == NULL || src->kind != SB_NODE_MAP)
            continue;
        char sp[512];
        sb_spec_path_field(sp, sizeof sp, path, named[i].source);
        sb_spec_path_field(buf, sizeof buf, sp, named[i].field);
        const sb_node *nm = sb_node_get(src, named[i].field);
        if (nm == NULL)
            sb_diags_add(d, buf, src->line, src->col, "required field is missing");
        else if (nm->kind != SB_NODE_STRING || !sb_spec_is_dns_subdomain(nm->text))
            sb_diags_add(d, buf, nm->line, nm->col,
                         "must be the name of a %s (a DNS-1123 subdomain of at most 63 "
                         "characters), got %.80s",
                         i == 0 ? "ConfigMap" : "Secret", nm->text);
    }
}

static void volume_mount_check(void *obj, const sb_node *node, const char *path, sb_diags *d,
                               void *ctx)
{
    (void)ctx;
    const struct volume_mount *m = obj;
    char buf[512];
    int line, col;
    if (node == NULL)
        return;
    if (m->mount_path != NULL) {
        const char *mp = m->mount_path;
        size_t sl = strlen(SB_WORKER_SPILL_MOUNT);
        node_pos(sb_node_get(node, "mountPath"), node, &line, &col);
        sb_spec_path_field(buf, sizeof buf, path, "mountPath");
        if (mp[0] != '/')
            sb_diags_add(d, buf, line, col, "\"%.80s\" must be an absolute path", mp);
        else if (strcmp(mp, "/") == 0 || strchr(mp, ':') != NULL)
            sb_diags_add(d, buf, line, col, "\"%.80s\" cannot be mounted over", mp);
        else if (strncmp(mp, SB_WORKER_SPILL_MOUNT, sl) == 0 && (mp[sl] == '\0' || mp[sl] == '/'))
            sb_diags_add(
                d, buf, line, col,
                "\"%.80s\" collides with the worker's spill directory " SB_WORKER_SPILL_MOUNT
                " (an emptyDir the controller mounts); mount elsewhere",
                mp);
        else if (strncmp(mp, SB_WORKER_TLS_MOUNT, strlen(SB_WORKER_TLS_MOUNT)) == 0 &&
                 (mp[strlen(SB_WORKER_TLS_MOUNT)] == '\0' ||
                  mp[strlen(SB_WORKER_TLS_MOUNT)] == '/'))
            sb_diags_add(d, buf, line, col,
                         "\"%.80s\" collides with the worker's TLS directory " SB_WORKER_TLS_MOUNT
                         " (the Secret the controller mounts with TLS on); mount elsewhere",
                         mp);
    }
    if (m->sub_path != NULL &&
        (m->sub_path[0] == '/' || strcmp(m->sub_path, "..") == 0 ||
         strncmp(m->sub_path, "../", 3) == 0 || strstr(m->sub_path, "/../") != NULL ||
         (strlen(m->sub_path) >= 3 && strcmp(m->sub_path + strlen(m->sub_path) - 3, "/..") == 0))) {
        node_pos(sb_node_get(node, "subPath"), node, &line, &col);
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, path, "subPath"), line, col,
                     "\"%.80s\" must be a relative path inside the volume (no leading '/', no "
                     "'..')",
                     m->sub_path);
    }
}

static const sb_schema_field key_ref_fields[] = {
    {.name = "name",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct key_ref, name),
     .format = SB_SF_DNS_SUBDOMAIN},
    {.name = "key",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct key_ref, key),
     .format = SB_SF_NONEMPTY},
    {.name = "optional", .type = SB_FT_BOOL, .offset = offsetof(struct key_ref, optional)},
};
static const sb_object_schema key_ref_schema = {
    "KeySelector", key_ref_fields, NF(key_ref_fields), sizeof(struct key_ref), 0, key_ref_check};
static const sb_schema_field field_ref_fields[] = {
    {.name = "fieldPath",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct field_ref, field_path),
     .format = SB_SF_NONEMPTY},
    {.name = "apiVersion", .type = SB_FT_STRING, .offset = offsetof(struct field_ref, api_version)},
};
static const sb_object_schema field_ref_schema = {"ObjectFieldSelector",
                                                  field_ref_fields,
                                                  NF(field_ref_fields),
                                                  sizeof(struct field_ref),
                                                  0,
                                                  NULL};
static const sb_schema_field resource_ref_fields[] = {
    {.name = "resource",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct resource_ref, resource),
     .format = SB_SF_NONEMPTY},
    {.name = "containerName",
     .type = SB_FT_STRING,
     .offset = offsetof(struct resource_ref, container_name)},
    {.name = "divisor", .type = SB_FT_MILLI, .offset = offsetof(struct resource_ref, divisor)},
};
static const sb_object_schema resource_ref_schema = {"ResourceFieldSelector",
                                                     resource_ref_fields,
                                                     NF(resource_ref_fields),
                                                     sizeof(struct resource_ref),
                                                     0,
                                                     NULL};
static const sb_schema_field env_source_fields[] = {
    {.name = "secretKeyRef",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct env_source, secret),
     .object = &key_ref_schema},
    {.name = "configMapKeyRef",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct env_source, config_map),
     .object = &key_ref_schema},
    {.name = "fieldRef",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct env_source, field),
     .object = &field_ref_schema},
    {.name = "resourceFieldRef",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct env_source, resource),
     .object = &resource_ref_schema},
};
static const sb_object_schema env_source_schema = {
    "EnvVarSource", env_source_fields, NF(env_source_fields), sizeof(struct env_source), 0, NULL};
static const sb_schema_field env_fields[] = {
    {.name = "name",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct env_var, name),
     .format = SB_SF_NONEMPTY},
    {.name = "value", .type = SB_FT_STRING, .offset = offsetof(struct env_var, value)},
    {.name = "valueFrom",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct env_var, from),
     .object = &env_source_schema},
};
static const sb_object_schema env_schema = {
    "EnvVar", env_fields, NF(env_fields), sizeof(struct env_var), 0, env_var_check};
static const sb_schema_field obj_ref_fields[] = {
    {.name = "name",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct obj_ref, name),
     .format = SB_SF_DNS_SUBDOMAIN},
    {.name = "optional", .type = SB_FT_BOOL, .offset = offsetof(struct obj_ref, optional)},
};
static const sb_object_schema obj_ref_schema = {
    "ObjectReference", obj_ref_fields, NF(obj_ref_fields), sizeof(struct obj_ref), 0, NULL};
static const sb_schema_field env_from_fields[] = {
    {.name = "prefix", .type = SB_FT_STRING, .offset = offsetof(struct env_from, prefix)},
    {.name = "secretRef",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct env_from, secret),
     .object = &obj_ref_schema},
    {.name = "configMapRef",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct env_from, config_map),
     .object = &obj_ref_schema},
};
static const sb_object_schema env_from_schema = {
    "EnvFromSource", env_from_fields, NF(env_from_fields), sizeof(struct env_from), 0,
    env_from_check};
static const sb_schema_field pvc_fields[] = {
    {.name = "claimName",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct pvc_source, claim_name),
     .format = SB_SF_DNS_SUBDOMAIN},
    {.name = "readOnly", .type = SB_FT_BOOL, .offset = offsetof(struct pvc_source, read_only)},
};
static const sb_object_schema pvc_schema = {
    "PersistentVolumeClaimVolumeSource", pvc_fields, NF(pvc_fields),
    sizeof(struct pvc_source),           0,          NULL};
static const sb_schema_field volume_fields[] = {
    {.name = "name",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct volume, name),
     .format = SB_SF_DNS_LABEL},
    {.name = "emptyDir", .type = SB_FT_FREEFORM, .offset = offsetof(struct volume, empty_dir)},
    {.name = "persistentVolumeClaim",
     .type = SB_FT_OBJECT,
     .offset = offsetof(struct volume, pvc),
     .object = &pvc_schema},
    {.name = "configMap", .type = SB_FT_FREEFORM, .offset = offsetof(struct volume, config_map)},
    {.name = "secret", .type = SB_FT_FREEFORM, .offset = offsetof(struct volume, secret)},
    {.name = "projected", .type = SB_FT_FREEFORM, .offset = offsetof(struct volume, projected)},
    {.name = "csi", .type = SB_FT_FREEFORM, .offset = offsetof(struct volume, csi)},
    {.name = "ephemeral", .type = SB_FT_FREEFORM, .offset = offsetof(struct volume, ephemeral)},
    {.name = "downwardAPI",
     .type = SB_FT_FREEFORM,
     .offset = offsetof(struct volume, downward_api)},
};
static const sb_object_schema volume_schema = {
    "Volume", volume_fields, NF(volume_fields), sizeof(struct volume), 0, volume_check};
static const sb_schema_field volume_mount_fields[] = {
    {.name = "name",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct volume_mount, name),
     .format = SB_SF_DNS_LABEL},
    {.name = "mountPath",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(struct volume_mount, mount_path),
     .format = SB_SF_NONEMPTY},
    {.name = "subPath", .type = SB_FT_STRING, .offset = offsetof(struct volume_mount, sub_path)},
    {.name = "readOnly", .type = SB_FT_BOOL, .offset = offsetof(struct volume_mount, read_only)},
};
static const sb_object_schema volume_mount_schema = {
    "VolumeMount",     volume_mount_fields, NF(volume_mount_fields), sizeof(struct volume_mount), 0,
    volume_mount_check};
static const sb_schema_field toleration_fields[] = {
    {.name = "key", .type = SB_FT_STRING, .offset = offsetof(struct toleration, key)},
    {.name = "operator",
     .type = SB_FT_ENUM,
     .offset = offsetof(struct toleration, op),
     .enums = toleration_ops},
    {.name = "value", .type = SB_FT_STRING, .offset = offsetof(struct toleration, value)},
    {.name = "effect",
     .type = SB_FT_ENUM,
     .offset = offsetof(struct toleration, effect),
     .enums = toleration_effects},
    {.name = "tolerationSeconds",
     .type = SB_FT_INT,
     .offset = offsetof(struct toleration, seconds)},
};
static const sb_object_schema toleration_schema = {
    "Toleration", toleration_fields, NF(toleration_fields), sizeof(struct toleration), 0, NULL};
static const sb_schema_field template_fields[] = {
    {.name = "image",
     .type = SB_FT_STRING,
     .offset = offsetof(worker_template, image),
     .format = SB_SF_NONEMPTY},
    {.name = "imagePullPolicy",
     .type = SB_FT_ENUM,
     .offset = offsetof(worker_template, pull_policy),
     .enums = pull_policies},
    {.name = "serviceAccountName",
     .type = SB_FT_STRING,
     .offset = offsetof(worker_template, sa),
     .format = SB_SF_DNS_SUBDOMAIN},
    {.name = "automountServiceAccountToken",
     .type = SB_FT_BOOL,
     .offset = offsetof(worker_template, automount_token)},
    {.name = "priorityClassName",
     .type = SB_FT_STRING,
     .offset = offsetof(worker_template, priority_class)},
    {.name = "nodeSelector",
     .type = SB_FT_STRMAP,
     .offset = offsetof(worker_template, node_selector)},
    {.name = "labels", .type = SB_FT_STRMAP, .offset = offsetof(worker_template, labels)},
    {.name = "annotations", .type = SB_FT_STRMAP, .offset = offsetof(worker_template, annotations)},
    {.name = "env",
     .type = SB_FT_LIST,
     .offset = offsetof(worker_template, env),
     .count_offset = offsetof(worker_template, nenv),
     .object = &env_schema},
    {.name = "envFrom",
     .type = SB_FT_LIST,
     .offset = offsetof(worker_template, env_from),
     .count_offset = offsetof(worker_template, nenv_from),
     .object = &env_from_schema},
    {.name = "volumes",
     .type = SB_FT_LIST,
     .offset = offsetof(worker_template, volumes),
     .count_offset = offsetof(worker_template, nvolumes),
     .object = &volume_schema},
    {.name = "volumeMounts",
     .type = SB_FT_LIST,
     .offset = offsetof(worker_template, mounts),
     .count_offset = offsetof(worker_template, nmounts),
     .object = &volume_mount_schema},
    {.name = "tolerations",
     .type = SB_FT_LIST,
     .offset = offsetof(worker_template, tolerations),
     .count_offset = offsetof(worker_template, ntolerations),
     .object = &toleration_schema},
};
static const sb_object_schema template_schema = {
    "WorkerTemplate", template_fields, NF(template_fields), sizeof(worker_template), 0, NULL};

/* The spec keeps the template as JSON; a pseudo-field decodes it for validation only. */
static void template_check(void *obj, const sb_node *node, const char *path, sb_diags *d,
                           void *ctx);
static void credentials_check(const sb_pipeline_spec *sp, const sb_node *node, const char *path,
                              sb_diags *d);

static const sb_schema_field spec_fields[] = {
    {.name = "source",
     .type = SB_FT_OBJECT,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_pipeline_spec, source),
     .object = &source_schema},
    {.name = "stages",
     .type = SB_FT_LIST,
     .flags = SB_F_REQUIRED | SB_F_MIN | SB_F_MAX,
     .offset = offsetof(sb_pipeline_spec, stages),
     .count_offset = offsetof(sb_pipeline_spec, nstages),
     .object = &stage_schema,
     .min = 1,
     .max = 64},
    {.name = "sink",
     .type = SB_FT_OBJECT,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_pipeline_spec, sink),
     .object = &sink_schema},
    {.name = "execution",
     .type = SB_FT_OBJECT,
     .offset = offsetof(sb_pipeline_spec, execution),
     .object = &execution_schema},
    {.name = "workerTemplate",
     .type = SB_FT_FREEFORM,
     .offset = offsetof(sb_pipeline_spec, worker_template_json),
     .object = &template_schema},
    {.name = "suspend",
     .type = SB_FT_BOOL,
     .offset = offsetof(sb_pipeline_spec, suspend),
     .def = "false"},
    {.name = "ttlSecondsAfterFinished",
     .type = SB_FT_INT,
     .flags = SB_F_MIN,
     .offset = offsetof(sb_pipeline_spec, ttl_seconds_after_finished),
     .present_offset = SB_PRESENT(sb_pipeline_spec, ttl_set),
     .min = 0},
};

static void spec_check_all(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    spec_check(obj, node, path, d, ctx);
    template_check(obj, node, path, d, ctx);
    if (node != NULL)
        credentials_check(obj, node, path, d);
}

static const sb_object_schema spec_schema = {"PipelineSpec",           spec_fields, NF(spec_fields),
                                             sizeof(sb_pipeline_spec), 0,           spec_check_all};

/* The list item node i of field `name` of t (for positions), or t. */
static const sb_node *item_node(const sb_node *t, const char *name, size_t i)
{
    const sb_node *l = sb_node_get(t, name);
    return l != NULL && l->kind == SB_NODE_SEQ && i < l->n ? l->items[i] : t;
}

static int in_list(const char *s, const char *const *list)
{
    for (size_t i = 0; s != NULL && list[i] != NULL; i++)
        if (strcmp(s, list[i]) == 0)
            return 1;
    return 0;
}

/* Rules across the template's lists and against what the controller puts into every pod. */
static void template_cross_check(const sb_pipeline_spec *sp, const worker_template *wt,
                                 const sb_node *t, const char *path, sb_diags *d)
{
    char buf[512], ip[512];
    int secret = sp->source.credentials_secret != NULL || sp->sink.credentials_secret != NULL;
    for (size_t i = 0; i < wt->nenv; i++) {
        const char *n = wt->env[i].name;
        if (n == NULL)
            continue;
        const sb_node *it = item_node(t, "env", i);
        sb_spec_path_index(ip, sizeof ip, sb_spec_path_field(buf, sizeof buf, path, "env"), i);
        sb_spec_path_field(buf, sizeof buf, ip, "name");
        const sb_node *nn = sb_node_get(it, "name");
        int line = nn ? nn->line : it->line, col = nn ? nn->col : it->col;
        if (in_list(n, sb_worker_env_names))
            sb_diags_add(d, buf, line, col,
                         "%s is set by the controller in every worker pod and cannot be "
                         "overridden",
                         n);
        else if (secret && in_list(n, sb_credentials_keys))
            sb_diags_add(d, buf, line, col,
                         "%s comes from credentialsSecret; set it in the Secret instead", n);
        for (size_t j = 0; j < i; j++)
            if (wt->env[j].name != NULL && strcmp(wt->env[j].name, n) == 0) {
                sb_diags_add(d, buf, line, col, "duplicate variable %s (also %s.env[%zu])", n, path,
                             j);
                break;
            }
    }
    for (size_t i = 0; i < wt->nvolumes; i++) {
        const char *n = wt->volumes[i].name;
        if (n == NULL)
            continue;
        const sb_node *it = item_node(t, "volumes", i);
        sb_spec_path_index(ip, sizeof ip, sb_spec_path_field(buf, sizeof buf, path, "volumes"), i);
        sb_spec_path_field(buf, sizeof buf, ip, "name");
        const sb_node *nn = sb_node_get(it, "name");
        int line = nn ? nn->line : it->line, col = nn ? nn->col : it->col;
        if (strcmp(n, SB_WORKER_SPILL_VOLUME) == 0)
            sb_diags_add(d, buf, line, col,
                         "\"%s\" is the name of the controller's spill volume; choose another", n);
        else if (strcmp(n, SB_WORKER_TLS_VOLUME) == 0)
            sb_diags_add(d, buf, line, col,
                         "\"%s\" is the name of the controller's TLS volume; choose another", n);
        for (size_t j = 0; j < i; j++)
            if (wt->volumes[j].name != NULL && strcmp(wt->volumes[j].name, n) == 0) {
                sb_diags_add(d, buf, line, col, "duplicate volume \"%s\" (also %s.volumes[%zu])", n,
                             path, j);
                break;
            }
    }
    for (size_t i = 0; i < wt->nmounts; i++) {
        const struct volume_mount *m = &wt->mounts[i];
        const sb_node *it = item_node(t, "volumeMounts", i);
        sb_spec_path_index(ip, sizeof ip, sb_spec_path_field(buf, sizeof buf, path, "volumeMounts"),
                           i);
        if (m->name != NULL) {
            int found = strcmp(m->name, SB_WORKER_SPILL_VOLUME) == 0;
            for (size_t j = 0; j < wt->nvolumes && !found; j++)
                found = wt->volumes[j].name != NULL && strcmp(wt->volumes[j].name, m->name) == 0;
            const sb_node *nn = sb_node_get(it, "name");
            if (!found)
                sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ip, "name"),
                             nn ? nn->line : it->line, nn ? nn->col : it->col,
                             "no volume \"%.80s\" in %s.volumes", m->name, path);
        }
        if (m->mount_path == NULL)
            continue;
        for (size_t j = 0; j < i; j++)
            if (wt->mounts[j].mount_path != NULL &&
                strcmp(wt->mounts[j].mount_path, m->mount_path) == 0) {
                const sb_node *pn = sb_node_get(it, "mountPath");
                sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ip, "mountPath"),
                             pn ? pn->line : it->line, pn ? pn->col : it->col,
                             "duplicate mountPath \"%.80s\" (also %s.volumeMounts[%zu])",
                             m->mount_path, path, j);
                break;
            }
    }
}

static void template_check(void *obj, const sb_node *node, const char *path, sb_diags *d, void *ctx)
{
    const sb_pipeline_spec *sp = obj;
    const sb_node *t = sb_node_get(node, "workerTemplate");
    if (t == NULL || t->kind != SB_NODE_MAP)
        return;
    char buf[512];
    worker_template wt;
    memset(&wt, 0, sizeof wt);
    sb_spec_path_field(buf, sizeof buf, path, "workerTemplate");
    if (sb_schema_decode(&template_schema, t, &wt, buf, d, ctx) == 0)
        template_cross_check(sp, &wt, t, buf, d);
    sb_schema_free(&template_schema, &wt);
}

/* A worker has one environment, so one set of AWS credentials: source and sink must name the
 * same Secret when both name one. */
static void credentials_check(const sb_pipeline_spec *sp, const sb_node *node, const char *path,
                              sb_diags *d)
{
    const char *a = sp->source.credentials_secret, *b = sp->sink.credentials_secret;
    if (a == NULL || b == NULL || strcmp(a, b) == 0)
        return;
    char buf[512];
    const sb_node *n = sb_node_get(sb_node_get(node, "sink"), "credentialsSecret");
    snprintf(buf, sizeof buf, "%s.sink.credentialsSecret", path);
    sb_diags_add(d, buf, n ? n->line : 0, n ? n->col : 0,
                 "must equal %s.source.credentialsSecret when both are set: a worker has one set "
                 "of AWS credentials (sink names \"%.80s\", source \"%.80s\")",
                 path, b, a);
}

static const sb_schema_field root_fields[] = {
    {.name = "apiVersion",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_pipeline, api_version)},
    {.name = "kind",
     .type = SB_FT_STRING,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_pipeline, kind)},
    {.name = "metadata",
     .type = SB_FT_OBJECT,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_pipeline, metadata),
     .object = &metadata_schema},
    {.name = "spec",
     .type = SB_FT_OBJECT,
     .flags = SB_F_REQUIRED,
     .offset = offsetof(sb_pipeline, spec),
     .object = &spec_schema},
    /* status is written by the controller; accepted and ignored on input */
    {.name = "status", .type = SB_FT_FREEFORM, .offset = offsetof(sb_pipeline, status_json)},
};
static const sb_object_schema root_schema = {"Pipeline",          root_fields, NF(root_fields),
                                             sizeof(sb_pipeline), 0,           root_check};

const sb_object_schema *sb_pipeline_schema(void)
{
    return &root_schema;
}

const char *sb_stage_pool(const sb_stage_spec *st)
{
    if (st->nplacement > 0 && shape_bit(st->placement[0]) != 0)
        return st->placement[0][0] == 'g' ? "gpu" : "cpu";
    return st->resources.gpu > 0 ? "gpu" : "cpu";
}

unsigned sb_spec_op_shapes(const char *op)
{
    const opspec *o = find_op(op);
    return o != NULL && !o->planned ? o->shapes : 0;
}

unsigned sb_stage_shapes(const sb_stage_spec *st)
{
    unsigned bits = 0;
    for (size_t i = 0; i < st->nplacement; i++)
        bits |= shape_bit(st->placement[i]);
    if (bits != 0)
        return bits;
    return st->resources.gpu > 0 ? SB_SHAPE_BIT_GPU : SB_SHAPE_BIT_CPU;
}

char *sb_stage_args_for_shape(const sb_stage_spec *st, const char *shape)
{
    const char *base = st->args_base_json != NULL ? st->args_base_json : st->args_json;
    cJSON *args = base != NULL ? cJSON_Parse(base) : cJSON_CreateObject();
    cJSON *sa = st->shape_args_json != NULL ? cJSON_Parse(st->shape_args_json) : NULL;
    const cJSON *over = cJSON_GetObjectItemCaseSensitive(sa, shape);
    const opspec *op = find_op(st->op);
    if (args == NULL) {
        cJSON_Delete(sa);
        return NULL;
    }
    for (const cJSON *it = cJSON_IsObject(over) ? over->child : NULL; it != NULL; it = it->next) {
        if (op != NULL && op->one_of != NULL) {
            /* "a|b": an overlay giving a drops the base's b, and the other way round */
            const char *bar = strchr(op->one_of, '|');
            size_t la = (size_t)(bar - op->one_of);
            if (strlen(it->string) == la && strncmp(it->string, op->one_of, la) == 0)
                cJSON_DeleteItemFromObjectCaseSensitive(args, bar + 1);
            else if (strcmp(it->string, bar + 1) == 0) {
                char a[64];
                snprintf(a, sizeof a, "%.*s", (int)la, op->one_of);
                cJSON_DeleteItemFromObjectCaseSensitive(args, a);
            }
        }
        cJSON *copy = cJSON_Duplicate(it, 1);
        if (copy == NULL) {
            cJSON_Delete(args);
            cJSON_Delete(sa);
            return NULL;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(args, it->string);
        cJSON_AddItemToObject(args, it->string, copy);
    }
    char *out = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    cJSON_Delete(sa);
    return out;
}

int sb_pipeline_decode(const sb_node *root, sb_pipeline *out, sb_diags *d)
{
    memset(out, 0, sizeof *out);
    if (root == NULL) {
        sb_diags_add(d, "", 0, 0, "empty document: expected a Pipeline object");
        return 0;
    }
    if (root->kind != SB_NODE_MAP) {
        sb_diags_add(d, "", root->line, root->col,
                     "document is %s, not a Pipeline object (kind: Pipeline, apiVersion: "
                     "" SB_API_VERSION ")",
                     sb_node_kind_name(root->kind));
        return 0;
    }
    const sb_node *kind = sb_node_get(root, "kind");
    if (kind != NULL && kind->kind == SB_NODE_STRING && strcmp(kind->text, SB_KIND) != 0) {
        const sb_node *av = sb_node_get(root, "apiVersion");
        sb_diags_add(d, "kind", kind->line, kind->col,
                     "document is a %.60s%s%.60s%s, not a Pipeline (expected kind: Pipeline, "
                     "apiVersion: " SB_API_VERSION ")",
                     kind->text, av && av->kind == SB_NODE_STRING ? " (" : "",
                     av && av->kind == SB_NODE_STRING ? av->text : "",
                     av && av->kind == SB_NODE_STRING ? ")" : "");
        return 0;
    }
    return sb_schema_decode(&root_schema, root, out, "", d, NULL);
}

void sb_pipeline_free(sb_pipeline *p)
{
    for (size_t i = 0; p->spec.stages != NULL && i < p->spec.nstages; i++) {
        free(p->spec.stages[i].args_base_json);
        p->spec.stages[i].args_base_json = NULL;
    }
    sb_schema_free(&root_schema, p);
}
