/* Kubernetes client configuration (lib/k8s/config.h): kubeconfig files (data and file fields,
 * contexts, KUBECONFIG lists, tokens), in-cluster config with token rotation, and the error
 * messages for broken kubeconfigs (they must name the file, the field and the line). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "k8s/config.h"

static char dir[] = "/tmp/sb-k8s-config-XXXXXX";

static void setup(void)
{
    cr_assert_not_null(mkdtemp(dir));
    unsetenv("KUBECONFIG");
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    unsetenv("SB_SERVICEACCOUNT_DIR");
}

static void teardown(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(k8s_config, .init = setup, .fini = teardown);

static const char *write_file(const char *name, const char *text)
{
    static char paths[8][512];
    static int slot;
    char *p = paths[slot++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "cannot write %s", p);
    fputs(text, f);
    fclose(f);
    return p;
}

/* base64 of "CA-PEM", "CERT-PEM", "KEY-PEM" */
#define CA64 "Q0EtUEVN"
#define CERT64 "Q0VSVC1QRU0="
#define KEY64 "S0VZLVBFTQ=="

static const char *GOOD = "apiVersion: v1\n"
                          "kind: Config\n"
                          "clusters:\n"
                          "- name: other\n"
                          "  cluster: {server: 'https://10.0.0.1:6443'}\n"
                          "- name: sb\n"
                          "  cluster:\n"
                          "    server: https://127.0.0.1:6443/\n"
                          "    certificate-authority-data: " CA64 "\n"
                          "users:\n"
                          "- name: admin\n"
                          "  user:\n"
                          "    client-certificate-data: " CERT64 "\n"
                          "    client-key-data: " KEY64 "\n"
                          "- name: robot\n"
                          "  user: {token: s3cret}\n"
                          "contexts:\n"
                          "- name: sb\n"
                          "  context: {cluster: sb, user: admin, namespace: jobs}\n"
                          "- name: robot\n"
                          "  context: {cluster: other, user: robot}\n"
                          "current-context: sb\n";

Test(k8s_config, kubeconfig_with_data_fields)
{
    sb_err err = {0};
    const char *p = write_file("config", GOOD);
    sb_k8s_config *c = sb_k8s_config_load_kubeconfig(p, NULL, &err);
    cr_assert_not_null(c, "%s", err.msg);
    cr_expect_str_eq(sb_k8s_config_server(c), "https://127.0.0.1:6443");
    cr_expect_str_eq(sb_k8s_config_namespace(c), "jobs");
    cr_expect_str_eq(sb_k8s_config_context(c), "sb");
    size_t n;
    const char *ca = sb_k8s_config_ca_pem(c, &n);
    cr_assert_not_null(ca);
    cr_expect(n == 6 && memcmp(ca, "CA-PEM", 6) == 0);
    const char *cert = sb_k8s_config_client_cert_pem(c, &n);
    cr_expect(cert != NULL && n == 8 && memcmp(cert, "CERT-PEM", 8) == 0);
    const char *key = sb_k8s_config_client_key_pem(c, &n);
    cr_expect(key != NULL && n == 7 && memcmp(key, "KEY-PEM", 7) == 0);
    char *tok = sb_k8s_config_token(c, &err);
    cr_expect_null(tok, "no token configured");
    cr_expect_str_eq(err.msg, "");
    sb_k8s_config_free(c);
}

Test(k8s_config, named_context_with_token_and_default_namespace)
{
    sb_err err = {0};
    const char *p = write_file("config", GOOD);
    sb_k8s_config *c = sb_k8s_config_load_kubeconfig(p, "robot", &err);
    cr_assert_not_null(c, "%s", err.msg);
    cr_expect_str_eq(sb_k8s_config_server(c), "https://10.0.0.1:6443");
    cr_expect_str_eq(sb_k8s_config_namespace(c), "default");
    size_t n;
    cr_expect_null(sb_k8s_config_ca_pem(c, &n));
    cr_expect_null(sb_k8s_config_client_cert_pem(c, &n));
    char *tok = sb_k8s_config_token(c, &err);
    cr_assert_not_null(tok, "%s", err.msg);
    cr_expect_str_eq(tok, "s3cret");
    free(tok);
    sb_k8s_config_free(c);
}

Test(k8s_config, file_fields_relative_to_the_kubeconfig)
{
    write_file("ca.crt", "CA FROM FILE");
    write_file("c.crt", "CERT FROM FILE");
    write_file("c.key", "KEY FROM FILE");
    const char *p = write_file("kc.yaml", "clusters:\n"
                                          "- name: c\n"
                                          "  cluster: {server: https://h:1, certificate-authority: "
                                          "ca.crt}\n"
                                          "users:\n"
                                          "- name: u\n"
                                          "  user: {client-certificate: c.crt, client-key: c.key}\n"
                                          "contexts:\n"
                                          "- {name: x, context: {cluster: c, user: u}}\n"
                                          "current-context: x\n");
    sb_err err = {0};
    sb_k8s_config *c = sb_k8s_config_load_kubeconfig(p, NULL, &err);
    cr_assert_not_null(c, "%s", err.msg);
    size_t n;
    cr_expect_str_eq(sb_k8s_config_ca_pem(c, &n), "CA FROM FILE");
    cr_expect_str_eq(sb_k8s_config_client_cert_pem(c, &n), "CERT FROM FILE");
    cr_expect_str_eq(sb_k8s_config_client_key_pem(c, &n), "KEY FROM FILE");
    sb_k8s_config_free(c);
}

