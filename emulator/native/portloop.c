/* The native port loop (see portloop.h): epoll over the port sockets, recvmmsg a batch from one
 * socket, run it through sw_process() under one sw_lock, sendmmsg the outputs per egress port.
 *
 * Why recvmmsg/sendmmsg and not PACKET_MMAP (TPACKET_V3) rings:
 *  - THC traffic is request/response in lock-step rounds. A TPACKET_V3 receive block is handed to
 *    user space when it fills or when its retire timer fires (1 ms at best), so under light load
 *    every round trip would wait for the timer; recvmmsg returns whatever is queued at once.
 *  - The sockets stay exactly as Python's open_port_socket() makes them (PACKET_IGNORE_OUTGOING,
 *    promiscuous, big buffers), shared with the Python loop and its tests; no ring geometry to size
 *    against 64 KiB frames, and the same code drives any datagram socket (the no-root tests use
 *    AF_UNIX socketpairs).
 *  - One system call per batch of 64 already takes the syscall cost off the per-frame path; the
 *    remaining per-frame work on veths is the kernel's own veth/skb path, which rings do not remove.
 *    The extra memcpy into our buffers is cheap next to it.
 *
 * Threads: sw_portloop_run() is the only thread that touches sockets, pcap buffers and the output
 * batch. inject() and take_packet_in() come from Python threads and meet it only in two mutex-
 * guarded queues and eventfds. Counters are relaxed atomics, summed per batch.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "portloop.h"

#define QUEUE_MAX_FRAMES 4096u
#define PCAP_BUF_BYTES (256u * 1024u)
#define PCAP_SNAPLEN 65535u         /* emulator/pcap.py's global header says so */
#define DEFAULT_BATCH 64u
#define DEFAULT_IDLE_FLUSH_MS 100
#define TAG_STOP UINT32_MAX
#define TAG_INJECT (UINT32_MAX - 1)

#define STAT_ADD(pl, field, n) __atomic_fetch_add(&(pl)->stats.field, (uint64_t)(n), __ATOMIC_RELAXED)

struct frame_node {
    struct frame_node *next;
    uint32_t port;
    uint32_t len;
    uint8_t data[];
};

struct frame_queue {
    pthread_mutex_t mu;
    struct frame_node *head, *tail;
    uint32_t count;
};

struct portloop {
    int stop_fd, inject_fd, packet_in_fd;
    struct frame_queue injected, packet_in;
    struct portloop_stats stats;
};

struct pcap_buf {
    int fd;
    uint32_t used;
    uint8_t *buf;
};

struct slot {                       /* one port with a socket */
    uint32_t port;
    int fd;
    struct pcap_buf cap_in, cap_out;
    uint32_t tx_n;                  /* frames of the current output batch bound for this port */
    struct mmsghdr *tx_msgs;        /* SW_MAX_OUT each */
    struct iovec *tx_iov;
};

struct run {                        /* the loop's private state for one sw_portloop_run() */
    portloop_t *pl;
    sw_t *sw;
    uint32_t batch;
    int has_cpu_port, deliver_packet_in;
    uint32_t cpu_port;
    uint32_t n_slots;
    struct slot *slots;
    struct mmsghdr *rx_msgs;
    struct iovec *rx_iov;
    struct sockaddr_ll *rx_addr;
    uint8_t *rx_buf;                /* batch * PORTLOOP_MAX_FRAME */
    sw_out_t *out;
    int pcap_dirty;
};

/* ------------------------------------------------------------------ queues */

static void queue_init(struct frame_queue *q)
{
    pthread_mutex_init(&q->mu, NULL);
    q->head = q->tail = NULL;
    q->count = 0;
}

static void free_nodes(struct frame_node *node)
{
    while (node) {
        struct frame_node *next = node->next;
        free(node);
        node = next;
    }
}

