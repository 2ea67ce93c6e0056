/* `streambatch run` against a real S3 server (MinIO, tests/helpers/minio.h) with real worker
 * processes: s3 -> s3 with more than 2,000 input objects, a 1 GiB object read as ranged splits
 * and written back byte for byte (preserveOrder), multipart sink parts, MinIO killed and
 * restarted mid-run, and the errors a new user meets (wrong keys, a missing bucket, an
 * unreachable endpoint) reported naming the URI before any task runs, workers SIGKILLed in
 * the middle of a multipart upload, and PNG objects decoded and resized. Inputs are uploaded with
 * the curl command line (independent of our S3 client); outputs are checked against the input
 * files on disk. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../helpers/minio.h"
#include "../unit/testutil.h"
#include "itest.h"
#include "io/schemes.h"

static sb_minio mio;

/* a failed sh() stops the server (itest_sh_failed) */
static void destroy_minio(void)
{
    sb_minio_destroy(&mio);
}

#define S3CURL "curl -fsS --aws-sigv4 aws:amz:us-east-1:s3 --user " SB_MINIO_USER ":" SB_MINIO_PASS

static void setup(void)
{
    itest_mkdtemp("sb-itest-s3");
    itest_sh_failed = destroy_minio;
    memset(&mio, 0, sizeof mio);
    char msg[512];
    cr_assert_eq(sb_minio_start(&mio, msg, sizeof msg), 0, "%s", msg);
    sb_minio_env(&mio);
    unsetenv("AWS_ENDPOINT_URL");
    /* the bucket; retried briefly: MinIO may still be settling just after it reports ready */
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, S3CURL " -X PUT %s/data -o /dev/null 2>&1", mio.url);
    int rc = -1;
    for (int i = 0; i < 10 && rc != 0; i++) {
        if (i > 0)
            usleep(500 * 1000);
        free(out);
        rc = sb_test_run(cmd, &out);
    }
    if (rc != 0) /* a failed init gets no fini: stop the server here, not leave it running */
        sb_minio_destroy(&mio);
    cr_assert_eq(rc, 0, "command failed (%d): %s\n%s", rc, cmd, out);
    free(out);
}

static void teardown(void)
{
    sb_minio_destroy(&mio);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(run_s3, .init = setup, .fini = teardown, .timeout = 240);

static void write_yaml(const char *name, const char *body)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n%s",
            name, body);
    fclose(f);
}

/* Every part listed in the S3 manifest under prefix, concatenated in manifest order, into
 * local file `to` (through our storage layer); returns the number of parts. */
static size_t fetch_output(const char *prefix, const char *to)
{
    char uri[512];
    snprintf(uri, sizeof uri, "s3://data/%s/_SUCCESS", prefix);
    uint64_t size;
    int exists;
    sb_err e;
    cr_assert_eq(sb_io_stat(uri, &size, &exists, &e), 0, "%s", e.msg);
    cr_assert(exists, "no _SUCCESS under s3://data/%s/", prefix);
    char mpath[600];
    snprintf(mpath, sizeof mpath, "%s/%s.manifest.json", dir, prefix);
    snprintf(uri, sizeof uri, "s3://data/%s/_manifest.json", prefix);
    char *names = NULL;
    {
        sb_io_rd *r;
        cr_assert_eq(sb_io_stat(uri, &size, &exists, &e), 0, "%s", e.msg);
        cr_assert_eq(sb_io_read_open(uri, 0, size, &r, &e), 0, "%s", e.msg);
        char *buf = malloc(size + 1);
        cr_assert_eq(sb_io_read_full(r, buf, size, &e), (ssize_t)size, "%s", e.msg);
        sb_io_read_close(r);
        FILE *f = fopen(mpath, "w");
        fwrite(buf, 1, size, f);
        fclose(f);
        free(buf);
        names = sb_test_sh_out("python3 -c \"import json; print(' '.join(p['name'] for p in "
                               "json.load(open('%s'))['parts']))\"",
                               mpath);
    }
    FILE *out = fopen(to, "w");
    cr_assert_not_null(out);
    size_t nparts = 0;
    char *save = NULL;
    for (char *n = strtok_r(names, " \n", &save); n != NULL; n = strtok_r(NULL, " \n", &save)) {
        snprintf(uri, sizeof uri, "s3://data/%s/%s", prefix, n);
        cr_assert_eq(sb_io_stat(uri, &size, &exists, &e), 0, "%s", e.msg);
        cr_assert(exists, "%s listed in the manifest but absent", uri);
        sb_io_rd *r;
        cr_assert_eq(sb_io_read_open(uri, 0, size, &r, &e), 0, "%s", e.msg);
        char buf[1 << 16];
        ssize_t k;
        while ((k = sb_io_read(r, buf, sizeof buf, &e)) > 0)
            fwrite(buf, 1, (size_t)k, out);
        cr_assert_geq(k, 0, "%s", e.msg);
        sb_io_read_close(r);
        nparts++;
    }
    fclose(out);
    free(names);
    return nparts;
}

