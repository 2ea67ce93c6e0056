/* exec.c — the exec operator: user code in any language, as a child process that reads records
 * on stdin and writes records on stdout, one per line (framing "lines"; docs/exec.md is the
 * contract), or Arrow IPC streams both ways (framing "arrow": arrow.c).
 *
 * Args: command (list of strings, required), env (map of strings), framing ("lines" or
 * "arrow"), mode ("filter": one process per task reading its input to end of file, a
 * plain Unix filter; "batches": one long-lived process per worker slot, each batch of input
 * records followed by a delimiter line that the process answers with its output records and
 * the same delimiter), batchSize (records per batch, default the stage's batchSize, else
 * 1000), timeout (a Go duration, default 10m: per batch, and for a filter's end), workingDir,
 * output ("jsonl": every output line must be one JSON value, blank lines skipped; "text": any
 * UTF-8 line), inheritEnv (true, or names: which of the withheld variables the process gets).
 *
 * The process gets the worker's environment less what the worker holds for itself: the storage
 * credentials (AWS_*) and the pipeline's RPC credential (SB_AUTH_*), which reach it only when
 * the stage asks (inheritEnv: true, or a list of names, NAME or PREFIX*; or a value in env).
 *
 * Long-lived processes are kept in a pool keyed by the stage's args: a task takes one (or
 * starts one), and gives it back when it ends cleanly between batches; a process that failed,
 * timed out or was interrupted mid-batch is killed, and one found dead in the pool is replaced.
 *
 * Memory: input records are written straight from the input partition (no copy); output lines
 * are read through one line buffer per process and copied into the op's output.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/utf8.h"
#include "spec/quantity.h"
#include "worker/ops/exec/exec.h"
#include "worker/ops/exec/proc.h"
#include "worker/ops/impls.h"
#include "worker/ops/json.h"

extern char **environ;

#define DELIM "\x1e" /* the batch delimiter line: ASCII RS */
#define DEFAULT_BATCH 1000
#define DEFAULT_TIMEOUT_MS (10 * 60 * 1000)
#define MODE_FILTER SB_EXEC_FILTER
#define MODE_BATCHES SB_EXEC_BATCHES
#define MAX_LINE SB_EXEC_MAX_OUTPUT

/* ---- the pool of long-lived processes ------------------------------------------------------ */

#define POOL_MAX 64
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static sb_exec_child *pool[POOL_MAX];
static size_t npool;

void sb_exec_child_free(sb_exec_child *c)
{
    if (c == NULL)
        return;
    sb_proc_free(c->p);
    sb_ipc_reader_free(&c->rd);
    free(c->key);
    free(c);
}

int sb_exec_child_start(const sb_exec_cfg *cfg, const char *key, sb_exec_child **out, sb_err *err)
{
    *out = NULL;
    sb_exec_child *c = calloc(1, sizeof *c);
    if (c == NULL || (c->key = strdup(key)) == NULL) {
        free(c);
        return sb_err_set(err, "out of memory");
    }
    sb_ipc_reader_init(&c->rd);
    if (sb_proc_start((const char *const *)cfg->argv, (const char *const *)cfg->env, cfg->cwd,
                      &c->p, err) != 0) {
        sb_exec_child_free(c);
        return sb_err_wrap(err, "exec");
    }
    *out = c;
    return 0;
}

sb_exec_child *sb_exec_pool_take(const char *key)
{
    for (;;) {
        sb_exec_child *c = NULL;
        pthread_mutex_lock(&pool_mu);
        for (size_t i = 0; i < npool; i++) {
            if (strcmp(pool[i]->key, key) != 0)
                continue;
            c = pool[i];
            pool[i] = pool[--npool];
            break;
        }
        pthread_mutex_unlock(&pool_mu);
        if (c == NULL || (sb_proc_alive(c->p) && !sb_proc_has_output(c->p)))
            return c;
        sb_exec_child_free(
            c); /* died while idle, or wrote while idle (output of no batch): replace */
    }
}

