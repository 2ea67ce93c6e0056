/* crc32c.h — CRC-32C (Castagnoli), the checksum of the partition store's spill files (internal
 * to worker/store). Uses the SSE4.2 instruction when the CPU has it, else a table. No memory is
 * allocated; thread-safe.
 */
#ifndef SB_WORKER_STORE_CRC32C_H
#define SB_WORKER_STORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of buf, continuing from crc (pass 0 to start). */
uint32_t sb_store_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
