/* image.c — JPEG (libjpeg-turbo) and PNG (libpng's simplified API) decoding with bounds, and
 * bilinear resizing (see image.h). */
#include "image/image.h"

#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

sb_image_kind sb_image_sniff(const void *p, size_t n)
{
    const unsigned char *b = p;
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        return SB_IMAGE_JPEG;
    static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (n >= 8 && memcmp(b, png_magic, 8) == 0)
        return SB_IMAGE_PNG;
    return SB_IMAGE_UNKNOWN;
}

const char *sb_image_kind_name(sb_image_kind k)
{
    return k == SB_IMAGE_JPEG ? "jpeg" : k == SB_IMAGE_PNG ? "png" : "unknown";
}

void sb_image_free(sb_image *im)
{
    if (im == NULL)
        return;
    free(im->pixels);
    memset(im, 0, sizeof *im);
}

/* The header's size against the bounds; the pixel buffer's size. */
static int check_size(const char *codec, uint64_t w, uint64_t h, unsigned ch, uint64_t max_pixels,
                      size_t *bytes, sb_err *err)
{
    if (w == 0 || h == 0)
        return sb_err_data(err, "%s: the header gives an empty image (%" PRIu64 " x %" PRIu64 ")",
                           codec, w, h);
    if (w > SB_IMAGE_MAX_SIDE || h > SB_IMAGE_MAX_SIDE || w * h > max_pixels)
        return sb_err_data(err,
                           "%s: the header claims %" PRIu64 " x %" PRIu64 " pixels, over the "
                           "limit of %" PRIu64 " pixels (args.maxPixels) or %u per side; refused "
                           "before decoding (a decompression bomb, or raise maxPixels)",
                           codec, w, h, max_pixels, SB_IMAGE_MAX_SIDE);
    *bytes = (size_t)(w * h * ch);
    return 0;
}

/* ---- JPEG ----------------------------------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char first_warning[JMSG_LENGTH_MAX];
    int warned;
} jerr_mgr;

typedef struct {
    struct jpeg_progress_mgr pub;
    int too_many_scans;
} jprog_mgr;

static void jerr_exit(j_common_ptr ci)
{
    jerr_mgr *e = (jerr_mgr *)ci->err;
    longjmp(e->jb, 1);
}

/* Warnings (level -1) are corrupt or truncated data: remember the first, fail after. Trace
 * messages (level >= 0) are ignored. Nothing is printed. */
static void jerr_emit(j_common_ptr ci, int level)
{
    jerr_mgr *e = (jerr_mgr *)ci->err;
    if (level >= 0)
        return;
    if (!e->warned)
        e->pub.format_message(ci, e->first_warning);
    e->warned = 1;
    e->pub.num_warnings++;
}

static void jprog(j_common_ptr ci)
{
    if (!ci->is_decompressor)
        return;
    j_decompress_ptr d = (j_decompress_ptr)ci;
    jprog_mgr *p = (jprog_mgr *)ci->progress;
    if (d->input_scan_number > SB_IMAGE_MAX_SCANS) {
        p->too_many_scans = 1;
        ((jerr_mgr *)ci->err)->first_warning[0] = '\0';
        longjmp(((jerr_mgr *)ci->err)->jb, 1);
    }
}

/* The DCT reduction of a w x h image drafted to min_w x min_h: the largest d of 8, 4 and 2 with
 * d <= min(w / min_w, h / min_h), else 1: Pillow's Image.draft() rule, so that a draft here and a
 * draft there decode the same pixels. libjpeg then skips most of the inverse DCT, the costliest
 * part of decoding, instead of computing pixels that a downscaling resize averages away. */
static unsigned draft_denom(uint32_t w, uint32_t h, uint32_t min_w, uint32_t min_h)
{
    if (min_w == 0 || min_h == 0)
        return 1;
    uint32_t s = w / min_w < h / min_h ? w / min_w : h / min_h;
    for (unsigned d = 8; d > 1; d /= 2)
        if (s >= d)
            return d;
    return 1;
}

