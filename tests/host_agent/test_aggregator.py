"""SwitchAggregator, the THC DDP hook's aggregator: several workers in threads over the loopback wire."""

import numpy as np
import pytest
import torch

from contract.job import JobSpec
from harness.ddp_cluster import aggregators_on, in_threads
from harness.fake_switch import FakeSwitch
from harness.sim import SimJob

TABLE = np.array([0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30])  # the default description's


def aggregators(n, window=16, loss=0.0, **spec):
    job = SimJob.plan(JobSpec.from_dict({"job_id": 1, "workers": n, "window": window, "slots": window, **spec}))
    switch = FakeSwitch()
    switch.add_job(job)
    return aggregators_on(switch, job, loss=loss, seed=11, timeout=0.005, max_timeout=0.05, deadline=20.0)


def test_hook_calls_give_every_worker_the_same_exact_aggregates():
    n = 4
    aggs = aggregators(n, loss=0.03)
    rng = np.random.default_rng(0)
    norms = [torch.tensor(rng.uniform(0, 10, size=5), dtype=torch.float32) for _ in range(n)]
    indices = [[rng.integers(0, 16, size=s, dtype=np.uint8) for s in (5000, 1024, 5)] for _ in range(n)]
    fixed = [[rng.integers(-1000, 1000, size=700).astype(np.int32)] for _ in range(n)]

    def step(w):
        a = aggs[w]
        return a.all_max(norms[w]), a.all_sum_table_values(indices[w], TABLE), a.all_sum_int32(fixed[w])

    results = in_threads(n, step, timeout=60)
    want_max = torch.stack(norms).max(dim=0).values
    want_sums = [sum(TABLE[indices[w][c]] for w in range(n)) for c in range(3)]
    want_fix = sum(f[0] for f in fixed)
    for maxima, (sums, count), (fsums, fcount) in results:
        assert maxima.dtype == torch.float32 and maxima.shape == (5,)
        assert torch.equal(maxima, want_max)
        assert count == n and fcount == n
        for got, want in zip(sums, want_sums):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(fsums[0], want_fix)
    stats = aggs[0].stats()
    # 1,024 coordinates a THC request (8-bit lanes: n·g = 120), 256 int32 a FIX32 request
    assert stats["operations"] == 3 and stats["requests"] == 1 + (5 + 1 + 1) + 3  # the 5 norms: one NORM request


def test_refuses_what_the_switch_would_drop_or_sum_with_another_table():
    (agg,) = aggregators(1, bits=2)
    small = agg.protocol.spec.table_values()
    assert len(small) == 4
    with pytest.raises(ValueError, match="BAD_INDEX"):
        agg.all_sum_table_values([np.array([0, 4], np.uint8)], small)
    with pytest.raises(ValueError, match="8-bit lanes"):
        agg.all_sum_table_values([np.zeros(4, np.uint8)], [0, 100, 200, 300])  # a byte's worth at most
    with pytest.raises(ValueError, match="decodes with"):
        agg.all_sum_table_values([np.zeros(4, np.uint8)], TABLE)  # not the job's: the sums would be wrong
    (wide,) = aggregators(1, granularity=255)
    with pytest.raises(ValueError, match="decodes with"):
        wide.all_sum_table_values([np.zeros(4, np.uint8)], small)
    assert agg.stats()["packets_sent"] == wide.stats()["packets_sent"] == 0
    sums, count = agg.all_sum_table_values([np.array([3, 0, 1], np.uint8)], small)
    assert count == 1 and sums[0].tolist() == [small[3], small[0], small[1]]
