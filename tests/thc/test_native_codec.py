"""The native codec (thc/native/codec.c) against the numpy reference, bit for bit.

Both compressors get the same config and worker ids; the reference is built with the native codec
unloaded. Whole rounds are compared: every worker's indices, the sums, the decoded average (float bit
patterns) and the error-feedback memory, over sizes from 1 to 2^20, odd and padded chunks, every table
kind, full and partial contributor counts. Every random input is seeded from the test's name.

A compile error in codec.c fails these tests; only a machine without a C compiler skips them.
"""

from __future__ import annotations

import ctypes
import zlib

import numpy as np
import pytest
import torch

from tests.support.native import build_or_skip
from tests.thc.test_compressor import _max_norm_cases
from thc import THCCompressor, THCConfig, compressor
from thc import native as thc_native
from thc.config import PAPER_CHUNK
from thc.errors import AggregationError, GradientError
from thc.limits import TABLE_KINDS
from thc.packing import pack_indices
from thc.tables import table_from_values
from thc.workspace import Workspace

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", autouse=True)
def native_codec():
    """codec.c, built: a missing compiler skips, a compile error fails."""
    build_or_skip(thc_native.build)  # raises NativeUnavailable with the compiler's output
    assert thc_native.load() is not None, "THC_NATIVE=0 is set: these tests compare the native codec"


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def pair(config: THCConfig, worker_id: int, monkeypatch, reference=None) -> tuple[THCCompressor, THCCompressor]:
    """(native, numpy) compressors of one worker; with `reference` (a loaded codec.c), that codec's instead
    of numpy's as the second."""
    fast = THCCompressor(config, worker_id=worker_id)
    assert fast.native
    with monkeypatch.context() as m:
        m.setattr(compressor, "load_native", lambda: reference)
        slow = THCCompressor(config, worker_id=worker_id)
    assert slow.native == (reference is not None)
    return fast, slow


def same_bits(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))
        )
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def gradients(name: str, numel: int, workers: int) -> list[torch.Tensor]:
    """Per worker a gradient whose scale varies by coordinate and by worker (heavy tails, zeros)."""
    rng = rng_for(name)
    out = []
    for _ in range(workers):
        g = rng.standard_normal(numel) * np.exp(rng.normal(0, 2, numel)) * 10.0 ** rng.integers(-6, 6)
        g[rng.random(numel) < 0.05] = 0.0
        out.append(torch.from_numpy(g.astype(np.float32)))
    return out


def compare_rounds(
    name, config, numel, monkeypatch, workers=3, steps=(0, 1), counted=False, partial=False, reference=None
):
    """Whole rounds on both paths (numpy's, or the `reference` codec's); asserts every output is bit for bit
    the same."""
    comps = [pair(config, i, monkeypatch, reference) for i in range(workers)]
    rng = rng_for(name + "/counts")
    for step in steps:
        grads = gradients(f"{name}/{step}", numel, workers)
        preps = [[c.prepare(g, step, key=3) for c in both] for both, g in zip(comps, grads)]
        norms = torch.stack([p[0].norms for p in preps])
        assert same_bits(norms, torch.stack([p[1].norms for p in preps]))
        # partial: the max norm of a subset of the workers, so some workers' own norms lie above it
        max_norms = norms[:-1].amax(0) if partial else norms.amax(0)
        indices = []
        for (fast, slow), (pf, ps) in zip(comps, preps):
            got, want = fast.encode(pf, max_norms, partial=partial), slow.encode(ps, max_norms, partial=partial)
            assert len(got) == len(want) and all(same_bits(a, b) for a, b in zip(got, want)), name
            indices.append(got)
            if config.error_feedback:
                assert same_bits(fast.feedback.memory, slow.feedback.memory), name
        fast, slow = comps[0]
        sums = fast.aggregate(indices)
        if counted:  # a random run of each chunk's coordinates lost the last worker's contribution
            fewer = fast.aggregate(indices[:-1])
            n = []
            for c, (full, part) in enumerate(zip(sums, fewer)):
                lo = int(rng.integers(0, full.size))
                hi = int(rng.integers(lo, full.size + 1))
                sums[c] = np.concatenate([full[:lo], part[lo:hi], full[hi:]])
                n.append(
                    np.concatenate(
                        [np.full(lo, workers), np.full(hi - lo, workers - 1), np.full(full.size - hi, workers)]
                    )
                )
        else:
            n = workers
        got = fast.decode(preps[0][0], sums, n, max_norms)
        want = slow.decode(preps[0][1], sums, n, max_norms)
        assert same_bits(got, want), name


