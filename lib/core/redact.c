/* redact.c — the redaction of secrets in text (see redact.h): a scan over the text that copies
 * literal runs and rewrites what it recognises at a word boundary (a scheme:// URI, a word
 * starting with '/' that has a query, a sensitive header name and ':', a known signing
 * parameter and '='). Writes only into the caller's bounded buffer; owns nothing. */

#include "core/redact.h"

#include <string.h>
#include <strings.h>

typedef struct {
    char *out;
    size_t cap, len;
} wbuf;

static void put(wbuf *w, const char *s, size_t n)
{
    if (w->cap == 0)
        return;
    size_t room = w->cap - 1 - w->len;
    if (n > room)
        n = room;
    memcpy(w->out + w->len, s, n);
    w->len += n;
    w->out[w->len] = '\0';
}

static void puts_(wbuf *w, const char *s)
{
    put(w, s, strlen(s));
}

static int is_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int scheme_char(unsigned char c)
{
    return is_alnum(c) || c == '+' || c == '-' || c == '.';
}

/* A byte that ends a URI or a word in free text. */
static int word_stop(unsigned char c)
{
    return c <= 0x20 || c == 0x7f || c == '"' || c == '\'' || c == '<' || c == '>' || c == '`' ||
           c == '\\';
}

/* A byte that ends a parameter's value in free text. */
static int value_stop(unsigned char c)
{
    return word_stop(c) || c == '&' || c == ',' || c == ';' || c == ')' || c == ']' || c == '}';
}

/* ---- URIs --------------------------------------------------------------------------------- */

/* Parameters: components separated by any of seps; each with '=' keeps its name and loses its
 * value, each without loses itself (unless keep_bare: a plain path segment). */
static void params_write(wbuf *w, const char *s, size_t n, const char *seps, int keep_bare)
{
    size_t i = 0;
    while (i < n) {
        if (strchr(seps, s[i]) != NULL && s[i] != '\0') {
            put(w, s + i, 1);
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && (s[j] == '\0' || strchr(seps, s[j]) == NULL))
            j++;
        const char *eq = memchr(s + i, '=', j - i);
        if (eq != NULL) {
            put(w, s + i, (size_t)(eq - (s + i)) + 1);
            if (eq + 1 < s + j)
                puts_(w, SB_REDACTED);
        } else if (keep_bare) {
            put(w, s + i, j - i);
        } else {
            puts_(w, SB_REDACTED);
        }
        i = j;
    }
}

/* A path: literal up to its first ';' (matrix parameters, whose values go), then the query
 * and fragment, whose values all go. */
static void path_query_write(wbuf *w, const char *s, size_t n)
{
    size_t q = 0;
    while (q < n && s[q] != '?' && s[q] != '#')
        q++;
    const char *semi = memchr(s, ';', q);
    size_t lit = semi != NULL ? (size_t)(semi - s) : q;
    put(w, s, lit);
    /* after the first ';' of the path: ";k=v" loses v, segments between '/' stay */
    for (size_t i = lit; i < q;) {
        size_t j = i + 1;
        while (j < q && s[j] != ';' && s[j] != '/')
            j++;
        put(w, s + i, 1);
        if (s[i] == ';')
            params_write(w, s + i + 1, j - i - 1, "", 1);
        else
            put(w, s + i + 1, j - i - 1);
        i = j;
    }
    params_write(w, s + q, n - q, "?#&;", 0);
}

/* Whether the host part of an authority without '@' is not host[:port] (a port that is not
 * digits): then it may be "user:password" of a URI whose password holds a '/' or was cut. */
static int authority_odd(const char *a, size_t n)
{
    size_t i = 0;
    if (n > 0 && a[0] == '[') { /* an IPv6 literal */
        while (i < n && a[i] != ']')
            i++;
        if (i == n)
            return 1;
        i++;
    }
    const char *colon = memchr(a + i, ':', n - i);
    if (colon == NULL)
        return 0;
    for (const char *p = colon + 1; p < a + n; p++)
        if (*p < '0' || *p > '9')
            return 1;
    return 0;
}

static size_t auth_end(const char *s, size_t from, size_t n)
{
    size_t e = from;
    while (e < n && s[e] != '/' && s[e] != '?' && s[e] != '#')
        e++;
    return e;
}

