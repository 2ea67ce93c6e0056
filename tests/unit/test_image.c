/* test_image.c — JPEG/PNG decoding (lib/image), the image source format (lib/io/imgread.c),
 * image.resize / image.normalize (worker/ops/image), project on typed columns, and partitions
 * whose list widths change within a task. Images are made here with libpng's and
 * libjpeg-turbo's encoders. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <jpeglib.h>
#include <png.h>

#include "doc/doc.h"
#include "image/image.h"
#include "io/reader.h"
#include "io/split.h"
#include "partition/partition.h"
#include "spec/pipeline.h"
#include "spec/validate.h"
#include "testutil.h"
#include "worker/ops/ops.h"

TestSuite(image, .timeout = 60);

/* ---- encoders ------------------------------------------------------------------------------ */

/* A w x h test pattern with c channels: smooth gradients (so JPEG keeps it close). */
static uint8_t *pattern(uint32_t w, uint32_t h, uint32_t c)
{
    uint8_t *p = malloc((size_t)w * h * c);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t k = 0; k < c; k++)
                p[((size_t)y * w + x) * c + k] =
                    (uint8_t)(k == 3 ? 255
                                     : x * 150 / (w > 1 ? w - 1 : 1) +
                                           y * 50 / (h > 1 ? h - 1 : 1) + k * 20);
    return p;
}

static void *png_encode(const uint8_t *px, uint32_t w, uint32_t h, uint32_t c, size_t *len)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = w;
    im.height = h;
    im.format = c == 1 ? PNG_FORMAT_GRAY : c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
    png_alloc_size_t n = 0;
    cr_assert(png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL));
    void *buf = malloc(n);
    cr_assert(png_image_write_to_memory(&im, buf, &n, 0, px, 0, NULL), "%s", im.message);
    *len = n;
    return buf;
}

static void *jpeg_encode(const uint8_t *px, uint32_t w, uint32_t h, uint32_t c, int quality,
                         size_t *len)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    unsigned char *out = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&ci, &out, &n);
    ci.image_width = w;
    ci.image_height = h;
    ci.input_components = (int)c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)px + (size_t)ci.next_scanline * w * c;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    void *copy = malloc(n);
    memcpy(copy, out, n);
    free(out);
    *len = n;
    return copy;
}

static int max_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m)
            m = d;
    }
    return m;
}

/* ---- decoding ------------------------------------------------------------------------------ */

Test(image, png_round_trips_exactly_in_every_channel_count)
{
    for (uint32_t c = 1; c <= 4; c++) {
        if (c == 2)
            continue;
        uint8_t *px = pattern(37, 21, c);
        size_t n;
        void *f = png_encode(px, 37, 21, c, &n);
        cr_assert_eq(sb_image_sniff(f, n), SB_IMAGE_PNG);
        sb_image im;
        sb_err e = {0};
        cr_assert_eq(sb_image_decode(f, n, c, 0, &im, &e), 0, "%s", e.msg);
        cr_assert_eq(im.width, 37);
        cr_assert_eq(im.height, 21);
        cr_assert_eq(im.channels, c);
        cr_assert_eq(memcmp(im.pixels, px, (size_t)37 * 21 * c), 0, "%u channels differ", c);
        sb_image_free(&im);
        free(f);
        free(px);
    }
}

Test(image, png_channels_are_converted)
{
    uint8_t *gray = pattern(8, 5, 1);
    size_t n;
    void *f = png_encode(gray, 8, 5, 1, &n);
    sb_image im;
    sb_err e = {0};
    cr_assert_eq(sb_image_decode(f, n, 3, 0, &im, &e), 0, "%s", e.msg);
    for (size_t i = 0; i < 40; i++)
        for (int k = 0; k < 3; k++)
            cr_assert_eq(im.pixels[i * 3 + k], gray[i], "gray expanded to RGB at pixel %zu", i);
    sb_image_free(&im);
    cr_assert_eq(sb_image_decode(f, n, 4, 0, &im, &e), 0, "%s", e.msg);
    cr_assert_eq(im.pixels[3], 255, "a missing alpha becomes opaque");
    sb_image_free(&im);
    free(f);
    /* RGBA with half-transparent pixels to RGB: composited onto black */
    uint8_t rgba[4 * 2] = {200, 100, 50, 255, 200, 100, 50, 0};
    f = png_encode(rgba, 2, 1, 4, &n);
    cr_assert_eq(sb_image_decode(f, n, 3, 0, &im, &e), 0, "%s", e.msg);
    cr_assert(im.pixels[0] >= 199 && im.pixels[1] >= 99, "opaque pixel kept");
    cr_assert(im.pixels[3] == 0 && im.pixels[4] == 0 && im.pixels[5] == 0,
              "transparent pixel onto black");
    sb_image_free(&im);
    free(f);
    free(gray);
}

