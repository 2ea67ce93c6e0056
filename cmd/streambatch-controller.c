/* streambatch-controller — the Kubernetes operator and scheduler. It lands with the operator issue;
 * for now the binary only answers --help and --version. Exit codes: 0 ok, 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "version.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("streambatch-controller %s\n", SB_VERSION);
            return 0;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: streambatch-controller [--help] [--version]\n"
                   "The controller of streambatch: watches Pipeline resources and runs them.\n"
                   "It is deployed with the Helm chart or deploy/ manifests.\n");
            return 0;
        }
        fprintf(stderr, "streambatch-controller: unknown option %s (try --help)\n", argv[i]);
        return 2;
    }
    fprintf(stderr, "streambatch-controller: the operator is not built yet (see --help)\n");
    return 2;
}