static char *sorted_md5(const char *path)
{
    return sb_test_sh_out("sort %s | md5sum | cut -d' ' -f1", path);
}

Test(run_s3, s3_to_s3_2100_objects_with_multipart_parts)
{
    /* 2,100 small objects (one per file), uploaded in one curl process (connection reused) */
    sh("cd %s && mkdir in && python3 -c \"\nimport json, random\nrandom.seed(5)\n"
       "for f in range(2100):\n  with open('in/f%%04d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(40):\n"
       "      o.write(json.dumps({'id': f*1000+i, 'n': random.randint(0, 99),"
       " 'pad': 'y'*random.randint(100, 3000)}) + '\\\\n')\n"
       "for f in range(3):\n  with open('in/g%%d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(8000):\n"
       "      o.write(json.dumps({'id': 9000000+f*10000+i, 'n': random.randint(0, 99),"
       " 'pad': 'g'*random.randint(100, 3000)}) + '\\\\n')\n\"",
       dir);
    sh("cd %s/in && " S3CURL " -T 'f[0000-2099].jsonl' %s/data/in/ -o /dev/null", dir, mio.url);
    /* three ~12 MiB objects, one split each: ~95% of each is a part above the multipart threshold
     */
    sh("cd %s/in && " S3CURL " -T 'g[0-2].jsonl' %s/data/in/ -o /dev/null", dir, mio.url);
    write_yaml("many",
               "  source: {uri: 's3://data/in/', format: jsonl, partitionSize: 16Mi}\n"
               "  stages: [{name: keep, op: filter, args: {field: 'n', op: lt, value: 95}}]\n"
               "  sink: {uri: 's3://data/out-many/', format: jsonl}\n"
               "  execution: {memoryBudget: 256Mi}\n");
    /* parts above 5 MiB go up as multipart uploads */
    setenv("SB_S3_MULTIPART_THRESHOLD", "5242880", 1);
    char *out;
    int rc = run_cli_timeout(200, "many", "--cpus 2", &out);
    unsetenv("SB_S3_MULTIPART_THRESHOLD");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char got[600];
    snprintf(got, sizeof got, "%s/many.out", dir);
    size_t parts = fetch_output("out-many", got);
    char *want =
        sb_test_sh_out("cd %s && python3 -c \"\nimport json, glob, hashlib\nlines=[]\n"
                       "for p in sorted(glob.glob('in/*.jsonl')):\n  for l in open(p):\n"
                       "    if json.loads(l)['n'] < 95: lines.append(l)\n"
                       "print(hashlib.md5(''.join(sorted(lines)).encode()).hexdigest())\n\"",
                       dir);
    char *have = sorted_md5(got);
    cr_assert_str_eq(have, want, "s3 -> s3 output differs from the input's independent filter");
    /* the parts were large enough for multipart: some part exceeds the 5 MiB threshold */
    char *big = sb_test_sh_out("python3 -c \"import json; print(max(p['bytes'] for p in "
                               "json.load(open('%s/out-many.manifest.json'))['parts']))\"",
                               dir);
    cr_assert_gt(strtol(big, NULL, 10), 5242880, "largest part %s bytes", big);
    cr_assert_gt(parts, 1);
    /* no unfinished multipart upload is left behind */
    char *ups = sb_minio_get(&mio, "/data?uploads=");
    cr_assert_not_null(ups);
    cr_assert_null(strstr(ups, "<Upload>"), "unfinished uploads left: %s", ups);
    free(ups);
    free(big);
    free(have);
    free(want);
}

