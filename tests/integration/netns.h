/* netns.h — several hosts on one machine, for integration tests: each node (the controller, each
 * worker) gets a network namespace of its own, joined by a veth pair to a bridge, with its own
 * address (10.77.<run>.<k>/24), so faults can be injected per link. Header-only like testutil.h
 * (one test binary per file); it shells out to iproute2 (`ip`), `iptables` (nf_tables) and
 * `nsenter`, and needs root.
 *
 *   sb_netns *net = sb_netns_new(why, sizeof why);          NULL (and why) when not permitted
 *   const char *ip = sb_netns_add(net, "w0");               a node: namespace, veth, address
 *   pid_t pid = sb_netns_spawn(net, "ctl", "cmd...", log); a background command in a node
 *   sb_netns_link(net, "w0", 0);                            link down (1: up again)
 *   sb_netns_block(net, "ctl", "w0", 1);                    drop what ctl sends to w0 (one way)
 *   sb_netns_impair(net, "w0", 5, 50, 10);                  5% loss, 50 +- 10 ms on what w0 gets
 *   sb_netns_free(net);                                     everything torn down
 *
 * Faults act where a packet arrives, so they are silent (no error to the sender, as on a real
 * network): link down is `ip link set <host side of the veth> down`; block is an iptables DROP
 * in the receiver's INPUT chain; impair is a netem qdisc on the host side of the receiver's veth
 * when the kernel has sch_netem, and otherwise tests/helpers/sb_netem (an NFQUEUE program with
 * the same loss/delay/jitter model) on the receiver's INPUT chain. Impairing every node degrades
 * every packet once.
 *
 * Teardown survives a failed or killed test: sb_netns_new starts a guardian process (its own
 * session, so a process-group kill does not reach it) that waits for the test process to close
 * a pipe or die, then kills whatever still runs in this run's namespaces, deletes them and the
 * bridge. Names carry a prefix unique to the run (sbn<pid><counter>), so parallel runs do not
 * collide. */
#ifndef SB_NETNS_H
#define SB_NETNS_H

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../unit/testutil.h"

#define SB_NETNS_MAX_NODES 16
#define SB_NETNS_MAX_PROCS 32

typedef struct {
    char name[16];    /* the role: "ctl", "w0" */
    char ns[32];      /* namespace: <prefix>-<name> */
    char host_if[16]; /* host side of the veth: <prefix><k> */
    char ip[16];
    pid_t netem_pid; /* sb_netem helper, when impaired without sch_netem */
    char netem_log[PATH_MAX];
    int impaired; /* 0 none, 1 netem qdisc, 2 sb_netem */
} sb_netns_node;

typedef struct {
    char prefix[16];
    char bridge[16];
    int subnet; /* 10.77.<subnet>.0/24 */
    sb_netns_node nodes[SB_NETNS_MAX_NODES];
    size_t n;
    pid_t procs[SB_NETNS_MAX_PROCS]; /* sb_netns_spawn'ed, each leading its own process group */
    size_t nprocs;
    pid_t guard;
    int guard_fd;
    char impair_how[160]; /* "netem qdisc" or "sb_netem (NFQUEUE): <why no netem>" */
    unsigned long long netem_packets, netem_dropped; /* counted by sb_netem helpers stopped */
} sb_netns;

/* Runs a printf-formatted shell command; its exit status (output into out if not NULL, else
 * discarded). */
static inline int sb_netns_sh(char **out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int sb_netns_sh(char **out, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *o = NULL;
    char full[4200];
    snprintf(full, sizeof full, "{ %s ; } 2>&1", cmd);
    int rc = sb_test_run(full, &o);
    if (out != NULL)
        *out = o;
    else
        free(o);
    return rc;
}

static inline sb_netns_node *sb_netns_node_get(sb_netns *net, const char *name)
{
    for (size_t i = 0; i < net->n; i++)
        if (strcmp(net->nodes[i].name, name) == 0)
            return &net->nodes[i];
    return NULL;
}

/* The guardian: a shell in its own session that blocks on the pipe and cleans up at EOF. */
static inline pid_t sb_netns__guardian(const char *prefix, const char *bridge, int *wfd)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    char script[2048];
    snprintf(script, sizeof script,
             "cat >/dev/null; "
             "nss=$(ip netns list | awk '{print $1}' | grep '^%s-'); "
             "for ns in $nss; do for p in $(ip netns pids $ns); do kill -9 $p; done; done; "
             "for ns in $nss; do ip netns del $ns; done; "
             "ip link del %s 2>/dev/null; "
             "for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^%s'); "
             "do ip link del $l 2>/dev/null; done; exit 0",
             prefix, bridge, prefix);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setsid();
        dup2(p[0], STDIN_FILENO);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) {
            dup2(nul, STDOUT_FILENO);
            dup2(nul, STDERR_FILENO);
        }
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        execl("/bin/sh", "sh", "-c", script, (char *)NULL);
        _exit(127);
    }
    close(p[0]);
    fcntl(p[1], F_SETFD, FD_CLOEXEC);
    *wfd = p[1];
    return pid;
}

