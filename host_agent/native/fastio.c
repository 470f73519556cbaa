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

/* ---- taking in a batch of results (protocol.WorkerProtocol._on_results, natively) ------------------
 *
 * The per-frame rules of the worker protocol (host_agent/protocol.py, p4/README.md), applied to received
 * frames in arrival order: a frame that is not a THC result of this job is ignored; one with this job's id
 * but another key is counted apart (another run's job, or not from the switch); one for a request this
 * worker has not numbered, or numbered but never sent, is stale; one for a request already answered (or of
 * an earlier operation, or arriving once the operation is complete) is a duplicate; one whose op, count,
 * lane width or payload size does not fit the operation is rejected; the first that fits is accepted, its
 * sums stored. `st` carries the operation; the accepted rows and their request numbers (within the
 * operation) go to acc_row / acc_req, in order; done[] is left as it was (the caller books the results).
 *
 * The THC header (spec/contract.py's THC_HEADER) starts at byte 42 of the frame: version 42, op|kind 43,
 * job_id 44, worker_id 45, slot 46, count 48, lane_bits 49, round 50, value 54, key 58; the payload at 62. */

enum {
    THC_AT = 42,
    PAYLOAD_AT = 62,
};

/* spec/contract.py's THC_VERSION: host_agent/native/__init__.py passes it with -D. */
#ifndef THC_VERSION
#error "compile with -DTHC_VERSION=<spec.contract.THC_VERSION>"
#endif

struct thc_take {
    int64_t job_id, key, window, next_request;
    int64_t q0, n, op, per_packet, n_workers; /* n < 0: no operation in flight */
    int64_t lane_bits, result_bytes;          /* what every fitting result carries */
    int64_t outstanding;
    int64_t ref_count;                        /* in/out: -1 until the operation's first accepted result */
    uint8_t *done;                            /* per request of the operation: answered */
    const int64_t *attempts;                  /* per request: transmissions so far */
    int32_t *sums;                            /* n * per_packet (NORM: the maxima's float32 bits) */
    uint8_t *counts;                          /* per request: the accepted result's count */
    int64_t ignored, bad_key, stale, duplicate, rejected, accepted; /* out: this batch's counts */
};

static inline uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* The lanes of a result payload into int32 sums: 8-bit, 16-bit big-endian or int32 big-endian. */
static void store_lanes(int32_t *out, const uint8_t *p, int64_t lanes, int64_t lane_bits)
{
    if (lane_bits == 8) {
        for (int64_t k = 0; k < lanes; k++)
            out[k] = p[k];
    } else if (lane_bits == 16) {
        for (int64_t k = 0; k < lanes; k++)
            out[k] = (int32_t)be16(p + 2 * k);
    } else {
        for (int64_t k = 0; k < lanes; k++)
            out[k] = (int32_t)be32(p + 4 * k);
    }
}

long thc_take_results(const uint8_t *base, long stride, long nrows, const int32_t *lens, struct thc_take *st,
                      int64_t *acc_row, int64_t *acc_req)
{
    long taken = 0;
    int64_t left = st->outstanding;
    st->ignored = st->bad_key = st->stale = st->duplicate = st->rejected = st->accepted = 0;
    for (long r = 0; r < nrows; r++) {
        const uint8_t *f = base + r * stride;
        const uint8_t *h = f + THC_AT;
        long len = lens[r];
        if (len < PAYLOAD_AT || be16(f + 12) != 0x0800 || f[14] != 0x45 || f[23] != 17 || be16(f + 36) != 21576
            || h[0] != THC_VERSION || (be16(f + 20) & 0x3FFF)) {
            st->ignored++;
            continue;
        }
        long end = 14 + (long)be16(f + 16);
        if (end > len || end < PAYLOAD_AT) {
            st->ignored++;
            continue;
        }
        int op = h[1] >> 4, kind = h[1] & 0x0F;
        if ((kind != 1 && kind != 2) || h[2] != st->job_id) {
            st->ignored++;
            continue;
        }
        if (be32(h + 16) != (uint32_t)st->key) {
            st->bad_key++;
            continue;
        }
        int64_t slot = be16(h + 4), round = be32(h + 8);
        int64_t q = round * st->window + slot;
        if (slot >= st->window || q >= st->next_request) {
            st->stale++;
            continue;
        }
        int64_t i = q - st->q0;
        if (st->n < 0 || left == 0 || i < 0 || st->done[i]) {
            st->duplicate++;
            continue;
        }
        if (st->attempts[i] == 0) {
            st->stale++;
            continue;
        }
        int64_t count = h[6], lane = h[7], size = end - PAYLOAD_AT;
        int ok = op == st->op && count >= 1 && count <= st->n_workers && lane == st->lane_bits
                 && size == st->result_bytes;
        if (ok && st->ref_count >= 0)
            ok = count == st->ref_count;
        if (!ok) {
            st->rejected++;
            continue;
        }
        st->ref_count = count;
        store_lanes(st->sums + i * st->per_packet, f + PAYLOAD_AT, st->per_packet, lane);
        st->counts[i] = (uint8_t)count;
        st->done[i] = 1; /* for the rest of the batch; undone below */
        acc_row[taken] = r;
        acc_req[taken] = i;
        taken++;
        left--;
    }
    for (long t = 0; t < taken; t++)
        st->done[acc_req[t]] = 0;
    st->accepted = taken;
    return taken;
}