static void pool_put(sb_exec_child *c)
{
    pthread_mutex_lock(&pool_mu);
    if (npool < POOL_MAX) {
        pool[npool++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    sb_exec_child_free(c);
}

static void exec_shutdown(void)
{
    pthread_mutex_lock(&pool_mu);
    for (size_t i = 0; i < npool; i++)
        sb_exec_child_free(pool[i]);
    npool = 0;
    pthread_mutex_unlock(&pool_mu);
}

uint64_t sb_op_children_rss(void)
{
    return sb_proc_rss_total();
}

void sb_op_kill_children(void)
{
    sb_proc_kill_groups();
}

/* ---- args ------------------------------------------------------------------------------ */

static void strv_free(char **v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

static void cfg_free(sb_exec_cfg *c)
{
    strv_free(c->argv);
    strv_free(c->env);
    free(c->cwd);
    free(c->key);
}

/* The prefixes of the variables a process does not get unless its stage asks (inheritEnv):
 * the worker's storage credentials and its credential for the pipeline's RPCs. */
static const char *const withheld[] = {"AWS_", "SB_AUTH_", NULL};

/* Whether "NAME=..." (nl: NAME's length) is withheld from the process: it has a withheld
 * prefix and inherit (args.inheritEnv) is not true and names it in no item (NAME, PREFIX*). */
static bool env_withheld(const char *kv, size_t nl, const cJSON *inherit)
{
    if (cJSON_IsTrue(inherit))
        return false;
    bool w = false;
    for (size_t i = 0; withheld[i] != NULL && !w; i++)
        w = strncmp(kv, withheld[i], strlen(withheld[i])) == 0 && nl >= strlen(withheld[i]);
    const cJSON *x, *names = cJSON_IsArray(inherit) ? inherit : NULL;
    cJSON_ArrayForEach(x, names)
    {
        if (!w)
            break;
        size_t l = strlen(x->valuestring);
        if (l > 0 && x->valuestring[l - 1] == '*')
            w = !(nl >= l - 1 && strncmp(kv, x->valuestring, l - 1) == 0);
        else
            w = !(nl == l && strncmp(kv, x->valuestring, l) == 0);
    }
    return w;
}

/* args.inheritEnv: absent, a boolean, or a non-empty list of names (NAME or PREFIX*). */
static int check_inherit(const cJSON *inherit, sb_err *err)
{
    if (inherit == NULL || cJSON_IsBool(inherit))
        return 0;
    int ok = cJSON_IsArray(inherit) && cJSON_GetArraySize(inherit) > 0;
    const cJSON *x, *names = ok ? inherit : NULL;
    cJSON_ArrayForEach(x, names)
    {
        ok = ok && cJSON_IsString(x) && x->valuestring[0] != '\0' &&
             strchr(x->valuestring, '=') == NULL;
    }
    return ok ? 0
              : sb_err_set(err, "exec: args.inheritEnv must be true, false or a non-empty list "
                                "of variable names (NAME or PREFIX*)");
}

/* environ less what is withheld (env_withheld), with the stage's env and STREAMBATCH_* set
 * over it. */
static int build_env(sb_exec_cfg *c, const cJSON *env, const cJSON *inherit, sb_err *err)
{
    size_t n0 = 0, ne = 0;
    while (environ != NULL && environ[n0] != NULL)
        n0++;
    for (const cJSON *e = env ? env->child : NULL; e != NULL; e = e->next) {
        if (!cJSON_IsString(e))
            return sb_err_set(err, "exec: env.%.64s must be a string", e->string);
        if (e->string[0] == '\0' || strchr(e->string, '=') != NULL)
            return sb_err_set(err, "exec: env name \"%.64s\" is not a variable name", e->string);
        ne++;
    }
    c->env = calloc(n0 + ne + 3, sizeof *c->env);
    if (c->env == NULL)
        return sb_err_set(err, "out of memory");
    size_t k = 0;
    char *extra[2];
    if (asprintf(&extra[0], "STREAMBATCH_FRAMING=%s", c->arrow ? "arrow" : "lines") < 0 ||
        asprintf(&extra[1], "STREAMBATCH_MODE=%s", c->mode == MODE_BATCHES ? "batches" : "filter") <
            0)
        return sb_err_set(err, "out of memory");
    for (size_t i = 0; i < 2; i++)
        c->env[k++] = extra[i];
    for (const cJSON *e = env ? env->child : NULL; e != NULL; e = e->next) {
        if (asprintf(&c->env[k], "%s=%s", e->string, e->valuestring) < 0)
            return sb_err_set(err, "out of memory");
        k++;
    }
    for (size_t i = 0; i < n0; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool over = false; /* set above already */
        for (size_t j = 0; j < k && !over; j++)
            over = strncmp(c->env[j], environ[i], nl) == 0 && c->env[j][nl] == '=';
        if (over || env_withheld(environ[i], nl, inherit))
            continue;
        if ((c->env[k] = strdup(environ[i])) == NULL)
            return sb_err_set(err, "out of memory");
        k++;
    }
    return 0;
}

/* args.command: a non-empty list of strings, its first non-empty, into c->argv. 0, or -1. */
static int parse_command(const cJSON *cmd, sb_exec_cfg *c, sb_err *err)
{
    if (!cJSON_IsArray(cmd) || cJSON_GetArraySize(cmd) == 0)
        return sb_err_set(err, "exec: args.command must be a non-empty list of strings");
    size_t argc = (size_t)cJSON_GetArraySize(cmd);
    if ((c->argv = calloc(argc + 1, sizeof *c->argv)) == NULL)
        return sb_err_set(err, "out of memory");
    size_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cmd)
    {
        if (!cJSON_IsString(v) || (i == 0 && v->valuestring[0] == '\0'))
            return sb_err_set(err, "exec: args.command[%zu] must be a%s string", i,
                              i == 0 ? " non-empty" : "");
        if ((c->argv[i++] = strdup(v->valuestring)) == NULL)
            return sb_err_set(err, "out of memory");
    }
    return 0;
}

/* args.framing, args.mode and args.output, each one of its words. 0, or -1. */
static int parse_words(const cJSON *a, sb_exec_cfg *c, sb_err *err)
{
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(a, "framing")) != NULL) {
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, "lines") != 0 && strcmp(v->valuestring, "arrow") != 0))
            return sb_err_set(err, "exec: args.framing must be \"lines\" or \"arrow\"");
        c->arrow = strcmp(v->valuestring, "arrow") == 0;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(a, "mode")) != NULL) {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "filter") == 0)
            c->mode = MODE_FILTER;
        else if (cJSON_IsString(v) && strcmp(v->valuestring, "batches") == 0)
            c->mode = MODE_BATCHES;
        else
            return sb_err_set(err, "exec: args.mode must be \"filter\" or \"batches\"");
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(a, "output")) != NULL) {
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, "jsonl") != 0 && strcmp(v->valuestring, "text") != 0))
            return sb_err_set(err, "exec: args.output must be \"jsonl\" or \"text\"");
        c->jsonl = strcmp(v->valuestring, "jsonl") == 0;
    }
    return 0;
}

