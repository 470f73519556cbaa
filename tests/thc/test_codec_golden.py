"""THC's outputs pinned bit for bit: speed work on the codec must not change a single index or decoded bit.

Each case runs whole rounds (three workers prepare, max-reduce the norms, encode, sum; worker 0 decodes)
and hashes every worker's indices and worker 0's decoded tensor. The digests were computed by the codec
before its per-call fixed costs were cut (commit 301e56c); any change to the signs, the rounding streams,
the float order of the transform or the scaling shows up here. They depend on float summation order in
the Hadamard matmuls, so a new torch/MKL could change the decoded digests without any code change.

    python -m tests.thc.test_codec_golden   # from the repository root: the digests of the code as it is
"""

import hashlib

import numpy as np
import pytest
import torch

from thc import THCCompressor, THCConfig

# name: (gradient length, config, steps, key, dtype, scale, per-coordinate counts)
CASES = {
    "one coordinate": (1, {}, [0], 0, torch.float32, 1.0, False),
    "padded chunk": (1000, {"chunk": 1024, "seed": 7}, [0, 5], 3, torch.float32, 1.0, False),
    "16k one chunk": (2**14, {}, [1], 0, torch.float32, 1.0, False),
    "full chunks and a padded one": (5000, {"chunk": 1024}, [2], 1, torch.float32, 1.0, False),
    "ddp bucket": (40000, {"chunk": 2048, "seed": 3}, [0, 1], 2, torch.float32, 1.0, False),
    "several blocks": (3 * 2**17, {}, [4], 0, torch.float32, 1.0, False),
    "two chunks of many blocks": (2**19 + 3, {"chunk": 2**18}, [0], 0, torch.float32, 1.0, False),
    "b=2 uniform": (3000, {"bits": 2, "granularity": 6, "table": "uniform"}, [0], 0, torch.float32, 1.0, False),
    "b=8": (3000, {"bits": 8, "granularity": 254}, [0], 0, torch.float32, 1.0, False),
    "error feedback": (5000, {"chunk": 2048, "error_feedback": True}, [0, 1, 2], 0, torch.float32, 1.0, False),
    "tiny": (4096, {"chunk": 1024}, [0], 0, torch.float64, 1e-30, False),
    "huge": (4096, {"chunk": 1024}, [0], 0, torch.float32, 1e30, False),
    "float16": (3000, {"chunk": 1024}, [0], 0, torch.float16, 1.0, False),
    "per-coordinate counts": (3000, {"chunk": 1024}, [0], 0, torch.float32, 1.0, True),
}

GOLDEN = {
    "one coordinate": ["9427787082157753"],
    "padded chunk": ["0a6ddb8c3b2c996a", "4b14da9a96a9fc02"],
    "16k one chunk": ["619fe876ac65b8a5"],
    "full chunks and a padded one": ["16808aad8be4bd60"],
    "ddp bucket": ["500418534a114355", "d4e8e736e4ba4db6"],
    "several blocks": ["a7d9e3858f8505c1"],
    "two chunks of many blocks": ["6e928f1a728aa12b"],
    "b=2 uniform": ["44491b71238f8073"],
    "b=8": ["091cc05e1c21bfc0"],
    "error feedback": ["9daf33e49c5e78de", "d3fa0913f9aea6e9", "11fd6834ce0cf27d"],
    "tiny": ["8e9bc8e2fbc7aad6"],
    "huge": ["76bdcf32239a46db"],
    "float16": ["4f4ad5c847f7c6ce"],
    "per-coordinate counts": ["d9e59035ae354264"],
}


def digests(name: str) -> list[str]:
    """Per step: one digest of all workers' indices and worker 0's decoded average."""
    numel, kw, steps, key, dtype, scale, counted = CASES[name]
    cfg = THCConfig(**kw)
    comps = [THCCompressor(cfg, worker_id=i) for i in range(3)]
    gen = torch.Generator().manual_seed(numel)
    out = []
    for step in steps:
        grads = [(torch.randn(numel, generator=gen, dtype=torch.float64) * scale).to(dtype) for _ in comps]
        preps = [c.prepare(g, step, key=key) for c, g in zip(comps, grads)]
        max_norms = torch.stack([p.norms for p in preps]).amax(0)
        indices = [c.encode(p, max_norms) for c, p in zip(comps, preps)]
        if counted:  # the last 100 coordinates of every chunk lost worker 2's packet
            two, three = comps[0].aggregate(indices[:2]), comps[0].aggregate(indices)
            sums = [np.concatenate([s3[:-100], s2[-100:]]) for s2, s3 in zip(two, three)]
            n = [np.concatenate([np.full(s.size - 100, 3), np.full(100, 2)]) for s in sums]
        else:
            sums, n = comps[0].aggregate(indices), len(comps)
        decoded = comps[0].decode(preps[0], sums, n, max_norms)
        h = hashlib.sha256()
        for worker in indices:
            for idx in worker:
                h.update(idx.tobytes())
        h.update(decoded.contiguous().numpy().tobytes())
        out.append(h.hexdigest()[:16])
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_outputs_are_bit_identical_to_the_pinned_ones(name, threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert digests(name) == GOLDEN[name]
    finally:
        torch.set_num_threads(before)


def test_the_digests_see_a_one_ulp_change(monkeypatch):
    """A digest that missed a single flipped bit of one decoded coordinate would pin nothing."""
    decode = THCCompressor.decode

    def nudged(self, *args, **kwargs):
        x = decode(self, *args, **kwargs)
        x.view(-1).view(torch.int32)[-1] ^= 1
        return x

    monkeypatch.setattr(THCCompressor, "decode", nudged)
    assert digests("padded chunk") != GOLDEN["padded chunk"]


if __name__ == "__main__":
    for case in CASES:
        print(f"    {case!r}: {digests(case)!r},")
