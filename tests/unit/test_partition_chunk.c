/* Tests of lib/partition: crc32c (both paths), UTF-8 validation, the chunk iterator and the
 * chunk assembler (ordering, crc errors, resume, pieces, limits). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/chunk.h"
#include "partition/crc32c.h"
#include "partition/partition.h"
#include "partition/utf8.h"

/* Bit-at-a-time reference, independent of the library's tables. */
static uint32_t crc_ref(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static void known_vectors(crc_fn f)
{
    uint8_t buf[32];
    cr_assert_eq(f(0, "123456789", 9), 0xE3069283u);
    cr_assert_eq(f(0, "a", 1), 0xC1D04330u);
    cr_assert_eq(f(0, NULL, 0), 0);
    memset(buf, 0, 32);
    cr_assert_eq(f(0, buf, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
    memset(buf, 0xff, 32);
    cr_assert_eq(f(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    cr_assert_eq(f(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    cr_assert_eq(f(0, buf, 32), 0x113FDB5Cu);
    /* Chaining: pieces give the crc of the concatenation. */
    cr_assert_eq(f(f(0, "1234", 4), "56789", 5), 0xE3069283u);
}

Test(crc32c, known_vectors_portable)
{
    known_vectors(sb_crc32c_portable);
}

Test(crc32c, known_vectors_hw)
{
    if (!sb_crc32c_hw_available())
        cr_skip_test("this CPU has no SSE4.2");
    known_vectors(sb_crc32c_hw);
}

Test(crc32c, known_vectors_dispatch)
{
    known_vectors(sb_crc32c);
}

Test(crc32c, all_paths_agree_on_random_data)
{
    /* Lengths around the 3x256 and 3x8192 block sizes of the hardware loop, at every
     * misalignment, and split at random points (chaining). */
    size_t max = 3 * 8192 * 2 + 1000;
    uint8_t *buf = malloc(max + 8);
    for (size_t i = 0; i < max + 8; i++)
        buf[i] = (uint8_t)rng();
    size_t lens[] = {0,    1,    7,     8,     9,     63,    64,    767,   768,   769,
                     2000, 8191, 24575, 24576, 24577, 24583, 30000, 49151, 49152, 50152};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        for (size_t mis = 0; mis < 8; mis++) {
            size_t n = lens[li];
            const uint8_t *p = buf + mis;
            uint32_t want = crc_ref(0, p, n);
            cr_assert_eq(sb_crc32c_portable(0, p, n), want, "portable len %zu mis %zu", n, mis);
            cr_assert_eq(sb_crc32c_hw(0, p, n), want, "hw len %zu mis %zu", n, mis);
            cr_assert_eq(sb_crc32c(0, p, n), want);
            size_t cut = n ? (size_t)(rng() % n) : 0;
            cr_assert_eq(sb_crc32c(sb_crc32c(0, p, cut), p + cut, n - cut), want);
            cr_assert_eq(sb_crc32c_portable(sb_crc32c_hw(0, p, cut), p + cut, n - cut), want);
        }
    }
    free(buf);
}

Test(utf8, accepts_and_rejects)
{
    size_t at = 99;
    cr_assert(sb_utf8_valid("", 0, &at));
    cr_assert(sb_utf8_valid("plain ascii that is longer than sixteen bytes", 45, NULL));
    cr_assert(sb_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, NULL)); /* é € 😀 */
    cr_assert(sb_utf8_valid("\xf4\x8f\xbf\xbf", 4, NULL));                     /* U+10FFFF */
    cr_assert(sb_utf8_valid("\xed\x9f\xbf", 3, NULL));                         /* U+D7FF */
    struct {
        const char *s;
        size_t n, at;
    } bad[] = {
        {"abc\x80", 4, 3},                /* lone continuation */
        {"\xc0\xaf", 2, 0},               /* overlong '/' */
        {"\xc1\xbf", 2, 0},               /* overlong */
        {"\xe0\x80\xaf", 3, 0},           /* overlong 3-byte */
        {"\xf0\x80\x80\xaf", 4, 0},       /* overlong 4-byte */
        {"\xed\xa0\x80", 3, 0},           /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4, 0},       /* U+110000 */
        {"\xf5\x80\x80\x80", 4, 0},       /* F5 lead */
        {"0123456789abcdef\xc3", 17, 16}, /* truncated at the end after the fast path */
        {"0123456789abcdefghij\xe2\x82", 22, 20},
        {"ok \xe2\x28\xa1 no", 9, 3}, /* bad second byte */
        {"\xff", 1, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        at = 999;
        cr_assert(!sb_utf8_valid(bad[i].s, bad[i].n, &at), "case %zu accepted", i);
        cr_assert_eq(at, bad[i].at, "case %zu: bad at %zu", i, at);
    }
}

/* Reference: decode code points the long way. */
static bool ref_utf8(const uint8_t *s, size_t n)
{
    static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i], cp;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (i + k >= n)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

Test(utf8, matches_a_reference_decoder_on_random_bytes)
{
    size_t valid = 0;
    for (int iter = 0; iter < 200000; iter++) {
        uint8_t s[24];
        size_t n = rng() % sizeof s;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng();
            switch (r & 7) {
            case 0:
            case 1:
            case 2:
                s[i] = (uint8_t)((r >> 8) & 0x7f); /* ASCII */
                break;
            case 3:
                s[i] = (uint8_t)(0xC0 | ((r >> 8) & 0x37)); /* a lead byte C0..F7 */
                break;
            case 4:
                s[i] = (uint8_t)(r >> 8); /* anything */
                break;
            default:
                s[i] = (uint8_t)(0x80 | ((r >> 8) & 0x3f)); /* continuation */
            }
        }
        bool want = ref_utf8(s, n);
        valid += want;
        cr_assert_eq(sb_utf8_valid(s, n, NULL), want, "iteration %d", iter);
    }
    cr_assert_gt(valid, 1000, "the generator produces valid strings too (%zu)", valid);
}

/* ---- chunks --------------------------------------------------------------------------- */

/* A blob of `rows` binary records of varying length (so sizes are not round). */
static uint8_t *make_blob(size_t rows, size_t *len)
{
    sb_err err = {0};
    sb_field f = {.name = "record", .type = SB_TYPE_BINARY};
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &err);
    cr_assert_not_null(b, "%s", err.msg);
    uint8_t rec[300];
    for (size_t i = 0; i < rows; i++) {
        size_t n = i % 300;
        for (size_t k = 0; k < n; k++)
            rec[k] = (uint8_t)(i * 31 + k);
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, rec, n, &err), 0, "%s", err.msg);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    return blob;
}

Test(chunks, iterator_covers_blob)
{
    size_t len;
    uint8_t *blob = make_blob(20000, &len); /* ~3 MiB */
    cr_assert_gt(len, 2 * SB_PART_CHUNK_MAX);
    sb_part_chunk_iter it;
    sb_err err = {0};
    cr_assert_eq(sb_part_chunks_begin(&it, blob, len, 0, 0, &err), 0, "%s", err.msg);
    sb_part_chunk c;
    size_t n = 0, covered = 0;
    while (sb_part_chunks_next(&it, &c)) {
        cr_assert_eq(c.index, n);
        cr_assert_eq(c.offset, covered);
        cr_assert_eq((const uint8_t *)c.data, blob + covered);
        cr_assert(c.len >= 1 && c.len <= SB_PART_CHUNK_MAX);
        cr_assert_eq(c.crc, crc_ref(0, c.data, c.len));
        covered += c.len;
        n++;
    }
    cr_assert_eq(covered, len);
    cr_assert_eq(n, sb_part_chunk_count(len, 0));
    cr_assert_eq(n, (len + SB_PART_CHUNK_MAX - 1) / SB_PART_CHUNK_MAX);
    cr_assert(!sb_part_chunks_next(&it, &c), "stays at the end");
    /* Resuming mid-chunk: the first chunk runs to the next boundary and keeps its index. */
    size_t start = SB_PART_CHUNK_MAX + 12345;
    cr_assert_eq(sb_part_chunks_begin(&it, blob, len, 0, start, &err), 0);
    cr_assert(sb_part_chunks_next(&it, &c));
    cr_assert_eq(c.index, 1);
    cr_assert_eq(c.offset, start);
    cr_assert_eq(c.len, SB_PART_CHUNK_MAX - 12345);
    cr_assert(sb_part_chunks_next(&it, &c));
    cr_assert_eq(c.index, 2);
    cr_assert_eq(c.offset, 2 * SB_PART_CHUNK_MAX);
    /* Bad arguments. */
    cr_assert_eq(sb_part_chunks_begin(&it, blob, len, SB_PART_CHUNK_MAX + 1, 0, &err), -1);
    cr_assert_str_eq(err.msg, "partition chunks: chunk size 1048577 exceeds the maximum 1048576");
    cr_assert_eq(sb_part_chunks_begin(&it, blob, len, 0, len + 1, &err), -1);
    char want[120];
    snprintf(want, sizeof want, "partition chunks: start offset %zu is past the blob's %zu bytes",
             len + 1, len);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(sb_part_chunk_count(0, 100), 0);
    cr_assert_eq(sb_part_chunk_count(100, 100), 1);
    cr_assert_eq(sb_part_chunk_count(101, 100), 2);
    sb_part_free(blob);
}

/* Sends blob through an assembler in chunks of `cs` bytes, each split into pieces of at most
 * `piece` bytes; returns the assembled blob (caller frees). */
static uint8_t *assemble(sb_part_asm *a, const uint8_t *blob, size_t len, size_t cs, size_t piece)
{
    sb_part_chunk_iter it;
    sb_err err = {0};
    cr_assert_eq(sb_part_chunks_begin(&it, blob, len, cs, sb_part_asm_next_offset(a), &err), 0);
    sb_part_chunk c;
    sb_part_piece pieces[64];
    while (sb_part_chunks_next(&it, &c)) {
        size_t np = 0;
        for (size_t o = 0; o < c.len; o += piece) {
            cr_assert_lt(np, 64);
            pieces[np].p = (const uint8_t *)c.data + o;
            pieces[np].len = c.len - o < piece ? c.len - o : piece;
            np++;
        }
        cr_assert_eq(sb_part_asm_add(a, &c, pieces, np, &err), 0, "%s", err.msg);
    }
    cr_assert(sb_part_asm_done(a));
    size_t out_len;
    uint8_t *out = sb_part_asm_take(a, &out_len, &err);
    cr_assert_not_null(out, "%s", err.msg);
    cr_assert_eq(out_len, len);
    cr_assert_eq((uintptr_t)out % 64, 0);
    return out;
}

Test(assembler, roundtrip_pieces_and_small_chunks)
{
    size_t len;
    uint8_t *blob = make_blob(20000, &len);
    sb_err err = {0};
    sb_part_asm *a = sb_part_asm_new(64 << 20, &err);
    cr_assert_not_null(a);
    struct {
        size_t cs, piece;
    } cases[] = {{0, SB_PART_CHUNK_MAX}, {0, 100000}, {65536, 4096}, {7, 3}, {1000, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].piece == 1 && len > 100000)
            continue; /* covered by the smaller blob below */
        uint8_t *out = assemble(a, blob, len, cases[i].cs, cases[i].piece);
        cr_assert_eq(memcmp(out, blob, len), 0, "case %zu", i);
        sb_part_free(out);
        cr_assert_eq(sb_part_asm_total(a), 0, "take resets");
    }
    /* Tiny chunks (header learned across several chunks) and 1-byte pieces. */
    size_t slen;
    uint8_t *small = make_blob(30, &slen);
    uint8_t *out = assemble(a, small, slen, 5, 1);
    cr_assert_eq(memcmp(out, small, slen), 0);
    sb_part_free(out);
    /* The result opens as a batch. */
    out = assemble(a, blob, len, 0, 300000);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(out, len, &bt, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_rows(bt), 20000);
    sb_batch_close(bt);
    sb_part_free(out);
    sb_part_free(small);
    sb_part_free(blob);
    sb_part_asm_free(a);
}

Test(assembler, crc_mismatch_names_chunk_and_allows_refetch)
{
    size_t len;
    uint8_t *blob = make_blob(20000, &len);
    sb_err err = {0};
    sb_part_asm *a = sb_part_asm_new(64 << 20, &err);
    sb_part_chunk_iter it;
    sb_part_chunk c;
    sb_part_chunks_begin(&it, blob, len, 0, 0, &err);
    cr_assert(sb_part_chunks_next(&it, &c));
    cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0, "%s", err.msg);
    cr_assert(sb_part_chunks_next(&it, &c));
    /* Chunk 1 arrives damaged. */
    uint8_t *bad = malloc(c.len);
    memcpy(bad, c.data, c.len);
    bad[777] ^= 0x10;
    cr_assert_eq(sb_part_asm_add_bytes(a, &c, bad, &err), -1);
    char want[200];
    snprintf(want, sizeof want,
             "partition assembler: chunk 1 at offset 1048576: crc32c mismatch (chunk says 0x%08x, "
             "bytes give 0x%08x)",
             c.crc, crc_ref(0, bad, c.len));
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(sb_part_asm_next_offset(a), SB_PART_CHUNK_MAX, "nothing moved forward");
    /* A wrong crc claim is just as fatal. */
    sb_part_chunk lie = c;
    lie.crc ^= 1;
    cr_assert_eq(sb_part_asm_add_bytes(a, &lie, c.data, &err), -1);
    /* Re-fetched intact, it is accepted and the rest follows. */
    cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0, "%s", err.msg);
    while (sb_part_chunks_next(&it, &c))
        cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0, "%s", err.msg);
    size_t out_len;
    const uint8_t *view = sb_part_asm_view(a, &out_len, &err);
    cr_assert_not_null(view);
    cr_assert_eq(memcmp(view, blob, len), 0);
    free(bad);
    sb_part_free(blob);
    sb_part_asm_free(a);
}

