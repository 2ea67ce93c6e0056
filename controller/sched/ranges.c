/* ranges.c — sets of split indices as text ranges, "0-41,45,50-51" (see ranges.h): formatting a
 * committed-split array for a checkpoint and parsing one back, strictly, when a run resumes.
 * Owns nothing: the caller's array and buffer. */

#include "controller/sched/ranges.h"
#include "core/num.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sb_ranges_format(const uint8_t *set, size_t n)
{
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    for (size_t i = 0; i < n;) {
        if (!set[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j + 1 < n && set[j + 1])
            j++;
        char piece[64];
        int k = j == i ? snprintf(piece, sizeof piece, "%s%zu", len ? "," : "", i)
                       : snprintf(piece, sizeof piece, "%s%zu-%zu", len ? "," : "", i, j);
        if (len + (size_t)k + 1 > cap) {
            while (len + (size_t)k + 1 > cap)
                cap *= 2;
            char *g = realloc(out, cap);
            if (g == NULL) {
                free(out);
                return NULL;
            }
            out = g;
        }
        memcpy(out + len, piece, (size_t)k + 1);
        len += (size_t)k;
        i = j + 1;
    }
    return out;
}

int sb_ranges_parse(const char *s, uint8_t *set, size_t n, sb_err *err)
{
    if (n > 0)
        memset(set, 0, n);
    if (s == NULL || *s == '\0')
        return 0;
    const char *p = s;
    uint64_t next_min = 0; /* the next piece must start at or after this */
    int first = 1;
    for (;;) {
        const char *piece = p;
        size_t plen = strcspn(piece, ",");
        uint64_t a, b;
        if (plen == 0) {
            sb_err_set(err, "split ranges \"%.100s\": empty piece at byte %zu", s,
                       (size_t)(piece - s));
            goto fail;
        }
        if (sb_num_parse_dec(&p, UINT64_MAX, &a) != 0) {
            sb_err_set(err,
                       "split ranges: bad piece \"%.*s\" (expected N or N-M, decimal without "
                       "leading zeros)",
                       (int)(plen > 60 ? 60 : plen), piece);
            goto fail;
        }
        b = a;
        if (*p == '-') {
            p++;
            if (sb_num_parse_dec(&p, UINT64_MAX, &b) != 0) {
                sb_err_set(err,
                           "split ranges: bad piece \"%.*s\" (expected N or N-M, decimal "
                           "without leading zeros)",
                           (int)(plen > 60 ? 60 : plen), piece);
                goto fail;
            }
        }
        if (*p != ',' && *p != '\0') {
            sb_err_set(err,
                       "split ranges: bad piece \"%.*s\" (expected N or N-M, decimal without "
                       "leading zeros)",
                       (int)(plen > 60 ? 60 : plen), piece);
            goto fail;
        }
        if (b < a) {
            sb_err_set(err, "split ranges: piece \"%.*s\" is descending", (int)plen, piece);
            goto fail;
        }
        if (!first && a < next_min) {
            sb_err_set(err,
                       "split ranges: piece \"%.*s\" is out of order or overlaps the one "
                       "before (pieces must be ascending and disjoint)",
                       (int)plen, piece);
            goto fail;
        }
        if (b >= (uint64_t)n) {
            sb_err_set(err, "split ranges: piece \"%.*s\" is out of range (%zu split%s)", (int)plen,
                       piece, n, n == 1 ? "" : "s");
            goto fail;
        }
        for (uint64_t i = a; i <= b; i++)
            set[i] = 1;
        next_min = b + 1;
        first = 0;
        if (*p == '\0')
            return 0;
        p++; /* ',' */
        if (*p == '\0') {
            sb_err_set(err, "split ranges \"%.100s\": empty piece at the end", s);
            goto fail;
        }
    }
fail:
    if (n > 0)
        memset(set, 0, n);
    return -1;
}
