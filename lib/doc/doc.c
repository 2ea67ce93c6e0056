/* doc.c — the document tree YAML and JSON are both read into (see doc.h): a libyaml event parser
 * (anchors and aliases, duplicate keys, plain scalars resolved to their types, size limits) and a
 * cJSON converter, each node with its line and column for error messages. Owns every node and
 * string of a document, in one arena freed by sb_doc_free. */

#include "doc/doc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ---- arena ------------------------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_block;

struct sb_doc {
    arena_block *arena;
    sb_node **roots;
    int *start_lines;
    size_t nroots, cap_roots;
    char *error;
    int err_line, err_col;
};

static void *arena_alloc(sb_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    arena_block *b = d->arena;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > 64 * 1024 ? n : 64 * 1024;
        arena_block *nb = malloc(sizeof *nb + cap);
        if (nb == NULL)
            return NULL;
        nb->next = d->arena;
        nb->used = 0;
        nb->cap = cap;
        d->arena = nb;
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static char *arena_strdup(sb_doc *d, const char *s, size_t n)
{
    char *p = arena_alloc(d, n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static sb_node *node_new(sb_doc *d, sb_node_kind k, int line, int col)
{
    sb_node *n = arena_alloc(d, sizeof *n);
    if (n != NULL) {
        memset(n, 0, sizeof *n);
        n->kind = k;
        n->line = line;
        n->col = col;
        n->weight = 1;
        n->text = "";
    }
    return n;
}

static void doc_set_error(sb_doc *d, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void doc_set_error(sb_doc *d, int line, int col, const char *fmt, ...)
{
    if (d->error != NULL)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    d->error = strdup(buf);
    if (d->error == NULL)
        d->error = (char *)"out of memory"; /* never freed: see sb_doc_free */
    d->err_line = line;
    d->err_col = col;
}

static sb_doc *doc_new(void)
{
    return calloc(1, sizeof(sb_doc));
}

void sb_doc_free(sb_doc *d)
{
    if (d == NULL)
        return;
    for (arena_block *b = d->arena; b != NULL;) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(d->roots);
    free(d->start_lines);
    if (d->error != NULL && strcmp(d->error, "out of memory") != 0)
        free(d->error);
    free(d);
}

static int doc_add_root(sb_doc *d, sb_node *root, int start_line)
{
    if (d->nroots == d->cap_roots) {
        size_t cap = d->cap_roots ? d->cap_roots * 2 : 4;
        sb_node **r = realloc(d->roots, cap * sizeof *r);
        if (r == NULL)
            return -1;
        d->roots = r;
        int *l = realloc(d->start_lines, cap * sizeof *l);
        if (l == NULL)
            return -1;
        d->start_lines = l;
        d->cap_roots = cap;
    }
    d->roots[d->nroots] = root;
    d->start_lines[d->nroots] = start_line;
    d->nroots++;
    return 0;
}

size_t sb_doc_count(const sb_doc *d)
{
    return d->nroots;
}

const sb_node *sb_doc_root(const sb_doc *d, size_t i)
{
    return i < d->nroots ? d->roots[i] : NULL;
}

int sb_doc_start_line(const sb_doc *d, size_t i)
{
    return i < d->nroots ? d->start_lines[i] : 0;
}

const char *sb_doc_error(const sb_doc *d, int *line, int *col)
{
    if (line != NULL)
        *line = d->err_line;
    if (col != NULL)
        *col = d->err_col;
    return d->error;
}

static void limits_fill(sb_doc_limits *out, const sb_doc_limits *in)
{
    out->max_bytes = in && in->max_bytes ? in->max_bytes : 8u << 20;
    out->max_depth = in && in->max_depth ? in->max_depth : 64;
    out->max_nodes = in && in->max_nodes ? in->max_nodes : 200000;
}

const sb_node *sb_node_get(const sb_node *m, const char *key)
{
    if (m == NULL || m->kind != SB_NODE_MAP)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < m->n; i++)
        if (m->keys[i]->text_len == kl && memcmp(m->keys[i]->text, key, kl) == 0)
            return m->items[i];
    return NULL;
}

const char *sb_node_kind_name(sb_node_kind k)
{
    switch (k) {
    case SB_NODE_NULL:
        return "null";
    case SB_NODE_BOOL:
        return "a boolean";
    case SB_NODE_INT:
        return "an integer";
    case SB_NODE_FLOAT:
        return "a number";
    case SB_NODE_STRING:
        return "a string";
    case SB_NODE_MAP:
        return "an object";
    case SB_NODE_SEQ:
        return "a list";
    }
    return "?";
}

/* ---- YAML 1.2 core schema resolution of plain scalars -------------------------------------- */

static int all_digits(const char *s, size_t n, int base)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = base == 8 ? (c >= '0' && c <= '7')
                 : base == 16
                     ? ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
                     : (c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

static int is_float_text(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    size_t int_digits = 0, frac_digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        i++;
        int_digits++;
    }
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            i++;
            frac_digits++;
        }
    }
    if (int_digits + frac_digits == 0)
        return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t e = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            i++;
            e++;
        }
        if (e == 0)
            return 0;
    }
    return i == n;
}

