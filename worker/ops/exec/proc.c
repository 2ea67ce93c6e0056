/* proc.c — child processes over pipes (see proc.h): starting one with its argv, environment and
 * directory, pumping its stdin and stdout at once with poll (so neither side blocks the other on
 * a full pipe), keeping a tail of its stderr, and waiting for, killing and describing it. Owns
 * the child's pipes and its line buffer; the bytes fed in are the caller's. */

#include "worker/ops/exec/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAIL_KEEP 1024 /* stderr bytes kept */
#define TAIL_SHOW 200  /* stderr bytes shown in messages: the last lines that fit */
#define READ_CHUNK 65536
#define MAX_IOV 64

struct sb_proc {
    pid_t pid;
    int in, out, errfd; /* our ends; -1 once closed */
    bool reaped;
    int status;
    double cpu_at_exit; /* user + system seconds, from wait4 */
    char cmd[72];       /* argv[0] and the start of the arguments, for messages */
    char *lbuf;         /* stdout bytes not yet passed on as lines */
    size_t llen, lcap;
    char tail[TAIL_KEEP];
    size_t tlen;
    char tailmsg[TAIL_SHOW + 8];
    struct sb_proc *prev, *next; /* the live list */
};

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static sb_proc *live;

int64_t sb_proc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* ---- starting ---------------------------------------------------------------------------- */

/* The executable for argv0: as given when it has a '/', else the first executable regular file
 * of that name in PATH. */
