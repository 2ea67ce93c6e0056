/* utf8.c — strict (RFC 3629) UTF-8 validation for utf8 columns and column names (see utf8.h),
 * eight ASCII bytes at a time, reporting the offset of the first bad byte. Allocates nothing. */

#include "partition/utf8.h"

#include <stdint.h>
#include <string.h>

bool sb_utf8_valid(const void *buf, size_t n, size_t *bad_at)
{
    const unsigned char *s = buf;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path: 16 then 8 bytes without a high bit. */
        while (i + 16 <= n) {
            uint64_t a, b;
            memcpy(&a, s + i, 8);
            memcpy(&b, s + i + 8, 8);
            if (((a | b) & 0x8080808080808080ull) != 0)
                break;
            i += 16;
        }
        if (i + 8 <= n) {
            uint64_t a;
            memcpy(&a, s + i, 8);
            if ((a & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        if (i >= n)
            break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            else if (c == 0xED)
                hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            else if (c == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else {
            goto bad; /* continuation byte, C0/C1, F5..FF */
        }
        if (n - i <= need)
            goto bad;
        if (s[i + 1] < lo || s[i + 1] > hi)
            goto bad;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                goto bad;
        i += need + 1;
        continue;
    bad:
        if (bad_at != NULL)
            *bad_at = i;
        return false;
    }
    return true;
}
