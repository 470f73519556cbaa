/* Traffic source and sink for bench_switch_ports.py --sender c: sendmmsg/recvmmsg in batches, so the
 * benchmark measures the switch rather than a Python sender (which tops out near the native loop's
 * lower bound). Called through ctypes from two Python threads; both release the GIL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BLAST_BATCH 64
#define RX_FRAME 2048

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Send `count` copies of `frame` on `fd` (blocking or not); a full queue makes it yield and retry. */
uint64_t blast_send(int fd, const uint8_t *frame, uint32_t len, uint64_t count)
{
    struct iovec iov = {.iov_base = (void *)frame, .iov_len = len};
    struct mmsghdr msgs[BLAST_BATCH];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BLAST_BATCH; i++) {
        msgs[i].msg_hdr.msg_iov = &iov;
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    uint64_t sent = 0;
    while (sent < count) {
        unsigned n = count - sent < BLAST_BATCH ? (unsigned)(count - sent) : BLAST_BATCH;
        int k = sendmmsg(fd, msgs, n, 0);
        if (k > 0)
            sent += (uint64_t)k;
        else if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR)
            sched_yield();
        else
            break;
    }
    return sent;
}

/* Count frames on `fd` whose first 6 bytes are `dst_mac`, until `*done` is set and nothing arrived for
 * idle_ms; the monotonic times of the first and last counted frame go to first_ns/last_ns. */
uint64_t blast_receive(int fd, const uint8_t *dst_mac, const volatile int *done, int idle_ms, uint64_t *first_ns,
                       uint64_t *last_ns)
{
    static __thread uint8_t bufs[BLAST_BATCH][RX_FRAME];
    struct iovec iov[BLAST_BATCH];
    struct mmsghdr msgs[BLAST_BATCH];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BLAST_BATCH; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = RX_FRAME;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    uint64_t received = 0;
    *first_ns = *last_ns = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, idle_ms) == 0) {
            if (*done)
                return received;
            continue;
        }
        int n = recvmmsg(fd, msgs, BLAST_BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0)
            continue;
        uint64_t t = now_ns();
        for (int i = 0; i < n; i++)
            if (msgs[i].msg_len >= 6 && memcmp(bufs[i], dst_mac, 6) == 0) {
                if (!received)
                    *first_ns = t;
                *last_ns = t;
                received++;
            }
    }
}
