/* streambatch — the command-line tool: validate manifests (and, as the engine lands, run them
 * locally). Exit codes: 0 success, 1 invalid input or failure, 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "spec/validate.h"
#include "version.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: streambatch <command> [args]\n"
               "\n"
               "commands:\n"
               "  validate FILE...   check Pipeline manifests (multi-document YAML; - = stdin);\n"
               "                     prints FILE:LINE:COL: FIELD.PATH: message per problem\n"
               "  version            print the version\n"
               "  help               this text\n"
               "\n"
               "exit status: 0 ok, 1 invalid manifests, 2 usage error\n");
}

static int cmd_validate(int argc, char **argv)
{
    int quiet = 0, nfiles = 0, problems = 0;
    size_t docs_total = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "streambatch validate: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0)
            continue;
        nfiles++;
        size_t ndocs = 0;
        int rc = sb_validate_file(argv[i], stdout, &ndocs);
        if (rc < 0) {
            fprintf(stderr, "streambatch validate: out of memory on %s\n", argv[i]);
            return 1;
        }
        problems += rc;
        docs_total += ndocs;
    }
    if (nfiles == 0) {
        fprintf(stderr,
                "streambatch validate: no files given\nusage: streambatch validate FILE...\n");
        return 2;
    }
    if (!quiet)
        fprintf(stderr, "%d problem%s in %zu document%s of %d file%s\n", problems,
                problems == 1 ? "" : "s", docs_total, docs_total == 1 ? "" : "s", nfiles,
                nfiles == 1 ? "" : "s");
    return problems == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "validate") == 0)
        return cmd_validate(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("streambatch %s\n", SB_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "streambatch: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