Test(run_s3, one_gib_object_as_ranged_splits_byte_for_byte)
{
    /* 1 GiB of JSON lines in one object: 16 ranged splits of 64 MiB; with preserveOrder the
     * parts in manifest order are the input, byte for byte */
    sh("cd %s && python3 -c \"\nimport json\nchunk=''.join(json.dumps({'i': i, 'pad': 'z'*(i%%97)})"
       "+'\\\\n' for i in range(20000))\nn=0\nwith open('big.jsonl','w') as o:\n"
       "  while n < (1<<30):\n    o.write(chunk); n += len(chunk)\n\"",
       dir);
    sh("cd %s && " S3CURL " -T big.jsonl %s/data/big/big.jsonl -o /dev/null", dir, mio.url);
    write_yaml("big", "  source: {uri: 's3://data/big/big.jsonl', format: jsonl, "
                      "partitionSize: 64Mi}\n"
                      "  stages: [{name: copy, op: identity}]\n"
                      "  sink: {uri: 'file://out-big/', format: jsonl}\n"
                      "  execution: {memoryBudget: 512Mi, preserveOrder: true}\n");
    char *out;
    cr_assert_eq(run_cli_timeout(200, "big", "--cpus 2", &out), 0, "%s", out);
    free(out);
    char *sum = sb_test_sh_out("cat %s/big.summary.json; ls -la %s/big.jsonl", dir, dir);
    cr_assert_geq(summary_num("big", "tasksRun"), 16, "fewer tasks than ranged splits: %s", sum);
    free(sum);
    char *want = sb_test_sh_out("md5sum < %s/big.jsonl | cut -d' ' -f1", dir);
    char *have = sb_test_sh_out(
        "cd %s/out-big && python3 -c \"import json; print(' '.join(p['name'] for p in "
        "json.load(open('_manifest.json'))['parts']))\" | xargs cat | md5sum | cut -d' ' -f1",
        dir);
    cr_assert_str_eq(have, want, "1 GiB object read as ranged splits is not identical");
    free(have);
    free(want);
}

Test(run_s3, minio_restarted_mid_run_completes)
{
    sh("cd %s && mkdir in && python3 -c \"\nimport json\n"
       "for f in range(8):\n  with open('in/f%%d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(20000):\n      o.write(json.dumps({'id': f*100000+i, 'n': i%%100}) + "
       "'\\\\n')\n\"",
       dir);
    sh("cd %s/in && " S3CURL " -T 'f[0-7].jsonl' %s/data/rin/ -o /dev/null", dir, mio.url);
    write_yaml("restart", "  source: {uri: 's3://data/rin/', format: jsonl, partitionSize: 256Ki}\n"
                          "  stages: [{name: slow, op: bench.sleep, args: {msPerMB: 3000}}]\n"
                          "  sink: {uri: 's3://data/out-restart/', format: jsonl}\n"
                          "  execution: {memoryBudget: 64Mi}\n");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && (timeout 200 %s run restart.yaml --cpus 2 > restart.log 2>&1; echo $? > "
             "restart.rc) &",
             dir, sb_test_bin("streambatch"));
    cr_assert_eq(system(cmd), 0);
    char rcpath[600];
    snprintf(rcpath, sizeof rcpath, "%s/restart.rc", dir);
    sleep(3);
    cr_assert_neq(access(rcpath, F_OK), 0, "the run ended before MinIO was stopped");
    sb_minio_stop(&mio); /* SIGKILL: connections reset, requests refused */
    sleep(3);
    char msg[512];
    cr_assert_eq(sb_minio_start(&mio, msg, sizeof msg), 0, "%s", msg);
    for (int i = 0; i < 1800 && access(rcpath, F_OK) != 0; i++)
        usleep(100000);
    char *rc = sb_test_sh_out("cat %s/restart.rc", dir);
    char *log = sb_test_sh_out("tail -20 %s/restart.log", dir);
    cr_assert_str_eq(rc, "0", "run failed after the MinIO restart:\n%s", log);
    char got[600];
    snprintf(got, sizeof got, "%s/restart.out", dir);
    fetch_output("out-restart", got);
    char *want = sb_test_sh_out("cat %s/in/*.jsonl | sort | md5sum | cut -d' ' -f1", dir);
    char *have = sorted_md5(got);
    cr_assert_str_eq(have, want, "output after a MinIO restart differs from the input");
    free(rc);
    free(log);
    free(have);
    free(want);
}

