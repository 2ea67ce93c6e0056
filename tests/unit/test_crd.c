/* The CRD (api/crd/) and the C model (lib/spec/pipeline.c) must describe the same resource:
 * same fields at every level, types, required lists, enums, bounds, formats and defaults. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "doc/doc.h"
#include "spec/pipeline.h"
#include "spec/validate.h"
#include "testutil.h"

static const char *LABEL_RE = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
static const char *SUBDOMAIN_RE =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

static size_t checked_fields;

static const char *str_of(const sb_node *m, const char *k)
{
    const sb_node *n = sb_node_get(m, k);
    return n != NULL && n->kind != SB_NODE_MAP && n->kind != SB_NODE_SEQ ? n->text : NULL;
}

static void expect_str(const sb_node *m, const char *k, const char *want, const char *path)
{
    const char *got = str_of(m, k);
    cr_expect(got != NULL && strcmp(got, want) == 0, "%s: CRD %s is \"%s\", C model says \"%s\"",
              path, k, got ? got : "(absent)", want);
}

static void expect_list(const sb_node *seq, const char *const *want, const char *path,
                        const char *what)
{
    size_t n = 0;
    while (want[n] != NULL)
        n++;
    cr_assert(seq != NULL && seq->kind == SB_NODE_SEQ, "%s: CRD has no %s list", path, what);
    cr_expect_eq(seq->n, n, "%s: CRD %s has %zu entries, C model %zu", path, what, seq->n, n);
    for (size_t i = 0; i < n && i < seq->n; i++)
        cr_expect_str_eq(seq->items[i]->text, want[i], "%s: %s[%zu]", path, what, i);
}

static void compare_object(const sb_object_schema *s, const sb_node *crd, const char *path);

static void compare_field(const sb_schema_field *f, const sb_node *prop, const char *path)
{
    checked_fields++;
    char noun[64];
    const char *type = str_of(prop, "type");
    switch (f->type) {
    case SB_FT_STRING:
        expect_str(prop, "type", "string", path);
        if (strcmp(path, "spec.stages.op") == 0) /* a CEL rule, not an enum: test_crd_ops.c */
            break;
        if (f->format == SB_SF_DNS_LABEL || f->format == SB_SF_DNS_SUBDOMAIN) {
            expect_str(prop, "pattern", f->format == SB_SF_DNS_LABEL ? LABEL_RE : SUBDOMAIN_RE,
                       path);
            expect_str(prop, "maxLength", "63", path);
        } else if (f->format == SB_SF_NONEMPTY) {
            expect_str(prop, "minLength", "1", path);
        }
        break;
    case SB_FT_INT:
        expect_str(prop, "type", "integer", path);
        if (f->flags & SB_F_MIN) {
            snprintf(noun, sizeof noun, "%lld", (long long)f->min);
            expect_str(prop, "minimum", noun, path);
        } else {
            cr_expect_null(sb_node_get(prop, "minimum"), "%s: CRD has a minimum, C not", path);
        }
        if (f->flags & SB_F_MAX) {
            snprintf(noun, sizeof noun, "%lld", (long long)f->max);
            expect_str(prop, "maximum", noun, path);
        }
        break;
    case SB_FT_BOOL:
        expect_str(prop, "type", "boolean", path);
        break;
    case SB_FT_NUMBER:
        expect_str(prop, "type", "number", path);
        break;
    case SB_FT_BYTES:
    case SB_FT_MILLI:
        expect_str(prop, "x-kubernetes-int-or-string", "true", path);
        cr_expect_not_null(str_of(prop, "pattern"), "%s: quantity without a pattern", path);
        break;
    case SB_FT_DURATION:
        expect_str(prop, "type", "string", path);
        cr_expect_not_null(str_of(prop, "pattern"), "%s: duration without a pattern", path);
        break;
    case SB_FT_ENUM:
        expect_str(prop, "type", "string", path);
        expect_list(sb_node_get(prop, "enum"), f->enums, path, "enum");
        break;
    case SB_FT_OBJECT:
        expect_str(prop, "type", "object", path);
        if (!f->object->open) /* metadata: the API server owns its schema */
            compare_object(f->object, prop, path);
        break;
    case SB_FT_LIST: {
        expect_str(prop, "type", "array", path);
        if (f->flags & SB_F_MIN) {
            snprintf(noun, sizeof noun, "%lld", (long long)f->min);
            expect_str(prop, "minItems", noun, path);
        }
        if (f->flags & SB_F_MAX) {
            snprintf(noun, sizeof noun, "%lld", (long long)f->max);
            expect_str(prop, "maxItems", noun, path);
        }
        const sb_node *items = sb_node_get(prop, "items");
        cr_assert_not_null(items, "%s: array without items", path);
        expect_str(items, "type", "object", path);
        compare_object(f->object, items, path);
        break;
    }
    case SB_FT_STRLIST:
        expect_str(prop, "type", "array", path);
        expect_str(sb_node_get(prop, "items"), "type", "string", path);
        break;
    case SB_FT_STRMAP:
        expect_str(prop, "type", "object", path);
        expect_str(sb_node_get(prop, "additionalProperties"), "type", "string", path);
        break;
    case SB_FT_FREEFORM:
        expect_str(prop, "type", "object", path);
        if (f->object != NULL)
            compare_object(f->object, prop, path);
        else if (strcmp(path, "status") != 0 && strcmp(path, "metadata") != 0)
            expect_str(prop, "x-kubernetes-preserve-unknown-fields", "true", path);
        break;
    }
    (void)type;
    const sb_node *def = sb_node_get(prop, "default");
    if (f->def != NULL)
        cr_expect(def != NULL && strcmp(def->text, f->def) == 0,
                  "%s: C default \"%s\", CRD default \"%s\"", path, f->def,
                  def ? def->text : "(none)");
    else
        cr_expect_null(def, "%s: CRD has default \"%s\", C model none", path, def ? def->text : "");
}

