"""The THC DDP hook (ddp.aggregator_hooks) trains through the switch: 4 workers, each a thread with a
SwitchAggregator on the loopback wire, run thc_hook and fix32_hook on their gradient buckets, against the fake
switch and (once it exists) the compiled program. Every worker must get the same average, and it must be the
average THC itself computes from the same indices with the library's reference aggregation."""

import numpy as np
import torch

from ddp import aggregator_hooks
from harness.ddp_cluster import aggregators_on, in_threads, thc_spec
from harness.sim import SimJob
from tests.support.grad_bucket import GradBucket as Bucket
from thc.aggregate import reference_aggregate
from thc.config import THCConfig

N = 4


class Recording:
    """Wraps an aggregator and keeps the indices each call sent and the sums it got."""

    def __init__(self, inner):
        self.inner, self.n_workers = inner, inner.n_workers
        self.indices, self.sums = [], []

    def all_max(self, t):
        return self.inner.all_max(t)

    def all_sum_table_values(self, indices, table):
        self.indices.append([i.copy() for i in indices])
        sums, count = self.inner.all_sum_table_values(indices, table)
        self.sums.append(sums)
        return sums, count

    def all_sum_int32(self, values):
        return self.inner.all_sum_int32(values)


def switch_aggregators(new_engine, config, loss=0.0):  # noqa: F811
    job = SimJob.plan(thc_spec(config, 3, N, window=32, slots=32))
    engine = new_engine(job)
    return aggregators_on(engine, job, loss=loss, seed=5, timeout=0.005, max_timeout=0.05, deadline=30.0)


def test_thc_hook_averages_through_the_switch(new_engine):  # noqa: F811
    config = THCConfig(chunk=2**12)
    table = config.make_table()
    aggs = [Recording(a) for a in switch_aggregators(new_engine, config, loss=0.02)]
    states = [aggregator_hooks.THCHookState(config, aggs[w], worker_id=w) for w in range(N)]
    rng = np.random.default_rng(0)
    grads = [torch.tensor(rng.normal(size=5000), dtype=torch.float32) for _ in range(N)]

    def step(w):
        outs = []
        for it in range(2):  # two steps: the second reuses the slots of the first
            buf = grads[w].clone() * (it + 1)
            outs.append(aggregator_hooks.thc_hook(states[w], Bucket(buf)).wait().clone())
        return outs

    results = in_threads(N, step, timeout=120)
    for it in range(2):
        for w in range(1, N):
            assert torch.equal(results[w][it], results[0][it])
        truth = torch.stack(grads).mean(0) * (it + 1)
        nmse = float(((results[0][it] - truth) ** 2).sum() / (truth**2).sum())
        assert nmse < 0.05, nmse
        for chunk in range(len(aggs[0].indices[it])):
            want = reference_aggregate([aggs[w].indices[it][chunk] for w in range(N)], table)
            for w in range(N):
                np.testing.assert_array_equal(aggs[w].sums[it][chunk], want)


def test_fix32_hook_averages_through_the_switch(new_engine):  # noqa: F811
    aggs = switch_aggregators(new_engine, THCConfig())
    states = [aggregator_hooks.FixedPointHookState(aggs[w]) for w in range(N)]
    rng = np.random.default_rng(1)
    grads = [torch.tensor(rng.normal(size=3000), dtype=torch.float32) for _ in range(N)]
    results = in_threads(
        N, lambda w: aggregator_hooks.fix32_hook(states[w], Bucket(grads[w].clone())).wait(), timeout=120
    )
    truth = torch.stack(grads).mean(0)
    for w in range(N):
        assert torch.equal(results[w], results[0])
    assert float((results[0] - truth).abs().max()) < 1e-6 * float(truth.abs().max())
