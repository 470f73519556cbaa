/* Batched frame I/O for the worker's raw socket: one sendmmsg / recvmmsg per batch instead of one
 * system call and one Python bytes object per frame.
 *
 * Frames live in caller-owned buffers laid out as rows: frame i is base[i * stride .. i * stride + len).
 * Compiled at run time by host_agent/native/__init__.py and loaded with ctypes (which releases the GIL
 * around each call). The I/O knows nothing of the THC format; the sections below it (request frames,
 * taking results in) know the header's offsets, from contract/__init__.py.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
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
 * The THC header (contract/__init__.py's THC_HEADER) starts at byte 42 of the frame: version 42, op|kind 43,
 * job_id 44, worker_id 45, slot 46, count 48, lane_bits 49, round 50, value 54, key 58; the payload at 62. */

enum {
    THC_AT = 42,
    PAYLOAD_AT = 62,
};

/* contract/__init__.py's THC_VERSION: host_agent/native/__init__.py passes it with -D. */
#ifndef THC_VERSION
#error "compile with -DTHC_VERSION=<contract.THC_VERSION>"
#endif

/* ---- building an operation's request frames (wire.build_requests, natively) ---------------------------
 *
 * Frames for requests q0 .. q0 + n - 1, each `frame_len` bytes, rows of `out`: the template (the frame with
 * slot 0, round 0 and a zero payload; any padding after the payload stays as the template has it), slot
 * q mod window and round q div window (its low 32 bits) written into the header, and `carried` bytes of
 * row i of `payloads` after it. Returns n, or -1 if the arguments cannot describe such frames. */
long thc_build_requests(uint8_t *out, long frame_len, const uint8_t *tmpl, int64_t q0, int64_t window,
                        const uint8_t *payloads, long carried, long n)
{
    if (n < 0 || q0 < 0 || window <= 0 || carried < 0 || frame_len < PAYLOAD_AT || carried > frame_len - PAYLOAD_AT
        || q0 > INT64_MAX - n)
        return -1;
    for (long i = 0; i < n; i++) {
        uint8_t *f = out + i * frame_len;
        int64_t q = q0 + i, slot = q % window;
        uint32_t round = (uint32_t)(q / window);
        memcpy(f, tmpl, (size_t)frame_len);
        f[THC_AT + 4] = (uint8_t)(slot >> 8), f[THC_AT + 5] = (uint8_t)slot;
        f[THC_AT + 8] = (uint8_t)(round >> 24), f[THC_AT + 9] = (uint8_t)(round >> 16);
        f[THC_AT + 10] = (uint8_t)(round >> 8), f[THC_AT + 11] = (uint8_t)round;
        if (carried)
            memcpy(f + PAYLOAD_AT, payloads + i * carried, (size_t)carried);
    }
    return n;
}

