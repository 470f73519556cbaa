"""Probe rounds (thc-worker --probe) and what they record of their time; the protocol's per-operation
timings they read (WorkerProtocol.last_operation, Operation.first_result / answered_at). No timed
assertions: only that the records are there, ordered and consistent."""

import json
import threading

import numpy as np
import pytest

from contract.job import JobSpec
from harness.ddp_cluster import aggregators_on
from harness.fake_switch import FakeSwitch
from harness.sim import SimJob, attach_workers
from host_agent import probe, worker
from host_agent.clock import VirtualClock
from host_agent.protocol import drive

K = JobSpec(job_id=0, workers=2).coords_per_request  # 1,024 coordinates a THC request


def served(job_id: int, n: int, window: int) -> tuple[SimJob, FakeSwitch]:
    """Job `job_id` of n workers with `window` slots, on a fake switch."""
    job = SimJob.plan(JobSpec(job_id=job_id, workers=n, window=window, slots=window))
    sw = FakeSwitch()
    sw.add_job(job)
    return job, sw


def test_operation_records_when_its_results_came():
    job, sw = served(3, 4, 16)
    clock = VirtualClock()
    _, workers = attach_workers(sw, job, loss_up=0.1, loss_down=0.1, seed=5, clock=clock)
    rng = np.random.default_rng(0)
    ops = [w.start_sum_indices([rng.integers(0, 16, 11 * K - 300, dtype=np.uint8)]) for w in workers]
    drive(workers)
    for w, op in zip(workers, ops):
        assert w.last_operation is op
        assert op.first_result is not None and op.started <= op.first_result <= op.last_result <= op.finished
        assert (op.answered_at >= op.started).all() and (op.answered_at <= op.finished).all()
        assert op.answered_at.min() == op.first_result and op.answered_at.max() == op.last_result


class EchoAggregator:
    """One worker alone: the max of its norms is its norms, the sums are its own table values."""

    def all_max(self, t):
        return t.clone()

    def all_sum_table_values(self, indices, table):
        return [np.asarray(table.values)[i].astype(np.int32) for i in indices], 1

    def all_sum_int32(self, words):
        return [np.asarray(w, np.int32) for w in words], 1


def probe_args(mode: str):
    parser = worker.build_parser()
    argv = ["--mode", mode, "--rank", "1", "--world-size", "2", "--master-addr", "10.0.0.1", "--iface", "lo"]
    argv += ["--probe", "unused.npz", "--probe-size", "5000", "--chunk", "2048"]
    args = parser.parse_args(argv)
    args.spec = worker.job_ticket(args, worker.given_options(parser, argv)).spec
    return args


@pytest.mark.parametrize("mode", ["thc", "fix32"])
def test_rounds_with_one_codec_equal_rounds_with_a_fresh_codec_each(mode):
    """The probe builds (and warms up) its codec once, outside the timed rounds: every round must still
    be the one a freshly built codec computes (THC's signs and rounding depend on the round only)."""
    args = probe_args(mode)
    one_round = probe.switch_round  # one round function for every codec of the switch
    codec = worker.probe_codec(args)
    agg = EchoAggregator()
    for k in range(3):
        grad = worker.probe_gradient(args.probe_seed, args.rank, k, args.probe_size)
        shared = one_round(args, agg, grad, k, codec)
        fresh = one_round(args, agg, grad, k)
        assert set(shared) == set(fresh)
        for name in shared:
            if name != "phases":
                np.testing.assert_array_equal(shared[name], fresh[name], err_msg=name)
        phases = json.loads(str(shared["phases"]))
        for phase in ("prepare", "norm", "encode", "sum", "decode"):
            assert phases[f"{phase}_ms"] >= 0 and phases[f"{phase}_cpu_ms"] >= 0


def test_phase_clock_reads_the_aggregation_call_of_each_phase():
    job, sw = served(4, 2, 8)
    _, workers = attach_workers(sw, job, clock=VirtualClock())

    class Agg:
        def __init__(self, protocol):
            self.protocol = protocol

    clock = worker.PhaseClock(Agg(workers[0]))
    clock.lap("compute")  # no aggregation call: wall and CPU only
    ops = [w.start_sum_indices([np.full(5 * K - 100, 2, np.uint8)]) for w in workers]
    drive(workers)
    clock.lap("sum")
    records = json.loads(str(clock.saved()))
    assert "compute_op_ms" not in records and "compute_ms" in records
    assert records["sum_requests"] == ops[0].n == 5
    assert records["sum_transmissions"] == 5
    assert records["sum_first_result_ms"] <= records["sum_results50_ms"] <= records["sum_results90_ms"]
    assert records["sum_results90_ms"] <= records["sum_op_ms"]


class ManualClock:
    """A real-style clock (not a VirtualClock, so holds apply) that a test sets."""

    def __init__(self, t=10.0):
        self.t = t

    def __call__(self):
        return self.t