static void resolve_plain(sb_node *nd)
{
    const char *s = nd->text;
    size_t n = nd->text_len;
    static const char *nulls[] = {"", "~", "null", "Null", "NULL"};
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
        if (strlen(nulls[i]) == n && memcmp(s, nulls[i], n) == 0) {
            nd->kind = SB_NODE_NULL;
            return;
        }
    if ((n == 4 && (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))) ||
        (n == 5 && (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")))) {
        nd->kind = SB_NODE_BOOL;
        nd->v.b = s[0] == 't' || s[0] == 'T';
        return;
    }
    int base = 0;
    size_t skip = 0;
    if (n > 2 && s[0] == '0' && s[1] == 'o' && all_digits(s + 2, n - 2, 8)) {
        base = 8;
        skip = 2;
    } else if (n > 2 && s[0] == '0' && s[1] == 'x' && all_digits(s + 2, n - 2, 16)) {
        base = 16;
        skip = 2;
    } else if (all_digits(s + (n && (s[0] == '-' || s[0] == '+')),
                          n - (n && (s[0] == '-' || s[0] == '+')), 10)) {
        base = 10;
    }
    if (base != 0) {
        errno = 0;
        char *end;
        long long v = strtoll(s + skip, &end, base);
        if (errno == 0 && end == s + n) {
            nd->kind = SB_NODE_INT;
            nd->v.i = v;
            return;
        }
        /* out of range for int64: keep it as a number */
        nd->kind = SB_NODE_FLOAT;
        nd->v.f = strtod(s, NULL);
        return;
    }
    if (is_float_text(s, n)) {
        nd->kind = SB_NODE_FLOAT;
        nd->v.f = strtod(s, NULL);
        return;
    }
    const char *specials[] = {".inf",  ".Inf",  ".INF",  "+.inf", "+.Inf", "+.INF",
                              "-.inf", "-.Inf", "-.INF", ".nan",  ".NaN",  ".NAN"};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++)
        if (strlen(specials[i]) == n && memcmp(s, specials[i], n) == 0) {
            nd->kind = SB_NODE_FLOAT;
            nd->v.f = strstr(s, "nan") || strstr(s, "NaN") || strstr(s, "NAN") ? NAN
                      : s[0] == '-'                                            ? -INFINITY
                                                                               : INFINITY;
            return;
        }
    nd->kind = SB_NODE_STRING;
}

/* ---- YAML parsing ------------------------------------------------------------------------ */

typedef struct {
    sb_node *node;
    sb_node **keys, **items;
    size_t n, cap;
    int want_key; /* MAP: next child is a key */
    char *anchor; /* malloc'd, or NULL */
} frame;

typedef struct {
    char *name;
    sb_node *node;
} anchor_slot;

typedef struct {
    anchor_slot *slots;
    size_t cap, used;
} anchor_table;

