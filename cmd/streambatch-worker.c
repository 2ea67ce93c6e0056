/* streambatch-worker — runs tasks for a controller. The task runtime lands with the engine; for
 * now the binary only answers --help and --version. Exit codes: 0 ok, 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "version.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("streambatch-worker %s\n", SB_VERSION);
            return 0;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: streambatch-worker [--help] [--version]\n"
                   "The worker of streambatch. It is started by the controller (local mode:\n"
                   "`streambatch run`; Kubernetes: worker pods), not by hand.\n");
            return 0;
        }
        fprintf(stderr, "streambatch-worker: unknown option %s (try --help)\n", argv[i]);
        return 2;
    }
    fprintf(stderr, "streambatch-worker: the task runtime is not built yet (see --help)\n");
    return 2;
}
