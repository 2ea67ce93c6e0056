/* sb_netem — loss, delay and jitter for the packets of one netfilter queue, for kernels without
 * the netem qdisc (sch_netem is not built into every kernel: the test machines' is one). The test
 * harness (tests/integration/netns.h) runs it inside a network namespace and sends that
 * namespace's incoming packets to it with `iptables -A INPUT -i eth0 -j NFQUEUE`; each packet
 * is dropped with probability LOSS, else accepted after DELAY +- JITTER ms (uniform, like netem
 * without a distribution table; jitter may reorder packets, as netem's does).
 *
 *   sb_netem [--queue N] [--loss PCT] [--delay MS] [--jitter MS] [--seed N]
 *
 * Talks nfnetlink directly (no libnetfilter_queue). Prints "ready" once the queue is bound and
 * runs until SIGTERM/SIGINT, when it accepts every packet it still holds; on exit it prints
 * "packets N dropped N". Exit status 1 when the queue cannot be bound (not root, no
 * CONFIG_NETFILTER_NETLINK_QUEUE). */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

typedef struct {
    int64_t due_us;
    uint32_t id;
} held;

static held *g_heap;
static size_t g_n, g_cap;
static volatile sig_atomic_t g_stop;
static int g_fd;
static uint16_t g_queue;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

static double rnd(void) /* [0, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static int heap_push(int64_t due, uint32_t id)
{
    if (g_n == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 1024;
        held *n = realloc(g_heap, cap * sizeof *n);
        if (n == NULL)
            return -1;
        g_heap = n;
        g_cap = cap;
    }
    size_t i = g_n++;
    while (i > 0 && g_heap[(i - 1) / 2].due_us > due) {
        g_heap[i] = g_heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    g_heap[i] = (held){due, id};
    return 0;
}

static held heap_pop(void)
{
    held top = g_heap[0], last = g_heap[--g_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= g_n)
            break;
        if (c + 1 < g_n && g_heap[c + 1].due_us < g_heap[c].due_us)
            c++;
        if (g_heap[c].due_us >= last.due_us)
            break;
        g_heap[i] = g_heap[c];
        i = c;
    }
    if (g_n > 0)
        g_heap[i] = last;
    return top;
}

/* Appends an attribute to the message in buf (its nlmsg_len grows). */
static void put_attr(struct nlmsghdr *h, uint16_t type, const void *data, size_t len)
{
    struct nlattr *a = (struct nlattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));
    a->nla_type = type;
    a->nla_len = (uint16_t)(NLA_HDRLEN + len);
    memcpy((char *)a + NLA_HDRLEN, data, len);
    h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + NLA_ALIGN(a->nla_len);
}

static struct nlmsghdr *msg_start(char *buf, uint16_t type, uint16_t flags)
{
    memset(buf, 0, 256);
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    h->nlmsg_len = NLMSG_LENGTH(sizeof(struct nfgenmsg));
    h->nlmsg_type = (uint16_t)((NFNL_SUBSYS_QUEUE << 8) | type);
    h->nlmsg_flags = (uint16_t)(NLM_F_REQUEST | flags);
    struct nfgenmsg *g = NLMSG_DATA(h);
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(g_queue);
    return h;
}

static int send_msg(struct nlmsghdr *h)
{
    struct sockaddr_nl to = {.nl_family = AF_NETLINK};
    for (;;) {
        ssize_t n = sendto(g_fd, h, h->nlmsg_len, 0, (struct sockaddr *)&to, sizeof to);
        if (n == (ssize_t)h->nlmsg_len)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return -1;
    }
}

static int verdict(uint32_t id, uint32_t v)
{
    char buf[256];
    struct nlmsghdr *h = msg_start(buf, NFQNL_MSG_VERDICT, 0);
    struct nfqnl_msg_verdict_hdr vh = {.verdict = htonl(v), .id = htonl(id)};
    put_attr(h, NFQA_VERDICT_HDR, &vh, sizeof vh);
    return send_msg(h);
}

