/* lib/storage: planning a file source into scheduler splits (stable order, encoded as
 * workers decode them, errors naming spec.source), and the sink life cycle (commit names parts
 * "part-<id>.<ext>", writes the manifest and _SUCCESS, drops orphans; abort removes _SUCCESS).
 * Each test works in its own mkdtemp() directory. */
#include <criterion/criterion.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "storage/storage.h"
#include "doc/doc.h"
#include "spec/pipeline.h"
#include "spec_fixture.h"
#include "io/split.h"
#include "testutil.h"

static char g_dir[64];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void)
{
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-test-engine");
    cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void)
{
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(engine, .init = setup, .fini = teardown, .timeout = 60);

static void load(spec_holder *h, const char *in, const char *psize)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: t}\n"
             "spec:\n  source: {uri: 'file://%s/%s', format: text, partitionSize: %s}\n"
             "  stages:\n  - {name: a, op: identity}\n"
             "  sink: {uri: 'file://%s/out', format: jsonl}\n",
             g_dir, in, psize, g_dir);
    spec_fixture_load(h, yaml);
}

static void write_file(const char *rel, size_t bytes)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    for (size_t i = 0; i < bytes; i++)
        fputc(i % 10 == 9 ? '\n' : 'x', f);
    fclose(f);
}

static int exists(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    return stat(path, &st) == 0;
}

Test(engine, plan_splits_in_stable_order)
{
    char in[300];
    snprintf(in, sizeof in, "%s/in", g_dir);
    cr_assert_eq(mkdir(in, 0755), 0);
    write_file("in/b.txt", 3000); /* 3 splits of 1 KiB */
    write_file("in/a.txt", 100);
    write_file("in/_SUCCESS", 0);
    spec_holder h;
    load(&h, "in", "1Ki");
    sb_storage_splits pl;
    sb_err err;
    cr_assert_eq(sb_storage_splits_make(&h.p, &pl, &err), 0, "%s", err.msg);
    cr_assert_eq(pl.nsplits, 4);
    uint64_t total = 0;
    for (size_t i = 0; i < pl.nsplits; i++) {
        sb_io_split sp = {0};
        cr_assert_eq(sb_io_split_decode(pl.splits[i].split, strlen(pl.splits[i].split), &sp, &err),
                     0, "%s", err.msg);
        cr_expect_eq(pl.splits[i].bytes, sp.end - sp.start);
        cr_expect(strstr(sp.path, i == 0 ? "/a.txt" : "/b.txt") != NULL, "%zu: %s", i, sp.path);
        total += pl.splits[i].bytes;
        sb_io_split_clear(&sp);
    }
    cr_expect_eq(total, 3100);
    /* the same source plans the same splits (resume relies on stable indices) */
    sb_storage_splits again;
    cr_assert_eq(sb_storage_splits_make(&h.p, &again, &err), 0, "%s", err.msg);
    cr_assert_eq(again.nsplits, pl.nsplits);
    for (size_t i = 0; i < pl.nsplits; i++)
        cr_expect_str_eq(again.splits[i].split, pl.splits[i].split);
    sb_storage_splits_free(&again);
    sb_storage_splits_free(&pl);
    cr_expect_null(pl.splits);
    sb_storage_splits_free(&pl); /* twice is fine */
    spec_fixture_free(&h);
}

Test(engine, plan_errors_name_the_source)
{
    spec_holder h;
    load(&h, "missing", "1Mi");
    sb_storage_splits pl;
    sb_err err = {0};
    cr_assert_eq(sb_storage_splits_make(&h.p, &pl, &err), -1);
    cr_expect(strncmp(err.msg, "spec.source: ", 13) == 0, "%s", err.msg);
    cr_expect(strstr(err.msg, "missing") != NULL, "%s", err.msg);
    cr_expect_null(pl.splits);
    sb_storage_splits_free(&pl);
    spec_fixture_free(&h);
}

Test(engine, commit_abort_and_prepare)
{
    write_file("in.txt", 10);
    spec_holder h;
    load(&h, "in.txt", "1Mi");
    sb_err err;
    cr_assert_eq(sb_storage_prepare(&h.p, &err), 0, "%s", err.msg);
    write_file("out/part-s0-t0-p0.jsonl", 20);
    write_file("out/part-s1-t1000000000-p0.jsonl", 30);
    write_file("out/part-s0-t9-p0.jsonl", 5); /* an orphan of an earlier attempt */
    sb_storage_output parts[] = {{"s0-t0-p0", 20, 2, 0, NULL},
                                 {"s1-t1000000000-p0", 30, 3, 0, NULL}};
    cr_assert_eq(sb_storage_commit(&h.p, parts, 2, NULL, 0, &err), 0, "%s", err.msg);
    cr_expect(exists("out/_SUCCESS"));
    cr_expect(exists("out/_manifest.json"));
    cr_expect(exists("out/part-s1-t1000000000-p0.jsonl"));
    cr_expect(!exists("out/part-s0-t9-p0.jsonl"), "the orphan is removed");
    cr_assert_eq(sb_storage_abort(&h.p, &err), 0, "%s", err.msg);
    cr_expect(!exists("out/_SUCCESS"));
    cr_expect(!exists("out/_manifest.json"));
    /* a part whose file is missing or whose size differs fails, without _SUCCESS */
    sb_storage_output bad[] = {{"s0-t0-p0", 21, 2, 0, NULL}};
    cr_expect_eq(sb_storage_commit(&h.p, bad, 1, NULL, 0, &err), -1);
    cr_expect(strstr(err.msg, "part-s0-t0-p0.jsonl") != NULL, "%s", err.msg);
    cr_expect(!exists("out/_SUCCESS"));
    /* an id too long for a part name is refused, not truncated */
    char longid[300];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    sb_storage_output lng[] = {{longid, 1, 1, 0, NULL}};
    cr_expect_eq(sb_storage_commit(&h.p, lng, 1, NULL, 0, &err), -1);
    cr_expect(strstr(err.msg, "is not 1..200 characters") != NULL, "%s", err.msg);
    /* no parts at all: an empty, committed output */
    cr_assert_eq(sb_storage_commit(&h.p, NULL, 0, NULL, 0, &err), 0, "%s", err.msg);
    cr_expect(exists("out/_SUCCESS"));
    spec_fixture_free(&h);
}
