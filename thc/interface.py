"""The three-phase interface shared by THC and every baseline compressor.

1. ``prepare(grad, step)`` -> Prepared: validates, flattens and chunks; ``prepared.stats`` holds one local
   statistic per chunk (THC: the L2 norm; fixed point: max |x|) that the workers max-reduce.
2. ``encode(prepared, global_stats)`` -> one payload per chunk, what the worker sends.
3. The network combines all workers' payloads: ``aggregate(payloads)`` is the reference of what it
   computes (element-wise integer or float sums when ``summable``, a gather otherwise).
4. ``decode(prepared, aggregated, contributors, global_stats)`` -> the AVERAGE over the contributors,
   shaped like the gradient.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from .chunking import Chunk

__all__ = ["Bits", "Prepared", "Compressor"]


class Bits(NamedTuple):
    """Bits per coordinate on the wire: upstream (worker -> aggregator) and downstream (back to each worker)."""

    up: float
    down: float


@dataclass
class Prepared:
    """A gradient ready to be encoded: its shape and dtype, its chunks, and the local statistics."""

    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    numel: int
    step: int
    chunks: list[Chunk]
    stats: torch.Tensor
    data: torch.Tensor  # flat float32, after error-feedback compensation
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def chunk_sizes(self) -> list[int]:
        """Length of each chunk's buffer on the wire (THC: padded to a power of two)."""
        return [c.padded for c in self.chunks]


class Compressor(abc.ABC):
    """Base of every compressor. ``summable``: payloads can be added element-wise by the network."""

    name: str = "compressor"
    summable: bool = False

    @abc.abstractmethod
    def prepare(self, grad: torch.Tensor, step: int) -> Prepared: ...

    @abc.abstractmethod
    def encode(self, prepared: Prepared, global_stats: torch.Tensor) -> list[Any]: ...

    @abc.abstractmethod
    def aggregate(self, payloads: Sequence[list[Any]]) -> list[Any]: ...

    @abc.abstractmethod
    def decode(
        self, prepared: Prepared, aggregated: list[Any], contributors: int, global_stats: torch.Tensor
    ) -> torch.Tensor: ...

    @abc.abstractmethod
    def bits_per_coordinate(self, n: int) -> Bits: ...
