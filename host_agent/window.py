"""The request schedule (p4/README.md, "Worker protocol") and how many of the requests it lets go may be in
flight: a congestion window that follows the switch.

Request q of a job uses slot q mod W in round q div W and may be sent only once request q − W (the slot's
previous use) is answered, so the switch never sees a round the round window of its cells refuses, and W
stays the schedule's modulus on every worker whatever else happens. Within that, a congestion window
(TCP's, RFC 5681, paced, with F-RTO's check of a timeout, RFC 5682) holds back how many are in flight, so
a slow switch is not sent copies of what it has queued and never catches up; host_agent/README.md ("The
protocol") says how it grows, halves, is paced and judges a timeout.
"""

from __future__ import annotations

import math

import numpy as np

from host_agent.operation import Operation

PACE_HEADROOM = 2.0  # requests in flight per request a round trip of the empty path holds at the results' pace
MIN_PACED = 16  # the paced window never holds fewer
PACED_AFTER = 16  # results an operation needs before its pace bounds the window


class Schedule:
    """The schedule of a job's requests over its W slots, the operations whose requests are numbered and not
    all answered (`ops`, in request order: one may start while others are in flight), the requests it lets
    go (q once q − W is answered), requests presumed lost, and the congestion window over them."""

    def __init__(self, size: int):
        self.size = size
        self.limit = float(size)  # the congestion window: requests in flight, at most
        self.ssthresh = float(size)
        self.paced = float(size)  # what the pace of results allows in flight (pace())
        self._last_min_rtt = math.inf  # the shortest round trip of the operation completed before (paced_by)
        self.cuts = 0  # multiplicative decreases so far
        self.undone = 0  # timeouts the next results showed spurious (no cut, nothing presumed lost)
        # a timeout not judged yet: per operation (operation, requests in flight then, their attempts then),
        # and why
        self._suspect: tuple[list[tuple[Operation, np.ndarray, np.ndarray]], str] | None = None
        self._heard = False  # a result came since that timeout, none that judged it
        self.ops: list[Operation] = []
        self._free: list[tuple[Operation, np.ndarray]] = []  # requests let go, in the order freed
        # presumed lost, to go again first: (operation, requests, their attempts then, why)
        self._lost: list[tuple[Operation, np.ndarray, np.ndarray, str]] = []

    def slot(self, q):
        return q % self.size

    def round(self, q):
        return q // self.size

    def number(self, slot, round):
        """The request number q of (slot, round)."""
        return round * self.size + slot

    # ---- the schedule ------------------------------------------------------------------------------

    def open(self, op: Operation) -> None:
        """A new operation, numbered after every other: those of its first W requests whose slot's previous
        use is answered may go; the others go when it is (answered())."""
        head = np.arange(min(self.size, op.n), dtype=np.int64)
        if not self.ops:  # nothing in flight: every slot's previous use is answered
            self.ops.append(op)
            if len(head):
                self._free.append((op, head))
            return
        ready = np.ones(len(head), np.bool_)
        for other in self.ops:  # only operations still in flight hold unanswered requests
            before = op.q0 + head - self.size - other.q0
            mine = (before >= 0) & (before < other.n)
            ready[mine] = other.done[before[mine]]
        self.ops.append(op)
        if ready.any():
            self._free.append((op, head[ready]))

    def answered(self, op: Operation, i: np.ndarray) -> None:
        """Requests i of `op` are answered: each lets the request W later go, in whichever operation it is
        (or, not numbered yet, once its operation starts)."""
        following = op.q0 + i + self.size
        for other in self.ops:
            mine = following[(following >= other.q0) & (following < other.q0 + other.n)] - other.q0
            if mine.size:
                self._free.append((other, mine))

    def close(self, op: Operation) -> None:
        """`op` is complete (or abandoned): nothing of it is left to send."""
        self.ops = [other for other in self.ops if other is not op]
        self._free = [(o, idx) for o, idx in self._free if o is not op]
        self._lost = [entry for entry in self._lost if entry[0] is not op]
        if self._suspect is not None:  # what it had in flight at a timeout can no longer judge it
            entries, why = self._suspect
            entries = [entry for entry in entries if entry[0] is not op]
            self._suspect = (entries, why) if entries else None

    def presume_lost(self, op: Operation, idx: np.ndarray, why: str) -> None:
        """Requests idx of `op`, in flight, are presumed lost: they go again, before any new request, as the
        window lets them, unless their results come or they are sent again otherwise first (`why` names
        the counter their retransmissions count in)."""
        queued = [q for o, q, _, _ in self._lost if o is op]
        if queued:
            idx = idx[~np.isin(idx, np.concatenate(queued))]
        if idx.size:
            self._lost.append((op, idx, op.attempts[idx], why))

    def held_back(self, op: Operation) -> bool:
        """Whether all that waits to be sent is `op`'s requests from op.sent_hi to its end, new, with every
        slot free (op.n <= W): what the congestion window held back of an operation sent in order, which a
        native wait may send as results come (paced_cap in flight, sent_natively after)."""
        if self._lost or len(self._free) != 1 or op.n > self.size:
            return False
        other, idx = self._free[0]
        return other is op and len(idx) == op.n - op.sent_hi and int(idx[0]) == op.sent_hi and int(idx[-1]) == op.n - 1

    @property
    def paced_cap(self) -> int:
        """Requests in flight at most, as take() counts room now."""
        return math.floor(min(self.limit, self.paced))

    def sent_natively(self, op: Operation) -> None:
        """A native wait sent op's held-back requests below op.sent_hi: they wait no more."""
        if op.sent_hi == op.n and len(self._free) == 1 and self._free[0][0] is op:  # all of them (held_back)
            self._free = []
            return
        self._free = [(o, idx[idx >= o.sent_hi]) if o is op else (o, idx) for o, idx in self._free]
        self._free = [(o, idx) for o, idx in self._free if idx.size]

    def take(self) -> list[tuple[Operation, np.ndarray, str | None]]:
        """What may be sent now: (operation, requests, why) of presumed lost ones, then (operation,
        requests, None) of new ones, the lowest request numbers first, as many as the congestion window has
        room for besides the requests in flight (those presumed lost do not count: they are out of the
        network).

        Lowest first, and the lowest waiting request goes even into a full window when it is older than
        every request in flight: a slot completes only once every worker has sent its request, so a
        window full of requests that wait for other workers must never hold back one they wait for. The
        lowest incomplete slot is then always sent by every worker, and none waits on another's window."""
        if not self._lost and len(self._free) == 1:  # one run of new requests (an operation's start)
            op, idx = self._free[0]
            idx = idx[~op.done[idx]]
            room = math.floor(min(self.limit, self.paced)) - sum(other.in_flight_count for other in self.ops)
            if len(idx) and room >= len(idx):  # all go: the general case below would choose every one
                self._free = []
                return [(op, np.sort(idx), None)]
        entries = []  # (operation, requests, why: None for new ones)
        for op, idx, attempts, why in self._lost:
            keep = (op.attempts[idx] == attempts) & ~op.done[idx]
            entries.append((op, idx[keep], why))
        waiting = sum(len(idx) for _, idx, _ in entries)  # in flight, but out of the network
        for op, idx in self._free:
            entries.append((op, idx[~op.done[idx]], None))  # answered early: a released slot's result
        if not any(len(idx) for _, idx, _ in entries):
            self._free, self._lost = [], []
            return []
        pending = np.concatenate([op.q0 + idx for op, idx, _ in entries])
        room = math.floor(min(self.limit, self.paced)) - (sum(op.in_flight_count for op in self.ops) - waiting)
        order = np.argsort(pending, kind="stable")
        if room <= 0 and pending[order[0]] < self._oldest_in_pipe(pending[:waiting]):
            room = 1
        chosen = np.zeros(len(pending), np.bool_)
        chosen[order[: max(room, 0)]] = True
        groups, self._lost, self._free, start = [], [], [], 0
        for op, idx, why in entries:
            mine = chosen[start : start + len(idx)]
            start += len(idx)
            if mine.any():
                groups.append((op, np.sort(idx[mine]), why))
            rest = idx[~mine]
            if rest.size and why is None:
                self._free.append((op, rest))
            elif rest.size:
                self._lost.append((op, rest, op.attempts[rest], why))
        groups.sort(key=lambda group: (group[2] is None, group[0].q0))  # retransmissions first
        return groups

    def _oldest_in_pipe(self, lost: np.ndarray) -> int:
        """The lowest request number in flight and not presumed lost (`lost`, numbers); past all if none."""
        lowest = None
        for op in self.ops:
            flying, lo = op.in_flight()
            pipe = op.q0 + lo + np.flatnonzero(flying)
            pipe = pipe[~np.isin(pipe, lost)]
            if pipe.size and (lowest is None or pipe[0] < lowest):
                lowest = int(pipe[0])
        return lowest if lowest is not None else np.iinfo(np.int64).max

    def clear(self) -> None:
        """Every operation is abandoned."""
        self.ops, self._free, self._lost = [], [], []
        self._suspect = None

    @property
    def waiting(self) -> bool:
        """Whether requests are waiting to be sent (new ones, or presumed lost)."""
        return bool(self._free or self._lost)

    # ---- the congestion window ---------------------------------------------------------------------

    def paced_by(self, op: Operation) -> None:
        """`op` is complete: the pace its results came at (if PACED_AFTER or more came) and the shortest
        round trip of it and of the operation before (for a training step, a small max or norm round that
        found the path empty) bound the window (pace)."""
        base = min(op.min_rtt, self._last_min_rtt)
        self._last_min_rtt = op.min_rtt
        if op.answered >= PACED_AFTER and op.last_result > op.first_result and math.isfinite(base):
            self.pace(base, (op.answered - 1) / (op.last_result - op.first_result))

    def pace(self, base_rtt: float, rate: float) -> None:
        """Results came at `rate` a second, and a round trip of the empty path takes `base_rtt` s. More in
        flight than PACE_HEADROOM × their product only waits in a queue in front of the bottleneck (a slow
        link's, a slow switch's), and a lost request's recovery waits behind that queue: its QUERY, the
        STATUS and its copy. So no more than that goes (at least MIN_PACED), whatever the window allows:
        the queue stays about one round trip of the empty path. If the pace itself was held back by this
        bound, the round trips are no longer than the empty path's and the bound doubles each time."""
        self.paced = min(float(self.size), max(float(MIN_PACED), PACE_HEADROOM * base_rtt * rate))

    def grow(self, results: int) -> None:
        """Results came: the window grows."""
        limit, ssthresh, cap = self.limit, self.ssthresh, float(self.size)
        while results and limit < cap:
            if limit < ssthresh:  # slow start: one more per result, up to ssthresh
                step = min(results, math.ceil(ssthresh - limit))
                limit += step
                results -= step
            else:  # additive increase: one more per window of results
                limit += 1 / limit
                results -= 1
        self.limit = min(limit, cap)

    def timed_out(self, flying: list[tuple[Operation, np.ndarray]], why: str) -> None:
        """Nothing came for the RTO while results had been flowing; `flying` are the requests in flight, per
        operation (but for the lowest, which the protocol resends). Lost or only late? A result of one of
        them, sent once, says late (`judge`). If instead only the resent request was answered and the silence
        came back, they are lost: the window halves and they go again as it lets them. Until then nothing
        more goes."""
        if self._suspect is None:
            entries = [(op, idx, op.attempts[idx].copy()) for op, idx in flying if idx.size]
            self._suspect, self._heard = (entries, why), False
            return
        if not self._heard:
            return  # the same silence goes on (a long stall, or the switch is gone): the deadline decides
        entries, why = self._suspect
        self._suspect = None
        self.cut()
        for op, idx, attempts in entries:
            self.presume_lost(op, idx[(op.attempts[idx] == attempts) & ~op.done[idx]], why)

    @property
    def judging(self) -> bool:
        """Whether a timeout waits for the results to judge it."""
        return self._suspect is not None

    def judge(self, clean: list[tuple[Operation, np.ndarray]]) -> None:
        """A batch of results came after a timeout, `clean` those of requests sent once, per operation. One
        of the requests in flight at the timeout among them, not sent again since, can only answer its first
        transmission: the timeout was spurious (counted in `undone`), and nothing was lost."""
        if self._suspect is None or not clean:
            return
        for op, idx, attempts in self._suspect[0]:
            unsent = idx[op.attempts[idx] == attempts]
            if any(other is op and np.isin(unsent, answered).any() for other, answered in clean):
                self._suspect = None
                self.undone += 1
                return
        self._heard = True

    def cut(self) -> None:
        """The switch (or the path) cannot take as much as the window lets go: nothing came for the RTO
        while results had been flowing, or a whole tail of requests was lost together. Halve it
        (multiplicative decrease)."""
        self.limit = self.ssthresh = max(self.limit / 2, 1.0)
        self.cuts += 1
