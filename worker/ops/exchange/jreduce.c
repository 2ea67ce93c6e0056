/* jreduce.c — the exchanged join's reduce side (xjreduce, xchg.h; issue 41). Reduce task b takes
 * bucket b's rows as the map half tagged them: right rows wait raw until every map output is in,
 * then build the table; left rows wait (past an eighth of the memory as runs) and probe it. A build
 * side past the task's share of the budget turns the task into a grace hash join: both sides go
 * to PARTS spill files by a second hash of their key and each part is joined alone; a part whose
 * right rows alone outgrow the share (one key repeated that often) is built in chunks, each probed
 * by all of the part's left rows, and under how: left a bitmap remembers the rows a chunk met. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/exchange/xchg.h"

/* Sixteen parts take a build side up to 16 shares before any part needs chunks, for 32 open
 * files and 64 KiB of stdio buffers: more parts would cost files; fewer, chunked re-reads. */
#define PARTS 16
/* The parts' hash seed: a row's part is independent of its bucket (the key's hash with seed 0). */
#define PART_SEED 0x6a6f696e70617274ull

struct xjreduce {
    xjoin *jn;            /* the table (not owned) */
    uint64_t memory;      /* the task's share of the budget; 0: none, nothing spills */
    xbuf right;           /* right rows waiting, each "u32 length, record" */
    xbuf left;            /* left rows waiting, the same way */
    xruns *lruns;         /* left rows spilled past an eighth of the memory */
    uint64_t nright;      /* right rows taken (their numbers in messages) */
    uint64_t nleft;       /* left rows taken */
    int grace;            /* both sides go to the parts */
    FILE *part[2][PARTS]; /* [0] right, [1] left rows of each part ("u32 length, record") */
    uint64_t prows[2][PARTS];
    uint64_t spilled; /* bytes written to the parts */
    xbuf rec;         /* a record read back from a part */
    uint8_t *hit;     /* a chunked part's left rows that met a right row (how: left) */
    sb_op_out *out;   /* where xjreduce_finish writes */
    uint64_t nprobed; /* left rows probed so far (their numbers in messages) */
};

xjreduce *xjreduce_new(xjoin *jn, uint64_t memory)
{
    xjreduce *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->jn = jn;
        r->memory = memory;
    }
    return r;
}

void xjreduce_set_memory(xjreduce *r, uint64_t memory)
{
    r->memory = memory;
}

void xjreduce_clear(xjreduce *r)
{
    if (r == NULL)
        return;
    xbuf_free(&r->right);
    xbuf_free(&r->left);
    xbuf_free(&r->rec);
    xruns_clear(r->lruns);
    for (int s = 0; s < 2; s++)
        for (size_t p = 0; p < PARTS; p++) {
            if (r->part[s][p] != NULL)
                fclose(r->part[s][p]);
            r->part[s][p] = NULL;
            r->prows[s][p] = 0;
        }
    free(r->hit);
    r->hit = NULL;
    r->grace = 0;
    r->nright = r->nleft = r->spilled = 0;
}

void xjreduce_free(xjreduce *r)
{
    if (r == NULL)
        return;
    xjreduce_clear(r);
    xruns_free(r->lruns);
    free(r);
}

uint64_t xjreduce_spilled(const xjreduce *r)
{
    return r != NULL ? r->spilled + xruns_spilled(r->lruns) : 0;
}

static int held_put(xbuf *b, const char *rec, size_t len, sb_err *err)
{
    uint32_t u = (uint32_t)len;
    if (len > UINT32_MAX)
        return sb_err_permanent(err, "join: a record of %zu bytes is too large to hold", len);
    if (xbuf_put(b, &u, 4) != 0 || xbuf_put(b, rec, len) != 0)
        return sb_err_set(err, "out of memory");
    return 0;
}

/* Hands fn each record held in b, numbered from *row on, until fn returns other than 0: that
 * value, or 0. */
typedef int (*rec_fn)(xjreduce *r, const char *rec, size_t len, uint64_t row, sb_err *err);
static int held_each(xjreduce *r, const xbuf *b, uint64_t *row, rec_fn fn, sb_err *err)
{
    for (size_t off = 0; off < b->n;) {
        uint32_t len;
        memcpy(&len, b->p + off, 4);
        int rc = fn(r, b->p + off + 4, len, (*row)++, err);
        if (rc != 0)
            return rc;
        off += 4 + (size_t)len;
    }
    return 0;
}

/* Appends rec to side's file of the part its key's hash picks. */
static int part_put(xjreduce *r, int side, uint64_t hash, const char *rec, size_t len, sb_err *err)
{
    size_t p = (size_t)(xhash(&hash, sizeof hash, PART_SEED) % PARTS);
    FILE **f = &r->part[side][p];
    uint32_t u = (uint32_t)len;
    if (len > UINT32_MAX)
        return sb_err_permanent(err, "join: a record of %zu bytes is too large to spill", len);
    if (*f == NULL && (*f = sb_op_spill_file(err)) == NULL)
        return sb_err_wrap(err, "join: spilling");
    if (fwrite(&u, 4, 1, *f) != 1 || fwrite(rec, 1, len, *f) != len)
        return sb_err_set(err, "join: writing a spill file: %s", strerror(errno));
    r->prows[side][p]++;
    r->spilled += 4 + len;
    return 0;
}