/* A new, empty network: the bridge and the guardian. NULL with why when this machine does not
 * allow it (not root, no network namespaces): callers must fail, not skip. */
static inline sb_netns *sb_netns_new(char *why, size_t whylen)
{
    static int counter;
    if (geteuid() != 0) {
        snprintf(why, whylen, "network namespaces need root (euid %d)", (int)geteuid());
        return NULL;
    }
    sb_netns *net = calloc(1, sizeof *net);
    if (net == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    net->guard = -1;
    net->guard_fd = -1;
    snprintf(net->prefix, sizeof net->prefix, "sbn%x%x", (unsigned)getpid() & 0xfffff,
             (unsigned)(counter++ & 0xf));
    snprintf(net->bridge, sizeof net->bridge, "%sbr", net->prefix);
    net->subnet = 1 + (int)((unsigned)getpid() % 250);
    net->guard = sb_netns__guardian(net->prefix, net->bridge, &net->guard_fd);
    if (net->guard < 0) {
        snprintf(why, whylen, "cannot start the guardian: %s", strerror(errno));
        free(net);
        return NULL;
    }
    char *out = NULL;
    int rc = sb_netns_sh(&out, "ip link add %s type bridge && ip link set %s up", net->bridge,
                         net->bridge);
    if (rc != 0) {
        snprintf(why, whylen, "cannot create bridge %s: %s", net->bridge, out);
        free(out);
        close(net->guard_fd);
        waitpid(net->guard, NULL, 0);
        free(net);
        return NULL;
    }
    free(out);
    return net;
}

/* Adds node `name` (at most 8 characters): its namespace, a veth pair to the bridge (eth0 inside)
 * and address 10.77.<subnet>.<k+1>. Returns the address, or NULL with why. */
static inline const char *sb_netns_add(sb_netns *net, const char *name, char *why, size_t whylen)
{
    if (net->n == SB_NETNS_MAX_NODES || strlen(name) > 8) {
        snprintf(why, whylen, "too many nodes or name too long");
        return NULL;
    }
    sb_netns_node *nd = &net->nodes[net->n];
    memset(nd, 0, sizeof *nd);
    snprintf(nd->name, sizeof nd->name, "%s", name);
    char pfx[sizeof net->prefix];
    memcpy(pfx, net->prefix, sizeof pfx);
    snprintf(nd->ns, sizeof nd->ns, "%s-%s", pfx, name);
    snprintf(nd->host_if, sizeof nd->host_if, "%s%zu", pfx, net->n);
    snprintf(nd->ip, sizeof nd->ip, "10.77.%d.%zu", net->subnet, net->n + 1);
    char *out = NULL;
    int rc = sb_netns_sh(&out,
                         "ip netns add %s && ip link add %s type veth peer name eth0 netns %s && "
                         "ip link set %s master %s && ip link set %s up && "
                         "ip -n %s link set lo up && ip -n %s addr add %s/24 dev eth0 && "
                         "ip -n %s link set eth0 up",
                         nd->ns, nd->host_if, nd->ns, nd->host_if, net->bridge, nd->host_if, nd->ns,
                         nd->ns, nd->ip, nd->ns);
    if (rc != 0) {
        snprintf(why, whylen, "cannot create node %s (ip netns add %s ...): %s", name, nd->ns, out);
        free(out);
        return NULL;
    }
    free(out);
    net->n++;
    return nd->ip;
}

/* "nsenter --net=/run/netns/<ns> --": a shell-command prefix that runs inside the node. */
static inline const char *sb_netns_in(sb_netns *net, const char *name)
{
    static char buf[4][128];
    static int slot;
    char *b = buf[slot++ % 4];
    sb_netns_node *nd = sb_netns_node_get(net, name);
    snprintf(b, 128, "nsenter --net=/run/netns/%s --", nd ? nd->ns : "NO-SUCH-NODE");
    return b;
}

/* Starts `cmd` (a shell command) inside node `name` in the background, stdout and stderr
 * appended to log; it leads a process group of its own. Returns its pid (-1 on failure). */
static inline pid_t sb_netns_spawn(sb_netns *net, const char *name, const char *cmd,
                                   const char *log)
{
    sb_netns_node *nd = sb_netns_node_get(net, name);
    if (nd == NULL || net->nprocs == SB_NETNS_MAX_PROCS)
        return -1;
    char ns[128];
    snprintf(ns, sizeof ns, "/run/netns/%s", nd->ns);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, STDIN_FILENO);
        char arg[160];
        snprintf(arg, sizeof arg, "--net=%s", ns);
        execlp("nsenter", "nsenter", arg, "--", "/bin/sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    net->procs[net->nprocs++] = pid;
    return pid;
}

/* Waits up to ms for a spawned process; its exit status (128+signal), or -1 if still running. */
static inline int sb_netns_wait(sb_netns *net, pid_t pid, int ms)
{
    for (int waited = 0;; waited += 20) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            for (size_t i = 0; i < net->nprocs; i++)
                if (net->procs[i] == pid)
                    net->procs[i] = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (r < 0 || waited >= ms)
            return -1;
        usleep(20000);
    }
}

