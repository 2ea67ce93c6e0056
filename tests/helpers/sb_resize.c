/* sb_resize — lib/image's resizes on raw pixels, for tests/images/test-resize.sh, which checks
 * them against Pillow, and for timing them:
 *   sb_resize aa|plain SW SH C DW DH IN OUT   resize IN (SH x SW x C uint8, HWC) into OUT
 *   sb_resize bench N                         N resizes 300x200 RGB -> 64x64 each way, timed
 *   sb_resize draft DW DH JPEG OUT            decode JPEG drafted to DW x DH (RGB), then the
 *                                             antialiased resize to DW x DH, into OUT
 *   sb_resize decodebench DW DH JPEG...       CPU time of decode + resize to DW x DH over the
 *                                             files, full decode against draft
 * Exits 1 with a message on bad input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "image/image.h"

static int dim(const char *s, uint32_t max, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1 || v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU time: the machine is shared */
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int bench(const char *n_arg)
{
    uint32_t n;
    if (dim(n_arg, 10000000, &n) != 0)
        return fprintf(stderr, "sb_resize: bad count %s\n", n_arg), 1;
    static uint8_t src[200 * 300 * 3], dst[64 * 64 * 3];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 2654435761u >> 24);
    sb_err e = {0};
    sb_image_resampler r = {0};
    unsigned sum = 0;
    double t0 = now();
    for (uint32_t i = 0; i < n; i++) {
        sb_image_resize_u8(src, 300, 200, 3, dst, 64, 64, &e);
        sum += dst[i % sizeof dst];
    }
    double t1 = now();
    for (uint32_t i = 0; i < n; i++) {
        sb_image_resample_u8(&r, src, 300, 200, 3, dst, 64, 64, &e);
        sum += dst[i % sizeof dst];
    }
    double t2 = now();
    sb_image_resampler_free(&r);
    printf("300x200x3 -> 64x64, %u resizes, CPU time: plain bilinear %.3f s (%.1f us each), "
           "antialiased "
           "%.3f s (%.1f us each) [%u]\n",
           n, t1 - t0, (t1 - t0) * 1e6 / n, t2 - t1, (t2 - t1) * 1e6 / n, sum & 1);
    return 0;
}

/* The whole of file `path` in a malloc'd buffer (*n bytes); NULL when unreadable. */
static void *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t k; buf != NULL && (k = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (nb == NULL)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    *n = len;
    return buf;
}

/* Decodes (drafted to dw x dh when draft) and resizes to dw x dh into out (dw * dh * 3). */
static int decode_resize(const void *jpg, size_t n, int draft, uint32_t dw, uint32_t dh,
                         sb_image_resampler *r, uint8_t *out, sb_err *e)
{
    sb_image im;
    if (sb_image_decode_draft(jpg, n, 3, 0, draft ? dw : 0, draft ? dh : 0, &im, e) != 0)
        return -1;
    int rc = sb_image_resample_u8(r, im.pixels, im.width, im.height, 3, out, dw, dh, e);
    sb_image_free(&im);
    return rc;
}

static int draft_one(char **argv)
{
    uint32_t dw, dh;
    if (dim(argv[2], SB_IMAGE_MAX_SIDE, &dw) != 0 || dim(argv[3], SB_IMAGE_MAX_SIDE, &dh) != 0)
        return fprintf(stderr, "sb_resize: bad size %s x %s\n", argv[2], argv[3]), 1;
    size_t n;
    void *jpg = slurp(argv[4], &n);
    uint8_t *out = malloc((size_t)dw * dh * 3);
    sb_err e = {0};
    sb_image_resampler r = {0};
    int rc = jpg == NULL || out == NULL ? -1 : decode_resize(jpg, n, 1, dw, dh, &r, out, &e);
    sb_image_resampler_free(&r);
    FILE *o = rc == 0 ? fopen(argv[5], "wb") : NULL;
    if (rc != 0)
        fprintf(stderr, "sb_resize: %s: %s\n", argv[4], jpg == NULL ? "unreadable" : e.msg);
    else if (o == NULL || fwrite(out, 1, (size_t)dw * dh * 3, o) != (size_t)dw * dh * 3)
        rc = -1, fprintf(stderr, "sb_resize: cannot write %s\n", argv[5]);
    if (o != NULL && fclose(o) != 0)
        rc = -1;
    free(jpg);
    free(out);
    return rc == 0 ? 0 : 1;
}

