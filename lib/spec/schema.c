/* schema.c — the generic table-driven decoder (schema.h): walks a document node against an
 * object's field table, type-checks and range-checks each value, applies defaults, reports
 * unknown, missing and mistyped fields with their paths, runs the object's check hook, and
 * frees what it decoded. It owns no tables (pipeline.c has the Pipeline's) and the shared
 * helpers for field paths and DNS-1123 names.
 */
#include "spec/schema.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/quantity.h"

const char *sb_spec_path_field(char *buf, size_t len, const char *path, const char *name)
{
    if (path == NULL || path[0] == '\0')
        snprintf(buf, len, "%s", name);
    else
        snprintf(buf, len, "%s.%s", path, name);
    return buf;
}

const char *sb_spec_path_index(char *buf, size_t len, const char *path, size_t i)
{
    snprintf(buf, len, "%s[%zu]", path, i);
    return buf;
}

int sb_spec_is_dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && !(c == '-' && i > 0 && i + 1 < n))
            return 0;
    }
    return 1;
}

int sb_spec_is_dns_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    char part[64];
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t pl = dot ? (size_t)(dot - p) : strlen(p);
        if (pl == 0 || pl >= sizeof part)
            return 0;
        memcpy(part, p, pl);
        part[pl] = '\0';
        if (!sb_spec_is_dns_label(part))
            return 0;
        if (dot == NULL)
            return 1;
        p = dot + 1;
    }
}

const char *sb_spec_ftype_noun(const sb_schema_field *f, char *buf, size_t len)
{
    switch (f->type) {
    case SB_FT_STRING:
        return "a string";
    case SB_FT_INT:
        if ((f->flags & SB_F_MIN) && f->min == 0)
            return "a non-negative integer";
        if ((f->flags & SB_F_MIN) && f->min == 1)
            return "a positive integer";
        return "an integer";
    case SB_FT_BOOL:
        return "a boolean (true or false)";
    case SB_FT_NUMBER:
        return "a number";
    case SB_FT_BYTES:
        return "a quantity of bytes such as 64Mi or 1.5Gi";
    case SB_FT_MILLI:
        return "a quantity such as 500m, 1 or 2.5";
    case SB_FT_DURATION:
        return "a duration such as 30s, 5m or 1h30m";
    case SB_FT_ENUM: {
        size_t o = (size_t)snprintf(buf, len, "one of ");
        for (size_t i = 0; f->enums[i] != NULL && o < len; i++)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", f->enums[i]);
        return buf;
    }
    case SB_FT_OBJECT:
    case SB_FT_FREEFORM:
        return "an object";
    case SB_FT_LIST:
        return "a list of objects";
    case SB_FT_STRLIST:
        return "a list of strings";
    case SB_FT_STRMAP:
        return "an object of string values";
    }
    return "?";
}

/* "integer 3", "string \"abc\"", "a list" */
static const char *describe(const sb_node *n, char *buf, size_t len)
{
    switch (n->kind) {
    case SB_NODE_BOOL:
    case SB_NODE_INT:
    case SB_NODE_FLOAT:
    case SB_NODE_NULL:
        snprintf(buf, len, "%s %.40s",
                 n->kind == SB_NODE_BOOL   ? "boolean"
                 : n->kind == SB_NODE_INT  ? "integer"
                 : n->kind == SB_NODE_NULL ? "null"
                                           : "number",
                 n->text);
        return buf;
    case SB_NODE_STRING:
        snprintf(buf, len, "string \"%.40s%s\"", n->text, n->text_len > 40 ? "..." : "");
        return buf;
    default:
        return sb_node_kind_name(n->kind);
    }
}

static void type_error(sb_diags *d, const sb_schema_field *f, const sb_node *n, const char *path)
{
    char noun[256], got[128];
    sb_diags_add(d, path, n->line, n->col, "must be %s, got %s",
                 sb_spec_ftype_noun(f, noun, sizeof noun), describe(n, got, sizeof got));
}

