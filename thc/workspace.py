"""Reusable scratch buffers for the hot path.

A fresh large tensor costs more in page faults than the arithmetic done on it, so the hot path reuses its
buffers. On the CPU they come from numpy, whose large allocations are hugepage-backed, and are viewed as
torch tensors without a copy. Not thread-safe: one per compressor.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

__all__ = ["Workspace", "empty_cpu"]


def empty_cpu(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised CPU tensor backed by numpy memory (hugepages for large sizes)."""
    return torch.from_numpy(np.empty(n, dtype=_numpy_dtype(dtype)))


@functools.cache
def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


class Workspace:
    """Named scratch tensors, reallocated only when a larger size, another dtype or device is asked for."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}
        # counts the (re)allocations and clears: while it is unchanged, every buffer handed out still lives where
        # it was, so a caller may keep their addresses (thc.native.codec does)
        self.generation = 0

    def get(
        self, name: str, n: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
    ) -> torch.Tensor:
        if not isinstance(device, torch.device):
            device = torch.device(device)
        key = (name, dtype, device)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < n:
            buf = empty_cpu(n, dtype) if device.type == "cpu" else torch.empty(n, dtype=dtype, device=device)
            self._buffers[key] = buf
            self.generation += 1
        return buf if buf.numel() == n else buf[:n]

    def clear(self) -> None:
        self._buffers.clear()
        self.generation += 1
