/* prune.h — row-group pruning by column statistics: whether a `filter` predicate (a column, a
 * comparison and a value, as worker/ops/record.c's filter compares typed columns) can hold for
 * any row of a row group, decided from the column chunk's min/max and null count alone.
 *
 * The answer is conservative: "excluded" only when the statistics prove that no row passes the
 * filter; missing, malformed or untrustworthy statistics (the Parquet spec's rules: deprecated
 * min/max only for signed sort orders, min_value/max_value by the file's column_orders, a NaN
 * bound ignored) mean the row group is read. The filter still runs on what is read.
 *
 * Memory: a predicate points at the caller's strings (column name, string value); nothing here
 * allocates.
 */
#ifndef SB_PARQUET_PRUNE_H
#define SB_PARQUET_PRUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "parquet/meta.h"
#include "parquet/parquet.h"

typedef enum { SB_PQ_EQ, SB_PQ_NE, SB_PQ_LT, SB_PQ_LE, SB_PQ_GT, SB_PQ_GE } sb_pq_cmp;
typedef enum { SB_PQ_VNUMBER, SB_PQ_VSTRING, SB_PQ_VBOOL } sb_pq_vkind;

/* `column <op> value`, with the filter's semantics: a null, a NaN or a value of another kind
 * satisfies only ne; numbers compare exactly when both are integers (i, is_int), else as doubles
 * (d); strings byte-wise; booleans by eq/ne. */
typedef struct sb_pq_pred {
    const char *column;
    sb_pq_cmp op;
    sb_pq_vkind kind;
    int64_t i;
    bool is_int;
    double d;
    const char *str;
    size_t str_len;
    bool b;
} sb_pq_pred;

/* The plan column the filter compares as a typed column, or -1 when it would not (the column
 * is not read, or the partitions stand for records: a "record" column, or a single binary/utf8
 * column, which the filter reads as JSON records). */
int sb_pq_pred_column(const sb_pq_plan *p, const sb_pq_pred *pred);

/* True when the statistics of plan column `col` (sb_pq_pred_column) in row group rg prove that
 * no row of it satisfies pred. */
bool sb_pq_rg_excluded(const sb_pq_meta *m, const sb_pq_plan *p, int col, size_t rg,
                       const sb_pq_pred *pred);

/* The same decision for any set of `rows` rows of plan column `col` that statistics `s`
 * describe (a row group's chunk, or one page of the page index, pindex.h). */
bool sb_pq_stats_exclude(const sb_pq_meta *m, const sb_pq_plan *p, int col, int64_t rows,
                         const sb_pq_stats *s, const sb_pq_pred *pr);

#endif
