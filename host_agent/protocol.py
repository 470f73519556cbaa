"""The worker side of the THC aggregation protocol (p4/README.md, "Worker protocol").

Every worker of a job numbers its requests q = 0, 1, 2, ... over the whole run, identically on every
worker; request q uses slot q mod W in round q div W, and is sent only once the result of request q − W
(the slot's previous use) is back. A lost request or result is recovered by sending the request again; the
switch counts a retransmission once, and answers it with the stored result when the slot is complete.
Results are matched by (job_id, slot, round), must carry the job's key, and are checked against the
request (op, count, lane width, payload size); anything else is counted and ignored. How a request is
framed (coordinates or values per request, lane width, key, window) comes from the job's description
(spec/job.py's JobSpec), the one the switch's job was added with.

Loss recovery runs at the speed of the round trip, as TCP's does (see WorkerProtocol):

- fast retransmission: results of one window come back roughly in the order the requests were sent (the
  switch completes slots in the order the last worker's requests arrive), so results for requests sent
  after a missing one are evidence that it was lost; after `dupthresh` of them it is sent again at once;
- retransmission timers that follow the measured round trip (RFC 6298), for what no later result reveals:
  the last requests of an operation, a lost retransmission.

One `WorkerProtocol` runs one operation at a time (a NORM max, a THC index sum or a FIX32 sum). It can be
driven two ways:

- blocking, one worker per process: `all_max`, `all_sum_indices`, `all_sum_fix32` return the results, and
  raise `AggregationTimeout` instead of hanging;
- step by step, several workers in one process (tests, benchmarks): `start_*` returns an `Operation`,
  `pump()` makes whatever progress is possible without waiting, and `drive()` pumps a set of workers,
  moving a virtual clock to the next retransmission deadline when none can progress.

Frames move in batches (host_agent/README.md, "Batches, and the native helper"): an operation's requests
are prebuilt as rows of one array and what the window lets go is sent with one `send_many`; a pump takes
in every result that is there with one `recv_into`, sorts them by the per-frame rules below in arrival
order (in C, fastio.c's thc_take_results, or with numpy) and books them with array operations when they
show no loss, result by result when they do. The order of events, and so every counter, timer and
retransmission, is the same as taking the frames one at a time.
"""

from __future__ import annotations

import ctypes
import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from host_agent import native, wire
from host_agent.loopback import VirtualClock
from host_agent.transport import BatchIO, Transport
from spec.job import JobSpec

_NEVER = np.iinfo(np.int64).max


class AggregationTimeout(TimeoutError):
    """A request got no result before the deadline: the switch, the job or another worker is missing."""


class Interrupted(Exception):
    """`wait`'s interrupt asked to stop waiting. The operation stays in flight: `wait` on it again resumes
    it, and it still completes (or times out) by the same rules."""


class ProtocolError(RuntimeError):
    """Results that cannot be combined (e.g. different contributor counts within one operation)."""


@dataclass
class WorkerStats:
    """Counters of one worker. An operation is one all_max / all_sum call (one aggregation round)."""

    packets_sent: int = 0
    bytes_sent: int = 0
    packets_received: int = 0
    bytes_received: int = 0
    requests: int = 0  # first transmissions
    retransmissions: int = 0  # timer_ + fast_ + probe_retransmissions
    timer_retransmissions: int = 0  # the request's retransmission timer expired
    fast_retransmissions: int = 0  # results of later requests showed it lost (incl. early retransmission)
    probe_retransmissions: int = 0  # no result came for the gap timeout after the operation's last one
    releases: int = 0  # RELEASE frames sent: a request waited past the straggler timeout
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