Test(assembler, resume_after_broken_stream)
{
    size_t len;
    uint8_t *blob = make_blob(20000, &len);
    sb_err err = {0};
    sb_part_asm *a = sb_part_asm_new(64 << 20, &err);
    /* First stream: 64 KiB chunks, breaks after 1.5 chunks of the second MiB... */
    sb_part_chunk_iter it;
    sb_part_chunk c;
    sb_part_chunks_begin(&it, blob, len, 65536, 0, &err);
    for (int i = 0; i < 20; i++) {
        cr_assert(sb_part_chunks_next(&it, &c));
        cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sb_part_asm_next_offset(a), 20 * 65536);
    cr_assert(!sb_part_asm_done(a));
    cr_assert_null(sb_part_asm_take(a, NULL, &err));
    char want[120];
    snprintf(want, sizeof want, "partition assembler: incomplete (1310720 of %zu bytes)", len);
    cr_assert_str_eq(err.msg, want);
    /* ...the re-fetch starts where the assembler says, with 1 MiB chunks (so the first one is
     * partial), and completes the blob. */
    uint8_t *out = assemble(a, blob, len, 0, SB_PART_CHUNK_MAX);
    cr_assert_eq(memcmp(out, blob, len), 0);
    sb_part_free(out);
    /* A re-fetch from an earlier chunk boundary overlaps verified bytes: also accepted. */
    sb_part_chunks_begin(&it, blob, len, 0, 0, &err);
    cr_assert(sb_part_chunks_next(&it, &c));
    cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0);
    cr_assert(sb_part_chunks_next(&it, &c));
    sb_part_chunk half = c;
    half.len = c.len / 2;
    half.crc = sb_crc32c(0, c.data, half.len);
    cr_assert_eq(sb_part_asm_add_bytes(a, &half, c.data, &err), 0, "%s", err.msg);
    sb_part_chunks_begin(&it, blob, len, 0, SB_PART_CHUNK_MAX, &err);
    while (sb_part_chunks_next(&it, &c))
        cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0, "%s", err.msg);
    out = sb_part_asm_take(a, NULL, &err);
    cr_assert_not_null(out);
    cr_assert_eq(memcmp(out, blob, len), 0);
    sb_part_free(out);
    sb_part_free(blob);
    sb_part_asm_free(a);
}

