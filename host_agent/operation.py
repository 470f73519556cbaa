"""One aggregation call in flight (`Operation`): its requests' payloads from the caller's chunks, its
prebuilt request frames, the per-request state the protocol keeps as numpy arrays, and the results it
assembles from the switch's answers.

The policies that act on this state live beside it: window.py (what may be sent), timers.py (when to send
again), loss.py (what later results show lost), receive.py (how a batch of results is sorted and stored).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import numpy as np

from host_agent import wire
from native_build import address_of


class ProtocolError(RuntimeError):
    """Results that cannot be combined (e.g. different contributor counts within one operation)."""


def pack_norms(values: Sequence[float] | np.ndarray) -> tuple[np.ndarray, list[int]]:
    """NORM requests' payloads: the values' float32 bit patterns (the switch takes their unsigned max lane by
    lane), big-endian, wire.NORMS_PER_REQUEST a request, the last request's unused lanes 0; and [the number
    of values]."""
    v = np.asarray(values, dtype=np.float32).reshape(-1)
    n, width = v.size, -(-v.size // wire.NORMS_PER_REQUEST) * wire.NORMS_PER_REQUEST
    if n <= _FEW_NORMS:  # a bucket's chunk norms: Python's floats cost less than four numpy calls
        xs = v.tolist()  # float32 values, exactly
        if any(not x >= 0 for x in xs):  # a NaN fails the comparison too
            raise ValueError(_NEGATIVE_NORM)
        # big-endian float32; -0.0 + 0.0 = +0.0, whose bits would otherwise sort above everything
        packed = _BIG_ENDIAN_FLOATS[n].pack(*[x + 0.0 for x in xs]) + bytes(4 * (width - n))
        return np.frombuffer(packed, np.uint8), [n]
    if not v.min() >= 0:
        raise ValueError(_NEGATIVE_NORM)
    padded = np.zeros(width, ">f4")
    np.add(v, np.float32(0), out=padded[:n])
    return padded.view(np.uint8), [n]


_NEGATIVE_NORM = "NORM values must be non-negative: the switch compares float32 bit patterns as unsigned integers"
_FEW_NORMS = 64
_BIG_ENDIAN_FLOATS = [struct.Struct(f">{n}f") for n in range(_FEW_NORMS + 1)]


def pack_indices(chunks: Sequence[np.ndarray], k: int) -> tuple[bytes, list[int]]:
    """THC requests' payloads, k indices a request, two per byte (first in the high nibble); each chunk
    padded to a multiple of k with index 0 (valid for every table; its sums are cut off again). And the
    chunks' lengths."""
    flat = [np.asarray(chunk).reshape(-1) for chunk in chunks]
    lengths = [idx.size for idx in flat]
    if not flat:
        return b"", lengths
    if all(size % k == 0 for size in lengths):  # no padding: the chunks are the requests' indices
        whole = np.concatenate(flat) if len(flat) > 1 else flat[0]
        if whole.size and (whole.min() < 0 or whole.max() > 15):
            raise ValueError("THC indices must be 0..15 (4 bits)")
        return wire.pack_nibbles(whole), lengths
    parts = []
    for idx in flat:
        if idx.size and (idx.min() < 0 or idx.max() > 15):
            raise ValueError("THC indices must be 0..15 (4 bits)")
        padded = np.zeros(-(-idx.size // k) * k, np.uint8)
        padded[: idx.size] = idx
        parts.append(padded)
    return wire.pack_nibbles(np.concatenate(parts)), lengths


def pack_fix32(chunks: Sequence[np.ndarray], k: int) -> tuple[bytes, list[int]]:
    """FIX32 requests' payloads, k big-endian int32 a request, each chunk zero-padded to a multiple of k;
    and the chunks' lengths."""
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
    return (np.concatenate(parts).astype(">i4").tobytes() if parts else b""), lengths


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
        self.result_bytes = per_packet * wire.LANE_DTYPES[lane_bits].itemsize
        self.started = started
        self.finished: float | None = None
        self.first_result: float | None = None  # when the first result came (the slowest worker had joined)
        self.min_rtt = math.inf  # the shortest round trip of a request sent once
        times = self._times = np.zeros((2, n_requests), np.float64)  # (one allocation a kind: ops are often small)
        self.answered_at = times[0]  # when each request's result came (diagnostics)
        self.first_sent = times[1]
        ints = np.zeros((5, n_requests), np.int64)
        self.attempts = ints[0]
        flags = np.zeros((2, n_requests), np.uint8)  # done and counts: one allocation, one address
        self.done = flags[0].view(np.bool_)
        self.outstanding = n_requests
        self.counts = flags[1]
        self._ints, self._flags = ints, flags
        self._addresses: tuple[int, int, int, int] | None = None  # flags, ints, sums, times (_look_up)
        # loss detection: per request the number of its latest transmission and of its first, the first
        # transmissions of this operation made before its latest one, and the results of requests first
        # sent after its latest transmission that came back since
        self.seq, self.first_seq, self.firsts_before, self.evidence = ints[1], ints[2], ints[3], ints[4]
        self.first_transmissions = 0
        self.in_flight_count = 0  # requests sent and unanswered
        # requests in flight (sent, unanswered) all lie in [low, sent_hi): low is the oldest unanswered
        # request (advanced lazily), sent_hi one past the newest sent
        self.low = 0
        self.sent_hi = 0
        # every transmission so far a first one, in request order (so a later request's was later): a
        # result for any request but the lowest unanswered is then the only evidence of loss there can be
        self.in_order = True
        self.answered = 0
        self.last_result = 0.0  # when the latest result came
        self.count: int | None = None  # every accepted result's count must match the first
        self.mixed_counts = mixed_counts  # partial aggregation: counts may differ between requests
        # when an unanswered request sends a RELEASE (partial aggregation only: None without it)
        self.release_at = np.full(n_requests, np.inf) if mixed_counts else None
        self.sums = np.zeros(n_requests * per_packet, np.int32)  # NORM: the maxima's float32 bit patterns
        self.flat = False  # result() gives the sums as one flat array (WorkerProtocol.start_sum_packed)

    def addresses(self) -> tuple[int, int, int, int]:
        """Where done, attempts, sums and counts start in memory (for the native take; they never move)."""
        flags, ints, sums, _ = self._addresses or self._look_up()
        return flags, ints, sums, flags + self.n

    def booking_addresses(self) -> tuple[int, int]:
        """Where the float64 rows (answered_at, first_sent) and the int64 rows (attempts, seq, first_seq,
        firsts_before, evidence) start (for the native booking, fastio.c thc_book)."""
        _, ints, _, times = self._addresses or self._look_up()
        return times, ints

    def _look_up(self) -> tuple[int, int, int, int]:
        self._addresses = tuple(address_of(a) for a in (self._flags, self._ints, self.sums, self._times))
        return self._addresses

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
        the op has in the job (NORM and FIX32 32, THC the job's 8 or 16) and the cell's words as payload
        (NORM: its NORM_WORDS words). The first that fits fixes the operation's count. A result that does not fit is
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
        if not self.mixed_counts and self.count is not None:  # every accepted result's count is the first's
            return self.count
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
        """NORM: float32 maxima. THC / FIX32: (list of per-chunk sums, contributors: see contributors()); with
        `flat`, the sums of every request as one int32 array instead of the list."""
        if not self.complete:
            raise RuntimeError("operation still in flight")
        if self.op == wire.OP_NORM:
            return self.sums[: self.chunk_lengths[0]].view(np.float32).copy()
        if self.flat:  # the operation's own array: nothing else writes it once the operation is complete
            return self.sums, self.contributors()
        return self._per_chunk(self.sums), self.contributors()
