/* quantity.c — Kubernetes quantities ("64Mi", "500m", "1e3") and Go durations ("1h30m") parsed
 * exactly, in integer arithmetic, as Kubernetes and Go parse them (quantity.h), and bytes
 * formatted back as a quantity for messages. No allocation, no state: errors go into the
 * caller's sb_err.
 */
#include "spec/quantity.h"

#include <stdio.h>
#include <string.h>

typedef unsigned __int128 u128;

/* Parses the quantity into: sign, integer mantissa M (<= 19 significant digits), and the scale
 * value = sign * M * 10^exp10 * 2^exp2. */
static int quantity_split(const char *s, int *neg, uint64_t *mant, int *exp10, int *exp2,
                          sb_err *err)
{
    const char *p = s;
    if (s == NULL || *s == '\0')
        return sb_err_set(err, "empty quantity");
    *neg = 0;
    if (*p == '+' || *p == '-')
        *neg = *p++ == '-';
    uint64_t m = 0;
    int digits = 0, sig = 0, frac = 0, seen_dot = 0, dropped_int = 0;
    for (;; p++) {
        if (*p == '.' && !seen_dot) {
            seen_dot = 1;
            continue;
        }
        if (*p < '0' || *p > '9')
            break;
        digits++;
        if (m == 0 && *p == '0') {
            if (seen_dot)
                frac++;
            continue;
        }
        if (sig >= 19) {
            /* more precision than an int64 can carry: only zeros may follow */
            if (*p != '0')
                return sb_err_set(err, "quantity \"%s\" has more than 19 significant digits", s);
            if (!seen_dot)
                dropped_int++;
            continue;
        }
        m = m * 10 + (uint64_t)(*p - '0');
        sig++;
        if (seen_dot)
            frac++;
    }
    if (digits == 0)
        return sb_err_set(err, "quantity \"%s\" must start with a number", s);
    int e10 = dropped_int - frac, e2 = 0;
    const char *suf = p;
    if (*suf == '\0') {
    } else if (suf[1] == 'i' && suf[2] == '\0' && strchr("KMGTPE", suf[0]) != NULL) {
        e2 = 10 * (int)(strchr("KMGTPE", suf[0]) - "KMGTPE" + 1);
    } else if (suf[1] == '\0' && strchr("numkMGTPE", suf[0]) != NULL) {
        static const int pow10[] = {-9, -6, -3, 3, 6, 9, 12, 15, 18};
        e10 += pow10[strchr("numkMGTPE", suf[0]) - "numkMGTPE"];
    } else if (suf[0] == 'e' || suf[0] == 'E') {
        const char *q = suf + 1;
        int eneg = 0, ev = 0, ed = 0;
        if (*q == '+' || *q == '-')
            eneg = *q++ == '-';
        for (; *q >= '0' && *q <= '9'; q++, ed++)
            if (ev < 100000)
                ev = ev * 10 + (*q - '0');
        if (ed == 0 || *q != '\0')
            return sb_err_set(err, "quantity \"%s\" has an invalid exponent \"%s\"", s, suf);
        e10 += eneg ? -ev : ev;
    } else {
        return sb_err_set(err,
                          "quantity \"%s\" has an unknown suffix \"%s\" (use Ki, Mi, Gi, Ti, Pi, "
                          "Ei, n, u, m, k, M, G, T, P, E or an exponent such as e3)",
                          s, suf);
    }
    *mant = m;
    *exp10 = e10;
    *exp2 = e2;
    return 0;
}