class Operation:
    """One aggregation call in flight: requests q0 .. q0 + n − 1 of a single op.

    Its request frames are built once, as the rows of one array (`frames`), and every per-request field
    is a numpy array, so a batch of requests is sent and a batch of results taken in with a few
    vectorised operations."""

    def __init__(
        self,
        op: int,
        q0: int,
        n_requests: int,
        frames: np.ndarray,
        chunk_lengths: list[int],
        per_packet: int,
        lane_bits: int,
        started: float,
        mixed_counts: bool = False,
    ):
        self.op, self.q0, self.n = op, q0, n_requests
        self.frames = frames  # (n_requests, frame length) uint8: request i is row i
        self.chunk_lengths = chunk_lengths
        self.per_packet = per_packet  # coordinates (THC) or values (FIX32) per request, lanes per result
        self.lane_bits = lane_bits  # what every request and result of the op carries
        self.result_bytes = 0 if op == wire.OP_NORM else per_packet * wire.LANE_DTYPES[lane_bits].itemsize
        self.started = started
        self.finished: float | None = None
        self.first_result: float | None = None  # when the first result came (the slowest worker had joined)
        self.answered_at = np.zeros(n_requests, np.float64)  # when each request's result came (diagnostics)
        self.first_sent = np.zeros(n_requests, np.float64)
        self.attempts = np.zeros(n_requests, np.int64)
        self.rto = np.zeros(n_requests, np.float64)
        self.done = np.zeros(n_requests, np.bool_)
        self.outstanding = n_requests
        self.counts = np.zeros(n_requests, np.uint8)
        # loss detection: per request the number of its latest transmission and of its first, the first
        # transmissions of this operation made before its latest one, and the results of requests first
        # sent after its latest transmission that came back since
        self.seq = np.zeros(n_requests, np.int64)
        self.first_seq = np.zeros(n_requests, np.int64)
        self.firsts_before = np.zeros(n_requests, np.int64)
        self.evidence = np.zeros(n_requests, np.int64)
        self.first_transmissions = 0
        # requests in flight (sent, unanswered) all lie in [low, sent_hi): low is the oldest unanswered
        # request (advanced lazily), sent_hi one past the newest sent
        self.low = 0
        self.sent_hi = 0
        self.answered = 0
        self.last_result = 0.0  # when the latest result came
        self.newest_answered = -1  # the latest first transmission among answered requests
        self.probe_at: float | None = None  # the gap (tail probe) timer
        self.probe_backoff = 1.0
        self.rtt_max: float | None = None  # the slowest clean round trip since the last RTT sample
        self.rtt_results = 0
        self.count: int | None = None  # every accepted result's count must match the first
        self.mixed_counts = mixed_counts  # partial aggregation: counts may differ between requests
        self.release_at = np.full(n_requests, np.inf)  # when an unanswered request sends a RELEASE
        if op == wire.OP_NORM:
            self.sums = np.zeros(n_requests, np.uint32)  # float32 bit patterns
        else:
            self.sums = np.zeros(n_requests * per_packet, np.int32)

    @property
    def complete(self) -> bool:
        return self.outstanding == 0

    def span(self) -> tuple[int, int]:
        """[lo, hi): a range of request numbers that holds every request in flight."""
        lo, hi = self.low, self.sent_hi
        if lo < hi and self.done[lo]:
            rest = self.done[lo:hi]
            lo = hi if rest.all() else lo + int(np.argmin(rest))
            self.low = lo
        return lo, hi

    def in_flight(self) -> tuple[np.ndarray, int]:
        """The requests sent and unanswered (a bool mask over span()) and the span's start."""
        lo, hi = self.span()
        return (self.attempts[lo:hi] > 0) & ~self.done[lo:hi], lo

    def fit_rows(self, op: np.ndarray, count: np.ndarray, lane_bits: np.ndarray, size: np.ndarray, n_workers: int):
        """Which results (arrays of their header fields, in arrival order) can be answers to requests of
        this operation: the same op; a count in 1..n_workers and the same in every result; the lane width
        the op has in the job (NORM 0, FIX32 32, THC the job's 8 or 16) and the cell's words as payload
        (none for NORM). The first that fits fixes the operation's count. A result that does not fit is
        another op's or a misprogrammed job's, and storing it would corrupt the sums."""
        count, lane_bits, size = (np.asarray(a, np.int64) for a in (count, lane_bits, size))
        ok = (op == self.op) & (count >= 1) & (count <= n_workers)
        ok &= (lane_bits == self.lane_bits) & (size == self.result_bytes)
        if self.count is None:
            first = np.flatnonzero(ok)
            if not first.size:
                return ok
            self.count = int(count[first[0]])
        if not self.mixed_counts:
            ok &= count == self.count
        return ok

    def store_rows(self, requests: np.ndarray, results: wire.ResultBatch, rows: np.ndarray) -> None:
        """Keep the results in rows `rows` of the batch as the answers to `requests` (results that fit)."""
        if self.op == wire.OP_NORM:
            self.sums[requests] = results.value[rows]
        else:
            raw = results.rows[rows, wire.PAYLOAD_OFFSET : wire.PAYLOAD_OFFSET + self.result_bytes]
            lanes = np.ascontiguousarray(raw).view(wire.LANE_DTYPES[self.lane_bits])
            self.sums.reshape(-1, self.per_packet)[requests] = lanes
        self.counts[requests] = results.count[rows]

    def contributors(self) -> int | list[np.ndarray]:
        """The results' count field: one number when every result has the same (always without partial
        aggregation); 0 for an empty operation. With partial aggregation, results of released slots may
        count fewer: then per chunk, the count of every coordinate (int64 arrays shaped like the sums)."""
        if self.n == 0:
            return 0
        counts = np.unique(self.counts)
        if len(counts) == 1:
            return int(counts[0])
        if not self.mixed_counts:
            raise ProtocolError(
                f"results of one operation report different contributor counts {sorted(counts.tolist())}"
            )
        per_coordinate = np.repeat(self.counts.astype(np.int64), self.per_packet)
        return self._per_chunk(per_coordinate)

    def _per_chunk(self, flat: np.ndarray) -> list[np.ndarray]:
        chunks, offset = [], 0
        for length in self.chunk_lengths:
            chunks.append(flat[offset : offset + length].copy())
            offset += -(-length // self.per_packet) * self.per_packet
        return chunks

    def result(self):
        """NORM: float32 maxima. THC / FIX32: (list of per-chunk sums, contributors: see contributors())."""
        if not self.complete:
            raise RuntimeError("operation still in flight")
        if self.op == wire.OP_NORM:
            return self.sums.view(np.float32).copy()
        return self._per_chunk(self.sums), self.contributors()


class WorkerProtocol:
    """One worker of one job: request numbering, window, retransmission, result collection.

    `spec` is the job's description, the one the switch's job was added with (`thc-ctl job add --save`):
    its window W (the same on every worker, at most the job's slots), its key (in every packet, and every
    result must carry it), n (an acceptable result counts 1..n contributions), and the framing: K =
    spec.coords_per_request 4-bit indices per THC request in the job's lanes (8 or 16 bits), and
    spec.fix32_per_request int32 values per FIX32 request. Requests are numbered from `first_request` (0
    for a freshly added job).

    Loss recovery, two ways, both counted in `stats()`:

    - Fast retransmission (`dupthresh`, 0 turns it off): a result for a request first sent after request
      i's latest transmission, while i is unanswered, is evidence that i (or its result) was lost. After
      `dupthresh` such results i is sent again at once, as TCP does after three duplicate acknowledgements.
      Early retransmission (RFC 5827, `early_retransmit`): once the operation has nothing left to send, the
      last requests have fewer than `dupthresh` requests after them; then i is sent again when every
      request first sent after it is answered and it is not. Evidence counts only against a transmission
      made before the answered request was first sent, so a result triggered by an old transmission never
      condemns a newer one, and a request is fast-retransmitted at most once per transmission (its new
      transmission starts with no evidence).
    - The gap timer (a tail loss probe, as RACK-TLP's): the last request of an operation has no later
      one to reveal its loss, and the round trip of a whole operation includes waiting for the slowest
      worker. But once a result of the operation is back, every worker is in it and results follow at the
      switch's pace; so when none has come for the gap timeout (the spacing of arrivals of results,
      RFC 6298-smoothed as srtt + 4·rttvar over clean results, one sample per batch received, never below
      `min_timeout`), the oldest unanswered request is sent again (one probe) and the gap timeout doubles
      until the next result.
    - Timers: a request is sent again after the retransmission timeout (RTO). The RTO starts at `timeout`;
      with `adaptive` it follows the measured round trip (RFC 6298: srtt + 4·rttvar, never below
      `min_timeout`, at most `max_timeout`), sampled once per window of results with the slowest request
      sent once among them (Karn's rule; every request of a window is sent within one round trip, so the
      timer must cover the slowest, and per-request samples of one burst are so alike that rttvar would
      collapse). An expired timer backs the request's timeout off (× `backoff`, at most `max_timeout`) and
      keeps the backed-off RTO for new requests until the next sample; of the requests whose timers expire
      together only the oldest is sent again, the others wait their backed-off timeout. `deadline` s after its first
      transmission without a result, AggregationTimeout is raised.

    Partial aggregation (`straggler_timeout`, None: off; p4/README.md, "Partial aggregation"): a request
    still unanswered `straggler_timeout` s after its first transmission sends a RELEASE for its slot, and
    again every `straggler_timeout` s while it stays unanswered (a RELEASE that found the slot not started
    is dropped by the switch). The switch then multicasts the sums it has with their count k; results of
    one operation may then carry different counts, which `Operation.result()` reports per coordinate.
    Every worker of a job must agree on whether the option is on (like the window): a worker without it
    refuses results whose counts differ within an operation. A straggler keeps up with the others through
    the multicast results of released slots: a result with a count below n for a request it has not sent
    yet (in this operation, or in a later one: kept, up to `early_capacity` results) is its answer, and
    the request is never sent. Without that, a worker that fell two uses of a slot behind would find its
    rounds stale. Results are then sorted by the numpy rules (the native take does not keep results).

    Reordering and duplication (no loss) cost bounded retransmissions: a duplicate result is ignored and
    is no evidence; a request is fast-retransmitted only if at least min(dupthresh, the requests first sent
    after it) results of requests sent after it overtook its own. So when no result is overtaken by
    `dupthresh` or more later ones, fast retransmissions happen only through early retransmission, among
    the last dupthresh − 1 requests of an operation: at most dupthresh − 1 per operation (none with
    `early_retransmit=False`), and none at all if nothing is reordered. Timers add nothing as long as every
    result comes back within the RTO (≥ srtt + 4·rttvar), i.e. the reordering delay stays within the
    measured round-trip variation, and the gap timer as long as results are not held back longer than
    the measured spacing of results allows.
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
    ):
        if not isinstance(spec, JobSpec):
            raise TypeError(f"a WorkerProtocol takes the job's JobSpec (spec/job.py), not {type(spec).__name__}")
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
        self.straggler_timeout = straggler_timeout
        self.early_capacity = early_capacity
        self._early: dict[int, bytes] = {}  # request number -> a released result that came before its request
        self._settings = dict(  # what for_job carries over to the same worker in another job
            timeout=timeout, min_timeout=min_timeout, backoff=backoff, max_timeout=max_timeout,
            deadline=deadline, adaptive=adaptive, dupthresh=dupthresh, early_retransmit=early_retransmit,
            coalesce=coalesce, max_hold=max_hold, clock=clock,
            straggler_timeout=straggler_timeout, early_capacity=early_capacity,
        )  # fmt: skip
        self.transport, self.builder = transport, builder
        self.spec = spec
        self.job_id, self.worker_id, self.window = spec.job_id, worker_id, spec.window
        self.n_workers, self.key = spec.workers, spec.key
        self.timeout, self.min_timeout, self.backoff = timeout, min_timeout, backoff
        self.max_timeout, self.deadline = max_timeout, deadline
        self.clock = clock
        self.adaptive = adaptive
        self.dupthresh, self.early_retransmit = dupthresh, early_retransmit
        if coalesce < 0 or max_hold < 0:
            raise ValueError("need coalesce >= 0 and max_hold >= 0")
        self.coalesce, self.max_hold = coalesce, max_hold
        self.rto = timeout
        self._srtt: float | None = None
        self._rttvar: float | None = None
        self._tx = 0  # transmissions so far: orders every transmission of this worker
        self._gap: float | None = None  # smoothed spacing of results within an operation, and its variation
        self._gapvar: float | None = None
        self.gap_timeout = min_timeout
        self._batch = True
        self._held = False  # the next batch is taken in after a hold (WorkerProtocol.hold)
        self.next_request = first_request
        self.counters = WorkerStats()
        self._op: Operation | None = None
        self.last_operation: Operation | None = None  # the latest completed operation (its timings)
        self._sendable: list[np.ndarray] = []  # requests the window lets go, in the order they became free
        self._outq: list[np.ndarray] = []  # frames booked as sent, for _flush()
        # retransmission timers: (time, order, requests, their attempt numbers when armed)
        self._timers: list[tuple[float, int, np.ndarray, np.ndarray]] = []
        self._timer_order = itertools.count()

    @property
    def transport(self) -> Transport:
        return self._transport

    @transport.setter
    def transport(self, transport: Transport) -> None:
        """The worker's transport; replacing it (e.g. with a wrapper) takes effect at the next send."""
        self._transport = transport
        self._io = BatchIO(transport)
        # the C take of a batch of results, or None: the numpy one (partial aggregation keeps early results)
        self._native = native.load() if self.straggler_timeout is None else None
        self._no_op_take = None
        self._acc_row = self._acc_req = np.zeros(0, np.int64)

    # ---- starting operations -------------------------------------------------------------------

    def start_max(self, values: Sequence[float] | np.ndarray) -> Operation:
        """Element-wise max over workers of non-negative float32 values: one NORM request per value."""
        v = np.asarray(values, dtype=np.float32).reshape(-1)
        if np.any(v < 0):
            raise ValueError(
                "NORM values must be non-negative: the switch compares float32 bit patterns as unsigned integers"
            )
        bits = (v + np.float32(0)).view(np.uint32)  # -0.0 + 0.0 = +0.0: its bits would sort above everything
        return self._start(wire.OP_NORM, len(v), b"", 0, bits, [len(v)], 1)

    def start_sum_indices(self, chunks: Sequence[np.ndarray]) -> Operation:
        """Per-coordinate sums over workers of the table values of 4-bit indices, chunk by chunk.

        Each chunk is padded to a multiple of K = spec.coords_per_request with index 0 (valid for every
        table); the padding's sums are dropped from the result.
        """
        k = self.spec.coords_per_request
        parts, lengths = [], []
        for chunk in chunks:
            idx = np.asarray(chunk).reshape(-1)
            if idx.size and (idx.min() < 0 or idx.max() > 15):
                raise ValueError("THC indices must be 0..15 (4 bits)")
            lengths.append(idx.size)
            padded = np.zeros(-(-idx.size // k) * k, np.uint8)
            padded[: idx.size] = idx
            parts.append(padded)
        packed = wire.pack_nibbles(np.concatenate(parts)) if parts else b""
        return self._start(wire.OP_THC, len(packed) // (k // 2), packed, k // 2, None, lengths, k)

    def start_sum_fix32(self, chunks: Sequence[np.ndarray]) -> Operation:
        """Per-coordinate int32 sums over workers (wrapping), spec.fix32_per_request values per request,
        chunk by chunk."""
        k = self.spec.fix32_per_request
        parts, lengths = [], []
        for chunk in chunks:
            values = np.asarray(chunk).reshape(-1)
            if values.dtype != np.int32:
                if values.size and not np.issubdtype(values.dtype, np.integer):
                    raise ValueError(f"FIX32 values must be integers, got {values.dtype}")
                if values.size and (values.min() < -(2**31) or values.max() >= 2**31):
                    raise ValueError("FIX32 values must fit in int32")
            lengths.append(values.size)
            padded = np.zeros(-(-values.size // k) * k, np.int32)
            padded[: values.size] = values
            parts.append(padded)
        payloads = np.concatenate(parts).astype(">i4").tobytes() if parts else b""
        return self._start(wire.OP_FIX32, len(payloads) // (4 * k), payloads, 4 * k, None, lengths, k)

    def _start(self, op, n_requests, payloads, payload_size, values, lengths, per_packet) -> Operation:
        if self._op is not None:
            raise RuntimeError("this worker already has an operation in flight")
        if self.straggler_timeout is not None:  # released results that came while we were away: kept
            while n := self._io.recv(0.0):
                self._on_results(n)
        q = self.next_request + np.arange(n_requests, dtype=np.int64)
        rows = np.frombuffer(payloads, np.uint8).reshape(n_requests, payload_size) if payload_size else None
        lane_bits = wire.op_lane_bits(op, self.spec.lane_bits)
        frames = wire.build_rows(
            self.builder, op, wire.KIND_REQUEST, self.job_id, self.worker_id, q % self.window, q // self.window,
            values, rows, lane_bits=lane_bits, key=self.key,
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
        self._op = operation
        self._sendable = [np.arange(min(self.window, n_requests), dtype=np.int64)]
        self._timers = []
        if n_requests == 0:
            self._finish(operation)
        elif self._early:
            self._take_early(operation)
        return operation

    def _released(self, results: wire.ResultBatch) -> np.ndarray:
        """Which results are of released slots (a count below the job's n): only with partial aggregation."""
        if self.straggler_timeout is None:
            return np.zeros(len(results.valid), np.bool_)
        count = np.asarray(results.count, np.int64)
        return (count >= 1) & (count < self.n_workers)

    def _keep_early(self, results: wire.ResultBatch, rows: np.ndarray, q: np.ndarray) -> int:
        """Keep released results for requests not numbered yet (a straggler's later operations)."""
        kept = 0
        for r in rows.tolist():
            if len(self._early) >= self.early_capacity:
                break
            end = wire.PAYLOAD_OFFSET + int(results.payload_len[r])
            self._early.setdefault(int(q[r]), bytes(results.rows[r, :end]))
            kept += 1
        return kept

    def _take_early(self, op: Operation) -> None:
        """Answer the new operation's requests from the released results kept for them (never sent)."""
        for q in [q for q in self._early if q < op.q0]:
            del self._early[q]  # an older operation's: it finished without them
        ready = sorted(q for q in self._early if q < op.q0 + op.n)
        if not ready:
            return
        frames = [self._early.pop(q) for q in ready]
        rows = np.zeros((len(frames), max(len(f) for f in frames)), np.uint8)
        for k, f in enumerate(frames):
            rows[k, : len(f)] = np.frombuffer(f, np.uint8)
        lengths = np.array([len(f) for f in frames], np.int32)
        _, i = self._take(op, wire.parse_rows(rows, lengths))
        now = self.clock()
        for j in i.tolist():
            if op.complete:
                break
            self._accept(op, j, now, detect=False)

    # ---- making progress -------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._op is not None

    def pump(self, wait: float = 0.0) -> bool:
        """Send what the window allows, take in the results that are there (waiting up to `wait` s for the
        first, never past the next retransmission time), retransmit what is due. True if anything moved."""
        moved = self._send_ready()
        if self._op is not None and wait > 0:
            due = self.next_deadline()
            if due is not None:
                wait = min(wait, max(0.0, due - self.clock()))
        n = self._io.recv(wait if self._op is not None else 0.0)
        # results that come together are one arrival for the gap timer; after a hold (receive coalescing)
        # their spacing is the hold's, not the switch's, and must not stretch the gap timeout
        self._batch, self._held = not self._held, False
        if n:
            self._on_results(n)
            self._flush()
            moved = True
            moved |= self._send_ready()
        moved |= self._fire_timers()
        return moved

    def wait(self, operation: Operation, interrupt: Callable[[], bool] | None = None, poll: float = 0.05):
        """Block until `operation` completes; its result (see Operation.result).

        `interrupt`, when given, is asked at least every `poll` s while the operation waits; when it says
        True, `Interrupted` is raised and the operation stays in flight (a worker learning of a change of
        the job's membership, see host_agent.aggregator)."""
        while not operation.complete:
            if interrupt is not None and interrupt():
                raise Interrupted(f"job {self.job_id} worker {self.worker_id}: interrupted in request {operation.q0}+")
            hold = self.hold(operation)
            if hold > 0:
                time.sleep(hold)
                self._held = True
            due = self.next_deadline()
            wait = self.max_timeout if due is None else max(0.0, due - self.clock())
            self.pump(wait if interrupt is None else min(wait, poll))
        return operation.result()

    def abandon(self) -> Operation | None:
        """Drop the operation in flight (nothing of it is sent again) and return it."""
        op, self._op = self._op, None
        self._sendable.clear()
        self._timers = []
        return op

    def for_job(self, job_id: int, n_workers: int, key: int) -> WorkerProtocol:
        """A protocol for this worker in another job (the survivors' job after a failure: this job's
        description with another id, n and key): the same transport, addresses, window and timer settings,
        requests numbered from 0, fresh counters. The round-trip estimates carry over: the path to the
        switch is the same."""
        spec = self.spec.replace(job_id=job_id, workers=n_workers, key=key)
        new = WorkerProtocol(self.transport, self.builder, spec, self.worker_id, **self._settings)
        new.rto, new._srtt, new._rttvar = self.rto, self._srtt, self._rttvar
        return new

    MIN_HOLD = 0.0005  # a shorter hold saves less than the sleep costs
    HOLD_AFTER = 4  # results of the operation that must be in before its pace is trusted

    def hold(self, op: Operation) -> float:
        """How long a blocking wait lets results accumulate before taking them in (receive coalescing).

        Taking results in costs a wake-up and a fixed amount of Python per batch, so results that trickle
        in one by one at a slow link's pace (5 Mbit/s: one every ~0.2 ms) cost a worker most of its CPU,
        which on a small machine the switch and the other workers need. Once every request of the
        operation has been sent, a result only frees a slot nobody is waiting for, so the worker sleeps
        for `coalesce` (1/2) of the time the outstanding results should take at the pace they have come
        so far (at most `max_hold`, at most as long as results have been coming, never past a
        retransmission timer): log(n) wake-ups instead of n, and never past the expected end. Results are
        then taken in (the gap timer restarted, no gap sample taken) before any timer is looked at, so a
        hold makes no probe fire that the results would have prevented. 0 when
        requests are still to be sent, before HOLD_AFTER results have come, with a virtual clock, or when
        `coalesce` is 0."""
        if (
            not self.coalesce
            or op is not self._op
            or self._sendable
            or op.first_transmissions < op.n
            or op.answered < self.HOLD_AFTER
            or op.outstanding < 2
            or isinstance(self.clock, VirtualClock)
        ):
            return 0.0
        span = op.last_result - (op.first_result if op.first_result is not None else op.last_result)
        if span <= 0:
            return 0.0
        # at most as long as results have been coming: a pause early on (a late worker) makes the pace look
        # slow, and the hold must not outlast what it has seen
        hold = min(self.coalesce * op.outstanding * span / (op.answered - 1), span, self.max_hold)
        self.next_deadline()  # drops stale timers
        if self._timers:
            hold = min(hold, self._timers[0][0] - self.clock())
        return hold if hold >= self.MIN_HOLD else 0.0

    def next_deadline(self) -> float | None:
        """When the earliest retransmission (or the deadline) is due; None if no request is waiting."""
        timers, op = self._timers, self._op
        while timers:
            _, _, idx, attempts = timers[0]
            if op is not None and ((op.attempts[idx] == attempts) & ~op.done[idx]).any():
                break
            heapq.heappop(timers)
        due = timers[0][0] if timers else None
        if op is not None and op.probe_at is not None and (due is None or op.probe_at < due):
            due = op.probe_at
        if op is not None and self.straggler_timeout is not None:
            release = self._next_release(op)
            if release is not None and (due is None or release < due):
                due = release
        return due

    def _next_release(self, op: Operation) -> float | None:
        """When the earliest unanswered request sends a RELEASE (partial aggregation), or None."""
        flying, lo = op.in_flight()
        if not flying.any():
            return None
        return float(op.release_at[lo : lo + len(flying)][flying].min())

    def _release_due(self, op: Operation, now: float) -> bool:
        """Send a RELEASE for every unanswered request that has waited past the straggler timeout; it
        releases again after another timeout if its result still has not come."""
        flying, lo = op.in_flight()
        due = np.flatnonzero(flying & (op.release_at[lo : lo + len(flying)] <= now)) + lo
        if not due.size:
            return False
        q = op.q0 + due
        self._outq.append(
            wire.build_rows(self.builder, op.op, wire.KIND_RELEASE, self.job_id, self.worker_id, q % self.window,
                            q // self.window, lane_bits=op.lane_bits, key=self.key)
        )  # fmt: skip
        op.release_at[due] = now + self.straggler_timeout
        self.counters.releases += len(due)
        self.counters.packets_sent += len(due)
        self.counters.bytes_sent += len(due) * wire.PAYLOAD_OFFSET
        return True

    def _send_ready(self) -> bool:
        op = self._op
        if op is None or not self._sendable:
            return False
        idx = self._sendable[0] if len(self._sendable) == 1 else np.concatenate(self._sendable)
        self._sendable = []
        if self._early or self.straggler_timeout is not None:
            idx = idx[~op.done[idx]]  # answered early (a released slot's result came first)
        if idx.size:
            now = self.clock()
            op.first_sent[idx] = now
            op.rto[idx] = self.rto
            if self.straggler_timeout is not None:
                op.release_at[idx] = now + self.straggler_timeout
            self._transmit(op, idx, now)
            self.counters.requests += len(idx)
        self._flush()
        return True

    def _transmit(self, op: Operation, idx: np.ndarray, now: float) -> None:
        """Book transmissions of requests `idx` (distinct, in this order) and queue their frames; _flush()
        sends them."""
        k = len(idx)
        seqs = np.arange(self._tx, self._tx + k, dtype=np.int64)
        self._tx += k
        attempts = op.attempts[idx]
        if not attempts.any():  # first transmissions (from _send_ready): all sent at `now` with the same RTO
            op.first_seq[idx] = seqs
            op.firsts_before[idx] = np.arange(op.first_transmissions + 1, op.first_transmissions + k + 1)
            op.first_transmissions += k
            when = np.minimum(now + op.rto[idx[:1]], op.first_sent[idx[:1]] + self.deadline)
        else:
            first = attempts == 0
            if first.any():
                op.first_seq[idx[first]] = seqs[first]
            op.firsts_before[idx] = op.first_transmissions + np.cumsum(first)
            op.first_transmissions += int(np.count_nonzero(first))
            when = np.minimum(now + op.rto[idx], op.first_sent[idx] + self.deadline)
        op.attempts[idx] = attempts + 1
        op.seq[idx] = seqs
        op.evidence[idx] = 0
        op.sent_hi = max(op.sent_hi, int(idx.max()) + 1)
        self._arm(op, idx, when)
        self._outq.append(op.frames[idx])
        self.counters.packets_sent += k
        self.counters.bytes_sent += k * op.frames.shape[1]

    def _arm(self, op: Operation, idx: np.ndarray, when: np.ndarray) -> None:
        """Retransmission timers for requests `idx` at times `when`: one heap entry per distinct time."""
        attempts = op.attempts[idx]
        if len(when) == 1 or (when == when[0]).all():
            heapq.heappush(self._timers, (float(when[0]), next(self._timer_order), idx, attempts))
            return
        for t in np.unique(when):
            sel = when == t
            heapq.heappush(self._timers, (float(t), next(self._timer_order), idx[sel], attempts[sel]))

    def _flush(self) -> None:
        """Send the queued frames, in the order they were queued."""
        queue = self._outq
        if not queue:
            return
        if len(queue) == 1:
            self._io.send(queue[0])
        elif all(rows.shape[1] == queue[0].shape[1] for rows in queue):
            self._io.send(np.concatenate(queue))
        else:
            for rows in queue:
                self._io.send(rows)
        queue.clear()

    def _fire_timers(self) -> bool:
        op, timers = self._op, self._timers
        if op is None:
            return False
        now, due = self.clock(), []
        while timers and timers[0][0] <= now:
            when, _, idx, attempts = heapq.heappop(timers)
            idx = idx[(op.attempts[idx] == attempts) & ~op.done[idx]]
            if idx.size:
                due.append((when, idx))
        late = [(when, int(i)) for when, idx in due for i in idx[now - op.first_sent[idx] >= self.deadline]]
        if late:  # the first in timer order, as one timer per request would have it
            raise self._timeout_error(op, min(late)[1], now)
        expired = []
        for _, idx in due:
            op.rto[idx] = np.minimum(op.rto[idx] * self.backoff, self.max_timeout)
            if self.adaptive:  # keep the backed-off timeout for new requests until a clean sample comes
                self.rto = max(self.rto, float(op.rto[idx].max()))
            expired.append(idx)
        fired = bool(expired)
        if expired:
            # Timers of one burst expire together, mostly because a worker is late, not because all were
            # lost: send the oldest again (as TCP does on RTO) and let its result, fast retransmission and
            # the gap timer find the rest; the others wait their backed-off timeout.
            expired = np.concatenate(expired)
            oldest = int(np.argmin(op.seq[expired]))
            others = np.delete(expired, oldest)
            if others.size:
                self._arm(op, others, np.minimum(now + op.rto[others], op.first_sent[others] + self.deadline))
            self._transmit(op, expired[oldest : oldest + 1], now)
            self.counters.retransmissions += 1
            self.counters.timer_retransmissions += 1
        if self.straggler_timeout is not None:
            fired |= self._release_due(op, now)
        if op.probe_at is not None and op.probe_at <= now:
            flying, lo = op.in_flight()
            if flying.any():
                self._probe(op, lo + int(np.argmin(np.where(flying, op.seq[lo : lo + len(flying)], _NEVER))), now)
                fired = True
        self._flush()
        return fired

    def _probe(self, op: Operation, i: int, now: float) -> None:
        """No result for the gap timeout since the operation's latest: send the oldest unanswered request
        (i) again (one probe: a late worker or a slow switch then costs one packet); its result, or the next
        probe after a doubled gap timeout, finds the next."""
        self._transmit(op, np.array([i], np.int64), now)
        self.counters.retransmissions += 1
        self.counters.probe_retransmissions += 1
        op.probe_backoff = min(op.probe_backoff * self.backoff, 1e6)
        op.probe_at = now + min(self.gap_timeout * op.probe_backoff, self.max_timeout)

    def _detect_loss(self, op: Operation, j: int, now: float) -> None:
        """The result of request j is in: it is evidence against every unanswered request whose latest
        transmission came before j's first; send those that have enough evidence again."""
        flying, lo = op.in_flight()
        bound = op.first_seq[j]
        hit = np.flatnonzero(flying & (op.seq[lo : lo + len(flying)] < bound)) + lo
        if not hit.size:
            return
        hit = hit[np.argsort(op.seq[hit], kind="stable")]  # oldest transmission first
        e = op.evidence[hit] = op.evidence[hit] + 1
        lost = e >= self.dupthresh
        if self.early_retransmit and op.first_transmissions == op.n:  # nothing left to send
            # early: every request first sent after i's transmission is answered (e counts each once)
            lost |= e >= op.first_transmissions - op.firsts_before[hit]
        lost = hit[lost]
        if lost.size:
            self._transmit(op, lost, now)
            self.counters.retransmissions += len(lost)
            self.counters.fast_retransmissions += len(lost)

    def _on_results(self, n: int) -> None:
        """Take in the batch of n received frames in the transport's buffer, in arrival order."""
        io, c, op = self._io, self.counters, self._op
        lengths = io.lengths[:n]
        c.packets_received += n
        c.bytes_received += int(lengths.sum())
        if self._native is not None:
            rows, i = self._take_native(op, io, n)
        else:
            rows, i = self._take(op, wire.parse_rows(io.buf[:n], lengths))
        if not len(i):
            return
        now = self.clock()
        if not self._quiet(op, i):
            for j in i.tolist():
                self._accept(op, j, now)
        elif len(i) <= 8:  # a few results: Python per result costs less than numpy per batch
            for j in i.tolist():
                self._accept(op, j, now, detect=False)
        else:
            self._accept_many(op, i, now)

    def _take(self, op: Operation | None, results: wire.ResultBatch) -> tuple[np.ndarray, np.ndarray]:
        """Sort a batch of frames as the per-frame rules do (ignored, stale, duplicate, rejected, accepted:
        counted), store the accepted results; their rows and request numbers within `op`, in order."""
        c = self.counters
        n = len(results.valid)
        none = np.zeros(0, np.int64)
        # Matched by (job_id, slot, round) only, as the contract says: every worker's copy carries the same
        # sums, so a copy whose worker_id was not rewritten (no result_dst entry) is still good.
        ours = (
            results.valid
            & ((results.kind == wire.KIND_RESULT) | (results.kind == wire.KIND_RESULT_RETX))
            & (results.job_id == self.job_id)
        )
        c.ignored_frames += n - int(np.count_nonzero(ours))
        foreign = ours & (results.key != self.key)  # not this run's: never matched to a request
        c.bad_key_results += int(np.count_nonzero(foreign))
        ours &= ~foreign
        q = results.round * self.window + results.slot
        unsent = ours & ((results.slot >= self.window) | (q >= self.next_request))
        released = self._released(results)
        if self.straggler_timeout is not None:
            early = np.flatnonzero(unsent & released & (results.slot < self.window))
            kept = self._keep_early(results, early, q) if early.size else 0  # counted when taken
            unsent[early[:kept]] = False
            ours[early[:kept]] = False
        c.stale_results += int(np.count_nonzero(unsent))
        rows = np.flatnonzero(ours & ~unsent)  # results of requests this worker has numbered
        if not rows.size:
            return none, none
        if op is None:
            c.duplicate_results += len(rows)
            return none, none
        i = q[rows] - op.q0
        mine = i >= 0
        mine[mine] = ~op.done[i[mine]]
        c.duplicate_results += len(rows) - int(np.count_nonzero(mine))  # answered before, or an older op's
        rows, i = rows[mine], i[mine]
        sent = op.attempts[i] > 0
        early = ~sent & released[rows]  # a released slot's result: the answer, the request need not go out
        c.early_results += int(np.count_nonzero(early))
        sent |= early
        c.stale_results += len(rows) - int(np.count_nonzero(sent))  # never sent: an old run's
        rows, i = rows[sent], i[sent]
        if not rows.size:
            return none, none
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

    def _take_native(self, op: Operation | None, io: BatchIO, n: int) -> tuple[np.ndarray, np.ndarray]:
        """_take in C (fastio.c thc_take_results): the same rules, one pass over the frames in io.buf[:n]."""
        st = self._take_state(op)
        st.next_request, st.outstanding = self.next_request, op.outstanding if op is not None else 0
        if len(self._acc_row) < n:
            self._acc_row, self._acc_req = np.zeros(len(io.buf), np.int64), np.zeros(len(io.buf), np.int64)
            self._acc_addresses = self._acc_row.ctypes.data, self._acc_req.ctypes.data
        taken = self._native.thc_take_results(
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

    def _take_state(self, op: Operation | None):
        """The native take's view of `op` (kept on the operation: its arrays never move)."""
        st = getattr(op, "_native_take", None) if op is not None else self._no_op_take
        if st is None:
            st = native.Take(job_id=self.job_id, key=self.key, window=self.window, n=-1, ref_count=-1)
            st.n_workers = self.n_workers
            if op is None:
                self._no_op_take = st
            else:
                st.q0, st.n, st.op, st.per_packet = op.q0, op.n, op.op, op.per_packet
                st.lane_bits, st.result_bytes = op.lane_bits, op.result_bytes
                st.done, st.attempts = op.done.ctypes.data, op.attempts.ctypes.data
                st.sums, st.counts = op.sums.ctypes.data, op.counts.ctypes.data
                op._native_take = st
        if op is not None:
            st.ref_count = -1 if op.count is None else op.count
        return st

    def _quiet(self, op: Operation, i: np.ndarray) -> bool:
        """Whether accepting results for requests i (in this order) one by one would find no evidence of
        loss: every request still in flight after each of them was last sent after its first send."""
        if not self.dupthresh:
            return True
        bounds = op.first_seq[i]
        seqs = op.seq[i]
        # later results of the batch are still in flight when an earlier one is taken in
        if len(i) > 1 and (np.minimum.accumulate(seqs[::-1])[::-1][1:] < bounds[:-1]).any():
            return False
        flying, lo = op.in_flight()
        flying = flying.copy()
        flying[i - lo] = False
        seq = op.seq[lo : lo + len(flying)][flying]
        return not seq.size or int(seq.min()) >= int(bounds.max())

    def _accept_many(self, op: Operation, i: np.ndarray, now: float) -> None:
        """_accept for every request of i, in order, when no result among them is evidence of loss: the
        same bookkeeping, vectorised."""
        k = len(i)
        op.done[i] = True
        op.answered_at[i] = now
        op.outstanding -= k
        self.counters.results += k
        clean = np.flatnonzero(op.attempts[i] == 1)  # Karn: a retransmitted request's round trip is ambiguous
        if clean.size:
            # the first clean result after some result of the operation samples the gap (one per batch);
            # within the batch the previous result came at `now`
            sampler = clean if op.answered else clean[clean > 0]
            if self._batch and sampler.size:
                self._gap_sample(now - op.last_result if sampler[0] == 0 else 0.0)
                self._batch = False
            rtts = now - op.first_sent[i[clean]]
            pos = 0
            while pos < len(rtts):
                take = len(rtts) - pos
                if self.adaptive:
                    take = min(take, max(1, self.window - op.rtt_results))
                chunk_max = float(rtts[pos : pos + take].max())
                op.rtt_max = chunk_max if op.rtt_max is None else max(op.rtt_max, chunk_max)
                op.rtt_results += take
                pos += take
                if self.adaptive and op.rtt_results >= self.window:
                    self._rtt_sample(op.rtt_max)
                    op.rtt_max, op.rtt_results = None, 0
        if not op.answered:
            op.first_result = now
        op.answered += k
        op.last_result = now
        op.newest_answered = max(op.newest_answered, int(op.first_seq[i].max()))
        if op.outstanding == 0:
            self._finish(op)
            return
        op.probe_backoff = 1.0
        op.probe_at = now + self.gap_timeout
        following = i + self.window
        following = following[following < op.n]
        if following.size:
            self._sendable.append(following)

    def _accept(self, op: Operation, i: int, now: float, detect: bool = True) -> None:
        """The result of request i is in (it fits and is stored): bookkeeping, loss detection (`detect`
        False: _quiet() found that there is none to do)."""
        op.done[i] = True
        op.answered_at[i] = now
        op.outstanding -= 1
        self.counters.results += 1
        if op.attempts[i] == 1:  # Karn: a retransmitted request's round trip is ambiguous
            if op.answered and self._batch:
                self._gap_sample(now - op.last_result)
                self._batch = False
            rtt = now - float(op.first_sent[i])
            op.rtt_max = rtt if op.rtt_max is None else max(op.rtt_max, rtt)
            op.rtt_results += 1
            if self.adaptive and op.rtt_results >= self.window:
                self._rtt_sample(op.rtt_max)
                op.rtt_max, op.rtt_results = None, 0
        if not op.answered:
            op.first_result = now
        op.answered += 1
        op.last_result = now
        op.newest_answered = max(op.newest_answered, int(op.first_seq[i]))
        if op.outstanding == 0:
            self._finish(op)
            return
        op.probe_backoff = 1.0
        op.probe_at = now + self.gap_timeout
        if detect and self.dupthresh:
            self._detect_loss(op, i, now)
        if i + self.window < op.n:
            self._sendable.append(np.array([i + self.window], np.int64))

    def _gap_sample(self, gap: float) -> None:
        if self._gap is None:
            self._gap, self._gapvar = gap, gap / 2
        else:
            self._gapvar = 0.75 * self._gapvar + 0.25 * abs(self._gap - gap)
            self._gap = 0.875 * self._gap + 0.125 * gap
        self.gap_timeout = min(max(self._gap + 4 * self._gapvar, self.min_timeout), self.max_timeout)

    def _rtt_sample(self, rtt: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self.rto = min(max(self._srtt + 4 * self._rttvar, self.min_timeout), self.max_timeout)

    def _finish(self, op: Operation) -> None:
        if self.adaptive and op.rtt_max is not None:
            self._rtt_sample(op.rtt_max)
        op.probe_at = None
        op.finished = self.clock()
        elapsed = op.finished - op.started
        c = self.counters
        c.operations += 1
        c.operation_seconds += elapsed
        c.last_operation_seconds = elapsed
        c.max_operation_seconds = max(c.max_operation_seconds, elapsed)
        if op.n:
            c.partial_results += int(np.count_nonzero(op.counts < self.n_workers))
        self._op = None
        self.last_operation = op
        self._sendable.clear()
        self._timers = []

    def _timeout_error(self, op: Operation, i: int, now: float) -> AggregationTimeout:
        q = op.q0 + i
        return AggregationTimeout(
            f"job {self.job_id} worker {self.worker_id}: no {wire.OP_NAMES[op.op]} result for slot "
            f"{q % self.window} round {q // self.window} (request {q}) after {now - op.first_sent[i]:.1f} s "
            f"and {op.attempts[i]} transmissions to the switch service address {self.builder.dst} via "
            f"{self.transport.describe()}. Check that the switch is running and reachable from this host; "
            f"that the job is installed on it (thc-ctl) with this worker in its worker mask, n_slots >= "
            f"{self.window} and a fresh epoch (a job reused without re-adding drops every request as "
            f"STALE_ROUND); that this worker was given the description the job was added with (thc-ctl job "
            f"add --save FILE, thc-worker --job FILE: key {self.key:#x}, {self.spec.lane_bits}-bit lanes, "
            f"{self.spec.words}-word cells); that all the job's workers are running; and the switch's "
            f"thc_events counters (UNKNOWN_JOB, FOREIGN_WORKER, SLOT_RANGE, STALE_ROUND, FAR_ROUND: a worker "
            f"that skipped rounds or another run's job on these slots, OP_MISMATCH, BAD_INDEX, BAD_KEY, "
            f"LANE_MISMATCH: another description than the switch's, MALFORMED: a request framed for other "
            f"cells, NO_ROUTE)."
        )

    # ---- blocking calls --------------------------------------------------------------------------

    def all_max(self, values: Sequence[float] | np.ndarray) -> np.ndarray:
        return self.wait(self.start_max(values))

    def all_sum_indices(self, chunks: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
        return self.wait(self.start_sum_indices(chunks))

    def all_sum_fix32(self, chunks: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
        return self.wait(self.start_sum_fix32(chunks))

    def stats(self) -> dict:
        out = self.counters.as_dict()
        out.update(
            job_id=self.job_id,
            worker_id=self.worker_id,
            window=self.window,
            next_request=self.next_request,
            rto=self.rto,
            srtt=self._srtt,
            rttvar=self._rttvar,
            min_rto=self.min_timeout,
            dupthresh=self.dupthresh,
            gap=self._gap,
            gap_timeout=self.gap_timeout,
            straggler_timeout=self.straggler_timeout,
        )
        return out


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
