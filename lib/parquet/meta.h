/* meta.h — Parquet file metadata (the footer's FileMetaData) and page headers, decoded from the
 * Thrift compact protocol (thrift.h) into plain structs, with every count, offset and size
 * checked against the file before a reader uses it.
 *
 * What is kept: the schema tree (flattened, in file order, with each leaf's definition and
 * repetition levels and its path), the row groups with their column chunks (codec, encodings,
 * offsets, sizes, value count, statistics: null count and min/max as raw bytes), and for a page
 * header its type, sizes and the data page v1/v2 or dictionary page fields.
 *
 * Memory: sb_pq_meta owns everything it points to, including a copy of the footer bytes that
 * names and statistics point into; free with sb_pq_meta_free(). A page header owns nothing.
 */
#ifndef SB_PARQUET_META_H
#define SB_PARQUET_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define SB_PQ_MAX_FOOTER (64u << 20)     /* bytes of FileMetaData accepted */
#define SB_PQ_MAX_SCHEMA 100000          /* schema elements */
#define SB_PQ_MAX_ROW_GROUPS 1000000     /* row groups of one file */
#define SB_PQ_MAX_PAGE (256u << 20)      /* bytes of one page, compressed or not */
#define SB_PQ_MAX_PAGE_HEADER (1u << 20) /* bytes of one page header (statistics included) */

/* Physical types (parquet.thrift Type). */
enum {
    SB_PQ_BOOLEAN = 0,
    SB_PQ_INT32 = 1,
    SB_PQ_INT64 = 2,
    SB_PQ_INT96 = 3,
    SB_PQ_FLOAT = 4,
    SB_PQ_DOUBLE = 5,
    SB_PQ_BYTE_ARRAY = 6,
    SB_PQ_FLBA = 7,
};

/* Encodings. */
enum {
    SB_PQ_ENC_PLAIN = 0,
    SB_PQ_ENC_PLAIN_DICTIONARY = 2,
    SB_PQ_ENC_RLE = 3,
    SB_PQ_ENC_BIT_PACKED = 4,
    SB_PQ_ENC_DELTA_BINARY_PACKED = 5,
    SB_PQ_ENC_DELTA_LENGTH_BYTE_ARRAY = 6,
    SB_PQ_ENC_DELTA_BYTE_ARRAY = 7,
    SB_PQ_ENC_RLE_DICTIONARY = 8,
    SB_PQ_ENC_BYTE_STREAM_SPLIT = 9,
};

/* Codecs. */
enum {
    SB_PQ_UNCOMPRESSED = 0,
    SB_PQ_SNAPPY = 1,
    SB_PQ_GZIP = 2,
    SB_PQ_LZO = 3,
    SB_PQ_BROTLI = 4,
    SB_PQ_LZ4 = 5,
    SB_PQ_ZSTD = 6,
    SB_PQ_LZ4_RAW = 7,
};

/* Page types. */
enum { SB_PQ_DATA_PAGE = 0, SB_PQ_INDEX_PAGE = 1, SB_PQ_DICT_PAGE = 2, SB_PQ_DATA_PAGE_V2 = 3 };

/* The logical type of a schema element, from LogicalType or else ConvertedType. */
typedef enum {
    SB_PQ_LT_NONE = 0,
    SB_PQ_LT_STRING, /* STRING, UTF8, ENUM, JSON: utf8 bytes */
    SB_PQ_LT_INT,    /* int_bits, int_signed */
    SB_PQ_LT_DATE,
    SB_PQ_LT_TIMESTAMP, /* ts_unit */
    SB_PQ_LT_LIST,
    SB_PQ_LT_MAP,
    SB_PQ_LT_DECIMAL,
    SB_PQ_LT_OTHER, /* anything else (TIME, UUID, FLOAT16, BSON, INTERVAL, ...): lt_name says */
} sb_pq_ltype;

typedef enum { SB_PQ_UNIT_NONE = 0, SB_PQ_MILLIS, SB_PQ_MICROS, SB_PQ_NANOS } sb_pq_unit;

