"""SwitchML-style int32 fixed point with a shared exponent: the classic in-network aggregation format.

Each worker reports max |x| per chunk; with M the maximum over workers and e its binary exponent
(M < 2**e), every worker scales by f = floor((2**31 - 1) / n) / 2**e and rounds to int32. Then |x f| <=
floor((2**31-1)/n), so the sum of n workers can never overflow int32 (SwitchML: INT32_MAX / (n 2**e)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ..aggregate import check_counts
from ..errors import AggregationError
from ..interface import Bits, Prepared
from .base import ChunkedCompressor, check_workers

__all__ = ["FixedPoint32", "fixed_point_scale"]

INT32_MAX = 2**31 - 1
DEFAULT_WORKERS = 32  # the largest job a 32-bit worker bitmap (the switch's) can hold


def fixed_point_scale(max_abs: float, workers: int) -> float:
    """The factor that maps [-max_abs, max_abs] to int32 so that ``workers`` values sum without overflow."""
    if not math.isfinite(max_abs) or max_abs < 0:
        raise AggregationError(f"max |x| must be finite and non-negative, got {max_abs}")
    if max_abs == 0:
        return 1.0
    _, exponent = math.frexp(max_abs)  # max_abs = m 2**exponent, 0.5 <= m < 1, so max_abs < 2**exponent
    return math.ldexp(INT32_MAX // check_workers(workers), -exponent)


class FixedPoint32(ChunkedCompressor):
    """int32 fixed point. Local statistic: max |x| per chunk; encode -> int32 arrays; sums are int32/int64.

    workers: the job's n, which sets the headroom; the default (32, the most a switch job holds) is safe for
    any job but keeps log2(32/n) fewer bits of precision than the exact n.
    """

    name = "int32 fixed point"
    summable = True

    def __init__(self, workers: int = DEFAULT_WORKERS, chunk: int = 2**20, seed: int = 0, worker_id: int = 0) -> None:
        super().__init__(chunk, seed, worker_id)
        self.workers = check_workers(workers)

    def local_stat(self, part: torch.Tensor) -> float:
        return float(part.abs().max())

    def _scales(self, prepared: Prepared, global_stats) -> list[float]:
        stats = torch.as_tensor(global_stats, dtype=torch.float64).reshape(-1)
        if stats.numel() != len(prepared.chunks):
            raise AggregationError(f"got {stats.numel()} max |x| values for {len(prepared.chunks)} chunks")
        return [fixed_point_scale(float(s), self.workers) for s in stats]

    def encode(self, prepared: Prepared, global_stats: torch.Tensor, partial: bool = False) -> list[np.ndarray]:
        """int32 values per chunk. ``partial``: the max round was released without some workers (partial
        aggregation), so the shared max |x| may lie below this worker's own: its values beyond it are
        clipped to the headroom (as THC clips an outlier) instead of refused."""
        out, limit = [], INT32_MAX // self.workers
        for c, f in zip(prepared.chunks, self._scales(prepared, global_stats)):
            x = prepared.data[c.start : c.stop].cpu().numpy().astype(np.float64)
            q = np.rint(x * f)
            if q.size and np.abs(q).max() > limit:
                if not partial:
                    raise AggregationError(
                        "a value exceeds the shared max |x|: the max round must include every worker"
                    )
                np.clip(q, -limit, limit, out=q)
            out.append(q.astype(np.int32))
        return out

    def aggregate(self, payloads: Sequence[list[np.ndarray]]) -> list[np.ndarray]:
        sums = [np.sum([p[c] for p in payloads], axis=0, dtype=np.int64) for c in range(len(payloads[0]))]
        for s in sums:
            if s.size and np.abs(s).max() > INT32_MAX:
                raise AggregationError("int32 sum overflow: more contributors than the job's worker count")
        return [s.astype(np.int32) for s in sums]

    def decode(self, prepared, aggregated, contributors, global_stats) -> torch.Tensor:
        """The average: sums / (scale · contributors). ``contributors``: one count, or per chunk an integer
        array of per-coordinate counts (partial aggregation released some slots with fewer workers)."""
        self.check_chunks(prepared, aggregated)
        if isinstance(contributors, (list, tuple)):
            counts = check_counts(prepared.chunks, contributors, padded=False)
        else:
            counts = [self.check_contributors(contributors)] * len(prepared.chunks)
        scales = self._scales(prepared, global_stats)
        parts = [np.asarray(s, dtype=np.float64) / (f * n) for s, f, n in zip(aggregated, scales, counts)]
        return self.finish(prepared, torch.from_numpy(np.concatenate(parts).astype(np.float32)))

    def bits_per_coordinate(self, n: int) -> Bits:
        return Bits(32.0, 32.0)
