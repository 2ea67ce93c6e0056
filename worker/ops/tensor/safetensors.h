/* safetensors.h — a strict reader of the safetensors format (huggingface/safetensors: an 8-byte
 * little-endian header length N, N bytes of a JSON object mapping tensor names to {dtype, shape,
 * data_offsets: [begin, end]} plus an optional "__metadata__" of strings, then the data;
 * offsets are relative to the data's start).
 *
 * Checked before anything is used: the header length (at most SB_ST_MAX_HEADER and inside the
 * file), the header as JSON, each entry's dtype (F32 or F64 taken; others refused by name),
 * shape (at most 4 dimensions, no overflow), offsets inside the data with end - begin equal to
 * the shape's size times the dtype's width, and no two tensors overlapping. Errors name the
 * tensor and what is wrong.
 *
 * Memory: sb_st_parse() takes ownership of buf (malloc'd) on success and on failure; tensors
 * point into it; sb_st_free() frees both.
 */
#ifndef SB_WORKER_OPS_TENSOR_SAFETENSORS_H
#define SB_WORKER_OPS_TENSOR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define SB_ST_MAX_HEADER (16u << 20)
#define SB_ST_MAX_DIMS 4

typedef enum { SB_ST_F32 = 1, SB_ST_F64 } sb_st_dtype;

typedef struct sb_st_tensor {
    char *name;
    sb_st_dtype dtype;
    size_t ndim;
    uint64_t shape[SB_ST_MAX_DIMS];
    uint64_t count;      /* elements */
    const uint8_t *data; /* little-endian values, not aligned */
} sb_st_tensor;

typedef struct sb_safetensors {
    uint8_t *buf;
    size_t len;
    sb_st_tensor *t;
    size_t n;
} sb_safetensors;

int sb_st_parse(uint8_t *buf, size_t len, sb_safetensors *out, sb_err *err);
const sb_st_tensor *sb_st_find(const sb_safetensors *s, const char *name);
/* Element i of t as a float. */
float sb_st_get(const sb_st_tensor *t, uint64_t i);
void sb_st_free(sb_safetensors *s);

#endif