/* One URI of n bytes: scheme://, userinfo as "***", host and path kept, parameter values
 * gone. Without "://" the whole text is a path. */
static void uri_write(wbuf *w, const char *s, size_t n)
{
    const char *sep = NULL;
    size_t sc = 0;
    while (sc < n && scheme_char((unsigned char)s[sc]))
        sc++;
    if (sc > 0 && sc + 3 <= n && s[sc] == ':' && s[sc + 1] == '/' && s[sc + 2] == '/')
        sep = s + sc;
    if (sep == NULL) {
        path_query_write(w, s, n);
        return;
    }
    size_t a = (size_t)(sep - s) + 3;
    put(w, s, a);
    size_t e = auth_end(s, a, n);
    const char *at = NULL;
    for (size_t i = a; i < e; i++)
        if (s[i] == '@')
            at = s + i;
    if (at == NULL && authority_odd(s + a, e - a)) {
        size_t q = e;
        while (q < n && s[q] != '?' && s[q] != '#')
            q++;
        for (size_t i = e; i < q; i++)
            if (s[i] == '@') {
                at = s + i;
                break;
            }
        if (at == NULL) { /* nothing of it can be trusted to be a host */
            puts_(w, SB_REDACTED_USER);
            path_query_write(w, s + e, n - e);
            return;
        }
    }
    if (at != NULL) {
        puts_(w, SB_REDACTED_USER "@");
        a = (size_t)(at - s) + 1;
        e = auth_end(s, a, n);
    }
    put(w, s + a, e - a);
    path_query_write(w, s + e, n - e);
}

/* The end of a scheme:// URI starting at i, or 0 when none starts there. */
static size_t uri_at(const char *s, size_t i, size_t n)
{
    if (!is_alpha((unsigned char)s[i]))
        return 0;
    size_t j = i;
    while (j < n && scheme_char((unsigned char)s[j]))
        j++;
    if (j + 3 > n || s[j] != ':' || s[j + 1] != '/' || s[j + 2] != '/')
        return 0;
    size_t k = j + 3;
    while (k < n && !word_stop((unsigned char)s[k]))
        k++;
    return k;
}

/* A URI or word [i, end) without the punctuation that ends a sentence or a bracket after it. */
static size_t trim_trailing(const char *s, size_t i, size_t end)
{
    while (end > i + 1 && strchr(".,;:!?)]}", s[end - 1]) != NULL && s[end - 1] != '\0')
        end--;
    return end;
}

/* ---- headers and parameters in free text -------------------------------------------------- */

static const char *const secret_headers[] = {
    "authorization",
    "proxy-authorization",
    "x-amz-security-token",
    "x-amz-server-side-encryption-customer-key",
    "x-amz-copy-source-server-side-encryption-customer-key",
    "x-goog-api-key",
    "x-api-key",
    "x-auth-token",
    "set-cookie",
    "cookie",
    NULL};

/* Parameters whose value is a secret wherever they appear ... */
static const char *const secret_params[] = {"x-amz-signature",
                                            "x-amz-credential",
                                            "x-amz-security-token",
                                            "x-goog-signature",
                                            "x-goog-credential",
                                            "x-goog-security-token",
                                            "awsaccesskeyid",
                                            "signature",
                                            "credential",
                                            "access_token",
                                            "refresh_token",
                                            "id_token",
                                            "token",
                                            "sig",
                                            "password",
                                            "passwd",
                                            "client_secret",
                                            "api_key",
                                            "apikey",
                                            "secret",
                                            NULL};
/* ... and those too short to trust outside a query (Azure SAS): only after '?', '&' or ';'. */
static const char *const query_params[] = {"sv",  "se",  "sp",  "sr",    "st",    "spr",
                                           "sip", "ss",  "srt", "skoid", "sktid", "skt",
                                           "ske", "sks", "skv", "code",  "key",   NULL};

static int word_start(const char *s, size_t i)
{
    if (i == 0)
        return 1;
    unsigned char p = (unsigned char)s[i - 1];
    return !is_alnum(p) && p != '-' && p != '_' && p != '.';
}

/* After a sensitive header name at i (and optional blanks) and its ':': the offset past the
 * ':'; 0 when none is there. */
