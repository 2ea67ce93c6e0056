/* metrics.c — the metrics registry (see metrics.h): counter, gauge and histogram families with
 * fixed label names, one series per distinct tuple of label values, collect callbacks run at
 * scrape time, and the Prometheus text exposition. Owns the families, series and label copies. */

#include "metrics/metrics.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

const double sb_metrics_task_buckets[SB_METRICS_TASK_NBUCKETS] = {
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
const size_t sb_metrics_task_nbuckets = SB_METRICS_TASK_NBUCKETS;
_Static_assert(sizeof sb_metrics_task_buckets / sizeof(double) == SB_METRICS_TASK_NBUCKETS,
               "bucket count");

typedef struct series {
    char **values; /* one per label */
    double v;      /* counter/gauge value; histogram: sum */
    unsigned long long count;
    unsigned long long *buckets; /* histogram: cumulative later, per bucket here */
} series;

struct sb_metric {
    sb_metrics *reg;
    sb_metric_type type;
    char *name, *help;
    char *labels[SB_METRIC_MAX_LABELS];
    size_t nlabels;
    double *bounds;
    size_t nb;
    series *s;
    size_t n, cap;
};

struct sb_metrics {
    pthread_mutex_t mu;
    sb_metric **f;
    size_t n, cap;
    struct {
        sb_metrics_collect_fn fn;
        void *ud;
    } cb[8];
    size_t ncb;
    sb_metric *proc[5]; /* process_* families, when registered */
};

sb_metrics *sb_metrics_new(void)
{
    sb_metrics *m = calloc(1, sizeof *m);
    if (m != NULL)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void series_free(sb_metric *f, series *s)
{
    for (size_t i = 0; i < f->nlabels; i++)
        free(s->values[i]);
    free(s->values);
    free(s->buckets);
}

static void family_free(sb_metric *f)
{
    for (size_t i = 0; i < f->n; i++)
        series_free(f, &f->s[i]);
    free(f->s);
    for (size_t i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f->bounds);
    free(f->name);
    free(f->help);
    free(f);
}

void sb_metrics_free(sb_metrics *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++)
        family_free(m->f[i]);
    free(m->f);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; labels: no ':' and no leading "__". */
static int valid_name(const char *s, int label)
{
    if (s == NULL || *s == '\0')
        return 0;
    if (label && s[0] == '_' && s[1] == '_')
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (!label && c == ':') || (p != s && c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

sb_metric *sb_metrics_add(sb_metrics *m, sb_metric_type type, const char *name, const char *help,
                          const char *const *labels, const double *buckets, size_t nb, sb_err *err)
{
    if (!valid_name(name, 0)) {
        sb_err_set(err, "metric name \"%.100s\" is not valid", name ? name : "(null)");
        return NULL;
    }
    if (type == SB_METRIC_HISTOGRAM && (buckets == NULL || nb == 0)) {
        sb_err_set(err, "histogram %s: no buckets", name);
        return NULL;
    }
    for (size_t i = 1; type == SB_METRIC_HISTOGRAM && i < nb; i++)
        if (!(buckets[i] > buckets[i - 1])) {
            sb_err_set(err, "histogram %s: buckets are not ascending", name);
            return NULL;
        }
    sb_metric *f = calloc(1, sizeof *f);
    if (f == NULL) {
        sb_err_set(err, "metric %s: out of memory", name);
        return NULL;
    }
    f->reg = m;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    int bad = f->name == NULL || f->help == NULL;
    for (size_t i = 0; !bad && labels != NULL && labels[i] != NULL; i++) {
        if (i == SB_METRIC_MAX_LABELS) {
            sb_err_set(err, "metric %s: more than %d labels", name, SB_METRIC_MAX_LABELS);
            family_free(f);
            return NULL;
        }
        if (!valid_name(labels[i], 1) ||
            (type == SB_METRIC_HISTOGRAM && !strcmp(labels[i], "le"))) {
            sb_err_set(err, "metric %s: label name \"%.64s\" is not valid", name, labels[i]);
            family_free(f);
            return NULL;
        }
        f->labels[i] = strdup(labels[i]);
        f->nlabels = i + 1;
        bad = f->labels[i] == NULL;
    }
    if (!bad && type == SB_METRIC_HISTOGRAM) {
        f->bounds = malloc(nb * sizeof *f->bounds);
        bad = f->bounds == NULL;
        if (!bad)
            memcpy(f->bounds, buckets, nb * sizeof *f->bounds);
        f->nb = nb;
    }
    if (bad) {
        family_free(f);
        sb_err_set(err, "metric %s: out of memory", name);
        return NULL;
    }
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->f[i]->name, name) == 0) {
            pthread_mutex_unlock(&m->mu);
            family_free(f);
            sb_err_set(err, "metric %s is registered twice", name);
            return NULL;
        }
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 16;
        sb_metric **p = realloc(m->f, nc * sizeof *p);
        if (p == NULL) {
            pthread_mutex_unlock(&m->mu);
            family_free(f);
            sb_err_set(err, "metric %s: out of memory", name);
            return NULL;
        }
        m->f = p;
        m->cap = nc;
    }
    m->f[m->n++] = f;
    pthread_mutex_unlock(&m->mu);
    return f;
}

/* The series for values (created when missing); NULL on out of memory. Lock held. */
static series *find(sb_metric *f, const char *const *values)
{
    for (size_t i = 0; i < f->n; i++) {
        size_t k = 0;
        while (k < f->nlabels && strcmp(f->s[i].values[k], values[k] ? values[k] : "") == 0)
            k++;
        if (k == f->nlabels)
            return &f->s[i];
    }
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 8;
        series *p = realloc(f->s, nc * sizeof *p);
        if (p == NULL)
            return NULL;
        f->s = p;
        f->cap = nc;
    }
    series s = {0};
    s.values = calloc(f->nlabels ? f->nlabels : 1, sizeof *s.values);
    if (s.values == NULL)
        return NULL;
    for (size_t k = 0; k < f->nlabels; k++) {
        s.values[k] = strdup(values[k] ? values[k] : "");
        if (s.values[k] == NULL) {
            series_free(f, &s);
            return NULL;
        }
    }
    if (f->type == SB_METRIC_HISTOGRAM) {
        s.buckets = calloc(f->nb, sizeof *s.buckets);
        if (s.buckets == NULL) {
            series_free(f, &s);
            return NULL;
        }
    }
    f->s[f->n] = s;
    return &f->s[f->n++];
}

