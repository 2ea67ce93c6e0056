/* `streambatch run` with an exec stage that prints its environment: the worker holds the run's
 * AWS_* keys (and any SB_AUTH_* credential), and the process sees none of them by default, all
 * of them with inheritEnv: true, and only the ones named with inheritEnv: [names]
 * (docs/exec.md, "What the process does not get"). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-itest-execenv");
    setenv("TMPDIR", dir, 1);
    sh("mkdir -p %s/in && echo '{\"n\":1}' > %s/in/a.jsonl", dir, dir);
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(exec_env, .init = setup, .fini = teardown, .timeout = 240);

/* dir/show.sh: reads its input, writes one record: what it sees of each variable ("-" when
 * unset; HOME, which is not withheld, as "set"). */
static void write_show(void)
{
    FILE *f = itest_create("show.sh");
    fputs("cat >/dev/null\n"
          "printf '{\"key\":\"%s\",\"region\":\"%s\",\"auth\":\"%s\",\"home\":\"%s\"}\\n' "
          "\"${AWS_SECRET_ACCESS_KEY--}\" \"${AWS_REGION--}\" \"${SB_AUTH_PROBE--}\" "
          "\"${HOME:+set}\"\n",
          f);
    fclose(f);
}

/* Runs pipeline NAME (dir/in/ through the exec stage with INHERIT, YAML lines under args) with
 * the secrets in the run's environment; the one output record. */
static char *run_show(const char *name, const char *inherit)
{
    write_show();
    char stage[1024];
    snprintf(stage, sizeof stage,
             "  - name: show\n    op: exec\n    args:\n      command: [sh, '%s/show.sh']\n%s", dir,
             inherit);
    write_pipeline(name, stage, "");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && AWS_SECRET_ACCESS_KEY=EXECSECRET AWS_REGION=eu-west-9 "
             "SB_AUTH_PROBE=AUTHSECRET HOME=/root timeout 120 %s run %s.yaml --cpus 1 2>&1",
             dir, sb_test_bin("streambatch"), name);
    char *out;
    int rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return sb_test_sh_out("cat %s/out-%s/*.jsonl", dir, name);
}

Test(exec_env, credentials_withheld_by_default)
{
    char *got = run_show("dflt", "");
    cr_expect_str_eq(got, "{\"key\":\"-\",\"region\":\"-\",\"auth\":\"-\",\"home\":\"set\"}");
    free(got);
}

Test(exec_env, inherit_env_true_passes_them_all)
{
    char *got = run_show("all", "      inheritEnv: true\n");
    cr_expect_str_eq(
        got, "{\"key\":\"EXECSECRET\",\"region\":\"eu-west-9\",\"auth\":\"AUTHSECRET\",\"home\":"
             "\"set\"}");
    free(got);
}

Test(exec_env, inherit_env_names_pass_those_only)
{
    char *got = run_show("named", "      inheritEnv: [AWS_REGION]\n");
    cr_expect_str_eq(got,
                     "{\"key\":\"-\",\"region\":\"eu-west-9\",\"auth\":\"-\",\"home\":\"set\"}");
    free(got);
    got = run_show("prefix", "      inheritEnv: ['AWS_*']\n");
    cr_expect_str_eq(
        got, "{\"key\":\"EXECSECRET\",\"region\":\"eu-west-9\",\"auth\":\"-\",\"home\":\"set\"}");
    free(got);
}
