/* count.c — a trainer's read loop in C over the consumer API (api/consumer/streambatch_consumer.h):
 * reads one epoch of a stream:// sink as one rank and prints, per column, its type and the rows
 * and bytes read, then the batch count. A stand-in for a non-Python training loop; stream-test
 * runs it against a real `streambatch run --serve`.
 *
 * usage: count ADDRESS TOKEN_FILE [RANK WORLD EPOCH BATCH] */
#include <stdio.h>
#include <stdlib.h>

#include "api/consumer/streambatch_consumer.h"

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 7) {
        fprintf(stderr, "usage: count ADDRESS TOKEN_FILE [RANK WORLD EPOCH BATCH]\n");
        return 2;
    }
    sbc_options o = {.address = argv[1],
                     .token_file = argv[2],
                     .rank = argc == 7 ? (uint32_t)atoi(argv[3]) : 0,
                     .world_size = argc == 7 ? (uint32_t)atoi(argv[4]) : 1,
                     .epoch = argc == 7 ? (uint32_t)atoi(argv[5]) : 0,
                     .batch_size = argc == 7 ? (uint32_t)atoi(argv[6]) : 256,
                     .drop_last = 0};
    char err[1024];
    sbc_stream *s = sbc_open(&o, err, sizeof err);
    if (s == NULL) {
        fprintf(stderr, "count: %s\n", err);
        return 1;
    }
    size_t batches = 0, rows = 0, bytes = 0;
    int rc;
    while ((rc = sbc_next(s)) == 1) { /* here a trainer would run its step on the columns */
        batches++;
        rows += sbc_rows(s);
        for (size_t c = 0; c < sbc_ncols(s); c++)
            bytes += sbc_col_values_len(s, c);
        if (batches == 1)
            for (size_t c = 0; c < sbc_ncols(s); c++)
                printf("column %s type %d\n", sbc_col_name(s, c), sbc_col_type(s, c));
    }
    if (rc < 0) {
        fprintf(stderr, "count: %s\n", sbc_error(s));
        sbc_close(s);
        return 1;
    }
    printf("rows %zu bytes %zu batches %zu\n", rows, bytes, batches);
    sbc_close(s);
    return 0;
}
