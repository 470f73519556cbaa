"""The congestion window (issue 31 item 2): requests in flight follow the switch, within the schedule. On
the timed loopback wire and the virtual clock: assertions are on counters, window sizes and virtual times."""

import math

import numpy as np
import pytest

from contract.job import JobSpec
from host_agent import wire
from host_agent.operation import Operation
from host_agent.protocol import drive
from host_agent.window import Schedule
from tests.host_agent.test_protocol import F, K, event_counts
from tests.host_agent.test_retransmission import exact_sum, timed_cluster

WINDOW = 16


class Overflowing:
    """Wraps an engine: while `armed`, the first transmission of every request for the second half of the
    slots is lost, as when a queue in front of the switch overflows in the middle of every window; copies
    get through."""

    def __init__(self, engine):
        self.engine, self.armed = engine, False
        self.seen = set()

    def process(self, port, frame):
        p = wire.parse_frame(frame)
        if p is not None and p.kind == wire.KIND_REQUEST and p.slot >= WINDOW // 2:
            key = (p.worker_id, p.slot, p.round)
            if key not in self.seen:
                self.seen.add(key)
                if self.armed:
                    return []
        return self.engine.process(port, frame)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def stalling_cluster(new_engine):
    """4 workers, window 16, on a switch that (once `stalling.armed`) loses the second half of every
    window's first transmissions (a queue that overflowed)."""
    overflowing = []

    def engine(job):
        overflowing.append(Overflowing(new_engine(job)))
        return overflowing[0]

    workers, engine, recorder, lw, clock = timed_cluster(engine, window=WINDOW)
    return workers, engine, overflowing[0], clock


def limits(workers) -> list[float]:
    return [w.stats()["window_limit"] for w in workers]


def test_the_window_shrinks_while_the_switch_overflows_and_grows_back_when_it_is_fast(new_engine):
    """A fast switch: the window stays the job's. A switch whose queue overflows in the middle of every window
    (half a window's requests lost, after results were flowing): every overflow times out, the resent lowest
    request is answered and the rest is not (a loss, not a stall: window.judge), and the window halves; with
    each window's results growing it again, it is below 40 % of the job's after four overflows. Fast again:
    it grows back to the job's window within 12 operations (additive increase: one request per window of
    results). Sums exact throughout, and the switch never saw a round out of the schedule (no FAR_ROUND,
    STALE_ROUND or OP_MISMATCH)."""
    rng = np.random.default_rng(0)
    workers, engine, stalling, _ = stalling_cluster(new_engine)
    for _ in range(3):
        exact_sum(workers, rng, K * WINDOW)
    assert limits(workers) == [WINDOW] * 4
    stalling.armed = True
    for _ in range(4):
        exact_sum(workers, rng, K * WINDOW)
    assert all(limit <= 0.4 * WINDOW for limit in limits(workers))
    assert all(w.stats()["window_cuts"] >= 4 for w in workers)
    stalling.armed = False
    ops = 0
    while min(limits(workers)) < WINDOW:
        exact_sum(workers, rng, K * WINDOW)
        ops += 1
        assert ops <= 12, limits(workers)
    events = event_counts(stalling.engine)
    assert not any(events[e] for e in ("DROP_FAR_ROUND", "DROP_STALE_ROUND", "DROP_OP_MISMATCH"))


def test_a_small_window_holds_requests_back_within_the_schedule(new_engine):
    """After the cuts, an operation sends only as many requests as the window holds; each result lets
    one more go, so what is in flight never exceeds it, and the slots still follow q mod W."""
    rng = np.random.default_rng(1)
    workers, engine, stalling, _ = stalling_cluster(new_engine)
    stalling.armed = True
    for _ in range(4):
        exact_sum(workers, rng, K * WINDOW)
    stalling.armed = False
    w = workers[0]
    limit = int(w.stats()["window_limit"])
    assert 1 <= limit < WINDOW
    sent = w.stats()["requests"]
    op = w.start_sum_indices([rng.integers(0, 16, K * WINDOW, dtype=np.uint8)])
    w.pump()
    assert w.stats()["requests"] - sent == limit
    assert op.first_transmissions == limit and op.in_flight_count == limit


def test_the_default_window_holds_a_fix32_step_of_the_default_model():
    """A FIX32 step of `make run`'s model (cnn-digits, one DDP bucket, one chunk per MiB) fits the default
    description's window: its requests all go at once, and a loss holds back no refill of the window."""
    from host_agent import workloads

    spec = JobSpec(job_id=1, workers=4)
    model = workloads.get("cnn-digits").build(0)
    params = sum(p.numel() for p in model.parameters())
    assert math.ceil(params / spec.fix32_per_request) <= spec.window


