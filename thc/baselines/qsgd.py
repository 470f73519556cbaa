"""QSGD (Alistarh et al. 2017): per-bucket norm, unbiased stochastic rounding of |x|/norm to s levels.

Each worker uses its own norms, so payloads are not summable: the network gathers them. With b bits per
coordinate (sign plus level), s = 2**(b-1) - 1 levels; one float32 norm per bucket rides along.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..errors import ConfigError
from ..interface import Bits, Prepared
from .base import ChunkedCompressor, check_positive_int, gather

__all__ = ["QSGD"]


class QSGD(ChunkedCompressor):
    """QSGD with ``bits`` bits per coordinate (2..8) and one norm per ``bucket`` coordinates."""

    summable = False
    _domain = 0x51534744

    def __init__(self, bits: int = 4, bucket: int = 512, chunk: int = 2**20, seed: int = 0, worker_id: int = 0) -> None:
        super().__init__(chunk, seed, worker_id)
        if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
            raise ConfigError(f"QSGD bits={bits!r} must be 2..8 (one sign bit plus at least one level bit)")
        self.bits = bits
        self.levels = 2 ** (bits - 1) - 1
        self.bucket = check_positive_int("bucket", bucket)
        self.name = f"QSGD b={bits}"

    def encode(self, prepared: Prepared, global_stats: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for c in prepared.chunks:
            x = prepared.data[c.start : c.stop].cpu().numpy().astype(np.float64)
            pad = -x.size % self.bucket
            xb = np.concatenate([x, np.zeros(pad)]).reshape(-1, self.bucket)
            norms = np.linalg.norm(xb, axis=1)
            safe = np.where(norms > 0, norms, 1.0)[:, None]
            scaled = np.abs(xb) / safe * self.levels
            r = self.rng(prepared.step, c).random(scaled.shape)
            level = np.floor(scaled + r)
            q = (np.sign(xb) * level).astype(np.int8).reshape(-1)[: x.size]
            out.append((q, norms.astype(np.float32)))
        return out

    def aggregate(self, payloads: Sequence[list]) -> list[list]:
        return gather(payloads)

    def decode(self, prepared, aggregated, contributors, global_stats) -> torch.Tensor:
        n = self.check_contributors(contributors)
        self.check_chunks(prepared, aggregated)
        parts = []
        for c, workers in zip(prepared.chunks, aggregated):
            acc = np.zeros(c.length, dtype=np.float64)
            for q, norms in workers:
                scale = np.repeat(norms.astype(np.float64) / self.levels, self.bucket)[: c.length]
                acc += q.astype(np.float64) * scale
            parts.append(acc / n)
        return self.finish(prepared, torch.from_numpy(np.concatenate(parts).astype(np.float32)))

    def bits_per_coordinate(self, n: int) -> Bits:
        up = self.bits + 32.0 / self.bucket
        return Bits(up, up * (n - 1))
