"""Booking and sending a worker's transmissions (`Sender`): what the window lets go leaves here, first
transmissions and retransmissions alike, each numbered in one sequence over all operations.

The numbering is what loss detection and the timers reason with: a request's latest transmission (`seq`)
orders it against every other transmission of the worker; its first (`first_seq`) and the count of first
transmissions before it (`firsts_before`) say which later results are evidence that it was lost (loss.py).
Frames are queued as rows of the operations' prebuilt arrays and sent together by `flush()`, one
`send_many` for what one pump lets go.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from host_agent.operation import Operation
from host_agent.timers import Timers
from host_agent.transport import BatchIO
from host_agent.window import Schedule


class Sender:
    """One worker's transmissions: the sequence numbers, the queue of frames booked as sent, and the
    counters of what went (`counters`: the worker's WorkerStats). `io` is the worker's BatchIO, replaced
    when its transport is."""

    def __init__(
        self,
        schedule: Schedule,
        timers: Timers,
        counters,
        clock: Callable[[], float],
        straggler_timeout,
        query_frames: Callable[[Operation, np.ndarray], np.ndarray] | None = None,
    ):
        self.schedule, self.timers, self.counters, self.clock = schedule, timers, counters, clock
        self.straggler_timeout = straggler_timeout
        # QUERY frames for requests of an operation: a retransmission asks the switch first (its STATUS says
        # whether the request itself must go again, resend_full); None: retransmissions carry the request
        self.query_frames = query_frames
        self.io: BatchIO | None = None
        self.tx = 0  # transmissions so far: orders every transmission of this worker
        self.firsts = 0  # first transmissions so far (loss.py: what "later" means across operations)
        self._queue: list[np.ndarray] = []  # frames booked as sent, for flush()

    def send_ready(self) -> bool:
        """Send what the window lets go: requests presumed lost again, then new ones. Whether any went."""
        if not self.schedule.waiting:
            return False
        ready = self.schedule.take()
        now = self.clock()
        for op, idx, why in ready:
            if why is None:
                self._first_sends(op, idx, len(idx), now)
                self.transmit(op, idx, now)
            else:
                self.retransmit(op, idx[np.argsort(op.seq[idx], kind="stable")], now, why)
        self.flush()
        return bool(ready)

    def retransmit(self, op: Operation, idx: np.ndarray, now: float, why: str) -> None:
        """Send requests idx again now, counted in `why` (one of WorkerStats' *_retransmissions): as QUERY
        frames when the worker queries first, else the requests themselves."""
        self.transmit(op, idx, now, None if self.query_frames is None else self.query_frames(op, idx))
        self.counters.retransmissions += len(idx)
        setattr(self.counters, why, getattr(self.counters, why) + len(idx))

    def resend_full(self, op: Operation, idx: np.ndarray, now: float) -> None:
        """Send requests idx again now, themselves: a STATUS said the switch lacks them (or their results)."""
        self.transmit(op, idx, now)
        self.counters.status_resends += len(idx)

    def hold(self, op: Operation, i: int) -> None:
        """Request i of op is in its cell, which waits for other workers: it counts as sent now (loss.py
        then finds it lost only by results of requests sent after this), with no evidence against it."""
        op.seq[i] = self.tx
        op.in_order = False
        self.tx += 1
        op.evidence[i] = 0

    def transmit(self, op: Operation, idx: np.ndarray, now: float, frames: np.ndarray | None = None) -> None:
        """Book transmissions of requests `idx` (distinct, in this order) and queue their frames (`frames`, one
        row per request, or the requests' own); flush() sends them."""
        k = len(idx)
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        if frames is None and hi - lo == k and lo >= op.sent_hi:  # requests lo..hi-1 not sent before, in order
            self._first_run(op, lo, hi)
            return
        seqs = np.arange(self.tx, self.tx + k, dtype=np.int64)
        self.tx += k
        attempts = op.attempts[idx]
        first = attempts == 0
        if first.all():  # first transmissions (from send_ready)
            op.first_seq[idx] = seqs
            op.firsts_before[idx] = np.arange(self.firsts + 1, self.firsts + k + 1)
            if op.in_order and (int(idx[0]) < op.sent_hi or (k > 1 and bool((idx[1:] <= idx[:-1]).any()))):
                op.in_order = False
        else:
            op.in_order = False
            op.first_seq[idx[first]] = seqs[first]
            op.firsts_before[idx] = self.firsts + np.cumsum(first)
        n_first = int(np.count_nonzero(first))
        self.firsts += n_first
        op.first_transmissions += n_first
        op.in_flight_count += n_first
        op.attempts[idx] = attempts + 1
        op.seq[idx] = seqs
        op.evidence[idx] = 0
        if n_first < k:
            self.timers.resent(op, idx[~first], now)
        op.sent_hi = max(op.sent_hi, int(idx.max()) + 1)
        if frames is None:
            frames = op.frames[idx]
        else:
            op.in_order = False
        self._queue.append(frames)
        self.counters.packets_sent += k
        self.counters.bytes_sent += frames.size

    def sent_natively(self, op: Operation, lo: int, hi: int, now: float) -> None:
        """Book requests lo .. hi − 1 of `op`, first transmissions that a native wait sent at `now` (the
        paced window's, receive.NativeSorter.take_until), as send_ready would have booked them."""
        self._first_sends(op, slice(lo, hi), hi - lo, now)
        self._first_run(op, lo, hi, queue=False)

    def _first_sends(self, op: Operation, idx, k: int, now: float) -> None:
        """What first transmissions of `k` requests `idx` of `op` at `now` set besides their sequence numbers:
        when they went, when they release their slots (partial aggregation), the timers, the count."""
        op.first_sent[idx] = now
        if self.straggler_timeout is not None:
            op.release_at[idx] = now + self.straggler_timeout
        self.timers.sent(now)
        self.counters.requests += k

    def _first_run(self, op: Operation, lo: int, hi: int, queue: bool = True) -> None:
        """transmit() of requests lo .. hi − 1, none sent before (all above op.sent_hi), over slices (queue
        False: their frames went already)."""
        k = hi - lo
        op.seq[lo:hi] = op.first_seq[lo:hi] = np.arange(self.tx, self.tx + k, dtype=np.int64)
        self.tx += k
        op.firsts_before[lo:hi] = np.arange(self.firsts + 1, self.firsts + k + 1)
        self.firsts += k
        op.first_transmissions += k
        op.in_flight_count += k
        op.attempts[lo:hi] = 1
        op.evidence[lo:hi] = 0
        op.sent_hi = hi
        frames = op.frames[lo:hi]
        if queue:
            self._queue.append(frames)
        self.counters.packets_sent += k
        self.counters.bytes_sent += frames.size

    def control(self, rows: np.ndarray) -> None:
        """Queue frames that are no request (RELEASEs, with the padding their results need), counted as sent."""
        self._queue.append(rows)
        self.counters.packets_sent += len(rows)
        self.counters.bytes_sent += rows.size

    def flush(self) -> None:
        """Send the queued frames, in the order they were queued."""
        queue = self._queue
        if not queue:
            return
        if len(queue) == 1:
            self.io.send(queue[0])
        elif all(rows.shape[1] == queue[0].shape[1] for rows in queue):
            self.io.send(np.concatenate(queue))
        else:
            for rows in queue:
                self.io.send(rows)
        queue.clear()
