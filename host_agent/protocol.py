"""The worker side of the THC aggregation protocol (p4/README.md, "Worker protocol").

Every worker of a job numbers its requests q = 0, 1, 2, ... over the whole run, identically on every
worker; request q uses slot q mod W in round q div W, and is sent only once the result of request q − W
(the slot's previous use) is back. A lost request or result is recovered by sending the request again; the
switch counts a retransmission once, and answers it with the stored result when the slot is complete.
Results are matched by (job_id, slot, round) and checked against the request (op, count, lane width);
anything else is counted and ignored.

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
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from host_agent import wire
from host_agent.loopback import VirtualClock
from host_agent.transport import Transport


class AggregationTimeout(TimeoutError):
    """A request got no result before the deadline: the switch, the job or another worker is missing."""


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
    results: int = 0  # results accepted (one per request)
    duplicate_results: int = 0  # a result for a request already answered
    stale_results: int = 0  # a result for no request of ours (an old run, a wrong window)
    rejected_results: int = 0  # for one of our requests, but op, count or lane width do not fit it
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
    """One aggregation call in flight: requests q0 .. q0 + n − 1 of a single op."""

    def __init__(
        self,
        op: int,
        q0: int,
        n_requests: int,
        payloads: bytes,
        payload_size: int,
        values: np.ndarray | None,
        chunk_lengths: list[int],
        per_packet: int,
        started: float,
    ):
        self.op, self.q0, self.n = op, q0, n_requests
        self._payloads, self._payload_size = payloads, payload_size
        self._values = values
        self.chunk_lengths = chunk_lengths
        self.per_packet = per_packet
        self.started = started
        self.finished: float | None = None
        self.first_sent = [0.0] * n_requests
        self.attempts = [0] * n_requests
        self.rto = [0.0] * n_requests
        self.done = bytearray(n_requests)
        self.outstanding = n_requests
        self.counts = bytearray(n_requests)
        # loss detection: per request the number of its latest transmission and of its first, the first
        # transmissions of this operation made before its latest one, and the results of requests first
        # sent after its latest transmission that came back since
        self.seq = [0] * n_requests
        self.first_seq = [0] * n_requests
        self.firsts_before = [0] * n_requests
        self.evidence = [0] * n_requests
        self.first_transmissions = 0
        self.inflight: dict[int, None] = {}  # unanswered requests, oldest latest transmission first
        self.answered = 0
        self.last_result = 0.0  # when the latest result came
        self.newest_answered = -1  # the latest first transmission among answered requests
        self.probe_at: float | None = None  # the gap (tail probe) timer
        self.probe_backoff = 1.0
        self.rtt_max: float | None = None  # the slowest clean round trip since the last RTT sample
        self.rtt_results = 0
        self.count: int | None = None  # every accepted result's count and lane width must match the first
        self.lane_bits: int | None = None
        if op == wire.OP_NORM:
            self.sums = np.zeros(n_requests, np.uint32)  # float32 bit patterns
        else:
            self.sums = np.zeros(n_requests * per_packet, np.int32)

    @property
    def complete(self) -> bool:
        return self.outstanding == 0

    def payload(self, i: int) -> bytes:
        size = self._payload_size
        return self._payloads[i * size : (i + 1) * size] if size else b""

    def value(self, i: int) -> int:
        return int(self._values[i]) if self._values is not None else 0

    def fits(self, result: wire.ThcFrame, n_workers: int | None) -> bool:
        """Whether `result` can be the answer to a request of this operation: the same op; a count in
        1..n_workers and the same in every result; the lane width the op implies (NORM 0, FIX32 32, THC 8 or
        16, the same in every result) and a payload of exactly that size. A result that does not fit is
        another op's or a misprogrammed job's, and storing it would corrupt the sums."""
        if result.op != self.op or result.count < 1 or (n_workers is not None and result.count > n_workers):
            return False
        if self.count is not None and result.count != self.count:
            return False
        lane_bits, size = result.lane_bits, len(result.payload)
        if self.op == wire.OP_NORM:
            ok = lane_bits == 0 and size == 0
        elif self.op == wire.OP_FIX32:
            ok = lane_bits == 32 and size == 4 * self.per_packet
        else:
            ok = (
                lane_bits in (8, 16)
                and (self.lane_bits is None or lane_bits == self.lane_bits)
                and size == self.per_packet * lane_bits // 8
            )
        if ok:
            self.count, self.lane_bits = result.count, lane_bits
        return ok

    def store(self, i: int, result: wire.ThcFrame) -> None:
        """Keep the result of request i (one that fits())."""
        if self.op == wire.OP_NORM:
            self.sums[i] = result.value
        else:
            dtype = (np.uint8 if result.lane_bits == 8 else ">u2") if self.op == wire.OP_THC else ">i4"
            k = self.per_packet
            self.sums[i * k : (i + 1) * k] = np.frombuffer(result.payload, dtype=dtype)
        self.counts[i] = result.count

    def contributors(self) -> int:
        """The results' count field (the same in every result of a job); 0 for an empty operation."""
        if self.n == 0:
            return 0
        counts = set(self.counts)
        if len(counts) != 1:
            raise ProtocolError(f"results of one operation report different contributor counts {sorted(counts)}")
        return counts.pop()

    def result(self):
        """NORM: float32 maxima. THC / FIX32: (list of per-chunk sums, number of contributors)."""
        if not self.complete:
            raise RuntimeError("operation still in flight")
        if self.op == wire.OP_NORM:
            return self.sums.view(np.float32).copy()
        chunks, offset = [], 0
        for length in self.chunk_lengths:
            chunks.append(self.sums[offset : offset + length].copy())
            offset += -(-length // self.per_packet) * self.per_packet
        return chunks, self.contributors()


class WorkerProtocol:
    """One worker of one job: request numbering, window, retransmission, result collection.

    `window` W must be the same on every worker of the job and at most the job's n_slots; requests are
    numbered from `first_request` (0 for a freshly added job). `pairs` is the program's THC_PAIRS: index
    bytes per THC request (K = 2·pairs coordinates) and int32 values per FIX32 request. `n_workers`, when
    given, bounds the count of an acceptable result (1..n_workers).

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
        job_id: int,
        worker_id: int,
        window: int,
        *,
        timeout: float = 0.05,
        min_timeout: float = 0.002,
        backoff: float = 2.0,
        max_timeout: float = 1.0,
        deadline: float = 30.0,
        adaptive: bool = True,
        dupthresh: int = 3,
        early_retransmit: bool = True,
        n_workers: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        first_request: int = 0,
        pairs: int = wire.INDEX_PAIRS,
    ):
        if not 0 <= job_id <= 255:
            raise ValueError(f"job_id {job_id} is not 0..255")
        if not 0 <= worker_id < wire.MAX_WORKERS:
            raise ValueError(f"worker_id {worker_id} is not 0..{wire.MAX_WORKERS - 1}")
        if not 1 <= window <= 1024:
            raise ValueError(f"window {window} is not 1..1024 (and must be at most the job's n_slots)")
        if pairs not in (16, 32, 64):
            raise ValueError(f"pairs {pairs}: the program is compiled with THC_PAIRS = 16, 32 (default) or 64")
        if timeout <= 0 or min_timeout <= 0 or backoff < 1 or max_timeout < max(timeout, min_timeout) or deadline <= 0:
            raise ValueError(
                "need timeout > 0, min_timeout > 0, backoff >= 1, max_timeout >= timeout and min_timeout, deadline > 0"
            )
        if dupthresh < 0:
            raise ValueError(f"dupthresh {dupthresh} must be >= 0 (0: no fast retransmission)")
        if n_workers is not None and not 1 <= n_workers <= wire.MAX_WORKERS:
            raise ValueError(f"n_workers {n_workers} is not 1..{wire.MAX_WORKERS}")
        self.transport, self.builder = transport, builder
        self.job_id, self.worker_id, self.window = job_id, worker_id, window
        self.timeout, self.min_timeout, self.backoff = timeout, min_timeout, backoff
        self.max_timeout, self.deadline = max_timeout, deadline
        self.clock = clock
        self.pairs = pairs
        self.adaptive = adaptive
        self.dupthresh, self.early_retransmit = dupthresh, early_retransmit
        self.n_workers = n_workers
        self.rto = timeout
        self._srtt: float | None = None
        self._rttvar: float | None = None
        self._tx = 0  # transmissions so far: orders every transmission of this worker
        self._gap: float | None = None  # smoothed spacing of results within an operation, and its variation
        self._gapvar: float | None = None
        self.gap_timeout = min_timeout
        self._batch = True
        self.next_request = first_request
        self.counters = WorkerStats()
        self._op: Operation | None = None
        self._sendable: deque[int] = deque()
        self._timers: list[tuple[float, int, int]] = []

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

        Each chunk is padded to a multiple of K = 2·pairs (64) with index 0 (valid for every table); the padding's
        sums are dropped from the result.
        """
        k = 2 * self.pairs
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
        return self._start(wire.OP_THC, len(packed) // self.pairs, packed, self.pairs, None, lengths, k)

    def start_sum_fix32(self, chunks: Sequence[np.ndarray]) -> Operation:
        """Per-coordinate int32 sums over workers (wrapping), `pairs` (32) values per packet, chunk by chunk."""
        k = self.pairs
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
        operation = Operation(
            op, self.next_request, n_requests, payloads, payload_size, values, lengths, per_packet, self.clock()
        )
        self.next_request += n_requests
        self._op = operation
        self._sendable = deque(range(min(self.window, n_requests)))
        self._timers = []
        if n_requests == 0:
            self._finish(operation)
        return operation

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
        frames = self.transport.recv(wait if self._op is not None else 0.0)
        self._batch = True  # results that come together are one arrival for the gap timer
        for frame in frames:
            self._on_frame(frame)
        if frames:
            moved = True
            moved |= self._send_ready()
        moved |= self._fire_timers()
        return moved

    def wait(self, operation: Operation):
        """Block until `operation` completes; its result (see Operation.result)."""
        while not operation.complete:
            due = self.next_deadline()
            self.pump(self.max_timeout if due is None else max(0.0, due - self.clock()))
        return operation.result()

    def next_deadline(self) -> float | None:
        """When the earliest retransmission (or the deadline) is due; None if no request is waiting."""
        timers, op = self._timers, self._op
        while timers and (op is None or op.done[timers[0][1]] or op.attempts[timers[0][1]] != timers[0][2]):
            heapq.heappop(timers)
        due = timers[0][0] if timers else None
        if op is not None and op.probe_at is not None and (due is None or op.probe_at < due):
            due = op.probe_at
        return due

    def _send_ready(self) -> bool:
        op = self._op
        if op is None or not self._sendable:
            return False
        now, sendable, send = self.clock(), self._sendable, self._transmit
        while sendable:
            i = sendable.popleft()
            op.first_sent[i] = now
            op.rto[i] = self.rto
            send(op, i, now)
            self.counters.requests += 1
        return True

    def _transmit(self, op: Operation, i: int, now: float) -> None:
        q = op.q0 + i
        frame = self.builder.frame(
            op.op,
            wire.KIND_REQUEST,
            self.job_id,
            self.worker_id,
            q % self.window,
            q // self.window,
            op.value(i),
            op.payload(i),
        )
        self.transport.send(frame)
        seq = self._tx
        self._tx = seq + 1
        if op.attempts[i] == 0:
            op.first_seq[i] = seq
            op.first_transmissions += 1
        op.attempts[i] += 1
        op.seq[i] = seq
        op.firsts_before[i] = op.first_transmissions
        op.evidence[i] = 0
        op.inflight.pop(i, None)
        op.inflight[i] = None  # the newest transmission goes last
        heapq.heappush(self._timers, (min(now + op.rto[i], op.first_sent[i] + self.deadline), i, op.attempts[i]))
        self.counters.packets_sent += 1
        self.counters.bytes_sent += len(frame)

    def _fire_timers(self) -> bool:
        op, timers = self._op, self._timers
        if op is None:
            return False
        now, expired = self.clock(), []
        while timers and timers[0][0] <= now:
            _, i, attempt = heapq.heappop(timers)
            if op.done[i] or op.attempts[i] != attempt:
                continue
            if now - op.first_sent[i] >= self.deadline:
                raise self._timeout_error(op, i, now)
            op.rto[i] = min(op.rto[i] * self.backoff, self.max_timeout)
            if self.adaptive:  # keep the backed-off timeout for new requests until a clean sample comes
                self.rto = max(self.rto, op.rto[i])
            expired.append(i)
        fired = bool(expired)
        if expired:
            # Timers of one burst expire together, mostly because a worker is late, not because all were
            # lost: send the oldest again (as TCP does on RTO) and let its result, fast retransmission and
            # the gap timer find the rest; the others wait their backed-off timeout.
            oldest = min(expired, key=op.seq.__getitem__)
            for i in expired:
                if i != oldest:
                    heapq.heappush(timers, (min(now + op.rto[i], op.first_sent[i] + self.deadline), i, op.attempts[i]))
            self._transmit(op, oldest, now)
            self.counters.retransmissions += 1
            self.counters.timer_retransmissions += 1
        if op.probe_at is not None and op.probe_at <= now and op.inflight:
            self._probe(op, now)
            fired = True
        return fired

    def _probe(self, op: Operation, now: float) -> None:
        """No result for the gap timeout since the operation's latest: send the oldest unanswered request
        again (one probe: a late worker or a slow switch then costs one packet); its result, or the next
        probe after a doubled gap timeout, finds the next."""
        i = next(iter(op.inflight))
        self._transmit(op, i, now)
        self.counters.retransmissions += 1
        self.counters.probe_retransmissions += 1
        op.probe_backoff = min(op.probe_backoff * self.backoff, 1e6)
        op.probe_at = now + min(self.gap_timeout * op.probe_backoff, self.max_timeout)

    def _detect_loss(self, op: Operation, j: int) -> None:
        """The result of request j is in: it is evidence against every unanswered request whose latest
        transmission came before j's first; send those that have enough evidence again."""
        bound, lost = op.first_seq[j], []
        early = self.early_retransmit and op.first_transmissions == op.n  # nothing left to send
        seq, evidence, thresh = op.seq, op.evidence, self.dupthresh
        for i in op.inflight:  # oldest transmission first: stop at the first one sent after j
            if seq[i] >= bound:
                break
            e = evidence[i] = evidence[i] + 1
            # early: every request first sent after i's transmission is answered (e counts each once)
            if e >= thresh or (early and e >= op.first_transmissions - op.firsts_before[i]):
                lost.append(i)
        if lost:
            now = self.clock()
            for i in lost:
                self._transmit(op, i, now)
                self.counters.retransmissions += 1
                self.counters.fast_retransmissions += 1

    def _on_frame(self, frame: bytes) -> None:
        c = self.counters
        c.packets_received += 1
        c.bytes_received += len(frame)
        result = wire.parse_frame(frame)
        # Matched by (job_id, slot, round) only, as the contract says: every worker's copy carries the same
        # sums, so a copy whose worker_id was not rewritten (no result_dst entry) is still good.
        if (
            result is None
            or result.kind not in (wire.KIND_RESULT, wire.KIND_RESULT_RETX)
            or result.job_id != self.job_id
        ):
            c.ignored_frames += 1
            return
        op = self._op
        q = result.round * self.window + result.slot
        if result.slot >= self.window or q >= self.next_request:
            c.stale_results += 1
            return
        if op is None or q < op.q0 or op.done[q - op.q0]:
            c.duplicate_results += 1
            return
        i = q - op.q0
        if op.attempts[i] == 0:
            c.stale_results += 1
            return
        if not op.fits(result, self.n_workers):
            c.rejected_results += 1
            return
        op.store(i, result)
        op.done[i] = 1
        op.outstanding -= 1
        op.inflight.pop(i, None)
        c.results += 1
        now = self.clock()
        if op.attempts[i] == 1:  # Karn: a retransmitted request's round trip is ambiguous
            if op.answered and self._batch:
                self._gap_sample(now - op.last_result)
                self._batch = False
            rtt = now - op.first_sent[i]
            op.rtt_max = rtt if op.rtt_max is None else max(op.rtt_max, rtt)
            op.rtt_results += 1
            if self.adaptive and op.rtt_results >= self.window:
                self._rtt_sample(op.rtt_max)
                op.rtt_max, op.rtt_results = None, 0
        op.answered += 1
        op.last_result = now
        op.newest_answered = max(op.newest_answered, op.first_seq[i])
        if op.outstanding == 0:
            self._finish(op)
            return
        op.probe_backoff = 1.0
        op.probe_at = now + self.gap_timeout
        if self.dupthresh and op.inflight:
            self._detect_loss(op, i)
        if i + self.window < op.n:
            self._sendable.append(i + self.window)

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
        self._op = None
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
            f"STALE_ROUND); that all the job's workers are running; and the switch's thc_events counters "
            f"(UNKNOWN_JOB, FOREIGN_WORKER, SLOT_RANGE, STALE_ROUND, FAR_ROUND: a worker that skipped rounds or "
            f"another run's job on these slots, OP_MISMATCH, BAD_INDEX, NO_ROUTE)."
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