Test(image, jpeg_decodes_close_to_its_source)
{
    uint8_t *px = pattern(64, 48, 3);
    size_t n;
    void *f = jpeg_encode(px, 64, 48, 3, 98, &n);
    cr_assert_eq(sb_image_sniff(f, n), SB_IMAGE_JPEG);
    sb_image im;
    sb_err e = {0};
    cr_assert_eq(sb_image_decode(f, n, 3, 0, &im, &e), 0, "%s", e.msg);
    cr_assert_eq(im.width, 64);
    cr_assert_eq(im.height, 48);
    int d = max_diff(im.pixels, px, (size_t)64 * 48 * 3);
    cr_assert_lt(d, 24, "quality 98 of a smooth image: max |diff| %d", d);
    sb_image_free(&im);
    cr_assert_eq(sb_image_decode(f, n, 1, 0, &im, &e), 0, "%s", e.msg);
    cr_assert_eq(im.channels, 1);
    sb_image_free(&im);
    cr_assert_eq(sb_image_decode(f, n, 4, 0, &im, &e), 0, "%s", e.msg);
    cr_assert_eq(im.pixels[3], 255);
    sb_image_free(&im);
    free(f);
    free(px);
}

Test(image, truncated_and_corrupt_files_are_data_errors)
{
    uint8_t *px = pattern(64, 64, 3);
    size_t n;
    void *j = jpeg_encode(px, 64, 64, 3, 90, &n);
    sb_image im;
    sb_err e = {0};
    /* cut in the middle of the entropy-coded data: libjpeg would fill the rest with gray */
    const uint8_t *jb = j;
    size_t sos = 0;
    for (size_t i = 2; i + 1 < n && sos == 0; i++)
        if (jb[i] == 0xFF && jb[i + 1] == 0xDA)
            sos = i;
    cr_assert_neq(sos, 0);
    cr_assert_gt(n - sos, 200, "enough entropy-coded data to cut");
    cr_assert_eq(sb_image_decode(j, sos + (n - sos) / 2, 3, 0, &im, &e), -1);
    cr_assert(e.data, "a data error");
    cr_assert(strstr(e.msg, "jpeg: corrupt or truncated data") != NULL, "%s", e.msg);
    cr_assert_null(im.pixels);
    /* cut inside the header */
    cr_assert_eq(sb_image_decode(j, 20, 3, 0, &im, &e), -1);
    cr_assert(strstr(e.msg, "jpeg:") != NULL, "%s", e.msg);
    /* flipped bytes in the entropy-coded data */
    uint8_t *bad = malloc(n);
    memcpy(bad, j, n);
    for (size_t i = sos + 40; i < sos + 80; i++)
        bad[i] = 0xFF;
    int rc = sb_image_decode(bad, n, 3, 0, &im, &e);
    cr_assert_eq(rc, -1, "corrupt entropy data must fail, not decode to garbage");
    cr_assert(e.data);
    free(bad);
    free(j);
    void *p = png_encode(px, 64, 64, 3, &n);
    cr_assert_eq(sb_image_decode(p, n - 30, 3, 0, &im, &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, "png:") != NULL, "%s", e.msg);
    bad = malloc(n);
    memcpy(bad, p, n);
    bad[n / 2] ^= 0x55; /* the IDAT chunk's CRC no longer matches */
    cr_assert_eq(sb_image_decode(bad, n, 3, 0, &im, &e), -1);
    cr_assert(strstr(e.msg, "png:") != NULL, "%s", e.msg);
    free(bad);
    free(p);
    free(px);
    cr_assert_eq(sb_image_decode("GIF89a\x01\x00", 8, 3, 0, &im, &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, "not a JPEG or PNG image (8 bytes, starting 47 49 46 38") != NULL, "%s",
              e.msg);
    cr_assert_eq(sb_image_decode("", 0, 3, 0, &im, &e), -1);
    cr_assert(strstr(e.msg, "(empty)") != NULL, "%s", e.msg);
}

/* A PNG whose IHDR claims w x h (the CRC recomputed so only the size is wrong). */
static void *png_claiming(uint32_t w, uint32_t h, size_t *len)
{
    uint8_t px[3] = {1, 2, 3};
    uint8_t *f = png_encode(px, 1, 1, 3, len);
    /* signature (8), IHDR length (4), "IHDR" (4), width (4) at 16, height (4) at 20, ... CRC at
     * 29 over bytes [12, 29) */
    for (int i = 0; i < 4; i++) {
        f[16 + i] = (uint8_t)(w >> (24 - 8 * i));
        f[20 + i] = (uint8_t)(h >> (24 - 8 * i));
    }
    uint32_t crc = (uint32_t)crc32(0, f + 12, 17);
    for (int i = 0; i < 4; i++)
        f[29 + i] = (uint8_t)(crc >> (24 - 8 * i));
    return f;
}

