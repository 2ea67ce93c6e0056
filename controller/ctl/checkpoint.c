/* checkpoint.c — checkpoints of a run's committed work (see checkpoint.h): sink parts as text,
 * the checkpoint as JSON (epoch, spec and plan hashes, committed splits, parts) and its strict
 * parse back (the operator's status.checkpoint, `streambatch run`'s file), and the spec hash that
 * says whether a checkpoint still applies. Parsed strings and parts are the caller's to free. */

#include "controller/ctl/checkpoint.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/ranges.h"
#include "core/idmap.h"
#include "core/num.h"

/* Writes p's entry into buf (len bytes, may be 0); returns its length, as snprintf. */
static int part_print(char *buf, size_t len, const sb_storage_output *p)
{
    return snprintf(buf, len, "%s:%" PRIu64 ":%" PRIu64 ":%" PRIu32 "%s%s", p->id, p->rows,
                    p->bytes, p->crc32c, p->order != NULL ? ":" : "",
                    p->order != NULL ? p->order : "");
}

char *sb_ckpt_part_format(const sb_storage_output *p)
{
    size_t n = strlen(p->id) + 3 * 21 + 4 + (p->order != NULL ? strlen(p->order) + 1 : 0);
    char *s = malloc(n);
    if (s != NULL)
        part_print(s, n, p);
    return s;
}

uint64_t sb_ckpt_part_json_bytes(const sb_storage_output *p, void *ctx)
{
    (void)ctx;
    char one[1]; /* snprintf returns the whole length */
    int n = part_print(one, sizeof one, p);
    return (uint64_t)(n > 0 ? n : 0) + 3; /* the quotes and a comma */
}

int sb_ckpt_part_parse(const char *s, sb_storage_output *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    if (s == NULL)
        return sb_err_set(err, "not a string");
    const char *p = s;
    while (isalnum((unsigned char)*p) || *p == '.' || *p == '_' || *p == '-')
        p++;
    if (p == s || *p != ':')
        return sb_err_set(err,
                          "\"%.80s\": expected <id>:<rows>:<bytes>:<crc> with an id of "
                          "letters, digits, '.', '_' or '-'",
                          s);
    size_t idlen = (size_t)(p - s);
    uint64_t v[3];
    const char *names[3] = {"rows", "bytes", "crc"};
    p++;
    for (int i = 0; i < 3; i++) {
        if (sb_num_parse_dec(&p, i == 2 ? UINT32_MAX : UINT64_MAX, &v[i]) != 0)
            return sb_err_set(err, "\"%.80s\": %s is not a decimal number%s", s, names[i],
                              i == 2 ? " below 2^32" : "");
        if (i < 2 && *p++ != ':')
            return sb_err_set(err, "\"%.80s\": expected <id>:<rows>:<bytes>:<crc>", s);
    }
    const char *order = NULL;
    if (*p == ':') { /* preserveOrder: the part's order key, decimal numbers joined by '.' */
        order = ++p;
        while ((*p >= '0' && *p <= '9') || (*p == '.' && p > order && p[-1] != '.'))
            p++;
        if (p == order || p[-1] == '.' || *p != '\0')
            return sb_err_set(err,
                              "\"%.80s\": the order key after the crc must be decimal numbers "
                              "joined by '.'",
                              s);
    }
    if (*p != '\0')
        return sb_err_set(err, "\"%.80s\": unexpected text after the crc", s);
    out->id = strndup(s, idlen);
    out->order = order != NULL ? strdup(order) : NULL;
    if (out->id == NULL || (order != NULL && out->order == NULL)) {
        free((char *)out->id);
        free((char *)out->order);
        out->id = out->order = NULL;
        return sb_err_set(err, "out of memory");
    }
    out->rows = v[0];
    out->bytes = v[1];
    out->crc32c = (uint32_t)v[2];
    return 0;
}