static size_t hash_str(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void anchors_clear(anchor_table *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->slots[i].name);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static int anchors_put(anchor_table *t, const char *name, sb_node *node)
{
    if ((t->used + 1) * 2 > t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        anchor_slot *ns = calloc(ncap, sizeof *ns);
        if (ns == NULL)
            return -1;
        for (size_t i = 0; i < t->cap; i++) {
            if (t->slots[i].name == NULL)
                continue;
            size_t j = hash_str(t->slots[i].name) & (ncap - 1);
            while (ns[j].name != NULL)
                j = (j + 1) & (ncap - 1);
            ns[j] = t->slots[i];
        }
        free(t->slots);
        t->slots = ns;
        t->cap = ncap;
    }
    size_t j = hash_str(name) & (t->cap - 1);
    while (t->slots[j].name != NULL) {
        if (strcmp(t->slots[j].name, name) == 0) { /* YAML allows redefining an anchor */
            t->slots[j].node = node;
            return 0;
        }
        j = (j + 1) & (t->cap - 1);
    }
    t->slots[j].name = strdup(name);
    if (t->slots[j].name == NULL)
        return -1;
    t->slots[j].node = node;
    t->used++;
    return 0;
}

static sb_node *anchors_get(const anchor_table *t, const char *name)
{
    if (t->cap == 0)
        return NULL;
    size_t j = hash_str(name) & (t->cap - 1);
    while (t->slots[j].name != NULL) {
        if (strcmp(t->slots[j].name, name) == 0)
            return t->slots[j].node;
        j = (j + 1) & (t->cap - 1);
    }
    return NULL;
}

typedef struct {
    sb_doc *doc;
    sb_doc_limits lim;
    frame *stack;
    int depth;
    anchor_table anchors;
    size_t weight; /* nodes in the current document, expansions counted */
    sb_node *root;
} yparse;

static int frame_push_child(yparse *p, frame *f, sb_node *child)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        sb_node **ni = realloc(f->items, cap * sizeof *ni);
        if (ni == NULL)
            return -1;
        f->items = ni;
        if (f->node->kind == SB_NODE_MAP) {
            sb_node **nk = realloc(f->keys, cap * sizeof *nk);
            if (nk == NULL)
                return -1;
            f->keys = nk;
        }
        f->cap = cap;
    }
    (void)p;
    f->items[f->n++] = child;
    return 0;
}

/* Attaches a finished node to its parent (or makes it the document root). */
static int attach(yparse *p, sb_node *nd)
{
    if (p->depth == 0) {
        p->root = nd;
        return 0;
    }
    frame *f = &p->stack[p->depth - 1];
    if (f->node->kind == SB_NODE_SEQ)
        return frame_push_child(p, f, nd);
    if (f->want_key) {
        if (nd->kind == SB_NODE_MAP || nd->kind == SB_NODE_SEQ) {
            doc_set_error(p->doc, nd->line, nd->col, "a mapping key must be a scalar, not %s",
                          sb_node_kind_name(nd->kind));
            return -1;
        }
        if (frame_push_child(p, f, NULL) != 0)
            return -1;
        f->keys[f->n - 1] = nd;
        f->want_key = 0;
    } else {
        f->items[f->n - 1] = nd;
        f->want_key = 1;
    }
    return 0;
}