static void compare_object(const sb_object_schema *s, const sb_node *crd, const char *path)
{
    const sb_node *props = sb_node_get(crd, "properties");
    cr_assert_not_null(props, "%s: CRD object without properties", path);
    char sub[256];
    for (size_t i = 0; i < s->nfields; i++) {
        const sb_schema_field *f = &s->fields[i];
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", f->name);
        const sb_node *prop = sb_node_get(props, f->name);
        cr_expect_not_null(prop, "%s: in the C model, missing from the CRD", sub);
        if (prop != NULL)
            compare_field(f, prop, sub);
    }
    for (size_t k = 0; k < props->n; k++) {
        int found = 0;
        for (size_t i = 0; i < s->nfields && !found; i++)
            found = strcmp(s->fields[i].name, props->keys[k]->text) == 0;
        cr_expect(found, "%s.%s: in the CRD, unknown to the C model", path, props->keys[k]->text);
    }
    if (*path == '\0')
        return; /* apiVersion/kind/metadata are required by the API server itself */
    const sb_node *req = sb_node_get(crd, "required");
    size_t nreq = 0;
    for (size_t i = 0; i < s->nfields; i++) {
        if (!(s->fields[i].flags & SB_F_REQUIRED))
            continue;
        nreq++;
        int found = 0;
        for (size_t k = 0; req != NULL && k < req->n && !found; k++)
            found = strcmp(req->items[k]->text, s->fields[i].name) == 0;
        cr_expect(found, "%s: C requires \"%s\", the CRD does not", path, s->fields[i].name);
    }
    cr_expect_eq(req ? req->n : 0, nreq, "%s: CRD requires %zu fields, C %zu", path,
                 req ? req->n : 0, nreq);
}

