/* err.c — the error convention's setters (see err.h): sb_err_set and its data and permanent
 * kinds, and sb_err_wrap, which puts context before a message already set. Writes into the
 * caller's sb_err (may be NULL); owns nothing. */

#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int vset(sb_err *err, int data, int permanent, const char *fmt, va_list ap)
{
    if (err == NULL)
        return -1;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    err->data = data;
    err->permanent = permanent;
    return -1;
}

int sb_err_set(sb_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(err, 0, 0, fmt, ap);
    va_end(ap);
    return -1;
}

int sb_err_data(sb_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(err, 1, 0, fmt, ap);
    va_end(ap);
    return -1;
}

int sb_err_permanent(sb_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(err, 0, 1, fmt, ap);
    va_end(ap);
    return -1;
}

int sb_err_wrap(sb_err *err, const char *fmt, ...)
{
    if (err == NULL)
        return -1;
    char prefix[SB_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char joined[2 * SB_ERR_MAX + 4];
    snprintf(joined, sizeof joined, "%s: %s", prefix, err->msg);
    memcpy(err->msg, joined, SB_ERR_MAX - 1);
    err->msg[SB_ERR_MAX - 1] = '\0';
    return -1;
}

void sb_err_clear(sb_err *err)
{
    if (err != NULL) {
        err->msg[0] = '\0';
        err->data = 0;
        err->permanent = 0;
    }
}
