/* num.h — strict decimal numbers inside larger strings (partition ids, split ranges, checkpoint
 * parts): digits only, no sign, no leading zeros, no overflow past a maximum.
 *
 * Nothing is allocated.
 */
#ifndef SB_CORE_NUM_H
#define SB_CORE_NUM_H

#include <stdint.h>

/* Reads the number starting at *p (which must be a digit; "0" alone is allowed, "07" is not)
 * and not above max. On success stores it in *out, moves *p past the digits and returns 0;
 * otherwise returns -1 and leaves *p and *out alone. */
int sb_num_parse_dec(const char **p, uint64_t max, uint64_t *out);

#endif