Test(k8s_config, kubeconfig_env_list_takes_first_existing_file)
{
    const char *p = write_file("real", GOOD);
    char env[1100];
    snprintf(env, sizeof env, "%s/missing:%s", dir, p);
    setenv("KUBECONFIG", env, 1);
    sb_err err = {0};
    sb_k8s_config *c = sb_k8s_config_load_kubeconfig(NULL, NULL, &err);
    cr_assert_not_null(c, "%s", err.msg);
    cr_expect_str_eq(sb_k8s_config_context(c), "sb");
    sb_k8s_config_free(c);
    c = sb_k8s_config_load_default(&err);
    cr_assert_not_null(c, "%s", err.msg);
    sb_k8s_config_free(c);

    snprintf(env, sizeof env, "%s/nope", dir);
    setenv("KUBECONFIG", env, 1);
    cr_expect_null(sb_k8s_config_load_kubeconfig(NULL, NULL, &err));
    cr_expect(strstr(err.msg, "KUBECONFIG=") && strstr(err.msg, "/nope"), "%s", err.msg);
    unsetenv("KUBECONFIG");
    setenv("HOME", dir, 1);
    cr_expect_null(sb_k8s_config_load_kubeconfig(NULL, NULL, &err));
    cr_expect(strstr(err.msg, ".kube/config") != NULL, "%s", err.msg);
}