Test(image, decompression_bombs_are_refused_before_allocating)
{
    size_t n;
    void *f = png_claiming(100000, 100000, &n);
    sb_image im;
    sb_err e = {0};
    cr_assert_eq(sb_image_decode(f, n, 3, 0, &im, &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, "png: the header claims 100000 x 100000 pixels, over the limit") !=
                  NULL,
              "%s", e.msg);
    free(f);
    /* within the side bound but over a small pixel limit */
    f = png_claiming(3000, 3000, &n);
    cr_assert_eq(sb_image_decode(f, n, 3, 1000000, &im, &e), -1);
    cr_assert(strstr(e.msg, "limit of 1000000 pixels") != NULL, "%s", e.msg);
    free(f);
    /* a JPEG whose SOF0 claims 60000 x 60000 */
    uint8_t *px = pattern(16, 16, 3);
    uint8_t *j = jpeg_encode(px, 16, 16, 3, 90, &n);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) {
            sof = i;
            break;
        }
    cr_assert_neq(sof, 0, "baseline JPEG has an SOF0 marker");
    j[sof + 5] = 60000 >> 8, j[sof + 6] = 60000 & 0xFF; /* height */
    j[sof + 7] = 60000 >> 8, j[sof + 8] = 60000 & 0xFF; /* width */
    cr_assert_eq(sb_image_decode(j, n, 3, 0, &im, &e), -1);
    cr_assert(strstr(e.msg, "jpeg: the header claims 60000 x 60000 pixels") != NULL, "%s", e.msg);
    free(j);
    free(px);
}

/* ---- resize ------------------------------------------------------------------------------- */

Test(image, antialiased_resize_widens_the_triangle_when_shrinking)
{
    sb_err e = {0};
    /* 4 -> 2: scale 2, support 2; output 0 is centred at 1.0 and reads pixels 0..2 at distances
     * 0.5, 0.5, 1.5 source pixels, halved: triangle weights 0.75, 0.75, 0.25 -> 3/7, 3/7, 1/7;
     * output 1 (centre 3.0) mirrors it over pixels 1..3 */
    sb_image_taps t = {0};
    cr_assert_eq(sb_image_taps_build(&t, 4, 2, &e), 0, "%s", e.msg);
    cr_assert_eq(t.first[0], 0);
    cr_assert_eq(t.count[0], 3);
    cr_assert_eq(t.first[1], 1);
    cr_assert_eq(t.count[1], 3);
    float want[2][3] = {{3 / 7.0f, 3 / 7.0f, 1 / 7.0f}, {1 / 7.0f, 3 / 7.0f, 3 / 7.0f}};
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++) {
            cr_assert_float_eq(t.wf[o * t.ksize + i], want[o][i], 1e-6);
            cr_assert_eq(t.wq[o * t.ksize + i],
                         (int32_t)(0.5 + want[o][i] * (1 << SB_IMAGE_TAP_BITS)), "fixed point");
        }
    sb_image_taps_free(&t);
    /* (0*3 + 70*3 + 140) / 7 = 50 and (70 + 140*3 + 210*3) / 7 = 160; plain bilinear gives the
     * means of pairs, 35 and 175 */
    uint8_t src[4] = {0, 70, 140, 210}, dst[2];
    sb_image_resampler r = {0};
    cr_assert_eq(sb_image_resample_u8(&r, src, 4, 1, 1, dst, 2, 1, &e), 0, "%s", e.msg);
    cr_assert_eq(dst[0], 50);
    cr_assert_eq(dst[1], 160);
    float fs[4] = {0, 70, 140, 210}, fd[2];
    cr_assert_eq(sb_image_resample_f32(&r, fs, 4, 1, 1, fd, 2, 1, &e), 0, "%s", e.msg);
    cr_assert_float_eq(fd[0], 50, 1e-4);
    cr_assert_float_eq(fd[1], 160, 1e-4);
    /* the same, vertically, in both channels of a 1x4 image of 2 channels */
    uint8_t col[8] = {0, 210, 70, 140, 140, 70, 210, 0}, out[4];
    cr_assert_eq(sb_image_resample_u8(&r, col, 1, 4, 2, out, 1, 2, &e), 0, "%s", e.msg);
    cr_assert_eq(out[0], 50);
    cr_assert_eq(out[1], 160);
    cr_assert_eq(out[2], 160);
    cr_assert_eq(out[3], 50);
    /* upscaling is plain bilinear; a constant stays constant through sizes that change between
     * calls of one resampler; bad sizes are errors */
    uint8_t two[2] = {0, 100}, four[4];
    cr_assert_eq(sb_image_resample_u8(&r, two, 2, 1, 1, four, 4, 1, &e), 0, "%s", e.msg);
    cr_assert(four[0] == 0 && four[1] == 25 && four[2] == 75 && four[3] == 100, "%u %u %u %u",
              four[0], four[1], four[2], four[3]);
    uint8_t *p = pattern(13, 7, 3), big[50 * 31 * 3];
    memset(p, 77, 13 * 7 * 3);
    for (uint32_t w = 1; w < 50; w += 7)
        for (uint32_t h = 1; h < 31; h += 5) {
            cr_assert_eq(sb_image_resample_u8(&r, p, 13, 7, 3, big, w, h, &e), 0, "%s", e.msg);
            for (size_t i = 0; i < (size_t)w * h * 3; i++)
                cr_assert_eq(big[i], 77, "%u x %u", w, h);
        }
    cr_assert_eq(sb_image_resample_u8(&r, p, 0, 7, 3, big, 5, 5, &e), -1);
    cr_assert_eq(sb_image_resample_u8(&r, p, 13, 7, 65, big, 5, 5, &e), -1);
    sb_image_resampler_free(&r);
    free(p);
}