static int cmp_key_idx(const void *a, const void *b, void *keys_)
{
    sb_node **keys = keys_;
    const sb_node *x = keys[*(const size_t *)a], *y = keys[*(const size_t *)b];
    size_t n = x->text_len < y->text_len ? x->text_len : y->text_len;
    int c = memcmp(x->text, y->text, n);
    if (c != 0)
        return c;
    if (x->text_len != y->text_len)
        return x->text_len < y->text_len ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* Whether keys[0..n) holds a key twice: 1 with *first and *again (the earlier and a later
 * occurrence of the smallest such key), 0 when not, -1 when out of memory. One sort, so a map of
 * a hundred thousand keys (a hostile manifest) costs milliseconds, not a minute. */
static int find_dup_key(sb_node **keys, size_t n, const sb_node **first, const sb_node **again)
{
    if (n < 2)
        return 0;
    size_t *idx = malloc(n * sizeof *idx);
    if (idx == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof *idx, cmp_key_idx, keys);
    int dup = 0;
    for (size_t i = 1; i < n && !dup; i++) {
        const sb_node *a = keys[idx[i - 1]], *b = keys[idx[i]];
        if (a->text_len == b->text_len && memcmp(a->text, b->text, a->text_len) == 0) {
            *first = a;
            *again = b;
            dup = 1;
        }
    }
    free(idx);
    return dup;
}

/* Finishes a collection frame: copies children into the arena, checks duplicate keys. */
static int frame_close(yparse *p, frame *f)
{
    sb_node *nd = f->node;
    nd->n = f->n;
    if (f->n > 0) {
        nd->items = arena_alloc(p->doc, f->n * sizeof *nd->items);
        if (nd->items == NULL)
            return -1;
        memcpy(nd->items, f->items, f->n * sizeof *nd->items);
        if (nd->kind == SB_NODE_MAP) {
            nd->keys = arena_alloc(p->doc, f->n * sizeof *nd->keys);
            if (nd->keys == NULL)
                return -1;
            memcpy(nd->keys, f->keys, f->n * sizeof *nd->keys);
        }
    }
    size_t w = 1;
    for (size_t i = 0; i < f->n; i++) {
        w += f->items[i] ? f->items[i]->weight : 0;
        if (nd->kind == SB_NODE_MAP)
            w += 1;
    }
    nd->weight = w;
    if (nd->kind == SB_NODE_MAP) {
        const sb_node *a, *b;
        int dup = find_dup_key(nd->keys, f->n, &a, &b);
        if (dup < 0)
            return -1;
        if (dup) {
            doc_set_error(p->doc, b->line, b->col, "duplicate key \"%s\" (first at line %d)",
                          b->text, a->line);
            return -1;
        }
    }
    if (f->anchor != NULL && anchors_put(&p->anchors, f->anchor, nd) != 0)
        return -1;
    return 0;
}

static void frame_free(frame *f)
{
    free(f->keys);
    free(f->items);
    free(f->anchor);
    memset(f, 0, sizeof *f);
}

static int count_weight(yparse *p, size_t w, int line, int col)
{
    p->weight += w;
    if (p->weight > p->lim.max_nodes) {
        doc_set_error(p->doc, line, col,
                      "document has more than %zu nodes (counting alias expansions); refusing "
                      "to expand it further",
                      p->lim.max_nodes);
        return -1;
    }
    return 0;
}

static int on_event(yparse *p, const yaml_event_t *ev, int *doc_start_line)
{
    int line = (int)ev->start_mark.line + 1, col = (int)ev->start_mark.column + 1;
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        p->root = NULL;
        p->weight = 0;
        anchors_clear(&p->anchors);
        *doc_start_line = line;
        return 0;
    case YAML_DOCUMENT_END_EVENT:
        if (doc_add_root(p->doc, p->root, *doc_start_line) != 0)
            return -1;
        anchors_clear(&p->anchors);
        return 0;
    case YAML_SCALAR_EVENT: {
        if (count_weight(p, 1, line, col) != 0)
            return -1;
        sb_node *nd = node_new(p->doc, SB_NODE_STRING, line, col);
        if (nd == NULL)
            return -1;
        nd->text =
            arena_strdup(p->doc, (const char *)ev->data.scalar.value, ev->data.scalar.length);
        if (nd->text == NULL)
            return -1;
        nd->text_len = ev->data.scalar.length;
        const char *tag = (const char *)ev->data.scalar.tag;
        if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            (tag == NULL || strcmp(tag, "!") != 0) &&
            (tag == NULL || strcmp(tag, YAML_STR_TAG) != 0)) {
            nd->plain = 1;
            resolve_plain(nd);
        }
        if (ev->data.scalar.anchor != NULL &&
            anchors_put(&p->anchors, (const char *)ev->data.scalar.anchor, nd) != 0)
            return -1;
        return attach(p, nd);
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        if (p->depth >= p->lim.max_depth) {
            doc_set_error(p->doc, line, col, "nesting is deeper than %d levels", p->lim.max_depth);
            return -1;
        }
        if (count_weight(p, 1, line, col) != 0)
            return -1;
        int is_map = ev->type == YAML_MAPPING_START_EVENT;
        sb_node *nd = node_new(p->doc, is_map ? SB_NODE_MAP : SB_NODE_SEQ, line, col);
        if (nd == NULL)
            return -1;
        frame *f = &p->stack[p->depth++];
        memset(f, 0, sizeof *f);
        f->node = nd;
        f->want_key = is_map;
        const yaml_char_t *anchor =
            is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
        if (anchor != NULL) {
            f->anchor = strdup((const char *)anchor);
            if (f->anchor == NULL)
                return -1;
        }
        return 0;
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        frame *f = &p->stack[p->depth - 1];
        int rc = frame_close(p, f);
        sb_node *nd = f->node;
        frame_free(f);
        p->depth--;
        return rc != 0 ? -1 : attach(p, nd);
    }
    case YAML_ALIAS_EVENT: {
        const char *name = (const char *)ev->data.alias.anchor;
        sb_node *target = anchors_get(&p->anchors, name);
        if (target == NULL) {
            doc_set_error(p->doc, line, col, "unknown alias \"*%s\" (no finished anchor \"&%s\")",
                          name, name);
            return -1;
        }
        if (count_weight(p, target->weight, line, col) != 0)
            return -1;
        return attach(p, target);
    }
    default:
        return 0;
    }
}