static size_t header_at(const char *s, size_t i, size_t n)
{
    for (size_t h = 0; secret_headers[h] != NULL; h++) {
        size_t l = strlen(secret_headers[h]);
        if (i + l > n || strncasecmp(s + i, secret_headers[h], l) != 0)
            continue;
        size_t j = i + l;
        while (j < n && (s[j] == ' ' || s[j] == '\t'))
            j++;
        if (j < n && s[j] == ':')
            return j + 1;
    }
    return 0;
}

static size_t param_in(const char *const *names, const char *s, size_t i, size_t n)
{
    for (size_t k = 0; names[k] != NULL; k++) {
        size_t l = strlen(names[k]);
        if (i + l < n && s[i + l] == '=' && strncasecmp(s + i, names[k], l) == 0)
            return i + l + 1;
    }
    return 0;
}

/* After a known parameter's name at i and its '=': the offset past the '='; 0 if none. */
static size_t param_at(const char *s, size_t i, size_t n)
{
    if (!word_start(s, i))
        return 0;
    size_t e = param_in(secret_params, s, i, n);
    if (e == 0 && i > 0 && (s[i - 1] == '?' || s[i - 1] == '&' || s[i - 1] == ';'))
        e = param_in(query_params, s, i, n);
    return e;
}

/* ---- the scan ----------------------------------------------------------------------------- */

typedef enum { R_NONE, R_URI, R_HEADER, R_PARAM } rkind;

/* What starts at i that must be rewritten: its kind, its end, and for a header or a parameter
 * the offset after its name and separator (*mid). R_NONE when nothing does. */
static rkind match_at(const char *s, size_t i, size_t n, size_t *end, size_t *mid)
{
    size_t e;
    if ((i == 0 || !scheme_char((unsigned char)s[i - 1])) && (e = uri_at(s, i, n)) > i) {
        *end = trim_trailing(s, i, e);
        return R_URI;
    }
    if (s[i] == '/' &&
        (i == 0 || word_stop((unsigned char)s[i - 1]) || strchr("(=:,", s[i - 1]) != NULL)) {
        e = i;
        while (e < n && !word_stop((unsigned char)s[e]))
            e++;
        if (memchr(s + i, '?', e - i) != NULL || memchr(s + i, ';', e - i) != NULL) {
            *end = trim_trailing(s, i, e);
            return R_URI;
        }
        return R_NONE;
    }
    if (!word_start(s, i))
        return R_NONE;
    if ((e = header_at(s, i, n)) > 0) {
        *mid = e;
        while (e < n && s[e] != '\n' && s[e] != '\r')
            e++;
        *end = e;
        return R_HEADER;
    }
    if ((e = param_at(s, i, n)) > 0) {
        *mid = e;
        while (e < n && !value_stop((unsigned char)s[e]))
            e++;
        *end = e;
        return R_PARAM;
    }
    return R_NONE;
}

size_t sb_redact_textn(const char *text, size_t n, char *out, size_t cap)
{
    wbuf w = {out, cap, 0};
    if (cap > 0)
        out[0] = '\0';
    if (text == NULL)
        return 0;
    size_t i = 0, lit = 0;
    while (i < n) {
        size_t end = i, mid = i;
        rkind k = match_at(text, i, n, &end, &mid);
        if (k == R_NONE || end <= i) {
            i++;
            continue;
        }
        put(&w, text + lit, i - lit);
        if (k == R_URI) {
            uri_write(&w, text + i, end - i);
        } else {
            put(&w, text + i, mid - i);
            if (end > mid)
                puts_(&w, k == R_HEADER ? " " SB_REDACTED : SB_REDACTED);
        }
        i = lit = end;
        if (cap == 0 || w.len + 1 >= cap)
            return w.len;
    }
    put(&w, text + lit, n - lit);
    return w.len;
}

size_t sb_redact_text(const char *text, char *out, size_t cap)
{
    return sb_redact_textn(text, text != NULL ? strlen(text) : 0, out, cap);
}

size_t sb_redact_uri(const char *uri, char *out, size_t cap)
{
    wbuf w = {out, cap, 0};
    if (cap > 0)
        out[0] = '\0';
    if (uri != NULL)
        uri_write(&w, uri, strlen(uri));
    return w.len;
}

size_t sb_redact_header(const char *line, size_t n, char *out, size_t cap)
{
    return sb_redact_textn(line, n, out, cap);
}
