/* rowjson.h — typed columns as JSON records: each row of a batch becomes one JSON object
 * {"column": value, ...} in a single utf8 "record" column, so that sinks that write records
 * (jsonl, csv) can write the output of stages that produce typed columns (exec with framing
 * "arrow", plugins).
 *
 * Values: null; true/false; integers exactly; floats as the shortest text that reads back as
 * the same value (float32 as float32); NaN and infinities are an error (JSON has none); utf8 as
 * JSON strings; binary as a string when it is valid UTF-8, else an error; fixed-size lists as
 * arrays of numbers. Errors name the column and the row.
 *
 * Memory: the blob is the caller's, freed with sb_part_free(); the input batch is not changed.
 */
#ifndef SB_PARTITION_ROWJSON_H
#define SB_PARTITION_ROWJSON_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "partition/partition.h"

/* Writes the JSON string literal of s[0..n) (quotes, escapes for '"', '\\' and control
 * characters) into dst[0..cap); returns the full length it needs (written only if <= cap). */
size_t sb_json_quote(const char *s, size_t n, char *dst, size_t cap);

/* The shortest text of v that reads back as the same value (as a float when single): at most
 * 32 bytes into buf, which must hold 40; returns the length. v must be finite. */
size_t sb_json_float(char buf[40], double v, bool single);

/* A new batch with one utf8 column "record" holding each row of b as a JSON object. */
int sb_batch_rows_json(const sb_batch *b, void **blob, size_t *len, sb_err *err);

#endif