sb_doc *sb_doc_parse_yaml(const char *buf, size_t len, const sb_doc_limits *lim_in)
{
    sb_doc *d = doc_new();
    if (d == NULL)
        return NULL;
    yparse p = {.doc = d};
    limits_fill(&p.lim, lim_in);
    if (len > p.lim.max_bytes) {
        doc_set_error(d, 0, 0, "input is %zu bytes, more than the limit of %zu bytes", len,
                      p.lim.max_bytes);
        return d;
    }
    p.stack = calloc((size_t)p.lim.max_depth, sizeof *p.stack);
    if (p.stack == NULL) {
        sb_doc_free(d);
        return NULL;
    }
    yaml_parser_t yp;
    if (!yaml_parser_initialize(&yp)) {
        free(p.stack);
        sb_doc_free(d);
        return NULL;
    }
    yaml_parser_set_input_string(&yp, (const unsigned char *)buf, len);
    int doc_start = 1, done = 0;
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&yp, &ev)) {
            const yaml_mark_t *m = yp.problem_mark.line || yp.problem_mark.column
                                       ? &yp.problem_mark
                                       : &yp.context_mark;
            if (yp.problem_mark.index < len && buf[yp.problem_mark.index] == '\t')
                doc_set_error(d, (int)m->line + 1, (int)m->column + 1,
                              "a tab character here: YAML indentation must use spaces, not tabs");
            else if (yp.context != NULL)
                doc_set_error(d, (int)m->line + 1, (int)m->column + 1, "%s %s",
                              yp.problem ? yp.problem : "invalid YAML", yp.context);
            else
                doc_set_error(d, (int)m->line + 1, (int)m->column + 1, "%s",
                              yp.problem ? yp.problem : "invalid YAML");
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        int rc = on_event(&p, &ev, &doc_start);
        yaml_event_delete(&ev);
        if (rc != 0) {
            doc_set_error(d, 0, 0, "out of memory");
            break;
        }
    }
    while (p.depth > 0)
        frame_free(&p.stack[--p.depth]);
    anchors_clear(&p.anchors);
    free(p.stack);
    yaml_parser_delete(&yp);
    return d;
}

/* ---- JSON -------------------------------------------------------------------------------- */

/* cJSON keeps numbers only as doubles, so an integer beyond 2^53 would lose its last digits (a
 * filter value 4611686018427387905 would arrive at the worker as 4611686018427387904). The
 * numbers' texts, taken in document order -- the order from_cjson visits them: cJSON keeps
 * members and elements in order --, give the exact integers. */
typedef struct {
    const char *p;
    size_t len, pos;
} num_cursor;

/* The next number token of the document (outside strings); 0 when there is none. */
static int next_number(num_cursor *c, const char **s, size_t *n)
{
    const char *p = c->p;
    size_t i = c->pos;
    while (i < c->len) {
        char ch = p[i];
        if (ch == '"') {
            for (i++; i < c->len && p[i] != '"'; i++)
                if (p[i] == '\\')
                    i++;
            i++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t st = i;
            while (i < c->len && (p[i] == '-' || p[i] == '+' || p[i] == '.' || p[i] == 'e' ||
                                  p[i] == 'E' || (p[i] >= '0' && p[i] <= '9')))
                i++;
            *s = p + st;
            *n = i - st;
            c->pos = i;
            return 1;
        } else {
            i++;
        }
    }
    c->pos = i;
    return 0;
}

