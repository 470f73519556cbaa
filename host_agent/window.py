"""The request schedule (p4/README.md, "Worker protocol") and how many of the requests it lets go may be in
flight: a congestion window that follows the switch.

Request q of a job (counted from 0 over the whole run, the same sequence on every worker) uses slot
q mod W in round q div W, W the job's window, and may be sent only once the result of request q − W (the
slot's previous use) is back. So the switch never sees a round that the round window of its cells refuses,
and W stays the schedule's modulus on every worker whatever else happens.

Within what the schedule allows, the congestion window (`limit`, at most W) holds back how many requests
are in flight, as TCP's does (RFC 5681): it starts at W, so a fast switch sees the whole window at once;
every result lets it grow (by one per result below `ssthresh`, slow start; by one per window of results
above it, additive increase); a timeout once results were flowing, or more requests lost together at the
end of a flow than fast retransmission would need to see one, halves it (multiplicative decrease), and
what was in flight is presumed lost, sent again as results come back. A single loss does not cut it: at
a few percent of random loss per link the window would never grow back, and a lost request costs its
own retransmission, not a smaller window. A switch that answers ~2,000 packets/s would otherwise get another copy
of every queued request at each timeout, and never catch up (congestion collapse).

A timeout may be spurious (F-RTO's question, RFC 5682): a switch that stalls for longer than the RTO (BMv2
descheduled on a busy machine) answers the requests afterwards. So a timeout sends only the lowest request
again (`timed_out`), and the results judge it (`judge`): the result of a request that was in flight at the
timeout and has not been sent again since can only answer its first transmission, so what was in flight
was queued, not lost, and stays in flight with the window whole. When only the resent request is answered
and the silence comes back for another RTO, it was lost: the window halves and the rest goes again. That
is an RTO later than presuming the loss at once, but a stall no longer costs a window's worth of copies.
"""

from __future__ import annotations

import math

import numpy as np

from host_agent.operation import Operation


