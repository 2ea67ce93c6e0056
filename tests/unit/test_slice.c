/* worker/slice: a thread gets the scheduler slice it asks for (clamped by the kernel), only that
 * thread (threads and processes it starts get the default), and keeps its policy and nice value.
 * The slices are read back from the kernel, which reports them from Linux 6.12 on; on older kernels
 * these tests check only that the calls succeed and change nothing else. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "worker/slice.h"

/* Whether the kernel has custom slices for fair threads (6.12 and later). */
static int kernel_has_slices(void)
{
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2)
        return 0;
    return major > 6 || (major == 6 && minor >= 12);
}

static int64_t slice_now(void)
{
    sb_err err = {0};
    int64_t us = sb_slice_get(&err);
    cr_assert_geq(us, 0, "sb_slice_get: %s", err.msg);
    return us;
}

static void *other_thread(void *arg)
{
    *(int64_t *)arg = slice_now();
    return NULL;
}

Test(slice, the_thread_gets_the_slice_it_asks_for_and_only_that_thread)
{
    int64_t before = slice_now();
    sb_err err = {0};
    cr_assert_eq(sb_slice_set(300, &err), 0, "%s", err.msg);
    int64_t after = slice_now(), other = -1;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, other_thread, &other), 0);
    pthread_join(t, NULL);
    if (!kernel_has_slices())
        return;
    cr_assert_eq(after, 300, "slice %lld us after asking for 300", (long long)after);
    cr_assert_neq(before, 300, "the default slice is not what the test asks for");
    cr_assert_eq(other, before, "a thread it starts has the default slice, %lld us, not %lld",
                 (long long)before, (long long)other);
}

Test(slice, the_kernel_clamps_a_slice_below_100_us)
{
    sb_err err = {0};
    cr_assert_eq(sb_slice_set(1, &err), 0, "%s", err.msg);
    if (kernel_has_slices())
        cr_assert_eq(slice_now(), 100);
}

Test(slice, the_policy_and_nice_value_are_kept)
{
    struct sched_param p = {.sched_priority = 0};
    cr_assert_eq(sched_setscheduler(0, SCHED_BATCH, &p), 0);
    pid_t tid = gettid();
    cr_assert_eq(setpriority(PRIO_PROCESS, (id_t)tid, 5), 0);
    sb_err err = {0};
    cr_assert_eq(sb_slice_set(200, &err), 0, "%s", err.msg);
    cr_assert_eq(sched_getscheduler(0) & ~SCHED_RESET_ON_FORK, SCHED_BATCH);
    cr_assert_eq(getpriority(PRIO_PROCESS, (id_t)tid), 5);
    if (kernel_has_slices())
        cr_assert_eq(slice_now(), 200);
}
