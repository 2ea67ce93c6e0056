/* records.h — the Parquet sink's arguments (sink.args: compression, rowGroupSize, schema,
 * inferSchema) and the conversion of records (a partition's "record" column of JSON objects, e.g.
 * from a jsonl source) into typed columns by a schema, given or inferred, so that they are
 * written as Parquet columns.
 *
 * schema: a list of {name, type, nullable}: type int64, double, string, bool or json (a string
 * column holding each value's JSON text exactly as the record has it: objects, arrays, numbers
 * past 2^53, mixed types); nullable defaults to true. A record that is not a JSON object, a value
 * of another JSON type, an integer that int64 cannot hold exactly (beyond +-2^53, where JSON
 * numbers stop being exact here), and a null or absent field that is not nullable are data
 * errors naming the row and the field. Fields of the record that the schema does not name are
 * ignored.
 *
 * Inference (sb_pq_infer_schema): the fields of one partition's records, in order of first
 * appearance, all nullable, typed by the JSON values seen: only integers (no '.', 'e' or 'E' in
 * the number, at most 2^53 in magnitude) -> int64; numbers with at least one non-integer ->
 * double; only strings -> string; only booleans -> bool; only nulls -> string; any object or
 * array, an integer past 2^53, or two kinds among number/string/bool -> json. The worker infers
 * from a run's first sink partition and the controller hands the result to every later sink
 * task (docs/pipeline-api.md, "Parquet sinks"), where it is enforced like a given schema, and
 * also closed (`closed`): a record with a field the schema lacks is a data error too, since
 * nobody chose to drop that field.
 *
 * Memory: sb_pq_sink_opts owns its schema (sb_pq_sink_opts_free). The batch built from records
 * is a new blob the caller frees with sb_part_free(); schema texts are malloc'd.
 */
#ifndef SB_PARQUET_RECORDS_H
#define SB_PARQUET_RECORDS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "parquet/write.h"
#include "partition/partition.h"

#define SB_PQ_INFER_MAX_FIELDS 4096 /* columns an inferred schema may have */

typedef struct sb_pq_sink_opts {
    sb_pq_write_opts w;
    sb_field *schema; /* names malloc'd; NULL when no schema was given */
    bool *json;       /* per field: type json (a utf8 column of JSON texts) */
    size_t nschema;
    int infer;   /* args.inferSchema: -1 absent, 0 false, 1 true */
    bool closed; /* the schema was inferred: a record with a field it lacks does not fit */
} sb_pq_sink_opts;

/* Parses sink args (a JSON object or NULL/empty): compression (zstd default, snappy, gzip,
 * none), rowGroupSize (bytes, > 0), schema, inferSchema (a boolean, not with schema). -1 + err
 * naming the argument. */
int sb_pq_sink_opts_parse(const char *args_json, sb_pq_sink_opts *o, sb_err *err);
void sb_pq_sink_opts_free(sb_pq_sink_opts *o);

/* Sets o's schema from a schema text (a JSON list as in args.schema, e.g. one that
 * sb_pq_schema_json made), replacing any. -1 + err. */
int sb_pq_schema_parse(const char *list_json, sb_pq_sink_opts *o, sb_err *err);

/* o's schema as a JSON list of {name, type, nullable} (malloc'd), NULL when out of memory. */
char *sb_pq_schema_json(const sb_pq_sink_opts *o);

/* Infers o's schema from the records of `rec` (see above), replacing any. 0 with o->nschema > 0;
 * 1 when `rec` has no rows (nothing to infer from; o unchanged); -1 + err: a data error naming
 * the record (not a JSON object, null) or a field name over SB_PART_MAX_NAME bytes, records
 * without any field, more than SB_PQ_INFER_MAX_FIELDS fields. */
int sb_pq_infer_schema(const sb_column *rec, sb_pq_sink_opts *o, sb_err *err);

/* The records of `rec` (binary/utf8, one JSON object per row) as a batch of the schema's columns:
 * a new blob in *blob (*len bytes). -1 + err (a data error naming the row and field). */
int sb_pq_records_batch(const sb_pq_sink_opts *o, const sb_column *rec, void **blob, size_t *len,
                        sb_err *err);

#endif
