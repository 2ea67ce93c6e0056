/* validate.h — `streambatch validate`: checks files of Pipeline manifests and prints one line per
 * problem, `FILE:LINE:COL: FIELD.PATH: message`, in file order; after each document's problems,
 * `FILE:LINE:COL: warning: ...` for each unquoted key or value that YAML 1.1 readers (kubectl)
 * take as a boolean (on, yes, y, off, no, n), which the file's reader here takes as a word.
 * Warnings are not problems: they change neither the count nor the exit status.
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
int sb_spec_read_file_limited(const char *path, size_t max, char **buf, size_t *len, char *msg,
                              size_t msglen);

/* Would the source listing see what the sink writes? The listing is not recursive (a directory
 * lists the files directly in it; an s3 prefix the objects directly under it), so the sink is
 * refused when, after normalizing both URIs (same scheme; "//" and "/./" collapsed, ".." applied
 * to file paths, trailing '/' dropped; a relative file path resolved against cwd when cwd is not
 * NULL, else compared as written), the sink equals the source, or the source is a glob whose
 * directory is the sink. A sink in a subdirectory of the source is not seen. Returns 1 with a
 * message naming both fields in msg when the sink is refused, else 0. */
int sb_validate_sink_vs_source(const char *source_uri, const char *sink_uri, const char *cwd,
                               char *msg, size_t msglen);

#endif
