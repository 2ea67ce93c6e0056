/* redact.h — secrets out of every text streambatch shows: logs, errors, status and Events.
 *
 * A presigned URL carries its signature in the query string (X-Amz-Signature, X-Goog-Signature,
 * Azure's sig...), a URI may carry a password in its userinfo, and an HTTP request carries
 * Authorization and x-amz-security-token headers. These functions copy a text with all of them
 * replaced, so a message can still name the host and path that failed:
 *
 *   http://u:pw@h/o?X-Amz-Signature=abc&v=1 -> http://(***)@h/o?X-Amz-Signature=REDACTED&v=REDACTED
 *   GET https://h/p?sig=abc: HTTP 403        -> GET https://h/p?sig=REDACTED: HTTP 403
 *   Authorization: AWS4-HMAC-SHA256 ...      -> Authorization: REDACTED
 * ("(***)" is three stars, which cannot follow "//" in a C comment.)
 *
 * What is replaced: in every `scheme://` URI found anywhere in the text, the userinfo (by
 * "***") and the value of every query and fragment parameter (by "REDACTED"; a parameter
 * without '=' as a whole); outside URIs, the value of the known signing and credential
 * parameters (X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token, Signature, Credential,
 * sig, token, access_token, AWSAccessKeyId, X-Goog-Signature, X-Goog-Credential, password,
 * client_secret, api_key; Azure SAS sv, se, sp, sr, st, spr, skoid after '?', '&' or ';'), and
 * what follows a sensitive header name (Authorization, Proxy-Authorization,
 * x-amz-security-token, Cookie, Set-Cookie, X-Api-Key, ...) and ':' up to the end of the line.
 * A word starting with '/' that has a query (a request line's target, `GET /p?q HTTP/1.1`)
 * loses its query values too.
 *
 * The output goes to a caller-owned buffer of cap bytes: always NUL-terminated when cap > 0,
 * cut at cap - 1 bytes (a cut never shows part of a secret: secrets are never copied). The
 * functions return the length written. Input of any bytes is accepted; nothing is allocated,
 * nothing is global, so they are safe from any thread.
 */
#ifndef SB_CORE_REDACT_H
#define SB_CORE_REDACT_H

#include <stddef.h>

/* The word that replaces a secret value, and the one that replaces userinfo. */
#define SB_REDACTED "REDACTED"
#define SB_REDACTED_USER "***"

/* A text of any kind (a message, a log value): every URI, parameter and header in it. */
size_t sb_redact_text(const char *text, char *out, size_t cap);

/* The first n bytes of text (need not be NUL-terminated), as sb_redact_text. */
size_t sb_redact_textn(const char *text, size_t n, char *out, size_t cap);

/* One URI (the whole string is the URI, even without a scheme: "/p?x=1" loses its values). */
size_t sb_redact_uri(const char *uri, char *out, size_t cap);

/* One HTTP header line or request line of n bytes (libcurl's debug output): a sensitive
 * header keeps its name only, a request target loses its query values, the rest as text
 * (the same rules as sb_redact_textn, named for what the caller holds). */
size_t sb_redact_header(const char *line, size_t n, char *out, size_t cap);

#endif
