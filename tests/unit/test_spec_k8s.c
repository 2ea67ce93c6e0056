/* The Kubernetes-facing parts of the Pipeline spec: credentialsSecret (one Secret per worker),
 * and the workerTemplate's env, envFrom, volumes, volumeMounts and serviceAccountName, each
 * problem with its field path and position. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "spec/pipeline.h"

/* A pipeline with `source_extra` / `sink_extra` lines inside source/sink and `tmpl` (YAML flow
 * text or NULL) as the workerTemplate. */
static char *manifest(const char *source_extra, const char *sink_extra, const char *tmpl)
{
    char *y = NULL;
    int n = asprintf(&y,
                     "apiVersion: streambatch.dev/v1alpha1\n"
                     "kind: Pipeline\n"
                     "metadata: {name: p}\n"
                     "spec:\n"
                     "  source:\n"
                     "    uri: s3://in-bucket/x/\n"
                     "    format: jsonl\n"
                     "%s"
                     "  stages: [{name: a, op: identity}]\n"
                     "  sink:\n"
                     "    uri: s3://out-bucket/y/\n"
                     "    format: jsonl\n"
                     "%s"
                     "%s%s%s",
                     source_extra ? source_extra : "", sink_extra ? sink_extra : "",
                     tmpl ? "  workerTemplate: " : "", tmpl ? tmpl : "", tmpl ? "\n" : "");
    cr_assert_gt(n, 0);
    return y;
}

typedef struct result {
    sb_diags d;
    sb_pipeline p;
    sb_doc *doc;
} result;

static void decode(const char *yaml, result *r)
{
    memset(r, 0, sizeof *r);
    r->doc = sb_doc_parse_yaml(yaml, strlen(yaml), NULL);
    cr_assert_not_null(r->doc);
    cr_assert_null(sb_doc_error(r->doc, NULL, NULL), "YAML of the test: %s",
                   sb_doc_error(r->doc, NULL, NULL));
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(r->doc, 0), &r->p, &r->d), 0);
}

static void result_free(result *r)
{
    sb_diags_free(&r->d);
    sb_pipeline_free(&r->p);
    sb_doc_free(r->doc);
}

static char *joined(const sb_diags *d)
{
    static char buf[8192];
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < d->n && o < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s:%d:%d: %s: %s\n", "", d->items[i].line,
                              d->items[i].col, d->items[i].path, d->items[i].msg);
    return buf;
}

/* Exactly one problem, at path, whose message contains want. */
static void expect_one(const char *src, const char *snk, const char *tmpl, const char *path,
                       const char *want)
{
    char *y = manifest(src, snk, tmpl);
    result r;
    decode(y, &r);
    cr_expect_eq(r.d.n, 1, "want one problem at %s, got:\n%s", path, joined(&r.d));
    if (r.d.n >= 1) {
        cr_expect_str_eq(r.d.items[0].path, path, "%s", joined(&r.d));
        cr_expect(strstr(r.d.items[0].msg, want) != NULL, "\"%s\" lacks \"%s\"", r.d.items[0].msg,
                  want);
        cr_expect_gt(r.d.items[0].line, 0, "no position: %s", joined(&r.d));
    }
    result_free(&r);
    free(y);
}

static void expect_valid(const char *src, const char *snk, const char *tmpl)
{
    char *y = manifest(src, snk, tmpl);
    result r;
    decode(y, &r);
    cr_expect_eq(r.d.n, 0, "want valid, got:\n%s\n%s", joined(&r.d), y);
    result_free(&r);
    free(y);
}

Test(spec_k8s, one_credentials_secret_per_worker)
{
    expect_valid("    credentialsSecret: s3-creds\n", "    credentialsSecret: s3-creds\n", NULL);
    expect_valid("    credentialsSecret: s3-creds\n", NULL, NULL);
    expect_valid(NULL, "    credentialsSecret: out.creds\n", NULL);
    expect_one("    credentialsSecret: creds-a\n", "    credentialsSecret: creds-b\n", NULL,
               "spec.sink.credentialsSecret",
               "must equal spec.source.credentialsSecret when both are set: a worker has one set "
               "of AWS credentials");
    expect_one("    credentialsSecret: S3_Creds\n", NULL, NULL, "spec.source.credentialsSecret",
               "DNS-1123 subdomain");
}

