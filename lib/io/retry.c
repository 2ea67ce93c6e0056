/* retry.c — when and how long the network backends wait before trying a request again (see
 * retry.h): the attempt count, full-jitter exponential backoff (a lock-free splitmix64 for the
 * jitter) and which HTTP statuses and curl errors are worth another try. */

#include "io/retry.h"

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

int sb_io_retry_attempts(void)
{
    const char *s = getenv("SB_IO_RETRIES");
    if (s != NULL) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end != s && *end == '\0' && v >= 1 && v <= 20)
            return (int)v;
    }
    return 6;
}

/* splitmix64 over a shared counter: cheap, thread-safe, different per call and process. */
static uint64_t rnd(void)
{
    static _Atomic uint64_t state;
    uint64_t s = atomic_fetch_add(&state, 0x9E3779B97F4A7C15ull);
    if (s == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
        atomic_store(&state, s);
    }
    uint64_t z = s + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint32_t sb_io_retry_delay_ms(int attempt, uint32_t base_ms, uint32_t cap_ms)
{
    if (attempt < 1)
        attempt = 1;
    uint64_t hi = base_ms;
    for (int i = 1; i < attempt && hi < cap_ms; i++)
        hi *= 2;
    if (hi > cap_ms)
        hi = cap_ms;
    uint64_t lo = base_ms / 2;
    if (lo > hi)
        lo = hi;
    return (uint32_t)(lo + rnd() % (hi - lo + 1));
}

void sb_io_retry_sleep(int attempt)
{
    uint32_t ms = sb_io_retry_delay_ms(attempt, 100, 5000);
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int sb_io_retry_status(long status)
{
    return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
           status == 504;
}

int sb_io_retry_curl(int code)
{
    switch ((CURLcode)code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return 1;
    default:
        return 0;
    }
}