static int decode_bench(int argc, char **argv)
{
    uint32_t dw, dh;
    if (dim(argv[2], SB_IMAGE_MAX_SIDE, &dw) != 0 || dim(argv[3], SB_IMAGE_MAX_SIDE, &dh) != 0)
        return fprintf(stderr, "sb_resize: bad size %s x %s\n", argv[2], argv[3]), 1;
    int nf = argc - 4;
    void **jpg = calloc((size_t)nf, sizeof *jpg);
    size_t *len = calloc((size_t)nf, sizeof *len);
    uint8_t *out = malloc((size_t)dw * dh * 3);
    sb_err e = {0};
    sb_image_resampler r = {0};
    double t[2] = {0, 0};
    int rc = jpg == NULL || len == NULL || out == NULL;
    for (int i = 0; i < nf && rc == 0; i++)
        if ((jpg[i] = slurp(argv[4 + i], &len[i])) == NULL)
            rc = fprintf(stderr, "sb_resize: cannot read %s\n", argv[4 + i]);
    for (int draft = 0; draft < 2 && rc == 0; draft++) {
        double t0 = now();
        for (int i = 0; i < nf && rc == 0; i++)
            if (decode_resize(jpg[i], len[i], draft, dw, dh, &r, out, &e) != 0)
                rc = fprintf(stderr, "sb_resize: %s: %s\n", argv[4 + i], e.msg);
        t[draft] = now() - t0;
    }
    if (rc == 0)
        printf("decode + resize to %ux%u of %d JPEGs, CPU time: full decode %.3f s (%.0f us "
               "each), draft %.3f s (%.0f us each): %.2fx\n",
               dw, dh, nf, t[0], t[0] * 1e6 / nf, t[1], t[1] * 1e6 / nf, t[0] / t[1]);
    sb_image_resampler_free(&r);
    for (int i = 0; jpg != NULL && i < nf; i++)
        free(jpg[i]);
    free(jpg);
    free(len);
    free(out);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "draft") == 0)
        return draft_one(argv);
    if (argc >= 5 && strcmp(argv[1], "decodebench") == 0)
        return decode_bench(argc, argv);
    if (argc == 3 && strcmp(argv[1], "bench") == 0)
        return bench(argv[2]);
    uint32_t v[5];
    if (argc != 9 || (strcmp(argv[1], "aa") != 0 && strcmp(argv[1], "plain") != 0))
        return fprintf(stderr, "usage: sb_resize aa|plain SW SH C DW DH IN OUT | bench N\n"), 1;
    for (int i = 0; i < 5; i++)
        if (dim(argv[2 + i], i == 2 ? 4 : SB_IMAGE_MAX_SIDE, &v[i]) != 0)
            return fprintf(stderr, "sb_resize: bad size %s\n", argv[2 + i]), 1;
    size_t in_n = (size_t)v[0] * v[1] * v[2], out_n = (size_t)v[3] * v[4] * v[2];
    uint8_t *in = malloc(in_n + 1), *out = malloc(out_n);
    FILE *f = fopen(argv[7], "rb");
    int rc = 1;
    if (in == NULL || out == NULL || f == NULL || fread(in, 1, in_n + 1, f) != in_n) {
        fprintf(stderr, "sb_resize: %s does not hold %zu bytes\n", argv[7], in_n);
        goto out;
    }
    sb_err e = {0};
    sb_image_resampler r = {0};
    int k = argv[1][0] == 'a' ? sb_image_resample_u8(&r, in, v[0], v[1], v[2], out, v[3], v[4], &e)
                              : sb_image_resize_u8(in, v[0], v[1], v[2], out, v[3], v[4], &e);
    sb_image_resampler_free(&r);
    if (k != 0) {
        fprintf(stderr, "sb_resize: %s\n", e.msg);
        goto out;
    }
    FILE *o = fopen(argv[8], "wb");
    if (o == NULL || fwrite(out, 1, out_n, o) != out_n || fclose(o) != 0) {
        fprintf(stderr, "sb_resize: cannot write %s\n", argv[8]);
        goto out;
    }
    rc = 0;
out:
    if (f != NULL)
        fclose(f);
    free(in);
    free(out);
    return rc;
}
