"""Booking a native wait's results in one pass (`book_in_order`): what WorkerProtocol._book_batches does
batch after batch, for the common case of a wait whose results all answered the lowest request in flight;
and booking a whole operation in C (`native_book`, `booked_natively`) when the wait also sent all of it.

fastio.c's thc_wait_results takes in batch after batch of one operation's results and records each batch's
end and arrival time; Python then books them (done, timed, round-trip and spacing samples, the timers, the
window). Booked batch by batch, each result of a small batch costs a pass through the protocol's per-result
bookkeeping; booked here, the batches of a wait cost one pass, and leave the very state batch-by-batch
booking leaves (tests/host_agent/test_bulk_booking.py holds the two side by side).
"""

from __future__ import annotations

import ctypes

import numpy as np

from host_agent import native
from host_agent.operation import Operation


def book_in_order(worker, op: Operation, acc: np.ndarray, ends: list, times: list, held: list | None = None) -> None:
    """Book the batches of one native wait of `worker` (a WorkerProtocol) for `op`, the only operation in
    flight, sent in order, once each: acc[: ends[-1]] are requests lo, lo + 1, ... answered in that order,
    batch b ending at ends[b] and arriving at times[b] (after a hold if held[b]; None: no hold). One spacing
    sample per batch not taken in after a hold (the first result of a batch after an earlier one, or a batch
    of several), the round trips in arrival order, the timers as the last batch sets them."""
    start, gaps, rtts, total = 0, [], [], ends[-1] if ends else 0
    lo = int(acc[0]) if total else 0
    for b, end in enumerate(ends):
        fresh = not worker._held if b == 0 else not (held and held[b])  # a batch is one arrival: one sample
        worker._held = False
        k = end - start
        if k:
            at, a, z = times[b], lo + start, lo + end
            if fresh and (op.answered or k > 1):
                gaps.append(at - op.last_result if op.answered else 0.0)
                fresh = False
            op.answered_at[a:z] = at
            sent = op.first_sent[a:z]
            op.min_rtt = min(op.min_rtt, at - float(sent.max()))
            rtts.append(at - sent)
            if not op.answered:
                op.first_result = at
            op.answered += k
            op.last_result = at
        worker._batch = fresh
        start = end
    if not total:
        return
    hi, timers = lo + total, worker.timers
    op.done[lo:hi] = True
    timers.results_of(int(op.seq[hi - 1]))
    op.outstanding -= total
    worker.counters.results += total
    for gap in gaps:
        timers.spacing(gap)
    op.in_flight_count -= total
    left = op.in_flight_count  # the only operation, sent in order: its tail is what is left
    per_window = max(1, min(worker.window, op.n))
    timers.answered(op.last_result, np.concatenate(rtts), per_window, left, 0 < left <= timers.tail)
    worker.schedule.grow(total)
    if lo + worker.window < op.n:
        worker.schedule.answered(op, np.arange(lo, hi, dtype=np.int64))
    if op.outstanding == 0:
        worker._finish(op)


class NativeBook:
    """A worker's struct thc_book (fastio.c) and its reference for the C call, made once."""

    def __init__(self) -> None:
        self.struct = native.Book()
        self.ref = ctypes.byref(self.struct)


def native_book(worker, op: Operation) -> NativeBook:
    """The native booking of `op` for `worker` (a WorkerProtocol), should the wait send and answer all of it
    cleanly (fastio.c thc_book): op's arrays, and the worker's state the booking starts from."""
    book = worker.native_book
    if book is None:
        book = worker.native_book = NativeBook()
    b = book.struct
    b.times, b.ints = op.booking_addresses()
    b.tx, b.firsts, b.per_window = worker.sender.tx, worker.sender.firsts, max(1, min(worker.window, op.n))
    t = worker.timers
    b.adaptive, b.held = t.adaptive, worker._held
    rtt, gap = t.rtt, t.gap
    b.rtt_known, b.gap_known = rtt.mean is not None, gap.mean is not None
    if rtt.mean is not None:
        b.rtt_mean, b.rtt_var = rtt.mean, rtt.var
    if gap.mean is not None:
        b.gap_mean, b.gap_var = gap.mean, gap.var
    return book


def booked_natively(worker, op: Operation, b: native.Book) -> None:
    """One wait sent every request of `op` and took all their results in order, and the C booked op's arrays
    and both estimates (native_book): the rest of what Sender.sent_natively and book_in_order would have
    done, from the same state to the same state (tests/host_agent/test_native_booking.py)."""
    n, s, c, t = op.n, worker.sender, worker.counters, worker.timers
    s.tx += n
    s.firsts += n
    op.first_transmissions = op.sent_hi = n
    c.requests += n
    c.packets_sent += n
    c.bytes_sent += op.frames.size
    worker.schedule.sent_natively(op)
    t.newest_answered = max(t.newest_answered, s.tx - 1)
    op.outstanding = op.in_flight_count = 0
    c.results += n
    op.answered, op.first_result, op.last_result = n, b.first, b.last
    op.min_rtt = min(op.min_rtt, b.min_rtt)
    if t.adaptive:
        t.rtt.mean, t.rtt.var = b.rtt_mean, b.rtt_var
        t.rtt.timeout = t.rtt.estimate
        t.backoffs = 0
        if b.gap_known:
            t.gap.mean, t.gap.var = b.gap_mean, b.gap_var
            t.gap.timeout = t.gap.estimate
    t.stop()
    worker._batch, worker._held = bool(b.fresh), False
    worker.schedule.grow(n)
    worker._finish(op)
