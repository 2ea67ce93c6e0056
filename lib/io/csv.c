/* csv.c — the csv format (RFC 4180; see csv.h): options from the format args, where a record
 * ends (quoted newlines included), the header, a row as a JSON object keyed by column name (so
 * filter and project work on csv), and JSON records back as csv rows. Buffers and headers are
 * the caller's structs. */

#include "io/csv.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ---- */

static int buf_reserve(sb_csv_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(sb_csv_buf *b, const void *s, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

static int buf_putc(sb_csv_buf *b, char c)
{
    return buf_put(b, &c, 1);
}

void sb_csv_buf_free(sb_csv_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- options ---- */

void sb_csv_opts_free(sb_csv_opts *o)
{
    for (size_t i = 0; i < o->ncolumns; i++)
        free(o->columns[i]);
    free(o->columns);
    memset(o, 0, sizeof *o);
}

int sb_csv_opts_parse(const char *args_json, sb_csv_opts *o, sb_err *err)
{
    memset(o, 0, sizeof *o);
    o->delim = ',';
    o->header = true;
    cJSON *root = args_json != NULL && args_json[0] != '\0' ? cJSON_Parse(args_json) : NULL;
    if (args_json != NULL && args_json[0] != '\0' && !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sb_err_set(err, "csv: format args are not a JSON object");
    }
    int rc = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "delimiter");
    if (v != NULL && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || strlen(v->valuestring) != 1 || v->valuestring[0] == '"' ||
            v->valuestring[0] == '\n' || v->valuestring[0] == '\r')
            rc = sb_err_set(err, "csv: args.delimiter must be one byte other than '\"', CR and LF");
        else
            o->delim = v->valuestring[0];
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "header");
    if (rc == 0 && v != NULL && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v))
            rc = sb_err_set(err, "csv: args.header must be a boolean");
        else
            o->header = cJSON_IsTrue(v);
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "multiline");
    if (rc == 0 && v != NULL && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v))
            rc = sb_err_set(err, "csv: args.multiline must be a boolean");
        else
            o->multiline = cJSON_IsTrue(v);
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "columns");
    if (rc == 0 && v != NULL && !cJSON_IsNull(v)) {
        int k = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (k <= 0)
            rc = sb_err_set(err, "csv: args.columns must be a non-empty list of names");
        o->columns = k > 0 ? calloc((size_t)k, sizeof *o->columns) : NULL;
        if (rc == 0 && o->columns == NULL)
            rc = sb_err_set(err, "csv: out of memory");
        for (int i = 0; rc == 0 && i < k; i++) {
            const cJSON *c = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsString(c) || c->valuestring[0] == '\0') {
                rc = sb_err_set(err, "csv: args.columns[%d] must be a non-empty string", i);
                break;
            }
            for (size_t j = 0; j < o->ncolumns; j++)
                if (strcmp(o->columns[j], c->valuestring) == 0)
                    rc = sb_err_set(err, "csv: args.columns[%d]: \"%.64s\" is listed twice", i,
                                    c->valuestring);
            if (rc == 0 && (o->columns[o->ncolumns++] = strdup(c->valuestring)) == NULL)
                rc = sb_err_set(err, "csv: out of memory");
        }
    }
    cJSON_Delete(root);
    if (rc != 0)
        sb_csv_opts_free(o);
    return rc;
}

/* ---- reading ---- */

ssize_t sb_csv_record_len(const char *s, size_t n, const sb_csv_opts *o, bool eof, sb_err *err)
{
    bool q = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            q = !q; /* a doubled quote toggles twice */
        } else if (c == '\n') {
            if (!q)
                return (ssize_t)(i + 1);
            if (!o->multiline)
                return sb_err_data(err,
                                   "a quoted field holds a line break at byte %zu of the record "
                                   "(quote not closed on its line; set args.multiline: true for "
                                   "fields with newlines)",
                                   i);
        }
    }
    if (!eof)
        return 0;
    if (q)
        return sb_err_data(err, "a quoted field is not closed before the end of the file");
    return (ssize_t)n;
}

/* One field of a record: [p, p+n), quoted or not (quoted: the text between the quotes, with
 * doubled quotes still doubled). */
