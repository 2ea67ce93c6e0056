/* The checkpoint log (controller/ctl/ckptlog.h): a writer appends only what is new as segments
 * and compacts into a new base; a reader gets back exactly the committed splits and parts
 * (checked against a model), refuses a foreign, stale, torn or edited log naming the file and
 * line, and accepts a log ahead of its summary (a writer killed before its summary). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/ctl/ckptlog.h"
#include "controller/local/runckpt.h"
#include "controller/sched/ranges.h"
#include "controller/sched/sched.h"

#define NSPLITS 400
#define SPEC "0123456789abcdef"
#define PLAN "fedcba9876543210"

static char g_dir[256];

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/sb-ckptlog-%d/_streambatch/checkpoint", (int)getpid());
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/sb-ckptlog-%d", (int)getpid());
    cr_assert_eq(system(cmd), 0);
}

TestSuite(ckptlog, .init = setup, .fini = teardown);

/* The model: splits [0, ncommitted) committed, each with two parts. */
typedef struct {
    sb_storage_output parts[2 * NSPLITS];
    char ids[2 * NSPLITS][32];
    char orders[2 * NSPLITS][32];
    uint8_t set[NSPLITS];
} model;

static void model_make(model *m, size_t ncommitted, size_t *nparts, char **ranges)
{
    memset(m->set, 0, sizeof m->set);
    size_t n = 0;
    for (size_t s = 0; s < ncommitted; s++) {
        m->set[s] = 1;
        for (int k = 0; k < 2; k++, n++) {
            snprintf(m->ids[n], sizeof m->ids[n], "s1-t%zu-p%d", s, k);
            snprintf(m->orders[n], sizeof m->orders[n], "%zu.%d", s, k);
            m->parts[n] = (sb_storage_output){.id = m->ids[n],
                                              .rows = s + 1,
                                              .bytes = 10 * s,
                                              .crc32c = (uint32_t)(s * 7919u + (unsigned)k),
                                              .order = k ? m->orders[n] : NULL};
        }
    }
    *nparts = n;
    *ranges = sb_ranges_format(m->set, NSPLITS);
}