SIZES = [1, 2, 3, 7, 8, 9, 1000, 1023, 1025, 4097, 2**14, 2**14 + 1, 100_003]


@pytest.mark.parametrize("numel", SIZES)
def test_rounds_are_bit_identical_over_sizes(numel, monkeypatch):
    compare_rounds(f"sizes {numel}", THCConfig(chunk=PAPER_CHUNK), numel, monkeypatch)


@pytest.mark.parametrize("numel", [2**20, 2**20 + 3])
def test_rounds_are_bit_identical_at_a_million_coordinates(numel, monkeypatch):
    compare_rounds(f"million {numel}", THCConfig(chunk=PAPER_CHUNK), numel, monkeypatch, workers=2, steps=(4,))


@pytest.mark.parametrize("chunk", [2, 1024, 2**11, 2**13])
@pytest.mark.parametrize("numel", [5, 3000, 40_000])
def test_rounds_are_bit_identical_with_many_chunks(chunk, numel, monkeypatch):
    compare_rounds(f"chunks {chunk} {numel}", THCConfig(chunk=chunk, seed=11), numel, monkeypatch)


@pytest.mark.parametrize("kind", TABLE_KINDS)
@pytest.mark.parametrize("bits", [1, 2, 3, 4, 6, 8])
def test_every_table_kind_and_width(kind, bits, monkeypatch):
    g = 2 * (2**bits - 1) if bits < 8 else 254
    config = THCConfig(bits=bits, granularity=g, table=kind, chunk=2048)
    compare_rounds(f"table {kind} {bits}", config, 5000, monkeypatch)


def test_a_custom_table_with_duplicate_values(monkeypatch):
    table = table_from_values([0, 0, 3, 7, 7, 11, 14, 14], clip=1 / 16)
    config = THCConfig(bits=3, granularity=14, clip=1 / 16, table=table, chunk=1024)
    compare_rounds("custom table", config, 3000, monkeypatch)


@pytest.mark.parametrize("numel", [1, 1000, 5000, 2**14 + 7])
def test_error_feedback_memory_is_bit_identical(numel, monkeypatch):
    config = THCConfig(chunk=2048, error_feedback=True, seed=5)
    compare_rounds(f"feedback {numel}", config, numel, monkeypatch, steps=(0, 1, 2))


@pytest.mark.parametrize("numel", [1, 3000, 2**14, 2**18 + 5])
def test_per_coordinate_counts_decode_bit_identically(numel, monkeypatch):
    compare_rounds(f"counted {numel}", THCConfig(chunk=2**17), numel, monkeypatch, counted=True)


def test_a_partial_norm_round_encodes_bit_identically(monkeypatch):
    config = THCConfig(chunk=1024, error_feedback=True)
    compare_rounds("partial", config, 5000, monkeypatch, steps=(0, 1), partial=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_gradient_dtypes(dtype, monkeypatch):
    fast, slow = pair(THCConfig(chunk=1024), 0, monkeypatch)
    g = gradients(f"dtype {dtype}", 3000, 1)[0].to(dtype)
    pf, ps = fast.prepare(g, 0), slow.prepare(g, 0)
    got, want = fast.encode(pf, pf.norms), slow.encode(ps, ps.norms)
    assert all(same_bits(a, b) for a, b in zip(got, want))
    sums = fast.aggregate([got, got])
    out_fast, out_slow = fast.decode(pf, sums, 2, pf.norms), slow.decode(ps, sums, 2, ps.norms)
    assert out_fast.dtype == dtype and same_bits(out_fast, out_slow)


def test_tiny_and_huge_scales(monkeypatch):
    for scale in (1e-40, 1e-30, 1e30, 1e36):
        fast, slow = pair(THCConfig(chunk=1024), 0, monkeypatch)
        g = torch.randn(2000, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * scale
        g = g.clamp(-3.4e38, 3.4e38).float()
        pf, ps = fast.prepare(g, 0), slow.prepare(g, 0)
        got, want = fast.encode(pf, pf.norms), slow.encode(ps, ps.norms)
        assert all(same_bits(a, b) for a, b in zip(got, want)), scale
        sums = fast.aggregate([got])
        assert same_bits(fast.decode(pf, sums, 1, pf.norms), slow.decode(ps, sums, 1, ps.norms)), scale


def test_zero_max_norms_and_a_zero_gradient(monkeypatch):
    fast, slow = pair(THCConfig(chunk=1024), 0, monkeypatch)
    g = torch.zeros(3000)
    pf, ps = fast.prepare(g, 0), slow.prepare(g, 0)
    got, want = fast.encode(pf, pf.norms), slow.encode(ps, ps.norms)
    assert all(same_bits(a, b) for a, b in zip(got, want))
    sums = fast.aggregate([got, got])
    assert same_bits(fast.decode(pf, sums, 2, pf.norms), slow.decode(ps, sums, 2, ps.norms))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_gradients_are_refused_as_before(bad, monkeypatch):
    fast, slow = pair(THCConfig(), 0, monkeypatch)
    g = torch.ones(100)
    g[17] = bad
    messages = []
    for comp in (fast, slow):
        with pytest.raises(GradientError) as info:
            comp.prepare(g, 0)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "flat index 17" in messages[0]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.int16])