static int right_to_part(xjreduce *r, const char *rec, size_t len, uint64_t row, sb_err *err)
{
    uint64_t h;
    if (xjoin_right_key(r->jn, rec, len, row, &h, err) != 0)
        return -1;
    return part_put(r, 0, h, rec, len, err);
}

static int left_to_part(xjreduce *r, const char *rec, size_t len, uint64_t row, sb_err *err)
{
    uint64_t h;
    if (xjoin_left_key(r->jn, rec, len, row, &h, err) != 0)
        return -1;
    return part_put(r, 1, h, rec, len, err);
}

static int run_to_part(void *ctx, const xruns_item *it, sb_err *err)
{
    return left_to_part(ctx, it->rec, it->rn, 0, err);
}

/* From now on both sides go to the parts: the rows held so far first. */
static int to_grace(xjreduce *r, sb_err *err)
{
    uint64_t row = 0;
    r->grace = 1;
    xjoin_clear(r->jn); /* a table begun from the held rows */
    if (held_each(r, &r->right, &row, right_to_part, err) != 0)
        return -1;
    xbuf_free(&r->right);
    if (xruns_count(r->lruns) > 0 && xruns_merge(r->lruns, NULL, NULL, run_to_part, r, err) != 0)
        return -1;
    row = 0;
    if (held_each(r, &r->left, &row, left_to_part, err) != 0)
        return -1;
    xbuf_free(&r->left);
    return 0;
}

static int left_to_run(xjreduce *r, const char *rec, size_t len, uint64_t row, sb_err *err)
{
    (void)row;
    return xruns_put(r->lruns, "", 0, rec, len, err);
}

/* The left rows held, as a run. */
static int spill_left(xjreduce *r, sb_err *err)
{
    uint64_t row = 0;
    if (r->lruns == NULL && (r->lruns = xruns_new("join")) == NULL)
        return sb_err_set(err, "out of memory");
    int rc = xruns_begin(r->lruns, err);
    if (rc == 0)
        rc = held_each(r, &r->left, &row, left_to_run, err);
    if (rc == 0)
        rc = xruns_end(r->lruns, err);
    xbuf_free(&r->left);
    return rc;
}

int xjreduce_row(xjreduce *r, const char *p, size_t len, sb_err *err)
{
    if (len == 0 || (p[0] != 'L' && p[0] != 'R'))
        return sb_err_permanent(err, "join: a bucket's row is not tagged L or R (the map half "
                                     "writes them)");
    const char *rec = p + 1;
    len--;
    if (p[0] == 'R') {
        uint64_t row = r->nright++;
        if (r->grace)
            return right_to_part(r, rec, len, row, err);
        if (held_put(&r->right, rec, len, err) != 0)
            return -1;
        /* raw, with room for the table built from them at the end */
        return r->memory > 0 && r->right.cap > r->memory / 2 ? to_grace(r, err) : 0;
    }
    uint64_t row = r->nleft++;
    if (r->grace)
        return left_to_part(r, rec, len, row, err);
    if (held_put(&r->left, rec, len, err) != 0)
        return -1;
    return r->memory > 0 && r->left.n > r->memory / 8 ? spill_left(r, err) : 0;
}

/* Adds a held right row to the table: 1 once the table and the rows held pass the memory. */
static int right_to_table(xjreduce *r, const char *rec, size_t len, uint64_t row, sb_err *err)
{
    if (xjoin_add_right(r->jn, rec, len, row, err) != 0)
        return -1;
    return r->memory > 0 && xjoin_bytes(r->jn) + r->right.cap > r->memory;
}

/* The table from the right rows held: 0, 1 when it outgrew the memory (not sealed), -1 + err. */
static int build_held(xjreduce *r, sb_err *err)
{
    uint64_t row = 0;
    int rc = held_each(r, &r->right, &row, right_to_table, err);
    if (rc != 0)
        return rc;
    xbuf_free(&r->right);
    return xjoin_seal(r->jn, err);
}

static int probe_rec(xjreduce *r, const char *rec, size_t len, uint64_t row, sb_err *err)
{
    return xjoin_probe(r->jn, rec, len, row, r->out, err);
}

static int probe_run_item(void *ctx, const xruns_item *it, sb_err *err)
{
    xjreduce *r = ctx;
    return probe_rec(r, it->rec, it->rn, r->nprobed++, err);
}

