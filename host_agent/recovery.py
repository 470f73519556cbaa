"""When a worker's requests go again (`Recovery`): the retransmission timer, the tail probe, fast
retransmission on the evidence of later results (first as a QUERY, and again itself only if the switch's
STATUS says so), the deadline, and the RELEASEs of partial aggregation.

The mechanisms decide elsewhere (timers.py: when a timer is due; loss.py: what later results show lost;
window.py: what a timeout does to the window); this module acts on their verdicts across the operations in
flight, and the Sender sends what it picks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from host_agent import loss, wire
from host_agent.operation import Operation
from host_agent.sender import Sender
from host_agent.timers import Timers
from host_agent.window import Schedule

TIMER, FAST, PROBE = "timer_retransmissions", "fast_retransmissions", "probe_retransmissions"

Flying = list[tuple[Operation, np.ndarray]]  # per operation in flight, its requests sent and unanswered


class Recovery:
    """Retransmissions and RELEASEs of one worker, and what the switch's STATUS answers make of its QUERY
    frames. `timeout_error(op, i, now)` is the exception raised when request i of op passes the deadline;
    `release_frames(op, q)` builds the RELEASE frames of requests q; `identity` is (job id, key, worker id)."""

    def __init__(
        self,
        schedule: Schedule,
        timers: Timers,
        sender: Sender,
        counters,
        clock: Callable[[], float],
        *,
        dupthresh: int,
        early_retransmit: bool,
        straggler_timeout: float | None,
        timeout_error: Callable[[Operation, int, float], Exception],
        release_frames: Callable[[Operation, np.ndarray], np.ndarray],
        identity: tuple[int, int, int],
    ):
        self.schedule, self.timers, self.sender, self.counters, self.clock = schedule, timers, sender, counters, clock
        self.dupthresh, self.early_retransmit = dupthresh, early_retransmit
        self.straggler_timeout = straggler_timeout
        self._timeout_error, self._release_frames = timeout_error, release_frames
        self.job_id, self.key, self.worker_id = identity  # whose STATUS answers are ours

    def next_deadline(self) -> float | None:
        """When the earliest retransmission (or the deadline, or a RELEASE) is due; None if no request is
        waiting."""
        due = self.timers.next_due() if self.schedule.ops else None
        if self.straggler_timeout is not None:
            for op in self.schedule.ops:
                release = self._next_release(op)
                if release is not None and (due is None or release < due):
                    due = release
        return due

    def fire(self) -> bool:
        """Send again what the timers say is due now; raise at the deadline. Whether anything went."""
        timers, retransmit = self.timers, self.sender.retransmit
        if not self.schedule.ops:
            return False
        now = self.clock()
        flying = self.flying()
        if timers.deadline_at is not None and timers.deadline_at <= now:
            if not flying:
                timers.deadline_at = None
            else:
                op, i = min(((op, int(idx[np.argmin(op.first_sent[idx])])) for op, idx in flying),
                            key=lambda oi: oi[0].first_sent[oi[1]])  # fmt: skip
                if timers.check_deadline(now, float(op.first_sent[i])):
                    raise self._timeout_error(op, i, now)
        fired = False
        if timers.expired(now):
            # The request waiting longest goes again, as TCP sends its oldest segment on a timeout. Before
            # its operation's first result the silence may be a late worker; after it every worker is in
            # the operation, and a silence as long as the RTO says that what is in flight is lost (the
            # switch or the path cannot take that much) or only late (a switch that stalled): the next
            # results judge (window.judge); if lost, the window closes and the rest goes again. Then, as
            # TCP resends its first unacknowledged segment at every expiry, the lowest request in flight of
            # the operations answered so far goes, the same one through a long stall: the others stay sent
            # once, so that their results can show the stall for what it was.
            if flying:
                op, i = oldest(flying)
                if op.answered:
                    answered = [(o, idx) for o, idx in flying if o.answered]  # in request order
                    op, i = answered[0][0], int(answered[0][1][0])
                    self.schedule.timed_out([(o, idx[idx != i] if o is op else idx) for o, idx in answered], TIMER)
                retransmit(op, np.array([i], np.int64), now, TIMER)
            timers.restart(now)
            fired = True
        for resent_op, lost in timers.lost_resends(now):
            retransmit(resent_op, lost, now, TIMER)
            fired = True
        if self.straggler_timeout is not None:
            for op in list(self.schedule.ops):
                fired |= self._release_due(op, now)
        if timers.probe_due(now):
            timers.probed(now)
            flying = self.flying()
            if flying:
                # The oldest: its result, fast retransmission or the next probe find the rest. Once no
                # result still to come can show any of them lost, all: they are the last of the flow, and
                # go as the window lets them. More of them lost together than one fast retransmission
                # needs to see is a burst: a queue overflowed, and the window halves.
                op, i = oldest(flying)
                if loss.starved(self.schedule.ops):
                    if sum(len(idx) for _, idx in flying) > timers.tail:
                        self.schedule.cut()
                    self._presume_lost(flying, (op, i), PROBE)
                retransmit(op, np.array([i], np.int64), now, PROBE)
                fired = True
        self.sender.flush()
        return fired

    def lost_before(self, bound: int, now: float) -> None:
        """A result for a request first sent as transmission `bound` is in: send again at once what it shows
        lost (loss.py)."""
        lost = loss.lost_before(self.schedule.ops, bound, self.dupthresh, self.early_retransmit, self.sender.firsts)
        for op, idx in lost:
            self.sender.retransmit(op, idx, now, FAST)

    def on_statuses(self, statuses: wire.ResultBatch) -> None:
        """STATUS answers to QUERY frames (Sender.retransmit): a request whose contribution the cell holds
        while it waits for others' waits on, as if sent now; any other (the switch lacks the contribution,
        or the use is complete and its result, which the path would have delivered before the STATUS, was
        lost) is sent again at once, itself."""
        ours = (
            statuses.valid & (statuses.job_id == self.job_id) & (statuses.key == self.key)
            & (statuses.payload_len == 0)
        )  # fmt: skip
        self.counters.ignored_frames += len(ours) - int(np.count_nonzero(ours))
        now = self.clock()
        q = self.schedule.number(statuses.slot, statuses.round)
        for k in np.flatnonzero(ours).tolist():
            op = next((o for o in self.schedule.ops if o.q0 <= q[k] < o.q0 + o.n), None)
            if op is None:
                continue
            i = int(q[k]) - op.q0
            if op.done[i] or not op.attempts[i] or int(statuses.op[k]) != op.op:
                continue
            self.counters.statuses += 1
            self.timers.heard(now)
            if int(statuses.value[k]) >> self.worker_id & 1 and int(statuses.count[k]) > 0:
                self.sender.hold(op, i)
            else:
                self.sender.resend_full(op, np.array([i], np.int64), now)
        self.sender.flush()

    def flying(self) -> Flying:
        """Per operation in flight, its requests sent and unanswered."""
        out = []
        for op in self.schedule.ops:
            mask, lo = op.in_flight()
            if mask.any():
                out.append((op, np.flatnonzero(mask) + lo))
        return out

    def _presume_lost(self, flying: Flying, but: tuple[Operation, int], why: str) -> None:
        """Every request of `flying` but `but` (sent again at once) is lost: it goes as the window lets it."""
        for op, idx in flying:
            if op is but[0]:
                idx = idx[idx != but[1]]
            self.schedule.presume_lost(op, idx[np.argsort(op.seq[idx], kind="stable")], why)

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
        self.sender.control(self._release_frames(op, op.q0 + due))
        op.release_at[due] = now + self.straggler_timeout
        self.counters.releases += len(due)
        return True


def oldest(flying: Flying) -> tuple[Operation, int]:
    """Of the requests in flight, the one whose latest transmission is the oldest."""
    return min(((op, int(idx[np.argmin(op.seq[idx])])) for op, idx in flying), key=lambda oi: oi[0].seq[oi[1]])
