/* retry.h — when and how long the network backends (s3.c, http.c) wait before trying a request
 * again: full-jitter exponential backoff (delay uniform in [0, min(cap, base * 2^attempt)]),
 * and which failures are worth another try.
 *
 * Memory: nothing allocated.
 */
#ifndef SB_IO_RETRY_H
#define SB_IO_RETRY_H

#include <stdint.h>

/* Attempts of one request, the first included (SB_IO_RETRIES overrides it, 1..20). */
int sb_io_retry_attempts(void);

/* Milliseconds to sleep before attempt `attempt` (1 = the first retry): uniform in
 * [base_ms/2, min(cap_ms, base_ms << (attempt-1))]. Thread-safe. */
uint32_t sb_io_retry_delay_ms(int attempt, uint32_t base_ms, uint32_t cap_ms);

/* Sleeps sb_io_retry_delay_ms(attempt, 100, 5000). */
void sb_io_retry_sleep(int attempt);

/* Is an HTTP status worth retrying? 408, 429, 500, 502, 503 (SlowDown), 504. */
int sb_io_retry_status(long status);

/* Is a libcurl result worth retrying (CURLcode as int: connection refused/reset, timeouts,
 * partial transfers, send/recv errors)? */
int sb_io_retry_curl(int curl_code);

#endif
