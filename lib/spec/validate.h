/* validate.h — `streambatch validate`: checks files of Pipeline manifests and prints one line per
 * problem, `FILE:LINE:COL: FIELD.PATH: message`, in file order.
 *
 * Files are read whole (limit 8 MiB; larger files are refused before they are read) and parsed
 * as multi-document YAML; empty documents (a trailing "---") are skipped. Nothing here exits.
 */
#ifndef SB_SPEC_VALIDATE_H
#define SB_SPEC_VALIDATE_H

#include <stddef.h>
#include <stdio.h>

#define SB_MANIFEST_MAX_BYTES (8u << 20)

/* Validates a buffer named `name` (used in messages). Writes problem lines to out. Returns the
 * number of problems (0 = every document is a valid Pipeline) or -1 when out of memory.
 * *ndocs (may be NULL) receives the number of Pipeline documents checked. */
int sb_validate_buffer(const char *name, const char *buf, size_t len, FILE *out, size_t *ndocs);

/* Same for a file path ("-" = standard input). Unreadable files count as one problem. */
int sb_validate_file(const char *path, FILE *out, size_t *ndocs);

/* Reads a whole file ("-" = stdin) into a malloc'd buffer (NUL-terminated), refusing files
 * larger than max bytes. Returns 0, or -1 with msg filled. */
int sb_read_file_limited(const char *path, size_t max, char **buf, size_t *len, char *msg,
                         size_t msglen);

#endif
