/* `streambatch run --gpus N`: each worker of the gpu pool sees one GPU of its own
 * (CUDA_VISIBLE_DEVICES, controller/local/workers.h), and so does an exec process it runs: an
 * exec stage on the gpu pool prints the variable it sees, per record, with its worker's pid.
 * The run's own CUDA_VISIBLE_DEVICES names the devices to share out (no GPU is needed: the
 * variable is what is checked). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-gpudev");
}

TestSuite(gpudev, .init = setup, .timeout = 180);

/* Runs NAME with CUDA_VISIBLE_DEVICES=VIS (NULL: unset) and --gpus 2; returns the sorted
 * "device pid" pairs the exec stage printed, one line each (caller frees). */
static char *devices_seen(const char *name, const char *vis)
{
    sh("mkdir -p %s/in && cd %s/in && for f in $(seq 1 16); do for i in $(seq 1 100); do "
       "echo \"{\\\"f\\\": $f, \\\"i\\\": $i}\"; done > f$f.jsonl; done",
       dir, dir);
    FILE *f = itest_create("dev.py");
    fprintf(f, "import json, os, sys, time\n"
               "for line in sys.stdin:\n"
               "    time.sleep(0.002)\n"
               "    print(json.dumps({'d': os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'),\n"
               "                      'w': os.getppid()}))\n");
    fclose(f);
    char stages[512];
    snprintf(stages, sizeof stages,
             "  - {name: g, op: exec, args: {command: [python3, %s/dev.py]}, resources: {gpu: 1}, "
             "workers: {max: 2}}\n",
             dir);
    write_pipeline_ps(name, "1Ki", stages, "");
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd %s && %s%s%s timeout 120 %s run %s.yaml --cpus 1 --gpus 2 2>&1",
             dir, vis ? "CUDA_VISIBLE_DEVICES='" : "env -u CUDA_VISIBLE_DEVICES", vis ? vis : "",
             vis ? "'" : "", sb_test_bin("streambatch"), name);
    int rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return sb_test_sh_out("cat %s/out-%s/part-* | python3 -c \"import json, sys; "
                          "print('\\n'.join(sorted({'%%s %%s' %% (r['d'], r['w']) for r in "
                          "map(json.loads, sys.stdin)})))\"",
                          dir, name);
}

Test(gpudev, each_gpu_worker_sees_its_own_device)
{
    char *seen = devices_seen("two", "5,7");
    /* two workers, one device each, and they differ */
    char d1[16] = "", d2[16] = "";
    long w1 = 0, w2 = 0;
    int n = sscanf(seen, "%15s %ld\n%15s %ld", d1, &w1, d2, &w2);
    cr_assert_eq(n, 4, "the exec stage ran on one worker only, or printed other lines:\n%s", seen);
    size_t lines = 0;
    for (const char *c = seen; *c; c++)
        lines += *c == '\n';
    cr_expect_leq(lines, 2, "a worker saw more than one value:\n%s", seen);
    cr_expect_neq(w1, w2, "%s", seen);
    cr_expect(strcmp(d1, d2) != 0, "both workers see the same device:\n%s", seen);
    cr_expect((strcmp(d1, "5") == 0 || strcmp(d1, "7") == 0) &&
                  (strcmp(d2, "5") == 0 || strcmp(d2, "7") == 0),
              "devices outside CUDA_VISIBLE_DEVICES=5,7:\n%s", seen);
    free(seen);
}

/* A worker of the gpu pool whose stages have no tensor.mlp never loads cuBLASLt: loading it
 * costs a process ~160 MiB (its .bss and its pages), which put scripts/bench-memory.sh's
 * accelerator pipelines at 254 MiB against goals of 136 and 184 while it was linked. The exec
 * stage reads its worker's (its parent's) binary and mappings. */
Test(gpudev, a_gpu_worker_without_tensor_mlp_does_not_load_cublas)
{
    sh("mkdir -p %s/in && cd %s/in && for f in $(seq 1 4); do for i in $(seq 1 50); do "
       "echo \"{\\\"f\\\": $f, \\\"i\\\": $i}\"; done > f$f.jsonl; done",
       dir, dir);
    FILE *f = itest_create("maps.py");
    fprintf(f, "import json, os, sys\n"
               "w = os.getppid()\n"
               "exe = os.path.basename(os.readlink(f'/proc/{w}/exe'))\n"
               "lt = any('libcublasLt' in l for l in open(f'/proc/{w}/maps'))\n"
               "for line in sys.stdin:\n"
               "    print(json.dumps({'exe': exe, 'lt': lt}))\n");
    fclose(f);
    char stages[512];
    snprintf(
        stages, sizeof stages,
        "  - {name: g, op: exec, args: {command: [python3, %s/maps.py]}, resources: {gpu: 1}}\n",
        dir);
    write_pipeline_ps("nolt", "1Ki", stages, "");
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd %s && timeout 120 %s run nolt.yaml --cpus 1 --gpus 1 2>&1", dir,
             sb_test_bin("streambatch"));
    int rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *seen = sb_test_sh_out("cat %s/out-nolt/part-* | sort -u", dir);
    /* the CUDA build runs the gpu pool when it is built (make build builds it) */
    char *gpu = sb_test_sh_out("test -x %s && echo yes", sb_test_bin("streambatch-worker-gpu"));
    if (strcmp(gpu, "yes") == 0)
        cr_assert(strstr(seen, "\"exe\": \"streambatch-worker-gpu\"") != NULL,
                  "the gpu stage did not run on streambatch-worker-gpu:\n%s", seen);
    cr_assert(strstr(seen, "\"lt\": false") != NULL && strstr(seen, "\"lt\": true") == NULL,
              "a gpu worker mapped libcublasLt without running tensor.mlp:\n%s", seen);
    free(gpu);
    free(seen);
}