static int check_range(sb_diags *d, const sb_schema_field *f, const sb_node *n, const char *path,
                       int64_t v)
{
    char noun[256];
    if (((f->flags & SB_F_MIN) && v < f->min) || ((f->flags & SB_F_MAX) && v > f->max)) {
        if (f->type == SB_FT_INT && !(f->flags & SB_F_MAX))
            sb_diags_add(d, path, n->line, n->col, "must be %s, got %lld",
                         sb_spec_ftype_noun(f, noun, sizeof noun), (long long)v);
        else if (f->type == SB_FT_INT)
            sb_diags_add(d, path, n->line, n->col, "must be between %lld and %lld, got %lld",
                         (long long)f->min, (long long)f->max, (long long)v);
        else if ((f->flags & SB_F_MIN) && f->min >= 1 && v < 1)
            sb_diags_add(d, path, n->line, n->col, "must be greater than zero, got \"%s\"",
                         n->text);
        else if ((f->flags & SB_F_MIN) && f->type == SB_FT_BYTES && v < f->min) {
            char q[64];
            sb_diags_add(d, path, n->line, n->col, "must be at least %s (%lld bytes), got \"%s\"",
                         sb_quantity_format_bytes(f->min, q, sizeof q), (long long)f->min, n->text);
        } else if ((f->flags & SB_F_MIN) && f->min == 0 && v < 0)
            sb_diags_add(d, path, n->line, n->col, "must not be negative, got \"%s\"", n->text);
        else
            sb_diags_add(d, path, n->line, n->col, "\"%s\" is out of range", n->text);
        return -1;
    }
    return 0;
}

static void *at(void *obj, size_t off)
{
    return (char *)obj + off;
}

static void mark_present(const sb_schema_field *f, void *obj)
{
    if (f->present_offset)
        *(bool *)at(obj, f->present_offset - 1) = true;
}

static int decode_string_value(sb_diags *d, const sb_schema_field *f, const sb_node *n,
                               const char *path, char **out)
{
    if (n->kind != SB_NODE_STRING) {
        type_error(d, f, n, path);
        return 0;
    }
    if (strlen(n->text) != n->text_len) {
        sb_diags_add(d, path, n->line, n->col, "must not contain NUL characters");
        return 0;
    }
    switch (f->format) {
    case SB_SF_NONEMPTY:
        if (n->text_len == 0)
            sb_diags_add(d, path, n->line, n->col, "must not be empty");
        break;
    case SB_SF_DNS_LABEL:
        if (!sb_spec_is_dns_label(n->text))
            sb_diags_add(d, path, n->line, n->col,
                         "\"%.80s\" is not a valid name: use at most 63 lowercase letters, digits "
                         "and '-', starting and ending with a letter or digit (a DNS-1123 label, "
                         "because it becomes part of pod names and label values)",
                         n->text);
        break;
    case SB_SF_DNS_SUBDOMAIN:
        if (!sb_spec_is_dns_subdomain(n->text))
            sb_diags_add(d, path, n->line, n->col,
                         "\"%.80s\" is not a valid name: use at most 63 lowercase letters, digits, "
                         "'-' and '.', starting and ending with a letter or digit (a DNS-1123 "
                         "subdomain that also fits a label value)",
                         n->text);
        break;
    case SB_SF_NONE:
        break;
    }
    *out = strdup(n->text);
    return *out == NULL ? -1 : 0;
}

static int decode_int(sb_diags *d, const sb_schema_field *f, const sb_node *n, const char *path,
                      int64_t *out)
{
    if (n->kind != SB_NODE_INT)
        type_error(d, f, n, path);
    else if (check_range(d, f, n, path, n->v.i) == 0)
        *out = n->v.i;
    return 0;
}

static int decode_bool(sb_diags *d, const sb_schema_field *f, const sb_node *n, const char *path,
                       bool *out)
{
    if (n->kind != SB_NODE_BOOL)
        type_error(d, f, n, path);
    else
        *out = n->v.b != 0;
    return 0;
}

static int decode_number(sb_diags *d, const sb_schema_field *f, const sb_node *n, const char *path,
                         double *out)
{
    if (n->kind == SB_NODE_INT)
        *out = (double)n->v.i;
    else if (n->kind == SB_NODE_FLOAT)
        *out = n->v.f;
    else
        type_error(d, f, n, path);
    return 0;
}

