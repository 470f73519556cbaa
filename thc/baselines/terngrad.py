"""TernGrad (Wen et al. 2017) with a shared scale, which makes it summable (as in the THC authors' code).

Each chunk is clipped at clip_sigma standard deviations (TernGrad's gradient clipping); the workers
max-reduce max |x| to a shared scale s; each coordinate becomes sign(x) * Bernoulli(|x|/s), sent as
t + 1 in {0, 1, 2}. The network sums those integers; decode is (S - n) s / n. Unbiased for the clipped x.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ..errors import AggregationError, ConfigError
from ..interface import Bits, Prepared
from .base import ChunkedCompressor

__all__ = ["TernGrad"]


class TernGrad(ChunkedCompressor):
    """Ternary {-1, 0, 1} stochastic quantisation with a shared per-chunk scale (2 bits per coordinate up)."""

    summable = True
    _domain = 0x5445524E

    def __init__(self, clip_sigma: float | None = 2.5, chunk: int = 2**20, seed: int = 0, worker_id: int = 0) -> None:
        super().__init__(chunk, seed, worker_id)
        if clip_sigma is not None and not clip_sigma > 0:
            raise ConfigError(f"clip_sigma={clip_sigma!r} must be positive (or None for no clipping)")
        self.clip_sigma = clip_sigma
        self.name = "TernGrad"

    def _clipped(self, part: torch.Tensor) -> torch.Tensor:
        if self.clip_sigma is None or part.numel() < 2:
            return part
        bound = self.clip_sigma * float(part.std())
        return part.clamp(-bound, bound)

    def local_stat(self, part: torch.Tensor) -> float:
        return float(self._clipped(part).abs().max())

    def encode(self, prepared: Prepared, global_stats: torch.Tensor) -> list[np.ndarray]:
        stats = torch.as_tensor(global_stats, dtype=torch.float64).reshape(-1)
        if stats.numel() != len(prepared.chunks):
            raise AggregationError(f"got {stats.numel()} scales for {len(prepared.chunks)} chunks")
        out = []
        for c, s in zip(prepared.chunks, stats.tolist()):
            x = self._clipped(prepared.data[c.start : c.stop]).cpu().numpy().astype(np.float64)
            if s <= 0:
                out.append(np.ones(c.length, dtype=np.uint8))
                continue
            if np.abs(x).max() > s * (1 + 1e-6):
                raise AggregationError("a value exceeds the shared scale: the max round must include every worker")
            keep = self.rng(prepared.step, c).random(c.length) < np.abs(x) / s
            out.append((np.sign(x) * keep + 1).astype(np.uint8))
        return out

    def aggregate(self, payloads: Sequence[list[np.ndarray]]) -> list[np.ndarray]:
        return [np.sum([p[c] for p in payloads], axis=0, dtype=np.int64) for c in range(len(payloads[0]))]

    def decode(self, prepared, aggregated, contributors, global_stats) -> torch.Tensor:
        n = self.check_contributors(contributors)
        self.check_chunks(prepared, aggregated)
        stats = torch.as_tensor(global_stats, dtype=torch.float64).reshape(-1).tolist()
        parts = [(np.asarray(S, dtype=np.float64) - n) * s / n for S, s in zip(aggregated, stats)]
        return self.finish(prepared, torch.from_numpy(np.concatenate(parts).astype(np.float32)))

    def bits_per_coordinate(self, n: int) -> Bits:
        return Bits(2.0, float(math.ceil(math.log2(2 * n + 1))))
