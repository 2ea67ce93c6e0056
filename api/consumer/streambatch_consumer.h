/* streambatch_consumer.h — reading a stream:// sink from a trainer: the C consumer API.
 *
 * `streambatch run FILE --serve HOST:PORT` prints {"address": ..., "tokenFile": ...}. A trainer
 * rank opens the stream with that address and token, its rank, the world size, the epoch and a
 * batch size, then calls sbc_next() until it returns 0: each call gives one batch of rows, as
 * columns (numbers as fixed-width arrays, bytes and strings as int64 offsets + data, tensors as
 * fixed-width rows). Behind it: Control.StreamNext deals this rank its next slices of the output
 * (docs/training.md, "Splits"), Data.Fetch reads the partition from the worker holding it. A
 * batch counts as consumed once the next one is asked for (sbc_next again, or the end of the
 * epoch): then the controller hears of it, the worker frees what is consumed, and the pipeline
 * goes on.
 *
 * Restarts. A rank whose process died opens the stream again with the same rank and epoch: it
 * gets the rows it had not consumed (the batch it was working on, and what it held), then the
 * rest of its share; what it had consumed does not come again, and no other rank gets any of
 * it. Its counts go on (drop_last's batches, LB-BSP's iterations). The old consumer, if still
 * alive, is refused from then on.
 *
 * Batches. Every batch has batch_size rows but, without drop_last, an epoch's last one. With
 * drop_last every rank of the epoch yields the same number of batches (a rank waits, where it
 * must, for the others to be dealt as many rows). local_shuffle_buffer (rows) shuffles the rows
 * within a window of that many; with `seeded`, the order is a pure function of (seed, epoch,
 * rank) given the same deal.
 *
 * Balance. With balance = SBC_BALANCE_LBBSP the ranks' batch sizes follow their speeds (LB-BSP):
 * each rank times its steps (from a batch's return to the next sbc_next call, or what
 * sbc_report_step says), the controller sizes each iteration's batches in proportion to the
 * ranks' speeds with the global batch (world_size * batch_size) constant, and sbc_rows() says how
 * many rows this batch has. Sizes change only between iterations; with drop_last every rank
 * still yields the same number of batches.
 *
 * Prefetch. Once sbc_next returns a batch, a thread of the stream asks for and fetches the
 * next batch's rows (or the shuffle window's) while the trainer works, so that the next
 * sbc_next finds them ready: one batch ahead and one slice past it (the asks sbc_next made
 * itself before, in the same order), and none of them acknowledged until
 * yielded and the batch after them asked for (a restart still gets them). sbc_next, and
 * sbc_close, stop it first (a fetch in flight completes).
 *
 * Ownership: the stream owns everything it returns; a batch and its columns stay valid until
 * the next sbc_next() or sbc_close(). One thread at a time per stream. Links against the
 * streambatch build (libstreambatch_consumer.so, `make consumer`); Python's
 * streambatch.iter_batches wraps this library with ctypes.
 */
#ifndef STREAMBATCH_CONSUMER_H
#define STREAMBATCH_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sbc_stream sbc_stream;

typedef struct sbc_options {
    const char *address;    /* the controller, "host:port" (--serve's printed address) */
    const char *token;      /* the stream's token (64 hex); NULL: read from token_file */
    const char *token_file; /* the printed tokenFile */
    const char *tls_dir;    /* mutual TLS (tls.crt, tls.key, ca.crt), as the run's --tls-dir;
                               NULL: plaintext */
    uint32_t rank, world_size, epoch, batch_size;
    int drop_last;
    uint32_t local_shuffle_buffer; /* rows; 0: the order they were dealt */
    int seeded;
    uint64_t seed;
    int timeout_ms;  /* longest wait for the controller or a fetch (0: 600000) */
    int balance;     /* SBC_BALANCE_EQUAL (0) or SBC_BALANCE_LBBSP; every rank the same */
    int no_prefetch; /* 1: fetch only inside sbc_next (no thread); 0: prefetch, see above */
} sbc_options;

enum { SBC_BALANCE_EQUAL = 0, SBC_BALANCE_LBBSP = 1 };

/* Column types (the values of the engine's partition format). */
enum {
    SBC_BOOL = 1, /* one byte per row, 0 or 1 */
    SBC_INT8 = 2,
    SBC_INT16 = 3,
    SBC_INT32 = 4,
    SBC_INT64 = 5,
    SBC_UINT8 = 6,
    SBC_UINT16 = 7,
    SBC_UINT32 = 8,
    SBC_UINT64 = 9,
    SBC_FLOAT32 = 10,
    SBC_FLOAT64 = 11,
    SBC_BINARY = 12,     /* offsets (rows + 1, int64) into values */
    SBC_UTF8 = 13,       /* like binary, valid UTF-8 */
    SBC_FIXED_LIST = 14, /* list_size values of child_type per row */
};

/* NULL with the reason in err (a bad option, an unreadable token file). Nothing is contacted yet.
 */
sbc_stream *sbc_open(const sbc_options *o, char *err, size_t errlen);
/* The next batch: 1 (sbc_rows/sbc_col_* describe it), 0 the epoch is over, -1 an error
 * (sbc_error: the pipeline failed, a rank disagreed, a worker could not be read, a timeout). */
int sbc_next(sbc_stream *s);
const char *sbc_error(const sbc_stream *s);
/* The step time of the batch sbc_next returned last (LB-BSP's input), when the time between
 * batches is not the step's: a trainer that waits in an all-reduce reports its compute time.
 * From the first call on, the stream stops timing steps itself. */
void sbc_report_step(sbc_stream *s, double seconds);
void sbc_close(sbc_stream *s);

/* The current batch. */
size_t sbc_rows(const sbc_stream *s);
size_t sbc_ncols(const sbc_stream *s);
const char *sbc_col_name(const sbc_stream *s, size_t col);
int sbc_col_type(const sbc_stream *s, size_t col);
int sbc_col_child_type(const sbc_stream *s, size_t col); /* SBC_FIXED_LIST */
uint32_t sbc_col_list_size(const sbc_stream *s, size_t col);
/* Fixed-width columns: rows * width bytes; binary/utf8: the bytes the offsets index. */
const void *sbc_col_values(const sbc_stream *s, size_t col);
size_t sbc_col_values_len(const sbc_stream *s, size_t col);
const int64_t *sbc_col_offsets(const sbc_stream *s, size_t col); /* binary/utf8; else NULL */
const uint8_t *sbc_col_valid(const sbc_stream *s, size_t col); /* 1 byte per row; NULL: no nulls */

/* What the stream did so far: rows yielded, rows dealt to it, partitions fetched, and the
 * bytes fetched. */
void sbc_stats(const sbc_stream *s, uint64_t *rows, uint64_t *dealt, uint64_t *fetches,
               uint64_t *bytes);

/* The Data.Fetch streams it opened for them: a peer's partitions of a few KiB dealt together
 * come in one stream, so this is at most the partitions fetched. */
uint64_t sbc_streams(const sbc_stream *s);

#ifdef __cplusplus
}
#endif

#endif
