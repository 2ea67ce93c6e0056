/* diag.h — a list of validation problems, each with the field path, the source position and a
 * message: `spec.stages[1].resources.gpu: must be a non-negative integer`.
 *
 * Validation collects every problem instead of stopping at the first. The list owns its
 * strings (malloc'd); free it with sb_diags_free().
 */
#ifndef SB_SPEC_DIAG_H
#define SB_SPEC_DIAG_H

#include <stddef.h>

typedef struct sb_diag {
    char *path; /* "spec.stages[1].op"; "" for the document itself */
    int line, col;
    char *msg;
} sb_diag;

typedef struct sb_diags {
    sb_diag *items;
    size_t n, cap;
    int oom; /* set if a diagnostic could not be recorded */
} sb_diags;

void sb_diags_add(sb_diags *d, const char *path, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void sb_diags_free(sb_diags *d);

/* Sorts by line, then column (stable), so output follows the file. */
void sb_diags_sort(sb_diags *d);

/* Levenshtein distance between two strings, for "did you mean" suggestions. */
size_t sb_spec_edit_distance(const char *a, const char *b);

/* The closest candidate to `word` within a distance that makes it a plausible typo, or NULL.
 * Candidates is a NULL-terminated array. */
const char *sb_suggest(const char *word, const char *const *candidates);

#endif
