/* join.c — the join op's args beyond their types (join.h): the right source {uri, format, args},
 * unique key fields, broadcastBelow a size within a quarter of the memory budget, records only;
 * and the right side and threshold read back from the args JSON by the plan and the worker. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/allops.h"
#include "spec/join.h"
#include "spec/quantity.h"
#include "spec/schema.h"

static int is_str(const sb_node *n)
{
    return n != NULL && n->kind == SB_NODE_STRING;
}

/* A size: a positive integer or a quantity ("64Mi"); 0 when not one. */
static int64_t node_size(const sb_node *b)
{
    int64_t v = 0;
    sb_err err;
    if (b != NULL && b->kind == SB_NODE_INT && b->v.i > 0)
        return b->v.i;
    if (is_str(b) && sb_quantity_value(b->text, &v, &err) == 0 && v > 0)
        return v;
    return 0;
}

/* right: a map {uri (a string), format (jsonl or csv), args (a map)}. */
static void right_check(const sb_node *r, const char *ap, sb_diags *d)
{
    char rp[512], buf[512];
    sb_spec_path_field(rp, sizeof rp, ap, "right");
    if (r == NULL) /* the argspec check says it is required */
        return;
    if (r->kind != SB_NODE_MAP) {
        sb_diags_add(d, rp, r->line, r->col,
                     "must be a source {uri, format, args} (the table joined with the stream)");
        return;
    }
    for (size_t k = 0; k < r->n; k++) {
        const char *key = r->keys[k]->text;
        if (strcmp(key, "uri") && strcmp(key, "format") && strcmp(key, "args"))
            sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, rp, key), r->keys[k]->line,
                         r->keys[k]->col,
                         "unknown field \"%s\" of join's right (uri, format, args)", key);
    }
    const sb_node *uri = sb_node_get(r, "uri"), *fmt = sb_node_get(r, "format");
    const sb_node *a = sb_node_get(r, "args");
    if (!is_str(uri) || uri->text[0] == '\0')
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, rp, "uri"), uri ? uri->line : r->line,
                     uri ? uri->col : r->col,
                     "must be the right side's URI (file://, s3://, "
                     "http(s)://)");
    if (fmt != NULL && !(is_str(fmt) && (!strcmp(fmt->text, "jsonl") || !strcmp(fmt->text, "csv"))))
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, rp, "format"), fmt->line, fmt->col,
                     "must be jsonl or csv (join works on records in this build)");
    if (a != NULL && a->kind != SB_NODE_MAP && a->kind != SB_NODE_NULL)
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, rp, "args"), a->line, a->col,
                     "must be a map (the format's args, as a source's)");
}

void sb_spec_join_args_check(const sb_node *args, const sb_node *stage, const char *path,
                             sb_diags *d)
{
    char ap[512], buf[512];
    sb_spec_path_field(ap, sizeof ap, path, "args");
    sb_spec_allop_args_check("join", args, stage, path, d); /* missingKey as the others take it */
    right_check(sb_node_get(args, "right"), ap, d);
    const sb_node *on = sb_node_get(args, "on"), *b = sb_node_get(args, "broadcastBelow");
    for (size_t i = 0; on != NULL && on->kind == SB_NODE_SEQ && i < on->n; i++)
        for (size_t k = 0; k < i; k++)
            if (is_str(on->items[i]) && is_str(on->items[k]) &&
                strcmp(on->items[i]->text, on->items[k]->text) == 0) {
                sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ap, "on"), on->items[i]->line,
                             on->items[i]->col, "names field \"%s\" twice", on->items[i]->text);
                break;
            }
    if (b != NULL && node_size(b) == 0)
        sb_diags_add(d, sb_spec_path_field(buf, sizeof buf, ap, "broadcastBelow"), b->line, b->col,
                     "must be a size above 0 (bytes, or a quantity such as 64Mi)");
}

void sb_spec_join_stage_check(const sb_pipeline_spec *sp, size_t i, const sb_node *stage,
                              const char *op_path, int line, int col, sb_diags *d)
{
    if (sp->source.format == SB_FMT_PARQUET)
        sb_diags_add(d, op_path, line, col,
                     "join works on records (jsonl, csv) in this build, not on a parquet "
                     "source's typed columns");
    int64_t below = sb_spec_join_broadcast_below(sp->stages[i].args_json);
    int64_t budget = sp->execution.memory_budget;
    if (below > 0 && budget > 0 && below > budget / 4) {
        const sb_node *bn = sb_node_get(sb_node_get(stage, "args"), "broadcastBelow");
        char a[32], b[32], buf[512];
        snprintf(buf, sizeof buf, "%.*s.args.broadcastBelow", (int)(strlen(op_path) - 3), op_path);
        sb_diags_add(d, buf, bn ? bn->line : line, bn ? bn->col : col,
                     "is %s (64Mi when left out), above a quarter of execution.memoryBudget "
                     "(%s): every task that runs the join holds the right side whole; lower it "
                     "or raise the budget",
                     sb_quantity_format_bytes(below, a, sizeof a),
                     sb_quantity_format_bytes(budget / 4, b, sizeof b));
    }
}

int64_t sb_spec_join_broadcast_below(const char *args_json)
{
    cJSON *root = cJSON_Parse(args_json != NULL ? args_json : "{}");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "broadcastBelow");
    int64_t v = 0;
    sb_err err;
    if (b == NULL)
        v = SB_JOIN_BROADCAST_DEFAULT;
    else if (cJSON_IsNumber(b) && b->valuedouble >= 1)
        v = (int64_t)b->valuedouble;
    else if (!cJSON_IsString(b) || sb_quantity_value(b->valuestring, &v, &err) != 0 || v < 1)
        v = 0;
    cJSON_Delete(root);
    return v;
}

int sb_spec_join_right(const char *args_json, sb_source_spec *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_Parse(args_json != NULL ? args_json : "{}");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "right");
    const cJSON *uri = cJSON_GetObjectItemCaseSensitive(r, "uri");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(r, "format");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, "args");
    int csv = cJSON_IsString(fmt) && strcmp(fmt->valuestring, "csv") == 0;
    if (!cJSON_IsString(uri) ||
        (fmt != NULL && !csv && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "jsonl")))) {
        cJSON_Delete(root);
        return sb_err_permanent(err, "join: args.right must be {uri, format: jsonl|csv, args}");
    }
    out->uri = strdup(uri->valuestring);
    out->format = csv ? SB_FMT_CSV : SB_FMT_JSONL;
    out->partition_size = (int64_t)64 << 20;
    out->args_json = cJSON_IsObject(a) ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(root);
    if (out->uri == NULL || (cJSON_IsObject(a) && out->args_json == NULL)) {
        sb_spec_join_right_free(out);
        return sb_err_set(err, "out of memory");
    }
    return 0;
}

void sb_spec_join_right_free(sb_source_spec *s)
{
    free(s->uri);
    free(s->args_json);
    memset(s, 0, sizeof *s);
}
