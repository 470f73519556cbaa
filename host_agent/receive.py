"""Taking a batch of received frames in: which are results of this worker's requests, stored, in arrival
order, by the per-frame rules, in numpy (`Sorter`) or in C (`NativeSorter`, fastio.c's thc_take_results);
the released results a straggler keeps for requests it has not sent (`EarlyResults`); and how long a
blocking wait lets results accumulate before it takes them in (`coalescing_hold`).

The per-frame rules: a frame that is not a THC result of this job is ignored; one with the job's id and
another key is counted and never matched; results are matched by (job_id, slot, round) — every worker's
copy carries the same sums, so a copy whose worker_id was not rewritten is still good; one for a request
not numbered yet is stale (an old run, a wrong window), one for a request answered before (or an older
operation's) a duplicate; one whose op, count, lane width or payload size does not fit the request is
rejected. The first fitting result of a request is its answer.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from host_agent import native, wire
from host_agent.operation import Operation
from host_agent.window import Schedule
from native_build import address_of

_NONE = np.zeros(0, np.int64)


def released(results: wire.ResultBatch, n_workers: int, partial: bool) -> np.ndarray:
    """Which results are of released slots (a count below the job's n): only with partial aggregation."""
    if not partial:
        return np.zeros(len(results.valid), np.bool_)
    count = np.asarray(results.count, np.int64)
    return (count >= 1) & (count < n_workers)


class EarlyResults:
    """Released results for requests a straggler has not numbered yet (its later operations), kept by
    request number, at most `capacity`; a new operation takes those of its requests, never sending them."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._kept: dict[int, bytes] = {}  # request number -> the result frame

    def __bool__(self) -> bool:
        return bool(self._kept)

    def keep(self, results: wire.ResultBatch, rows: np.ndarray, q: np.ndarray) -> int:
        """Keep the results in `rows` (for requests q[rows]); how many fitted."""
        kept = 0
        for r in rows.tolist():
            if len(self._kept) >= self.capacity:
                break
            end = wire.PAYLOAD_OFFSET + int(results.payload_len[r])
            self._kept.setdefault(int(q[r]), bytes(results.rows[r, :end]))
            kept += 1
        return kept

    def batch_for(self, op: Operation) -> wire.ResultBatch | None:
        """The kept results of `op`'s requests as one batch (forgetting those of older operations, which
        finished without them); None if there are none."""
        for q in [q for q in self._kept if q < op.q0]:
            del self._kept[q]
        ready = sorted(q for q in self._kept if q < op.q0 + op.n)
        if not ready:
            return None
        frames = [self._kept.pop(q) for q in ready]
        rows = np.zeros((len(frames), max(len(f) for f in frames)), np.uint8)
        for k, f in enumerate(frames):
            rows[k, : len(f)] = np.frombuffer(f, np.uint8)
        return wire.parse_rows(rows, np.array([len(f) for f in frames], np.int32))


class Sorter:
    """The per-frame rules over a batch of parsed frames, with numpy; with `early` (partial aggregation)
    released results for requests not sent yet are answers, or kept for later operations."""

    def __init__(
        self, job_id: int, key: int, schedule: Schedule, n_workers: int, counters, early: EarlyResults | None = None
    ):
        self.job_id, self.key, self.schedule, self.n_workers = job_id, key, schedule, n_workers
        self.counters, self.early = counters, early

    def take(self, op: Operation | None, results: wire.ResultBatch, next_request: int) -> tuple[np.ndarray, np.ndarray]:
        """Sort a batch of frames (ignored, stale, duplicate, rejected, accepted: counted), store the
        accepted results; their rows and request numbers within `op`, in order."""
        rows, _, i = self.take_all([] if op is None else [op], results, next_request)
        return rows, i

    def take_all(
        self, ops: list[Operation], results: wire.ResultBatch, next_request: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """take() for the operations in flight `ops` (in request order): the accepted results' rows, which
        operation each answers (an index into ops) and its request number within it, in arrival order."""
        c = self.counters
        n = len(results.valid)
        ours = (
            results.valid
            & ((results.kind == wire.KIND_RESULT) | (results.kind == wire.KIND_RESULT_RETX))
            & (results.job_id == self.job_id)
        )
        c.ignored_frames += n - int(np.count_nonzero(ours))
        foreign = ours & (results.key != self.key)  # not this run's: never matched to a request
        c.bad_key_results += int(np.count_nonzero(foreign))
        ours &= ~foreign
        size = self.schedule.size
        q = self.schedule.number(results.slot, results.round)
        unsent = ours & ((results.slot >= size) | (q >= next_request))
        is_released = released(results, self.n_workers, self.early is not None)
        if self.early is not None:
            early = np.flatnonzero(unsent & is_released & (results.slot < size))
            kept = self.early.keep(results, early, q) if early.size else 0  # counted when taken
            unsent[early[:kept]] = False
            ours[early[:kept]] = False
        c.stale_results += int(np.count_nonzero(unsent))
        rows = np.flatnonzero(ours & ~unsent)  # results of requests this worker has numbered
        found = [(_NONE, _NONE)] * len(ops)
        for k, op in enumerate(ops):
            i = q[rows] - op.q0
            mine = (i >= 0) & (i < op.n)
            found[k] = self._take_for(op, results, rows[mine], i[mine], is_released)
            rows = rows[~mine]
        c.duplicate_results += len(rows)  # of an operation that is complete
        which = np.concatenate([np.full(len(r), k, np.int64) for k, (r, _) in enumerate(found)] + [_NONE])
        accepted = np.concatenate([r for r, _ in found] + [_NONE])
        i = np.concatenate([i for _, i in found] + [_NONE])
        order = np.argsort(accepted, kind="stable")
        return accepted[order], which[order], i[order]

    def _take_for(
        self, op: Operation, results: wire.ResultBatch, rows: np.ndarray, i: np.ndarray, is_released: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The per-frame rules for results `rows` of requests i of `op`, in arrival order."""
        c = self.counters
        mine = ~op.done[i]
        c.duplicate_results += len(rows) - int(np.count_nonzero(mine))  # answered before
        rows, i = rows[mine], i[mine]
        sent = op.attempts[i] > 0
        early = ~sent & is_released[rows]  # a released slot's result: the answer, the request need not go out
        c.early_results += int(np.count_nonzero(early))
        sent |= early
        c.stale_results += len(rows) - int(np.count_nonzero(sent))  # never sent: an old run's
        rows, i = rows[sent], i[sent]
        if not rows.size:
            return _NONE, _NONE
        fits = op.fit_rows(results.op[rows], results.count[rows], results.lane_bits[rows], results.payload_len[rows],
                           self.n_workers)  # fmt: skip
        # the first fitting result of a request is its answer; a later copy (fitting or not) is a duplicate
        base = int(i.min())
        first_at = np.full(int(i.max()) - base + 1, len(rows), np.int64)
        fitting = np.flatnonzero(fits)
        np.minimum.at(first_at, i[fitting] - base, fitting)
        position = np.arange(len(rows))
        accepted = first_at[i - base] == position
        duplicate = first_at[i - base] < position
        if op.outstanding <= np.count_nonzero(accepted):  # the operation completes within this batch:
            done_at = np.flatnonzero(accepted)[op.outstanding - 1]  # anything after that finds no operation
            duplicate[done_at + 1 :] = True
            accepted[done_at + 1 :] = False
        c.duplicate_results += int(np.count_nonzero(duplicate))
        c.rejected_results += int(np.count_nonzero(~accepted & ~duplicate))
        rows, i = rows[accepted], i[accepted]
        if rows.size:
            op.store_rows(i, results, rows)
        return rows, i


