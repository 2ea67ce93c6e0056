/* s3.h — extras of the s3 backend (s3.c) beyond store.h, for tests and tools. Configuration
 * comes from the standard AWS environment (see aws.h and docs/pipeline-api.md "S3").
 *
 * Fault injection (tests only): when SB_S3_TEST_STOP_FILE names a file, the first process to
 * finish uploading a multipart part after the file appears removes it and stops itself with
 * SIGSTOP, its upload still open, so a test can kill a worker exactly mid-upload. One file, one
 * stop: a test creates it again for the next one. Unset (always, outside tests), it costs one
 * getenv per uploaded part.
 */
#ifndef SB_IO_S3_H
#define SB_IO_S3_H

#include "core/err.h"

/* Forgets the configuration read from the environment, so the next request reads it again
 * (tests; not while other threads make requests). */
void sb_io_s3_reset_config(void);

/* Creates a bucket (PUT /bucket on the configured endpoint); an existing one of ours is fine.
 * 0, or -1 + err. */
int sb_io_s3_make_bucket(const char *bucket, sb_err *err);

#endif
