"""When a worker sends a request again on its own: round-trip estimates (RFC 6298), the retransmission
timer and the tail probe.

Loss that later results reveal is loss.py's; these timers cover the rest: the last requests of an
operation, a lost retransmission, a switch that stopped answering. A slow link or a slow switch queues an
operation's results one behind the other, and a result queued behind others of the same window is late,
not lost. So the timers run from the latest progress (every result restarts them, as every new
acknowledgement restarts TCP's, RFC 6298 §5.3), the retransmission timeout follows round trips that
include that queue, and the probe waits for a tail: while more results are due than fast retransmission
needs to reveal a loss among them (`tail`), a pause is a late queue or a busy switch, not a lost request.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from host_agent.operation import Operation


class Smoothed:
    """RFC 6298's estimator over a series of durations: the smoothed mean (srtt) and mean deviation
    (rttvar), and the timeout srtt + 4·rttvar, kept within [floor, cap].

    `samples(xs, per_window)` takes many samples of one round trip's worth of results with gains divided
    by `per_window` (RFC 7323 §4.2): a window's results then move the estimate as one sample would, so the
    deviation is that between windows, not the one within a burst, whose results are all alike."""

    def __init__(self, timeout: float, floor: float, cap: float):
        self.mean: float | None = None
        self.var: float | None = None
        self.timeout = self.initial = timeout
        self.floor, self.cap = floor, cap

    def sample(self, x: float) -> None:
        self.samples((x,))

    def samples(self, xs, per_window: int = 1) -> None:
        xs = list(xs)
        if not xs:
            return
        if self.mean is None:
            self.mean, self.var = xs[0], xs[0] / 2
            xs = xs[1:]
        alpha, beta = 0.125 / per_window, 0.25 / per_window
        mean, var = self.mean, self.var
        for x in xs:
            var += beta * (abs(mean - x) - var)
            mean += alpha * (x - mean)
        self.mean, self.var = mean, var
        self.timeout = self.estimate

    @property
    def estimate(self) -> float:
        """srtt + 4·rttvar within [floor, cap]; the timeout before the first sample."""
        if self.mean is None:
            return self.initial
        return min(max(self.mean + 4 * self.var, self.floor), self.cap)


class Timers:
    """One worker's retransmission timer, tail probe and deadline (times on the protocol's clock).

    Each covers a loss that later results cannot reveal: the retransmission timer (RFC 6298, restarted by
    every result, backing off by `backoff` per expiry) a silent switch; a retransmission's own timer
    (RACK's rule, RFC 8985) a lost retransmission; the tail probe (RACK-TLP; its timeout is the RFC 6298
    timeout of the spacing of results, `gap`, at most the RTO) a short tail; the deadline (`deadline` s
    after a request's first transmission) gives up. `max_timeout` bounds the backoff, never the estimate:
    behind a slow switch a window's round trips vary by more than a LAN's timeout, and an RTO cut below
    srtt + 4·rttvar fires while results are only queued (issue 31). host_agent/README.md ("The protocol")
    gives the rules in full. `adaptive` False keeps the RTO at `timeout` (backoff still applies) and the
    PTO at `min_timeout`.
    """

    def __init__(
        self,
        *,
        timeout: float,
        min_timeout: float,
        max_timeout: float,
        backoff: float,
        deadline: float,
        tail: int,
        adaptive: bool,
    ):
        self.min_timeout, self.max_timeout, self.backoff, self.adaptive = min_timeout, max_timeout, backoff, adaptive
        self.deadline, self.tail = deadline, tail
        self.rtt = Smoothed(timeout, min_timeout, max(deadline, max_timeout))  # .timeout is the RTO
        self.gap = Smoothed(min_timeout, min_timeout, max_timeout)  # the spacing of results
        self.retransmit_at: float | None = None
        self.probe_at: float | None = None
        self.deadline_at: float | None = None
        # retransmissions' own timers: (due, order, operation, requests, their attempt numbers, the
        # transmission order of the last of them)
        self._resent: list[tuple[float, int, Operation, np.ndarray, np.ndarray, int]] = []
        self._order = itertools.count()
        self.backoffs = 0  # expiries since the last round-trip sample
        self.newest_answered = -1  # the latest transmission (protocol's order) that a result answered
        self._probe_backoff = 1.0

    @property
    def rto(self) -> float:
        return self.rtt.timeout

    @property
    def pto(self) -> float:
        return min(self.gap.timeout, self.rto)

    def carry_over(self, other: Timers) -> None:
        """Start from `other`'s estimates (the same worker on the same path, in another job)."""
        for mine, theirs in ((self.rtt, other.rtt), (self.gap, other.gap)):
            mine.mean, mine.var, mine.timeout = theirs.mean, theirs.var, theirs.timeout

    def next_due(self) -> float | None:
        """The earliest of the timers, or None."""
        heap = self._resent
        while heap and not self._waiting(heap[0]).any():
            heapq.heappop(heap)
        due = [t for t in (self.retransmit_at, self.probe_at, self.deadline_at) if t is not None]
        if heap:
            due.append(heap[0][0])
        return min(due) if due else None

    def fixed_due(self) -> float:
        """The earliest timer that results do not move (the deadline, a resent request's), or inf."""
        return min(self.deadline_at or np.inf, self._resent[0][0] if self._resent else np.inf)

    @staticmethod
    def _waiting(entry) -> np.ndarray:
        """Which requests of a retransmission timer still wait for the transmission it was set for."""
        _, _, op, idx, attempts, _ = entry
        return (op.attempts[idx] == attempts) & ~op.done[idx]

    # ---- events ------------------------------------------------------------------------------------

    def sent(self, now: float) -> None:
        """Requests went out: the retransmission timer and the deadline run if they did not."""
        if self.retransmit_at is None:
            self.retransmit_at = now + self.rto
        if self.deadline_at is None:
            self.deadline_at = now + self.deadline

    def answered(self, now: float, rtts: np.ndarray, per_window: int, in_flight: int, tail: bool) -> None:
        """Results came at `now`: `rtts`, the round trips of those sent once, in arrival order (of a
        window of `per_window` requests); `in_flight` requests still wait for theirs; `tail`: whether
        they are the operation's tail (no result still to come can show them lost)."""
        if self.adaptive and len(rtts):
            self.rtt.samples(rtts.tolist(), per_window)
            self.backoffs = 0
        if not in_flight:
            self.stop()
            return
        self.retransmit_at = now + self.rto
        self._probe_backoff = 1.0
        self.probe_at = now + self.pto if tail or in_flight <= self.tail else None

    def heard(self, now: float) -> None:
        """A STATUS came (the switch answered a QUERY): the path and the switch are alive, so the running
        retransmission timer and tail probe wait anew from `now`; the probe keeps its backoff (a STATUS is
        no result: a probe answered only by STATUSes waits longer each time, or it would cut the window
        at every answer)."""
        if self.retransmit_at is not None:
            self.retransmit_at = now + self.rto
        if self.probe_at is not None:
            self.probe_at = now + min(self.pto * self._probe_backoff, self.max_timeout)

    def spacing(self, gap: float) -> None:
        """A batch of results came `gap` s after the operation's previous result."""
        if self.adaptive:
            self.gap.sample(gap)

    def resent(self, op: Operation, idx: np.ndarray, now: float) -> None:
        """Requests idx of `op` were sent again at `now` (op.seq holds their transmission order): each is lost
        too if no result comes within the RTO while a request sent after it had its result."""
        entry = (now + self.rto, next(self._order), op, idx, op.attempts[idx], int(op.seq[idx].max()))
        heapq.heappush(self._resent, entry)

    def results_of(self, seq: int) -> None:
        """Results came for requests whose latest transmissions were up to `seq` (protocol's order)."""
        self.newest_answered = max(self.newest_answered, seq)

    def lost_resends(self, now: float) -> list[tuple[Operation, np.ndarray]]:
        """The retransmissions whose own timers are due, that still wait for their results, and behind which
        a request sent later has had its result: the path keeps its order, so one still queued (behind the
        worker's own requests on a slow uplink, or their results on the downlink) is late, not lost. One
        that nothing overtook yet is looked at again a probe timeout later."""
        heap, due, later = self._resent, [], []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            waiting = self._waiting(entry)
            if not waiting.any():
                continue
            if self.newest_answered > entry[5]:
                due.append((entry[2], entry[3][waiting]))
            else:
                later.append((now + self.pto, *entry[1:]))
        for entry in later:
            heapq.heappush(heap, entry)
        return due

    def check_deadline(self, now: float, oldest_sent: float) -> bool:
        """Whether the request first sent at `oldest_sent`, the oldest waiting, is past the deadline; if
        not, the deadline moves on to it."""
        if now - oldest_sent >= self.deadline:
            return True
        self.deadline_at = oldest_sent + self.deadline
        return False

    def expired(self, now: float) -> bool:
        """Whether the retransmission timer is due (the protocol then resends and calls backed_off())."""
        return self.retransmit_at is not None and self.retransmit_at <= now

    def back_off(self) -> None:
        """A timer expired: the RTO doubles until the next sample (RFC 6298 §5.5–5.7)."""
        self.rtt.timeout = min(self.rtt.timeout * self.backoff, max(self.max_timeout, self.rtt.estimate))
        self.backoffs += 1

    def restart(self, now: float) -> None:
        """The retransmission timer expired and was served: it runs again with the backed-off RTO."""
        self.back_off()
        self.retransmit_at = now + self.rto

    def probe_due(self, now: float) -> bool:
        return self.probe_at is not None and self.probe_at <= now

    def probed(self, now: float) -> None:
        """A probe went out: the next waits twice as long, unless a result comes first."""
        self._probe_backoff *= self.backoff
        self.probe_at = now + min(self.pto * self._probe_backoff, self.max_timeout)

    def stop(self) -> None:
        """Nothing is in flight (the operation is complete or abandoned)."""
        self.retransmit_at = self.probe_at = self.deadline_at = None
        self._resent = []
