/* resample.c — antialiased ("filtered") resize: Pillow's Image.resize(BILINEAR) algorithm, so
 * that a model trained on images Pillow or torchvision shrank sees the same pixels here. A
 * separable two-pass convolution (horizontal, then vertical) with a triangle filter whose support
 * grows with the downscale factor; the uint8 variant uses Pillow's 22-bit fixed-point weights
 * and rounds the intermediate image to uint8, which makes it match Pillow bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

#define HALF ((int32_t)1 << (SB_IMAGE_TAP_BITS - 1))

#if defined(__GNUC__) && !defined(__clang__)
/* -O2's "very cheap" vectorizer cost model leaves the widening uint8 x int32 loops of the passes
 * scalar; the dynamic model vectorizes them (clang's -O2 does without being asked) */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

void sb_image_taps_free(sb_image_taps *t)
{
    if (t == NULL)
        return;
    free(t->first);
    free(t->count);
    free(t->wq);
    free(t->wf);
    memset(t, 0, sizeof *t);
}

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The weights of output pixel o (at most t->ksize of them) into w, *first and *n: the triangle
 * centred on o's centre in source coordinates, its support widened by the downscale factor,
 * normalized to sum 1 over the source pixels inside the image. Zero weights at either end are
 * dropped (they add nothing), which shortens the loops. */
static void taps_one(uint32_t in, double scale, double fscale, uint32_t o, double *w,
                     uint32_t *first, uint32_t *n)
{
    /* computed in Pillow's order (multiplying by 1 / fscale, not dividing) so that the weights
     * are the same doubles, hence the same fixed-point weights and the same pixels */
    double support = fscale, centre = (o + 0.5) * scale, ss = 1.0 / fscale, sum = 0;
    /* the bounds round as Pillow's do: (int) truncation of x + 0.5 */
    double lo = centre - support + 0.5, hi = centre + support + 0.5;
    uint32_t xmin = lo < 0 ? 0 : (uint32_t)lo;
    uint32_t xmax = hi >= in ? in : (uint32_t)hi;
    uint32_t cnt = xmax - xmin;
    for (uint32_t i = 0; i < cnt; i++) {
        w[i] = triangle((i + xmin - centre + 0.5) * ss);
        sum += w[i];
    }
    for (uint32_t i = 0; i < cnt && sum != 0; i++)
        w[i] /= sum;
    uint32_t a = 0, b = cnt;
    while (b > a + 1 && w[b - 1] == 0)
        b--;
    while (a + 1 < b && w[a] == 0)
        a++;
    memmove(w, w + a, (b - a) * sizeof *w);
    *first = xmin + a;
    *n = b - a;
}

int sb_image_taps_build(sb_image_taps *t, uint32_t in, uint32_t out, sb_err *err)
{
    if (t->wq != NULL && t->in == in && t->out == out)
        return 0;
    sb_image_taps_free(t);
    if (in == 0 || out == 0 || in > SB_IMAGE_MAX_RESAMPLE || out > SB_IMAGE_MAX_RESAMPLE)
        return sb_err_set(err, "image resize: size out of range (%u -> %u)", in, out);
    double scale = (double)in / out, fscale = scale < 1 ? 1 : scale;
    /* the widest window: 2 * support + 1 source pixels; support <= in <= 2^24: no overflow */
    uint32_t ksize = (uint32_t)ceil(fscale) * 2 + 1;
    if ((size_t)ksize > SIZE_MAX / sizeof(double) / out)
        return sb_err_set(err, "image resize: weight table too large (%u -> %u)", in, out);
    size_t nw = (size_t)ksize * out;
    double *w = malloc(ksize * sizeof *w);
    t->first = malloc(out * sizeof *t->first);
    t->count = malloc(out * sizeof *t->count);
    t->wq = malloc(nw * sizeof *t->wq);
    t->wf = malloc(nw * sizeof *t->wf);
    if (w == NULL || t->first == NULL || t->count == NULL || t->wq == NULL || t->wf == NULL) {
        free(w);
        sb_image_taps_free(t);
        return sb_err_set(err, "image resize: out of memory for %u -> %u weights", in, out);
    }
    for (uint32_t o = 0; o < out; o++) {
        taps_one(in, scale, fscale, o, w, &t->first[o], &t->count[o]);
        for (uint32_t i = 0; i < t->count[o]; i++) {
            /* weights are >= 0: Pillow's rounding of a positive weight to fixed point */
            t->wq[(size_t)o * ksize + i] = (int32_t)(0.5 + w[i] * (1 << SB_IMAGE_TAP_BITS));
            t->wf[(size_t)o * ksize + i] = (float)w[i];
        }
    }
    free(w);
    t->in = in;
    t->out = out;
    t->ksize = ksize;
    return 0;
}

