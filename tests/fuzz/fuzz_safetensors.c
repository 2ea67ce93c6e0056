/* libFuzzer target for worker/ops/tensor/safetensors.h: weights files come from users, so no
 * input may make the reader read out of bounds, leak, or accept a tensor whose values it cannot
 * read. Every tensor of an accepted file is read completely.
 * Seeds: tests/fuzz/corpus/safetensors/ (small valid models). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/tensor/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__ubsan_default_options(void);

const char *__ubsan_default_options(void)
{
    return "halt_on_error=1:print_stacktrace=1";
}

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    if (size)
        memcpy(buf, data, size);
    sb_safetensors st;
    sb_err err = {0};
    if (sb_st_parse(buf, size, &st, &err) != 0)
        return 0; /* buf is freed by the parser */
    for (size_t i = 0; i < st.n; i++) {
        const sb_st_tensor *t = &st.t[i];
        if (sb_st_find(&st, t->name) != t)
            __builtin_trap();
        uint64_t prod = 1;
        for (size_t d = 0; d < t->ndim; d++)
            prod *= t->shape[d];
        if (prod != t->count)
            __builtin_trap();
        float acc = 0;
        for (uint64_t k = 0; k < t->count; k++)
            acc += sb_st_get(t, k);
        sink = acc;
    }
    sb_st_free(&st);
    return 0;
}
