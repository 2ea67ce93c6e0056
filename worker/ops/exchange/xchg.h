/* xchg.h — internals of the all-to-all ops (issue 41): the exchange's map and reduce halves
 * (exchange.c, the ops "exchange.map" and "exchange.reduce" the scheduler runs for a stage of
 * repartition, random_shuffle, groupby, distinct or sort: controller/sched/exchange.h), the keys
 * they compare (keys.c), groupby's aggregates (groupby.c) and sort's rounds (sort.c). Internal to
 * worker/ops/exchange.
 *
 * Keys compare by value and type: a JSON value is encoded canonically (xkey_encode), so 1, 1.0
 * and 1e0 encode alike, "1" differently, true differently from 1, strings by their decoded
 * bytes ("\u0041" is "A"), objects with their members sorted by name, arrays in order.
 *
 * Memory: an xbuf owns its bytes (xbuf_free). Nothing else here allocates except as said.
 */
#ifndef SB_WORKER_OPS_EXCHANGE_XCHG_H
#define SB_WORKER_OPS_EXCHANGE_XCHG_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "core/err.h"
#include "partition/partition.h"
#include "worker/ops/json.h"
#include "worker/ops/ops.h"

/* A growable byte buffer. */
typedef struct xbuf {
    char *p;
    size_t n, cap;
} xbuf;

int xbuf_put(xbuf *b, const void *p, size_t n);
/* Room for n more bytes (b->n unchanged). */
int xbuf_reserve(xbuf *b, size_t n);
void xbuf_free(xbuf *b);

/* Rows gathered whole: an sb_op_out that never cuts by size (a quarter of SIZE_MAX keeps its
 * room arithmetic from overflowing), whose one blob lands here (xwhole_emit is its emit). */
#define XWHOLE_TARGET (SIZE_MAX / 4)
typedef struct xwhole {
    sb_op_out *out;
    void *blob;
    size_t len;
    uint64_t rows;
} xwhole;

int xwhole_emit(void *blob, size_t len, uint64_t rows, void *ud);
/* Frees the output and the blob; *w is zeroed. */
void xwhole_free(xwhole *w);
/* Cuts each of bk[0..n) and puts its blob to out as one partition, in order (a bucket with a
 * schema and no rows too: a partition's place is its bucket). */
int xwhole_put_all(xwhole *bk, uint32_t n, sb_op_out *out, sb_err *err);

/* Appends the canonical encoding of the valid JSON text p[0..n) (a value a scan accepted) to
 * out. -1 out of memory. */
int xkey_encode(const char *p, size_t n, xbuf *out);

/* Past the JSON value at p (valid JSON text, leading white space allowed), at most e. */
const char *xjson_skip(const char *p, const char *e);

/* Appends the encoding of null (a missing key under missingKey: null). */
int xkey_null(xbuf *out);

/* A 64-bit hash of p[0..n) with a seed (FNV-1a, then a finalizer that spreads it). */
uint64_t xhash(const void *p, size_t n, uint64_t seed);

/* A hash of row `row` of every column of b (its values and nulls), for ops that see any schema
 * (repartition, random_shuffle). */
uint64_t xrow_hash(const sb_batch *b, size_t row, uint64_t seed);

/* The fields of a key: names as given (keys.c parses the JSON list). */
typedef struct xkeys {
    sb_op_json_key *k;
    size_t n;
    int missing_null; /* missingKey: null */
} xkeys;

/* Scans record r[0..len) (row `row` for messages) of op `op` and appends the key's encoding to
 * out; spans[i] (may be NULL) receive the fields' values (type NONE when missing, kept null).
 * Data errors: invalid JSON, not an object, a missing field without missingKey: null. n == 0:
 * the whole record is the key. */
int xkeys_encode(const xkeys *ks, const char *op, const char *r, size_t len, size_t row,
                 sb_op_json_span *spans, xbuf *out, sb_err *err);

/* The key's encoding from the fields' values a scan found (found[0..ks->n)), as above. */
int xkeys_encode_found(const xkeys *ks, const char *op, size_t row, const sb_op_json_span *found,
                       xbuf *out, sb_err *err);

/* ---- spilled sorted runs and their k-way merge (runs.c) ----------------------------------
 * Every op that spills under the memory budget writes runs here: each run a spill file of
 * (key, record) pairs the caller put in its comparator's order; the merge hands the pairs of
 * all runs back in one order. The runs' files are owned by the xruns. */
