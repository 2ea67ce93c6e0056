/* workers.c — the local backend (workers.h): `streambatch run`'s worker processes. Owns their
 * fork/exec, per-worker spill dirs and log files under the run dir, the monitor thread that
 * reaps and respawns them, and the sb_backend table the controller drives them through. */
#include "controller/local/workers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "rpc/auth.h"

typedef struct {
    char pool[16];
    uint32_t slots, accelerators, index, generation;
    pid_t pid;
    char id[64];
    int retired; /* taken out by set_pool_size: not respawned */
} proc;

struct sb_local {
    sb_local_config cfg;
    char *worker_bin, *worker_gpu_bin, *controller, *run_dir; /* worker_gpu_bin may be NULL */
    char *tls_dir, *tls_name;                                 /* NULL: plaintext */
    char auth_token[SB_RPC_TOKEN_HEX + 1], auth_ctl[SB_RPC_DIGEST_HEX + 1];
    /* the GPUs the workers with accelerators share out (CUDA_VISIBLE_DEVICES entries, or
     * ordinals of /dev/nvidiaN): worker i of such a pool sees only devices[i % ndevices] */
    char devices[16][64];
    size_t ndevices;
    proc *procs;
    size_t nprocs;
    pthread_mutex_t mu;
    pthread_t monitor;
    int stop;
    uint64_t started;
    /* the workers' child processes (exec's), whose memory counts as theirs: found by a /proc
     * scan at most once a second, under mu */
    pid_t kids[256];
    size_t nkids;
    struct timespec kids_at;
};

/* The GPUs of this machine the run may use: CUDA_VISIBLE_DEVICES's entries when it is set (a
 * set but empty one: none), else 0..N-1 for the driver's device nodes /dev/nvidia0..N-1. */
static void devices_find(sb_local *l)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v != NULL) {
        while (*v != '\0' && l->ndevices < sizeof l->devices / sizeof *l->devices) {
            size_t n = strcspn(v, ",");
            if (n > 0 && n < sizeof l->devices[0])
                snprintf(l->devices[l->ndevices++], sizeof l->devices[0], "%.*s", (int)n, v);
            v += n + (v[n] == ',');
        }
        return;
    }
    for (int i = 0; i < 16; i++) {
        char path[32];
        snprintf(path, sizeof path, "/dev/nvidia%d", i);
        if (access(path, F_OK) != 0)
            break;
        snprintf(l->devices[l->ndevices++], sizeof l->devices[0], "%d", i);
    }
}

