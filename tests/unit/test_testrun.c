/* controller/operator/testrun.h: the manifest checks of --test-pipeline, before any cluster is
 * contacted (the whole path, create -> Succeeded -> delete, runs in tests/k8s/operator-test.sh
 * case t through `helm test`). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/operator/testrun.h"

static char *write_tmp(const char *text)
{
    char *path = strdup("/tmp/sb-testrun-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void expect_refused(const char *text, const char *want)
{
    char *path = write_tmp(text);
    sb_testrun_opts o = {.path = path, .kubeconfig = "/nonexistent/kubeconfig"};
    sb_err err = {0};
    cr_expect_eq(sb_testrun_run(&o, &err), -1);
    cr_expect(strstr(err.msg, want) != NULL, "message '%s' lacks '%s'", err.msg, want);
    cr_expect(strstr(err.msg, path) != NULL, "message '%s' does not name the file", err.msg);
    unlink(path);
    free(path);
}

Test(testrun, a_manifest_that_is_not_one_pipeline_is_refused_naming_the_file)
{
    expect_refused("a: [\n", "");
    expect_refused("kind: Pipeline\n---\nkind: Pipeline\n", "want exactly one Pipeline");
    expect_refused("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
                   "want apiVersion streambatch.dev/v1alpha1, kind Pipeline (got v1 Pod)");
    expect_refused("apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {}\n",
                   "metadata.name is missing");
}

Test(testrun, a_missing_file_and_a_missing_cluster_are_errors)
{
    sb_testrun_opts o = {.path = "/nonexistent/p.yaml"};
    sb_err err = {0};
    cr_expect_eq(sb_testrun_run(&o, &err), -1);
    cr_expect(strstr(err.msg, "/nonexistent/p.yaml: cannot open") != NULL, "%s", err.msg);
    char *path = write_tmp("apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
                           "metadata: {name: t}\nspec: {}\n");
    sb_testrun_opts o2 = {.path = path, .kubeconfig = "/nonexistent/kubeconfig"};
    cr_expect_eq(sb_testrun_run(&o2, &err), -1);
    cr_expect(strstr(err.msg, "--test-pipeline: no cluster configuration") != NULL, "%s", err.msg);
    cr_expect(strstr(err.msg, "/nonexistent/kubeconfig") != NULL, "%s", err.msg);
    unlink(path);
    free(path);
}
