/* `streambatch run` end to end on the errors a user meets: a failure that can only recur (an
 * op's bad argument) is tried once and fails the run, naming its op once; a jsonl source's
 * record that is not JSON is a data error that never reaches the sink, with only an identity
 * stage (no op that parses records) between them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-itest-err");
    setenv("TMPDIR", dir, 1);
    /* 4 files of 20 records, each over the smallest partitionSize (1Ki): never grouped */
    sh("mkdir -p %s/in", dir);
    for (int f = 0; f < 4; f++) {
        FILE *o = itest_create("in/f%d.jsonl", f);
        for (int i = 0; i < 20; i++)
            fprintf(o, "{\"n\": %d, \"pad\": \"%060d\"}\n", i, 0);
        fclose(o);
    }
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(run_errors, .init = setup, .fini = teardown, .timeout = 240);

static long stage_num(const char *name, const char *key)
{
    char *v = sb_test_sh_out("python3 -c \"import json; print(json.load(open('%s/%s.summary.json'))"
                             "['stages'][0]['%s'])\"",
                             dir, name, key);
    long n = strtol(v, NULL, 10);
    free(v);
    return n;
}

/* A plugin that does not load fails when the op starts in the task: before, 4 attempts of
 * every task and "op plugin: plugin: ..."; now one attempt and the run fails, even with errored
 * partitions allowed (every partition would fail the same way). */
Test(run_errors, an_op_init_failure_is_tried_once_and_named_once)
{
    write_pipeline("badarg", "  - {name: pick, op: plugin, args: {path: /nonexistent/libx.so}}\n",
                   "  execution: {maxTaskRetries: 3, maxErroredPartitions: 10}\n");
    char *out;
    int rc = run_cli("badarg", "--cpus 1", &out);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "op plugin: cannot load /nonexistent/libx.so") != NULL, "%s", out);
    cr_expect(strstr(out, "1 task attempts") != NULL, "%s", out);
    cr_expect(strstr(out, "a retry would repeat") != NULL, "%s", out);
    free(out);
    cr_expect_eq(stage_num("badarg", "retries"), 0, "an op init failure was retried");
}

/* An exec command that does not exist fails the run at once, with either framing (docs/exec.md,
 * "Failures"): with framing arrow the process starts at the first batch, and the failure was
 * retried and then errored every partition one by one ("Succeeded with 4 errored partitions"). */
Test(run_errors, an_exec_command_that_does_not_exist_fails_the_run_with_either_framing)
{
    const char *framing[] = {"lines", "arrow"};
    for (int k = 0; k < 2; k++) {
        char stages[256], name[32];
        snprintf(name, sizeof name, "nocmd-%s", framing[k]);
        snprintf(stages, sizeof stages,
                 "  - {name: run, op: exec, args: {command: [no-such-program-sb], framing: %s}}\n",
                 framing[k]);
        write_pipeline(name, stages,
                       "  execution: {maxTaskRetries: 3, maxErroredPartitions: 10}\n");
        char *out;
        int rc = run_cli(name, "--cpus 1", &out);
        cr_expect_neq(rc, 0, "%s: %s", framing[k], out);
        cr_expect(strstr(out, "command \"no-such-program-sb\" not found in PATH") != NULL, "%s: %s",
                  framing[k], out);
        cr_expect(strstr(out, "a retry would repeat") != NULL, "%s: %s", framing[k], out);
        free(out);
        cr_expect_eq(stage_num(name, "retries"), 0, "%s: retried", framing[k]);
    }
}

/* identity only: "not json" and a truncated last line were written to the jsonl sink under
 * _SUCCESS. Each is a data error of its split, named in the output; the good files' records
 * are written and the bad ones are not. */
Test(run_errors, a_record_that_is_not_json_does_not_reach_a_jsonl_sink)
{
    sh("cd %s/in && printf '{\"n\": 7}\\nnot json\\n' > zz-bad.jsonl && printf '{\"n\": "
       "8}\\n{\"n\":' "
       "> zz-cut.jsonl",
       dir);
    /* partitions of 8 bytes: every file is its own split(s), none grouped with a bad one */
    write_pipeline_ps("ident", "1Ki", "  - {name: copy, op: identity}\n",
                      "  execution: {maxTaskRetries: 3, maxErroredPartitions: 4}\n");
    char *out;
    int rc = run_cli("ident", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "Succeeded with 1 errored partition") != NULL, "%s", out);
    cr_expect(strstr(out, "zz-bad.jsonl") != NULL &&
                  strstr(out, "record 1 is not valid JSON") != NULL,
              "names the file and record: %s", out);
    cr_expect(strstr(out, "zz-cut.jsonl") != NULL, "%s", out);
    free(out);
    cr_expect_eq(stage_num("ident", "retries"), 0, "a data error is not retried");
    cr_expect_eq(num("cat %s/out-ident/part-*.jsonl | grep -c 'not json'", dir), 0);
    cr_expect_eq(num("cat %s/out-ident/part-*.jsonl | grep -c '\"n\":$'", dir), 0);
    cr_expect_eq(num("cat %s/out-ident/part-*.jsonl | grep -c pad", dir), 80,
                 "the good files' records");
}

/* PNG files written with zlib alone (tests/integration/pngs.py, independent of libpng):
 * dir/NAME/p00..p<N-1> of different sizes, and the one at `bad` truncated. */
static void write_pngs(const char *name, int n, int bad)
{
    sh("cd %s && python3 %s/tests/integration/pngs.py %s p %d --bad %d", dir, sb_test_root(), name,
       n, bad);
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/%s/', format: image}\n"
            "  stages:\n  - {name: small, op: image.resize, args: {width: 4, height: 4}}\n"
            "  - {name: answer, op: project, args: {fields: [path, width]}}\n"
            "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n",
            name, dir, name, dir, name);
    fclose(f);
}

/* Small images share a split (split.h: up to 64 each), so a corrupt one sits with good ones:
 * it errors alone. 20 PNGs in one split, p07 truncated: under maxErroredPartitions 1 the run
 * succeeds with the other 19 images and one errored partition naming p07 (before: the whole
 * split errored, or, one split per image, 20 tasks); under 0 the run fails naming it. */
Test(run_errors, a_corrupt_image_grouped_with_good_ones_errors_alone)
{
    write_pngs("img", 20, 7);
    sh("printf '  execution: {maxErroredPartitions: 1}\\n' >> %s/img.yaml", dir);
    char *out;
    int rc = run_cli("img", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "Succeeded with 1 errored partition") != NULL, "%s", out);
    cr_expect(strstr(out, "p07.png") != NULL && strstr(out, "png:") != NULL,
              "the errored partition names the image and the codec: %s", out);
    free(out);
    char *rows = sb_test_sh_out("cat %s/out-img/*.jsonl | python3 -c \"\nimport json, sys\n"
                                "rows = [json.loads(l) for l in sys.stdin]\n"
                                "assert all(r['width'] == 4 for r in rows), rows\n"
                                "print(len(rows), len({r['path'] for r in rows}),"
                                " any('p07' in r['path'] for r in rows))\n\"",
                                dir);
    cr_expect_str_eq(rows, "19 19 False", "rows, distinct images, the bad one among them");
    free(rows);
    cr_expect_eq(summary_num("img", "erroredPartitions"), 1);
    cr_expect_eq(stage_num("img", "tasks"), 1, "the 20 images were one task");
    write_pngs("strict", 20, 7);
    rc = run_cli("strict", "--cpus 2", &out);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "p07.png") != NULL && strstr(out, "maxErroredPartitions is 0") != NULL,
              "fails naming the image: %s", out);
    free(out);
}
