/* image.h — decoding JPEG and PNG files into pixel arrays, and bilinear resizing: what the
 * `image` source format (lib/io/reader.c) and the image.* operators (worker/ops/image) share.
 *
 * Pixels are 8-bit, row-major, channels interleaved (height x width x channels, "HWC"), with
 * 1 (gray), 3 (RGB) or 4 (RGBA) channels; sb_image_decode() converts whatever the file holds to
 * the channel count asked for (gray <-> RGB, palette and 16-bit PNGs to 8-bit RGB; an alpha
 * channel the caller did not ask for is composited onto black; a missing alpha becomes opaque).
 *
 * Decoding is strict, because the input is untrusted: the file's magic bytes decide the codec
 * (never the file name); a header claiming more than `max_pixels` pixels is refused before any
 * pixel memory is allocated (decompression bombs); a truncated or corrupt file is an error,
 * never an image with a gray or black tail: every warning of libjpeg-turbo (premature end of
 * data, corrupt entropy data, ...) and every error of libpng fails the decode; a progressive
 * JPEG with more than SB_IMAGE_MAX_SCANS scans is refused (a known CPU-time attack). Errors are
 * data errors (sb_err_data) and name the codec and what is wrong.
 *
 * Memory: sb_image_decode() fills a caller-owned sb_image whose `pixels` it mallocs; the caller
 * frees them with sb_image_free(). The plain resize functions write into caller buffers and
 * allocate nothing but a small per-call index table; the antialiased ones keep their weight
 * tables and scratch in a caller-owned sb_image_resampler (sb_image_resampler_free). Thread-safe:
 * no global state (one resampler belongs to one thread at a time).
 */
#ifndef SB_IMAGE_IMAGE_H
#define SB_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Default bound on width x height: an 8192 x 8192 image. */
#define SB_IMAGE_DEFAULT_MAX_PIXELS ((uint64_t)1 << 26)
/* Largest width or height accepted whatever the pixel bound (both codecs' own limit is 65500
 * for JPEG and 2^31-1 for PNG). */
#define SB_IMAGE_MAX_SIDE 65535u
#define SB_IMAGE_MAX_SCANS 512

typedef enum sb_image_kind { SB_IMAGE_UNKNOWN = 0, SB_IMAGE_JPEG, SB_IMAGE_PNG } sb_image_kind;

typedef struct sb_image {
    uint32_t width, height, channels;
    uint8_t *pixels; /* height * width * channels bytes, owned (sb_image_free) */
} sb_image;

/* The codec of p[0..n) by its magic bytes. */
sb_image_kind sb_image_sniff(const void *p, size_t n);

/* "jpeg", "png" or "unknown". */
const char *sb_image_kind_name(sb_image_kind k);

/* Decodes a JPEG or PNG file held in p[0..n) into *out with `channels` (1, 3 or 4) channels.
 * 0 on success; -1 + err (data error) for an unknown format, a header over max_pixels (> 0) or
 * SB_IMAGE_MAX_SIDE, a truncated or corrupt file; *out is then zeroed. */
int sb_image_decode(const void *p, size_t n, unsigned channels, uint64_t max_pixels, sb_image *out,
                    sb_err *err);

/* sb_image_decode, but a JPEG is decoded reduced by the largest d of 8, 4 and 2 that keeps
 * side / d >= the asked side on both axes (libjpeg's DCT scaling, chosen as Pillow's
 * Image.draft() does; a reduced side is ceil(side / d)); PNGs and min_w or min_h 0 decode at
 * full size. The reduced
 * pixels are libjpeg's scaled inverse DCT, close to but not equal to a full decode then
 * downscaled (the tolerance is measured in tests/unit/test_image.c, documented in
 * docs/pipeline-api.md). */
int sb_image_decode_draft(const void *p, size_t n, unsigned channels, uint64_t max_pixels,
                          uint32_t min_w, uint32_t min_h, sb_image *out, sb_err *err);

