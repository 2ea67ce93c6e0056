/* The redaction of secrets in text (lib/core/redact.h): URIs with userinfo and query strings
 * anywhere in a message, known signing parameters, sensitive headers, request lines; bounded
 * output (every cut, every byte value), and text without secrets left as it was. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/redact.h"

/* in -> want through sb_redact_text */
typedef struct {
    const char *in, *want;
} tcase;

static void check_text(const tcase *c, size_t n)
{
    char out[1024];
    for (size_t i = 0; i < n; i++) {
        size_t len = sb_redact_text(c[i].in, out, sizeof out);
        cr_expect_str_eq(out, c[i].want, "case %zu: %s", i, c[i].in);
        cr_expect_eq(len, strlen(out), "case %zu: the length returned", i);
    }
}

Test(redact, presigned_urls_lose_every_query_value)
{
    static const tcase c[] = {
        {"https://b.s3.amazonaws.com/k.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256"
         "&X-Amz-Credential=AKIAX%2F20260101%2Fus-east-1&X-Amz-Signature=abc123"
         "&X-Amz-Security-Token=tok",
         "https://b.s3.amazonaws.com/k.csv?X-Amz-Algorithm=REDACTED&X-Amz-Credential=REDACTED"
         "&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED"},
        {"https://acct.blob.core.windows.net/c/b.jsonl?sv=2022-11-02&se=2026&sr=b&sp=r&sig=xyz%3D",
         "https://acct.blob.core.windows.net/c/b.jsonl?sv=REDACTED&se=REDACTED&sr=REDACTED"
         "&sp=REDACTED&sig=REDACTED"},
        {"https://storage.googleapis.com/b/o?X-Goog-Signature=ff&X-Goog-Credential=sa%40p",
         "https://storage.googleapis.com/b/o?X-Goog-Signature=REDACTED&X-Goog-Credential=REDACTED"},
        {"http://h/p?AWSAccessKeyId=AKIA&Signature=s&Expires=1",
         "http://h/p?AWSAccessKeyId=REDACTED&Signature=REDACTED&Expires=REDACTED"},
        {"http://h/p?bare", "http://h/p?REDACTED"},
        {"http://h/p?a=&b", "http://h/p?a=&REDACTED"},
        {"http://h/p#access_token=t&x=1", "http://h/p#access_token=REDACTED&x=REDACTED"},
        {"http://h/p?a=1#frag", "http://h/p?a=REDACTED#REDACTED"},
        {"http://h/p?", "http://h/p?"},
        {"http://h:8080/a/b.csv", "http://h:8080/a/b.csv"},
        {"http://[::1]:8080/a?q=1", "http://[::1]:8080/a?q=REDACTED"},
    };
    check_text(c, sizeof c / sizeof c[0]);
}

Test(redact, userinfo_goes_host_and_path_stay)
{
    static const tcase c[] = {
        {"https://user:pa55@h.example/x", "https://***@h.example/x"},
        {"s3://AKIA:SECRET@bucket/key", "s3://***@bucket/key"},
        {"http://a@b@h/p", "http://***@h/p"},
        {"http://token@h", "http://***@h"},
        /* a password holding '/', and one cut off before its '@': nothing of it shows */
        {"http://u:pa/ss@h/p", "http://***@h/p"},
        {"http://u:passw", "http://***"},
        {"http://h/k@v1.json", "http://h/k@v1.json"},
    };
    check_text(c, sizeof c / sizeof c[0]);
}