/* args.batchSize (else 0: the stage's batchSize, else default_batch, the runtime's chunks)
 * and args.timeout, a duration more than 0. 0, or -1. */
static int parse_limits(const cJSON *a, sb_exec_cfg *c, sb_err *err)
{
    const cJSON *v;
    c->batch = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(a, "batchSize")) != NULL) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e9 ||
            v->valuedouble != (double)(int64_t)v->valuedouble)
            return sb_err_set(err, "exec: args.batchSize must be an integer >= 1");
        c->batch = (size_t)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(a, "timeout")) != NULL) {
        int64_t ns = 0;
        if (!cJSON_IsString(v))
            return sb_err_set(err, "exec: args.timeout must be a duration such as \"30s\"");
        if (sb_duration_parse(v->valuestring, &ns, err) != 0) {
            sb_err_wrap(err, "exec: args.timeout");
            return -1;
        }
        if (ns <= 0)
            return sb_err_set(err, "exec: args.timeout must be more than 0");
        c->timeout_ms = ns / 1000000 > 0 ? ns / 1000000 : 1;
    }
    return 0;
}

static int parse_args(const char *args_json, sb_exec_cfg *c, sb_err *err)
{
    memset(c, 0, sizeof *c);
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    c->jsonl = true;
    if (args_json == NULL)
        return sb_err_set(err, "exec: args.command is required");
    cJSON *a = cJSON_Parse(args_json);
    if (a == NULL || !cJSON_IsObject(a)) {
        cJSON_Delete(a);
        return sb_err_set(err, "exec: args are not a JSON object");
    }
    int rc = -1;
    const cJSON *v;
    if (parse_command(cJSON_GetObjectItemCaseSensitive(a, "command"), c, err) != 0 ||
        parse_words(a, c, err) != 0 || parse_limits(a, c, err) != 0)
        goto out;
    if ((v = cJSON_GetObjectItemCaseSensitive(a, "workingDir")) != NULL) {
        if (!cJSON_IsString(v) || v->valuestring[0] == '\0') {
            sb_err_set(err, "exec: args.workingDir must be a non-empty string");
            goto out;
        }
        if ((c->cwd = strdup(v->valuestring)) == NULL) {
            sb_err_set(err, "out of memory");
            goto out;
        }
    }
    if (c->arrow && cJSON_GetObjectItemCaseSensitive(a, "output") != NULL) {
        sb_err_set(err, "exec: args.output applies to framing \"lines\" only");
        goto out;
    }
    v = cJSON_GetObjectItemCaseSensitive(a, "inheritEnv");
    if (check_inherit(v, err) != 0 ||
        build_env(c, cJSON_GetObjectItemCaseSensitive(a, "env"), v, err) != 0)
        goto out;
    if ((c->key = strdup(args_json)) == NULL) {
        sb_err_set(err, "out of memory");
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(a);
    return rc;
}

/* ---- the op ------------------------------------------------------------------------------ */

static void exec_free(void *state)
{
    sb_exec_state *s = state;
    if (s == NULL)
        return;
    if (s->c != NULL && s->cfg.mode == MODE_BATCHES && s->clean && sb_proc_alive(s->c->p) &&
        !sb_proc_has_output(s->c->p))
        pool_put(s->c);
    else
        sb_exec_child_free(s->c);
    sb_ipc_buf_free(&s->msg);
    cfg_free(&s->cfg);
    free(s);
}

static int exec_init(const char *args_json, void **state, sb_err *err)
{
    *state = NULL;
    sb_exec_state *s = calloc(1, sizeof *s);
    if (s == NULL)
        return sb_err_set(err, "out of memory");
    if (parse_args(args_json, &s->cfg, err) != 0) {
        cfg_free(&s->cfg);
        free(s);
        return -1;
    }
    s->clean = true;
    *state = s;
    if (s->cfg.arrow)
        return 0; /* started at the first batch: the pool key includes the input's schema */
    if (s->cfg.mode == MODE_BATCHES)
        s->c = sb_exec_pool_take(s->cfg.key);
    if (s->c == NULL && sb_exec_child_start(&s->cfg, s->cfg.key, &s->c, err) != 0) {
        *state = NULL;
        exec_free(s);
        return -1;
    }
    s->cpu0 = sb_proc_cpu_seconds(s->c->p);
    return 0;
}

static double exec_cpu(void *state)
{
    sb_exec_state *s = state;
    return s->c != NULL ? sb_proc_cpu_seconds(s->c->p) - s->cpu0 : 0;
}

static size_t fill(void *ud, struct iovec *iov, size_t max)
{
    sb_exec_state *s = ud;
    size_t k = 0;
    while (k < max) {
        if (s->nl_pending) {
            iov[k++] = (struct iovec){(void *)"\n", 1};
            s->nl_pending = false;
            continue;
        }
        if (s->row < s->end) {
            size_t n;
            const void *p = sb_column_binary(s->col, s->row++, &n);
            iov[k++] = (struct iovec){(void *)p, n};
            s->nl_pending = true;
            continue;
        }
        if (s->delim_pending) {
            iov[k++] = (struct iovec){(void *)DELIM "\n", 2};
            s->delim_pending = false;
        }
        break;
    }
    return k;
}

static int on_line(void *ud, const char *p, size_t n, sb_err *err)
{
    sb_exec_state *s = ud;
    s->line_no++;
    if (s->cfg.mode == MODE_BATCHES && n == 1 && p[0] == DELIM[0]) {
        s->delim_seen = true;
        return 1;
    }
    if (s->cfg.jsonl) {
        size_t i = 0;
        while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
            i++;
        if (i == n)
            return 0; /* blank lines are no records, as in jsonl files */
        char msg[128], ex[64];
        if (sb_op_json_scan(p, n, NULL, 0, NULL, NULL, msg, sizeof msg) != 0)
            return sb_err_set(err, "output line %zu is not valid JSON (%s): %s", s->line_no, msg,
                              sb_op_excerpt(p, n, ex, sizeof ex));
    }
    size_t bad;
    if (!sb_utf8_valid(p, n, &bad))
        return sb_err_set(err, "output line %zu is not valid UTF-8 (byte %zu)", s->line_no, bad);
    return sb_op_out_append_binary(s->out, p, n, err); /* may run the next op of the chain */
}

/* Checks that rows [first, first+n) can travel as lines. */
static int check_rows(const sb_exec_state *s, const sb_column *c, size_t first, size_t n,
                      sb_err *err)
{
    for (size_t r = first; r < first + n; r++) {
        size_t len;
        const char *p = sb_column_binary(c, r, &len);
        if (len > 0 && memchr(p, '\n', len) != NULL)
            return sb_err_data(err,
                               "exec: record %zu contains a line break; framing \"lines\" carries "
                               "one record per line",
                               r);
        if (s->cfg.mode == MODE_BATCHES && len == 1 && p[0] == DELIM[0])
            return sb_err_data(err, "exec: record %zu is the batch delimiter (a lone 0x1e byte)",
                               r);
    }
    return 0;
}

static int run_batch(sb_exec_state *s, size_t first, size_t n, sb_err *err)
{
    s->row = first;
    s->end = first + n;
    s->nl_pending = false;
    s->delim_pending = s->cfg.mode == MODE_BATCHES;
    s->delim_seen = false;
    if (s->cfg.mode == MODE_BATCHES)
        s->line_no = 0; /* a filter's lines are numbered over the whole task */
    sb_proc_io io = {.fill = fill, .line = on_line, .ud = s};
    int64_t deadline = sb_proc_now_ms() + s->cfg.timeout_ms;
    s->clean = false;
    if (s->cfg.mode == MODE_FILTER) {
        if (s->cut)
            return 0; /* it took no more input */
        if (sb_proc_pump(s->c->p, &io, SB_PROC_UNTIL_WRITTEN, deadline, MAX_LINE, err) != 0)
            return sb_err_wrap(err, "exec (records %zu-%zu)", first, first + n - 1);
        s->cut = io.epipe;
        s->clean = true;
        return 0;
    }
    if (sb_proc_pump(s->c->p, &io, SB_PROC_UNTIL_LINE_OR_EOF, deadline, MAX_LINE, err) != 0)
        return sb_err_wrap(err, "exec (batch of records %zu-%zu)", first, first + n - 1);
    if (!s->delim_seen) {
        /* its stdout ended: it exited or is about to */
        int64_t dl = sb_proc_now_ms() + 2000;
        if (sb_proc_wait(s->c->p, dl, err) == 0)
            sb_err_set(err, "exited with status 0");
        return sb_err_wrap(err,
                           "exec (batch of records %zu-%zu): the process ended before "
                           "answering the batch",
                           first, first + n - 1);
    }
    s->clean = true;
    return 0;
}

static int exec_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                        sb_err *err)
{
    sb_exec_state *s = state;
    if (s->cfg.arrow)
        return sb_exec_arrow_process(s, in, first, n, out, err);
    int ci = sb_op_record_column(in, "exec", err);
    if (ci < 0)
        return -1;
    if (!sb_op_out_has_schema(out)) {
        sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
        if (sb_op_out_set_schema(out, &f, 1, err) != 0)
            return -1;
    }
    const sb_column *c = sb_batch_column(in, (size_t)ci);
    if (check_rows(s, c, first, n, err) != 0)
        return -1;
    s->col = c;
    s->out = out;
    size_t step = s->cfg.batch ? s->cfg.batch : n;
    if (n == 0)
        return 0;
    for (size_t at = first; at < first + n; at += step) {
        size_t k = first + n - at < step ? first + n - at : step;
        if (run_batch(s, at, k, err) != 0)
            return -1;
    }
    return 0;
}