typedef struct {
    const char *p;
    size_t n;
    bool quoted;
} field;

/* Strips the line terminator. */
static size_t body_len(const char *s, size_t n)
{
    if (n > 0 && s[n - 1] == '\n')
        n--;
    if (n > 0 && s[n - 1] == '\r')
        n--;
    return n;
}

/* Calls fn for each field of s[0..n) (no terminator). */
static int each_field(const char *s, size_t n, char delim,
                      int (*fn)(const field *f, size_t idx, void *ud, sb_err *err), void *ud,
                      sb_err *err)
{
    size_t pos = 0, idx = 0;
    for (;;) {
        field f = {0};
        if (pos < n && s[pos] == '"') {
            size_t st = ++pos;
            for (;;) {
                if (pos >= n)
                    return sb_err_data(err, "field %zu: quote not closed", idx + 1);
                if (s[pos] == '"') {
                    if (pos + 1 < n && s[pos + 1] == '"') {
                        pos += 2;
                        continue;
                    }
                    break;
                }
                pos++;
            }
            f = (field){s + st, pos - st, true};
            pos++; /* the closing quote */
            if (pos < n && s[pos] != delim)
                return sb_err_data(err,
                                   "field %zu: character '%c' after the closing quote (byte %zu)",
                                   idx + 1, s[pos], pos);
        } else {
            size_t st = pos;
            while (pos < n && s[pos] != delim) {
                if (s[pos] == '"')
                    return sb_err_data(err,
                                       "field %zu: a quote inside an unquoted field (byte %zu); "
                                       "quote the field and double the quote",
                                       idx + 1, pos);
                pos++;
            }
            f = (field){s + st, pos - st, false};
        }
        if (fn(&f, idx, ud, err) != 0)
            return -1;
        idx++;
        if (pos >= n)
            return 0;
        pos++; /* the delimiter: a field follows, possibly empty */
    }
}

void sb_csv_header_free(sb_csv_header *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->names[i]);
    free(h->names);
    memset(h, 0, sizeof *h);
}

static int header_add(sb_csv_header *h, char *name, sb_err *err)
{
    if (name == NULL)
        return sb_err_set(err, "csv: out of memory");
    char **v = realloc(h->names, (h->n + 1) * sizeof *v);
    if (v == NULL) {
        free(name);
        return sb_err_set(err, "csv: out of memory");
    }
    h->names = v;
    h->names[h->n++] = name;
    return 0;
}

/* The unquoted text of a field, malloc'd. */
static char *field_text(const field *f)
{
    char *t = malloc(f->n + 1);
    if (t == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < f->n; i++) {
        t[k++] = f->p[i];
        if (f->quoted && f->p[i] == '"')
            i++; /* a doubled quote */
    }
    t[k] = '\0';
    return t;
}

static int add_name(const field *f, size_t idx, void *ud, sb_err *err)
{
    sb_csv_header *h = ud;
    char *t = field_text(f);
    if (t != NULL && t[0] == '\0') {
        free(t);
        return sb_err_data(err, "csv header: column %zu has no name", idx + 1);
    }
    for (size_t i = 0; t != NULL && i < h->n; i++)
        if (strcmp(h->names[i], t) == 0) {
            int rc =
                sb_err_data(err, "csv header: column %zu repeats the name \"%.64s\"", idx + 1, t);
            free(t);
            return rc;
        }
    return header_add(h, t, err);
}

int sb_csv_header_parse(const char *s, size_t n, const sb_csv_opts *o, sb_csv_header *h,
                        sb_err *err)
{
    memset(h, 0, sizeof *h);
    if (each_field(s, body_len(s, n), o->delim, add_name, h, err) != 0) {
        sb_csv_header_free(h);
        return -1;
    }
    return 0;
}

static int count_field(const field *f, size_t idx, void *ud, sb_err *err)
{
    (void)f;
    (void)idx;
    (void)err;
    (*(size_t *)ud)++;
    return 0;
}

