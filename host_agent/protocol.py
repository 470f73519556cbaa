"""The worker side of the THC aggregation protocol (p4/README.md, "Worker protocol"): `WorkerProtocol`
runs one worker's aggregation calls, `drive()` several in-process workers.

This module is the orchestration only. Every worker numbers its requests the same way (request q uses slot
q mod W in round q div W, once request q − W is answered), several operations may be in flight at once,
and each mechanism (the schedule, sending, recovery, timers, loss, receiving, booking) lives in a module of
its own, so each can be tested alone: host_agent/README.md ("Modules", "The protocol", "Batches, and the
native helper") says which decides what. A request's framing comes from the job's description
(contract/job.py), the one the switch's job was added with, so worker and switch cannot disagree on it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from contract.job import JobSpec
from host_agent import booking, loss, native, receive, wire
from host_agent.clock import VirtualClock
from host_agent.operation import Operation, ProtocolError, pack_fix32, pack_indices, pack_norms
from host_agent.pool_fallback import PoolFallback
from host_agent.recovery import Recovery
from host_agent.sender import Sender
from host_agent.timers import Timers
from host_agent.transport import BatchIO, Transport
from host_agent.window import Schedule

__all__ = [
    "AggregationTimeout",
    "Interrupted",
    "Operation",
    "ProtocolError",
    "WorkerProtocol",
    "WorkerStats",
    "drive",
]


class AggregationTimeout(TimeoutError):
    """A request got no result before the deadline: the switch, the job or another worker is missing."""


class Interrupted(Exception):
    """`wait`'s interrupt asked to stop waiting. The operation stays in flight: `wait` on it again resumes
    it, and it still completes (or times out) by the same rules."""


@dataclass
class WorkerStats:
    """Counters of one worker. An operation is one all_max / all_sum call (one aggregation round)."""

    packets_sent: int = 0
    bytes_sent: int = 0
    packets_received: int = 0
    bytes_received: int = 0
    requests: int = 0  # first transmissions
    retransmissions: int = 0  # timer_ + fast_ + probe_retransmissions
    timer_retransmissions: int = 0  # a retransmission timer expired (nothing came for the RTO)
    fast_retransmissions: int = 0  # results of later requests showed it lost (incl. early retransmission)
    probe_retransmissions: int = 0  # the tail probe: nothing came for the PTO with only a tail in flight
    releases: int = 0  # RELEASE frames sent: a request waited past the straggler timeout
    statuses: int = 0  # STATUS answers to this worker's QUERY frames taken in
    status_resends: int = 0  # requests sent again because a STATUS said the switch lacks them or their result
    partial_results: int = 0  # results accepted with a count below the job's n (a released slot)
    early_results: int = 0  # released results taken before this worker sent the request (never sent)
    results: int = 0  # results accepted (one per request)
    duplicate_results: int = 0  # a result for a request already answered
    stale_results: int = 0  # a result for no request of ours (an old run, a wrong window)
    rejected_results: int = 0  # for one of our requests, but op, count, lane width or size do not fit it
    bad_key_results: int = 0  # this job's id, another key: another run's job, or not from the switch
    ignored_frames: int = 0  # not a THC result for this job
    operations: int = 0
    operation_seconds: float = 0.0
    last_operation_seconds: float = 0.0
    max_operation_seconds: float = 0.0

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["mean_operation_seconds"] = self.operation_seconds / self.operations if self.operations else 0.0
        return out


class WorkerProtocol:
    """One worker of one job: request numbering, window, retransmission, result collection.

    `spec` is the description the switch's job was added with (its ticket's, `thc-ctl job add --save`): its
    window W, key, worker count n and framing (K coordinates a THC request, `spec.fix32_per_request` int32 a FIX32 one).
    Requests are numbered from `first_request` (0 for a freshly added job), the same on every worker.
    host_agent/README.md, "The protocol", says how the congestion window, loss recovery (fast and early
    retransmission, the RFC 6298 timer, the tail probe), partial aggregation and pool fallbacks work, and
    what reordering and duplication may cost; everything recovered is counted in `stats()`.
    """

    def __init__(
        self,
        transport: Transport,
        builder: wire.FrameBuilder,
        spec: JobSpec,
        worker_id: int,
        *,
        timeout: float = 0.05,
        min_timeout: float = 0.002,
        backoff: float = 2.0,
        max_timeout: float = 1.0,
        deadline: float = 30.0,
        adaptive: bool = True,
        dupthresh: int = 3,
        early_retransmit: bool = True,
        coalesce: float = 0.5,
        max_hold: float = 0.01,
        clock: Callable[[], float] = time.monotonic,
        first_request: int = 0,
        straggler_timeout: float | None = None,
        early_capacity: int = 65536,
        query_first: bool = False,
    ):
        if not isinstance(spec, JobSpec):
            raise TypeError(f"a WorkerProtocol takes the job's JobSpec (contract/job.py), not {type(spec).__name__}")
        if not 0 <= worker_id < wire.MAX_WORKERS:
            raise ValueError(f"worker_id {worker_id} is not 0..{wire.MAX_WORKERS - 1}")
        if timeout <= 0 or min_timeout <= 0 or backoff < 1 or max_timeout < max(timeout, min_timeout) or deadline <= 0:
            raise ValueError(
                "need timeout > 0, min_timeout > 0, backoff >= 1, max_timeout >= timeout and min_timeout, deadline > 0"
            )
        if dupthresh < 0:
            raise ValueError(f"dupthresh {dupthresh} must be >= 0 (0: no fast retransmission)")
        if straggler_timeout is not None and not straggler_timeout > 0:
            raise ValueError(f"straggler_timeout {straggler_timeout} must be > 0 s (None: off)")
        if coalesce < 0 or max_hold < 0:
            raise ValueError("need coalesce >= 0 and max_hold >= 0")
        self._settings = dict(  # what for_job carries over to the same worker in another job
            timeout=timeout, min_timeout=min_timeout, backoff=backoff, max_timeout=max_timeout,
            deadline=deadline, adaptive=adaptive, dupthresh=dupthresh, early_retransmit=early_retransmit,
            coalesce=coalesce, max_hold=max_hold, clock=clock,
            straggler_timeout=straggler_timeout, early_capacity=early_capacity, query_first=query_first,
        )  # fmt: skip
        self.spec = spec
        self.job_id, self.worker_id, self.window = spec.job_id, worker_id, spec.window
        self.n_workers, self.key = spec.workers, spec.key
        self.timeout, self.min_timeout, self.backoff = timeout, min_timeout, backoff
        self.max_timeout, self.deadline = max_timeout, deadline
        self.clock = clock
        self.adaptive = adaptive
        self.dupthresh, self.early_retransmit = dupthresh, early_retransmit
        self.coalesce, self.max_hold = coalesce, max_hold
        self.straggler_timeout = straggler_timeout
        self.counters = WorkerStats()
        self.schedule = Schedule(spec.window)
        self.timers = Timers(
            timeout=timeout, min_timeout=min_timeout, max_timeout=max_timeout, backoff=backoff, deadline=deadline,
            tail=max(dupthresh, 1), adaptive=adaptive,
        )  # fmt: skip
        # released results that came before their request (partial aggregation only)
        self._early = receive.EarlyResults(early_capacity) if straggler_timeout is not None else None
        self._sorter = receive.Sorter(self.job_id, self.key, self.schedule, self.n_workers, self.counters, self._early)
        self.sender = Sender(
            self.schedule, self.timers, self.counters, clock, straggler_timeout,
            query_frames=self._query_frames if query_first else None,
        )  # fmt: skip
        self.recovery = Recovery(
            self.schedule, self.timers, self.sender, self.counters, clock,
            dupthresh=dupthresh, early_retransmit=early_retransmit, straggler_timeout=straggler_timeout,
            timeout_error=lambda op, i, now: timeout_error(self, op, i, now), release_frames=self._release_frames,
            identity=(self.job_id, self.key, worker_id),
        )  # fmt: skip
        self._frame_lib = native.load()  # builds request frames in C (wire.build_requests); None: numpy
        self.native_book: booking.NativeBook | None = None  # the native booking of a whole operation
        self.transport, self.builder = transport, builder
        self._batch = True  # the next batch of results is one arrival, a sample of their spacing
        self._held = False  # the next batch is taken in after a hold (WorkerProtocol.hold)
        self.next_request = first_request
        self.last_operation: Operation | None = None  # the latest completed operation (its timings)
        self.pool_fallback = None  # a pool job's host_agent/pool_fallback.PoolFallback: where FALLBACK uses go

    @property
    def transport(self) -> Transport:
        return self._transport

    @transport.setter
    def transport(self, transport: Transport) -> None:
        """The worker's transport; replacing it (e.g. with a wrapper) takes effect at the next send."""
        self._transport = transport
        self._io = self.sender.io = BatchIO(transport)
        # the C take of a batch of results, or None: the numpy one (partial aggregation keeps early results)
        lib = native.load() if self._early is None else None
        self._native = (
            receive.NativeSorter(lib, self.job_id, self.key, self.window, self.n_workers, self.counters)
            if lib is not None
            else None
        )
        # a raw socket with the native helper: results can be waited for in C (receive.NativeSorter.take_until)
        native_io = self._native is not None and getattr(transport, "_native", None) is not None
        self._wait_fd = transport.fileno() if native_io and hasattr(transport, "fileno") else -1

    @property
    def rto(self) -> float:
        """The retransmission timeout of new requests."""
        return self.timers.rto

    # ---- starting operations -------------------------------------------------------------------

    def start_max(self, values: Sequence[float] | np.ndarray) -> Operation:
        """Element-wise max over workers of non-negative float32 values: wire.NORMS_PER_REQUEST a NORM
        request (operation.pack_norms)."""
        k, size = wire.NORMS_PER_REQUEST, wire.request_payload_bytes(wire.OP_NORM, wire.LANES_INT32)
        payloads, lengths = pack_norms(values)
        return self._start(wire.OP_NORM, len(payloads) // size, payloads, size, lengths, k)

    def start_sum_indices(self, chunks: Sequence[np.ndarray]) -> Operation:
        """Per-coordinate sums over workers of the table values of 4-bit indices, chunk by chunk: K =
        spec.coords_per_request a request (operation.pack_indices)."""
        k = self.spec.coords_per_request
        packed, lengths = pack_indices(chunks, k)
        return self._start(wire.OP_THC, len(packed) // (k // 2), packed, k // 2, lengths, k)

    def start_sum_packed(self, packed: np.ndarray, chunk_lengths: Sequence[int]) -> Operation:
        """start_sum_indices of indices already packed as its requests carry them (THCCompressor.encode_packed
        writes them so): `packed` holds each chunk's indices two a byte, padded with index 0 to a multiple of
        K, chunk after chunk. No pass over the indices in Python: the bytes go into the request frames as
        they are. The result is flat: (every request's sums one after another as int32, contributors), the
        layout THCCompressor.decode_lanes reads (per-coordinate counts per chunk of `chunk_lengths`)."""
        k = self.spec.coords_per_request
        lengths = list(chunk_lengths)
        n_requests = sum(-(-n // k) for n in lengths)
        if packed.dtype != np.uint8 or packed.ndim != 1 or packed.size < n_requests * (k // 2):
            raise ValueError(f"packed indices must be a 1-D uint8 array of {n_requests * (k // 2)} bytes")
        op = self._start(wire.OP_THC, n_requests, packed[: n_requests * (k // 2)], k // 2, lengths, k)
        op.flat = True
        return op

    def start_sum_fix32(self, chunks: Sequence[np.ndarray]) -> Operation:
        """Per-coordinate int32 sums over workers (wrapping), spec.fix32_per_request values per request,
        chunk by chunk."""
        k = self.spec.fix32_per_request
        payloads, lengths = pack_fix32(chunks, k)
        return self._start(wire.OP_FIX32, len(payloads) // (4 * k), payloads, 4 * k, lengths, k)

    def _start(self, op, n_requests, payloads, payload_size, lengths, per_packet) -> Operation:
        if self._early is not None:  # released results that came while we were away: kept
            while n := self._io.recv(0.0):
                self._on_results(n)
        rows = np.frombuffer(payloads, np.uint8).reshape(n_requests, payload_size) if payload_size else None
        lane_bits = wire.op_lane_bits(op, self.spec.lane_bits)
        frames = wire.build_requests(
            self.builder, op, self.job_id, self.worker_id, self.next_request, n_requests, self.window, rows, lane_bits,
            self.key, self._frame_lib,
        )  # fmt: skip
        operation = Operation(
            op,
            self.next_request,
            n_requests,
            frames,
            lengths,
            per_packet,
            lane_bits,
            self.clock(),
            self.straggler_timeout is not None,
        )
        self.next_request += n_requests
        self.schedule.open(operation)
        if n_requests == 0:
            self._finish(operation)
        elif self._early:
            self._take_early(operation)
        return operation

    def _take_early(self, op: Operation) -> None:
        """Answer the new operation's requests from the released results kept for them (never sent)."""
        batch = self._early.batch_for(op)
        if batch is None:
            return
        _, i = self._sorter.take(op, batch, self.next_request)
        now = self.clock()
        for j in i.tolist():
            if op.complete:
                break
            self._accept(op, j, now)

    # ---- making progress -------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return bool(self.schedule.ops)

    @property
    def in_flight(self) -> list[Operation]:
        """The operations started and not complete, oldest first."""
        return list(self.schedule.ops)

    def pump(self, wait: float = 0.0, linger: bool = False) -> bool:
        """Send what the window allows, take in the results that are there (waiting up to `wait` s for the
        first, never past the next retransmission time), retransmit what is due. True if anything moved.
        `linger`: on a raw socket, go on taking results in natively while Python has nothing to decide."""
        op = self._waitable()
        # an operation whose requests a native wait may send (_paced_sends) goes out in that wait's one call
        moved = self.sender.send_ready() if op is None or op.sent_hi == op.n else False
        if self.busy and wait > 0:
            due = self.next_deadline()
            if due is not None:
                wait = min(wait, max(0.0, due - self.clock()))
            elif op is not None and op.sent_hi == 0:  # its first sends start the retransmission timer
                wait = min(wait, self.timers.rto)
        if op is not None:
            if self._take_natively(op, wait, linger):
                self.sender.flush()
                self.sender.send_ready()
                moved = True
            moved |= self.recovery.fire()
            return moved
        n = self._io.recv(wait if self.busy else 0.0)
        # results that come together are one arrival for the spacing of results; after a hold (receive
        # coalescing) their spacing is the hold's, not the switch's, and must not stretch the probe timeout
        self._batch, self._held = not self._held, False
        if n:
            self._on_results(n)
            self.sender.flush()
            moved = True
            moved |= self.sender.send_ready()
        moved |= self.recovery.fire()
        return moved

    def _waitable(self) -> Operation | None:
        """The one operation in flight when Python has nothing to decide until its results come (every
        request sent so far sent once, in order; no timeout being judged, no QUERY): they can be taken in
        natively, batch after batch (receive.NativeSorter.take_until), and booked as one pump per batch
        would. On a raw socket, the requests the congestion window still holds back may wait too: the
        native wait sends them as results come (paced_sends), as the next pumps would have."""
        ops = self.schedule.ops
        if self._native is None or len(ops) != 1 or self.schedule.judging or self.sender.query_frames is not None:
            return None
        op = ops[0]
        if not op.in_order or op.first_transmissions < op.sent_hi:
            return None
        if self.schedule.waiting or op.sent_hi < op.n:
            return op if self._paced_sends(op) else None
        return op

    def _paced_sends(self, op: Operation) -> bool:
        """Whether a native wait may send op's held-back requests itself: all that waits is the rest of op,
        new, in order, and the wait runs on a raw socket with the protocol's own clock."""
        return (
            self._wait_fd >= 0
            and self.clock is time.monotonic
            and op.frames.flags.c_contiguous
            and self.schedule.held_back(op)
        )

    def _take_natively(self, op: Operation, wait: float, linger: bool) -> bool:
        """Results of `op` (see _waitable) until Python must look: on a raw socket with the protocol's clock
        time.monotonic, in C until the operation completes, a frame needs a decision or a timer could be
        due; otherwise the one batch the transport has within `wait` s. Each batch is booked as a pump would
        book it, at its arrival time (in one pass when the results are in order: booking.py). Whether any
        frame came."""
        io, before = self._io, self.counters.packets_received
        now = self.clock()
        fd = self._wait_fd
        if fd < 0 or self.clock is not time.monotonic:
            fd, io.preloaded = -1, io.recv(wait)
            now = self.clock()
        until = now + wait
        bounds = (until, self.timers.fixed_due(), min(self.timeout, self.min_timeout), np.inf if linger else until)
        hold = (self.coalesce, self.max_hold)  # receive coalescing between batches, in C (see hold())
        cap = self.schedule.paced_cap if fd >= 0 and op.sent_hi < op.n else 0
        book = booking.native_book(self, op) if cap and op.sent_hi == 0 and not op.answered else None
        native_take = self._native
        native_take.take_until(op, io, fd, bounds, self.next_request, hold, send_cap=cap, book=book and book.ref)
        if book is not None and book.struct.booked:
            booking.booked_natively(self, op, book.struct)
            return True
        acc, ends, times, held, stop, sends = native_take.record()
        if sends is not None:  # booked before the results, whose round trips start at these first sends
            lo = op.sent_hi
            for hi, at in zip(*sends):
                self.sender.sent_natively(op, lo, hi, at)
                lo = hi
            self.schedule.sent_natively(op)
        if fd < 0:
            times = [now] * len(ends)
        if stop & 4 or (len(acc) and int(acc[-1]) - int(acc[0]) != len(acc) - 1):  # may show loss, or has holes
            self._book_batches(op, acc, ends, times, stop, held)
        else:
            booking.book_in_order(self, op, acc, ends, times, held)
        return self.counters.packets_received > before

    def _book_batches(self, op: Operation, acc: np.ndarray, ends: list, times: list, stop: int, held=None) -> None:
        """Book the batches of one native wait one by one, each as a pump would (at its arrival time);
        `held`: per batch whether it was taken in after a hold (None: none was)."""
        start, last = 0, len(ends) - 1
        for b, end in enumerate(ends):
            self._batch = not self._held if b == 0 else not (held and held[b])
            self._held = False
            if end > start:
                i, at = acc[start:end], times[b]
                if b == last and stop & 4 and self.dupthresh and not loss.quiet([op], op, i):
                    for j in i.tolist():
                        self._accept(op, j, at, detect=True)
                elif len(i) <= 8:  # a few results: Python per result costs less than numpy per batch
                    for j in i.tolist():
                        self._accept(op, j, at)
                elif not stop & 4 and int(i[-1]) - int(i[0]) == end - start - 1:  # requests lo..hi-1, in order
                    self._accept_run(op, int(i[0]), int(i[-1]) + 1, at)
                else:
                    self._accept_many(op, i, at)
            start = end

    def wait(self, operation: Operation, interrupt: Callable[[], bool] | None = None, poll: float = 0.05):
        """Block until `operation` completes; its result (see Operation.result).

        `interrupt`, when given, is asked at least every `poll` s while the operation waits; when it says
        True, `Interrupted` is raised and the operation stays in flight (a worker learning of a change of
        the job's membership, see host_agent.aggregator)."""
        while not operation.complete:
            if interrupt is not None and interrupt():
                raise Interrupted(f"job {self.job_id} worker {self.worker_id}: interrupted in request {operation.q0}+")
            # a native wait holds between its batches itself (fastio.c thc_wait_results): no hold here then
            hold = 0.0 if self._wait_fd >= 0 and self._waitable() is not None else self.hold(operation)
            if hold > 0:
                time.sleep(hold)
                self._held = True
            due = self.next_deadline()
            wait = self.max_timeout if due is None else max(0.0, due - self.clock())
            self.pump(wait if interrupt is None else min(wait, poll), linger=interrupt is None)
        return operation.result()

    def abandon(self) -> list[Operation]:
        """Drop the operations in flight (nothing of them is sent again) and return them."""
        ops = self.in_flight
        self.schedule.clear()
        self.timers.stop()
        return ops

    def for_job(self, job_id: int, n_workers: int, key: int) -> WorkerProtocol:
        """A protocol for this worker in another job (the survivors' job after a failure: this job's
        description with another id, n and key): the same transport, addresses, window and timer settings,
        requests numbered from 0, fresh counters. The round-trip estimates carry over: the path to the
        switch is the same."""
        spec = self.spec.replace(job_id=job_id, workers=n_workers, key=key)
        new = WorkerProtocol(self.transport, self.builder, spec, self.worker_id, **self._settings)
        new.timers.carry_over(self.timers)
        if self.pool_fallback is not None:  # the new job's uses fall back to the same server (counted afresh)
            new.pool_fallback = PoolFallback(self.pool_fallback.server)
        return new

    MIN_HOLD = receive.MIN_HOLD
    HOLD_AFTER = receive.HOLD_AFTER

    def hold(self, op: Operation) -> float:
        """How long a blocking wait lets results accumulate before taking them in (receive coalescing,
        receive.coalescing_hold), never past a timer. Results are then taken in (restarting the timers)
        before any timer is looked at, so a hold makes no timer fire that the results would have prevented.
        0 when requests are still to be sent, with a virtual clock, or when `coalesce` is 0."""
        if (
            not self.coalesce
            or self.schedule.ops != [op]
            or self.schedule.waiting
            or op.first_transmissions < op.n
            or isinstance(self.clock, VirtualClock)
        ):
            return 0.0
        return receive.coalescing_hold(op, self.coalesce, self.max_hold, self.timers.next_due(), self.clock())

    def next_deadline(self) -> float | None:
        """When the earliest retransmission (or the deadline, or a RELEASE) is due; None if no request is
        waiting."""
        return self.recovery.next_deadline()

    def _release_frames(self, op: Operation, q: np.ndarray) -> np.ndarray:
        """RELEASE frames for requests q of op (partial aggregation, recovery.py)."""
        return self.header_frames(op, q, wire.KIND_RELEASE)

    def _query_frames(self, op: Operation, idx: np.ndarray) -> np.ndarray:
        """QUERY frames for requests idx of op: what a retransmission sends first (Sender.retransmit)."""
        return self.header_frames(op, op.q0 + idx, wire.KIND_QUERY)

    def header_frames(self, op: Operation, q: np.ndarray, kind: int) -> np.ndarray:
        """Frames of `kind` that name requests q of op by their slot and round (and the padding the kind needs)."""
        slots, rounds = self.schedule.slot(q), self.schedule.round(q)
        return wire.build_rows(
            self.builder, op.op, kind, self.job_id, self.worker_id, slots, rounds, lane_bits=op.lane_bits,
            key=self.key,
        )  # fmt: skip

    # ---- taking results in -----------------------------------------------------------------------

    def _on_results(self, n: int) -> None:
        """Take in the batch of n received frames in the transport's buffer, in arrival order."""
        io, c, ops = self._io, self.counters, self.in_flight
        lengths = io.lengths[:n]
        c.packets_received += n
        c.bytes_received += int(lengths.sum())
        if self.sender.query_frames is not None:  # STATUS answers come only to a worker's QUERY frames
            statuses = np.flatnonzero((io.buf[:n, wire.THC_OFFSET + 1] & 0x0F) == wire.KIND_STATUS)
            if statuses.size:
                self.recovery.on_statuses(wire.parse_rows(io.buf[statuses], lengths[statuses]))
                c.ignored_frames -= statuses.size  # the take below passes over them as no result
        if self.pool_fallback is not None:  # a pool job: the switch sends some uses elsewhere (FALLBACK)
            fallbacks = np.flatnonzero((io.buf[:n, wire.THC_OFFSET + 1] & 0x0F) == wire.KIND_FALLBACK)
            if fallbacks.size:
                self.pool_fallback.on_fallbacks(self, wire.parse_rows(io.buf[fallbacks], lengths[fallbacks]))
                c.ignored_frames -= fallbacks.size  # the take below passes over them as no result
        if self._native is not None and len(ops) <= 1:  # the C take sorts for one operation
            rows, i = self._native.take(ops[0] if ops else None, io, n, self.next_request)
            which = np.zeros(len(i), np.int64)
        else:
            rows, which, i = self._sorter.take_all(ops, wire.parse_rows(io.buf[:n], lengths), self.next_request)
        if not len(i):
            return
        now = self.clock()
        # Results of requests sent once judge a timeout (window.judge), before any is sent again and before
        # an operation they complete is closed.
        if self.schedule.judging:
            by_op = [(ops[k], i[which == k]) for k in np.unique(which).tolist()]
            self.schedule.judge([(o, idx[o.attempts[idx] == 1]) for o, idx in by_op])
        op = ops[int(which[0])]
        if not (which == which[0]).all():  # results of several operations: one by one, in arrival order
            for k, j in zip(which.tolist(), i.tolist()):
                self._accept(ops[k], j, now, detect=bool(self.dupthresh))
        elif self.dupthresh and not loss.quiet(ops, op, i):
            for j in i.tolist():
                self._accept(op, j, now, detect=True)
        elif len(i) <= 8:  # a few results: Python per result costs less than numpy per batch
            for j in i.tolist():
                self._accept(op, j, now)
        else:
            self._accept_many(op, i, now)

    def _accept_many(self, op: Operation, i: np.ndarray, now: float) -> None:
        """_accept for every request of i, in order, when no result among them is evidence of loss: the
        same bookkeeping, vectorised."""
        clean = np.flatnonzero(op.attempts[i] == 1)  # Karn: a retransmitted request's round trip is ambiguous
        gap = None
        if clean.size and self._batch:
            # the first clean result after some result of the operation samples the spacing of results (one
            # per batch); within the batch the previous result came at `now`
            sampler = clean if op.answered else clean[clean > 0]
            if sampler.size:
                gap = now - op.last_result if sampler[0] == 0 else 0.0
        in_flight = int(np.count_nonzero(op.attempts[i]))
        self._book(op, i, len(i), int(op.seq[i].max()), gap, in_flight, op.first_sent[i[clean]], now, i)

    def _accept_run(self, op: Operation, lo: int, hi: int, now: float) -> None:
        """_accept_many for requests lo .. hi − 1 of an operation sent in order, once each (op.in_order),
        answered in that order: the same bookkeeping over slices."""
        k = hi - lo
        gap = None
        if self._batch and (op.answered or k > 1):  # every result is clean (sent once): one spacing sample
            gap = now - op.last_result if op.answered else 0.0
        # the latest transmission is the last request's; no request W later to let go unless one exists
        answered = np.arange(lo, hi, dtype=np.int64) if lo + self.window < op.n or len(self.schedule.ops) > 1 else None
        self._book(op, slice(lo, hi), k, int(op.seq[hi - 1]), gap, k, op.first_sent[lo:hi], now, answered)

    def _accept(self, op: Operation, i: int, now: float, detect: bool = False) -> None:
        """The result of request i is in (it fits and is stored): bookkeeping, loss detection (`detect`
        False: loss.quiet() found that there is none to do)."""
        clean = op.attempts[i] == 1  # Karn: a retransmitted request's round trip is ambiguous
        gap = now - op.last_result if clean and op.answered and self._batch else None
        sent = op.first_sent[i : i + 1] if clean else op.first_sent[:0]
        in_flight = 1 if op.attempts[i] else 0
        self._book(op, i, 1, int(op.seq[i]), gap, in_flight, sent, now, np.array([i], np.int64))
        if detect:
            self.recovery.lost_before(int(op.first_seq[i]), now)

    def _book(self, op, idx, k: int, latest: int, gap, in_flight: int, sent: np.ndarray, now: float, answered) -> None:
        """What every accepted result does, for `k` of them at once (`idx`: their requests, an index, an array
        or a slice): done and timed, the timers told of the latest transmission answered (`latest`), one
        spacing sample (`gap`, None: none), round-trip samples of those sent once (`sent`), the window grown,
        the schedule told (`answered`, None: nothing to let go) and the operation finished when complete."""
        op.done[idx] = True
        op.answered_at[idx] = now
        self.timers.results_of(latest)
        op.outstanding -= k
        self.counters.results += k
        if gap is not None:
            self.timers.spacing(gap)
            self._batch = False
        op.in_flight_count -= in_flight
        self._round_trips(op, sent, now)
        self.schedule.grow(k)
        if not op.answered:
            op.first_result = now
        op.answered += k
        op.last_result = now
        if answered is not None:
            self.schedule.answered(op, answered)
        if op.outstanding == 0:
            self._finish(op)

    def _round_trips(self, op: Operation, sent: np.ndarray, now: float) -> None:
        """Results of requests of `op` sent once, at `sent`, came at `now`: round-trip samples, and the timers
        run on from here."""
        if sent.size:
            op.min_rtt = min(op.min_rtt, now - float(sent.max()))
        ops = self.schedule.ops
        per_window = max(1, min(self.window, op.n))
        left = sum(other.in_flight_count for other in ops)
        # one operation sent in order: no request in flight can be shown lost only when one is left
        tail = 0 < left and (left <= self.timers.tail or (not (len(ops) == 1 and op.in_order) and loss.starved(ops)))
        self.timers.answered(now, now - sent, per_window, left, tail)

    def _finish(self, op: Operation) -> None:
        self.schedule.close(op)
        self.schedule.paced_by(op)
        if not self.busy:
            self.timers.stop()
        op.finished = self.clock()
        elapsed = op.finished - op.started
        c = self.counters
        c.operations += 1
        c.operation_seconds += elapsed
        c.last_operation_seconds = elapsed
        c.max_operation_seconds = max(c.max_operation_seconds, elapsed)
        if op.n and (op.mixed_counts or op.count is None):
            c.partial_results += int(np.count_nonzero(op.counts < self.n_workers))
        elif op.n and op.count < self.n_workers:  # every result has the first's count
            c.partial_results += op.n
        self.last_operation = op
        if self.pool_fallback is not None and op.n:
            self.pool_fallback.on_finish(self, op)

    # ---- blocking calls --------------------------------------------------------------------------

    def all_max(self, values: Sequence[float] | np.ndarray) -> np.ndarray:
        return self.wait(self.start_max(values))

    def all_sum_indices(self, chunks: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
        return self.wait(self.start_sum_indices(chunks))

    def all_sum_fix32(self, chunks: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
        return self.wait(self.start_sum_fix32(chunks))

    def stats(self) -> dict:
        out = self.counters.as_dict()
        timers = self.timers
        out.update(
            job_id=self.job_id,
            worker_id=self.worker_id,
            window=self.window,
            next_request=self.next_request,
            rto=timers.rto,
            srtt=timers.rtt.mean,
            rttvar=timers.rtt.var,
            rto_backoffs=timers.backoffs,
            window_limit=self.schedule.limit,
            window_paced=self.schedule.paced,
            ssthresh=self.schedule.ssthresh,
            window_cuts=self.schedule.cuts,
            spurious_timeouts=self.schedule.undone,
            pto=timers.pto,
            gap=timers.gap.mean,
            min_rto=self.min_timeout,
            dupthresh=self.dupthresh,
            straggler_timeout=self.straggler_timeout,
        )
        if self.pool_fallback is not None:
            out.update(self.pool_fallback.stats())
        return out


def timeout_error(worker: WorkerProtocol, op: Operation, i: int, now: float) -> AggregationTimeout:
    """What a worker says when request i of op got no result before the deadline: what to check, in order."""
    q = op.q0 + i
    return AggregationTimeout(
        f"job {worker.job_id} worker {worker.worker_id}: no {wire.OP_NAMES[op.op]} result for slot "
        f"{worker.schedule.slot(q)} round {worker.schedule.round(q)} (request {q}) after "
        f"{now - op.first_sent[i]:.1f} s and {op.attempts[i]} transmissions to the switch service address "
        f"{worker.builder.dst} via {worker.transport.describe()}. Check that the switch is running and reachable "
        f"from this host; that the job is installed on it (thc-ctl) with this worker in its worker mask, "
        f"n_slots >= {worker.window} and a fresh epoch (a job reused without re-adding drops every request as "
        f"STALE_ROUND); that this worker was given the ticket the job was added with (thc-ctl job "
        f"add --save FILE, thc-worker --job FILE: key {worker.key:#x}, {worker.spec.lane_bits}-bit lanes, "
        f"{worker.spec.words}-word cells); that all the job's workers are running; and the switch's "
        f"thc_events counters (UNKNOWN_JOB, FOREIGN_WORKER, SLOT_RANGE, STALE_ROUND, FAR_ROUND: a worker "
        f"that skipped rounds or another run's job on these slots, OP_MISMATCH, BAD_INDEX, BAD_KEY, "
        f"LANE_MISMATCH: another description than the switch's, MALFORMED: a request framed for other "
        f"cells, NO_ROUTE)."
    )


def drive(
    protocols: Sequence[WorkerProtocol], clock: Callable[[], float] | None = None, max_idle_steps: int = 1_000_000
) -> None:
    """Run several in-process workers until none has an operation in flight.

    Each pass pumps every busy worker without waiting. When a pass moves nothing, time moves on to the
    earliest retransmission deadline or the next frame a timed loopback wire hands over: instantly with a
    VirtualClock, by sleeping otherwise.
    """
    clock = clock or protocols[0].clock
    idle = 0
    while True:
        busy = [p for p in protocols if p.busy]
        if not busy:
            return
        moved = False
        for p in busy:
            moved |= p.pump(0.0)
        if moved:
            idle = 0
            continue
        idle += 1
        if idle > max_idle_steps:
            raise RuntimeError("drive: workers made no progress")
        deadlines = [d for p in busy if (d := p.next_deadline()) is not None]
        deadlines += [d for p in protocols if (d := getattr(p.transport, "next_event", lambda: None)()) is not None]
        if not deadlines:
            raise RuntimeError("drive: busy workers wait on nothing (no request in flight)")
        when = min(deadlines)
        if isinstance(clock, VirtualClock):
            clock.advance_to(when)
        else:
            time.sleep(max(0.0, when - clock()))
