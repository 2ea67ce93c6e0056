/* transform.c — the image.resize and image.normalize operators, CPU implementations
 * (docs/pipeline-api.md). Both read the columns the `image` source format writes
 * (lib/io/imgread.h): a fixed-size-list pixel column (default name "image"; uint8 or float32
 * values, height x width x channels, HWC) and int32 columns "height", "width" and "channels"
 * giving each row's shape. Every other column passes through unchanged.
 *
 *   image.resize     args width, height (required), antialias, field: bilinear
 *                    (lib/image/image.h) to height x width x channels, same value type;
 *                    "height"/"width" updated. antialias (default: true for an image shrunk
 *                    along either axis) is Pillow's filtered bilinear (sb_image_resample_*),
 *                    false plain bilinear. Rows of one batch must have the same channel count.
 *   image.normalize  args mean, std (one number, or one per channel; defaults 0 and 1), scale
 *                    (default 1/255 for uint8 input, 1 for float32), layout (hwc, the default, or
 *                    chw: channel planes, what PyTorch models take), field: float32 values
 *                    (x * scale - mean[c]) / std[c].
 *
 * A row whose shape columns do not multiply to the list width, a missing shape column, or a
 * mean/std list whose length is neither 1 nor the channel count is a data error naming the row.
 * A null image row gives a null output row.
 *
 * Memory: the op state owns its arguments and the resize's weight tables and scratch (kept
 * across rows and batches: images of one source mostly share sizes); output buffers live for one
 * process() call.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "worker/ops/impls.h"

#define MAX_CHANNELS 64

typedef struct {
    char *field;
    uint32_t width, height; /* resize */
    int antialias;          /* resize: 1, 0, or -1 for the default (when shrinking) */
    sb_image_resampler rs;  /* resize: the antialiased resize's tables, reused */
    float mean[MAX_CHANNELS], std[MAX_CHANNELS]; /* normalize */
    size_t nmean, nstd;
    double scale; /* < 0: the default for the input type */
    int chw;
} img_state;

static void img_free(void *state)
{
    img_state *s = state;
    if (s == NULL)
        return;
    free(s->field);
    sb_image_resampler_free(&s->rs);
    free(s);
}

/* The state is the parsed args and resize's resampler tables (rebuilt only when a size changes,
 * so a later task of the same sizes skips them too): nothing of a task to clear. */
static int img_reset(void *state, sb_err *err)
{
    (void)state;
    (void)err;
    return 0;
}

/* mean or std: one number (for every channel) or a list of 1 to MAX_CHANNELS numbers. */
static int num_list(const cJSON *v, const char *op, const char *name, float *out, size_t *n,
                    sb_err *err)
{
    if (v == NULL)
        return 0;
    if (cJSON_IsNumber(v)) {
        if (!isfinite(v->valuedouble))
            return sb_err_set(err, "%s: args.%s is not a finite number", op, name);
        out[0] = (float)v->valuedouble;
        *n = 1;
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > MAX_CHANNELS)
        return sb_err_set(err, "%s: args.%s must be a number or a list of 1 to %d numbers", op,
                          name, MAX_CHANNELS);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
            return sb_err_set(err, "%s: args.%s[%zu] is not a finite number", op, name, i);
        out[i++] = (float)e->valuedouble;
    }
    *n = i;
    return 0;
}