/* A run that must fail before any task with a message naming the URI and the cause. */
static void fails_naming(const char *name, const char *uri, const char *cause)
{
    char body[1024];
    snprintf(body, sizeof body,
             "  source: {uri: '%s', format: jsonl}\n"
             "  stages: [{name: a, op: identity}]\n"
             "  sink: {uri: 'file://out-%s/', format: jsonl}\n",
             uri, name);
    write_yaml(name, body);
    char *out;
    cr_assert_eq(run_cli_timeout(200, name, "--cpus 1", &out), 1, "%s", out);
    cr_assert(strstr(out, uri) != NULL, "the message does not name %s:\n%s", uri, out);
    cr_assert(strstr(out, cause) != NULL, "the message lacks \"%s\":\n%s", cause, out);
    free(out);
    cr_assert_eq(summary_num(name, "tasksRun"), 0, "a task ran");
}

Test(run_s3, bad_keys_missing_bucket_unreachable_endpoint)
{
    sh("cd %s && printf '{\"a\":1}\\n' > a.jsonl && " S3CURL
       " -T a.jsonl %s/data/x/a.jsonl -o /dev/null",
       dir, mio.url);
    fails_naming("nobucket", "s3://no-such-bucket/x/", "NoSuchBucket");
    setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-key", 1);
    fails_naming("badkey", "s3://data/x/", "SignatureDoesNotMatch");
    setenv("AWS_SECRET_ACCESS_KEY", SB_MINIO_PASS, 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1", 1);
    setenv("SB_IO_RETRIES", "2", 1);
    fails_naming("noserver", "s3://data/x/", "onnect");
    unsetenv("SB_IO_RETRIES");
    sb_minio_env(&mio);
}

Test(run_s3, csv_from_s3_filter_project_to_csv)
{
    /* csv with a header, quoted fields and CRLF, 3 objects cut into several ranged splits */
    sh("cd %s && mkdir cin && python3 -c \"\nimport csv, random\nrandom.seed(9)\n"
       "for f in range(3):\n  with open('cin/p%%d.csv' %% f, 'w', newline='') as o:\n"
       "    w = csv.writer(o)\n    w.writerow(['id', 'n', 'name'])\n"
       "    for i in range(6000):\n"
       "      w.writerow([f*10000+i, random.randint(0, 99), 'x, \\\"%%d\\\"' %% i])\n\"",
       dir);
    sh("cd %s/cin && " S3CURL " -T 'p[0-2].csv' %s/data/csv/ -o /dev/null", dir, mio.url);
    write_yaml("csv",
               "  source: {uri: 's3://data/csv/', format: csv, partitionSize: 32Ki}\n"
               "  stages:\n"
               "  - {name: keep, op: filter, args: {field: 'n', op: lt, value: 30}}\n"
               "  - {name: cut, op: project, args: {fields: [name, id]}}\n"
               "  sink: {uri: 'file://out-csv/', format: csv, args: {columns: [id, name]}}\n");
    char *out;
    cr_assert_eq(run_cli_timeout(200, "csv", "--cpus 2", &out), 0, "%s", out);
    free(out);
    cr_assert_gt(summary_num("csv", "tasksRun"), 6, "the csv objects were not split");
    /* read the output back with Python's csv module and compare with the input's filter */
    char *res = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport csv, glob\nwant=sorted((r['id'], r['name']) for p in "
        "sorted(glob.glob('cin/*.csv')) for r in csv.DictReader(open(p, newline='')) if "
        "int(r['n']) < 30)\ngot=[]\nfor p in glob.glob('out-csv/part-*.csv'):\n"
        "  rows=list(csv.reader(open(p, newline='')))\n  assert rows[0]==['id','name'], rows[0]\n"
        "  got += [tuple(r) for r in rows[1:]]\nprint('same' if sorted(got)==want and want else "
        "'differ %%d %%d' %% (len(got), len(want)))\n\"",
        dir);
    cr_assert_str_eq(res, "same");
    free(res);
}

Test(run_s3, workers_killed_mid_upload_leave_identical_output_and_no_uploads)
{
    /* 6 objects of ~9 MiB: each output part (~9 MiB) goes up as a multipart upload (5 MiB
     * parts), behind a slow stage. Twice, a worker is stopped right after uploading a part
     * (SB_S3_TEST_STOP_FILE, s3.h), the test sees the open upload in MinIO, and SIGKILLs the
     * worker: the run re-makes the lost work, the output is identical, and commit's cleanup
     * aborts the dead worker's upload. */
    sh("cd %s && mkdir kin && python3 -c \"\nimport json\n"
       "for f in range(6):\n  with open('kin/k%%d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(30000):\n      o.write(json.dumps({'id': f*100000+i, 'pad': 'k'*280})"
       " + '\\\\n')\n\"",
       dir);
    sh("cd %s/kin && " S3CURL " -T 'k[0-5].jsonl' %s/data/kin/ -o /dev/null", dir, mio.url);
    write_yaml("kill", "  source: {uri: 's3://data/kin/', format: jsonl, partitionSize: 16Mi}\n"
                       "  stages: [{name: slow, op: bench.sleep, args: {msPerMB: 150}}]\n"
                       "  sink: {uri: 's3://data/out-kill/', format: jsonl}\n"
                       "  execution: {memoryBudget: 256Mi}\n");
    char token[600];
    snprintf(token, sizeof token, "%s/stop.token", dir);
    setenv("SB_S3_MULTIPART_THRESHOLD", "5242880", 1);
    setenv("SB_S3_TEST_STOP_FILE", token, 1);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && (timeout 200 %s run kill.yaml --cpus 2 > kill.log 2>&1; echo $? > "
             "kill.rc) &",
             dir, sb_test_bin("streambatch"));
    cr_assert_eq(system(cmd), 0);
    unsetenv("SB_S3_MULTIPART_THRESHOLD");
    unsetenv("SB_S3_TEST_STOP_FILE");
    char rcpath[600];
    snprintf(rcpath, sizeof rcpath, "%s/kill.rc", dir);
    int kills = 0;
    for (int round = 0; round < 2; round++) {
        sh("touch %s", token);
        /* a worker of this run (a child of its `streambatch run`) stopped after a part */
        char *victim = NULL;
        for (int i = 0; i < 600 && access(rcpath, F_OK) != 0; i++) {
            victim = sb_test_sh_out(
                "for p in $(pgrep -f 'streambatch run kill.yaml'); do for c in $(pgrep -P $p -f "
                "streambatch-worker); do [ \"$(cut -d' ' -f3 /proc/$c/stat 2>/dev/null)\" = T ] "
                "&& echo $c; done; done | head -1");
            if (victim[0] != '\0')
                break;
            free(victim);
            victim = NULL;
            usleep(100000);
        }
        cr_assert_not_null(victim, "no worker stopped mid-upload (round %d)", round);
        char *ups = sb_minio_get(&mio, "/data?uploads=");
        cr_assert(ups != NULL && strstr(ups, "<Upload>") != NULL,
                  "the stopped worker has an open upload: %s", ups ? ups : "(no answer)");
        free(ups);
        char kcmd[128];
        snprintf(kcmd, sizeof kcmd, "kill -9 %s", victim);
        cr_assert_eq(system(kcmd), 0);
        kills++;
        free(victim);
    }
    unlink(token);
    for (int i = 0; i < 2000 && access(rcpath, F_OK) != 0; i++)
        usleep(100000);
    char *rc = sb_test_sh_out("cat %s/kill.rc", dir);
    char *log = sb_test_sh_out("tail -20 %s/kill.log", dir);
    cr_assert_str_eq(rc, "0", "run failed after %d worker kills:\n%s", kills, log);
    char got[600];
    snprintf(got, sizeof got, "%s/kill.out", dir);
    fetch_output("out-kill", got);
    char *want = sb_test_sh_out("cat %s/kin/*.jsonl | sort | md5sum | cut -d' ' -f1", dir);
    char *have = sorted_md5(got);
    cr_assert_str_eq(have, want, "output after %d worker kills differs from the input", kills);
    /* no part file outside the manifest, no unfinished multipart upload */
    char *ups = sb_minio_get(&mio, "/data?uploads=");
    cr_assert_not_null(ups);
    cr_assert_null(strstr(ups, "<Upload>"), "unfinished uploads left: %s", ups);
    sb_io_obj *objs = NULL;
    size_t nobjs = 0;
    sb_err e;
    cr_assert_eq(sb_io_list("s3://data/out-kill/", SB_IO_LIST_ALL, &objs, &nobjs, &e), 0, "%s",
                 e.msg);
    char *nparts = sb_test_sh_out("python3 -c \"import json; print(len(json.load(open("
                                  "'%s/out-kill.manifest.json'))['parts']))\"",
                                  dir);
    cr_assert_eq(nobjs, (size_t)strtol(nparts, NULL, 10) + 2,
                 "%zu objects in the sink, %s parts + _manifest.json + _SUCCESS", nobjs, nparts);
    sb_io_objs_free(objs, nobjs);
    free(nparts);
    free(ups);
    free(rc);
    free(log);
    free(have);
    free(want);
}

/* JPEG/PNG decoding reads from any backend: PNG objects of different sizes in MinIO (written
 * with zlib alone by tests/integration/pngs.py, independent of libpng), resized to one size; a
 * truncated object is one errored partition naming it, the others all arrive once. */
Test(run_s3, images_from_s3_resized_and_a_truncated_one_errored)
{
    sh("cd %s && python3 %s/tests/integration/pngs.py img i 13 --bad 12 --sizes ramp", dir,
       sb_test_root());
    sh("cd %s/img && " S3CURL " -T 'i[00-12].png' %s/data/img/ -o /dev/null", dir, mio.url);
    write_yaml("img", "  source: {uri: 's3://data/img/', format: image}\n"
                      "  stages:\n"
                      "  - {name: small, op: image.resize, args: {width: 4, height: 4}}\n"
                      "  - {name: answer, op: project, args: {fields: [path, width, channels]}}\n"
                      "  sink: {uri: 's3://data/out-img/', format: jsonl}\n"
                      "  execution: {maxErroredPartitions: 1}\n");
    char *out;
    int rc = run_cli_timeout(200, "img", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "Succeeded with 1 errored partition") != NULL, "%s", out);
    cr_expect(strstr(out, "s3://data/img/i12.png") != NULL && strstr(out, "png:") != NULL,
              "the errored partition names the object and the codec: %s", out);
    free(out);
    char got[600];
    snprintf(got, sizeof got, "%s/img.out", dir);
    fetch_output("out-img", got);
    char *rows = sb_test_sh_out(
        "python3 -c \"\nimport json\nrows = [json.loads(l) for l in open('%s')]\n"
        "assert all(r['width'] == 4 and r['channels'] == 3 and set(r) == {'path', 'width', "
        "'channels'} for r in rows), rows\nprint(','.join(sorted(r['path'][-7:] for r in "
        "rows)))\n\"",
        got);
    cr_expect_str_eq(rows, "i00.png,i01.png,i02.png,i03.png,i04.png,i05.png,i06.png,i07.png,"
                           "i08.png,i09.png,i10.png,i11.png");
    free(rows);
    cr_expect_eq(summary_num("img", "erroredPartitions"), 1);
}