static int spawn(sb_local *l, proc *p, sb_err *err)
{
    if (p->generation == 0)
        snprintf(p->id, sizeof p->id, "%s-%u", p->pool, p->index);
    else
        snprintf(p->id, sizeof p->id, "%s-%u-r%u", p->pool, p->index, p->generation);
    char dir[1024], log[1100], slots[16], budget[32], accel[16];
    snprintf(dir, sizeof dir, "%s/%s", l->run_dir, p->id);
    snprintf(log, sizeof log, "%s/%s.log", l->run_dir, p->id);
    snprintf(slots, sizeof slots, "%u", p->slots);
    snprintf(accel, sizeof accel, "%u", p->accelerators);
    snprintf(budget, sizeof budget, "%llu", (unsigned long long)l->cfg.store_budget);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return sb_err_set(err, "cannot create %s: %s", dir, strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return sb_err_set(err, "fork: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, STDIN_FILENO);
        char *bin = p->accelerators > 0 && l->worker_gpu_bin ? l->worker_gpu_bin : l->worker_bin;
        char *argv[20] = {bin,    "--controller",   l->controller, "--id",
                          p->id,  "--pool",         p->pool,       "--slots",
                          slots,  "--accelerators", accel,         "--store-budget",
                          budget, "--spill-dir",    dir,           NULL};
        if (l->tls_dir != NULL) {
            argv[15] = "--tls-dir";
            argv[16] = l->tls_dir;
            argv[17] = "--tls-server-name";
            argv[18] = l->tls_name;
        }
        if (setenv(SB_AUTH_ENV_TOKEN, l->auth_token, 1) != 0 ||
            setenv(SB_AUTH_ENV_CONTROLLER_SHA256, l->auth_ctl, 1) != 0)
            _exit(127);
        /* a worker with accelerators sees one GPU, its own, and so do its exec processes */
        if (p->accelerators > 0 && l->ndevices > 0 &&
            setenv("CUDA_VISIBLE_DEVICES", l->devices[p->index % l->ndevices], 1) != 0)
            _exit(127);
        execv(bin, argv);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    p->pid = pid;
    l->started++;
    return 0;
}

static void *monitor_main(void *arg)
{
    sb_local *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        int stop = l->stop;
        for (size_t i = 0; i < l->nprocs && !stop; i++) {
            proc *p = &l->procs[i];
            if (p->pid <= 0)
                continue;
            int st;
            pid_t r = waitpid(p->pid, &st, WNOHANG);
            if (r != p->pid)
                continue;
            char why[128];
            if (WIFSIGNALED(st))
                snprintf(why, sizeof why, "process killed by signal %d", WTERMSIG(st));
            else
                snprintf(why, sizeof why, "process exited with status %d", WEXITSTATUS(st));
            char id[64];
            snprintf(id, sizeof id, "%s", p->id);
            p->pid = 0;
            sb_log(SB_LOG_WARN, "worker process ended", "worker", id, "why", why, NULL);
            pthread_mutex_unlock(&l->mu);
            if (l->cfg.on_exit)
                l->cfg.on_exit(l->cfg.ud, id, why);
            pthread_mutex_lock(&l->mu);
            if (l->cfg.respawn && !l->stop && !p->retired && p->generation < l->cfg.max_respawns) {
                p->generation++;
                sb_err err;
                if (spawn(l, p, &err) != 0)
                    sb_log(SB_LOG_ERROR, "respawn failed", "worker", id, "error", err.msg, NULL);
            }
        }
        pthread_mutex_unlock(&l->mu);
        if (stop)
            return NULL;
        usleep(20000);
    }
}

sb_local *sb_local_start(const sb_local_config *cfg, sb_err *err)
{
    sb_local *l = calloc(1, sizeof *l);
    if (l == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    l->cfg = *cfg;
    if (l->cfg.max_respawns == 0)
        l->cfg.max_respawns = 10;
    pthread_mutex_init(&l->mu, NULL);
    l->worker_bin = strdup(cfg->worker_bin);
    l->worker_gpu_bin = cfg->worker_gpu_bin ? strdup(cfg->worker_gpu_bin) : NULL;
    l->controller = strdup(cfg->controller);
    l->run_dir = strdup(cfg->run_dir);
    if (cfg->tls_dir != NULL) {
        l->tls_dir = strdup(cfg->tls_dir);
        l->tls_name = strdup(cfg->tls_server_name ? cfg->tls_server_name : "streambatch");
        if (l->tls_dir == NULL || l->tls_name == NULL) {
            sb_err_set(err, "out of memory");
            goto fail;
        }
    }
    if (sb_rpc_hex64_check(cfg->auth_token, "the workers' token", err) != 0 ||
        sb_rpc_hex64_check(cfg->auth_controller_sha256, "the controller token's digest", err) != 0)
        goto fail;
    memcpy(l->auth_token, cfg->auth_token, sizeof l->auth_token);
    memcpy(l->auth_ctl, cfg->auth_controller_sha256, sizeof l->auth_ctl);
    devices_find(l);
    size_t total = 0;
    for (size_t i = 0; i < cfg->npools; i++)
        total += cfg->pools[i].workers;
    l->procs = calloc(total + 1, sizeof *l->procs);
    if (!l->worker_bin || !l->controller || !l->run_dir || !l->procs ||
        (cfg->worker_gpu_bin && !l->worker_gpu_bin)) {
        sb_err_set(err, "out of memory");
        goto fail;
    }
    if (access(l->worker_bin, X_OK) != 0) {
        sb_err_set(err, "worker binary %s: %s", l->worker_bin, strerror(errno));
        goto fail;
    }
    if (l->worker_gpu_bin && access(l->worker_gpu_bin, X_OK) != 0) {
        sb_err_set(err, "worker binary %s: %s", l->worker_gpu_bin, strerror(errno));
        goto fail;
    }
    if (mkdir(l->run_dir, 0755) != 0 && errno != EEXIST) {
        sb_err_set(err, "cannot create %s: %s", l->run_dir, strerror(errno));
        goto fail;
    }
    for (size_t i = 0; i < cfg->npools; i++)
        for (uint32_t k = 0; k < cfg->pools[i].workers; k++) {
            proc *p = &l->procs[l->nprocs++];
            snprintf(p->pool, sizeof p->pool, "%s", cfg->pools[i].pool);
            p->slots = cfg->pools[i].slots ? cfg->pools[i].slots : 1;
            p->accelerators = cfg->pools[i].accelerators;
            p->index = k;
            if (spawn(l, p, err) != 0)
                goto fail;
        }
    if (pthread_create(&l->monitor, NULL, monitor_main, l) != 0) {
        sb_err_set(err, "cannot start the monitor thread");
        l->stop = 1;
        goto fail_nomonitor;
    }
    return l;
fail:
    l->stop = 1;
fail_nomonitor:
    for (size_t i = 0; i < l->nprocs; i++)
        if (l->procs[i].pid > 0) {
            kill(l->procs[i].pid, SIGKILL);
            waitpid(l->procs[i].pid, NULL, 0);
        }
    free(l->procs);
    free(l->worker_bin);
    free(l->worker_gpu_bin);
    free(l->controller);
    free(l->run_dir);
    free(l->tls_dir);
    free(l->tls_name);
    pthread_mutex_destroy(&l->mu);
    free(l);
    return NULL;
}

size_t sb_local_count(const sb_local *l)
{
    return l->nprocs;
}

pid_t sb_local_pid(sb_local *l, size_t i, char *id, size_t idlen)
{
    pthread_mutex_lock(&l->mu);
    pid_t p = i < l->nprocs ? l->procs[i].pid : 0;
    if (id != NULL && i < l->nprocs)
        snprintf(id, idlen, "%s", l->procs[i].id);
    pthread_mutex_unlock(&l->mu);
    return p;
}

int sb_local_signal(sb_local *l, size_t i, int sig)
{
    pid_t p = sb_local_pid(l, i, NULL, 0);
    return p > 0 ? kill(p, sig) : -1;
}

uint64_t sb_local_started(const sb_local *l)
{
    return l->started;
}

static uint64_t statm_rss(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    unsigned long size, rss = 0;
    if (fscanf(f, "%lu %lu", &size, &rss) != 2)
        rss = 0;
    fclose(f);
    return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Refreshes l->kids (under l->mu): the processes whose parent is one of our workers. */
static void scan_kids(sb_local *l)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (l->kids_at.tv_sec != 0 && now.tv_sec - l->kids_at.tv_sec < 1)
        return;
    l->kids_at = now;
    l->nkids = 0;
    DIR *d = opendir("/proc");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && l->nkids < sizeof l->kids / sizeof *l->kids) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
        int ppid;
        if (rp == NULL || sscanf(rp + 1, " %*c %d", &ppid) != 1)
            continue;
        for (size_t i = 0; i < l->nprocs; i++)
            if (l->procs[i].pid > 0 && l->procs[i].pid == ppid) {
                l->kids[l->nkids++] = (pid_t)atoi(e->d_name);
                break;
            }
    }
    closedir(d);
}

