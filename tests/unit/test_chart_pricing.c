/* The Helm chart's prices and planner settings reach the controller (docs/scheduling.md):
 * values.yaml declares `pricing` (cpuCoreHour, memoryGiBHour, gpuType, gpuHour) and
 * controller.replanThreshold/replanInterval, values.schema.json describes exactly those keys, and
 * every flag the Deployment template passes is an option of streambatch-controller (a renamed
 * flag would make the controller exit 2 in every cluster). Checked on the chart's text; when the
 * helm binary of `make k8s-build` (or $SB_HELM) is there, the chart is also rendered with prices
 * set and with bad ones. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spec/validate.h"
#include "testutil.h"

static char *read_repo(const char *rel)
{
    char path[1024], *buf = NULL, msg[256];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", sb_test_root(), rel);
    cr_assert_eq(sb_spec_read_file_limited(path, 4 << 20, &buf, &len, msg, sizeof msg), 0, "%s",
                 msg);
    return buf;
}

/* The "--name" options of streambatch-controller's getopt table: {"name", ...} entries. */
static int controller_has_option(const char *src, const char *name, size_t len)
{
    char want[128];
    snprintf(want, sizeof want, "{\"%.*s\", ", (int)len, name);
    return strstr(src, want) != NULL;
}

Test(chart_pricing, deployment_flags_are_controller_options)
{
    char *tpl = read_repo("helm/streambatch/templates/deployment.yaml");
    char *src = read_repo("cmd/streambatch-controller.c");
    size_t flags = 0;
    int saw[4] = {0};
    const char *names[4] = {"price-cpu-core-hour", "price-gpu-hour", "replan-threshold",
                            "gpu-type"};
    for (const char *p = tpl; (p = strstr(p, "- --")) != NULL; p += 4) {
        const char *n = p + 4, *e = n;
        while ((*e >= 'a' && *e <= 'z') || *e == '-')
            e++;
        cr_assert_gt(e - n, 0);
        flags++;
        cr_expect(controller_has_option(src, n, (size_t)(e - n)),
                  "deployment.yaml passes --%.*s, which streambatch-controller does not take",
                  (int)(e - n), n);
        for (int k = 0; k < 4; k++)
            saw[k] |=
                (size_t)(e - n) == strlen(names[k]) && strncmp(n, names[k], strlen(names[k])) == 0;
    }
    cr_expect_geq(flags, 10, "only %zu flags found: the scan is broken", flags);
    for (int k = 0; k < 4; k++)
        cr_expect(saw[k], "deployment.yaml does not pass --%s", names[k]);
    cr_expect(!controller_has_option(src, "no-such-flag", 12), "the option scan always matches");
    free(tpl);
    free(src);
}

Test(chart_pricing, values_and_schema_agree)
{
    char *values = read_repo("helm/streambatch/values.yaml");
    char *schema_text = read_repo("helm/streambatch/values.schema.json");
    cJSON *schema = cJSON_Parse(schema_text);
    cr_assert_not_null(schema, "values.schema.json does not parse");
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    const cJSON *pricing = cJSON_GetObjectItemCaseSensitive(props, "pricing");
    cr_assert_not_null(pricing, "no pricing in values.schema.json");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pricing, "additionalProperties")),
              "pricing must refuse unknown keys (a typo would silently keep the table's price)");
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(pricing, "properties");
    const char *keys[] = {"cpuCoreHour", "memoryGiBHour", "gpuType", "gpuHour"};
    const char *start = strstr(values, "\npricing:\n");
    cr_assert_not_null(start, "no top-level pricing: in values.yaml");
    for (size_t i = 0; i < 4; i++) {
        cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(pp, keys[i]), "schema lacks %s",
                           keys[i]);
        char k[64];
        snprintf(k, sizeof k, "\n  %s:", keys[i]);
        cr_expect_not_null(strstr(start, k), "values.yaml pricing lacks %s", keys[i]);
    }
    cr_expect_eq(cJSON_GetArraySize(pp), 4, "the schema's pricing keys are exactly these four");
    const cJSON *gh = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(pp, "gpuHour"), "additionalProperties");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(gh, "minimum")->valuedouble, 0,
                 "GPU prices must be >= 0");
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(props, "controller"), "properties");
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(cp, "replanThreshold"));
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(cp, "replanInterval"));
    cr_expect_not_null(strstr(values, "\n  replanThreshold: 0.25\n"), "default threshold");
    cr_expect_not_null(strstr(values, "\n  replanInterval: 60s\n"), "default interval");
    cJSON_Delete(schema);
    free(schema_text);
    free(values);
}

static const char *helm_bin(void)
{
    static char b[1024];
    const char *env = getenv("SB_HELM");
    if (env != NULL && access(env, X_OK) == 0)
        return env;
    char *dir = sb_test_sh_out("%s/tests/k8s/build.sh --print-bin-dir 2>/dev/null", sb_test_root());
    if (dir != NULL) {
        dir[strcspn(dir, "\n")] = '\0';
        snprintf(b, sizeof b, "%s/helm", dir);
        free(dir);
        if (access(b, X_OK) == 0)
            return b;
    }
    return NULL;
}

Test(chart_pricing, helm_renders_the_price_flags)
{
    const char *helm = helm_bin();
    if (helm == NULL)
        cr_skip_test("no helm binary (make k8s-build, or set SB_HELM)");
    char dir[512], vals[600];
    sb_test_tmpl(dir, sizeof dir, "chart-pricing");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(vals, sizeof vals, "%s/values.yaml", dir);
    FILE *f = fopen(vals, "w");
    cr_assert_not_null(f);
    fputs("pricing:\n  cpuCoreHour: 0\n  memoryGiBHour: 0.0045\n  gpuType: nvidia-l4\n"
          "  gpuHour: {nvidia-l4: 0.7, acme-x1: 2.5}\n"
          "controller:\n  replanThreshold: 0.5\n  replanInterval: 2m\n",
          f);
    fclose(f);
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s template t %s/helm/streambatch -f %s 2>&1", helm, sb_test_root(),
             vals);
    cr_assert_eq(sb_test_run(cmd, &out), 0, "%s", out);
    const char *want[] = {"        - --price-cpu-core-hour=0",
                          "        - --price-memory-gib-hour=0.0045",
                          "        - --gpu-type=nvidia-l4",
                          "        - --price-gpu-hour=acme-x1=2.5",
                          "        - --price-gpu-hour=nvidia-l4=0.7",
                          "        - --replan-threshold=0.5",
                          "        - --replan-interval=2m"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(sb_test_has_line(out, want[i]), "missing %s", want[i]);
    free(out);
    /* the defaults: no price flags (the controller's table), the default re-plan settings */
    snprintf(cmd, sizeof cmd, "%s template t %s/helm/streambatch 2>&1", helm, sb_test_root());
    cr_assert_eq(sb_test_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "--price-") == NULL && strstr(out, "--gpu-type") == NULL,
              "price flags without prices set");
    cr_expect(sb_test_has_line(out, "        - --replan-threshold=0.25"));
    free(out);
    /* a negative price and a bad GPU type name are refused by the schema */
    f = fopen(vals, "w");
    cr_assert_not_null(f);
    fputs("pricing:\n  cpuCoreHour: -1\n  gpuHour: {\"bad type\": 1}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s template t %s/helm/streambatch -f %s 2>&1", helm, sb_test_root(),
             vals);
    cr_expect_neq(sb_test_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "/pricing/cpuCoreHour") != NULL, "%s", out);
    cr_expect(strstr(out, "bad type") != NULL, "%s", out);
    free(out);
    unlink(vals);
    rmdir(dir);
}
