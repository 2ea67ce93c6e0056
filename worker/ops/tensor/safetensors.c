/* safetensors.c — a strict reader of the safetensors format (see safetensors.h): the header
 * length, the JSON header (dtypes, shapes, data offsets that tile the data exactly), lookup by
 * name and element reads. sb_st_parse takes the file's buffer; the parsed table owns it and the
 * tensor names until sb_st_free. */

#include "worker/ops/tensor/safetensors.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

void sb_st_free(sb_safetensors *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->t[i].name);
    free(s->t);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* A JSON number that is a non-negative integer below 2^53. */
static int as_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const sb_st_tensor *x = a, *y = b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int entry(const cJSON *e, const uint8_t *data, uint64_t dlen, sb_st_tensor *t, sb_err *err)
{
    const char *nm = e->string;
    if (!cJSON_IsObject(e))
        return sb_err_set(err, "safetensors: tensor \"%.100s\" is not an object", nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return sb_err_set(err, "safetensors: tensor \"%.100s\" has no dtype", nm);
    if (strcmp(dt->valuestring, "F32") == 0)
        t->dtype = SB_ST_F32;
    else if (strcmp(dt->valuestring, "F64") == 0)
        t->dtype = SB_ST_F64;
    else
        return sb_err_set(err,
                          "safetensors: tensor \"%.100s\" has dtype %.16s (F32 and F64 are "
                          "supported: save the model in float32)",
                          nm, dt->valuestring);
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > SB_ST_MAX_DIMS)
        return sb_err_set(err,
                          "safetensors: tensor \"%.100s\": shape must be a list of at most %d "
                          "sizes",
                          nm, SB_ST_MAX_DIMS);
    uint64_t count = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh)
    {
        uint64_t v;
        if (as_u64(d, &v) != 0 || (v != 0 && count > UINT64_MAX / 8 / v))
            return sb_err_set(err,
                              "safetensors: tensor \"%.100s\": a shape size is not a valid "
                              "count",
                              nm);
        t->shape[t->ndim++] = v;
        count *= v;
    }
    uint64_t a, b;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
        as_u64(cJSON_GetArrayItem(of, 0), &a) != 0 || as_u64(cJSON_GetArrayItem(of, 1), &b) != 0)
        return sb_err_set(err, "safetensors: tensor \"%.100s\": data_offsets must be [begin, end]",
                          nm);
    uint64_t width = t->dtype == SB_ST_F32 ? 4 : 8;
    if (a > b || b > dlen)
        return sb_err_set(err,
                          "safetensors: tensor \"%.100s\": data_offsets [%llu, %llu] lie outside "
                          "the %llu data bytes",
                          nm, (unsigned long long)a, (unsigned long long)b,
                          (unsigned long long)dlen);
    if (b - a != count * width)
        return sb_err_set(
            err, "safetensors: tensor \"%.100s\": %llu data bytes for %llu values of %s", nm,
            (unsigned long long)(b - a), (unsigned long long)count, dt->valuestring);
    t->count = count;
    t->data = data + a;
    return 0;
}

int sb_st_parse(uint8_t *buf, size_t len, sb_safetensors *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    out->buf = buf;
    out->len = len;
    uint64_t hl;
    if (len < 8) {
        sb_st_free(out);
        return sb_err_set(err, "safetensors: %zu bytes is too short for a header", len);
    }
    memcpy(&hl, buf, 8);
    if (hl > SB_ST_MAX_HEADER || hl > len - 8) {
        sb_st_free(out);
        return sb_err_set(err,
                          "safetensors: a header of %llu bytes (file of %zu bytes, limit %u): "
                          "not a safetensors file?",
                          (unsigned long long)hl, len, SB_ST_MAX_HEADER);
    }
    cJSON *h = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hl);
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        sb_st_free(out);
        return sb_err_set(err, "safetensors: the header is not a JSON object");
    }
    const uint8_t *data = buf + 8 + hl;
    uint64_t dlen = len - 8 - hl;
    int n = cJSON_GetArraySize(h);
    out->t = calloc(n > 0 ? (size_t)n : 1, sizeof *out->t);
    int rc = out->t == NULL ? sb_err_set(err, "out of memory") : 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, h)
    {
        if (rc != 0)
            break;
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        if (sb_st_find(out, e->string) != NULL) {
            rc = sb_err_set(err, "safetensors: tensor \"%.100s\" appears twice in the header",
                            e->string);
            break;
        }
        sb_st_tensor *t = &out->t[out->n];
        if ((t->name = strdup(e->string)) == NULL) {
            rc = sb_err_set(err, "out of memory");
            break;
        }
        out->n++;
        rc = entry(e, data, dlen, t, err);
    }
    cJSON_Delete(h);
    if (rc == 0 && out->n > 1) {
        sb_st_tensor *sorted = malloc(out->n * sizeof *sorted);
        if (sorted == NULL) {
            rc = sb_err_set(err, "out of memory");
        } else {
            memcpy(sorted, out->t, out->n * sizeof *sorted);
            qsort(sorted, out->n, sizeof *sorted, by_begin);
            for (size_t i = 1; i < out->n && rc == 0; i++) {
                const sb_st_tensor *p = &sorted[i - 1];
                size_t pw = p->dtype == SB_ST_F32 ? 4 : 8;
                if (p->count > 0 && p->data + p->count * pw > sorted[i].data)
                    rc = sb_err_set(err, "safetensors: tensors \"%.100s\" and \"%.100s\" overlap",
                                    p->name, sorted[i].name);
            }
            free(sorted);
        }
    }
    if (rc != 0)
        sb_st_free(out);
    return rc;
}

const sb_st_tensor *sb_st_find(const sb_safetensors *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    return NULL;
}

float sb_st_get(const sb_st_tensor *t, uint64_t i)
{
    if (t->dtype == SB_ST_F32) {
        float f;
        memcpy(&f, t->data + 4 * i, 4);
        return f;
    }
    double d;
    memcpy(&d, t->data + 8 * i, 8);
    return (float)d;
}
