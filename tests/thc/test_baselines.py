"""Baseline compressors behind the three-phase interface, the registry and the metrics."""

import math

import numpy as np
import pytest
import torch

from thc.baselines import FP16, QSGD, FixedPoint32, NoCompression, TernGrad, TopK, fixed_point_scale
from thc.baselines.fixed_point import INT32_MAX
from thc.errors import AggregationError, ConfigError, GradientError
from thc.metrics import nmse, vnmse
from thc.registry import COMPRESSORS, make_compressor
from thc.simulate import mean_nmse, simulate_round

SIGMAS = 6.0


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def grads_of(n, d, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(d, generator=gen) * scale for _ in range(n)]


def test_fp32_is_exact_and_fp16_is_close():
    grads = grads_of(4, 3000)
    mean = torch.stack(grads).mean(0)
    torch.testing.assert_close(simulate_round([NoCompression(chunk=1024) for _ in range(4)], grads), mean)
    out = simulate_round([FP16(4, chunk=1024) for _ in range(4)], grads)
    assert nmse(grads, out) < 1e-6 and out.dtype == torch.float32


def test_fixed_point_keeps_int32_headroom_for_n_workers_at_the_extremes():
    n = 5
    worst = torch.full((100,), -3.7)
    worst[::2] = 3.7  # every worker at +-max
    comps = [FixedPoint32(n, chunk=64) for _ in range(n)]
    preps = [c.prepare(worst.clone(), 0) for c in comps]
    stats = torch.stack([p.stats for p in preps]).amax(0)
    words = [c.encode(p, stats) for c, p in zip(comps, preps)]
    assert all(w.dtype == np.int32 for ws in words for w in ws)
    sums64 = [np.sum([w[c] for w in words], axis=0, dtype=np.int64) for c in range(2)]
    assert max(int(np.abs(s).max()) for s in sums64) <= INT32_MAX
    for sums in (sums64, [s.astype(np.int32) for s in sums64], comps[0].aggregate(words)):
        out = comps[0].decode(preps[0], sums, n, stats)
        torch.testing.assert_close(out, worst, rtol=1e-6, atol=0)


def test_fixed_point_scale_is_a_shared_exponent_and_partial_sums_decode():
    assert fixed_point_scale(1.0, 1) == math.ldexp(INT32_MAX, -1)  # 1.0 = 0.5 * 2**1
    assert fixed_point_scale(0.0, 4) == 1.0
    grads = grads_of(4, 2000, seed=1)
    comps = [FixedPoint32(4) for _ in range(4)]
    preps = [c.prepare(g, 0) for c, g in zip(comps, grads)]
    stats = torch.stack([p.stats for p in preps]).amax(0)
    words = [c.encode(p, stats) for c, p in zip(comps, preps)]
    out = comps[0].decode(preps[0], comps[0].aggregate(words[:3]), 3, stats)
    torch.testing.assert_close(out, torch.stack(grads[:3]).mean(0), rtol=0, atol=1e-6)
    assert FixedPoint32().workers == 32


def test_fixed_point_refuses_values_beyond_the_shared_max():
    comp = FixedPoint32(2)
    prep = comp.prepare(torch.tensor([1.0, -4.0]), 0)
    with pytest.raises(AggregationError, match="max"):
        comp.encode(prep, torch.tensor([1.0]))


def test_fixed_point_after_a_released_max_round_clips_and_averages_per_coordinate_counts():
    """Partial aggregation: the max round may lack a worker (its values beyond the shared max are clipped
    to the headroom, not refused), and released slots sum fewer workers (each coordinate divided by its own
    count)."""
    comps = [FixedPoint32(2, chunk=2) for _ in range(2)]
    x0, x1 = torch.tensor([1.0, -4.0, 0.5]), torch.tensor([0.5, 0.25, -1.0])
    preps = [c.prepare(x, 0) for c, x in zip(comps, (x0, x1))]
    stats = torch.tensor([1.0, 1.0])  # worker 0's -4.0 is missing from the released max of chunk 0
    w0, w1 = (c.encode(p, stats, partial=True) for c, p in zip(comps, preps))
    assert int(w0[0][1]) == -(INT32_MAX // 2)  # clipped to the headroom of 2 workers
    # chunk 0 summed both workers; chunk 1 was released with worker 1 only
    sums = [w0[0].astype(np.int64) + w1[0], w1[1].astype(np.int64)]
    counts = [np.array([2, 2]), np.array([1])]
    out = comps[1].decode(preps[1], sums, counts, stats)
    clipped = -(INT32_MAX // 2) / fixed_point_scale(1.0, 2)
    torch.testing.assert_close(out, torch.tensor([0.75, (clipped + 0.25) / 2, -1.0]), rtol=1e-6, atol=1e-6)
    with pytest.raises(AggregationError, match="counts of chunk 1"):
        comps[1].decode(preps[1], sums, [np.array([2, 2]), np.array([0])], stats)


def test_topk_keeps_the_largest_and_error_feedback_telescopes():
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3, 0.05, 0.0, 1.0, -0.01, 0.02])
    comp = TopK(ratio=0.2, chunk=16)
    prep = comp.prepare(x, 0)
    ((idx, vals),) = comp.encode(prep, prep.stats)
    assert sorted(idx.tolist()) == [1, 3]
    gen = torch.Generator().manual_seed(2)
    comp = TopK(ratio=0.05, chunk=256)
    grads = [torch.randn(1000, generator=gen) for _ in range(30)]
    total = torch.zeros(1000, dtype=torch.float64)
    for s, g in enumerate(grads):
        total += simulate_round([comp], [g], s).double()
    torch.testing.assert_close(
        total + comp.feedback.memory.double(), torch.stack(grads).double().sum(0), rtol=0, atol=1e-4
    )