class NativeSorter:
    """Sorter.take in C (fastio.c thc_take_results): the same rules, one pass over the frames in a BatchIO's
    buffer. It keeps no early results: partial aggregation uses the numpy Sorter."""

    def __init__(self, lib, job_id: int, key: int, window: int, n_workers: int, counters):
        self.lib = lib
        self.job_id, self.key, self.window, self.n_workers = job_id, key, window, n_workers
        self.counters = counters
        self._no_op_take = self._op_take = self._op_ref = None
        self._filled_for = None  # the operation _op_take describes
        self._wait = None
        self._acc_row = self._acc_req = np.zeros(0, np.int64)

    def take(self, op: Operation | None, io, n: int, next_request: int) -> tuple[np.ndarray, np.ndarray]:
        st = self._state(op)
        st.next_request, st.outstanding = next_request, op.outstanding if op is not None else 0
        if len(self._acc_row) < n:
            self._acc_row, self._acc_req = np.zeros(len(io.buf), np.int64), np.zeros(len(io.buf), np.int64)
            self._acc_addresses = self._acc_row.ctypes.data, self._acc_req.ctypes.data
        taken = self.lib.thc_take_results(
            io.buf_address, io.stride, n, io.lengths_address, ctypes.byref(st), *self._acc_addresses
        )
        c = self.counters
        c.ignored_frames += st.ignored
        c.stale_results += st.stale
        c.duplicate_results += st.duplicate
        c.rejected_results += st.rejected
        c.bad_key_results += st.bad_key
        if op is not None and st.ref_count >= 0:
            op.count = st.ref_count
        return self._acc_row[:taken], self._acc_req[:taken].copy()

    MAX_BATCHES = 256  # batches one wait records before Python books them

    def take_until(
        self,
        op: Operation,
        io,
        fd: int,
        bounds: tuple[float, float, float, float],
        next_request: int,
        hold: tuple[float, float] = (0.0, 0.0),
        send_cap: int = 0,
        book=None,
    ) -> None:
        """Batches of results for `op` (every request sent so far sent once, in order, nothing else in
        flight), taken in by fastio.c's thc_wait_results (fd < 0: the io.preloaded frames already in io's
        buffer, one batch) until Python must look; `bounds` are its times (until, fixed, slack, cap); `hold`
        (coalesce, max_hold) lets results accumulate between batches as coalescing_hold would (coalesce 0:
        never). `send_cap` > 0 (fd >= 0): the paced window held back requests op.sent_hi .. op.n - 1, and
        each batch lets as many of them go as it answered, at most send_cap in flight (`sends`).
        Counts the frames, bytes and unaccepted frames; record() gives what the wait took in (the sends are
        the caller's to book). `book`: a native.Book (by reference) that the wait fills when it sent and
        answered all of `op` cleanly (its `booked`): op's arrays are then booked, and the caller copies the
        rest (booking.booked_natively) without the record."""
        st = self._state(op)
        st.next_request, st.outstanding = next_request, op.outstanding
        if len(self._acc_row) < max(len(io.buf), op.n):
            size = max(len(io.buf), op.n)
            self._acc_row, self._acc_req = np.zeros(size, np.int64), np.zeros(size, np.int64)
            self._acc_addresses = self._acc_row.ctypes.data, self._acc_req.ctypes.data
        w = self._wait
        if w is None:
            w = self._wait = native.Wait(max_batches=self.MAX_BATCHES)
            self._ends, self._times = np.zeros(self.MAX_BATCHES, np.int64), np.zeros(self.MAX_BATCHES, np.float64)
            self._held = np.zeros(self.MAX_BATCHES, np.uint8)
            self._wait_ref = ctypes.byref(w)
            self._record_addresses = self._ends.ctypes.data, self._times.ctypes.data, self._held.ctypes.data
            self._send_ends = np.zeros(self.MAX_BATCHES, np.int64)
            self._send_times = np.zeros(self.MAX_BATCHES, np.float64)
            w.send_batch_end, w.send_batch_time = self._send_ends.ctypes.data, self._send_times.ctypes.data
            w.max_sends = self.MAX_BATCHES
            w.hold_after = HOLD_AFTER
        w.until, w.fixed, w.slack, w.cap = bounds
        w.low, w.preloaded = op.span()[0], io.preloaded
        w.coalesce, w.max_hold = hold
        w.min_hold = MIN_HOLD
        w.answered = op.answered
        if op.answered:
            w.first, w.last = op.first_result, op.last_result
        w.send_next = w.send_end = op.sent_hi
        if send_cap > 0 and fd >= 0 and op.sent_hi < op.n:
            frames = op.frames  # one C-contiguous row a request (wire.build_requests)
            w.send_base, w.send_stride, w.send_end = address_of(frames), frames.shape[1], op.n
            w.send_cap, w.in_flight = send_cap, op.in_flight_count
        taken = self.lib.thc_wait_results(
            fd, io.buf_address, io.stride, len(io.buf), io.lengths_address, self._op_ref, self._wait_ref,
            *self._acc_addresses, *self._record_addresses, book,
        )  # fmt: skip
        c = self.counters
        c.packets_received += w.frames
        c.bytes_received += w.bytes
        stop = w.stop
        if stop < 0:
            raise OSError(-stop, f"recvmmsg or sendmmsg: {os.strerror(-stop)}")
        if stop & 2:  # frames not accepted (only ever in the last batch)
            c.ignored_frames += st.ignored
            c.stale_results += st.stale
            c.duplicate_results += st.duplicate
            c.rejected_results += st.rejected
            c.bad_key_results += st.bad_key
        if op.count is None and st.ref_count >= 0:
            op.count = st.ref_count
        self._taken = taken

    def record(self):
        """What the latest take_until took in (valid until the next wait): the accepted requests, each batch's
        end in them, each batch's arrival time, whether each came after a hold, why it stopped (bits: 1
        complete, 2 a frame not accepted, 4 a result out of order in the last batch, 8 a record full), and
        the sends: (op.sent_hi after each, when it went)."""
        w, nb = self._wait, self._wait.batches
        held = self._held[:nb].tolist() if w.holds else None
        sends = (self._send_ends[: w.sends].tolist(), self._send_times[: w.sends].tolist()) if w.sends else None
        acc = self._acc_req[: self._taken].copy()
        return acc, self._ends[:nb].tolist(), self._times[:nb].tolist(), held, w.stop, sends

    def _state(self, op: Operation | None):
        """The native take's view of `op`: one struct, filled anew when the operation changes (building one
        per operation cost more than the take itself); the operation's arrays never move."""
        if op is None:
            st = self._no_op_take
            if st is None:
                st = self._no_op_take = self._new_take()
            return st
        st = self._op_take
        if st is None:
            st = self._op_take = self._new_take()
            self._op_ref = ctypes.byref(st)
        if self._filled_for is not op:
            st.q0, st.n, st.op, st.per_packet = op.q0, op.n, op.op, op.per_packet
            st.lane_bits, st.result_bytes = op.lane_bits, op.result_bytes
            st.done, st.attempts, st.sums, st.counts = op.addresses()
            self._filled_for = op
        st.ref_count = -1 if op.count is None else op.count
        return st

    def _new_take(self):
        st = native.Take(job_id=self.job_id, key=self.key, window=self.window, n=-1, ref_count=-1)
        st.n_workers = self.n_workers
        return st