typedef struct sb_pq_schema_el {
    char *name; /* NUL-terminated copy */
    int type;   /* physical type, -1 for a group */
    int32_t type_length;
    int repetition; /* 0 REQUIRED, 1 OPTIONAL, 2 REPEATED; -1 absent (the root) */
    int32_t num_children;
    sb_pq_ltype lt;
    const char *lt_name; /* for messages: "DECIMAL", "TIME", ... */
    int int_bits;
    bool int_signed;
    sb_pq_unit ts_unit;
    bool ts_utc;
    /* derived for the tree */
    int parent; /* index, -1 for the root */
    int16_t max_def, max_rep;
    int leaf; /* index among the leaves (column order), -1 for a group */
} sb_pq_schema_el;

typedef struct sb_pq_stats {
    bool has_null_count, has_min, has_max;
    bool deprecated; /* min/max are the deprecated fields 1/2 (signed sort order, whatever the
                        type), not min_value/max_value */
    int64_t null_count;
    const uint8_t *min, *max; /* min_value/max_value (or the deprecated min/max) */
    size_t min_len, max_len;
} sb_pq_stats;

typedef struct sb_pq_chunk {
    int type;
    int codec;
    int64_t num_values;
    int64_t total_compressed, total_uncompressed;
    int64_t data_page_offset;
    int64_t dict_page_offset; /* -1 when absent */
    uint64_t start, len;      /* the chunk's byte range in the file, checked against its size */
    sb_pq_stats stats;
    bool has_external_path; /* file_path set: the chunk is in another file (refused) */
    /* the page index (ColumnChunk fields 4-7): byte ranges in the file, length 0 when absent;
     * not checked here: pindex.h checks them when it reads them, and ignores a bad one */
    int64_t oi_off, ci_off;
    int32_t oi_len, ci_len;
} sb_pq_chunk;

typedef struct sb_pq_row_group {
    int64_t num_rows;
    sb_pq_chunk *cols;   /* nleaves entries, in leaf order */
    uint64_t start, end; /* the byte span of its chunks */
} sb_pq_row_group;

typedef struct sb_pq_meta {
    int64_t num_rows;
    sb_pq_schema_el *schema;
    size_t nschema;
    int *leaves; /* schema index of each leaf, in column order */
    size_t nleaves;
    sb_pq_row_group *rgs;
    size_t nrgs;
    /* column_orders: per leaf, whether min_value/max_value follow the type's defined order
     * (TYPE_ORDER); NULL when the file has no column_orders (or not one per leaf) */
    bool *type_order;
    uint8_t *footer; /* owned copy the stats point into */
    size_t footer_len;
} sb_pq_meta;

/* Decodes FileMetaData from footer[0..len) (copied) of a file of file_size bytes: the schema
 * tree (every group's children accounted for, levels derived), each row group's chunks (one
 * per leaf, in order, ranges inside the file). -1 + err naming the problem (and the row group
 * and column where it is one of theirs). */
int sb_pq_meta_parse(const uint8_t *footer, size_t len, uint64_t file_size, sb_pq_meta *m,
                     sb_err *err);

void sb_pq_meta_free(sb_pq_meta *m);

/* A leaf's dotted path ("a.list.element") into buf; returns buf. */
const char *sb_pq_leaf_path(const sb_pq_meta *m, size_t leaf, char *buf, size_t cap);

typedef struct sb_pq_page_header {
    int type;
    int32_t uncompressed_size, compressed_size;
    /* data page v1 / v2 */
    int32_t num_values, num_nulls, num_rows;
    int encoding, def_encoding, rep_encoding;
    int32_t def_len, rep_len; /* v2: level byte lengths (uncompressed) */
    bool is_compressed;       /* v2 (default true) */
    bool has_data, has_dict, has_v2;
    /* dictionary page */
    int32_t dict_num_values;
    int dict_encoding;
} sb_pq_page_header;

/* Decodes a page header from p[0..n): *used = its length. -1 + err (no file context: the caller
 * wraps it). Sizes are checked to be >= 0 and at most SB_PQ_MAX_PAGE. */
int sb_pq_page_header_parse(const uint8_t *p, size_t n, sb_pq_page_header *h, size_t *used,
                            sb_err *err);

/* Names for messages. */
const char *sb_pq_type_name(int type);
const char *sb_pq_codec_name(int codec);
const char *sb_pq_encoding_name(int enc);

#endif
