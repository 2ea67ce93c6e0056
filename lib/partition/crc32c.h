/* crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of partition
 * blobs and of every transfer chunk (see partition.h and chunk.h).
 *
 * sb_crc32c() picks the SSE4.2 `crc32` instruction at run time when the CPU has it (three
 * interleaved streams, so it runs at several bytes per cycle) and a portable slicing-by-8 table
 * otherwise. Both paths are exported so tests can check each against known vectors.
 *
 * Chaining follows zlib's crc32(): start with 0 and feed pieces in order,
 *     crc = sb_crc32c(0, a, na); crc = sb_crc32c(crc, b, nb);   == crc32c(a || b)
 * and sb_crc32c(0, "123456789", 9) == 0xE3069283.
 *
 * Memory: nothing is allocated; the lookup tables are static and built once (thread-safe).
 */
#ifndef SB_PARTITION_CRC32C_H
#define SB_PARTITION_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC-32C of p[0..n) continuing from `crc` (0 to start). p may be NULL when n == 0. */
uint32_t sb_crc32c(uint32_t crc, const void *p, size_t n);

/* The portable table implementation (any CPU). */
uint32_t sb_crc32c_portable(uint32_t crc, const void *p, size_t n);

/* True when this CPU supports the SSE4.2 crc32 instruction. */
bool sb_crc32c_hw_available(void);

/* The SSE4.2 implementation. Only call it when sb_crc32c_hw_available() is true; on other
 * CPUs (or non-x86 builds) it falls back to the portable code. */
uint32_t sb_crc32c_hw(uint32_t crc, const void *p, size_t n);

#endif