def test_sums_out_of_range_are_refused_with_the_same_message(dtype, monkeypatch):
    fast, slow = pair(THCConfig(chunk=2**18), 0, monkeypatch)
    g = gradients(f"range {dtype}", 2**18 + 2**17, 1)[0]
    pf, ps = fast.prepare(g, 0), slow.prepare(g, 0)
    sums = [np.asarray(s, dtype=dtype) for s in fast.aggregate([fast.encode(pf, pf.norms)])]
    sums[0][2**17 + 5] = 200  # in chunk 0's second piece of 2^17; fits every dtype, above n g = 30
    if np.dtype(dtype).kind == "i":
        sums[1][3] = -1
    for n, wrong in ((1, sums), (2, sums)):
        messages = []
        for comp, prep in ((fast, pf), (slow, ps)):
            with pytest.raises(AggregationError, match="leave") as info:
                comp.decode(prep, wrong, n, prep.norms)
            messages.append(str(info.value))
        assert messages[0] == messages[1]
    counts = [np.full(s.size, 1) for s in sums]
    messages = []
    for comp, prep in ((fast, pf), (slow, ps)):
        with pytest.raises(AggregationError, match="leave") as info:
            comp.decode(prep, sums, counts, prep.norms)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("bits", [1, 2, 4, 5, 8])
