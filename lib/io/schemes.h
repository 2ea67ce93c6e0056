/* schemes.h — the storage interface: the few operations the source planner, the split reader and
 * the sink need, over every backend. Formats (reader.c, sink.c, csv) never see a backend; they
 * call these functions with a URI and the scheme picks the backend:
 *
 *   "/abs/path" or file://...   local files (file.c)
 *   s3://bucket/key             S3 and S3-compatible servers (s3.c; configuration from the
 *                               standard AWS environment, see s3.h)
 *   http://..., https://...     read only (http.c)
 *
 * Operations:
 *   list        the objects a source URI names (a file, a "directory" = every object directly
 *               under a prefix, or a glob in the last component), sorted by URI, each with its
 *               size. Names whose last component starts with '.' or '_' are skipped unless
 *               SB_IO_LIST_ALL (the sink uses that to find its own files).
 *   stat        size of one object, or "absent".
 *   read        a sequential reader of bytes [off, end) of an object, streamed (never buffered
 *               whole). `end` is the size the planner saw: an object that is shorter now is an
 *               error ("changed since planning"), never a silent short read.
 *   write       an atomic write of a whole object: nothing is visible under the final name
 *               until commit succeeds; abort (or a crash) leaves no visible object (file: a
 *               temporary ".sbtmp-*" name then rename; S3: one PUT, or a multipart upload
 *               completed at commit and aborted on failure). Durable when committed on S3 (the
 *               PUT or the completion is answered once stored); not on file (no fsync: a
 *               machine crash may lose or cut a committed file) until sync.
 *   sync        makes every object committed under a directory URI durable (file: one
 *               syncfs(2) of its filesystem; S3: nothing to do).
 *   del         removes one object; an absent one is fine.
 *   move        publishes an object under another name of the same directory, replacing one
 *               there (file: rename(2), atomic; S3: a server-side CopyObject, then the source
 *               deleted; a backend without its own: a streamed copy, committed like a write,
 *               then the source deleted). The sink's staged parts (sink.h).
 *   cleanup     readies a directory URI for writes: removes the backend's own leftovers
 *               (file: .sbtmp-* files no live writer holds, see file.c; S3: unfinished
 *               multipart uploads, also a live writer's), e.g. of a killed worker, and creates
 *               the directory where the backend has directories (file).
 *
 * Errors name the URI and wrap the backend's cause (HTTP status, S3 error code, errno).
 * Network backends retry transient failures themselves (5xx, SlowDown, reset connections) with
 * jittered backoff (retry.h) before reporting one.
 *
 * Threads: every function may be called from any thread; handles (sb_io_rd, sb_io_wr) belong
 * to one thread at a time.
 *
 * Memory: sb_io_list() returns a malloc'd array the caller frees with sb_io_objs_free();
 * handles are freed by their close/commit/abort call; everything else is borrowed.
 */
#ifndef SB_IO_STORE_H
#define SB_IO_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"

/* One object of a listing. */
typedef struct sb_io_obj {
    char *uri;     /* full URI (file: an absolute path, without "file://"); owned */
    uint64_t size; /* bytes */
    int whole; /* cannot be read from an offset > 0 (the server ignores Range): plan one split */
} sb_io_obj;

/* sb_io_list() flags. */
#define SB_IO_LIST_ALL 1 /* keep names starting with '.' or '_' */
#define SB_IO_LIST_DIR 2 /* the URI is a directory/prefix even when an object has its name */

typedef struct sb_io_rd sb_io_rd;
typedef struct sb_io_wr sb_io_wr;

/* Receives the next bytes p[0..n) of a pushed read (sb_io_read_push); p is the backend's own
 * buffer, valid only during the call. 0 to go on; nonzero stops the read. */
typedef int (*sb_io_push_fn)(void *ud, const char *p, size_t n);

/* A backend: what store.c dispatches to. Every function follows the contract of the public
 * function of the same name below. `uri` is always of this backend's scheme. */
typedef struct sb_io_backend {
    const char *name; /* "file", "s3", "http" */
    int (*list)(const char *uri, int flags, sb_io_obj **out, size_t *n, sb_err *err);
    int (*stat)(const char *uri, uint64_t *size, int *exists, sb_err *err);
    int (*read_open)(const char *uri, uint64_t off, uint64_t end, sb_io_rd **out, sb_err *err);
    ssize_t (*read)(sb_io_rd *r, void *buf, size_t n, sb_err *err);
    void (*read_close)(sb_io_rd *r);
    /* optional: sb_io_read_push() (backends whose bytes arrive in their own buffers) */
    int (*read_push)(sb_io_rd *r, sb_io_push_fn fn, void *ud, sb_err *err);
    int (*write_open)(const char *uri, sb_io_wr **out, sb_err *err);
    int (*write)(sb_io_wr *w, const void *buf, size_t n, sb_err *err);
    int (*write_commit)(sb_io_wr *w, sb_err *err);
    void (*write_abort)(sb_io_wr *w);
    int (*del)(const char *uri, sb_err *err);
    int (*cleanup)(const char *dir_uri, sb_err *err);
    /* optional: NULL where the generic copy-then-delete serves (sb_io_move) */
    int (*move)(const char *from, const char *to, int *absent, sb_err *err);
    /* optional: NULL where a committed write is durable already (s3) */
    int (*sync)(const char *dir_uri, sb_err *err);
} sb_io_backend;

