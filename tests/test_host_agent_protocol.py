"""The worker protocol against a contract-following fake switch over the in-process loopback wire.

A virtual clock makes timeouts and retransmissions deterministic and instant."""

import threading
import time

import numpy as np
import pytest

from host_agent import wire
from host_agent.fake_switch import SERVICE, FakeJob, FakeSwitch, worker_endpoint
from host_agent.loopback import LoopbackWire, VirtualClock
from host_agent.protocol import AggregationTimeout, WorkerProtocol, drive

TABLE = [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30]
JOB = 7


def make_workers(n=4, window=8, loss_up=0.0, loss_down=0.0, seed=1, lane_bits=16, n_slots=None,
                 switch=None, clock=None, **timers):
    clock = VirtualClock() if clock is None else clock
    switch = switch or FakeSwitch()
    switch.add_job(JOB, FakeJob(n_workers=n, n_slots=n_slots or window, table=TABLE, lane_bits=lane_bits,
                                ports={w: 10 + w for w in range(n)}))
    lw = LoopbackWire(switch, loss_up=loss_up, loss_down=loss_down, seed=seed, clock=clock)
    workers = [WorkerProtocol(lw.attach(10 + w), wire.FrameBuilder(worker_endpoint(w), SERVICE), JOB, w, window,
                              clock=clock, **timers) for w in range(n)]
    return workers, switch, lw, clock


def run_all(workers, starts):
    ops = [start(w) for w, start in zip(workers, starts)]
    drive(workers)
    return [op.result() for op in ops]


def random_indices(rng, n, lengths):
    return [[rng.integers(0, 16, size=length, dtype=np.uint8) for length in lengths] for _ in range(n)]


def expected_sums(per_worker, table=TABLE):
    t = np.asarray(table)
    return [sum(t[worker[c]] for worker in per_worker) for c in range(len(per_worker[0]))]


def test_thc_sums_exact_for_uneven_chunks():
    rng = np.random.default_rng(0)
    workers, switch, _, _ = make_workers()
    data = random_indices(rng, 4, [1000, 64, 1, 0, 130])
    results = run_all(workers, [lambda w, d=d: w.start_sum_indices(d) for d in data])
    for sums, count in results:
        assert count == 4
        assert [s.shape for s in sums] == [(1000,), (64,), (1,), (0,), (130,)]
        for got, want in zip(sums, expected_sums(data)):
            np.testing.assert_array_equal(got, want)
    assert switch.events.count("COMPLETED") == 16 + 1 + 1 + 0 + 3
    assert all(w.stats()["retransmissions"] == 0 for w in workers)


def test_eight_bit_lanes():
    rng = np.random.default_rng(1)
    workers, _, _, _ = make_workers(n=3, lane_bits=8)
    data = random_indices(rng, 3, [200])
    (sums, count), *_ = run_all(workers, [lambda w, d=d: w.start_sum_indices(d) for d in data])
    np.testing.assert_array_equal(sums[0], expected_sums(data)[0])
    assert count == 3