cJSON *sb_ckpt_json(uint32_t epoch, const char *spec_hash, const char *plan_hash,
                    const char *committed_splits, const sb_storage_output *parts, size_t nparts)
{
    cJSON *j = cJSON_CreateObject();
    if (j == NULL)
        return NULL;
    cJSON_AddNumberToObject(j, "epoch", epoch);
    if ((spec_hash != NULL && spec_hash[0] != '\0' &&
         cJSON_AddStringToObject(j, "specHash", spec_hash) == NULL) ||
        (plan_hash != NULL && plan_hash[0] != '\0' &&
         cJSON_AddStringToObject(j, "planHash", plan_hash) == NULL)) {
        cJSON_Delete(j);
        return NULL;
    }
    cJSON_AddStringToObject(j, "committedSplits", committed_splits ? committed_splits : "");
    cJSON *a = cJSON_AddArrayToObject(j, "parts");
    for (size_t i = 0; a != NULL && i < nparts; i++) {
        char *s = sb_ckpt_part_format(&parts[i]);
        cJSON *x = s ? cJSON_CreateString(s) : NULL;
        free(s);
        if (x == NULL) {
            cJSON_Delete(j);
            return NULL;
        }
        cJSON_AddItemToArray(a, x);
    }
    if (a == NULL) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

void sb_ckpt_free(sb_ckpt *c)
{
    if (c == NULL)
        return;
    free(c->committed_splits);
    for (size_t i = 0; i < c->nparts; i++) {
        free((char *)c->parts[i].id);
        free((char *)c->parts[i].order);
    }
    free(c->parts);
    memset(c, 0, sizeof *c);
}

static const char *part_id_at(const void *ctx, size_t i)
{
    return ((const sb_storage_output *)ctx)[i].id;
}

int sb_ckpt_parse(const cJSON *cp, size_t nsplits, const char *what, sb_ckpt *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(cp))
        return sb_err_set(err, "%s: must be an object", what);
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(cp, "epoch");
    if (!cJSON_IsNumber(ep) || ep->valuedouble < 0 || ep->valuedouble > 4294967295.0 ||
        ep->valuedouble != (double)(uint32_t)ep->valuedouble)
        return sb_err_set(err, "%s.epoch: must be an integer in [0, 4294967295]", what);
    out->epoch = (uint32_t)ep->valuedouble;
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(cp, "committedSplits");
    if (cs != NULL && !cJSON_IsString(cs))
        return sb_err_set(err, "%s.committedSplits: must be a string", what);
    uint8_t *set = calloc(nsplits + 1, 1);
    if (set == NULL)
        return sb_err_set(err, "out of memory");
    sb_err e2;
    if (sb_ranges_parse(cs ? cs->valuestring : "", set, nsplits, &e2) != 0) {
        free(set);
        return sb_err_set(err, "%s.committedSplits: %s", what, e2.msg);
    }
    for (size_t i = 0; i < nsplits; i++)
        out->ncommitted += set[i] != 0;
    out->committed_splits = sb_ranges_format(set, nsplits);
    free(set);
    if (out->committed_splits == NULL)
        return sb_err_set(err, "out of memory");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(cp, "specHash");
    if (sh != NULL) {
        const char *v = cJSON_IsString(sh) ? sh->valuestring : "";
        if (strlen(v) != 16 || strspn(v, "0123456789abcdef") != 16) {
            sb_ckpt_free(out);
            return sb_err_set(err, "%s.specHash: must be 16 lowercase hex digits", what);
        }
        memcpy(out->spec_hash, v, 17);
    }
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(cp, "planHash");
    if (ph != NULL) {
        const char *v = cJSON_IsString(ph) ? ph->valuestring : "";
        if (strlen(v) != 16 || strspn(v, "0123456789abcdef") != 16) {
            sb_ckpt_free(out);
            return sb_err_set(err, "%s.planHash: must be 16 lowercase hex digits", what);
        }
        memcpy(out->plan_hash, v, 17);
    }
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(cp, "parts");
    if (parts != NULL && !cJSON_IsArray(parts)) {
        sb_ckpt_free(out);
        return sb_err_set(err, "%s.parts: must be a list of strings", what);
    }
    int n = cJSON_GetArraySize(parts);
    out->parts = calloc((size_t)n + 1, sizeof *out->parts);
    if (out->parts == NULL) {
        sb_ckpt_free(out);
        return sb_err_set(err, "out of memory");
    }
    /* each part once: a hash index of the ids (the parts array does not move meanwhile) */
    sb_idmap seen;
    sb_idmap_init(&seen, part_id_at, out->parts);
    int i = 0, rc = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, parts)
    {
        if (sb_ckpt_part_parse(cJSON_IsString(x) ? x->valuestring : NULL, &out->parts[i], &e2) !=
            0) {
            rc = sb_err_set(err, "%s.parts[%d]: %s", what, i, e2.msg);
            break;
        }
        out->nparts++;
        if (sb_idmap_get(&seen, out->parts[i].id, NULL)) {
            rc =
                sb_err_set(err, "%s.parts[%d]: part %s is listed twice", what, i, out->parts[i].id);
            break;
        }
        if (sb_idmap_put(&seen, out->parts[i].id, (size_t)i) != 0) {
            rc = sb_err_set(err, "out of memory");
            break;
        }
        i++;
    }
    sb_idmap_free(&seen);
    if (rc != 0)
        sb_ckpt_free(out);
    return rc;
}

