/* crc32c.c — CRC-32C of partition blobs and chunks (see crc32c.h): the SSE4.2 instruction when
 * the CPU has it, chosen at run time, else a portable slicing-by-8 table; tables built once. */

#include "partition/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define SB_CRC_X86 1
#include <nmmintrin.h>
#endif

#define POLY 0x82F63B78u
/* Block sizes of the three-stream hardware loop, and the zero-shift operators that combine the
 * three partial CRCs (crc(A||B) = shift(crc(A), |B|) ^ crc_raw(0, B), since the raw update is
 * linear over GF(2)). */
#define LONG_BLOCK 8192u
#define SHORT_BLOCK 256u

static uint32_t tab[8][256];
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];
static bool have_hw;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Raw (no pre/post inversion) byte-at-a-time update: the definition the tables derive from. */
static uint32_t raw_zeros(uint32_t c, size_t n)
{
    while (n--)
        c = tab[0][c & 0xff] ^ (c >> 8);
    return c;
}

/* Tables for the linear map "append n zero bytes" so that it costs four lookups. */
static void build_shift(uint32_t out[4][256], size_t n)
{
    uint32_t basis[32];
    for (int i = 0; i < 32; i++)
        basis[i] = raw_zeros(1u << i, n);
    for (int k = 0; k < 4; k++) {
        for (unsigned b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int bit = 0; bit < 8; bit++)
                if (b & (1u << bit))
                    v ^= basis[8 * k + bit];
            out[k][b] = v;
        }
    }
}

static void init_tables(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        tab[0][i] = c;
    }
    for (unsigned i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            tab[k][i] = (tab[k - 1][i] >> 8) ^ tab[0][tab[k - 1][i] & 0xff];
    build_shift(shift_long, LONG_BLOCK);
    build_shift(shift_short, SHORT_BLOCK);
#ifdef SB_CRC_X86
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static inline void ensure_init(void)
{
    pthread_once(&once, init_tables);
}

static inline uint32_t apply_shift(uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

uint32_t sb_crc32c_portable(uint32_t crc, const void *buf, size_t n)
{
    ensure_init();
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c = tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = load64(p) ^ c; /* little-endian: low byte first */
        c = tab[7][w & 0xff] ^ tab[6][(w >> 8) & 0xff] ^ tab[5][(w >> 16) & 0xff] ^
            tab[4][(w >> 24) & 0xff] ^ tab[3][(w >> 32) & 0xff] ^ tab[2][(w >> 40) & 0xff] ^
            tab[1][(w >> 48) & 0xff] ^ tab[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

bool sb_crc32c_hw_available(void)
{
    ensure_init();
    return have_hw;
}

#ifdef SB_CRC_X86
__attribute__((target("sse4.2"))) static uint32_t hw_raw(uint32_t crc, const unsigned char *p,
                                                         size_t n)
{
    uint64_t c = crc;
    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 3 * LONG_BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + LONG_BLOCK;
        do {
            c = _mm_crc32_u64(c, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + LONG_BLOCK));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * LONG_BLOCK));
            p += 8;
        } while (p < end);
        c = apply_shift(shift_long, (uint32_t)c) ^ (uint32_t)c1;
        c = apply_shift(shift_long, (uint32_t)c) ^ (uint32_t)c2;
        p += 2 * LONG_BLOCK;
        n -= 3 * LONG_BLOCK;
    }
    while (n >= 3 * SHORT_BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + SHORT_BLOCK;
        do {
            c = _mm_crc32_u64(c, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + SHORT_BLOCK));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * SHORT_BLOCK));
            p += 8;
        } while (p < end);
        c = apply_shift(shift_short, (uint32_t)c) ^ (uint32_t)c1;
        c = apply_shift(shift_short, (uint32_t)c) ^ (uint32_t)c2;
        p += 2 * SHORT_BLOCK;
        n -= 3 * SHORT_BLOCK;
    }
    while (n >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

uint32_t sb_crc32c_hw(uint32_t crc, const void *p, size_t n)
{
    ensure_init();
#ifdef SB_CRC_X86
    if (have_hw)
        return ~hw_raw(~crc, p, n);
#endif
    return sb_crc32c_portable(crc, p, n);
}

uint32_t sb_crc32c(uint32_t crc, const void *p, size_t n)
{
    ensure_init();
#ifdef SB_CRC_X86
    if (have_hw)
        return ~hw_raw(~crc, p, n);
#endif
    return sb_crc32c_portable(crc, p, n);
}
