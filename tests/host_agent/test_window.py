"""The congestion window (issue 31 item 2): requests in flight follow the switch, within the schedule. On
the timed loopback wire and the virtual clock: assertions are on counters, window sizes and virtual times."""

import math

import numpy as np

from spec.job import JobSpec
from tests.host_agent.test_protocol import K, event_counts
from tests.host_agent.test_retransmission import timed_cluster
from tests.host_agent.test_timers import Pausing, exact_sum

WINDOW = 16
STALL = 0.05  # s: far longer than the RTO on this wire (round trips of ~1.5 ms)


def stalling_cluster(new_engine):
    """4 workers, window 16, on a switch that (once `stalling.pause` is set) stops for that long in the
    middle of every window, after half the window's results have gone out."""
    pausing = []

    def engine(job):
        pausing.append(Pausing(new_engine(job), WINDOW // 2, 0.0))
        return pausing[0]

    workers, engine, recorder, lw, clock = timed_cluster(engine, window=WINDOW)
    pausing[0].wire = lw
    return workers, engine, pausing[0], clock


def limits(workers) -> list[float]:
    return [w.stats()["window_limit"] for w in workers]


def test_the_window_shrinks_while_the_switch_stalls_and_grows_back_when_it_is_fast(new_engine):
    """A fast switch: the window stays the job's. A switch that stops for 50 ms in the middle of every window
    (longer than the RTO, after results were flowing): every stall times out and halves the window, which
    is down to a quarter of the job's after four stalls. Fast again: it grows back to the job's window within
    12 operations (additive increase: one request per window of results). Sums exact throughout, and the
    switch never saw a round out of the schedule (no FAR_ROUND, STALE_ROUND or OP_MISMATCH)."""
    rng = np.random.default_rng(0)
    workers, engine, stalling, _ = stalling_cluster(new_engine)
    for _ in range(3):
        exact_sum(workers, rng)
    assert limits(workers) == [WINDOW] * 4
    stalling.pause = STALL
    for _ in range(4):
        exact_sum(workers, rng)
    assert all(limit <= WINDOW / 4 for limit in limits(workers))
    assert all(w.stats()["window_cuts"] >= 4 for w in workers)
    stalling.pause = 0.0
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
    stalling.pause = STALL
    for _ in range(4):
        exact_sum(workers, rng)
    stalling.pause = 0.0
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
