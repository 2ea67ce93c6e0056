/* diag.c — the list of validation problems (diag.h): adding one (path, position, formatted
 * message; out of memory sets oom instead of failing), sorting them into file order, freeing
 * them, and the "did you mean" suggestion (edit distance) that unknown names and values get.
 * The list owns its path and message strings.
 */
#include "spec/diag.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_diags_add(sb_diags *d, const char *path, int line, int col, const char *fmt, ...)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        sb_diag *ni = realloc(d->items, cap * sizeof *ni);
        if (ni == NULL) {
            d->oom = 1;
            return;
        }
        d->items = ni;
        d->cap = cap;
    }
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sb_diag *x = &d->items[d->n];
    x->path = strdup(path ? path : "");
    x->msg = strdup(buf);
    if (x->path == NULL || x->msg == NULL) {
        free(x->path);
        free(x->msg);
        d->oom = 1;
        return;
    }
    x->line = line;
    x->col = col;
    d->n++;
}

void sb_diags_free(sb_diags *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->items[i].path);
        free(d->items[i].msg);
    }
    free(d->items);
    memset(d, 0, sizeof *d);
}

void sb_diags_sort(sb_diags *d)
{
    /* insertion sort: stable, and lists are short */
    for (size_t i = 1; i < d->n; i++) {
        sb_diag x = d->items[i];
        size_t j = i;
        while (j > 0 && (d->items[j - 1].line > x.line ||
                         (d->items[j - 1].line == x.line && d->items[j - 1].col > x.col))) {
            d->items[j] = d->items[j - 1];
            j--;
        }
        d->items[j] = x;
    }
}

size_t sb_spec_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t cost =
                tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
            size_t best = prev + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}

const char *sb_suggest(const char *word, const char *const *candidates)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    size_t wl = strlen(word);
    size_t allowed = wl <= 3 ? 1 : wl <= 8 ? 2 : 3;
    for (size_t i = 0; candidates[i] != NULL; i++) {
        size_t dist = sb_spec_edit_distance(word, candidates[i]);
        if (dist < best_d) {
            best_d = dist;
            best = candidates[i];
        }
    }
    return best_d <= allowed ? best : NULL;
}
