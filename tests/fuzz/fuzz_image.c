/* libFuzzer target for lib/image: image files come from users, so no input may make the JPEG or
 * PNG decoder crash, read out of bounds, leak, or allocate past the pixel bound; every accepted
 * image's pixels are read, and resized, completely.
 * Seeds: tests/fuzz/corpus/image/ (small PNG and JPEG files, gray and color). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__ubsan_default_options(void);

const char *__ubsan_default_options(void)
{
    return "halt_on_error=1:print_stacktrace=1";
}

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the first byte picks the channel count; the bound keeps a run's memory small */
    if (size < 1)
        return 0;
    static const unsigned chans[4] = {1, 3, 4, 3};
    unsigned ch = chans[data[0] & 3];
    sb_image im;
    sb_err err = {0};
    if (sb_image_decode(data + 1, size - 1, ch, (uint64_t)1 << 20, &im, &err) != 0)
        return 0;
    size_t n = (size_t)im.width * im.height * im.channels;
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s += im.pixels[i];
    uint8_t small[7 * 5 * 4];
    if (sb_image_resize_u8(im.pixels, im.width, im.height, im.channels, small, 7, 5, &err) == 0)
        for (size_t i = 0; i < (size_t)7 * 5 * im.channels; i++)
            s += small[i];
    sink = s;
    sb_image_free(&im);
    return 0;
}
