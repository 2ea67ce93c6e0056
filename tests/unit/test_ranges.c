/* Split-index ranges: formatting, round trips, and the strict parser's refusals (each message
 * names the offending piece). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/ranges.h"

static char *fmt(const char *bits)
{
    size_t n = strlen(bits);
    uint8_t set[256] = {0};
    for (size_t i = 0; i < n; i++)
        set[i] = bits[i] == '1';
    return sb_ranges_format(set, n);
}

Test(ranges, format)
{
    const struct {
        const char *bits, *want;
    } cases[] = {
        {"", ""},        {"0000", ""},      {"1", "0"},
        {"1111", "0-3"}, {"1101", "0-1,3"}, {"0100010", "1,5"},
        {"0111", "1-3"}, {"1010", "0,2"},   {"11011100111", "0-1,3-5,8-10"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s = fmt(cases[i].bits);
        cr_assert_not_null(s);
        cr_expect_str_eq(s, cases[i].want, "%s", cases[i].bits);
        free(s);
    }
}

Test(ranges, parse_and_round_trip)
{
    uint8_t set[64];
    sb_err err;
    memset(set, 7, sizeof set);
    cr_assert_eq(sb_ranges_parse(NULL, set, 64, &err), 0);
    for (size_t i = 0; i < 64; i++)
        cr_assert_eq(set[i], 0);
    cr_assert_eq(sb_ranges_parse("", set, 64, &err), 0);
    cr_assert_eq(sb_ranges_parse("0-41,45", set, 64, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < 64; i++)
        cr_assert_eq(set[i], i <= 41 || i == 45, "%zu", i);
    char *s = sb_ranges_format(set, 64);
    cr_expect_str_eq(s, "0-41,45");
    free(s);
    /* adjacent pieces are accepted (and come back merged) */
    cr_assert_eq(sb_ranges_parse("0-3,4,5-6,63", set, 64, &err), 0, "%s", err.msg);
    s = sb_ranges_format(set, 64);
    cr_expect_str_eq(s, "0-6,63");
    free(s);
    cr_assert_eq(sb_ranges_parse("7-7", set, 8, &err), 0, "%s", err.msg);
    cr_expect_eq(set[7], 1);
    /* a pseudo-random set round-trips */
    uint8_t big[1000], back[1000];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof big; i++) {
        x = x * 1103515245u + 12345u;
        big[i] = (x >> 16) % 3 != 0;
    }
    s = sb_ranges_format(big, sizeof big);
    cr_assert_eq(sb_ranges_parse(s, back, sizeof back, &err), 0, "%s", err.msg);
    cr_expect_eq(memcmp(big, back, sizeof big), 0);
    free(s);
}

Test(ranges, malformed_input_is_refused_naming_the_piece)
{
    const struct {
        const char *text, *needle;
        size_t n;
    } cases[] = {
        {"5-3", "\"5-3\" is descending", 10},
        {"0-4,3-6", "\"3-6\" is out of order or overlaps", 10},
        {"4,2", "\"2\" is out of order", 10},
        {"1,1", "\"1\" is out of order", 10},
        {"0-10", "\"0-10\" is out of range (10 splits)", 10},
        {"3", "\"3\" is out of range (1 split)", 1},
        {"0", "\"0\" is out of range (0 splits)", 0},
        {"abc", "bad piece \"abc\"", 10},
        {"1,x2", "bad piece \"x2\"", 10},
        {"1-", "bad piece \"1-\"", 10},
        {"-1", "bad piece \"-1\"", 10},
        {"1 ,2", "bad piece \"1 \"", 10},
        {" 1", "bad piece \" 1\"", 10},
        {"1-2-3", "bad piece \"1-2-3\"", 10},
        {"01", "bad piece \"01\"", 10},
        {"1,,2", "empty piece", 10},
        {",1", "empty piece", 10},
        {"1,", "empty piece at the end", 10},
        {"99999999999999999999999", "bad piece \"99999999999999999999999\"", 10},
        {"18446744073709551615", "\"18446744073709551615\" is out of range", 10},
        {"0-18446744073709551616", "bad piece", 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t set[16];
        memset(set, 9, sizeof set);
        sb_err err = {0};
        cr_expect_eq(sb_ranges_parse(cases[i].text, set, cases[i].n, &err), -1, "%s",
                     cases[i].text);
        cr_expect(strstr(err.msg, cases[i].needle) != NULL, "\"%s\": got \"%s\", want \"%s\"",
                  cases[i].text, err.msg, cases[i].needle);
        for (size_t k = 0; k < cases[i].n; k++)
            cr_expect_eq(set[k], 0, "set cleared on error (%s)", cases[i].text);
    }
    /* a NULL err is fine */
    uint8_t set[4];
    cr_expect_eq(sb_ranges_parse("zz", set, 4, NULL), -1);
}