Test(spec_k8s, credentials_secret_of_the_pipeline)
{
    result r;
    char *y = manifest(NULL, "    credentialsSecret: out-creds\n", NULL);
    decode(y, &r);
    cr_expect_str_eq(sb_pipeline_credentials_secret(&r.p), "out-creds", "the sink's alone");
    result_free(&r);
    free(y);
    y = manifest("    credentialsSecret: c\n", "    credentialsSecret: c\n", NULL);
    decode(y, &r);
    cr_expect_str_eq(sb_pipeline_credentials_secret(&r.p), "c");
    result_free(&r);
    free(y);
    y = manifest(NULL, NULL, NULL);
    decode(y, &r);
    cr_expect_null(sb_pipeline_credentials_secret(&r.p));
    result_free(&r);
    free(y);
}

Test(spec_k8s, a_full_template_is_valid)
{
    expect_valid("    credentialsSecret: s3-creds\n", NULL,
                 "{serviceAccountName: sb-workers,"
                 " env: [{name: LOG, value: x}, {name: POOL_COPY, value: '$(SB_POOL)'},"
                 "  {name: TOKEN, valueFrom: {secretKeyRef: {name: tok, key: token.txt,"
                 "   optional: true}}},"
                 "  {name: CM, valueFrom: {configMapKeyRef: {name: cfg, key: k}}},"
                 "  {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}},"
                 "  {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory,"
                 "   divisor: 1Mi}}}],"
                 " envFrom: [{configMapRef: {name: settings}}, {prefix: X_, secretRef: {name: s}}],"
                 " volumes: [{name: data, persistentVolumeClaim: {claimName: shared-data}},"
                 "  {name: scratch, emptyDir: {sizeLimit: 10Gi}},"
                 "  {name: cfg, configMap: {name: my-config}},"
                 "  {name: certs, secret: {secretName: ca-certs}}],"
                 " volumeMounts: [{name: data, mountPath: /data, readOnly: true},"
                 "  {name: scratch, mountPath: /scratch}, {name: cfg, mountPath: /etc/cfg,"
                 "   subPath: a/b}, {name: certs, mountPath: /etc/certs}]}");
}

Test(spec_k8s, env_problems)
{
    expect_one(NULL, NULL, "{env: [{name: 1BAD, value: x}]}", "spec.workerTemplate.env[0].name",
               "not a valid variable name");
    expect_one(NULL, NULL, "{env: [{name: OK, value: x}, {name: SB_CONTROLLER, value: x}]}",
               "spec.workerTemplate.env[1].name", "set by the controller");
    expect_one(NULL, NULL, "{env: [{name: TMPDIR, value: /x}]}", "spec.workerTemplate.env[0].name",
               "cannot be overridden");
    expect_one("    credentialsSecret: c\n", NULL, "{env: [{name: AWS_ACCESS_KEY_ID, value: x}]}",
               "spec.workerTemplate.env[0].name", "comes from credentialsSecret");
    /* without a Secret, AWS variables may come from the template */
    expect_valid(NULL, NULL, "{env: [{name: AWS_REGION, value: eu-west-1}]}");
    expect_one(NULL, NULL, "{env: [{name: A, value: x}, {name: A, value: y}]}",
               "spec.workerTemplate.env[1].name", "duplicate variable A");
    expect_one(NULL, NULL,
               "{env: [{name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}",
               "spec.workerTemplate.env[0]", "value and valueFrom exclude each other");
    expect_one(NULL, NULL, "{env: [{name: A, valueFrom: {}}]}",
               "spec.workerTemplate.env[0].valueFrom",
               "needs exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef, "
               "got none");
    expect_one(NULL, NULL,
               "{env: [{name: A, valueFrom: {fieldRef: {fieldPath: x},"
               " configMapKeyRef: {name: c, key: k}}}]}",
               "spec.workerTemplate.env[0].valueFrom", "got several");
    expect_one(NULL, NULL, "{env: [{name: A, valueFrom: {secretKeyRef: {name: s}}}]}",
               "spec.workerTemplate.env[0].valueFrom.secretKeyRef.key",
               "required field is missing");
    expect_one(NULL, NULL, "{env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: 'a/b'}}}]}",
               "spec.workerTemplate.env[0].valueFrom.secretKeyRef.key", "not a valid key");
    expect_one(NULL, NULL,
               "{env: [{name: A, valueFrom: {secretKeyRef: {name: Bad_Name, key: k}}}]}",
               "spec.workerTemplate.env[0].valueFrom.secretKeyRef.name", "DNS-1123 subdomain");
    expect_one(NULL, NULL, "{env: [{name: A, valueFrom: {secretRef: {name: s}}}]}",
               "spec.workerTemplate.env[0].valueFrom.secretRef",
               "unknown field \"secretRef\" (did you mean \"secretKeyRef\"?)");
}