Test(assembler, rejects_bad_streams)
{
    size_t len;
    uint8_t *blob = make_blob(5000, &len);
    sb_err err = {0};
    sb_part_asm *a = sb_part_asm_new(len - 64, &err);
    sb_part_chunk c = {.index = 0, .offset = 0, .len = 4096, .crc = sb_crc32c(0, blob, 4096)};
    char want[200];
    /* Above the size limit. */
    cr_assert_eq(sb_part_asm_add_bytes(a, &c, blob, &err), -1);
    snprintf(want, sizeof want,
             "partition assembler: chunk 0 at offset 0: the partition is %zu bytes, more than "
             "the limit of %zu",
             len, len - 64);
    cr_assert_str_eq(err.msg, want);
    sb_part_asm_free(a);
    a = sb_part_asm_new(64 << 20, &err);
    /* A gap: chunk 1 first. */
    sb_part_chunk c1 = {.index = 1, .offset = 4096, .len = 4096, .crc = 0};
    cr_assert_eq(sb_part_asm_add_bytes(a, &c1, blob + 4096, &err), -1);
    cr_assert_str_eq(err.msg, "partition assembler: chunk 1 at offset 4096: expected offset 0 "
                              "(chunks must arrive in order)");
    /* Not a partition. */
    uint8_t junk[64] = "not a partition at all";
    sb_part_chunk cj = {.index = 0, .offset = 0, .len = 64, .crc = sb_crc32c(0, junk, 64)};
    cr_assert_eq(sb_part_asm_add_bytes(a, &cj, junk, &err), -1);
    cr_assert_str_eq(err.msg, "partition assembler: chunk 0 at offset 0: partition blob: bad "
                              "magic (not a partition blob)");
    /* Pieces that do not add up, empty and oversized chunks. */
    sb_part_piece pieces[2] = {{blob, 100}, {blob + 100, 100}};
    cr_assert_eq(sb_part_asm_add(a, &c, pieces, 2, &err), -1);
    cr_assert_str_eq(err.msg, "partition assembler: chunk 0 at offset 0: header says 4096 bytes "
                              "but the pieces hold 200");
    sb_part_chunk c0 = {.len = 0};
    cr_assert_eq(sb_part_asm_add(a, &c0, NULL, 0, &err), -1);
    cr_assert_str_eq(err.msg, "partition assembler: chunk 0 at offset 0: length 0 is not "
                              "between 1 and 1048576");
    /* A chunk running past the end of the partition. */
    cr_assert_eq(sb_part_asm_add_bytes(a, &c, blob, &err), 0, "%s", err.msg);
    uint8_t *big = calloc(1, len);
    memcpy(big, blob, len);
    sb_part_chunk cb = {
        .index = 1, .offset = 4096, .len = len - 4096 + 64, .crc = sb_crc32c(0, big, len - 4032)};
    cr_assert_eq(sb_part_asm_add_bytes(a, &cb, big, &err), -1);
    snprintf(want, sizeof want,
             "partition assembler: chunk 1 at offset 4096: %zu bytes run past the end of the "
             "%zu-byte partition",
             len - 4032, len);
    cr_assert_str_eq(err.msg, want);
    free(big);
    /* reset() drops the partial blob and keeps the buffer for the next one. */
    sb_part_asm_reset(a);
    cr_assert_eq(sb_part_asm_next_offset(a), 0);
    uint8_t *out = assemble(a, blob, len, 0, SB_PART_CHUNK_MAX);
    cr_assert_eq(memcmp(out, blob, len), 0);
    sb_part_free(out);
    sb_part_free(blob);
    sb_part_asm_free(a);
}

