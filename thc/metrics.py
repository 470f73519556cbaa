"""Error metrics of distributed mean estimation (as in the DRIVE/EDEN/THC papers).

vNMSE = ||x - x_hat||^2 / ||x||^2 for one vector; NMSE = ||mean(x_i) - estimate||^2 / mean(||x_i||^2) for n
workers. Both functions return one trial's value; their expectations are estimated by averaging trials.
For unbiased compressors with independent randomness, NMSE = vNMSE / n.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .errors import GradientError

__all__ = ["vnmse", "nmse"]


def vnmse(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    x = x.detach().double().reshape(-1)
    x_hat = x_hat.detach().double().reshape(-1)
    if x.shape != x_hat.shape:
        raise GradientError(f"vnmse: shapes differ, {tuple(x.shape)} vs {tuple(x_hat.shape)}")
    denom = float(x.square().sum())
    if denom == 0:
        raise GradientError("vnmse is undefined for a zero vector")
    return float((x - x_hat).square().sum()) / denom


def nmse(xs: Sequence[torch.Tensor], estimate: torch.Tensor) -> float:
    if len(xs) == 0:
        raise GradientError("nmse needs at least one worker's vector")
    stack = torch.stack([x.detach().double().reshape(-1) for x in xs])
    est = estimate.detach().double().reshape(-1)
    if est.shape[0] != stack.shape[1]:
        raise GradientError(f"nmse: estimate has {est.shape[0]} coordinates, vectors have {stack.shape[1]}")
    denom = float(stack.square().sum(dim=1).mean())
    if denom == 0:
        raise GradientError("nmse is undefined when every vector is zero")
    return float((stack.mean(dim=0) - est).square().sum()) / denom