MIN_HOLD = 0.0005  # a shorter hold saves less than the sleep costs
HOLD_AFTER = 4  # results of the operation that must be in before its pace is trusted


def coalescing_hold(op: Operation, coalesce: float, max_hold: float, next_timer: float | None, now: float) -> float:
    """How long a blocking wait lets results of `op`, every request of which is sent, accumulate before
    taking them in (receive coalescing).

    Taking results in costs a wake-up and a fixed amount of Python per batch, so results that trickle in
    one by one at a slow link's pace (one per frame time) cost a worker most of its CPU, which on
    a small machine the switch and the other workers need. Once every request of the operation has been
    sent, a result only frees a slot nobody is waiting for, so the worker sleeps for `coalesce` (1/2) of
    the time the outstanding results should take at the pace they have come so far (at most `max_hold`,
    at most as long as results have been coming, never past `next_timer`): log(n) wake-ups instead of n,
    and never past the expected end. 0 before HOLD_AFTER results have come or with one outstanding."""
    if op.answered < HOLD_AFTER or op.outstanding < 2:
        return 0.0
    span = op.last_result - (op.first_result if op.first_result is not None else op.last_result)
    if span <= 0:
        return 0.0
    # at most as long as results have been coming: a pause early on (a late worker) makes the pace look
    # slow, and the hold must not outlast what it has seen
    hold = min(coalesce * op.outstanding * span / (op.answered - 1), span, max_hold)
    if next_timer is not None:
        hold = min(hold, next_timer - now)
    return hold if hold >= MIN_HOLD else 0.0
