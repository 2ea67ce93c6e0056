/* The operator's WorkerDrained Event: the message names the pod, the stage, its speed and the
 * pool's median (the drain itself is tested in test_sched.c and test_run_local.c). */
#include <criterion/criterion.h>
#include <string.h>

#include "controller/operator/operator_events.h"

Test(opr_drain, worker_drained_event_names_the_pod_its_speed_and_the_pool_median)
{
    char m[768];
    sb_operator_event_drained_message("wc-cpu-x7k2p", "cpu", "a", 24864.0, 114639.0, m, sizeof m);
    cr_expect_str_eq(m, "worker pod wc-cpu-x7k2p (pool cpu) drained: stage a ran at 0.025 MB/s "
                        "there, the pool's median is 0.115 MB/s; once its work is handed over "
                        "the pod is deleted and a new one replaces it");
    char small[16];
    sb_operator_event_drained_message("p", "cpu", "a", 1, 2, small, sizeof small);
    cr_expect_eq(strlen(small), sizeof small - 1, "truncated to the buffer");
}
