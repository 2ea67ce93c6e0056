/* quantity.h — Kubernetes resource quantities ("64Mi", "1.5Gi", "500m", "2", "1e3") and Go
 * durations ("300ms", "1h30m", "0") parsed exactly as Kubernetes and Go parse them.
 *
 * Quantity grammar (k8s.io/apimachinery resource.ParseQuantity):
 *   [+-] digits [. digits] suffix,  suffix = "" | Ki Mi Gi Ti Pi Ei | n u m k M G T P E
 *                                            | (e|E) [+-] digits
 * The value is exact (decimal arithmetic, no floating point). Conversions round up to the next
 * integer like Quantity.Value()/MilliValue() do, away from zero for negative values. Values that
 * do not fit an int64 after scaling are errors, not silently clamped.
 *
 * Duration grammar (Go time.ParseDuration): [+-] (number unit)+ | "0"; units ns us µs ms s m h.
 *
 * No allocation; errors are written to the caller's sb_err.
 */
#ifndef SB_SPEC_QUANTITY_H
#define SB_SPEC_QUANTITY_H

#include <stdint.h>

#include "core/err.h"

/* ceil(quantity) as an integer, e.g. bytes: "64Mi" -> 67108864, "1.5" -> 2. */
int sb_quantity_value(const char *s, int64_t *out, sb_err *err);

/* ceil(quantity * 1000), e.g. CPU millicores: "500m" -> 500, "2" -> 2000, "0.1" -> 100. */
int sb_quantity_milli(const char *s, int64_t *out, sb_err *err);

/* Nanoseconds of a Go duration string. */
int sb_duration_parse(const char *s, int64_t *out_ns, sb_err *err);

/* Formats bytes the way Kubernetes prints binary quantities when exact ("64Mi"), else as a
 * plain integer. Returns buf. */
const char *sb_quantity_format_bytes(int64_t bytes, char *buf, size_t len);

#endif