def held_protocol(**options):
    """One worker of two whose requests are all sent and whose results the test books by hand."""
    job, sw = served(6, 2, 8)
    clock = ManualClock()
    _, workers = attach_workers(sw, job, loss_down=1.0, clock=clock, timeout=0.5, max_timeout=1.0, **options)
    w = workers[0]
    op = w.start_sum_indices([np.full(5 * K - 100, 1, np.uint8)])  # 5 requests, all inside the window
    assert w.hold(op) == 0.0  # nothing sent yet
    w.pump(0.0)
    assert op.first_transmissions == op.n == 5
    return w, op, clock


def book(op, answered, first, last):
    """Results booked by hand; op.n may have been raised by the test (a longer operation, all sent)."""
    op.first_transmissions = op.n
    op.answered, op.outstanding = answered, op.n - answered
    op.first_result, op.last_result = first, last


def test_hold_is_half_the_expected_time_of_the_outstanding_results():
    w, op, clock = held_protocol()
    n = op.n
    assert w.hold(op) == 0.0  # no result yet: no pace to go by
    book(op, w.HOLD_AFTER - 1, 10.0, 10.01)
    assert w.hold(op) == 0.0  # too few results to trust their pace
    op.n = 100  # (the hold only reads the counts: a longer operation without sending it)
    book(op, 4, 10.0, 10.003)  # 1 ms per result, 96 outstanding: 96 ms expected, half of it held...
    clock.t = 10.003
    assert w.hold(op) == pytest.approx(0.003)  # ...but never longer than results have been coming
    book(op, 90, 10.0, 10.089)  # 10 outstanding at 1 ms: 5 ms
    clock.t = 10.089
    assert w.hold(op) == pytest.approx(0.005)
    book(op, 99, 10.0, 10.098)
    assert w.hold(op) == 0.0  # one outstanding: take it as soon as it comes
    op.n = n


def test_hold_is_capped_and_never_passes_a_timer():
    w, op, clock = held_protocol(max_hold=0.001)
    op.n = 100
    book(op, 50, 10.0, 10.05)
    clock.t = 10.05
    assert w.hold(op) == pytest.approx(0.001)
    w, op, clock = held_protocol()
    op.n = 100
    book(op, 50, 10.0, 10.05)  # 50 outstanding at 1 ms: the cap (10 ms), but the timer is due first
    clock.t = w.next_deadline() - 0.003
    assert w.hold(op) == pytest.approx(0.003)
    clock.t = w.next_deadline() - 0.0001
    assert w.hold(op) == 0.0  # less than MIN_HOLD left


def test_no_hold_when_turned_off_or_on_a_virtual_clock():
    w, op, clock = held_protocol(coalesce=0.0)
    op.n = 100
    book(op, 50, 10.0, 10.05)
    clock.t = 10.004
    assert w.hold(op) == 0.0
    job, sw = served(6, 2, 8)
    _, workers = attach_workers(sw, job, loss_down=1.0, clock=VirtualClock())
    op = workers[0].start_sum_indices([np.full(5 * K - 100, 1, np.uint8)])
    workers[0].pump(0.0)
    op.n = 100
    book(op, 50, 0.0, 0.05)
    assert workers[0].hold(op) == 0.0


@pytest.mark.parametrize("held", [False, True])
def test_a_batch_taken_in_after_a_hold_does_not_sample_the_gap(held):
    """The tail probe follows the spacing of the switch's results; after a hold, the spacing of batches is
    the hold's own, so that batch gives no sample of it."""
    job, sw = served(8, 2, 8)
    _, workers = attach_workers(sw, job, clock=ManualClock())
    ops = [w.start_sum_indices([np.full(5 * K - 100, 1, np.uint8)]) for w in workers]
    for w in workers:
        w.pump(0.0)  # sends; the second worker's requests complete the slots
    w = workers[0]
    w._held = held
    while not ops[0].complete:
        w.pump(0.0)
    assert (w.stats()["gap"] is None) == held


def test_a_switch_round_on_the_packed_path_saves_what_the_index_path_saves(new_engine):
    """switch_round through SwitchAggregators (the hook's packed path: encode_packed, flat sums,
    decode_lanes) saves the same norms, indices, per-chunk sums and decoded gradient, bit for bit, as
    the same round on the index path (encode, all_sum_table_values, decode), on both switches."""
    args = [probe_args("thc") for _ in range(2)]
    args[0].rank = 0
    job = SimJob.plan(args[0].spec)
    saved = {}
    for packed in (True, False):
        aggs = aggregators_on(new_engine(job), job, timeout=0.005, max_timeout=0.05, deadline=30.0)
        if not packed:
            for a in aggs:
                a.start_sum_encoded = None  # not callable: switch_round takes the index path
        grads = [worker.probe_gradient(a.probe_seed, a.rank, 1, a.probe_size) for a in args]
        out = [None, None]

        def run(w):
            out[w] = probe.switch_round(args[w], aggs[w], grads[w], 1)

        threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(a.protocol.last_operation.flat == packed for a in aggs)  # the path the round took
        saved[packed] = out
    for w in range(2):
        assert set(saved[True][w]) == set(saved[False][w])
        for name, value in saved[False][w].items():
            if name != "phases":
                np.testing.assert_array_equal(saved[True][w][name], value, err_msg=name)
                assert saved[True][w][name].dtype == value.dtype, name