static int img_init(const char *args_json, void **state, int is_resize, sb_err *err)
{
    const char *op = is_resize ? "image.resize" : "image.normalize";
    *state = NULL;
    cJSON *a = args_json ? cJSON_Parse(args_json) : NULL;
    img_state *s = calloc(1, sizeof *s);
    int rc = -1;
    if (s == NULL) {
        sb_err_set(err, "%s: out of memory", op);
        goto out;
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(a, "field");
    if (f != NULL && (!cJSON_IsString(f) || f->valuestring[0] == '\0')) {
        sb_err_set(err, "%s: args.field must be a non-empty string", op);
        goto out;
    }
    s->field = strdup(f ? f->valuestring : "image");
    if (s->field == NULL) {
        sb_err_set(err, "%s: out of memory", op);
        goto out;
    }
    if (is_resize) {
        const char *names[2] = {"width", "height"};
        uint32_t *dst[2] = {&s->width, &s->height};
        for (int i = 0; i < 2; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, names[i]);
            if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > SB_IMAGE_MAX_SIDE ||
                v->valuedouble != floor(v->valuedouble)) {
                sb_err_set(err, "image.resize: args.%s must be an integer from 1 to %u", names[i],
                           SB_IMAGE_MAX_SIDE);
                goto out;
            }
            *dst[i] = (uint32_t)v->valuedouble;
        }
        const cJSON *aa = cJSON_GetObjectItemCaseSensitive(a, "antialias");
        if (aa != NULL && !cJSON_IsBool(aa)) {
            sb_err_set(err, "image.resize: args.antialias must be true or false");
            goto out;
        }
        s->antialias = aa == NULL ? -1 : cJSON_IsTrue(aa);
    } else {
        if (num_list(cJSON_GetObjectItemCaseSensitive(a, "mean"), op, "mean", s->mean, &s->nmean,
                     err) != 0 ||
            num_list(cJSON_GetObjectItemCaseSensitive(a, "std"), op, "std", s->std, &s->nstd,
                     err) != 0)
            goto out;
        for (size_t i = 0; i < s->nstd; i++)
            if (s->std[i] == 0) {
                if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(a, "std")))
                    sb_err_set(err, "image.normalize: args.std is 0 (a division by zero)");
                else
                    sb_err_set(err, "image.normalize: args.std[%zu] is 0 (a division by zero)", i);
                goto out;
            }
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(a, "scale");
        s->scale = -1;
        if (sc != NULL) {
            if (!cJSON_IsNumber(sc) || !isfinite(sc->valuedouble)) {
                sb_err_set(err, "image.normalize: args.scale must be a finite number");
                goto out;
            }
            s->scale = sc->valuedouble;
        }
        const cJSON *lay = cJSON_GetObjectItemCaseSensitive(a, "layout");
        if (lay != NULL) {
            if (cJSON_IsString(lay) && strcmp(lay->valuestring, "chw") == 0)
                s->chw = 1;
            else if (!cJSON_IsString(lay) || strcmp(lay->valuestring, "hwc") != 0) {
                sb_err_set(err, "image.normalize: args.layout must be hwc or chw");
                goto out;
            }
        }
    }
    *state = s;
    s = NULL;
    rc = 0;
out:
    img_free(s);
    cJSON_Delete(a);
    return rc;
}

static int resize_init(const char *args_json, void **state, sb_err *err)
{
    return img_init(args_json, state, 1, err);
}

static int normalize_init(const char *args_json, void **state, sb_err *err)
{
    return img_init(args_json, state, 0, err);
}

/* The pixel column and the three shape columns of a batch. */
typedef struct {
    int ci;
    const sb_column *px, *h, *w, *c;
} img_cols;

static int find_cols(const sb_batch *in, const char *op, const char *field, img_cols *ic,
                     sb_err *err)
{
    ic->ci = sb_batch_find(in, field);
    if (ic->ci < 0)
        return sb_err_data(err,
                           "%s: the input has no column \"%.100s\" (images come from the image "
                           "source format; args.field names another column)",
                           op, field);
    ic->px = sb_batch_column(in, (size_t)ic->ci);
    if (ic->px->type != SB_TYPE_FIXED_LIST ||
        (ic->px->child_type != SB_TYPE_UINT8 && ic->px->child_type != SB_TYPE_FLOAT32))
        return sb_err_data(err,
                           "%s: column \"%.100s\" is %s, not a fixed-size list of uint8 or "
                           "float32 (pixels)",
                           op, field, sb_type_name(ic->px->type));
    const char *names[3] = {"height", "width", "channels"};
    const sb_column **dst[3] = {&ic->h, &ic->w, &ic->c};
    for (int i = 0; i < 3; i++) {
        int k = sb_batch_find(in, names[i]);
        const sb_column *col = k >= 0 ? sb_batch_column(in, (size_t)k) : NULL;
        if (col == NULL || col->type != SB_TYPE_INT32)
            return sb_err_data(err,
                               "%s: the input has no int32 column \"%s\" (the image's shape, as "
                               "the image source format writes it)",
                               op, names[i]);
        *dst[i] = col;
    }
    return 0;
}

static bool row_valid(const sb_column *c, size_t r)
{
    return c->validity == NULL || (c->validity[r >> 3] >> (r & 7)) & 1;
}