static size_t count_files(const char *prefix)
{
    DIR *d = opendir(g_dir);
    size_t n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* Reads the log back as sum describes it and compares it with the model's first n splits. */
static void expect_load(const sb_ckptlog_summary *sum, size_t n)
{
    sb_ckpt c;
    sb_err err = {0};
    cr_assert_eq(sb_ckptlog_load(sum, &c, NULL, &err), 0, "%s", err.msg);
    model m;
    size_t np;
    char *r;
    model_make(&m, n, &np, &r);
    cr_assert_str_eq(c.committed_splits, r);
    cr_assert_eq(c.ncommitted, n);
    cr_assert_eq(c.nparts, np);
    for (size_t i = 0; i < np; i++) {
        size_t j = 0;
        while (j < c.nparts && strcmp(c.parts[j].id, m.parts[i].id) != 0)
            j++;
        cr_assert_lt(j, c.nparts, "part %s missing", m.parts[i].id);
        cr_assert_eq(c.parts[j].rows, m.parts[i].rows);
        cr_assert_eq(c.parts[j].bytes, m.parts[i].bytes);
        cr_assert_eq(c.parts[j].crc32c, m.parts[i].crc32c);
        cr_assert_eq(c.parts[j].order == NULL, m.parts[i].order == NULL);
        if (c.parts[j].order)
            cr_assert_str_eq(c.parts[j].order, m.parts[i].order);
    }
    cr_assert_str_eq(c.spec_hash, SPEC);
    cr_assert_str_eq(c.plan_hash, PLAN);
    free(r);
    sb_ckpt_free(&c);
}

/* Commits splits up to n through w (one update). */
static int commit_to(sb_ckptlog *w, size_t n, int *wrote, sb_err *err)
{
    model m;
    size_t np;
    char *r;
    model_make(&m, n, &np, &r);
    int rc = sb_ckptlog_update(w, PLAN, NSPLITS, r, m.parts, np, wrote, err);
    free(r);
    return rc;
}

Test(ckptlog, appends_only_what_is_new_and_reads_back)
{
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    cr_assert_eq(sb_ckptlog_init(&w, g_dir, NULL, 0, SPEC, &err), 0, "%s", err.msg);
    cr_assert_eq(commit_to(&w, 0, &wrote, &err), 0);
    cr_assert_eq(wrote, 0, "nothing committed: nothing written");
    cr_assert_eq(commit_to(&w, 10, &wrote, &err), 0, "%s", err.msg);
    cr_assert_eq(wrote, 1);
    cr_assert_eq(w.sum.generation, 1);
    cr_assert_eq(w.sum.segments, 0);
    uint64_t before = w.parts_written;
    for (size_t n = 20; n <= 50; n += 10) {
        cr_assert_eq(commit_to(&w, n, &wrote, &err), 0, "%s", err.msg);
        cr_assert_eq(wrote, 1);
        cr_assert_eq(w.parts_written - before, 20, "a segment holds only the new parts");
        before = w.parts_written;
        expect_load(&w.sum, n);
    }
    cr_assert_eq(commit_to(&w, 50, &wrote, &err), 0);
    cr_assert_eq(wrote, 0, "nothing new: nothing written");
    cr_assert_eq(w.sum.segments, 4);
    cr_assert_eq(w.sum.parts, 100);
    cr_assert_eq(w.sum.splits, 50);
    cr_assert_eq(count_files("seg-"), 4);
    cr_assert_eq(count_files("base-"), 1);
    cr_assert_eq(count_files(".tmp-"), 0);
    sb_ckptlog_free(&w);
}

/* A log of a base and two segments; *sum its summary. */
static void make_log(sb_ckptlog_summary *sum)
{
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    cr_assert_eq(sb_ckptlog_init(&w, g_dir, NULL, 0, SPEC, &err), 0);
    for (size_t n = 10; n <= 30; n += 10)
        cr_assert_eq(commit_to(&w, n, &wrote, &err), 0, "%s", err.msg);
    *sum = w.sum;
    sb_ckptlog_free(&w);
}

/* A resumed run's writer: the log s1 describes read back (*c, *found), and w made at epoch 1
 * continuing it. */
static void reopen(sb_ckptlog *w, const sb_ckptlog_summary *s1, sb_ckptlog_summary *found,
                   sb_ckpt *c)
{
    sb_err err = {0};
    cr_assert_eq(sb_ckptlog_load(s1, c, found, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_ckptlog_init(w, g_dir, found->id, 1, SPEC, &err), 0);
    cr_assert_eq(sb_ckptlog_continue(w, found, c, &err), 0, "%s", err.msg);
}

Test(ckptlog, a_resumed_run_appends_to_the_log_it_read)
{
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    cr_assert_eq(sb_ckptlog_init(&w, g_dir, NULL, 0, SPEC, &err), 0);
    for (size_t n = 1; n <= 30; n++)
        cr_assert_eq(commit_to(&w, n, &wrote, &err), 0, "%s", err.msg);
    uint64_t base_bytes = w.base_bytes, seg_bytes = w.seg_bytes;
    /* a resumed run: epoch 1 continues the same id and, the log being whole, appends to it:
     * its first write costs the new parts, not the whole log again */
    sb_ckptlog_summary s1 = w.sum, found;
    sb_ckptlog_free(&w);
    sb_ckpt c;
    reopen(&w, &s1, &found, &c);
    cr_assert_eq(found.base_bytes, base_bytes);
    cr_assert_eq(found.seg_bytes, seg_bytes);
    cr_assert_eq(commit_to(&w, 31, &wrote, &err), 0, "%s", err.msg);
    cr_assert_eq(wrote, 1);
    cr_assert_eq(w.sum.generation, 1, "appended, not compacted");
    cr_assert_eq(w.sum.segments, s1.segments + 1);
    cr_assert_eq(w.parts_written, 2, "only split 30's two parts written");
    expect_load(&w.sum, 31);
    expect_load(&s1, 31); /* the old summary is behind the log: accepted */
    sb_ckptlog_free(&w);
    /* a writer that did not read the log compacts at its first write */
    cr_assert_eq(sb_ckptlog_init(&w, g_dir, found.id, 2, SPEC, &err), 0);
    cr_assert_eq(commit_to(&w, 32, &wrote, &err), 0, "%s", err.msg);
    cr_assert_eq(w.sum.generation, 2);
    cr_assert_eq(w.sum.segments, 0);
    cr_assert_eq(count_files("seg-"), 0, "the old generation's segments are removed");
    cr_assert_eq(count_files("base-"), 1);
    /* another log (foreign id) is not continued */
    sb_ckptlog w2;
    cr_assert_eq(sb_ckptlog_init(&w2, g_dir, NULL, 3, SPEC, &err), 0);
    cr_assert_eq(sb_ckptlog_continue(&w2, &found, &c, &err), -1);
    sb_ckptlog_free(&w2);
    sb_ckpt_free(&c);
    /* a split taken back: the next write rewrites what is true */
    cr_assert_eq(commit_to(&w, 20, &wrote, &err), 0);
    cr_assert_eq(w.sum.generation, 3);
    expect_load(&w.sum, 20);
    sb_ckptlog_free(&w);
}

Test(ckptlog, a_resumed_run_whose_plan_dropped_splits_compacts)
{
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    sb_ckptlog_summary s1, found;
    make_log(&s1);
    sb_ckpt c;
    reopen(&w, &s1, &found, &c);
    sb_ckpt_free(&c);
    /* the resume verified the sink and took splits 20-29 back: a rewrite, not an append */
    cr_assert_eq(commit_to(&w, 20, &wrote, &err), 0, "%s", err.msg);
    cr_assert_eq(w.sum.generation, 2);
    cr_assert_eq(w.sum.segments, 0);
    expect_load(&w.sum, 20);
    sb_ckptlog_free(&w);
}

Test(ckptlog, segments_compact_only_when_they_outweigh_the_base)
{
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    cr_assert_eq(sb_ckptlog_init(&w, g_dir, NULL, 0, SPEC, &err), 0);
    w.min_compact = 0; /* the ratio alone, at this small size */
    cr_assert_eq(commit_to(&w, 20, &wrote, &err), 0, "%s", err.msg);
    uint32_t compactions = 0;
    uint64_t rewrites = 0;
    for (size_t n = 21; n <= NSPLITS; n++) {
        uint32_t gen = w.sum.generation;
        int due = w.sum.parts - w.base_parts > w.base_parts * SB_CKPTLOG_SEG_RATIO;
        uint64_t b0 = w.bytes;
        cr_assert_eq(commit_to(&w, n, &wrote, &err), 0, "%s", err.msg);
        cr_assert_eq(w.sum.generation != gen, due, "at %zu: compacted %d, due %d", n,
                     w.sum.generation != gen, due);
        compactions += w.sum.generation != gen;
        if (w.sum.generation == gen)
            cr_assert_lt(w.bytes - b0, 1024, "an append costs its own lines");
        else
            rewrites += w.bytes - b0;
    }
    expect_load(&w.sum, NSPLITS);
    /* each base holds SB_CKPTLOG_SEG_RATIO + 1 times the last: few rewrites, under twice the log */
    cr_assert_leq(compactions, 6, "%u compactions", compactions);
    cr_assert_geq(compactions, 1);
    cr_assert_lt(rewrites, 2 * (w.base_bytes + w.seg_bytes), "%llu bytes rewritten, log %llu",
                 (unsigned long long)rewrites, (unsigned long long)(w.base_bytes + w.seg_bytes));
    sb_ckptlog_free(&w);
}

static void expect_refused(const sb_ckptlog_summary *sum, const char *needle, const char *needle2)
{
    sb_ckpt c;
    sb_err err = {0};
    cr_assert_eq(sb_ckptlog_load(sum, &c, NULL, &err), -1, "expected refusal (%s)", needle);
    cr_assert(strstr(err.msg, needle) != NULL, "\"%s\" lacks \"%s\"", err.msg, needle);
    if (needle2)
        cr_assert(strstr(err.msg, needle2) != NULL, "\"%s\" lacks \"%s\"", err.msg, needle2);
    cr_assert_eq(c.nparts, 0);
}

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", g_dir, name);
}

Test(ckptlog, a_torn_segment_is_refused_naming_the_file)
{
    sb_ckptlog_summary sum;
    make_log(&sum);
    char p[512];
    path_of(p, sizeof p, "seg-00000001-00000002.sbck");
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(truncate(p, st.st_size / 2), 0);
    expect_refused(&sum, "seg-00000001-00000002.sbck", "cut short");
}

Test(ckptlog, an_edited_part_is_refused_by_the_hash)
{
    sb_ckptlog_summary sum;
    make_log(&sum);
    char p[512];
    path_of(p, sizeof p, "seg-00000001-00000001.sbck");
    FILE *f = fopen(p, "r+");
    cr_assert_not_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    char *x = strstr(buf, "s1-t12-p0:13:");
    cr_assert_not_null(x);
    x[10] = '9'; /* rows 13 -> 93 */
    rewind(f);
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
    expect_refused(&sum, "seg-00000001-00000001.sbck", "changed or damaged");
}

Test(ckptlog, a_bad_line_is_named)
{
    /* a well-chained file whose part line is bad: the decoder names the line */
    sb_ckptlog_file f = {.base = 1, .generation = 1};
    memcpy(f.id, SPEC, 17);
    memcpy(f.spec_hash, SPEC, 17);
    memcpy(f.plan_hash, PLAN, 17);
    sb_storage_output parts[2] = {{.id = "ok", .rows = 1}, {.id = "bad id!", .rows = 2}};
    size_t len;
    char *text = sb_ckptlog_encode(&f, "0-1", parts, 2, &len);
    cr_assert_not_null(text);
    char *ranges;
    sb_storage_output *out;
    size_t n;
    sb_err err = {0};
    cr_assert_eq(sb_ckptlog_decode(text, len, "X", &f, &ranges, &out, &n, &err), -1);
    cr_assert(strstr(err.msg, "X: line 13:") != NULL, "%s", err.msg);
    free(text);
    /* and one that is right reads back */
    parts[1].id = "good";
    text = sb_ckptlog_encode(&f, "0-1", parts, 2, &len);
    cr_assert_eq(sb_ckptlog_decode(text, len, "X", &f, &ranges, &out, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(out[1].id, "good");
    cr_assert_str_eq(ranges, "0-1");
    free(ranges);
    sb_sched_parts_free(out, n);
    free(text);
}

Test(ckptlog, a_foreign_or_stale_log_is_refused)
{
    sb_ckptlog_summary sum, s;
    make_log(&sum);
    s = sum;
    memcpy(s.id, "00000000000000aa", 17);
    expect_refused(&s, "foreign", "00000000000000aa");
    s = sum;
    memcpy(s.spec_hash, "00000000000000bb", 17);
    expect_refused(&s, "foreign", "spec hash");
    s = sum;
    s.generation = sum.generation + 1;
    expect_refused(&s, "stale", "generation");
    s = sum;
    s.segments = sum.segments + 1;
    expect_refused(&s, "stale", "seg-00000001-00000003.sbck is missing");
    s = sum;
    memcpy(s.hash, "0000000000000001", 17);
    expect_refused(&s, "stale or foreign", "seg-00000001-00000002.sbck");
    /* the summary itself, read back from where others edit it */
    cJSON *j = sb_ckptlog_summary_json(&sum);
    sb_ckptlog_summary back;
    sb_err err = {0};
    cr_assert_eq(sb_ckptlog_summary_parse(j, "status.checkpoint", &back, &err), 0, "%s", err.msg);
    cr_assert_str_eq(back.hash, sum.hash);
    cr_assert_str_eq(back.location, sum.location);
    cr_assert_eq(back.segments, sum.segments);
    cJSON_ReplaceItemInObject(j, "generation", cJSON_CreateString("x"));
    cr_assert_eq(sb_ckptlog_summary_parse(j, "status.checkpoint", &back, &err), -1);
    cr_assert(strstr(err.msg, "status.checkpoint.generation") != NULL, "%s", err.msg);
    cJSON_Delete(j);
    /* removed: nothing left, the empty _streambatch too */
    cr_assert_eq(sb_ckptlog_remove(g_dir, &err), 0, "%s", err.msg);
    char parent[300];
    snprintf(parent, sizeof parent, "/tmp/sb-ckptlog-%d/_streambatch", (int)getpid());
    struct stat st;
    cr_assert_neq(stat(parent, &st), 0);
    expect_refused(&sum, "no base file", NULL);
}

Test(ckptlog, a_leftover_temporary_is_skipped)
{
    sb_ckptlog_summary sum;
    make_log(&sum);
    char p[512];
    path_of(p, sizeof p, ".tmp-seg-00000001-00000003.sbck");
    FILE *f = fopen(p, "w");
    fputs("streambatch-checkpoint 1\nid ", f); /* a writer killed mid-write */
    fclose(f);
    expect_load(&sum, 30);
}

Test(ckptlog, the_local_log_goes_beside_a_file_sink_else_beside_the_checkpoint_file)
{
    sb_pipeline p;
    memset(&p, 0, sizeof p);
    char out[PATH_MAX];
    sb_err err = {0};
    p.spec.sink.uri = "file:///data/out/";
    cr_assert_eq(sb_runckpt_log_dir(&p, "/s/ck.json", out, sizeof out, &err), 0, "%s", err.msg);
    cr_expect_str_eq(out, "/data/out/_streambatch/checkpoint");
    p.spec.sink.uri = "s3://bucket/out/";
    cr_assert_eq(sb_runckpt_log_dir(&p, "/s/ck.json", out, sizeof out, &err), 0, "%s", err.msg);
    cr_expect_str_eq(out, "/s/ck.log", "a sink the driver cannot hold it in: beside the file");
    char cwd[PATH_MAX], want[PATH_MAX + 16];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(want, sizeof want, "%s/ck.log", cwd);
    cr_assert_eq(sb_runckpt_log_dir(&p, "ck.json", out, sizeof out, &err), 0, "%s", err.msg);
    cr_expect_str_eq(out, want, "a relative checkpoint file: its log by an absolute path");
}

/* ---- a base in chunks ------------------------------------------------------------------- */

/* A log of one base holding all NSPLITS splits, in chunks of 4 KiB, in dir; *sum its summary. */
static void make_chunked(const char *dir, sb_ckptlog_summary *sum)
{
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    cr_assert_eq(sb_ckptlog_init(&w, dir, NULL, 0, SPEC, &err), 0);
    w.chunk_bytes = 4096;
    cr_assert_eq(commit_to(&w, NSPLITS, &wrote, &err), 0, "%s", err.msg);
    cr_assert_eq(w.sum.segments, 0);
    *sum = w.sum;
    sb_ckptlog_free(&w);
}

Test(ckptlog, a_large_base_is_written_in_chunks_and_reads_back)
{
    sb_ckptlog_summary sum;
    make_chunked(g_dir, &sum);
    size_t chunks = count_files("base-00000001-");
    cr_assert_geq(chunks, 4, "%zu chunks", chunks);
    cr_assert_eq(count_files("base-"), chunks + 1, "the chunks and their list");
    char p[512];
    struct stat st;
    for (size_t k = 1; k <= chunks; k++) {
        char name[64];
        snprintf(name, sizeof name, "base-00000001-%08zx.sbck", k);
        path_of(p, sizeof p, name);
        cr_assert_eq(stat(p, &st), 0, "%s", name);
        cr_assert_leq(st.st_size, 4096, "%s is %lld bytes", name, (long long)st.st_size);
    }
    expect_load(&sum, NSPLITS);
    /* a later compaction to an unchunked base removes every chunk */
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    cr_assert_eq(sb_ckptlog_init(&w, g_dir, sum.id, 1, SPEC, &err), 0);
    cr_assert_eq(commit_to(&w, 10, &wrote, &err), 0, "%s", err.msg);
    cr_assert_eq(w.sum.generation, 2);
    cr_assert_eq(count_files("base-"), 1);
    expect_load(&w.sum, 10);
    sb_ckptlog_free(&w);
}

/* Replaces chunk k of the log in g_dir (see make_chunked) by how: 'd' deleted, 't' cut in
 * half, 'x' one byte changed, 'f' the same chunk of another log. */
static void spoil_chunk(int k, char how)
{
    char name[64], p[512];
    snprintf(name, sizeof name, "base-00000001-%08x.sbck", (unsigned)k);
    path_of(p, sizeof p, name);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    if (how == 'd') {
        cr_assert_eq(unlink(p), 0);
    } else if (how == 't') {
        cr_assert_eq(truncate(p, st.st_size / 2), 0);
    } else if (how == 'x') {
        FILE *f = fopen(p, "r+");
        cr_assert_not_null(f);
        int c = fgetc(f);
        rewind(f);
        fputc(c == '1' ? '2' : '1', f);
        fclose(f);
    } else {
        char other[300], cmd[1200];
        snprintf(other, sizeof other, "%s-other", g_dir);
        sb_ckptlog_summary s2;
        make_chunked(other, &s2);
        snprintf(cmd, sizeof cmd, "cp %s/%s %s", other, name, p);
        cr_assert_eq(system(cmd), 0);
    }
}

Test(ckptlog, a_missing_cut_damaged_or_foreign_chunk_is_refused_naming_it)
{
    static const struct {
        int k;
        char how;
        const char *says;
    } cases[] = {{3, 'd', "base-00000001-00000003.sbck is missing"},
                 {1, 't', "base-00000001-00000001.sbck is cut short, damaged or from another log"},
                 {2, 'x', "base-00000001-00000002.sbck is cut short, damaged or from another log"},
                 /* chunk 1 holds the log's id: another log's differs (a later chunk may hold
                  * the same bytes in two logs of the same parts, and is then harmless) */
                 {1, 'f', "base-00000001-00000001.sbck is cut short, damaged or from another log"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        cr_assert_eq(system(cmd), 0);
        sb_ckptlog_summary sum;
        make_chunked(g_dir, &sum);
        expect_load(&sum, NSPLITS);
        spoil_chunk(cases[i].k, cases[i].how);
        expect_refused(&sum, cases[i].says, "base-00000001.sbck");
    }
}

/* An io over local files whose put fails at the fail_at-th call (0: never). */
typedef struct {
    int calls, fail_at;
} failing;

static int failing_put(void *ud, const char *dir, const char *name, const char *data, size_t n,
                       sb_err *err)
{
    failing *f = ud;
    if (++f->calls == f->fail_at)
        return sb_err_set(err, "stopped before %s", name);
    return sb_ckptlog_write_file(dir, name, data, n, err);
}

static int local_list(void *ud, const char *dir, char ***names, size_t *n, sb_err *err)
{
    (void)ud;
    (void)err;
    *names = calloc(256, sizeof **names);
    *n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL && *n < 256)
        if (e->d_name[0] != '.')
            (*names)[(*n)++] = strdup(e->d_name);
    if (d)
        closedir(d);
    return 0;
}

static int local_del(void *ud, const char *dir, const char *name, sb_err *err)
{
    (void)ud;
    (void)err;
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return unlink(p);
}

Test(ckptlog, a_writer_stopped_between_chunks_leaves_the_older_generation_readable)
{
    sb_ckptlog_summary s1;
    make_log(&s1); /* generation 1: splits 0-29 */
    failing fl = {.fail_at = 3};
    sb_ckptlog_io io = {.ud = &fl, .put = failing_put, .list = local_list, .del = local_del};
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    cr_assert_eq(sb_ckptlog_init_io(&w, &io, g_dir, s1.id, 1, SPEC, &err), 0);
    w.chunk_bytes = 4096;
    cr_assert_eq(commit_to(&w, NSPLITS, &wrote, &err), -1, "the third chunk fails");
    cr_assert(strstr(err.msg, "base-00000002-00000003.sbck") != NULL, "%s", err.msg);
    cr_assert_eq(count_files("base-00000002-"), 2, "two chunks were written");
    cr_assert_eq(count_files("base-00000002.sbck"), 0);
    expect_load(&s1, 30); /* the leftover chunks are not a generation */
    /* the next write compacts again, whole this time, and removes the older files */
    cr_assert_eq(commit_to(&w, NSPLITS, &wrote, &err), 0, "%s", err.msg);
    cr_assert_eq(w.sum.generation, 2);
    expect_load(&w.sum, NSPLITS);
    cr_assert_eq(count_files("seg-"), 0);
    cr_assert_eq(count_files("base-00000001"), 0);
    sb_ckptlog_free(&w);
}

/* A million parts (issue 38's scale): one base, in 8 MiB chunks, read back exactly, in a few
 * seconds (the timing is printed; make bench measures the write cost, bench_ckptlog). */
Test(ckptlog, a_million_parts_are_written_in_chunks_and_read_back_exactly, .timeout = 120)
{
    enum { N = 1000000 };
    sb_storage_output *parts = calloc(N, sizeof *parts);
    char(*ids)[24] = calloc(N, sizeof *ids);
    cr_assert(parts != NULL && ids != NULL);
    for (size_t i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "s1-t%zu-p0", i);
        parts[i] = (sb_storage_output){.id = ids[i],
                                       .rows = i % 7 + 1,
                                       .bytes = 40 + i % 50,
                                       .crc32c = (uint32_t)(i * 40503u)};
    }
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sb_ckptlog w;
    sb_err err = {0};
    int wrote;
    char ranges[32];
    snprintf(ranges, sizeof ranges, "0-%d", N - 1);
    cr_assert_eq(sb_ckptlog_init(&w, g_dir, NULL, 0, SPEC, &err), 0);
    cr_assert_eq(sb_ckptlog_update(&w, PLAN, N, ranges, parts, N, &wrote, &err), 0, "%s", err.msg);
    cr_assert_gt(w.base_bytes, 3 * SB_CKPTLOG_CHUNK_BYTES, "a base of %llu bytes",
                 (unsigned long long)w.base_bytes);
    size_t chunks = count_files("base-00000001-");
    cr_assert_eq(chunks, (w.base_bytes + SB_CKPTLOG_CHUNK_BYTES - 1) / SB_CKPTLOG_CHUNK_BYTES);
    sb_ckptlog_summary sum = w.sum;
    sb_ckptlog_free(&w);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sb_ckpt c;
    cr_assert_eq(sb_ckptlog_load(&sum, &c, NULL, &err), 0, "%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    cr_assert_eq(c.nparts, N);
    cr_assert_eq(c.ncommitted, N);
    cr_assert_str_eq(c.committed_splits, ranges);
    for (size_t i = 0; i < N; i++) {
        cr_assert_str_eq(c.parts[i].id, ids[i]);
        cr_assert_eq(c.parts[i].rows, parts[i].rows);
        cr_assert_eq(c.parts[i].bytes, parts[i].bytes);
        cr_assert_eq(c.parts[i].crc32c, parts[i].crc32c);
        cr_assert_null(c.parts[i].order);
    }
    fprintf(stderr,
            "figure: ckptlog 1,000,000 parts: %zu chunks, written in %.2f s, read in %.2f s\n",
            chunks, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
            (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) / 1e9);
    sb_ckpt_free(&c);
    free(parts);
    free(ids);
}
