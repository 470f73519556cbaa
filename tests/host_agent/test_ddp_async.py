"""thc_hook (and fix32_hook) do not block the backward pass: each returns a future that its aggregation
thread completes when the switch's results are in, and training with it gives bit-identical parameters to
the blocking hook (thc_blocking_hook, fix32_blocking_hook) after N steps with the same seed: 2 DDP workers
in threads with several buckets each, through the fake switch on the loopback wire
(harness/ddp_cluster.py)."""

import threading
import time

import numpy as np
import pytest
import torch

from ddp import aggregator_hooks
from harness import blocking_hooks
from harness import ddp_cluster as cluster
from harness.fake_switch import FakeSwitch
from harness.sim import SimJob, attach_workers
from host_agent import wire
from host_agent.aggregator import SwitchAggregator
from tests.support.grad_bucket import GradBucket as Bucket
from thc.config import THCConfig
from thc.errors import AggregationError


class LocalAggregator:
    """One worker alone: the max is the value, the sums are its own table values. all_max waits for ``gate``."""

    def __init__(self, gate: threading.Event | None = None, fail: bool = False):
        self.gate, self.fail, self.threads = gate, fail, set()

    def all_max(self, t):
        self.threads.add(threading.current_thread().name)
        if self.gate is not None:
            assert self.gate.wait(30)
        if self.fail:
            raise AggregationError("the switch said no")
        return t.clone()

    def all_sum_table_values(self, indices, table):
        return [np.take(table.values.astype(np.int32), np.asarray(i)) for i in indices], 1


def grad(k: int) -> torch.Tensor:
    return torch.randn(5000, generator=torch.Generator().manual_seed(k))


def test_the_hook_returns_before_the_switch_answers_and_the_future_completes_after():
    gate = threading.Event()
    agg = LocalAggregator(gate)
    state = aggregator_hooks.THCHookState(THCConfig(error_feedback=True), agg, worker_id=0)
    futures = [aggregator_hooks.thc_hook(state, Bucket(grad(k), index=k, last=k == 2)) for k in range(3)]
    assert not any(f.done() for f in futures)  # all three handed over while the "switch" holds the first
    assert state.iteration == 1  # the round ends when its last bucket is handed over
    gate.set()
    got = [f.wait() for f in futures]
    assert agg.threads == {"thc-aggregation"}
    reference = aggregator_hooks.THCHookState(THCConfig(error_feedback=True), LocalAggregator(), worker_id=0)
    for k in range(3):
        want = blocking_hooks.thc_blocking_hook(reference, Bucket(grad(k), index=k, last=k == 2)).wait()
        assert torch.equal(got[k], want)
    state.close()


def test_an_aggregation_error_reaches_whoever_waits_on_the_future():
    state = aggregator_hooks.THCHookState(THCConfig(), LocalAggregator(fail=True), worker_id=0)
    fut = aggregator_hooks.thc_hook(state, Bucket(grad(0)))
    with pytest.raises(RuntimeError, match="AggregationError: the switch said no"):
        fut.wait()
    assert isinstance(state.runner.errors[0], AggregationError)
    ok = aggregator_hooks.THCHookState(THCConfig(), LocalAggregator(), worker_id=0)
    assert aggregator_hooks.thc_hook(ok, Bucket(grad(1))).wait().shape == (5000,)  # the thread survives a failed bucket
    state.close()
    ok.close()


@pytest.mark.parametrize("name, mode", [("mlp2-digits", "thc"), ("cnn1d-signals", "thc"), ("cnn1d-signals", "fix32")])
def test_non_blocking_training_is_bit_identical_to_blocking(name, mode, one_torch_thread):
    config = THCConfig(error_feedback=True, seed=3)
    runs = {}
    for blocking in (False, True):
        reference = {"thc_hook": blocking_hooks.thc_blocking_hook, "fix32_hook": blocking_hooks.fix32_blocking_hook}
        hooks = reference if blocking else {}
        # ~25 KiB buckets: several per backward pass, so buckets overlap the backward of the next
        runs[blocking] = cluster.train_ddp(
            name, mode, steps=6, batch_size=8, config=config, bucket_cap_mb=0.025, **hooks
        )
    for rank in range(2):
        a, b = runs[False][rank], runs[True][rank]
        assert torch.equal(a["params"], b["params"]), rank
        assert a["state"].iteration == b["state"].iteration == 6
        if mode == "thc":
            assert a["state"].buckets_seen == b["state"].buckets_seen > 6  # more than one bucket per step
        assert a["after"] < a["before"]