static int resolve(const char *argv0, const char *const *env, char *out, size_t cap, sb_err *err)
{
    struct stat st;
    if (strchr(argv0, '/') != NULL) {
        if (strlen(argv0) >= cap)
            return sb_err_permanent(err, "command \"%.80s...\" is too long", argv0);
        strcpy(out, argv0);
        return 0;
    }
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    for (size_t i = 0; env[i] != NULL; i++)
        if (strncmp(env[i], "PATH=", 5) == 0)
            path = env[i] + 5;
    for (const char *d = path;;) {
        const char *colon = strchr(d, ':');
        size_t dl = colon ? (size_t)(colon - d) : strlen(d);
        int n = snprintf(out, cap, "%.*s%s%s", (int)dl, d, dl ? "/" : "", argv0);
        if (n > 0 && (size_t)n < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
            access(out, X_OK) == 0)
            return 0;
        if (colon == NULL)
            break;
        d = colon + 1;
    }
    /* permanent: a retry would find the same PATH (exec's either framing fails the run at once) */
    return sb_err_permanent(err, "command \"%.80s\" not found in PATH (%.200s)", argv0, path);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child(const char *exe, const char *const *argv, const char *const *env, const char *cwd,
                  int in, int out, int errfd, int status, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(errfd, 2) < 0)
        _exit(127);
    /* every other descriptor but the status pipe (close-on-exec) goes */
    if (syscall(SYS_close_range, 3u, (unsigned)status - 1, 0) != 0 ||
        syscall(SYS_close_range, (unsigned)status + 1, ~0u, 0) != 0) {
        for (int fd = 3; fd < 65536; fd++)
            if (fd != status)
                close(fd);
    }
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int what = 1;
    if (cwd == NULL || chdir(cwd) == 0) {
        what = 2;
        execve(exe, (char *const *)argv, (char *const *)env);
    }
    int msg[2] = {what, errno};
    ssize_t w = write(status, msg, sizeof msg);
    (void)w;
    _exit(127);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int sb_proc_start(const char *const *argv, const char *const *env, const char *cwd, sb_proc **out,
                  sb_err *err)
{
    *out = NULL;
    if (argv == NULL || argv[0] == NULL || argv[0][0] == '\0')
        return sb_err_set(err, "empty command");
    char exe[PATH_MAX];
    if (resolve(argv[0], env, exe, sizeof exe, err) != 0)
        return -1;
    sb_proc *p = calloc(1, sizeof *p);
    if (p == NULL)
        return sb_err_set(err, "out of memory");
    p->in = p->out = p->errfd = -1;
    size_t cl = 0;
    for (size_t i = 0; argv[i] != NULL && cl + 1 < sizeof p->cmd; i++) {
        int n = snprintf(p->cmd + cl, sizeof p->cmd - cl, "%s%s", i ? " " : "", argv[i]);
        cl = n < 0 ? sizeof p->cmd : cl + (size_t)n;
    }
    if (cl >= sizeof p->cmd)
        memcpy(p->cmd + sizeof p->cmd - 4, "...", 4);
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, pst[2] = {-1, -1};
    if (pipe2(pin, O_CLOEXEC) != 0 || pipe2(pout, O_CLOEXEC) != 0 || pipe2(perr, O_CLOEXEC) != 0 ||
        pipe2(pst, O_CLOEXEC) != 0) {
        int e = errno;
        int *fds[] = {&pin[0], &pin[1], &pout[0], &pout[1], &perr[0], &perr[1], &pst[0], &pst[1]};
        for (size_t i = 0; i < 8; i++)
            close_fd(fds[i]);
        free(p);
        return sb_err_set(err, "%s: pipe: %s", argv[0], strerror(e));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child(exe, argv, env, cwd, pin[0], pout[1], perr[1], pst[1], parent);
    int fork_errno = errno;
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    close(pst[1]);
    p->in = pin[1];
    p->out = pout[0];
    p->errfd = perr[0];
    if (pid < 0) {
        close(pst[0]);
        sb_proc_free(p);
        return sb_err_set(err, "%s: fork: %s", argv[0], strerror(fork_errno));
    }
    p->pid = pid;
    int msg[2];
    ssize_t r;
    do
        r = read(pst[0], msg, sizeof msg);
    while (r < 0 && errno == EINTR);
    close(pst[0]);
    if (r == (ssize_t)sizeof msg) {
        sb_proc_kill(p);
        sb_proc_free(p);
        if (msg[0] == 1)
            return sb_err_permanent(err, "working directory \"%.200s\": %s", cwd, strerror(msg[1]));
        return sb_err_permanent(err, "command \"%.200s\" could not start: %s", exe,
                                strerror(msg[1]));
    }
    if (set_nonblock(p->in) != 0 || set_nonblock(p->out) != 0 || set_nonblock(p->errfd) != 0) {
        int e = errno;
        sb_proc_free(p);
        return sb_err_set(err, "%s: fcntl: %s", argv[0], strerror(e));
    }
    pthread_mutex_lock(&live_mu);
    p->next = live;
    if (live)
        live->prev = p;
    live = p;
    pthread_mutex_unlock(&live_mu);
    *out = p;
    return 0;
}

/* ---- stderr tail ------------------------------------------------------------------------- */

static void tail_add(sb_proc *p, const char *b, size_t n)
{
    if (n >= TAIL_KEEP) {
        memcpy(p->tail, b + n - TAIL_KEEP, TAIL_KEEP);
        p->tlen = TAIL_KEEP;
        return;
    }
    if (p->tlen + n > TAIL_KEEP) {
        size_t drop = p->tlen + n - TAIL_KEEP;
        memmove(p->tail, p->tail + drop, p->tlen - drop);
        p->tlen -= drop;
    }
    memcpy(p->tail + p->tlen, b, n);
    p->tlen += n;
}

/* Reads what stderr has now; closes it at its end. */
static void drain_stderr(sb_proc *p)
{
    char buf[4096];
    while (p->errfd >= 0) {
        ssize_t r = read(p->errfd, buf, sizeof buf);
        if (r > 0) {
            tail_add(p, buf, (size_t)r);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            close_fd(&p->errfd);
        break;
    }
}

const char *sb_proc_stderr_tail(sb_proc *p)
{
    size_t n = p->tlen;
    while (n > 0 && (p->tail[n - 1] == '\n' || p->tail[n - 1] == '\r' || p->tail[n - 1] == ' '))
        n--;
    size_t start = n > TAIL_SHOW ? n - TAIL_SHOW : 0;
    if (start > 0) {
        const char *nl = memchr(p->tail + start, '\n', n - start);
        if (nl != NULL && (size_t)(nl - p->tail) + 1 < n)
            start = (size_t)(nl - p->tail) + 1;
        while (start < n && ((unsigned char)p->tail[start] & 0xC0) == 0x80)
            start++; /* never begin inside a UTF-8 sequence */
    }
    size_t k = 0;
    for (size_t i = start; i < n && k < TAIL_SHOW; i++) {
        unsigned char c = (unsigned char)p->tail[i];
        p->tailmsg[k++] = c == '\n' ? '|' : (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    p->tailmsg[k] = '\0';
    return p->tailmsg;
}

/* ---- ending ------------------------------------------------------------------------------ */

static void unlist(sb_proc *p)
{
    pthread_mutex_lock(&live_mu);
    if (p->prev)
        p->prev->next = p->next;
    else if (live == p)
        live = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
    pthread_mutex_unlock(&live_mu);
}

static bool reap(sb_proc *p, int flags)
{
    if (p->reaped)
        return true;
    if (p->pid <= 0)
        return true;
    pid_t r;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    do
        r = wait4(p->pid, &p->status, flags, &ru);
    while (r < 0 && errno == EINTR);
    if (r == p->pid)
        p->cpu_at_exit = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->reaped = true;
        unlist(p);
    }
    return p->reaped;
}

bool sb_proc_alive(sb_proc *p)
{
    return !reap(p, WNOHANG);
}

void sb_proc_kill(sb_proc *p)
{
    if (p == NULL || p->pid <= 0 || p->reaped)
        return;
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
    reap(p, 0);
}

const char *sb_proc_describe(sb_proc *p, char *buf, size_t cap)
{
    if (!reap(p, WNOHANG))
        snprintf(buf, cap, "is running");
    else if (WIFEXITED(p->status))
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(p->status));
    else if (WIFSIGNALED(p->status))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(p->status),
                 strsignal(WTERMSIG(p->status)));
    else
        snprintf(buf, cap, "ended (wait status %d)", p->status);
    return buf;
}

void sb_proc_close_stdin(sb_proc *p)
{
    close_fd(&p->in);
}

int sb_proc_wait(sb_proc *p, int64_t deadline_ms, sb_err *err)
{
    close_fd(&p->in);
    while (!reap(p, WNOHANG)) {
        drain_stderr(p);
        if (sb_proc_now_ms() >= deadline_ms) {
            sb_proc_kill(p);
            drain_stderr(p);
            const char *t = sb_proc_stderr_tail(p);
            return sb_err_set(err, "%s: did not exit after its output ended; killed%s%s", p->cmd,
                              *t ? "; stderr: " : "", t);
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* what it wrote to stderr before exiting (its write end is closed now, unless a grandchild
     * still holds it) */
    for (int i = 0; i < 50 && p->errfd >= 0; i++) {
        struct pollfd pf = {p->errfd, POLLIN, 0};
        if (poll(&pf, 1, 2) <= 0)
            break;
        drain_stderr(p);
    }
    if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0)
        return 0;
    char how[96];
    const char *t = sb_proc_stderr_tail(p);
    return sb_err_set(err, "%s: %s%s%s", p->cmd, sb_proc_describe(p, how, sizeof how),
                      *t ? "; stderr: " : "", t);
}

void sb_proc_free(sb_proc *p)
{
    if (p == NULL)
        return;
    close_fd(&p->in);
    sb_proc_kill(p);
    unlist(p);
    close_fd(&p->out);
    close_fd(&p->errfd);
    free(p->lbuf);
    free(p);
}

/* ---- the pump ---------------------------------------------------------------------------- */

/* An error about the child, with how it ended (when it did) and its stderr tail. Kills it. */
static int child_err(sb_proc *p, sb_err *err, const char *what)
{
    sb_proc_kill(p);
    drain_stderr(p);
    char how[96];
    const char *t = sb_proc_stderr_tail(p);
    return sb_err_set(err, "%s: %s (it %s)%s%s", p->cmd, what, sb_proc_describe(p, how, sizeof how),
                      *t ? "; stderr: " : "", t);
}

/* writev() without SIGPIPE (EPIPE instead), whatever the process's disposition of SIGPIPE:
 * blocked in this thread for the call, a SIGPIPE it raised consumed. */
static ssize_t write_nosigpipe(int fd, const struct iovec *iov, int cnt)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t w = writev(fd, iov, cnt);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}

/* Passes complete lines of lbuf to io->line (or its bytes to io->bytes). 1 when it asked to
 * stop, -1 on error. */
static int split_lines(sb_proc *p, sb_proc_io *io, sb_err *err)
{
    size_t at = 0;
    int rc = 0;
    while (io->bytes != NULL && at < p->llen) {
        size_t used = 0;
        rc = io->bytes(io->ud, (const uint8_t *)p->lbuf + at, p->llen - at, &used, err);
        at += used < p->llen - at ? used : p->llen - at;
        if (rc != 0 || used == 0)
            break;
    }
    while (io->bytes == NULL && at < p->llen) {
        char *nl = memchr(p->lbuf + at, '\n', p->llen - at);
        if (nl == NULL)
            break;
        size_t n = (size_t)(nl - (p->lbuf + at));
        rc = io->line(io->ud, p->lbuf + at, n, err);
        at += n + 1;
        if (rc != 0)
            break;
    }
    if (at > 0) {
        memmove(p->lbuf, p->lbuf + at, p->llen - at);
        p->llen -= at;
    }
    return rc;
}

/* The input side of one sb_proc_pump: the iovecs io->fill gave and how far they are written. */
typedef struct {
    struct iovec iov[MAX_IOV];
    size_t niov, at;
    bool fill_done; /* fill gave nothing more, or the child closed its stdin */
} pump_input;

/* Skips written and empty iovecs, asking io->fill for more once all are written. Returns false
 * when the pump must go round again before polling (fill gave only empty iovecs). */
static bool pump_next_input(sb_proc_io *io, pump_input *in)
{
    while (!in->fill_done && in->at == in->niov) {
        in->niov = io->fill(io->ud, in->iov, MAX_IOV);
        in->at = 0;
        if (in->niov == 0)
            in->fill_done = true;
    }
    while (in->at < in->niov && in->iov[in->at].iov_len == 0)
        in->at++;
    return in->fill_done || in->at != in->niov;
}

/* Writes what the child's stdin takes now; a closed stdin (EPIPE) ends the input with io->epipe
 * set, since a child may stop reading before it answers. -1 with err set. */
static int pump_write(sb_proc *p, sb_proc_io *io, pump_input *in, sb_err *err)
{
    size_t cnt = in->niov - in->at < MAX_IOV ? in->niov - in->at : MAX_IOV;
    ssize_t w = write_nosigpipe(p->in, in->iov + in->at, (int)cnt);
    if (w < 0 && errno == EPIPE) {
        close_fd(&p->in);
        io->epipe = true;
        in->fill_done = true;
    } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return sb_err_set(err, "%s: writing its stdin: %s", p->cmd, strerror(errno));
    } else if (w > 0) {
        size_t left_w = (size_t)w;
        while (left_w > 0 && in->at < in->niov) {
            struct iovec *v = &in->iov[in->at];
            if (left_w >= v->iov_len) {
                left_w -= v->iov_len;
                in->at++;
            } else {
                v->iov_base = (char *)v->iov_base + left_w;
                v->iov_len -= left_w;
                left_w = 0;
            }
        }
    }
    return 0;
}

/* Reads what the child's stdout has and hands complete lines (or messages) to io. Returns -1 with
 * err set, 1 when the answer is complete (the pump returns 0), 0 to go on pumping. */
static int pump_read(sb_proc *p, sb_proc_io *io, pump_input *in, size_t max_line, sb_err *err)
{
    if (p->lcap - p->llen < READ_CHUNK) {
        size_t cap = p->lcap ? p->lcap : READ_CHUNK * 2;
        while (cap - p->llen < READ_CHUNK)
            cap *= 2;
        char *nb = realloc(p->lbuf, cap);
        if (nb == NULL)
            return sb_err_set(err, "%s: out of memory reading its output", p->cmd);
        p->lbuf = nb;
        p->lcap = cap;
    }
    ssize_t rd = read(p->out, p->lbuf + p->llen, READ_CHUNK);
    if (rd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (rd < 0)
        return sb_err_set(err, "%s: reading its stdout: %s", p->cmd, strerror(errno));
    if (rd == 0) {
        close_fd(&p->out);
        if (p->llen > 0 && io->bytes != NULL)
            return child_err(p, err, "its output ended inside a message");
        if (p->llen > 0) { /* the last line had no '\n' */
            int rc = io->line(io->ud, p->lbuf, p->llen, err);
            p->llen = 0;
            if (rc < 0)
                return -1;
        }
        return 0;
    }
    p->llen += (size_t)rd;
    int rc = split_lines(p, io, err);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        /* all written, or only the last writev's completion not yet seen by fill() */
        if (in->at < in->niov || (!in->fill_done && io->fill(io->ud, in->iov, MAX_IOV) > 0))
            return child_err(p, err, "answered before it was given all its input");
        return 1;
    }
    if (p->llen > max_line)
        return child_err(p, err,
                         io->bytes ? "wrote a message longer than the limit"
                                   : "wrote a stdout line longer than the limit");
    return 0;
}

int sb_proc_pump(sb_proc *p, sb_proc_io *io, sb_proc_until until, int64_t deadline_ms,
                 size_t max_line, sb_err *err)
{
    pump_input in = {.niov = 0, .at = 0, .fill_done = io->fill == NULL};
    io->eof = io->epipe = false;
    /* lines left over from the previous pump (after a delimiter) */
    if (p->llen > 0) {
        int rc = split_lines(p, io, err);
        if (rc < 0)
            return -1;
        if (rc == 1)
            return child_err(p, err, "answered before it was given its input");
    }
    for (;;) {
        if (!pump_next_input(io, &in))
            continue;
        if (!in.fill_done && p->in < 0) { /* stdin already closed by the child */
            io->epipe = true;
            in.fill_done = true;
        }
        if (in.fill_done && until == SB_PROC_UNTIL_WRITTEN)
            return 0;
        if (p->out < 0) {
            io->eof = true;
            if (!in.fill_done)
                io->epipe = true;
            return 0;
        }
        int64_t left = deadline_ms - sb_proc_now_ms();
        if (left <= 0)
            return child_err(p, err, "no answer before the timeout; killed");
        struct pollfd fds[3];
        int nf = 0, iw = -1, io_ = -1, ie = -1;
        if (!in.fill_done) {
            iw = nf;
            fds[nf++] = (struct pollfd){p->in, POLLOUT, 0};
        }
        io_ = nf;
        fds[nf++] = (struct pollfd){p->out, POLLIN, 0};
        if (p->errfd >= 0) {
            ie = nf;
            fds[nf++] = (struct pollfd){p->errfd, POLLIN, 0};
        }
        int r = poll(fds, (nfds_t)nf, left > 60000 ? 60000 : (int)left);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return sb_err_set(err, "%s: poll: %s", p->cmd, strerror(errno));
        }
        if (r == 0)
            continue;
        if (ie >= 0 && fds[ie].revents)
            drain_stderr(p);
        if (iw >= 0 && fds[iw].revents && pump_write(p, io, &in, err) != 0)
            return -1;
        if (fds[io_].revents) {
            int rc = pump_read(p, io, &in, max_line, err);
            if (rc != 0)
                return rc < 0 ? -1 : 0;
        }
    }
}