/* SB_FT_BYTES and SB_FT_MILLI (a quantity: a string or a number), SB_FT_DURATION (a string). */
static int decode_scaled(sb_diags *d, const sb_schema_field *f, const sb_node *n, const char *path,
                         int64_t *out)
{
    int64_t v;
    int rc;
    sb_err err;
    if (f->type == SB_FT_DURATION
            ? n->kind != SB_NODE_STRING
            : (n->kind != SB_NODE_STRING && n->kind != SB_NODE_INT && n->kind != SB_NODE_FLOAT)) {
        type_error(d, f, n, path);
        return 0;
    }
    if (f->type == SB_FT_BYTES)
        rc = sb_quantity_value(n->text, &v, &err);
    else if (f->type == SB_FT_MILLI)
        rc = sb_quantity_milli(n->text, &v, &err);
    else
        rc = sb_duration_parse(n->text, &v, &err);
    if (rc != 0) {
        sb_diags_add(d, path, n->line, n->col, "%s", err.msg);
        return 0;
    }
    if (check_range(d, f, n, path, v) == 0)
        *out = v;
    return 0;
}

/* SB_FT_ENUM: the index of the value in f->enums. */
static int decode_enum(sb_diags *d, const sb_schema_field *f, const sb_node *n, const char *path,
                       int *out)
{
    if (n->kind != SB_NODE_STRING) {
        type_error(d, f, n, path);
        return 0;
    }
    for (int i = 0; f->enums[i] != NULL; i++)
        if (strcmp(f->enums[i], n->text) == 0) {
            *out = i;
            return 0;
        }
    const char *s = sb_suggest(n->text, f->enums);
    char noun[256];
    if (s != NULL)
        sb_diags_add(d, path, n->line, n->col,
                     "unknown value \"%.80s\" (did you mean \"%s\"?); must be %s", n->text, s,
                     sb_spec_ftype_noun(f, noun, sizeof noun));
    else
        sb_diags_add(d, path, n->line, n->col, "unknown value \"%.80s\"; must be %s", n->text,
                     sb_spec_ftype_noun(f, noun, sizeof noun));
    return 0;
}

/* SB_FT_LIST: an array of f->object structs, each item decoded (a non-object item is reported
 * and decoded as absent, so its defaults apply). */
static int decode_list(const sb_schema_field *f, const sb_node *n, void *obj, const char *path,
                       sb_diags *d, void *ctx)
{
    char buf[512];
    if (n->kind != SB_NODE_SEQ) {
        type_error(d, f, n, path);
        return 0;
    }
    if ((f->flags & SB_F_MIN) && (int64_t)n->n < f->min) {
        sb_diags_add(d, path, n->line, n->col, "must have at least %lld item%s", (long long)f->min,
                     f->min == 1 ? "" : "s");
        return 0;
    }
    if ((f->flags & SB_F_MAX) && (int64_t)n->n > f->max) {
        sb_diags_add(d, path, n->line, n->col, "must have at most %lld items, got %zu",
                     (long long)f->max, n->n);
        return 0;
    }
    size_t sz = f->object->size;
    void *arr = n->n ? calloc(n->n, sz) : NULL;
    if (n->n && arr == NULL)
        return -1;
    *(void **)at(obj, f->offset) = arr;
    *(size_t *)at(obj, f->count_offset) = n->n;
    for (size_t i = 0; i < n->n; i++) {
        sb_spec_path_index(buf, sizeof buf, path, i);
        const sb_node *it = n->items[i];
        if (it->kind != SB_NODE_MAP)
            sb_diags_add(d, buf, it->line, it->col, "must be an object, got %s",
                         sb_node_kind_name(it->kind));
        if (sb_schema_decode(f->object, it->kind == SB_NODE_MAP ? it : NULL, (char *)arr + i * sz,
                             buf, d, ctx) != 0)
            return -1;
    }
    return 0;
}

