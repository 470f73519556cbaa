"""THC encode/decode: shapes, statistics (unbiasedness, known errors, 1/n shrinkage), error feedback, bad input.

Statistical assertions use fixed seeds and tolerances of 6 standard errors estimated from the samples.
"""

import math

import numpy as np
import pytest
import torch

import thc.compressor
import thc.parallel
from tests.support.torch_threads import torch_threads
from thc import THCCompressor, THCConfig, make_table
from thc.chunking import group_chunks, plan_chunks
from thc.errors import AggregationError, ConfigError, GradientError, THCError
from thc.hadamard import randomized_hadamard
from thc.metrics import nmse, vnmse
from thc.quantize import TableQuantizer
from thc.tables import clipping_error

SIGMAS = 6.0


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_round(compressors, grads, step=0, contributors=None):
    """All workers prepare, max-reduce norms, encode; the first ``contributors`` are summed; worker 0 decodes."""
    preps = [c.prepare(g, step) for c, g in zip(compressors, grads)]
    max_norms = torch.stack([p.norms for p in preps]).amax(0)
    indices = [c.encode(p, max_norms) for c, p in zip(compressors, preps)]
    k = len(compressors) if contributors is None else contributors
    sums = compressors[0].aggregate(indices[:k])
    return [c.decode(p, sums, k, max_norms) for c, p in zip(compressors, preps)]


def workers(n, **kw):
    cfg = THCConfig(**kw)
    return [THCCompressor(cfg, worker_id=i) for i in range(n)]


# ---------------------------------------------------------------------------------------------- plumbing
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1,), (3, 5), (5000,), (3328,), (2, 3, 4, 64)])
def test_round_trip_keeps_shape_and_dtype_and_all_workers_agree(dtype, shape):
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(shape, generator=gen).to(dtype) for _ in range(3)]
    outs = run_round(workers(3, chunk=1024), grads)
    for out in outs:
        assert out.shape == grads[0].shape and out.dtype == dtype
        assert torch.equal(out, outs[0])  # the sums and the max norm fully determine the result


def test_decode_into_a_given_tensor():
    x = torch.randn(3, 700, generator=torch.Generator().manual_seed(13))
    comp = THCCompressor(THCConfig(chunk=1024))
    prep = comp.prepare(x, 0)
    sums = comp.aggregate([comp.encode(prep, prep.norms)])
    expected = comp.decode(prep, sums, 1, prep.norms)
    for out in (torch.empty(3, 700), torch.empty(2100, dtype=torch.float64), torch.empty(700, 3).t()):
        assert comp.decode(prep, sums, 1, prep.norms, out=out) is out
        torch.testing.assert_close(out.reshape(3, 700).float(), expected)
    with pytest.raises(AggregationError, match="2100"):
        comp.decode(prep, sums, 1, prep.norms, out=torch.empty(5))


def test_chunks_are_padded_to_powers_of_two():
    comp = THCCompressor(THCConfig(chunk=1024))
    prep = comp.prepare(torch.randn(5000), step=0)
    assert prep.chunk_sizes == [1024, 1024, 1024, 1024, 1024] and prep.numel == 5000
    assert prep.norms.dtype == torch.float32 and prep.norms.shape == (5,)
    prep = comp.prepare(torch.randn(4100), step=0)
    assert prep.chunk_sizes == [1024, 1024, 1024, 1024, 4]
    indices = comp.encode(prep, prep.norms)
    assert [i.size for i in indices] == prep.chunk_sizes and all(i.dtype == np.uint8 for i in indices)


def test_full_chunks_are_batched_and_padded_ones_stand_alone():
    chunks = plan_chunks(3 * 1024 + 256, 1024)
    assert [(g.count, g.padded) for g in group_chunks(chunks)] == [(3, 1024), (1, 256)]
    chunks = plan_chunks(2 * 1024 + 300, 1024)
    assert [(g.count, g.padded, g.size) for g in group_chunks(chunks)] == [(2, 1024, 2048), (1, 512, 512)]
    chunks = plan_chunks(5 * 1024, 1024)
    assert [g.count for g in group_chunks(chunks, max_group=2048)] == [2, 2, 1]


