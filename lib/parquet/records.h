/* records.h — the Parquet sink's arguments (sink.args: compression, rowGroupSize, schema) and
 * the conversion of records (a partition's "record" column of JSON objects, e.g. from a jsonl
 * source) into typed columns by `schema`, so that they are written as Parquet columns.
 *
 * schema: a list of {name, type, nullable}: type int64, double, string or bool; nullable
 * defaults to true. A record that is not a JSON object, a value of another JSON type, an integer
 * that int64 cannot hold exactly (beyond +-2^53, where JSON numbers stop being exact here), and a
 * null or absent field that is not nullable are data errors naming the row and the field. Fields
 * of the record that the schema does not name are ignored.
 *
 * Memory: sb_pq_sink_opts owns its schema (sb_pq_sink_opts_free). The batch built from records
 * is a new blob the caller frees with sb_part_free().
 */
#ifndef SB_PARQUET_RECORDS_H
#define SB_PARQUET_RECORDS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "parquet/write.h"
#include "partition/partition.h"

typedef struct sb_pq_sink_opts {
    sb_pq_write_opts w;
    sb_field *schema; /* names malloc'd; NULL when no schema was given */
    size_t nschema;
} sb_pq_sink_opts;

/* Parses sink args (a JSON object or NULL/empty): compression (zstd default, snappy, gzip,
 * none), rowGroupSize (bytes, > 0), schema. -1 + err naming the argument. */
int sb_pq_sink_opts_parse(const char *args_json, sb_pq_sink_opts *o, sb_err *err);
void sb_pq_sink_opts_free(sb_pq_sink_opts *o);

/* The records of `rec` (binary/utf8, one JSON object per row) as a batch of the schema's columns:
 * a new blob in *blob (*len bytes). -1 + err (a data error naming the row and field). */
int sb_pq_records_batch(const sb_pq_sink_opts *o, const sb_column *rec, void **blob, size_t *len,
                        sb_err *err);

#endif
