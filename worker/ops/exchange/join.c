/* join.c — the join's hash table (xjoin, xchg.h) and the broadcast join op (issue 41): right
 * records are added under their keys, then left records probe them. The op loads the right source
 * whole when its state is made (once per worker and stage while the state cache keeps it,
 * worker/ops/statecache.h); the exchanged join's halves (exchange.c) add a bucket's right rows
 * instead. Keys compare as the exchange's do (keys.c). A matched row is the left record with the
 * right record's fields appended (the `on` fields once, the left's; a right field whose name the
 * left record has too as right_<name>); `how: left` keeps unmatched rows as they are. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "io/reader.h"
#include "io/split.h"
#include "spec/join.h"
#include "spec/quantity.h"
#include "worker/ops/exchange/xchg.h"
#include "worker/ops/impls.h"

#define NO_REC UINT32_MAX
#define PREFIX "right_"

typedef struct {
    size_t name_off, name_len, val_off, val_len; /* raw text in jstate.text (name quoted) */
    uint32_t id;                                 /* the name's entry in jstate.names */
} jmem;

typedef struct {
    uint32_t first_mem, nmem, next; /* next: the key's next right record, NO_REC at the end */
} jrec;

struct xjoin {
    cJSON *root;
    xkeys on;      /* the key fields (names point into root) */
    int keep_left; /* how: left */
    xset keys;     /* the right side's keys; per entry, its records head[e] .. tail[e] */
    uint32_t *head, *tail;
    size_t cap_ent;
    jrec *recs;
    size_t nrecs, caprecs;
    jmem *mems;
    size_t nmems, capmems;
    xbuf text;            /* the right records' members (not the key fields), raw */
    xset names;           /* the right side's field names (decoded), key fields left out */
    sb_op_json_key *scan; /* a left row's scan: the key fields, the names, PREFIX + names */
    size_t nscan;
    char **prefixed;
    sb_op_json_span *found;
    xbuf kb, ob, nb;
    const char *uri;
    sb_err load_err; /* the loader's error (the reader wraps a refusing callback's) */
};
typedef xjoin jstate;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, c * elem);
    if (n == NULL)
        return -1;
    *p = n;
    *cap = c;
    return 0;
}

static const char *ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* 1 when the decoded name n[0..len) is a key field. */
static int is_key_field(const jstate *st, const char *n, size_t len)
{
    for (size_t i = 0; i < st->on.n; i++)
        if (st->on.k[i].len == len && memcmp(st->on.k[i].name, n, len) == 0)
            return 1;
    return 0;
}

/* Records the members of right record r[0..len) (a JSON object a scan accepted) but the keys. */
static int add_members(jstate *st, jrec *rec, const char *r, size_t len, sb_err *err)
{
    const char *e = r + len, *p = ws(r, e) + 1; /* past '{' */
    for (p = ws(p, e); p < e && *p != '}'; p = ws(p, e)) {
        const char *ns = p, *ne = xjson_skip(p, e);
        const char *vs = ws(ws(ne, e) + 1, e), *ve = xjson_skip(vs, e); /* past ':' */
        p = ws(ve, e);
        p += p < e && *p == ',';
        if (xbuf_reserve(&st->nb, (size_t)(ne - ns)) != 0)
            return sb_err_set(err, "out of memory");
        size_t dn = sb_op_json_unescape(ns, (size_t)(ne - ns), st->nb.p, st->nb.cap);
        if (is_key_field(st, st->nb.p, dn))
            continue;
        int added;
        long id = xset_find_add(&st->names, st->nb.p, dn, xhash(st->nb.p, dn, 1), &added);
        if (id < 0 || grow((void **)&st->mems, &st->capmems, st->nmems + 1, sizeof *st->mems))
            return sb_err_set(err, "out of memory");
        jmem *m = &st->mems[st->nmems++];
        *m = (jmem){st->text.n, (size_t)(ne - ns), 0, (size_t)(ve - vs), (uint32_t)id};
        if (xbuf_put(&st->text, ns, (size_t)(ne - ns)) != 0)
            return sb_err_set(err, "out of memory");
        m->val_off = st->text.n;
        if (xbuf_put(&st->text, vs, (size_t)(ve - vs)) != 0)
            return sb_err_set(err, "out of memory");
        rec->nmem++;
    }
    return 0;
}

/* Right record r[0..len) (the row-th of the right side)'s key into st->kb. Bad right records
 * fail the stage (every task would meet them): permanent errors. */