Test(redact, uris_anywhere_in_a_message)
{
    static const tcase c[] = {
        {"GET https://h/p?X-Amz-Signature=abc: 403",
         "GET https://h/p?X-Amz-Signature=REDACTED: 403"},
        {"\"http://127.0.0.1:9/obj?X-Amz-Credential=C&X-Amz-Signature=S\": HTTP 403",
         "\"http://127.0.0.1:9/obj?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED\": HTTP 403"},
        {"source (see http://h/a?k=v). Then s3://b/c?x=y, done",
         "source (see http://h/a?k=REDACTED). Then s3://b/c?x=REDACTED, done"},
        {"url=https://u:p@h/?t=1 next=http://h2/?t=2",
         "url=https://***@h/?t=REDACTED next=http://h2/?t=REDACTED"},
        {"<a href='http://h/?s=1'>", "<a href='http://h/?s=REDACTED'>"},
        {"line1\nhttps://h/?sig=1\nline3", "line1\nhttps://h/?sig=REDACTED\nline3"},
        {"xhttps://h/?q=1", "xhttps://h/?q=REDACTED"},
        {"a_b://u:p@h/?q=1", "a_b://***@h/?q=REDACTED"},
        {"GET /obj?X-Amz-Signature=abc HTTP/1.1", "GET /obj?X-Amz-Signature=REDACTED HTTP/1.1"},
        {"path=/p?secretword", "path=/p?REDACTED"},
        {"/a;jsessionid=1/b?c=2", "/a;jsessionid=REDACTED/b?c=REDACTED"},
    };
    check_text(c, sizeof c / sizeof c[0]);
}

Test(redact, known_parameters_and_headers_outside_uris)
{
    static const tcase c[] = {
        {"Authorization: AWS4-HMAC-SHA256 Credential=AKIA/x, Signature=ff",
         "Authorization: REDACTED"},
        {"> authorization:Bearer abc\nHost: h", "> authorization: REDACTED\nHost: h"},
        {"x-amz-security-token: IQoJb3JpZ2lu\r\n", "x-amz-security-token: REDACTED\r\n"},
        {"Cookie: a=b; c=d", "Cookie: REDACTED"},
        {"Set-Cookie: s=1", "Set-Cookie: REDACTED"},
        {"Proxy-Authorization : Basic dXNlcg==", "Proxy-Authorization : REDACTED"},
        {"sent token=abc and X-Amz-Signature=def, then",
         "sent token=REDACTED and X-Amz-Signature=REDACTED, then"},
        {"AWS4-HMAC-SHA256 Credential=AKIA/20260101/s3, SignedHeaders=host, Signature=ab",
         "AWS4-HMAC-SHA256 Credential=REDACTED, SignedHeaders=host, Signature=REDACTED"},
        {"obj?sig=1&se=2&x=3", "obj?sig=REDACTED&se=REDACTED&x=3"},
        {"password=hunter2", "password=REDACTED"},
        /* the same letters inside another word, or short Azure names outside a query: kept */
        {"mytoken=1 signatures=2 se=3 usersig=4", "mytoken=1 signatures=2 se=3 usersig=4"},
        {"Authorization:", "Authorization:"},
    };
    check_text(c, sizeof c / sizeof c[0]);
}

Test(redact, text_without_secrets_is_unchanged)
{
    static const char *const same[] = {
        "",
        "partition s0-p3: worker w1 lost after 3 attempts",
        "file:///data/in.csv: line 4: not valid UTF-8",
        "s3://bucket/prefix/part-00001.jsonl: HTTP 404",
        "ts=2026-01-01 level=info msg=\"ok\" key=value",
        "a:b:c // not a url :// nor this",
        "http://",
        "nothing ://h here",
        "price 3.5?! yes",
        "ratio=0.5 rows=10 stage=clean",
        "http://h:8080/a/b.csv, then https://h/x.",
        "\xff\xfe\x01 binary \x80",
    };
    char out[512];
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        sb_redact_text(same[i], out, sizeof out);
        cr_expect_str_eq(out, same[i], "case %zu", i);
    }
}

Test(redact, a_uri_on_its_own)
{
    char out[256];
    sb_redact_uri("http://u:p@h:1/o?X-Amz-Signature=S&v=1", out, sizeof out);
    cr_assert_str_eq(out, "http://***@h:1/o?X-Amz-Signature=REDACTED&v=REDACTED");
    sb_redact_uri("/o?a=1", out, sizeof out);
    cr_assert_str_eq(out, "/o?a=REDACTED");
    sb_redact_uri("relative/path.csv", out, sizeof out);
    cr_assert_str_eq(out, "relative/path.csv");
    sb_redact_uri(NULL, out, sizeof out);
    cr_assert_str_eq(out, "");
}

