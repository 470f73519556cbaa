/* The native port loop (see portloop.h): epoll over the port sockets; take a batch of frames from
 * one socket, run it through sw_process() under one sw_lock, sendmmsg the outputs per egress port.
 *
 * Receiving: a TPACKET_V2 PACKET_MMAP ring where the socket is AF_PACKET, recvmmsg otherwise.
 *  - The ring takes the receive system calls and the skb frees off this thread: the kernel copies
 *    each frame into a slot in the sender's softirq, we read it in place. Profiled on veths, recvmmsg
 *    was two thirds of this thread's time; with the ring it is gone.
 *  - V2, not V3: a V3 block reaches user space only when it fills or its retire timer fires (1 ms at
 *    best), so in THC's lock-step request/response rounds every frame would wait for the timer. V2
 *    hands over each frame as it lands.
 *  - Slots are sized for the link's MTU (Python passes MTU + 18), not for 64 KiB: 4 MiB per port
 *    instead of hundreds. A longer frame (a GSO super-frame, an MTU raised later) does not fit its
 *    slot; it is counted as rx_too_long and dropped, as sending it on would fail anyway.
 *  - recvmmsg stays for sockets that are not AF_PACKET (the no-root tests use AF_UNIX socketpairs)
 *    or when the ring cannot be set up; it reads whole frames up to 64 KiB.
 * Sending: sendmmsg, one call per egress port per batch. A TX ring would save little: the per-frame
 * cost of a send is the skb and the veth path, which a ring does not remove.
 *
 * Pacing (service_ns > 0, thc-switch --pps): the loop takes one frame at a time and starts each no sooner
 * than service_ns after the one before, sleeping until then (clock_nanosleep to an absolute deadline, so
 * oversleeping does not lower the rate while frames wait); frames wait in the sockets' queues meanwhile,
 * as they wait in front of a slower switch. An idle loop saves up no credit (a burst of one).
 *
 * Threads: sw_portloop_run() is the only thread that touches sockets, rings, pcap buffers and the
 * output batch. inject() and take_packet_in() come from Python threads and meet it only in two mutex-
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
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "portloop.h"

#define QUEUE_MAX_FRAMES 4096u
#define PCAP_BUF_BYTES (256u * 1024u)
#define PCAP_SNAPLEN 65535u         /* emulator/pcap.py's global header says so */
#define DEFAULT_BATCH 64u
#define DEFAULT_IDLE_FLUSH_MS 100
#define RING_BYTES (4u << 20)       /* receive ring per port */
#define RING_BLOCK (256u << 10)
#define RING_SLOT_OVERHEAD 128u     /* tpacket2_hdr + sockaddr_ll + alignment before the frame */
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

struct run;

struct portloop {
    int stop_fd, inject_fd, packet_in_fd;
    struct frame_queue injected, packet_in;
    struct portloop_stats stats;
    struct run *run;                /* set by sw_portloop_open() */
    int idle_ms;
};

struct pcap_buf {
    int fd;
    uint32_t used;
    uint8_t *buf;
};

struct rx_ring {                    /* a mapped TPACKET_V2 receive ring; map == NULL: none */
    uint8_t *map;
    size_t map_len;
    uint32_t slot_size, slots, head;
};

struct slot {                       /* one port with a socket */
    uint32_t port;
    int fd;
    struct rx_ring ring;
    struct pcap_buf cap_in, cap_out;
    uint32_t tx_n;                  /* frames of the current output batch bound for this port */
    struct mmsghdr *tx_msgs;        /* SW_MAX_OUT each */
    struct iovec *tx_iov;
};