/* Stops a spawned process group: SIGTERM, then SIGKILL after grace_ms. */
static inline void sb_netns_stop(sb_netns *net, pid_t pid, int grace_ms)
{
    if (pid <= 0)
        return;
    kill(-pid, SIGCONT);
    kill(-pid, SIGTERM);
    if (sb_netns_wait(net, pid, grace_ms) < 0) {
        kill(-pid, SIGKILL);
        sb_netns_wait(net, pid, 5000);
    }
}

/* The link of node `name` up (1) or down (0), at the host side of its veth. */
static inline int sb_netns_link(sb_netns *net, const char *name, int up)
{
    sb_netns_node *nd = sb_netns_node_get(net, name);
    if (nd == NULL)
        return -1;
    return sb_netns_sh(NULL, "ip link set %s %s", nd->host_if, up ? "up" : "down");
}

/* Drops (on = 1) or stops dropping (0) the packets `from` sends to `to`: a one-way partition.
 * Both directions: call it twice. */
static inline int sb_netns_block(sb_netns *net, const char *from, const char *to, int on)
{
    sb_netns_node *f = sb_netns_node_get(net, from), *t = sb_netns_node_get(net, to);
    if (f == NULL || t == NULL)
        return -1;
    return sb_netns_sh(NULL, "ip netns exec %s iptables -w -%c INPUT -i eth0 -s %s -j DROP", t->ns,
                       on ? 'I' : 'D', f->ip);
}