def test_schedule_slot_is_q_mod_window_round_is_q_div_window_across_operations():
    workers, switch, _, _ = make_workers(n=2, window=4)
    run_all(workers, [lambda w: w.start_max([1.0] * 6)] * 2)
    run_all(workers, [lambda w: w.start_sum_indices([np.zeros(64 * 5, np.uint8)])] * 2)
    mine = [(slot, rnd, op) for worker, slot, rnd, op in switch.arrivals if worker == 0]
    want = [(q % 4, q // 4, wire.OP_NORM) for q in range(6)] + [(q % 4, q // 4, wire.OP_THC) for q in range(6, 11)]
    assert mine == want
    assert workers[0].next_request == 11


def test_norm_max_over_workers():
    rng = np.random.default_rng(2)
    norms = rng.uniform(0, 100, size=(4, 10)).astype(np.float32)
    norms[2, 3] = 0.0
    norms[:, 4] = [0.0, -0.0, 0.0, 0.0]
    norms[1, 5] = np.inf
    workers, _, _, _ = make_workers()
    results = run_all(workers, [lambda w, v=v: w.start_max(v) for v in norms])
    for got in results:
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, norms.max(axis=0))
        assert not np.signbit(got[4])


def test_negative_norm_refused():
    workers, _, _, _ = make_workers(n=1)
    with pytest.raises(ValueError, match="non-negative"):
        workers[0].start_max([1.0, -2.0])


def test_indices_must_be_four_bits():
    workers, _, _, _ = make_workers(n=1)
    with pytest.raises(ValueError, match="0..15"):
        workers[0].start_sum_indices([np.array([1, 16], np.uint8)])


def test_fix32_sums_wrap_like_int32():
    rng = np.random.default_rng(3)
    data = [[rng.integers(-2**31, 2**31, size=100, dtype=np.int64).astype(np.int32)] for _ in range(4)]
    data[0][0][0] = 2**31 - 1
    data[1][0][0] = 1
    workers, _, _, _ = make_workers()
    results = run_all(workers, [lambda w, d=d: w.start_sum_fix32(d) for d in data])
    want = sum(d[0].astype(np.int64) for d in data)
    want = ((want + 2**31) % 2**32 - 2**31).astype(np.int32)
    for sums, count in results:
        assert count == 4 and sums[0].dtype == np.int32
        np.testing.assert_array_equal(sums[0], want)


def test_exact_under_loss_both_ways_and_retransmissions_counted():
    rng = np.random.default_rng(4)
    workers, switch, lw, _ = make_workers(loss_up=0.05, loss_down=0.05, seed=42)
    data = random_indices(rng, 4, [64 * 50 + 7])
    results = run_all(workers, [lambda w, d=d: w.start_sum_indices(d) for d in data])
    for sums, count in results:
        np.testing.assert_array_equal(sums[0], expected_sums(data)[0])
        assert count == 4
    assert lw.dropped_up > 0 and lw.dropped_down > 0
    assert sum(w.stats()["retransmissions"] for w in workers) > 0
    assert "RETX_ANSWERED" in switch.events  # a lost multicast copy was recovered from the stored result
    # a retransmission never counts twice: every slot use completed exactly once
    assert switch.events.count("COMPLETED") == 51
    norms = rng.uniform(0, 1, size=(4, 40)).astype(np.float32)
    for got in run_all(workers, [lambda w, v=v: w.start_max(v) for v in norms]):
        np.testing.assert_array_equal(got, norms.max(axis=0))


def test_same_seed_same_run():
    def one_run():
        rng = np.random.default_rng(5)
        workers, switch, _, clock = make_workers(loss_up=0.1, loss_down=0.1, seed=9)
        data = random_indices(rng, 4, [640])
        run_all(workers, [lambda w, d=d: w.start_sum_indices(d) for d in data])
        return switch.events, clock(), [w.stats()["retransmissions"] for w in workers]
    assert one_run() == one_run()


def test_duplicate_and_stale_results_are_ignored():
    workers, switch, _, _ = make_workers(n=2, window=2)
    a, b = workers
    op_a = a.start_sum_indices([np.full(128, 3, np.uint8)])
    op_b = b.start_sum_indices([np.full(128, 5, np.uint8)])
    drive(workers)
    builder = wire.FrameBuilder(SERVICE, worker_endpoint(0))
    garbage = np.full(64, 999, ">u2").tobytes()
    # the same (slot, round) again, a round never requested, another job, another worker's copy
    for frame in (builder.frame(wire.OP_THC, wire.KIND_RESULT, JOB, 0, 0, 0, payload=garbage, count=2, lane_bits=16),
                  builder.frame(wire.OP_THC, wire.KIND_RESULT, JOB, 0, 1, 77, payload=garbage, count=2, lane_bits=16),
                  builder.frame(wire.OP_THC, wire.KIND_RESULT, JOB + 1, 0, 0, 1, payload=garbage, count=2, lane_bits=16),
                  builder.frame(wire.OP_THC, wire.KIND_RESULT, JOB, 1, 0, 1, payload=garbage, count=2, lane_bits=16)):
        a.transport.deliver(frame)
    op_a2 = a.start_sum_indices([np.full(64, 1, np.uint8)])
    b.start_sum_indices([np.full(64, 1, np.uint8)])
    drive(workers)
    assert op_a.result()[0][0].tolist() == [TABLE[3] + TABLE[5]] * 128
    assert op_a2.result()[0][0].tolist() == [2 * TABLE[1]] * 64
    stats = a.stats()
    assert stats["duplicate_results"] == 1
    assert stats["stale_results"] == 1
    assert stats["ignored_frames"] == 2


def test_retransmission_backoff_then_clear_timeout():
    clock = VirtualClock()
    switch = FakeSwitch()
    # worker 1 of the job never sends: worker 0's request can never complete
    workers, _, _, _ = make_workers(n=2, window=4, switch=switch, clock=clock, timeout=0.1, backoff=2.0,
                                    max_timeout=0.5, deadline=3.0)
    w0 = workers[0]
    with pytest.raises(AggregationTimeout) as info:
        w0.all_max([1.0])
    message = str(info.value)
    for fragment in ("job 7", "worker 0", "slot 0", "round 0", str(SERVICE.ip), "thc-ctl", "STALE_ROUND"):
        assert fragment in message
    sends = w0.stats()
    assert sends["requests"] == 1
    # sent at 0, retransmitted at 0.1, 0.3, 0.7, 1.2, 1.7, 2.2, 2.7 (waits 0.1, 0.2, 0.4, then capped 0.5)
    assert sends["retransmissions"] == 7
    assert switch.events == ["CONSUMED"] + ["DUPLICATE"] * 7
    assert clock() == pytest.approx(3.0)


def test_window_limits_requests_in_flight():
    workers, switch, lw, clock = make_workers(n=2, window=3)
    a, b = workers
    a.start_max([1.0] * 10)
    a.pump()
    assert [s for w, s, r, op in switch.arrivals] == [0, 1, 2]  # only W requests before any result
    b.start_max([2.0] * 10)
    b.pump()
    a.pump()
    assert len([1 for w, *_ in switch.arrivals if w == 0]) == 6


def test_blocking_workers_in_threads_with_the_real_clock():
    rng = np.random.default_rng(6)
    switch = FakeSwitch()
    workers, _, _, _ = make_workers(n=3, window=4, switch=switch, clock=time.monotonic, loss_up=0.05, seed=3,
                                    timeout=0.005, max_timeout=0.02, deadline=20.0)
    data = random_indices(rng, 3, [64 * 12])
    results = [None] * 3

    def run(w):
        results[w] = workers[w].all_sum_indices(data[w])

    threads = [threading.Thread(target=run, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for sums, count in results:
        np.testing.assert_array_equal(sums[0], expected_sums(data)[0])
        assert count == 3