static int decode_jpeg(const void *p, size_t n, unsigned ch, uint64_t max_pixels, uint32_t min_w,
                       uint32_t min_h, sb_image *out, sb_err *err)
{
    struct jpeg_decompress_struct ci;
    jerr_mgr je;
    jprog_mgr jp;
    memset(&je, 0, sizeof je);
    memset(&jp, 0, sizeof jp);
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jerr_exit;
    je.pub.emit_message = jerr_emit;
    /* volatile: read after longjmp */
    uint8_t *volatile px = NULL;
    if (setjmp(je.jb) != 0) {
        char msg[JMSG_LENGTH_MAX];
        if (jp.too_many_scans)
            snprintf(msg, sizeof msg, "more than %d progressive scans (refused)",
                     SB_IMAGE_MAX_SCANS);
        else
            je.pub.format_message((j_common_ptr)&ci, msg);
        sb_err_data(err, "jpeg: %s", msg);
        jpeg_destroy_decompress(&ci);
        free(px);
        return -1;
    }
    jpeg_create_decompress(&ci);
    jp.pub.progress_monitor = jprog;
    ci.progress = &jp.pub;
    jpeg_mem_src(&ci, (const unsigned char *)p, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    size_t bytes = 0;
    if (check_size("jpeg", ci.image_width, ci.image_height, ch, max_pixels, &bytes, err) != 0)
        goto fail;
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        sb_err_data(err, "jpeg: CMYK images are not supported (convert to RGB first)");
        goto fail;
    }
    ci.out_color_space = ch == 1 ? JCS_GRAYSCALE : ch == 3 ? JCS_RGB : JCS_EXT_RGBA;
    unsigned denom = draft_denom(ci.image_width, ci.image_height, min_w, min_h);
    ci.scale_num = 1;
    ci.scale_denom = denom;
    jpeg_start_decompress(&ci);
    /* libjpeg rounds a reduced side up: ceil(side / denom) */
    uint32_t ow = (ci.image_width + denom - 1) / denom, oh = (ci.image_height + denom - 1) / denom;
    if ((unsigned)ci.output_components != ch || ci.output_width != ow || ci.output_height != oh) {
        sb_err_data(err, "jpeg: the decoder gave %d components of %u x %u, expected %u of %u x %u",
                    ci.output_components, ci.output_width, ci.output_height, ch, ow, oh);
        goto fail;
    }
    bytes = (size_t)ow * oh * ch;
    px = malloc(bytes);
    if (px == NULL) {
        sb_err_set(err, "jpeg: out of memory for %zu bytes of pixels", bytes);
        goto fail;
    }
    size_t stride = (size_t)ci.output_width * ch;
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = px + (size_t)ci.output_scanline * stride;
        if (jpeg_read_scanlines(&ci, &row, 1) != 1)
            break; /* suspension cannot happen with a memory source; guard anyway */
        if (je.warned)
            break;
    }
    if (!je.warned && ci.output_scanline < ci.output_height) {
        sb_err_data(err, "jpeg: the data ends after %u of %u rows", ci.output_scanline,
                    ci.output_height);
        goto fail;
    }
    if (!je.warned)
        jpeg_finish_decompress(&ci);
    if (je.warned) {
        sb_err_data(err, "jpeg: corrupt or truncated data: %s", je.first_warning);
        goto fail;
    }
    out->width = ci.output_width;
    out->height = ci.output_height;
    out->channels = ch;
    out->pixels = px;
    jpeg_destroy_decompress(&ci);
    return 0;
fail:
    jpeg_destroy_decompress(&ci);
    free(px);
    return -1;
}

/* ---- PNG ------------------------------------------------------------------------------ */

static int decode_png(const void *p, size_t n, unsigned ch, uint64_t max_pixels, sb_image *out,
                      sb_err *err)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, p, n))
        return sb_err_data(err, "png: %s", im.message);
    size_t bytes = 0;
    if (check_size("png", im.width, im.height, ch, max_pixels, &bytes, err) != 0) {
        png_image_free(&im);
        return -1;
    }
    im.format = ch == 1 ? PNG_FORMAT_GRAY : ch == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
    if (PNG_IMAGE_SIZE(im) != bytes) {
        png_image_free(&im);
        return sb_err_data(err, "png: unexpected buffer size for %u x %u", im.width, im.height);
    }
    /* zeroed: an alpha channel the caller did not ask for is composited onto black */
    uint8_t *px = calloc(1, bytes);
    if (px == NULL) {
        png_image_free(&im);
        return sb_err_set(err, "png: out of memory for %zu bytes of pixels", bytes);
    }
    if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
        sb_err_data(err, "png: %s", im.message);
        png_image_free(&im);
        free(px);
        return -1;
    }
    out->width = im.width;
    out->height = im.height;
    out->channels = ch;
    out->pixels = px;
    png_image_free(&im);
    return 0;
}

int sb_image_decode(const void *p, size_t n, unsigned channels, uint64_t max_pixels, sb_image *out,
                    sb_err *err)
{
    return sb_image_decode_draft(p, n, channels, max_pixels, 0, 0, out, err);
}

