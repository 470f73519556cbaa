"""Error feedback (EF) memory: what a worker's compression lost is added to its next gradient.

e <- v - (the worker's own decoded contribution), where v = gradient + e. Over T rounds the decoded
contributions then sum to the gradients' sum minus the final memory, so the error no longer accumulates.
"""

from __future__ import annotations

import torch

__all__ = ["ErrorFeedback"]


class ErrorFeedback:
    """Per-worker EF memory for one tensor (flat, float32). A tensor of another size restarts from zero."""

    def __init__(self) -> None:
        self.memory: torch.Tensor | None = None

    def compensate(self, flat: torch.Tensor) -> torch.Tensor:
        """v = flat + e (a new tensor; ``flat`` is not modified)."""
        if self.memory is None or self.memory.numel() != flat.numel() or self.memory.device != flat.device:
            self.memory = torch.zeros_like(flat)
            return flat.clone()
        return flat + self.memory

    def update(self, compensated: torch.Tensor, own_decoded: torch.Tensor) -> None:
        """e = v - own decoded contribution."""
        self.memory = compensated - own_decoded

    def keep(self, memory: torch.Tensor) -> None:
        """e = memory, computed elsewhere (the native codec computes v - own decoded as it encodes)."""
        self.memory = memory

    def reset(self) -> None:
        self.memory = None