Test(image, bilinear_resize_uses_half_pixel_centres)
{
    sb_err e = {0};
    /* 2x downscale: each output pixel is the mean of a 2x2 block */
    uint8_t src[4 * 4] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150};
    uint8_t dst[4];
    cr_assert_eq(sb_image_resize_u8(src, 4, 4, 1, dst, 2, 2, &e), 0);
    cr_assert_eq(dst[0], 25);  /* (0+10+40+50)/4 */
    cr_assert_eq(dst[1], 45);  /* (20+30+60+70)/4 */
    cr_assert_eq(dst[2], 105); /* (80+90+120+130)/4 */
    cr_assert_eq(dst[3], 125);
    /* 2x upscale of 2x1: positions -0.25, 0.25, 0.75, 1.25 -> clamp, 1/4, 3/4, clamp */
    float fs[2] = {0, 100}, fd[4];
    cr_assert_eq(sb_image_resize_f32(fs, 2, 1, 1, fd, 4, 1, &e), 0);
    cr_assert_float_eq(fd[0], 0, 1e-5);
    cr_assert_float_eq(fd[1], 25, 1e-5);
    cr_assert_float_eq(fd[2], 75, 1e-5);
    cr_assert_float_eq(fd[3], 100, 1e-5);
    /* channels stay apart; a constant image stays constant; same size is a copy */
    uint8_t *p = pattern(13, 7, 3), *q = malloc(13 * 7 * 3);
    cr_assert_eq(sb_image_resize_u8(p, 13, 7, 3, q, 13, 7, &e), 0);
    cr_assert_eq(memcmp(p, q, 13 * 7 * 3), 0);
    memset(p, 77, 13 * 7 * 3);
    uint8_t big[50 * 31 * 3];
    cr_assert_eq(sb_image_resize_u8(p, 13, 7, 3, big, 50, 31, &e), 0);
    for (size_t i = 0; i < sizeof big; i++)
        cr_assert_eq(big[i], 77);
    cr_assert_eq(sb_image_resize_u8(p, 0, 7, 3, big, 5, 5, &e), -1);
    free(p);
    free(q);
}

/* ---- the image source format ---------------------------------------------------------------- */

static char g_dir[256];

static const char *write_file(const char *name, const void *p, size_t n)
{
    static char path[4][512];
    static int slot;
    if (g_dir[0] == '\0') {
        sb_test_tmpl(g_dir, sizeof g_dir, "sb-image");
        cr_assert_not_null(mkdtemp(g_dir));
    }
    char *b = path[slot++ % 4];
    snprintf(b, 512, "%s/%s", g_dir, name);
    FILE *f = fopen(b, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
    return b;
}

#define MAXP 8
static void *g_parts[MAXP];
static size_t g_lens[MAXP], g_nparts;

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows, (void)ud;
    cr_assert_lt(g_nparts, MAXP);
    g_parts[g_nparts] = blob;
    g_lens[g_nparts++] = len;
    return 0;
}

static void parts_free(void)
{
    for (size_t i = 0; i < g_nparts; i++)
        sb_part_free(g_parts[i]);
    g_nparts = 0;
}

static int read_image(const char *path, size_t size, const char *args, sb_err *e)
{
    sb_io_split sp = {.path = (char *)path, .start = 0, .end = size, .file_size = size};
    return sb_io_read_split(&sp, SB_FMT_IMAGE, args, 1 << 20, collect, NULL, e);
}

static int32_t int_at(const sb_batch *b, const char *name, size_t r)
{
    int i = sb_batch_find(b, name);
    cr_assert_geq(i, 0, "column %s", name);
    const sb_column *c = sb_batch_column(b, (size_t)i);
    cr_assert_eq(c->type, SB_TYPE_INT32);
    return ((const int32_t *)c->values)[r];
}