int sb_csv_header_default(const char *s, size_t n, const sb_csv_opts *o, sb_csv_header *h,
                          sb_err *err)
{
    memset(h, 0, sizeof *h);
    size_t k = 0;
    if (each_field(s, body_len(s, n), o->delim, count_field, &k, err) != 0)
        return -1;
    for (size_t i = 0; i < k; i++) {
        char *name = NULL;
        if (asprintf(&name, "c%zu", i) < 0)
            name = NULL;
        if (header_add(h, name, err) != 0) {
            sb_csv_header_free(h);
            return -1;
        }
    }
    return 0;
}

/* Is t[0..n) exactly a JSON number? */
static bool json_number(const char *t, size_t n)
{
    size_t i = 0;
    if (i < n && t[i] == '-')
        i++;
    if (i >= n)
        return false;
    if (t[i] == '0') {
        i++;
    } else if (t[i] >= '1' && t[i] <= '9') {
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++;
    } else {
        return false;
    }
    if (i < n && t[i] == '.') {
        size_t d = ++i;
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i != n)
        return false;
    /* Only numbers a double holds exactly as written (the writer prints through one): at most
     * 15 digits and an exponent within range; "12345678901234567890" stays a string. */
    size_t digits = 0;
    int exp = 0;
    bool in_exp = false;
    for (size_t k = 0; k < n; k++) {
        char c = t[k];
        if (c == 'e' || c == 'E')
            in_exp = true;
        else if (c >= '0' && c <= '9' && !in_exp)
            digits++;
        else if (c >= '0' && c <= '9' && exp < 10000)
            exp = exp * 10 + (c - '0');
    }
    return digits <= 15 && exp <= 290;
}

/* Appends a JSON string of the field's text. */
static int put_json_string(sb_csv_buf *b, const field *f)
{
    if (buf_reserve(b, f->n * 2 + 2) != 0 || buf_putc(b, '"') != 0)
        return -1;
    for (size_t i = 0; i < f->n; i++) {
        unsigned char c = (unsigned char)f->p[i];
        if (f->quoted && c == '"')
            i++; /* a doubled quote is one quote */
        if (c == '"' || c == '\\') {
            if (buf_putc(b, '\\') != 0 || buf_putc(b, (char)c) != 0)
                return -1;
        } else if (c < 0x20) {
            char e[8];
            const char *sh = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (sh == NULL)
                snprintf(e, sizeof e, "\\u%04x", c);
            if (buf_put(b, sh ? sh : e, sh ? 2 : 6) != 0)
                return -1;
        } else if (buf_putc(b, (char)c) != 0) {
            return -1;
        }
    }
    return buf_putc(b, '"');
}

typedef struct {
    const sb_csv_header *h;
    sb_csv_buf *out;
    size_t k; /* fields seen */
} to_json;

static int put_field(const field *f, size_t idx, void *ud, sb_err *err)
{
    to_json *t = ud;
    t->k++;
    if (idx >= t->h->n)
        return 0; /* counted: the record is refused after the last field */
    field name = {t->h->names[idx], strlen(t->h->names[idx]), false};
    int rc = buf_putc(t->out, idx == 0 ? '{' : ',');
    rc = rc != 0 ? rc : put_json_string(t->out, &name);
    rc = rc != 0 ? rc : buf_putc(t->out, ':');
    if (rc == 0) {
        if (!f->quoted && f->n == 0)
            rc = buf_put(t->out, "null", 4);
        else if (!f->quoted && json_number(f->p, f->n))
            rc = buf_put(t->out, f->p, f->n);
        else
            rc = put_json_string(t->out, f);
    }
    return rc != 0 ? sb_err_set(err, "csv: out of memory") : 0;
}

int sb_csv_record_to_json(const char *s, size_t n, const sb_csv_opts *o, const sb_csv_header *h,
                          sb_csv_buf *out, sb_err *err)
{
    out->len = 0;
    size_t len = body_len(s, n);
    to_json t = {h, out, 0};
    if (each_field(s, len, o->delim, put_field, &t, err) != 0)
        return -1;
    if (t.k != h->n)
        return sb_err_data(err, "%zu fields, the header has %zu columns", t.k, h->n);
    if (buf_putc(out, '}') != 0)
        return sb_err_set(err, "csv: out of memory");
    return 0;
}

/* ---- writing ---- */