class Window:
    """The schedule of a job's requests over its W slots, the requests it lets go (an operation's first W
    at its start, then q + W once q is answered, in that order), requests presumed lost, and the congestion
    window over both."""

    def __init__(self, size: int):
        self.size = size
        self.limit = float(size)  # the congestion window: requests in flight, at most
        self.ssthresh = float(size)
        self.cuts = 0  # multiplicative decreases so far
        self.undone = 0  # timeouts the next results showed spurious (no cut, nothing presumed lost)
        # a timeout not judged yet: (requests in flight then, their attempts then, why)
        self._suspect: tuple[np.ndarray, np.ndarray, str] | None = None
        self._heard = False  # a result came since that timeout, none that judged it
        self._free: list[np.ndarray] = []  # request indices within the operation, in the order freed
        # presumed lost, to go again first: (requests, their attempts then, why)
        self._lost: list[tuple[np.ndarray, np.ndarray, str]] = []

    def slot(self, q):
        return q % self.size

    def round(self, q):
        return q // self.size

    def number(self, slot, round):
        """The request number q of (slot, round)."""
        return round * self.size + slot

    # ---- the schedule ------------------------------------------------------------------------------

    def open(self, n_requests: int) -> None:
        """A new operation of n requests: the first W may go (the previous one is complete)."""
        self._free = [np.arange(min(self.size, n_requests), dtype=np.int64)]
        self._lost = []
        self._suspect = None

    def answered(self, i: np.ndarray, n_requests: int) -> None:
        """Requests i of the operation are answered: each lets request i + W of the operation go."""
        following = i + self.size
        following = following[following < n_requests]
        if following.size:
            self._free.append(following)

    def presume_lost(self, op: Operation, idx: np.ndarray, why: str) -> None:
        """Requests idx of `op`, in flight, are presumed lost: they go again, before any new request, as the
        window lets them, unless their results come or they are sent again otherwise first (`why` names
        the counter their retransmissions count in)."""
        queued = [q for q, _, _ in self._lost]
        if queued:
            idx = idx[~np.isin(idx, np.concatenate(queued))]
        if idx.size:
            self._lost.append((idx, op.attempts[idx], why))

    def _still_lost(self, op: Operation) -> list[tuple[np.ndarray, str]]:
        """The presumed lost requests that still wait for their retransmission."""
        out = []
        for idx, attempts, why in self._lost:
            keep = (op.attempts[idx] == attempts) & ~op.done[idx]
            if keep.any():
                out.append((idx[keep], why))
        return out

    def take(self, op: Operation) -> list[tuple[np.ndarray, str | None]]:
        """What may be sent now: (requests, why) of presumed lost ones, then (requests, None) of new ones,
        the lowest request numbers first, as many as the congestion window has room for besides the
        requests in flight (those presumed lost do not count: they are out of the network).

        Lowest first, and the lowest waiting request goes even into a full window when it is older than
        every request in flight: a slot completes only once every worker has sent its request, so a
        window full of requests that wait for other workers must never hold back one they wait for. The
        lowest incomplete slot is then always sent by every worker, and none waits on another's window."""
        lost = self._still_lost(op)
        new = np.concatenate(self._free) if self._free else np.zeros(0, np.int64)
        new = new[~op.done[new]]  # answered early (a released slot's result came first)
        pending = np.concatenate([idx for idx, _ in lost] + [new])
        waiting = len(pending) - len(new)  # presumed lost: in flight, but out of the network
        room = math.floor(self.limit) - (op.in_flight_count - waiting)
        order = np.argsort(pending, kind="stable")
        if room <= 0 and pending.size and pending[order[0]] < self._oldest_in_pipe(op, pending[:waiting]):
            room = 1
        chosen = np.zeros(len(pending), np.bool_)
        chosen[order[: max(room, 0)]] = True
        groups, self._lost, start = [], [], 0
        for idx, why in lost:
            mine = chosen[start : start + len(idx)]
            if mine.any():
                groups.append((np.sort(idx[mine]), why))
            if not mine.all():
                self._lost.append((idx[~mine], op.attempts[idx[~mine]], why))
            start += len(idx)
        mine = chosen[waiting:]
        self._free = [new[~mine]] if not mine.all() else []
        if mine.any():
            groups.append((np.sort(new[mine]), None))
        return groups

    @staticmethod
    def _oldest_in_pipe(op: Operation, lost: np.ndarray) -> int:
        """The lowest request in flight and not presumed lost (the operation's size if there is none)."""
        flying, lo = op.in_flight()
        pipe = np.flatnonzero(flying) + lo
        pipe = pipe[~np.isin(pipe, lost)]
        return int(pipe[0]) if pipe.size else op.n

    def clear(self) -> None:
        self._free, self._lost = [], []
        self._suspect = None

    def __bool__(self) -> bool:
        """Whether requests are waiting to be sent (new ones, or presumed lost)."""
        return bool(self._free or self._lost)

    # ---- the congestion window ---------------------------------------------------------------------

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

    def timed_out(self, op: Operation, idx: np.ndarray, why: str) -> None:
        """Nothing came for the RTO while results had been flowing; requests idx of `op` are in flight (but
        for the lowest, which the protocol resends). Lost or only late? A result of one of them, sent once,
        says late (`judge`). If instead only the resent request was answered and the silence came back,
        they are lost: the window halves and they go again as it lets them. Until then nothing more goes."""
        if self._suspect is None:
            self._suspect, self._heard = (idx, op.attempts[idx].copy(), why), False
            return
        if not self._heard:
            return  # the same silence goes on (a long stall, or the switch is gone): the deadline decides
        idx, attempts, why = self._suspect
        self._suspect = None
        self.cut()
        self.presume_lost(op, idx[(op.attempts[idx] == attempts) & ~op.done[idx]], why)

    def judge(self, op: Operation, clean: np.ndarray) -> None:
        """A batch of results came after a timeout, `clean` those of requests sent once. One of the
        requests in flight at the timeout among them, not sent again since, can only answer its first
        transmission: the timeout was spurious (counted in `undone`), and nothing was lost."""
        if self._suspect is None:
            return
        idx, attempts, _ = self._suspect
        if np.isin(idx[op.attempts[idx] == attempts], clean).any():
            self._suspect = None
            self.undone += 1
        else:
            self._heard = True

    def cut(self) -> None:
        """The switch (or the path) cannot take as much as the window lets go: nothing came for the RTO
        while results had been flowing, or a whole tail of requests was lost together. Halve it
        (multiplicative decrease)."""
        self.limit = self.ssthresh = max(self.limit / 2, 1.0)
        self.cuts += 1