def _send(groups) -> None:
    """What Schedule.take() let go is sent, as Sender.transmit records it."""
    for op, idx, _ in groups:
        op.in_flight_count += int(np.count_nonzero(op.attempts[idx] == 0))
        op.attempts[idx] += 1
        op.sent_hi = max(op.sent_hi, int(idx.max()) + 1)


def _answer(window, op, idx) -> None:
    op.done[idx] = True
    op.in_flight_count -= len(idx)
    op.answered += len(idx)
    window.answered(op, idx)


def _overlapped_timeout():
    """W = 4: a bucket's sums (requests 0-3, 0 and 1 answered) and the next bucket's norm round (requests
    4-5, the slots 0 and 1 freed) in flight together when the timer expires: the protocol resends the
    lowest, sums' 2, and the window records the rest of both operations."""
    window = Schedule(4)
    sums = Operation(wire.OP_THC, 0, 4, np.zeros((4, 62 + K // 2), np.uint8), [4 * K], K, 8, 0.0)
    norm = Operation(wire.OP_NORM, 4, 2, np.zeros((2, 62), np.uint8), [2], 1, 8, 0.0)
    window.open(sums)
    _send(window.take())
    _answer(window, sums, np.array([0, 1]))
    window.open(norm)
    _send(window.take())
    assert norm.attempts.tolist() == [1, 1]
    window.timed_out([(sums, np.array([3])), (norm, np.array([0, 1]))], "timer")
    sums.attempts[2] += 1
    return window, sums, norm


def test_a_timeout_is_judged_by_the_results_of_every_operation_in_flight():
    """F-RTO with the norm round overlapping the previous bucket's sums: a first result of the later
    operation shows the stall spurious (no cut, nothing resent); the earlier one's completion leaves the
    verdict to the later one's results; when only the resent request is answered and the silence comes back,
    both operations' requests are presumed lost and go again, lowest first, as the halved window lets them."""
    window, sums, norm = _overlapped_timeout()
    window.judge([(norm, np.array([1]))])
    assert not window.judging and window.undone == 1 and window.cuts == 0 and window.take() == []

    window, sums, norm = _overlapped_timeout()
    window.close(sums)
    assert window.judging
    window.judge([(norm, np.array([0]))])
    assert window.undone == 1 and window.cuts == 0

    window, sums, norm = _overlapped_timeout()
    window.judge([(sums, np.array([], np.int64))])  # the resent request's result: it judges nothing
    _answer(window, sums, np.array([2]))
    assert window.judging and window.undone == 0
    window.timed_out([(sums, np.array([3])), (norm, np.array([0, 1]))], "timer")
    assert window.cuts == 1 and window.limit == 2
    assert [(op, idx.tolist(), why) for op, idx, why in window.take()] == [(sums, [3], "timer"), (norm, [0], "timer")]


def test_the_pace_of_results_bounds_what_is_in_flight_to_a_round_trip_of_the_empty_path(new_engine):
    """FIX32 through 9 Mbit/s links with 5 ms of delay each way: after one operation the window holds about
    PACE_HEADROOM × the requests a round trip of the empty path holds at the pace results came (~1,040 a
    second × ~12 ms), not the job's 64, so the queue in front of the link stays short; the link stays as
    busy (the next operation takes no longer), and what is in flight never exceeds the paced window."""
    from host_agent.window import MIN_PACED, PACE_HEADROOM

    rng = np.random.default_rng(8)
    workers, _, _, lw, clock = timed_cluster(new_engine, window=64, delay=0.005)
    lw.rate_up = lw.rate_down = 9e6
    frame_time = (wire.PAYLOAD_OFFSET + 4 * F) * 8 / 9e6
    values = [[rng.integers(-1000, 1000, size=F * 60, dtype=np.int64).astype(np.int32)] for _ in range(4)]
    sender, in_flight = workers[0].sender, []
    flush = sender.flush

    def watched_flush():  # what worker 0 has in flight each time it sends
        flush()
        in_flight.append(sum(op.in_flight_count for op in workers[0].in_flight))

    sender.flush = watched_flush
    durations = []
    for _ in range(2):
        in_flight.clear()
        start = clock()
        [w.start_sum_fix32(v) for w, v in zip(workers, values)]
        drive(workers)
        durations.append(clock() - start)
    paced = workers[0].stats()["window_paced"]
    empty_path = 2 * 0.005 + 2 * frame_time
    assert MIN_PACED <= paced == pytest.approx(PACE_HEADROOM * empty_path / frame_time, rel=0.25)
    assert paced < 64 and max(in_flight) <= paced
    assert durations[1] <= durations[0] * 1.02
