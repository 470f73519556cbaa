"""The congestion window (issue 31 item 2): requests in flight follow the switch, within the schedule. On
the timed loopback wire and the virtual clock: assertions are on counters, window sizes and virtual times."""

import math

import numpy as np

from host_agent import wire
from spec.job import JobSpec
from tests.host_agent.test_protocol import K, event_counts
from tests.host_agent.test_retransmission import timed_cluster
from tests.host_agent.test_timers import exact_sum

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
        exact_sum(workers, rng)
    assert limits(workers) == [WINDOW] * 4
    stalling.armed = True
    for _ in range(4):
        exact_sum(workers, rng)
    assert all(limit <= 0.4 * WINDOW for limit in limits(workers))
    assert all(w.stats()["window_cuts"] >= 4 for w in workers)
    stalling.armed = False
    ops = 0
    while min(limits(workers)) < WINDOW:
        exact_sum(workers, rng)
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
        exact_sum(workers, rng)
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