Test(k8s_config, token_file_is_reread_when_stale)
{
    write_file("tok", "first\n");
    const char *p = write_file("kc", "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
                                     "users: [{name: u, user: {tokenFile: tok}}]\n"
                                     "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                                     "current-context: x\n");
    sb_err err = {0};
    sb_k8s_config *c = sb_k8s_config_load_kubeconfig(p, NULL, &err);
    cr_assert_not_null(c, "%s", err.msg);
    char *t = sb_k8s_config_token(c, &err);
    cr_expect_str_eq(t, "first", "trailing newline must be stripped");
    free(t);
    write_file("tok", "second\n");
    t = sb_k8s_config_token(c, &err);
    cr_expect_str_eq(t, "first", "within the refresh interval the cached token is used");
    free(t);
    sb_k8s_config_set_token_refresh(c, 0);
    t = sb_k8s_config_token(c, &err);
    cr_expect_str_eq(t, "second", "a stale token must be re-read");
    free(t);
    /* A vanished file keeps the last token. */
    char path[600];
    snprintf(path, sizeof path, "%s/tok", dir);
    unlink(path);
    t = sb_k8s_config_token(c, &err);
    cr_expect_str_eq(t, "second");
    free(t);
    sb_k8s_config_free(c);
}

Test(k8s_config, in_cluster_from_serviceaccount_dir)
{
    write_file("token", "tok-1");
    write_file("ca.crt", "IN-CLUSTER-CA");
    write_file("namespace", "team-a\n");
    setenv("SB_SERVICEACCOUNT_DIR", dir, 1);
    sb_err err = {0};
    cr_expect_null(sb_k8s_config_in_cluster(&err));
    cr_expect(strstr(err.msg, "KUBERNETES_SERVICE_HOST") != NULL, "%s", err.msg);
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
    sb_k8s_config *c = sb_k8s_config_load_default(&err);
    cr_assert_not_null(c, "%s", err.msg);
    cr_expect_str_eq(sb_k8s_config_server(c), "https://127.0.0.1:6443");
    cr_expect_str_eq(sb_k8s_config_namespace(c), "team-a");
    size_t n;
    cr_expect_str_eq(sb_k8s_config_ca_pem(c, &n), "IN-CLUSTER-CA");
    char *t = sb_k8s_config_token(c, &err);
    cr_expect_str_eq(t, "tok-1");
    free(t);
    write_file("token", "tok-2");
    sb_k8s_config_set_token_refresh(c, 0);
    t = sb_k8s_config_token(c, &err);
    cr_expect_str_eq(t, "tok-2", "rotated token must be picked up");
    free(t);
    sb_k8s_config_free(c);

    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    c = sb_k8s_config_in_cluster(&err);
    cr_assert_not_null(c, "%s", err.msg);
    cr_expect_str_eq(sb_k8s_config_server(c), "https://[fd00::1]:6443");
    sb_k8s_config_free(c);

    char path[600];
    snprintf(path, sizeof path, "%s/ca.crt", dir);
    unlink(path);
    cr_expect_null(sb_k8s_config_in_cluster(&err));
    cr_expect(strstr(err.msg, "ca.crt") != NULL, "error must name the CA file: %s", err.msg);
}

/* Broken kubeconfigs: each error names the file, the field and (where known) the line. */
typedef struct bad_case {
    const char *text;
    const char *context;
    const char *want[3];
} bad_case;

static const bad_case BAD[] = {
    {"clusters: [\n", NULL, {"line ", NULL, NULL}},
    {"- a\n- b\n", NULL, {"not a mapping", NULL, NULL}},
    {"clusters: []\ncontexts: []\n", NULL, {"current-context is not set", NULL, NULL}},
    {"current-context: nope\ncontexts: []\n",
     NULL,
     {"contexts \"nope\" not found", "line 1", NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n",
     NULL,
     {"clusters \"c\" not found", "line 2", NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {user: u}}]\n",
     NULL,
     {"contexts[0].context.cluster: missing", NULL, NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters:\n- name: c\n"
     "  cluster: {server: 'ftp://h'}\n",
     NULL,
     {"clusters[0].cluster.server", "ftp://h", "line 5"}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters:\n- name: c\n"
     "  cluster:\n    server: https://h\n    certificate-authority-data: '@@notbase64'\n",
     NULL,
     {"clusters[0].cluster.certificate-authority-data: not valid base64", "line 7", NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters:\n- name: c\n"
     "  cluster:\n    server: https://h\n    certificate-authority: /nonexistent/ca.pem\n",
     NULL,
     {"clusters[0].cluster.certificate-authority", "/nonexistent/ca.pem", "No such file"}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters:\n- name: c\n"
     "  cluster: {server: 'https://h', insecure-skip-tls-verify: true}\n",
     NULL,
     {"insecure-skip-tls-verify: not supported", NULL, NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters:\n"
     "- {name: c, cluster: {server: 'https://h'}}\nusers:\n- name: u\n  user:\n"
     "    client-certificate-data: " CERT64 "\n",
     NULL,
     {"users[0].user: client-certificate without client-key", NULL, NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters:\n"
     "- {name: c, cluster: {server: 'https://h'}}\nusers:\n- name: u\n  user: {token: 12}\n",
     NULL,
     {"users[0].user.token: expected a string, found an integer", "line 7", NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters:\n"
     "- {name: c, cluster: {server: 'https://h'}}\nusers:\n- name: u\n"
     "  user: {tokenFile: /nonexistent/tok}\n",
     NULL,
     {"users[0].user.tokenFile", "/nonexistent/tok", NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters:\n"
     "- {name: c, cluster: {server: 'https://h'}}\nusers:\n- name: u\n"
     "  user: {exec: {command: aws}}\n",
     NULL,
     {"exec: credential plugins are not supported", NULL, NULL}},
    {"clusters: {a: 1}\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n",
     NULL,
     {"clusters: expected a list, found an object", "line 1", NULL}},
    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n",
     "other",
     {"contexts \"other\" not found", NULL, NULL}},
};

Test(k8s_config, broken_kubeconfigs_name_file_field_and_line)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu.yaml", i);
        const char *p = write_file(name, BAD[i].text);
        sb_err err = {0};
        sb_k8s_config *c = sb_k8s_config_load_kubeconfig(p, BAD[i].context, &err);
        cr_expect_null(c, "case %zu: broken kubeconfig accepted", i);
        sb_k8s_config_free(c);
        cr_expect(strstr(err.msg, p) != NULL, "case %zu: error does not name the file: %s", i,
                  err.msg);
        for (int w = 0; w < 3 && BAD[i].want[w] != NULL; w++)
            cr_expect(strstr(err.msg, BAD[i].want[w]) != NULL, "case %zu: error lacks \"%s\": %s",
                      i, BAD[i].want[w], err.msg);
    }
}

Test(k8s_config, missing_kubeconfig_names_the_path)
{
    sb_err err = {0};
    cr_expect_null(sb_k8s_config_load_kubeconfig("/nonexistent/kubeconfig", NULL, &err));
    cr_expect(strstr(err.msg, "/nonexistent/kubeconfig") && strstr(err.msg, "No such file"), "%s",
              err.msg);
}

Test(k8s_config, base64_decode)
{
    size_t n;
    char *s = sb_k8s_base64_decode("aGVs\nbG8=", 9, &n);
    cr_assert_not_null(s);
    cr_expect(n == 5 && strcmp(s, "hello") == 0);
    free(s);
    s = sb_k8s_base64_decode("", 0, &n);
    cr_assert_not_null(s);
    cr_expect_eq(n, 0);
    free(s);
    const char *bad[] = {"abc", "a===", "ab=c", "a*cd", "abcde"};
    for (size_t i = 0; i < 5; i++) {
        s = sb_k8s_base64_decode(bad[i], strlen(bad[i]), &n);
        cr_expect_null(s, "\"%s\" must be rejected", bad[i]);
        free(s);
    }
}