static int exec_finish(void *state, sb_op_out *out, sb_err *err)
{
    sb_exec_state *s = state;
    if (s->cfg.arrow)
        return sb_exec_arrow_finish(s, out, err);
    if (s->cfg.mode == MODE_BATCHES) {
        /* output after its last answer belongs to no batch: fail rather than lose it, or hand
         * it to the next task that takes this process */
        if (sb_proc_has_output(s->c->p)) {
            s->clean = false;
            return sb_err_set(err, "exec: the process wrote output after answering its last "
                                   "batch (records must come before the batch's delimiter)");
        }
        return 0;
    }
    if (!sb_op_out_has_schema(out)) {
        sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
        if (sb_op_out_set_schema(out, &f, 1, err) != 0)
            return -1;
    }
    s->out = out;
    s->clean = false;
    sb_proc_close_stdin(s->c->p);
    sb_proc_io io = {.fill = NULL, .line = on_line, .ud = s};
    int64_t deadline = sb_proc_now_ms() + s->cfg.timeout_ms;
    if (sb_proc_pump(s->c->p, &io, SB_PROC_UNTIL_LINE_OR_EOF, deadline, MAX_LINE, err) != 0 ||
        sb_proc_wait(s->c->p, deadline, err) != 0)
        return sb_err_wrap(err, "exec");
    return 0;
}

const sb_op_impl sb_op_exec_impl = {
    .name = "exec",
    .init = exec_init,
    .process = exec_process,
    .finish = exec_finish,
    .free = exec_free,
    .shutdown = exec_shutdown,
    .child_cpu = exec_cpu,
    .default_batch = DEFAULT_BATCH,
};
