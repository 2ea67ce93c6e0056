/* bench_mlp — tensor.mlp's CPU path alone, for scripts/bench-mlp.sh.
 *
 *   bench_mlp WEIGHTS DIN ROWS BATCH ROUNDS [DEVICE [replace|add [PRECISION]]]
 *
 * Runs the op (as a worker's task would: sb_op_run over one partition, BATCH rows per call)
 * over ROWS random float32 vectors of DIN values (the model's first layer), ROUNDS times after one
 * warm-up round (the weights load once, as in a worker), and prints
 * "RESULT mlp rows=N din=N seconds=S,S,..." (seconds per round: the op's calls and its output).
 * DEVICE is the op's args.device (auto when left out); `replace`: the outputs replace the input
 * column (outputField = field) instead of being added beside it (`add`: beside it, the default);
 * PRECISION is the op's args.precision (fp32 when left out). Built twice: bench_mlp (the plain
 * archive: the CPU path) and bench_mlp_gpu (linked with the CUDA objects, as streambatch-worker-gpu
 * is).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "partition/partition.h"
#include "worker/ops/ops.h"

static int drop(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)len, (void)rows, (void)ud;
    sb_part_free(blob);
    return 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 9) {
        fprintf(stderr, "usage: bench_mlp WEIGHTS DIN ROWS BATCH ROUNDS [auto|cpu|cuda "
                        "[replace|add [fp32|tf32|bf16]]]\n");
        return 2;
    }
    size_t din = strtoull(argv[2], NULL, 10), rows = strtoull(argv[3], NULL, 10),
           batch = strtoull(argv[4], NULL, 10);
    int rounds = atoi(argv[5]);
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    char args[1200];
    snprintf(args, sizeof args,
             "{\"weights\":\"%s\",\"field\":\"x\",\"activation\":\"relu\",\"device\":\"%s\""
             "%s,\"precision\":\"%s\"}",
             argv[1], argc >= 7 ? argv[6] : "auto",
             argc >= 8 && strcmp(argv[7], "replace") == 0 ? ",\"outputField\":\"x\"" : "",
             argc == 9 ? argv[8] : "fp32");
    sb_err err = {0};
    void *st;
    if (op == NULL || op->init(args, &st, &err) != 0) {
        fprintf(stderr, "bench_mlp: %s\n", err.msg);
        return 1;
    }
    sb_field f = {.name = "x",
                  .type = SB_TYPE_FIXED_LIST,
                  .child_type = SB_TYPE_FLOAT32,
                  .list_size = (uint32_t)din};
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &err);
    float *v = malloc(din * sizeof *v);
    srand(7);
    for (size_t r = 0; r < rows; r++) {
        for (size_t k = 0; k < din; k++)
            v[k] = (float)rand() / (float)RAND_MAX - 0.5f;
        sb_batch_builder_append_list(b, 0, v, din, &err);
    }
    void *blob;
    size_t len;
    if (sb_batch_builder_finish(b, &blob, &len, &err) != 0) {
        fprintf(stderr, "bench_mlp: %s\n", err.msg);
        return 1;
    }
    sb_batch *bt;
    sb_batch_open(blob, len, &bt, &err);
    printf("RESULT mlp rows=%zu din=%zu seconds=", rows, din);
    for (int r = 0; r <= rounds; r++) {
        sb_op_out *o = sb_op_out_new(64 << 20, drop, NULL, &err);
        double t0 = now_s();
        if (sb_op_run(op, st, bt, batch, o, &err) != 0 || sb_op_out_flush(o, &err) != 0) {
            fprintf(stderr, "bench_mlp: %s\n", err.msg);
            return 1;
        }
        double t = now_s() - t0;
        sb_op_out_free(o);
        if (r > 0)
            printf("%s%.4f", r > 1 ? "," : "", t);
    }
    printf("\n");
    sb_batch_close(bt);
    sb_part_free(blob);
    sb_batch_builder_free(b);
    free(v);
    op->free(st);
    sb_op_shutdown();
    return 0;
}
