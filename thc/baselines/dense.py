"""Uncompressed baselines: fp32 all-reduce and the fp16 cast (as torch's fp16_compress_hook)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..interface import Bits, Prepared
from .base import ChunkedCompressor, check_workers

__all__ = ["NoCompression", "FP16"]


class NoCompression(ChunkedCompressor):
    """fp32 values, summed as floats: the reference every compressor is compared with."""

    name = "fp32"
    summable = True

    def encode(self, prepared: Prepared, global_stats: torch.Tensor) -> list[np.ndarray]:
        return [prepared.data[c.start : c.stop].cpu().numpy().copy() for c in prepared.chunks]

    def aggregate(self, payloads: Sequence[list[np.ndarray]]) -> list[np.ndarray]:
        return [np.sum([p[c] for p in payloads], axis=0, dtype=np.float32) for c in range(len(payloads[0]))]

    def decode(self, prepared, aggregated, contributors, global_stats) -> torch.Tensor:
        n = self.check_contributors(contributors)
        self.check_chunks(prepared, aggregated)
        flat = torch.from_numpy(np.concatenate(aggregated).astype(np.float32)) / n
        return self.finish(prepared, flat)

    def bits_per_coordinate(self, n: int) -> Bits:
        return Bits(32.0, 32.0)


class FP16(ChunkedCompressor):
    """Divide by the worker count, cast to float16, sum in float16 (what an fp16 all-reduce does)."""

    name = "fp16"
    summable = True

    def __init__(self, workers: int, chunk: int = 2**20, seed: int = 0, worker_id: int = 0) -> None:
        super().__init__(chunk, seed, worker_id)
        self.workers = check_workers(workers)

    def encode(self, prepared: Prepared, global_stats: torch.Tensor) -> list[np.ndarray]:
        return [(prepared.data[c.start : c.stop] / self.workers).half().cpu().numpy() for c in prepared.chunks]

    def aggregate(self, payloads: Sequence[list[np.ndarray]]) -> list[np.ndarray]:
        out = []
        for c in range(len(payloads[0])):
            acc = payloads[0][c].astype(np.float16)
            for p in payloads[1:]:
                acc = acc + p[c]
            out.append(acc)
        return out

    def decode(self, prepared, aggregated, contributors, global_stats) -> torch.Tensor:
        n = self.check_contributors(contributors)
        self.check_chunks(prepared, aggregated)
        flat = torch.from_numpy(np.concatenate(aggregated).astype(np.float32)) * (self.workers / n)
        return self.finish(prepared, flat)

    def bits_per_coordinate(self, n: int) -> Bits:
        return Bits(16.0, 16.0)
