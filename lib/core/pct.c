/* pct.c — percent-decoding of file:// and s3:// URI paths (pct.h). Kept in core because both
 * the spec checks (lib/spec: is the sink the source?) and the storage layer (lib/io) decode the
 * same way. */
#include "core/pct.h"

#include <string.h>
#include <strings.h>

int sb_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

long sb_pct_decode(const char *in, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '%') {
            /* both digits must be inside in[0..n) */
            int hi = i + 2 < n ? sb_hex_digit((unsigned char)in[i + 1]) : -1;
            int lo = i + 2 < n ? sb_hex_digit((unsigned char)in[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return -1;
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    if (o >= cap)
        return -1;
    out[o] = '\0';
    return (long)o;
}

int sb_pct_decodes(const char *uri)
{
    return uri != NULL &&
           (strncasecmp(uri, "file://", 7) == 0 || strncasecmp(uri, "s3://", 5) == 0) &&
           strchr(uri, '%') != NULL;
}