/* Frees im->pixels and zeroes *im (NULL is fine). */
void sb_image_free(sb_image *im);

/* Bilinear resize (no antialiasing) of src (sh x sw x c) into dst (dh x dw x c), every size >= 1,
 * with half-pixel centres (a destination pixel's centre maps to ((x + 0.5) * sw / dw - 0.5) in the
 * source, as OpenCV's INTER_LINEAR and PyTorch's align_corners=False; coordinates outside the
 * source clamp to its edge). No antialiasing filter when shrinking. The uint8 variant rounds to
 * nearest. -1 + err only when out of memory for the index table or a size is 0. */
int sb_image_resize_u8(const uint8_t *src, uint32_t sw, uint32_t sh, uint32_t c, uint8_t *dst,
                       uint32_t dw, uint32_t dh, sb_err *err);
int sb_image_resize_f32(const float *src, uint32_t sw, uint32_t sh, uint32_t c, float *dst,
                        uint32_t dw, uint32_t dh, sb_err *err);

/* ---- antialiased resize (lib/image/resample.c) ----
 * Pillow's Image.resize((w, h), BILINEAR), also torchvision's default antialiased bilinear: a
 * separable convolution, horizontal pass then vertical, with the triangle filter 1 - |x|
 * stretched by the downscale factor (support max(in / out, 1) source pixels each side of a
 * destination pixel's centre, (x + 0.5) * in / out), its weights normalized to sum 1 over the
 * pixels inside the image. Upscaling it is plain bilinear with half-pixel centres. The uint8
 * variant uses Pillow's fixed-point weights (SB_IMAGE_TAP_BITS) and rounds the intermediate
 * image to uint8, as Pillow does: it gives Pillow's pixels. */

/* Fraction bits of the uint8 weights: 32 - 8 - 2 (as Pillow), so sums of 255 x weights fit an
 * int32. */
#define SB_IMAGE_TAP_BITS 22
/* Most channels and largest side the antialiased resize takes. */
#define SB_IMAGE_MAX_CHANNELS 64u
#define SB_IMAGE_MAX_RESAMPLE (1u << 24)

/* The weights of one axis, in -> out pixels: destination pixel o reads count[o] source pixels
 * from first[o], with weights wq (fixed point) or wf (float) [o * ksize, o * ksize + count[o]). */
typedef struct sb_image_taps {
    uint32_t in, out, ksize;
    uint32_t *first, *count;
    int32_t *wq;
    float *wf;
} sb_image_taps;

/* Both axes' taps and scratch, kept between images: zero-initialize, reuse, then
 * sb_image_resampler_free(). The tables are rebuilt only when a size changes. */
typedef struct sb_image_resampler {
    sb_image_taps x, y;
    void *tmp, *acc; /* the intermediate image; the vertical pass's int32 sums */
    size_t tmp_cap, acc_cap;
} sb_image_resampler;

/* Fills *t for in -> out (kept as is when it already holds them). -1 + err for a size of 0 or over
 * SB_IMAGE_MAX_RESAMPLE, or out of memory. */
int sb_image_taps_build(sb_image_taps *t, uint32_t in, uint32_t out, sb_err *err);
void sb_image_taps_free(sb_image_taps *t);

/* Antialiased resize of src (sh x sw x c) into dst (dh x dw x c); c from 1 to
 * SB_IMAGE_MAX_CHANNELS. -1 + err for a bad size or out of memory. */
int sb_image_resample_u8(sb_image_resampler *r, const uint8_t *src, uint32_t sw, uint32_t sh,
                         uint32_t c, uint8_t *dst, uint32_t dw, uint32_t dh, sb_err *err);
int sb_image_resample_f32(sb_image_resampler *r, const float *src, uint32_t sw, uint32_t sh,
                          uint32_t c, float *dst, uint32_t dw, uint32_t dh, sb_err *err);
void sb_image_resampler_free(sb_image_resampler *r);

#endif