/* Writes text to file `name` in the test's directory. */
static void save_text(const char *name, const char *text)
{
    FILE *f = itest_create("%s", name);
    fputs(text ? text : "", f);
    fclose(f);
}

/* No secret value appears anywhere a user or an operator reads: the CLI's output, the summary,
 * every worker's log (debug level), the sink's manifest, after a run with good keys and one with
 * a wrong key and a session token (whose errors quote S3's answer). */
Test(run_s3, no_secret_in_logs_errors_or_outputs)
{
    sh("cd %s && printf '{\"a\":1,\"k\":\"x\"}\\n{\"a\":2,\"k\":\"y\"}\\n' > s.jsonl && " S3CURL
       " -T s.jsonl %s/data/sec/in/s.jsonl -o /dev/null",
       dir, mio.url);
    write_yaml("sec", "  source: {uri: 's3://data/sec/in/', format: jsonl}\n"
                      "  stages:\n  - {name: f, op: filter, args: {field: a, op: gt, value: 1}}\n"
                      "  sink: {uri: 's3://data/secout/', format: jsonl}\n");
    setenv("SB_LOG_LEVEL", "debug", 1);
    sh("mkdir -p %s/sec-run %s/bad-run", dir, dir);
    char *out = NULL;
    int rc = run_cli_timeout(200, "sec", "--cpus 2 --run-dir sec-run", &out);
    save_text("good.out", out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    const char *bad_secret = "wrong-SECRET-4f1c9e", *token = "TOKEN-77aa-session-SECRET";
    setenv("AWS_SECRET_ACCESS_KEY", bad_secret, 1);
    setenv("AWS_SESSION_TOKEN", token, 1);
    rc = run_cli_timeout(200, "sec", "--cpus 2 --run-dir bad-run", &out);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("SB_LOG_LEVEL");
    sb_minio_env(&mio);
    cr_assert_neq(rc, 0, "a wrong key must fail the run");
    cr_expect(strstr(out, "s3://data/sec/") != NULL, "the error names the URI:\n%s", out);
    save_text("bad.out", out);
    free(out);
    fetch_output("secout", "/dev/null");
    sh("cd %s && " S3CURL " %s/data/secout/_manifest.json -o manifest.json", dir, mio.url);
    /* what is there to look at */
    char *files = sb_test_sh_out("cd %s && ls good.out bad.out sec.summary.json manifest.json "
                                 "sec-run/*.log bad-run/*.log | wc -l",
                                 dir);
    cr_expect_geq(atoi(files), 6, "outputs and worker logs to check");
    free(files);
    const char *secrets[] = {SB_MINIO_PASS, bad_secret, token};
    for (size_t i = 0; i < 3; i++) {
        char *hits = sb_test_sh_out(
            "cd %s && grep -rlF -- '%s' good.out bad.out sec.summary.json manifest.json sec-run "
            "bad-run 2>/dev/null | head -5",
            dir, secrets[i]);
        cr_expect_str_eq(hits, "", "secret %zu appears in: %s", i, hits);
        free(hits);
    }
}

/* Issue 39, compressed inputs: jsonl objects compressed by Python's gzip module (two members)
 * and the zstd command, beside a plain one, read from S3 and filtered: the output equals
 * Python's filter of the decompressed inputs, and each compressed object is one task while the
 * plain one is cut. A corrupt object fails the run, naming the object and the offset. */
Test(run_s3, gzip_and_zstd_objects_read_as_streams)
{
    sh("cd %s && mkdir zin && python3 -c \"\nimport gzip, json, random\nrandom.seed(5)\n"
       "def recs(f):\n  return ''.join(json.dumps({'id': f*100000+i, 'n': random.randint(0, 99),"
       " 'pad': 'y'*random.randint(5, 90)})+'\\n' for i in range(4000))\n"
       "a, b, c = recs(0), recs(1), recs(2)\n"
       "open('plain-a.txt', 'w').write(a); open('zin/c.jsonl', 'w').write(c)\n"
       "open('zin/a.jsonl.gz', 'wb').write(gzip.compress(a[:len(a)//2].encode()) + "
       "gzip.compress(a[len(a)//2:].encode()))\nopen('plain-b.txt', 'w').write(b)\n\" && "
       "zstd -q -c plain-b.txt > zin/b.jsonl.zst",
       dir);
    sh("cd %s/zin && " S3CURL " -T '{a.jsonl.gz,b.jsonl.zst,c.jsonl}' %s/data/z/ -o /dev/null", dir,
       mio.url);
    write_yaml("zin", "  source: {uri: 's3://data/z/', format: jsonl, partitionSize: 32Ki}\n"
                      "  stages:\n"
                      "  - {name: keep, op: filter, args: {field: 'n', op: lt, value: 30}}\n"
                      "  sink: {uri: 'file://out-z/', format: jsonl}\n");
    char *out;
    cr_assert_eq(run_cli_timeout(200, "zin", "--cpus 2", &out), 0, "%s", out);
    free(out);
    long tasks = summary_num("zin", "tasksRun");
    cr_assert(tasks >= 6 && tasks < 20, "tasks: %ld (1 + 1 + the plain object's splits)", tasks);
    char *res = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport glob, json\nsrc = open('plain-a.txt').read() + "
        "open('plain-b.txt').read() + open('zin/c.jsonl').read()\n"
        "want = sorted(l for l in src.splitlines() if json.loads(l)['n'] < 30)\n"
        "got = sorted(l for p in glob.glob('out-z/part-*') for l in open(p).read().splitlines())\n"
        "print('same %%d' %% len(want) if got == want and want else 'differ %%d %%d' %% "
        "(len(got), len(want)))\n\"",
        dir);
    cr_assert(strncmp(res, "same ", 5) == 0, "%s", res);
    free(res);
    /* a corrupt object: a byte of the deflate data flipped */
    sh("cd %s && python3 -c \"\nb = bytearray(open('zin/a.jsonl.gz', 'rb').read())\n"
       "b[len(b)//3] ^= 0x55\nopen('bad.jsonl.gz', 'wb').write(b)\n\" && " S3CURL
       " -T bad.jsonl.gz %s/data/zbad/ -o /dev/null",
       dir, mio.url);
    write_yaml("zbad", "  source: {uri: 's3://data/zbad/', format: jsonl}\n"
                       "  stages:\n  - {name: a, op: identity}\n"
                       "  sink: {uri: 'file://out-zbad/', format: jsonl}\n");
    cr_assert_neq(run_cli_timeout(200, "zbad", "--cpus 2", &out), 0, "%s", out);
    cr_expect(strstr(out, "s3://data/zbad/bad.jsonl.gz") != NULL &&
                  strstr(out, "compressed byte offset") != NULL,
              "%s", out);
    free(out);
}

