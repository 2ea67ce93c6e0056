/* records.c — the Parquet sink's args and records -> typed columns (records.h): each record is
 * parsed with cJSON and every schema field appended to its column, or the row is refused as a
 * data error naming the row and the field; json fields take the value's text from jscan.h.
 * Schema inference is infer.c. */

#include "parquet/records.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/jscan.h"
#include "parquet/meta.h"

void sb_pq_sink_opts_free(sb_pq_sink_opts *o)
{
    for (size_t i = 0; i < o->nschema; i++)
        free((char *)o->schema[i].name);
    free(o->schema);
    free(o->json);
    o->schema = NULL;
    o->json = NULL;
    o->nschema = 0;
}

static sb_type schema_type(const char *t, bool *json)
{
    *json = strcmp(t, "json") == 0;
    if (strcmp(t, "int64") == 0)
        return SB_TYPE_INT64;
    if (strcmp(t, "double") == 0)
        return SB_TYPE_FLOAT64;
    if (strcmp(t, "string") == 0 || *json)
        return SB_TYPE_UTF8;
    if (strcmp(t, "bool") == 0)
        return SB_TYPE_BOOL;
    return 0;
}

static int parse_schema(const cJSON *s, sb_pq_sink_opts *o, sb_err *err)
{
    sb_pq_sink_opts_free(o);
    int n = cJSON_GetArraySize(s);
    if (!cJSON_IsArray(s) || n == 0)
        return sb_err_set(err, "sink.args.schema: must be a non-empty list of {name, type}");
    o->schema = calloc((size_t)n, sizeof *o->schema);
    o->json = calloc((size_t)n, sizeof *o->json);
    if (o->schema == NULL || o->json == NULL)
        return sb_err_set(err, "sink.args.schema: out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *f = cJSON_GetArrayItem(s, i);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(f, "type");
        const cJSON *nu = cJSON_GetObjectItemCaseSensitive(f, "nullable");
        bool json = false;
        if (!cJSON_IsString(nm) || nm->valuestring[0] == '\0' || !cJSON_IsString(ty) ||
            schema_type(ty->valuestring, &json) == 0 || (nu != NULL && !cJSON_IsBool(nu)))
            return sb_err_set(err,
                              "sink.args.schema[%d]: must be {name: a non-empty string, type: "
                              "int64, double, string, bool or json, nullable: a boolean}",
                              i);
        for (size_t k = 0; k < o->nschema; k++)
            if (strcmp(o->schema[k].name, nm->valuestring) == 0)
                return sb_err_set(err, "sink.args.schema[%d]: field \"%.100s\" is named twice", i,
                                  nm->valuestring);
        char *name = strdup(nm->valuestring);
        if (name == NULL)
            return sb_err_set(err, "sink.args.schema: out of memory");
        o->json[o->nschema] = json;
        o->schema[o->nschema++] = (sb_field){.name = name,
                                             .type = schema_type(ty->valuestring, &json),
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
    const cJSON *inf = cJSON_GetObjectItemCaseSensitive(root, "inferSchema");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "schema");
    if (inf != NULL && !cJSON_IsBool(inf))
        return sb_err_set(err, "sink.args.inferSchema: must be a boolean");
    if (inf != NULL && s != NULL)
        return sb_err_set(err, "sink.args.inferSchema: give either a schema or inferSchema");
    o->infer = inf == NULL ? -1 : cJSON_IsTrue(inf);
    return s != NULL ? parse_schema(s, o, err) : 0;
}

int sb_pq_sink_opts_parse(const char *args_json, sb_pq_sink_opts *o, sb_err *err)
{
    memset(o, 0, sizeof *o);
    o->w.codec = SB_PQ_ZSTD;
    o->infer = -1;
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

int sb_pq_schema_parse(const char *list_json, sb_pq_sink_opts *o, sb_err *err)
{
    cJSON *root = cJSON_Parse(list_json ? list_json : "");
    int rc = root == NULL
                 ? sb_err_set(err, "sink schema: not JSON: %.80s", list_json ? list_json : "")
                 : parse_schema(root, o, err);
    cJSON_Delete(root);
    if (rc != 0)
        sb_pq_sink_opts_free(o);
    return rc;
}

static const char *type_name(const sb_pq_sink_opts *o, size_t k)
{
    if (o->json[k])
        return "json";
    switch (o->schema[k].type) {
    case SB_TYPE_INT64:
        return "int64";
    case SB_TYPE_FLOAT64:
        return "double";
    case SB_TYPE_BOOL:
        return "bool";
    default:
        return "string";
    }
}

char *sb_pq_schema_json(const sb_pq_sink_opts *o)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t k = 0; a != NULL && k < o->nschema; k++) {
        cJSON *f = cJSON_CreateObject();
        if (f == NULL || !cJSON_AddItemToArray(a, f) ||
            cJSON_AddStringToObject(f, "name", o->schema[k].name) == NULL ||
            cJSON_AddStringToObject(f, "type", type_name(o, k)) == NULL ||
            cJSON_AddBoolToObject(f, "nullable", o->schema[k].nullable) == NULL) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    char *out = a ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    return out;
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

/* The members' value spans of one record, found once per record that has a json field. */
typedef struct rec_spans {
    sb_pq_jspan *v;
    size_t cap;
    long n; /* -1: not scanned yet */
} rec_spans;

/* The text of member v of the record p[0..n) (root), found by the scan (done once a record). */
static int value_text(const cJSON *root, const cJSON *v, const char *p, size_t n, rec_spans *sp,
                      sb_pq_jspan *out, sb_err *err)
{
    if (sp->n < 0) {
        size_t want = (size_t)cJSON_GetArraySize(root);
        if (want > sp->cap) {
            sb_pq_jspan *nv = realloc(sp->v, want * sizeof *nv);
            if (nv == NULL)
                return sb_err_set(err, "out of memory");
            sp->v = nv;
            sp->cap = want;
        }
        sp->n = sb_pq_jscan(p, n, sp->v, sp->cap);
    }
    long idx = 0;
    for (const cJSON *c = root->child; c != NULL && c != v; c = c->next)
        idx++;
    if (idx >= sp->n || (size_t)idx >= sp->cap) /* cJSON and the scan disagree: never expected */
        return sb_err_data(err, "field \"%.100s\": the value's text was not found", v->string);
    *out = sp->v[idx];
    return 0;
}

/* Field k's value v (not null) of the record p[0..n), when its text matters: a json field's is
 * appended as it is; an int64 field's 2^53, which 2^53 + 1 also parses to, is checked by its
 * digits. 1 when the value is left to append_value. */
static int append_by_text(sb_batch_builder *bb, size_t k, const sb_pq_sink_opts *o,
                          const cJSON *root, const cJSON *v, const char *p, size_t n, rec_spans *sp,
                          sb_err *err)
{
    bool json = o->json != NULL && o->json[k];
    if (!json && !(o->schema[k].type == SB_TYPE_INT64 && cJSON_IsNumber(v) &&
                   fabs(v->valuedouble) == 9007199254740992.0))
        return 1;
    sb_pq_jspan t = {0, 0};
    if (value_text(root, v, p, n, sp, &t, err) != 0)
        return -1;
    if (json)
        return sb_batch_builder_append_binary(bb, k, p + t.off, t.len, err);
    if (!sb_pq_jnum_is_int(p + t.off, t.len) || !sb_pq_jnum_within_2p53(p + t.off, t.len))
        return sb_err_data(err,
                           "field \"%.100s\": the number is not an int64 (an integer of at most "
                           "2^53 in magnitude)",
                           o->schema[k].name);
    return 1;
}

/* A record of a closed schema has more members than schema fields found: the data error names
 * the first member the schema lacks (or a field given twice). */
static int extra_field(const sb_pq_sink_opts *o, const cJSON *root, sb_err *err)
{
    for (const cJSON *c = root->child; c != NULL; c = c->next) {
        size_t k = 0;
        while (k < o->nschema && strcmp(o->schema[k].name, c->string) != 0)
            k++;
        if (k == o->nschema)
            return sb_err_data(err,
                               "field \"%.100s\" is not in the schema inferred from the run's "
                               "first sink partition (give sink.args.schema to choose the fields)",
                               c->string);
    }
    return sb_err_data(err, "a field is given twice");
}

static int append_record(sb_batch_builder *bb, const sb_pq_sink_opts *o, const char *p, size_t n,
                         rec_spans *sp, sb_err *err)
{
    cJSON *root = cJSON_ParseWithLength(p, n);
    int rc = 0;
    if (root == NULL || !cJSON_IsObject(root))
        rc = sb_err_data(err, "the record is not a JSON object");
    sp->n = -1;
    size_t found = 0;
    for (size_t k = 0; rc == 0 && k < o->nschema; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, o->schema[k].name);
        found += v != NULL;
        if (v != NULL && !cJSON_IsNull(v))
            rc = append_by_text(bb, k, o, root, v, p, n, sp, err);
        if (rc == 1 || v == NULL || cJSON_IsNull(v))
            rc = append_value(bb, k, &o->schema[k], v, err);
    }
    if (rc == 0 && o->closed && (size_t)cJSON_GetArraySize(root) > found)
        rc = extra_field(o, root, err);
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
    rec_spans sp = {.n = -1};
    for (size_t r = 0; rc == 0 && r < rec->length; r++) {
        size_t n = 0;
        const char *p = sb_column_valid(rec, r) ? sb_column_binary(rec, r, &n) : NULL;
        if (p == NULL)
            rc = sb_err_data(err, "record %zu is null", r);
        else if (append_record(bb, o, p, n, &sp, err) != 0)
            rc = sb_err_wrap(err, "record %zu", r);
    }
    free(sp.v);
    if (rc == 0)
        rc = sb_batch_builder_finish(bb, blob, len, err);
    sb_batch_builder_free(bb);
    return rc;
}