void sb_image_resampler_free(sb_image_resampler *r)
{
    if (r == NULL)
        return;
    sb_image_taps_free(&r->x);
    sb_image_taps_free(&r->y);
    free(r->tmp);
    free(r->acc);
    memset(r, 0, sizeof *r);
}

/* Grows *buf to at least n bytes (kept between calls: many images share sizes). */
static int grow(void **buf, size_t *cap, size_t n, sb_err *err)
{
    if (n <= *cap)
        return 0;
    void *p = realloc(*buf, n);
    if (p == NULL)
        return sb_err_set(err, "image resize: out of memory for %zu bytes of scratch", n);
    *buf = p;
    *cap = n;
    return 0;
}

static inline uint8_t clip8(int32_t v)
{
    v >>= SB_IMAGE_TAP_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* One row through the horizontal taps, any channel count. */
static void hrow_u8(const uint8_t *s, uint8_t *d, const sb_image_taps *t, uint32_t c)
{
    int32_t acc[SB_IMAGE_MAX_CHANNELS];
    for (uint32_t x = 0; x < t->out; x++) {
        const int32_t *w = t->wq + (size_t)x * t->ksize;
        const uint8_t *p = s + (size_t)t->first[x] * c;
        for (uint32_t k = 0; k < c; k++)
            acc[k] = HALF;
        for (uint32_t i = 0, n = t->count[x]; i < n; i++)
            for (uint32_t k = 0; k < c; k++)
                acc[k] += p[(size_t)i * c + k] * w[i];
        for (uint32_t k = 0; k < c; k++)
            d[(size_t)x * c + k] = clip8(acc[k]);
    }
}

/* The same for 1, 3 and 4 channels (gray, RGB, RGBA: nearly every image), with the sums in
 * named registers: several times faster than the loop over an array above. */
#define HROW_FIXED(NAME, C)                                                                        \
    static void NAME(const uint8_t *s, uint8_t *d, const sb_image_taps *t)                         \
    {                                                                                              \
        for (uint32_t x = 0; x < t->out; x++, d += C) {                                            \
            const int32_t *w = t->wq + (size_t)x * t->ksize;                                       \
            const uint8_t *p = s + (size_t)t->first[x] * C;                                        \
            int32_t a0 = HALF, a1 = HALF, a2 = HALF, a3 = HALF;                                    \
            for (uint32_t i = 0, n = t->count[x]; i < n; i++, p += C) {                            \
                a0 += p[0] * w[i];                                                                 \
                if (C > 1) {                                                                       \
                    a1 += p[1 % C] * w[i];                                                         \
                    a2 += p[2 % C] * w[i];                                                         \
                }                                                                                  \
                if (C > 3)                                                                         \
                    a3 += p[3 % C] * w[i];                                                         \
            }                                                                                      \
            d[0] = clip8(a0);                                                                      \
            if (C > 1) {                                                                           \
                d[1 % C] = clip8(a1);                                                              \
                d[2 % C] = clip8(a2);                                                              \
            }                                                                                      \
            if (C > 3)                                                                             \
                d[3 % C] = clip8(a3);                                                              \
        }                                                                                          \
    }
HROW_FIXED(hrow_u8_c1, 1)
HROW_FIXED(hrow_u8_c3, 3)
HROW_FIXED(hrow_u8_c4, 4)

static void hpass_u8(const uint8_t *s, size_t s_stride, uint8_t *d, uint32_t rows,
                     const sb_image_taps *t, uint32_t c)
{
    size_t d_stride = (size_t)t->out * c;
    for (uint32_t y = 0; y < rows; y++, s += s_stride, d += d_stride)
        if (c == 1)
            hrow_u8_c1(s, d, t);
        else if (c == 3)
            hrow_u8_c3(s, d, t);
        else if (c == 4)
            hrow_u8_c4(s, d, t);
        else
            hrow_u8(s, d, t, c);
}

/* acc[j] += r[j] * w: restrict (acc and r never overlap) lets -O2 vectorize it without an
 * aliasing check it would not pay for. */
static void add_row_u8(int32_t *restrict acc, const uint8_t *restrict r, int32_t w, size_t len)
{
    for (size_t j = 0; j < len; j++)
        acc[j] += r[j] * w;
}

/* The vertical pass over rows of `len` values: a running sum per value, row by row, which
 * vectorizes (acc holds len int32). `s` starts at the source row the taps call y0. */
static void vpass_u8(const uint8_t *s, uint32_t y0, size_t len, uint8_t *d, const sb_image_taps *t,
                     int32_t *acc)
{
    for (uint32_t y = 0; y < t->out; y++, d += len) {
        const int32_t *w = t->wq + (size_t)y * t->ksize;
        const uint8_t *r = s + (size_t)(t->first[y] - y0) * len;
        for (size_t j = 0; j < len; j++)
            acc[j] = HALF;
        for (uint32_t i = 0; i < t->count[y]; i++, r += len)
            add_row_u8(acc, r, w[i], len);
        for (size_t j = 0; j < len; j++)
            d[j] = clip8(acc[j]);
    }
}

static void hpass_f32(const float *s, size_t s_stride, float *d, uint32_t rows,
                      const sb_image_taps *t, uint32_t c)
{
    for (uint32_t y = 0; y < rows; y++, s += s_stride)
        for (uint32_t x = 0; x < t->out; x++, d += c) {
            const float *w = t->wf + (size_t)x * t->ksize;
            const float *p = s + (size_t)t->first[x] * c;
            for (uint32_t k = 0; k < c; k++)
                d[k] = 0;
            for (uint32_t i = 0; i < t->count[x]; i++)
                for (uint32_t k = 0; k < c; k++)
                    d[k] += p[(size_t)i * c + k] * w[i];
        }
}

static void vpass_f32(const float *s, uint32_t y0, size_t len, float *d, const sb_image_taps *t)
{
    for (uint32_t y = 0; y < t->out; y++, d += len) {
        const float *w = t->wf + (size_t)y * t->ksize;
        const float *r = s + (size_t)(t->first[y] - y0) * len;
        for (size_t j = 0; j < len; j++)
            d[j] = 0;
        for (uint32_t i = 0; i < t->count[y]; i++, r += len)
            for (size_t j = 0; j < len; j++)
                d[j] += r[j] * w[i];
    }
}

/* Which pass runs first. Pillow 13 (PR #9549) runs the vertical one first when the height
 * shrinks by more than twice as many pixels as the width does (found by comparing its results
 * with both orders over many sizes); earlier Pillows always ran the horizontal one first. The
 * intermediate is rounded to uint8, so the order changes results by up to 1: follow Pillow. */
static int vertical_first(uint32_t sw, uint32_t sh, uint32_t dw, uint32_t dh)
{
    return dh < sh && (int64_t)sh - dh > 2 * ((int64_t)sw - dw);
}

/* Builds both axes' taps and the scratch for the intermediate image, `vsize` bytes a value:
 * vertical first, sw x dh; else the source rows the vertical taps read, [*y0, *y0 + rows), each
 * resized to dw. */
static int prepare(sb_image_resampler *r, uint32_t sw, uint32_t sh, uint32_t c, uint32_t dw,
                   uint32_t dh, size_t vsize, uint32_t *y0, sb_err *err)
{
    if (sw == 0 || sh == 0 || c == 0 || dw == 0 || dh == 0 || c > SB_IMAGE_MAX_CHANNELS)
        return sb_err_set(err, "image resize: bad size (%u x %u x %u -> %u x %u)", sw, sh, c, dw,
                          dh);
    if (sb_image_taps_build(&r->x, sw, dw, err) != 0 || sb_image_taps_build(&r->y, sh, dh, err))
        return -1;
    *y0 = r->y.first[0];
    uint32_t rows = r->y.first[dh - 1] + r->y.count[dh - 1] - *y0;
    int vfirst = vertical_first(sw, sh, dw, dh);
    /* sides <= 2^24 and c <= 64: every product below fits 64 bits */
    size_t row = (size_t)(vfirst ? sw : dw) * c, n = row * (vfirst ? dh : rows);
    size_t wide = (size_t)(sw > dw ? sw : dw) * c;
    if (n > SIZE_MAX / vsize)
        return sb_err_set(err, "image resize: %u x %u x %u is too large", dw, dh, c);
    if (grow(&r->tmp, &r->tmp_cap, n * vsize, err) != 0 ||
        grow(&r->acc, &r->acc_cap, wide * sizeof(int32_t), err) != 0)
        return -1;
    return 0;
}

int sb_image_resample_u8(sb_image_resampler *r, const uint8_t *src, uint32_t sw, uint32_t sh,
                         uint32_t c, uint8_t *dst, uint32_t dw, uint32_t dh, sb_err *err)
{
    uint32_t y0;
    if (prepare(r, sw, sh, c, dw, dh, 1, &y0, err) != 0)
        return -1;
    size_t s_stride = (size_t)sw * c, len = (size_t)dw * c;
    /* as Pillow: a pass whose axis keeps its size is skipped (its taps are the identity) */
    if (sw == dw && sh == dh) {
        memcpy(dst, src, s_stride * sh);
    } else if (sh == dh) {
        hpass_u8(src, s_stride, dst, sh, &r->x, c);
    } else if (sw == dw) {
        vpass_u8(src, 0, len, dst, &r->y, r->acc);
    } else if (vertical_first(sw, sh, dw, dh)) {
        vpass_u8(src, 0, s_stride, r->tmp, &r->y, r->acc);
        hpass_u8(r->tmp, s_stride, dst, dh, &r->x, c);
    } else {
        /* the intermediate holds source rows [y0, ...): the vertical taps shift by y0 */
        uint32_t rows = r->y.first[dh - 1] + r->y.count[dh - 1] - y0;
        hpass_u8(src + y0 * s_stride, s_stride, r->tmp, rows, &r->x, c);
        vpass_u8(r->tmp, y0, len, dst, &r->y, r->acc);
    }
    return 0;
}

int sb_image_resample_f32(sb_image_resampler *r, const float *src, uint32_t sw, uint32_t sh,
                          uint32_t c, float *dst, uint32_t dw, uint32_t dh, sb_err *err)
{
    uint32_t y0;
    if (prepare(r, sw, sh, c, dw, dh, sizeof(float), &y0, err) != 0)
        return -1;
    size_t s_stride = (size_t)sw * c, len = (size_t)dw * c;
    if (sw == dw && sh == dh) {
        memcpy(dst, src, s_stride * sh * sizeof *src);
    } else if (sh == dh) {
        hpass_f32(src, s_stride, dst, sh, &r->x, c);
    } else if (sw == dw) {
        vpass_f32(src, 0, len, dst, &r->y);
    } else if (vertical_first(sw, sh, dw, dh)) {
        vpass_f32(src, 0, s_stride, r->tmp, &r->y);
        hpass_f32(r->tmp, s_stride, dst, dh, &r->x, c);
    } else {
        uint32_t rows = r->y.first[dh - 1] + r->y.count[dh - 1] - y0;
        hpass_f32(src + y0 * s_stride, s_stride, r->tmp, rows, &r->x, c);
        vpass_f32(r->tmp, y0, len, dst, &r->y);
    }
    return 0;
}