Test(crd, schema_matches_c_model)
{
    char path[512], *buf, msg[256];
    size_t len;
    snprintf(path, sizeof path, "%s/api/crd/pipelines.streambatch.dev.yaml", sb_test_root());
    cr_assert_eq(sb_spec_read_file_limited(path, 1 << 20, &buf, &len, msg, sizeof msg), 0, "%s",
                 msg);
    sb_doc *d = sb_doc_parse_yaml(buf, len, NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL));
    const sb_node *crd = sb_doc_root(d, 0);
    const sb_node *spec = sb_node_get(crd, "spec");
    expect_str(spec, "group", "streambatch.dev", "crd");
    expect_str(sb_node_get(spec, "names"), "kind", SB_KIND, "crd");
    const sb_node *versions = sb_node_get(spec, "versions");
    cr_assert(versions != NULL && versions->n == 1);
    const sb_node *v = versions->items[0];
    cr_expect_str_eq(str_of(v, "name"), "v1alpha1");
    cr_expect_str_eq(SB_API_VERSION, "streambatch.dev/v1alpha1");
    cr_expect_not_null(sb_node_get(sb_node_get(v, "subresources"), "status"));
    const sb_node *schema = sb_node_get(sb_node_get(v, "schema"), "openAPIV3Schema");
    cr_assert_not_null(schema);
    checked_fields = 0;
    compare_object(sb_pipeline_schema(), schema, "");
    cr_expect_geq(checked_fields, 40, "only %zu fields compared", checked_fields);
    free(buf);
    sb_doc_free(d);
}

/* Every example is valid for the C model (the CLI test covers the same through the binary);
 * here also the CRD's printer columns point at fields that exist. */
Test(crd, printer_columns_point_at_real_fields)
{
    char path[512], *buf, msg[256];
    size_t len;
    snprintf(path, sizeof path, "%s/api/crd/pipelines.streambatch.dev.yaml", sb_test_root());
    cr_assert_eq(sb_spec_read_file_limited(path, 1 << 20, &buf, &len, msg, sizeof msg), 0, "%s",
                 msg);
    sb_doc *d = sb_doc_parse_yaml(buf, len, NULL);
    const sb_node *v = sb_node_get(sb_node_get(sb_doc_root(d, 0), "spec"), "versions")->items[0];
    const sb_node *cols = sb_node_get(v, "additionalPrinterColumns");
    const sb_node *root = sb_node_get(sb_node_get(v, "schema"), "openAPIV3Schema");
    cr_assert(cols != NULL && cols->n >= 3);
    for (size_t i = 0; i < cols->n; i++) {
        const char *jp = str_of(cols->items[i], "jsonPath");
        if (strcmp(jp, ".metadata.creationTimestamp") == 0)
            continue;
        const sb_node *cur = root;
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%s", jp + 1);
        for (char *tok = strtok(tmp, "."); tok != NULL; tok = strtok(NULL, "."))
            cur = sb_node_get(sb_node_get(cur, "properties"), tok);
        cr_expect_not_null(cur, "printer column %s points nowhere", jp);
    }
    /* what Kubernetes users expect of `kubectl get`, and of -o wide (priority 1) */
    static const struct {
        const char *name, *path;
        int wide;
    } want[] = {
        {"Phase", ".status.phase", 0},
        {"Reason", ".status.reason", 0},
        {"Partitions", ".status.progress", 0},
        {"Workers", ".status.workers", 0},
        {"Throughput", ".status.throughput", 0},
        {"Age", ".metadata.creationTimestamp", 0},
        {"Mode", ".status.mode", 1},
        {"Failing Condition", ".status.failingCondition", 1},
    };
    size_t nwant = sizeof want / sizeof want[0];
    cr_expect_eq(cols->n, nwant, "%zu printer columns, expected %zu", cols->n, nwant);
    for (size_t i = 0; i < nwant && i < cols->n; i++) {
        const sb_node *c = cols->items[i];
        const char *name = str_of(c, "name"), *prio = str_of(c, "priority");
        cr_expect_str_eq(name, want[i].name, "printer column %zu", i);
        cr_expect_str_eq(str_of(c, "jsonPath"), want[i].path, "printer column %s", name);
        cr_expect_eq(prio != NULL && strcmp(prio, "1") == 0, want[i].wide,
                     "printer column %s: priority %s", name, prio ? prio : "(none)");
        const char *desc = str_of(c, "description");
        if (strcmp(want[i].path, ".metadata.creationTimestamp") != 0)
            cr_expect(desc != NULL && *desc != '\0', "printer column %s has no description", name);
    }
    free(buf);
    sb_doc_free(d);
}

