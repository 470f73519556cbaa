"""When a worker sends a request again on its own: round-trip estimates (RFC 6298), the retransmission
timers, and the gap timer that probes an operation's tail.

Loss that later results reveal is loss.py's; these timers cover the rest: the last requests of an
operation, a lost retransmission, a switch that stopped answering.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from host_agent.operation import Operation


class Smoothed:
    """RFC 6298's estimator over a series of durations: the smoothed mean (srtt) and mean deviation
    (rttvar), and the timeout srtt + 4·rttvar, kept within [floor, cap]."""

    def __init__(self, timeout: float, floor: float, cap: float):
        self.mean: float | None = None
        self.var: float | None = None
        self.timeout = timeout
        self.floor, self.cap = floor, cap

    def sample(self, x: float) -> None:
        if self.mean is None:
            self.mean, self.var = x, x / 2
        else:
            self.var = 0.75 * self.var + 0.25 * abs(self.mean - x)
            self.mean = 0.875 * self.mean + 0.125 * x
        self.timeout = min(max(self.mean + 4 * self.var, self.floor), self.cap)


class Timers:
    """One worker's timers for the operation in flight.

    - Retransmission timers: each request sent is armed with its retransmission timeout (RTO); requests
      sent together share one heap entry. The RTO starts at `timeout`; with `adaptive` it follows the
      measured round trip (`rtt`), sampled once per W clean results with the slowest of them (every request
      of a window is sent within one round trip, so the timer must cover the slowest, and per-request
      samples of one burst are so alike that rttvar would collapse). An expired timer backs its requests'
      timeouts off (× `backoff`, at most `max_timeout`) and the RTO of new requests with them, until the
      next sample.
    - The gap timer (a tail loss probe): once a result of the operation is back, every worker is in it and
      results follow at the switch's pace; when none has come for the gap timeout (`gap`: the spacing of
      arrivals of results, smoothed as the round trip is, never below `min_timeout`), the oldest
      unanswered request is probed, and the gap timeout doubles until the next result.
    """

    def __init__(
        self, window: int, *, timeout: float, min_timeout: float, max_timeout: float, backoff: float, adaptive: bool
    ):
        self.window = window
        self.max_timeout, self.backoff, self.adaptive = max_timeout, backoff, adaptive
        self.rtt = Smoothed(timeout, min_timeout, max_timeout)  # .timeout is the RTO of new requests
        self.gap = Smoothed(min_timeout, min_timeout, max_timeout)  # .timeout is the gap timeout
        # (time, order, requests, their attempt numbers when armed)
        self.heap: list[tuple[float, int, np.ndarray, np.ndarray]] = []
        self._order = itertools.count()
        self.probe_at: float | None = None
        self._probe_backoff = 1.0
        self._rtt_max: float | None = None  # the slowest clean round trip since the last RTT sample
        self._rtt_results = 0

    @property
    def rto(self) -> float:
        return self.rtt.timeout

    def carry_over(self, other: Timers) -> None:
        """Start from `other`'s round-trip estimate (the same worker on the same path, in another job)."""
        self.rtt.mean, self.rtt.var, self.rtt.timeout = other.rtt.mean, other.rtt.var, other.rtt.timeout

    def start(self) -> None:
        """A new operation: no timer of the last one is left."""
        self.clear()
        self._probe_backoff = 1.0
        self._rtt_max, self._rtt_results = None, 0

    def finish(self) -> None:
        """The operation is complete: its round trips since the last sample are one more."""
        if self.adaptive and self._rtt_max is not None:
            self.rtt.sample(self._rtt_max)
        self.clear()

    def clear(self) -> None:
        """No timer is left running (the operation is complete or abandoned)."""
        self.heap = []
        self.probe_at = None

    # ---- retransmission timers ---------------------------------------------------------------------

    def arm(self, op: Operation, idx: np.ndarray, when: np.ndarray) -> None:
        """Retransmission timers for requests `idx` at times `when`: one heap entry per distinct time."""
        attempts = op.attempts[idx]
        if len(when) == 1 or (when == when[0]).all():
            heapq.heappush(self.heap, (float(when[0]), next(self._order), idx, attempts))
            return
        for t in np.unique(when):
            sel = when == t
            heapq.heappush(self.heap, (float(t), next(self._order), idx[sel], attempts[sel]))

    def next_timer(self, op: Operation | None) -> float | None:
        """When the earliest retransmission timer of a request still waiting expires (stale ones dropped)."""
        heap = self.heap
        while heap:
            _, _, idx, attempts = heap[0]
            if op is not None and ((op.attempts[idx] == attempts) & ~op.done[idx]).any():
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def next_due(self, op: Operation | None) -> float | None:
        """The earliest retransmission timer or probe."""
        due = self.next_timer(op)
        if op is not None and self.probe_at is not None and (due is None or self.probe_at < due):
            due = self.probe_at
        return due

    def expired(self, op: Operation, now: float) -> list[tuple[float, np.ndarray]]:
        """The timers due by `now`, each with its requests that still wait for the transmission it was
        armed for."""
        heap, due = self.heap, []
        while heap and heap[0][0] <= now:
            when, _, idx, attempts = heapq.heappop(heap)
            idx = idx[(op.attempts[idx] == attempts) & ~op.done[idx]]
            if idx.size:
                due.append((when, idx))
        return due

    def back_off(self, op: Operation, idx: np.ndarray) -> None:
        """Requests idx timed out: their timeouts grow, and so does the RTO of new requests until the next
        round-trip sample."""
        op.rto[idx] = np.minimum(op.rto[idx] * self.backoff, self.max_timeout)
        if self.adaptive:
            self.rtt.timeout = max(self.rtt.timeout, float(op.rto[idx].max()))

    # ---- round-trip samples ------------------------------------------------------------------------

    def round_trips(self, rtts: np.ndarray) -> None:
        """Round trips of clean results (sent once: Karn's rule), in arrival order: one sample per W."""
        pos = 0
        while pos < len(rtts):
            take = len(rtts) - pos
            if self.adaptive:
                take = min(take, max(1, self.window - self._rtt_results))
            chunk_max = float(rtts[pos : pos + take].max())
            self._rtt_max = chunk_max if self._rtt_max is None else max(self._rtt_max, chunk_max)
            self._rtt_results += take
            pos += take
            if self.adaptive and self._rtt_results >= self.window:
                self.rtt.sample(self._rtt_max)
                self._rtt_max, self._rtt_results = None, 0

    def round_trip(self, rtt: float) -> None:
        """round_trips() of one result."""
        self._rtt_max = rtt if self._rtt_max is None else max(self._rtt_max, rtt)
        self._rtt_results += 1
        if self.adaptive and self._rtt_results >= self.window:
            self.rtt.sample(self._rtt_max)
            self._rtt_max, self._rtt_results = None, 0

    # ---- the gap timer -----------------------------------------------------------------------------

    def result_in(self, now: float) -> None:
        """A result of the operation came: the gap timer starts again from its smoothed timeout."""
        self._probe_backoff = 1.0
        self.probe_at = now + self.gap.timeout

    def probe_due(self, now: float) -> bool:
        return self.probe_at is not None and self.probe_at <= now

    def probed(self, now: float) -> None:
        """A probe went out: the next one waits twice as long, unless a result comes first."""
        self._probe_backoff = min(self._probe_backoff * self.backoff, 1e6)
        self.probe_at = now + min(self.gap.timeout * self._probe_backoff, self.max_timeout)