/* The sb_netem helper: $SB_BUILD_DIR/tests/helpers/sb_netem, else next to this test's build. */
static inline const char *sb_netns__netem_bin(void)
{
    static char path[PATH_MAX];
    const char *b = getenv("SB_BUILD_DIR");
    if (b != NULL) {
        snprintf(path, sizeof path, "%s/tests/helpers/sb_netem", b);
        return path;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    snprintf(path, sizeof path, "%s/../tests/helpers/sb_netem", dirname(exe));
    return path;
}

/* Loss (percent), delay and jitter (ms) on every packet node `name` receives; all zero: none.
 * A netem qdisc when the kernel has one, else sb_netem; net->impair_how says which. */
static inline int sb_netns_impair(sb_netns *net, const char *name, double loss_pct, int delay_ms,
                                  int jitter_ms, char *why, size_t whylen)
{
    sb_netns_node *nd = sb_netns_node_get(net, name);
    if (nd == NULL)
        return snprintf(why, whylen, "no node %s", name), -1;
    if (nd->impaired == 1)
        sb_netns_sh(NULL, "tc qdisc del dev %s root", nd->host_if);
    if (nd->impaired == 2) {
        sb_netns_sh(NULL, "ip netns exec %s iptables -w -D INPUT -i eth0 -j NFQUEUE --queue-num 0",
                    nd->ns);
        if (nd->netem_pid > 0) {
            kill(nd->netem_pid, SIGTERM);
            if (sb_netns_wait(net, nd->netem_pid, 3000) < 0) {
                kill(nd->netem_pid, SIGKILL);
                sb_netns_wait(net, nd->netem_pid, 3000);
            }
        }
        nd->netem_pid = 0;
        FILE *f = fopen(nd->netem_log, "r"); /* its last line: "packets N dropped N" */
        char line[256];
        unsigned long long p, d;
        while (f != NULL && fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "packets %llu dropped %llu", &p, &d) == 2) {
                net->netem_packets += p;
                net->netem_dropped += d;
            }
        if (f != NULL)
            fclose(f);
        unlink(nd->netem_log);
    }
    nd->impaired = 0;
    if (loss_pct <= 0 && delay_ms <= 0)
        return 0;
    char *out = NULL;
    int rc = sb_netns_sh(&out, "tc qdisc add dev %s root netem loss %g%% delay %dms %dms",
                         nd->host_if, loss_pct, delay_ms, jitter_ms);
    if (rc == 0) {
        free(out);
        nd->impaired = 1;
        snprintf(net->impair_how, sizeof net->impair_how, "netem qdisc");
        return 0;
    }
    size_t ol = strlen(out);
    while (ol > 0 && out[ol - 1] == '\n')
        out[--ol] = '\0';
    snprintf(net->impair_how, sizeof net->impair_how, "sb_netem over NFQUEUE (tc netem: %.100s)",
             out);
    free(out);
    const char *bin = sb_netns__netem_bin();
    if (access(bin, X_OK) != 0)
        return snprintf(why, whylen, "no netem qdisc and no %s", bin), -1;
    char cmd[PATH_MAX + 200];
    char *log = nd->netem_log;
    snprintf(cmd, sizeof cmd, "exec %s --queue 0 --loss %g --delay %d --jitter %d --seed %d", bin,
             loss_pct, delay_ms, jitter_ms, (int)getpid() + (int)(nd - net->nodes));
    const char *t = getenv("TMPDIR");
    snprintf(log, sizeof nd->netem_log, "%s/%s-netem.log", t && *t ? t : "/tmp", nd->ns);
    unlink(log);
    pid_t pid = sb_netns_spawn(net, name, cmd, log);
    if (pid < 0)
        return snprintf(why, whylen, "cannot start %s", bin), -1;
    nd->netem_pid = pid;
    nd->impaired = 2;
    for (int i = 0; i < 250; i++) { /* "ready" once the queue is bound */
        char *l = sb_test_sh_out("cat %s 2>/dev/null", log);
        int ready = strstr(l, "ready") != NULL;
        free(l);
        if (ready)
            break;
        if (sb_netns_wait(net, pid, 0) >= 0) {
            char *l2 = sb_test_sh_out("cat %s", log);
            snprintf(why, whylen, "sb_netem exited: %s", l2);
            free(l2);
            nd->netem_pid = 0;
            nd->impaired = 0;
            return -1;
        }
        usleep(20000);
    }
    rc = sb_netns_sh(&out, "ip netns exec %s iptables -w -A INPUT -i eth0 -j NFQUEUE --queue-num 0",
                     nd->ns);
    if (rc != 0) {
        snprintf(why, whylen, "iptables NFQUEUE in %s: %s", nd->ns, out);
        free(out);
        return -1;
    }
    free(out);
    return 0;
}

/* Tears everything down: spawned process groups (SIGTERM, then SIGKILL), then the guardian
 * deletes the namespaces, the veths and the bridge; waits for it. */
static inline void sb_netns_free(sb_netns *net)
{
    if (net == NULL)
        return;
    for (size_t i = 0; i < net->nprocs; i++)
        if (net->procs[i] > 0) {
            kill(-net->procs[i], SIGCONT);
            kill(-net->procs[i], SIGTERM);
        }
    for (size_t i = 0; i < net->nprocs; i++)
        if (net->procs[i] > 0 && sb_netns_wait(net, net->procs[i], 5000) < 0) {
            kill(-net->procs[i], SIGKILL);
            sb_netns_wait(net, net->procs[i], 5000);
        }
    for (size_t i = 0; i < net->n; i++)
        if (net->nodes[i].impaired == 2)
            unlink(net->nodes[i].netem_log);
    close(net->guard_fd);
    waitpid(net->guard, NULL, 0);
    free(net);
}

/* Whether anything of this prefix is left (namespaces or links): "" when clean. */
static inline char *sb_netns_leftovers(const char *prefix)
{
    return sb_test_sh_out("{ ip netns list; ip -o link show; } | grep -o '%s[^ :@]*' | sort -u",
                          prefix);
}

#endif