/* word occurrence: not part of a longer identifier */
static int mentions(const char *doc, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = doc; (p = strstr(p, word)) != NULL; p++) {
        char before = p == doc ? ' ' : p[-1], after = p[wl];
        if (!isalnum((unsigned char)before) && !isalnum((unsigned char)after))
            return 1;
    }
    return 0;
}

static void expect_documented(const sb_object_schema *s, const char *doc, const char *path)
{
    for (size_t i = 0; i < s->nfields; i++) {
        const sb_schema_field *f = &s->fields[i];
        if (*path != '\0')
            cr_expect(mentions(doc, f->name), "docs/pipeline-api.md does not mention %s.%s", path,
                      f->name);
        const sb_object_schema *sub = f->object;
        if (sub != NULL && !sub->open && strcmp(f->name, "spec") != 0)
            expect_documented(sub, doc, f->name);
        else if (sub != NULL && strcmp(f->name, "spec") == 0)
            expect_documented(sub, doc, "spec");
    }
}

Test(crd, every_field_is_documented)
{
    char path[512], *buf, msg[256];
    size_t len;
    snprintf(path, sizeof path, "%s/docs/pipeline-api.md", sb_test_root());
    cr_assert_eq(sb_spec_read_file_limited(path, 1 << 20, &buf, &len, msg, sizeof msg), 0, "%s",
                 msg);
    expect_documented(sb_pipeline_schema(), buf, "");
    for (size_t i = 0; sb_op_names[i] != NULL; i++) {
        char quoted[96];
        snprintf(quoted, sizeof quoted, "`%s`", sb_op_names[i]);
        cr_expect(strstr(buf, quoted) != NULL, "op %s is not documented", sb_op_names[i]);
    }
    free(buf);
}

/* `kubectl explain pipeline --recursive` shows each property's description: every property of
 * the schema (spec and status, array items' properties included) must have a non-empty one.
 * The root's metadata is the exception: the API server refuses anything but name and
 * generateName restrictions there ("metadata is implicitly specified"), a description too. */
static size_t described, undescribed;

static void expect_descriptions(const sb_node *schema, const char *path)
{
    if (schema == NULL || schema->kind != SB_NODE_MAP)
        return;
    const sb_node *props = sb_node_get(schema, "properties");
    for (size_t k = 0; props != NULL && props->kind == SB_NODE_MAP && k < props->n; k++) {
        const char *name = props->keys[k]->text;
        const sb_node *prop = props->items[k];
        char sub[512];
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", name);
        if (*path == '\0' && strcmp(name, "metadata") == 0)
            continue;
        const char *desc = str_of(prop, "description");
        int ok = desc != NULL && strspn(desc, " \t\n") < strlen(desc);
        if (ok)
            described++;
        else
            undescribed++;
        cr_expect(ok, "%s: no description (kubectl explain shows nothing)", sub);
        expect_descriptions(prop, sub);
        char items[520];
        snprintf(items, sizeof items, "%s[]", sub);
        expect_descriptions(sb_node_get(prop, "items"), items);
        expect_descriptions(sb_node_get(prop, "additionalProperties"), sub);
    }
}

Test(crd, every_property_has_a_description)
{
    char path[512], *buf, msg[256];
    size_t len;
    snprintf(path, sizeof path, "%s/api/crd/pipelines.streambatch.dev.yaml", sb_test_root());
    cr_assert_eq(sb_spec_read_file_limited(path, 1 << 20, &buf, &len, msg, sizeof msg), 0, "%s",
                 msg);
    sb_doc *d = sb_doc_parse_yaml(buf, len, NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL));
    const sb_node *v = sb_node_get(sb_node_get(sb_doc_root(d, 0), "spec"), "versions")->items[0];
    const sb_node *root = sb_node_get(sb_node_get(v, "schema"), "openAPIV3Schema");
    cr_assert_not_null(root);
    described = undescribed = 0;
    expect_descriptions(root, "");
    cr_expect_eq(undescribed, 0, "%zu of %zu properties have no description", undescribed,
                 described + undescribed);
    cr_expect_geq(described + undescribed, 80, "only %zu properties walked",
                  described + undescribed);
    free(buf);
    sb_doc_free(d);
}
