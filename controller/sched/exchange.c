/* exchange.c — the plan's side of all-to-all stages (exchange.h): which ops exchange, how many
 * buckets a stage gets, and the wrapped args its map and reduce halves run with. The scheduler
 * (sched.c) splits the stage in two ops and forms the reduce tasks by bucket. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/exchange.h"
#include "spec/allops.h"
#include "spec/quantity.h"

/* args.bytes as a byte count: a number or a quantity ("64Mi"); 0 when absent or bad (validate
 * refused those). */
static uint64_t args_bytes(const cJSON *b)
{
    if (cJSON_IsNumber(b) && b->valuedouble >= 1)
        return (uint64_t)b->valuedouble;
    int64_t v = 0;
    sb_err err;
    if (cJSON_IsString(b) && sb_quantity_value(b->valuestring, &v, &err) == 0 && v > 0)
        return (uint64_t)v;
    return 0;
}

uint32_t sb_exchange_buckets(const sb_stage_spec *st, const sb_storage_split *splits,
                             size_t nsplits)
{
    cJSON *root = st->args_json != NULL ? cJSON_Parse(st->args_json) : NULL;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "partitions");
    uint64_t n = 0;
    if (strcmp(st->op, "limit") == 0) { /* one reduce task keeps the first rows (limit.h) */
        n = 1;
    } else if (cJSON_IsNumber(p) && p->valuedouble >= 1) {
        n = (uint64_t)p->valuedouble;
    } else if (args_bytes(cJSON_GetObjectItemCaseSensitive(root, "bytes")) > 0) {
        uint64_t per = args_bytes(cJSON_GetObjectItemCaseSensitive(root, "bytes")), total = 0;
        for (size_t i = 0; i < nsplits; i++)
            total += splits[i].bytes;
        n = (total + per - 1) / per;
    } else {
        n = nsplits < 64 ? nsplits : 64;
    }
    cJSON_Delete(root);
    if (n < 1)
        n = 1;
    return n > SB_EXCHANGE_MAX_BUCKETS ? SB_EXCHANGE_MAX_BUCKETS : (uint32_t)n;
}

char *sb_exchange_args_round(const sb_stage_spec *st, uint32_t buckets, uint64_t memory, int round)
{
    const char *args = st->args_json != NULL && *st->args_json ? st->args_json : "{}";
    size_t len = strlen(st->op) + strlen(args) + 112;
    char *out = malloc(len);
    char r[24] = "";
    if (round > 0)
        snprintf(r, sizeof r, ",\"round\":%d", round);
    if (out != NULL)
        snprintf(out, len, "{\"op\":\"%s\",\"buckets\":%u,\"memory\":%llu%s,\"args\":%s}", st->op,
                 buckets, (unsigned long long)memory, r, args);
    return out;
}

char *sb_exchange_args(const sb_stage_spec *st, uint32_t buckets, uint64_t memory)
{
    return sb_exchange_args_round(st, buckets, memory, 0);
}

int sb_exchange_rounds(const char *op)
{
    return op != NULL && strcmp(op, "sort") == 0 ? 2 : 1;
}

char *sb_exchange_join_args(const sb_stage_spec *st, uint32_t buckets, uint64_t memory,
                            uint64_t maps, uint64_t right_bytes)
{
    const char *args = st->args_json != NULL && *st->args_json ? st->args_json : "{}";
    size_t len = strlen(args) + 160;
    char *out = malloc(len);
    if (out != NULL)
        snprintf(out, len,
                 "{\"op\":\"join\",\"buckets\":%u,\"memory\":%llu,\"maps\":%llu,"
                 "\"rightBytes\":%llu,\"args\":%s}",
                 buckets, (unsigned long long)memory, (unsigned long long)maps,
                 (unsigned long long)right_bytes, args);
    return out;
}

uint32_t sb_exchange_join_buckets(uint32_t buckets, uint64_t right_bytes, uint64_t memory)
{
    uint64_t share = memory / 4, n = buckets;
    uint64_t need =
        share > 0 ? (4 * right_bytes + share - 1) / share : 0; /* 4 x right / n <= share */
    if (need > n)
        n = need;
    return n > SB_EXCHANGE_MAX_BUCKETS ? SB_EXCHANGE_MAX_BUCKETS : (uint32_t)n;
}

int sb_exchange_early(const sb_stage_spec *st)
{
    static const char *const any_order[] = {"repartition", "random_shuffle", "distinct"};
    for (size_t i = 0; i < sizeof any_order / sizeof *any_order; i++)
        if (strcmp(st->op, any_order[i]) == 0)
            return 1;
    if (strcmp(st->op, "groupby") != 0)
        return 0;
    cJSON *root = st->args_json != NULL ? cJSON_Parse(st->args_json) : NULL;
    const cJSON *aggs = cJSON_GetObjectItemCaseSensitive(root, "aggregates"), *a;
    int ok = root != NULL;
    cJSON_ArrayForEach(a, aggs)
    {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(a, "op");
        const char *n = cJSON_IsString(o) ? o->valuestring : "";
        ok &= strcmp(n, "count") == 0 || strcmp(n, "sum") == 0 || strcmp(n, "min") == 0 ||
              strcmp(n, "max") == 0 || strcmp(n, "mean") == 0 || strcmp(n, "std") == 0;
    }
    cJSON_Delete(root);
    return ok;
}