static int quantity_scaled(const char *s, int extra10, int64_t *out, sb_err *err)
{
    int neg = 0, e10 = 0, e2 = 0;
    uint64_t m = 0;
    if (quantity_split(s, &neg, &m, &e10, &e2, err) != 0)
        return -1;
    e10 += extra10;
    u128 v = (u128)m << e2; /* m < 2^64, e2 <= 60: fits */
    const u128 lim = (u128)INT64_MAX;
    if (e10 >= 0) {
        for (int i = 0; i < e10 && v != 0; i++) {
            if (v > lim)
                break;
            v *= 10;
        }
    } else if (v != 0) {
        u128 div = 1;
        int k = -e10;
        if (k > 38) {
            v = 1; /* a positive value smaller than 1: rounds up to 1 */
        } else {
            for (int i = 0; i < k; i++)
                div *= 10;
            v = v / div + (v % div != 0);
        }
    }
    if (v > lim)
        return sb_err_set(err, "quantity \"%s\" is too large", s);
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

int sb_quantity_value(const char *s, int64_t *out, sb_err *err)
{
    return quantity_scaled(s, 0, out, err);
}

int sb_quantity_milli(const char *s, int64_t *out, sb_err *err)
{
    return quantity_scaled(s, 3, out, err);
}

int sb_duration_parse(const char *s, int64_t *out_ns, sb_err *err)
{
    const char *p = s;
    if (s == NULL || *s == '\0')
        return sb_err_set(err, "invalid duration \"\" (examples: 30s, 5m, 1h30m, 300ms)");
    int neg = 0;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (strcmp(p, "0") == 0) {
        *out_ns = 0;
        return 0;
    }
    if (*p == '\0')
        return sb_err_set(err, "invalid duration \"%s\"", s);
    u128 total = 0;
    const u128 lim = (u128)INT64_MAX + (neg ? 1 : 0);
    while (*p != '\0') {
        u128 whole = 0, frac = 0, scale = 1;
        int nd = 0, overflow = 0;
        for (; *p >= '0' && *p <= '9'; p++, nd++) {
            whole = whole * 10 + (u128)(*p - '0');
            if (whole > lim)
                overflow = 1;
        }
        if (*p == '.') {
            p++;
            for (; *p >= '0' && *p <= '9'; p++, nd++) {
                if (scale < (u128)1e18) {
                    frac = frac * 10 + (u128)(*p - '0');
                    scale *= 10;
                }
            }
        }
        if (nd == 0)
            return sb_err_set(err, "invalid duration \"%s\" (examples: 30s, 5m, 1h30m, 300ms)", s);
        static const struct {
            const char *name;
            uint64_t ns;
        } units[] = {
            {"ns", 1},       {"us", 1000},         {"\xc2\xb5s", 1000},   {"\xce\xbcs", 1000},
            {"ms", 1000000}, {"s", 1000000000ull}, {"m", 60000000000ull}, {"h", 3600000000000ull}};
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
            size_t ul = strlen(units[i].name);
            if (strncmp(p, units[i].name, ul) == 0 && ul > best_len) {
                best = i;
                best_len = ul;
            }
        }
        if (best_len == 0) {
            if (*p == '\0')
                return sb_err_set(err, "duration \"%s\" is missing a unit (ns, us, ms, s, m, h)",
                                  s);
            return sb_err_set(err, "duration \"%s\" has an unknown unit at \"%s\"", s, p);
        }
        p += best_len;
        u128 ns = units[best].ns;
        if (overflow || whole > lim / ns)
            return sb_err_set(err, "duration \"%s\" is too large", s);
        total += whole * ns + frac * ns / scale;
        if (total > lim)
            return sb_err_set(err, "duration \"%s\" is too large", s);
    }
    *out_ns = neg ? (int64_t)(-(__int128)total) : (int64_t)total;
    return 0;
}

const char *sb_quantity_format_bytes(int64_t bytes, char *buf, size_t len)
{
    static const char *suf[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    int k = -1;
    int64_t v = bytes;
    while (v != 0 && v % 1024 == 0 && k < 5) {
        v /= 1024;
        k++;
    }
    if (k < 0)
        snprintf(buf, len, "%lld", (long long)bytes);
    else
        snprintf(buf, len, "%lld%s", (long long)v, suf[k]);
    return buf;
}
