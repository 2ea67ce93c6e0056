/* json.h — a non-allocating JSON validator and top-level field finder for jsonl records, used
 * by the filter and project ops (one pass over the record, no tree, no allocation).
 *
 * sb_op_json_scan() validates a record as exactly one JSON value per RFC 8259 (strict: no
 * trailing commas, no leading zeros, no comments, no control characters in strings, escapes
 * checked, whitespace allowed around the value) and, when the value is an object, reports
 * where the requested top-level members' values are (the first occurrence of a duplicated
 * key, like cJSON_GetObjectItem). Keys are compared after decoding their escapes. The record
 * must already be valid UTF-8 (utf8 columns are); the scanner checks JSON syntax only.
 *
 * sb_op_json_find() finds the members again in a record a scan already accepted, without the
 * checks (a filter followed by project in one task validates each record once).
 *
 * Memory: nothing is allocated; spans point into the caller's record.
 */
#ifndef SB_WORKER_OPS_JSON_H
#define SB_WORKER_OPS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SB_OP_JSON_MAX_DEPTH 256 /* nesting limit of arrays and objects */

typedef enum sb_op_json_type {
    SB_OP_JSON_NONE = 0, /* absent */
    SB_OP_JSON_NULL,
    SB_OP_JSON_BOOL,
    SB_OP_JSON_NUMBER,
    SB_OP_JSON_STRING,
    SB_OP_JSON_ARRAY,
    SB_OP_JSON_OBJECT,
} sb_op_json_type;

/* A value inside a record: its exact text (strings with their quotes). */
typedef struct sb_op_json_span {
    const char *p;
    size_t n;
    sb_op_json_type type;
} sb_op_json_span;

/* A member name to look for (decoded UTF-8 bytes). */
typedef struct sb_op_json_key {
    const char *name;
    size_t len;
} sb_op_json_key;

/* "null", "boolean", "number", "string", "array", "object" ("absent" for NONE). */
const char *sb_op_json_type_name(sb_op_json_type t);

/* Validates s[0..n) and fills found[0..nkeys) (type NONE for members not present, or when the
 * value is not an object). *top (may be NULL) receives the value's type. 0 when valid; -1
 * otherwise, with msg (msgcap bytes, may be NULL) saying what and at which byte offset. */
int sb_op_json_scan(const char *s, size_t n, const sb_op_json_key *keys, size_t nkeys,
                    sb_op_json_span *found, sb_op_json_type *top, char *msg, size_t msgcap);

/* Finds the top-level members of s[0..n), a record that sb_op_json_scan() accepted before (the
 * previous op of the same task scanned it), without validating it again: the same `found` and
 * type (returned) as the scan gives for that record, at a fraction of its cost. Only for such
 * records: it relies on their validity (escapes complete, brackets balanced). */
sb_op_json_type sb_op_json_find(const char *s, size_t n, const sb_op_json_key *keys, size_t nkeys,
                                sb_op_json_span *found);

/* Decodes a string span (text with quotes, from a successful scan) into dst[0..cap) as UTF-8
 * (a lone surrogate escape becomes U+FFFD). Returns the decoded length, which is at most the
 * span's length; only min(length, cap) bytes are written. */
size_t sb_op_json_unescape(const char *p, size_t n, char *dst, size_t cap);

/* Parses a number span. *is_int when it has no fraction or exponent and fits int64 (then
 * *i is exact); *d is its double value in every case. */
void sb_op_json_number(const char *p, size_t n, double *d, int64_t *i, bool *is_int);

#endif
