/* Batched frame I/O for the worker's raw socket: one sendmmsg / recvmmsg per batch instead of one
 * system call and one Python bytes object per frame.
 *
 * Frames live in caller-owned buffers laid out as rows: frame i is base[i * stride .. i * stride + len).
 * Compiled at run time by host_agent/native/__init__.py and loaded with ctypes (which releases the GIL
 * around each call). Nothing here knows the THC format.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define CHUNK 64

/* Send rows 0 .. n-1 of `base` (each `len` bytes, `stride` apart). A frame the device queue refuses
 * (ENOBUFS, EAGAIN) is dropped, as a loss on the wire would be. Returns the number of frames handed to
 * the kernel, or -errno on any other error. */
long thc_send_rows(int fd, const uint8_t *base, long stride, long len, long n)
{
    struct mmsghdr msgs[CHUNK];
    struct iovec iov[CHUNK];
    long done = 0, sent = 0;

    while (done < n) {
        int k = (n - done) < CHUNK ? (int)(n - done) : CHUNK;
        memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)k);
        for (int i = 0; i < k; i++) {
            iov[i].iov_base = (void *)(base + (done + i) * stride);
            iov[i].iov_len = (size_t)len;
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int r = sendmmsg(fd, msgs, (unsigned)k, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ENOBUFS || errno == EAGAIN) {
                done += 1; /* the first frame of the chunk was refused: dropped */
                continue;
            }
            return -errno;
        }
        done += r;
        sent += r;
    }
    return sent;
}

/* Receive up to `n` frames into rows of `base` (`stride` bytes each; a longer frame is cut to stride, as
 * recv(stride) would), their lengths into lens[]. Waits up to timeout_ns for the first frame (0: do not
 * wait), then takes whatever is queued without waiting. Returns the number of frames (0 on timeout or a
 * signal), or -errno. */
long thc_recv_rows(int fd, uint8_t *base, long stride, long n, long timeout_ns, int32_t *lens)
{
    struct mmsghdr msgs[CHUNK];
    struct iovec iov[CHUNK];
    long got = 0;
    int waited = 0;

    while (got < n) {
        int k = (n - got) < CHUNK ? (int)(n - got) : CHUNK;
        memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)k);
        for (int i = 0; i < k; i++) {
            iov[i].iov_base = base + (got + i) * stride;
            iov[i].iov_len = (size_t)stride;
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int r = recvmmsg(fd, msgs, (unsigned)k, MSG_DONTWAIT, NULL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return got ? got : -errno;
            if (got || waited || timeout_ns <= 0)
                return got;
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            struct timespec ts = {.tv_sec = timeout_ns / 1000000000L, .tv_nsec = timeout_ns % 1000000000L};
            waited = 1;
            int p = ppoll(&pfd, 1, &ts, NULL);
            if (p < 0 && errno != EINTR)
                return -errno;
            if (p <= 0)
                return 0;
            continue;
        }
        for (int i = 0; i < r; i++)
            lens[got + i] = (int32_t)(msgs[i].msg_len < (unsigned)stride ? msgs[i].msg_len : (unsigned)stride);
        got += r;
        if (r < k)
            return got; /* the queue is empty */
    }
    return got;
}