/* Every left row held through the table: the spilled ones, then those in memory. */
static int probe_held(xjreduce *r, sb_err *err)
{
    r->nprobed = 0;
    if (xruns_count(r->lruns) > 0 && xruns_merge(r->lruns, NULL, NULL, probe_run_item, r, err) != 0)
        return -1;
    return held_each(r, &r->left, &r->nprobed, probe_rec, err);
}

/* The next record of part file f (NULL: none) into r->rec: 1, 0 at its end, -1 + err. */
static int part_next(xjreduce *r, FILE *f, sb_err *err)
{
    uint32_t len;
    if (f == NULL)
        return 0;
    size_t got = fread(&len, 1, 4, f);
    if (got == 0 && !ferror(f))
        return 0;
    r->rec.n = 0;
    if (got == 4 && xbuf_reserve(&r->rec, len) != 0)
        return sb_err_set(err, "out of memory");
    if (got != 4 || fread(r->rec.p, 1, len, f) != len)
        return sb_err_set(err, "join: reading a spill file: %s",
                          ferror(f) ? strerror(errno) : "it ends inside a record");
    r->rec.n = len;
    return 1;
}

static int part_rewind(FILE *f, sb_err *err)
{
    if (f != NULL && (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0))
        return sb_err_set(err, "join: rewinding a spill file: %s", strerror(errno));
    return 0;
}

/* A table of the right rows of f from where it stands, until they end (1) or the table passes
 * the memory (0; it holds at least one row): sealed either way. -1 + err. */
static int build_chunk(xjreduce *r, FILE *f, uint64_t *row, sb_err *err)
{
    int rc;
    xjoin_clear(r->jn);
    while ((rc = part_next(r, f, err)) == 1) {
        if (xjoin_add_right(r->jn, r->rec.p, r->rec.n, (*row)++, err) != 0)
            return -1;
        if (r->memory > 0 && xjoin_bytes(r->jn) > r->memory)
            break;
    }
    if (rc < 0 || xjoin_seal(r->jn, err) != 0)
        return -1;
    return rc == 0;
}

/* Every left row of part file lf through the table: unmatched rows kept when keep, and when hit
 * is not NULL the rows that met one marked in it. */
static int probe_part(xjreduce *r, FILE *lf, sb_op_out *out, int keep, uint8_t *hit, sb_err *err)
{
    int rc;
    if (part_rewind(lf, err) != 0)
        return -1;
    for (uint64_t i = 0; (rc = part_next(r, lf, err)) == 1; i++) {
        int met;
        if (xjoin_probe_hit(r->jn, r->rec.p, r->rec.n, i, keep, out, &met, err) != 0)
            return -1;
        if (hit != NULL && met)
            hit[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    return rc;
}

/* How: left after a chunked part: the left rows of lf that no chunk met, as they are. */
static int keep_unmet(xjreduce *r, FILE *lf, sb_op_out *out, sb_err *err)
{
    int rc;
    if (part_rewind(lf, err) != 0)
        return -1;
    for (uint64_t i = 0; (rc = part_next(r, lf, err)) == 1; i++)
        if (!(r->hit[i / 8] & (1u << (i % 8))) &&
            sb_op_out_append_binary(out, r->rec.p, r->rec.n, err) != 0)
            return -1;
    return rc;
}

/* Part p joined: its right rows in tables of at most the memory (one when they fit), each probed
 * by all of the part's left rows. */
static int join_part(xjreduce *r, size_t p, sb_op_out *out, sb_err *err)
{
    FILE *rf = r->part[0][p], *lf = r->part[1][p];
    int keep = xjoin_keeps_left(r->jn), ended, chunked = 0;
    if (lf == NULL || (rf == NULL && !keep))
        return 0; /* no left rows, or none to meet and none kept */
    if (part_rewind(rf, err) != 0)
        return -1;
    uint64_t rrow = 0;
    do {
        if ((ended = build_chunk(r, rf, &rrow, err)) < 0)
            return -1;
        if (!ended && !chunked) {
            chunked = 1;
            if (keep && (r->hit = calloc(r->prows[1][p] / 8 + 1, 1)) == NULL)
                return sb_err_set(err, "out of memory");
        }
        if (probe_part(r, lf, out, chunked ? 0 : keep, chunked ? r->hit : NULL, err) != 0)
            return -1;
    } while (!ended);
    int rc = chunked && keep ? keep_unmet(r, lf, out, err) : 0;
    free(r->hit);
    r->hit = NULL;
    return rc;
}

int xjreduce_finish(xjreduce *r, sb_op_out *out, sb_err *err)
{
    if (xjoin_schema(out, err) != 0)
        return -1;
    r->out = out;
    if (!r->grace) {
        int rc = build_held(r, err);
        if (rc == 0)
            return probe_held(r, err);
        if (rc < 0 || to_grace(r, err) != 0)
            return -1;
    }
    for (size_t p = 0; p < PARTS; p++)
        if (join_part(r, p, out, err) != 0)
            return -1;
    return 0;
}