Test(assembler, reuses_its_buffer_between_partitions)
{
    size_t l1, l2;
    uint8_t *b1 = make_blob(3000, &l1), *b2 = make_blob(1000, &l2);
    sb_err err = {0};
    sb_part_asm *a = sb_part_asm_new(64 << 20, &err);
    sb_part_chunk_iter it;
    sb_part_chunk c;
    sb_part_chunks_begin(&it, b1, l1, 0, 0, &err);
    while (sb_part_chunks_next(&it, &c))
        cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0);
    size_t n;
    const void *v1 = sb_part_asm_view(a, &n, &err);
    cr_assert_eq(n, l1);
    cr_assert_eq(memcmp(v1, b1, l1), 0);
    sb_part_asm_reset(a);
    sb_part_chunks_begin(&it, b2, l2, 0, 0, &err);
    while (sb_part_chunks_next(&it, &c))
        cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0);
    const void *v2 = sb_part_asm_view(a, &n, &err);
    cr_assert_eq(v2, v1, "the smaller partition reuses the buffer");
    cr_assert_eq(n, l2);
    cr_assert_eq(memcmp(v2, b2, l2), 0);
    /* Once complete, more chunks are refused. */
    sb_part_chunks_begin(&it, b2, l2, 0, 0, &err);
    cr_assert(sb_part_chunks_next(&it, &c));
    c.offset = l2;
    cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), -1);
    sb_part_free(b1);
    sb_part_free(b2);
    sb_part_asm_free(a);
}

