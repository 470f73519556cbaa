"""codec.c under AddressSanitizer and UBSan: a few thousand random encodes and decodes, never a report.

The child Python (tests.support.sanitizers: the ASan runtime preloaded, UBSan halting on its first report)
builds the codec with the sanitizers (THC_NATIVE_SANITIZE=1; =avx2 for its AVX2 loops) and runs random
configs, sizes, scales, stream keys wider than 32 bits, max norms below the worker's own (partial rounds),
packed outputs, flat int32 sums, per-coordinate counts and sums out of range. Bounded work; seeded from
the test's name.
"""

import pytest

from tests.support import sanitizers
from thc import native as thc_native

FUZZ_CHILD = r"""
import sys, zlib
import numpy as np
import torch
from thc import THCCompressor, THCConfig
from thc.errors import AggregationError
from thc.limits import TABLE_KINDS

rng = np.random.default_rng(zlib.crc32(sys.argv[1].encode()))
total, done = int(sys.argv[2]), 0
while done < total:
    bits = int(rng.integers(1, 9))
    g = int(rng.choice([2**bits - 1, 2 * (2**bits - 1), 255 if bits == 8 else 2**bits + 3]))
    chunk = 2 ** int(rng.integers(1, 14))
    config = THCConfig(bits=bits, granularity=g, table=str(rng.choice(TABLE_KINDS)), chunk=chunk,
                       seed=int(rng.integers(0, 2**62)), error_feedback=bool(rng.integers(0, 2)))
    comp = THCCompressor(config, worker_id=int(rng.integers(0, 2**34)))
    assert comp.native, "the sanitized codec did not load"
    for _ in range(20):
        numel = int(rng.integers(1, 6000))
        x = rng.standard_normal(numel) * np.exp(rng.normal(0, 3, numel)) * 10.0 ** float(rng.integers(-30, 30))
        x[rng.random(numel) < 0.1] = 0.0
        prep = comp.prepare(torch.from_numpy(np.clip(x, -1e30, 1e30).astype(np.float32)),
                            int(rng.integers(0, 2**40)), key=int(rng.integers(0, 2**40)))
        m = prep.norms.double() * torch.from_numpy(rng.choice([0.0, 1e-20, 0.5, 1.0, 3.0], len(prep.chunks)))
        idx = comp.encode(prep, m, partial=True)
        per_packet = 8 * int(rng.integers(1, 200))
        out = np.zeros(comp.packed_bytes(prep, per_packet), np.uint8)
        comp.encode_packed(prep, m, out, per_packet, partial=True)
        n = int(rng.integers(1, 9))
        top = n * g
        sums = [rng.integers(0, top + 1, i.size).astype(rng.choice([np.int32, np.int64, np.uint16])) for i in idx]
        if rng.random() < 0.3:  # one sum out of range
            c = int(rng.integers(0, len(sums)))
            sums[c][int(rng.integers(0, sums[c].size))] = top + 1
        counts = n if rng.random() < 0.7 else [rng.integers(1, n + 1, s.size) for s in sums]
        try:
            comp.decode(prep, sums, counts, m)
        except AggregationError:
            pass
        spans = [-(-s.size // per_packet) * per_packet for s in sums]
        lanes = rng.integers(-3, top + 1, sum(spans)).astype(np.int32)
        try:
            comp.decode_lanes(prep, lanes, per_packet, n, m, out=torch.empty(numel))
        except AggregationError:
            pass
        done += 1
print(f"fuzzed {done}")
"""

ROUNDS = 2000


@pytest.mark.parametrize("build", ["1", "avx2"])
def test_the_codec_is_clean_under_asan_and_ubsan(build, tmp_path, monkeypatch):
    """Its scalar loops (the sanitized build has no -mavx2), and where the CPU has AVX2 its AVX2 loops too
    (THC_NATIVE_SANITIZE=avx2; a quarter of the rounds: the vector loops and their tails are what is new)."""
    if build == "avx2" and thc_native.flags(vector=True) == thc_native.flags(vector=False):
        pytest.skip("this CPU has no AVX2: codec.c's AVX2 loops are not built here")
    rounds = ROUNDS if build == "1" else ROUNDS // 4
    monkeypatch.setenv("THC_NATIVE", "1")  # the child's build must not fall back to numpy
    monkeypatch.setenv("THC_NATIVE_SANITIZE", build)
    proc = sanitizers.run_sanitized(FUZZ_CHILD, "native codec fuzz", str(rounds), cache=tmp_path / "cache", timeout=900)
    sanitizers.assert_clean(proc, rounds)
