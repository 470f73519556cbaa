"""THC keeps a gradient's scale: tiny, huge and subnormal gradients encode and decode like unit-scale ones.

A float32 sum of squares flushes |x| < ~1e-23 to a zero norm (the gradient then decoded to zeros, silently)
and overflows for |x| > ~1e19 (the gradient was refused). Tolerances follow test_compressor.py: the
table's predicted vNMSE (rounding variance + clipping error) within 10 % over 4 rounds of 2^13 coordinates.
"""

import math

import numpy as np
import pytest
import torch

from thc import THCCompressor, THCConfig, make_table
from thc.errors import GradientError
from thc.metrics import nmse, vnmse
from thc.tables import clipping_error

pytestmark = pytest.mark.usefixtures("one_torch_thread")

D = 2**13


def run_round(compressors, grads, step=0):
    """All workers prepare, max-reduce norms, encode, sum; every worker decodes (as in test_compressor.py)."""
    preps = [c.prepare(g, step) for c, g in zip(compressors, grads)]
    max_norms = torch.stack([p.norms for p in preps]).amax(0)
    indices = [c.encode(p, max_norms) for c, p in zip(compressors, preps)]
    sums = compressors[0].aggregate(indices)
    return [c.decode(p, sums, len(compressors), max_norms) for c, p in zip(compressors, preps)]


def unit_gradient(seed, d=D):
    return torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("scale", [1e-40, 1e-30, 1e-20, 1e-10, 1.0, 1e10, 1e20, 1e30, 3e38 / math.sqrt(D)])
def test_decode_error_is_the_tables_prediction_at_every_scale(scale):
    """1e-40 makes most values float32 subnormals; the last scale puts the norm at ~3e38, near float32's max."""
    expected = make_table().rounding_variance() + clipping_error(1 / 32)
    values = []
    for step in range(4):
        x = (unit_gradient(step) * scale).float()
        assert bool(torch.isfinite(x).all()) and float(x.abs().max()) > 0
        out = run_round([THCCompressor(THCConfig(chunk=D), 0)], [x], step=step)[0]
        assert bool(torch.isfinite(out).all())
        values.append(vnmse(x, out))
    assert abs(np.mean(values) / expected - 1) < 0.1, (scale, np.mean(values), expected)


@pytest.mark.parametrize("k", [-90, -40, 40, 90])
def test_a_gradient_scaled_by_a_power_of_two_decodes_to_exactly_that_multiple(k):
    """Encode and decode work on v 2^-e with M 2^-e in [0.5, 1): the exponent of the data changes nothing else.

    Three workers of different scales, chunks of 1024 with a padded last one, error feedback on.
    """
    grads = [(unit_gradient(10 + i, 3000) * (1 + i)).float() for i in range(3)]
    cfg = THCConfig(chunk=1024, error_feedback=True)
    base = [THCCompressor(cfg, i) for i in range(3)]
    scaled = [THCCompressor(cfg, i) for i in range(3)]
    for step in range(2):
        want = run_round(base, grads, step)
        got = run_round(scaled, [g * 2.0**k for g in grads], step)
        for w, o in zip(want, got):
            assert torch.equal(o, w * 2.0**k)
    for b, s in zip(base, scaled):
        assert torch.equal(s.feedback.memory, b.feedback.memory * 2.0**k)


@pytest.mark.parametrize("scale", [1e-45, 1e-38, 1e-25, 1e-23, 1.0, 1e18, 1e30, 1e36])
def test_chunk_norms_are_the_float64_norms(scale):
    """The issue's example: randn(1000) * 1e-25 had norm 0. Several chunks, one of them short.

    At 1e-45 the norm itself is a float32 subnormal: equal to the float64 norm's float32 rounding, 1 unit.
    """
    x = (unit_gradient(3, 2500) * scale).float()
    prep = THCCompressor(THCConfig(chunk=1024)).prepare(x, 0)
    want = torch.stack([torch.linalg.vector_norm(x[i : i + 1024].double()) for i in range(0, 2500, 1024)])
    assert prep.norms.dtype == torch.float32 and bool((prep.norms > 0).all())
    torch.testing.assert_close(prep.norms, want.float(), rtol=1e-6, atol=2.0**-149)


def test_mixed_scales_across_workers_decode_within_the_prediction():
    """Max norm from the 1e20 worker, the 1e-20 one rounds at that scale too: NMSE = the one-worker vNMSE.

    (Error variance 2 v M^2 / 4 over a mean squared norm of M^2 / 2.)
    """
    expected = make_table().rounding_variance() + clipping_error(1 / 32)
    values = []
    for step in range(4):
        grads = [(unit_gradient(20 + step) * 1e20).float(), (unit_gradient(30 + step) * 1e-20).float()]
        out = run_round([THCCompressor(THCConfig(chunk=D), i) for i in range(2)], grads, step)[0]
        assert bool(torch.isfinite(out).all())
        values.append(nmse(grads, out))
    assert abs(np.mean(values) / expected - 1) < 0.1, (np.mean(values), expected)


@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30])
@pytest.mark.parametrize("bad,kind", [(float("nan"), "NaN"), (float("inf"), "Inf")])
def test_non_finite_values_are_named_at_every_scale(scale, bad, kind):
    """Tiny and huge chunks take the rescaled norm path; a NaN or Inf there must still be named."""
    x = (unit_gradient(4, 3000) * scale).float()
    x[2100] = bad
    with pytest.raises(GradientError, match=rf"{kind} at flat index 2100"):
        THCCompressor(THCConfig(chunk=1024)).prepare(x, 0)


def test_a_norm_beyond_float32_is_refused_with_its_value():
    with pytest.raises(GradientError, match=r"L2 norm 1\.2\d*e\+39 overflows float32.*scale the gradient down"):
        THCCompressor().prepare(torch.full((16,), 3e38), 0)


def test_float64_gradients_that_float32_cannot_carry_are_refused():
    """THC computes in float32: a float64 gradient below or above its range must not decode to zeros or Inf."""
    comp = THCCompressor(THCConfig(chunk=1024))
    with pytest.raises(GradientError, match=r"loses its scale in float32.*chunk 0 has L2 norm 3\.\d+e-49"):
        comp.prepare(unit_gradient(5, 1000) * 1e-50, 0)
    huge = unit_gradient(5, 1000)
    huge[17] = 1e50
    with pytest.raises(GradientError, match=r"value 1\.000e\+50 at flat index 17 does not fit float32"):
        comp.prepare(huge, 0)
    nan = unit_gradient(5, 1000)
    nan[3] = float("nan")
    with pytest.raises(GradientError, match="NaN at flat index 3"):
        comp.prepare(nan, 0)
    ok = unit_gradient(5, 1000) * 1e-30
    torch.testing.assert_close(
        comp.prepare(ok, 0).norms.double(), torch.linalg.vector_norm(ok).reshape(1), rtol=1e-6, atol=0
    )