Test(image, source_decodes_one_partition_per_image)
{
    uint8_t *px = pattern(20, 10, 3);
    size_t n;
    void *f = png_encode(px, 20, 10, 3, &n);
    const char *path = write_file("a.png", f, n);
    sb_err e = {0};
    g_nparts = 0;
    cr_assert_eq(read_image(path, n, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(g_nparts, 1);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_rows(b), 1);
    const sb_column *pc = sb_batch_column(b, (size_t)sb_batch_find(b, "path"));
    size_t pl;
    const char *pv = sb_column_binary(pc, 0, &pl);
    cr_assert_eq(pl, strlen(path));
    cr_assert_eq(memcmp(pv, path, pl), 0);
    const sb_column *ic = sb_batch_column(b, (size_t)sb_batch_find(b, "image"));
    cr_assert_eq(ic->type, SB_TYPE_FIXED_LIST);
    cr_assert_eq(ic->child_type, SB_TYPE_UINT8);
    cr_assert_eq(ic->list_size, 20 * 10 * 3);
    cr_assert_eq(memcmp(ic->values, px, 600), 0);
    cr_assert_eq(int_at(b, "height", 0), 10);
    cr_assert_eq(int_at(b, "width", 0), 20);
    cr_assert_eq(int_at(b, "channels", 0), 3);
    sb_batch_close(b);
    parts_free();
    /* channels 1 */
    cr_assert_eq(read_image(path, n, "{\"channels\":1}", &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    cr_assert_eq(int_at(b, "channels", 0), 1);
    cr_assert_eq(sb_batch_column(b, (size_t)sb_batch_find(b, "image"))->list_size, 200);
    sb_batch_close(b);
    parts_free();
    /* bounds and bad files: data errors naming the file */
    cr_assert_eq(read_image(path, n, "{\"maxPixels\":100}", &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, path) != NULL && strstr(e.msg, "limit of 100 pixels") != NULL, "%s",
              e.msg);
    cr_assert_eq(read_image(path, n, "{\"maxRecordSize\":10}", &e), -1);
    cr_assert(strstr(e.msg, "over the limit of 10 (args.maxRecordSize)") != NULL, "%s", e.msg);
    cr_assert_eq(read_image(path, n, "{\"channels\":2}", &e), -1);
    cr_assert(strstr(e.msg, "args.channels must be 1 (gray), 3 (RGB) or 4 (RGBA)") != NULL, "%s",
              e.msg);
    const char *junk = write_file("junk.jpg", "hello, world", 12);
    cr_assert_eq(read_image(junk, 12, NULL, &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, "junk.jpg: not a JPEG or PNG image") != NULL, "%s", e.msg);
    cr_assert_eq(g_nparts, 0, "nothing emitted for bad files");
    free(f);
    free(px);
}

Test(image, planning_never_cuts_an_image)
{
    uint8_t *px = pattern(64, 64, 3);
    size_t n;
    void *f = png_encode(px, 64, 64, 3, &n);
    write_file("big.png", f, n);
    char uri[600];
    snprintf(uri, sizeof uri, "file://%s/big.png", g_dir);
    sb_source_spec src = {.uri = uri, .format = SB_FMT_IMAGE, .partition_size = 100};
    sb_io_split *sp;
    size_t ns;
    sb_err e = {0};
    cr_assert_eq(sb_io_plan_splits(&src, &sp, &ns, &e), 0, "%s", e.msg);
    cr_assert_eq(ns, 1, "one split for a %zu-byte image with partitionSize 100", n);
    cr_assert_eq(sp[0].start, 0);
    cr_assert_eq(sp[0].end, n);
    sb_io_splits_free(sp, ns);
    free(f);
    free(px);
}

/* ---- operators --------------------------------------------------------------------------------
 */

/* Runs op (args) over the blobs; the outputs in g_parts. */
static int run_op(const char *name, const char *args, void **blobs, size_t *lens, size_t nb,
                  sb_err *e)
{
    const sb_op_impl *op = sb_op_find(name);
    cr_assert_not_null(op, "%s in this build", name);
    void *st;
    if (op->init(args, &st, e) != 0)
        return -1;
    sb_op_out *o = sb_op_out_new(64 << 20, collect, NULL, e);
    g_nparts = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nb; i++) {
        sb_batch *b;
        cr_assert_eq(sb_batch_open(blobs[i], lens[i], &b, e), 0);
        rc = sb_op_run(op, st, b, 0, o, e);
        sb_batch_close(b);
    }
    if (rc == 0)
        rc = op->finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_op_out_free(o);
    op->free(st);
    return rc;
}

/* The image source's partition for a w x h pattern (a PNG through the reader). */
static void *source_part(uint32_t w, uint32_t h, uint32_t c, size_t *len, uint8_t **pixels)
{
    uint8_t *px = pattern(w, h, c);
    size_t n;
    void *f = png_encode(px, w, h, c, &n);
    char name[64];
    snprintf(name, sizeof name, "p%ux%ux%u.png", w, h, c);
    const char *path = write_file(name, f, n);
    free(f);
    sb_err e = {0};
    g_nparts = 0;
    char args[32];
    snprintf(args, sizeof args, "{\"channels\":%u}", c);
    cr_assert_eq(read_image(path, n, args, &e), 0, "%s", e.msg);
    cr_assert_eq(g_nparts, 1);
    *len = g_lens[0];
    g_nparts = 0;
    if (pixels != NULL)
        *pixels = px;
    else
        free(px);
    return g_parts[0];
}

Test(image, resize_gives_every_image_one_size)
{
    void *in[2];
    size_t len[2];
    uint8_t *p0;
    in[0] = source_part(40, 20, 3, &len[0], &p0);
    in[1] = source_part(9, 30, 3, &len[1], NULL);
    sb_err e = {0};
    cr_assert_eq(run_op("image.resize", "{\"width\":8,\"height\":6}", in, len, 2, &e), 0, "%s",
                 e.msg);
    cr_assert_eq(g_nparts, 1, "equal widths after resizing: one partition");
    sb_batch *b;
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_rows(b), 2);
    const sb_column *ic = sb_batch_column(b, (size_t)sb_batch_find(b, "image"));
    cr_assert_eq(ic->list_size, 8 * 6 * 3);
    cr_assert_eq(ic->child_type, SB_TYPE_UINT8);
    cr_assert_eq(int_at(b, "height", 1), 6);
    cr_assert_eq(int_at(b, "width", 0), 8);
    /* shrinking: antialiased by default */
    uint8_t want[8 * 6 * 3];
    sb_image_resampler rs = {0};
    cr_assert_eq(sb_image_resample_u8(&rs, p0, 40, 20, 3, want, 8, 6, &e), 0);
    sb_image_resampler_free(&rs);
    cr_assert_eq(memcmp(ic->values, want, sizeof want), 0, "row 0 is the resized image");
    cr_assert_geq(sb_batch_find(b, "path"), 0, "other columns pass through");
    sb_batch_close(b);
    parts_free();
    /* antialias: false is plain bilinear */
    cr_assert_eq(
        run_op("image.resize", "{\"width\":8,\"height\":6,\"antialias\":false}", in, len, 2, &e), 0,
        "%s", e.msg);
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    ic = sb_batch_column(b, (size_t)sb_batch_find(b, "image"));
    cr_assert_eq(sb_image_resize_u8(p0, 40, 20, 3, want, 8, 6, &e), 0);
    cr_assert_eq(memcmp(ic->values, want, sizeof want), 0, "row 0 is the plain bilinear image");
    sb_batch_close(b);
    parts_free();
    cr_assert_eq(
        run_op("image.resize", "{\"width\":8,\"height\":6,\"antialias\":1}", in, len, 2, &e), -1);
    cr_assert(strstr(e.msg, "args.antialias must be true or false") != NULL, "%s", e.msg);
    /* without resizing, images of two sizes stay two partitions (widths differ) */
    cr_assert_eq(run_op("identity", NULL, in, len, 2, &e), 0, "%s", e.msg);
    cr_assert_eq(g_nparts, 2);
    parts_free();
    cr_assert_eq(run_op("image.resize", "{\"width\":0,\"height\":6}", in, len, 2, &e), -1);
    cr_assert(strstr(e.msg, "args.width must be an integer from 1") != NULL, "%s", e.msg);
    cr_assert_eq(
        run_op("image.resize", "{\"width\":4,\"height\":6,\"field\":\"pix\"}", in, len, 2, &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, "no column \"pix\"") != NULL, "%s", e.msg);
    sb_part_free(in[0]);
    sb_part_free(in[1]);
    free(p0);
}

Test(image, normalize_scales_per_channel_in_either_layout)
{
    size_t len;
    uint8_t *px;
    void *in = source_part(3, 2, 3, &len, &px);
    sb_err e = {0};
    const char *args = "{\"mean\":[0.5,0.25,0],\"std\":[0.5,0.25,2]}";
    cr_assert_eq(run_op("image.normalize", args, &in, &len, 1, &e), 0, "%s", e.msg);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    const sb_column *ic = sb_batch_column(b, (size_t)sb_batch_find(b, "image"));
    cr_assert_eq(ic->child_type, SB_TYPE_FLOAT32);
    cr_assert_eq(ic->list_size, 18);
    const float *v = ic->values;
    const double mean[3] = {0.5, 0.25, 0}, sd[3] = {0.5, 0.25, 2};
    for (int i = 0; i < 18; i++) {
        double want = (px[i] / 255.0 - mean[i % 3]) / sd[i % 3];
        cr_assert_float_eq(v[i], want, 1e-5, "value %d: %f, want %f", i, v[i], want);
    }
    sb_batch_close(b);
    parts_free();
    cr_assert_eq(run_op("image.normalize", "{\"layout\":\"chw\",\"scale\":1}", &in, &len, 1, &e), 0,
                 "%s", e.msg);
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    v = sb_batch_column(b, (size_t)sb_batch_find(b, "image"))->values;
    for (int k = 0; k < 3; k++)
        for (int p = 0; p < 6; p++)
            cr_assert_float_eq(v[k * 6 + p], px[p * 3 + k], 1e-6, "plane %d pixel %d", k, p);
    sb_batch_close(b);
    parts_free();
    cr_assert_eq(run_op("image.normalize", "{\"mean\":[1,2]}", &in, &len, 1, &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, "record 0 has 3 channels, args.mean has 2 values") != NULL, "%s",
              e.msg);
    cr_assert_eq(run_op("image.normalize", "{\"std\":[1,0,1]}", &in, &len, 1, &e), -1);
    cr_assert(strstr(e.msg, "args.std[1] is 0") != NULL, "%s", e.msg);
    sb_part_free(in);
    free(px);
}

/* mean and std as one number each (docs/pipeline-api.md: "one number, or one per channel"):
 * validate accepts them, and the op run with the args the spec decoded applies them to every
 * channel, as the same number repeated per channel does. */
Test(image, normalize_takes_one_number_for_every_channel)
{
    const char *yaml =
        "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: nm}\n"
        "spec:\n  source: {uri: 'file:///in/', format: image}\n"
        "  stages: [{name: nm, op: image.normalize, args: {mean: 0.5, std: 0.25}}]\n"
        "  sink: {uri: 'file:///out/', format: jsonl}\n";
    char *report = NULL;
    size_t rlen = 0;
    FILE *f = open_memstream(&report, &rlen);
    cr_assert_eq(sb_validate_buffer("n.yaml", yaml, strlen(yaml), f, NULL), 0);
    fclose(f);
    cr_expect_str_eq(report, "", "validate: %s", report);
    free(report);
    sb_doc *doc = sb_doc_parse_yaml(yaml, strlen(yaml), NULL);
    sb_pipeline p;
    sb_diags dg = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(doc, 0), &p, &dg), 0);
    cr_assert_eq(dg.n, 0, "%s", dg.n ? dg.items[0].msg : "");
    size_t len;
    uint8_t *px;
    void *in = source_part(3, 2, 3, &len, &px);
    sb_err e = {0};
    cr_assert_eq(run_op("image.normalize", p.spec.stages[0].args_json, &in, &len, 1, &e), 0,
                 "%s: %s", p.spec.stages[0].args_json, e.msg);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    const sb_column *ic = sb_batch_column(b, (size_t)sb_batch_find(b, "image"));
    cr_assert_eq(ic->child_type, SB_TYPE_FLOAT32);
    cr_assert_eq(ic->list_size, 18);
    float got[18];
    memcpy(got, ic->values, sizeof got);
    for (int i = 0; i < 18; i++) {
        double want = (px[i] / 255.0 - 0.5) / 0.25;
        cr_assert_float_eq(got[i], want, 1e-5, "value %d: %f, want %f", i, got[i], want);
    }
    sb_batch_close(b);
    parts_free();
    cr_assert_eq(run_op("image.normalize", "{\"mean\":[0.5,0.5,0.5],\"std\":[0.25,0.25,0.25]}", &in,
                        &len, 1, &e),
                 0, "%s", e.msg);
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    cr_expect_eq(
        memcmp(sb_batch_column(b, (size_t)sb_batch_find(b, "image"))->values, got, sizeof got), 0,
        "one number equals the same number per channel");
    sb_batch_close(b);
    parts_free();
    cr_assert_eq(run_op("image.normalize", "{\"std\":0}", &in, &len, 1, &e), -1);
    cr_expect(strstr(e.msg, "args.std is 0") != NULL, "%s", e.msg);
    cr_assert_eq(run_op("image.normalize", "{\"mean\":\"x\"}", &in, &len, 1, &e), -1);
    cr_expect(strstr(e.msg, "args.mean must be a number or a list of 1 to 64 numbers") != NULL,
              "%s", e.msg);
    sb_part_free(in);
    free(px);
    sb_pipeline_free(&p);
    sb_doc_free(doc);
}

