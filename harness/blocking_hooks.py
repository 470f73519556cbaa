"""THC and FIX32 DDP hooks that run their round in the caller: the reference the overlapping hooks of
ddp.aggregator_hooks are checked against (same rounds in the same order, so bit-identical results). No product mode
uses them; they live here because only the tests and benchmarks do."""

# No "from __future__ import annotations": DDP compares the hook's annotations with real types.

import torch
import torch.distributed as dist

from ddp import aggregator_hooks


def thc_blocking_hook(
    state: aggregator_hooks.THCHookState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """:func:`ddp.aggregator_hooks.thc_hook` in the caller: returns a completed future (the backward pass waits)."""
    buffer, index = bucket.buffer(), bucket.index()
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(aggregator_hooks.thc_reduce(state, buffer, index, aggregator_hooks.round_of(state, bucket)))
    return fut


def fix32_blocking_hook(
    state: aggregator_hooks.FixedPointHookState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """:func:`ddp.aggregator_hooks.fix32_hook` in the caller: returns a completed future."""
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(aggregator_hooks.fix32_reduce(state, bucket.buffer(), aggregator_hooks.round_of(state, bucket)))
    return fut
