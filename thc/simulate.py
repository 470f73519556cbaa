"""In-process simulation of one aggregation round with n workers (for the CLI, benchmark and tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from .errors import ConfigError
from .interface import Compressor
from .metrics import nmse

__all__ = ["simulate_round", "mean_nmse"]


def simulate_round(compressors: Sequence[Compressor], grads: Sequence[torch.Tensor], step: int = 0) -> torch.Tensor:
    """Run prepare -> max round -> encode -> aggregate -> decode; return worker 0's decoded average."""
    if len(compressors) != len(grads) or not grads:
        raise ConfigError(f"need one compressor per gradient, got {len(compressors)} and {len(grads)}")
    preps = [c.prepare(g, step) for c, g in zip(compressors, grads)]
    stats = torch.stack([p.stats for p in preps]).amax(dim=0)
    payloads = [c.encode(p, stats) for c, p in zip(compressors, preps)]
    aggregated = compressors[0].aggregate(payloads)
    return compressors[0].decode(preps[0], aggregated, len(compressors), stats)


def mean_nmse(
    make: Callable[[int], Compressor], rounds: Iterable[Sequence[torch.Tensor]], fresh_each_round: bool = True
) -> float:
    """Average NMSE over rounds; ``make(worker_id)`` builds a compressor. Fresh compressors per round by
    default, so stateful ones (error feedback) are measured on a single round, memories empty."""
    values = []
    compressors = None
    for step, grads in enumerate(rounds):
        if compressors is None or fresh_each_round:
            compressors = [make(i) for i in range(len(grads))]
        values.append(nmse(grads, simulate_round(compressors, grads, step)))
    if not values:
        raise ConfigError("mean_nmse needs at least one round")
    return sum(values) / len(values)
