"""TopK sparsification with error feedback (Stich et al. 2018): keep the k largest |x| per chunk.

Workers pick different coordinates, so payloads cannot be summed element-wise: the network gathers them
(all-gather) and every worker adds them up. Error feedback carries the dropped mass to the next round.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..errors import ConfigError
from ..feedback import ErrorFeedback
from ..interface import Bits, Prepared
from .base import ChunkedCompressor, gather

__all__ = ["TopK"]


class TopK(ChunkedCompressor):
    """Keep ratio * len coordinates of each chunk (at least one) as (int32 index, float32 value) pairs."""

    summable = False

    def __init__(
        self, ratio: float = 0.01, error_feedback: bool = True, chunk: int = 2**20, seed: int = 0, worker_id: int = 0
    ) -> None:
        super().__init__(chunk, seed, worker_id)
        if not 0 < ratio <= 1:
            raise ConfigError(f"TopK ratio={ratio!r} must lie in (0, 1]")
        self.ratio = float(ratio)
        self.feedback = ErrorFeedback() if error_feedback else None
        self.name = f"TopK {self.ratio:g}" + (" +EF" if error_feedback else "")

    def compensate(self, flat: torch.Tensor) -> torch.Tensor:
        return self.feedback.compensate(flat) if self.feedback is not None else flat

    def encode(self, prepared: Prepared, global_stats: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        kept = torch.zeros_like(prepared.data)
        for c in prepared.chunks:
            part = prepared.data[c.start : c.stop]
            k = max(1, int(round(self.ratio * c.length)))
            idx = torch.topk(part.abs(), k, sorted=False).indices
            vals = part[idx]
            kept[c.start + idx] = vals
            out.append((idx.to(torch.int32).cpu().numpy(), vals.cpu().numpy()))
        if self.feedback is not None:
            self.feedback.update(prepared.data, kept)
        return out

    def aggregate(self, payloads: Sequence[list]) -> list[list]:
        return gather(payloads)

    def decode(self, prepared, aggregated, contributors, global_stats) -> torch.Tensor:
        n = self.check_contributors(contributors)
        self.check_chunks(prepared, aggregated)
        flat = np.zeros(prepared.numel, dtype=np.float32)
        for c, parts in zip(prepared.chunks, aggregated):
            for idx, vals in parts:
                np.add.at(flat, c.start + idx.astype(np.int64), vals)
        return self.finish(prepared, torch.from_numpy(flat / n))

    def bits_per_coordinate(self, n: int) -> Bits:
        up = 64.0 * self.ratio
        return Bits(up, up * (n - 1))