Test(spec_k8s, env_from_problems)
{
    expect_one(NULL, NULL, "{envFrom: [{prefix: P_}]}", "spec.workerTemplate.envFrom[0]",
               "needs exactly one of secretRef, configMapRef, got none");
    expect_one(NULL, NULL, "{envFrom: [{secretRef: {name: a}, configMapRef: {name: b}}]}",
               "spec.workerTemplate.envFrom[0]", "got several");
    expect_one(NULL, NULL, "{envFrom: [{prefix: 9x, secretRef: {name: a}}]}",
               "spec.workerTemplate.envFrom[0].prefix", "not a valid variable name prefix");
    expect_one(NULL, NULL, "{envFrom: [{secretRef: {name: UPPER}}]}",
               "spec.workerTemplate.envFrom[0].secretRef.name", "DNS-1123 subdomain");
    expect_one(NULL, NULL, "{envFrom: [{configMapRef: {optional: true}}]}",
               "spec.workerTemplate.envFrom[0].configMapRef.name", "required field is missing");
}

Test(spec_k8s, volume_problems)
{
    expect_one(NULL, NULL, "{volumes: [{name: d}]}", "spec.workerTemplate.volumes[0]",
               "needs exactly one source");
    expect_one(NULL, NULL, "{volumes: [{name: d, hostPath: {path: /etc}}]}",
               "spec.workerTemplate.volumes[0].hostPath", "unknown field \"hostPath\"");
    expect_one(NULL, NULL, "{volumes: [{name: d, emptyDir: {}, configMap: {name: c}}]}",
               "spec.workerTemplate.volumes[0]", "got several");
    expect_one(NULL, NULL, "{volumes: [{name: Data, emptyDir: {}}]}",
               "spec.workerTemplate.volumes[0].name", "DNS-1123 label");
    expect_one(NULL, NULL, "{volumes: [{name: streambatch-spill, emptyDir: {}}]}",
               "spec.workerTemplate.volumes[0].name", "controller's spill volume");
    expect_one(NULL, NULL, "{volumes: [{name: streambatch-tls, emptyDir: {}}]}",
               "spec.workerTemplate.volumes[0].name", "controller's TLS volume");
    expect_one(NULL, NULL, "{volumes: [{name: a, emptyDir: {}}, {name: a, emptyDir: {}}]}",
               "spec.workerTemplate.volumes[1].name", "duplicate volume \"a\"");
    expect_one(NULL, NULL, "{volumes: [{name: a, persistentVolumeClaim: {}}]}",
               "spec.workerTemplate.volumes[0].persistentVolumeClaim.claimName",
               "required field is missing");
    expect_one(NULL, NULL, "{volumes: [{name: a, secret: {}}]}",
               "spec.workerTemplate.volumes[0].secret.secretName", "required field is missing");
    expect_one(NULL, NULL, "{volumes: [{name: a, configMap: {name: 'x y'}}]}",
               "spec.workerTemplate.volumes[0].configMap.name", "name of a ConfigMap");
}