/* Sends the config message and waits for its ack; 0 or -errno. */
static int configure(void)
{
    char buf[256];
    struct nlmsghdr *h = msg_start(buf, NFQNL_MSG_CONFIG, NLM_F_ACK);
    struct nfqnl_msg_config_cmd cmd = {.command = NFQNL_CFG_CMD_BIND, .pf = htons(AF_INET)};
    put_attr(h, NFQA_CFG_CMD, &cmd, sizeof cmd);
    struct nfqnl_msg_config_params par = {.copy_range = htonl(0), .copy_mode = NFQNL_COPY_META};
    put_attr(h, NFQA_CFG_PARAMS, &par, sizeof par);
    uint32_t maxlen = htonl(65536);
    put_attr(h, NFQA_CFG_QUEUE_MAXLEN, &maxlen, sizeof maxlen);
    if (send_msg(h) != 0)
        return -errno;
    char rb[4096];
    ssize_t n = recv(g_fd, rb, sizeof rb, 0);
    if (n < 0)
        return -errno;
    struct nlmsghdr *r = (struct nlmsghdr *)rb;
    if (!NLMSG_OK(r, (size_t)n) || r->nlmsg_type != NLMSG_ERROR)
        return -EPROTO;
    struct nlmsgerr *e = NLMSG_DATA(r);
    return e->error;
}

int main(int argc, char **argv)
{
    double loss = 0, delay = 0, jitter = 0;
    long queue = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "sb_netem: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--queue") == 0)
            queue = strtol(v, NULL, 10);
        else if (strcmp(a, "--loss") == 0)
            loss = strtod(v, NULL) / 100.0;
        else if (strcmp(a, "--delay") == 0)
            delay = strtod(v, NULL);
        else if (strcmp(a, "--jitter") == 0)
            jitter = strtod(v, NULL);
        else if (strcmp(a, "--seed") == 0)
            g_rng ^= (uint64_t)strtoull(v, NULL, 10) * 0x2545f4914f6cdd1dULL;
        else {
            fprintf(stderr, "sb_netem: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (queue < 0 || queue > 65535 || loss < 0 || loss > 1 || delay < 0 || jitter < 0 ||
        jitter > delay) {
        fprintf(stderr, "sb_netem: bad values (0 <= loss <= 100, 0 <= jitter <= delay)\n");
        return 2;
    }
    g_queue = (uint16_t)queue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    g_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    if (g_fd < 0) {
        fprintf(stderr, "sb_netem: netlink socket: %s\n", strerror(errno));
        return 1;
    }
    struct sockaddr_nl me = {.nl_family = AF_NETLINK};
    if (bind(g_fd, (struct sockaddr *)&me, sizeof me) != 0) {
        fprintf(stderr, "sb_netem: bind: %s\n", strerror(errno));
        return 1;
    }
    int one = 1, rcv = 8 << 20;
    setsockopt(g_fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
    if (setsockopt(g_fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) != 0)
        setsockopt(g_fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    int rc = configure();
    if (rc != 0) {
        fprintf(stderr, "sb_netem: binding queue %ld: %s\n", queue, strerror(-rc));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    uint64_t packets = 0, dropped = 0;
    static char buf[1 << 16];
    while (!g_stop) {
        int64_t now = now_us();
        while (g_n > 0 && g_heap[0].due_us <= now) {
            held h = heap_pop();
            verdict(h.id, NF_ACCEPT);
        }
        int timeout = 1000;
        if (g_n > 0) {
            int64_t wait = (g_heap[0].due_us - now + 999) / 1000;
            timeout = wait < 1000 ? (int)wait : 1000;
        }
        struct pollfd p = {.fd = g_fd, .events = POLLIN};
        int pr = poll(&p, 1, timeout);
        if (pr <= 0)
            continue;
        ssize_t n = recv(g_fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0)
            continue;
        now = now_us();
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type != ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET))
                continue;
            struct nlattr *a =
                (struct nlattr *)((char *)NLMSG_DATA(h) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
            int left = (int)h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(struct nfgenmsg)));
            uint32_t id = 0;
            int have = 0;
            while (left >= (int)NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= left) {
                if ((a->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
                    struct nfqnl_msg_packet_hdr ph;
                    memcpy(&ph, (char *)a + NLA_HDRLEN, sizeof ph);
                    id = ntohl(ph.packet_id);
                    have = 1;
                }
                left -= NLA_ALIGN(a->nla_len);
                a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
            }
            if (!have)
                continue;
            packets++;
            if (loss > 0 && rnd() < loss) {
                dropped++;
                verdict(id, NF_DROP);
                continue;
            }
            double ms = delay + (jitter > 0 ? (rnd() * 2 - 1) * jitter : 0);
            if (ms <= 0 || heap_push(now + (int64_t)(ms * 1000), id) != 0)
                verdict(id, NF_ACCEPT);
        }
    }
    while (g_n > 0)
        verdict(heap_pop().id, NF_ACCEPT);
    printf("packets %llu dropped %llu\n", (unsigned long long)packets, (unsigned long long)dropped);
    free(g_heap);
    close(g_fd);
    return 0;
}