@pytest.mark.parametrize("blocking", [False, True], ids=["hook-thread", "blocking-hook"])
def test_a_switch_timeout_is_told_by_its_type_though_ddp_raises_only_its_text(one_torch_thread, blocking):
    """DDP re-raises the error of a hook's future as a RuntimeError with its message only: thc-worker raises
    the AggregationTimeout the hook's thread kept instead, or it would report a switch timeout as an unknown
    failure (exit 1, not 3); a blocking hook's passes unchanged. A RuntimeError that merely names the type
    is no timeout."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from host_agent import worker
    from host_agent.protocol import AggregationTimeout

    class Silent(LocalAggregator):
        def all_max(self, t):
            raise AggregationTimeout("no result for request 3 after 30 s")

    store = torch.distributed.HashStore()

    def work(rank):
        pg = cluster.gloo_group(torch.distributed.PrefixStore("t", store), rank, 2)
        model = DDP(torch.nn.Linear(4, 2), process_group=pg)
        state = aggregator_hooks.THCHookState(THCConfig(), Silent(), worker_id=rank)
        model.register_comm_hook(state, blocking_hooks.thc_blocking_hook if blocking else aggregator_hooks.thc_hook)
        try:
            with worker.aggregation_errors_as_raised(state, pg):
                model(torch.randn(3, 4)).sum().backward()
        except Exception as exc:  # noqa: BLE001 - what thc-worker's main() would see
            return worker.is_switch_timeout(exc)
        finally:
            state.close()
        return None

    assert cluster.in_threads(2, work) == [True, True]
    assert not worker.is_switch_timeout(RuntimeError("AggregationTimeout: no result for request 3 after 30 s"))


def test_overlapping_buckets_count_their_aggregation_time_once():
    """thc-worker's timed(): with a non-blocking hook, bucket 1 is handed over while bucket 0 is still at the
    switch; the recorded times must add up to the time aggregation was in progress, not count the overlap
    twice. A hand-driven clock and hand-completed futures: no real time is measured."""
    from host_agent import worker

    now = [0.0]
    futures = [torch.futures.Future() for _ in range(2)]
    seconds = []
    hook = worker.timed(lambda state, bucket: futures[bucket.index()], seconds, clock=lambda: now[0])
    done = [hook(None, Bucket(grad(0), index=0, last=False))]  # handed over at 0.0
    now[0] = 0.1
    done.append(hook(None, Bucket(grad(1), index=1, last=True)))  # at 0.1, while bucket 0 is out
    now[0] = 1.0
    futures[0].set_result(torch.zeros(1))  # bucket 0 back at 1.0
    now[0] = 1.5
    futures[1].set_result(torch.ones(1))  # bucket 1 at 1.5
    assert [f.wait().item() for f in done] == [0.0, 1.0]
    assert seconds == [1.0, 0.5]  # 1.0 + 0.5 = the 1.5 s in progress, not 1.0 + 1.4


class HoldsTheSums:
    """Wraps a switch engine: the results of the first THC round are held back until every worker has sent
    the next norm round (a NORM request numbered after its first THC request), or, unless `patient`, until a
    THC request is sent again (its worker gave up waiting: the blocking hook's next norm round never comes
    while its sums are out). `opened_by` says which happened. A patient gate opens on nothing else, so
    how slowly the workers run cannot open it (without the overlap, their requests time out)."""

    def __init__(self, engine, workers: int, window: int, patient: bool = False):
        self.engine, self.workers, self.window, self.patient = engine, workers, window, patient
        self.held: list = []
        self.first_sum: dict[int, int] = {}  # worker -> request number of its first THC request
        self.seen: set[tuple[int, int]] = set()  # (worker, request number) of the THC requests held
        self.next_norm: set[int] = set()  # workers whose next norm round came while the sums were held
        self.opened_by: str | None = None

    def process(self, port, frame):
        p = wire.parse_frame(frame)
        out = self.engine.process(port, frame)
        if self.opened_by is not None or p is None or p.kind != wire.KIND_REQUEST:
            return out
        q = p.round * self.window + p.slot
        if p.op == wire.OP_THC:
            self.first_sum.setdefault(p.worker_id, q)
            if (p.worker_id, q) in self.seen and not self.patient:
                return self._open("retransmission", out)  # a THC request seen before: sent again
            self.seen.add((p.worker_id, q))
            self.held += out
            return []
        if p.op == wire.OP_NORM and p.worker_id in self.first_sum and q > self.first_sum[p.worker_id]:
            self.next_norm.add(p.worker_id)
            if len(self.next_norm) == self.workers:
                return self._open("next norm round", out)
        return out

    def _open(self, why, out):
        self.opened_by = why
        held, self.held = self.held, []
        return held + out

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_the_next_buckets_norm_round_goes_out_while_this_buckets_sums_are_in_flight():
    """Two workers hand over three buckets at once. The switch holds back the first bucket's sums until both
    workers have sent the second bucket's norm round: with the norm round overlapped it comes while the
    sums are in flight, and the results are bit for bit those of the blocking hook."""
    config = THCConfig(error_feedback=True, seed=3)
    results = {}
    for hook in (aggregator_hooks.thc_hook, blocking_hooks.thc_blocking_hook):
        job = SimJob.plan(cluster.thc_spec(config, 3, 2, window=64, slots=64))
        switch = FakeSwitch()
        switch.add_job(job)
        gate = HoldsTheSums(switch, 2, 64, patient=hook is aggregator_hooks.thc_hook)
        _, protocols = attach_workers(gate, job, clock=time.monotonic, timeout=0.01, max_timeout=0.1, deadline=20.0)

        def work(rank, hook=hook, protocols=protocols):
            state = aggregator_hooks.THCHookState(config, SwitchAggregator(protocols[rank]), worker_id=rank)
            buckets = [Bucket(grad(10 * rank + k), index=k, last=k == 2) for k in range(3)]
            futures = [hook(state, bucket) for bucket in buckets]  # all three handed over before any is done
            out = [f.wait().clone() for f in futures]
            state.close()
            return out

        results[hook] = (cluster.in_threads(2, work), gate.opened_by)
    (overlapped, opened_by), (blocking, _) = (
        results[aggregator_hooks.thc_hook],
        results[blocking_hooks.thc_blocking_hook],
    )
    assert opened_by == "next norm round"
    for rank in range(2):
        for a, b in zip(overlapped[rank], blocking[rank]):
            assert torch.equal(a, b)
