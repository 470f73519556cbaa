"""The codec's parts switched off one at a time: THC without its transform, and TernGrad on THC's table
machinery (THCConfig transform= and quantizer=, thc/direct.py). Each decodes by the formula thc/direct.py
states, is unbiased where nothing is clipped, and TernGrad's levels and decode are those of
thc.baselines.TernGrad. Statistical assertions use fixed seeds and 6 standard errors."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from thc import THCCompressor, THCConfig
from thc.baselines import TernGrad
from thc.config import TERNGRAD
from thc.errors import AggregationError, ConfigError
from thc.metrics import vnmse

SIGMAS = 6.0
TERN = THCConfig(quantizer="terngrad", chunk=1024, **TERNGRAD)
RAW = THCConfig(transform=False, chunk=1024)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def round_of(cfg, grads, step=0, contributors=None):
    """Every worker prepares and encodes against the max of the statistics; worker 0 decodes the sums of
    the first `contributors`. Returns (decoded, preps, indices, sums, maxima)."""
    comps = [THCCompressor(cfg, worker_id=i) for i in range(len(grads))]
    preps = [c.prepare(g, step) for c, g in zip(comps, grads)]
    maxima = torch.stack([p.norms for p in preps]).amax(0)
    indices = [c.encode(p, maxima) for c, p in zip(comps, preps)]
    k = len(grads) if contributors is None else contributors
    sums = comps[0].aggregate(indices[:k])
    return comps[0].decode(preps[0], sums, k, maxima), preps, indices, sums, maxima


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"quantizer": "terngrad"}, "bits=4: the terngrad quantizer needs bits=2"),
        ({"quantizer": "terngrad", "bits": 2, "granularity": 2, "table": "uniform"}, "transform=True"),
        ({"quantizer": "terngrad", "bits": 2, "granularity": 2, "transform": False}, "table='optimal'"),
        ({"quantizer": "qsgd"}, "quantizer 'qsgd' unknown: use one of thc, terngrad"),
        ({"transform": 0}, "transform=0 must be True or False"),
    ],
)
def test_a_config_the_quantizer_cannot_run_is_refused(fields, says):
    with pytest.raises(ConfigError, match=says):
        THCConfig(**fields)


def test_terngrads_table_is_the_uniform_two_bit_table_at_g_2():
    comp = THCCompressor(TERN)
    assert comp.table.values.tolist() == [0, 1, 1, 2] and comp.name == "TernGrad-switch"


def test_without_the_transform_the_decode_is_the_levels_times_the_step():
    """x_hat = (S/n - g/2) inc M / sqrt(d) per chunk, chunk by chunk (the last one padded)."""
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(2500, generator=gen) * (i + 1) for i in range(3)]
    out, preps, _, sums, maxima = round_of(RAW, grads)
    table = THCCompressor(RAW).table
    want = []
    for c, s, m in zip(preps[0].chunks, sums, maxima.double().numpy()):
        step = table.inc * m / math.sqrt(c.padded)
        want.append((s[: c.length] / 3 - 15.0) * step)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(want).astype(np.float32))


def test_without_the_transform_a_spike_is_clipped_at_the_tables_end():
    """What the transform buys: one coordinate far above the rest. Unspread, it is clipped at
    T M / sqrt(d); the transform spreads it over the chunk and keeps it."""
    x = torch.randn(1024, generator=torch.Generator().manual_seed(2)) * 0.01
    x[7] = 50.0
    raw, _, _, _, maxima = round_of(RAW, [x])
    table = THCCompressor(RAW).table
    end = table.threshold * float(maxima[0]) / math.sqrt(1024)
    assert float(raw[7]) == pytest.approx(end, rel=1e-6) and end < 5.0
    spread, *_ = round_of(THCConfig(chunk=1024), [x])
    assert vnmse(x, spread) < 0.05 < vnmse(x, raw)


def test_without_the_transform_the_average_is_unbiased_when_nothing_is_clipped():
    d, trials = 256, 300
    gen = torch.Generator().manual_seed(3)
    grads = [torch.rand(d, generator=gen) - 0.5 for _ in range(2)]  # |x| <= 0.5, far inside T M / sqrt(d)
    cfg = THCConfig(transform=False, chunk=256)
    outs = torch.stack([round_of(cfg, grads, step=s)[0] for s in range(trials)]).double()
    truth = torch.stack(grads).double().mean(0)
    err, se = outs.mean(0) - truth, outs.std(0) / math.sqrt(trials)
    assert bool((err.abs() <= SIGMAS * se + 1e-6).all())


def test_terngrad_clips_at_t_standard_deviations_and_shares_the_largest_value():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    x[3] = 40.0
    prep = THCCompressor(TERN).prepare(x, 0)
    bound = THCCompressor(TERN).table.threshold * float(x.std())
    assert float(prep.norms[0]) == pytest.approx(bound, rel=1e-6) and prep.extra["bounds"][0] == bound
    assert float(THCCompressor(TERN).prepare(x[3:4], 0).norms[0]) == 40.0  # one coordinate: nothing to clip


def test_terngrad_sends_sign_times_bernoulli_of_x_over_s():
    """Indices 0 (-s), 1 or 2 (0), 3 (+s); P(+-s) = |x|/s, as TernGrad's own draw."""
    x = torch.linspace(-1.0, 1.0, 41)
    trials, plus, minus = 400, np.zeros(41), np.zeros(41)
    for step in range(trials):
        comp = THCCompressor(TERN)
        prep = comp.prepare(x, step)
        (idx,) = comp.encode(prep, prep.norms)
        plus += idx[:41] == 3
        minus += idx[:41] == 0
        assert set(idx[41:].tolist()) == {2}  # the padding is zero: the middle, with no draw
    assert prep.extra["bounds"][0] > 1.0 and float(prep.norms[0]) == 1.0  # nothing clipped, so s = max |x|
    p = np.abs(x.double().numpy())
    for hits, side in ((plus, x.numpy() > 0), (minus, x.numpy() < 0)):
        want = np.where(side, p, 0.0)
        se = np.sqrt(want * (1 - want) / trials)
        assert np.all(np.abs(hits / trials - want) <= SIGMAS * se + 1e-9)


