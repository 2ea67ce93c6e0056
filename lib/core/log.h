/* log.h — structured one-line logs: `ts=... level=info msg="..." key=value ...` to stderr.
 *
 * sb_log() takes a level, a message and then alternating key/value C strings ending in NULL:
 *     sb_log(SB_LOG_INFO, "worker registered", "worker", id, "pool", pool, NULL);
 * Values containing spaces, quotes or '=' are quoted. Every value (the message too) goes
 * through sb_redact_text (core/redact.h) first: no URI's userinfo or query values, no signing
 * parameter and no Authorization header reach a log. Thread-safe (one write(2) per line).
 * The minimum level comes from SB_LOG_LEVEL (debug|info|warn|error; default info) or
 * sb_log_set_level(). SB_LOG_FORMAT=json switches to one JSON object per line.
 */
#ifndef SB_CORE_LOG_H
#define SB_CORE_LOG_H

typedef enum { SB_LOG_DEBUG = 0, SB_LOG_INFO, SB_LOG_WARN, SB_LOG_ERROR } sb_log_level;

void sb_log_set_level(sb_log_level level);
int sb_log_enabled(sb_log_level level);
void sb_log(sb_log_level level, const char *msg, ...) __attribute__((sentinel));

#endif
