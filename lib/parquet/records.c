/* records.c — the Parquet sink's args and records -> typed columns (records.h): each record is
 * parsed with cJSON and every schema field appended to its column, or the row is refused as a
 * data error naming the row and the field. */

#include "parquet/records.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/meta.h"

void sb_pq_sink_opts_free(sb_pq_sink_opts *o)
{
    for (size_t i = 0; i < o->nschema; i++)
        free((char *)o->schema[i].name);
    free(o->schema);
    o->schema = NULL;
    o->nschema = 0;
}

static sb_type schema_type(const char *t)
{
    if (strcmp(t, "int64") == 0)
        return SB_TYPE_INT64;
    if (strcmp(t, "double") == 0)
        return SB_TYPE_FLOAT64;
    if (strcmp(t, "string") == 0)
        return SB_TYPE_UTF8;
    if (strcmp(t, "bool") == 0)
        return SB_TYPE_BOOL;
    return 0;
}

static int parse_schema(const cJSON *s, sb_pq_sink_opts *o, sb_err *err)
{
    int n = cJSON_GetArraySize(s);
    if (!cJSON_IsArray(s) || n == 0)
        return sb_err_set(err, "sink.args.schema: must be a non-empty list of {name, type}");
    o->schema = calloc((size_t)n, sizeof *o->schema);
    if (o->schema == NULL)
        return sb_err_set(err, "sink.args.schema: out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *f = cJSON_GetArrayItem(s, i);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(f, "type");
        const cJSON *nu = cJSON_GetObjectItemCaseSensitive(f, "nullable");
        if (!cJSON_IsString(nm) || nm->valuestring[0] == '\0' || !cJSON_IsString(ty) ||
            schema_type(ty->valuestring) == 0 || (nu != NULL && !cJSON_IsBool(nu)))
            return sb_err_set(err,
                              "sink.args.schema[%d]: must be {name: a non-empty string, type: "
                              "int64, double, string or bool, nullable: a boolean}",
                              i);
        for (size_t k = 0; k < o->nschema; k++)
            if (strcmp(o->schema[k].name, nm->valuestring) == 0)
                return sb_err_set(err, "sink.args.schema[%d]: field \"%.100s\" is named twice", i,
                                  nm->valuestring);
        char *name = strdup(nm->valuestring);
        if (name == NULL)
            return sb_err_set(err, "sink.args.schema: out of memory");
        o->schema[o->nschema++] = (sb_field){.name = name,
                                             .type = schema_type(ty->valuestring),
                                             .nullable = nu == NULL || cJSON_IsTrue(nu)};
    }
    return 0;
}

static int parse_opts(const cJSON *root, sb_pq_sink_opts *o, sb_err *err)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "compression");
    if (c != NULL && (!cJSON_IsString(c) || (o->w.codec = sb_pq_codec_parse(c->valuestring)) < 0))
        return sb_err_set(err, "sink.args.compression: must be zstd, snappy, gzip or none");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "rowGroupSize");
    if (g != NULL) {
        if (!cJSON_IsNumber(g) || g->valuedouble < 1 || g->valuedouble > 9.0e15 ||
            g->valuedouble != floor(g->valuedouble))
            return sb_err_set(err, "sink.args.rowGroupSize: must be a positive integer (bytes)");
        o->w.row_group_bytes = (size_t)g->valuedouble;
    }
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "schema");
    return s != NULL ? parse_schema(s, o, err) : 0;
}

int sb_pq_sink_opts_parse(const char *args_json, sb_pq_sink_opts *o, sb_err *err)
{
    memset(o, 0, sizeof *o);
    o->w.codec = SB_PQ_ZSTD;
    if (args_json == NULL || args_json[0] == '\0')
        return 0;
    cJSON *root = cJSON_Parse(args_json);
    int rc = 0;
    if (root == NULL || !cJSON_IsObject(root))
        rc = sb_err_set(err, "sink: format args are not a JSON object: %.80s", args_json);
    else
        rc = parse_opts(root, o, err);
    cJSON_Delete(root);
    if (rc != 0)
        sb_pq_sink_opts_free(o);
    return rc;
}

/* Appends field f's value v (NULL: absent) to column k, or a data error. */
static int append_value(sb_batch_builder *bb, size_t k, const sb_field *f, const cJSON *v,
                        sb_err *err)
{
    if (v == NULL || cJSON_IsNull(v)) {
        if (!f->nullable)
            return sb_err_data(err, "field \"%.100s\" is %s and not nullable", f->name,
                               v == NULL ? "absent" : "null");
        return sb_batch_builder_append_null(bb, k, err);
    }
    switch (f->type) {
    case SB_TYPE_INT64: {
        double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!(d == floor(d) && fabs(d) <= 9007199254740992.0))
            return sb_err_data(err,
                               "field \"%.100s\": %s is not an int64 (an integer of at most "
                               "2^53 in magnitude)",
                               f->name, cJSON_IsNumber(v) ? "the number" : "the value");
        return sb_batch_builder_append_int(bb, k, (int64_t)d, err);
    }
    case SB_TYPE_FLOAT64:
        if (!cJSON_IsNumber(v))
            return sb_err_data(err, "field \"%.100s\" is not a number (schema type double)",
                               f->name);
        return sb_batch_builder_append_double(bb, k, v->valuedouble, err);
    case SB_TYPE_BOOL:
        if (!cJSON_IsBool(v))
            return sb_err_data(err, "field \"%.100s\" is not a boolean (schema type bool)",
                               f->name);
        return sb_batch_builder_append_bool(bb, k, cJSON_IsTrue(v), err);
    default:
        if (!cJSON_IsString(v))
            return sb_err_data(err, "field \"%.100s\" is not a string (schema type string)",
                               f->name);
        return sb_batch_builder_append_binary(bb, k, v->valuestring, strlen(v->valuestring), err);
    }
}

static int append_record(sb_batch_builder *bb, const sb_pq_sink_opts *o, const char *p, size_t n,
                         sb_err *err)
{
    cJSON *root = cJSON_ParseWithLength(p, n);
    int rc = 0;
    if (root == NULL || !cJSON_IsObject(root))
        rc = sb_err_data(err, "the record is not a JSON object");
    for (size_t k = 0; rc == 0 && k < o->nschema; k++)
        rc = append_value(bb, k, &o->schema[k],
                          cJSON_GetObjectItemCaseSensitive(root, o->schema[k].name), err);
    cJSON_Delete(root);
    return rc;
}

int sb_pq_records_batch(const sb_pq_sink_opts *o, const sb_column *rec, void **blob, size_t *len,
                        sb_err *err)
{
    sb_batch_builder *bb = sb_batch_builder_new(o->schema, o->nschema, err);
    if (bb == NULL)
        return -1;
    int rc = 0;
    for (size_t r = 0; rc == 0 && r < rec->length; r++) {
        size_t n = 0;
        const char *p = sb_column_valid(rec, r) ? sb_column_binary(rec, r, &n) : NULL;
        if (p == NULL)
            rc = sb_err_data(err, "record %zu is null", r);
        else if (append_record(bb, o, p, n, err) != 0)
            rc = sb_err_wrap(err, "record %zu", r);
    }
    if (rc == 0)
        rc = sb_batch_builder_finish(bb, blob, len, err);
    sb_batch_builder_free(bb);
    return rc;
}