int sb_image_decode_draft(const void *p, size_t n, unsigned channels, uint64_t max_pixels,
                          uint32_t min_w, uint32_t min_h, sb_image *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    if (channels != 1 && channels != 3 && channels != 4)
        return sb_err_set(err, "image: channels must be 1, 3 or 4, got %u", channels);
    if (max_pixels == 0)
        max_pixels = SB_IMAGE_DEFAULT_MAX_PIXELS;
    switch (sb_image_sniff(p, n)) {
    case SB_IMAGE_JPEG:
        return decode_jpeg(p, n, channels, max_pixels, min_w, min_h, out, err);
    case SB_IMAGE_PNG:
        return decode_png(p, n, channels, max_pixels, out, err);
    case SB_IMAGE_UNKNOWN:
        break;
    }
    const unsigned char *b = p;
    char hex[3 * 8 + 1] = "";
    for (size_t i = 0, o = 0; i < n && i < 8; i++, o = strlen(hex))
        snprintf(hex + o, sizeof hex - o, "%s%02x", i ? " " : "", b[i]);
    return sb_err_data(err, "not a JPEG or PNG image (%zu bytes, starting %s)", n,
                       n ? hex : "(empty)");
}

/* ---- resize --------------------------------------------------------------------------- */

/* Source index pairs and weights of each destination coordinate along one axis. */
typedef struct {
    uint32_t i0, i1;
    float w1; /* weight of i1; i0 gets 1 - w1 */
} tap;

static tap *taps(uint32_t sn, uint32_t dn)
{
    tap *t = malloc((size_t)dn * sizeof *t);
    if (t == NULL)
        return NULL;
    double scale = (double)sn / dn;
    for (uint32_t d = 0; d < dn; d++) {
        double s = (d + 0.5) * scale - 0.5;
        if (s < 0)
            s = 0;
        uint32_t i0 = (uint32_t)s;
        if (i0 > sn - 1)
            i0 = sn - 1;
        uint32_t i1 = i0 + 1 < sn ? i0 + 1 : sn - 1;
        double f = s - i0;
        if (f > 1)
            f = 1;
        t[d] = (tap){i0, i1, (float)f};
    }
    return t;
}

#define RESIZE_BODY(T, STORE)                                                                      \
    tap *tx = taps(sw, dw), *ty = taps(sh, dh);                                                    \
    if (tx == NULL || ty == NULL) {                                                                \
        free(tx);                                                                                  \
        free(ty);                                                                                  \
        return sb_err_set(err, "image resize: out of memory");                                     \
    }                                                                                              \
    for (uint32_t y = 0; y < dh; y++) {                                                            \
        const T *r0 = src + (size_t)ty[y].i0 * sw * c, *r1 = src + (size_t)ty[y].i1 * sw * c;      \
        float wy = ty[y].w1;                                                                       \
        T *o = dst + (size_t)y * dw * c;                                                           \
        for (uint32_t x = 0; x < dw; x++) {                                                        \
            size_t a = (size_t)tx[x].i0 * c, b = (size_t)tx[x].i1 * c;                             \
            float wx = tx[x].w1;                                                                   \
            for (uint32_t k = 0; k < c; k++) {                                                     \
                float top = (float)r0[a + k] + wx * ((float)r0[b + k] - (float)r0[a + k]);         \
                float bot = (float)r1[a + k] + wx * ((float)r1[b + k] - (float)r1[a + k]);         \
                float v = top + wy * (bot - top);                                                  \
                o[(size_t)x * c + k] = STORE(v);                                                   \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    free(tx);                                                                                      \
    free(ty);                                                                                      \
    return 0

static inline uint8_t store_u8(float v)
{
    v += 0.5f;
    return v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)v;
}

static inline float store_f32(float v)
{
    return v;
}

static int resize_args(uint32_t sw, uint32_t sh, uint32_t c, uint32_t dw, uint32_t dh, sb_err *err)
{
    if (sw == 0 || sh == 0 || c == 0 || dw == 0 || dh == 0)
        return sb_err_set(err, "image resize: empty size (%u x %u x %u -> %u x %u)", sw, sh, c, dw,
                          dh);
    return 0;
}

int sb_image_resize_u8(const uint8_t *src, uint32_t sw, uint32_t sh, uint32_t c, uint8_t *dst,
                       uint32_t dw, uint32_t dh, sb_err *err)
{
    if (resize_args(sw, sh, c, dw, dh, err) != 0)
        return -1;
    RESIZE_BODY(uint8_t, store_u8);
}

int sb_image_resize_f32(const float *src, uint32_t sw, uint32_t sh, uint32_t c, float *dst,
                        uint32_t dw, uint32_t dh, sb_err *err)
{
    if (resize_args(sw, sh, c, dw, dh, err) != 0)
        return -1;
    RESIZE_BODY(float, store_f32);
}
