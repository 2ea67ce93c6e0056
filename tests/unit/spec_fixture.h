/* A Pipeline decoded from YAML for unit tests that need an sb_pipeline (the scheduler's and the
 * engine's): the document and the decoded spec, asserting that both parse without a problem.
 * Header-only; spec_fixture_free releases what spec_fixture_load made. */
#ifndef SB_TEST_SPEC_FIXTURE_H
#define SB_TEST_SPEC_FIXTURE_H

#include <criterion/criterion.h>
#include <string.h>

#include "doc/doc.h"
#include "spec/pipeline.h"

typedef struct {
    sb_doc *doc;
    sb_pipeline p;
} spec_holder;

/* Parses yaml (one Pipeline document) into h; the test fails on a parse or decode problem. */
static inline void spec_fixture_load(spec_holder *h, const char *yaml)
{
    h->doc = sb_doc_parse_yaml(yaml, strlen(yaml), NULL);
    cr_assert_null(sb_doc_error(h->doc, NULL, NULL));
    sb_diags d = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(h->doc, 0), &h->p, &d), 0);
    cr_assert_eq(d.n, 0, "%s: %s", d.n ? d.items[0].path : "", d.n ? d.items[0].msg : "");
    sb_diags_free(&d);
}

static inline void spec_fixture_free(spec_holder *h)
{
    sb_pipeline_free(&h->p);
    sb_doc_free(h->doc);
}

#endif
