/* The CRD's op rule and descriptions agree with the validator of this build (issue 38): the
 * names the CRD lets through are exactly the ops the validator accepts, an op the validator
 * refuses (image.decode) is not let through, every description that names an op says what this
 * build does, and the op is checked by a CEL rule rather than an enum, since any enum violation
 * makes the API server skip the CRD's CEL rules and print "<nil>: Invalid value: null: some
 * validation rules were not checked" beside the useful message. Read from api/crd/ (the chart's
 * copy is compared byte for byte by tests/k8s/operator-test.sh). */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "spec/pipeline.h"
#include "spec/validate.h"
#include "testutil.h"

#define MAX_NAMES 64

typedef struct crd {
    char *text; /* the file */
    size_t len;
    sb_doc *doc;
    const sb_node *op; /* spec.stages.items.properties.op */
    char names[MAX_NAMES][64];
    size_t n; /* the names of the op rule's list */
} crd;

static void crd_load(crd *c)
{
    char path[512], msg[256];
    snprintf(path, sizeof path, "%s/api/crd/pipelines.streambatch.dev.yaml", sb_test_root());
    cr_assert_eq(sb_spec_read_file_limited(path, 1 << 20, &c->text, &c->len, msg, sizeof msg), 0,
                 "%s", msg);
    c->doc = sb_doc_parse_yaml(c->text, c->len, NULL);
    cr_assert_null(sb_doc_error(c->doc, NULL, NULL));
    const sb_node *v = sb_node_get(sb_node_get(sb_doc_root(c->doc, 0), "spec"), "versions");
    cr_assert(v != NULL && v->n == 1);
    const sb_node *n = sb_node_get(sb_node_get(v->items[0], "schema"), "openAPIV3Schema");
    static const char *const walk[] = {"spec", "stages", NULL};
    for (size_t i = 0; walk[i] != NULL; i++)
        n = sb_node_get(sb_node_get(n, "properties"), walk[i]);
    c->op = sb_node_get(sb_node_get(sb_node_get(n, "items"), "properties"), "op");
    cr_assert_not_null(c->op, "no spec.stages[].op in the CRD");
    /* the rule: self in ['a', 'b', ...]: its quoted names */
    const sb_node *rules = sb_node_get(c->op, "x-kubernetes-validations");
    cr_assert(rules != NULL && rules->kind == SB_NODE_SEQ && rules->n == 1,
              "spec.stages[].op: want one x-kubernetes-validations rule");
    const sb_node *rule = sb_node_get(rules->items[0], "rule");
    cr_assert(rule != NULL && strncmp(rule->text, "self in [", 9) == 0,
              "spec.stages[].op: the rule is not \"self in [...]\": %s", rule ? rule->text : "");
    c->n = 0;
    for (const char *p = strchr(rule->text, '\''); p != NULL; p = strchr(p, '\'')) {
        const char *e = strchr(p + 1, '\'');
        cr_assert_not_null(e, "unterminated name in %s", rule->text);
        cr_assert_lt(c->n, MAX_NAMES);
        snprintf(c->names[c->n++], sizeof c->names[0], "%.*s", (int)(e - p - 1), p + 1);
        p = e + 1;
    }
}

static void crd_free(crd *c)
{
    sb_doc_free(c->doc);
    free(c->text);
}

static int listed(const crd *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->names[i], name) == 0)
            return 1;
    return 0;
}

/* The validator's verdict on an op: 1 accepted (no diagnostic at the op itself; missing
 * args are the args' concern), 0 refused, with its message in why. */
static int validator_accepts(const char *op, char *why, size_t wl)
{
    char y[512];
    snprintf(y, sizeof y,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n"
             "  source: {uri: 'file:///in/', format: jsonl}\n"
             "  stages: [{name: s, op: '%s'}]\n"
             "  sink: {uri: 'file:///out/', format: jsonl}\n",
             op);
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL), "%s", y);
    sb_pipeline p;
    sb_diags dg = {0};
    sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg);
    int ok = 1;
    why[0] = '\0';
    for (size_t i = 0; i < dg.n; i++)
        if (strcmp(dg.items[i].path, "spec.stages[0].op") == 0) {
            ok = 0;
            snprintf(why, wl, "%s", dg.items[i].msg);
        }
    sb_diags_free(&dg);
    sb_pipeline_free(&p);
    sb_doc_free(d);
    return ok;
}