struct run {                        /* the loop's private state, from sw_portloop_open() on */
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
    uint64_t service_ns;            /* 0: unpaced */
    uint64_t next_ns;               /* CLOCK_MONOTONIC time the next frame may start (paced) */
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

static void free_run(struct run *r);

/* ------------------------------------------------------------------ the public handle */

portloop_t *sw_portloop_create(void)
{
    portloop_t *pl = calloc(1, sizeof *pl);
    if (!pl)
        return NULL;
    queue_init(&pl->injected);
    queue_init(&pl->packet_in);
    pl->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pl->inject_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pl->packet_in_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (pl->stop_fd < 0 || pl->inject_fd < 0 || pl->packet_in_fd < 0) {
        int saved = errno;
        sw_portloop_destroy(pl);
        errno = saved;
        return NULL;
    }
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
    if (pl->run) {
        free_run(pl->run);
        free(pl->run);
    }
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

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A paced loop waits for the next frame's turn (see the top of this file); call before each frame. */
static void pace(struct run *r)
{
    if (!r->service_ns)
        return;
    uint64_t now = monotonic_ns();
    if (r->next_ns > now) {
        struct timespec until = {.tv_sec = (time_t)(r->next_ns / 1000000000u),
                                 .tv_nsec = (long)(r->next_ns % 1000000000u)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
            ;
    } else {
        r->next_ns = now;
    }
    r->next_ns += r->service_ns;
}


/* One recvmmsg batch from `s`; returns the frames read (0: nothing waiting or an error). */
static int receive_batch(struct run *r, struct slot *s)
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
        return 0;
    }
    pace(r); /* paced: n == 1 */
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
    return n;
}

/* ------------------------------------------------------------------ receive rings */

static int ring_open(struct slot *s, uint32_t max_frame)
{
    if (max_frame > PORTLOOP_MAX_FRAME)
        max_frame = PORTLOOP_MAX_FRAME;
    uint32_t slot_size = 2048;
    while (slot_size < max_frame + RING_SLOT_OVERHEAD)
        slot_size <<= 1;
    uint32_t block = slot_size > RING_BLOCK ? slot_size : RING_BLOCK;
    uint32_t blocks = RING_BYTES / block < 2 ? 2 : RING_BYTES / block;
    int version = TPACKET_V2;
    if (setsockopt(s->fd, SOL_PACKET, PACKET_VERSION, &version, sizeof version) != 0)
        return -1; /* not AF_PACKET, or a ring is already there */
    struct tpacket_req req = {
        .tp_block_size = block,
        .tp_block_nr = blocks,
        .tp_frame_size = slot_size,
        .tp_frame_nr = blocks * (block / slot_size),
    };
    if (setsockopt(s->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0)
        return -1;
    size_t len = (size_t)block * blocks;
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (map == MAP_FAILED) {
        struct tpacket_req none = {0};
        setsockopt(s->fd, SOL_PACKET, PACKET_RX_RING, &none, sizeof none);
        return -1;
    }
    s->ring = (struct rx_ring){.map = map, .map_len = len, .slot_size = slot_size, .slots = req.tp_frame_nr};
    return 0;
}

/* Unmap and remove the ring, so the socket delivers to its queue again (a later run or PortLoop). */
static void ring_close(struct slot *s)
{
    if (!s->ring.map)
        return;
    munmap(s->ring.map, s->ring.map_len);
    struct tpacket_req none = {0};
    setsockopt(s->fd, SOL_PACKET, PACKET_RX_RING, &none, sizeof none);
    s->ring.map = NULL;
}

static void receive_ring(struct run *r, struct slot *s)
{
    struct rx_ring *ring = &s->ring;
    struct timespec now = {0};
    uint64_t rx = 0, too_long = 0;
    uint32_t taken = 0;
    int locked = 0;
    while (taken < r->batch) {
        struct tpacket2_hdr *h = (struct tpacket2_hdr *)(ring->map + (size_t)ring->head * ring->slot_size);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
            break;
        if (!locked) {
            pace(r); /* paced: one frame per call */
            if (s->cap_in.fd >= 0)
                clock_gettime(CLOCK_REALTIME, &now);
            sw_lock(r->sw);
            locked = 1;
        }
        const struct sockaddr_ll *from = (const struct sockaddr_ll *)((uint8_t *)h + TPACKET_ALIGN(sizeof *h));
        if (from->sll_pkttype == PACKET_OUTGOING) {
            /* our own transmission, when the kernel lacks PACKET_IGNORE_OUTGOING */
        } else if (h->tp_snaplen < h->tp_len || (size_t)h->tp_mac + h->tp_snaplen > ring->slot_size) {
            too_long++;
        } else {
            const uint8_t *frame = (const uint8_t *)h + h->tp_mac;
            rx++;
            if (s->cap_in.fd >= 0)
                pcap_record(r, &s->cap_in, &now, frame, h->tp_snaplen);
            make_room(r);
            sw_process(r->sw, s->port, frame, h->tp_snaplen, r->out);
        }
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        ring->head = ring->head + 1 == ring->slots ? 0 : ring->head + 1;
        taken++;
    }
    if (!locked)
        return;
    sw_unlock(r->sw);
    transmit(r);
    STAT_ADD(r->pl, rx, rx);
    if (too_long)
        STAT_ADD(r->pl, rx_too_long, too_long);
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
        pcap_flush_all(r);
        for (uint32_t i = 0; i < r->n_slots; i++) {
            ring_close(&r->slots[i]);
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
    r->service_ns = cfg->service_ns;
    if (r->service_ns)
        r->batch = 1; /* one frame at a time: a batch would leave in bursts */
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
    for (uint32_t i = 0; i < r->n_slots; i++) {
        struct slot *s = &r->slots[i];
        if (!cfg->ports[i].rx_ring_max_frame)
            continue;
        while (receive_batch(r, s) > 0) /* setting a ring up purges the queue: serve what waits first */
            ;
        if (ring_open(s, cfg->ports[i].rx_ring_max_frame) == 0)
            STAT_ADD(pl, rx_rings, 1);
    }
    return 0;
}

int sw_portloop_open(portloop_t *pl, sw_t *sw, const struct portloop_cfg *cfg)
{
    if (!sw || !pl || !cfg || (cfg->n_ports && !cfg->ports) || pl->run) {
        errno = EINVAL;
        return -1;
    }
    struct run *r = malloc(sizeof *r);
    if (!r || setup_run(r, sw, pl, cfg) != 0) {
        if (r) {
            free_run(r);
            free(r);
        }
        errno = ENOMEM;
        return -1;
    }
    pl->run = r;
    pl->idle_ms = cfg->idle_flush_ms > 0 ? cfg->idle_flush_ms : DEFAULT_IDLE_FLUSH_MS;
    return 0;
}

int sw_portloop_run(portloop_t *pl)
{
    if (!pl || !pl->run) {
        errno = EINVAL;
        return -1;
    }
    struct run *r = pl->run;
    int idle_ms = pl->idle_ms;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int result = ep < 0 ? -1 : 0;
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.u32 = TAG_STOP;
    if (result == 0)
        result = epoll_ctl(ep, EPOLL_CTL_ADD, pl->stop_fd, &ev);
    ev.data.u32 = TAG_INJECT;
    if (result == 0)
        result = epoll_ctl(ep, EPOLL_CTL_ADD, pl->inject_fd, &ev);
    for (uint32_t i = 0; result == 0 && i < r->n_slots; i++) {
        ev.data.u32 = i;
        result = epoll_ctl(ep, EPOLL_CTL_ADD, r->slots[i].fd, &ev);
    }
    int stopping = result != 0;
    int saved_errno = errno;
    struct epoll_event events[64];
    while (!stopping) {
        int n = epoll_wait(ep, events, 64, r->pcap_dirty ? idle_ms : -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            saved_errno = errno;
            result = -1;
            break;
        }
        if (n == 0) {
            pcap_flush_all(r);
            continue;
        }
        for (int i = 0; i < n; i++) {
            uint32_t tag = events[i].data.u32;
            if (tag == TAG_STOP)
                stopping = 1;
            else if (tag == TAG_INJECT)
                process_injected(r);
            else if (r->slots[tag].ring.map)
                receive_ring(r, &r->slots[tag]);
            else
                receive_batch(r, &r->slots[tag]);
        }
    }
    pcap_flush_all(r);
    if (ep >= 0)
        close(ep);
    signal_fd(pl->packet_in_fd); /* wake the Python side so it sees the loop has ended */
    errno = saved_errno;
    return result;
}