@pytest.mark.parametrize("max_group", [None, 2048])
def test_batched_chunks_encode_like_each_chunk_by_hand(monkeypatch, max_group):
    """Each chunk's indices follow from its own data, signs and rounding stream, whatever its batch-mates."""
    import functools

    import thc.compressor
    from thc.compressor import _ROUND_DOMAIN
    from thc.hadamard import fwht, sign_bits, sign_mask

    if max_group:
        monkeypatch.setattr(thc.compressor, "group_chunks", functools.partial(group_chunks, max_group=max_group))

    x = torch.randn(3 * 1024 + 300, generator=torch.Generator().manual_seed(6))
    cfg = THCConfig(chunk=1024, seed=4)
    comp = THCCompressor(cfg, worker_id=2)
    prep = comp.prepare(x, step=3, key=5)
    max_norms = prep.norms * 1.5
    got = comp.encode(prep, max_norms)
    table = comp.table
    for c in prep.chunks:
        v = torch.zeros(c.padded)
        v[: c.length] = x[c.start : c.stop]
        signs = 1.0 - 2.0 * torch.from_numpy(
            (sign_mask(sign_bits(4, 3, 5, c.index, c.padded), c.padded) >> 31).astype(np.float32)
        )
        u = (fwht(v * signs) / (float(max_norms[c.index]) * table.inc) + table.granularity / 2).numpy()
        seed = np.random.SeedSequence(entropy=4, spawn_key=(_ROUND_DOMAIN, 2, 5, 3, c.index))
        expected = TableQuantizer(table).quantize_(u.astype(np.float32), seed)
        # float rounding may move a value across a cell boundary: allow a handful of differences by one step
        diff = np.abs(got[c.index].astype(int) - expected.astype(int))
        assert diff.max() <= 1 and np.count_nonzero(diff) <= 3, (c, np.count_nonzero(diff))


def test_encode_is_deterministic_per_worker_and_independent_across_workers():
    x = torch.randn(4096, generator=torch.Generator().manual_seed(3))
    a, b = THCCompressor(THCConfig(), 0), THCCompressor(THCConfig(), 1)
    pa, pb = a.prepare(x, 5), b.prepare(x, 5)
    ia, ia2, ib = a.encode(pa, pa.norms)[0], a.encode(a.prepare(x, 5), pa.norms)[0], b.encode(pb, pa.norms)[0]
    assert np.array_equal(ia, ia2)
    assert 0.2 < float(np.mean(ia != ib)) < 0.8  # same input, different rounding draws


def test_a_zero_norm_decodes_to_zeros():
    outs = run_round(workers(2), [torch.zeros(100), torch.zeros(100)])
    assert torch.equal(outs[0], torch.zeros(100))


def test_one_zero_worker_among_others_is_fine():
    x = torch.randn(2048, generator=torch.Generator().manual_seed(4))
    out = run_round(workers(2), [x, torch.zeros_like(x)])[0]
    assert nmse([x, torch.zeros_like(x)], out) < 0.05


# ------------------------------------------------------------------------------------------ statistics
def test_quantizer_is_unbiased_and_brackets_each_value():
    table = make_table()
    quantizer = TableQuantizer(table)
    u = np.random.default_rng(0).uniform(0, 30, 512).astype(np.float32)
    u[:4] = [0.0, 30.0, 15.0, 14.0]
    trials = 400
    draws = np.stack([table.values[quantizer.quantize_(u.copy(), np.random.SeedSequence(s))] for s in range(trials)])
    lower = table.values[np.searchsorted(table.values, u, side="right") - 1]
    upper = table.values[np.minimum(np.searchsorted(table.values, u, side="left"), 15)]
    assert np.all((draws == lower) | (draws == upper))
    # a two-point draw on [lower, upper] with mean u has variance (u - lower)(upper - u)
    se = np.sqrt((u - lower) * (upper - u) / trials)
    assert np.all(np.abs(draws.mean(0) - u) <= SIGMAS * se + 1e-5)
    assert np.all(draws[:, 0] == 0) and np.all(draws[:, 1] == 30) and np.all(draws[:, 3] == 14)
    assert set(np.unique(draws[:, 2]).tolist()) == {14, 16}  # 15 lies strictly between 14 and 16


