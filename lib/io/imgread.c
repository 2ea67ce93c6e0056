/* imgread.c — the image source format (see imgread.h): its options from the format args, and
 * each JPEG or PNG object of a split read whole and decoded with lib/image into one partition
 * (the columns are listed in imgread.h), handed to the emit callback. */

#include "io/imgread.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "io/common.h"
#include "io/schemes.h"
#include "partition/partition.h"

static int int_arg(const cJSON *root, const char *name, double lo, double hi, uint64_t *out,
                   const char *what, sb_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (v == NULL || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi || v->valuedouble != floor(v->valuedouble))
        return sb_err_set(err, "%s: args.%s must be an integer from %.0f to %.0f", what, name, lo,
                          hi);
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* args.draft: {width, height}, both integers from 1 to SB_IMAGE_MAX_SIDE (lib/spec checks the
 * same at validate; this guards a spec that reached a worker some other way). */
static int draft_arg(const cJSON *root, const char *what, sb_io_image_opts *o, sb_err *err)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "draft");
    if (d == NULL || cJSON_IsNull(d))
        return 0;
    if (!cJSON_IsObject(d))
        return sb_err_set(err, "%s: args.draft must be an object {width, height}", what);
    uint64_t w = 0, h = 0;
    if (int_arg(d, "width", 1, SB_IMAGE_MAX_SIDE, &w, what, err) != 0 ||
        int_arg(d, "height", 1, SB_IMAGE_MAX_SIDE, &h, what, err) != 0)
        return -1;
    if (w == 0 || h == 0)
        return sb_err_set(err, "%s: args.draft needs both width and height", what);
    o->draft_w = (uint32_t)w;
    o->draft_h = (uint32_t)h;
    return 0;
}

int sb_io_image_opts_parse(const char *args_json, const char *what, sb_io_image_opts *o,
                           sb_err *err)
{
    o->channels = 3;
    o->max_pixels = SB_IMAGE_DEFAULT_MAX_PIXELS;
    o->draft_w = o->draft_h = 0;
    if (args_json == NULL || args_json[0] == '\0')
        return 0;
    cJSON *root = cJSON_Parse(args_json);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sb_err_set(err, "%s: format args are not a JSON object: %.80s", what, args_json);
    }
    uint64_t ch = o->channels;
    int rc = int_arg(root, "channels", 1, 4, &ch, what, err);
    if (rc == 0 && ch == 2)
        rc =
            sb_err_set(err, "%s: args.channels must be 1 (gray), 3 (RGB) or 4 (RGBA), got 2", what);
    if (rc == 0)
        rc = int_arg(root, "maxPixels", 1, (double)SB_IO_IMAGE_MAX_PIXELS, &o->max_pixels, what,
                     err);
    o->channels = (unsigned)ch;
    if (rc == 0)
        rc = draft_arg(root, what, o, err);
    cJSON_Delete(root);
    return rc;
}

static int emit_image(const sb_io_split *sp, const sb_image *im, sb_io_emit_fn emit, void *ud,
                      sb_err *err)
{
    size_t n = (size_t)im->width * im->height * im->channels;
    sb_field f[5] = {
        {.name = "path", .type = SB_TYPE_UTF8},
        {.name = "image",
         .type = SB_TYPE_FIXED_LIST,
         .child_type = SB_TYPE_UINT8,
         .list_size = (uint32_t)n},
        {.name = "height", .type = SB_TYPE_INT32},
        {.name = "width", .type = SB_TYPE_INT32},
        {.name = "channels", .type = SB_TYPE_INT32},
    };
    sb_batch_builder *b = sb_batch_builder_new(f, 5, err);
    if (b == NULL)
        return -1;
    int rc = sb_batch_builder_append_binary(b, 0, sp->path, strlen(sp->path), err);
    if (rc == 0)
        rc = sb_batch_builder_append_values(b, 1, im->pixels, 1, NULL, err);
    if (rc == 0)
        rc = sb_batch_builder_append_int(b, 2, im->height, err);
    if (rc == 0)
        rc = sb_batch_builder_append_int(b, 3, im->width, err);
    if (rc == 0)
        rc = sb_batch_builder_append_int(b, 4, im->channels, err);
    void *blob = NULL;
    size_t len = 0;
    if (rc == 0)
        rc = sb_batch_builder_finish(b, &blob, &len, err);
    sb_batch_builder_free(b);
    if (rc != 0)
        return -1;
    sb_err_clear(err); /* a consumer sharing err may leave its cause there: keep and wrap it */
    if (emit(blob, len, 1, ud) != 0) {
        if (err != NULL && err->msg[0] != '\0')
            return -1;
        return sb_err_set(err, "the consumer refused the partition");
    }
    return 0;
}

int sb_io_read_image(const sb_io_split *split, const char *args_json, size_t target_bytes,
                     sb_io_emit_fn emit, void *ud, sb_err *err)
{
    sb_io_image_opts o;
    size_t max_bytes = 0;
    if (sb_io_image_opts_parse(args_json, "read split", &o, err) != 0 ||
        sb_io_max_record(args_json, target_bytes, "read split", &max_bytes, err) != 0)
        return -1;
    if (split->start != 0 || split->end != split->file_size)
        return sb_err_set(err,
                          "read split: %.300s: an image is read whole, but the split is bytes "
                          "[%" PRIu64 ", %" PRIu64 ") of %" PRIu64,
                          split->path, split->start, split->end, split->file_size);
    if (split->file_size > max_bytes)
        return sb_err_data(err,
                           "reading %.300s: the image file has %" PRIu64 " bytes, over the "
                           "limit of %zu (args.maxRecordSize)",
                           split->path, split->file_size, max_bytes);
    size_t n = (size_t)split->file_size;
    unsigned char *buf = malloc(n);
    if (buf == NULL)
        return sb_err_set(err, "reading %.300s: out of memory for %zu bytes", split->path, n);
    sb_io_rd *h = NULL;
    int rc = sb_io_read_open(split->path, 0, split->file_size, &h, err);
    if (rc == 0) {
        ssize_t k = sb_io_read_full(h, buf, n, err);
        if (k < 0)
            rc = -1;
        else if ((size_t)k < n)
            rc = sb_err_set(err,
                            "reading %.300s: object ends at byte offset %zd, planned size %zu "
                            "(it changed since planning)",
                            split->path, k, n);
        sb_io_read_close(h);
    }
    if (rc != 0) {
        free(buf);
        return sb_err_wrap(err, "read split");
    }
    sb_image im;
    rc = sb_image_decode_draft(buf, n, o.channels, o.max_pixels, o.draft_w, o.draft_h, &im, err);
    free(buf);
    if (rc != 0)
        return sb_err_wrap(err, "reading %.300s", split->path);
    rc = emit_image(split, &im, emit, ud, err);
    sb_image_free(&im);
    if (rc != 0)
        return sb_err_wrap(err, "reading %.300s", split->path);
    return 0;
}
