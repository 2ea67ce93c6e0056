/* streambatch_plugin.h — the C ABI of a streambatch plugin: native user code that a stage with
 * `op: plugin` loads into the worker (dlopen) and calls batch by batch. Batches cross the
 * boundary as Apache Arrow C Data Interface structs, with no copy in either direction on the
 * plugin's side. This header is the whole contract; it needs nothing but a C compiler.
 *
 *     stage: {op: plugin, args: {path: /plugins/libupper.so, config: {suffix: "!"}}}
 *
 * The shared object exports one function (STREAMBATCH_PLUGIN_ENTRY, or the name in
 * args.symbol) returning a pointer to a static sb_plugin_v1 table. The worker checks
 * abi_version first: a table of another version is refused with a message naming both.
 *
 * Batches. Input and output batches are struct arrays (format "+s") whose children are the
 * columns, named by their field names. Column formats: "b" bool, "c" "s" "i" "l" int8..64,
 * "C" "S" "I" "L" uint8..64, "f" float32, "g" float64, "z" binary, "u" utf8 (valid UTF-8 is
 * checked when the worker copies it, except in a column returned with the input's own values
 * and offsets buffers: its rows were checked already), "+w:N" fixed-size list of N numbers
 * (tensors); nullable columns carry a validity bitmap. Record data (jsonl, text) arrives as
 * one utf8 column "record".
 *
 * Memory and calls:
 *  - init() gets the stage's args.config as JSON text ("null" when absent) and returns a state
 *    pointer; one state serves one task at a time (never two threads at once); a worker may hold
 *    several states at once, one per slot, so plugin globals need their own locking.
 *  - process() gets the input batch, owned by the worker, read-only and valid only during the
 *    call (its buffers point into the worker's partition: zero copy in). It fills *out_schema and
 *    *out_array with a batch the worker owns from then on: the worker copies the rows into its
 *    output partition and calls both release callbacks. An empty result may be returned as
 *    length 0, or with out_array->release left NULL.
 *  - finish() is called once after the task's last input and may return a last batch the same
 *    way (a plugin that buffers); NULL when it never does.
 *  - A failure returns nonzero and writes a one-line message into err (errcap bytes, NUL-
 *    terminated); it fails the task, which is retried up to maxTaskRetries.
 *  - free() ends a state; called exactly once per successful init().
 *  - A crash inside the plugin kills the worker: the task is re-run on another worker and fails
 *    the pipeline after maxTaskRetries, naming the signal.
 */
#ifndef STREAMBATCH_PLUGIN_H
#define STREAMBATCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The Arrow C Data Interface, as the Arrow specification defines it (the guard lets Arrow's own
 * headers and this one coexist). */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#define STREAMBATCH_PLUGIN_ABI_VERSION 1
#define STREAMBATCH_PLUGIN_ENTRY "streambatch_plugin_v1"

typedef struct sb_plugin_v1 {
    uint32_t abi_version; /* STREAMBATCH_PLUGIN_ABI_VERSION */
    const char *name;     /* for messages */
    int (*init)(const char *config_json, void **state, char *err, size_t errcap);
    int (*process)(void *state, const struct ArrowSchema *in_schema,
                   const struct ArrowArray *in_array, struct ArrowSchema *out_schema,
                   struct ArrowArray *out_array, char *err, size_t errcap);
    int (*finish)(void *state, struct ArrowSchema *out_schema, struct ArrowArray *out_array,
                  char *err, size_t errcap);
    void (*free)(void *state);
} sb_plugin_v1;

/* The type of the exported entry point. */
typedef const sb_plugin_v1 *(*sb_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
