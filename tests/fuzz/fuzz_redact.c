/* libFuzzer target: the redaction of secrets in text (lib/core/redact.h), which every log line,
 * error, status and Event goes through. The first two bytes pick the output's size; the rest is
 * the text. Besides crashes and sanitizer reports (the output buffer is exactly cap bytes, so a
 * write past it is caught), these properties trap:
 *   - the output is NUL-terminated within cap, and its length is what the call returns;
 *   - a cut output is a prefix of the whole output (a cut never shows more than the whole);
 *   - a secret planted after the text behind a trigger (a query parameter, a signing parameter,
 *     userinfo, an Authorization header) is never in the output.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/redact.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

#define SECRET "ZQXSECRETQXZ"

static const char *const triggers[] = {
    " https://h/p?k=", " token=", " X-Amz-Signature=", " http://u:", "\nAuthorization: "};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t cap = (size_t)data[0] | ((size_t)(data[1] & 0x0f) << 8); /* 0..4095 */
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    size_t whole_cap = n * 9 + 64;
    char *whole = malloc(whole_cap), *cut = malloc(cap > 0 ? cap : 1);
    CHECK(whole != NULL && cut != NULL);
    size_t wl = sb_redact_textn(text, n, whole, whole_cap);
    CHECK(wl < whole_cap && whole[wl] == '\0');
    size_t cl = sb_redact_textn(text, n, cut, cap);
    if (cap == 0) {
        CHECK(cl == 0);
    } else {
        CHECK(cl < cap && cut[cl] == '\0');
        CHECK(cl <= wl && memcmp(cut, whole, cl) == 0);
    }
    /* the text (up to its first NUL or newline, so the trigger starts a word on its own line)
     * with a secret planted after a trigger */
    const char *t = triggers[data[1] >> 4 < 5 ? data[1] >> 4 : 0];
    size_t tn = 0;
    while (tn < n && text[tn] != '\0' && text[tn] != '\n')
        tn++;
    size_t pn = tn + strlen(t) + strlen(SECRET);
    char *planted = malloc(pn + 1), *out = malloc(pn * 9 + 64);
    CHECK(planted != NULL && out != NULL);
    memcpy(planted, text, tn);
    strcpy(planted + tn, t);
    strcat(planted, SECRET);
    sb_redact_textn(planted, pn, out, pn * 9 + 64);
    if (memmem(text, tn, SECRET, strlen(SECRET)) == NULL) /* (the text may hold it as is) */
        CHECK(strstr(out, SECRET) == NULL);
    free(planted);
    free(out);
    free(whole);
    free(cut);
    return 0;
}