Test(assembler, bad_resent_chunk_never_touches_verified_bytes)
{
    size_t len;
    uint8_t *blob = make_blob(20000, &len);
    sb_err err = {0};
    sb_part_asm *a = sb_part_asm_new(64 << 20, &err);
    sb_part_chunk_iter it;
    sb_part_chunk c0, c;
    sb_part_chunks_begin(&it, blob, len, 0, 0, &err);
    cr_assert(sb_part_chunks_next(&it, &c0));
    /* Header phase: a damaged first chunk is refused before anything is learned from it. */
    uint8_t *bad = malloc(c0.len);
    memcpy(bad, c0.data, c0.len);
    bad[0] ^= 0xff;
    cr_assert_eq(sb_part_asm_add_bytes(a, &c0, bad, &err), -1);
    cr_assert(strstr(err.msg, "chunk 0 at offset 0: crc32c mismatch") != NULL, "%s", err.msg);
    cr_assert_eq(sb_part_asm_total(a), 0);
    cr_assert_eq(sb_part_asm_add_bytes(a, &c0, c0.data, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_part_asm_total(a), len);
    /* A damaged re-send of chunk 0 (already verified) is refused and leaves it intact. */
    bad[0] ^= 0xff;
    bad[500] ^= 1;
    cr_assert_eq(sb_part_asm_add_bytes(a, &c0, bad, &err), -1);
    cr_assert(strstr(err.msg, "chunk 0 at offset 0: crc32c mismatch") != NULL, "%s", err.msg);
    cr_assert_eq(sb_part_asm_next_offset(a), SB_PART_CHUNK_MAX);
    while (sb_part_chunks_next(&it, &c))
        cr_assert_eq(sb_part_asm_add_bytes(a, &c, c.data, &err), 0, "%s", err.msg);
    size_t n;
    const uint8_t *v = sb_part_asm_view(a, &n, &err);
    cr_assert_not_null(v);
    cr_assert_eq(memcmp(v, blob, len), 0);
    /* A NULL piece is refused. */
    sb_part_asm_reset(a);
    sb_part_piece p = {NULL, 10};
    sb_part_chunk c10 = {.len = 10};
    cr_assert_eq(sb_part_asm_add(a, &c10, &p, 1, &err), -1);
    cr_assert_str_eq(err.msg, "partition assembler: chunk 0 at offset 0: piece 0 is NULL");
    free(bad);
    sb_part_free(blob);
    sb_part_asm_free(a);
}