Test(redact, header_lines_of_n_bytes)
{
    char out[256];
    const char *hdr = "x-amz-security-token: SECRET\r\nHost: h\r\n";
    size_t n = sb_redact_header(hdr, 30, out, sizeof out);
    cr_assert_str_eq(out, "x-amz-security-token: REDACTED\r\n");
    cr_assert_eq(n, strlen(out));
    sb_redact_header("PUT /b/k?uploadId=U&partNumber=1 HTTP/1.1", 41, out, sizeof out);
    cr_assert_str_eq(out, "PUT /b/k?uploadId=REDACTED&partNumber=REDACTED HTTP/1.1");
}

/* Every cut of the output: NUL-terminated within cap, a prefix of the whole, never a secret. */
Test(redact, every_cut_is_a_prefix_without_the_secret)
{
    const char *in = "failed: \"https://us:PWSECRET@h/p?X-Amz-Signature=SIGSECRET&a=b\" "
                     "Authorization: HDRSECRET\nand token=TOKSECRET end";
    char whole[512];
    size_t full = sb_redact_text(in, whole, sizeof whole);
    cr_assert_gt(full, 0);
    for (size_t cap = 0; cap <= full + 2; cap++) {
        char out[512];
        memset(out, 'Z', sizeof out);
        size_t n = sb_redact_text(in, out, cap);
        if (cap == 0) {
            cr_assert_eq(n, 0);
            cr_assert_eq(out[0], 'Z', "cap 0 writes nothing");
            continue;
        }
        cr_assert_lt(n, cap, "cap %zu", cap);
        cr_assert_eq(out[n], '\0', "cap %zu", cap);
        cr_assert_eq(strncmp(out, whole, n), 0, "cap %zu: %s", cap, out);
        cr_assert_eq(out[cap], 'Z', "cap %zu: wrote past the buffer", cap);
        cr_assert_null(strstr(out, "SECRET"), "cap %zu: %s", cap, out);
    }
    cr_assert_null(strstr(whole, "SECRET"), "%s", whole);
    cr_assert_not_null(strstr(whole, "https://***@h/p?X-Amz-Signature=REDACTED&a=REDACTED"));
}

/* Random bytes drawn from an alphabet rich in the characters the scanner looks at: never a
 * crash or a write past cap, and a secret planted in a query never shows. */
Test(redact, random_text_never_overruns_or_leaks)
{
    static const char alpha[] = "ab:/?&=#@;.,\"' \n\\hHtTpPsS3xX-_%[]()\x01\xff";
    static const char *const plants[] = {
        "https://h/p?k=", "http://u:", "token=", "sig=", "Authorization: "};
    unsigned seed = 12345;
    for (int round = 0; round < 20000; round++) {
        char in[200], out[160];
        size_t n = 0, len = (size_t)(rand_r(&seed) % 150);
        while (n < len)
            in[n++] = alpha[rand_r(&seed) % (sizeof alpha - 1)];
        in[n] = '\0';
        int plant = round % 2 == 0;
        if (plant) { /* a secret after a trigger, then a space or the end */
            const char *p = plants[rand_r(&seed) % 5];
            char tmp[200];
            int w = snprintf(tmp, sizeof tmp, "%.40s %s%s%s", in, p, "QQSECRETQQ",
                             p[0] == 'h' && p[7] == 'u' ? "@h/x" : "");
            cr_assert_lt(w, (int)sizeof tmp);
            memcpy(in, tmp, (size_t)w + 1);
        }
        size_t cap = (size_t)(rand_r(&seed) % sizeof out);
        memset(out, 'Z', sizeof out);
        size_t r = sb_redact_text(in, out, cap);
        if (cap > 0) {
            cr_assert_lt(r, cap);
            cr_assert_eq(out[r], '\0');
        }
        if (cap < sizeof out)
            cr_assert_eq(out[cap], 'Z', "round %d: wrote past cap %zu", round, cap);
        if (plant && cap > 0)
            cr_assert_null(strstr(out, "QQSECRETQQ"), "round %d: %s -> %s", round, in, out);
    }
}