def test_terngrad_decodes_as_the_baselines_formula():
    """(S/n - 1) s here against (S - n) s / n in thc.baselines.TernGrad, for the same sums and scales."""
    gen = torch.Generator().manual_seed(5)
    grads = [torch.randn(3000, generator=gen) for _ in range(4)]
    out, preps, indices, sums, maxima = round_of(TERN, grads)
    assert all(set(np.unique(np.concatenate(i)).tolist()) <= {0, 1, 2, 3} for i in indices)
    baseline = TernGrad(chunk=1024)
    bprep = baseline.prepare(grads[0], 0)
    unpadded = [s[: c.length] for s, c in zip(sums, preps[0].chunks)]
    want = baseline.decode(bprep, unpadded, 4, maxima)
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-7)


def test_terngrad_is_unbiased_for_the_clipped_gradients():
    d, trials = 200, 400
    gen = torch.Generator().manual_seed(6)
    grads = [torch.randn(d, generator=gen) * (1 + i) for i in range(3)]
    cfg = dataclasses.replace(TERN, chunk=256)
    outs = torch.stack([round_of(cfg, grads, step=step)[0] for step in range(trials)]).double()
    preps = [THCCompressor(cfg).prepare(g, 0) for g in grads]  # the clip bounds depend on the gradient only
    clipped = [np.clip(g.double().numpy(), -p.extra["bounds"][0], p.extra["bounds"][0]) for g, p in zip(grads, preps)]
    assert any((np.abs(c) < np.abs(g.numpy())).any() for c, g in zip(clipped, grads))  # some were clipped
    truth = torch.from_numpy(np.mean(clipped, axis=0))
    err, se = outs.mean(0) - truth, outs.std(0) / math.sqrt(trials)
    assert bool((err.abs() <= SIGMAS * se + 1e-6).all())


@pytest.mark.parametrize("cfg", [RAW, TERN], ids=["no transform", "terngrad"])
def test_per_coordinate_counts_decode_coordinate_by_coordinate(cfg):
    """Released slots: some coordinates summed fewer workers; each divides by its own count."""
    gen = torch.Generator().manual_seed(7)
    grads = [torch.randn(1500, generator=gen) for _ in range(3)]
    _, preps, indices, _, maxima = round_of(cfg, grads)
    comp = THCCompressor(cfg)
    all3, first2 = comp.aggregate(indices), comp.aggregate(indices[:2])
    counts = [np.where(np.arange(c.padded) % 2 == 0, 3, 2) for c in preps[0].chunks]
    sums = [np.where(k == 3, a, b) for k, a, b in zip(counts, all3, first2)]
    out = comp.decode(preps[0], sums, counts, maxima).numpy()
    full = comp.decode(preps[0], all3, 3, maxima).numpy()
    two = comp.decode(preps[0], first2, 2, maxima).numpy()
    even = np.arange(1500) % 1024 % 2 == 0
    np.testing.assert_array_equal(out[even], full[even])
    np.testing.assert_array_equal(out[~even], two[~even])


@pytest.mark.parametrize("cfg", [RAW, TERN], ids=["no transform", "terngrad"])
def test_sums_outside_n_g_are_refused(cfg):
    x = torch.randn(100, generator=torch.Generator().manual_seed(8))
    comp = THCCompressor(cfg)
    prep = comp.prepare(x, 0)
    sums = comp.aggregate([comp.encode(prep, prep.norms)])
    sums[0][5] = comp.table.granularity + 1
    with pytest.raises(AggregationError, match=r"leave \[0, n\*g\]"):
        comp.decode(prep, sums, 1, prep.norms)


@pytest.mark.parametrize("cfg", [RAW, TERN], ids=["no transform", "terngrad"])
def test_error_feedback_keeps_what_the_own_contribution_lost(cfg):
    """e = v - own decoded contribution (the memory absorbs rounding and, for TernGrad, clipping)."""
    cfg = dataclasses.replace(cfg, error_feedback=True)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(9))
    comp = THCCompressor(cfg)
    prep = comp.prepare(x, 0)
    idx = comp.encode(prep, prep.norms)
    own = comp.decode(prep, [comp.table.values[i] for i in idx], 1, prep.norms)
    torch.testing.assert_close(comp.feedback.memory, x - own, rtol=0, atol=0)
    second = comp.prepare(x, 1)
    torch.testing.assert_close(second.data, x + comp.feedback.memory, rtol=0, atol=0)