typedef struct xruns xruns;
/* op: named in messages (a static string). NULL out of memory. */
xruns *xruns_new(const char *op);
void xruns_free(xruns *rs);
/* Closes the runs and zeroes the spilled bytes (a new task). */
void xruns_clear(xruns *rs);
/* A new run (xruns_put its pairs, in order, then xruns_end). */
int xruns_begin(xruns *rs, sb_err *err);
int xruns_put(xruns *rs, const void *key, size_t kn, const void *rec, size_t rn, sb_err *err);
int xruns_end(xruns *rs, sb_err *err);
/* Room in the list of files *f (of *cap) for f[n]: doubled when full. -1 + err. */
int xfiles_room(FILE ***f, size_t *cap, size_t n, sb_err *err);
/* A binary min-heap's sift down from i over h[0..n) (less: a before b), shared by the merges
 * (this one and random_shuffle's, whose runs are batches). */
typedef int (*xheap_less)(const void *ctx, const void *a, const void *b);
void xheap_down(void **h, size_t n, size_t i, xheap_less less, const void *ctx);
/* Runs written (ended) and not yet merged; bytes written since the last clear (0 for NULL). */
size_t xruns_count(const xruns *rs);
uint64_t xruns_spilled(const xruns *rs);
/* A key order: <0, 0, >0. */
typedef int (*xruns_cmp)(void *ctx, const char *a, size_t an, const char *b, size_t bn);
/* Keys as bytes (memcmp, then the shorter first). */
int xruns_bytes_cmp(void *ctx, const char *a, size_t an, const char *b, size_t bn);
typedef struct {
    const char *key;
    size_t kn;
    const char *rec;
    size_t rn;
    size_t run; /* the run it came from (0 the oldest) */
} xruns_item;
typedef int (*xruns_fn)(void *ctx, const xruns_item *it, sb_err *err);
/* Hands fn every pair of every run in one order: cmp (NULL: bytes) on the keys, equal keys by
 * the runs' age, then their order within the run; the item's bytes live until fn returns. The
 * runs are closed after; xruns_spilled stays until the next clear. */
int xruns_merge(xruns *rs, xruns_cmp cmp, void *ctx, xruns_fn fn, void *fctx, sb_err *err);

/* ---- limit (limit.c) --------------------------------------------------------------------- */

/* Appends rows [first, first+n) of in to out while *taken < max, counting them in *taken; with
 * n == 0 sets out's schema to in's (an empty task still has one). */
int xlimit_take(sb_op_out *out, const sb_batch *in, size_t first, size_t n, uint64_t max,
                uint64_t *taken, sb_err *err);

/* ---- groupby (groupby.c) ----------------------------------------------------------------- */

typedef struct xgroupby xgroupby;

/* args: the stage's args ({keys, aggregates, missingKey}); memory: the most bytes its groups may
 * take (0: no limit). NULL + err. */
xgroupby *xgroupby_new(const char *args_json, uint64_t memory, sb_err *err);
void xgroupby_free(xgroupby *g);
/* Clears the groups (a new task). */
void xgroupby_reset(xgroupby *g);
/* Adds rows [first, first+n) of records column col of in. */
int xgroupby_add(xgroupby *g, const sb_batch *in, int col, size_t first, size_t n, sb_err *err);
/* Map-side combine: every group as one partial record {"k": {keys}, "a": [states]} handed to
 * put with its bucket (the key's hash modulo nbuckets), in the order the groups were met; then
 * clears them. A partial record is 'P' then {"k": {keys}, "a": [states]}. The reduce side merges
 * them (xgroupby_add_partials): every aggregate combines (first, last and collect in the order the
 * partials come). */
typedef int (*xgroupby_put_fn)(void *ud, uint32_t bucket, const char *rec, size_t len, sb_err *err);
int xgroupby_emit_partials(xgroupby *g, uint32_t nbuckets, xgroupby_put_fn put, void *ud,
                           sb_err *err);
/* Merges the records in rows [first, first+n) of records column col of in: partial records
 * ('P' then the JSON above) and rows the map half passed on uncombined. */
int xgroupby_add_partials(xgroupby *g, const sb_batch *in, int col, size_t first, size_t n,
                          sb_err *err);
/* Groups held now. */
size_t xgroupby_groups(const xgroupby *g);
/* When the table outgrows its memory: fn(ud) is called to empty it (the map side sends its
 * partials on: xgroupby_emit_partials); without a hook, the table is spilled as a sorted run
 * and xgroupby_emit merges the runs. Either way a single group bigger than the memory is a
 * permanent error. */
typedef int (*xgroupby_full_fn)(void *ud, sb_err *err);
void xgroupby_on_full(xgroupby *g, xgroupby_full_fn fn, void *ud);
/* Bytes this task's table spilled (reduce side); 0 after a reset. */
uint64_t xgroupby_spilled(const xgroupby *g);
/* The table's memory from now on (the smaller share the worker can count: sb_op_impl.hold). */
void xgroupby_set_memory(xgroupby *g, uint64_t memory);
/* Emits one record per group, in the order of their keys' encodings, and clears them (after
 * a spill: the runs merged, the same records). */
