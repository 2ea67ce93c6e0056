/* rpc/tlsdir: the three files of a --tls-dir are checked at load (the error names the file and
 * the directory), and the options it fills are mutual TLS with the fixed server name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc/tlsdir.h"
#include "testutil.h"

static char dir[256];

static void put(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    sb_test_tmpl(dir, sizeof dir, "sb-tlsdir");
    cr_assert_not_null(mkdtemp(dir));
    static const char pem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    put("tls.crt", pem);
    put("tls.key", "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n");
    put("ca.crt", pem);
}

static void teardown(void)
{
    char *out = sb_test_sh_out("rm -rf %s", dir);
    free(out);
}

TestSuite(rpc_tlsdir, .init = setup, .fini = teardown);

Test(rpc_tlsdir, loads_the_three_files_and_fills_mutual_tls_options)
{
    sb_rpc_tlsdir t;
    sb_err err = {0};
    cr_assert_eq(sb_rpc_tlsdir_load(&t, dir, NULL, &err), 0, "%s", err.msg);
    sb_rpc_opts o = {.threads = 3};
    sb_rpc_tlsdir_apply(&t, &o);
    char want[512];
    snprintf(want, sizeof want, "%s/tls.crt", dir);
    cr_expect_str_eq(o.tls_cert_file, want);
    snprintf(want, sizeof want, "%s/tls.key", dir);
    cr_expect_str_eq(o.tls_key_file, want);
    snprintf(want, sizeof want, "%s/ca.crt", dir);
    cr_expect_str_eq(o.tls_ca_file, want);
    cr_expect_eq(o.tls_require_client_cert, 1);
    cr_expect_str_eq(o.tls_server_name, "streambatch");
    cr_expect_eq(o.threads, 3, "other options untouched");
    /* a trailing slash and a server name of one's own */
    char slash[300];
    snprintf(slash, sizeof slash, "%s/", dir);
    cr_assert_eq(sb_rpc_tlsdir_load(&t, slash, "sb.internal", &err), 0, "%s", err.msg);
    snprintf(want, sizeof want, "%s/ca.crt", dir);
    cr_expect_str_eq(t.ca, want);
    cr_expect_str_eq(t.server_name, "sb.internal");
}

static void expect_error(const char *what, const char *want1, const char *want2)
{
    sb_rpc_tlsdir t;
    sb_err err = {0};
    cr_expect_eq(sb_rpc_tlsdir_load(&t, dir, NULL, &err), -1, "%s: loaded", what);
    cr_expect(strstr(err.msg, want1) != NULL && strstr(err.msg, want2) != NULL,
              "%s: wants \"%s\" and \"%s\" in: %s", what, want1, want2, err.msg);
    cr_expect(strstr(err.msg, dir) != NULL, "%s: the directory is named: %s", what, err.msg);
}

Test(rpc_tlsdir, a_missing_or_broken_file_is_named)
{
    char p[512];
    snprintf(p, sizeof p, "%s/ca.crt", dir);
    unlink(p);
    expect_error("no ca.crt", "ca.crt", "No such file");
    put("ca.crt", "-----BEGIN CERTIFICATE-----\n");
    put("tls.key", "not a key\n");
    expect_error("tls.key not PEM", "tls.key", "is not PEM");
    put("tls.key", "");
    expect_error("empty tls.key", "tls.key", "is not PEM");
    snprintf(p, sizeof p, "%s/tls.crt", dir);
    unlink(p);
    expect_error("no tls.crt", "tls.crt", "No such file");
    sb_rpc_tlsdir t;
    sb_err err = {0};
    cr_expect_eq(sb_rpc_tlsdir_load(&t, "", NULL, &err), -1);
    cr_expect(strstr(err.msg, "--tls-dir") != NULL, "%s", err.msg);
}
