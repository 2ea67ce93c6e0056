/* pct.h — percent-decoding of the path in file:// and s3:// URIs (RFC 3986 section 2.1), so that
 * "file:///data/sp%20ace/" names the directory "sp ace" as every URI reader expects. Only
 * "%XX" with two hex digits is decoded; a '%' not followed by them, or a decoded NUL, is an
 * error. http(s) URLs are never decoded here: they go to the HTTP client as written.
 *
 * Memory: the caller's buffers; nothing is allocated.
 */
#ifndef SB_CORE_PCT_H
#define SB_CORE_PCT_H

#include <stddef.h>

/* Decodes in[0..n) into out (cap bytes, NUL-terminated). The decoded length, or -1 for bad
 * encoding (a stray '%', %00) or an out too small. out may be in (decoding only shrinks). */
long sb_pct_decode(const char *in, size_t n, char *out, size_t cap);

/* The value of hex digit c (0-9, a-f, A-F), or -1. */
int sb_hex_digit(int c);

/* Does the URI's path need decoding: a file:// or s3:// URI holding a '%'? */
int sb_pct_decodes(const char *uri);

#endif
