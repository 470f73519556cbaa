"""A DDP communication hook that runs a per-bucket plan (planner): each bucket through its own mode
(thc, fix32: ddp.aggregator_hooks; gloo, fp16: DDP's own all-reduce hooks, asynchronous).

THC and FIX32 buckets run off the backward pass on one aggregation thread the two share, as in the uniform
modes, so a plan's THC bucket costs what it costs in an all-THC run and the timeline model needs one mode per
name. The state counts calls, coordinates and bytes per mode, so a run (or a test) can check every bucket went
where the plan says; the THC and FIX32 round counters advance at the end of every backward pass, whichever
mode the last bucket took, so the Hadamard signs still change every round."""

# No "from __future__ import annotations": DDP compares the hook's annotations with real types.

from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddp import aggregator_hooks
from thc.config import THCConfig
from thc.errors import ConfigError
from thc.modes import FIX32, GLOO, PLANNABLE_MODES, THC

__all__ = ["MIXED_MODES", "MixedHookState", "mixed_hook", "load_plan"]

MIXED_MODES = PLANNABLE_MODES  # what a bucket may take


class _NotLast:
    """The bucket, except that is_last() is False: the mixed state ends the round itself."""

    def __init__(self, bucket):
        self._bucket = bucket

    def buffer(self):
        return self._bucket.buffer()

    def index(self):
        return self._bucket.index()

    def is_last(self):
        return False


class MixedHookState:
    """plan: bucket index -> mode (buckets it does not name take ``default``). aggregator: the switch
    side (ddp.aggregator_hooks's Aggregator protocol plus all_sum_int32), needed only if the plan uses thc or fix32.
    process_group: for gloo modes (None: the default group)."""

    def __init__(
        self,
        plan: Mapping[int, str],
        aggregator=None,
        config: THCConfig | None = None,
        process_group=None,
        default: str = GLOO,
        worker_id: int | None = None,
        workers: int | None = None,
    ) -> None:
        plan = {int(k): v for k, v in plan.items()}
        for index, mode in [*plan.items(), ("default", default)]:
            if mode not in MIXED_MODES:
                raise ConfigError(f"plan: bucket {index} has mode {mode!r}; choose from {', '.join(MIXED_MODES)}")
        used = set(plan.values()) | {default}
        self.plan, self.default, self.process_group = plan, default, process_group
        self.thc = self.fix32 = None
        if used & {THC, FIX32} and aggregator is None:
            raise ConfigError("the plan sends buckets through the switch (thc/fix32) but no aggregator was given")
        if THC in used:
            self.thc = aggregator_hooks.THCHookState(config or THCConfig(), aggregator, worker_id=worker_id)
        if FIX32 in used:
            self.fix32 = aggregator_hooks.FixedPointHookState(aggregator, workers=workers)
            if self.thc is not None:  # one thread for the one aggregator: THC and FIX32 buckets in hook order
                self.fix32.runner = self.thc.runner
        self.counts = {m: {"calls": 0, "coordinates": 0, "bytes": 0} for m in MIXED_MODES}
        self.bucket_modes: dict[int, str] = {}
        self.iteration = 0

    def mode_for(self, index: int) -> str:
        return self.plan.get(index, self.default)

    def close(self) -> None:
        """End the aggregation thread (after the buckets it holds)."""
        for sub in (self.thc, self.fix32):
            if sub is not None:
                sub.close()

    def end_round(self) -> None:
        self.iteration += 1
        for sub in (self.thc, self.fix32):
            if sub is not None:
                sub.iteration += 1


def mixed_hook(state: MixedHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average one bucket through the mode the plan gives its index; returns the average, as DDP expects."""
    mode = state.mode_for(bucket.index())
    buffer = bucket.buffer()
    count = state.counts[mode]
    count["calls"] += 1
    count["coordinates"] += buffer.numel()
    count["bytes"] += buffer.numel() * buffer.element_size()
    state.bucket_modes[bucket.index()] = mode
    inner = _NotLast(bucket)
    if mode == THC:
        fut = aggregator_hooks.thc_hook(state.thc, inner)
    elif mode == FIX32:
        fut = aggregator_hooks.fix32_hook(state.fix32, inner)
    elif mode == GLOO:
        fut = default_hooks.allreduce_hook(state.process_group, bucket)
    else:
        fut = default_hooks.fp16_compress_hook(state.process_group, bucket)
    if bucket.is_last():
        state.end_round()
    return fut


def load_plan(data) -> dict[int, str]:
    """A plan from its JSON form (thc-plan plan --save): {"buckets": {"0": "thc", ...}} or {"0": "thc", ...}."""
    body = data.get("buckets", data) if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise ConfigError('a plan file is a JSON object {"buckets": {"<bucket index>": "<mode>"}}')
    try:
        plan = {int(k): v for k, v in body.items()}
    except ValueError:
        raise ConfigError(f"plan: bucket keys must be integers, got {sorted(body)[:3]}") from None
    if not plan:
        raise ConfigError("a plan names the mode of at least one bucket")
    for index, mode in plan.items():
        if mode not in MIXED_MODES:
            raise ConfigError(f"plan: bucket {index} has mode {mode!r}; choose from {', '.join(MIXED_MODES)}")
    return plan