int xgroupby_emit(xgroupby *g, sb_op_out *out, sb_err *err);
/* The key fields (the map half buckets by them). */
const xkeys *xgroupby_keys(const xgroupby *g);

/* ---- random_shuffle's reduce side (shuffle.c) ------------------------------------------------ */

/* Appends b's rows to out in the order of their hashes under seed (then input order): the
 * permutation random_shuffle gives. */
int xshuffle_emit_sorted(const sb_batch *b, uint64_t seed, sb_op_out *out, sb_err *err);
/* Runs spilled so far (NULL: none); the files are unnamed and go with xshuffle_runs_free. */
typedef struct xshuffle_runs xshuffle_runs;
/* The rows of blob[0..len) (a whole partition) sorted as above, written as a new run in
 * *rs (made on first use). The sorted copy exists beside blob while it is written. */
int xshuffle_spill(xshuffle_runs **rs, const void *blob, size_t len, uint64_t seed, sb_err *err);
/* Appends every run's rows to out in the order one sort over all of them gives (runs in the
 * order spilled hold the rows in input order). */
int xshuffle_merge(xshuffle_runs *rs, uint64_t seed, sb_op_out *out, sb_err *err);
uint64_t xshuffle_spilled(const xshuffle_runs *rs);
void xshuffle_runs_free(xshuffle_runs *rs);

/* Parses a JSON list of field names (a cJSON array) into ks; missing_null from missingKey. -1
 * + err (prefixed with op). */
struct cJSON;
int xkeys_parse(const struct cJSON *list, const struct cJSON *missing, const char *op, xkeys *ks,
                sb_err *err);

/* 1 when missingKey asks for null keys: the value null, or the string "null" (what survives a
 * client-side `kubectl apply`, which deletes null fields; lib/spec/allops.c accepts both). */
int xkeys_missing_null(const struct cJSON *missing);
void xkeys_free(xkeys *ks);

/* ---- sort (sort.c) -------------------------------------------------------------------------- */

/* sort runs over two exchanges: round 0 is the map half ("exchange.map"), round 1 the middle op
 * (an "exchange.reduce" whose outputs are buckets again), round 2 the reduce. args: the stage's
 * args ({keys: [{field, descending}], nulls, stable, missingKey}); memory: the most bytes a task
 * may hold (0: no limit). NULL + err. */
typedef struct xsort xsort;
xsort *xsort_new(const struct cJSON *args, int round, uint32_t buckets, uint64_t memory,
                 sb_err *err);
void xsort_free(xsort *so);
/* Clears what a task held (a new task). */
void xsort_reset(xsort *so);
/* stable: the index of the task about to run (round 0 tags its rows with it). */
void xsort_task(xsort *so, uint64_t index);
int xsort_process(xsort *so, const sb_batch *in, size_t first, size_t n, sb_err *err);
/* Round 0 and 1: one partition per bucket, in bucket order; round 2: the rows in order. */
int xsort_finish(xsort *so, sb_op_out *out, sb_err *err);
/* Bytes this task spilled (rounds 1 and 2: past half the task's memory; runs.c); 0 after a
 * reset. */
uint64_t xsort_spilled(const xsort *so);
/* The task's memory from now on (the smaller share the worker can count: sb_op_impl.hold). */
void xsort_set_memory(xsort *so, uint64_t memory);
/* The sort order of two keys (every key field's encoding, in order): <0, 0, >0. */
int xsort_key_cmp(const xsort *so, const char *a, const char *b);
/* The 8-byte prefix of a key the sort compares first (sort.c says how it is made): whenever
 * *pfx of a is below b's, xsort_key_cmp(a, b) < 0; equal prefixes say nothing. -1: the key has
 * no prefix (a NaN, which compares equal to every number), *pfx then unset. */
int xsort_key_prefix(const xsort *so, const char *key, uint64_t *pfx);

/* ---- join's hash table (join.c) ---------------------------------------------------------------
 * Right records go in under their keys (xjoin_add_right), then the table is sealed and left
 * records probe it (xjoin_probe), each giving its joined rows: the broadcast join loads the whole
 * right side at init; the exchanged join's reduce task adds the right rows of its bucket. */
typedef struct xjoin xjoin;
/* args: the join stage's args ({right, on, how, missingKey}). NULL + err. */
xjoin *xjoin_new(const char *args_json, sb_err *err);
void xjoin_free(xjoin *j);
/* Empties the table (a new task). */
void xjoin_clear(xjoin *j);
/* Adds right record r[0..len) (row: its number, for messages); permanent errors for a record
 * that is not an object or lacks a key field without missingKey: null. Not after xjoin_seal. */
