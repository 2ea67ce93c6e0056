/* Unit tests of percent-decoded URI paths (lib/core/pct.c) and of the storage layer's use of
 * them: file:// paths decoded, s3:// keys kept in one form (decoded, '%' re-encoded) whether
 * the user wrote the URI or a listing made it; a sink that is the source through a symbolic
 * link refused (lib/io/sinkmode.c). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/pct.h"
#include "io/schemes.h"
#include "io/sink.h"

Test(pct, decodes_and_refuses_bad_escapes)
{
    char out[64];
    cr_expect_eq(sb_pct_decode("sp%20ace%2Fx%25", 15, out, sizeof out), 9);
    cr_expect_str_eq(out, "sp ace/x%");
    cr_expect_eq(sb_pct_decode("a%2", 3, out, sizeof out), -1, "a cut escape");
    cr_expect_eq(sb_pct_decode("a%zz", 4, out, sizeof out), -1);
    cr_expect_eq(sb_pct_decode("a%00b", 5, out, sizeof out), -1, "a NUL");
    cr_expect_eq(sb_pct_decode("abcdef", 6, out, 4), -1, "out too small");
    cr_expect_eq(sb_pct_decode("%41%42", 3, out, sizeof out), 1, "only n bytes are read");
    cr_expect_str_eq(out, "A");
    cr_expect_eq(sb_pct_decode("%41%42", 4, out, sizeof out), -1, "an escape cut at n");
    cr_expect(sb_pct_decodes("file:///a%20b"));
    cr_expect(sb_pct_decodes("S3://b/k%20"));
    cr_expect_not(sb_pct_decodes("https://h/a%20b"), "URLs go to the HTTP client as written");
    cr_expect_not(sb_pct_decodes("file:///plain"));
}

Test(pct, storage_uris)
{
    sb_err e;
    char *p = sb_io_uri_norm("file:///tmp/sp%20ace/x%25y", &e);
    cr_assert_not_null(p, "%s", e.msg);
    cr_expect_str_eq(p, "/tmp/sp ace/x%y");
    free(p);
    p = sb_io_uri_norm("s3://bkt/sp%20ace/x%25y", &e);
    cr_assert_not_null(p, "%s", e.msg);
    cr_expect_str_eq(p, "s3://bkt/sp ace/x%25y", "the form s3.c lists keys in");
    char *q = sb_io_uri_norm(p, &e);
    cr_expect_str_eq(q, p, "normalizing twice changes nothing");
    free(p);
    free(q);
    cr_expect_null(sb_io_uri_norm("file:///tmp/bad%zz", &e));
    cr_expect(strstr(e.msg, "%25") != NULL, "%s", e.msg);
}

Test(pct, a_sink_reached_through_a_symlink_into_the_source_is_refused)
{
    char d[] = "/tmp/sb-pct-XXXXXX";
    cr_assert_not_null(mkdtemp(d));
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cd %s && mkdir in other && ln -s in link && touch in/a.jsonl", d);
    cr_assert_eq(system(cmd), 0);
    char src_uri[256], link_uri[256], sub_uri[256], other_uri[256], glob_uri[256];
    snprintf(src_uri, sizeof src_uri, "file://%s/in/", d);
    snprintf(glob_uri, sizeof glob_uri, "file://%s/in/*.jsonl", d);
    snprintf(link_uri, sizeof link_uri, "file://%s/link", d);
    snprintf(sub_uri, sizeof sub_uri, "file://%s/link/out/", d);
    snprintf(other_uri, sizeof other_uri, "file://%s/other/new/", d);
    sb_source_spec src = {.uri = src_uri, .format = SB_FMT_JSONL};
    sb_sink_spec snk = {.uri = link_uri, .format = SB_FMT_JSONL};
    sb_err e;
    cr_expect_neq(sb_io_sink_check_not_source(&snk, &src, &e), 0);
    cr_expect(e.permanent && strstr(e.msg, "symbolic link") != NULL, "%s", e.msg);
    src.uri = glob_uri;
    cr_expect_neq(sb_io_sink_check_not_source(&snk, &src, &e), 0, "the glob's directory");
    snk.uri = sub_uri; /* a subdirectory: the listing is not recursive */
    cr_expect_eq(sb_io_sink_check_not_source(&snk, &src, &e), 0, "%s", e.msg);
    snk.uri = other_uri; /* not there yet: its existing prefix is resolved */
    cr_expect_eq(sb_io_sink_check_not_source(&snk, &src, &e), 0, "%s", e.msg);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
}
