"""The sum over workers of one float tensor, through an aggregator, with THC or FIX32.

DDP's hooks (``ddp.aggregator_hooks``) average gradient buckets; a collective library is asked for sums of any float
tensor (``dist.all_reduce``), one call at a time, and the switch backend (``host_agent.dist_backend``)
answers them with these two. Each call is a round of its own: ``step`` must be the same on every worker
(the backend counts its calls, which every rank makes in the same order) and keys THC's shared signs.

THC's sum is n times the average it decodes: unbiased, but lossy (4-bit stochastic quantization after
a randomized Hadamard transform; its error is the codec's, ``python -m thc nmse``). FIX32's is the exact
sum of fixed-point values: each worker rounds x once to a multiple of 1/f, with f = floor((2^31 - 1)/n)
/ 2^e and 2^e above every worker's max |x| of the chunk, and the switch adds the int32s without error,
so every worker gets the same bits, within n/(2f) of the float sum.
"""

from __future__ import annotations

import numpy as np
import torch

from thc.baselines.fixed_point import FixedPoint32
from thc.compressor import THCCompressor
from thc.config import THCConfig
from thc.errors import AggregationError, ConfigError

__all__ = ["THCSum", "Fix32Sum"]


def _one_count(contributors) -> int:
    """The number of workers every coordinate's sum holds (partial aggregation would give per-chunk counts,
    which a sum cannot be scaled by)."""
    if isinstance(contributors, bool) or not isinstance(contributors, (int, np.integer)) or contributors < 1:
        raise AggregationError(f"a sum needs one positive contributor count, got {contributors!r}")
    return int(contributors)


class THCSum:
    """THC's estimate of the sum: norm round, encode, table-value sums, decode, times the count.

    aggregator: ``all_max`` and ``all_sum_table_values`` (ddp.aggregator_hooks's Aggregator). Error feedback is refused:
    it carries one tensor's error into that tensor's next round, and a call here has no identity across
    calls (the DDP hook keeps one memory per bucket).
    """

    def __init__(self, config: THCConfig, aggregator, worker_id: int) -> None:
        if config.error_feedback:
            raise ConfigError(
                "error feedback needs a tensor's identity across rounds, which an all-reduce call does not "
                "have: describe the job without it, or use the DDP hook (ddp.aggregator_hooks.thc_hook)"
            )
        self.compressor = THCCompressor(config, worker_id)
        self.aggregator = aggregator

    def __call__(self, flat: torch.Tensor, step: int, average: bool = False) -> None:
        """``flat`` (float32, contiguous, one dimension) becomes the sum, or with ``average`` the mean."""
        comp = self.compressor
        prep = comp.prepare(flat, step)
        max_norms = self.aggregator.all_max(prep.norms)
        indices = comp.encode(prep, max_norms)
        sums, contributors = self.aggregator.all_sum_table_values(indices, comp.table)
        n = _one_count(contributors)
        comp.decode(prep, sums, n, max_norms, out=flat)
        if not average:
            flat.mul_(n)


class Fix32Sum:
    """SwitchML-style int32 fixed point: max |x| round, int32 sums, the sum decoded with one contributor.

    aggregator: ``all_max`` and ``all_sum_int32``; workers: the job's n, which sets the headroom.
    """

    def __init__(self, aggregator, workers: int) -> None:
        self.codec = FixedPoint32(workers)
        self.aggregator = aggregator

    def __call__(self, flat: torch.Tensor, step: int, average: bool = False) -> None:
        """``flat`` becomes the sum, or with ``average`` the mean."""
        prep = self.codec.prepare(flat, step)
        stats = self.aggregator.all_max(prep.stats)
        sums, contributors = self.aggregator.all_sum_int32(self.codec.encode(prep, stats))
        n = _one_count(contributors)
        flat.copy_(self.codec.decode(prep, sums, n if average else 1, stats))
