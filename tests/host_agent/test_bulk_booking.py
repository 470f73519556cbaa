"""Booking a native wait's batches in one pass (booking.book_in_order) against booking them batch after
batch as pumps would (protocol._book_batches): on twin workers fed the same batches of in-order results, at
the same arrival times, every counter, timer, estimate, window and per-request field ends bit-identical,
and the requests the window lets go next are the same frames in the same order. Batch splits, arrival
times, holds (before the wait, and the native wait's own between batches), earlier results, windows
smaller than the operation and a cut congestion window are drawn from a seed taken from the test's name."""

import hashlib

import numpy as np
import pytest

from contract.job import JobSpec
from harness.sim import SERVICE, SimJob, worker_endpoint
from host_agent import booking, wire
from host_agent.protocol import WorkerProtocol


def seed_of(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


class Sink:
    """A transport that keeps what is sent and never receives."""

    def __init__(self):
        self.sent: list[bytes] = []

    def send(self, frame):
        self.sent.append(bytes(frame))

    def recv(self, timeout):
        return []

    def describe(self):
        return "sink"


def twin(window: int) -> WorkerProtocol:
    job = SimJob.plan(JobSpec(job_id=4, workers=2, window=window, slots=window))
    return WorkerProtocol(
        Sink(), wire.FrameBuilder(worker_endpoint(0), SERVICE), job.spec, 0, clock=lambda: 50.0, timeout=0.02
    )


def snapshot(worker: WorkerProtocol, op) -> dict:
    t, s = worker.timers, worker.schedule
    free = [(o.q0, int(q)) for o, idx in s._free for q in idx.tolist()]
    return dict(
        arrays=[a.tobytes() for a in (op.done, op.answered_at, op.first_sent, op.attempts, op.seq)],
        op=(op.answered, op.outstanding, op.first_result, op.last_result, op.min_rtt, op.in_flight_count,
            op.finished, op.low),
        flags=(worker._batch, worker._held),
        counters=worker.counters.as_dict(),
        rtt=(t.rtt.mean, t.rtt.var, t.rtt.timeout), gap=(t.gap.mean, t.gap.var, t.gap.timeout),
        timers=(t.retransmit_at, t.probe_at, t.deadline_at, t.newest_answered, t.backoffs, t._probe_backoff),
        window=(s.limit, s.ssthresh, s.paced, [o.q0 for o in s.ops], sorted(free)),
        sent=list(worker.transport.sent),
    )  # fmt: skip


def batches_of(rng, lo: int, hi: int, t0: float):
    """In-order results lo .. hi − 1 split into random batches (some empty), at increasing times."""
    ends, times, at, end = [], [], t0, lo
    while end < hi or not ends:
        end = min(hi, end + int(rng.choice([0, 1, 1, 2, 3, 5, 9, 12])))
        at += float(rng.choice([0.0, rng.uniform(1e-6, 2e-3)]))
        ends.append(end - lo)
        times.append(at)
    return np.arange(lo, hi, dtype=np.int64), ends, times


@pytest.mark.parametrize("case", range(12))
def test_one_pass_booking_equals_batch_after_batch(request, case):
    rng = np.random.default_rng(seed_of(request.node.name))
    window = int(rng.choice([8, 16, 128]))
    n_requests = int(rng.integers(1, 40))
    chunks = [rng.integers(0, 16, n_requests * 1024 - int(rng.integers(0, 1000)), dtype=np.uint8)]
    workers = [twin(window), twin(window)]
    cut = rng.random() < 0.4
    ops = []
    for w in workers:
        if cut:  # a cut congestion window grows by additive increase
            w.schedule.limit = w.schedule.ssthresh = window / 2 + 0.37
        ops.append(w.start_sum_indices(chunks))
        w.sender.send_ready()
    op0 = ops[0]
    assert snapshot(workers[0], op0) == snapshot(workers[1], ops[1])
    at = 10.0
    booked = 0
    while booked < op0.n:
        sent_hi = op0.sent_hi
        hi = booked + int(rng.integers(0, sent_hi - booked + 1))
        acc, ends, times = batches_of(rng, booked, hi, at)
        held = rng.random() < 0.3
        for w in workers:
            w._held, w._batch = held, not held
        # batches the native wait took in after one of its own holds (fastio.c): never the first
        after = [0] + [int(rng.random() < 0.4) for _ in ends[1:]] if rng.random() < 0.5 else None
        workers[0]._book_batches(op0, acc, ends, times, 0, after)
        booking.book_in_order(workers[1], ops[1], acc.copy(), list(ends), list(times), after)
        assert snapshot(workers[0], op0) == snapshot(workers[1], ops[1])
        for w in workers:
            w.sender.send_ready()
        assert snapshot(workers[0], op0) == snapshot(workers[1], ops[1])
        booked, at = hi, times[-1] + 1e-4
    assert op0.complete and ops[1].complete
    assert workers[1].counters.results == op0.n


def test_a_batch_taken_in_after_a_native_hold_is_no_sample_of_the_spacing():
    workers = [twin(16), twin(16)]
    ops = [w.start_sum_indices([np.zeros(6 * 1024, np.uint8)]) for w in workers]
    for w in workers:
        w.sender.send_ready()
    acc, ends, times = np.arange(6, dtype=np.int64), [2, 4, 6], [10.0, 10.001, 10.003]
    booking.book_in_order(workers[0], ops[0], acc.copy(), ends, times, None)
    booking.book_in_order(workers[1], ops[1], acc.copy(), ends, times, [0, 1, 1])
    plain, held = snapshot(workers[0], ops[0]), snapshot(workers[1], ops[1])
    assert plain["gap"] != held["gap"]  # three samples against the first batch's one
    assert {k: v for k, v in plain.items() if k != "gap"} == {k: v for k, v in held.items() if k != "gap"}
