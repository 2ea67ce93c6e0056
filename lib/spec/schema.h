/* schema.h — table-driven decoding of a document tree (doc/doc.h) into C structs.
 *
 * A schema is a table of fields per object: name, type, constraints, default and where the
 * value lives in the struct. One generic decoder walks a node against the table, type-checks,
 * applies constraints and defaults, reports unknown fields (with "did you mean"), missing
 * required fields and wrong types into an sb_diags list, and calls an optional per-object hook
 * for cross-field rules. Because YAML files and JSON objects from the API server both become
 * document trees, they share every default and every rule.
 *
 * The same tables are the C side of the CRD consistency test (api/crd/ must declare the same
 * fields, types, required lists and enums).
 *
 * Memory: strings (SB_FT_STRING, _FREEFORM, _STRMAP), string lists and object lists written
 * into a struct are malloc'd and owned by that struct; sb_schema_free() releases them.
 */
#ifndef SB_SPEC_SCHEMA_H
#define SB_SPEC_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "doc/doc.h"
#include "spec/diag.h"

typedef enum {
    SB_FT_STRING,   /* char * */
    SB_FT_INT,      /* int64_t; min/max apply */
    SB_FT_BOOL,     /* bool */
    SB_FT_NUMBER,   /* double (integer or decimal) */
    SB_FT_BYTES,    /* int64_t bytes from a quantity ("64Mi"); min/max apply */
    SB_FT_MILLI,    /* int64_t milli-units from a quantity ("500m" -> 500); min/max apply */
    SB_FT_DURATION, /* int64_t nanoseconds from a Go duration string; min/max apply */
    SB_FT_ENUM,     /* int: index into enums[] */
    SB_FT_OBJECT,   /* embedded struct described by `object` */
    SB_FT_LIST,     /* array of structs (object->size each) + size_t count at count_offset */
    SB_FT_STRLIST,  /* char ** + size_t count at count_offset */
    SB_FT_STRMAP,   /* char *: a JSON object of string values */
    SB_FT_FREEFORM, /* char *: any JSON object, kept as JSON text */
} sb_ftype;

/* String formats checked by the decoder (and declared as patterns in the CRD). */
typedef enum {
    SB_SF_NONE = 0,
    SB_SF_NONEMPTY,
    SB_SF_DNS_LABEL,     /* RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63 */
    SB_SF_DNS_SUBDOMAIN, /* RFC 1123 subdomain, <= 63 here because it becomes a label value */
} sb_strfmt;

enum {
    SB_F_REQUIRED = 1u << 0,
    SB_F_MIN = 1u << 1, /* min applies */
    SB_F_MAX = 1u << 2, /* max applies */
};

typedef struct sb_schema_field sb_schema_field;
typedef struct sb_object_schema sb_object_schema;

/* Cross-field rule hook: obj is the decoded struct, node its map node (NULL when absent). */
typedef void (*sb_object_check_fn)(void *obj, const sb_node *node, const char *path, sb_diags *d,
                                   void *ctx);

struct sb_object_schema {
    const char *name; /* for docs and messages: "Stage" */
    const sb_schema_field *fields;
    size_t nfields;
    size_t size; /* sizeof the struct (for lists) */
    int open;    /* unknown fields allowed (e.g. metadata) */
    sb_object_check_fn check;
};

struct sb_schema_field {
    const char *name;
    sb_ftype type;
    unsigned flags;
    size_t offset;
    size_t present_offset; /* offsetof(bool)+1 of a "was given" flag, or 0 */
    size_t count_offset;   /* SB_FT_LIST / SB_FT_STRLIST */
    const sb_object_schema *object;
    const char *const *enums; /* NULL-terminated */
    int64_t min, max;
    const char *def; /* default as YAML text, or NULL */
    sb_strfmt format;
};

#define SB_PRESENT(type, member) (offsetof(type, member) + 1)

/* Decodes node (NULL = absent: defaults only) into obj. Problems go to d. Returns -1 only when
 * out of memory. path is the field path of node ("spec"). ctx is passed to the hooks. */
int sb_schema_decode(const sb_object_schema *s, const sb_node *node, void *obj, const char *path,
                     sb_diags *d, void *ctx);

/* Frees what sb_schema_decode allocated inside obj (not obj itself). */
void sb_schema_free(const sb_object_schema *s, void *obj);

/* "a positive integer", "a boolean", "a quantity such as 64Mi", ... */
const char *sb_spec_ftype_noun(const sb_schema_field *f, char *buf, size_t len);

/* Format checks shared with hooks. */
int sb_spec_is_dns_label(const char *s);
int sb_spec_is_dns_subdomain(const char *s);

/* Appends ".name" or "[i]" to a path into buf. */
const char *sb_spec_path_field(char *buf, size_t len, const char *path, const char *name);
const char *sb_spec_path_index(char *buf, size_t len, const char *path, size_t i);

#endif