uint64_t sb_local_rss(sb_local *l)
{
    uint64_t sum = 0;
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->nprocs; i++)
        if (l->procs[i].pid > 0)
            sum += statm_rss(l->procs[i].pid);
    scan_kids(l);
    for (size_t i = 0; i < l->nkids; i++)
        sum += statm_rss(l->kids[i]);
    pthread_mutex_unlock(&l->mu);
    return sum;
}

/* Reaps the workers that exited; returns how many are still alive. */
static int reap_exited(sb_local *l)
{
    int alive = 0;
    for (size_t i = 0; i < l->nprocs; i++) {
        if (l->procs[i].pid <= 0)
            continue;
        if (waitpid(l->procs[i].pid, NULL, WNOHANG) == l->procs[i].pid)
            l->procs[i].pid = 0;
        else
            alive++;
    }
    return alive;
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

void sb_local_stop(sb_local *l, int grace_ms)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->monitor, NULL);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* The run is over, so no partition a worker holds is needed: SIGUSR1 tells every worker so
     * at once (it leaves as one the controller told to exit does, without the linger a SIGTERM
     * asks for, serving late fetch readers of a pod being deleted). A worker busy with an
     * attempt would hear the controller's "exit" only at its next heartbeat, up to an interval
     * later; a stopped one (SIGSTOP) needs SIGCONT to handle any signal. Then give them a
     * moment before SIGTERM. */
    for (size_t i = 0; i < l->nprocs; i++)
        if (l->procs[i].pid > 0) {
            kill(l->procs[i].pid, SIGCONT);
            kill(l->procs[i].pid, SIGUSR1);
        }
    long quiet_ms = grace_ms < 1000 ? grace_ms : 1000;
    while (reap_exited(l) > 0 && ms_since(&t0) < quiet_ms)
        usleep(5000);
    for (size_t i = 0; i < l->nprocs; i++)
        if (l->procs[i].pid > 0) {
            kill(l->procs[i].pid, SIGCONT); /* a stopped worker cannot handle SIGTERM */
            kill(l->procs[i].pid, SIGTERM);
        }
    /* reap everything we ever started (the monitor has stopped) */
    for (;;) {
        if (reap_exited(l) == 0)
            break;
        if (ms_since(&t0) > grace_ms) {
            for (size_t i = 0; i < l->nprocs; i++)
                if (l->procs[i].pid > 0) {
                    kill(l->procs[i].pid, SIGKILL);
                    waitpid(l->procs[i].pid, NULL, 0);
                    l->procs[i].pid = 0;
                }
            break;
        }
        usleep(10000);
    }
    free(l->procs);
    free(l->worker_bin);
    free(l->worker_gpu_bin);
    free(l->tls_dir);
    free(l->tls_name);
    free(l->controller);
    free(l->run_dir);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static int local_set_pool_size(void *impl, const char *pool, uint32_t workers)
{
    sb_local *l = impl;
    pthread_mutex_lock(&l->mu);
    uint32_t have = 0;
    int rc = 0;
    uint32_t slots = 1, accelerators = 0;
    for (size_t i = 0; i < l->nprocs; i++) {
        proc *p = &l->procs[i];
        if (strcmp(p->pool, pool) != 0)
            continue;
        slots = p->slots;
        accelerators = p->accelerators;
        if (p->retired)
            continue;
        if (have < workers) {
            have++;
        } else {
            p->retired = 1;
            if (p->pid > 0)
                kill(p->pid, SIGTERM);
        }
    }
    while (have < workers) {
        proc *np = realloc(l->procs, (l->nprocs + 1) * sizeof *np);
        if (np == NULL) {
            rc = -1;
            break;
        }
        l->procs = np;
        proc *p = &l->procs[l->nprocs];
        memset(p, 0, sizeof *p);
        snprintf(p->pool, sizeof p->pool, "%s", pool);
        p->slots = slots;
        p->accelerators = accelerators;
        p->index = (uint32_t)l->nprocs;
        sb_err err;
        if (spawn(l, p, &err) != 0) {
            sb_log(SB_LOG_ERROR, "starting a worker failed", "pool", pool, "error", err.msg, NULL);
            rc = -1;
            break;
        }
        l->nprocs++;
        have++;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

static uint32_t local_pool_size(void *impl, const char *pool)
{
    sb_local *l = impl;
    uint32_t n = 0;
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->nprocs; i++)
        n += strcmp(l->procs[i].pool, pool) == 0 && l->procs[i].pid > 0 && !l->procs[i].retired;
    pthread_mutex_unlock(&l->mu);
    return n;
}

static uint64_t local_rss(void *impl)
{
    return sb_local_rss(impl);
}

static void local_stop(void *impl, int grace_ms)
{
    sb_local_stop(impl, grace_ms);
}

sb_backend sb_local_backend(sb_local *l)
{
    sb_backend b = {.impl = l,
                    .set_pool_size = local_set_pool_size,
                    .pool_size = local_pool_size,
                    .rss = local_rss,
                    .stop = local_stop};
    return b;
}