Test(image, project_keeps_listed_typed_columns)
{
    size_t len;
    void *in = source_part(4, 4, 3, &len, NULL);
    sb_err e = {0};
    cr_assert_eq(run_op("project", "{\"fields\":[\"width\",\"path\"]}", &in, &len, 1, &e), 0, "%s",
                 e.msg);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_ncols(b), 2);
    cr_assert_str_eq(sb_batch_column(b, 0)->name, "width");
    cr_assert_str_eq(sb_batch_column(b, 1)->name, "path");
    cr_assert_eq(int_at(b, "width", 0), 4);
    sb_batch_close(b);
    parts_free();
    cr_assert_eq(run_op("project", "{\"fields\":[\"label\"]}", &in, &len, 1, &e), -1);
    cr_assert(e.data);
    cr_assert(strstr(e.msg, "no column \"label\" (its columns: path, image, height, width, "
                            "channels)") != NULL,
              "%s", e.msg);
    sb_part_free(in);
}

/* ---- draft (reduced-scale) JPEG decoding ---------------------------------------------------- */

/* A textured w x h RGB image (waves of several frequencies): harder on a reduced-scale decode
 * than the smooth pattern, closer to a photo's detail. */
static uint8_t *texture(uint32_t w, uint32_t h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t k = 0; k < 3; k++) {
                double v = 128 + 60 * sin(x * (0.05 + 0.04 * k)) * cos(y * 0.07) +
                           40 * sin((x + 2 * y) * 0.31) + 20 * sin(x * 1.3 + y * 0.9 + k);
                p[((size_t)y * w + x) * 3 + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

/* The reduction is the largest of 1/8, 1/4, 1/2 with side / d >= the asked side (Pillow's draft
 * rule), and
 * after the antialiased resize to that size the pixels stay close to a full decode's. */
Test(image, draft_decodes_at_the_largest_reduction_that_keeps_the_size)
{
    const uint32_t w = 250, h = 203;
    uint8_t *px = texture(w, h);
    size_t n;
    void *f = jpeg_encode(px, w, h, 3, 90, &n);
    sb_err e = {0};
    static const struct {
        uint32_t mw, mh, ow, oh;
    } cases[] = {
        {0, 0, 250, 203},     {64, 64, 125, 102},  {30, 25, 32, 26},
        {32, 26, 63, 51},     {62, 50, 63, 51},    {63, 50, 125, 102},
        {250, 203, 250, 203}, {251, 10, 250, 203}, {1, 1, 32, 26},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_image im;
        cr_assert_eq(sb_image_decode_draft(f, n, 3, 0, cases[i].mw, cases[i].mh, &im, &e), 0, "%s",
                     e.msg);
        cr_expect(im.width == cases[i].ow && im.height == cases[i].oh,
                  "draft %ux%u: %ux%u, want %ux%u", cases[i].mw, cases[i].mh, im.width, im.height,
                  cases[i].ow, cases[i].oh);
        sb_image_free(&im);
    }
    /* the tolerance, after the resize a draft is meant for (docs/pipeline-api.md) */
    sb_image full, dr;
    cr_assert_eq(sb_image_decode(f, n, 3, 0, &full, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_image_decode_draft(f, n, 3, 0, 64, 64, &dr, &e), 0, "%s", e.msg);
    uint8_t a[64 * 64 * 3], b[64 * 64 * 3];
    sb_image_resampler r = {0};
    cr_assert_eq(sb_image_resample_u8(&r, full.pixels, w, h, 3, a, 64, 64, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_image_resample_u8(&r, dr.pixels, dr.width, dr.height, 3, b, 64, 64, &e), 0,
                 "%s", e.msg);
    double sum = 0;
    for (size_t i = 0; i < sizeof a; i++)
        sum += abs((int)a[i] - (int)b[i]);
    double mean = sum / (double)sizeof a;
    int mx = max_diff(a, b, sizeof a);
    cr_log_info("draft 64x64 of 250x203 (1/2): mean |diff| %.2f, max %d", mean, mx);
    cr_expect_lt(mean, 6.0, "mean |diff| %.2f", mean); /* 5.06 with libjpeg-turbo 2.1 */
    cr_expect_lt(mx, 32, "max |diff| %d", mx);
    cr_expect_gt(sum, 0, "a reduced decode is not bit-identical (or the draft was ignored)");
    sb_image_resampler_free(&r);
    sb_image_free(&full);
    sb_image_free(&dr);
    /* a PNG ignores the draft */
    void *pf = png_encode(px, w, h, 3, &n);
    cr_assert_eq(sb_image_decode_draft(pf, n, 3, 0, 64, 64, &dr, &e), 0, "%s", e.msg);
    cr_expect(dr.width == w && dr.height == h);
    sb_image_free(&dr);
    free(pf);
    free(f);
    free(px);
}

/* args.draft reaches the decoder through the image source, and validate checks its shape. */
Test(image, source_draft_is_read_and_validated)
{
    uint8_t *px = texture(200, 160);
    size_t n;
    void *f = jpeg_encode(px, 200, 160, 3, 90, &n);
    const char *path = write_file("d.jpg", f, n);
    sb_err e = {0};
    g_nparts = 0;
    cr_assert_eq(read_image(path, n, "{\"draft\":{\"width\":50,\"height\":40}}", &e), 0, "%s",
                 e.msg);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(g_parts[0], g_lens[0], &b, &e), 0, "%s", e.msg);
    cr_expect_eq(int_at(b, "width", 0), 50);
    cr_expect_eq(int_at(b, "height", 0), 40);
    sb_batch_close(b);
    parts_free();
    cr_assert_eq(read_image(path, n, "{\"draft\":{\"width\":50}}", &e), -1);
    cr_expect(strstr(e.msg, "args.draft needs both width and height") != NULL, "%s", e.msg);
    static const char *bad[] = {"draft: 64", "draft: {width: 0, height: 64}", "draft: {width: 64}",
                                "draft: {width: 64, height: 64, x: 1}"};
    static const char *want[] = {"must be a map {width, height}", "width", "height", "\"x\""};
    for (size_t i = 0; i < 4; i++) {
        char yaml[512];
        snprintf(yaml, sizeof yaml,
                 "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: n}\n"
                 "spec:\n  source: {uri: 'file:///in/', format: image, args: {%s}}\n"
                 "  stages: [{name: r, op: image.resize, args: {width: 8, height: 8}}]\n"
                 "  sink: {uri: 'file:///out/', format: jsonl}\n",
                 bad[i]);
        char *report = NULL;
        size_t rlen = 0;
        FILE *rf = open_memstream(&report, &rlen);
        cr_expect_neq(sb_validate_buffer("n.yaml", yaml, strlen(yaml), rf, NULL), 0, "%s", bad[i]);
        fclose(rf);
        cr_expect(strstr(report, "args.draft") != NULL && strstr(report, want[i]) != NULL, "%s: %s",
                  bad[i], report);
        free(report);
    }
    free(f);
    free(px);
}