void sb_metric_inc(sb_metric *f, const char *const *values, double v)
{
    if (f == NULL || f->type == SB_METRIC_HISTOGRAM)
        return;
    pthread_mutex_lock(&f->reg->mu);
    series *s = find(f, values);
    if (s != NULL)
        s->v += v;
    pthread_mutex_unlock(&f->reg->mu);
}

void sb_metric_set(sb_metric *f, const char *const *values, double v)
{
    if (f == NULL || f->type == SB_METRIC_HISTOGRAM)
        return;
    pthread_mutex_lock(&f->reg->mu);
    series *s = find(f, values);
    if (s != NULL)
        s->v = v;
    pthread_mutex_unlock(&f->reg->mu);
}

void sb_metric_observe(sb_metric *f, const char *const *values, double v)
{
    if (f == NULL || f->type != SB_METRIC_HISTOGRAM || isnan(v))
        return;
    pthread_mutex_lock(&f->reg->mu);
    series *s = find(f, values);
    if (s != NULL) {
        s->v += v;
        s->count++;
        for (size_t i = 0; i < f->nb; i++)
            if (v <= f->bounds[i]) {
                s->buckets[i]++;
                break;
            }
    }
    pthread_mutex_unlock(&f->reg->mu);
}

void sb_metric_set_histogram(sb_metric *f, const char *const *values, const uint64_t *counts,
                             size_t nb, uint64_t count, double sum)
{
    if (f == NULL || f->type != SB_METRIC_HISTOGRAM || nb != f->nb)
        return;
    pthread_mutex_lock(&f->reg->mu);
    series *s = find(f, values);
    if (s != NULL) {
        for (size_t i = 0; i < nb; i++)
            s->buckets[i] = counts[i];
        s->count = count;
        s->v = sum;
    }
    pthread_mutex_unlock(&f->reg->mu);
}

