/* utf8.h — strict UTF-8 validation for utf8 columns and column names of partition blobs.
 *
 * Strict means RFC 3629: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
 * U+10FFFF, no truncated sequences. ASCII runs are checked eight bytes at a time.
 *
 * Memory: no allocation; the caller owns the bytes.
 */
#ifndef SB_PARTITION_UTF8_H
#define SB_PARTITION_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when p[0..n) is valid UTF-8. When it is not and bad_at is not NULL, *bad_at receives the
 * offset of the first byte of the invalid sequence. */
bool sb_utf8_valid(const void *p, size_t n, size_t *bad_at);

#endif