bool sb_proc_has_output(sb_proc *p)
{
    if (p->llen > 0)
        return true;
    if (p->out < 0)
        return false;
    struct pollfd pf = {p->out, POLLIN, 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & POLLIN) != 0;
}

/* ---- resources --------------------------------------------------------------------------- */

double sb_proc_cpu_seconds(sb_proc *p)
{
    if (p->reaped)
        return p->cpu_at_exit;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return p->cpu_at_exit;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* comm may hold spaces: fields 14, 15 after it */
    unsigned long long ut = 0, st = 0;
    if (rp == NULL ||
        sscanf(rp + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return p->cpu_at_exit;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

void sb_proc_kill_groups(void)
{
    pthread_mutex_lock(&live_mu);
    for (sb_proc *p = live; p != NULL; p = p->next)
        if (p->pid > 0 && !p->reaped)
            kill(-p->pid, SIGKILL);
    pthread_mutex_unlock(&live_mu);
}

uint64_t sb_proc_rss_total(void)
{
    uint64_t total = 0;
    long page = sysconf(_SC_PAGESIZE);
    pthread_mutex_lock(&live_mu);
    for (sb_proc *p = live; p != NULL; p = p->next) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/statm", (int)p->pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        unsigned long size, res;
        if (fscanf(f, "%lu %lu", &size, &res) == 2)
            total += (uint64_t)res * (uint64_t)page;
        fclose(f);
    }
    pthread_mutex_unlock(&live_mu);
    return total;
}
