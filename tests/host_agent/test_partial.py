"""Partial aggregation through the worker protocol (p4/README.md, "Partial aggregation"), against the fake
switch and the compiled program: workers whose requests waited past the straggler timeout release their
slots, the switch returns the sums of the workers that made it with their count, and a straggler that
comes later gets the same stored results without being added. A virtual clock makes it instant."""

import numpy as np
import pytest
import torch

from harness.fake_switch import FakeSwitch
from harness.sim import SimJob
from host_agent import wire
from host_agent.layers import THCResult8
from host_agent.protocol import ProtocolError, drive
from tests.host_agent.test_protocol import (
    K,
    _crafted_result,
    cluster,
    event_counts,
    expected_sums,
    random_indices,
)


class _CountingTransport:
    """A worker's transport that adds the bytes of every frame it sends to totals[key]."""

    def __init__(self, inner, totals: dict, key: int):
        self.inner, self.totals, self.key = inner, totals, key
        totals[key] = 0

    def send(self, frame: bytes) -> None:
        self.totals[self.key] += len(frame)
        self.inner.send(frame)

    def __getattr__(self, name):  # recv, describe, next_event: the wrapped transport's
        if name == "send_many":  # one frame at a time, so that every frame is counted
            raise AttributeError(name)
        return getattr(self.inner, name)


@pytest.mark.parametrize("n_requests", [4, 12], ids=["one-round", "three-rounds"])
def test_released_slots_carry_the_sums_so_far_and_a_late_worker_gets_them_unadded(new_engine, n_requests):
    workers, engine, _, _, _ = cluster(new_engine, n=3, window=4, straggler_timeout=0.05)
    rng = np.random.default_rng(40)
    idx = random_indices(rng, 3, [K * n_requests])
    fast = workers[:2]
    wire_bytes = {}
    for w in fast:  # what goes on the wire, frame by frame, beside the worker's own count
        w.transport = _CountingTransport(w.transport, wire_bytes, w.worker_id)
    ops = [w.start_sum_indices(idx[w.worker_id]) for w in fast]
    drive(fast)  # worker 2 has not started: only the RELEASEs can finish the rounds
    assert all(w.stats()["bytes_sent"] == wire_bytes[w.worker_id] for w in fast)  # RELEASEs with their padding
    expected = expected_sums(idx[:2])
    for op in ops:
        sums, count = op.result()
        assert count == 2
        np.testing.assert_array_equal(sums[0], expected[0])
    assert all(w.stats()["partial_results"] == n_requests for w in fast)
    assert sum(w.stats()["releases"] for w in fast) >= n_requests
    late = workers[2].start_sum_indices(idx[2])
    drive([workers[2]])
    sums, count = late.result()  # the stored results: the straggler's indices were never added
    assert count == 2
    np.testing.assert_array_equal(sums[0], expected[0])
    events = event_counts(engine)
    assert events["RELEASED"] == n_requests  # each use released once; a second RELEASE is ignored
    # the straggler's requests whose released result it already had are never sent; the others are LATE
    stats = workers[2].stats()
    assert stats["early_results"] >= min(4, n_requests) and stats["requests"] == n_requests - stats["early_results"]
    assert events["LATE"] == stats["requests"] and stats["stale_results"] == 0
    assert events["CONSUMED"] == 2 * n_requests and events["COMPLETED"] == 0
    assert events["RELEASE_IGNORED"] == sum(w.stats()["releases"] for w in fast) - n_requests


def test_a_worker_inside_the_deadline_completes_the_round_normally(new_engine):
    workers, engine, _, _, clock = cluster(new_engine, n=3, window=4, straggler_timeout=10.0)
    rng = np.random.default_rng(41)
    idx = random_indices(rng, 3, [K * 4])
    ops = [w.start_sum_indices(idx[w.worker_id]) for w in workers]
    drive(workers)
    assert all(op.result()[1] == 3 for op in ops) and clock() < 10.0
    assert all(w.stats()["releases"] == 0 for w in workers)
    assert "RELEASED" not in event_counts(engine)


def test_the_norm_round_can_be_released_too(new_engine):
    workers, engine, _, _, _ = cluster(new_engine, n=3, window=4, straggler_timeout=0.02)
    ops = [w.start_max([float(w.worker_id + 1), 0.5] * 10) for w in workers[:2]]  # two NORM requests
    drive(workers[:2])
    assert all(op.result().tolist() == [2.0, 0.5] * 10 for op in ops)
    workers[2].transport.recv(0.0)  # the straggler lost the multicast results: it must ask
    late = workers[2].start_max([9.0] * 20)  # too late: its norms are not in the maximum
    drive([workers[2]])
    assert late.result().tolist() == [2.0, 0.5] * 10
    events = event_counts(engine)
    assert (events["RELEASED"], events["LATE"], workers[2].stats()["early_results"]) == (2, 2, 0)