/* SB_FT_STRLIST: an array of strings, each checked as f's format says. */
static int decode_strlist(const sb_schema_field *f, const sb_node *n, void *obj, const char *path,
                          sb_diags *d)
{
    char buf[512];
    if (n->kind != SB_NODE_SEQ) {
        type_error(d, f, n, path);
        return 0;
    }
    char **arr = n->n ? calloc(n->n, sizeof *arr) : NULL;
    if (n->n && arr == NULL)
        return -1;
    *(char ***)at(obj, f->offset) = arr;
    *(size_t *)at(obj, f->count_offset) = n->n;
    sb_schema_field item = *f;
    item.type = SB_FT_STRING;
    for (size_t i = 0; i < n->n; i++) {
        sb_spec_path_index(buf, sizeof buf, path, i);
        if (decode_string_value(d, &item, n->items[i], buf, &arr[i]) != 0)
            return -1;
    }
    return 0;
}

/* SB_FT_STRMAP (every value a string) and SB_FT_FREEFORM: the object kept as JSON text. */
static int decode_json_object(sb_diags *d, const sb_schema_field *f, const sb_node *n,
                              const char *path, char **out)
{
    char buf[512];
    if (n->kind != SB_NODE_MAP) {
        type_error(d, f, n, path);
        return 0;
    }
    if (f->type == SB_FT_STRMAP)
        for (size_t i = 0; i < n->n; i++)
            if (n->items[i]->kind != SB_NODE_STRING) {
                char got[128];
                sb_spec_path_field(buf, sizeof buf, path, n->keys[i]->text);
                sb_diags_add(d, buf, n->items[i]->line, n->items[i]->col,
                             "must be a string, got %s (quote it)",
                             describe(n->items[i], got, sizeof got));
            }
    *out = sb_node_to_json(n);
    return *out == NULL ? -1 : 0;
}

/* Decodes node n into field f of obj (problems into d). Returns -1 only when out of memory. */
static int decode_field(const sb_schema_field *f, const sb_node *n, void *obj, const char *path,
                        sb_diags *d, void *ctx)
{
    void *p = at(obj, f->offset);
    switch (f->type) {
    case SB_FT_STRING:
        return decode_string_value(d, f, n, path, (char **)p);
    case SB_FT_INT:
        return decode_int(d, f, n, path, (int64_t *)p);
    case SB_FT_BOOL:
        return decode_bool(d, f, n, path, (bool *)p);
    case SB_FT_NUMBER:
        return decode_number(d, f, n, path, (double *)p);
    case SB_FT_BYTES:
    case SB_FT_MILLI:
    case SB_FT_DURATION:
        return decode_scaled(d, f, n, path, (int64_t *)p);
    case SB_FT_ENUM:
        return decode_enum(d, f, n, path, (int *)p);
    case SB_FT_OBJECT:
        if (n->kind != SB_NODE_MAP) {
            type_error(d, f, n, path);
            return sb_schema_decode(f->object, NULL, p, path, d, ctx);
        }
        return sb_schema_decode(f->object, n, p, path, d, ctx);
    case SB_FT_LIST:
        return decode_list(f, n, obj, path, d, ctx);
    case SB_FT_STRLIST:
        return decode_strlist(f, n, obj, path, d);
    case SB_FT_STRMAP:
    case SB_FT_FREEFORM:
        return decode_json_object(d, f, n, path, (char **)p);
    }
    return 0;
}

static int apply_default(const sb_schema_field *f, void *obj)
{
    void *p = at(obj, f->offset);
    const char *def = f->def;
    switch (f->type) {
    case SB_FT_STRING:
        *(char **)p = strdup(def);
        return *(char **)p == NULL ? -1 : 0;
    case SB_FT_INT:
        *(int64_t *)p = strtoll(def, NULL, 10);
        return 0;
    case SB_FT_BOOL:
        *(bool *)p = strcmp(def, "true") == 0;
        return 0;
    case SB_FT_NUMBER:
        *(double *)p = strtod(def, NULL);
        return 0;
    case SB_FT_BYTES:
        return sb_quantity_value(def, (int64_t *)p, NULL);
    case SB_FT_MILLI:
        return sb_quantity_milli(def, (int64_t *)p, NULL);
    case SB_FT_DURATION:
        return sb_duration_parse(def, (int64_t *)p, NULL);
    case SB_FT_ENUM:
        for (int i = 0; f->enums[i] != NULL; i++)
            if (strcmp(f->enums[i], def) == 0)
                *(int *)p = i;
        return 0;
    default:
        return 0;
    }
}