/* Row r's shape, checked against the list width. */
static int row_shape(const img_cols *ic, size_t r, const char *op, uint32_t sh[3], sb_err *err)
{
    const int32_t *h = ic->h->values, *w = ic->w->values, *c = ic->c->values;
    if (!row_valid(ic->h, r) || !row_valid(ic->w, r) || !row_valid(ic->c, r) || h[r] < 1 ||
        w[r] < 1 || c[r] < 1 || c[r] > MAX_CHANNELS ||
        (uint64_t)h[r] * (uint64_t)w[r] * (uint64_t)c[r] != ic->px->list_size)
        return sb_err_data(err,
                           "%s: record %zu: height %d x width %d x channels %d does not match "
                           "the %u values of its image",
                           op, r, row_valid(ic->h, r) ? h[r] : -1, row_valid(ic->w, r) ? w[r] : -1,
                           row_valid(ic->c, r) ? c[r] : -1, ic->px->list_size);
    sh[0] = (uint32_t)h[r];
    sh[1] = (uint32_t)w[r];
    sh[2] = (uint32_t)c[r];
    return 0;
}

/* Appends rows [first, first+n) of `in` with column ci replaced by `px` (list width `lw`, type
 * `ct`, rows [first, first+n) filled) and, when hv/wv are set, "height"/"width" by them. */
static int append_replaced(const sb_batch *in, const img_cols *ic, const void *px, sb_type ct,
                           uint32_t lw, const int32_t *hv, const int32_t *wv, size_t first,
                           size_t n, sb_op_out *out, sb_err *err)
{
    size_t ncols = sb_batch_ncols(in);
    sb_field *f = calloc(ncols, sizeof *f);
    sb_column *cols = calloc(ncols, sizeof *cols);
    if (f == NULL || cols == NULL) {
        free(f);
        free(cols);
        return sb_err_set(err, "image op: out of memory");
    }
    for (size_t i = 0; i < ncols; i++) {
        cols[i] = *sb_batch_column(in, i);
        if ((int)i == ic->ci) {
            cols[i].child_type = ct;
            cols[i].list_size = lw;
            cols[i].values = px;
            cols[i].values_len = (first + n) * lw * sb_type_width(ct);
        } else if (hv != NULL && cols[i].values == ic->h->values) {
            cols[i].values = hv;
        } else if (wv != NULL && cols[i].values == ic->w->values) {
            cols[i].values = wv;
        }
        f[i] = sb_field_of(&cols[i]);
    }
    size_t row_bytes = (size_t)lw * sb_type_width(ct) + 64;
    int rc = sb_op_out_append_columns(out, f, cols, ncols, first, n, row_bytes, err);
    free(f);
    free(cols);
    return rc;
}

/* One image (shape sh: height, width, channels) into s->height x s->width. */
static int resize_one(img_state *s, int u8, const void *src, const uint32_t sh[3], void *dst,
                      sb_err *err)
{
    uint32_t w = s->width, h = s->height;
    /* the default follows Pillow and torchvision: filtered when shrinking; an upscale is plain
     * bilinear either way (to within rounding) */
    int aa = s->antialias >= 0 ? s->antialias : w < sh[1] || h < sh[0];
    if (aa)
        return u8 ? sb_image_resample_u8(&s->rs, src, sh[1], sh[0], sh[2], dst, w, h, err)
                  : sb_image_resample_f32(&s->rs, src, sh[1], sh[0], sh[2], dst, w, h, err);
    return u8 ? sb_image_resize_u8(src, sh[1], sh[0], sh[2], dst, w, h, err)
              : sb_image_resize_f32(src, sh[1], sh[0], sh[2], dst, w, h, err);
}