def test_results_with_different_counts_are_reported_per_coordinate(new_engine):
    """One slot released with 1 of 2 workers, the other complete: both are kept, and the operation reports
    the count of every coordinate. Without partial aggregation the same results are refused."""
    workers, _, _, _, _ = cluster(new_engine, n=2, window=4, straggler_timeout=1.0)
    a = workers[0]
    op = a.start_sum_indices([np.full(K * 2, 4, np.uint8)])  # requests 0, 1: slots 0, 1 of round 0
    a.pump()
    a.transport.deliver(_crafted_result(wire.OP_THC, 0, 0, 2, 8, THCResult8(sums=[8] * K)))
    a.transport.deliver(_crafted_result(wire.OP_THC, 1, 0, 1, 8, THCResult8(sums=[4] * K)))
    a.pump()
    sums, counts = op.result()
    np.testing.assert_array_equal(sums[0], [8] * K + [4] * K)
    assert isinstance(counts, list) and counts[0].tolist() == [2] * K + [1] * K
    assert a.stats()["partial_results"] == 1

    strict, _, _, _, _ = cluster(new_engine, n=2, window=4)
    b = strict[0]
    op = b.start_sum_indices([np.full(K * 2, 4, np.uint8)])
    b.pump()
    b.transport.deliver(_crafted_result(wire.OP_THC, 0, 0, 2, 8, THCResult8(sums=[8] * K)))
    b.transport.deliver(_crafted_result(wire.OP_THC, 1, 0, 1, 8, THCResult8(sums=[4] * K)))
    b.pump()
    assert b.stats()["rejected_results"] == 1 and not op.complete


def test_a_straggler_timeout_must_be_positive(new_engine):
    with pytest.raises(ValueError, match="straggler_timeout"):
        cluster(new_engine, n=2, window=4, straggler_timeout=0.0)


def test_contributors_refuses_mixed_counts_without_partial_aggregation():
    from host_agent.protocol import Operation

    op = Operation(wire.OP_THC, 0, 2, np.zeros((2, 62 + K // 2), np.uint8), [2 * K], K, 8, 0.0)
    op.counts[:] = [2, 1]
    op.done[:] = True
    op.outstanding = 0
    with pytest.raises(ProtocolError, match="different contributor counts"):
        op.result()


@pytest.mark.parametrize("where", ["fake", "compiled"])
@pytest.mark.parametrize("mode", ["thc", "fix32"])
def test_training_with_a_straggler_keeps_every_rank_identical(mode, where):
    """Four DDP workers through the fake switch, and through the compiled program (p4/build/thc.json on
    the native engine), with partial aggregation on, one of them sleeping 30 ms per step: the others
    release its slots, it takes the released results (mostly before it would send), and every rank, the
    straggler included, ends with the same parameters, having trained. FIX32 too: its released max round
    may lack a worker's max |x| (clipped, not refused) and its sums are averaged over per-coordinate
    counts."""
    from harness.ddp_cluster import jobs_aggregators, thc_spec, train_ddp
    from harness.sim import program_engine
    from harness.switches import SoftwareTarget
    from tests.support.native import build_or_skip
    from thc.config import THCConfig

    config = THCConfig()
    job = SimJob.plan(thc_spec(config, 3, 4, window=64, slots=64))
    if where == "fake":
        switch = FakeSwitch()
        switch.add_job(job)
        engine, events = switch, switch.event_counts
    else:
        target = build_or_skip(SoftwareTarget, backend="native")
        program_engine(target.sw, job)
        engine, events = target.sw, target.events
    aggregators = jobs_aggregators(engine, [job], straggler_timeout=0.005)[job.job_id]
    out = train_ddp("mlp-digits", mode, 12, n=4, config=config, aggregators=aggregators, step_delays={3: 0.03})
    for rank in range(1, 4):
        assert torch.equal(out[rank]["params"], out[0]["params"]), rank
    assert out[0]["after"] < out[0]["before"]
    assert events()["RELEASED"] > 0
    assert sum(a.stats()["partial_results"] for a in aggregators[:3]) > 0
