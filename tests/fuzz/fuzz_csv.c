/* libFuzzer target: csv records (user data) through lib/io/csv.h. The first byte picks the
 * options (delimiter, multiline); the rest is a file. Besides crashes, sanitizer reports and
 * leaks, these properties trap:
 *   - record boundaries tile the input exactly (every byte in one record, none twice);
 *   - every record that parses (valid UTF-8 without NUL, as the reader passes) is a valid JSON
 * object (checked with cJSON) whose field count equals the header's;
 *   - writing a parsed record as csv and parsing that again gives the same JSON object.
 */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/csv.h"
#include "partition/utf8.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char delims[] = {',', ';', '\t', '|'};
    sb_csv_opts o = {.delim = delims[data[0] & 3], .header = true, .multiline = (data[0] & 4) != 0};
    const char *s = (const char *)data + 1;
    size_t n = size - 1, pos = 0;
    sb_csv_header h = {0};
    sb_csv_buf json = {0}, row = {0};
    sb_err e;
    while (pos < n) {
        ssize_t len = sb_csv_record_len(s + pos, n - pos, &o, true, &e);
        if (len < 0)
            break;
        CHECK(len > 0 && (size_t)len <= n - pos);
        const char *rec = s + pos;
        pos += (size_t)len;
        if (h.n == 0) {
            if (sb_csv_header_parse(rec, (size_t)len, &o, &h, &e) != 0)
                break;
            continue;
        }
        /* the reader refuses invalid UTF-8 before this; cJSON (the check) cannot hold NUL */
        size_t bad;
        if (!sb_utf8_valid(rec, (size_t)len, &bad) || memchr(rec, '\0', (size_t)len) != NULL)
            continue;
        if (sb_csv_record_to_json(rec, (size_t)len, &o, &h, &json, &e) != 0)
            continue;
        cJSON *a = cJSON_ParseWithLength(json.p, json.len);
        CHECK(cJSON_IsObject(a));
        CHECK((size_t)cJSON_GetArraySize(a) == h.n);
        /* round trip through the writer (no header row), then the reader */
        sb_csv_opts wo = o;
        wo.header = false;
        wo.multiline = true;
        sb_csv_writer w = {.o = &wo};
        row.len = 0;
        if (sb_csv_write_record(&w, json.p, json.len, &row, &e) == 0) {
            sb_csv_buf again = {0};
            CHECK(sb_csv_record_to_json(row.p, row.len, &wo, &h, &again, &e) == 0);
            cJSON *b = cJSON_ParseWithLength(again.p, again.len);
            CHECK(cJSON_Compare(a, b, 1));
            cJSON_Delete(b);
            sb_csv_buf_free(&again);
        }
        sb_csv_writer_free(&w);
        cJSON_Delete(a);
    }
    sb_csv_header_free(&h);
    sb_csv_buf_free(&json);
    sb_csv_buf_free(&row);
    return 0;
}