/* ---- the spec hash ---- */

/* FNV-1a, 64 bit, over a canonical form: objects with their keys sorted, every value tagged
 * with its type and every string with its length, so no two different trees share a form. */
static void fnv(uint64_t *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        *h ^= p[i];
        *h *= 1099511628211ULL;
    }
}

static void fnv_str(uint64_t *h, const char *s)
{
    uint64_t n = s ? strlen(s) : 0;
    fnv(h, &n, sizeof n);
    fnv(h, s ? s : "", (size_t)n);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* depth 0: the spec (suspend, ttlSecondsAfterFinished skipped); in_stages: items of
 * spec.stages (workers skipped). */
static void hash_node(uint64_t *h, const cJSON *n, int depth, int in_stage)
{
    if (cJSON_IsObject(n)) {
        fnv(h, "{", 1);
        size_t k = 0, cnt = (size_t)cJSON_GetArraySize(n);
        const cJSON **kids = calloc(cnt + 1, sizeof *kids);
        if (kids == NULL) {
            fnv(h, "!", 1); /* out of memory: a hash that matches nothing real */
            return;
        }
        for (const cJSON *c = n->child; c != NULL; c = c->next)
            kids[k++] = c;
        qsort(kids, k, sizeof *kids, cmp_names);
        for (size_t i = 0; i < k; i++) {
            const char *name = kids[i]->string;
            if (depth == 0 &&
                (strcmp(name, "suspend") == 0 || strcmp(name, "ttlSecondsAfterFinished") == 0))
                continue;
            if (in_stage && strcmp(name, "workers") == 0)
                continue;
            fnv_str(h, name);
            hash_node(h, kids[i], depth + 1, depth == 0 && strcmp(name, "stages") == 0 ? 2 : 0);
        }
        free(kids);
        fnv(h, "}", 1);
    } else if (cJSON_IsArray(n)) {
        fnv(h, "[", 1);
        for (const cJSON *c = n->child; c != NULL; c = c->next)
            hash_node(h, c, depth + 1, in_stage == 2);
        fnv(h, "]", 1);
    } else if (cJSON_IsString(n)) {
        fnv(h, "s", 1);
        fnv_str(h, n->valuestring);
    } else if (cJSON_IsNumber(n)) {
        char b[64];
        snprintf(b, sizeof b, "n%.17g", n->valuedouble);
        fnv_str(h, b);
    } else {
        fnv(h, cJSON_IsTrue(n) ? "t" : cJSON_IsFalse(n) ? "f" : "z", 1);
    }
}

void sb_ckpt_spec_hash(const cJSON *spec, char out[17])
{
    uint64_t h = 14695981039346656037ULL;
    hash_node(&h, spec, 0, 0);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}