Test(spec_k8s, volume_mount_problems)
{
    const char *v = "volumes: [{name: d, emptyDir: {}}]";
    char t[512];
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: e, mountPath: /d}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].name",
               "no volume \"e\" in spec.workerTemplate.volumes");
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: data}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].mountPath",
               "must be an absolute path");
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: /tmp}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].mountPath",
               "collides with the worker's spill directory /tmp");
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: /tmp/x}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].mountPath", "collides");
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: /tmpfoo}]}", v);
    expect_valid(NULL, NULL, t);
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: /etc/streambatch/tls/x}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].mountPath",
               "collides with the worker's TLS directory /etc/streambatch/tls");
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: /etc/streambatch/tlsx}]}", v);
    expect_valid(NULL, NULL, t);
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: /}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].mountPath",
               "cannot be mounted over");
    snprintf(t, sizeof t,
             "{%s, volumeMounts: [{name: d, mountPath: /a}, {name: d, mountPath: /a}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[1].mountPath",
               "duplicate mountPath \"/a\"");
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d, mountPath: /a, subPath: ../x}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].subPath", "no '..'");
    snprintf(t, sizeof t, "{%s, volumeMounts: [{name: d}]}", v);
    expect_one(NULL, NULL, t, "spec.workerTemplate.volumeMounts[0].mountPath",
               "required field is missing");
    /* the controller's own volume may be mounted a second time elsewhere */
    expect_valid(NULL, NULL, "{volumeMounts: [{name: streambatch-spill, mountPath: /work}]}");
}

Test(spec_k8s, service_account_name)
{
    expect_valid(NULL, NULL, "{serviceAccountName: s3-reader}");
    expect_one(NULL, NULL, "{serviceAccountName: S3Reader}",
               "spec.workerTemplate.serviceAccountName", "DNS-1123 subdomain");
}

/* The same rules for a JSON object from the API server (the operator's path). */
Test(spec_k8s, json_objects_get_the_same_rules)
{
    const char *j =
        "{\"apiVersion\":\"streambatch.dev/v1alpha1\",\"kind\":\"Pipeline\","
        "\"metadata\":{\"name\":\"p\"},\"spec\":{\"source\":{\"uri\":\"s3://abc/x\","
        "\"format\":\"jsonl\",\"credentialsSecret\":\"a\"},\"stages\":[{\"name\":\"s\","
        "\"op\":\"identity\"}],\"sink\":{\"uri\":\"s3://abc/y\",\"format\":\"jsonl\","
        "\"credentialsSecret\":\"b\"},\"workerTemplate\":{\"volumeMounts\":[{\"name\":\"x\","
        "\"mountPath\":\"/tmp\"}]}}}";
    sb_doc *doc = sb_doc_parse_json(j, strlen(j), NULL);
    cr_assert_not_null(doc);
    sb_diags d = {0};
    sb_pipeline p;
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(doc, 0), &p, &d), 0);
    int cred = 0, ref = 0, tmp = 0;
    for (size_t i = 0; i < d.n; i++) {
        cred += strcmp(d.items[i].path, "spec.sink.credentialsSecret") == 0;
        ref += strcmp(d.items[i].path, "spec.workerTemplate.volumeMounts[0].name") == 0;
        tmp += strcmp(d.items[i].path, "spec.workerTemplate.volumeMounts[0].mountPath") == 0;
    }
    cr_expect_eq(d.n, 3, "%s", joined(&d));
    cr_expect(cred == 1 && ref == 1 && tmp == 1, "%s", joined(&d));
    sb_diags_free(&d);
    sb_pipeline_free(&p);
    sb_doc_free(doc);
}
