/* `streambatch run` into a sink that already holds output, under each sink.mode (issue 39,
 * "Write modes"; lib/io/sinkmode.h): overwrite replaces the engine's parts and nothing else,
 * append adds a run's parts beside the earlier ones and lists all, errorIfExists refuses before
 * any task, ignore does nothing to a committed sink. Outputs are read back with Python. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-itest-modes");
    sh("cd %s && mkdir in && python3 -c \"\nimport json\nfor f in range(6):\n"
       "  with open('in/f%%d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(500): o.write(json.dumps({'id': f * 1000 + i, 'n': i %% 100}) + "
       "'\\\\n')\n\"",
       dir);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(modes, .init = setup, .fini = teardown, .timeout = 240);

/* Pipeline NAME: dir/in/ -> filter n < LT -> dir/out/ with sink.mode MODE. */
static void write_mode(const char *name, int lt, const char *mode)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 8Ki}\n"
            "  stages:\n  - {name: keep, op: filter, args: {field: n, op: lt, value: %d}}\n"
            "  sink: {uri: 'file://%s/out/', format: jsonl, mode: %s}\n",
            name, dir, lt, dir, mode);
    fclose(f);
}

/* "<rows in the manifest> <rows in the part files it lists> <part files on disk> <ids>" where
 * ids is the count of distinct ids over the listed parts. */
static char *out_state(void)
{
    return sb_test_sh_out(
        "cd %s/out && python3 -c \"\nimport glob, json\nm = json.load(open('_manifest.json'))\n"
        "ids = []\nfor p in m['parts']:\n  ids += [json.loads(l)['id'] for l in open(p['name'])]\n"
        "print(m['totals']['rows'], len(ids), len(glob.glob('part-*')), len(set(ids)))\n\"",
        dir);
}

Test(modes, overwrite_replaces_the_engines_parts_and_keeps_a_users_file)
{
    char *out;
    write_mode("o1", 50, "overwrite");
    cr_assert_eq(run_cli("o1", "--cpus 2", &out), 0, "%s", out);
    free(out);
    sh("cd %s/out && echo keep > README.txt", dir);
    write_mode("o2", 10, "overwrite");
    cr_assert_eq(run_cli("o2", "--cpus 2", &out), 0, "%s", out);
    free(out);
    char *st = out_state();
    /* 6 files x 500 records, n < 10: 300 rows; no part of the first run is left */
    long rows, read, files, ids;
    cr_assert_eq(sscanf(st, "%ld %ld %ld %ld", &rows, &read, &files, &ids), 4, "%s", st);
    cr_expect(rows == 300 && read == 300 && ids == 300, "%s", st);
    long listed = num("cd %s/out && python3 -c \"import json; print(len(json.load("
                      "open('_manifest.json'))['parts']))\"",
                      dir);
    cr_expect_eq(files, listed, "part files on disk %ld, in the manifest %ld", files, listed);
    cr_expect_eq(num("cat %s/out/README.txt | wc -l", dir), 1, "a user's file was removed");
    free(st);
}

Test(modes, append_adds_each_runs_parts_and_lists_them_all)
{
    char *out;
    write_mode("a", 50, "append");
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(run_cli("a", "--cpus 2", &out), 0, "run %d: %s", i, out);
        free(out);
    }
    char *st = out_state();
    long rows, read, files, ids;
    cr_assert_eq(sscanf(st, "%ld %ld %ld %ld", &rows, &read, &files, &ids), 4, "%s", st);
    /* 1,500 rows a run, twice: every id twice, nothing more */
    cr_expect(rows == 3000 && read == 3000 && ids == 1500, "%s", st);
    long tags =
        num("ls %s/out | sed -n 's/^part-\\([0-9a-f]*\\)-s.*/\\1/p' | sort -u | wc -l", dir);
    cr_expect_eq(tags, 2, "two runs' tags among the part names: %ld", tags);
    free(st);
}

Test(modes, error_if_exists_refuses_before_any_task)
{
    char *out;
    sh("mkdir -p %s/out && echo mine > %s/out/notes.txt", dir, dir);
    write_mode("e", 50, "errorIfExists");
    cr_assert_neq(run_cli("e", "--cpus 2", &out), 0, "%s", out);
    cr_expect(strstr(out, "errorIfExists") != NULL && strstr(out, "notes.txt") != NULL, "%s", out);
    free(out);
    cr_expect_eq(num("ls %s/out | wc -l", dir), 1, "only the user's file: no part was written");
    sh("rm %s/out/notes.txt", dir);
    cr_assert_eq(run_cli("e", "--cpus 2", &out), 0, "an empty sink: %s", out);
    free(out);
}

