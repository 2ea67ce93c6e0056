/* num.c — strict decimal numbers inside larger strings (see num.h): digits only, no sign, no
 * leading zeros, no overflow past the caller's maximum. Allocates nothing. */

#include "core/num.h"

int sb_num_parse_dec(const char **p, uint64_t max, uint64_t *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return -1;
    if (s[0] == '0' && s[1] >= '0' && s[1] <= '9')
        return -1;
    uint64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > max / 10 || v * 10 > max - d)
            return -1;
        v = v * 10 + d;
        s++;
    }
    *p = s;
    *out = v;
    return 0;
}