void sb_metric_clear(sb_metric *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->reg->mu);
    for (size_t i = 0; i < f->n; i++)
        series_free(f, &f->s[i]);
    f->n = 0;
    pthread_mutex_unlock(&f->reg->mu);
}

double sb_metric_value(sb_metric *f, const char *const *values)
{
    if (f == NULL)
        return 0;
    double v = 0;
    pthread_mutex_lock(&f->reg->mu);
    for (size_t i = 0; i < f->n; i++) {
        size_t k = 0;
        while (k < f->nlabels && strcmp(f->s[i].values[k], values[k] ? values[k] : "") == 0)
            k++;
        if (k == f->nlabels) {
            v = f->type == SB_METRIC_HISTOGRAM ? (double)f->s[i].count : f->s[i].v;
            break;
        }
    }
    pthread_mutex_unlock(&f->reg->mu);
    return v;
}

int sb_metrics_on_collect(sb_metrics *m, sb_metrics_collect_fn fn, void *ud, sb_err *err)
{
    pthread_mutex_lock(&m->mu);
    if (m->ncb == sizeof m->cb / sizeof m->cb[0]) {
        pthread_mutex_unlock(&m->mu);
        return sb_err_set(err, "metrics: too many collect callbacks");
    }
    m->cb[m->ncb].fn = fn;
    m->cb[m->ncb].ud = ud;
    m->ncb++;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* ---- process metrics ---- */

static double boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return 0;
    char line[256];
    double bt = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "btime %lf", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

void sb_metrics_process_read(double *cpu_seconds, uint64_t *rss_bytes)
{
    struct rusage ru;
    *cpu_seconds = 0;
    *rss_bytes = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        *cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        unsigned long long size, rss;
        if (fscanf(f, "%llu %llu", &size, &rss) == 2)
            *rss_bytes = (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
}

static void collect_process(void *ud, sb_metrics *m)
{
    (void)ud;
    double cpu;
    uint64_t rss;
    sb_metrics_process_read(&cpu, &rss);
    sb_metric_set(m->proc[0], NULL, cpu);
    sb_metric_set(m->proc[1], NULL, (double)rss);
    FILE *f;
    f = fopen("/proc/self/stat", "r");
    if (f != NULL) {
        char buf[1024];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        const char *p = strrchr(buf, ')'); /* after comm: field 3 on; starttime is field 22 */
        unsigned long long start = 0;
        for (int field = 2; p != NULL && field < 22; field++)
            p = strchr(p + 1, ' ');
        if (p != NULL && sscanf(p + 1, "%llu", &start) == 1)
            sb_metric_set(m->proc[2], NULL,
                          boot_time() + (double)start / (double)sysconf(_SC_CLK_TCK));
    }
    size_t fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        while (readdir(d) != NULL)
            fds++;
        closedir(d);
        sb_metric_set(m->proc[3], NULL, (double)(fds > 3 ? fds - 3 : 0)); /* ., .., the dir */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        sb_metric_set(m->proc[4], NULL, (double)rl.rlim_cur);
}

int sb_metrics_add_process(sb_metrics *m, sb_err *err)
{
    static const struct {
        sb_metric_type t;
        const char *name, *help;
    } defs[5] = {
        {SB_METRIC_COUNTER, "process_cpu_seconds_total",
         "User and system CPU time of the process."},
        {SB_METRIC_GAUGE, "process_resident_memory_bytes", "Resident memory of the process."},
        {SB_METRIC_GAUGE, "process_start_time_seconds",
         "Start time of the process since the Unix epoch."},
        {SB_METRIC_GAUGE, "process_open_fds", "Open file descriptors."},
        {SB_METRIC_GAUGE, "process_max_fds", "Limit of open file descriptors."},
    };
    for (size_t i = 0; i < 5; i++) {
        m->proc[i] = sb_metrics_add(m, defs[i].t, defs[i].name, defs[i].help, NULL, NULL, 0, err);
        if (m->proc[i] == NULL)
            return -1;
    }
    return sb_metrics_on_collect(m, collect_process, NULL, err);
}

/* ---- rendering ---- */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p != NULL && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + (size_t)n + 1)
            nc *= 2;
        char *q = realloc(b->p, nc);
        if (q == NULL) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
}

