/* config.c — where the Kubernetes API server is and how to authenticate (see config.h): a
 * kubeconfig file (explicit, $KUBECONFIG or ~/.kube/config; a context's cluster, user and
 * namespace) or the in-cluster service account. Owns the loaded server, CA, certificates and
 * token. */

#include "k8s/config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "doc/doc.h"

#define SA_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_FILE (4 * 1024 * 1024)

struct sb_k8s_config {
    char *server, *ns, *context;
    char *ca, *cert, *key; /* PEM, NUL-terminated */
    size_t ca_len, cert_len, key_len;
    pthread_mutex_t mu; /* guards the token cache */
    char *token;        /* static token or the last one read from token_file */
    char *token_file;
    double token_read_at; /* monotonic seconds; 0: never */
    long refresh_ms;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sb_k8s_config *config_new(void)
{
    sb_k8s_config *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->refresh_ms = 60000;
    return c;
}

void sb_k8s_config_free(sb_k8s_config *c)
{
    if (c == NULL)
        return;
    free(c->server);
    free(c->ns);
    free(c->context);
    free(c->ca);
    free(c->cert);
    if (c->key != NULL) {
        memset(c->key, 0, c->key_len);
        free(c->key);
    }
    if (c->token != NULL) {
        memset(c->token, 0, strlen(c->token));
        free(c->token);
    }
    free(c->token_file);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Reads a whole file (NUL-terminated). */
static char *read_file(const char *path, size_t *len, sb_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        sb_err_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (b == NULL) {
        fclose(f);
        sb_err_set(err, "%s: out of memory", path);
        return NULL;
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = cap < MAX_FILE ? realloc(b, cap * 2) : NULL;
            if (nb == NULL) {
                free(b);
                fclose(f);
                if (cap >= MAX_FILE)
                    sb_err_set(err, "%s: larger than %d bytes", path, MAX_FILE);
                else
                    sb_err_set(err, "%s: out of memory", path);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - n - 1, f);
        if (r == 0)
            break;
        n += r;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        sb_err_set(err, "%s: read error", path);
        return NULL;
    }
    b[n] = '\0';
    if (len != NULL)
        *len = n;
    return b;
}

static int b64val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

char *sb_k8s_base64_decode(const char *in, size_t len, size_t *out_len)
{
    char *out = malloc(len / 4 * 3 + 4);
    if (out == NULL)
        return NULL;
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0, pad = 0, seen = 0;
    for (size_t i = 0; i < len; i++) {
        int ch = (unsigned char)in[i];
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
            continue;
        seen++;
        if (ch == '=') {
            pad++;
            continue;
        }
        int v = b64val(ch);
        if (v < 0 || pad > 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (char)((acc >> bits) & 0xff);
        }
    }
    /* A valid encoding has a multiple of 4 characters (padding included), at most 2 '='. */
    if (seen % 4 != 0 || pad > 2 || bits >= 6) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    if (out_len != NULL)
        *out_len = n;
    return out;
}

/* ---- kubeconfig ---- */

typedef struct kc {
    const char *name; /* for messages */
    const char *dir;
    sb_err *err;
} kc;

static const char *scalar(const sb_node *n)
{
    if (n == NULL || n->kind == SB_NODE_MAP || n->kind == SB_NODE_SEQ || n->kind == SB_NODE_NULL)
        return NULL;
    return n->text;
}

static int kc_fail(const kc *k, const sb_node *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int kc_fail(const kc *k, const sb_node *at, const char *fmt, ...)
{
    char what[SB_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (at != NULL && at->line > 0)
        return sb_err_set(k->err, "kubeconfig %s: line %d: %s", k->name, at->line, what);
    return sb_err_set(k->err, "kubeconfig %s: %s", k->name, what);
}

/* Optional string field: NULL when absent; -1 (err set) when present but not a string. */
static int kc_str(const kc *k, const sb_node *m, const char *key, const char *where,
                  const char **out)
{
    const sb_node *n = sb_node_get(m, key);
    *out = NULL;
    if (n == NULL || n->kind == SB_NODE_NULL)
        return 0;
    if (n->kind != SB_NODE_STRING) {
        char path[256];
        snprintf(path, sizeof path, "%s.%s", where, key);
        return kc_fail(k, n, "%s: expected a string, found %s", path, sb_node_kind_name(n->kind));
    }
    *out = n->text;
    return 0;
}

/* Finds the entry named `name` in the top-level list `list` ("clusters", ...) and returns its
 * `inner` map ("cluster", ...). */
static const sb_node *kc_find(const kc *k, const sb_node *root, const char *list, const char *inner,
                              const char *name, const sb_node *ref, char *where, size_t wsz)
{
    const sb_node *l = sb_node_get(root, list);
    if (l != NULL && l->kind != SB_NODE_SEQ) {
        kc_fail(k, l, "%s: expected a list, found %s", list, sb_node_kind_name(l->kind));
        return NULL;
    }
    for (size_t i = 0; l != NULL && i < l->n; i++) {
        const sb_node *e = l->items[i];
        const char *en = scalar(sb_node_get(e, "name"));
        if (en == NULL || strcmp(en, name) != 0)
            continue;
        const sb_node *m = sb_node_get(e, inner);
        snprintf(where, wsz, "%s[%zu].%s", list, i, inner);
        if (m == NULL || m->kind != SB_NODE_MAP) {
            kc_fail(k, m != NULL ? m : e, "%s: missing or not a mapping (entry \"%s\")", where,
                    name);
            return NULL;
        }
        return m;
    }
    kc_fail(k, ref, "%s \"%s\" not found", list, name);
    return NULL;
}

/* Resolves a path from the kubeconfig against its directory (malloc'd). */
static char *kc_path(const kc *k, const char *p)
{
    size_t need = strlen(p) + (k->dir ? strlen(k->dir) : 0) + 2;
    char *out = malloc(need);
    if (out == NULL)
        return NULL;
    if (p[0] == '/' || k->dir == NULL || k->dir[0] == '\0')
        snprintf(out, need, "%s", p);
    else
        snprintf(out, need, "%s/%s", k->dir, p);
    return out;
}

/* Reads `<field>-data` (base64) or `<field>` (a file) from map m into *out. */
static int kc_blob(const kc *k, const sb_node *m, const char *field, const char *where, char **out,
                   size_t *out_len)
{
    char dkey[128];
    snprintf(dkey, sizeof dkey, "%s-data", field);
    const char *data, *file;
    if (kc_str(k, m, dkey, where, &data) < 0 || kc_str(k, m, field, where, &file) < 0)
        return -1;
    if (data != NULL) {
        *out = sb_k8s_base64_decode(data, strlen(data), out_len);
        if (*out == NULL) {
            char path[256];
            snprintf(path, sizeof path, "%s.%s", where, dkey);
            return kc_fail(k, sb_node_get(m, dkey), "%s: not valid base64", path);
        }
        if (*out_len == 0) {
            char path[256];
            snprintf(path, sizeof path, "%s.%s", where, dkey);
            return kc_fail(k, sb_node_get(m, dkey), "%s: empty", path);
        }
        return 0;
    }
    if (file != NULL) {
        char *p = kc_path(k, file);
        sb_err e = {0};
        *out = p != NULL ? read_file(p, out_len, &e) : NULL;
        free(p);
        if (*out == NULL) {
            char path[256];
            snprintf(path, sizeof path, "%s.%s", where, field);
            return kc_fail(k, sb_node_get(m, field), "%s: %s", path, e.msg);
        }
    }
    return 0;
}

/* Strips a trailing '/' or newline/space from a malloc'd string in place. */
static void rstrip(char *s, const char *chars)
{
    size_t n = strlen(s);
    while (n > 0 && strchr(chars, s[n - 1]) != NULL)
        s[--n] = '\0';
}

static int kc_load(sb_k8s_config *c, const kc *k, const sb_node *root, const char *want_ctx)
{
    if (root == NULL || root->kind != SB_NODE_MAP)
        return kc_fail(k, root,
                       "not a mapping (expected a kubeconfig with clusters, users and contexts)");
    const char *ctx = want_ctx;
    if (ctx == NULL && kc_str(k, root, "current-context", "", &ctx) < 0)
        return -1;
    if (ctx == NULL || ctx[0] == '\0')
        return kc_fail(k, root, "no context given and current-context is not set");
    char where[128], cwhere[128], uwhere[128];
    const sb_node *cx = kc_find(k, root, "contexts", "context", ctx,
                                sb_node_get(root, "current-context"), where, sizeof where);
    if (cx == NULL)
        return -1;
    const char *cluster, *user, *ns;
    if (kc_str(k, cx, "cluster", where, &cluster) < 0 || kc_str(k, cx, "user", where, &user) < 0 ||
        kc_str(k, cx, "namespace", where, &ns) < 0)
        return -1;
    if (cluster == NULL)
        return kc_fail(k, cx, "%s.cluster: missing (context \"%s\")", where, ctx);
    const sb_node *cl = kc_find(k, root, "clusters", "cluster", cluster, sb_node_get(cx, "cluster"),
                                cwhere, sizeof cwhere);
    if (cl == NULL)
        return -1;
    const char *server;
    if (kc_str(k, cl, "server", cwhere, &server) < 0)
        return -1;
    if (server == NULL || server[0] == '\0')
        return kc_fail(k, cl, "%s.server: missing (cluster \"%s\")", cwhere, cluster);
    if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
        return kc_fail(k, sb_node_get(cl, "server"),
                       "%s.server: \"%s\" is not an https:// (or http://) URL", cwhere, server);
    const sb_node *insecure = sb_node_get(cl, "insecure-skip-tls-verify");
    if (insecure != NULL && insecure->kind == SB_NODE_BOOL && insecure->v.b)
        return kc_fail(k, insecure,
                       "%s.insecure-skip-tls-verify: not supported (TLS is always verified)",
                       cwhere);
    c->server = strdup(server);
    c->ns = strdup(ns != NULL && ns[0] != '\0' ? ns : "default");
    c->context = strdup(ctx);
    if (c->server == NULL || c->ns == NULL || c->context == NULL)
        return sb_err_set(k->err, "kubeconfig %s: out of memory", k->name);
    rstrip(c->server, "/");
    if (kc_blob(k, cl, "certificate-authority", cwhere, &c->ca, &c->ca_len) < 0)
        return -1;
    if (user == NULL)
        return 0; /* anonymous */
    const sb_node *us =
        kc_find(k, root, "users", "user", user, sb_node_get(cx, "user"), uwhere, sizeof uwhere);
    if (us == NULL)
        return -1;
    if (kc_blob(k, us, "client-certificate", uwhere, &c->cert, &c->cert_len) < 0 ||
        kc_blob(k, us, "client-key", uwhere, &c->key, &c->key_len) < 0)
        return -1;
    if ((c->cert == NULL) != (c->key == NULL))
        return kc_fail(k, us, "%s: %s", uwhere,
                       c->cert != NULL ? "client-certificate without client-key"
                                       : "client-key without client-certificate");
    const char *token, *token_file;
    if (kc_str(k, us, "token", uwhere, &token) < 0 ||
        kc_str(k, us, "tokenFile", uwhere, &token_file) < 0)
        return -1;
    if (token != NULL) {
        c->token = strdup(token);
        if (c->token == NULL)
            return sb_err_set(k->err, "kubeconfig %s: out of memory", k->name);
    } else if (token_file != NULL) {
        c->token_file = kc_path(k, token_file);
        if (c->token_file == NULL)
            return sb_err_set(k->err, "kubeconfig %s: out of memory", k->name);
        sb_err e = {0};
        char *t = sb_k8s_config_token(c, &e);
        if (t == NULL) {
            char path[256];
            snprintf(path, sizeof path, "%s.tokenFile", uwhere);
            return kc_fail(k, sb_node_get(us, "tokenFile"), "%s: %s", path, e.msg);
        }
        free(t);
    }
    const sb_node *exec = sb_node_get(us, "exec");
    const sb_node *ap = sb_node_get(us, "auth-provider");
    if (c->cert == NULL && c->token == NULL && c->token_file == NULL &&
        (exec != NULL || ap != NULL))
        return kc_fail(k, exec != NULL ? exec : ap, "%s.%s: credential plugins are not supported",
                       uwhere, exec != NULL ? "exec" : "auth-provider");
    return 0;
}

sb_k8s_config *sb_k8s_config_parse_kubeconfig(const char *text, size_t len, const char *name,
                                              const char *dir, const char *context, sb_err *err)
{
    kc k = {name != NULL ? name : "(kubeconfig)", dir, err};
    sb_doc *d = sb_doc_parse_yaml(text, len, NULL);
    if (d == NULL) {
        sb_err_set(err, "kubeconfig %s: out of memory", k.name);
        return NULL;
    }
    int line = 0, col = 0;
    const char *perr = sb_doc_error(d, &line, &col);
    if (perr != NULL) {
        sb_err_set(err, "kubeconfig %s: line %d: %s", k.name, line, perr);
        sb_doc_free(d);
        return NULL;
    }
    if (sb_doc_count(d) != 1) {
        sb_err_set(err, "kubeconfig %s: expected one YAML document, found %zu", k.name,
                   sb_doc_count(d));
        sb_doc_free(d);
        return NULL;
    }
    sb_k8s_config *c = config_new();
    if (c == NULL) {
        sb_err_set(err, "kubeconfig %s: out of memory", k.name);
        sb_doc_free(d);
        return NULL;
    }
    int rc = kc_load(c, &k, sb_doc_root(d, 0), context);
    sb_doc_free(d);
    if (rc < 0) {
        sb_k8s_config_free(c);
        return NULL;
    }
    return c;
}

sb_k8s_config *sb_k8s_config_load_kubeconfig(const char *path, const char *context, sb_err *err)
{
    char buf[PATH_MAX];
    if (path == NULL) {
        const char *env = getenv("KUBECONFIG");
        if (env != NULL && env[0] != '\0') {
            /* The first existing file of the list. */
            const char *p = env;
            buf[0] = '\0';
            while (*p != '\0') {
                const char *e = strchr(p, ':');
                size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
                if (n > 0 && n < sizeof buf) {
                    memcpy(buf, p, n);
                    buf[n] = '\0';
                    struct stat st;
                    if (stat(buf, &st) == 0)
                        break;
                }
                buf[0] = '\0';
                p += n + (e != NULL);
            }
            if (buf[0] == '\0') {
                sb_err_set(err, "kubeconfig: no file of KUBECONFIG=%s exists", env);
                return NULL;
            }
        } else {
            const char *home = getenv("HOME");
            if (home == NULL || home[0] == '\0') {
                sb_err_set(err, "kubeconfig: KUBECONFIG and HOME are both unset");
                return NULL;
            }
            snprintf(buf, sizeof buf, "%s/.kube/config", home);
        }
        path = buf;
    }
    size_t len = 0;
    sb_err e = {0};
    char *text = read_file(path, &len, &e);
    if (text == NULL) {
        sb_err_set(err, "kubeconfig %s", e.msg);
        return NULL;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    sb_k8s_config *c = sb_k8s_config_parse_kubeconfig(text, len, path, dir, context, err);
    free(text);
    return c;
}

sb_k8s_config *sb_k8s_config_in_cluster(sb_err *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (host == NULL || host[0] == '\0' || port == NULL || port[0] == '\0') {
        sb_err_set(err, "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                        "must be set");
        return NULL;
    }
    const char *dir = getenv("SB_SERVICEACCOUNT_DIR");
    if (dir == NULL || dir[0] == '\0')
        dir = SA_DIR_DEFAULT;
    sb_k8s_config *c = config_new();
    char path[PATH_MAX];
    if (c == NULL) {
        sb_err_set(err, "in-cluster config: out of memory");
        return NULL;
    }
    size_t n = strlen(host) + strlen(port) + 16;
    c->server = malloc(n);
    if (c->server == NULL)
        goto oom;
    /* An IPv6 address needs brackets in a URL. */
    if (strchr(host, ':') != NULL)
        snprintf(c->server, n, "https://[%s]:%s", host, port);
    else
        snprintf(c->server, n, "https://%s:%s", host, port);
    sb_err e = {0};
    snprintf(path, sizeof path, "%s/ca.crt", dir);
    c->ca = read_file(path, &c->ca_len, &e);
    if (c->ca == NULL) {
        sb_err_set(err, "in-cluster config: CA certificate %s", e.msg);
        goto fail;
    }
    snprintf(path, sizeof path, "%s/namespace", dir);
    c->ns = read_file(path, NULL, &e);
    if (c->ns != NULL)
        rstrip(c->ns, " \t\r\n");
    if (c->ns == NULL || c->ns[0] == '\0') {
        free(c->ns);
        c->ns = strdup("default");
    }
    c->context = strdup("");
    snprintf(path, sizeof path, "%s/token", dir);
    c->token_file = strdup(path);
    if (c->ns == NULL || c->context == NULL || c->token_file == NULL)
        goto oom;
    char *t = sb_k8s_config_token(c, &e);
    if (t == NULL) {
        sb_err_set(err, "in-cluster config: token %s", e.msg);
        goto fail;
    }
    free(t);
    return c;
oom:
    sb_err_set(err, "in-cluster config: out of memory");
fail:
    sb_k8s_config_free(c);
    return NULL;
}

sb_k8s_config *sb_k8s_config_load_default(sb_err *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if (host != NULL && host[0] != '\0')
        return sb_k8s_config_in_cluster(err);
    return sb_k8s_config_load_kubeconfig(NULL, NULL, err);
}

const char *sb_k8s_config_server(const sb_k8s_config *c)
{
    return c->server;
}

const char *sb_k8s_config_namespace(const sb_k8s_config *c)
{
    return c->ns;
}

const char *sb_k8s_config_context(const sb_k8s_config *c)
{
    return c->context;
}

const char *sb_k8s_config_ca_pem(const sb_k8s_config *c, size_t *len)
{
    *len = c->ca_len;
    return c->ca;
}

const char *sb_k8s_config_client_cert_pem(const sb_k8s_config *c, size_t *len)
{
    *len = c->cert_len;
    return c->cert;
}

const char *sb_k8s_config_client_key_pem(const sb_k8s_config *c, size_t *len)
{
    *len = c->key_len;
    return c->key;
}

const char *sb_k8s_config_token_file(const sb_k8s_config *c)
{
    return c->token_file;
}

void sb_k8s_config_set_token_refresh(sb_k8s_config *c, long ms)
{
    pthread_mutex_lock(&c->mu);
    c->refresh_ms = ms;
    pthread_mutex_unlock(&c->mu);
}

char *sb_k8s_config_token(sb_k8s_config *c, sb_err *err)
{
    sb_err_clear(err);
    pthread_mutex_lock(&c->mu);
    if (c->token_file != NULL &&
        (c->token == NULL || now_s() - c->token_read_at >= (double)c->refresh_ms / 1000.0)) {
        sb_err e = {0};
        char *t = read_file(c->token_file, NULL, &e);
        if (t != NULL)
            rstrip(t, " \t\r\n");
        if (t != NULL && t[0] != '\0') {
            if (c->token != NULL) {
                memset(c->token, 0, strlen(c->token));
                free(c->token);
            }
            c->token = t;
            c->token_read_at = now_s();
        } else {
            /* Keep using the previous token if there is one (the file may be mid-rotation). */
            if (t != NULL)
                sb_err_set(&e, "%s: empty", c->token_file);
            free(t);
            if (c->token == NULL) {
                pthread_mutex_unlock(&c->mu);
                sb_err_set(err, "%s", e.msg);
                return NULL;
            }
        }
    }
    char *out = c->token != NULL ? strdup(c->token) : NULL;
    pthread_mutex_unlock(&c->mu);
    if (out == NULL && c->token != NULL)
        sb_err_set(err, "token: out of memory");
    return out;
}
