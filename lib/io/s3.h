/* s3.h — extras of the s3 backend (s3.c) beyond store.h, for tests and tools. Configuration
 * comes from the standard AWS environment (see aws.h and docs/pipeline-api.md "S3").
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
