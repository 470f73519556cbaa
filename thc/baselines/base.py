"""Shared plumbing of the baseline compressors: validation, flattening, chunking, random streams."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..chunking import Chunk, plan_chunks
from ..errors import AggregationError, ConfigError
from ..interface import Compressor, Prepared
from ..validation import flatten_gradient, raise_if_not_finite

__all__ = ["ChunkedCompressor", "check_workers", "check_positive_int", "gather"]


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive integer")
    return int(value)


def check_workers(workers: object) -> int:
    return check_positive_int("workers", workers)


def gather(payloads: Sequence[list]) -> list[list]:
    """Aggregation of non-summable payloads: per chunk, the list of every worker's payload (an all-gather)."""
    if not payloads:
        raise AggregationError("no payloads to aggregate")
    return [[p[c] for p in payloads] for c in range(len(payloads[0]))]


class ChunkedCompressor(Compressor):
    """Flattens and chunks (no padding); subclasses define the local statistic, encode and decode."""

    _domain = 0

    def __init__(self, chunk: int = 2**20, seed: int = 0, worker_id: int = 0) -> None:
        self.chunk = check_positive_int("chunk", chunk)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be a non-negative integer")
        if isinstance(worker_id, bool) or not isinstance(worker_id, int) or worker_id < 0:
            raise ConfigError(f"worker_id={worker_id!r} must be a non-negative integer")
        self.seed = seed
        self.worker_id = worker_id

    def local_stat(self, part: torch.Tensor) -> float:
        """The per-chunk statistic the workers max-reduce; 0 when the compressor needs none."""
        return 0.0

    def compensate(self, flat: torch.Tensor) -> torch.Tensor:
        """Hook for error feedback; the identity by default."""
        return flat

    def prepare(self, grad: torch.Tensor, step: int) -> Prepared:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"step={step!r} must be a non-negative integer")
        flat = flatten_gradient(grad)
        v = self.compensate(flat)
        chunks = plan_chunks(v.numel(), self.chunk, pad_to_power_of_two=False)
        if not bool(torch.isfinite(torch.linalg.vector_norm(v))):
            raise_if_not_finite(grad, v)
        stats = torch.tensor([self.local_stat(v[c.start : c.stop]) for c in chunks], dtype=torch.float32)
        return Prepared(grad.shape, grad.dtype, grad.device, v.numel(), step, chunks, stats, v)

    def rng(self, step: int, chunk: Chunk) -> np.random.Generator:
        """This worker's own random stream for one chunk of one round."""
        ss = np.random.SeedSequence(entropy=self.seed, spawn_key=(self._domain, self.worker_id, step, chunk.index))
        return np.random.Generator(np.random.PCG64(ss))

    @staticmethod
    def check_contributors(contributors: object) -> int:
        if isinstance(contributors, bool) or not isinstance(contributors, (int, np.integer)) or contributors < 1:
            raise AggregationError(f"contributors={contributors!r} must be a positive integer")
        return int(contributors)

    @staticmethod
    def check_chunks(prepared: Prepared, aggregated: Sequence) -> None:
        if len(aggregated) != len(prepared.chunks):
            raise AggregationError(f"got {len(aggregated)} aggregated chunks, the tensor has {len(prepared.chunks)}")

    @staticmethod
    def finish(prepared: Prepared, flat: torch.Tensor) -> torch.Tensor:
        return flat.view(prepared.shape).to(device=prepared.device, dtype=prepared.dtype)