int xjoin_add_right(xjoin *j, const char *r, size_t len, uint64_t row, sb_err *err);
/* Ends the adding: the table takes probes from now on. */
int xjoin_seal(xjoin *j, sb_err *err);
/* Bytes the table takes. */
uint64_t xjoin_bytes(const xjoin *j);
/* Appends the rows left record l[0..len) (row: its number, for messages) gives to out (its
 * matches; itself alone under how: left when it has none). Data errors for bad records. */
int xjoin_probe(xjoin *j, const char *l, size_t len, size_t row, sb_op_out *out, sb_err *err);
/* The same with the unmatched row kept only when keep, whatever `how` says; *hit (when not NULL)
 * 1 when the row met a right row (a table built in chunks probes each left row once a chunk). */
int xjoin_probe_hit(xjoin *j, const char *l, size_t len, size_t row, int keep, sb_op_out *out,
                    int *hit, sb_err *err);
/* 1 under how: left. */
int xjoin_keeps_left(const xjoin *j);
/* The hash of right record r[0..len)'s key (its bucket's), checked as xjoin_add_right checks. */
int xjoin_right_key(xjoin *j, const char *r, size_t len, uint64_t row, uint64_t *hash, sb_err *err);
/* Sets out's schema to the records column when it has none. */
int xjoin_schema(sb_op_out *out, sb_err *err);
/* The hash of left record l[0..len)'s key (the bucket it goes to); data errors as a probe's. */
int xjoin_left_key(xjoin *j, const char *l, size_t len, size_t row, uint64_t *hash, sb_err *err);
/* Reads the right side's pieces (lib/io/split.h's listing) i with i % maps == index: each
 * record, checked as xjoin_add_right checks it, to fn with the hash of its key. bytes: the right
 * side's size the plan listed; a listing of another size is a permanent error (every map task
 * must split the same listing). */
typedef int (*xjoin_right_fn)(void *ud, const char *r, size_t len, uint64_t hash, sb_err *err);
int xjoin_read_right(xjoin *j, const char *args_json, uint64_t index, uint64_t maps, uint64_t bytes,
                     xjoin_right_fn fn, void *ud, sb_err *err);

/* ---- the exchanged join's reduce side (jreduce.c) ---------------------------------------------
 * Reduce task b's rows of bucket b, tagged 'R' (right) or 'L' (left) by the map half: the right
 * rows build the table once every map output is in, then the left rows probe it. Under a budget
 * the build side spills as a grace hash join (jreduce.c says how), so no bucket is too large. */
typedef struct xjreduce xjreduce;
/* jn: the table it fills (not owned); memory: the task's share of the budget (0: none). NULL
 * out of memory. */
xjreduce *xjreduce_new(xjoin *jn, uint64_t memory);
void xjreduce_free(xjreduce *r);
/* Drops the task's rows and spill files (a new task); the table is the caller's to clear. */
void xjreduce_clear(xjreduce *r);
/* A smaller share (the room its worker can count: sb_op_impl.hold). */
void xjreduce_set_memory(xjreduce *r, uint64_t memory);
/* One tagged row of the bucket. Permanent errors for an untagged row or a bad right record. */
int xjreduce_row(xjreduce *r, const char *p, size_t len, sb_err *err);
/* The joined rows of the bucket into out (its schema set first). */
int xjreduce_finish(xjreduce *r, sb_op_out *out, sb_err *err);
/* Bytes written to spill files since the last clear (0 for NULL). */
uint64_t xjreduce_spilled(const xjreduce *r);

/* ---- a hash set of byte strings (distinct; groupby's table) ------------------------------- */

typedef struct xset {
    uint64_t *hash;  /* 0: empty slot */
    uint32_t *entry; /* per slot: the entry index */
    size_t cap, n;
    xbuf keys;       /* the keys, each as u32 length then bytes */
    size_t *key_off; /* per entry: its offset in keys */
    size_t capent;
} xset;

/* Finds key p[0..n) (hash h): its entry index, added when absent (*added = 1). -1 out of
 * memory. */
long xset_find_add(xset *s, const void *p, size_t n, uint64_t h, int *added);
/* Finds key p[0..n) (hash h): its entry index, -1 when absent. */
long xset_find(const xset *s, const void *p, size_t n, uint64_t h);
/* Entry i's key. */
const char *xset_key(const xset *s, size_t i, size_t *n);
/* Bytes the set takes. */
uint64_t xset_bytes(const xset *s);
void xset_clear(xset *s);
void xset_free(xset *s);

#endif