/* An integer token that fits int64, exactly; 0 when the text is not one. */
static int exact_int(const char *s, size_t n, long long *v)
{
    size_t k = n > 0 && s[0] == '-' ? 1 : 0;
    if (n == k || n >= 32)
        return 0;
    for (size_t i = k; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    char tmp[32];
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    errno = 0;
    char *end;
    *v = strtoll(tmp, &end, 10);
    return errno == 0 && end == tmp + n;
}

static int keep_ints(cJSON *parent, num_cursor *nums)
{
    for (cJSON *c = parent->child, *next; c != NULL; c = next) {
        next = c->next;
        if (cJSON_IsNumber(c)) {
            const char *ns;
            size_t nn;
            long long iv;
            if (next_number(nums, &ns, &nn) && exact_int(ns, nn, &iv) &&
                (iv > 9007199254740992LL || iv < -9007199254740992LL)) {
                char tmp[32];
                snprintf(tmp, sizeof tmp, "%lld", iv);
                cJSON *raw = cJSON_CreateRaw(tmp);
                if (raw == NULL)
                    return -1;
                raw->string = c->string; /* the member's key moves to the new item */
                c->string = NULL;
                cJSON_ReplaceItemViaPointer(parent, c, raw);
            }
        } else if ((cJSON_IsArray(c) || cJSON_IsObject(c)) && keep_ints(c, nums) != 0) {
            return -1;
        }
    }
    return 0;
}

int sb_doc_cjson_keep_ints(cJSON *root, const char *text)
{
    num_cursor nums = {text, strlen(text), 0};
    if (root == NULL || !(cJSON_IsArray(root) || cJSON_IsObject(root)))
        return 0; /* a lone number keeps its double */
    return keep_ints(root, &nums);
}

static sb_node *from_cjson(sb_doc *d, const cJSON *j, int depth, const sb_doc_limits *lim,
                           size_t *count, num_cursor *nums)
{
    if (depth > lim->max_depth) {
        doc_set_error(d, 0, 0, "nesting is deeper than %d levels", lim->max_depth);
        return NULL;
    }
    if (++*count > lim->max_nodes) {
        doc_set_error(d, 0, 0, "document has more than %zu nodes", lim->max_nodes);
        return NULL;
    }
    sb_node *nd = node_new(d, SB_NODE_NULL, 0, 0);
    if (nd == NULL)
        return NULL;
    if (cJSON_IsBool(j)) {
        nd->kind = SB_NODE_BOOL;
        nd->v.b = cJSON_IsTrue(j);
        nd->text = nd->v.b ? "true" : "false";
    } else if (cJSON_IsNumber(j)) {
        char tmp[64];
        double v = j->valuedouble;
        const char *ns;
        size_t nn;
        long long iv;
        if (next_number(nums, &ns, &nn) && exact_int(ns, nn, &iv)) {
            nd->kind = SB_NODE_INT;
            nd->v.i = iv;
            snprintf(tmp, sizeof tmp, "%lld", nd->v.i);
        } else if (v == floor(v) && fabs(v) < 9007199254740992.0) {
            nd->kind = SB_NODE_INT;
            nd->v.i = (long long)v;
            snprintf(tmp, sizeof tmp, "%lld", nd->v.i);
        } else {
            nd->kind = SB_NODE_FLOAT;
            nd->v.f = v;
            snprintf(tmp, sizeof tmp, "%.17g", v);
        }
        nd->text_len = strlen(tmp);
        nd->text = arena_strdup(d, tmp, nd->text_len);
    } else if (cJSON_IsString(j)) {
        nd->kind = SB_NODE_STRING;
        nd->text_len = strlen(j->valuestring);
        nd->text = arena_strdup(d, j->valuestring, nd->text_len);
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        int is_map = cJSON_IsObject(j);
        nd->kind = is_map ? SB_NODE_MAP : SB_NODE_SEQ;
        size_t n = (size_t)cJSON_GetArraySize(j);
        nd->n = n;
        if (n > 0) {
            nd->items = arena_alloc(d, n * sizeof *nd->items);
            if (nd->items == NULL)
                return NULL;
            if (is_map && (nd->keys = arena_alloc(d, n * sizeof *nd->keys)) == NULL)
                return NULL;
        }
        size_t i = 0;
        for (const cJSON *c = j->child; c != NULL; c = c->next, i++) {
            if (is_map) {
                sb_node *k = node_new(d, SB_NODE_STRING, 0, 0);
                if (k == NULL)
                    return NULL;
                k->text_len = strlen(c->string);
                k->text = arena_strdup(d, c->string, k->text_len);
                if (k->text == NULL)
                    return NULL;
                nd->keys[i] = k;
            }
            nd->items[i] = from_cjson(d, c, depth + 1, lim, count, nums);
            if (nd->items[i] == NULL)
                return NULL;
            nd->weight += nd->items[i]->weight + (is_map ? 1 : 0);
        }
        const sb_node *a, *b;
        int dup = is_map ? find_dup_key(nd->keys, n, &a, &b) : 0;
        if (dup < 0)
            return NULL;
        if (dup) {
            doc_set_error(d, 0, 0, "duplicate key \"%s\"", b->text);
            return NULL;
        }
    }
    if (nd->text == NULL)
        return NULL;
    return nd;
}

sb_doc *sb_doc_parse_json(const char *buf, size_t len, const sb_doc_limits *lim_in)
{
    sb_doc *d = doc_new();
    if (d == NULL)
        return NULL;
    sb_doc_limits lim;
    limits_fill(&lim, lim_in);
    if (len > lim.max_bytes) {
        doc_set_error(d, 0, 0, "input is %zu bytes, more than the limit of %zu bytes", len,
                      lim.max_bytes);
        return d;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (j == NULL) {
        const char *at = end ? end : cJSON_GetErrorPtr();
        int line = 1, col = 1;
        if (at != NULL && at >= buf && at <= buf + len) {
            for (const char *c = buf; c < at; c++) {
                if (*c == '\n') {
                    line++;
                    col = 1;
                } else {
                    col++;
                }
            }
        } else {
            line = col = 0;
        }
        doc_set_error(d, line, col, "invalid JSON");
        return d;
    }
    size_t count = 0;
    num_cursor nums = {buf, end != NULL && end >= buf ? (size_t)(end - buf) : len, 0};
    sb_node *root = from_cjson(d, j, 0, &lim, &count, &nums);
    cJSON_Delete(j);
    if (root != NULL && doc_add_root(d, root, 1) != 0)
        doc_set_error(d, 0, 0, "out of memory");
    else if (root == NULL)
        doc_set_error(d, 0, 0, "out of memory");
    return d;
}

/* ---- JSON output ------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (nb == NULL) {
            b->oom = 1;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

static void put_json_string(sbuf *b, const char *s, size_t n)
{
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)&s[i], 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void put_node(sbuf *b, const sb_node *n)
{
    char tmp[64];
    if (n == NULL) {
        sb_put(b, "null", 4);
        return;
    }
    switch (n->kind) {
    case SB_NODE_NULL:
        sb_put(b, "null", 4);
        break;
    case SB_NODE_BOOL:
        sb_put(b, n->v.b ? "true" : "false", n->v.b ? 4 : 5);
        break;
    case SB_NODE_INT:
        snprintf(tmp, sizeof tmp, "%lld", n->v.i);
        sb_put(b, tmp, strlen(tmp));
        break;
    case SB_NODE_FLOAT:
        if (isfinite(n->v.f)) {
            snprintf(tmp, sizeof tmp, "%.17g", n->v.f);
            sb_put(b, tmp, strlen(tmp));
        } else {
            sb_put(b, "null", 4);
        }
        break;
    case SB_NODE_STRING:
        put_json_string(b, n->text, n->text_len);
        break;
    case SB_NODE_SEQ:
    case SB_NODE_MAP:
        sb_put(b, n->kind == SB_NODE_MAP ? "{" : "[", 1);
        for (size_t i = 0; i < n->n; i++) {
            if (i)
                sb_put(b, ",", 1);
            if (n->kind == SB_NODE_MAP) {
                put_json_string(b, n->keys[i]->text, n->keys[i]->text_len);
                sb_put(b, ":", 1);
            }
            put_node(b, n->items[i]);
        }
        sb_put(b, n->kind == SB_NODE_MAP ? "}" : "]", 1);
        break;
    }
}

char *sb_node_to_json(const sb_node *n)
{
    sbuf b = {0};
    put_node(&b, n);
    if (b.oom) {
        free(b.buf);
        return NULL;
    }
    return b.buf;
}