void sb_csv_writer_free(sb_csv_writer *w)
{
    sb_csv_header_free(&w->cols);
    w->started = false;
}

/* Appends s[0..n) as one csv field, quoted when needed. */
static int put_csv_field(sb_csv_buf *b, const char *s, size_t n, char delim, bool force_quote)
{
    bool q = force_quote || (n > 0 && (s[0] == ' ' || s[n - 1] == ' '));
    for (size_t i = 0; !q && i < n; i++)
        q = s[i] == delim || s[i] == '"' || s[i] == '\n' || s[i] == '\r';
    if (!q)
        return buf_put(b, s, n);
    if (buf_reserve(b, n * 2 + 2) != 0 || buf_putc(b, '"') != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((s[i] == '"' && buf_putc(b, '"') != 0) || buf_putc(b, s[i]) != 0)
            return -1;
    return buf_putc(b, '"');
}

static int put_row_names(sb_csv_buf *b, const sb_csv_header *h, char delim)
{
    for (size_t i = 0; i < h->n; i++)
        if ((i > 0 && buf_putc(b, delim) != 0) ||
            put_csv_field(b, h->names[i], strlen(h->names[i]), delim, false) != 0)
            return -1;
    return buf_putc(b, '\n');
}

static int put_value(sb_csv_buf *b, const cJSON *v, char delim)
{
    if (v == NULL || cJSON_IsNull(v))
        return 0;
    if (cJSON_IsString(v))
        /* the empty string is written "" (unquoted it reads back as null), and a string that
         * looks like a number is quoted (unquoted it reads back as a number) */
        return put_csv_field(b, v->valuestring, strlen(v->valuestring), delim,
                             v->valuestring[0] == '\0' ||
                                 json_number(v->valuestring, strlen(v->valuestring)));
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v) ? buf_put(b, "true", 4) : buf_put(b, "false", 5);
    char *t = cJSON_PrintUnformatted(v);
    if (t == NULL)
        return -1;
    int rc = put_csv_field(b, t, strlen(t), delim, cJSON_IsObject(v) || cJSON_IsArray(v));
    free(t);
    return rc;
}

int sb_csv_write_record(sb_csv_writer *w, const char *json, size_t n, sb_csv_buf *out, sb_err *err)
{
    cJSON *r = cJSON_ParseWithLength(json, n);
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return sb_err_data(err, "not a JSON object: a csv sink writes records that are objects");
    }
    int rc = 0;
    if (!w->started) {
        memset(&w->cols, 0, sizeof w->cols);
        if (w->o->ncolumns > 0) {
            for (size_t i = 0; rc == 0 && i < w->o->ncolumns; i++)
                rc = header_add(&w->cols, strdup(w->o->columns[i]), err);
        } else {
            for (const cJSON *c = r->child; rc == 0 && c != NULL; c = c->next)
                rc = header_add(&w->cols, strdup(c->string), err);
        }
        if (rc == 0 && w->cols.n == 0)
            rc = sb_err_data(err, "the first record has no fields and args.columns is not set");
        if (rc == 0 && w->o->header && put_row_names(out, &w->cols, w->o->delim) != 0)
            rc = sb_err_set(err, "csv: out of memory");
        w->started = rc == 0;
    }
    for (const cJSON *c = r->child; rc == 0 && c != NULL; c = c->next) {
        bool known = false;
        for (size_t i = 0; !known && i < w->cols.n; i++)
            known = strcmp(w->cols.names[i], c->string) == 0;
        if (!known)
            rc = sb_err_data(err,
                             "key \"%.64s\" is not a column (columns come from args.columns or "
                             "the part's first record)",
                             c->string);
    }
    for (size_t i = 0; rc == 0 && i < w->cols.n; i++) {
        if ((i > 0 && buf_putc(out, w->o->delim) != 0) ||
            put_value(out, cJSON_GetObjectItemCaseSensitive(r, w->cols.names[i]), w->o->delim) != 0)
            rc = sb_err_set(err, "csv: out of memory");
    }
    if (rc == 0 && buf_putc(out, '\n') != 0)
        rc = sb_err_set(err, "csv: out of memory");
    cJSON_Delete(r);
    return rc;
}
