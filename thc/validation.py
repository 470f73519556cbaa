"""Checks on gradients handed to a compressor: every failure names the problem and where it is."""

from __future__ import annotations

import math

import torch

from .errors import GradientError

__all__ = ["SUPPORTED_DTYPES", "check_float32_scale", "flatten_gradient", "raise_if_not_finite"]

_FLOAT32_MAX = torch.finfo(torch.float32).max

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def flatten_gradient(grad: object, name: str = "gradient") -> torch.Tensor:
    """Check type, dtype and size; return the tensor as a flat float32 tensor (a view when possible, the
    tensor itself when it is one already)."""
    if not isinstance(grad, torch.Tensor):
        raise GradientError(f"{name} must be a torch.Tensor, got {type(grad).__name__}")
    if grad.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
        raise GradientError(f"{name} has unsupported dtype {str(grad.dtype).replace('torch.', '')}; supported: {names}")
    if grad.numel() == 0:
        raise GradientError(f"{name} is empty (shape {tuple(grad.shape)}): nothing to compress")
    if grad.dtype is torch.float32 and grad.dim() == 1 and not grad.requires_grad and grad.is_contiguous():
        return grad  # a DDP bucket: as it is (a view of it would be the same data)
    flat = (grad.detach() if grad.requires_grad else grad).reshape(-1)  # detach only what autograd tracks
    if flat.dtype != torch.float32:
        flat = flat.to(torch.float32)
    return flat.contiguous()


def raise_if_not_finite(
    original: torch.Tensor, flat: torch.Tensor, converted: torch.Tensor | None = None, name: str = "gradient"
) -> None:
    """Raise a GradientError naming the problem (called when a chunk norm came out non-finite).

    original: the gradient as given; converted: it as float32 (before error feedback); flat: what was
    measured (converted plus the error-feedback memory).
    """
    bad = ~torch.isfinite(original.detach().reshape(-1))
    if bool(bad.any()):
        idx = int(torch.nonzero(bad)[0])
        value = float(original.detach().reshape(-1)[idx])
        kind = "NaN" if value != value else "Inf"
        count = int(bad.sum())
        raise GradientError(f"{name} contains {kind} at flat index {idx} ({count} non-finite of {bad.numel()} values)")
    if converted is not None:
        bad = ~torch.isfinite(converted)
        if bool(bad.any()):
            idx = int(torch.nonzero(bad)[0])
            value = float(original.detach().reshape(-1)[idx])
            raise GradientError(
                f"{name} value {value:.3e} at flat index {idx} does not fit float32 (largest {_FLOAT32_MAX:.3e}), "
                f"which THC computes in: scale the gradient down (e.g. the loss)"
            )
    bad = ~torch.isfinite(flat)
    if bool(bad.any()):
        idx = int(torch.nonzero(bad)[0])
        raise GradientError(f"{name} has a non-finite value at flat index {idx} after error-feedback compensation")
    norm = float(torch.linalg.vector_norm(flat, dtype=torch.float64))
    raise GradientError(
        f"{name} is too large: its L2 norm {norm:.3e} overflows float32 (largest {_FLOAT32_MAX:.3e}), in which "
        f"the norms are exchanged; scale the gradient down (e.g. the loss) or clip it"
    )


def check_float32_scale(original: torch.Tensor, chunks, norms: torch.Tensor, name: str = "gradient") -> None:
    """Refuse a float64 gradient whose chunk norms float32 cannot carry (it would decode as zeros or noise).

    norms: the float32 conversion's chunk norms; they must be within 1e-3 of the float64 ones.
    """
    flat = original.detach().reshape(-1)
    for chunk, got in zip(chunks, norms.tolist()):
        part = flat[chunk.start : chunk.stop]
        top = float(part.abs().amax())  # divided by its largest |x|, a float64 sum of squares cannot under/overflow
        want = top * float(torch.linalg.vector_norm(part / top)) if 0 < top < math.inf else top
        if abs(got - want) > 1e-3 * want or (want > 0 and not math.isfinite(want)):
            raise GradientError(
                f"{name} (float64) loses its scale in float32, which THC computes in: chunk {chunk.index} has "
                f"L2 norm {want:.3e}, {got:.3e} after conversion (float32 holds about 1e-38 to 3e38 with full "
                f"precision); scale the gradient (e.g. the loss) into that range"
            )
