/* aws.h — the AWS side of the s3 backend (s3.c): configuration and credentials from the
 * standard environment, web identity through STS AssumeRoleWithWebIdentity, query strings
 * encoded and sorted the way SigV4 signs them, and a small XML element extractor for S3 and
 * STS responses.
 *
 * Environment (read once, thread-safe; sb_aws_reset() makes the next call read it again):
 *   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN   static credentials
 *   AWS_REGION, AWS_DEFAULT_REGION                                region (default us-east-1)
 *   AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL                          custom endpoint: path-style
 *   AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME)   web identity
 *   AWS_ENDPOINT_URL_STS                                           STS endpoint
 * No key and no web identity: anonymous (unsigned) requests.
 *
 * Memory: strings returned by sb_aws_* are malloc'd and owned by the caller; sb_aws_creds
 * holds malloc'd strings freed by sb_aws_creds_free().
 */
#ifndef SB_IO_AWS_H
#define SB_IO_AWS_H

#include <stddef.h>
#include <time.h>

#include "core/err.h"

typedef struct sb_aws_creds {
    char *key, *secret, *token; /* key NULL: anonymous */
    time_t expires;             /* 0: static */
} sb_aws_creds;

/* Region ("us-east-1" default) and S3 endpoint (NULL: AWS virtual-host style; else without a
 * trailing '/'). Valid until sb_aws_reset(). */
const char *sb_aws_region(void);
const char *sb_aws_s3_endpoint(void);

/* Current credentials (copies), refreshing web identity credentials 5 minutes before they
 * expire. 0, or -1 + err. */
int sb_aws_credentials(sb_aws_creds *out, sb_err *err);
void sb_aws_creds_free(sb_aws_creds *c);

/* Forgets the configuration (tests; not while other threads use it). */
void sb_aws_reset(void);

/* s URI-encoded per SigV4: everything but A-Z a-z 0-9 - _ . ~ as %XX (and '/' kept when
 * keep_slash). malloc'd or NULL. */
char *sb_aws_uri_encode(const char *s, int keep_slash);

/* "k1=v1&k2=v2" of n name/value pairs (kv[2i], kv[2i+1]; a NULL value is skipped), sorted by
 * encoded name, names and values encoded. malloc'd or NULL. */
char *sb_aws_query(const char *const *kv, size_t n);

/* The next <tag>...</tag> element of xml at or after *pos: its text, entities decoded,
 * malloc'd in *out; *pos moves past it. 1 found, 0 not found, -1 out of memory. */
int sb_aws_xml_next(const char *xml, const char *tag, const char **pos, char **out);
/* The first <tag> element's text, or NULL. */
char *sb_aws_xml_get(const char *xml, const char *tag);

/* The STS AssumeRoleWithWebIdentity query (sorted, encoded) and response parsing. */
char *sb_aws_sts_query(const char *role_arn, const char *session, const char *token);
int sb_aws_sts_parse(const char *xml, sb_aws_creds *out, sb_err *err);

#endif