static int queue_push(struct frame_queue *q, uint32_t port, const uint8_t *data, uint32_t len)
{
    struct frame_node *node = malloc(sizeof *node + (len ? len : 1));
    if (!node)
        return -1;
    node->next = NULL;
    node->port = port;
    node->len = len;
    if (len)
        memcpy(node->data, data, len);
    pthread_mutex_lock(&q->mu);
    if (q->count >= QUEUE_MAX_FRAMES) {
        pthread_mutex_unlock(&q->mu);
        free(node);
        return -1;
    }
    if (q->tail)
        q->tail->next = node;
    else
        q->head = node;
    q->tail = node;
    q->count++;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static struct frame_node *queue_take_all(struct frame_queue *q)
{
    pthread_mutex_lock(&q->mu);
    struct frame_node *all = q->head;
    q->head = q->tail = NULL;
    q->count = 0;
    pthread_mutex_unlock(&q->mu);
    return all;
}

static void signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t ignored = write(fd, &one, sizeof one); /* EAGAIN: the counter is already huge, still readable */
    (void)ignored;
}

static void drain_fd(int fd)
{
    uint64_t value;
    ssize_t ignored = read(fd, &value, sizeof value);
    (void)ignored;
}

/* ------------------------------------------------------------------ the public handle */

portloop_t *sw_portloop_create(void)
{
    portloop_t *pl = calloc(1, sizeof *pl);
    if (!pl)
        return NULL;
    pl->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pl->inject_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pl->packet_in_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (pl->stop_fd < 0 || pl->inject_fd < 0 || pl->packet_in_fd < 0) {
        int saved = errno;
        sw_portloop_destroy(pl);
        errno = saved;
        return NULL;
    }
    queue_init(&pl->injected);
    queue_init(&pl->packet_in);
    return pl;
}

