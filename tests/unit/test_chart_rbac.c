/* The Helm chart's RBAC grants no read of Secrets (nor wildcards): worker pods get their
 * credentials from the kubelet (secretKeyRef), the controller never reads them; it may only
 * create them (each Pipeline's credentials Secret, controller/operator/kube.h). Checked on the
 * template text, without helm: every `resources:` and `verbs:` list in
 * helm/streambatch/templates (flow `[a, b]` or block `- a` form). tests/k8s/operator-test.sh
 * checks the same on a live cluster with `kubectl auth can-i`. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/validate.h"
#include "testutil.h"

typedef struct rules {
    char resources[64][64];
    int res_rule[64]; /* the rule (resources list) each resource is in */
    size_t nres;
    char verbs[64][32];
    int verb_rule[64]; /* the rule of the resources list before each verbs list */
    size_t nverbs;
    size_t lists;
    int rule; /* resources lists seen so far */
} rules;

static void add_item(rules *r, int verbs, const char *s, size_t n)
{
    while (n > 0 && (isspace((unsigned char)*s) || *s == '"' || *s == '\'')) {
        s++;
        n--;
    }
    while (n > 0 && (isspace((unsigned char)s[n - 1]) || s[n - 1] == '"' || s[n - 1] == '\''))
        n--;
    if (n == 0)
        return;
    if (verbs && r->nverbs < 64) {
        r->verb_rule[r->nverbs] = r->rule;
        snprintf(r->verbs[r->nverbs++], sizeof r->verbs[0], "%.*s", (int)n, s);
    } else if (!verbs && r->nres < 64) {
        r->res_rule[r->nres] = r->rule;
        snprintf(r->resources[r->nres++], sizeof r->resources[0], "%.*s", (int)n, s);
    }
}

static void scan(rules *r, const char *text)
{
    const char *line = text;
    while (*line != '\0') {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *p = line;
        while (p < line + len && (*p == ' ' || *p == '-'))
            p++;
        int verbs = strncmp(p, "verbs:", 6) == 0;
        if (verbs || strncmp(p, "resources:", 10) == 0) {
            r->lists++;
            r->rule += !verbs;
            const char *v = p + (verbs ? 6 : 10);
            const char *open = memchr(v, '[', (size_t)(line + len - v));
            if (open != NULL) { /* flow list */
                const char *close = memchr(open, ']', (size_t)(line + len - open));
                cr_assert_not_null(close, "unclosed list: %.*s", (int)len, line);
                for (const char *a = open + 1; a < close;) {
                    const char *comma = memchr(a, ',', (size_t)(close - a));
                    const char *b = comma ? comma : close;
                    add_item(r, verbs, a, (size_t)(b - a));
                    a = b + 1;
                }
            } else { /* block list on the next lines: "  - item" */
                const char *q = end ? end + 1 : line + len;
                while (*q != '\0') {
                    const char *qe = strchr(q, '\n');
                    size_t ql = qe ? (size_t)(qe - q) : strlen(q);
                    const char *t = q;
                    while (t < q + ql && *t == ' ')
                        t++;
                    if (t == q + ql || *t != '-' || memchr(t, ':', (size_t)(q + ql - t)) != NULL)
                        break;
                    add_item(r, verbs, t + 1, (size_t)(q + ql - t - 1));
                    q = qe ? qe + 1 : q + ql;
                }
            }
        }
        line = end ? end + 1 : line + len;
    }
}

static void scan_chart(rules *r)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/helm/streambatch/templates", sb_test_root());
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    struct dirent *e;
    size_t files = 0;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (!(n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0) &&
            !(n > 4 && strcmp(e->d_name + n - 4, ".tpl") == 0))
            continue;
        char path[1024], *buf, msg[256];
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        cr_assert_eq(sb_spec_read_file_limited(path, 1 << 20, &buf, &len, msg, sizeof msg), 0, "%s",
                     msg);
        scan(r, buf);
        free(buf);
        files++;
    }
    closedir(d);
    cr_assert_geq(files, 3);
}

static int has(char (*list)[64], size_t n, const char *want)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], want) == 0)
            return 1;
    return 0;
}

/* Every verb of the rule that holds resource i. */
static int rule_verbs_only(const rules *r, size_t i, const char *only)
{
    int seen = 0;
    for (size_t v = 0; v < r->nverbs; v++)
        if (r->verb_rule[v] == r->res_rule[i]) {
            if (strcmp(r->verbs[v], only) != 0)
                return 0;
            seen = 1;
        }
    return seen;
}

Test(chart_rbac, no_secret_reads_no_wildcards)
{
    static rules r;
    memset(&r, 0, sizeof r);
    scan_chart(&r);
    /* the scan sees the rules at all: the controller's known resources are there */
    cr_assert_geq(r.lists, 10, "only %zu resources/verbs lists found", r.lists);
    cr_expect(has(r.resources, r.nres, "pods"), "pods not found: the scan is broken");
    cr_expect(has(r.resources, r.nres, "pipelines"), "pipelines not found: the scan is broken");
    for (size_t i = 0; i < r.nres; i++) {
        char low[64];
        size_t k = 0;
        for (; r.resources[i][k] != '\0' && k + 1 < sizeof low; k++)
            low[k] = (char)tolower((unsigned char)r.resources[i][k]);
        low[k] = '\0';
        if (strncmp(low, "secrets", 7) == 0) {
            cr_expect_str_eq(low, "secrets", "the chart grants on %s", r.resources[i]);
            cr_expect(rule_verbs_only(&r, i, "create"),
                      "the chart grants more than create on secrets");
        }
        cr_expect(strchr(low, '*') == NULL, "wildcard resource %s", r.resources[i]);
        cr_expect(strcmp(low, "serviceaccounts/token") != 0, "the chart grants on %s",
                  r.resources[i]);
    }
    for (size_t i = 0; i < r.nverbs; i++)
        cr_expect(strchr(r.verbs[i], '*') == NULL, "wildcard verb %s", r.verbs[i]);
}

/* The scanner itself: both list forms, and that it would see a Secret rule. */
Test(chart_rbac, scanner_reads_flow_and_block_lists)
{
    static rules r;
    memset(&r, 0, sizeof r);
    scan(&r, "rules:\n- apiGroups: [\"\"]\n  resources: [pods, \"secrets\"]\n  verbs: [get]\n"
             "- apiGroups: [\"\"]\n  resources:\n  - configmaps\n  - 'events'\n  verbs:\n"
             "  - '*'\n");
    cr_expect_eq(r.nres, 4);
    cr_expect(has(r.resources, r.nres, "secrets"));
    cr_expect(has(r.resources, r.nres, "events"));
    cr_expect_eq(r.nverbs, 2);
    cr_expect_str_eq(r.verbs[1], "*");
    /* verbs go with their own rule: "get" on secrets is caught, "create" alone is not */
    cr_expect_str_eq(r.resources[1], "secrets");
    cr_expect(!rule_verbs_only(&r, 1, "create"));
    static rules c;
    memset(&c, 0, sizeof c);
    scan(&c, "- resources: [pods]\n  verbs: [get, list]\n- resources: [secrets]\n"
             "  verbs: [create]\n- resources: [events]\n  verbs: [create, delete]\n");
    cr_expect_str_eq(c.resources[1], "secrets");
    cr_expect(rule_verbs_only(&c, 1, "create"));
    cr_expect(!rule_verbs_only(&c, 0, "create"));
    cr_expect(!rule_verbs_only(&c, 2, "create"));
}