def unbiased_check(make, grads, trials):
    outs = torch.stack([simulate_round([make(i) for i in range(len(grads))], grads, s) for s in range(trials)])
    outs = outs.double()
    truth = torch.stack(grads).double().mean(0)
    se = outs.std(0) / math.sqrt(trials)
    assert bool(((outs.mean(0) - truth).abs() <= SIGMAS * se + 1e-6).all())


def test_qsgd_is_unbiased():
    grads = grads_of(2, 300, seed=3)
    unbiased_check(lambda i: QSGD(bits=3, bucket=64, worker_id=i), grads, 300)


def test_terngrad_without_clipping_is_unbiased_and_summable():
    grads = grads_of(3, 300, seed=4)
    unbiased_check(lambda i: TernGrad(clip_sigma=None, worker_id=i), grads, 300)
    comp = TernGrad()
    prep = comp.prepare(grads[0], 0)
    payload = comp.encode(prep, prep.stats)
    assert payload[0].dtype == np.uint8 and set(np.unique(payload[0]).tolist()) <= {0, 1, 2}
    assert comp.summable and comp.bits_per_coordinate(4) == (2.0, 4.0)


def test_independent_streams_per_worker():
    x = torch.randn(500)
    a, b = QSGD(worker_id=0), QSGD(worker_id=1)
    pa, pb = a.prepare(x, 0), b.prepare(x, 0)
    assert not np.array_equal(a.encode(pa, pa.stats)[0][0], b.encode(pb, pb.stats)[0][0])


def test_bits_per_coordinate_and_names():
    assert NoCompression().bits_per_coordinate(8) == (32.0, 32.0)
    assert FP16(8).bits_per_coordinate(8) == (16.0, 16.0)
    assert FixedPoint32(8).bits_per_coordinate(8) == (32.0, 32.0)
    assert TopK(0.01).bits_per_coordinate(4) == pytest.approx((0.64, 1.92))
    assert QSGD(4, 512).bits_per_coordinate(2) == pytest.approx((4.0625, 4.0625))
    names = [make_compressor(n, 4).name for n in COMPRESSORS]
    assert len(set(names)) == len(names)


def test_registry_and_shared_validation():
    with pytest.raises(ConfigError, match="unknown compressor"):
        make_compressor("zip", 2)
    with pytest.raises(GradientError, match="NaN"):
        NoCompression().prepare(torch.tensor([1.0, float("nan")]), 0)
    with pytest.raises(ConfigError):
        QSGD(bits=1)
    with pytest.raises(ConfigError):
        TopK(ratio=0)
    with pytest.raises(AggregationError, match="contributors"):
        comp = NoCompression()
        prep = comp.prepare(torch.ones(3), 0)
        comp.decode(prep, comp.aggregate([comp.encode(prep, prep.stats)]), 0, prep.stats)


def test_every_compressor_round_trips_and_orders_as_expected():
    rounds = [grads_of(4, 4096, seed=s) for s in range(2)]
    errors = {n: mean_nmse(lambda i, n=n: make_compressor(n, 4, i, chunk=1024), rounds) for n in COMPRESSORS}
    assert errors["fp32"] < 1e-12 and errors["fixed32"] < 1e-12 and errors["fp16"] < 1e-6
    assert errors["thc"] < errors["thc-uniform"] * 1.05 < 0.01
    assert max(errors["topk"], errors["qsgd"], errors["terngrad"]) < 1.0


def test_metrics():
    x = torch.tensor([3.0, 4.0])
    assert vnmse(x, torch.tensor([3.0, 3.0])) == pytest.approx(1 / 25)
    assert nmse([x, -x], torch.zeros(2)) == 0.0
    assert nmse([x, torch.zeros(2)], torch.zeros(2)) == pytest.approx(6.25 / 12.5)
    with pytest.raises(GradientError):
        vnmse(torch.zeros(2), torch.zeros(2))