Test(modes, ignore_leaves_a_committed_sink_untouched)
{
    char *out;
    write_mode("g1", 50, "overwrite");
    cr_assert_eq(run_cli("g1", "--cpus 2", &out), 0, "%s", out);
    free(out);
    char *before = sb_test_sh_out("cd %s/out && ls -l --time-style=+%%s.%%N . && md5sum *", dir);
    write_mode("g2", 10, "ignore");
    cr_assert_eq(run_cli("g2", "--cpus 2", &out), 0, "%s", out);
    free(out);
    char *after = sb_test_sh_out("cd %s/out && ls -l --time-style=+%%s.%%N . && md5sum *", dir);
    cr_expect_str_eq(before, after, "the sink changed");
    cr_expect_eq(summary_num("g2", "tasksRun"), 0, "tasks ran against a committed sink");
    free(before);
    free(after);
}

/* Issue 39: a sink reached through a symbolic link into the source is refused before any task
 * (it would be read back by the next run), and percent-encoded file:// URIs name the decoded
 * paths ("sp%20ace" is "sp ace"). */
Test(modes, symlinked_sink_refused_and_percent_encoded_paths)
{
    sh("cd %s && ln -s in link && mkdir 'sp ace' && cp in/f0.jsonl 'sp ace/x.jsonl'", dir);
    FILE *f = itest_create("sym.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: sym}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl}\n"
            "  stages:\n  - {name: a, op: identity}\n"
            "  sink: {uri: 'file://%s/link/', format: jsonl}\n",
            dir, dir);
    fclose(f);
    char *out;
    cr_assert_neq(run_cli("sym", "--cpus 2", &out), 0, "%s", out);
    cr_expect(strstr(out, "symbolic link") != NULL, "%s", out);
    free(out);
    cr_expect_eq(num("ls %s/in | wc -l", dir), 6, "something was written into the source");
    f = itest_create("pct.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: pct}\n"
            "spec:\n  source: {uri: 'file://%s/sp%%20ace/', format: jsonl}\n"
            "  stages:\n  - {name: a, op: identity}\n"
            "  sink: {uri: 'file://%s/o%%20ut%%25/', format: jsonl}\n",
            dir, dir);
    fclose(f);
    cr_assert_eq(run_cli("pct", "--cpus 2", &out), 0, "%s", out);
    free(out);
    char *got = digest("'o ut%'/part-*"), *want = digest("'sp ace'/x.jsonl");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
}

/* Append and --resume: a second append run SIGKILLed once its checkpoint holds committed
 * splits, then resumed. The resumed run keeps its tag (the checkpoint log's id), so the parts it
 * carries over are found under their names: every record ends up exactly twice (once a run), the
 * manifest lists every part on disk, and two tags name them. */
Test(modes, append_killed_and_resumed_adds_each_record_once)
{
    char *out;
    write_mode("ar", 100, "append");
    cr_assert_eq(run_cli("ar", "--cpus 2", &out), 0, "%s", out);
    free(out);
    FILE *f = itest_create("slow.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: slow}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 4Ki}\n"
            "  stages:\n  - {name: a, op: bench.sleep, args: {msPerRecord: 3}}\n"
            "  - {name: b, op: identity}\n"
            "  sink: {uri: 'file://%s/out/', format: jsonl, mode: append}\n",
            dir, dir);
    fclose(f);
    sh("cd %s && { %s run slow.yaml --cpus 2 --checkpoint ck.json > killed.log 2>&1 & pid=$!; "
       "for i in $(seq 600); do sleep 0.1; n=$(python3 %s/tests/integration/ckpt_splits.py "
       "ck.json 2>/dev/null); test \"${n:-0}\" -ge 4 && break; done; kill -9 $pid; wait $pid; "
       "true; }",
       dir, sb_test_bin("streambatch"), sb_test_root());
    long held =
        num("cd %s && python3 %s/tests/integration/ckpt_splits.py ck.json", dir, sb_test_root());
    cr_assert_geq(held, 4, "the checkpoint held %ld splits when the run was killed", held);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 200 %s run slow.yaml --cpus 2 --checkpoint ck.json --resume "
             "--summary-json slow.summary.json 2>&1",
             dir, sb_test_bin("streambatch"));
    cr_assert_eq(sb_test_run(cmd, &out), 0, "%s", out);
    /* under another tag the carried-over parts would be "missing" and made again */
    cr_expect(strstr(out, "missing or differ") == NULL, "%s", out);
    free(out);
    long rerun = summary_num("slow", "tasksRun");
    char *st = out_state();
    long rows, read, files, ids;
    cr_assert_eq(sscanf(st, "%ld %ld %ld %ld", &rows, &read, &files, &ids), 4, "%s", st);
    cr_expect(rows == 6000 && read == 6000 && ids == 3000, "%s", st);
    long listed = num("cd %s/out && python3 -c \"import json; print(len(json.load("
                      "open('_manifest.json'))['parts']))\"",
                      dir);
    cr_expect_eq(files, listed, "part files %ld, listed %ld (a killed attempt's strays?)", files,
                 listed);
    long tags =
        num("ls %s/out | sed -n 's/^part-\\([0-9a-f]*\\)-s.*/\\1/p' | sort -u | wc -l", dir);
    cr_expect_eq(tags, 2, "tags: %ld", tags);
    fprintf(stderr, "append resume: %ld splits carried over, %ld tasks run after the resume\n",
            held, rerun);
    free(st);
}