static int right_key(jstate *st, const char *r, size_t len, uint64_t row, sb_err *err)
{
    sb_op_json_type top;
    char msg[160];
    if (sb_op_json_scan(r, len, st->on.k, st->on.n, st->found, &top, msg, sizeof msg) != 0)
        return sb_err_permanent(err, "join: right record %llu of %s is not valid JSON: %s",
                                (unsigned long long)row, st->uri, msg);
    if (top != SB_OP_JSON_OBJECT)
        return sb_err_permanent(err, "join: right record %llu of %s is a JSON %s, not an object",
                                (unsigned long long)row, st->uri, sb_op_json_type_name(top));
    for (size_t i = 0; i < st->on.n && !st->on.missing_null; i++)
        if (st->found[i].type == SB_OP_JSON_NONE)
            return sb_err_permanent(err,
                                    "join: right record %llu of %s has no field %s (missingKey: "
                                    "null takes such records' key as null)",
                                    (unsigned long long)row, st->uri, st->on.k[i].name);
    st->kb.n = 0;
    return xkeys_encode_found(&st->on, "join", row, st->found, &st->kb, err);
}

/* Adds right record r[0..len) (the row-th of the right side) under its key. */
static int add_right(jstate *st, const char *r, size_t len, uint64_t row, sb_err *err)
{
    if (st->scan != NULL)
        return sb_err_set(err, "join: a right record came after the table was sealed");
    if (right_key(st, r, len, row, err) != 0)
        return -1;
    int added;
    long e = xset_find_add(&st->keys, st->kb.p, st->kb.n, xhash(st->kb.p, st->kb.n, 0), &added);
    size_t had = st->cap_ent;
    if (e < 0 || grow((void **)&st->head, &st->cap_ent, (size_t)e + 1, sizeof *st->head) != 0)
        return sb_err_set(err, "out of memory");
    uint32_t *t = st->cap_ent == had ? st->tail : realloc(st->tail, st->cap_ent * sizeof *t);
    if (t == NULL || grow((void **)&st->recs, &st->caprecs, st->nrecs + 1, sizeof *st->recs) != 0)
        return sb_err_set(err, "out of memory");
    st->tail = t;
    uint32_t ri = (uint32_t)st->nrecs++;
    st->recs[ri] = (jrec){(uint32_t)st->nmems, 0, NO_REC};
    if (added)
        st->head[e] = ri;
    else
        st->recs[st->tail[e]].next = ri;
    st->tail[e] = ri;
    return add_members(st, &st->recs[ri], r, len, err);
}

typedef struct {
    jstate *st;
    uint64_t rows;
    xjoin_right_fn fn; /* NULL: add_right */
    void *ud;
} loader;

static int load_part(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    loader *l = ud;
    sb_batch *b = NULL;
    int rc = sb_batch_open_ex(blob, len, 0, &b, &l->st->load_err);
    int col = rc == 0 ? sb_batch_find(b, SB_OP_RECORD_COLUMN) : -1;
    if (rc == 0 && col < 0)
        rc = sb_err_permanent(&l->st->load_err, "join: the right side has no records column");
    for (size_t r = 0; rc == 0 && r < sb_batch_rows(b); r++) {
        size_t n;
        const char *p = sb_column_binary(sb_batch_column(b, (size_t)col), r, &n);
        uint64_t row = l->rows++;
        if (l->fn == NULL)
            rc = add_right(l->st, p, n, row, &l->st->load_err);
        else if ((rc = right_key(l->st, p, n, row, &l->st->load_err)) == 0)
            rc = l->fn(l->ud, p, n, xhash(l->st->kb.p, l->st->kb.n, 0), &l->st->load_err);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return rc;
}

/* Reads the right side's pieces i with i % maps == index, each record to fn (NULL: into the
 * table). bytes_is: the right side's bytes as listed now, compared by the caller. */
static int read_right(jstate *st, const char *args_json, uint64_t index, uint64_t maps,
                      int64_t below, uint64_t expect, xjoin_right_fn fn, void *ud, sb_err *err)
{
    sb_source_spec src;
    if (sb_spec_join_right(args_json, &src, err) != 0)
        return -1;
    sb_io_split *sp = NULL;
    size_t n = 0, k = 0;
    int rc = sb_io_plan_splits(&src, &sp, &n, err);
    uint64_t bytes = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        bytes += sp[i].end - sp[i].start;
        if (maps > 0 && i % maps == index) /* this map task's share, in listing order */
            sp[k++] = sp[i];
        else if (maps > 0)
            free(sp[i].path);
    }
    char a[32], b[32];
    if (rc == 0 && below > 0 && (int64_t)bytes >= below)
        rc = sb_err_permanent(err,
                              "join: the right side %s is now %s, at or above broadcastBelow "
                              "(%s)",
                              src.uri, sb_quantity_format_bytes((int64_t)bytes, a, sizeof a),
                              sb_quantity_format_bytes(below, b, sizeof b));
    if (rc == 0 && below == 0 && bytes != expect) /* every map task must read the same listing */
        rc = sb_err_permanent(err,
                              "join: the right side %s is now %llu bytes, not the %llu the plan "
                              "listed: it changed while the join ran",
                              src.uri, (unsigned long long)bytes, (unsigned long long)expect);
    if (maps > 0)
        n = k;
    loader l = {st, 0, fn, ud};
    sb_err_clear(&st->load_err);
    if (rc == 0 && n > 0 &&
        sb_io_read_splits(sp, n, src.format, src.args_json, 4u << 20, load_part, &l, err) != 0) {
        if (st->load_err.msg[0] != '\0')
            *err = st->load_err;
        rc = -1;
    }
    sb_io_splits_free(sp, n);
    sb_spec_join_right_free(&src);
    return rc;
}