static int resize_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                          sb_err *err)
{
    img_state *s = state;
    if (n == 0)
        return 0;
    img_cols ic;
    if (find_cols(in, "image.resize", s->field, &ic, err) != 0)
        return -1;
    uint32_t ch = 0;
    for (size_t r = first; r < first + n; r++) {
        uint32_t sh[3];
        if (row_shape(&ic, r, "image.resize", sh, err) != 0)
            return -1;
        if (ch != 0 && sh[2] != ch)
            return sb_err_data(err,
                               "image.resize: record %zu has %u channels, the records before it "
                               "%u (the image source's args.channels gives every image the same)",
                               r, sh[2], ch);
        ch = sh[2];
    }
    size_t lw = (size_t)s->width * s->height * ch, vw = sb_type_width(ic.px->child_type);
    if (lw > UINT32_MAX)
        return sb_err_data(err, "image.resize: %u x %u x %u values do not fit one list", s->width,
                           s->height, ch);
    unsigned char *px = calloc((first + n) * lw, vw);
    int32_t *hv = malloc((first + n) * sizeof *hv), *wv = malloc((first + n) * sizeof *wv);
    int rc = -1;
    if (px == NULL || hv == NULL || wv == NULL) {
        sb_err_set(err, "image.resize: out of memory for %zu rows of %zu values", n, lw);
        goto done;
    }
    for (size_t r = first; r < first + n; r++) {
        hv[r] = (int32_t)s->height;
        wv[r] = (int32_t)s->width;
        if (!row_valid(ic.px, r))
            continue;
        uint32_t sh[3];
        row_shape(&ic, r, "image.resize", sh, NULL);
        /* void pointers: the values are uint8 or float32 as child_type says */
        const void *src = (const unsigned char *)ic.px->values + r * (size_t)ic.px->list_size * vw;
        void *dst = px + r * lw * vw;
        if (resize_one(s, ic.px->child_type == SB_TYPE_UINT8, src, sh, dst, err) != 0)
            goto done;
    }
    rc = append_replaced(in, &ic, px, ic.px->child_type, (uint32_t)lw, hv, wv, first, n, out, err);
done:
    free(px);
    free(hv);
    free(wv);
    return rc;
}

static int normalize_process(void *state, const sb_batch *in, size_t first, size_t n,
                             sb_op_out *out, sb_err *err)
{
    img_state *s = state;
    if (n == 0)
        return 0;
    img_cols ic;
    if (find_cols(in, "image.normalize", s->field, &ic, err) != 0)
        return -1;
    size_t lw = ic.px->list_size;
    float *px = calloc((first + n) * lw, sizeof *px);
    if (px == NULL)
        return sb_err_set(err, "image.normalize: out of memory for %zu rows of %zu values", n, lw);
    int u8 = ic.px->child_type == SB_TYPE_UINT8;
    float scale = (float)(s->scale >= 0 ? s->scale : u8 ? 1.0 / 255.0 : 1.0);
    int rc = -1;
    for (size_t r = first; r < first + n; r++) {
        uint32_t sh[3];
        if (row_shape(&ic, r, "image.normalize", sh, err) != 0)
            goto done;
        uint32_t ch = sh[2];
        if ((s->nmean > 1 && s->nmean != ch) || (s->nstd > 1 && s->nstd != ch)) {
            sb_err_data(err,
                        "image.normalize: record %zu has %u channels, args.mean has %zu values "
                        "and args.std %zu (give 1 or one per channel)",
                        r, ch, s->nmean, s->nstd);
            goto done;
        }
        if (!row_valid(ic.px, r))
            continue;
        float mul[MAX_CHANNELS], add[MAX_CHANNELS];
        for (uint32_t k = 0; k < ch; k++) {
            float m = s->nmean ? s->mean[s->nmean > 1 ? k : 0] : 0.0f;
            float sd = s->nstd ? s->std[s->nstd > 1 ? k : 0] : 1.0f;
            mul[k] = scale / sd; /* (x * scale - m) / sd */
            add[k] = -m / sd;
        }
        size_t hw = (size_t)sh[0] * sh[1];
        float *o = px + r * lw;
        const uint8_t *bu = (const uint8_t *)ic.px->values + r * lw;
        const float *bf = (const float *)ic.px->values + r * lw;
        for (size_t p = 0; p < hw; p++)
            for (uint32_t k = 0; k < ch; k++) {
                float x = u8 ? (float)bu[p * ch + k] : bf[p * ch + k];
                o[s->chw ? k * hw + p : p * ch + k] = x * mul[k] + add[k];
            }
    }
    rc =
        append_replaced(in, &ic, px, SB_TYPE_FLOAT32, (uint32_t)lw, NULL, NULL, first, n, out, err);
done:
    free(px);
    return rc;
}

static int img_finish(void *state, sb_op_out *out, sb_err *err)
{
    (void)state;
    (void)out;
    (void)err;
    return 0;
}

const sb_op_impl sb_op_image_resize_impl = {.name = "image.resize",
                                            .init = resize_init,
                                            .process = resize_process,
                                            .finish = img_finish,
                                            .free = img_free,
                                            .reset = img_reset};
const sb_op_impl sb_op_image_normalize_impl = {.name = "image.normalize",
                                               .init = normalize_init,
                                               .process = normalize_process,
                                               .finish = img_finish,
                                               .free = img_free,
                                               .reset = img_reset};