/* Escapes a label value (\\, \", \n) or HELP text (\\, \n). */
static void put_escaped(sbuf *b, const char *s, int label)
{
    for (; *s; s++) {
        if (*s == '\\')
            put(b, "\\\\");
        else if (*s == '\n')
            put(b, "\\n");
        else if (label && *s == '"')
            put(b, "\\\"");
        else
            put(b, "%c", *s);
    }
}

static void put_num(sbuf *b, double v)
{
    if (isinf(v))
        put(b, v > 0 ? "+Inf" : "-Inf");
    else if (isnan(v))
        put(b, "NaN");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        put(b, "%.0f", v);
    else {
        char t[40];
        snprintf(t, sizeof t, "%.15g", v); /* the shortest that reads back exactly */
        if (strtod(t, NULL) != v)
            snprintf(t, sizeof t, "%.17g", v);
        put(b, "%s", t);
    }
}

/* name{labels[,le="x"]} */
static void put_series(sbuf *b, const sb_metric *f, const char *suffix, const series *s,
                       const char *le)
{
    put(b, "%s%s", f->name, suffix);
    if (f->nlabels == 0 && le == NULL) {
        put(b, " ");
        return;
    }
    put(b, "{");
    for (size_t k = 0; k < f->nlabels; k++) {
        put(b, "%s%s=\"", k ? "," : "", f->labels[k]);
        put_escaped(b, s->values[k], 1);
        put(b, "\"");
    }
    if (le != NULL)
        put(b, "%sle=\"%s\"", f->nlabels ? "," : "", le);
    put(b, "} ");
}

static const sb_metric *g_sort_family; /* render holds the registry lock */

static int series_cmp(const void *a, const void *b)
{
    const series *x = a, *y = b;
    for (size_t k = 0; k < g_sort_family->nlabels; k++) {
        int c = strcmp(x->values[k], y->values[k]);
        if (c != 0)
            return c;
    }
    return 0;
}

static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

char *sb_metrics_render(sb_metrics *m)
{
    pthread_mutex_lock(&m->mu);
    size_t ncb = m->ncb;
    __typeof__(m->cb[0]) cb[8];
    memcpy(cb, m->cb, sizeof cb);
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < ncb; i++)
        cb[i].fn(cb[i].ud, m);
    sbuf b = {0};
    put(&b, "%s", "");
    pthread_mutex_lock(&m->mu);
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    for (size_t i = 0; i < m->n; i++) {
        sb_metric *f = m->f[i];
        put(&b, "# HELP %s ", f->name);
        put_escaped(&b, f->help, 0);
        put(&b, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
        pthread_mutex_lock(&sort_mu);
        g_sort_family = f;
        qsort(f->s, f->n, sizeof *f->s, series_cmp);
        pthread_mutex_unlock(&sort_mu);
        for (size_t j = 0; j < f->n; j++) {
            const series *s = &f->s[j];
            if (f->type != SB_METRIC_HISTOGRAM) {
                put_series(&b, f, "", s, NULL);
                put_num(&b, s->v);
                put(&b, "\n");
                continue;
            }
            unsigned long long cum = 0;
            for (size_t k = 0; k < f->nb; k++) {
                cum += s->buckets[k];
                char le[64];
                sbuf lb = {.p = le, .cap = sizeof le};
                put_num(&lb, f->bounds[k]);
                put_series(&b, f, "_bucket", s, le);
                put(&b, "%llu\n", cum);
            }
            put_series(&b, f, "_bucket", s, "+Inf");
            put(&b, "%llu\n", s->count);
            put_series(&b, f, "_sum", s, NULL);
            put_num(&b, s->v);
            put(&b, "\n");
            put_series(&b, f, "_count", s, NULL);
            put(&b, "%llu\n", s->count);
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