/* The scan of a left row: the key fields, every right field name, and each with PREFIX. */
static int build_scan(jstate *st, sb_err *err)
{
    size_t nn = st->names.n;
    st->nscan = st->on.n + 2 * nn;
    st->scan = calloc(st->nscan + 1, sizeof *st->scan);
    st->prefixed = calloc(nn + 1, sizeof *st->prefixed);
    sb_op_json_span *f = realloc(st->found, (st->nscan + 1) * sizeof *f);
    if (st->scan == NULL || st->prefixed == NULL || f == NULL)
        return sb_err_set(err, "out of memory");
    st->found = f;
    memcpy(st->scan, st->on.k, st->on.n * sizeof *st->scan);
    for (size_t i = 0; i < nn; i++) {
        size_t len;
        const char *n = xset_key(&st->names, i, &len);
        if ((st->prefixed[i] = malloc(len + sizeof PREFIX)) == NULL)
            return sb_err_set(err, "out of memory");
        memcpy(st->prefixed[i], PREFIX, sizeof PREFIX - 1);
        memcpy(st->prefixed[i] + sizeof PREFIX - 1, n, len);
        st->scan[st->on.n + i] = (sb_op_json_key){n, len};
        st->scan[st->on.n + nn + i] = (sb_op_json_key){st->prefixed[i], len + sizeof PREFIX - 1};
    }
    return 0;
}

/* Reads the right side whole: refused when it reached broadcastBelow since the plan measured
 * it (every task that runs the join holds it, validate bounds the threshold by the budget). */
static int load_right(jstate *st, const char *args_json, sb_err *err)
{
    int64_t below = sb_spec_join_broadcast_below(args_json);
    if (read_right(st, args_json, 0, 0, below > 0 ? below : 1, 0, NULL, NULL, err) != 0)
        return -1;
    return build_scan(st, err);
}

/* Frees the scan of a sealed table (build_scan's). */
static void scan_free(jstate *st)
{
    size_t nn = st->nscan > st->on.n ? (st->nscan - st->on.n) / 2 : 0;
    for (size_t i = 0; st->prefixed != NULL && i < nn; i++)
        free(st->prefixed[i]);
    free(st->prefixed);
    free(st->scan);
    st->prefixed = NULL;
    st->scan = NULL;
    st->nscan = 0;
}

void xjoin_free(xjoin *st)
{
    if (st == NULL)
        return;
    scan_free(st);
    xkeys_free(&st->on);
    cJSON_Delete(st->root);
    xset_free(&st->keys);
    xset_free(&st->names);
    free(st->head);
    free(st->tail);
    free(st->recs);
    free(st->mems);
    xbuf_free(&st->text);
    free(st->found);
    xbuf_free(&st->kb);
    xbuf_free(&st->ob);
    xbuf_free(&st->nb);
    free(st);
}

