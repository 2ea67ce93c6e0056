/* s3.c — the s3 backend of the storage interface (see store.h). Not built yet: every operation
 * fails with a message naming the URI. */
#include "io/store.h"

static int nb(const char *uri, sb_err *err)
{
    return sb_err_set(err, "\"%.200s\": the s3 backend is not built yet", uri);
}
static int l(const char *uri, int flags, sb_io_obj **out, size_t *n, sb_err *err)
{
    (void)flags;
    (void)out;
    (void)n;
    return nb(uri, err);
}
static int st(const char *uri, uint64_t *size, int *exists, sb_err *err)
{
    (void)size;
    (void)exists;
    return nb(uri, err);
}
static int ro(const char *uri, uint64_t off, uint64_t end, sb_io_rd **out, sb_err *err)
{
    (void)off;
    (void)end;
    (void)out;
    return nb(uri, err);
}
static int wo(const char *uri, sb_io_wr **out, sb_err *err)
{
    (void)out;
    return nb(uri, err);
}
static int cl(const char *uri, sb_err *err)
{
    return nb(uri, err);
}
const sb_io_backend sb_io_backend_s3 = {
    .name = "s3",
    .list = l,
    .stat = st,
    .read_open = ro,
    .write_open = wo,
    .del = cl,
    .cleanup = cl,
};
