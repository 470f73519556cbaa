"""Quantizing coordinates as they are, without THC's randomized Hadamard transform.

Two codecs take this path: THC with its transform off (what the transform buys is measured against it) and
TernGrad summed by the switch. Both put a chunk on the table's grid with one number per chunk, its step:

    u = x / step + g/2  (clipped to [0, g])              x_hat = (S/n - g/2) step

THC's step is inc M/sqrt(d), so the table's ends stand for +-T M/sqrt(d) as after the transform, but nothing
spreads a large coordinate over the chunk first. TernGrad's step is 2s/g with its table (0, 1, 1, 2): s is
the largest |x| of any worker after clipping at T standard deviations, so rounding onto {-s, 0, s} is
TernGrad's. Steps are float64, so no power-of-two rescaling is needed (thc.compressor needs it in float32)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .chunking import Chunk, ChunkGroup
from .errors import AggregationError

__all__ = ["ternary_scales", "grid_positions", "levels_average"]


def ternary_scales(v: torch.Tensor, chunks: Sequence[Chunk], threshold: float) -> tuple[torch.Tensor, np.ndarray]:
    """Per chunk, TernGrad's clip bound T std(x) and the statistic the workers max-reduce, max |clip(x)|.

    std has Bessel's correction, as thc.baselines.TernGrad's; a chunk of one coordinate is not clipped.
    """
    bounds = np.full(len(chunks), np.inf)
    tops = np.empty(len(chunks))
    for c in chunks:
        part = v[c.start : c.stop]
        tops[c.index] = float(part.abs().amax())
        if c.length >= 2:
            bounds[c.index] = threshold * float(part.std())
    return torch.from_numpy(np.minimum(tops, bounds).astype(np.float32)), bounds


def grid_positions(
    v: np.ndarray, group: ChunkGroup, steps: np.ndarray, g: int, bounds: np.ndarray | None = None
) -> np.ndarray:
    """u = clip(x, -bound, bound) / step + g/2 in [0, g] for a group's chunks, each zero-padded to its
    power of two (float32, count * padded). A zero step (an all-zero chunk on every worker) puts every
    coordinate at g/2, the table's zero."""
    d = group.padded
    u = np.full(group.size, g / 2.0, dtype=np.float32)
    for i, c in enumerate(group.chunks):
        step = steps[c.index]
        if step > 0:
            x = v[c.start : c.stop].astype(np.float64)
            if bounds is not None:
                np.clip(x, -bounds[c.index], bounds[c.index], out=x)
            u[i * d : i * d + c.length] = np.clip(x / step + g / 2.0, 0.0, g)
    return u


def levels_average(
    sums: Sequence[np.ndarray],
    n: int | Sequence[np.ndarray],
    steps: np.ndarray,
    g: int,
    chunks: Sequence[Chunk],
    out: np.ndarray,
) -> np.ndarray:
    """out = (S/n - g/2) step per chunk, padding dropped (float32 of a float64 product). n: one count, or
    per chunk the count of every coordinate. Sums outside [0, n g] are refused: a wrong count or lanes
    that wrapped."""
    for c in chunks:
        s = sums[c.index]
        k = n if isinstance(n, int) else n[c.index]
        if int(s.min()) < 0 or (s > np.asarray(k, np.int64) * g).any():
            raise AggregationError(
                f"sums of chunk {c.index} leave [0, n*g] (seen {int(s.min())} to {int(s.max())}) at g={g}: "
                "wrong contributor count or overflowed lanes"
            )
        mean = s[: c.length] / (k if isinstance(k, int) else k[: c.length])
        out[c.start : c.stop] = (mean - g / 2.0) * steps[c.index]
    return out