def test_quantizer_result_does_not_depend_on_blocks_or_threads(monkeypatch):
    quantizer = TableQuantizer(make_table())
    u = np.random.default_rng(1).uniform(0, 30, 10000).astype(np.float32)
    a = quantizer.quantize_(u.copy(), np.random.SeedSequence(9))
    monkeypatch.setattr(thc.parallel, "BLOCK", 256)
    assert np.array_equal(a, quantizer.quantize_(u.copy(), np.random.SeedSequence(9)))
    with torch_threads(2):  # several blocks on a thread pool
        assert np.array_equal(a, quantizer.quantize_(u.copy(), np.random.SeedSequence(9)))
    x = torch.randn(3000, generator=torch.Generator().manual_seed(2))
    outs = []
    for threads in (1, 2):
        with torch_threads(threads):
            outs.append(run_round(workers(2, chunk=1024), [x, -x])[0])
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("segment", [1, 8, 512, 2**17, 2**18])
def test_quantizer_segments_round_like_each_segment_alone(monkeypatch, segment):
    """Short segments share a block (one numpy pass, each with its own scale and stream); long ones span
    blocks. Either way a segment's indices are those it gets when quantized on its own."""
    quantizer = TableQuantizer(make_table())
    count = max(3, 2**18 // segment // 64)
    u = np.random.default_rng(segment).normal(0, 3, count * segment).astype(np.float32)
    seeds = [np.random.SeedSequence(5, spawn_key=(i,)) for i in range(count)]
    scales = [1.0 + i / count for i in range(count)]
    got = quantizer.quantize_(u.copy(), seeds, segment=segment, scales=scales, shift=15.0)
    for i in range(count):
        alone = quantizer.quantize_(u[i * segment : (i + 1) * segment].copy(), seeds[i], scales=[scales[i]], shift=15.0)
        assert np.array_equal(got[i * segment : (i + 1) * segment], alone), i


def test_per_coordinate_rounding_variance_and_clipping_error_at_the_default():
    """0.01307 and 0.00727 (thc.md), measured on 2^20 standard normal draws through the real quantizer."""
    table = make_table()
    z = np.random.default_rng(5).standard_normal(2**20)
    y = np.clip(z, -table.threshold, table.threshold)
    u = (y / table.inc + table.granularity / 2).astype(np.float32)
    y_hat = table.levels[TableQuantizer(table).quantize_(u, np.random.SeedSequence(6))]
    rounding, clipping = (y_hat - y) ** 2, (z - y) ** 2
    for sample, expected in [(rounding, 0.01307), (clipping, 0.00727)]:
        se = sample.std(ddof=1) / math.sqrt(sample.size)
        assert abs(sample.mean() - expected) <= SIGMAS * se + 5e-6, (sample.mean(), expected, se)
    assert table.rounding_variance() == pytest.approx(0.01307, abs=5e-6)


def test_single_worker_vnmse_on_gaussian_data_is_rounding_plus_clipping():
    expected = make_table().rounding_variance() + clipping_error(1 / 32)  # 0.02034
    d, values = 2**14, []
    gen = torch.Generator().manual_seed(7)
    for trial in range(8):
        x = torch.randn(d, generator=gen)
        comp = THCCompressor(THCConfig(), 0)
        values.append(vnmse(x, run_round([comp], [x], step=trial)[0]))
    mean, se = np.mean(values), np.std(values, ddof=1) / math.sqrt(len(values))
    assert abs(mean - expected) <= SIGMAS * se + 1e-4, (mean, expected, se)


@pytest.mark.parametrize(
    "bits,g,kind",
    [
        (1, 1, "optimal"),
        (2, 6, "optimal"),
        (3, 9, "uniform"),
        (5, 62, "optimal"),
        (8, 300, "optimal"),
        (8, 255, "uniform"),
    ],
)
def test_every_bit_width_decodes_with_the_error_its_table_predicts(bits, g, kind):
    cfg = THCConfig(bits=bits, granularity=g, clip=1 / 32, table=kind, chunk=2**13)
    expected = make_table(bits, g, 1 / 32, kind).rounding_variance() + clipping_error(1 / 32)
    gen = torch.Generator().manual_seed(bits)
    values = []
    for step in range(4):
        x = torch.randn(2**13, generator=gen)
        values.append(vnmse(x, run_round([THCCompressor(cfg, 0)], [x], step=step)[0]))
    assert abs(np.mean(values) / expected - 1) < 0.1, (np.mean(values), expected)


def test_decoded_average_is_unbiased_when_nothing_is_clipped():
    """Tiny p makes T large enough that no coordinate is clipped, so only unbiased rounding remains."""
    d, trials, clip = 256, 200, 1e-9
    gen = torch.Generator().manual_seed(8)
    grads = [torch.randn(d, generator=gen) * (1 + i) for i in range(3)]
    table = make_table(4, 30, clip)
    for step in range(trials):  # check the premise: no coordinate of any RHT reaches T
        for g in grads:
            r = randomized_hadamard(g, seed=0, step=step)
            assert float(r.abs().max()) * math.sqrt(d) / max(float(x.norm()) for x in grads) < table.threshold
    comps = workers(3, clip=clip)
    outs = torch.stack([run_round(comps, grads, step=s)[0] for s in range(trials)]).double()
    truth = torch.stack(grads).double().mean(0)
    err_mean, se = outs.mean(0) - truth, outs.std(0) / math.sqrt(trials)
    assert bool((err_mean.abs() <= SIGMAS * se + 1e-6).all())


def test_error_of_the_average_shrinks_like_one_over_n_with_independent_streams():
    """Identical gradients on every worker and no clipping: only rounding error is left, and with independent
    streams it averages down as 1/n. A shared rounding stream would leave it flat."""
    d, clip, trials = 2**12, 1e-9, 6
    x = torch.randn(d, generator=torch.Generator().manual_seed(9))
    ratios = {}
    for n in (1, 8):
        values = [nmse([x] * n, run_round(workers(n, clip=clip), [x] * n, step=s)[0]) for s in range(trials)]
        ratios[n] = float(np.mean(values))
    assert 0.75 < 8 * ratios[8] / ratios[1] < 1.33, ratios


def test_nmse_with_independent_gradients_and_clipping_is_vnmse_over_n():
    d, n, trials = 2**13, 4, 4
    gen = torch.Generator().manual_seed(10)
    values = []
    for s in range(trials):
        grads = [torch.randn(d, generator=gen) for _ in range(n)]
        values.append(nmse(grads, run_round(workers(n), grads, step=s)[0]))
    expected = (make_table().rounding_variance() + clipping_error(1 / 32)) / n
    assert abs(np.mean(values) / expected - 1) < 0.1


def test_partial_aggregation_decodes_the_average_of_who_contributed():
    gen = torch.Generator().manual_seed(11)
    grads = [torch.randn(4096, generator=gen) for _ in range(3)]
    grads.append(-3 * grads[0])  # the straggler: its absence changes the mean a lot
    out = run_round(workers(4), grads, contributors=3)[0]
    mean3, mean4 = torch.stack(grads[:3]).mean(0), torch.stack(grads).mean(0)
    assert nmse(grads[:3], out) < 0.05  # ~3 x 0.011: the max norm is the straggler's, 3x the others'
    assert float((out - mean4).norm()) > 4 * float((out - mean3).norm())


# ------------------------------------------------------------------------------------------ error feedback
def test_error_feedback_telescopes_decoded_sum_plus_memory_equals_gradient_sum():
    gen = torch.Generator().manual_seed(12)
    comp = THCCompressor(THCConfig(error_feedback=True, chunk=1024), 0)
    grads = [torch.randn(3000, generator=gen) for _ in range(20)]
    decoded = torch.zeros(3000, dtype=torch.float64)
    for step, g in enumerate(grads):
        decoded += run_round([comp], [g], step=step)[0].double()
    total = torch.stack(grads).double().sum(0)
    torch.testing.assert_close(decoded + comp.feedback.memory.double(), total, rtol=0, atol=1e-3)
    # the memory stays bounded (one round's error), while the sum of errors without EF grows
    plain = THCCompressor(THCConfig(chunk=1024), 0)
    plain_sum = sum(run_round([plain], [g], step=s)[0].double() for s, g in enumerate(grads))
    assert float(comp.feedback.memory.norm()) < 0.5 * float((plain_sum - total).norm())


def test_error_feedback_recovers_a_clipped_spike_over_rounds():
    spike = torch.zeros(1024)
    spike[3] = 100.0
    spike[10:] = 0.01
    comp = THCCompressor(THCConfig(error_feedback=True), 0)
    got = sum(run_round([comp], [spike], step=s)[0] for s in range(40)) / 40
    assert abs(float(got[3]) - 100.0) < 5.0


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bad,kind", [(float("nan"), "NaN"), (float("inf"), "Inf"), (-float("inf"), "Inf")])
def test_non_finite_gradients_are_refused_naming_the_index(bad, kind):
    g = torch.randn(2000)
    g[1234] = bad
    with pytest.raises(GradientError, match=rf"{kind} at flat index 1234"):
        THCCompressor().prepare(g, 0)


def test_empty_and_unsupported_dtype_and_non_tensor():
    comp = THCCompressor()
    with pytest.raises(GradientError, match="empty"):
        comp.prepare(torch.zeros(0), 0)
    for dtype in (torch.int32, torch.int64, torch.bool, torch.complex64):
        with pytest.raises(GradientError, match="unsupported dtype"):
            comp.prepare(torch.zeros(4, dtype=dtype), 0)
    with pytest.raises(GradientError, match="torch.Tensor"):
        comp.prepare(np.zeros(4), 0)


def test_norm_overflow_is_reported():
    with pytest.raises(GradientError, match="overflows float32"):
        THCCompressor().prepare(torch.full((16,), 3e38), 0)


@pytest.mark.parametrize(
    "kwargs,word",
    [
        (dict(bits=0), "bits"),
        (dict(bits=9), "bits"),
        (dict(clip=0.0), "clip"),
        (dict(clip=1.0), "clip"),
        (dict(granularity=0), "granularity"),
        (dict(chunk=1000), "chunk"),
        (dict(table="best"), "table"),
        (dict(seed=-1), "seed"),
    ],
)
def test_config_checks(kwargs, word):
    with pytest.raises(ConfigError, match=word):
        THCConfig(**kwargs)


def test_protocol_mismatches_are_caught():
    comps = workers(2, chunk=1024)
    x = torch.randn(2048)
    preps = [c.prepare(x * (i + 1), 0) for i, c in enumerate(comps)]
    m = torch.stack([p.norms for p in preps]).amax(0)
    with pytest.raises(AggregationError, match="2 chunks"):
        comps[0].encode(preps[0], m[:1])
    with pytest.raises(AggregationError, match="below this worker's own norm"):
        comps[1].encode(preps[1], preps[0].norms)
    idx = [c.encode(p, m) for c, p in zip(comps, preps)]
    sums = comps[0].aggregate(idx)
    with pytest.raises(AggregationError, match=r"leave \[0, n\*g\] = \[0, 30\]"):
        comps[0].decode(preps[0], sums, 1, m)  # sums of two workers claimed as one
    negative = [s.copy() for s in sums]
    negative[1][7] = -1
    with pytest.raises(AggregationError, match=r"chunk 1 leave .* \(seen -1 to"):
        comps[0].decode(preps[0], negative, 2, m)
    with pytest.raises(AggregationError, match="contributors"):
        comps[0].decode(preps[0], sums, 0, m)
    with pytest.raises(AggregationError, match="shape"):
        comps[0].decode(preps[0], [s[:10] for s in sums], 2, m)
    with pytest.raises(AggregationError, match="integers"):
        comps[0].decode(preps[0], [s.astype(np.float32) for s in sums], 2, m)
    with pytest.raises(ConfigError, match="worker_id"):
        THCCompressor(THCConfig(), worker_id=-1)


def test_max_norms_checked_again_once_changed():
    """encode and decode of a round check the max norms once; a tensor changed in place since, or another
    tensor, is checked again."""
    comps = workers(2, chunk=1024)
    x = torch.randn(2048)
    preps = [c.prepare(x * (i + 1), 0) for i, c in enumerate(comps)]
    m = torch.stack([p.norms for p in preps]).amax(0)
    idx = [c.encode(p, m) for c, p in zip(comps, preps)]
    sums = comps[0].aggregate(idx)
    comps[0].decode(preps[0], sums, 2, m)
    m[1] = float("nan")
    with pytest.raises(AggregationError, match="finite and non-negative"):
        comps[0].decode(preps[0], sums, 2, m)
    with pytest.raises(AggregationError, match="below this worker's own norm"):
        comps[1].encode(preps[1], preps[0].norms)  # checked against the own norms, though seen before
    low = preps[0].norms.clone()
    comps[0].decode(preps[0], sums, 2, low)  # decode does not hold the max to the own norms
    with pytest.raises(AggregationError, match="below this worker's own norm"):
        comps[1].encode(preps[1], low * 0.5)
    assert issubclass(AggregationError, THCError)


def _max_norm_cases(own: torch.Tensor) -> dict[str, object]:
    """Max norms of every kind _check_norms takes: fine, at and just past the 1e-6 tolerance, non-finite,
    negative, -0, wrong counts and shapes, other dtypes, sequences."""
    edge = own.double() * (1 - 1e-6)
    nan, inf = own.clone(), own.clone()
    nan[-1], inf[0] = float("nan"), float("inf")
    negative, zero = own.clone(), own.clone()
    negative[1], zero[-1] = -1.0, -0.0
    return {
        "own": own,
        "above": own * 2,
        "at the tolerance": edge,
        "just below it": torch.from_numpy(np.nextafter(edge.numpy(), 0)),
        "nan": nan,
        "inf": inf,
        "negative": negative,
        "minus zero": zero,
        "too few": own[:-1],
        "2-D": own.reshape(-1, 1),
        "float16": (own * 2).half(),
        "list": (own * 2).tolist(),
        "numpy": (own * 2).numpy(),
    }


def test_bits_per_coordinate():
    bits = THCCompressor(THCConfig(chunk=2**20)).bits_per_coordinate(8)
    assert bits.up == pytest.approx(4, abs=1e-4) and bits.down == pytest.approx(8, abs=1e-4)
    assert THCCompressor(THCConfig(chunk=2**20)).bits_per_coordinate(9).down == pytest.approx(9, abs=1e-4)


def test_per_coordinate_counts_decode_each_part_with_its_own_contributors():
    """A switch that released some slots returns sums of fewer workers there: decoding with per-coordinate
    counts equals, coordinate block by block, decoding the same sums with that block's count (the decode
    is linear in S/n), and equal counts everywhere agree with the scalar count."""
    gen = torch.Generator().manual_seed(31)
    comps = workers(3, chunk=1024)
    grads = [torch.randn(2048, generator=gen) for _ in range(3)]
    preps = [c.prepare(g, 0) for c, g in zip(comps, grads)]
    max_norms = torch.stack([p.norms for p in preps]).amax(0)
    indices = [c.encode(p, max_norms) for c, p in zip(comps, preps)]
    full, two = comps[0].aggregate(indices), comps[0].aggregate(indices[:2])
    scalar3, scalar2 = comps[0].decode(preps[0], full, 3, max_norms), comps[0].decode(preps[0], two, 2, max_norms)
    same = comps[0].decode(preps[0], full, [np.full(1024, 3), np.full(1024, 3)], max_norms)
    # the two paths round S/n alpha differently (float64 then float32, against float32 S times float32 alpha):
    # about 6e-8 relative per input, which a 1024-point transform of unit-size values sums to a few 1e-6
    close = {"rtol": 1e-5, "atol": 5e-6}
    torch.testing.assert_close(same, scalar3, **close)
    # chunk 1 released with two workers: chunks are independent, so each half decodes as its own count
    released = comps[0].decode(preps[0], [full[0], two[1]], [np.full(1024, 3), np.full(1024, 2)], max_norms)
    torch.testing.assert_close(released[:1024], scalar3[:1024], **close)
    torch.testing.assert_close(released[1024:], scalar2[1024:], **close)
    # one packet of chunk 1 released: that chunk is neither average
    counts = [np.full(1024, 3), np.full(1024, 3)]
    counts[1][:64] = 2
    mixed = [full[0], np.concatenate([two[1][:64], full[1][64:]])]
    got = comps[0].decode(preps[0], mixed, counts, max_norms)
    torch.testing.assert_close(got[:1024], scalar3[:1024], **close)
    assert not torch.allclose(got[1024:], scalar3[1024:], atol=1e-6)
    assert not torch.allclose(got[1024:], scalar2[1024:], atol=1e-6)
    with pytest.raises(AggregationError, match="counts of chunk 1"):
        comps[0].decode(preps[0], mixed, [counts[0], counts[1][:10]], max_norms)
    with pytest.raises(AggregationError, match="leave"):
        comps[0].decode(preps[0], full, [np.full(1024, 1), np.full(1024, 1)], max_norms)
