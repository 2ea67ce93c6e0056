/* jscan.h — the top-level members of a JSON object text as byte spans, so the Parquet sink can
 * keep a value's text exactly as the record wrote it (a json field, a number's form: 1 and 1.0
 * are told apart) where cJSON keeps only the parsed value.
 *
 * The text must already be a valid JSON object (cJSON parsed it): the scan checks bounds but does
 * not validate. Members come in text order, which is cJSON's child order, so the k-th member is
 * the k-th child. Memory: the spans point into the caller's text; the array is the caller's.
 */
#ifndef SB_PARQUET_JSCAN_H
#define SB_PARQUET_JSCAN_H

#include <stddef.h>

typedef struct sb_pq_jspan {
    size_t off, len; /* the value's text: p[off .. off + len) */
} sb_pq_jspan;

/* Fills spans[0 .. max) with the values of the members of the object p[0..n), in order; returns
 * how many members there are (only the first `max` are stored), or -1 if p is not an object. */
long sb_pq_jscan(const char *p, size_t n, sb_pq_jspan *spans, size_t max);

/* Whether the number text p[0..n) is written as an integer (no '.', 'e' or 'E'). */
int sb_pq_jnum_is_int(const char *p, size_t n);

/* Whether the integer text p[0..n) is at most 2^53 in magnitude, by its digits (as a double,
 * 2^53 + 1 reads as 2^53 and would pass a check on the value). */
int sb_pq_jnum_within_2p53(const char *p, size_t n);

#endif
