/* testpqmem.h — a Parquet file in memory for the parquet tests: the writer's output collected
 * into an sb_pq_buf (sb_test_pq_to_buf, an sb_pq_write_fn) and read back through the reader's
 * read_at callback (sb_test_pq_mem_read over an sb_test_pq_mem). Header-only (static inline).
 *
 * Memory: sb_test_pq_mem points at the caller's bytes; the buffer is the caller's. */
#ifndef SB_TESTPQMEM_H
#define SB_TESTPQMEM_H

#include <stdint.h>
#include <string.h>

#include "core/err.h"
#include "parquet/write.h"

typedef struct {
    const uint8_t *p;
    size_t n;
} sb_test_pq_mem;

static inline int sb_test_pq_mem_read(void *ud, uint64_t off, void *buf, size_t n, sb_err *err)
{
    const sb_test_pq_mem *m = ud;
    if (off > m->n || n > m->n - off)
        return sb_err_set(err, "read past the end");
    memcpy(buf, m->p + off, n);
    return 0;
}

static inline int sb_test_pq_to_buf(void *ud, const void *p, size_t n, sb_err *err)
{
    (void)err;
    sb_pq_buf_put(ud, p, n);
    return 0;
}

#endif