struct thc_take {
    int64_t job_id, key, window, next_request;
    int64_t q0, n, op, per_packet, n_workers; /* n < 0: no operation in flight */
    int64_t lane_bits, result_bytes;          /* what every fitting result carries */
    int64_t outstanding;
    int64_t ref_count;                        /* in/out: -1 until the operation's first accepted result */
    uint8_t *done;                            /* per request of the operation: answered */
    int64_t *attempts;                        /* per request: transmissions so far (paced sends set 1) */
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

/* The per-frame rules over rows 0 .. nrows-1 of `base`, appending accepted rows and requests to
 * acc_row / acc_req from index `taken` on and adding to st's counts. Accepted requests are marked in done[]
 * (so a later copy in the same pass is a duplicate) and st->outstanding counts them down; the caller
 * clears done[] again. `order` (or NULL): the lowest request that may still be in flight, advanced past
 * answered ones; *out_of_order is set when a result answers any other (a result that may show loss). */
static long take_rows(const uint8_t *base, long stride, long nrows, const int32_t *lens, struct thc_take *st,
                      int64_t *acc_row, int64_t *acc_req, long taken, int64_t *order, int *out_of_order)
{
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
        if (st->n < 0 || st->outstanding == 0 || i < 0 || i >= st->n || st->done[i]) {
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
        st->done[i] = 1;
        if (order) {
            if (i != *order)
                *out_of_order = 1;
            while (*order < st->n && st->done[*order])
                (*order)++;
        }
        acc_row[taken] = r;
        acc_req[taken] = i;
        taken++;
        st->outstanding--;
    }
    return taken;
}

long thc_take_results(const uint8_t *base, long stride, long nrows, const int32_t *lens, struct thc_take *st,
                      int64_t *acc_row, int64_t *acc_req)
{
    int64_t outstanding = st->outstanding;
    st->ignored = st->bad_key = st->stale = st->duplicate = st->rejected = st->accepted = 0;
    long taken = take_rows(base, stride, nrows, lens, st, acc_row, acc_req, 0, NULL, NULL);
    for (long t = 0; t < taken; t++)
        st->done[acc_req[t]] = 0; /* the caller books the results */
    st->outstanding = outstanding;
    st->accepted = taken;
    return taken;
}

/* ---- waiting for an operation's results (protocol.WorkerProtocol, natively) ------------------------
 *
 * For one operation whose requests are all sent once, in request order, with nothing else in flight:
 * receive batch after batch and take each in as thc_take_results would, recording per batch how many
 * results it brought (batch_end: the running count) and when it came (batch_time, CLOCK_MONOTONIC s, as
 * Python's time.monotonic), until one of these, after which Python must look:
 *   - the operation is complete (stop bit 1);
 *   - a batch held a frame that was not accepted: ignored, another key, stale, duplicate, rejected (2);
 *   - a result answered another request than the lowest in flight: it may show loss (4, of the last
 *     batch: Python then looks for evidence as it would have);
 *   - the batch record is full (8);
 *   - time: `until` before any result, then the earliest of `fixed` and the latest result's arrival +
 *     `slack` (the timers a result restarts are never shorter than slack), and never past `cap` (0).
 * With fd < 0 the `preloaded` rows already in the buffer are the one batch, and nothing is received.
 * The batches' results go to acc_req (each request once: at most n); done[] is left as it was.
 *
 * Receive coalescing (receive.coalescing_hold, in C): with `coalesce` > 0, once `hold_after` results of
 * the operation are in (`answered`, `first`, `last`: the operation's before this wait) and 2 or more are
 * outstanding, the wait sleeps for coalesce x the time the outstanding results should take at the pace
 * they have come (at most as long as they have been coming, at most `max_hold`, never past the deadline)
 * before it receives again, if that is at least `min_hold`: a few wake-ups instead of one per result at
 * a slow link's pace. batch_held[b] says batch b was taken in after such a hold (its spacing is the
 * hold's, not the switch's: Python takes no spacing sample from it).
 *
 * Paced sending (protocol.WorkerProtocol's paced window, natively): when the window held back the
 * operation's last requests (send_next < send_end, all of them new, the rows of send_base), each batch of
 * results lets as many of them go as it answered, never more than send_cap in flight: what the window's
 * take would let go at that batch (its limit is fixed for the wait; growth beyond it waits for Python).
 * Each send is recorded (send_batch_end: the running send_next, send_batch_time) for Python to book, and
 * no hold is slept while requests are still to be sent (their results would wait behind it). The wait
 * starts by sending as many as send_cap leaves room for: an operation none of whose requests is sent yet
 * goes out and is waited for in this one call, as the window's take would have let it go
 * (protocol.WorkerProtocol.pump leaves its first sends to this call). */

struct thc_wait {
    double until, fixed, slack, cap;        /* in: CLOCK_MONOTONIC seconds */
    int64_t low;                            /* in: the lowest request in flight */
    int64_t max_batches, preloaded;         /* in */
    int64_t frames, bytes, batches, stop;   /* out; stop < 0: -errno of a receive */
    double coalesce, max_hold, min_hold;    /* in: receive coalescing (coalesce 0: none) */
    double first, last;                     /* in: the operation's first and latest result (s; if answered) */
    int64_t hold_after, answered;           /* in: results before a hold; the operation's results so far */
    int64_t holds;                          /* out: the holds slept */
    const uint8_t *send_base;               /* in: the operation's request frames, one a row */
    int64_t send_stride;                    /* in: bytes a row (and a frame) */
    int64_t send_next, send_end;            /* in/out: the next request to send; in: one past the last */
    int64_t send_cap, in_flight;            /* in: most requests in flight; in/out: requests in flight */
    int64_t max_sends, sends;               /* in: room in the send record; out: sends recorded */
    int64_t *send_batch_end;                /* out: send_next after each send */
    double *send_batch_time;                /* out: when each send went (CLOCK_MONOTONIC s) */
};

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The paced sends a batch that answered `answered` requests lets go (see above): 0 or -errno. A sent
 * request counts one transmission at once (st->attempts), so that its result, which may come within this
 * wait, is taken in rather than refused as one for a request never sent. */
static long send_paced(int fd, struct thc_wait *w, struct thc_take *st, int64_t answered)
{
    w->in_flight -= answered;
    int64_t k = w->send_cap - w->in_flight;
    if (k > w->send_end - w->send_next)
        k = w->send_end - w->send_next;
    if (k <= 0 || w->sends >= w->max_sends)
        return 0;
    long r = thc_send_rows(fd, w->send_base + w->send_next * w->send_stride, w->send_stride, w->send_stride, k);
    if (r < 0)
        return r;
    for (int64_t i = w->send_next; i < w->send_next + k; i++)
        st->attempts[i] = 1;
    w->send_next += k; /* a frame the device queue refused counts as sent: a loss like any other */
    w->in_flight += k;
    w->send_batch_end[w->sends] = w->send_next;
    w->send_batch_time[w->sends] = monotonic_s();
    w->sends++;
    return 0;
}

/* How long to sleep before receiving again (0: none), after a batch at `now` (see above). */
static double coalescing_hold(const struct thc_wait *w, int64_t answered, double first, double last,
                              int64_t outstanding, double deadline, double now)
{
    if (!(w->coalesce > 0) || answered < w->hold_after || answered < 2 || outstanding < 2)
        return 0.0;
    double span = last - first;
    if (!(span > 0))
        return 0.0;
    double hold = w->coalesce * (double)outstanding * span / (double)(answered - 1);
    if (hold > span)
        hold = span;
    if (hold > w->max_hold)
        hold = w->max_hold;
    if (hold > deadline - now)
        hold = deadline - now;
    return hold >= w->min_hold && hold > 0 ? hold : 0.0;
}

/* ---- booking a whole operation natively (booking.book_in_order and Sender.sent_natively, in C) ----------
 *
 * When one wait sent every request of an operation (none was sent before it) and took in all their results
 * in request order with nothing refused (stop 1), what Python would then book is fixed by the record: each
 * request's first transmission (its send's time, its number in the worker's transmission order), its result's
 * arrival, the round trips in arrival order, one spacing sample per batch that is one arrival. thc_book
 * does that booking here: the operation's per-request arrays (host_agent/operation.py), the two RFC 6298
 * estimators (timers.Smoothed.samples: the same double operations in the same order, so the estimates are
 * bit-identical to Python's), and the scalars Python copies back (protocol.WorkerProtocol._booked_natively).
 * tests/host_agent/test_native_booking.py holds it against the Python booking on twin workers. */

struct thc_book {
    double *times;   /* in: the operation's float64 rows (operation.Operation._times): answered_at, first_sent */
    int64_t *ints;   /* in: its int64 rows (_ints): attempts, seq, first_seq, firsts_before, evidence */
    int64_t tx, firsts;                                /* in: the worker's transmissions and first ones so far */
    int64_t per_window, adaptive, held;                /* in: min(W, n); estimates move; a hold came before */
    int64_t rtt_known, gap_known;                      /* in/out: the estimators have a first sample */
    double rtt_mean, rtt_var, gap_mean, gap_var;       /* in/out */
    int64_t booked, fresh;                             /* out: booked here; the last batch was one arrival */
    double first, last, min_rtt;                       /* out: the first and latest result, shortest round trip */
};

/* timers.Smoothed.samples of one value, with gains 1/8 and 1/4 divided by per_window */
static void smoothed_sample(int64_t *known, double *mean, double *var, double x, int64_t per_window)
{
    if (!*known) {
        *mean = x, *var = x / 2, *known = 1;
        return;
    }
    double alpha = 0.125 / (double)per_window, beta = 0.25 / (double)per_window;
    *var += beta * (fabs(*mean - x) - *var);
    *mean += alpha * (x - *mean);
}

static void book(struct thc_book *bk, const struct thc_wait *w, int64_t n, const int64_t *batch_end,
                 const double *batch_time, const uint8_t *batch_held)
{
    double *answered_at = bk->times, *first_sent = bk->times + n;
    int64_t *attempts = bk->ints, *seq = bk->ints + n, *first_seq = bk->ints + 2 * n;
    int64_t *firsts_before = bk->ints + 3 * n, *evidence = bk->ints + 4 * n;
    int64_t s = 0;
    for (int64_t i = 0; i < n; i++) { /* Sender.sent_natively of each send */
        while (w->send_batch_end[s] <= i)
            s++;
        first_sent[i] = w->send_batch_time[s];
        seq[i] = first_seq[i] = bk->tx + i;
        firsts_before[i] = bk->firsts + 1 + i;
        attempts[i] = 1;
        evidence[i] = 0;
    }
    int64_t start = 0, answered = 0;
    int fresh = !bk->held;
    double min_rtt = INFINITY, last = 0.0;
    /* the spacing samples first (book_in_order collects them batch by batch, Timers.spacing takes them after) */
    for (int64_t b = 0; b < w->batches; b++) {
        fresh = b == 0 ? !bk->held : !batch_held[b];
        int64_t k = batch_end[b] - start;
        if (k) {
            double at = batch_time[b];
            if (fresh && (answered || k > 1)) {
                if (bk->adaptive)
                    smoothed_sample(&bk->gap_known, &bk->gap_mean, &bk->gap_var, answered ? at - last : 0.0, 1);
                fresh = 0;
            }
            if (!answered)
                bk->first = at;
            answered += k;
            last = at;
        }
        start = batch_end[b];
    }
    bk->fresh = fresh;
    start = 0;
    for (int64_t b = 0; b < w->batches; b++) { /* the round trips, in arrival order (Timers.answered) */
        double at = batch_time[b];
        for (int64_t i = start; i < batch_end[b]; i++) {
            double rtt = at - first_sent[i];
            answered_at[i] = at;
            if (rtt < min_rtt)
                min_rtt = rtt;
            if (bk->adaptive)
                smoothed_sample(&bk->rtt_known, &bk->rtt_mean, &bk->rtt_var, rtt, bk->per_window);
        }
        start = batch_end[b];
    }
    bk->last = last;
    bk->min_rtt = min_rtt;
    bk->booked = 1;
}

long thc_wait_results(int fd, uint8_t *base, long stride, long cap_rows, int32_t *lens, struct thc_take *st,
                      struct thc_wait *w, int64_t *acc_row, int64_t *acc_req, int64_t *batch_end,
                      double *batch_time, uint8_t *batch_held, struct thc_book *bk)
{
    int from_start = bk && w->send_next == 0 && w->answered == 0; /* nothing of the operation sent before */
    if (bk)
        bk->booked = 0;
    long taken = 0;
    int64_t order = w->low, outstanding = st->outstanding;
    int answered = 0, held = 0;
    double last = 0.0, op_first = w->first, op_last = w->last;
    st->ignored = st->bad_key = st->stale = st->duplicate = st->rejected = st->accepted = 0;
    w->frames = w->bytes = w->batches = w->stop = w->holds = w->sends = 0;
    if (fd >= 0 && w->send_next < w->send_end) { /* what the window has room for goes at once */
        long err = send_paced(fd, w, st, 0);
        if (err < 0) {
            w->stop = err;
            return 0;
        }
    }
    for (;;) {
        long n;
        double deadline = answered ? (w->fixed < last + w->slack ? w->fixed : last + w->slack) : w->until;
        if (deadline > w->cap)
            deadline = w->cap;
        if (fd < 0) {
            if (w->batches)
                break;
            n = w->preloaded;
        } else {
            double left = deadline - monotonic_s();
            n = thc_recv_rows(fd, base, stride, cap_rows, left > 0 ? (long)(left * 1e9) : 0, lens);
            if (n < 0) {
                w->stop = n;
                break;
            }
            if (n == 0) {
                if (monotonic_s() >= deadline)
                    break;
                continue; /* a signal: wait on */
            }
        }
        double now = fd < 0 ? 0.0 : monotonic_s();
        int64_t before = st->ignored + st->bad_key + st->stale + st->duplicate + st->rejected;
        int disorder = 0;
        long was = taken;
        taken = take_rows(base, stride, n, lens, st, acc_row, acc_req, taken, &order, &disorder);
        w->frames += n;
        for (long r = 0; r < n; r++)
            w->bytes += lens[r];
        batch_end[w->batches] = taken;
        batch_time[w->batches] = now;
        batch_held[w->batches] = (uint8_t)held;
        held = 0;
        w->batches++;
        if (taken > was) {
            if (!answered && w->answered == 0)
                op_first = now;
            answered = 1;
            last = op_last = now;
        }
        w->stop = (st->outstanding == 0) | (st->ignored + st->bad_key + st->stale + st->duplicate + st->rejected
                                              != before) << 1 | disorder << 2 | (w->batches >= w->max_batches) << 3;
        if (w->stop)
            break;
        if (fd >= 0 && w->send_next < w->send_end && taken > was) {
            long err = send_paced(fd, w, st, taken - was);
            if (err < 0) {
                w->stop = err;
                break;
            }
            if (w->sends >= w->max_sends) {
                w->stop = 8; /* the send record is full: Python books, then waits again */
                break;
            }
        }
        if (fd >= 0 && answered && w->send_next >= w->send_end) {
            double next = w->fixed < last + w->slack ? w->fixed : last + w->slack;
            double hold = coalescing_hold(w, w->answered + taken, op_first, op_last, st->outstanding,
                                          next < w->cap ? next : w->cap, now);
            if (hold > 0) {
                struct timespec ts = {.tv_sec = (time_t)hold, .tv_nsec = (long)((hold - (double)(time_t)hold) * 1e9)};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                    ;
                held = 1;
                w->holds++;
            }
        }
    }
    st->accepted = taken;
    if (from_start && w->stop == 1 && w->send_next == w->send_end && w->send_end == st->n && taken == st->n) {
        book(bk, w, st->n, batch_end, batch_time, batch_held); /* done[] stays set: every request is answered */
        return taken;
    }
    for (long t = 0; t < taken; t++)
        st->done[acc_req[t]] = 0; /* Python books the results, batch by batch */
    st->outstanding = outstanding;
    return taken;
}
