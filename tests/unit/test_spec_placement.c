/* placement, shapeArgs, execution.target and execution.pricing in the Pipeline model
 * (lib/spec/pipeline.h): what the decoder makes of them and the args of each shape. The
 * messages of invalid ones are in test_validate_cli.c (tests/invalid/). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "spec/pipeline.h"

static const char *HEAD = "apiVersion: streambatch.dev/v1alpha1\n"
                          "kind: Pipeline\n"
                          "metadata: {name: p}\n"
                          "spec:\n"
                          "  source: {uri: file:///in, format: jsonl}\n"
                          "  sink: {uri: file:///out, format: jsonl}\n";

static sb_doc *doc;

static void decode(const char *rest, sb_pipeline *p, size_t want_problems)
{
    char y[4096];
    snprintf(y, sizeof y, "%s%s", HEAD, rest);
    doc = sb_doc_parse_yaml(y, strlen(y), NULL);
    cr_assert_null(sb_doc_error(doc, NULL, NULL));
    sb_diags d = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(doc, 0), p, &d), 0);
    cr_assert_eq(d.n, want_problems, "%zu problems, first: %s: %s", d.n, d.n ? d.items[0].path : "",
                 d.n ? d.items[0].msg : "");
    sb_diags_free(&d);
}

static void done(sb_pipeline *p)
{
    sb_pipeline_free(p);
    sb_doc_free(doc);
}

Test(spec_placement, first_shape_sets_pool_and_gpus)
{
    sb_pipeline p;
    decode("  stages:\n"
           "  - {name: a, op: bench.spin, args: {msPerRecord: 1}, placement: [gpu, cpu],\n"
           "     resources: {gpu: 2}}\n"
           "  - {name: b, op: bench.spin, args: {msPerRecord: 1}, placement: [cpu, gpu],\n"
           "     resources: {gpu: 2}}\n"
           "  - {name: c, op: tensor.mlp, args: {weights: file:///w, field: x}, placement: [gpu]}\n"
           "  - {name: d, op: identity}\n"
           "  - {name: e, op: identity, resources: {gpu: 1}}\n",
           &p, 0);
    const sb_stage_spec *s = p.spec.stages;
    cr_expect_str_eq(sb_stage_pool(&s[0]), "gpu");
    cr_expect_eq(s[0].resources.gpu, 2);
    cr_expect_eq(s[0].gpu_shape_gpus, 2);
    cr_expect_eq(sb_stage_shapes(&s[0]), SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU);
    cr_expect_str_eq(sb_stage_pool(&s[1]), "cpu");
    cr_expect_eq(s[1].resources.gpu, 0, "a cpu first shape takes no GPU");
    cr_expect_eq(s[1].gpu_shape_gpus, 2);
    cr_expect_str_eq(sb_stage_pool(&s[2]), "gpu");
    cr_expect_eq(s[2].resources.gpu, 1, "a gpu worker takes at least one GPU");
    cr_expect_eq(sb_stage_shapes(&s[2]), SB_SHAPE_BIT_GPU);
    cr_expect_str_eq(sb_stage_pool(&s[3]), "cpu");
    cr_expect_eq(sb_stage_shapes(&s[3]), SB_SHAPE_BIT_CPU);
    cr_expect_eq(sb_stage_shapes(&s[4]), SB_SHAPE_BIT_GPU, "no placement: resources.gpu decides");
    done(&p);
}

Test(spec_placement, op_shapes)
{
    cr_expect_eq(sb_spec_op_shapes("tensor.mlp"), SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU);
    cr_expect_eq(sb_spec_op_shapes("bench.sleep"), SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU);
    cr_expect_eq(sb_spec_op_shapes("filter"), SB_SHAPE_BIT_CPU);
    cr_expect_eq(sb_spec_op_shapes("image.decode"), 0u, "not in this build");
    cr_expect_eq(sb_spec_op_shapes("nope"), 0u);
}

Test(spec_placement, args_for_shape_merge)
{
    sb_pipeline p;
    decode("  stages:\n"
           "  - name: a\n"
           "    op: bench.spin\n"
           "    args: {msPerRecord: 2, expand: 3}\n"
           "    placement: [cpu, gpu]\n"
           "    shapeArgs: {gpu: {msPerMB: 0.5}}\n"
           "  - name: b\n"
           "    op: exec\n"
           "    args: {command: [cat], mode: batches}\n"
           "    placement: [cpu, gpu]\n"
           "    shapeArgs: {gpu: {command: [python3, infer.py, --cuda]}}\n"
           "  - name: c\n"
           "    op: bench.sleep\n"
           "    args: {msPerMB: 4}\n"
           "    placement: [gpu, cpu]\n"
           "    shapeArgs: {gpu: {msPerRecord: 0.1}}\n",
           &p, 0);
    cr_expect_str_eq(p.spec.stages[0].args_json, "{\"msPerRecord\":2,\"expand\":3}",
                     "runs on cpu: args as written");
    cr_expect_null(p.spec.stages[0].args_base_json);
    cr_expect_str_eq(p.spec.stages[2].args_json, "{\"msPerRecord\":0.1}",
                     "runs on gpu: the op gets the gpu args");
    char *a = sb_stage_args_for_shape(&p.spec.stages[0], "cpu");
    cr_expect_str_eq(a, "{\"msPerRecord\":2,\"expand\":3}");
    free(a);
    a = sb_stage_args_for_shape(&p.spec.stages[0], "gpu");
    cr_expect_str_eq(a, "{\"expand\":3,\"msPerMB\":0.5}", "msPerMB replaces msPerRecord");
    free(a);
    a = sb_stage_args_for_shape(&p.spec.stages[1], "gpu");
    cr_expect_str_eq(a, "{\"mode\":\"batches\",\"command\":[\"python3\",\"infer.py\",\"--cuda\"]}");
    free(a);
    a = sb_stage_args_for_shape(&p.spec.stages[2], "cpu");
    cr_expect_str_eq(a, "{\"msPerMB\":4}", "from the args as written, not the gpu ones");
    free(a);
    done(&p);
}

Test(spec_placement, target_and_pricing)
{
    sb_pipeline p;
    decode("  stages: [{name: a, op: identity}]\n"
           "  execution:\n"
           "    target: {deadline: 90m, maxCostPerHour: 12.5}\n"
           "    pricing: {cpuCoreHour: 0.04, gpuType: nvidia-l4}\n",
           &p, 0);
    const sb_execution_spec *e = &p.spec.execution;
    cr_expect(e->target.deadline_set);
    cr_expect_eq(e->target.deadline_ns, 5400000000000ll);
    cr_expect_not(e->target.rows_per_second_set);
    cr_expect(e->target.max_cost_per_hour_set);
    cr_expect_eq(e->target.max_cost_per_hour, 12.5);
    cr_expect(e->pricing.cpu_core_hour_set);
    cr_expect_eq(e->pricing.cpu_core_hour, 0.04);
    cr_expect_not(e->pricing.gpu_hour_set);
    cr_expect_str_eq(e->pricing.gpu_type, "nvidia-l4");
    done(&p);
}
