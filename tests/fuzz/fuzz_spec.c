/* libFuzzer target: the manifest parser and validator (YAML and JSON paths) on arbitrary
 * bytes. Any crash, sanitizer report, leak or timeout is a finding. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "doc/doc.h"
#include "spec/pipeline.h"
#include "spec/validate.h"

static void decode_all(sb_doc *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < sb_doc_count(d); i++) {
        sb_pipeline p;
        sb_diags dg = {0};
        sb_pipeline_decode(sb_doc_root(d, i), &p, &dg);
        sb_diags_sort(&dg);
        sb_pipeline_free(&p);
        sb_diags_free(&dg);
    }
    sb_doc_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sb_doc_limits lim = {.max_nodes = 20000};
    decode_all(sb_doc_parse_yaml((const char *)data, size, &lim));
    decode_all(sb_doc_parse_json((const char *)data, size, &lim));
    FILE *devnull = fopen("/dev/null", "w");
    if (devnull != NULL) {
        sb_validate_buffer("fuzz", (const char *)data, size, devnull, NULL);
        fclose(devnull);
    }
    return 0;
}