int sb_schema_decode(const sb_object_schema *s, const sb_node *node, void *obj, const char *path,
                     sb_diags *d, void *ctx)
{
    char buf[512];
    if (node != NULL && node->kind != SB_NODE_MAP)
        node = NULL;
    if (node != NULL && !s->open) {
        const char *names[64];
        size_t nn = 0;
        for (size_t i = 0; i < s->nfields && nn < 63; i++)
            names[nn++] = s->fields[i].name;
        names[nn] = NULL;
        for (size_t k = 0; k < node->n; k++) {
            const sb_node *key = node->keys[k];
            int known = 0;
            for (size_t i = 0; i < s->nfields && !known; i++)
                known = strcmp(s->fields[i].name, key->text) == 0;
            if (known)
                continue;
            sb_spec_path_field(buf, sizeof buf, path, key->text);
            const char *sugg = sb_suggest(key->text, names);
            if (sugg != NULL)
                sb_diags_add(d, buf, key->line, key->col,
                             "unknown field \"%.80s\" (did you mean \"%s\"?)", key->text, sugg);
            else
                sb_diags_add(d, buf, key->line, key->col, "unknown field \"%.80s\"", key->text);
        }
    }
    for (size_t i = 0; i < s->nfields; i++) {
        const sb_schema_field *f = &s->fields[i];
        const sb_node *child = sb_node_get(node, f->name);
        sb_spec_path_field(buf, sizeof buf, path, f->name);
        if (child != NULL && child->kind == SB_NODE_NULL)
            child = NULL;
        if (child == NULL) {
            /* an absent object's required fields are not reported again: the object's own
             * absence (or wrong type) already was, or the object is optional */
            if ((f->flags & SB_F_REQUIRED) && node != NULL)
                sb_diags_add(d, buf, node->line, node->col, "required field is missing");
            if (f->def != NULL && apply_default(f, obj) != 0)
                return -1;
            if (f->type == SB_FT_OBJECT &&
                sb_schema_decode(f->object, NULL, at(obj, f->offset), buf, d, ctx) != 0)
                return -1;
            continue;
        }
        mark_present(f, obj);
        /* the default stays when the given value is invalid (strings are left unset) */
        if (f->def != NULL && f->type != SB_FT_STRING && apply_default(f, obj) != 0)
            return -1;
        if (decode_field(f, child, obj, buf, d, ctx) != 0)
            return -1;
    }
    if (s->check != NULL)
        s->check(obj, node, path, d, ctx);
    return d->oom ? -1 : 0;
}

void sb_schema_free(const sb_object_schema *s, void *obj)
{
    for (size_t i = 0; i < s->nfields; i++) {
        const sb_schema_field *f = &s->fields[i];
        void *p = at(obj, f->offset);
        switch (f->type) {
        case SB_FT_STRING:
        case SB_FT_STRMAP:
        case SB_FT_FREEFORM:
            free(*(char **)p);
            *(char **)p = NULL;
            break;
        case SB_FT_OBJECT:
            sb_schema_free(f->object, p);
            break;
        case SB_FT_LIST: {
            size_t n = *(size_t *)at(obj, f->count_offset);
            char *arr = *(char **)p;
            for (size_t k = 0; k < n; k++)
                sb_schema_free(f->object, arr + k * f->object->size);
            free(arr);
            *(void **)p = NULL;
            *(size_t *)at(obj, f->count_offset) = 0;
            break;
        }
        case SB_FT_STRLIST: {
            size_t n = *(size_t *)at(obj, f->count_offset);
            char **arr = *(char ***)p;
            for (size_t k = 0; k < n; k++)
                free(arr[k]);
            free(arr);
            *(char ***)p = NULL;
            *(size_t *)at(obj, f->count_offset) = 0;
            break;
        }
        default:
            break;
        }
    }
}