void sw_portloop_destroy(portloop_t *pl)
{
    if (!pl)
        return;
    int fds[] = {pl->stop_fd, pl->inject_fd, pl->packet_in_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free_nodes(queue_take_all(&pl->injected));
    free_nodes(queue_take_all(&pl->packet_in));
    free(pl);
}

void sw_portloop_stop(portloop_t *pl)
{
    signal_fd(pl->stop_fd);
}

int sw_portloop_inject(portloop_t *pl, uint32_t port, const uint8_t *frame, uint32_t len)
{
    if (len > PORTLOOP_MAX_FRAME || (len && !frame) || queue_push(&pl->injected, port, frame, len) != 0) {
        STAT_ADD(pl, inject_dropped, 1);
        return -1;
    }
    signal_fd(pl->inject_fd);
    return 0;
}

int sw_portloop_packet_in_fd(portloop_t *pl)
{
    return pl->packet_in_fd;
}

int64_t sw_portloop_take_packet_in(portloop_t *pl, uint8_t *buf, uint32_t cap)
{
    struct frame_queue *q = &pl->packet_in;
    pthread_mutex_lock(&q->mu);
    struct frame_node *node = q->head;
    if (!node) {
        pthread_mutex_unlock(&q->mu);
        return -1;
    }
    if (node->len > cap) {
        pthread_mutex_unlock(&q->mu);
        return node->len;
    }
    q->head = node->next;
    if (!q->head)
        q->tail = NULL;
    q->count--;
    pthread_mutex_unlock(&q->mu);
    int64_t len = node->len;
    memcpy(buf, node->data, node->len);
    free(node);
    return len;
}

void sw_portloop_stats(portloop_t *pl, struct portloop_stats *out)
{
    const uint64_t *from = (const uint64_t *)&pl->stats;
    uint64_t *to = (uint64_t *)out;
    for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
        to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ pcap */

static void pcap_flush(struct run *r, struct pcap_buf *p)
{
    uint32_t done = 0;
    while (done < p->used) {
        ssize_t n = write(p->fd, p->buf + done, p->used - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            STAT_ADD(r->pl, pcap_errors, 1);
            break;
        }
        done += (uint32_t)n;
    }
    p->used = 0;
}

static void pcap_record(struct run *r, struct pcap_buf *p, const struct timespec *ts, const uint8_t *frame,
                        uint32_t len)
{
    if (p->fd < 0)
        return;
    uint32_t caplen = len < PCAP_SNAPLEN ? len : PCAP_SNAPLEN;
    if (p->used + 16 + caplen > PCAP_BUF_BYTES)
        pcap_flush(r, p);
    uint32_t header[4] = {htole32((uint32_t)ts->tv_sec), htole32((uint32_t)(ts->tv_nsec / 1000)), htole32(caplen),
                          htole32(len)};
    memcpy(p->buf + p->used, header, sizeof header);
    if (caplen)
        memcpy(p->buf + p->used + sizeof header, frame, caplen);
    p->used += sizeof header + caplen;
    r->pcap_dirty = 1;
}

static void pcap_flush_all(struct run *r)
{
    for (uint32_t i = 0; i < r->n_slots; i++) {
        if (r->slots[i].cap_in.used)
            pcap_flush(r, &r->slots[i].cap_in);
        if (r->slots[i].cap_out.used)
            pcap_flush(r, &r->slots[i].cap_out);
    }
    r->pcap_dirty = 0;
}

/* ------------------------------------------------------------------ output */

static struct slot *slot_for(struct run *r, uint32_t port)
{
    for (uint32_t i = 0; i < r->n_slots; i++)
        if (r->slots[i].port == port)
            return &r->slots[i];
    return NULL;
}

static void send_slot(struct run *r, struct slot *s, const struct timespec *now, uint64_t *tx, uint64_t *errors)
{
    uint32_t i = 0;
    while (i < s->tx_n) {
        int k = sendmmsg(s->fd, s->tx_msgs + i, s->tx_n - i, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) { /* frame i refused (ENOBUFS, EMSGSIZE, ENETDOWN...): count it, go on with the rest */
            (*errors)++;
            i++;
            continue;
        }
        if (s->cap_out.fd >= 0)
            for (int j = 0; j < k; j++)
                pcap_record(r, &s->cap_out, now, s->tx_iov[i + j].iov_base, (uint32_t)s->tx_iov[i + j].iov_len);
        *tx += (uint64_t)k;
        i += (uint32_t)k;
    }
    s->tx_n = 0;
}

/* Send (or queue for PacketIn, or count) every frame in r->out, then empty it. No sw_lock needed. */
static void transmit(struct run *r)
{
    sw_out_t *out = r->out;
    uint64_t tx = 0, errors = 0, no_port = 0, to_cpu = 0, cpu_dropped = 0;
    uint32_t count = out->count < SW_MAX_OUT ? out->count : SW_MAX_OUT;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t port = out->port[i], off = out->off[i], len = out->len[i];
        if (off > SW_OUT_BUF || len > SW_OUT_BUF - off) { /* a broken pipeline must not make us read wild */
            no_port++;
            continue;
        }
        if (r->has_cpu_port && port == r->cpu_port) {
            if (!r->deliver_packet_in)
                no_port++;
            else if (queue_push(&r->pl->packet_in, port, out->buf + off, len) == 0)
                to_cpu++;
            else
                cpu_dropped++;
            continue;
        }
        struct slot *s = slot_for(r, port);
        if (!s) {
            no_port++;
            continue;
        }
        s->tx_iov[s->tx_n].iov_base = out->buf + off;
        s->tx_iov[s->tx_n].iov_len = len;
        s->tx_n++;
    }
    struct timespec now = {0};
    int have_time = 0;
    for (uint32_t i = 0; i < r->n_slots; i++) {
        struct slot *s = &r->slots[i];
        if (!s->tx_n)
            continue;
        if (!have_time && s->cap_out.fd >= 0) {
            clock_gettime(CLOCK_REALTIME, &now);
            have_time = 1;
        }
        send_slot(r, s, &now, &tx, &errors);
    }
    out->count = 0;
    out->used = 0;
    portloop_t *pl = r->pl;
    if (tx)
        STAT_ADD(pl, tx, tx);
    if (errors)
        STAT_ADD(pl, tx_errors, errors);
    if (no_port)
        STAT_ADD(pl, dropped_no_port, no_port);
    if (cpu_dropped)
        STAT_ADD(pl, packet_in_dropped, cpu_dropped);
    if (to_cpu) {
        STAT_ADD(pl, packet_in, to_cpu);
        signal_fd(pl->packet_in_fd);
    }
}

/* Called with sw_lock held before each sw_process(): send what has piled up while there is still room
 * for a 64 KiB frame and its copies, so nothing is dropped for want of space in `out`. */
static void make_room(struct run *r)
{
    if (r->out->count < SW_MAX_OUT / 2 && r->out->used < SW_OUT_BUF / 2)
        return;
    sw_unlock(r->sw);
    transmit(r);
    sw_lock(r->sw);
}

/* ------------------------------------------------------------------ input */

static void receive_batch(struct run *r, struct slot *s)
{
    for (uint32_t i = 0; i < r->batch; i++) {
        r->rx_msgs[i].msg_hdr.msg_namelen = sizeof r->rx_addr[i];
        r->rx_msgs[i].msg_hdr.msg_flags = 0;
    }
    /* MSG_TRUNC: msg_len is the frame's real length even when it did not fit the buffer */
    int n = recvmmsg(s->fd, r->rx_msgs, r->batch, MSG_DONTWAIT | MSG_TRUNC, NULL);
    if (n <= 0) {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            STAT_ADD(r->pl, rx_errors, 1);
        return;
    }
    struct timespec now = {0};
    if (s->cap_in.fd >= 0)
        clock_gettime(CLOCK_REALTIME, &now);
    uint64_t rx = 0, truncated = 0;
    sw_lock(r->sw);
    for (int i = 0; i < n; i++) {
        const struct msghdr *h = &r->rx_msgs[i].msg_hdr;
        if (h->msg_namelen >= sizeof(struct sockaddr_ll) && r->rx_addr[i].sll_family == AF_PACKET &&
            r->rx_addr[i].sll_pkttype == PACKET_OUTGOING)
            continue; /* our own transmission, when the kernel lacks PACKET_IGNORE_OUTGOING */
        uint32_t wire_len = r->rx_msgs[i].msg_len;
        uint32_t len = wire_len;
        if (len > PORTLOOP_MAX_FRAME || (h->msg_flags & MSG_TRUNC)) {
            truncated++;
            if (len > PORTLOOP_MAX_FRAME)
                len = PORTLOOP_MAX_FRAME;
        }
        const uint8_t *frame = r->rx_buf + (size_t)i * PORTLOOP_MAX_FRAME;
        rx++;
        if (s->cap_in.fd >= 0)
            pcap_record(r, &s->cap_in, &now, frame, len);
        make_room(r);
        sw_process(r->sw, s->port, frame, len, r->out);
    }
    sw_unlock(r->sw);
    transmit(r);
    STAT_ADD(r->pl, rx, rx);
    if (truncated)
        STAT_ADD(r->pl, rx_truncated, truncated);
    STAT_ADD(r->pl, batches, 1);
}

static void process_injected(struct run *r)
{
    drain_fd(r->pl->inject_fd);
    struct frame_node *node = queue_take_all(&r->pl->injected);
    while (node) {
        struct frame_node *first = node;
        uint64_t count = 0;
        sw_lock(r->sw);
        for (; node && count < r->batch; node = node->next, count++) {
            make_room(r);
            sw_process(r->sw, node->port, node->data, node->len, r->out);
        }
        sw_unlock(r->sw);
        transmit(r);
        while (first != node) {
            struct frame_node *next = first->next;
            free(first);
            first = next;
        }
        STAT_ADD(r->pl, injected, count);
        STAT_ADD(r->pl, batches, 1);
    }
}

/* ------------------------------------------------------------------ the loop */

static void free_run(struct run *r)
{
    if (r->slots) {
        for (uint32_t i = 0; i < r->n_slots; i++) {
            free(r->slots[i].cap_in.buf);
            free(r->slots[i].cap_out.buf);
            free(r->slots[i].tx_msgs);
            free(r->slots[i].tx_iov);
        }
    }
    free(r->slots);
    free(r->rx_msgs);
    free(r->rx_iov);
    free(r->rx_addr);
    free(r->rx_buf);
    free(r->out);
}

static int setup_run(struct run *r, sw_t *sw, portloop_t *pl, const struct portloop_cfg *cfg)
{
    memset(r, 0, sizeof *r);
    r->pl = pl;
    r->sw = sw;
    r->batch = cfg->batch ? cfg->batch : DEFAULT_BATCH;
    if (r->batch > PORTLOOP_MAX_BATCH)
        r->batch = PORTLOOP_MAX_BATCH;
    r->has_cpu_port = cfg->has_cpu_port;
    r->deliver_packet_in = cfg->deliver_packet_in;
    r->cpu_port = cfg->cpu_port;
    r->n_slots = cfg->n_ports;
    r->slots = calloc(cfg->n_ports ? cfg->n_ports : 1, sizeof *r->slots);
    r->rx_msgs = calloc(r->batch, sizeof *r->rx_msgs);
    r->rx_iov = calloc(r->batch, sizeof *r->rx_iov);
    r->rx_addr = calloc(r->batch, sizeof *r->rx_addr);
    r->rx_buf = malloc((size_t)r->batch * PORTLOOP_MAX_FRAME);
    r->out = calloc(1, sizeof *r->out);
    if (!r->slots || !r->rx_msgs || !r->rx_iov || !r->rx_addr || !r->rx_buf || !r->out)
        return -1;
    for (uint32_t i = 0; i < r->batch; i++) {
        r->rx_iov[i].iov_base = r->rx_buf + (size_t)i * PORTLOOP_MAX_FRAME;
        r->rx_iov[i].iov_len = PORTLOOP_MAX_FRAME;
        r->rx_msgs[i].msg_hdr.msg_iov = &r->rx_iov[i];
        r->rx_msgs[i].msg_hdr.msg_iovlen = 1;
        r->rx_msgs[i].msg_hdr.msg_name = &r->rx_addr[i];
    }
    for (uint32_t i = 0; i < r->n_slots; i++) {
        struct slot *s = &r->slots[i];
        s->port = cfg->ports[i].port;
        s->fd = cfg->ports[i].fd;
        s->cap_in.fd = cfg->ports[i].pcap_in_fd;
        s->cap_out.fd = cfg->ports[i].pcap_out_fd;
        s->tx_msgs = calloc(SW_MAX_OUT, sizeof *s->tx_msgs);
        s->tx_iov = calloc(SW_MAX_OUT, sizeof *s->tx_iov);
        if (!s->tx_msgs || !s->tx_iov)
            return -1;
        for (uint32_t j = 0; j < SW_MAX_OUT; j++) {
            s->tx_msgs[j].msg_hdr.msg_iov = &s->tx_iov[j];
            s->tx_msgs[j].msg_hdr.msg_iovlen = 1;
        }
        if ((s->cap_in.fd >= 0 && !(s->cap_in.buf = malloc(PCAP_BUF_BYTES))) ||
            (s->cap_out.fd >= 0 && !(s->cap_out.buf = malloc(PCAP_BUF_BYTES))))
            return -1;
    }
    return 0;
}

int sw_portloop_run(sw_t *sw, portloop_t *pl, const struct portloop_cfg *cfg)
{
    if (!sw || !pl || !cfg || (cfg->n_ports && !cfg->ports)) {
        errno = EINVAL;
        return -1;
    }
    struct run r;
    if (setup_run(&r, sw, pl, cfg) != 0) {
        free_run(&r);
        errno = ENOMEM;
        return -1;
    }
    int idle_ms = cfg->idle_flush_ms > 0 ? cfg->idle_flush_ms : DEFAULT_IDLE_FLUSH_MS;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int result = ep < 0 ? -1 : 0;
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.u32 = TAG_STOP;
    if (result == 0)
        result = epoll_ctl(ep, EPOLL_CTL_ADD, pl->stop_fd, &ev);
    ev.data.u32 = TAG_INJECT;
    if (result == 0)
        result = epoll_ctl(ep, EPOLL_CTL_ADD, pl->inject_fd, &ev);
    for (uint32_t i = 0; result == 0 && i < r.n_slots; i++) {
        ev.data.u32 = i;
        result = epoll_ctl(ep, EPOLL_CTL_ADD, r.slots[i].fd, &ev);
    }
    int stopping = result != 0;
    int saved_errno = errno;
    struct epoll_event events[64];
    while (!stopping) {
        int n = epoll_wait(ep, events, 64, r.pcap_dirty ? idle_ms : -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            saved_errno = errno;
            result = -1;
            break;
        }
        if (n == 0) {
            pcap_flush_all(&r);
            continue;
        }
        for (int i = 0; i < n; i++) {
            uint32_t tag = events[i].data.u32;
            if (tag == TAG_STOP)
                stopping = 1;
            else if (tag == TAG_INJECT)
                process_injected(&r);
            else
                receive_batch(&r, &r.slots[tag]);
        }
    }
    pcap_flush_all(&r);
    if (ep >= 0)
        close(ep);
    free_run(&r);
    signal_fd(pl->packet_in_fd); /* wake the Python side so it sees the loop has ended */
    errno = saved_errno;
    return result;
}