xjoin *xjoin_new(const char *args_json, sb_err *err)
{
    jstate *st = calloc(1, sizeof *st);
    if (st == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    st->root = cJSON_Parse(args_json != NULL ? args_json : "{}");
    const cJSON *how = cJSON_GetObjectItemCaseSensitive(st->root, "how");
    const cJSON *right = cJSON_GetObjectItemCaseSensitive(st->root, "right");
    const cJSON *uri = cJSON_GetObjectItemCaseSensitive(right, "uri");
    st->keep_left = cJSON_IsString(how) && strcmp(how->valuestring, "left") == 0;
    st->uri = cJSON_IsString(uri) ? uri->valuestring : "(no uri)";
    int rc =
        xkeys_parse(cJSON_GetObjectItemCaseSensitive(st->root, "on"),
                    cJSON_GetObjectItemCaseSensitive(st->root, "missingKey"), "join", &st->on, err);
    if (rc == 0 && st->on.n == 0)
        rc = sb_err_permanent(err, "join: args.on must name at least one key field");
    if (rc == 0 && (st->found = calloc(st->on.n, sizeof *st->found)) == NULL)
        rc = sb_err_set(err, "out of memory");
    if (rc != 0) {
        xjoin_free(st);
        return NULL;
    }
    return st;
}

void xjoin_clear(xjoin *st)
{
    scan_free(st);
    /* the table sized by the task's right rows goes with the task (ops.h) */
    xset_free(&st->keys);
    xset_free(&st->names);
    free(st->recs);
    free(st->mems);
    st->recs = NULL;
    st->mems = NULL;
    free(st->head);
    free(st->tail);
    st->head = st->tail = NULL;
    st->nrecs = st->nmems = st->caprecs = st->capmems = st->cap_ent = 0;
    xbuf_free(&st->text);
}

int xjoin_add_right(xjoin *st, const char *r, size_t len, uint64_t row, sb_err *err)
{
    return add_right(st, r, len, row, err);
}

int xjoin_seal(xjoin *st, sb_err *err)
{
    return st->scan != NULL ? 0 : build_scan(st, err);
}

uint64_t xjoin_bytes(const xjoin *st)
{
    return xset_bytes(&st->keys) + xset_bytes(&st->names) + st->text.cap +
           st->cap_ent * 2 * sizeof *st->head + st->caprecs * sizeof *st->recs +
           st->capmems * sizeof *st->mems;
}

int xjoin_left_key(xjoin *st, const char *l, size_t len, size_t row, uint64_t *hash, sb_err *err)
{
    st->kb.n = 0;
    if (xkeys_encode(&st->on, "join", l, len, row, NULL, &st->kb, err) != 0)
        return -1;
    *hash = xhash(st->kb.p, st->kb.n, 0);
    return 0;
}

int xjoin_read_right(xjoin *st, const char *args_json, uint64_t index, uint64_t maps,
                     uint64_t bytes, xjoin_right_fn fn, void *ud, sb_err *err)
{
    return read_right(st, args_json, index, maps, 0, bytes, fn, ud, err);
}

/* Appends left record l[0..len) joined with right record ri to out. */
static int emit_match(jstate *st, const char *l, size_t len, size_t row, uint32_t ri,
                      sb_op_out *out, sb_err *err)
{
    const char *e = l + len, *close = e;
    while (close > l && close[-1] != '}')
        close--;
    close--;                                     /* the left object's '}' */
    int comma = ws(ws(l, e) + 1, close) < close; /* the left object has members */
    size_t nn = st->names.n;
    st->ob.n = 0;
    if (xbuf_put(&st->ob, l, (size_t)(close - l)) != 0)
        return sb_err_set(err, "out of memory");
    const jrec *rec = &st->recs[ri];
    for (uint32_t k = 0; k < rec->nmem; k++) {
        const jmem *m = &st->mems[rec->first_mem + k];
        const char *name = st->text.p + m->name_off;
        int clash = st->found[st->on.n + m->id].type != SB_OP_JSON_NONE;
        const sb_op_json_key *nk = &st->scan[st->on.n + m->id]; /* not NUL-terminated */
        if (clash && st->found[st->on.n + nn + m->id].type != SB_OP_JSON_NONE)
            return sb_err_data(err,
                               "join: record %zu has both %.*s and " PREFIX "%.*s: the right "
                               "side's %.*s has no name left to take",
                               row, (int)nk->len, nk->name, (int)nk->len, nk->name, (int)nk->len,
                               nk->name);
        int bad = (comma && xbuf_put(&st->ob, ",", 1) != 0) ||
                  (clash && (xbuf_put(&st->ob, "\"" PREFIX, sizeof PREFIX) != 0 ||
                             xbuf_put(&st->ob, name + 1, m->name_len - 1) != 0)) ||
                  (!clash && xbuf_put(&st->ob, name, m->name_len) != 0) ||
                  xbuf_put(&st->ob, ":", 1) != 0 ||
                  xbuf_put(&st->ob, st->text.p + m->val_off, m->val_len) != 0;
        if (bad)
            return sb_err_set(err, "out of memory");
        comma = 1;
    }
    if (xbuf_put(&st->ob, "}", 1) != 0)
        return sb_err_set(err, "out of memory");
    return sb_op_out_append_binary(out, st->ob.p, st->ob.n, err);
}

int xjoin_right_key(xjoin *st, const char *r, size_t len, uint64_t row, uint64_t *hash, sb_err *err)
{
    if (right_key(st, r, len, row, err) != 0)
        return -1;
    *hash = xhash(st->kb.p, st->kb.n, 0);
    return 0;
}

int xjoin_probe(xjoin *st, const char *l, size_t len, size_t r, sb_op_out *out, sb_err *err)
{
    return xjoin_probe_hit(st, l, len, r, st->keep_left, out, NULL, err);
}

int xjoin_probe_hit(xjoin *st, const char *l, size_t len, size_t r, int keep, sb_op_out *out,
                    int *hit, sb_err *err)
{
    sb_op_json_type top;
    char msg[160];
    if (sb_op_json_scan(l, len, st->scan, st->nscan, st->found, &top, msg, sizeof msg) != 0)
        return sb_err_data(err, "join: record %zu is not valid JSON: %s", r, msg);
    if (top != SB_OP_JSON_OBJECT)
        return sb_err_data(err, "join: record %zu is a JSON %s, not an object", r,
                           sb_op_json_type_name(top));
    st->kb.n = 0;
    if (xkeys_encode_found(&st->on, "join", r, st->found, &st->kb, err) != 0)
        return -1;
    long e = xset_find(&st->keys, st->kb.p, st->kb.n, xhash(st->kb.p, st->kb.n, 0));
    if (hit != NULL)
        *hit = e >= 0;
    if (e < 0)
        return keep ? sb_op_out_append_binary(out, l, len, err) : 0;
    for (uint32_t ri = st->head[e]; ri != NO_REC; ri = st->recs[ri].next)
        if (emit_match(st, l, len, r, ri, out, err) != 0)
            return -1;
    return 0;
}

int xjoin_keeps_left(const xjoin *st)
{
    return st->keep_left;
}

int xjoin_schema(sb_op_out *out, sb_err *err)
{
    sb_field rf = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    return sb_op_out_has_schema(out) ? 0 : sb_op_out_set_schema(out, &rf, 1, err);
}

/* ---- the broadcast join op ------------------------------------------------------------------ */

static int j_init(const char *args_json, void **state, sb_err *err)
{
    xjoin *st = xjoin_new(args_json, err);
    if (st == NULL)
        return -1;
    if (load_right(st, args_json, err) != 0) {
        xjoin_free(st);
        return -1;
    }
    *state = st;
    return 0;
}

static void j_free(void *state)
{
    xjoin_free(state);
}

static int j_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                     sb_err *err)
{
    if (xjoin_schema(out, err) != 0)
        return -1;
    int col = sb_batch_find(in, SB_OP_RECORD_COLUMN);
    if (col < 0 || (sb_batch_column(in, (size_t)col)->type != SB_TYPE_UTF8 &&
                    sb_batch_column(in, (size_t)col)->type != SB_TYPE_BINARY))
        return sb_err_permanent(err, "join works on records (jsonl, csv) in this build, not on "
                                     "typed columns");
    const sb_column *c = sb_batch_column(in, (size_t)col);
    for (size_t r = first; r < first + n; r++) {
        size_t len;
        const char *l = sb_column_binary(c, r, &len);
        if (xjoin_probe(state, l, len, r, out, err) != 0)
            return -1;
    }
    return 0;
}

static int j_finish(void *state, sb_op_out *out, sb_err *err)
{
    (void)state;
    return xjoin_schema(out, err);
}

/* Nothing per task: the right side stays for the worker's next task of the stage. */
static int j_reset(void *state, sb_err *err)
{
    (void)state;
    (void)err;
    return 0;
}

const sb_op_impl sb_op_join_impl = {
    .name = "join",
    .init = j_init,
    .process = j_process,
    .finish = j_finish,
    .free = j_free,
    .reset = j_reset,
};