/* Issue 39, write modes on S3: two append runs into one prefix (every part listed, every record
 * twice, the first run's objects untouched by the second), then errorIfExists refused there
 * before any task, naming an object, and ignore leaving it as it is. */
Test(run_s3, append_error_if_exists_and_ignore_on_s3)
{
    sh("cd %s && mkdir ain && python3 -c \"\nimport json\nfor f in range(4):\n"
       "  with open('ain/a%%d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(700): o.write(json.dumps({'id': f*1000+i}) + '\\\\n')\n\"",
       dir);
    sh("cd %s/ain && " S3CURL " -T '{a0,a1,a2,a3}.jsonl' %s/data/ain/ -o /dev/null", dir, mio.url);
    static const char *const modes[] = {"append", "append", "errorIfExists", "ignore"};
    for (int i = 0; i < 4; i++) {
        char name[16], body[512];
        snprintf(name, sizeof name, "m%d", i);
        snprintf(body, sizeof body,
                 "  source: {uri: 's3://data/ain/', format: jsonl, partitionSize: 8Ki}\n"
                 "  stages:\n  - {name: a, op: identity}\n"
                 "  sink: {uri: 's3://data/aout/', format: jsonl, mode: %s}\n",
                 modes[i]);
        write_yaml(name, body);
        char *out;
        int rc = run_cli_timeout(200, name, "--cpus 2", &out);
        if (i == 2) {
            cr_expect_neq(rc, 0, "errorIfExists into a committed prefix: %s", out);
            cr_expect(strstr(out, "errorIfExists") != NULL && strstr(out, "aout") != NULL, "%s",
                      out);
        } else {
            cr_assert_eq(rc, 0, "%s: %s", modes[i], out);
        }
        free(out);
        if (i == 0) {
            char to[512];
            snprintf(to, sizeof to, "%s/first.jsonl", dir);
            cr_assert_gt(fetch_output("aout", to), 1);
        }
    }
    char to[512];
    snprintf(to, sizeof to, "%s/both.jsonl", dir);
    size_t parts = fetch_output("aout", to);
    char *res = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport collections, glob, json\n"
        "want = collections.Counter(json.loads(l)['id'] for p in glob.glob('ain/*.jsonl') for l in "
        "open(p))\ngot = collections.Counter(json.loads(l)['id'] for l in open('both.jsonl'))\n"
        "first = collections.Counter(json.loads(l)['id'] for l in open('first.jsonl'))\n"
        "print('ok' if first == want and got == want + want else 'differ %%d %%d' %% "
        "(sum(got.values()), sum(want.values())))\n\"",
        dir);
    cr_expect_str_eq(res, "ok");
    free(res);
    cr_expect(parts >= 4, "%zu parts", parts);
    cr_expect_eq(summary_num("m3", "tasksRun"), 0, "ignore ran tasks");
}