@pytest.mark.parametrize("numel", [1, 1000, 5000])
def test_encode_packed_writes_the_request_layout(bits, numel, monkeypatch):
    config = THCConfig(bits=bits, granularity=2 * (2**bits - 1) if bits < 8 else 254, chunk=2048, error_feedback=True)
    fast, slow = pair(config, 1, monkeypatch)
    ref, _ = pair(config, 1, monkeypatch)
    per_packet = 1024
    g = gradients(f"packed {bits} {numel}", numel, 1)[0]
    for step in (0, 1):
        pf, ps, pr = fast.prepare(g, step), slow.prepare(g, step), ref.prepare(g, step)
        size = fast.packed_bytes(pf, per_packet)
        got, want = np.full(size + 3, 0xAB, np.uint8), np.full(size + 3, 0xAB, np.uint8)
        lengths = fast.encode_packed(pf, pf.norms, got, per_packet)
        assert lengths == slow.encode_packed(ps, ps.norms, want, per_packet) == [c.padded for c in pf.chunks]
        assert same_bits(got, want) and (got[size:] == 0xAB).all()
        expected = []
        for idx in ref.encode(pr, pr.norms):  # the same indices, padded per chunk and packed by thc.packing
            span = -(-idx.size // per_packet) * per_packet
            expected.append(pack_indices(np.concatenate([idx, np.zeros(span - idx.size, np.uint8)]), bits))
        assert same_bits(got[:size], np.concatenate(expected))
        assert same_bits(fast.feedback.memory, slow.feedback.memory)
        assert same_bits(fast.feedback.memory, ref.feedback.memory)


def test_stream_keys_of_more_than_one_word_and_back(monkeypatch):
    """The codec's key buffers take one word an entry; steps, keys, worker ids and seeds past 2^32 take
    arrays of their own, and the buffers serve again after them: every round as numpy's."""
    for seed, worker in ((5, 2**34 + 1), (2**40 + 3, 1)):
        fast, slow = pair(THCConfig(chunk=1024, seed=seed), worker, monkeypatch)
        g = gradients(f"wide keys {seed}", 3000, 1)[0]
        for step, key in ((1, 2), (2**33 + 5, 2**32 + 1), (3, 4), (7, 2**45)):
            pf, ps = fast.prepare(g, step, key=key), slow.prepare(g, step, key=key)
            got, want = fast.encode(pf, pf.norms), slow.encode(ps, ps.norms)
            assert all(same_bits(a, b) for a, b in zip(got, want)), (seed, step, key)
            sums = fast.aggregate([got])
            assert same_bits(fast.decode(pf, sums, 1, pf.norms), slow.decode(ps, sums, 1, ps.norms)), (step, key)


def test_compressors_sharing_a_workspace_that_grows_between_their_calls(monkeypatch):
    """The codec keeps its scratch addresses while the workspace keeps its buffers: a compressor of wider
    chunks growing them in between (or a clear) must not leave the other one writing where they were."""
    ws = Workspace()
    narrow, wide = THCCompressor(THCConfig(chunk=1024), workspace=ws), THCCompressor(THCConfig(), workspace=ws)
    with monkeypatch.context() as m:  # numpy's
        m.setattr(compressor, "load_native", lambda: None)
        ref = THCCompressor(THCConfig(chunk=1024))
    g, big = gradients("shared workspace", 5000, 1)[0], gradients("wide", 2**18, 1)[0]
    for step, between in enumerate(("wide", "clear", "wide")):
        prep, want_prep = narrow.prepare(g, step), ref.prepare(g, step)
        got, want = narrow.encode(prep, prep.norms), ref.encode(want_prep, want_prep.norms)
        assert all(same_bits(a, b) for a, b in zip(got, want))
        if between == "wide":  # its chunks of 2^17 grow the shared scratch buffers
            wide_prep = wide.prepare(big * (step + 1), step)
            wide.encode(wide_prep, wide_prep.norms)
        else:
            ws.clear()
        sums = narrow.aggregate([got, got])
        assert same_bits(narrow.decode(prep, sums, 2, prep.norms), ref.decode(want_prep, sums, 2, want_prep.norms))


def test_the_request_layout_follows_per_packet_and_still_refuses_bad_ones(monkeypatch):
    """The layout is kept per gradient size and per_packet: another per_packet gets its own, and a value
    refused once (or True, equal to 1) is refused every time."""
    fast, slow = pair(THCConfig(chunk=2048), 0, monkeypatch)
    g = gradients("layouts", 5000, 1)[0]
    pf, ps = fast.prepare(g, 1), slow.prepare(g, 1)
    for per_packet, size in ((1024, 2560), (8, 2560), (1024, 2560), (4096, 6144)):  # chunks padded 2048, 2048, 1024
        got, want = (np.zeros(comp.packed_bytes(p, per_packet), np.uint8) for comp, p in ((fast, pf), (slow, ps)))
        assert got.size == want.size == size
        fast.encode_packed(pf, pf.norms, got, per_packet)
        slow.encode_packed(ps, ps.norms, want, per_packet)
        assert same_bits(got, want)
    for bad in (True, 3, 0, 1.0):
        for _ in range(2):
            with pytest.raises(AggregationError, match="per_packet"):
                fast.packed_bytes(pf, bad)


@pytest.mark.parametrize("partial", [False, True])
def test_max_norms_read_by_the_codec_are_refused_as_numpy_refuses_them(partial, monkeypatch):
    """encode_packed and decode_lanes hand float32/float64 tensors of max norms to codec.c, which checks them as
    it reads them; every kind of max norms gives what the numpy path gives: the same bits or the same error."""
    fast, slow, pf, ps = lanes_pair(f"direct norms {partial}", monkeypatch)
    lanes = flat_lanes(fast.aggregate([fast.encode(pf, pf.norms)] * 2), 1024, 0)
    outcomes = []
    for comp, prep in ((fast, pf), (slow, ps)):
        seen = {}
        for name, max_norms in _max_norm_cases(prep.norms).items():
            for call in ("encode", "decode"):
                try:
                    if call == "encode":
                        got = np.zeros(comp.packed_bytes(prep, 1024), np.uint8)
                        comp.encode_packed(prep, max_norms, got, 1024, partial=partial)
                    else:
                        got = comp.decode_lanes(prep, lanes, 1024, 2, max_norms, out=torch.empty(5000)).numpy()
                    seen[name, call] = got.tobytes()
                except AggregationError as exc:
                    seen[name, call] = str(exc)
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    assert isinstance(outcomes[0]["just below it", "encode"], str) != partial
    assert isinstance(outcomes[0]["nan", "decode"], str) and isinstance(outcomes[0]["negative", "encode"], str)


def test_encode_packed_refuses_a_layout_that_splits_bytes(monkeypatch):
    fast, _ = pair(THCConfig(bits=3, granularity=14), 0, monkeypatch)
    prep = fast.prepare(torch.ones(100), 0)
    with pytest.raises(AggregationError, match="whole bytes"):
        fast.encode_packed(prep, prep.norms, np.zeros(1000, np.uint8), 3)
    with pytest.raises(AggregationError, match="at least"):
        fast.encode_packed(prep, prep.norms, np.zeros(10, np.uint8), 8)


def lanes_pair(name: str, monkeypatch):
    """The native and numpy compressors (chunks of 2,048) and each one's prepared 5,000-coordinate gradient."""
    fast, slow = pair(THCConfig(chunk=2048), 0, monkeypatch)
    g = gradients(name, 5000, 1)[0]
    return fast, slow, fast.prepare(g, 2), slow.prepare(g, 2)


def flat_lanes(sums, per_packet: int, fill: int) -> np.ndarray:
    """Per-chunk sums as one int32 array in the requests' layout: each chunk padded (with `fill`) to whole
    requests of per_packet."""
    spans = [-(-s.size // per_packet) * per_packet for s in sums]
    lanes = np.full(sum(spans), fill, np.int32)
    at = 0
    for s, span in zip(sums, spans):
        lanes[at : at + s.size] = s
        at += span
    return lanes


@pytest.mark.parametrize("counted", [False, True])
def test_decode_lanes_reads_the_flat_int32_sums_in_place(counted, monkeypatch):
    fast, slow, pf, ps = lanes_pair(f"lanes {counted}", monkeypatch)
    per_packet = 1024
    sums = fast.aggregate([fast.encode(pf, pf.norms)] * 3)
    lanes = flat_lanes(sums, per_packet, 7)  # the padding between chunks is never read
    n = [np.full(s.size, 3) for s in sums] if counted else 3
    want = slow.decode(ps, sums, n, ps.norms)
    assert same_bits(fast.decode_lanes(pf, lanes, per_packet, n, pf.norms), want)
    assert same_bits(slow.decode_lanes(ps, lanes, per_packet, n, ps.norms), want)
    out = torch.empty(5000)
    assert fast.decode_lanes(pf, lanes, per_packet, n, pf.norms, out=out) is out and same_bits(out, want)


def test_decode_lanes_follows_the_lanes_it_is_given(monkeypatch):
    """The codec keeps its row pointers while the lanes stay where they were: new values in the same buffer,
    another buffer, another per_packet and a decode of per-chunk sums in between all decode as numpy's."""
    fast, slow, pf, ps = lanes_pair("lanes reused", monkeypatch)
    sums = fast.aggregate([fast.encode(pf, pf.norms)] * 3)
    other = fast.aggregate([fast.encode(pf, pf.norms * 2)] * 3)
    buffer = flat_lanes(sums, 1024, 0)
    out = torch.empty(5000)
    cases = ((sums, 1024, False), (other, 1024, False), (sums, 1024, True), (other, 512, True))
    for values, per_packet, fresh in cases:
        lanes = flat_lanes(values, per_packet, 0)
        if not fresh:  # into the same buffer
            buffer[:] = lanes
            lanes = buffer
        want = slow.decode(ps, values, 3, ps.norms)
        assert same_bits(fast.decode_lanes(pf, lanes, per_packet, 3, pf.norms, out=out), want)
        assert same_bits(fast.decode(pf, values, 3, pf.norms), want)  # per-chunk rows in between


@pytest.mark.parametrize("chunk", [0, 2])
def test_decode_lanes_into_the_bucket_refuses_sums_out_of_range_as_decode_does(chunk, monkeypatch):
    """decode_lanes' one-call path (int32 lanes, one count, out given) words a bad sum as decode does."""
    fast, slow, pf, ps = lanes_pair(f"lanes range {chunk}", monkeypatch)
    per_packet = 1024
    sums = [s.astype(np.int32) for s in fast.aggregate([fast.encode(pf, pf.norms)] * 2)]
    sums[chunk][7] = 61  # above n g = 60
    lanes = flat_lanes(sums, per_packet, 0)
    messages = []
    for comp, prep in ((fast, pf), (slow, ps)):
        with pytest.raises(AggregationError, match="leave") as info:
            comp.decode_lanes(prep, lanes, per_packet, 2, prep.norms, out=torch.empty(5000))
        messages.append(str(info.value))
    with pytest.raises(AggregationError, match="leave") as info:
        slow.decode(ps, sums, 2, ps.norms)
    assert messages[0] == messages[1] == str(info.value) and f"chunk {chunk} " in messages[0]


@pytest.fixture(scope="module")
def scalar_codec() -> ctypes.CDLL:
    """codec.c built with its scalar loops only (-DTHC_NO_AVX2), whatever this CPU has."""
    return thc_native.declare(ctypes.CDLL(str(thc_native.build(scalar=True))))


def test_the_optimised_build_targets_avx2_where_the_cpu_has_it():
    """Where this CPU has AVX2 the codec under test runs codec.c's AVX2 loops (the scalar build, below, is
    compared with it), elsewhere its scalar loops (then compared with numpy's by every test above)."""
    with open("/proc/cpuinfo") as info:
        avx2 = " avx2" in info.read()
    assert ("-mavx2" in thc_native.flags()) == avx2
    assert "-DTHC_NO_AVX2" in thc_native.flags(scalar=True) and "-DTHC_NO_AVX2" not in thc_native.flags()


# sizes around the vector loops' widths (8 coordinates, the transform's 32) and the rounding's chain blocks
SCALAR_CASES = [
    (1, 2048, "optimal", 4),
    (7, 2048, "optimal", 4),
    (37, 2048, "optimal", 4),
    (1000, 1024, "optimal", 4),
    (5000, 2048, "optimal", 4),
    (2**14 + 7, 2048, "optimal", 4),
    (3 * 2**17 + 5, PAPER_CHUNK, "optimal", 4),
    (3000, 1024, "uniform", 2),
    (3000, 1024, "optimal", 8),
    (4097, 4096, "optimal", 1),
]


@pytest.mark.parametrize("numel, chunk, kind, bits", SCALAR_CASES)
def test_the_scalar_and_vector_loops_give_the_same_bits(numel, chunk, kind, bits, scalar_codec, monkeypatch):
    g = 2 * (2**bits - 1) if bits < 8 else 254
    config = THCConfig(bits=bits, granularity=g, table=kind, chunk=chunk, error_feedback=numel % 2 == 1)
    name = f"scalar {numel} {chunk} {kind} {bits}"
    compare_rounds(name, config, numel, monkeypatch, reference=scalar_codec, counted=numel == 5000)
    # and packed, as the workers send them (the vector path packs 4-bit indices 32 at a time)
    fast, slow = pair(config, 2, monkeypatch, scalar_codec)
    g = gradients(name + "/packed", numel, 1)[0]
    pf, ps = fast.prepare(g, 9), slow.prepare(g, 9)
    got, want = (np.zeros(fast.packed_bytes(pf, 1024), np.uint8) for _ in range(2))
    fast.encode_packed(pf, pf.norms, got, 1024)
    slow.encode_packed(ps, ps.norms, want, 1024)
    assert same_bits(got, want)


def test_terngrad_and_no_transform_stay_on_numpy():
    terngrad = THCConfig(quantizer="terngrad", bits=2, granularity=2, table="uniform", transform=False)
    assert not THCCompressor(terngrad).native
    assert not THCCompressor(THCConfig(transform=False)).native
    assert THCCompressor(THCConfig()).native


def test_no_compiler_falls_back_with_one_notice_and_THC_NATIVE_1_refuses(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("THC_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(thc_native, "_lib", None)
    monkeypatch.setattr(thc_native, "_tried", False)
    monkeypatch.setenv("THC_NATIVE", "1")
    with pytest.raises(thc_native.NativeUnavailable, match="gcc"):
        thc_native.load()
    monkeypatch.delenv("THC_NATIVE")
    assert not THCCompressor(THCConfig()).native and not THCCompressor(THCConfig()).native
    notices = [line for line in capsys.readouterr().err.splitlines() if "in numpy" in line]
    assert len(notices) == 1 and "gcc" in notices[0]
    monkeypatch.setattr(thc_native, "_tried", False)
    monkeypatch.setenv("THC_NATIVE", "0")
    assert thc_native.load() is None and capsys.readouterr().err == ""
