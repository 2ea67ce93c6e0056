/* infer.c — a records schema inferred from one partition (records.h, sb_pq_infer_schema): every
 * record is parsed with cJSON and scanned for its numbers' text (jscan.h), and each field's kinds
 * seen so far are merged into one type by the rules in records.h. */

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/jscan.h"
#include "parquet/records.h"

enum { K_BOOL = 1, K_INT = 2, K_DOUBLE = 4, K_STRING = 8, K_JSON = 16 };

typedef struct infer_field {
    char *name;
    unsigned kinds;
} infer_field;

typedef struct infer_ctx {
    infer_field *f;
    size_t n, cap;
    sb_pq_jspan *spans;
    size_t nspans;
} infer_ctx;

/* The kind of one value (null: 0); `text` its span in the record. */
static unsigned kind_of(const cJSON *v, const char *text, size_t len)
{
    if (cJSON_IsBool(v))
        return K_BOOL;
    if (cJSON_IsString(v))
        return K_STRING;
    if (cJSON_IsNumber(v)) {
        if (!sb_pq_jnum_is_int(text, len))
            return K_DOUBLE;
        /* beyond 2^53 a JSON integer is not exact as a double: kept as its text */
        return sb_pq_jnum_within_2p53(text, len) ? K_INT : K_JSON;
    }
    if (cJSON_IsNull(v))
        return 0;
    return K_JSON; /* an object or an array */
}

/* The field named `name`, added at the end when new; `hint` is where it was last time (records
 * usually list their fields in the same order). NULL + err. */
static infer_field *field_at(infer_ctx *c, const char *name, size_t hint, sb_err *err)
{
    if (hint < c->n && strcmp(c->f[hint].name, name) == 0)
        return &c->f[hint];
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->f[i].name, name) == 0)
            return &c->f[i];
    size_t len = strlen(name);
    if (len == 0 || len > SB_PART_MAX_NAME) {
        sb_err_data(err, "field name of %zu bytes: a column name has 1 to %d", len,
                    SB_PART_MAX_NAME);
        return NULL;
    }
    if (c->n == SB_PQ_INFER_MAX_FIELDS) {
        sb_err_data(err, "more than %d fields to infer a schema from; give sink.args.schema",
                    SB_PQ_INFER_MAX_FIELDS);
        return NULL;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        infer_field *nf = realloc(c->f, cap * sizeof *nf);
        if (nf == NULL) {
            sb_err_set(err, "out of memory");
            return NULL;
        }
        c->f = nf;
        c->cap = cap;
    }
    if ((c->f[c->n].name = strdup(name)) == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    c->f[c->n].kinds = 0;
    return &c->f[c->n++];
}

static int infer_record(infer_ctx *c, const char *p, size_t n, sb_err *err)
{
    cJSON *root = cJSON_ParseWithLength(p, n);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sb_err_data(err, "the record is not a JSON object");
    }
    size_t want = (size_t)cJSON_GetArraySize(root);
    int rc = 0;
    if (want > c->nspans) {
        sb_pq_jspan *ns = realloc(c->spans, want * sizeof *ns);
        if (ns == NULL)
            rc = sb_err_set(err, "out of memory");
        else {
            c->spans = ns;
            c->nspans = want;
        }
    }
    long got = rc == 0 ? sb_pq_jscan(p, n, c->spans, want) : -1;
    if (rc == 0 && got != (long)want)
        rc = sb_err_data(err, "the record's members could not be scanned");
    size_t k = 0;
    for (const cJSON *v = root->child; rc == 0 && v != NULL; v = v->next, k++) {
        infer_field *f = field_at(c, v->string, k, err);
        if (f == NULL)
            rc = -1;
        else
            f->kinds |= kind_of(v, p + c->spans[k].off, c->spans[k].len);
    }
    cJSON_Delete(root);
    return rc;
}

/* One field's type from the kinds it was seen with (records.h: the rules). */
static sb_type type_of(unsigned kinds, bool *json)
{
    unsigned number = kinds & (K_INT | K_DOUBLE);
    int families = (number != 0) + ((kinds & K_STRING) != 0) + ((kinds & K_BOOL) != 0);
    *json = (kinds & K_JSON) != 0 || families > 1;
    if (*json || kinds == 0 || kinds == K_STRING)
        return SB_TYPE_UTF8; /* only nulls: a string column of nulls */
    if (kinds == K_BOOL)
        return SB_TYPE_BOOL;
    return (kinds & K_DOUBLE) ? SB_TYPE_FLOAT64 : SB_TYPE_INT64;
}

/* Moves the fields seen into o's schema (every field nullable). */
static int infer_finish(infer_ctx *c, sb_pq_sink_opts *o, sb_err *err)
{
    sb_pq_sink_opts_free(o);
    o->schema = calloc(c->n, sizeof *o->schema);
    o->json = calloc(c->n, sizeof *o->json);
    if (o->schema == NULL || o->json == NULL) {
        sb_pq_sink_opts_free(o);
        return sb_err_set(err, "out of memory");
    }
    for (size_t i = 0; i < c->n; i++) {
        o->schema[i] = (sb_field){
            .name = c->f[i].name, .type = type_of(c->f[i].kinds, &o->json[i]), .nullable = true};
        c->f[i].name = NULL;
    }
    o->nschema = c->n;
    return 0;
}

int sb_pq_infer_schema(const sb_column *rec, sb_pq_sink_opts *o, sb_err *err)
{
    if (rec->length == 0)
        return 1;
    infer_ctx c = {0};
    int rc = 0;
    for (size_t r = 0; rc == 0 && r < rec->length; r++) {
        size_t n = 0;
        const char *p = sb_column_valid(rec, r) ? sb_column_binary(rec, r, &n) : NULL;
        if (p == NULL)
            rc = sb_err_data(err, "record %zu is null", r);
        else if (infer_record(&c, p, n, err) != 0)
            rc = sb_err_wrap(err, "record %zu", r);
    }
    if (rc == 0 && c.n == 0)
        rc = sb_err_data(err, "the records have no fields to infer a schema from; give "
                              "sink.args.schema");
    if (rc == 0)
        rc = infer_finish(&c, o, err);
    for (size_t i = 0; i < c.n; i++)
        free(c.f[i].name);
    free(c.f);
    free(c.spans);
    return rc;
}
