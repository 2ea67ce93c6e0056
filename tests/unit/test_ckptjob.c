/* The checkpoint log's storage jobs on a worker (lib/storage/ckptjob.h), on a file sink: PUT
 * writes whole files into <sink>/_streambatch/checkpoint and with prune removes the others,
 * LOAD reads every file back in name order (a missing log holds none; temporaries are
 * skipped), REMOVE takes the log and its emptied directories, and no file name can reach
 * outside the directory. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doc/doc.h"
#include "spec/pipeline.h"
#include "storage/ckptjob.h"
#include "storage/jobs.h"

static char g_root[128];
static sb_doc *g_doc;
static sb_pipeline g_p;

static void setup(void)
{
    snprintf(g_root, sizeof g_root, "/tmp/sb-ckptjob-%d", (int)getpid());
    char y[1024];
    snprintf(y, sizeof y,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: c}\n"
             "spec:\n  source: {uri: 'file:///in', format: text, partitionSize: 1Mi}\n"
             "  stages: [{name: a, op: identity}]\n  sink: {uri: 'file://%s/out', format: text}\n",
             g_root);
    g_doc = sb_doc_parse_yaml(y, strlen(y), NULL);
    sb_diags d = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(g_doc, 0), &g_p, &d), 0);
}

static void teardown(void)
{
    sb_pipeline_free(&g_p);
    sb_doc_free(g_doc);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(ckptjob, .init = setup, .fini = teardown);

static int exists(const char *rel)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", g_root, rel);
    return stat(p, &st) == 0;
}

Test(ckptjob, the_log_lives_beside_the_sink)
{
    sb_err err;
    char *d = sb_storage_ckpt_dir(&g_p, &err);
    cr_assert_not_null(d, "%s", err.msg);
    char want[256];
    snprintf(want, sizeof want, "%s/out/_streambatch/checkpoint", g_root);
    cr_expect_str_eq(d, want);
    free(d);
}

Test(ckptjob, put_load_prune_and_remove)
{
    sb_err err;
    sb_storage_files fs = {0};
    cr_assert_eq(sb_storage_ckpt_load(&g_p, &fs, &err), 0, "a missing log: %s", err.msg);
    cr_expect_eq(fs.n, 0);
    sb_storage_file put[2] = {{"seg-00000001-00000001.sbck", "seg", 3},
                              {"base-00000001.sbck", "base\n", 5}};
    cr_assert_eq(sb_storage_ckpt_put(&g_p, put, 2, 0, &err), 0, "%s", err.msg);
    cr_expect(exists("out/_streambatch/checkpoint/base-00000001.sbck"));
    cr_assert_eq(sb_storage_ckpt_load(&g_p, &fs, &err), 0, "%s", err.msg);
    cr_assert_eq(fs.n, 2);
    cr_expect_str_eq(fs.v[0].name, "base-00000001.sbck", "in name order");
    cr_expect_eq(fs.v[0].len, 5);
    cr_expect_str_eq(fs.v[0].data, "base\n");
    cr_expect_str_eq(fs.v[1].data, "seg");
    sb_storage_files_free(&fs);
    /* a temporary of a killed writer is no file of the log */
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/out/_streambatch/checkpoint/.sbtmp-x", g_root);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(sb_storage_ckpt_load(&g_p, &fs, &err), 0, "%s", err.msg);
    cr_expect_eq(fs.n, 2);
    sb_storage_files_free(&fs);
    /* a compaction's new base prunes everything else */
    sb_storage_file base2 = {"base-00000002.sbck", "b2", 2};
    cr_assert_eq(sb_storage_ckpt_put(&g_p, &base2, 1, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_storage_ckpt_load(&g_p, &fs, &err), 0, "%s", err.msg);
    cr_assert_eq(fs.n, 1);
    cr_expect_str_eq(fs.v[0].name, "base-00000002.sbck");
    sb_storage_files_free(&fs);
    cr_expect_not(exists("out/_streambatch/checkpoint/.sbtmp-x"));
    cr_assert_eq(sb_storage_ckpt_remove(&g_p, &err), 0, "%s", err.msg);
    cr_expect_not(exists("out/_streambatch"), "the emptied directories go too");
    cr_expect(exists("out"), "the sink stays");
    cr_expect_eq(sb_storage_ckpt_remove(&g_p, &err), 0, "a missing log: %s", err.msg);
}

Test(ckptjob, names_cannot_leave_the_directory)
{
    sb_err err;
    const char *bad[] = {"../x", "a/b", ".hidden", "", "..", "a b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sb_storage_file f = {(char *)bad[i], "x", 1};
        cr_expect_eq(sb_storage_ckpt_put(&g_p, &f, 1, 0, &err), -1, "%s", bad[i]);
        cr_expect(strstr(err.msg, "is not a valid file name") != NULL, "%s", err.msg);
    }
    cr_expect_not(exists("out/x"));
    cr_expect(sb_storage_ckpt_name_ok("seg-00000001-00000002.sbck"));
}

Test(ckptjob, kinds_say_what_they_do)
{
    cr_expect_str_eq(sb_storage_kind_what(SB_STORAGE_CKPT_PUT), "writing the checkpoint log");
    cr_expect_str_eq(sb_storage_kind_what(SB_STORAGE_CKPT_LOAD), "reading the checkpoint log");
    cr_expect_str_eq(sb_storage_kind_what(SB_STORAGE_CKPT_REMOVE), "removing the checkpoint log");
}

/* A chunked base goes as several PUT jobs, its list last with the prune: the chunks the earlier
 * jobs wrote are pieces of that list ("<stem>-*"), kept; the older generation's are not. */
Test(ckptjob, a_prune_keeps_the_chunks_of_the_files_it_writes)
{
    sb_err err;
    sb_storage_files fs = {0};
    sb_storage_file old[2] = {{"base-00000001-00000001.sbck", "o1", 2},
                              {"base-00000001.sbck", "old", 3}};
    cr_assert_eq(sb_storage_ckpt_put(&g_p, old, 2, 0, &err), 0, "%s", err.msg);
    sb_storage_file c[2] = {{"base-00000002-00000001.sbck", "c1", 2},
                            {"base-00000002-00000002.sbck", "c2", 2}};
    cr_assert_eq(sb_storage_ckpt_put(&g_p, c, 1, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_storage_ckpt_put(&g_p, c + 1, 1, 0, &err), 0, "%s", err.msg);
    sb_storage_file list = {"base-00000002.sbck", "list", 4};
    cr_assert_eq(sb_storage_ckpt_put(&g_p, &list, 1, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_storage_ckpt_load(&g_p, &fs, &err), 0, "%s", err.msg);
    cr_assert_eq(fs.n, 3, "the list and its two chunks");
    cr_expect_str_eq(fs.v[0].name, "base-00000002-00000001.sbck");
    cr_expect_str_eq(fs.v[1].name, "base-00000002-00000002.sbck");
    cr_expect_str_eq(fs.v[2].name, "base-00000002.sbck");
    sb_storage_files_free(&fs);
    cr_assert_eq(sb_storage_ckpt_remove(&g_p, &err), 0, "%s", err.msg);
}