/* Issue 39: percent-encoded s3:// URIs. Keys with a space and a '%' (uploaded by curl, which
 * sends them encoded), a source "s3://data/sp%20ace/" and a sink "s3://data/o%20ut%25/": the
 * keys are decoded, listed objects (whose keys hold '%') read back, and the output lands under
 * "o ut%/". */
Test(run_s3, percent_encoded_keys)
{
    sh("cd %s && python3 -c \"\nimport json\nopen('k.jsonl', 'w').write(''.join(json.dumps({'i': "
       "i}) + '\\\\n' for i in range(300)))\n\"",
       dir);
    sh("cd %s && " S3CURL " -T k.jsonl '%s/data/sp%%20ace/a%%25b.jsonl' -o /dev/null", dir,
       mio.url);
    write_yaml("pcts", "  source: {uri: 's3://data/sp%20ace/', format: jsonl}\n"
                       "  stages:\n  - {name: a, op: identity}\n"
                       "  sink: {uri: 's3://data/o%20ut%25/', format: jsonl}\n");
    char *out;
    cr_assert_eq(run_cli_timeout(200, "pcts", "--cpus 2", &out), 0, "%s", out);
    free(out);
    char to[512];
    snprintf(to, sizeof to, "%s/pcts.jsonl", dir);
    cr_assert_geq(fetch_output("o%20ut%25", to), 1);
    char *got = sb_test_sh_out("sort %s | md5sum", to);
    char *want = sb_test_sh_out("sort %s/k.jsonl | md5sum", dir);
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
    /* the objects are under the decoded key, as another client (curl) names it */
    sh(S3CURL " -o /dev/null '%s/data/o%%20ut%%25/_SUCCESS'", mio.url);
}
