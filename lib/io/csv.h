/* csv.h — the csv format (RFC 4180): a csv row is one record of the partition's "record" column,
 * held as a JSON object {"<column>": value, ...}, so filter/project work on csv columns by
 * header name and csv converts to and from jsonl.
 *
 * Reading: quoted fields, doubled quotes, CRLF or LF, an optional header row (`header`, default
 * true; without it the columns are "c0", "c1", ...), a one-byte `delimiter` (default ','). An
 * unquoted field that is exactly a JSON number (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)
 * with at most 15 digits and an exponent up to 290 (what a double holds exactly) becomes a
 * number, so `n lt 60` works; anything else is a string ("007" stays "007"); an empty
 * unquoted field is null, a quoted empty field "" is the empty string. A row with another
 * number of fields than the header is an error.
 *
 * Splitting: with `multiline: false` (the default) a quoted field may not hold a newline, so
 * records are lines and large files are split at byte ranges with the line reader's ownership
 * rule; a quote still open at the end of a line is an error naming the file and offset (never
 * a silent mis-split). With `multiline: true` each file is one split (the planner never cuts
 * it) and newlines inside quotes are data.
 *
 * Writing: every part file starts with the header row (when `header`); columns are
 * args.columns, else the keys of the part's first record, in order. A key outside the columns
 * is an error (no silent column loss); a missing key or null is an empty field; strings are
 * quoted when they hold the delimiter, a quote, CR/LF or leading/trailing spaces; numbers and
 * booleans are written as their JSON text; objects and arrays as their JSON text, quoted.
 *
 * Memory: sb_csv_opts and sb_csv_header own their strings until their _free(); sb_csv_buf is a
 * growable buffer the caller frees with sb_csv_buf_free().
 */
#ifndef SB_IO_CSV_H
#define SB_IO_CSV_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/err.h"

typedef struct sb_csv_opts {
    char delim;
    bool header;
    bool multiline;
    char **columns; /* sink: args.columns, or NULL */
    size_t ncolumns;
} sb_csv_opts;

/* Reads the options from format args (a JSON object or NULL). -1 + err for a delimiter that is
 * not one byte or is '"', CR or LF; columns that are not unique non-empty strings. */
int sb_csv_opts_parse(const char *args_json, sb_csv_opts *o, sb_err *err);
void sb_csv_opts_free(sb_csv_opts *o);

typedef struct sb_csv_buf {
    char *p;
    size_t len, cap;
} sb_csv_buf;
void sb_csv_buf_free(sb_csv_buf *b);

/* Column names. */
typedef struct sb_csv_header {
    char **names;
    size_t n;
} sb_csv_header;
void sb_csv_header_free(sb_csv_header *h);

/* Where the record starting at s[0] ends: its length including the line terminator. 0 when
 * s[0..n) holds no complete record yet (then, if `eof`, n: the last record without a
 * terminator). With !multiline a line ending inside quotes is -1 + err ("quote not closed"). */
ssize_t sb_csv_record_len(const char *s, size_t n, const sb_csv_opts *o, bool eof, sb_err *err);

/* Parses the header record s[0..n) (terminator allowed) into names: -1 + err for an empty or
 * duplicate name. */
int sb_csv_header_parse(const char *s, size_t n, const sb_csv_opts *o, sb_csv_header *h,
                        sb_err *err);

/* "c0", "c1", ... for a file without a header row, sized from its first record. */
int sb_csv_header_default(const char *s, size_t n, const sb_csv_opts *o, sb_csv_header *h,
                          sb_err *err);

/* Appends the record s[0..n) (terminator allowed) as JSON object text to out (cleared first).
 * -1 + err for a field count other than the header's, or a quote in an unquoted field. */
int sb_csv_record_to_json(const char *s, size_t n, const sb_csv_opts *o, const sb_csv_header *h,
                          sb_csv_buf *out, sb_err *err);

/* The writer of one part: columns fixed by opts or by the first record. */
typedef struct sb_csv_writer {
    const sb_csv_opts *o;
    sb_csv_header cols;
    bool started;
} sb_csv_writer;

/* Appends the csv row of the JSON object record json[0..n) to out (and the header row before
 * the first record). -1 + err for a record that is not a JSON object or has a key outside the
 * columns. */
int sb_csv_write_record(sb_csv_writer *w, const char *json, size_t n, sb_csv_buf *out, sb_err *err);
void sb_csv_writer_free(sb_csv_writer *w);

#endif
