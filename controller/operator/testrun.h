/* testrun — `streambatch-controller --test-pipeline FILE`, what the chart's `helm test` runs:
 * creates the one Pipeline that FILE (YAML or JSON) describes, follows its phase and progress
 * until it ends, and deletes it when it Succeeded (a Failed one is left for `kubectl describe`;
 * the next test deletes it before creating its own). It needs create, get and delete on
 * pipelines.streambatch.dev in the Pipeline's namespace, nothing else.
 *
 * Ownership: every pointer in sb_testrun_opts is borrowed for the call. */
#ifndef SB_CONTROLLER_TESTRUN_H
#define SB_CONTROLLER_TESTRUN_H

#include <signal.h>
#include <stdio.h>

#include "core/err.h"

typedef struct sb_testrun_opts {
    const char *path;       /* the manifest: one Pipeline */
    const char *kubeconfig; /* with context: a kubeconfig; both NULL: in-cluster, else default */
    const char *context;
    long timeout_ms;             /* from creation to a terminal phase; 0: 5 minutes */
    long poll_ms;                /* between status reads; 0: 1 s */
    FILE *out;                   /* a line per phase or progress change; NULL: none */
    volatile sig_atomic_t *stop; /* may be NULL; set: the wait ends (not Succeeded) */
} sb_testrun_opts;

/* 0 when the Pipeline Succeeded; 1 when it Failed, did not end within the timeout or was
 * stopped (err says which, with the status message); -1 when it could not be read or created
 * (err says why, wrapping the API's answer). */
int sb_testrun_run(const sb_testrun_opts *o, sb_err *err);

#endif
