"""Checks on gradients handed to a compressor: every failure names the problem and where it is."""

from __future__ import annotations

import torch

from .errors import GradientError

__all__ = ["SUPPORTED_DTYPES", "flatten_gradient", "raise_if_not_finite"]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def flatten_gradient(grad: object, name: str = "gradient") -> torch.Tensor:
    """Check type, dtype and size; return the tensor as a flat float32 tensor (a view when possible)."""
    if not isinstance(grad, torch.Tensor):
        raise GradientError(f"{name} must be a torch.Tensor, got {type(grad).__name__}")
    if grad.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
        raise GradientError(f"{name} has unsupported dtype {str(grad.dtype).replace('torch.', '')}; supported: {names}")
    if grad.numel() == 0:
        raise GradientError(f"{name} is empty (shape {tuple(grad.shape)}): nothing to compress")
    flat = grad.detach().reshape(-1)
    if flat.dtype != torch.float32:
        flat = flat.to(torch.float32)
    return flat.contiguous()


def raise_if_not_finite(original: torch.Tensor, flat: torch.Tensor, name: str = "gradient") -> None:
    """Raise a GradientError naming the first NaN or Inf coordinate (called when a norm came out non-finite)."""
    bad = ~torch.isfinite(original.detach().reshape(-1))
    if bool(bad.any()):
        idx = int(torch.nonzero(bad)[0])
        value = float(original.detach().reshape(-1)[idx])
        kind = "NaN" if value != value else "Inf"
        count = int(bad.sum())
        raise GradientError(f"{name} contains {kind} at flat index {idx} ({count} non-finite of {bad.numel()} values)")
    bad = ~torch.isfinite(flat)
    if bool(bad.any()):
        idx = int(torch.nonzero(bad)[0])
        raise GradientError(f"{name} has a non-finite value at flat index {idx} after error-feedback compensation")
    raise GradientError(f"{name} is too large: its L2 norm overflows float32 (max |x| = {float(flat.abs().max()):.3e})")
