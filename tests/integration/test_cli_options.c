/* The three programs' flags against their --help and their number checks, through the real
 * binaries: every flag a parser takes is in the help (the flags are read from the sources, so a
 * new one without a help line fails here), and numbers that mean nothing (--cpus 0, negative,
 * "2x") exit 2 naming the flag. Nothing here starts a pipeline. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"

/* Whether help names flag as a whole word ("--profile" is not found in "--profile-bytes"). */
static int lists_flag(const char *help, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = strstr(help, flag); p != NULL; p = strstr(p + 1, flag)) {
        char before = p == help ? ' ' : p[-1];
        char after = p[n];
        if ((before == ' ' || before == '[' || before == '(' || before == '|' || before == ',') &&
            !(after == '-' || (after >= 'a' && after <= 'z')))
            return 1;
    }
    return 0;
}

/* The output of `BIN ARGS 2>&1` (caller frees); *rc its exit status. */
static char *run_bin(int *rc, const char *bin, const char *args)
{
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", sb_test_bin(bin), args);
    *rc = sb_test_run(cmd, &out);
    return out;
}

/* Checks that each flag in the newline-separated list is in help; returns how many there were. */
static int expect_listed(const char *what, const char *flags, const char *help)
{
    int n = 0;
    char *copy = strdup(flags), *save = NULL;
    for (char *f = strtok_r(copy, "\n", &save); f != NULL; f = strtok_r(NULL, "\n", &save)) {
        n++;
        cr_expect(lists_flag(help, f), "%s: the parser takes %s but --help does not list it:\n%s",
                  what, f, help);
    }
    free(copy);
    return n;
}

/* streambatch's parsers compare each argument with a string literal ("--cpus", "-o"): those are
 * its flags, for run, plan and validate alike (one help text serves them all). */
Test(cli_help, streambatch_lists_every_flag_its_parsers_take)
{
    char *flags = sb_test_sh_out("grep -o '\"--*[a-z][a-z-]*\"' %s/cmd/streambatch.c | tr -d '\"' "
                                 "| sort -u",
                                 sb_test_root());
    int rc;
    char *help = run_bin(&rc, "streambatch", "run --help");
    cr_assert_eq(rc, 0, "%s", help);
    int n = expect_listed("streambatch", flags, help);
    cr_expect_geq(n, 20, "the flags were found in the source (%d):\n%s", n, flags);
    /* the ones the bug report named, by name: the grep above must keep finding them */
    static const char *const named[] = {"--run-dir", "--summary-json", "--progress-interval-ms",
                                        "--quiet", "--profile-cpus"};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        cr_expect(strstr(flags, named[i]) != NULL, "%s not found in the parser", named[i]);
        cr_expect(lists_flag(help, named[i]), "%s not in --help:\n%s", named[i], help);
    }
    /* the same text for each command's --help */
    static const char *const cmds[] = {"plan --help", "validate --help", "help", "--help"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char *h = run_bin(&rc, "streambatch", cmds[i]);
        cr_expect_eq(rc, 0, "%s: %s", cmds[i], h);
        cr_expect_str_eq(h, help, "%s", cmds[i]);
        free(h);
    }
    free(help);
    free(flags);
}

/* Each flag run's help lists is one its parser takes (a value that passes given where needed):
 * without a pipeline file it then says so, never "unknown option". */
Test(cli_help, run_takes_every_flag_it_lists)
{
    static const char *const flags[] = {"--cpus 1",
                                        "--gpus 0",
                                        "--cpu-slots 2",
                                        "--memory-budget 1Gi",
                                        "--set a=b",
                                        "--summary-json s.json",
                                        "--run-dir d",
                                        "--progress-interval-ms 5000",
                                        "--metrics-addr 127.0.0.1:0",
                                        "--checkpoint c.json",
                                        "--tls-dir t",
                                        "--tls-server-name n",
                                        "--resume",
                                        "--plan"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        char args[256];
        snprintf(args, sizeof args, "run %s", flags[i]);
        int rc;
        char *out = run_bin(&rc, "streambatch", args);
        cr_expect_eq(rc, 2, "%s: %s", flags[i], out);
        cr_expect(strstr(out, "streambatch run: no pipeline file given") != NULL, "%s: %s",
                  flags[i], out);
        free(out);
    }
    int rc;
    char *out = run_bin(&rc, "streambatch", "run p.yaml --bogus");
    cr_expect_eq(rc, 2);
    cr_expect(strstr(out, "streambatch run: unknown option --bogus") != NULL, "%s", out);
    free(out);
}

/* The getopt_long table of a program's source: {"name", required_argument, ...} per flag. */
static char *getopt_flags(const char *src)
{
    return sb_test_sh_out("grep -o '{\"[a-z][a-z-]*\", *[a-z_]*_argument' %s/%s | "
                          "sed 's/{\"\\([a-z-]*\\)\".*/--\\1/' | sort -u",
                          sb_test_root(), src);
}

Test(cli_help, controller_and_worker_list_every_flag_they_take)
{
    static const struct {
        const char *bin, *src;
        int at_least;
    } progs[] = {{"streambatch-controller", "cmd/streambatch-controller.c", 30},
                 {"streambatch-worker", "cmd/streambatch-worker.c", 16}};
    for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
        char *flags = getopt_flags(progs[i].src);
        int rc;
        char *help = run_bin(&rc, progs[i].bin, "--help");
        cr_expect_eq(rc, 0, "%s", help);
        int n = expect_listed(progs[i].bin, flags, help);
        cr_expect_geq(n, progs[i].at_least, "%s: flags found in the source:\n%s", progs[i].bin,
                      flags);
        free(help);
        free(flags);
    }
}

