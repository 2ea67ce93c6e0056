/* meta.c — FileMetaData and PageHeader from the Thrift compact protocol (see meta.h): one small
 * decoder per Thrift struct, skipping unknown fields, then the checks that make the result safe
 * to use: the schema tree's shape and levels, one chunk per leaf, ranges inside the file. */
#include "parquet/meta.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/thrift.h"

const char *sb_pq_type_name(int t)
{
    static const char *n[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                              "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return t >= 0 && t < 8 ? n[t] : t == -1 ? "group" : "?";
}

const char *sb_pq_codec_name(int c)
{
    static const char *n[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                              "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
    return c >= 0 && c < 8 ? n[c] : "?";
}

const char *sb_pq_encoding_name(int e)
{
    static const char *n[] = {
        "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
        "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
        "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return e >= 0 && e < 10 ? n[e] : "?";
}

/* Iterates the fields of a struct: `for (FIELDS(r, id, t))` with the value still to read. */
#define STRUCT_LOOP(r, last, id, t)                                                                \
    int16_t last = 0, id = 0;                                                                      \
    uint8_t t = 0;                                                                                 \
    while (sb_tc_field(r, &last, &id, &t) && t != SB_TC_STOP)

static int64_t int_val(sb_tc_reader *r, uint8_t t)
{
    int64_t v = 0;
    sb_tc_int_field(r, t, &v);
    return v;
}

static int32_t i32_val(sb_tc_reader *r, uint8_t t)
{
    int64_t v = int_val(r, t);
    if (v < INT32_MIN || v > INT32_MAX) {
        sb_tc_fail(r, "i32 field out of range");
        return 0;
    }
    return (int32_t)v;
}

/* ---- LogicalType ----------------------------------------------------------------------- */

static void time_unit(sb_tc_reader *r, sb_pq_schema_el *e)
{
    STRUCT_LOOP(r, last, id, t)
    {
        if (t == SB_TC_STRUCT && id >= 1 && id <= 3)
            e->ts_unit = id == 1 ? SB_PQ_MILLIS : id == 2 ? SB_PQ_MICROS : SB_PQ_NANOS;
        sb_tc_skip(r, t);
    }
}

static void logical_type(sb_tc_reader *r, sb_pq_schema_el *e)
{
    STRUCT_LOOP(r, last, id, t)
    {
        if (t != SB_TC_STRUCT) {
            sb_tc_skip(r, t);
            continue;
        }
        switch (id) {
        case 1:
        case 4:
        case 12:
            e->lt = SB_PQ_LT_STRING;
            e->lt_name = id == 1 ? "STRING" : id == 4 ? "ENUM" : "JSON";
            sb_tc_skip_struct(r);
            break;
        case 2:
            e->lt = SB_PQ_LT_MAP;
            e->lt_name = "MAP";
            sb_tc_skip_struct(r);
            break;
        case 3:
            e->lt = SB_PQ_LT_LIST;
            e->lt_name = "LIST";
            sb_tc_skip_struct(r);
            break;
        case 5:
            e->lt = SB_PQ_LT_DECIMAL;
            e->lt_name = "DECIMAL";
            sb_tc_skip_struct(r);
            break;
        case 6:
            e->lt = SB_PQ_LT_DATE;
            e->lt_name = "DATE";
            sb_tc_skip_struct(r);
            break;
        case 8: {
            e->lt = SB_PQ_LT_TIMESTAMP;
            e->lt_name = "TIMESTAMP";
            STRUCT_LOOP(r, l2, id2, t2)
            {
                if (id2 == 1 && (t2 == SB_TC_TRUE || t2 == SB_TC_FALSE))
                    e->ts_utc = t2 == SB_TC_TRUE;
                else if (id2 == 2 && t2 == SB_TC_STRUCT)
                    time_unit(r, e);
                else
                    sb_tc_skip(r, t2);
            }
            break;
        }
        case 10: {
            e->lt = SB_PQ_LT_INT;
            e->lt_name = "INTEGER";
            STRUCT_LOOP(r, l2, id2, t2)
            {
                if (id2 == 1)
                    e->int_bits = (int)int_val(r, t2);
                else if (id2 == 2 && (t2 == SB_TC_TRUE || t2 == SB_TC_FALSE))
                    e->int_signed = t2 == SB_TC_TRUE;
                else
                    sb_tc_skip(r, t2);
            }
            break;
        }
        default: {
            static const char *names[] = {[7] = "TIME",     [9] = "UNKNOWN",   [11] = "UNKNOWN",
                                          [13] = "BSON",    [14] = "UUID",     [15] = "FLOAT16",
                                          [16] = "VARIANT", [17] = "GEOMETRY", [18] = "GEOGRAPHY"};
            e->lt = SB_PQ_LT_OTHER;
            e->lt_name = id >= 0 && id <= 18 && names[id] ? names[id] : "an unknown logical type";
            if (id == 11 || id == 9) { /* UNKNOWN (always null): nothing to convert */
                e->lt = SB_PQ_LT_NONE;
            }
            sb_tc_skip_struct(r);
        }
        }
    }
}

/* ConvertedType, used when there is no LogicalType. */
static void converted_type(sb_pq_schema_el *e, int ct)
{
    switch (ct) {
    case 0:
    case 4:
    case 19:
        e->lt = SB_PQ_LT_STRING;
        e->lt_name = ct == 0 ? "UTF8" : ct == 4 ? "ENUM" : "JSON";
        return;
    case 1:
    case 2:
        e->lt = SB_PQ_LT_MAP;
        e->lt_name = "MAP";
        return;
    case 3:
        e->lt = SB_PQ_LT_LIST;
        e->lt_name = "LIST";
        return;
    case 5:
        e->lt = SB_PQ_LT_DECIMAL;
        e->lt_name = "DECIMAL";
        return;
    case 6:
        e->lt = SB_PQ_LT_DATE;
        e->lt_name = "DATE";
        return;
    case 9:
    case 10:
        e->lt = SB_PQ_LT_TIMESTAMP;
        e->lt_name = "TIMESTAMP";
        e->ts_unit = ct == 9 ? SB_PQ_MILLIS : SB_PQ_MICROS;
        e->ts_utc = true;
        return;
    case 11:
    case 12:
    case 13:
    case 14:
    case 15:
    case 16:
    case 17:
    case 18: {
        static const int bits[] = {8, 16, 32, 64};
        e->lt = SB_PQ_LT_INT;
        e->lt_name = "INTEGER";
        e->int_signed = ct >= 15;
        e->int_bits = bits[(ct - 11) % 4];
        return;
    }
    default:
        e->lt = SB_PQ_LT_OTHER;
        e->lt_name = ct == 7 || ct == 8 ? "TIME" : ct == 20 ? "BSON" : ct == 21 ? "INTERVAL" : "?";
    }
}

static void schema_element(sb_tc_reader *r, sb_pq_schema_el *e, bool *oom)
{
    int ct = -1;
    bool have_lt = false;
    e->type = -1;
    e->repetition = -1;
    STRUCT_LOOP(r, last, id, t)
    {
        switch (id) {
        case 1:
            e->type = (int)i32_val(r, t);
            break;
        case 2:
            e->type_length = i32_val(r, t);
            break;
        case 3:
            e->repetition = (int)i32_val(r, t);
            break;
        case 4: {
            size_t n;
            const uint8_t *s = t == SB_TC_BINARY ? sb_tc_binary(r, &n) : NULL;
            if (s == NULL) {
                sb_tc_fail(r, "schema element name is not a string");
                break;
            }
            free(e->name);
            e->name = malloc(n + 1);
            if (e->name == NULL) {
                *oom = true;
                sb_tc_fail(r, "out of memory");
                break;
            }
            memcpy(e->name, s, n);
            e->name[n] = '\0';
            break;
        }
        case 5:
            e->num_children = i32_val(r, t);
            break;
        case 6:
            ct = (int)i32_val(r, t);
            break;
        case 10:
            if (t == SB_TC_STRUCT) {
                have_lt = true;
                logical_type(r, e);
            } else {
                sb_tc_skip(r, t);
            }
            break;
        default:
            sb_tc_skip(r, t);
        }
    }
    if (!have_lt && ct >= 0)
        converted_type(e, ct);
    else if (have_lt && e->lt == SB_PQ_LT_TIMESTAMP && e->ts_unit == SB_PQ_UNIT_NONE)
        sb_tc_fail(r, "TIMESTAMP without a unit");
}

static void statistics(sb_tc_reader *r, sb_pq_stats *s)
{
    const uint8_t *omin = NULL, *omax = NULL;
    size_t nmin = 0, nmax = 0;
    STRUCT_LOOP(r, last, id, t)
    {
        size_t n = 0;
        const uint8_t *b;
        switch (id) {
        case 1:
        case 2:
        case 5:
        case 6:
            if (t != SB_TC_BINARY) {
                sb_tc_skip(r, t);
                break;
            }
            b = sb_tc_binary(r, &n);
            if (id == 1) {
                omax = b;
                nmax = n;
            } else if (id == 2) {
                omin = b;
                nmin = n;
            } else if (id == 5) {
                s->max = b;
                s->max_len = n;
                s->has_max = true;
            } else {
                s->min = b;
                s->min_len = n;
                s->has_min = true;
            }
            break;
        case 3:
            s->null_count = int_val(r, t);
            s->has_null_count = true;
            break;
        default:
            sb_tc_skip(r, t);
        }
    }
    /* the deprecated min/max are kept only when neither new one is present (a pair is never
     * mixed), flagged: their sort order is signed whatever the type (prune.c) */
    if (s->has_min || s->has_max || (omin == NULL && omax == NULL))
        return;
    s->deprecated = true;
    if (omin != NULL) {
        s->min = omin;
        s->min_len = nmin;
        s->has_min = true;
    }
    if (omax != NULL) {
        s->max = omax;
        s->max_len = nmax;
        s->has_max = true;
    }
}

static void column_meta(sb_tc_reader *r, sb_pq_chunk *c)
{
    STRUCT_LOOP(r, last, id, t)
    {
        switch (id) {
        case 1:
            c->type = (int)i32_val(r, t);
            break;
        case 4:
            c->codec = (int)i32_val(r, t);
            break;
        case 5:
            c->num_values = int_val(r, t);
            break;
        case 6:
            c->total_uncompressed = int_val(r, t);
            break;
        case 7:
            c->total_compressed = int_val(r, t);
            break;
        case 9:
            c->data_page_offset = int_val(r, t);
            break;
        case 11:
            c->dict_page_offset = int_val(r, t);
            break;
        case 12:
            if (t == SB_TC_STRUCT)
                statistics(r, &c->stats);
            else
                sb_tc_skip(r, t);
            break;
        default:
            sb_tc_skip(r, t);
        }
    }
}

static void column_chunk(sb_tc_reader *r, sb_pq_chunk *c, bool *have_meta)
{
    STRUCT_LOOP(r, last, id, t)
    {
        if (id == 1 && t == SB_TC_BINARY) {
            c->has_external_path = true;
            sb_tc_skip(r, t);
        } else if (id == 3 && t == SB_TC_STRUCT) {
            *have_meta = true;
            column_meta(r, c);
        } else if (id == 4) {
            c->oi_off = int_val(r, t);
        } else if (id == 5) {
            c->oi_len = i32_val(r, t);
        } else if (id == 6) {
            c->ci_off = int_val(r, t);
        } else if (id == 7) {
            c->ci_len = i32_val(r, t);
        } else {
            sb_tc_skip(r, t);
        }
    }
}

/* One RowGroup; its column list must have exactly nleaves entries. */
static int row_group(sb_tc_reader *r, sb_pq_row_group *g, size_t nleaves, size_t gi, sb_err *err)
{
    bool seen_cols = false;
    STRUCT_LOOP(r, last, id, t)
    {
        if (id == 1 && t == SB_TC_LIST && !seen_cols) {
            uint8_t et;
            size_t n;
            if (!sb_tc_list(r, &et, &n))
                break;
            if (et != SB_TC_STRUCT || n != nleaves)
                return sb_err_data(err,
                                   "row group %zu has %zu column chunks, the schema %zu columns",
                                   gi, n, nleaves);
            seen_cols = true;
            g->cols = calloc(nleaves ? nleaves : 1, sizeof *g->cols);
            if (g->cols == NULL)
                return sb_err_set(err, "out of memory for row group %zu", gi);
            for (size_t i = 0; i < n && !r->bad; i++) {
                bool have = false;
                g->cols[i].dict_page_offset = -1;
                g->cols[i].type = -1;
                column_chunk(r, &g->cols[i], &have);
                if (!r->bad && !have)
                    return sb_err_data(err, "row group %zu, column %zu: no column metadata", gi, i);
            }
        } else if (id == 3) {
            g->num_rows = int_val(r, t);
        } else {
            sb_tc_skip(r, t);
        }
    }
    if (!r->bad && !seen_cols)
        return sb_err_data(err, "row group %zu has no column list", gi);
    return 0;
}

/* Derives each element's parent, levels and leaf index; checks the tree uses every element. */
static int schema_tree(sb_pq_meta *m, sb_err *err)
{
    if (m->nschema == 0)
        return sb_err_data(err, "the schema is empty");
    size_t pos = 1, nleaves = 0;
    /* iterative walk: a stack of (element, children left) */
    size_t *stack = malloc(m->nschema * sizeof *stack);
    int32_t *left = malloc(m->nschema * sizeof *left);
    m->leaves = malloc(m->nschema * sizeof *m->leaves);
    if (stack == NULL || left == NULL || m->leaves == NULL) {
        free(stack);
        free(left);
        return sb_err_set(err, "out of memory for the schema");
    }
    size_t depth = 0;
    sb_pq_schema_el *root = &m->schema[0];
    root->parent = -1;
    root->leaf = -1;
    if (root->num_children < 0 || (size_t)root->num_children > m->nschema - 1)
        goto bad;
    stack[depth] = 0;
    left[depth++] = root->num_children;
    while (depth > 0) {
        if (left[depth - 1] == 0) {
            depth--;
            continue;
        }
        left[depth - 1]--;
        if (pos >= m->nschema)
            goto bad;
        size_t pi = stack[depth - 1];
        sb_pq_schema_el *e = &m->schema[pos], *p = &m->schema[pi];
        e->parent = (int)pi;
        if (e->repetition < 0 || e->repetition > 2 || e->name == NULL) {
            free(stack);
            free(left);
            return sb_err_data(err, "schema element %zu has no name or repetition", pos);
        }
        e->max_def = (int16_t)(p->max_def + (e->repetition != 0));
        e->max_rep = (int16_t)(p->max_rep + (e->repetition == 2));
        if (e->num_children > 0) {
            if ((size_t)e->num_children > m->nschema - pos - 1)
                goto bad;
            e->leaf = -1;
            stack[depth] = pos;
            left[depth++] = e->num_children;
        } else {
            if (e->type < 0 || e->type > 7) {
                free(stack);
                free(left);
                return sb_err_data(err, "schema element \"%.100s\": unknown physical type %d",
                                   e->name, e->type);
            }
            if (e->type == SB_PQ_FLBA && (e->type_length <= 0 || e->type_length > (1 << 24))) {
                free(stack);
                free(left);
                return sb_err_data(err, "column \"%.100s\": FIXED_LEN_BYTE_ARRAY length %d",
                                   e->name, e->type_length);
            }
            e->leaf = (int)nleaves;
            m->leaves[nleaves++] = (int)pos;
        }
        pos++;
        if (depth > 100) {
            free(stack);
            free(left);
            return sb_err_data(err, "the schema is nested more than 100 deep");
        }
    }
    free(stack);
    free(left);
    if (pos != m->nschema)
        return sb_err_data(err, "the schema tree uses %zu of its %zu elements", pos, m->nschema);
    m->nleaves = nleaves;
    return 0;
bad:
    free(stack);
    free(left);
    return sb_err_data(err, "the schema tree's child counts do not match its elements");
}

/* Checks one chunk against its leaf and the file; fills start/len. */
static int check_chunk(const sb_pq_meta *m, sb_pq_chunk *c, size_t gi, size_t li,
                       uint64_t file_size, sb_err *err)
{
    char path[256];
    sb_pq_leaf_path(m, li, path, sizeof path);
    const sb_pq_schema_el *e = &m->schema[m->leaves[li]];
    if (c->has_external_path)
        return sb_err_data(err,
                           "row group %zu, column \"%s\": the chunk is in another file "
                           "(file_path), which is not read",
                           gi, path);
    if (c->type != e->type)
        return sb_err_data(err, "row group %zu, column \"%s\": chunk type %s, schema type %s", gi,
                           path, sb_pq_type_name(c->type), sb_pq_type_name(e->type));
    if (c->num_values < 0 || c->total_compressed <= 0 || c->data_page_offset < 4 ||
        (c->dict_page_offset != -1 && c->dict_page_offset < 4))
        return sb_err_data(err,
                           "row group %zu, column \"%s\": invalid sizes or offsets (values "
                           "%" PRId64 ", compressed size %" PRId64 ", data page at %" PRId64 ")",
                           gi, path, c->num_values, c->total_compressed, c->data_page_offset);
    int64_t start = c->data_page_offset;
    /* some writers set dictionary_page_offset 0 meaning "none" */
    if (c->dict_page_offset > 0 && c->dict_page_offset < start)
        start = c->dict_page_offset;
    uint64_t s = (uint64_t)start, n = (uint64_t)c->total_compressed;
    if (s > file_size - 8 || n > file_size - 8 - s)
        return sb_err_data(err,
                           "row group %zu, column \"%s\": bytes [%" PRIu64 ", +%" PRIu64
                           ") are past the data of the %" PRIu64 "-byte file",
                           gi, path, s, n, file_size);
    c->start = s;
    c->len = n;
    return 0;
}

/* FileMetaData.column_orders: one ColumnOrder union per leaf; TYPE_ORDER is field 1. Kept only
 * when there is one per leaf (checked by the caller once the schema is known). */
static void column_orders(sb_tc_reader *r, sb_pq_meta *m, size_t *n, bool *oom)
{
    uint8_t et;
    if (!sb_tc_list(r, &et, n))
        return;
    if (et != SB_TC_STRUCT) {
        for (size_t i = 0; i < *n && !r->bad; i++)
            sb_tc_skip(r, et);
        *n = 0;
        return;
    }
    free(m->type_order);
    m->type_order = calloc(*n ? *n : 1, sizeof *m->type_order);
    if (m->type_order == NULL)
        *oom = true;
    for (size_t i = 0; i < *n && !r->bad; i++) {
        STRUCT_LOOP(r, last, id, t)
        {
            if (id == 1 && t == SB_TC_STRUCT && m->type_order != NULL)
                m->type_order[i] = true;
            sb_tc_skip(r, t);
        }
    }
}

static int file_meta(sb_tc_reader *r, sb_pq_meta *m, uint64_t file_size, sb_err *err)
{
    size_t norders = 0;
    bool oom = false, have_schema = false, have_rgs = false;
    STRUCT_LOOP(r, last, id, t)
    {
        if (id == 2 && t == SB_TC_LIST && !have_schema) {
            uint8_t et;
            size_t n;
            if (!sb_tc_list(r, &et, &n))
                break;
            if (et != SB_TC_STRUCT || n == 0 || n > SB_PQ_MAX_SCHEMA)
                return sb_err_data(err, "the schema has %zu elements (1 to %d)", n,
                                   SB_PQ_MAX_SCHEMA);
            m->schema = calloc(n, sizeof *m->schema);
            if (m->schema == NULL)
                return sb_err_set(err, "out of memory for %zu schema elements", n);
            m->nschema = n;
            for (size_t i = 0; i < n && !r->bad; i++)
                schema_element(r, &m->schema[i], &oom);
            if (r->bad)
                break;
            if (schema_tree(m, err) != 0)
                return -1;
            have_schema = true;
        } else if (id == 3) {
            m->num_rows = int_val(r, t);
        } else if (id == 4 && t == SB_TC_LIST && have_schema && !have_rgs) {
            uint8_t et;
            size_t n;
            if (!sb_tc_list(r, &et, &n))
                break;
            if (et != SB_TC_STRUCT || n > SB_PQ_MAX_ROW_GROUPS)
                return sb_err_data(err, "invalid row group list (%zu entries)", n);
            m->rgs = calloc(n ? n : 1, sizeof *m->rgs);
            if (m->rgs == NULL)
                return sb_err_set(err, "out of memory for %zu row groups", n);
            m->nrgs = n;
            for (size_t i = 0; i < n && !r->bad; i++)
                if (row_group(r, &m->rgs[i], m->nleaves, i, err) != 0)
                    return -1;
            have_rgs = true;
        } else if (id == 4) {
            return sb_err_data(err, "the row groups come before the schema");
        } else if (id == 7 && t == SB_TC_LIST) {
            column_orders(r, m, &norders, &oom);
        } else {
            sb_tc_skip(r, t);
        }
    }
    if (oom)
        return sb_err_set(err, "out of memory reading the footer");
    if (r->bad)
        return sb_err_data(err, "invalid footer metadata: %s", r->msg);
    if (!have_schema)
        return sb_err_data(err, "the footer has no schema");
    if (m->type_order != NULL && norders != m->nleaves) { /* not one per leaf: not trusted */
        free(m->type_order);
        m->type_order = NULL;
    }
    for (size_t g = 0; g < m->nrgs; g++) {
        sb_pq_row_group *rg = &m->rgs[g];
        if (rg->num_rows < 0)
            return sb_err_data(err, "row group %zu: negative row count", g);
        rg->start = UINT64_MAX;
        rg->end = 0;
        if (rg->num_rows == 0) { /* never read; writers leave its chunks' offsets at 0 */
            rg->start = rg->end = 4;
            continue;
        }
        for (size_t c = 0; c < m->nleaves; c++) {
            if (check_chunk(m, &rg->cols[c], g, c, file_size, err) != 0)
                return -1;
            if (rg->cols[c].start < rg->start)
                rg->start = rg->cols[c].start;
            if (rg->cols[c].start + rg->cols[c].len > rg->end)
                rg->end = rg->cols[c].start + rg->cols[c].len;
        }
        if (m->nleaves == 0)
            rg->start = rg->end = 4;
    }
    return 0;
}

int sb_pq_meta_parse(const uint8_t *footer, size_t len, uint64_t file_size, sb_pq_meta *m,
                     sb_err *err)
{
    memset(m, 0, sizeof *m);
    if (len > SB_PQ_MAX_FOOTER)
        return sb_err_data(err, "footer of %zu bytes (at most %u)", len, SB_PQ_MAX_FOOTER);
    m->footer = malloc(len ? len : 1);
    if (m->footer == NULL)
        return sb_err_set(err, "out of memory for a %zu-byte footer", len);
    memcpy(m->footer, footer, len);
    m->footer_len = len;
    sb_tc_reader r;
    sb_tc_init(&r, m->footer, len);
    if (file_meta(&r, m, file_size, err) != 0) {
        sb_pq_meta_free(m);
        return -1;
    }
    return 0;
}

void sb_pq_meta_free(sb_pq_meta *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nschema; i++)
        free(m->schema[i].name);
    free(m->schema);
    free(m->leaves);
    for (size_t i = 0; i < m->nrgs; i++)
        free(m->rgs[i].cols);
    free(m->rgs);
    free(m->type_order);
    free(m->footer);
    memset(m, 0, sizeof *m);
}

const char *sb_pq_leaf_path(const sb_pq_meta *m, size_t leaf, char *buf, size_t cap)
{
    int chain[128];
    int n = 0;
    for (int i = m->leaves[leaf]; i > 0 && n < 128; i = m->schema[i].parent)
        chain[n++] = i;
    size_t len = 0;
    buf[0] = '\0';
    for (int k = n - 1; k >= 0 && len + 1 < cap; k--) {
        int w =
            snprintf(buf + len, cap - len, "%s%s", k == n - 1 ? "" : ".", m->schema[chain[k]].name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return buf;
}

/* ---- page headers ----------------------------------------------------------------------- */

static void data_header(sb_tc_reader *r, sb_pq_page_header *h, bool v2)
{
    STRUCT_LOOP(r, last, id, t)
    {
        if (!v2) {
            switch (id) {
            case 1:
                h->num_values = i32_val(r, t);
                break;
            case 2:
                h->encoding = (int)i32_val(r, t);
                break;
            case 3:
                h->def_encoding = (int)i32_val(r, t);
                break;
            case 4:
                h->rep_encoding = (int)i32_val(r, t);
                break;
            default:
                sb_tc_skip(r, t);
            }
            continue;
        }
        switch (id) {
        case 1:
            h->num_values = i32_val(r, t);
            break;
        case 2:
            h->num_nulls = i32_val(r, t);
            break;
        case 3:
            h->num_rows = i32_val(r, t);
            break;
        case 4:
            h->encoding = (int)i32_val(r, t);
            break;
        case 5:
            h->def_len = i32_val(r, t);
            break;
        case 6:
            h->rep_len = i32_val(r, t);
            break;
        case 7:
            h->is_compressed = t == SB_TC_TRUE;
            if (t != SB_TC_TRUE && t != SB_TC_FALSE)
                sb_tc_skip(r, t);
            break;
        default:
            sb_tc_skip(r, t);
        }
    }
}

static void dict_header(sb_tc_reader *r, sb_pq_page_header *h)
{
    STRUCT_LOOP(r, last, id, t)
    {
        if (id == 1)
            h->dict_num_values = i32_val(r, t);
        else if (id == 2)
            h->dict_encoding = (int)i32_val(r, t);
        else
            sb_tc_skip(r, t);
    }
}

int sb_pq_page_header_parse(const uint8_t *p, size_t n, sb_pq_page_header *h, size_t *used,
                            sb_err *err)
{
    memset(h, 0, sizeof *h);
    h->type = -1;
    h->is_compressed = true;
    sb_tc_reader r;
    sb_tc_init(&r, p, n);
    STRUCT_LOOP(&r, last, id, t)
    {
        switch (id) {
        case 1:
            h->type = (int)i32_val(&r, t);
            break;
        case 2:
            h->uncompressed_size = i32_val(&r, t);
            break;
        case 3:
            h->compressed_size = i32_val(&r, t);
            break;
        case 5:
        case 8:
            if (t != SB_TC_STRUCT) {
                sb_tc_skip(&r, t);
                break;
            }
            data_header(&r, h, id == 8);
            h->has_data = id == 5 || h->has_data;
            h->has_v2 = id == 8 || h->has_v2;
            break;
        case 7:
            if (t != SB_TC_STRUCT) {
                sb_tc_skip(&r, t);
                break;
            }
            dict_header(&r, h);
            h->has_dict = true;
            break;
        default:
            sb_tc_skip(&r, t);
        }
    }
    if (r.bad)
        return sb_err_data(err, "invalid page header: %s", r.msg);
    if (h->uncompressed_size < 0 || h->compressed_size < 0 ||
        (uint32_t)h->uncompressed_size > SB_PQ_MAX_PAGE ||
        (uint32_t)h->compressed_size > SB_PQ_MAX_PAGE)
        return sb_err_data(err, "page sizes %d compressed, %d uncompressed (0 to %u)",
                           h->compressed_size, h->uncompressed_size, SB_PQ_MAX_PAGE);
    if (h->num_values < 0 || h->num_nulls < 0 || h->num_rows < 0 || h->def_len < 0 ||
        h->rep_len < 0 || h->dict_num_values < 0)
        return sb_err_data(err, "page header with a negative count or length");
    *used = sb_tc_pos(&r);
    return 0;
}