/* Every handle starts with its backend, so the public functions can dispatch on it. */
struct sb_io_rd {
    const sb_io_backend *be;
};
struct sb_io_wr {
    const sb_io_backend *be;
};

/* The backend of a URI: "/..." and file:// -> file, s3:// -> s3, http(s):// -> http. NULL + err
 * naming the URI for another scheme. `write` is nonzero when the caller will write (http has
 * no writes: an error). */
const sb_io_backend *sb_io_backend_of(const char *uri, int write, sb_err *err);

/* The storage location of a spec URI: file:// URIs become absolute paths (relative ones are
 * resolved against the working directory); others are copied. malloc'd, NULL + err. */
char *sb_io_uri_norm(const char *uri, sb_err *err);

/* dir + "/" + name without doubling the '/'; malloc'd, NULL on out of memory. */
char *sb_io_uri_join(const char *dir, const char *name);

/* The last path component of a URI (points into uri). */
const char *sb_io_uri_base(const char *uri);

int sb_io_list(const char *uri, int flags, sb_io_obj **out, size_t *n, sb_err *err);
void sb_io_objs_free(sb_io_obj *o, size_t n);

/* A listing being built by a backend. */
typedef struct sb_io_objlist {
    sb_io_obj *v;
    size_t n, cap;
} sb_io_objlist;
/* Appends an object; takes ownership of `uri` (malloc'd; freed on failure, and NULL is an
 * out-of-memory failure). 0, or -1 + err. */
int sb_io_objlist_add(sb_io_objlist *l, char *uri, uint64_t size, int whole, sb_err *err);
/* Ends a listing: when rc == 0 sorts it by URI and moves it to *out and *n, else frees it. Returns
 * rc. The list is empty afterwards. */
int sb_io_objlist_finish(sb_io_objlist *l, int rc, sb_io_obj **out, size_t *n);
int sb_io_stat(const char *uri, uint64_t *size, int *exists, sb_err *err);

int sb_io_read_open(const char *uri, uint64_t off, uint64_t end, sb_io_rd **out, sb_err *err);
/* Up to n bytes; 0 only at `end`. Short counts are normal (call again). -1 + err. */
ssize_t sb_io_read(sb_io_rd *r, void *buf, size_t n, sb_err *err);
/* Reads exactly n bytes (fewer only at `end`): the count, or -1 + err. */
ssize_t sb_io_read_full(sb_io_rd *r, void *buf, size_t n, sb_err *err);
void sb_io_read_close(sb_io_rd *r);
/* Nonzero when r can hand its bytes over in the backend's own buffers (s3: libcurl's receive
 * buffer), which saves the copy into a caller's buffer that sb_io_read() makes. */
int sb_io_read_can_push(const sb_io_rd *r);
/* Hands the rest of r's range to fn in order, in pieces of the backend's choosing (with the same
 * retries and checks as sb_io_read): 0 when the range is done, 1 when fn stopped the read (r is
 * then spent: only sb_io_read_close), -1 + err. Only where sb_io_read_can_push(r). */
int sb_io_read_push(sb_io_rd *r, sb_io_push_fn fn, void *ud, sb_err *err);

int sb_io_write_open(const char *uri, sb_io_wr **out, sb_err *err);
int sb_io_write(sb_io_wr *w, const void *buf, size_t n, sb_err *err);
/* Publishes the object and frees w (also on failure, after aborting). */
int sb_io_write_commit(sb_io_wr *w, sb_err *err);
/* Discards the object and frees w; NULL is fine. */
void sb_io_write_abort(sb_io_wr *w);
/* open + write + commit of a small object. */
int sb_io_put(const char *uri, const void *buf, size_t n, sb_err *err);

int sb_io_del(const char *uri, sb_err *err);
/* Moves object `from` to `to` (same backend; see "move" above). An absent `from` is an error
 * whose *absent is set (may be NULL). 0, or -1 + err. */
int sb_io_move(const char *from, const char *to, int *absent, sb_err *err);
int sb_io_cleanup(const char *dir_uri, sb_err *err);
/* Makes the objects committed under dir_uri durable (see "sync" above). 0, or -1 + err. */
int sb_io_sync(const char *dir_uri, sb_err *err);
/* How many fsync(2)/syncfs(2) calls the file backend made in this process (for tests). */
uint64_t sb_io_file_syncs(void);

/* The backends (file.c, s3.c, http.c). */
extern const sb_io_backend sb_io_backend_file;
extern const sb_io_backend sb_io_backend_s3;
extern const sb_io_backend sb_io_backend_http;

#endif