/* A flag's number out of range, or not a number: exit 2 and this message. (A worker that took
 * its bad number would give up on its unreachable controller after 2 s.) */
typedef struct {
    const char *bin, *args, *says;
} bad_number;

static const bad_number bad_numbers[] = {
    /* CPU workers: 0 meant "all CPUs" without a word; the default already is that */
    {"streambatch", "run p.yaml --cpus 0",
     "streambatch run: --cpus must be a number 1..4096, got \"0\""},
    {"streambatch", "run p.yaml --cpus 2x",
     "streambatch run: --cpus must be a number 1..4096, got \"2x\""},
    {"streambatch", "run p.yaml --cpus -1",
     "streambatch run: --cpus must be a number 1..4096, got \"-1\""},
    {"streambatch", "run p.yaml --cpus ' 2'",
     "streambatch run: --cpus must be a number 1..4096, got \" 2\""},
    {"streambatch", "run p.yaml --cpus +2",
     "streambatch run: --cpus must be a number 1..4096, got \"+2\""},
    {"streambatch", "run p.yaml --gpus -1",
     "streambatch run: --gpus must be a number 0..4096, got \"-1\""},
    {"streambatch", "run p.yaml --gpus 1x",
     "streambatch run: --gpus must be a number 0..4096, got \"1x\""},
    {"streambatch", "run p.yaml --progress-interval-ms 0",
     "streambatch run: --progress-interval-ms must be a number 1..3600000, got \"0\""},
    {"streambatch", "run p.yaml --cpu-slots 0",
     "streambatch run: --cpu-slots must be 1..64, got 0"},
    {"streambatch", "run p.yaml --cpu-slots 65",
     "streambatch run: --cpu-slots must be 1..64, got 65"},
    {"streambatch", "plan p.yaml --profile-cpus 0",
     "streambatch plan: --profile-cpus must be a number 1..4096, got \"0\""},
    {"streambatch", "plan p.yaml --profile-bytes 0",
     "streambatch plan: --profile-bytes takes a size such as 256Mi, got \"0\""},
    {"streambatch-worker", "--controller 127.0.0.1:1 --id w --controller-lost-timeout 2s --slots 0",
     "streambatch-worker: --slots must be 1..256, got \"0\""},
    {"streambatch-worker",
     "--controller 127.0.0.1:1 --id w --controller-lost-timeout 2s --slots ' 2'",
     "streambatch-worker: --slots must be 1..256, got \" 2\""},
    /* "" was taken as 0 (no limit) */
    {"streambatch-worker",
     "--controller 127.0.0.1:1 --id w --controller-lost-timeout 2s --accelerators ''",
     "streambatch-worker: --accelerators must be 0..256, got \"\""},
    /* named from the parse error (a value the parse never set was read before) */
    {"streambatch-worker",
     "--controller 127.0.0.1:1 --id w --controller-lost-timeout 2s --store-budget 2x",
     "streambatch-worker: --store-budget: quantity \"2x\" has an unknown suffix \"x\""},
    {"streambatch-worker",
     "--controller 127.0.0.1:1 --id w --controller-lost-timeout 2s --store-budget 0",
     "streambatch-worker: --store-budget: must be positive"},
    {"streambatch-controller", "--workers 0",
     "streambatch-controller: --workers 0: must be an integer in [1, 64]"},
    {"streambatch-controller", "--workers ' 4'",
     "streambatch-controller: --workers  4: must be an integer in [1, 64]"},
    {"streambatch-controller", "--max-pending-pods +3",
     "streambatch-controller: --max-pending-pods +3: must be an integer in [1, 1000]"},
    /* removed with the checkpoint inline in the status (issue 38): refused, saying why */
    {"streambatch-controller", "--checkpoint-max-bytes 512Ki",
     "streambatch-controller: --checkpoint-max-bytes was removed: a Pipeline's checkpoint is a "
     "log beside its sink"},
};

Test(cli_numbers, meaningless_numbers_exit_2_naming_the_flag)
{
    for (size_t i = 0; i < sizeof bad_numbers / sizeof *bad_numbers; i++) {
        const bad_number *b = &bad_numbers[i];
        int rc;
        char *out = run_bin(&rc, b->bin, b->args);
        cr_expect_eq(rc, 2, "%s %s: exit %d\n%s", b->bin, b->args, rc, out);
        cr_expect(strstr(out, b->says) != NULL, "%s %s: want \"%s\", got:\n%s", b->bin, b->args,
                  b->says, out);
        free(out);
    }
}

/* The default progress interval, 5 s, can be given (the bound was 4096 ms); a missing pipeline
 * file is what stops these runs, after the flags passed. */
Test(cli_numbers, numbers_in_range_pass)
{
    static const char *const ok[] = {"--progress-interval-ms 5000", "--cpus 1", "--cpus 4096",
                                     "--gpus 0", "--cpu-slots 64"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char args[256];
        snprintf(args, sizeof args, "run /nonexistent/p.yaml %s", ok[i]);
        int rc;
        char *out = run_bin(&rc, "streambatch", args);
        cr_expect(strstr(out, "must be") == NULL, "%s: %s", ok[i], out);
        cr_expect(strstr(out, "/nonexistent/p.yaml: ") != NULL, "%s: %s", ok[i], out);
        free(out);
    }
}
