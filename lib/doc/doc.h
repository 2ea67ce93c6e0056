/* doc.h — a small document tree that both YAML (libyaml) and JSON (cJSON) are read into, so the
 * Pipeline decoder and validator run the same code for local files and Kubernetes API objects.
 *
 * Every node remembers its 1-based line and column in the source (0 when unknown, e.g. JSON
 * from the API server). Plain YAML scalars are resolved with the YAML 1.2 core schema (null,
 * bool, int, float, else string); quoted scalars are strings. The parser bounds its own work:
 * nesting depth, total nodes (alias expansions counted) and input size are limited, so
 * hostile input (10,000-deep nesting, alias "billion laughs" bombs) gets an error instead of
 * a stack overflow or unbounded work. Aliases share the anchored node (the tree is a DAG).
 *
 * Ownership: an sb_doc owns every node and string reachable from it (one arena); nodes are
 * valid until sb_doc_free(). Nothing in this module calls exit().
 */
#ifndef SB_DOC_DOC_H
#define SB_DOC_DOC_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum {
    SB_NODE_NULL,
    SB_NODE_BOOL,
    SB_NODE_INT,
    SB_NODE_FLOAT,
    SB_NODE_STRING,
    SB_NODE_MAP,
    SB_NODE_SEQ,
} sb_node_kind;

typedef struct sb_node sb_node;
struct sb_node {
    sb_node_kind kind;
    int line, col;    /* 1-based; 0 when unknown */
    const char *text; /* scalars: the text as written (NUL-terminated; may contain NULs) */
    size_t text_len;
    union {
        int b;
        long long i;
        double f;
    } v;
    size_t n;        /* MAP: number of pairs; SEQ: number of items */
    sb_node **keys;  /* MAP: key nodes (scalars), n of them */
    sb_node **items; /* MAP: values; SEQ: items */
    size_t weight;   /* nodes in this subtree, alias expansions counted */
    int plain;       /* YAML scalars: written without quotes or a tag (what resolution saw) */
};

typedef struct sb_doc_limits {
    size_t max_bytes; /* input size; default 8 MiB */
    int max_depth;    /* nesting of maps/sequences; default 64 */
    size_t max_nodes; /* per document, alias expansions counted; default 200,000 */
} sb_doc_limits;

/* One parsed source: zero or more documents, plus the first error if parsing stopped early
 * (documents before the error are kept, so callers can still report on them). */
typedef struct sb_doc sb_doc;

/* Parses YAML (a stream of one or more documents; JSON is YAML too). Returns NULL only when out
 * of memory; otherwise a doc whose sb_doc_error() says whether parsing failed. lim may be NULL. */
sb_doc *sb_doc_parse_yaml(const char *buf, size_t len, const sb_doc_limits *lim);

/* Parses one JSON text (cJSON) into a single document. Same error reporting as above; lines and
 * columns are 0. */
sb_doc *sb_doc_parse_json(const char *buf, size_t len, const sb_doc_limits *lim);

/* cJSON holds numbers as doubles, which cannot hold every int64: for a tree `root` that
 * cJSON_Parse made from `text`, replaces each number whose text is an integer beyond 2^53 by a
 * raw item of that text, so that cJSON_Print writes it back exactly. 0, or -1 when out of memory
 * (the tree is then still valid). */
struct cJSON;
int sb_doc_cjson_keep_ints(struct cJSON *root, const char *text);

void sb_doc_free(sb_doc *doc);

size_t sb_doc_count(const sb_doc *doc);
/* The root node of document i (may be NULL for an empty document such as a lone "---"). */
const sb_node *sb_doc_root(const sb_doc *doc, size_t i);
/* Line of the "---" (or first token) that starts document i. */
int sb_doc_start_line(const sb_doc *doc, size_t i);

/* NULL when the whole input parsed; else the message, with line and col set (0 if unknown). */
const char *sb_doc_error(const sb_doc *doc, int *line, int *col);

/* Looks up a key in a MAP node (NULL if absent or if m is not a map). */
const sb_node *sb_node_get(const sb_node *m, const char *key);

/* "a mapping", "a sequence", "a string", "an integer", ... for messages. */
const char *sb_node_kind_name(sb_node_kind k);

/* Serializes a node as compact JSON into a malloc'd NUL-terminated string (caller frees).
 * Returns NULL when out of memory. Shared (aliased) subtrees are written out in full. */
char *sb_node_to_json(const sb_node *n);

#endif