Test(crd_ops, rule_lists_exactly_the_ops_the_validator_accepts)
{
    crd c;
    crd_load(&c);
    size_t nbuild = 0;
    while (sb_op_names[nbuild] != NULL)
        nbuild++;
    cr_expect_eq(c.n, nbuild, "the CRD's op rule lists %zu ops, this build runs %zu", c.n, nbuild);
    char why[512];
    for (size_t i = 0; i < c.n; i++)
        cr_expect(validator_accepts(c.names[i], why, sizeof why),
                  "the CRD lets op \"%s\" through, the validator refuses it: %s", c.names[i], why);
    for (size_t i = 0; i < nbuild; i++)
        cr_expect(listed(&c, sb_op_names[i]), "op \"%s\" runs in this build, the CRD refuses it",
                  sb_op_names[i]);
    /* An op the API names but this build does not run stays out of the rule. */
    cr_expect(sb_spec_op_known("image.decode") && !validator_accepts("image.decode", why, 512));
    cr_expect(!listed(&c, "image.decode"), "the CRD lets image.decode through: %s", why);
    /* the check can fail: a made-up name is refused */
    cr_expect(!validator_accepts("tensor.mlpp", why, sizeof why));
    crd_free(&c);
}

/* Whether text names w as a word of its own (not inside "image.resizer" or "my-exec"). */
static int names_word(const char *text, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = strstr(text, w); p != NULL; p = strstr(p + 1, w)) {
        char before = p == text ? ' ' : p[-1], after = p[n];
        if (after == '.' && (p[n + 1] == '\0' || p[n + 1] == ' ' || p[n + 1] == '\n'))
            after = ' ';
        if (strchr(" \n(", before) != NULL && strchr(" \n,;)", after) != NULL)
            return 1;
    }
    return 0;
}

/* Every word of the CRD that looks like an op name (x.y, or a known single-word op) and that the
 * API knows is either let through and accepted, or neither; and the op's description names
 * exactly the listed ops. */
Test(crd_ops, descriptions_name_ops_truthfully)
{
    crd c;
    crd_load(&c);
    const char *d = sb_node_get(c.op, "description") ? sb_node_get(c.op, "description")->text : "";
    for (size_t i = 0; i < c.n; i++)
        cr_expect(names_word(d, c.names[i]), "the op's description does not name \"%s\": %s",
                  c.names[i], d);
    regex_t re;
    cr_assert_eq(regcomp(&re, "[a-z]+\\.[a-z]+", REG_EXTENDED), 0);
    regmatch_t m;
    char why[512];
    for (const char *p = c.text; regexec(&re, p, 1, &m, 0) == 0; p += m.rm_eo) {
        char w[64];
        snprintf(w, sizeof w, "%.*s", (int)(m.rm_eo - m.rm_so), p + m.rm_so);
        if (!sb_spec_op_known(w))
            continue;
        int acc = validator_accepts(w, why, sizeof why);
        cr_expect_eq(listed(&c, w), acc, "the CRD names op \"%s\": listed %d, the validator %s", w,
                     listed(&c, w), acc ? "accepts it" : why);
    }
    regfree(&re);
    /* nothing says an op of this build is missing from it */
    cr_expect_null(strstr(c.text, "not in this build"),
                   "the CRD still says an op is not in this build");
    cr_expect_null(strstr(c.text, "image.*"), "the CRD speaks of image.* as a whole");
    crd_free(&c);
}

/* The op has no enum (an enum violation would make the API server skip every CEL rule and print
 * the "not checked" line), a length bound (CEL's cost estimate of the rule needs one) and a
 * message that lists the ops. */
Test(crd_ops, a_typo_gets_one_message)
{
    crd c;
    crd_load(&c);
    cr_expect_null(sb_node_get(c.op, "enum"), "spec.stages[].op has an enum again");
    const sb_node *ml = sb_node_get(c.op, "maxLength");
    cr_expect(ml != NULL && atoi(ml->text) > 0 && atoi(ml->text) <= 256, "no maxLength on op");
    const sb_node *r = sb_node_get(c.op, "x-kubernetes-validations")->items[0];
    const sb_node *me = sb_node_get(r, "messageExpression");
    cr_assert_not_null(me, "the op rule has no messageExpression");
    for (size_t i = 0; i < c.n; i++)
        cr_expect_not_null(strstr(me->text, c.names[i]), "the message does not name %s",
                           c.names[i]);
    crd_free(&c);
}
