/* jscan.c — top-level member spans of a JSON object text (jscan.h): a single pass that skips
 * strings (with their escapes) and nested values by bracket depth. */

#include "parquet/jscan.h"

static size_t skip_ws(const char *p, size_t n, size_t i)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    return i;
}

/* p[i] is '"': the index past the closing quote. */
static size_t skip_string(const char *p, size_t n, size_t i)
{
    for (i++; i < n && p[i] != '"'; i++)
        if (p[i] == '\\')
            i++;
    return i < n ? i + 1 : n;
}

/* The index past the value starting at p[i]. */
static size_t skip_value(const char *p, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (p[i] == '"')
        return skip_string(p, n, i);
    if (p[i] != '{' && p[i] != '[') { /* number, true, false, null */
        while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']' && p[i] != ' ' && p[i] != '\t' &&
               p[i] != '\n' && p[i] != '\r')
            i++;
        return i;
    }
    size_t depth = 0;
    while (i < n) {
        if (p[i] == '"') {
            i = skip_string(p, n, i);
            continue;
        }
        if (p[i] == '{' || p[i] == '[')
            depth++;
        else if ((p[i] == '}' || p[i] == ']') && --depth == 0)
            return i + 1;
        i++;
    }
    return n;
}

long sb_pq_jscan(const char *p, size_t n, sb_pq_jspan *spans, size_t max)
{
    size_t i = skip_ws(p, n, 0);
    if (i >= n || p[i] != '{')
        return -1;
    long k = 0;
    i = skip_ws(p, n, i + 1);
    while (i < n && p[i] != '}') {
        if (p[i] != '"')
            return -1;
        i = skip_ws(p, n, skip_string(p, n, i));
        if (i >= n || p[i] != ':')
            return -1;
        i = skip_ws(p, n, i + 1);
        size_t end = skip_value(p, n, i);
        if ((size_t)k < max)
            spans[k] = (sb_pq_jspan){i, end - i};
        k++;
        i = skip_ws(p, n, end);
        if (i < n && p[i] == ',')
            i = skip_ws(p, n, i + 1);
    }
    return i < n ? k : -1;
}

int sb_pq_jnum_is_int(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] == '.' || p[i] == 'e' || p[i] == 'E')
            return 0;
    return 1;
}

int sb_pq_jnum_within_2p53(const char *p, size_t n)
{
    static const char max[] = "9007199254740992";
    if (n > 0 && p[0] == '-') {
        p++;
        n--;
    }
    if (n != sizeof max - 1)
        return n < sizeof max - 1;
    for (size_t i = 0; i < n; i++)
        if (p[i] != max[i])
            return p[i] < max[i];
    return 1;
}
